//! `sluice-ioctl`: the user-space side of sluice's driver patches.
//!
//! - [`amd`]: the patched amdkfd's capability query and wave-kill ioctls
//!   (`kmod-patches/amdgpu/`), through [`amd::AmdKfd`];
//! - [`nv`]: the patched NVIDIA open kernel modules' trap escape
//!   (`kmod-patches/nvidia-open/`), through [`nv::NvCtl`].
//!
//! Each driver has a `nr.rs` with the request numbers, line for line with the
//! patch's uapi header, and argument structs with compile-time layout
//! asserts. Handles own their fd and are only built by opening the device
//! and checking the patched driver's version ioctl. Errors are [`Errno`].

pub mod amd;
mod errno;
pub mod nv;
#[cfg(test)]
mod testutil;

pub use errno::Errno;

/// `ioctl(fd, request, arg)`, `Err(errno)` when it returns -1.
///
/// # Safety
///
/// `arg` must be valid for the reads and writes that `request` makes the
/// driver behind `fd` do (or point to no mapped memory, for `EFAULT`).
unsafe fn raw_ioctl(
    fd: std::os::fd::RawFd,
    request: u32,
    arg: *mut std::ffi::c_void,
) -> Result<(), Errno> {
    // SAFETY: the caller guarantees `arg` suits `request`; an invalid `fd`
    // only makes the kernel answer EBADF.
    let r = unsafe { libc::ioctl(fd, request as _, arg) };
    if r < 0 { Err(Errno::last()) } else { Ok(()) }
}
