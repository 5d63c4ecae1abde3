//! The patched amdkfd (`kmod-patches/amdgpu/`): a capability query and a
//! per-process wave kill, through [`AmdKfd`].
//!
//! The patch adds two ioctls to `/dev/kfd` in a private number block
//! (`'K'`, 0xA0..0xAF; see `kmod-patches/amdgpu/uapi/kfd_sluice.h`):
//! [`nr::AMDKFD_IOC_SLUICE_GET_VERSION`] answers a magic number, version and
//! capability bits, and [`nr::AMDKFD_IOC_SLUICE_WAVE_KILL`] sends the shader
//! sequencer's KILL command to every wave of one process's VMID, without a
//! GPU reset and without touching other processes (REEF §4.5). A stock
//! driver answers the version query with `ENOTTY`, which [`AmdKfd::open`]
//! turns into [`OpenError::Unpatched`].

pub mod nr;
pub mod uapi;

use std::fs::OpenOptions;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::Errno;
use nr::{
    AMDKFD_IOC_SLUICE_GET_VERSION, AMDKFD_IOC_SLUICE_WAVE_KILL, KFD_SLUICE_CAP_WAVE_KILL,
    KFD_SLUICE_MAGIC, KFD_SLUICE_VERSION, KFD_SLUICE_WAVE_KILL_FLAGS,
};
use uapi::{KfdIoctlSluiceVersionArgs, KfdIoctlSluiceWaveKillArgs};

/// Where amdgpu creates the KFD character device.
pub const KFD_PATH: &str = "/dev/kfd";

/// What the patched driver answered to the version query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SluiceVersion {
    /// The patch's interface version (`KFD_SLUICE_VERSION`).
    pub version: u32,
    /// `KFD_SLUICE_CAP_*` bits.
    pub caps: u64,
}

impl SluiceVersion {
    /// Whether [`AmdKfd::wave_kill`] is implemented.
    pub const fn has_wave_kill(self) -> bool {
        self.caps & KFD_SLUICE_CAP_WAVE_KILL != 0
    }
}

/// Why [`AmdKfd::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The device could not be opened.
    #[error(
        "cannot open {}: is amdgpu loaded (`modprobe amdgpu`) and may this user open it (root or the render group)?",
        path.display()
    )]
    Open {
        /// The device path.
        path: PathBuf,
        /// What `open(2)` answered.
        #[source]
        source: std::io::Error,
    },
    /// The driver does not know the version query: a stock amdkfd.
    #[error(
        "{} is a stock amdkfd without sluice's patches (the version ioctl answered {errno}); install them with scripts/kmod/install.sh",
        path.display()
    )]
    Unpatched {
        /// The device path.
        path: PathBuf,
        /// `ENOTTY` or `EINVAL`.
        errno: Errno,
    },
    /// Something answered the version query, but not with sluice's magic.
    #[error(
        "{} answered the version ioctl with magic {magic:#010x}, not sluice's {KFD_SLUICE_MAGIC:#010x}: another patch uses the same ioctl number; install sluice's with scripts/kmod/install.sh",
        path.display()
    )]
    BadMagic {
        /// The device path.
        path: PathBuf,
        /// What the driver answered.
        magic: u32,
    },
    /// The patch is older than this crate.
    #[error(
        "{} carries sluice kfd interface version {found}, this build needs {KFD_SLUICE_VERSION} or later: reinstall the patches with scripts/kmod/install.sh",
        path.display()
    )]
    TooOld {
        /// The device path.
        path: PathBuf,
        /// The driver's version.
        found: u32,
    },
    /// The version query failed for another reason.
    #[error("the sluice version ioctl on {} failed", path.display())]
    Query {
        /// The device path.
        path: PathBuf,
        /// What the ioctl answered.
        #[source]
        source: Errno,
    },
}

/// Why [`AmdKfd::wave_kill`] failed; one variant per errno the patch
/// documents, each naming the argument that was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaveKillError {
    /// `EPERM`: the caller lacks `CAP_SYS_ADMIN`.
    #[error(
        "wave kill needs CAP_SYS_ADMIN (EPERM): run the daemon as root or grant it CAP_SYS_ADMIN"
    )]
    NotPermitted,
    /// `EINVAL`: an unknown flag or a nonzero reserved word.
    #[error(
        "wave kill rejected flags {flags:#x} or a nonzero reserved word (EINVAL): the driver accepts flags within {KFD_SLUICE_WAVE_KILL_FLAGS:#x} and reserved words of zero"
    )]
    InvalidArgument {
        /// The flags that were passed.
        flags: u32,
    },
    /// `ESRCH`: no such process, or it has no KFD context.
    #[error("wave kill: no process {pid}, or it has not opened /dev/kfd (ESRCH)")]
    NoSuchProcess {
        /// The target pid that was passed.
        pid: u32,
    },
    /// `ENODEV`: the process has no GPU with that id.
    #[error(
        "wave kill: process {pid} has no GPU with gpu_id {gpu_id} (ENODEV); gpu ids are in /sys/class/kfd/kfd/topology/nodes/*/gpu_id"
    )]
    NoSuchGpu {
        /// The gpu_id that was passed.
        gpu_id: u32,
        /// The target pid that was passed.
        pid: u32,
    },
    /// `EOPNOTSUPP`: this GPU generation cannot look a process's VMID up.
    #[error(
        "wave kill is not supported on GPU {gpu_id} (EOPNOTSUPP: no VMID lookup, e.g. MES-scheduled gfx11/gfx12); use the wait-based fallback"
    )]
    Unsupported {
        /// The gpu_id that was passed.
        gpu_id: u32,
    },
    /// `EBUSY`: the GPU is resetting, its scheduler hung, or its run list is
    /// over-subscribed.
    #[error(
        "wave kill refused on GPU {gpu_id} (EBUSY): it is resetting, its scheduler hung, or more processes than VMIDs are queued; wait instead"
    )]
    Busy {
        /// The gpu_id that was passed.
        gpu_id: u32,
    },
    /// Any other errno (`EFAULT`, `EBADF`, `ENOTTY`, ...).
    #[error("wave kill ioctl failed: {0}")]
    Other(Errno),
}

impl WaveKillError {
    fn from_errno(e: Errno, args: &KfdIoctlSluiceWaveKillArgs) -> Self {
        match e.raw() {
            libc::EPERM => Self::NotPermitted,
            libc::EINVAL => Self::InvalidArgument { flags: args.flags },
            libc::ESRCH => Self::NoSuchProcess { pid: args.pid },
            libc::ENODEV => Self::NoSuchGpu {
                gpu_id: args.gpu_id,
                pid: args.pid,
            },
            libc::EOPNOTSUPP => Self::Unsupported {
                gpu_id: args.gpu_id,
            },
            libc::EBUSY => Self::Busy {
                gpu_id: args.gpu_id,
            },
            _ => Self::Other(e),
        }
    }

    /// The errno the driver answered.
    pub const fn errno(self) -> Errno {
        Errno(match self {
            Self::NotPermitted => libc::EPERM,
            Self::InvalidArgument { .. } => libc::EINVAL,
            Self::NoSuchProcess { .. } => libc::ESRCH,
            Self::NoSuchGpu { .. } => libc::ENODEV,
            Self::Unsupported { .. } => libc::EOPNOTSUPP,
            Self::Busy { .. } => libc::EBUSY,
            Self::Other(e) => e.0,
        })
    }
}

/// What a successful wave kill did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaveKill {
    /// The VMID whose waves were killed (or would have been, with
    /// `KFD_SLUICE_WAVE_KILL_DRY_RUN`); `None` when the process had no VMID
    /// mapped on that GPU, so no wave of it was running and nothing was sent.
    pub vmid: Option<u32>,
}

/// An open `/dev/kfd` whose driver carries sluice's patch.
///
/// Only built by [`AmdKfd::open`], which checks the version query, so every
/// method talks to a patched driver. amdkfd binds the fd to the process that
/// opened it: a forked child gets `EBADF` and must open its own.
#[derive(Debug)]
pub struct AmdKfd {
    fd: OwnedFd,
    version: SluiceVersion,
}

impl AmdKfd {
    /// Opens [`KFD_PATH`] and checks that the driver is patched.
    pub fn open() -> Result<Self, OpenError> {
        Self::open_path(Path::new(KFD_PATH))
    }

    /// Opens the KFD device at `path` and checks that the driver is patched.
    pub fn open_path(path: &Path) -> Result<Self, OpenError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| OpenError::Open {
                path: path.to_owned(),
                source,
            })?;
        Self::check(OwnedFd::from(file), path)
    }

    /// Runs the version query on `fd` and keeps it if a patched driver
    /// answered.
    fn check(fd: OwnedFd, path: &Path) -> Result<Self, OpenError> {
        let path = path.to_owned();
        let args = match get_version(fd.as_raw_fd()) {
            Ok(args) => args,
            Err(errno) if errno.raw() == libc::ENOTTY || errno.raw() == libc::EINVAL => {
                return Err(OpenError::Unpatched { path, errno });
            }
            Err(source) => return Err(OpenError::Query { path, source }),
        };
        if args.magic != KFD_SLUICE_MAGIC {
            return Err(OpenError::BadMagic {
                path,
                magic: args.magic,
            });
        }
        // Later versions keep version 1's ioctls; additions come with caps bits.
        if args.version < KFD_SLUICE_VERSION {
            return Err(OpenError::TooOld {
                path,
                found: args.version,
            });
        }
        Ok(Self {
            fd,
            version: SluiceVersion {
                version: args.version,
                caps: args.caps,
            },
        })
    }

    /// A handle over any fd without the version check, so tests without the
    /// patched driver can reach the error paths (e.g. `/dev/null` answers
    /// `ENOTTY`).
    #[cfg(test)]
    pub(crate) fn from_fd_unchecked(fd: OwnedFd) -> Self {
        Self {
            fd,
            version: SluiceVersion {
                version: KFD_SLUICE_VERSION,
                caps: KFD_SLUICE_CAP_WAVE_KILL,
            },
        }
    }

    /// What the driver answered when it was opened.
    pub const fn opened_version(&self) -> SluiceVersion {
        self.version
    }

    /// Asks the driver again for its version and capabilities.
    pub fn version(&self) -> Result<SluiceVersion, Errno> {
        let args = get_version(self.fd.as_raw_fd())?;
        Ok(SluiceVersion {
            version: args.version,
            caps: args.caps,
        })
    }

    /// Kills every running wave of process `pid` on GPU `gpu_id` (REEF's
    /// kernel kill); `flags` are `KFD_SLUICE_WAVE_KILL_*` bits. The daemon
    /// passes its own pid: it owns the queues it preempts.
    pub fn wave_kill(&self, gpu_id: u32, pid: u32, flags: u32) -> Result<WaveKill, WaveKillError> {
        let mut args = KfdIoctlSluiceWaveKillArgs {
            gpu_id,
            pid,
            flags,
            ..Default::default()
        };
        self.wave_kill_args(&mut args)?;
        Ok(WaveKill {
            vmid: (args.vmid != 0).then_some(args.vmid),
        })
    }

    /// Sends `args` as they are, reserved words included, and leaves the
    /// driver's answer (`vmid`) in them.
    pub fn wave_kill_args(
        &self,
        args: &mut KfdIoctlSluiceWaveKillArgs,
    ) -> Result<(), WaveKillError> {
        // SAFETY: `args` is a live, exclusive reference to a struct of the
        // size the request encodes; the kernel reads and writes only that.
        unsafe { self.wave_kill_raw(args) }.map_err(|e| WaveKillError::from_errno(e, args))
    }

    /// The wave-kill ioctl on a raw pointer, for callers that manage the
    /// argument memory themselves (and for testing the driver's `EFAULT`).
    ///
    /// # Safety
    ///
    /// - `args` points either to memory valid for reads and writes of a
    ///   [`KfdIoctlSluiceWaveKillArgs`] that nothing else accesses during the
    ///   call, or to no mapped memory at all (the driver answers `EFAULT`);
    /// - it never points into memory whose contents Rust code relies on not
    ///   changing, since the driver writes the whole struct back.
    pub unsafe fn wave_kill_raw(&self, args: *mut KfdIoctlSluiceWaveKillArgs) -> Result<(), Errno> {
        // SAFETY: the caller upholds the pointer contract above; the fd is
        // a patched /dev/kfd (checked in `open`), whose wave-kill ioctl
        // touches exactly size_of::<KfdIoctlSluiceWaveKillArgs>() bytes.
        unsafe {
            kfd_ioctl(
                self.fd.as_raw_fd(),
                AMDKFD_IOC_SLUICE_WAVE_KILL,
                args.cast(),
            )
        }
    }
}

impl AsFd for AmdKfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

use crate::raw_ioctl as kfd_ioctl;

fn get_version(fd: RawFd) -> Result<KfdIoctlSluiceVersionArgs, Errno> {
    let mut args = KfdIoctlSluiceVersionArgs::default();
    // SAFETY: `args` is a live local of the size AMDKFD_IOC_SLUICE_GET_VERSION
    // encodes; the driver writes only that.
    unsafe { kfd_ioctl(fd, AMDKFD_IOC_SLUICE_GET_VERSION, (&raw mut args).cast()) }?;
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::dev_null;

    #[test]
    fn a_stock_driver_is_refused_with_the_fix_in_the_message() {
        // /dev/null answers every ioctl with ENOTTY, like an unpatched amdkfd.
        let err = AmdKfd::check(dev_null(), Path::new("/dev/null")).unwrap_err();
        match &err {
            OpenError::Unpatched { errno, .. } => assert_eq!(errno.raw(), libc::ENOTTY),
            other => panic!("expected Unpatched, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("/dev/null") && msg.contains("scripts/kmod/install.sh"),
            "{msg}"
        );
    }

    #[test]
    fn a_missing_device_names_the_path() {
        let err = AmdKfd::open_path(Path::new("/nonexistent/kfd")).unwrap_err();
        assert!(matches!(err, OpenError::Open { .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/kfd"));
    }

    #[test]
    fn bogus_fd_answers_ebadf() {
        assert_eq!(get_version(-1).unwrap_err().raw(), libc::EBADF);
    }

    #[test]
    fn ioctls_on_a_non_kfd_fd_answer_enotty() {
        let kfd = AmdKfd::from_fd_unchecked(dev_null());
        assert_eq!(kfd.version().unwrap_err().raw(), libc::ENOTTY);
        let err = kfd.wave_kill(1, std::process::id(), 0).unwrap_err();
        assert_eq!(err, WaveKillError::Other(Errno(libc::ENOTTY)));
        assert_eq!(err.errno().raw(), libc::ENOTTY);
    }

    #[test]
    fn errnos_map_to_typed_errors_and_back() {
        let args = KfdIoctlSluiceWaveKillArgs {
            gpu_id: 0x1234,
            pid: 42,
            flags: 0x80,
            ..Default::default()
        };
        for (errno, want) in [
            (libc::EPERM, WaveKillError::NotPermitted),
            (libc::EINVAL, WaveKillError::InvalidArgument { flags: 0x80 }),
            (libc::ESRCH, WaveKillError::NoSuchProcess { pid: 42 }),
            (
                libc::ENODEV,
                WaveKillError::NoSuchGpu {
                    gpu_id: 0x1234,
                    pid: 42,
                },
            ),
            (
                libc::EOPNOTSUPP,
                WaveKillError::Unsupported { gpu_id: 0x1234 },
            ),
            (libc::EBUSY, WaveKillError::Busy { gpu_id: 0x1234 }),
            (libc::EFAULT, WaveKillError::Other(Errno(libc::EFAULT))),
        ] {
            let got = WaveKillError::from_errno(Errno(errno), &args);
            assert_eq!(got, want);
            assert_eq!(got.errno().raw(), errno);
        }
        let msg = WaveKillError::NoSuchGpu {
            gpu_id: 0x1234,
            pid: 42,
        }
        .to_string();
        assert!(msg.contains("4660") && msg.contains("42"), "{msg}");
    }

    #[test]
    fn caps_bits() {
        let v = SluiceVersion {
            version: 1,
            caps: KFD_SLUICE_CAP_WAVE_KILL,
        };
        assert!(v.has_wave_kill());
        assert!(
            !SluiceVersion {
                version: 1,
                caps: 0
            }
            .has_wave_kill()
        );
    }
}
