//! OS setup for the dispatcher: CPU pinning, `SCHED_FIFO`, `mlockall`, and
//! systemd's readiness/watchdog notifications.
//!
//! Each operation returns a typed outcome rather than aborting: a daemon
//! started without privilege (a developer's shell, CI) still serves
//! clients, just with worse tail latency. [`apply_dispatcher_setup`] runs
//! all three steps a [`DispatcherSetup`] asks for, and
//! [`RealtimeReport::warnings`] turns what failed into one log line each,
//! saying what was missing and how to fix it.
//!
//! | step | syscall | privilege |
//! |------|---------|-----------|
//! | pin the dispatcher | `sched_setaffinity` | none; the CPU must be in the process's affinity mask (systemd `CPUAffinity=`, cgroup cpuset) |
//! | `SCHED_FIFO` | `sched_setscheduler` | `CAP_SYS_NICE`, or `RLIMIT_RTPRIO` >= the priority |
//! | lock memory | `mlockall(MCL_CURRENT \| MCL_FUTURE)` | `CAP_IPC_LOCK`, or `RLIMIT_MEMLOCK` = infinity |
//!
//! [`Systemd`] sends `READY=1`, `STATUS=`, `STOPPING=1` and `WATCHDOG=1`
//! through `sd-notify`; every call is a no-op when the daemon was not
//! started by systemd (`NOTIFY_SOCKET` unset).
//!
//! This module knows nothing of the config file's format: it takes plain
//! values ([`DispatcherSetup`]); `startup` builds those from `[daemon]`.
//! Its messages do name the config keys that set each value, since that
//! is where an operator fixes them.

use std::fmt;
use std::io;
use std::time::Duration;

use rustix::io::Errno;
use rustix::mm::MlockAllFlags;
use rustix::process::Resource;
use rustix::thread::CpuSet;

/// `CAP_IPC_LOCK` (linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;
/// `CAP_SYS_NICE` (linux/capability.h).
const CAP_SYS_NICE: u32 = 23;

/// Why one OS setup step or one systemd notification failed.
///
/// Messages name the value, what was missing and the fix; an OS error kept
/// as `source()` is not repeated in the message ([`RealtimeReport::warnings`]
/// appends it).
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// The CPU does not exist or is outside the process's affinity mask.
    #[error(
        "cannot pin the dispatcher thread to CPU {core}: this process may only use CPUs \
         {allowed}; set daemon.dispatcher_core to one of them (inside the unit's \
         CPUAffinity=), or remove the key to leave the dispatcher unpinned"
    )]
    CpuUnavailable {
        /// The CPU asked for.
        core: usize,
        /// The CPUs the process may use, as a list such as `0-3,6`.
        allowed: String,
    },
    /// `sched_setaffinity` failed for another reason.
    #[error(
        "cannot pin the dispatcher thread to CPU {core}; remove daemon.dispatcher_core to run unpinned"
    )]
    Affinity {
        /// The CPU asked for.
        core: usize,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The priority is outside what `SCHED_FIFO` accepts.
    #[error(
        "SCHED_FIFO priority {priority} is out of range; set daemon.realtime_priority to \
         1..={max}, or to 0 to stay SCHED_OTHER"
    )]
    FifoPriority {
        /// The priority asked for.
        priority: u8,
        /// The largest the kernel accepts (99 on Linux).
        max: i32,
    },
    /// `EPERM` without `CAP_SYS_NICE` or a high enough `RLIMIT_RTPRIO`.
    #[error(
        "cannot make the dispatcher thread SCHED_FIFO priority {priority}: needs CAP_SYS_NICE \
         or root (or RLIMIT_RTPRIO >= {priority}; it is {rtprio_limit}); run under the systemd \
         unit (AmbientCapabilities=CAP_SYS_NICE) or set daemon.realtime_priority = 0"
    )]
    FifoNotPermitted {
        /// The priority asked for.
        priority: u8,
        /// The process's `RLIMIT_RTPRIO` (soft), e.g. `0` or `infinity`.
        rtprio_limit: String,
    },
    /// `EPERM` although the process has the privilege: with
    /// `CONFIG_RT_GROUP_SCHED` its cgroup has no real-time budget.
    #[error(
        "cannot make the dispatcher thread SCHED_FIFO priority {priority} although the process \
         may use real-time priorities: its cgroup has no real-time CPU budget \
         (CONFIG_RT_GROUP_SCHED, cpu.rt_runtime_us = 0); give the cgroup a budget (e.g. docker \
         run --cpu-rt-runtime=950000, or write cpu.rt_runtime_us) or set \
         daemon.realtime_priority = 0"
    )]
    FifoNoRtBudget {
        /// The priority asked for.
        priority: u8,
    },
    /// `sched_setscheduler` failed for another reason.
    #[error(
        "cannot make the dispatcher thread SCHED_FIFO priority {priority}; set daemon.realtime_priority = 0 to stay SCHED_OTHER"
    )]
    Fifo {
        /// The priority asked for.
        priority: u8,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// No `CAP_IPC_LOCK` and a finite `RLIMIT_MEMLOCK`.
    #[error(
        "cannot lock the daemon's memory (mlockall): needs CAP_IPC_LOCK and \
         LimitMEMLOCK=infinity (RLIMIT_MEMLOCK is {limit}); run under the systemd unit \
         (AmbientCapabilities=CAP_IPC_LOCK, LimitMEMLOCK=infinity), or set \
         daemon.lock_memory = false"
    )]
    MlockNotPermitted {
        /// The process's `RLIMIT_MEMLOCK` (soft), e.g. `8388608 bytes`.
        limit: String,
    },
    /// `mlockall` failed with the privilege: not enough RAM to lock.
    #[error(
        "cannot lock the daemon's memory (mlockall): not enough RAM; lower \
         clients.max_clients or clients.arena_bytes, or set daemon.lock_memory = false"
    )]
    MlockNoMemory {
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// `mlockall` failed for another reason.
    #[error(
        "cannot lock the daemon's memory (mlockall); set daemon.lock_memory = false to run unlocked"
    )]
    Mlock {
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// A message to systemd could not be sent.
    #[error(
        "cannot send {what} to systemd through NOTIFY_SOCKET; check that the unit has \
         Type=notify and NotifyAccess=main"
    )]
    Notify {
        /// The message, e.g. `READY=1`.
        what: &'static str,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
}

// ---------------------------------------------------------------------------
// CPU affinity.

/// Pins the calling thread to CPU `core`.
///
/// Fails with [`SysError::CpuUnavailable`], naming the CPUs the process may
/// use, when `core` does not exist, is offline, or lies outside the
/// process's affinity mask (systemd `CPUAffinity=`, a cgroup cpuset, or
/// `taskset`).
pub fn pin_current_thread(core: usize) -> Result<(), SysError> {
    if core >= CpuSet::MAX_CPU {
        // CpuSet::set would index out of bounds; the kernel would refuse it
        // anyway.
        return Err(cpu_unavailable(core));
    }
    let mut set = CpuSet::new();
    set.set(core);
    match rustix::thread::sched_setaffinity(None, &set) {
        Ok(()) => Ok(()),
        // EINVAL: no CPU of the mask is online and allowed.
        Err(Errno::INVAL) => Err(cpu_unavailable(core)),
        Err(e) => Err(SysError::Affinity {
            core,
            source: e.into(),
        }),
    }
}

fn cpu_unavailable(core: usize) -> SysError {
    SysError::CpuUnavailable {
        core,
        allowed: allowed_cpus(),
    }
}

/// The CPUs the process may use, e.g. `0-3,6`. Asks for the main thread's
/// mask (pid = tgid), which the dispatcher's own pinning does not narrow.
fn allowed_cpus() -> String {
    match rustix::thread::sched_getaffinity(Some(rustix::process::getpid())) {
        Ok(set) => cpu_list(&set),
        Err(e) => format!("(unknown: sched_getaffinity failed: {e})"),
    }
}

/// Formats a CPU set the way `/sys/devices/system/cpu/online` does:
/// `0-3,6,8-9`; `none` when empty.
fn cpu_list(set: &CpuSet) -> String {
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(",")
    }
}

// ---------------------------------------------------------------------------
// SCHED_FIFO.

/// Switches the calling thread to `SCHED_FIFO` at `priority` (1..=99).
///
/// The policy carries `SCHED_RESET_ON_FORK`, so threads or processes the
/// dispatcher might spawn start as `SCHED_OTHER` instead of inheriting a
/// real-time priority.
///
/// Without `CAP_SYS_NICE` (and with `RLIMIT_RTPRIO` below `priority`) this
/// fails with [`SysError::FifoNotPermitted`], and the thread is unchanged.
pub fn set_current_thread_fifo(priority: u8) -> Result<(), SysError> {
    // SAFETY: sched_get_priority_max takes a policy number and touches no
    // memory.
    let max = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) };
    if priority == 0 || i32::from(priority) > max {
        return Err(SysError::FifoPriority { priority, max });
    }
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: `param` is a valid, initialized sched_param that outlives the
    // call; the kernel only reads it. pid 0 is the calling thread.
    let rc = unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(SysError::Fifo {
            priority,
            source: err,
        });
    }
    let rtprio = rustix::process::getrlimit(Resource::Rtprio).current;
    let rlimit_allows = rtprio.is_none_or(|limit| limit >= u64::from(priority));
    if has_capability(CAP_SYS_NICE) || rlimit_allows {
        Err(SysError::FifoNoRtBudget { priority })
    } else {
        Err(SysError::FifoNotPermitted {
            priority,
            rtprio_limit: limit_text(rtprio, ""),
        })
    }
}

/// `Some(n)` -> `"n{unit}"`, `None` (`RLIM_INFINITY`) -> `"infinity"`.
fn limit_text(limit: Option<u64>, unit: &str) -> String {
    match limit {
        Some(n) => format!("{n}{unit}"),
        None => "infinity".to_owned(),
    }
}

/// Whether the calling thread has capability number `cap` in its effective
/// set, read from `/proc/thread-self/status` (`CapEff:`). `false` when that
/// cannot be read.
fn has_capability(cap: u32) -> bool {
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"))
        .unwrap_or_default();
    cap_eff(&status).is_some_and(|mask| cap < 64 && mask & (1 << cap) != 0)
}

/// The `CapEff:` mask of a `/proc/<pid>/status` text.
fn cap_eff(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

// ---------------------------------------------------------------------------
// mlockall.

/// Locks every current and future page of the process in RAM
/// (`mlockall(MCL_CURRENT | MCL_FUTURE)`), so the dispatcher never waits
/// on a page fault for its own memory or a client's ring.
///
/// Refuses up front with [`SysError::MlockNotPermitted`] unless the
/// process has `CAP_IPC_LOCK` or an unlimited `RLIMIT_MEMLOCK`: with
/// `MCL_FUTURE` under a finite limit, `mlockall` itself might succeed while
/// the process is small and every later mapping past the limit (each new
/// client's arena) would then fail.
pub fn lock_all_memory() -> Result<(), SysError> {
    let limit = rustix::process::getrlimit(Resource::Memlock).current;
    let privileged = has_capability(CAP_IPC_LOCK);
    if !privileged && limit.is_some() {
        return Err(SysError::MlockNotPermitted {
            limit: limit_text(limit, " bytes"),
        });
    }
    match rustix::mm::mlockall(MlockAllFlags::CURRENT | MlockAllFlags::FUTURE) {
        Ok(()) => Ok(()),
        Err(Errno::PERM) => Err(SysError::MlockNotPermitted {
            limit: limit_text(limit, " bytes"),
        }),
        Err(e @ (Errno::NOMEM | Errno::AGAIN)) => Err(SysError::MlockNoMemory { source: e.into() }),
        Err(e) => Err(SysError::Mlock { source: e.into() }),
    }
}

// ---------------------------------------------------------------------------
// The dispatcher's setup as a whole.

/// What [`apply_dispatcher_setup`] did, step by step.
#[derive(Debug)]
pub struct RealtimeReport {
    /// `Ok(Some(core))`: pinned to `core`; `Ok(None)`: not asked for
    /// (`daemon.dispatcher_core` unset).
    pub pinned: Result<Option<usize>, SysError>,
    /// `Ok(Some(priority))`: now `SCHED_FIFO`; `Ok(None)`: not asked for
    /// (`daemon.realtime_priority = 0`).
    pub fifo: Result<Option<u8>, SysError>,
    /// `Ok(true)`: memory locked; `Ok(false)`: not asked for
    /// (`daemon.lock_memory = false`).
    pub mlock: Result<bool, SysError>,
}

impl RealtimeReport {
    /// One line per step that was asked for and failed, each saying what
    /// was missing and how to fix it (with the OS error, if any, at the
    /// end). Empty when everything asked for worked.
    pub fn warnings(&self) -> Vec<String> {
        [
            self.pinned.as_ref().err(),
            self.fifo.as_ref().err(),
            self.mlock.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        .map(|e| crate::error_chain(e))
        .collect()
    }

    /// Whether the dispatcher thread runs `SCHED_FIFO`.
    pub fn is_realtime(&self) -> bool {
        matches!(self.fifo, Ok(Some(_)))
    }

    /// One line for when the dispatcher is *not* `SCHED_FIFO` (not asked
    /// for, or refused): what it costs and how to fix it. `None` when it
    /// runs real-time.
    pub fn cpu_warning(&self) -> Option<String> {
        let why = match &self.fifo {
            Ok(Some(_)) => return None,
            Ok(None) => "daemon.realtime_priority = 0".to_owned(),
            Err(e) => format!("SCHED_FIFO was refused ({})", crate::error_chain(e)),
        };
        Some(format!(
            "the dispatcher runs SCHED_OTHER ({why}): when client processes keep the CPUs \
             busy it waits for a CPU like any thread, and completions are posted late \
             (an outside test with 200 clients: ~100% of the time waiting, up to 7.7 s \
             late); fix: set daemon.realtime_priority = 50 and give sluiced CAP_SYS_NICE \
             (the shipped unit's AmbientCapabilities=) or LimitRTPRIO=99"
        ))
    }

    /// Whether every step that was asked for worked.
    pub fn all_ok(&self) -> bool {
        self.pinned.is_ok() && self.fifo.is_ok() && self.mlock.is_ok()
    }
}

impl fmt::Display for RealtimeReport {
    /// One line for the start-up log, e.g. `pinned to CPU 1, SCHED_FIFO
    /// priority 50, memory locked`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pinned {
            Ok(Some(core)) => write!(f, "pinned to CPU {core}")?,
            Ok(None) => f.write_str("not pinned")?,
            Err(_) => f.write_str("not pinned (failed)")?,
        }
        match &self.fifo {
            Ok(Some(prio)) => write!(f, ", SCHED_FIFO priority {prio}")?,
            Ok(None) => f.write_str(", SCHED_OTHER")?,
            Err(_) => f.write_str(", SCHED_OTHER (SCHED_FIFO failed)")?,
        }
        match &self.mlock {
            Ok(true) => f.write_str(", memory locked"),
            Ok(false) => f.write_str(", memory not locked"),
            Err(_) => f.write_str(", memory not locked (mlockall failed)"),
        }
    }
}

/// What the dispatcher thread asks of the OS (in the config file:
/// `daemon.dispatcher_core`, `daemon.realtime_priority`,
/// `daemon.lock_memory`; `startup` converts a `&DaemonConfig` into this).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DispatcherSetup {
    /// CPU to pin the dispatcher thread to; `None` = leave it unpinned.
    pub core: Option<usize>,
    /// `SCHED_FIFO` priority, `1..=99`; 0 = stay `SCHED_OTHER`.
    pub realtime_priority: u8,
    /// Whether to `mlockall(MCL_CURRENT | MCL_FUTURE)`.
    pub lock_memory: bool,
}

/// Applies what `setup` asks for, in this order: pin the calling thread
/// to `core`, lock memory (process-wide; done before going real-time so
/// the long page-in runs at normal priority), then switch the calling
/// thread to `SCHED_FIFO`. Call it *from the dispatcher thread*, before it
/// starts serving. A failed step does not stop the others.
///
/// Takes anything that converts into a [`DispatcherSetup`], so
/// `apply_dispatcher_setup(&config.daemon)` works as well.
pub fn apply_dispatcher_setup(setup: impl Into<DispatcherSetup>) -> RealtimeReport {
    let cfg: DispatcherSetup = setup.into();
    let pinned = match cfg.core {
        Some(core) => pin_current_thread(core).map(|()| Some(core)),
        None => Ok(None),
    };
    let mlock = if cfg.lock_memory {
        lock_all_memory().map(|()| true)
    } else {
        Ok(false)
    };
    let fifo = match cfg.realtime_priority {
        0 => Ok(None),
        prio => set_current_thread_fifo(prio).map(|()| Some(prio)),
    };
    RealtimeReport {
        pinned,
        fifo,
        mlock,
    }
}

// ---------------------------------------------------------------------------
// RLIMIT_NOFILE.

/// The open-file limit before and after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// Soft limit found at start (`None` = unlimited).
    pub before: Option<u64>,
    /// Soft limit now.
    pub now: Option<u64>,
    /// Hard limit (`None` = unlimited).
    pub hard: Option<u64>,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (systemd's default
/// soft limit is 1024, far below what `clients.max_clients` sessions need:
/// about four descriptors each). Never fails: if the raise is refused, the
/// soft limit stays and `now == before`.
pub fn raise_nofile_limit() -> NofileLimit {
    let old = rustix::process::getrlimit(Resource::Nofile);
    let mut now = old.current;
    if old.current != old.maximum {
        let want = rustix::process::Rlimit {
            current: old.maximum,
            maximum: old.maximum,
        };
        if rustix::process::setrlimit(Resource::Nofile, want).is_ok() {
            now = old.maximum;
        }
    }
    NofileLimit {
        before: old.current,
        now,
        hard: old.maximum,
    }
}

/// The gid of group `name`: a number is taken as it is, a name is looked
/// up with `getgrnam_r` (`/etc/group`, NSS). `None` when no such group.
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Some(gid);
    }
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: `group` is plain data the call fills; `buf` outlives the
        // call and its length is passed; `result` is a valid out pointer.
        // The strings the call points into `buf` are not used.
        let (rc, found) = unsafe {
            let mut group: libc::group = std::mem::zeroed();
            let mut result: *mut libc::group = std::ptr::null_mut();
            let rc = libc::getgrnam_r(
                cname.as_ptr(),
                &mut group,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            );
            (rc, (!result.is_null()).then_some(group.gr_gid))
        };
        if rc == libc::ERANGE && buf.len() < (1 << 22) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return if rc == 0 { found } else { None };
    }
}

/// The supplementary groups of the process at the other end of a connected
/// Unix socket, as they were when it connected (`SO_PEERGROUPS`, Linux
/// 4.13+). `SO_PEERCRED` gives only the primary gid.
pub fn peer_groups(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    loop {
        let mut len = libc::socklen_t::try_from(groups.len() * size_of::<libc::gid_t>())
            .unwrap_or(libc::socklen_t::MAX);
        // SAFETY: `groups` is a live buffer of `len` bytes the call fills
        // with gid_t values and `len` a valid in/out length; `fd` is a
        // borrowed open descriptor.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        // Too small: the kernel says how much it needs (NGROUPS_MAX is
        // 65536).
        if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= 65536 {
            groups.resize(n, 0);
            continue;
        }
        return Err(e);
    }
}

// ---------------------------------------------------------------------------
// systemd.

/// systemd's `sd_notify` protocol, for `Type=notify` units.
///
/// Built once at start-up with [`Systemd::from_env`]. When the daemon was
/// not started by systemd (`NOTIFY_SOCKET` unset) every method is a no-op
/// that returns `Ok`. The environment is left untouched (changing it in a
/// threaded process is unsound), so `NOTIFY_SOCKET` stays visible to child
/// processes; the daemon starts none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Systemd {
    enabled: bool,
    watchdog: Option<Duration>,
}

impl Systemd {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`.
    pub fn from_env() -> Self {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty());
        let mut usec = 0;
        let watchdog = if enabled && sd_notify::watchdog_enabled(false, &mut usec) {
            ping_interval(usec)
        } else {
            None
        };
        Self { enabled, watchdog }
    }

    /// A handle whose every method is a no-op (tests, `--foreground`).
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            watchdog: None,
        }
    }

    /// Whether the daemon was started by systemd with a notify socket.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// `READY=1`: start-up is complete and the socket is accepting.
    pub fn notify_ready(&self) -> Result<(), SysError> {
        self.send("READY=1", &[sd_notify::NotifyState::Ready])
    }

    /// `STATUS=...`: a one-line status shown by `systemctl status`.
    /// Newlines are replaced by spaces (each line of a notification is a
    /// separate assignment).
    pub fn notify_status(&self, status: &str) -> Result<(), SysError> {
        if !self.enabled {
            return Ok(());
        }
        let one_line = status.replace(['\n', '\r'], " ");
        self.send("STATUS=", &[sd_notify::NotifyState::Status(&one_line)])
    }

    /// `STOPPING=1`: shutdown has begun.
    pub fn notify_stopping(&self) -> Result<(), SysError> {
        self.send("STOPPING=1", &[sd_notify::NotifyState::Stopping])
    }

    /// How often to call [`Systemd::notify_watchdog`]: half the unit's
    /// `WatchdogSec=` (as systemd recommends), or `None` when the watchdog
    /// is off or the daemon was not started by systemd.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    /// `WATCHDOG=1`: the daemon is alive. Send it every
    /// [`Systemd::watchdog_interval`] from the loop whose liveness it
    /// proves; if systemd misses it for `WatchdogSec=`, it kills and
    /// restarts the daemon.
    pub fn notify_watchdog(&self) -> Result<(), SysError> {
        if self.watchdog.is_none() {
            return Ok(());
        }
        self.send("WATCHDOG=1", &[sd_notify::NotifyState::Watchdog])
    }

    fn send(
        &self,
        what: &'static str,
        state: &[sd_notify::NotifyState<'_>],
    ) -> Result<(), SysError> {
        if !self.enabled {
            return Ok(());
        }
        sd_notify::notify(false, state).map_err(|source| SysError::Notify { what, source })
    }
}

/// Half of `WATCHDOG_USEC`; `None` for 0 (watchdog off).
fn ping_interval(watchdog_usec: u64) -> Option<Duration> {
    (watchdog_usec > 0).then(|| Duration::from_micros(watchdog_usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's policy (without `SCHED_RESET_ON_FORK`) and
    /// priority.
    fn current_policy() -> (i32, i32) {
        // SAFETY: sched_getscheduler takes a pid and touches no memory.
        let policy = unsafe { libc::sched_getscheduler(0) };
        assert!(
            policy >= 0,
            "sched_getscheduler: {}",
            io::Error::last_os_error()
        );
        let mut param = libc::sched_param { sched_priority: -1 };
        // SAFETY: `param` is a valid sched_param the kernel writes into.
        let rc = unsafe { libc::sched_getparam(0, &mut param) };
        assert_eq!(rc, 0, "sched_getparam: {}", io::Error::last_os_error());
        (policy & !libc::SCHED_RESET_ON_FORK, param.sched_priority)
    }

    /// Puts the calling thread back to `SCHED_OTHER`.
    fn restore_other() {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is valid for the call and only read.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
        assert_eq!(
            rc,
            0,
            "restoring SCHED_OTHER: {}",
            io::Error::last_os_error()
        );
    }

    /// Runs `f` on a fresh thread, so affinity and policy changes cannot
    /// leak into the test harness's worker threads.
    fn on_fresh_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("test thread panicked")
    }

    #[test]
    fn cpu_list_formats_ranges() {
        let mut set = CpuSet::new();
        assert_eq!(cpu_list(&set), "none");
        for c in [0, 1, 2, 3, 6, 8, 9] {
            set.set(c);
        }
        assert_eq!(cpu_list(&set), "0-3,6,8-9");
        let mut one = CpuSet::new();
        one.set(5);
        assert_eq!(cpu_list(&one), "5");
    }

    #[test]
    fn pin_to_an_allowed_cpu_then_restore() {
        on_fresh_thread(|| {
            let original = rustix::thread::sched_getaffinity(None).unwrap();
            // CPU 0 on nearly every machine; the first allowed CPU in a
            // container restricted to others.
            let cpu = (0..CpuSet::MAX_CPU).find(|&c| original.is_set(c)).unwrap();
            pin_current_thread(cpu).unwrap();
            let now = rustix::thread::sched_getaffinity(None).unwrap();
            assert_eq!(now.count(), 1);
            assert!(now.is_set(cpu));
            assert_eq!(rustix::thread::sched_getcpu(), cpu);
            rustix::thread::sched_setaffinity(None, &original).unwrap();
            assert_eq!(rustix::thread::sched_getaffinity(None).unwrap(), original);
        });
    }

    #[test]
    fn pin_to_a_nonexistent_cpu_names_it_and_the_allowed_cpus() {
        on_fresh_thread(|| {
            let before = rustix::thread::sched_getaffinity(None).unwrap();
            let err = pin_current_thread(100_000).unwrap_err();
            let SysError::CpuUnavailable { core, allowed } = &err else {
                panic!("unexpected error: {err:?}");
            };
            assert_eq!(*core, 100_000);
            assert_eq!(*allowed, allowed_cpus());
            assert_ne!(allowed, "none");
            let msg = err.to_string();
            assert!(msg.contains("CPU 100000"), "{msg}");
            assert!(
                msg.contains(&format!("may only use CPUs {allowed}")),
                "{msg}"
            );
            assert!(msg.contains("daemon.dispatcher_core"), "{msg}");
            // Nothing changed.
            assert_eq!(rustix::thread::sched_getaffinity(None).unwrap(), before);
        });
    }

    #[test]
    fn pin_to_a_cpu_outside_the_mask_is_refused_by_the_kernel() {
        on_fresh_thread(|| {
            let mask = rustix::thread::sched_getaffinity(None).unwrap();
            // The highest CpuSet slot that is not allowed (CPU 1023 unless
            // the machine really has and allows it).
            let Some(cpu) = (0..CpuSet::MAX_CPU).rev().find(|&c| !mask.is_set(c)) else {
                return; // every slot allowed: nothing to test here
            };
            let err = pin_current_thread(cpu).unwrap_err();
            assert!(
                matches!(err, SysError::CpuUnavailable { core, .. } if core == cpu),
                "{err:?}"
            );
        });
    }

    #[test]
    fn fifo_outcome_matches_privilege() {
        const PRIO: u8 = 10;
        let outcome = on_fresh_thread(|| {
            assert_eq!(current_policy(), (libc::SCHED_OTHER, 0));
            let result = set_current_thread_fifo(PRIO);
            let policy = current_policy();
            if result.is_ok() {
                restore_other();
                assert_eq!(current_policy(), (libc::SCHED_OTHER, 0));
            }
            (result, policy)
        });
        let rtprio = rustix::process::getrlimit(Resource::Rtprio).current;
        // SAFETY: geteuid cannot fail and touches no memory.
        let euid = unsafe { libc::geteuid() };
        let privileged =
            has_capability(CAP_SYS_NICE) || rtprio.is_none_or(|l| l >= u64::from(PRIO));
        match outcome {
            (Ok(()), policy) => {
                assert!(
                    privileged,
                    "SCHED_FIFO worked without CAP_SYS_NICE (euid {euid})"
                );
                assert_eq!(policy, (libc::SCHED_FIFO, i32::from(PRIO)));
            }
            (Err(e @ SysError::FifoNotPermitted { .. }), policy) => {
                assert!(
                    !privileged,
                    "refused although privileged (euid {euid}): {e}"
                );
                assert_eq!(policy, (libc::SCHED_OTHER, 0), "a refusal changes nothing");
                let msg = e.to_string();
                assert!(msg.contains("needs CAP_SYS_NICE or root"), "{msg}");
                assert!(msg.contains("AmbientCapabilities=CAP_SYS_NICE"), "{msg}");
                assert!(msg.contains("daemon.realtime_priority = 0"), "{msg}");
            }
            (Err(e @ SysError::FifoNoRtBudget { .. }), _) => {
                // Privileged, but an RT-group-scheduling cgroup without budget.
                assert!(privileged, "{e}");
            }
            (Err(e), _) => panic!("unexpected SCHED_FIFO error (euid {euid}): {e:?}"),
        }
    }

    #[test]
    fn fifo_priority_out_of_range() {
        for prio in [0, 100, 255] {
            let err = set_current_thread_fifo(prio).unwrap_err();
            assert!(
                matches!(err, SysError::FifoPriority { priority, max: 99 } if priority == prio),
                "{err:?}"
            );
            assert!(err.to_string().contains("1..=99"), "{err}");
        }
    }

    #[test]
    fn mlock_outcome_matches_privilege() {
        let limit = rustix::process::getrlimit(Resource::Memlock).current;
        let privileged = has_capability(CAP_IPC_LOCK) || limit.is_none();
        if !privileged {
            // Refused before any syscall.
            let err = lock_all_memory().unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, SysError::MlockNotPermitted { .. }), "{err:?}");
            assert!(
                msg.contains("needs CAP_IPC_LOCK and LimitMEMLOCK=infinity"),
                "{msg}"
            );
            assert!(msg.contains("daemon.lock_memory = false"), "{msg}");
            return;
        }
        match lock_all_memory() {
            Ok(()) => {
                let status = std::fs::read_to_string("/proc/self/status").unwrap();
                let locked_kb: u64 = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmLck:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                    .unwrap();
                rustix::mm::munlockall().unwrap();
                assert!(locked_kb > 0, "mlockall succeeded but VmLck is 0");
            }
            // Privileged but the machine is short of RAM: still the right
            // classification.
            Err(SysError::MlockNoMemory { .. }) => {}
            Err(e) => panic!("mlockall failed although privileged: {e:?}"),
        }
    }

    #[test]
    fn cap_eff_parses_proc_status() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t0000000000804000\n";
        let mask = cap_eff(status).unwrap();
        assert_ne!(mask & (1 << CAP_IPC_LOCK), 0);
        assert_ne!(mask & (1 << CAP_SYS_NICE), 0);
        assert_eq!(mask & 1, 0);
        assert_eq!(cap_eff("Name:\tx\n"), None);
    }

    #[test]
    fn setup_not_requested_does_nothing() {
        let cfg = DispatcherSetup {
            core: None,
            realtime_priority: 0,
            lock_memory: false,
        };
        let report = on_fresh_thread(move || apply_dispatcher_setup(cfg));
        assert!(matches!(report.pinned, Ok(None)), "{report:?}");
        assert!(matches!(report.fifo, Ok(None)), "{report:?}");
        assert!(matches!(report.mlock, Ok(false)), "{report:?}");
        assert!(report.all_ok());
        assert!(report.warnings().is_empty());
        assert_eq!(
            report.to_string(),
            "not pinned, SCHED_OTHER, memory not locked"
        );
    }

    #[test]
    fn setup_reports_one_warning_per_failed_step() {
        let cfg = DispatcherSetup {
            core: Some(100_000),
            realtime_priority: 0,
            lock_memory: false,
        };
        let report = on_fresh_thread(move || apply_dispatcher_setup(cfg));
        assert!(!report.all_ok());
        let warnings = report.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("CPU 100000"), "{warnings:?}");
        assert!(
            report.to_string().starts_with("not pinned (failed)"),
            "{report}"
        );
    }

    #[test]
    fn setup_pins_when_asked() {
        let report = on_fresh_thread(|| {
            let cpu = rustix::thread::sched_getcpu();
            let cfg = DispatcherSetup {
                core: Some(cpu),
                realtime_priority: 0,
                lock_memory: false,
            };
            // This thread ends right after; its affinity goes with it.
            (apply_dispatcher_setup(cfg), cpu)
        });
        assert!(
            matches!(report.0.pinned, Ok(Some(c)) if c == report.1),
            "{:?}",
            report.0
        );
        assert!(report.0.warnings().is_empty());
    }

    #[test]
    fn warnings_include_the_os_error() {
        let report = RealtimeReport {
            pinned: Ok(None),
            fifo: Err(SysError::Fifo {
                priority: 5,
                source: io::Error::from_raw_os_error(libc::ESRCH),
            }),
            mlock: Ok(true),
        };
        let w = report.warnings();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("cannot make the dispatcher thread SCHED_FIFO priority 5"),
            "{w:?}"
        );
        assert!(
            w[0].ends_with(&io::Error::from_raw_os_error(libc::ESRCH).to_string()),
            "{w:?}"
        );
    }

    #[test]
    fn a_dispatcher_without_sched_fifo_gets_one_line_naming_cost_and_fix() {
        let off = RealtimeReport {
            pinned: Ok(None),
            fifo: Ok(None),
            mlock: Ok(false),
        };
        let w = off.cpu_warning().expect("priority 0 is warned about");
        assert!(!off.is_realtime());
        assert!(w.contains("daemon.realtime_priority = 0"), "{w}");
        assert!(w.contains("late"), "{w}");
        assert!(w.contains("fix: set daemon.realtime_priority = 50"), "{w}");
        assert!(!w.contains('\n'), "one line: {w}");
        let refused = RealtimeReport {
            pinned: Ok(None),
            fifo: Err(SysError::FifoNoRtBudget { priority: 50 }),
            mlock: Ok(false),
        };
        let w = refused.cpu_warning().unwrap();
        assert!(w.contains("SCHED_FIFO was refused"), "{w}");
        let on = RealtimeReport {
            pinned: Ok(None),
            fifo: Ok(Some(50)),
            mlock: Ok(false),
        };
        assert!(on.is_realtime());
        assert_eq!(on.cpu_warning(), None);
    }

    #[test]
    fn group_ids_by_number_and_name() {
        assert_eq!(group_id("0"), Some(0));
        assert_eq!(group_id("65534"), Some(65534));
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-sluice-test"), None);
    }

    #[test]
    fn the_nofile_soft_limit_is_raised_to_the_hard_limit() {
        // Process-wide; raising the soft limit up to a finite hard one is
        // always permitted (an unlimited hard limit cannot be the soft one).
        let n = raise_nofile_limit();
        assert_eq!(n.now, n.hard.or(n.now));
        let again = raise_nofile_limit();
        assert_eq!(again.before, again.now);
    }

    #[test]
    fn systemd_disabled_is_a_no_op() {
        let sd = Systemd::disabled();
        assert!(!sd.is_enabled());
        assert_eq!(sd.watchdog_interval(), None);
        sd.notify_ready().unwrap();
        sd.notify_status("serving 0 clients").unwrap();
        sd.notify_watchdog().unwrap();
        sd.notify_stopping().unwrap();
    }

    #[test]
    fn systemd_from_env_without_notify_socket_is_a_no_op() {
        if std::env::var_os("NOTIFY_SOCKET").is_some() {
            return; // running under systemd; covered by the child test
        }
        let sd = Systemd::from_env();
        assert_eq!(sd, Systemd::disabled());
        sd.notify_ready().unwrap();
        sd.notify_status("x").unwrap();
        sd.notify_watchdog().unwrap();
        sd.notify_stopping().unwrap();
    }

    #[test]
    fn watchdog_interval_is_half_the_period() {
        assert_eq!(ping_interval(5_000_000), Some(Duration::from_millis(2500)));
        assert_eq!(ping_interval(1), Some(Duration::ZERO));
        assert_eq!(ping_interval(0), None);
    }

    /// Env var that turns [`notify_child`] from a no-op into the sender.
    const CHILD_ENV: &str = "SLUICE_SYS_TEST_NOTIFY_CHILD";

    /// Run by [`notifications_reach_notify_socket`] in a child process whose
    /// environment has `NOTIFY_SOCKET` set; a no-op in a normal test run.
    #[test]
    fn notify_child() {
        if std::env::var_os(CHILD_ENV).is_none() {
            return;
        }
        let sd = Systemd::from_env();
        assert!(sd.is_enabled());
        // WATCHDOG_PID cannot name a process before it exists, so the
        // watchdog is off here.
        assert_eq!(sd.watchdog_interval(), None);
        sd.notify_status("loading\nmodels").unwrap();
        sd.notify_ready().unwrap();
        sd.notify_watchdog().unwrap(); // no-op: watchdog off
        sd.notify_stopping().unwrap();
    }

    #[test]
    fn notifications_reach_notify_socket() {
        use std::os::unix::net::UnixDatagram;
        use std::process::Command;

        let dir = std::env::temp_dir().join(format!("sluice-sys-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path).unwrap();
        // Watchdog against a hang, not a timing assertion.
        sock.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();

        let child = Command::new(std::env::current_exe().unwrap())
            .args(["sys::tests::notify_child", "--exact", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env("NOTIFY_SOCKET", &path)
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .output()
            .unwrap();
        if !child.status.success() {
            std::fs::remove_dir_all(&dir).unwrap();
            panic!(
                "child test failed: {}\n{}{}",
                child.status,
                String::from_utf8_lossy(&child.stdout),
                String::from_utf8_lossy(&child.stderr)
            );
        }
        // The child has exited, so everything it sent is queued.
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        for _ in 0..3 {
            let n = sock.recv(&mut buf).unwrap();
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            got,
            ["STATUS=loading models\n", "READY=1\n", "STOPPING=1\n"]
        );
    }
}
