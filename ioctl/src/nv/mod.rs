//! The patched NVIDIA open kernel modules (`kmod-patches/nvidia-open/`): SM
//! trap escapes on `/dev/nvidiactl`, through [`NvCtl`].
//!
//! The patch adds two escapes to the control device (`'F'`, escape numbers
//! 248 and 249; see `kmod-patches/nvidia-open/uapi/nv-sluice-ioctl.h`):
//! [`nr::SLUICE_NV_IOCTL_QUERY`] answers a magic number, the escape ABI,
//! capability bits, the driver version and the GPUs, and
//! [`nr::SLUICE_NV_IOCTL_TRAP`] tracks the calling process's RM allocations,
//! arms a GT200_DEBUGGER session per CUDA context and triggers the SM trap
//! (the RM's suspend/resume of the context: every resident warp enters the
//! trap handler, REEF §4.6). A stock driver answers the query with `EINVAL`
//! (unknown escape), which [`NvCtl::open`] turns into
//! [`OpenError::Unpatched`].
//!
//! Order of use in the daemon: [`NvCtl::open`] and [`NvCtl::track`] before
//! the CUDA context is created (the driver only knows the contexts it saw
//! being allocated), [`NvCtl::arm`] once the context exists, then
//! [`NvCtl::trigger`] on each preemption. Dropping the handle ends tracking.

pub mod nr;
pub mod uapi;

use std::fs::OpenOptions;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::Errno;
use nr::{
    SLUICE_NV_ABI_MAJOR, SLUICE_NV_CAP_TRAP, SLUICE_NV_IOCTL_QUERY, SLUICE_NV_IOCTL_TRAP,
    SLUICE_NV_MAGIC, SLUICE_NV_MAX_GPUS, SLUICE_NV_TRAP_OP_ARM, SLUICE_NV_TRAP_OP_TRACK,
    SLUICE_NV_TRAP_OP_TRIGGER, SLUICE_NV_TRAP_OP_UNTRACK,
};
use uapi::{SluiceNvQuery, SluiceNvTrap};

/// The NVIDIA control device.
pub const NVIDIACTL_PATH: &str = "/dev/nvidiactl";

/// One GPU the patched driver handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvGpu {
    /// The driver's `gpu_id`, which [`NvCtl::arm`] and [`NvCtl::trigger`]
    /// take.
    pub gpu_id: u32,
    /// PCI domain.
    pub domain: u32,
    /// PCI bus.
    pub bus: u8,
    /// PCI slot (device).
    pub slot: u8,
    /// PCI function.
    pub function: u8,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
}

impl NvGpu {
    /// The PCI address as `lspci -D` and CUDA's `cudaDeviceGetPCIBusId`
    /// print it (`0000:65:00.0`).
    pub fn pci_bus_id(&self) -> String {
        format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.slot, self.function
        )
    }
}

/// What the patched driver answered to the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvInfo {
    /// Escape ABI (major, minor) of the driver's patch.
    pub abi: (u16, u16),
    /// `SLUICE_NV_CAP_*` bits.
    pub caps: u32,
    /// The driver version, e.g. `"535.261.03"`.
    pub driver_version: String,
    /// GPUs the driver handles (may exceed `gpus.len()`).
    pub num_gpus: u32,
    /// The first [`SLUICE_NV_MAX_GPUS`] of them.
    pub gpus: Vec<NvGpu>,
}

impl NvInfo {
    /// Whether the trap operations are implemented.
    pub const fn has_trap(&self) -> bool {
        self.caps & SLUICE_NV_CAP_TRAP != 0
    }

    /// The GPU at a PCI address (`0000:65:00.0`, case-insensitive).
    pub fn gpu_by_pci_bus_id(&self, id: &str) -> Option<NvGpu> {
        self.gpus
            .iter()
            .copied()
            .find(|g| g.pci_bus_id().eq_ignore_ascii_case(id))
    }

    fn from_raw(q: &SluiceNvQuery) -> Self {
        let len = q
            .driver_version
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(q.driver_version.len());
        let listed = (q.num_gpus as usize).min(SLUICE_NV_MAX_GPUS);
        Self {
            abi: (q.abi_major, q.abi_minor),
            caps: q.caps,
            driver_version: String::from_utf8_lossy(&q.driver_version[..len]).into_owned(),
            num_gpus: q.num_gpus,
            gpus: q.gpus[..listed]
                .iter()
                .map(|g| NvGpu {
                    gpu_id: g.gpu_id,
                    domain: g.pci_domain,
                    bus: g.pci_bus,
                    slot: g.pci_slot,
                    function: g.pci_function,
                    vendor_id: g.vendor_id,
                    device_id: g.device_id,
                })
                .collect(),
        }
    }
}

/// Why [`NvCtl::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The device could not be opened.
    #[error(
        "cannot open {}: is the nvidia module loaded (`modprobe nvidia`) and may this user open it?",
        path.display()
    )]
    Open {
        /// The device path.
        path: PathBuf,
        /// What `open(2)` answered.
        #[source]
        source: std::io::Error,
    },
    /// The driver does not know the query escape: a stock NVIDIA driver.
    #[error(
        "{} belongs to an NVIDIA driver without sluice's trap patch (the query escape answered {errno}); install it with scripts/kmod/install.sh",
        path.display()
    )]
    Unpatched {
        /// The device path.
        path: PathBuf,
        /// `EINVAL` (stock NVIDIA) or `ENOTTY` (not an NVIDIA device).
        errno: Errno,
    },
    /// Something answered the query, but not with sluice's magic.
    #[error(
        "{} answered the query escape with magic {magic:#010x}, not sluice's {SLUICE_NV_MAGIC:#010x}: another patch uses the same escape number; install sluice's with scripts/kmod/install.sh",
        path.display()
    )]
    BadMagic {
        /// The device path.
        path: PathBuf,
        /// What the driver answered.
        magic: u32,
    },
    /// The driver speaks another major version of the escape ABI.
    #[error(
        "{} carries sluice trap ABI {}.{}, this build speaks {SLUICE_NV_ABI_MAJOR}.x: install the patch from this checkout with scripts/kmod/install.sh",
        path.display(), found.0, found.1
    )]
    AbiMismatch {
        /// The device path.
        path: PathBuf,
        /// The driver's (major, minor).
        found: (u16, u16),
    },
    /// The query failed for another reason.
    #[error("the sluice query escape on {} failed", path.display())]
    Query {
        /// The device path.
        path: PathBuf,
        /// What the ioctl answered.
        #[source]
        source: Errno,
    },
}

/// Which trap operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrapOp {
    /// [`NvCtl::track`].
    Track,
    /// [`NvCtl::untrack`].
    Untrack,
    /// [`NvCtl::arm`].
    Arm,
    /// [`NvCtl::trigger`].
    Trigger,
    /// An op number the driver does not define (only through
    /// [`NvCtl::trap_args`]).
    Unknown(u32),
}

impl TrapOp {
    /// The `SLUICE_NV_TRAP_OP_*` number.
    pub const fn raw(self) -> u32 {
        match self {
            Self::Track => SLUICE_NV_TRAP_OP_TRACK,
            Self::Untrack => SLUICE_NV_TRAP_OP_UNTRACK,
            Self::Arm => SLUICE_NV_TRAP_OP_ARM,
            Self::Trigger => SLUICE_NV_TRAP_OP_TRIGGER,
            Self::Unknown(op) => op,
        }
    }

    /// The operation of a `SLUICE_NV_TRAP_OP_*` number.
    pub const fn from_raw(op: u32) -> Self {
        match op {
            SLUICE_NV_TRAP_OP_TRACK => Self::Track,
            SLUICE_NV_TRAP_OP_UNTRACK => Self::Untrack,
            SLUICE_NV_TRAP_OP_ARM => Self::Arm,
            SLUICE_NV_TRAP_OP_TRIGGER => Self::Trigger,
            other => Self::Unknown(other),
        }
    }
}

impl std::fmt::Display for TrapOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Track => f.write_str("track"),
            Self::Untrack => f.write_str("untrack"),
            Self::Arm => f.write_str("arm"),
            Self::Trigger => f.write_str("trigger"),
            Self::Unknown(op) => write!(f, "op {op}"),
        }
    }
}

/// Why a trap operation failed; one variant per errno the patch documents,
/// each naming what was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TrapError {
    /// `EPERM`: no `CAP_SYS_ADMIN`, the fd tracks another process, or the RM
    /// refused the debugger session (insufficient permissions).
    #[error(
        "{op}: not permitted (EPERM): the trap escape needs CAP_SYS_ADMIN, and only the process that tracked on this fd may use it"
    )]
    NotPermitted {
        /// The operation.
        op: TrapOp,
    },
    /// `EINVAL`: unknown op, nonzero flags or reserved word, or a gpu_id
    /// where none belongs (or none where one must be).
    #[error(
        "{op}: invalid argument (EINVAL): gpu_id {gpu_id:#x}, flags {flags:#x}; track/untrack take gpu_id 0, arm/trigger a nonzero gpu_id, flags and reserved words must be 0"
    )]
    InvalidArgument {
        /// The operation.
        op: TrapOp,
        /// The gpu_id passed.
        gpu_id: u32,
        /// The flags passed.
        flags: u32,
    },
    /// `ENOTTY`: the fd is not the NVIDIA control device.
    #[error("{op}: the fd is not /dev/nvidiactl of a patched driver (ENOTTY)")]
    NotControlDevice {
        /// The operation.
        op: TrapOp,
    },
    /// `EBUSY`: this fd or process already tracks, or all tracking slots
    /// are taken.
    #[error(
        "{op}: busy (EBUSY): this process or fd already tracks, or the driver's 4 tracking slots are taken; close the other NvCtl handles"
    )]
    Busy {
        /// The operation.
        op: TrapOp,
    },
    /// `ESRCH`: the fd does not track, or no context of this process was
    /// recorded (arm) or armed (trigger) on the GPU.
    #[error(
        "{op}: nothing to act on for gpu_id {gpu_id:#x} (ESRCH, rm_status {rm_status:#x}): call track before creating the CUDA context, arm after it, trigger after arm"
    )]
    NothingToTrap {
        /// The operation.
        op: TrapOp,
        /// The gpu_id passed.
        gpu_id: u32,
        /// The NV_STATUS the driver reported, 0 if none.
        rm_status: u32,
    },
    /// `ENODEV`: no GPU with that gpu_id, or the GPU fell off the bus.
    #[error("{op}: no GPU with gpu_id {gpu_id:#x} (ENODEV); NvCtl::info() lists the driver's GPUs")]
    NoSuchGpu {
        /// The operation.
        op: TrapOp,
        /// The gpu_id passed.
        gpu_id: u32,
    },
    /// `EOPNOTSUPP`: the RM or GSP firmware does not support the debugger
    /// control on this GPU (e.g. vGPU, MIG, confidential computing).
    #[error(
        "{op}: the RM or GSP firmware does not support the SM debugger controls on gpu_id {gpu_id:#x} (EOPNOTSUPP, rm_status {rm_status:#x}); use the wait-based fallback"
    )]
    Unsupported {
        /// The operation.
        op: TrapOp,
        /// The gpu_id passed.
        gpu_id: u32,
        /// The NV_STATUS the driver reported.
        rm_status: u32,
    },
    /// `EIO`: another RM failure.
    #[error(
        "{op}: the RM failed with NV_STATUS {rm_status:#x} on gpu_id {gpu_id:#x} after {contexts} context(s) (EIO); see the NVRM lines in the kernel log"
    )]
    Rm {
        /// The operation.
        op: TrapOp,
        /// The gpu_id passed.
        gpu_id: u32,
        /// The NV_STATUS the driver reported.
        rm_status: u32,
        /// Contexts done before the failure.
        contexts: u32,
    },
    /// Any other errno (`EFAULT`, `EBADF`, ...).
    #[error("{op}: trap escape failed: {errno}")]
    Other {
        /// The operation.
        op: TrapOp,
        /// What the ioctl answered.
        errno: Errno,
    },
}

impl TrapError {
    fn from_errno(e: Errno, args: &SluiceNvTrap) -> Self {
        let op = TrapOp::from_raw(args.op);
        let gpu_id = args.gpu_id;
        let rm_status = args.rm_status;
        match e.raw() {
            libc::EPERM => Self::NotPermitted { op },
            libc::EINVAL => Self::InvalidArgument {
                op,
                gpu_id,
                flags: args.flags,
            },
            libc::ENOTTY => Self::NotControlDevice { op },
            libc::EBUSY => Self::Busy { op },
            libc::ESRCH => Self::NothingToTrap {
                op,
                gpu_id,
                rm_status,
            },
            libc::ENODEV => Self::NoSuchGpu { op, gpu_id },
            libc::EOPNOTSUPP => Self::Unsupported {
                op,
                gpu_id,
                rm_status,
            },
            libc::EIO => Self::Rm {
                op,
                gpu_id,
                rm_status,
                contexts: args.contexts,
            },
            _ => Self::Other { op, errno: e },
        }
    }

    /// The errno the driver answered.
    pub const fn errno(self) -> Errno {
        Errno(match self {
            Self::NotPermitted { .. } => libc::EPERM,
            Self::InvalidArgument { .. } => libc::EINVAL,
            Self::NotControlDevice { .. } => libc::ENOTTY,
            Self::Busy { .. } => libc::EBUSY,
            Self::NothingToTrap { .. } => libc::ESRCH,
            Self::NoSuchGpu { .. } => libc::ENODEV,
            Self::Unsupported { .. } => libc::EOPNOTSUPP,
            Self::Rm { .. } => libc::EIO,
            Self::Other { errno, .. } => errno.0,
        })
    }
}

/// An open `/dev/nvidiactl` whose driver carries sluice's trap patch.
///
/// Only built by [`NvCtl::open`], which checks the query escape, so every
/// method talks to a patched driver. The fd owns the driver's tracking
/// record: dropping the handle (closing the fd) ends tracking and frees the
/// debugger sessions it armed.
#[derive(Debug)]
pub struct NvCtl {
    fd: OwnedFd,
    info: NvInfo,
}

impl NvCtl {
    /// Opens [`NVIDIACTL_PATH`] and checks that the driver is patched.
    pub fn open() -> Result<Self, OpenError> {
        Self::open_path(Path::new(NVIDIACTL_PATH))
    }

    /// Opens the control device at `path` and checks that the driver is
    /// patched.
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

    /// Runs the query on `fd` and keeps it if a patched driver answered.
    fn check(fd: OwnedFd, path: &Path) -> Result<Self, OpenError> {
        let path = path.to_owned();
        let q = match query(fd.as_raw_fd()) {
            Ok(q) => q,
            Err(errno) if errno.raw() == libc::EINVAL || errno.raw() == libc::ENOTTY => {
                return Err(OpenError::Unpatched { path, errno });
            }
            Err(source) => return Err(OpenError::Query { path, source }),
        };
        if q.magic != SLUICE_NV_MAGIC {
            return Err(OpenError::BadMagic {
                path,
                magic: q.magic,
            });
        }
        if q.abi_major != SLUICE_NV_ABI_MAJOR {
            return Err(OpenError::AbiMismatch {
                path,
                found: (q.abi_major, q.abi_minor),
            });
        }
        Ok(Self {
            fd,
            info: NvInfo::from_raw(&q),
        })
    }

    /// A handle over any fd without the query check, so tests without the
    /// patched driver can reach the error paths (e.g. `/dev/null` answers
    /// `ENOTTY`).
    #[cfg(test)]
    pub(crate) fn from_fd_unchecked(fd: OwnedFd) -> Self {
        Self {
            fd,
            info: NvInfo {
                abi: (SLUICE_NV_ABI_MAJOR, nr::SLUICE_NV_ABI_MINOR),
                caps: SLUICE_NV_CAP_TRAP,
                driver_version: String::new(),
                num_gpus: 0,
                gpus: Vec::new(),
            },
        }
    }

    /// What the driver answered when it was opened.
    pub fn info(&self) -> &NvInfo {
        &self.info
    }

    /// Asks the driver again (the GPU list can change with hotplug).
    pub fn query(&self) -> Result<NvInfo, Errno> {
        Ok(NvInfo::from_raw(&query(self.fd.as_raw_fd())?))
    }

    /// Starts recording the RM clients, subdevices and compute objects this
    /// process allocates from now on; call it before the CUDA context is
    /// created. Needs `CAP_SYS_ADMIN`.
    pub fn track(&self) -> Result<(), TrapError> {
        self.op(SLUICE_NV_TRAP_OP_TRACK, 0).map(|_| ())
    }

    /// Frees the debugger sessions [`NvCtl::arm`] made and stops recording
    /// (dropping the handle does the same).
    pub fn untrack(&self) -> Result<(), TrapError> {
        self.op(SLUICE_NV_TRAP_OP_UNTRACK, 0).map(|_| ())
    }

    /// Sets up a debugger session (no debug events, SM debug mode on) for
    /// every recorded context of this process on `gpu_id`; returns how many
    /// contexts are armed.
    pub fn arm(&self, gpu_id: u32) -> Result<u32, TrapError> {
        self.op(SLUICE_NV_TRAP_OP_ARM, gpu_id)
    }

    /// Triggers the SM trap on every armed context of this process on
    /// `gpu_id` (suspend, then resume); returns how many contexts it
    /// trapped. What the warps do in the trap handler is the handler's
    /// business: CUDA's stock handler resumes them.
    pub fn trigger(&self, gpu_id: u32) -> Result<u32, TrapError> {
        self.op(SLUICE_NV_TRAP_OP_TRIGGER, gpu_id)
    }

    fn op(&self, op: u32, gpu_id: u32) -> Result<u32, TrapError> {
        let mut args = SluiceNvTrap {
            op,
            gpu_id,
            ..Default::default()
        };
        self.trap_args(&mut args)?;
        Ok(args.contexts)
    }

    /// Sends `args` as they are, flags and reserved words included, and
    /// leaves the driver's answer (`contexts`, `rm_status`) in them.
    pub fn trap_args(&self, args: &mut SluiceNvTrap) -> Result<(), TrapError> {
        // SAFETY: `args` is a live, exclusive reference to a struct of the
        // size SLUICE_NV_IOCTL_TRAP encodes; the driver reads and writes
        // only that.
        unsafe { self.trap_raw(args) }.map_err(|e| TrapError::from_errno(e, args))
    }

    /// The trap escape on a raw pointer, for callers that manage the
    /// argument memory themselves (and for testing the driver's `EFAULT`).
    ///
    /// # Safety
    ///
    /// - `args` points either to memory valid for reads and writes of a
    ///   [`SluiceNvTrap`] that nothing else accesses during the call, or to
    ///   no mapped memory at all (the driver answers `EFAULT`);
    /// - it never points into memory whose contents Rust code relies on not
    ///   changing, since the driver writes the whole struct back.
    pub unsafe fn trap_raw(&self, args: *mut SluiceNvTrap) -> Result<(), Errno> {
        // SAFETY: the caller upholds the pointer contract above; the fd is a
        // patched /dev/nvidiactl (checked in `open`), whose trap escape
        // copies exactly size_of::<SluiceNvTrap>() bytes in and out.
        unsafe { nv_ioctl(self.fd.as_raw_fd(), SLUICE_NV_IOCTL_TRAP, args.cast()) }
    }
}

impl AsFd for NvCtl {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

use crate::raw_ioctl as nv_ioctl;

fn query(fd: RawFd) -> Result<SluiceNvQuery, Errno> {
    let mut q = SluiceNvQuery::default();
    // SAFETY: `q` is a live local of the size SLUICE_NV_IOCTL_QUERY encodes;
    // the driver (or whatever answers) copies at most that much in and out.
    unsafe { nv_ioctl(fd, SLUICE_NV_IOCTL_QUERY, (&raw mut q).cast()) }?;
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::dev_null;
    use uapi::SluiceNvGpu;

    #[test]
    fn a_non_nvidia_device_is_refused_as_unpatched_with_the_fix_in_the_message() {
        // /dev/null answers every ioctl with ENOTTY; a stock NVIDIA driver
        // answers the unknown escape with EINVAL. Both mean "no patch".
        let err = NvCtl::check(dev_null(), Path::new("/dev/null")).unwrap_err();
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
        let err = NvCtl::open_path(Path::new("/nonexistent/nvidiactl")).unwrap_err();
        assert!(matches!(err, OpenError::Open { .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/nvidiactl"));
    }

    #[test]
    fn bogus_fd_answers_ebadf() {
        assert_eq!(query(-1).unwrap_err().raw(), libc::EBADF);
    }

    #[test]
    fn escapes_on_a_non_nvidia_fd_answer_enotty() {
        let ctl = NvCtl::from_fd_unchecked(dev_null());
        assert_eq!(ctl.query().unwrap_err().raw(), libc::ENOTTY);
        for (result, op) in [
            (ctl.track().map(|_| 0), TrapOp::Track),
            (ctl.untrack().map(|_| 0), TrapOp::Untrack),
            (ctl.arm(1), TrapOp::Arm),
            (ctl.trigger(1), TrapOp::Trigger),
        ] {
            let err = result.unwrap_err();
            assert_eq!(err, TrapError::NotControlDevice { op });
            assert_eq!(err.errno().raw(), libc::ENOTTY);
        }
    }

    #[test]
    fn raw_trap_on_a_non_nvidia_fd_answers_enotty() {
        let ctl = NvCtl::from_fd_unchecked(dev_null());
        // SAFETY: a null pointer is "no mapped memory": the kernel, not this
        // process, would report EFAULT; /dev/null answers ENOTTY first.
        let r = unsafe { ctl.trap_raw(std::ptr::null_mut()) };
        assert_eq!(r.unwrap_err().raw(), libc::ENOTTY);
    }

    #[test]
    fn errnos_map_to_typed_errors_and_back() {
        let args = SluiceNvTrap {
            op: SLUICE_NV_TRAP_OP_TRIGGER,
            gpu_id: 0x300,
            flags: 0x8,
            contexts: 2,
            rm_status: 0x56,
            ..Default::default()
        };
        let op = TrapOp::Trigger;
        for (errno, want) in [
            (libc::EPERM, TrapError::NotPermitted { op }),
            (
                libc::EINVAL,
                TrapError::InvalidArgument {
                    op,
                    gpu_id: 0x300,
                    flags: 0x8,
                },
            ),
            (libc::ENOTTY, TrapError::NotControlDevice { op }),
            (libc::EBUSY, TrapError::Busy { op }),
            (
                libc::ESRCH,
                TrapError::NothingToTrap {
                    op,
                    gpu_id: 0x300,
                    rm_status: 0x56,
                },
            ),
            (libc::ENODEV, TrapError::NoSuchGpu { op, gpu_id: 0x300 }),
            (
                libc::EOPNOTSUPP,
                TrapError::Unsupported {
                    op,
                    gpu_id: 0x300,
                    rm_status: 0x56,
                },
            ),
            (
                libc::EIO,
                TrapError::Rm {
                    op,
                    gpu_id: 0x300,
                    rm_status: 0x56,
                    contexts: 2,
                },
            ),
            (
                libc::EFAULT,
                TrapError::Other {
                    op,
                    errno: Errno(libc::EFAULT),
                },
            ),
        ] {
            let got = TrapError::from_errno(Errno(errno), &args);
            assert_eq!(got, want);
            assert_eq!(got.errno().raw(), errno);
        }
        let msg = TrapError::Unsupported {
            op,
            gpu_id: 0x300,
            rm_status: 0x56,
        }
        .to_string();
        assert!(
            msg.contains("trigger") && msg.contains("0x300") && msg.contains("0x56"),
            "{msg}"
        );
    }

    #[test]
    fn trap_ops_round_trip() {
        for op in [TrapOp::Track, TrapOp::Untrack, TrapOp::Arm, TrapOp::Trigger] {
            assert_eq!(TrapOp::from_raw(op.raw()), op);
        }
        assert_eq!(TrapOp::from_raw(99), TrapOp::Unknown(99));
        assert_eq!(TrapOp::Unknown(99).raw(), 99);
        assert_eq!(TrapOp::Unknown(99).to_string(), "op 99");
    }

    #[test]
    fn query_answers_are_decoded() {
        let mut q = SluiceNvQuery {
            magic: SLUICE_NV_MAGIC,
            abi_major: 1,
            abi_minor: 0,
            caps: SLUICE_NV_CAP_TRAP,
            num_gpus: 17,
            ..Default::default()
        };
        q.driver_version[..10].copy_from_slice(b"535.261.03");
        q.gpus[0] = SluiceNvGpu {
            gpu_id: 0x6500,
            pci_domain: 0,
            pci_bus: 0x65,
            pci_slot: 0,
            pci_function: 0,
            pad: 0,
            vendor_id: 0x10de,
            device_id: 0x2330,
        };
        let info = NvInfo::from_raw(&q);
        assert_eq!(info.driver_version, "535.261.03");
        assert!(info.has_trap());
        assert_eq!(info.abi, (1, 0));
        // 17 GPUs, 16 listed.
        assert_eq!(info.num_gpus, 17);
        assert_eq!(info.gpus.len(), SLUICE_NV_MAX_GPUS);
        assert_eq!(info.gpus[0].pci_bus_id(), "0000:65:00.0");
        assert_eq!(
            info.gpu_by_pci_bus_id("0000:65:00.0").map(|g| g.gpu_id),
            Some(0x6500)
        );
        assert_eq!(info.gpu_by_pci_bus_id("0000:66:00.0"), None);
        // A driver version without a NUL in 32 bytes is taken whole.
        q.driver_version = [b'9'; 32];
        assert_eq!(NvInfo::from_raw(&q).driver_version.len(), 32);
        q.caps = 0;
        assert!(!NvInfo::from_raw(&q).has_trap());
    }
}
