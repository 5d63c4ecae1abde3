//! The daemon's TOML configuration and its validation.
//!
//! Every section and every key is optional; an empty file (or no file at
//! all, see [`Config::default`]) gives the documented defaults. Unknown
//! sections and keys are errors, so a misspelt key never silently falls back
//! to its default. `docs/configuration.md` documents every key and
//! `daemon/service/systemd/sluiced.toml` is the commented example installed as
//! `/etc/sluice/sluiced.toml`.
//!
//! Loading happens in two steps: serde reads the file into `Raw*` structs
//! whose numbers are plain `i64`/`f64` (so a wrong sign or a too-large value
//! reaches our own range check instead of a terse serde message), then
//! [`Config::from_toml_str`] checks every value and collects *all* problems
//! into one [`ConfigError::Invalid`], each naming the full key, the bad
//! value, what is allowed and what to write instead.
//!
//! Things that depend on the machine (whether `daemon.dispatcher_core`
//! exists, whether the process may use `SCHED_FIFO` or `mlockall`) are not
//! checked here but when they are applied, in [`crate::sys`].

use std::fmt;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use shm_proto::layout::{MAX_ARENA, MAX_ENTRIES, MIN_ENTRIES, PAGE};

mod cluster;
pub use cluster::{ClusterConfig, PlannerKind};

/// Where the system-wide daemon listens (root, or the systemd unit).
pub const SYSTEM_SOCKET: &str = "/run/sluice/sluiced.sock";

/// Longest path a Unix socket address can hold: `sun_path` is 108 bytes,
/// one of which is the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// Default `daemon.realtime_priority`.
pub const DEFAULT_REALTIME_PRIORITY: u8 = 50;
/// Default `daemon.idle_spin_us`.
pub const DEFAULT_IDLE_SPIN_US: u32 = 50;
/// Largest `daemon.idle_spin_us` (one second).
pub const MAX_IDLE_SPIN_US: u32 = 1_000_000;
/// Default `clients.max_clients`.
pub const DEFAULT_MAX_CLIENTS: usize = 64;
/// Largest `clients.max_clients`.
pub const MAX_CLIENTS: usize = 4096;
/// Default `clients.sq_entries` and `clients.cq_entries`.
pub const DEFAULT_ENTRIES: u32 = 256;
/// Default `clients.arena_bytes` (16 MiB).
pub const DEFAULT_ARENA_BYTES: u64 = 16 << 20;
/// Default `daemon.handshake_timeout_ms`.
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u32 = 2000;
/// Largest `daemon.handshake_timeout_ms` (one minute).
pub const MAX_HANDSHAKE_TIMEOUT_MS: u32 = 60_000;
/// Default `daemon.max_handshakes`.
pub const DEFAULT_MAX_HANDSHAKES: usize = 128;
/// Largest `daemon.max_handshakes`.
pub const MAX_HANDSHAKES: usize = 4096;
/// Default `clients.on_device_per_client`.
pub const DEFAULT_ON_DEVICE_PER_CLIENT: u32 = 1;
/// Largest `clients.max_in_flight_per_client` and
/// `clients.on_device_per_client` (the largest ring).
pub const MAX_PER_CLIENT: u32 = MAX_ENTRIES;
/// Largest `device.instances`.
pub const MAX_INSTANCES: usize = 16;
/// Largest `device.cpu_threads`.
pub const MAX_CPU_THREADS: usize = 64;
/// Largest `device.time_scale`.
pub const MAX_TIME_SCALE: f64 = 1000.0;

/// The whole configuration, validated. Build it with [`Config::load`],
/// [`Config::from_toml_str`] or [`Config::default`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// `[daemon]`: the process and its dispatcher thread.
    pub daemon: DaemonConfig,
    /// `[access]`: who may connect.
    pub access: AccessConfig,
    /// `[clients]`: per-client limits and shared-memory geometry.
    pub clients: ClientsConfig,
    /// `[device]`: the GPU backend.
    pub device: DeviceConfig,
    /// `[models]`: where model manifests come from.
    pub models: ModelsConfig,
    /// `[cluster]`: several GPUs, request rates, batching, partitions.
    pub cluster: ClusterConfig,
    /// `[metrics]`: the Prometheus endpoint.
    pub metrics: MetricsConfig,
}

/// `[metrics]`: the Prometheus endpoint (docs/metrics.md).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricsConfig {
    /// Where to serve `GET /metrics`; `None` (the default): no endpoint.
    pub listen: Option<MetricsListen>,
}

/// Where the metrics endpoint listens (`metrics.listen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsListen {
    /// A TCP address, `"127.0.0.1:9400"` or `"[::1]:9400"`; port 0 takes
    /// a free port (`sluice status` shows the one bound).
    Tcp(std::net::SocketAddr),
    /// A Unix socket, `"unix:/run/sluice/metrics.sock"` or the absolute
    /// path alone.
    Unix(PathBuf),
}

impl fmt::Display for MetricsListen {
    /// As written in the file: `127.0.0.1:9400` or `unix:/path`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "{a}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl MetricsListen {
    /// Parses a `metrics.listen` value; `Err` says what is wrong with it.
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        if let Some(path) = s.strip_prefix("unix:") {
            return if path.starts_with('/') && path.len() > 1 {
                Ok(Self::Unix(PathBuf::from(path)))
            } else {
                Err("is not an absolute socket path after `unix:`")
            };
        }
        if s.starts_with('/') {
            return if s.len() > 1 {
                Ok(Self::Unix(PathBuf::from(s)))
            } else {
                Err("is the root directory, not a socket path")
            };
        }
        s.parse::<std::net::SocketAddr>()
            .map(Self::Tcp)
            .map_err(|_| "is neither an IP address with a port nor a Unix socket path")
    }
}

/// `[daemon]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Path of the listening Unix socket (absolute). Default: see
    /// [`default_socket_path`].
    pub socket: PathBuf,
    /// CPU the dispatcher thread is pinned to; `None` = not pinned.
    pub dispatcher_core: Option<usize>,
    /// `SCHED_FIFO` priority of the dispatcher thread, `1..=99`; 0 = stay
    /// `SCHED_OTHER`. Default 50.
    pub realtime_priority: u8,
    /// Whether to `mlockall(MCL_CURRENT | MCL_FUTURE)`. Default true.
    pub lock_memory: bool,
    /// How long the dispatcher spins with no work before it parks, in µs
    /// (`0..=1_000_000`). Default 50.
    pub idle_spin_us: u32,
    /// Total time a connection has, from accept, to finish its first
    /// message (`Hello` or a status query), in ms (`10..=60_000`); then it
    /// is closed. Default 2000.
    pub handshake_timeout_ms: u32,
    /// Most connections at once that have not finished their first
    /// message (`1..=4096`); a new one beyond it closes the oldest.
    /// Default 128.
    pub max_handshakes: usize,
}

impl Default for DaemonConfig {
    /// All defaults, with the socket resolved for the current user.
    fn default() -> Self {
        Self {
            socket: current_user_socket_path(),
            dispatcher_core: None,
            realtime_priority: DEFAULT_REALTIME_PRIORITY,
            lock_memory: true,
            idle_spin_us: DEFAULT_IDLE_SPIN_US,
            handshake_timeout_ms: DEFAULT_HANDSHAKE_TIMEOUT_MS,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
        }
    }
}

/// `[access]`: which peers may connect, judged by their `SO_PEERCRED`
/// credentials. Root and the daemon's own uid are always allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessConfig {
    /// Peer uids allowed to connect. Default: none.
    pub allowed_uids: Vec<u32>,
    /// A peer whose primary gid or one of whose supplementary groups is
    /// listed is allowed. Default: none.
    pub allowed_gids: Vec<u32>,
    /// Group of the socket file (a name or a numeric gid); the socket is
    /// mode 0660, so only its owner, this group and root can connect at
    /// all. `None`: the daemon's own primary group.
    pub socket_group: Option<String>,
}

impl AccessConfig {
    /// Whether a peer with credentials `uid`/`gid` and supplementary
    /// `groups` may connect to a daemon running as `daemon_uid`. Root and
    /// `daemon_uid` always may.
    ///
    /// `gid` is the peer's primary gid as `SO_PEERCRED` reports it, `groups`
    /// its supplementary groups as `SO_PEERGROUPS` does (both as they were
    /// when it connected).
    pub fn allows(&self, uid: u32, gid: u32, groups: &[u32], daemon_uid: u32) -> bool {
        uid == 0
            || uid == daemon_uid
            || self.allowed_uids.contains(&uid)
            || self.allowed_gids.contains(&gid)
            || groups.iter().any(|g| self.allowed_gids.contains(g))
    }
}

/// `[clients]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientsConfig {
    /// Most clients connected at once, `1..=4096`. Default 64.
    pub max_clients: usize,
    /// Submission ring slots per client: a power of two in `2..=65536`.
    /// Default 256.
    pub sq_entries: u32,
    /// Completion ring slots per client: a power of two in `2..=65536`.
    /// Default 256.
    pub cq_entries: u32,
    /// Bytes of each client's tensor arena: a multiple of 4096 in
    /// `4096..=1 GiB`. Default 16 MiB.
    pub arena_bytes: u64,
    /// Most requests of one client the daemon holds at once (taken from its
    /// submission ring and not yet completed), `1..=65536`. `None` (the
    /// default): only the completion ring bounds it. Past the limit, the
    /// client's requests wait in its submission ring.
    pub max_in_flight_per_client: Option<u32>,
    /// Requests of one client per priority class that the device's
    /// scheduling policy sees at once, `1..=65536`; the others wait in the
    /// dispatcher and are handed on round robin
    /// ([`crate::backend::fair`]). Default 1.
    pub on_device_per_client: u32,
}

impl Default for ClientsConfig {
    fn default() -> Self {
        Self {
            max_clients: DEFAULT_MAX_CLIENTS,
            sq_entries: DEFAULT_ENTRIES,
            cq_entries: DEFAULT_ENTRIES,
            arena_bytes: DEFAULT_ARENA_BYTES,
            max_in_flight_per_client: None,
            on_device_per_client: DEFAULT_ON_DEVICE_PER_CLIENT,
        }
    }
}

/// A GPU backend the daemon can drive.
///
/// Every build accepts every name here; whether this build and machine can
/// drive the backend is decided by
/// [`choose_device`](crate::startup::choose_device), at start-up and by
/// `sluiced --check-config` alike: it refuses `cuda` in a build without the
/// `cuda` feature, and refuses it when no CUDA driver answers unless
/// `device.fallback = "sim"` ([`Fallback`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BackendKind {
    /// The embedded simulated GPU.
    #[default]
    Sim,
    /// An NVIDIA GPU through the CUDA driver API (cargo feature `cuda`;
    /// `docs/cuda-backend.md`).
    Cuda,
    /// The models' ONNX graphs on sluice's CPU executor, on
    /// `device.cpu_threads` worker threads (`docs/onnx.md`).
    Cpu,
}

impl BackendKind {
    /// Every backend name the config file accepts.
    pub const ALL: &'static [BackendKind] =
        &[BackendKind::Sim, BackendKind::Cuda, BackendKind::Cpu];

    /// The name used in the config file.
    pub const fn as_str(self) -> &'static str {
        match self {
            BackendKind::Sim => "sim",
            BackendKind::Cuda => "cuda",
            BackendKind::Cpu => "cpu",
        }
    }

    /// Whether this build includes the backend (`cuda` needs the cargo
    /// feature `cuda`).
    pub const fn is_built(self) -> bool {
        match self {
            BackendKind::Sim | BackendKind::Cpu => true,
            BackendKind::Cuda => cfg!(feature = "cuda"),
        }
    }

    /// Parses a config-file name; `None` for an unsupported backend.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|b| b.as_str() == name)
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the simulated device schedules requests (`device.scheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scheduler {
    /// The simple device: one request at a time, real-time first, no
    /// preemption, times scaled by `device.time_scale`.
    #[default]
    Fifo,
    /// The discrete-event GPU model of `device.profile`, scheduled by a
    /// policy (`seq`, `streams`, `wait-preempt`, `reef`, `paella`).
    Policy(sluice_sched::PolicyKind),
}

impl Scheduler {
    /// The name used in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::Policy(k) => k.as_str(),
        }
    }

    /// Parses a config-file name (`rt-only` is a benchmark reference and is
    /// refused: it drops best-effort work).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "fifo" => Some(Self::Fifo),
            "rt-only" => None,
            n => sluice_sched::PolicyKind::from_name(n).map(Self::Policy),
        }
    }

    /// Every name [`Scheduler::from_name`] accepts.
    pub fn names() -> Vec<&'static str> {
        let mut v = vec!["fifo"];
        v.extend(
            sluice_sched::PolicyKind::ALL
                .iter()
                .filter(|k| **k != sluice_sched::PolicyKind::RtOnly)
                .map(|k| k.as_str()),
        );
        v
    }
}

/// What `device.backend = "cuda"` does when no CUDA driver or device
/// answers (`device.fallback`).
///
/// It covers a machine without a usable driver only: a build without the
/// CUDA backend, or a CUDA device that is found but cannot be set up, is an
/// error whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fallback {
    /// `"none"`: refuse to start, naming the fix.
    #[default]
    None,
    /// `"sim"`: log one warning and serve the simulated GPU (the
    /// `device.scheduler` policy on the `device.profile` GPU model, with the
    /// same models the CUDA backend would serve).
    Sim,
}

impl Fallback {
    /// Every value the config file accepts.
    pub const ALL: &'static [Fallback] = &[Fallback::None, Fallback::Sim];

    /// The name used in the config file.
    pub const fn as_str(self) -> &'static str {
        match self {
            Fallback::None => "none",
            Fallback::Sim => "sim",
        }
    }

    /// Parses a config-file name; `None` for an unknown one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|f| f.as_str() == name)
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The config-file name of a model scale (`device.model_scale`).
pub const fn scale_name(scale: sluice_nn::builders::Scale) -> &'static str {
    match scale {
        sluice_nn::builders::Scale::Full => "full",
        sluice_nn::builders::Scale::Small => "small",
    }
}

/// `[device]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// Which backend. Default [`BackendKind::Sim`].
    pub backend: BackendKind,
    /// `cuda` backend: what to do when no CUDA driver answers. Default
    /// [`Fallback::None`] (refuse to start).
    pub fallback: Fallback,
    /// `fifo` scheduler only: multiplies every model time; finite, `> 0`,
    /// `<= 1000`. Default 1.0 (real time).
    pub time_scale: f64,
    /// How requests are scheduled. Default `fifo`.
    pub scheduler: Scheduler,
    /// GPU model profile for the policy schedulers (`mi50`, `gv100`,
    /// `h100`). Default `mi50`.
    pub profile: String,
    /// `cuda` backend: full-size models or the small test ones. Default
    /// full.
    pub model_scale: sluice_nn::builders::Scale,
    /// `cuda` backend: copies of each model loaded per priority class,
    /// `1..=16`. Default 1.
    pub instances: usize,
    /// `cpu` backend: worker threads running inferences,
    /// `1..=`[`MAX_CPU_THREADS`]. Default 1.
    pub cpu_threads: usize,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            backend: BackendKind::Sim,
            fallback: Fallback::None,
            time_scale: 1.0,
            scheduler: Scheduler::Fifo,
            profile: "mi50".to_owned(),
            model_scale: sluice_nn::builders::Scale::Full,
            instances: 1,
            cpu_threads: 1,
        }
    }
}

/// `[models]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelsConfig {
    /// Directory of model manifests; `None` = the models built into the
    /// binary. A relative path in the file is resolved against the
    /// directory holding the config file.
    pub dir: Option<PathBuf>,
}

/// The default `daemon.socket` for a process with effective uid `euid`
/// and the given `XDG_RUNTIME_DIR`:
///
/// - root (`euid == 0`): `/run/sluice/sluiced.sock`;
/// - otherwise, when `XDG_RUNTIME_DIR` is set to an absolute path:
///   `$XDG_RUNTIME_DIR/sluice/sluiced.sock`;
/// - otherwise `/tmp/sluice-<euid>/sluiced.sock`.
pub fn default_socket_path(euid: u32, xdg_runtime_dir: Option<&Path>) -> PathBuf {
    if euid == 0 {
        return PathBuf::from(SYSTEM_SOCKET);
    }
    match xdg_runtime_dir {
        Some(dir) if dir.is_absolute() => dir.join("sluice").join("sluiced.sock"),
        _ => PathBuf::from(format!("/tmp/sluice-{euid}/sluiced.sock")),
    }
}

/// [`default_socket_path`] for the calling process.
pub fn current_user_socket_path() -> PathBuf {
    let euid = rustix::process::geteuid().as_raw();
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    default_socket_path(euid, xdg.as_deref())
}

/// Why a configuration could not be loaded.
///
/// The messages name the file, the key and the value, and say what to do;
/// [`ConfigError::Read`] keeps the OS error as its `source()`, so print the
/// whole chain.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error(
        "cannot read the config file {}; check the path given to --config and that \
         the daemon's user may read it",
        path.display()
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The file is not valid TOML, has an unknown section or key, or a
    /// value of the wrong type. `message` is toml's own report, with the
    /// line, the column and the offending snippet.
    #[error("{}: {}{message}{}", origin.display(), key_prefix(key.as_deref()), parse_hint(message))]
    Parse {
        /// The file (or the name the caller gave the text).
        origin: PathBuf,
        /// The full key the problem is at (e.g. `clients.sq_entries`), when
        /// it could be worked out.
        key: Option<String>,
        /// 1-based line of the problem, when known.
        line: Option<usize>,
        /// 1-based column of the problem, when known.
        column: Option<usize>,
        /// toml's report.
        message: String,
    },
    /// Well-formed, but values are out of range. Lists every bad value.
    #[error("{}: {}", origin.display(), list_invalid(errors))]
    Invalid {
        /// The file (or the name the caller gave the text).
        origin: PathBuf,
        /// Every problem found, in file order of the keys.
        errors: Vec<InvalidValue>,
    },
}

/// One value that failed validation, e.g. `clients.sq_entries = 300 is not
/// a power of two; use 256 or 512`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value} {problem}; {fix}")]
pub struct InvalidValue {
    /// Full key, e.g. `clients.sq_entries` or `access.allowed_uids[2]`.
    pub key: String,
    /// The value as written (TOML syntax).
    pub value: String,
    /// What is wrong with it, e.g. `is not a power of two`.
    pub problem: String,
    /// What to write instead, e.g. `use 256 or 512`.
    pub fix: String,
}

fn key_prefix(key: Option<&str>) -> String {
    key.map(|k| format!("at {k}: ")).unwrap_or_default()
}

fn parse_hint(message: &str) -> &'static str {
    if message.contains("unknown field") {
        "\nfix: remove the key or correct its spelling; docs/configuration.md lists every \
         section and key"
    } else if message.contains("invalid type") {
        "\nfix: write the value with the type shown; docs/configuration.md gives every \
         key's type"
    } else {
        ""
    }
}

fn list_invalid(errors: &[InvalidValue]) -> String {
    match errors {
        [one] => one.to_string(),
        many => {
            let mut s = format!("{} invalid values:", many.len());
            for e in many {
                let _ = write!(s, "\n  {e}");
            }
            s
        }
    }
}

impl Config {
    /// Reads and validates the config file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml_str(&text, path)
    }

    /// Parses and validates `s`. `origin` names the text in error messages
    /// (normally the file it came from); a relative `models.dir` is resolved
    /// against `origin`'s directory.
    pub fn from_toml_str(s: &str, origin: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(s).map_err(|e| parse_error(s, origin, &e))?;
        let mut v = Validator::default();
        let config = Config {
            daemon: v.daemon(raw.daemon),
            access: v.access(raw.access),
            clients: v.clients(raw.clients),
            device: v.device(raw.device),
            models: v.models(raw.models, origin),
            cluster: v.cluster(raw.cluster),
            metrics: v.metrics(raw.metrics),
        };
        if v.errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid {
                origin: origin.to_owned(),
                errors: v.errors,
            })
        }
    }

    /// A human-readable summary of the effective configuration, one key per
    /// line, for `sluiced --check-config`. It is itself valid TOML that
    /// loads back to the same configuration; keys that are unset (and so
    /// cannot be written in TOML) appear as comments.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let d = &self.daemon;
        // `write!` to a String cannot fail.
        let _ = writeln!(s, "[daemon]");
        let _ = writeln!(s, "socket = {}", toml_string(&d.socket.to_string_lossy()));
        match d.dispatcher_core {
            Some(core) => {
                let _ = writeln!(
                    s,
                    "dispatcher_core = {core}  # dispatcher pinned to CPU {core}"
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "# dispatcher_core unset: the dispatcher thread is not pinned"
                );
            }
        }
        let rt = if d.realtime_priority == 0 {
            "# SCHED_OTHER (no real-time priority)".to_owned()
        } else {
            format!("# SCHED_FIFO priority {}", d.realtime_priority)
        };
        let _ = writeln!(s, "realtime_priority = {}  {rt}", d.realtime_priority);
        let lock = if d.lock_memory {
            "# mlockall(MCL_CURRENT | MCL_FUTURE)"
        } else {
            "# memory may be paged out"
        };
        let _ = writeln!(s, "lock_memory = {}  {lock}", d.lock_memory);
        let _ = writeln!(
            s,
            "idle_spin_us = {}  # spin this long with no work, then park",
            d.idle_spin_us
        );
        let _ = writeln!(
            s,
            "handshake_timeout_ms = {}  # from accept to the first message, in all",
            d.handshake_timeout_ms
        );
        let _ = writeln!(
            s,
            "max_handshakes = {}  # connections without a first message yet",
            d.max_handshakes
        );

        let a = &self.access;
        let _ = writeln!(
            s,
            "\n[access]  # root and the daemon's own uid are always allowed"
        );
        let _ = writeln!(s, "allowed_uids = {:?}", a.allowed_uids);
        let _ = writeln!(
            s,
            "allowed_gids = {:?}  # peer's primary gid",
            a.allowed_gids
        );
        match &a.socket_group {
            Some(g) => {
                let _ = writeln!(s, "socket_group = {}  # socket mode 0660", toml_string(g));
            }
            None => {
                let _ = writeln!(
                    s,
                    "# socket_group unset: socket mode 0660, the daemon's own group"
                );
            }
        }

        let c = &self.clients;
        let _ = writeln!(s, "\n[clients]");
        let _ = writeln!(s, "max_clients = {}", c.max_clients);
        let _ = writeln!(s, "sq_entries = {}  # submission ring slots", c.sq_entries);
        let _ = writeln!(s, "cq_entries = {}  # completion ring slots", c.cq_entries);
        let _ = writeln!(
            s,
            "arena_bytes = {}  # {} per client",
            c.arena_bytes,
            human_bytes(c.arena_bytes)
        );
        match c.max_in_flight_per_client {
            Some(n) => {
                let _ = writeln!(
                    s,
                    "max_in_flight_per_client = {n}  # more stay in the client's ring"
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "# max_in_flight_per_client unset: only cq_entries bounds a client's requests"
                );
            }
        }
        let _ = writeln!(
            s,
            "on_device_per_client = {}  # per class; the rest are handed on round robin",
            c.on_device_per_client
        );

        let dev = &self.device;
        let _ = writeln!(s, "\n[device]");
        let _ = writeln!(s, "backend = {}", toml_string(dev.backend.as_str()));
        let _ = writeln!(
            s,
            "fallback = {}  # cuda only: what to serve when no CUDA driver answers",
            toml_string(dev.fallback.as_str())
        );
        let _ = writeln!(
            s,
            "time_scale = {:?}  # model times multiplied by this (fifo only)",
            dev.time_scale
        );
        let _ = writeln!(s, "scheduler = {}", toml_string(dev.scheduler.as_str()));
        let _ = writeln!(s, "profile = {}", toml_string(&dev.profile));
        let _ = writeln!(
            s,
            "model_scale = {}  # cuda only: \"full\" or \"small\"",
            toml_string(scale_name(dev.model_scale))
        );
        let _ = writeln!(
            s,
            "instances = {}  # cuda only: copies of each model per priority class",
            dev.instances
        );
        let _ = writeln!(
            s,
            "cpu_threads = {}  # cpu only: worker threads running inferences",
            dev.cpu_threads
        );

        let _ = writeln!(s, "\n[models]");
        match &self.models.dir {
            Some(dir) => {
                let _ = writeln!(s, "dir = {}", toml_string(&dir.to_string_lossy()));
            }
            None => {
                let _ = writeln!(s, "# dir unset: the models built into the binary");
            }
        }
        self.cluster.render(&mut s);

        let _ = writeln!(s, "\n[metrics]");
        match &self.metrics.listen {
            Some(l) => {
                let _ = writeln!(
                    s,
                    "listen = {}  # GET /metrics, unauthenticated",
                    toml_string(&l.to_string())
                );
            }
            None => {
                let _ = writeln!(s, "# listen unset: no metrics endpoint");
            }
        }
        s
    }
}

/// `s` as a TOML basic string, quoted and escaped.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// `16777216` -> `16 MiB`; exact values only, else plain bytes.
fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if n >= size && n % size == 0 {
            return format!("{} {unit}", n / size);
        }
    }
    format!("{n} bytes")
}

// ---------------------------------------------------------------------------
// Parsing: toml + serde into raw structs.

/// An integer as written, whatever its sign or size; range checks come
/// later with messages that name the key. Its serde "expected" text reads
/// "an integer" rather than "i64".
#[derive(Debug, Clone, Copy, PartialEq)]
struct Int(i64);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Int;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int, E> {
                i64::try_from(v)
                    .map(Int)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
        }
        d.deserialize_i64(V)
    }
}

/// A number (TOML float or integer), for `device.time_scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Float(f64);

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Float;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number such as 1.0")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Float, E> {
                Ok(Float(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Float, E> {
                Ok(Float(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Float, E> {
                Ok(Float(v as f64))
            }
        }
        d.deserialize_f64(V)
    }
}

/// A list of uids or gids; its serde "expected" text reads "an array of
/// integers" rather than "a sequence".
#[derive(Debug, Clone, Default, PartialEq)]
struct IdList(Vec<Int>);

impl<'de> Deserialize<'de> for IdList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of integers such as [1000, 1001]")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<IdList, A::Error> {
                let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(id) = seq.next_element()? {
                    ids.push(id);
                }
                Ok(IdList(ids))
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the configuration, a TOML document")]
struct RawConfig {
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    access: RawAccess,
    #[serde(default)]
    clients: RawClients,
    #[serde(default)]
    device: RawDevice,
    #[serde(default)]
    models: RawModels,
    #[serde(default)]
    cluster: cluster::RawCluster,
    #[serde(default)]
    metrics: RawMetrics,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table ([metrics])")]
struct RawMetrics {
    listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table ([daemon])")]
struct RawDaemon {
    socket: Option<String>,
    dispatcher_core: Option<Int>,
    realtime_priority: Option<Int>,
    lock_memory: Option<bool>,
    idle_spin_us: Option<Int>,
    handshake_timeout_ms: Option<Int>,
    max_handshakes: Option<Int>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table ([access])")]
struct RawAccess {
    allowed_uids: Option<IdList>,
    allowed_gids: Option<IdList>,
    socket_group: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table ([clients])")]
struct RawClients {
    max_clients: Option<Int>,
    sq_entries: Option<Int>,
    cq_entries: Option<Int>,
    arena_bytes: Option<Int>,
    max_in_flight_per_client: Option<Int>,
    on_device_per_client: Option<Int>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table ([device])")]
struct RawDevice {
    backend: Option<String>,
    fallback: Option<String>,
    time_scale: Option<Float>,
    scheduler: Option<String>,
    profile: Option<String>,
    model_scale: Option<String>,
    instances: Option<Int>,
    cpu_threads: Option<Int>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table ([models])")]
struct RawModels {
    dir: Option<String>,
}

/// Turns toml's error into [`ConfigError::Parse`], working out the line,
/// the column and (for the flat layout this file uses) the full key.
fn parse_error(text: &str, origin: &Path, e: &toml::de::Error) -> ConfigError {
    let (line, column, key) = match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let before = &text[..start];
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before[line_start..].chars().count() + 1;
            (Some(line), Some(column), key_at(text, line_start))
        }
        None => (None, None, None),
    };
    ConfigError::Parse {
        origin: origin.to_owned(),
        key,
        line,
        column,
        message: e.to_string().trim_end().to_owned(),
    }
}

/// The full key defined on the line starting at byte `line_start`: the
/// table header itself (`[clients]` -> `clients`) or the last header plus
/// the bare key before `=` (`clients.sq_entries`). A line without `=`
/// inside a multi-line array belongs to the `key = [` line above it.
/// `None` when the text is not that simple (quoted or dotted keys, inline
/// tables, ...).
fn key_at(text: &str, line_start: usize) -> Option<String> {
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    if let Some(header) = table_header(line) {
        return Some(header.to_owned());
    }
    let mut above = text[..line_start].lines().rev();
    let key = match line.split_once('=') {
        Some((key, _)) => key.trim(),
        None => {
            // Continuation of a multi-line array: find its `key = [` line.
            let opening = above.find(|l| l.contains('=') || table_header(l.trim()).is_some())?;
            let (key, value) = opening.split_once('=')?;
            if !value.trim_start().starts_with('[') {
                return None;
            }
            key.trim()
        }
    };
    if !is_bare_key(key) {
        return None;
    }
    let section = above.find_map(|l| table_header(l.trim()));
    Some(match section {
        Some(section) => format!("{section}.{key}"),
        None => key.to_owned(),
    })
}

/// `[name]` (optionally followed by a comment) -> `name`, for a bare name.
fn table_header(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('[')?;
    if rest.starts_with('[') {
        return None;
    }
    let (name, _) = rest.split_once(']')?;
    let name = name.trim();
    is_bare_key(name).then_some(name)
}

fn is_bare_key(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

// ---------------------------------------------------------------------------
// Validation.

/// Collects every problem instead of stopping at the first.
#[derive(Debug, Default)]
struct Validator {
    errors: Vec<InvalidValue>,
}

impl Validator {
    fn fail(
        &mut self,
        key: impl Into<String>,
        value: impl fmt::Display,
        problem: &str,
        fix: String,
    ) {
        self.errors.push(InvalidValue {
            key: key.into(),
            value: value.to_string(),
            problem: problem.to_owned(),
            fix,
        });
    }

    /// `value` if it lies in `lo..=hi`, else records `fix` and returns `None`.
    fn in_range(&mut self, key: &str, value: Int, lo: i64, hi: i64, fix: &str) -> Option<i64> {
        if (lo..=hi).contains(&value.0) {
            Some(value.0)
        } else {
            self.fail(key, value.0, "is out of range", fix.to_owned());
            None
        }
    }

    fn daemon(&mut self, raw: RawDaemon) -> DaemonConfig {
        let mut d = DaemonConfig::default();
        if let Some(socket) = raw.socket {
            let path = PathBuf::from(&socket);
            if !path.is_absolute() {
                self.fail(
                    "daemon.socket",
                    toml_string(&socket),
                    "is not an absolute path",
                    format!("use an absolute path such as \"{SYSTEM_SOCKET}\""),
                );
            } else if socket.len() > MAX_SOCKET_PATH {
                self.fail(
                    "daemon.socket",
                    toml_string(&socket),
                    &format!(
                        "is {} bytes long, over the {MAX_SOCKET_PATH}-byte limit of a Unix \
                         socket path",
                        socket.len()
                    ),
                    format!("use a shorter path such as \"{SYSTEM_SOCKET}\""),
                );
            } else if socket.ends_with('/') {
                self.fail(
                    "daemon.socket",
                    toml_string(&socket),
                    "names a directory",
                    format!("name the socket file itself, e.g. \"{SYSTEM_SOCKET}\""),
                );
            } else {
                d.socket = path;
            }
        }
        if let Some(core) = raw.dispatcher_core {
            match usize::try_from(core.0) {
                Ok(core) => d.dispatcher_core = Some(core),
                Err(_) => self.fail(
                    "daemon.dispatcher_core",
                    core.0,
                    "is not a CPU number",
                    "use a CPU listed in /sys/devices/system/cpu/online (0, 1, ...), or remove \
                     the key to leave the dispatcher unpinned"
                        .to_owned(),
                ),
            }
        }
        if let Some(prio) = raw.realtime_priority {
            if let Some(p) = self.in_range(
                "daemon.realtime_priority",
                prio,
                0,
                99,
                "use 1..=99 for SCHED_FIFO (50 is a good start), or 0 to stay SCHED_OTHER",
            ) {
                d.realtime_priority = p as u8; // 0..=99 fits
            }
        }
        if let Some(lock) = raw.lock_memory {
            d.lock_memory = lock;
        }
        if let Some(spin) = raw.idle_spin_us {
            if let Some(s) = self.in_range(
                "daemon.idle_spin_us",
                spin,
                0,
                i64::from(MAX_IDLE_SPIN_US),
                "use 0 (park at once) to 1000000 (one second) microseconds",
            ) {
                d.idle_spin_us = s as u32; // 0..=1_000_000 fits
            }
        }
        if let Some(t) = raw.handshake_timeout_ms
            && let Some(t) = self.in_range(
                "daemon.handshake_timeout_ms",
                t,
                10,
                i64::from(MAX_HANDSHAKE_TIMEOUT_MS),
                "use 10 to 60000 milliseconds (2000 is the default)",
            )
        {
            d.handshake_timeout_ms = t as u32; // 10..=60_000 fits
        }
        if let Some(n) = raw.max_handshakes
            && let Some(n) = self.in_range(
                "daemon.max_handshakes",
                n,
                1,
                MAX_HANDSHAKES as i64,
                "use 1 to 4096 (128 is the default)",
            )
        {
            d.max_handshakes = n as usize; // 1..=4096 fits
        }
        d
    }

    fn ids(&mut self, key: &str, raw: Option<IdList>, fix: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        for (i, id) in raw.unwrap_or_default().0.into_iter().enumerate() {
            // u32::MAX is (uid_t)-1, "no id", never a real one.
            match u32::try_from(id.0) {
                Ok(v) if v != u32::MAX => ids.push(v),
                _ => self.fail(
                    format!("{key}[{i}]"),
                    id.0,
                    "is not a valid id",
                    fix.to_owned(),
                ),
            }
        }
        ids
    }

    fn access(&mut self, raw: RawAccess) -> AccessConfig {
        AccessConfig {
            allowed_uids: self.ids(
                "access.allowed_uids",
                raw.allowed_uids,
                "use a uid in 0..=4294967294 (`id -u NAME` prints a user's uid)",
            ),
            allowed_gids: self.ids(
                "access.allowed_gids",
                raw.allowed_gids,
                "use a gid in 0..=4294967294 (`getent group NAME` prints a group's gid)",
            ),
            socket_group: raw.socket_group.and_then(|g| {
                let ok = !g.is_empty()
                    && g.len() <= 256
                    && !g.contains(|c: char| c == ':' || c == '/' || c.is_control() || c == ' ');
                if !ok {
                    self.fail(
                        "access.socket_group",
                        toml_string(&g),
                        "is not a group name or number",
                        "name an existing group, e.g. \"sluice\" (`getent group sluice`), or a \
                         numeric gid such as \"998\""
                            .to_owned(),
                    );
                }
                ok.then_some(g)
            }),
        }
    }

    fn entries(&mut self, key: &str, raw: Option<Int>) -> Option<u32> {
        let v = raw?.0;
        let (lo, hi) = (i64::from(MIN_ENTRIES), i64::from(MAX_ENTRIES));
        let range = format!("a power of two from {MIN_ENTRIES} to {MAX_ENTRIES}");
        if v < lo {
            self.fail(
                key,
                v,
                "is too small",
                format!("use {range}, e.g. {DEFAULT_ENTRIES}"),
            );
            None
        } else if v > hi {
            self.fail(
                key,
                v,
                "is too large",
                format!("use {range}, e.g. {MAX_ENTRIES}"),
            );
            None
        } else {
            let v = v as u32; // MIN_ENTRIES..=MAX_ENTRIES fits
            if v.is_power_of_two() {
                Some(v)
            } else {
                let up = v.next_power_of_two();
                self.fail(
                    key,
                    v,
                    "is not a power of two",
                    format!("use {} or {up}", up / 2),
                );
                None
            }
        }
    }

    fn clients(&mut self, raw: RawClients) -> ClientsConfig {
        let mut c = ClientsConfig::default();
        if let Some(max) = raw.max_clients {
            if let Some(m) = self.in_range(
                "clients.max_clients",
                max,
                1,
                MAX_CLIENTS as i64,
                "use 1 to 4096",
            ) {
                c.max_clients = m as usize; // 1..=4096 fits
            }
        }
        if let Some(sq) = self.entries("clients.sq_entries", raw.sq_entries) {
            c.sq_entries = sq;
        }
        if let Some(cq) = self.entries("clients.cq_entries", raw.cq_entries) {
            c.cq_entries = cq;
        }
        if let Some(arena) = raw.arena_bytes {
            let v = arena.0;
            let key = "clients.arena_bytes";
            let range = format!("a multiple of {PAGE} from {PAGE} to {MAX_ARENA} (1 GiB)");
            if v < PAGE as i64 {
                self.fail(
                    key,
                    v,
                    "is too small",
                    format!("use {range}, e.g. {DEFAULT_ARENA_BYTES} (16 MiB)"),
                );
            } else if v > MAX_ARENA as i64 {
                self.fail(key, v, "is too large", format!("use {range}"));
            } else if v as u64 % PAGE != 0 {
                let down = v as u64 / PAGE * PAGE;
                self.fail(
                    key,
                    v,
                    &format!("is not a multiple of {PAGE} (the page size)"),
                    format!("use {down} or {}", down + PAGE),
                );
            } else {
                c.arena_bytes = v as u64;
            }
        }
        c.max_in_flight_per_client = self.per_client(
            "clients.max_in_flight_per_client",
            raw.max_in_flight_per_client,
            "or remove the key to let the completion ring alone bound it",
        );
        if let Some(n) = self.per_client(
            "clients.on_device_per_client",
            raw.on_device_per_client,
            "1 isolates clients of a class best",
        ) {
            c.on_device_per_client = n;
        }
        c
    }

    /// A per-client request count, `1..=MAX_PER_CLIENT`.
    fn per_client(&mut self, key: &str, raw: Option<Int>, hint: &str) -> Option<u32> {
        let v = self.in_range(
            key,
            raw?,
            1,
            i64::from(MAX_PER_CLIENT),
            &format!("use 1 to {MAX_PER_CLIENT}; {hint}"),
        )?;
        Some(v as u32) // 1..=MAX_PER_CLIENT fits
    }

    fn device(&mut self, raw: RawDevice) -> DeviceConfig {
        let mut d = DeviceConfig::default();
        let scheduler_given = raw.scheduler.is_some();
        if let Some(name) = raw.backend {
            match BackendKind::from_name(&name) {
                Some(b) => d.backend = b,
                None => {
                    let supported: Vec<String> = BackendKind::ALL
                        .iter()
                        .map(|b| toml_string(b.as_str()))
                        .collect();
                    self.fail(
                        "device.backend",
                        toml_string(&name),
                        "is not a supported backend",
                        format!("use one of: {}", supported.join(", ")),
                    );
                }
            }
        }
        if let Some(name) = raw.fallback {
            match Fallback::from_name(&name) {
                Some(f) => d.fallback = f,
                None => self.fail(
                    "device.fallback",
                    toml_string(&name),
                    "is not a fallback",
                    "use \"none\" (refuse to start when no CUDA driver answers) or \"sim\" \
                     (serve the simulated GPU instead)"
                        .to_owned(),
                ),
            }
        }
        if let Some(name) = raw.scheduler {
            match Scheduler::from_name(&name) {
                Some(sch) => d.scheduler = sch,
                None => {
                    let names: Vec<String> =
                        Scheduler::names().iter().map(|n| toml_string(n)).collect();
                    self.fail(
                        "device.scheduler",
                        toml_string(&name),
                        "is not a scheduler the daemon can run",
                        format!("use one of: {}", names.join(", ")),
                    );
                }
            }
        }
        if let Some(name) = raw.profile {
            if sluice_gpu::DeviceProfile::builtin(&name).is_ok() {
                d.profile = name;
            } else {
                let names: Vec<String> = sluice_gpu::DeviceProfile::builtin_names()
                    .map(toml_string)
                    .collect();
                self.fail(
                    "device.profile",
                    toml_string(&name),
                    "is not a built-in GPU profile",
                    format!("use one of: {}", names.join(", ")),
                );
            }
        }
        if let Some(name) = raw.model_scale {
            match name.as_str() {
                "full" => d.model_scale = sluice_nn::builders::Scale::Full,
                "small" => d.model_scale = sluice_nn::builders::Scale::Small,
                _ => self.fail(
                    "device.model_scale",
                    toml_string(&name),
                    "is not a model scale",
                    "use \"full\" (the real models) or \"small\" (shrunk test models)".to_owned(),
                ),
            }
        }
        if let Some(n) = raw.instances
            && let Some(n) = self.in_range(
                "device.instances",
                n,
                1,
                MAX_INSTANCES as i64,
                "use 1 to 16 copies of each model per priority class",
            )
        {
            d.instances = n as usize; // 1..=16 fits
        }
        if let Some(n) = raw.cpu_threads
            && let Some(n) = self.in_range(
                "device.cpu_threads",
                n,
                1,
                MAX_CPU_THREADS as i64,
                "use 1 to 64 worker threads (each runs one inference at a time; the CPU \
                 executor's matrix products use every core on their own)",
            )
        {
            d.cpu_threads = n as usize; // 1..=64 fits
        }
        match (d.backend, scheduler_given, d.scheduler) {
            // The CUDA backend runs policies only; `reef` unless told.
            (BackendKind::Cuda, false, _) => {
                d.scheduler = Scheduler::Policy(sluice_sched::PolicyKind::Reef);
            }
            (BackendKind::Cuda, true, Scheduler::Fifo) => self.fail(
                "device.scheduler",
                "\"fifo\"".to_owned(),
                "is the simulated device's own scheduler, which the cuda backend does not have",
                "use one of \"reef\" (default for cuda), \"streams\", \"seq\", \"wait-preempt\", \
                 \"paella\", or set device.backend = \"sim\""
                    .to_owned(),
            ),
            _ => {}
        }
        if let Some(Float(scale)) = raw.time_scale {
            if scale.is_finite() && scale > 0.0 && scale <= MAX_TIME_SCALE {
                d.time_scale = scale;
            } else {
                self.fail(
                    "device.time_scale",
                    format!("{scale:?}"),
                    "is out of range",
                    "use a finite number greater than 0 and at most 1000 (1.0 = real time, \
                     2.0 = twice as slow)"
                        .to_owned(),
                );
            }
        }
        d
    }

    fn metrics(&mut self, raw: RawMetrics) -> MetricsConfig {
        let Some(listen) = raw.listen else {
            return MetricsConfig::default();
        };
        match MetricsListen::parse(&listen) {
            Ok(l) => MetricsConfig { listen: Some(l) },
            Err(problem) => {
                self.fail(
                    "metrics.listen",
                    toml_string(&listen),
                    problem,
                    "write \"127.0.0.1:9400\" (an IP address and a port; 0 takes a free \
                     port), \"unix:/run/sluice/metrics.sock\" or an absolute socket path, \
                     or remove the key for no endpoint"
                        .to_owned(),
                );
                MetricsConfig::default()
            }
        }
    }

    fn models(&mut self, raw: RawModels, origin: &Path) -> ModelsConfig {
        let Some(dir) = raw.dir else {
            return ModelsConfig::default();
        };
        if dir.is_empty() {
            self.fail(
                "models.dir",
                "\"\"",
                "is empty",
                "give the directory of model manifests, or remove the key to use the models \
                 built into the binary"
                    .to_owned(),
            );
            return ModelsConfig::default();
        }
        let dir = PathBuf::from(dir);
        let dir = match origin.parent() {
            Some(base) if dir.is_relative() => base.join(dir),
            _ => dir,
        };
        ModelsConfig { dir: Some(dir) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "/etc/sluice/sluiced.toml";

    fn load(s: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(s, Path::new(ORIGIN))
    }

    /// The single validation error `s` produces.
    fn invalid(s: &str) -> InvalidValue {
        match load(s) {
            Err(ConfigError::Invalid { errors, .. }) if errors.len() == 1 => {
                errors.into_iter().next().unwrap()
            }
            other => panic!("expected exactly one invalid value for {s:?}, got {other:?}"),
        }
    }

    fn parse_err(s: &str) -> (Option<String>, Option<usize>, Option<usize>, String) {
        match load(s) {
            Err(e @ ConfigError::Parse { .. }) => {
                let text = e.to_string();
                let ConfigError::Parse {
                    key, line, column, ..
                } = e
                else {
                    unreachable!()
                };
                (key, line, column, text)
            }
            other => panic!("expected a parse error for {s:?}, got {other:?}"),
        }
    }

    #[test]
    fn empty_file_gives_the_defaults() {
        let c = load("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.daemon.socket, current_user_socket_path());
        assert_eq!(c.daemon.dispatcher_core, None);
        assert_eq!(c.daemon.realtime_priority, 50);
        assert!(c.daemon.lock_memory);
        assert_eq!(c.daemon.idle_spin_us, 50);
        assert!(c.access.allowed_uids.is_empty());
        assert!(c.access.allowed_gids.is_empty());
        assert_eq!(c.clients.max_clients, 64);
        assert_eq!(c.clients.sq_entries, 256);
        assert_eq!(c.clients.cq_entries, 256);
        assert_eq!(c.clients.arena_bytes, 16 * 1024 * 1024);
        assert_eq!(c.device.backend, BackendKind::Sim);
        assert_eq!(c.device.time_scale, 1.0);
        assert_eq!(c.models.dir, None);
    }

    #[test]
    fn empty_sections_give_the_defaults() {
        let c = load("[daemon]\n[access]\n[clients]\n[device]\n[models]\n").unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn default_socket_follows_user_and_xdg_runtime_dir() {
        let xdg = Path::new("/run/user/1000");
        assert_eq!(
            default_socket_path(0, Some(xdg)),
            Path::new("/run/sluice/sluiced.sock")
        );
        assert_eq!(
            default_socket_path(0, None),
            Path::new("/run/sluice/sluiced.sock")
        );
        assert_eq!(
            default_socket_path(1000, Some(xdg)),
            Path::new("/run/user/1000/sluice/sluiced.sock")
        );
        assert_eq!(
            default_socket_path(1000, None),
            Path::new("/tmp/sluice-1000/sluiced.sock")
        );
        // A relative XDG_RUNTIME_DIR is invalid per the XDG spec and ignored.
        assert_eq!(
            default_socket_path(1000, Some(Path::new("run"))),
            Path::new("/tmp/sluice-1000/sluiced.sock")
        );
    }

    #[test]
    fn every_key_is_read() {
        let c = load(
            r#"
            [daemon]
            socket = "/run/sluice/test.sock"
            dispatcher_core = 3
            realtime_priority = 99
            lock_memory = false
            idle_spin_us = 1000000
            [access]
            allowed_uids = [1000, 1001]
            allowed_gids = [27]
            [clients]
            max_clients = 4096
            sq_entries = 2
            cq_entries = 65536
            arena_bytes = 1073741824
            [device]
            backend = "sim"
            time_scale = 0.5
            [models]
            dir = "/opt/models"
            "#,
        )
        .unwrap();
        assert_eq!(c.daemon.socket, Path::new("/run/sluice/test.sock"));
        assert_eq!(c.daemon.dispatcher_core, Some(3));
        assert_eq!(c.daemon.realtime_priority, 99);
        assert!(!c.daemon.lock_memory);
        assert_eq!(c.daemon.idle_spin_us, 1_000_000);
        assert_eq!(c.access.allowed_uids, [1000, 1001]);
        assert_eq!(c.access.allowed_gids, [27]);
        assert_eq!(c.clients.max_clients, 4096);
        assert_eq!(c.clients.sq_entries, 2);
        assert_eq!(c.clients.cq_entries, 65536);
        assert_eq!(c.clients.arena_bytes, 1 << 30);
        assert_eq!(c.device.time_scale, 0.5);
        assert_eq!(c.models.dir.as_deref(), Some(Path::new("/opt/models")));
    }

    #[test]
    fn example_config_parses_cleanly() {
        let example = include_str!("../systemd/sluiced.toml");
        let c = Config::from_toml_str(example, Path::new("daemon/service/systemd/sluiced.toml"))
            .unwrap();
        // The installed example is meant for the systemd unit: the system
        // socket (RuntimeDirectory=sluice) and CPUAffinity=1.
        assert_eq!(c.daemon.socket, Path::new(SYSTEM_SOCKET));
        assert_eq!(c.daemon.dispatcher_core, Some(1));
        // Everything else it sets is the documented default.
        let defaults = Config::default();
        assert_eq!(
            c.daemon.realtime_priority,
            defaults.daemon.realtime_priority
        );
        assert_eq!(c.daemon.lock_memory, defaults.daemon.lock_memory);
        assert_eq!(c.daemon.idle_spin_us, defaults.daemon.idle_spin_us);
        assert_eq!(c.access, defaults.access);
        assert_eq!(c.clients, defaults.clients);
        assert_eq!(c.device, defaults.device);
        assert_eq!(c.models, defaults.models);
    }

    /// Every key path (`section.key`) the file format accepts, read off the
    /// `Raw*` structs' own serde field lists (a [`Deserializer`] that walks
    /// each struct's fields and answers "absent" for every leaf), so a key
    /// added to them is listed here with no list to keep in step.
    fn accepted_keys() -> Vec<String> {
        let mut keys = Vec::new();
        RawConfig::deserialize(KeyTracer {
            path: String::new(),
            keys: &mut keys,
        })
        .unwrap();
        keys
    }

    /// Walks the `Raw*` structs: a struct is visited field by field, an
    /// optional leaf is recorded under its full path and reported absent.
    struct KeyTracer<'a> {
        path: String,
        keys: &'a mut Vec<String>,
    }

    #[derive(Debug)]
    struct TraceError(String);

    impl fmt::Display for TraceError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for TraceError {}

    impl de::Error for TraceError {
        fn custom<T: fmt::Display>(msg: T) -> Self {
            Self(msg.to_string())
        }
    }

    impl<'de> Deserializer<'de> for KeyTracer<'_> {
        type Error = TraceError;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, TraceError> {
            Err(TraceError(format!(
                "{} is neither a table nor an optional key",
                self.path
            )))
        }

        fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
            self.keys.push(self.path);
            v.visit_none()
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            v: V,
        ) -> Result<V::Value, TraceError> {
            v.visit_map(FieldWalk {
                prefix: self.path,
                fields: fields.iter(),
                current: "",
                keys: self.keys,
            })
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf unit unit_struct newtype_struct seq tuple tuple_struct
            map enum identifier ignored_any
        }
    }

    struct FieldWalk<'a> {
        prefix: String,
        fields: std::slice::Iter<'static, &'static str>,
        current: &'static str,
        keys: &'a mut Vec<String>,
    }

    impl<'de> de::MapAccess<'de> for FieldWalk<'_> {
        type Error = TraceError;

        fn next_key_seed<K: de::DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, TraceError> {
            let Some(&field) = self.fields.next() else {
                return Ok(None);
            };
            self.current = field;
            seed.deserialize(de::value::BorrowedStrDeserializer::<TraceError>::new(field))
                .map(Some)
        }

        fn next_value_seed<V: de::DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, TraceError> {
            let path = if self.prefix.is_empty() {
                self.current.to_owned()
            } else {
                format!("{}.{}", self.prefix, self.current)
            };
            seed.deserialize(KeyTracer {
                path,
                keys: &mut *self.keys,
            })
        }
    }

    #[test]
    fn accepted_keys_are_read_off_the_raw_structs() {
        let keys = accepted_keys();
        for key in [
            "daemon.socket",
            "daemon.idle_spin_us",
            "access.allowed_gids",
            "clients.arena_bytes",
            "device.backend",
            "device.fallback",
            "device.model_scale",
            "device.instances",
            "models.dir",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
        }
        // Each one is a key the loader knows (a misspelt one is refused).
        for key in &keys {
            let (section, name) = key.split_once('.').unwrap();
            let probe = format!("[{section}]\n{name} = \"?\"\n");
            if let Err(e @ ConfigError::Parse { .. }) = load(&probe) {
                assert!(!e.to_string().contains("unknown field"), "{key}: {e}");
            }
        }
    }

    /// The shipped example lists every key the format accepts, set or
    /// commented out (`# key = ...`), under its own section.
    #[test]
    fn example_config_lists_every_key() {
        let example = include_str!("../systemd/sluiced.toml");
        let mut missing = Vec::new();
        for key in accepted_keys() {
            let (section, name) = key.split_once('.').unwrap();
            let listed = example
                .split("\n[")
                .skip(1)
                .filter(|part| part.starts_with(&format!("{section}]")))
                .flat_map(str::lines)
                .map(|l| l.trim_start_matches('#').trim_start())
                .any(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.trim_start().starts_with('='))
                });
            if !listed {
                missing.push(key);
            }
        }
        assert!(
            missing.is_empty(),
            "daemon/service/systemd/sluiced.toml does not list {missing:?}; add each, with \
             its default and what it does"
        );
    }

    #[test]
    fn summary_round_trips() {
        let configs = [
            Config::default(),
            load(
                "[daemon]\nsocket = \"/run/a \\\"b\\\".sock\"\ndispatcher_core = 2\n\
                 realtime_priority = 0\nlock_memory = false\n[access]\nallowed_uids = [5]\n\
                 [clients]\narena_bytes = 8192\n[device]\ntime_scale = 3\n\
                 [models]\ndir = \"/m\"\n",
            )
            .unwrap(),
            load(
                "[cluster]\ngpus = [\"h100\", \"h100\"]\nplanner = \"sbp\"\n\
                 models = [\"resnet18\"]\nslo_ms = 40\nreplan_ms = 0\nbatches = [1, 4]\n\
                 partition_step_pct = 25\n[cluster.slo_ms_per_model]\nresnet18 = 12.5\n",
            )
            .unwrap(),
            load(
                "[cluster]\ngpus = [\"mi50\"]\nplanner = \"gpulet+int\"\n\
                 interference_data = \"/data/gpulet/2080ti\"\npartition_sizes = \"gpulet\"\n\
                 scaling = true\nburst_overflow = 0.01\n[cluster.util_names]\nresnet50 = \"resnet50\"\n",
            )
            .unwrap(),
            load("[metrics]\nlisten = \"127.0.0.1:9400\"\n").unwrap(),
            load("[metrics]\nlisten = \"unix:/run/sluice/metrics.sock\"\n").unwrap(),
        ];
        for c in configs {
            let summary = c.summary();
            let back = Config::from_toml_str(&summary, Path::new("summary"))
                .unwrap_or_else(|e| panic!("summary does not load back: {e}\n{summary}"));
            assert_eq!(back, c, "{summary}");
        }
        let s = Config::default().summary();
        assert!(s.contains("not pinned"), "{s}");
        assert!(s.contains("SCHED_FIFO priority 50"), "{s}");
        assert!(s.contains("16 MiB"), "{s}");
        assert!(s.contains("built into the binary"), "{s}");
    }

    #[test]
    fn metrics_listen_takes_an_address_or_a_socket_path() {
        assert_eq!(Config::default().metrics.listen, None);
        let cases = [
            (
                "127.0.0.1:9400",
                MetricsListen::Tcp("127.0.0.1:9400".parse().unwrap()),
            ),
            ("[::1]:0", MetricsListen::Tcp("[::1]:0".parse().unwrap())),
            (
                "unix:/run/sluice/metrics.sock",
                MetricsListen::Unix("/run/sluice/metrics.sock".into()),
            ),
            ("/tmp/m.sock", MetricsListen::Unix("/tmp/m.sock".into())),
        ];
        for (text, want) in cases {
            let c = load(&format!("[metrics]\nlisten = {text:?}\n")).unwrap();
            assert_eq!(c.metrics.listen.as_ref(), Some(&want), "{text}");
            // Written back as loaded.
            let back = want.to_string();
            assert_eq!(MetricsListen::parse(&back), Ok(want), "{back}");
        }
        for bad in [
            "",
            "localhost:9400",
            "127.0.0.1",
            "127.0.0.1:99999",
            "unix:",
            "unix:relative.sock",
            "/",
            ":9400",
        ] {
            let e = invalid(&format!("[metrics]\nlisten = {bad:?}\n"));
            assert_eq!(e.key, "metrics.listen", "{bad:?}");
            assert_eq!(e.value, format!("{bad:?}"), "the value as written");
            assert!(e.fix.contains("127.0.0.1:9400"), "{e}");
        }
        match load("[metrics]\nport = 9400\n") {
            Err(ConfigError::Parse { message, .. }) => {
                assert!(message.contains("unknown field"), "{message}")
            }
            other => panic!("an unknown [metrics] key must be refused: {other:?}"),
        }
        match load("[metrics]\nlisten = 9400\n") {
            Err(ConfigError::Parse { message, .. }) => {
                assert!(message.contains("invalid type"), "{message}")
            }
            other => panic!("a number is not an address: {other:?}"),
        }
    }

    #[test]
    fn cluster_keys_load_and_bad_values_name_the_fix() {
        let c = load("[cluster]\ngpus = [\"mi50\", \"mi50\"]\n").unwrap();
        assert!(c.cluster.enabled());
        assert_eq!(c.cluster.planner, PlannerKind::Greedy);
        assert_eq!(c.cluster.slo_of("anything"), 100.0);
        assert!(!Config::default().cluster.enabled());
        for (text, key, fix) in [
            ("gpus = [\"mi51\"]", "cluster.gpus", "\"mi50\""),
            (
                "gpus = [\"cuda:0\"]",
                "cluster.gpus",
                "simulated device profiles",
            ),
            ("planner = \"best\"", "cluster.planner", "\"gpulet\""),
            ("slo_ms = 0", "cluster.slo_ms", "greater than 0"),
            ("batches = [4, 2]", "cluster.batches", "ascending"),
            (
                "partition_step_pct = 30",
                "cluster.partition_step_pct",
                "divisor of 100",
            ),
            ("headroom = 0.5", "cluster.headroom", "from 1 to 10"),
            ("burst_overflow = 1.0", "cluster.burst_overflow", "0.01"),
            ("models = [\"a\", \"a\"]", "cluster.models", "once"),
            (
                "[cluster.slo_ms_per_model]\nx = -1",
                "cluster.slo_ms_per_model.x",
                "milliseconds",
            ),
        ] {
            let e = load(&format!("[cluster]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains(fix), "{text}: {e}");
        }
    }

    #[test]
    fn gpulet_int_scaling_and_partition_size_keys_load_and_bad_values_name_the_fix() {
        let c = load(
            "[cluster]\ngpus = [\"mi50\", \"mi50\"]\nplanner = \"gpulet+int\"\n\
             interference_data = \"/d/2080ti\"\npartition_sizes = \"gpulet\"\nscaling = true\n\
             [cluster.util_names]\nresnet50 = \"resnet50\"\nvgg = \"vgg16\"\n",
        )
        .unwrap()
        .cluster;
        assert_eq!(c.planner, PlannerKind::GpuletInt);
        assert_eq!(c.planner.as_str(), "gpulet+int");
        assert_eq!(c.interference_data.as_deref(), Some(Path::new("/d/2080ti")));
        assert_eq!(c.partition_sizes, Some(vec![20, 40, 50, 60, 80, 100]));
        assert!(c.scaling);
        assert_eq!(c.burst_overflow, None);
        let q = load("[cluster]\ngpus = [\"mi50\"]\nburst_overflow = 0.01\n").unwrap();
        assert_eq!(q.cluster.burst_overflow, Some(0.01));
        assert_eq!(c.util_names["vgg"], "vgg16");
        let c = load(
            "[cluster]\ngpus = [\"a100\", \"a100\", \"a100\", \"a100\"]\nplanner = \"inss\"\n\
             inss_agents = \"agents/inss\"\n",
        )
        .unwrap()
        .cluster;
        assert_eq!(c.planner, PlannerKind::Inss);
        assert_eq!(c.planner.as_str(), "inss");
        assert_eq!(c.inss_agents.as_deref(), Some(Path::new("agents/inss")));
        let c = load(
            "[cluster]\ngpus = [\"mi50\"]\npartition_sizes = [25, 50, 100]\n\
             partition_step_pct = 25\n",
        )
        .unwrap()
        .cluster;
        assert_eq!(c.partition_sizes, Some(vec![25, 50, 100]));
        // Keys only the cluster backend reads, with no GPU listed: refused,
        // not ignored (found by fuzzing: `--check-config` could not show
        // them, so its summary did not load back to the same config).
        for text in [
            "[cluster]\nslo_ms_per_model = { resnet18 = 50 }\n",
            "[cluster]\ngpus = []\nscaling = true\n",
        ] {
            let e = load(text).unwrap_err().to_string();
            assert!(
                e.contains("cluster.gpus") && e.contains("would be ignored"),
                "{text}: {e}"
            );
        }
        // An empty [cluster], or one that only repeats defaults, is fine.
        assert!(!load("[cluster]\n").unwrap().cluster.enabled());
        assert!(
            !load("[cluster]\nplanner = \"greedy\"\n")
                .unwrap()
                .cluster
                .enabled()
        );
        // Defaults: the grid, every GPU, no interference data.
        let d = Config::default().cluster;
        assert_eq!(d.partition_sizes, None);
        assert!(!d.scaling);
        assert_eq!(d.interference_data, None);
        assert_eq!(d.inss_agents, None);
        assert!(d.util_names.is_empty());
        for (text, key, value, fix) in [
            (
                "planner = \"gpulet+int\"",
                "cluster.planner",
                "\"gpulet+int\"",
                "set cluster.interference_data",
            ),
            (
                "planner = \"gpulet\"\ninterference_data = \"/d\"",
                "cluster.interference_data",
                "\"/d\"",
                "set cluster.planner = \"gpulet+int\" (now \"gpulet\")",
            ),
            (
                "planner = \"gpulet+int\"\ninterference_data = \"\"",
                "cluster.interference_data",
                "\"\"",
                "INT_MODEL_CONSTANT.CSV",
            ),
            (
                "planner = \"inss\"",
                "cluster.planner",
                "\"inss\"",
                "set cluster.inss_agents",
            ),
            (
                "planner = \"gpulet\"\ninss_agents = \"agents/inss\"",
                "cluster.inss_agents",
                "\"agents/inss\"",
                "set cluster.planner = \"inss\" (now \"gpulet\")",
            ),
            (
                "planner = \"inss\"\ninss_agents = \"\"",
                "cluster.inss_agents",
                "\"\"",
                "sluice train inss --out DIR",
            ),
            (
                "[cluster.util_names]\nresnet50 = \"resnet50\"",
                "cluster.util_names.resnet50",
                "\"resnet50\"",
                "set cluster.planner = \"gpulet+int\"",
            ),
            (
                "planner = \"gpulet+int\"\ninterference_data = \"/d\"\n\
                 [cluster.util_names]\nresnet50 = \"\"",
                "cluster.util_names.resnet50",
                "\"\"",
                "first column of UTIL.CSV",
            ),
            (
                "partition_sizes = \"mig\"",
                "cluster.partition_sizes",
                "\"mig\"",
                "use \"gpulet\"",
            ),
            (
                "partition_sizes = [50, 20, 100]",
                "cluster.partition_sizes",
                "[50, 20, 100]",
                "strictly ascending",
            ),
            (
                "partition_sizes = [0, 100]",
                "cluster.partition_sizes",
                "[0, 100]",
                "from 1 to 100",
            ),
            (
                "partition_sizes = [20, 40]",
                "cluster.partition_sizes",
                "[20, 40]",
                "add 100",
            ),
            (
                "partition_step_pct = 20\npartition_sizes = \"gpulet\"",
                "cluster.partition_sizes",
                "[20, 40, 50, 60, 80, 100]",
                "50 is not a multiple of cluster.partition_step_pct = 20",
            ),
            (
                "partition_sizes = 50",
                "partition_sizes",
                "",
                "\"gpulet\" or a list of percentages",
            ),
            ("scaling = 1", "scaling", "", "a boolean"),
        ] {
            let e = load(&format!("[cluster]\ngpus = [\"mi50\"]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(key) && e.contains(value) && e.contains(fix),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn control_plane_keys_load_and_are_range_checked() {
        let c = load(
            "[daemon]\nhandshake_timeout_ms = 500\nmax_handshakes = 16\n\
             [access]\nsocket_group = \"sluice\"\n",
        )
        .unwrap();
        assert_eq!(c.daemon.handshake_timeout_ms, 500);
        assert_eq!(c.daemon.max_handshakes, 16);
        assert_eq!(c.access.socket_group.as_deref(), Some("sluice"));
        let d = Config::default();
        assert_eq!(d.daemon.handshake_timeout_ms, DEFAULT_HANDSHAKE_TIMEOUT_MS);
        assert_eq!(d.daemon.max_handshakes, DEFAULT_MAX_HANDSHAKES);
        assert_eq!(d.access.socket_group, None);
        for (text, key) in [
            (
                "[daemon]\nhandshake_timeout_ms = 0\n",
                "daemon.handshake_timeout_ms",
            ),
            (
                "[daemon]\nhandshake_timeout_ms = 60001\n",
                "daemon.handshake_timeout_ms",
            ),
            ("[daemon]\nmax_handshakes = 0\n", "daemon.max_handshakes"),
            ("[daemon]\nmax_handshakes = 4097\n", "daemon.max_handshakes"),
            ("[access]\nsocket_group = \"\"\n", "access.socket_group"),
            ("[access]\nsocket_group = \"a:b\"\n", "access.socket_group"),
        ] {
            assert_eq!(invalid(text).key, key, "{text}");
        }
    }

    #[test]
    fn access_allows_root_self_listed_uids_and_gids() {
        let a = AccessConfig {
            allowed_uids: vec![1000],
            allowed_gids: vec![2000],
            socket_group: None,
        };
        let daemon_uid = 999;
        assert!(a.allows(0, 0, &[], daemon_uid), "root");
        assert!(a.allows(0, 12345, &[], daemon_uid), "root, any gid");
        assert!(
            a.allows(daemon_uid, 4321, &[], daemon_uid),
            "the daemon's own uid"
        );
        assert!(a.allows(1000, 1000, &[], daemon_uid), "listed uid");
        assert!(a.allows(1234, 2000, &[], daemon_uid), "listed gid");
        assert!(
            a.allows(1234, 1234, &[77, 2000], daemon_uid),
            "listed supplementary group"
        );
        assert!(
            !a.allows(1234, 1234, &[77, 78], daemon_uid),
            "unlisted groups"
        );
        assert!(!a.allows(1234, 1234, &[], daemon_uid), "neither");
        assert!(!AccessConfig::default().allows(1000, 1000, &[1000], daemon_uid));
    }

    #[test]
    fn sq_entries_not_power_of_two() {
        let e = invalid("[clients]\nsq_entries = 300\n");
        assert_eq!(
            e.to_string(),
            "clients.sq_entries = 300 is not a power of two; use 256 or 512"
        );
        let e = invalid("[clients]\ncq_entries = 40000\n");
        assert_eq!(
            e.to_string(),
            "clients.cq_entries = 40000 is not a power of two; use 32768 or 65536"
        );
    }

    #[test]
    fn entries_out_of_range() {
        for (text, problem) in [
            ("sq_entries = 1", "is too small"),
            ("sq_entries = 0", "is too small"),
            ("cq_entries = -4", "is too small"),
            ("cq_entries = 131072", "is too large"),
        ] {
            let e = invalid(&format!("[clients]\n{text}\n"));
            assert_eq!(e.problem, problem, "{text}");
            assert!(e.fix.contains("power of two from 2 to 65536"), "{e}");
        }
    }

    #[test]
    fn max_clients_range() {
        for ok in [1, 4096] {
            assert_eq!(
                load(&format!("[clients]\nmax_clients = {ok}"))
                    .unwrap()
                    .clients
                    .max_clients,
                ok
            );
        }
        for bad in [0, -1, 4097] {
            let e = invalid(&format!("[clients]\nmax_clients = {bad}"));
            assert_eq!(e.key, "clients.max_clients");
            assert_eq!(e.value, bad.to_string());
            assert!(e.to_string().contains("use 1 to 4096"), "{e}");
        }
    }

    #[test]
    fn per_client_limits() {
        let c = load("").unwrap().clients;
        assert_eq!(c.max_in_flight_per_client, None);
        assert_eq!(c.on_device_per_client, 1);
        let c = load("[clients]\nmax_in_flight_per_client = 4\non_device_per_client = 65536")
            .unwrap()
            .clients;
        assert_eq!(c.max_in_flight_per_client, Some(4));
        assert_eq!(c.on_device_per_client, 65536);
        for key in ["max_in_flight_per_client", "on_device_per_client"] {
            for bad in [0, -3, 65537] {
                let e = invalid(&format!("[clients]\n{key} = {bad}"));
                assert_eq!(e.key, format!("clients.{key}"));
                assert_eq!(e.value, bad.to_string());
                assert!(e.to_string().contains("use 1 to 65536"), "{e}");
            }
        }
        // The summary loads back to the same values, set or not.
        for text in [
            "",
            "[clients]\nmax_in_flight_per_client = 9\non_device_per_client = 3",
        ] {
            let c = load(text).unwrap();
            assert_eq!(load(&c.summary()).unwrap(), c, "{}", c.summary());
        }
    }

    #[test]
    fn arena_bytes_rules() {
        let e = invalid("[clients]\narena_bytes = 10000\n");
        assert_eq!(
            e.to_string(),
            "clients.arena_bytes = 10000 is not a multiple of 4096 (the page size); use 8192 or 12288"
        );
        let e = invalid("[clients]\narena_bytes = 4095\n");
        assert_eq!(e.problem, "is too small");
        let e = invalid("[clients]\narena_bytes = 0\n");
        assert_eq!(e.problem, "is too small");
        let e = invalid("[clients]\narena_bytes = 1073745920\n");
        assert_eq!(e.problem, "is too large");
        assert!(e.fix.contains("1 GiB"), "{e}");
        assert_eq!(
            load("[clients]\narena_bytes = 4096")
                .unwrap()
                .clients
                .arena_bytes,
            4096
        );
    }

    #[test]
    fn realtime_priority_range() {
        assert_eq!(
            load("[daemon]\nrealtime_priority = 0")
                .unwrap()
                .daemon
                .realtime_priority,
            0
        );
        assert_eq!(
            load("[daemon]\nrealtime_priority = 1")
                .unwrap()
                .daemon
                .realtime_priority,
            1
        );
        for bad in [-1, 100, 1000] {
            let e = invalid(&format!("[daemon]\nrealtime_priority = {bad}"));
            assert_eq!(e.key, "daemon.realtime_priority");
            assert!(
                e.fix.contains("1..=99") && e.fix.contains("0 to stay SCHED_OTHER"),
                "{e}"
            );
        }
    }

    #[test]
    fn idle_spin_range() {
        assert_eq!(
            load("[daemon]\nidle_spin_us = 0")
                .unwrap()
                .daemon
                .idle_spin_us,
            0
        );
        for bad in [-1, 1_000_001] {
            let e = invalid(&format!("[daemon]\nidle_spin_us = {bad}"));
            assert_eq!(e.key, "daemon.idle_spin_us");
            assert_eq!(e.problem, "is out of range");
        }
    }

    #[test]
    fn dispatcher_core_must_not_be_negative() {
        // Whether the CPU exists is checked when pinning (crate::sys).
        assert_eq!(
            load("[daemon]\ndispatcher_core = 100000")
                .unwrap()
                .daemon
                .dispatcher_core,
            Some(100_000)
        );
        let e = invalid("[daemon]\ndispatcher_core = -1");
        assert_eq!(e.key, "daemon.dispatcher_core");
        assert!(e.fix.contains("remove the key"), "{e}");
    }

    #[test]
    fn socket_rules() {
        let e = invalid("[daemon]\nsocket = \"sluiced.sock\"");
        assert_eq!(
            e.to_string(),
            "daemon.socket = \"sluiced.sock\" is not an absolute path; use an absolute path \
             such as \"/run/sluice/sluiced.sock\""
        );
        assert_eq!(
            invalid("[daemon]\nsocket = \"\"").problem,
            "is not an absolute path"
        );
        assert_eq!(
            invalid("[daemon]\nsocket = \"/run/sluice/\"").problem,
            "names a directory"
        );
        let long = format!("/{}", "a".repeat(MAX_SOCKET_PATH));
        let e = invalid(&format!("[daemon]\nsocket = \"{long}\""));
        assert!(
            e.problem
                .contains("108 bytes long, over the 107-byte limit"),
            "{e}"
        );
        let just_fits = format!("/{}", "a".repeat(MAX_SOCKET_PATH - 1));
        assert_eq!(
            load(&format!("[daemon]\nsocket = \"{just_fits}\""))
                .unwrap()
                .daemon
                .socket,
            Path::new(&just_fits)
        );
    }

    #[test]
    fn ids_must_be_valid() {
        match load("[access]\nallowed_uids = [1000, -5, 4294967295]\nallowed_gids = [4294967296]") {
            Err(ConfigError::Invalid { errors, .. }) => {
                let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
                assert_eq!(
                    keys,
                    [
                        "access.allowed_uids[1]",
                        "access.allowed_uids[2]",
                        "access.allowed_gids[0]"
                    ]
                );
                assert!(errors[0].fix.contains("id -u"), "{}", errors[0]);
                assert!(errors[2].fix.contains("getent group"), "{}", errors[2]);
            }
            other => panic!("{other:?}"),
        }
        let c = load("[access]\nallowed_uids = [0, 4294967294]").unwrap();
        assert_eq!(c.access.allowed_uids, [0, u32::MAX - 1]);
    }

    #[test]
    fn backend_must_be_supported() {
        let e = invalid("[device]\nbackend = \"rocm\"");
        assert_eq!(
            e.to_string(),
            "device.backend = \"rocm\" is not a supported backend; use one of: \"sim\", \"cuda\", \
             \"cpu\""
        );
        assert_eq!(
            invalid("[device]\nbackend = \"CUDA\"").key,
            "device.backend"
        );
    }

    #[test]
    fn cpu_backend_and_its_threads_are_read_and_checked() {
        let c = load("[device]\nbackend = \"cpu\"\ncpu_threads = 3").unwrap();
        assert_eq!(c.device.backend, BackendKind::Cpu);
        assert_eq!(c.device.cpu_threads, 3);
        assert_eq!(Config::default().device.cpu_threads, 1);
        for bad in [0, 65, -1] {
            let e = invalid(&format!("[device]\ncpu_threads = {bad}"));
            assert_eq!(e.key, "device.cpu_threads");
            assert!(e.to_string().contains("use 1 to 64"), "{e}");
        }
        let again = Config::from_toml_str(&c.summary(), Path::new("summary.toml")).unwrap();
        assert_eq!(again.device.cpu_threads, 3);
        assert_eq!(again.device.backend, BackendKind::Cpu);
    }

    #[test]
    fn cuda_backend_is_accepted_in_every_build() {
        // Whether this build and machine can drive it is
        // startup::choose_device's decision (startup::tests), not the
        // config's.
        let c = load("[device]\nbackend = \"cuda\"").unwrap();
        assert_eq!(c.device.backend, BackendKind::Cuda);
        assert_eq!(BackendKind::from_name("cuda"), Some(BackendKind::Cuda));
        assert_eq!(BackendKind::Cuda.to_string(), "cuda");
        assert_eq!(BackendKind::Cuda.is_built(), cfg!(feature = "cuda"));
        assert!(BackendKind::Sim.is_built());
        // The summary writes it back, and it loads again.
        let again = Config::from_toml_str(&c.summary(), Path::new("summary.toml")).unwrap();
        assert_eq!(again.device.backend, BackendKind::Cuda);
    }

    #[test]
    fn scheduler_and_profile_are_read_and_checked() {
        let c = load("[device]\nscheduler = \"reef\"\nprofile = \"h100\"").unwrap();
        assert_eq!(
            c.device.scheduler,
            Scheduler::Policy(sluice_sched::PolicyKind::Reef)
        );
        assert_eq!(c.device.profile, "h100");
        assert_eq!(Config::default().device.scheduler, Scheduler::Fifo);
        let e = invalid("[device]\nscheduler = \"rt-only\"");
        assert_eq!(e.key, "device.scheduler");
        assert!(e.to_string().contains("\"reef\""), "{e}");
        let e = invalid("[device]\nprofile = \"a800\"");
        assert_eq!(e.key, "device.profile");
        assert!(e.to_string().contains("\"mi50\""), "{e}");
    }

    #[test]
    fn cuda_keys_are_read_and_checked() {
        use sluice_nn::builders::Scale;
        let c =
            load("[device]\nbackend = \"cuda\"\nmodel_scale = \"small\"\ninstances = 3").unwrap();
        assert_eq!(c.device.model_scale, Scale::Small);
        assert_eq!(c.device.instances, 3);
        // The cuda backend has no fifo scheduler: reef unless told.
        assert_eq!(
            c.device.scheduler,
            Scheduler::Policy(sluice_sched::PolicyKind::Reef)
        );
        let c = load("[device]\nbackend = \"cuda\"\nscheduler = \"streams\"").unwrap();
        assert_eq!(
            c.device.scheduler,
            Scheduler::Policy(sluice_sched::PolicyKind::Streams)
        );
        assert_eq!(c.device.model_scale, Scale::Full);
        assert_eq!(c.device.instances, 1);
        let again = Config::from_toml_str(&c.summary(), Path::new("summary.toml")).unwrap();
        assert_eq!(again.device, c.device);
        let e = invalid("[device]\nbackend = \"cuda\"\nscheduler = \"fifo\"");
        assert_eq!(e.key, "device.scheduler");
        assert!(e.fix.contains("\"reef\" (default for cuda)"), "{e}");
        let e = invalid("[device]\nmodel_scale = \"tiny\"");
        assert_eq!(e.key, "device.model_scale");
        assert!(e.fix.contains("\"small\""), "{e}");
        for bad in ["0", "17", "-1"] {
            let e = invalid(&format!("[device]\ninstances = {bad}"));
            assert_eq!(e.key, "device.instances");
        }
    }

    #[test]
    fn fallback_is_read_and_checked() {
        assert_eq!(Config::default().device.fallback, Fallback::None);
        let c = load("[device]\nbackend = \"cuda\"\nfallback = \"sim\"").unwrap();
        assert_eq!(c.device.fallback, Fallback::Sim);
        let again = Config::from_toml_str(&c.summary(), Path::new("summary.toml")).unwrap();
        assert_eq!(again.device, c.device);
        assert_eq!(
            load("[device]\nfallback = \"none\"")
                .unwrap()
                .device
                .fallback,
            Fallback::None
        );
        let e = invalid("[device]\nfallback = \"cpu\"");
        assert_eq!(
            e.to_string(),
            "device.fallback = \"cpu\" is not a fallback; use \"none\" (refuse to start when no \
             CUDA driver answers) or \"sim\" (serve the simulated GPU instead)"
        );
    }

    #[test]
    fn time_scale_range() {
        assert_eq!(
            load("[device]\ntime_scale = 2").unwrap().device.time_scale,
            2.0
        );
        assert_eq!(
            load("[device]\ntime_scale = 1000.0")
                .unwrap()
                .device
                .time_scale,
            1000.0
        );
        for bad in ["0.0", "-1.0", "1000.5", "inf", "nan", "-inf"] {
            let e = invalid(&format!("[device]\ntime_scale = {bad}"));
            assert_eq!(e.key, "device.time_scale");
            assert!(e.fix.contains("greater than 0 and at most 1000"), "{e}");
        }
    }

    #[test]
    fn models_dir_resolved_against_config_dir() {
        let c = load("[models]\ndir = \"models\"").unwrap();
        assert_eq!(
            c.models.dir.as_deref(),
            Some(Path::new("/etc/sluice/models"))
        );
        let c = load("[models]\ndir = \"/srv/models\"").unwrap();
        assert_eq!(c.models.dir.as_deref(), Some(Path::new("/srv/models")));
        assert_eq!(invalid("[models]\ndir = \"\"").problem, "is empty");
    }

    #[test]
    fn all_invalid_values_are_reported_together() {
        let err = load(
            "[daemon]\nrealtime_priority = 120\n[clients]\nsq_entries = 300\ncq_entries = 3\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("/etc/sluice/sluiced.toml: 3 invalid values:"),
            "{text}"
        );
        for key in [
            "daemon.realtime_priority = 120",
            "clients.sq_entries = 300",
            "clients.cq_entries = 3",
        ] {
            assert!(text.contains(key), "{key} missing from {text}");
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let (key, line, column, text) = parse_err("[clients]\nmax_clients = 8\nsq_entrie = 256\n");
        assert_eq!(key.as_deref(), Some("clients.sq_entrie"));
        assert_eq!((line, column), (Some(3), Some(1)));
        assert!(
            text.starts_with("/etc/sluice/sluiced.toml: at clients.sq_entrie: "),
            "{text}"
        );
        assert!(text.contains("line 3, column 1"), "{text}");
        assert!(text.contains("unknown field `sq_entrie`"), "{text}");
        assert!(
            text.contains("`sq_entries`"),
            "the expected keys are listed: {text}"
        );
        assert!(
            text.contains("remove the key or correct its spelling"),
            "{text}"
        );
    }

    #[test]
    fn unknown_section_is_named() {
        let (key, line, _, text) =
            parse_err("[daemon]\nlock_memory = true\n\n[client]\nmax_clients = 1\n");
        assert_eq!(key.as_deref(), Some("client"));
        assert_eq!(line, Some(4));
        assert!(text.contains("unknown field `client`"), "{text}");
        assert!(text.contains("`clients`"), "{text}");
        let (key, _, _, text) = parse_err("verbose = true\n");
        assert_eq!(key.as_deref(), Some("verbose"));
        assert!(text.contains("unknown field `verbose`"), "{text}");
    }

    #[test]
    fn bad_type_is_named() {
        let (key, line, column, text) = parse_err("[clients]\nsq_entries = \"big\"\n");
        assert_eq!(key.as_deref(), Some("clients.sq_entries"));
        assert_eq!((line, column), (Some(2), Some(14)));
        assert!(
            text.contains("invalid type: string \"big\", expected an integer"),
            "{text}"
        );
        assert!(
            text.contains("write the value with the type shown"),
            "{text}"
        );

        let (key, _, _, text) = parse_err("[daemon]\nlock_memory = 1\n");
        assert_eq!(key.as_deref(), Some("daemon.lock_memory"));
        assert!(text.contains("expected a boolean"), "{text}");

        let (key, _, _, text) = parse_err("[device]\ntime_scale = \"fast\"\n");
        assert_eq!(key.as_deref(), Some("device.time_scale"));
        assert!(text.contains("expected a number"), "{text}");

        let (key, _, _, text) = parse_err("clients = 3\n");
        assert_eq!(key.as_deref(), Some("clients"));
        assert!(text.contains("expected a table ([clients])"), "{text}");

        let (key, _, _, text) = parse_err("[access]\nallowed_uids = 1000\n");
        assert_eq!(key.as_deref(), Some("access.allowed_uids"));
        assert!(text.contains("expected an array of integers"), "{text}");

        let (key, line, _, text) =
            parse_err("[access]\nallowed_gids = []\nallowed_uids = [\n  1000,\n  \"bob\",\n]\n");
        assert_eq!(key.as_deref(), Some("access.allowed_uids"), "{text}");
        assert_eq!(line, Some(5));
        assert!(text.contains("expected an integer"), "{text}");
    }

    #[test]
    fn syntax_error_keeps_line_and_column() {
        let (_, line, column, text) = parse_err("[daemon]\nlock_memory = true\n[clients\n");
        assert_eq!(line, Some(3));
        assert!(column.is_some());
        assert!(text.contains("TOML parse error at line 3"), "{text}");
        let (_, line, _, text) = parse_err("[clients]\nsq_entries = 1\nsq_entries = 2\n");
        assert_eq!(line, Some(3));
        assert!(text.contains("duplicate key"), "{text}");
    }

    #[test]
    fn load_names_missing_file() {
        let path = Path::new("/nonexistent/sluice/sluiced.toml");
        let err = Config::load(path).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound)
        );
        assert!(
            err.to_string().contains("/nonexistent/sluice/sluiced.toml"),
            "{err}"
        );
    }

    #[test]
    fn load_reads_a_file() {
        let dir = std::env::temp_dir().join(format!("sluice-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sluiced.toml");
        std::fs::write(&path, "[clients]\nmax_clients = 7\n[models]\ndir = \"m\"\n").unwrap();
        let c = Config::load(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c.clients.max_clients, 7);
        assert_eq!(c.models.dir, Some(dir.join("m")));
    }

    proptest::proptest! {
        /// Any power of two in range is accepted, anything else in range is
        /// refused with the two neighbouring powers as the fix.
        #[test]
        fn entries_accepts_exactly_powers_of_two(v in 2u32..=65536) {
            let r = load(&format!("[clients]\nsq_entries = {v}"));
            if v.is_power_of_two() {
                proptest::prop_assert_eq!(r.unwrap().clients.sq_entries, v);
            } else {
                let e = invalid(&format!("[clients]\nsq_entries = {v}"));
                let up = v.next_power_of_two();
                proptest::prop_assert_eq!(e.fix, format!("use {} or {}", up / 2, up));
            }
        }

        /// Arbitrary text never panics the loader.
        #[test]
        fn arbitrary_text_never_panics(s in "\\PC*") {
            let _ = load(&s);
        }
    }
}
