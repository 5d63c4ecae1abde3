//! A small `Copy` errno newtype.

use std::fmt;

/// An `errno` value returned by a failed system call.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current `errno`.
    pub fn last() -> Self {
        Self(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The raw value.
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// The symbolic name (`"EINVAL"`), or `"E?"` for a value not listed.
    pub const fn name(self) -> &'static str {
        match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::ESRCH => "ESRCH",
            libc::EINTR => "EINTR",
            libc::EIO => "EIO",
            libc::ENXIO => "ENXIO",
            libc::EBADF => "EBADF",
            libc::EAGAIN => "EAGAIN",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EFAULT => "EFAULT",
            libc::EBUSY => "EBUSY",
            libc::ENODEV => "ENODEV",
            libc::EINVAL => "EINVAL",
            libc::ENOTTY => "ENOTTY",
            libc::ENOSYS => "ENOSYS",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::ETIMEDOUT => "ETIMEDOUT",
            _ => "E?",
        }
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.name(),
            std::io::Error::from_raw_os_error(self.0)
        )
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_display() {
        assert_eq!(Errno(libc::EINVAL).name(), "EINVAL");
        assert_eq!(format!("{:?}", Errno(libc::ENODEV)), "ENODEV(19)");
        assert!(Errno(libc::EPERM).to_string().starts_with("EPERM ("));
        assert_eq!(Errno(9999).name(), "E?");
    }
}
