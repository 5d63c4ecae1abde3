//! Helpers shared by the cross-process tests in `tests/tests/`.
//!
//! Every test here is real: the daemon runs in its own OS process, clients
//! run in their own processes (or the test process itself plays the
//! client), and they talk through the real control socket and real sealed
//! shared-memory regions.
//!
//! # The role re-exec harness
//!
//! A test crate cannot use `CARGO_BIN_EXE_sluiced` (that only exists inside
//! the daemon's own package), so a test binary re-executes *itself*
//! ([`std::env::current_exe`]) to play a role:
//!
//! ```text
//! <test binary> role_entry --exact --nocapture --test-threads=1 -q
//!     SLUICE_TEST_ROLE=daemon|client     which role
//!     SLUICE_TEST_ARGS=key=value\n...    its parameters
//!     SLUICE_TEST_PARENT=<pid>           exit when this process goes away
//! ```
//!
//! libtest's `--exact role_entry` filter selects the one `#[test] fn
//! role_entry()` that every test file declares with [`role_entry!`]; it
//! runs the role when `SLUICE_TEST_ROLE` is set and returns at once
//! otherwise (so it is a no-op test under `cargo test` and `cargo nextest
//! run` alike). A role reports on stdout as `@@sluice key=value` lines and
//! ends the process with [`std::process::exit`]; its stderr goes to a log
//! file that is printed when a test fails.
//!
//! - [`DaemonProc::spawn`] starts `sluice_service::Daemon` in a child process
//!   (socket in a fresh [`TestDir`], `realtime_priority = 0`, `lock_memory =
//!   false`, ring sizes and time scale from [`DaemonOpts`]), waits until it
//!   answers a status query, and SIGKILLs it on drop.
//! - [`ClientProc::spawn`] starts a client process ([`ClientMode::Echo`]:
//!   run requests and check every output; [`ClientMode::Flood`]: fill the
//!   rings with long requests and hang on until killed).
//! - [`watchdog`] aborts the test process (after SIGKILLing every child it
//!   started) when a test runs past its limit, so nothing hangs CI.
//! - [`wait_for`] polls a condition with a timeout.
//!
//! Child processes also watch their parent: when it disappears (test
//! aborted, runner killed) they exit within ~100 ms, so no daemon is left
//! behind. No test asserts a wall-clock bound; timeouts only turn a hang
//! into a failure, and `SLUICE_TEST_TIMEOUT_SCALE` (a factor, default 1)
//! stretches all of them on a slow machine.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use shm_proto::control::{self, Msg};
use shm_proto::layout::RegionHeader;
use shm_proto::ring::{Consumer, Producer, PushError, RingError};
use shm_proto::{Completion, Geometry, Request, RingHeader};
use sluice_client::{Client, Error, ModelInfo, Priority, Span, Submit, Ticket};
use sluice_service::server::ClientStatus;

pub use sluice_service::Status;

mod trickle;
pub use trickle::{TrickleOpts, spawn_trickle};

/// Environment variable naming the role a re-executed test binary plays.
pub const ROLE_ENV: &str = "SLUICE_TEST_ROLE";
/// Environment variable carrying the role's `key=value` lines.
pub const ARGS_ENV: &str = "SLUICE_TEST_ARGS";
/// Environment variable carrying the pid of the process that started the role.
pub const PARENT_ENV: &str = "SLUICE_TEST_PARENT";
/// Multiplies every timeout of the harness (for very slow machines).
pub const TIMEOUT_SCALE_ENV: &str = "SLUICE_TEST_TIMEOUT_SCALE";
/// Prefix of a report line on a role's stdout.
pub const REPORT_PREFIX: &str = "@@sluice ";

/// Declares the `role_entry` test every test file needs for the re-exec
/// harness. Put `sluice_tests::role_entry!();` at the top of each file.
#[macro_export]
macro_rules! role_entry {
    () => {
        /// Runs a helper role when this binary was re-executed by the
        /// harness (`SLUICE_TEST_ROLE` set); otherwise does nothing.
        #[test]
        fn role_entry() {
            $crate::role_entry();
        }
    };
}

// ---------------------------------------------------------------------------
// Timeouts, watchdog, child registry.

/// `secs` seconds, times `SLUICE_TEST_TIMEOUT_SCALE` (default 1).
pub fn secs(secs: u64) -> Duration {
    let scale = std::env::var(TIMEOUT_SCALE_ENV)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|f| f.is_finite() && *f > 0.0)
        .unwrap_or(1.0);
    Duration::from_secs_f64(secs as f64 * scale)
}

/// Pids of every child process this test process started and has not reaped.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn register_child(pid: u32) {
    if let Ok(mut v) = CHILDREN.lock() {
        v.push(pid);
    }
}

fn unregister_child(pid: u32) {
    if let Ok(mut v) = CHILDREN.lock() {
        v.retain(|&p| p != pid);
    }
}

fn kill_all_children() {
    let pids = CHILDREN.lock().map(|v| v.clone()).unwrap_or_default();
    for pid in pids {
        send_signal(pid, rustix::process::Signal::KILL);
    }
}

fn send_signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Aborts the whole test process when the guard is not dropped within its
/// limit. Drop it (end of the test) to disarm it.
#[derive(Debug)]
pub struct Watchdog {
    tx: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Says that test `name` did not run here and why: one `SKIPPED name: why`
/// line on stdout and on stderr (`cargo test -- --nocapture` and `cargo
/// nextest run --success-output immediate` show it). The test then returns
/// without checking anything, so it passes; use it only where the machine,
/// not the code, rules the test out (no root, a descriptor limit).
pub fn skipped(name: &str, why: &str) {
    println!("SKIPPED {name}: {why}");
    eprintln!("SKIPPED {name}: {why}");
}

/// Arms a watchdog for test `name`: after [`secs`]`(limit_secs)` it prints
/// what hung, SIGKILLs every child process the harness started, and aborts
/// the process.
pub fn watchdog(name: &str, limit_secs: u64) -> Watchdog {
    let limit = secs(limit_secs);
    let (tx, rx) = mpsc::channel::<()>();
    let name = name.to_owned();
    let thread = std::thread::Builder::new()
        .name(format!("watchdog-{name}"))
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                // Straight to fd 2: `eprintln!` would go to libtest's capture
                // buffer, which the abort throws away.
                let _ = writeln!(
                    std::io::stderr(),
                    "\nWATCHDOG: test `{name}` still running after {limit:?}; something hangs. \
                     Killing its child processes and aborting."
                );
                kill_all_children();
                std::process::abort();
            }
        })
        .expect("spawn the watchdog thread");
    Watchdog {
        tx: Some(tx),
        thread: Some(thread),
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
/// Polls every few milliseconds, backing off to 50 ms.
pub fn wait_for(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let start = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------
// Scratch directories.

static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under [`std::env::temp_dir`] (or `/tmp` when that path
/// is too long for a Unix socket), removed on drop.
#[derive(Debug)]
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    /// Creates `sluice-<pid>-<n>-<tag>`.
    pub fn new(tag: &str) -> Self {
        let n = DIR_SEQ.fetch_add(1, Ordering::Relaxed);
        let leaf = format!("sluice-{}-{n}-{tag}", std::process::id());
        let mut base = std::env::temp_dir();
        // sun_path holds 108 bytes; leave room for "/sluiced.sock".
        if base.join(&leaf).as_os_str().len() > 80 {
            base = PathBuf::from("/tmp");
        }
        let path = base.join(leaf);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create test dir {}: {e}", path.display()));
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------
// Role arguments and reports.

/// `key=value` parameters of a role.
#[derive(Debug, Clone, Default)]
pub struct Args(BTreeMap<String, String>);

impl Args {
    fn from_env() -> Self {
        let raw = std::env::var(ARGS_ENV).unwrap_or_default();
        Self(
            raw.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    fn encode(pairs: &[(&str, String)]) -> String {
        let mut s = String::new();
        for (k, v) in pairs {
            assert!(
                !v.contains('\n') && !k.contains('='),
                "bad role argument {k}={v:?}"
            );
            s.push_str(k);
            s.push('=');
            s.push_str(v);
            s.push('\n');
        }
        s
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn req(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("role argument `{key}` missing"))
    }

    fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        match self.get(key) {
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| panic!("role argument `{key}={v}` is not a number")),
            None => default,
        }
    }
}

/// The `key=value` lines a role printed.
#[derive(Debug, Clone, Default)]
pub struct Report(pub BTreeMap<String, String>);

impl Report {
    /// The value of `key`, if reported.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The value of `key` as a number; panics with the whole report if it
    /// is missing or not a number.
    pub fn u64(&self, key: &str) -> u64 {
        self.get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("report has no numeric `{key}`: {self:?}"))
    }
}

/// Prints one report line (for roles).
fn report(key: &str, value: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{REPORT_PREFIX}{key}={value}");
    let _ = out.flush();
}

/// Reads a child's stdout on a thread and forwards its report lines.
fn spawn_reader(stdout: std::process::ChildStdout) -> mpsc::Receiver<(String, String)> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("role-stdout".into())
        .spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(kv) = line.strip_prefix(REPORT_PREFIX)
                    && let Some((k, v)) = kv.split_once('=')
                    && tx.send((k.to_owned(), v.to_owned())).is_err()
                {
                    break;
                }
            }
        })
        .expect("spawn a stdout reader thread");
    rx
}

fn spawn_role(role: &str, args: &[(&str, String)], log: &Path) -> Child {
    let exe = std::env::current_exe().expect("current_exe");
    let log_file =
        File::create(log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
    let mut cmd = Command::new(&exe);
    cmd.args([
        "role_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(ROLE_ENV, role)
    .env(ARGS_ENV, Args::encode(args))
    .env(PARENT_ENV, std::process::id().to_string())
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::from(log_file));
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info");
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot re-execute {} as {role}: {e}", exe.display()));
    register_child(child.id());
    child
}

fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let mut st = None;
    wait_for(
        || {
            st = child.try_wait().ok().flatten();
            st.is_some()
        },
        timeout,
    );
    st
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(60);
    lines[from..].join("\n")
}

// ---------------------------------------------------------------------------
// The daemon process.

/// How to start a daemon process.
#[derive(Debug, Clone)]
pub struct DaemonOpts {
    /// Socket path; `None` = `sluiced.sock` in the daemon's own [`TestDir`].
    pub socket: Option<PathBuf>,
    /// `clients.sq_entries`.
    pub sq_entries: u32,
    /// `clients.cq_entries`.
    pub cq_entries: u32,
    /// `clients.arena_bytes`.
    pub arena_bytes: u64,
    /// `clients.max_clients`.
    pub max_clients: usize,
    /// `device.time_scale` (every model time is multiplied by it).
    pub time_scale: f64,
    /// `daemon.idle_spin_us`.
    pub idle_spin_us: u32,
    /// `device.scheduler` (`fifo`, or a policy on the GPU model).
    pub scheduler: &'static str,
    /// The device: `sim` (`device.backend = "sim"`), or `cuda-fake`: the
    /// CUDA backend's job path on the fake driver, whose kernels run the
    /// CPU reference ops, serving the Small models
    /// (`sluice_cuda::serve::fake_server`).
    pub device: &'static str,
    /// `clients.max_in_flight_per_client` (`None`: unset).
    pub max_in_flight_per_client: Option<u32>,
    /// `clients.on_device_per_client`.
    pub on_device_per_client: u32,
    /// Control-plane settings (`None`: the config's defaults): see
    /// [`ControlOpts`].
    pub control: ControlOpts,
    /// `[cluster]` (`None`: one device).
    pub cluster: Option<ClusterOpts>,
    /// `models.dir` (`None`: the models built into the binary). On the
    /// simulated GPU the directory's manifests replace the built-in ones.
    pub models_dir: Option<PathBuf>,
}

/// `[cluster]` in [`DaemonOpts`]: simulated GPUs, batches 1, 2, 4, 8,
/// partitions on a 25 % grid.
#[derive(Debug, Clone)]
pub struct ClusterOpts {
    /// `cluster.gpus`, comma-separated profiles (`"mi50,mi50"`).
    pub gpus: &'static str,
    /// `cluster.models`, comma-separated.
    pub models: &'static str,
    /// 0: `cluster.planner = "greedy"`, re-planned every second; else the
    /// `sluice_planner::churn::Churn`, re-planned every `churn_ms`.
    pub churn_ms: u32,
    /// `Some((dir, names))`: `cluster.planner = "gpulet+int"` with
    /// `cluster.interference_data = dir`, `cluster.util_names` from
    /// `names` (`"model=bench,..."`) and `cluster.scaling = true`.
    pub gpulet_int: Option<(std::path::PathBuf, &'static str)>,
}

/// The daemon's control-plane settings in [`DaemonOpts`].
#[derive(Debug, Clone, Default)]
pub struct ControlOpts {
    /// Set the daemon process's `RLIMIT_NOFILE` soft *and* hard limits to
    /// this before it starts (so its raise to the hard limit changes
    /// nothing); needs root to go above the current hard limit.
    pub nofile_limit: Option<u64>,
    /// `access.socket_group`.
    pub socket_group: Option<String>,
    /// `access.allowed_gids`.
    pub allowed_gids: Vec<u32>,
    /// `daemon.handshake_timeout_ms`.
    pub handshake_timeout_ms: Option<u32>,
    /// `daemon.max_handshakes`.
    pub max_handshakes: Option<usize>,
}

impl Default for DaemonOpts {
    fn default() -> Self {
        Self {
            socket: None,
            sq_entries: 256,
            cq_entries: 256,
            arena_bytes: 4 << 20,
            max_clients: 64,
            time_scale: 1.0,
            idle_spin_us: 50,
            scheduler: "fifo",
            device: "sim",
            max_in_flight_per_client: None,
            on_device_per_client: 1,
            control: ControlOpts::default(),
            cluster: None,
            models_dir: None,
        }
    }
}

/// A daemon running in a child process. SIGKILLed (and reaped) on drop;
/// when the test is failing, its log is printed first.
#[derive(Debug)]
pub struct DaemonProc {
    child: Child,
    pid: u32,
    socket: PathBuf,
    log: PathBuf,
    exit: Option<ExitStatus>,
    _dir: TestDir,
}

impl DaemonProc {
    /// Starts a daemon and waits (up to 30 s, scaled) until it answers a
    /// status query on its socket. Panics with the daemon's log if it exits
    /// or never answers.
    pub fn spawn(opts: DaemonOpts) -> Self {
        Self::try_spawn(opts).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`DaemonProc::spawn`], returning what went wrong (exit status and
    /// log) instead of panicking.
    pub fn try_spawn(opts: DaemonOpts) -> Result<Self, String> {
        let dir = TestDir::new("daemon");
        let socket = opts
            .socket
            .clone()
            .unwrap_or_else(|| dir.join("sluiced.sock"));
        let log = dir.join("daemon.log");
        let mut args = vec![
            ("socket", socket.display().to_string()),
            ("sq_entries", opts.sq_entries.to_string()),
            ("cq_entries", opts.cq_entries.to_string()),
            ("arena_bytes", opts.arena_bytes.to_string()),
            ("max_clients", opts.max_clients.to_string()),
            ("time_scale", opts.time_scale.to_string()),
            ("idle_spin_us", opts.idle_spin_us.to_string()),
            ("scheduler", opts.scheduler.to_string()),
            ("device", opts.device.to_string()),
            (
                "max_in_flight",
                opts.max_in_flight_per_client.unwrap_or(0).to_string(),
            ),
            ("on_device", opts.on_device_per_client.to_string()),
        ];
        if let Some(dir) = &opts.models_dir {
            args.push(("models_dir", dir.display().to_string()));
        }
        if let Some(c) = &opts.cluster {
            args.push(("cluster_gpus", c.gpus.to_owned()));
            args.push(("cluster_models", c.models.to_owned()));
            args.push(("cluster_churn_ms", c.churn_ms.to_string()));
            if let Some((dir, names)) = &c.gpulet_int {
                args.push(("cluster_int_dir", dir.display().to_string()));
                args.push(("cluster_util_names", (*names).to_owned()));
            }
        }
        let c = &opts.control;
        let control = [
            ("nofile_limit", c.nofile_limit.map(|v| v.to_string())),
            ("socket_group", c.socket_group.clone()),
            (
                "handshake_timeout_ms",
                c.handshake_timeout_ms.map(|v| v.to_string()),
            ),
            ("max_handshakes", c.max_handshakes.map(|v| v.to_string())),
            (
                "allowed_gids",
                (!c.allowed_gids.is_empty()).then(|| {
                    c.allowed_gids
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ),
        ];
        args.extend(control.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
        let child = spawn_role("daemon", &args, &log);
        let pid = child.id();
        let mut d = Self {
            child,
            pid,
            socket,
            log,
            exit: None,
            _dir: dir,
        };
        let mut exited = None;
        let ready = wait_for(
            || {
                if let Ok(Some(st)) = d.child.try_wait() {
                    exited = Some(st);
                    return true;
                }
                d.try_status().is_ok_and(|s| s.pid == pid)
            },
            secs(30),
        );
        if let Some(st) = exited {
            d.exit = Some(st);
            unregister_child(pid);
            return Err(format!(
                "daemon process exited during start-up ({st}); (if no log: does the test \
                 file declare `sluice_tests::role_entry!();`?) log:\n{}",
                d.log_text()
            ));
        }
        if !ready {
            return Err(format!(
                "daemon never answered on {} within {:?}; log:\n{}",
                d.socket.display(),
                secs(30),
                d.log_text()
            ));
        }
        Ok(d)
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The last lines of the daemon's stderr (its tracing log).
    pub fn log_text(&self) -> String {
        log_tail(&self.log)
    }

    /// Whether the process is still running.
    pub fn is_alive(&mut self) -> bool {
        if self.exit.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(st)) => {
                self.exit = Some(st);
                unregister_child(self.pid);
                false
            }
            Err(_) => false,
        }
    }

    /// Queries status over the socket.
    pub fn try_status(&self) -> Result<Status, String> {
        query_status(&self.socket)
    }

    /// Queries status; panics with the daemon's log if it does not answer.
    pub fn status(&self) -> Status {
        self.try_status()
            .unwrap_or_else(|e| panic!("daemon status failed: {e}; log:\n{}", self.log_text()))
    }

    /// Asserts that the process is alive and answers a status query.
    pub fn assert_healthy(&mut self) -> Status {
        assert!(
            self.is_alive(),
            "daemon process died ({:?}); log:\n{}",
            self.exit,
            self.log_text()
        );
        self.status()
    }

    /// SIGKILLs the daemon and reaps it.
    pub fn kill(&mut self) {
        if self.exit.is_some() {
            return;
        }
        let _ = self.child.kill();
        self.exit = self.child.wait().ok();
        unregister_child(self.pid);
    }

    /// Sends SIGTERM and waits (up to `timeout`) for a graceful exit.
    /// Returns the exit status, or `None` if it did not exit in time.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(st) = self.exit {
            return Some(st);
        }
        send_signal(self.pid, rustix::process::Signal::TERM);
        let st = wait_child(&mut self.child, timeout);
        if st.is_some() {
            self.exit = st;
            unregister_child(self.pid);
        }
        st
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- daemon pid {} log ({}) ----\n{}\n---- end of daemon log ----",
                self.pid,
                self.log.display(),
                self.log_text()
            );
        }
        self.kill();
    }
}

/// Queries the daemon at `socket` for its status document.
pub fn query_status(socket: &Path) -> Result<Status, String> {
    let json = sluice_client::query_status(socket)
        .map_err(|e| format!("{e} ({})", sluice_client::last_error_message()))?;
    serde_json::from_str(&json).map_err(|e| format!("bad status JSON ({e}): {json}"))
}

/// The client with daemon-assigned id `id` in `st`.
pub fn client_by_id(st: &Status, id: u32) -> Option<&ClientStatus> {
    st.clients.iter().find(|c| c.id == id)
}

// ---------------------------------------------------------------------------
// Client processes.

/// Which priorities a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrioMix {
    /// All real-time.
    RealTime,
    /// All best-effort.
    BestEffort,
    /// Two real-time, then one best-effort, repeating.
    Mixed,
}

impl PrioMix {
    fn name(self) -> &'static str {
        match self {
            Self::RealTime => "rt",
            Self::BestEffort => "be",
            Self::Mixed => "mix",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "rt" => Self::RealTime,
            "be" => Self::BestEffort,
            _ => Self::Mixed,
        }
    }

    /// The priority of request number `i`.
    pub fn of(self, i: u64) -> Priority {
        match self {
            Self::RealTime => Priority::RealTime,
            Self::BestEffort => Priority::BestEffort,
            Self::Mixed if i % 3 == 2 => Priority::BestEffort,
            Self::Mixed => Priority::RealTime,
        }
    }
}

/// What a client process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMode {
    /// Runs `count` requests, at most `depth` in flight, checks every
    /// output against `shm_proto::sim::expected_output`, reports and exits.
    /// Reports `client_id`, `ok`, `bad`, `rt`, `be`, `backpressure`,
    /// `problem` (first failure, if any), the last completion's
    /// `received_ns`, `started_ns` and `finished_ns` (`CLOCK_MONOTONIC`, as
    /// the daemon stamped them; absent when nothing completed), `done=1`.
    Echo,
    /// Submits until the client library pushes back (or `count` when not
    /// 0), reports `client_id`, `submitted` and `ready=1`, then sleeps until
    /// killed.
    Flood,
}

/// How to start a client process.
#[derive(Debug, Clone)]
pub struct ClientOpts {
    /// Name shown in the daemon's status.
    pub name: String,
    /// What to do.
    pub mode: ClientMode,
    /// Model to run.
    pub model: String,
    /// Requests to run (Echo) or at most to submit (Flood, 0 = until full).
    pub count: u64,
    /// Makes this client's inputs distinct from every other client's.
    pub seed: u64,
    /// Requests in flight at once (Echo).
    pub depth: u32,
    /// Priorities.
    pub prio: PrioMix,
    /// [`Client::set_spin`] in µs (0 = sleep on the futex at once);
    /// `None` keeps the library's default.
    pub spin_us: Option<u64>,
}

impl ClientOpts {
    /// An echo client running `count` `echo_small` requests.
    pub fn echo(name: &str, seed: u64, count: u64) -> Self {
        Self {
            name: name.to_owned(),
            mode: ClientMode::Echo,
            model: "echo_small".to_owned(),
            count,
            seed,
            depth: 4,
            prio: PrioMix::Mixed,
            spin_us: None,
        }
    }

    /// A flood client of `model`.
    pub fn flood(name: &str, model: &str) -> Self {
        Self {
            name: name.to_owned(),
            mode: ClientMode::Flood,
            model: model.to_owned(),
            count: 0,
            seed: 0,
            depth: 1,
            prio: PrioMix::RealTime,
            spin_us: None,
        }
    }
}

/// A client running in a child process. SIGKILLed on drop.
#[derive(Debug)]
pub struct ClientProc {
    child: Child,
    pid: u32,
    name: String,
    rx: mpsc::Receiver<(String, String)>,
    seen: Report,
    log: PathBuf,
    exit: Option<ExitStatus>,
}

impl ClientProc {
    /// Starts a client of the daemon at `socket`; its log goes into `dir`.
    pub fn spawn(socket: &Path, opts: &ClientOpts, dir: &TestDir) -> Self {
        let log = dir.join(&format!("client-{}.log", opts.name));
        let mode = match opts.mode {
            ClientMode::Echo => "echo",
            ClientMode::Flood => "flood",
        };
        let mut args = vec![
            ("socket", socket.display().to_string()),
            ("name", opts.name.clone()),
            ("mode", mode.to_owned()),
            ("model", opts.model.clone()),
            ("count", opts.count.to_string()),
            ("seed", opts.seed.to_string()),
            ("depth", opts.depth.to_string()),
            ("prio", opts.prio.name().to_owned()),
        ];
        if let Some(us) = opts.spin_us {
            args.push(("spin_us", us.to_string()));
        }
        let mut child = spawn_role("client", &args, &log);
        let pid = child.id();
        let rx = spawn_reader(child.stdout.take().expect("piped stdout"));
        Self {
            child,
            pid,
            name: opts.name.clone(),
            rx,
            seen: Report::default(),
            log,
            exit: None,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The last lines of the client's stderr.
    pub fn log_text(&self) -> String {
        log_tail(&self.log)
    }

    fn pump(&mut self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok((k, v)) => {
                self.seen.0.insert(k, v);
                true
            }
            Err(_) => false,
        }
    }

    /// Waits until the client has reported `key`; returns its value.
    /// Panics (with the client's log) on timeout or if the client exits first.
    pub fn wait_key(&mut self, key: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.seen.get(key) {
                return v.to_owned();
            }
            if !self.pump(deadline) {
                panic!(
                    "client {} did not report `{key}` within {timeout:?} (exit: {:?}); \
                     reported so far: {:?}; log:\n{}",
                    self.name,
                    self.child.try_wait().ok().flatten(),
                    self.seen,
                    self.log_text()
                );
            }
        }
    }

    /// Waits for the client to exit, asserts that it succeeded, and returns
    /// everything it reported.
    pub fn finish(mut self, timeout: Duration) -> Report {
        let st = wait_child(&mut self.child, timeout);
        let deadline = Instant::now() + Duration::from_secs(5);
        // The reader thread ends at EOF; collect what is left.
        while self.pump(deadline) {}
        let Some(st) = st else {
            panic!(
                "client {} still running after {timeout:?}; reported: {:?}; log:\n{}",
                self.name,
                self.seen,
                self.log_text()
            );
        };
        self.exit = Some(st);
        unregister_child(self.pid);
        assert!(
            st.success(),
            "client {} failed ({st}); reported: {:?}; log:\n{}",
            self.name,
            self.seen,
            self.log_text()
        );
        std::mem::take(&mut self.seen)
    }

    /// SIGKILLs the client and reaps it.
    pub fn kill(&mut self) {
        if self.exit.is_some() {
            return;
        }
        let _ = self.child.kill();
        self.exit = self.child.wait().ok();
        unregister_child(self.pid);
    }
}

impl Drop for ClientProc {
    fn drop(&mut self) {
        if std::thread::panicking() && self.exit.is_none() {
            eprintln!(
                "---- client {} (pid {}) log ----\n{}\n---- end ----",
                self.name,
                self.pid,
                self.log_text()
            );
        }
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// Roles.

/// The body of every test file's `role_entry` test: runs the role named by
/// `SLUICE_TEST_ROLE` and exits the process, or returns at once when the
/// variable is unset (a normal test run).
pub fn role_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let args = Args::from_env();
    // Block the stop signals before any thread starts, so every thread of
    // the role inherits the mask and the daemon role can take them with
    // sigtimedwait; a thread that does not block them (libtest's) runs
    // `on_stop_signal` instead of dying.
    let stop = sluice_service::startup::block_stop_signals();
    install_stop_handler();
    watch_parent();
    let code = match role.as_str() {
        "daemon" => daemon_role(&args, &stop),
        "client" => client_role(&args),
        "trickle" => trickle::role(&args),
        other => {
            eprintln!("unknown {ROLE_ENV}={other}");
            2
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

fn install_stop_handler() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: `sigaction` is plain data, zero-initialised then filled;
        // the handler only performs an atomic store, which is
        // async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Exits the role process when the process that started it goes away (it
/// gets re-parented), or after `max_s` seconds (default 300) in any case.
fn watch_parent() {
    let parent: Option<u32> = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse().ok());
    let max = Args::from_env().num("max_s", 300u64);
    let start = Instant::now();
    let _ = std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(100));
                let orphaned = parent.is_some_and(|p| std::os::unix::process::parent_id() != p);
                if orphaned || start.elapsed().as_secs() >= max {
                    eprintln!(
                        "role process exiting: {}",
                        if orphaned {
                            "its test process is gone"
                        } else {
                            "maximum lifetime reached"
                        }
                    );
                    std::process::exit(70);
                }
            }
        });
}

fn daemon_role(a: &Args, stop: &libc::sigset_t) -> i32 {
    use sluice_service::config::Config;
    use sluice_service::startup;

    startup::init_tracing();
    let mut config = Config::default();
    config.daemon.socket = PathBuf::from(a.req("socket"));
    config.daemon.realtime_priority = 0;
    config.daemon.lock_memory = false;
    config.daemon.dispatcher_core = None;
    config.daemon.idle_spin_us = a.num("idle_spin_us", 50);
    config.clients.sq_entries = a.num("sq_entries", 256);
    config.clients.cq_entries = a.num("cq_entries", 256);
    config.clients.arena_bytes = a.num("arena_bytes", 4 << 20);
    config.clients.max_clients = a.num("max_clients", 64);
    config.clients.max_in_flight_per_client = Some(a.num("max_in_flight", 0)).filter(|&n| n > 0);
    config.clients.on_device_per_client = a.num("on_device", 1);
    config.device.time_scale = a.num("time_scale", 1.0);
    config.models.dir = a.get("models_dir").map(PathBuf::from);
    let churn_ms: u32 = a.num("cluster_churn_ms", 0);
    if let Some(gpus) = a.get("cluster_gpus") {
        let c = &mut config.cluster;
        c.gpus = gpus.split(',').map(str::to_owned).collect();
        c.models = a
            .req("cluster_models")
            .split(',')
            .map(str::to_owned)
            .collect();
        c.batches = vec![1, 2, 4, 8];
        c.partition_step_pct = 25;
        c.replan_ms = if churn_ms > 0 { churn_ms } else { 1000 };
        c.rate_window_ms = 200;
        if let Some(dir) = a.get("cluster_int_dir") {
            c.planner = sluice_service::config::PlannerKind::GpuletInt;
            c.interference_data = Some(dir.into());
            c.scaling = true;
            for pair in a.req("cluster_util_names").split(',') {
                let (m, b) = pair.split_once('=').expect("model=bench");
                c.util_names.insert(m.to_owned(), b.to_owned());
            }
        }
    }
    if let Some(g) = a.get("socket_group") {
        config.access.socket_group = Some(g.to_owned());
    }
    if let Some(g) = a.get("allowed_gids") {
        config.access.allowed_gids = g.split(',').map(|v| v.parse().expect("gid")).collect();
    }
    if a.get("handshake_timeout_ms").is_some() {
        config.daemon.handshake_timeout_ms = a.num("handshake_timeout_ms", 0);
    }
    if a.get("max_handshakes").is_some() {
        config.daemon.max_handshakes = a.num("max_handshakes", 0);
    }
    if a.get("nofile_limit").is_some() {
        let n: u64 = a.num("nofile_limit", 0);
        let lim = rustix::process::Rlimit {
            current: Some(n),
            maximum: Some(n),
        };
        if let Err(e) = rustix::process::setrlimit(rustix::process::Resource::Nofile, lim) {
            eprintln!("daemon role: cannot set RLIMIT_NOFILE to {n}: {e}");
            return 2;
        }
    }
    config.device.scheduler = match sluice_service::config::Scheduler::from_name(a.req("scheduler"))
    {
        Some(s) => s,
        None => {
            eprintln!("daemon role: unknown scheduler {}", a.req("scheduler"));
            return 2;
        }
    };
    let cuda_fake = match a.get("device").unwrap_or("sim") {
        "sim" => false,
        "cuda-fake" => true,
        other => {
            eprintln!("daemon role: unknown device {other}");
            return 2;
        }
    };
    if cuda_fake {
        config.device.backend = sluice_service::config::BackendKind::Cuda;
        config.device.model_scale = sluice_nn::builders::Scale::Small;
    }
    let models = match startup::load_models(&config) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            eprintln!("daemon role: cannot load models: {e}");
            return 2;
        }
    };
    let device: Result<Box<dyn sluice_backend::Backend>, String> = if cuda_fake {
        use sluice_cuda::serve::{ServeOptions, fake_server};
        let sluice_service::config::Scheduler::Policy(kind) = config.device.scheduler else {
            eprintln!("daemon role: device cuda-fake runs a policy, not `fifo`");
            return 2;
        };
        let opts = ServeOptions {
            scale: config.device.model_scale,
            ..ServeOptions::default()
        };
        fake_server(kind, models.clone(), &opts)
            .map(|s| Box::new(s) as Box<dyn sluice_backend::Backend>)
            .map_err(|e| e.to_string())
    } else {
        if churn_ms > 0 {
            use sluice_service::backend::cluster::{ClusterBackend, setup};
            setup::cluster_setup(&config, &models, |_| {})
                .and_then(|s| {
                    ClusterBackend::new(
                        s,
                        Box::new(sluice_planner::churn::Churn::default()),
                        models.clone(),
                        shm_proto::now_ns(),
                    )
                })
                .and_then(|b| b.with_planner_thread())
                .map(|b| Box::new(b) as Box<dyn sluice_backend::Backend>)
                .map_err(|e| e.to_string())
        } else {
            startup::make_device(&config, models.clone()).map_err(|e| e.to_string())
        }
    };
    let device = match device {
        Ok(d) => d,
        Err(e) => {
            eprintln!("daemon role: cannot make the device: {e}");
            return 2;
        }
    };
    let mut daemon = match sluice_service::Daemon::start(config, models, device) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("daemon role: cannot start: {e}");
            return 2;
        }
    };
    report("ready", 1);
    loop {
        if startup::wait_signal(stop, Duration::from_millis(20)).is_some()
            || STOP.load(Ordering::SeqCst)
        {
            eprintln!("daemon role: stop signal; shutting down");
            break;
        }
        if !daemon.is_running() {
            eprintln!("daemon role: the dispatcher thread ended unexpectedly");
            return 3;
        }
    }
    daemon.shutdown();
    0
}

fn client_role(a: &Args) -> i32 {
    let socket = PathBuf::from(a.req("socket"));
    let name = a.req("name");
    let mut c = match Client::connect(&socket, name) {
        Ok(c) => c,
        Err(e) => {
            report("problem", format!("connect: {e}"));
            return 1;
        }
    };
    report("client_id", c.client_id());
    if let Some(us) = a.get("spin_us") {
        c.set_spin(Duration::from_micros(a.num("spin_us", 0)));
        report("spin_us", us);
    }
    let model = match c.lookup_model(a.req("model")) {
        Ok(m) => m,
        Err(e) => {
            report("problem", format!("lookup: {e}"));
            return 1;
        }
    };
    let count: u64 = a.num("count", 0);
    let seed: u64 = a.num("seed", 0);
    let prio = PrioMix::parse(a.get("prio").unwrap_or("mix"));
    match a.req("mode") {
        "echo" => {
            let spec = RunSpec {
                count,
                seed,
                depth: a.num("depth", 4),
                prio,
            };
            let r = run_requests(&mut c, &model, &spec);
            report("ok", r.ok);
            report("bad", r.bad);
            report("rt", r.rt);
            report("be", r.be);
            report("backpressure", r.backpressure);
            if let Some((received, started, finished)) = r.last_times {
                report("received_ns", received);
                report("started_ns", started);
                report("finished_ns", finished);
            }
            if let Some(p) = &r.problem {
                report("problem", p);
            }
            report("done", 1);
            i32::from(r.problem.is_some())
        }
        "flood" => {
            let n = flood(&mut c, &model, count, prio);
            report("submitted", n);
            report("ready", 1);
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        other => {
            eprintln!("unknown client mode {other}");
            2
        }
    }
}

// ---------------------------------------------------------------------------
// In-process client helpers.

/// Connects, panicking with the library's detailed message on failure.
pub fn connect(socket: &Path, name: &str) -> Client {
    Client::connect(socket, name).unwrap_or_else(|e| {
        panic!(
            "connect to {} failed: {e:?}: {}",
            socket.display(),
            sluice_client::last_error_message()
        )
    })
}

/// Looks up `name`, panicking on failure.
pub fn lookup(c: &mut Client, name: &str) -> ModelInfo {
    c.lookup_model(name)
        .unwrap_or_else(|e| panic!("lookup_model({name}) failed: {e:?}"))
}

/// The deterministic test input for request `i` of the client with `seed`:
/// distinct for every `(seed, i)`.
pub fn test_input(seed: u64, i: u64, len: usize) -> Vec<u8> {
    let base = sluice_rng::splitmix(seed.wrapping_mul(0x9e37_79b9).wrapping_add(i << 1));
    let mut v = Vec::with_capacity(len);
    let mut k = 0u64;
    while v.len() < len {
        let w = sluice_rng::splitmix(base.wrapping_add(k));
        let take = (len - v.len()).min(8);
        v.extend_from_slice(&w.to_le_bytes()[..take]);
        k += 1;
    }
    v
}

/// What the simulated GPU must write for `input`.
pub fn expected(model: &ModelInfo, input: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; model.output_bytes as usize];
    shm_proto::sim::expected_output(model.id, input, &mut out);
    out
}

/// Where request slot `slot` keeps its input and output in the arena.
pub fn slot_spans(model: &ModelInfo, slot: u32) -> (Span, Span) {
    let inb = model.input_bytes.next_multiple_of(64);
    let outb = model.output_bytes.next_multiple_of(64).max(64);
    let base = u64::from(slot) * (inb + outb);
    (
        Span {
            off: base,
            len: model.input_bytes,
        },
        Span {
            off: base + inb,
            len: model.output_bytes,
        },
    )
}

/// Checks a completion for `input` whose output went to `out`.
pub fn check_completion(
    c: &Client,
    model: &ModelInfo,
    done: &Completion,
    input: &[u8],
    out: Span,
) -> Result<(), String> {
    if done.status != shm_proto::status::OK {
        return Err(format!(
            "status {} ({})",
            done.status,
            shm_proto::status::describe(done.status)
        ));
    }
    if done.output_len != model.output_bytes {
        return Err(format!(
            "output_len {} != model output {}",
            done.output_len, model.output_bytes
        ));
    }
    let mut got = vec![0u8; out.len as usize];
    c.read_arena(out.off, &mut got)
        .map_err(|e| format!("read_arena: {e:?}"))?;
    if got != expected(model, input) {
        return Err("output differs from shm_proto::sim::expected_output".into());
    }
    Ok(())
}

/// Runs one request of `model` (slot 0, input from `(seed, i)`), waits up to
/// 30 s (scaled), and checks the output.
pub fn run_one(c: &mut Client, model: &ModelInfo, seed: u64, i: u64) -> Result<(), String> {
    let (input_span, out) = slot_spans(model, 0);
    let input = test_input(seed, i, model.input_bytes as usize);
    c.write_arena(input_span.off, &input)
        .map_err(|e| format!("write_arena: {e:?}"))?;
    c.write_arena(out.off, &vec![0u8; out.len as usize])
        .map_err(|e| format!("write_arena: {e:?}"))?;
    let t = c
        .submit(&Submit {
            model_id: model.id,
            priority: Priority::RealTime,
            deadline_ns: 0,
            input: input_span,
            output: out,
        })
        .map_err(|e| format!("submit: {e:?}"))?;
    let done = c
        .wait_timeout(t, Some(secs(30)))
        .map_err(|e| format!("wait: {e:?}"))?;
    check_completion(c, model, &done, &input, out)
}

/// Parameters of [`run_requests`].
#[derive(Debug, Clone, Copy)]
pub struct RunSpec {
    /// Requests to run.
    pub count: u64,
    /// Input seed (distinct per client).
    pub seed: u64,
    /// Most requests in flight at once.
    pub depth: u32,
    /// Priorities.
    pub prio: PrioMix,
}

/// What [`run_requests`] saw.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    /// Completed with the right status, length and bytes.
    pub ok: u64,
    /// Completed wrongly.
    pub bad: u64,
    /// Submitted real-time.
    pub rt: u64,
    /// Submitted best-effort.
    pub be: u64,
    /// Times `submit` answered `RingFull` or `TooManyInFlight`.
    pub backpressure: u64,
    /// The first thing that went wrong.
    pub problem: Option<String>,
    /// The last completion's `(received_ns, started_ns, finished_ns)`.
    pub last_times: Option<(u64, u64, u64)>,
}

/// Runs `spec.count` requests with up to `spec.depth` in flight, each in its
/// own arena slot, and checks every completion's status, length and output
/// bytes. Stops at the first error from the library (disconnect, timeout).
pub fn run_requests(c: &mut Client, model: &ModelInfo, spec: &RunSpec) -> RunStats {
    let mut st = RunStats::default();
    let depth = spec.depth.max(1);
    let mut free: Vec<u32> = (0..depth).rev().collect();
    let mut pending: VecDeque<(Ticket, u64, u32)> = VecDeque::new();
    let mut next = 0u64;
    let note = |st: &mut RunStats, p: String| {
        if st.problem.is_none() {
            st.problem = Some(p);
        }
    };
    while next < spec.count || !pending.is_empty() {
        if next < spec.count
            && let Some(slot) = free.pop()
        {
            let (input, out) = slot_spans(model, slot);
            let data = test_input(spec.seed, next, model.input_bytes as usize);
            if let Err(e) = c.write_arena(input.off, &data) {
                note(&mut st, format!("write_arena: {e:?}"));
                return st;
            }
            let priority = spec.prio.of(next);
            match c.submit(&Submit {
                model_id: model.id,
                priority,
                deadline_ns: 0,
                input,
                output: out,
            }) {
                Ok(t) => {
                    match priority {
                        Priority::RealTime => st.rt += 1,
                        Priority::BestEffort => st.be += 1,
                    }
                    pending.push_back((t, next, slot));
                    next += 1;
                    continue;
                }
                Err(Error::RingFull | Error::TooManyInFlight) => {
                    st.backpressure += 1;
                    free.push(slot);
                    if pending.is_empty() {
                        std::thread::yield_now();
                        continue;
                    }
                }
                Err(e) => {
                    note(&mut st, format!("submit #{next}: {e:?}"));
                    return st;
                }
            }
        }
        let Some((t, i, slot)) = pending.pop_front() else {
            continue;
        };
        match c.wait_timeout(t, Some(secs(30))) {
            Ok(done) => {
                st.last_times = Some((done.received_ns, done.started_ns, done.finished_ns));
                let (_, out) = slot_spans(model, slot);
                let data = test_input(spec.seed, i, model.input_bytes as usize);
                match check_completion(c, model, &done, &data, out) {
                    Ok(()) => st.ok += 1,
                    Err(p) => {
                        st.bad += 1;
                        note(&mut st, format!("request #{i}: {p}"));
                    }
                }
                free.push(slot);
            }
            Err(e) => {
                note(&mut st, format!("wait #{i}: {e:?}"));
                return st;
            }
        }
    }
    st
}

/// Submits `model` requests (one shared input, one output slot each) until
/// the library pushes back or `limit` (0 = no limit) are in flight; returns
/// how many were submitted. They are never waited for.
pub fn flood(c: &mut Client, model: &ModelInfo, limit: u64, prio: PrioMix) -> u64 {
    let input = Span {
        off: 0,
        len: model.input_bytes,
    };
    let _ = c.write_arena(0, &test_input(1, 1, model.input_bytes as usize));
    let outb = model.output_bytes.next_multiple_of(64).max(64);
    let first_out = model.input_bytes.next_multiple_of(64);
    let mut n = 0u64;
    loop {
        if limit != 0 && n >= limit {
            return n;
        }
        let output = Span {
            off: first_out + n * outb,
            len: model.output_bytes,
        };
        match c.submit(&Submit {
            model_id: model.id,
            priority: prio.of(n),
            deadline_ns: 0,
            input,
            output,
        }) {
            Ok(_) => n += 1,
            Err(_) => return n,
        }
    }
}

// ---------------------------------------------------------------------------
// Playing a hostile client.

/// The region header of `c`'s mapping (all atomics; the daemon reads its
/// magic).
pub fn region_header(c: &mut Client) -> &RegionHeader {
    let (base, len) = c.raw_region();
    assert!(len >= size_of::<RegionHeader>());
    // SAFETY: offset 0 of the client's live, page-aligned shared mapping,
    // which is longer than the header; the header is made of atomics only,
    // so concurrent writes by the daemon are fine. The borrow of `c` keeps
    // the mapping alive.
    unsafe { &*(base as *const RegionHeader) }
}

fn ring_header_at(c: &mut Client, off: u64) -> &RingHeader {
    let (base, len) = c.raw_region();
    assert!(off as usize + size_of::<RingHeader>() <= len);
    // SAFETY: `off` is a ring header offset of the client's validated
    // geometry: inside the mapping (checked above) and 128-aligned; the
    // header is made of atomics only. The borrow of `c` keeps the mapping
    // alive.
    unsafe { &*(base.add(off as usize) as *const RingHeader) }
}

/// The submission ring's control words in `c`'s mapping.
pub fn sq_header(c: &mut Client) -> &RingHeader {
    let off = c.geometry().sq_offset();
    ring_header_at(c, off)
}

/// The completion ring's control words in `c`'s mapping.
pub fn cq_header(c: &mut Client) -> &RingHeader {
    let off = c.geometry().cq_offset();
    ring_header_at(c, off)
}

/// A client whose rings the test drives by hand: raw pushes into the
/// submission ring (past the library's in-flight limit) and raw pops from
/// the completion ring. Owns the [`Client`] so that the library's own ring
/// ends can never be used at the same time.
#[derive(Debug)]
pub struct RawRings {
    // Ring ends first: they point into the client's mapping and drop first.
    sq: Producer<Request>,
    cq: Consumer<Completion>,
    geometry: Geometry,
    client: Client,
}

impl RawRings {
    /// Takes over `client`'s rings.
    pub fn take(mut client: Client) -> Self {
        let g = client.geometry();
        let (base, len) = client.raw_region();
        assert!(
            g.region_size() <= len as u64,
            "mapping shorter than geometry"
        );
        // SAFETY: the offsets come from the geometry the library validated
        // at connect, and lie inside the mapping (checked above); the
        // mapping lives as long as `client`, which this struct owns and
        // drops after the ring ends (field order). The library's own ends
        // are never used again: `client` is private and only its arena and
        // doorbell methods, which do not touch the rings, are called. Ring
        // capacities are powers of two (validated geometry).
        let (sq, cq) = unsafe {
            (
                Producer::from_raw(
                    base.add(g.sq_offset() as usize) as *const RingHeader,
                    base.add(g.sq_slots_offset() as usize)
                        as *const shm_proto::layout::Slot<Request>,
                    g.sq_entries,
                ),
                Consumer::from_raw(
                    base.add(g.cq_offset() as usize) as *const RingHeader,
                    base.add(g.cq_slots_offset() as usize)
                        as *const shm_proto::layout::Slot<Completion>,
                    g.cq_entries,
                ),
            )
        };
        Self {
            sq,
            cq,
            geometry: g,
            client,
        }
    }

    /// The region's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Daemon-assigned client id.
    pub fn client_id(&self) -> u32 {
        self.client.client_id()
    }

    /// Pushes one raw request; rings the daemon's doorbell if it sleeps.
    pub fn push(&mut self, r: Request) -> Result<(), PushError> {
        self.sq.push(r)?;
        if self.sq.needs_wake() {
            self.client.ring_doorbell();
        }
        Ok(())
    }

    /// Pops one completion, if any.
    pub fn pop(&mut self) -> Result<Option<Completion>, RingError> {
        self.cq.pop()
    }

    /// Rings the doorbell unconditionally.
    pub fn ring_doorbell(&mut self) {
        self.client.ring_doorbell();
    }

    /// Writes arena bytes.
    pub fn write_arena(&mut self, off: u64, data: &[u8]) -> Result<(), Error> {
        self.client.write_arena(off, data)
    }

    /// Reads arena bytes.
    pub fn read_arena(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.client.read_arena(off, buf)
    }

    /// Whether the daemon has dropped this client (region closed or socket
    /// hung up).
    pub fn is_disconnected(&mut self) -> bool {
        self.client.is_disconnected()
    }
}

/// A request record for `model` with the given spans, for raw pushes and
/// garbage tests.
pub fn request(model: &ModelInfo, input: Span, output: Span) -> Request {
    Request {
        request_id: 0,
        model_id: model.id,
        priority: Priority::RealTime as u32,
        deadline_ns: 0,
        input_off: input.off,
        input_len: input.len,
        output_off: output.off,
        output_len: output.len,
        flags: 0,
        batch: 0,
        seq: 0,
    }
}

// ---------------------------------------------------------------------------
// Raw control-socket traffic.

/// What the daemon answered to raw bytes on a fresh connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawReply {
    /// It closed the connection without a frame.
    Closed,
    /// A `Refused` frame.
    Refused {
        /// The [`sluice_client::refused`] code.
        code: u32,
        /// Its message.
        message: String,
    },
    /// Some other frame or bytes.
    Other(Vec<u8>),
}

/// Encodes a control message into a frame.
pub fn frame(msg: &Msg<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; 1024];
    let n = msg.encode(&mut buf).expect("frame fits in 1 KiB");
    buf.truncate(n);
    buf
}

/// Connects to `socket`, writes `bytes` (then half-closes the write side if
/// `close_write`), and reads everything the daemon sends until it closes
/// the connection (up to 30 s, scaled).
pub fn raw_exchange(socket: &Path, bytes: &[u8], close_write: bool) -> RawReply {
    let mut s =
        UnixStream::connect(socket).unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    s.set_read_timeout(Some(secs(30))).expect("set timeout");
    // The daemon may close before reading everything; EPIPE is fine.
    let _ = s.write_all(bytes);
    if close_write {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            // Closed with our bytes unread: the kernel reports a reset.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the daemon's answer: {e} (after {got:?})"),
        }
    }
    decode_reply(got)
}

fn decode_reply(got: Vec<u8>) -> RawReply {
    if got.is_empty() {
        return RawReply::Closed;
    }
    if got.len() >= 4 {
        let len = u32::from_le_bytes([got[0], got[1], got[2], got[3]]) as usize;
        if len <= control::MAX_FRAME
            && got.len() >= 4 + len
            && let Ok(Msg::Refused { code, message }) = Msg::decode(&got[4..4 + len])
        {
            return RawReply::Refused {
                code,
                message: message.to_owned(),
            };
        }
    }
    RawReply::Other(got)
}

/// A `Hello` frame with the given fields.
pub fn hello_frame(magic: u64, version: u32, layout_hash: u64, name: &str) -> Vec<u8> {
    // Encode by hand so that over-long names can be sent too.
    let mut body = Vec::new();
    body.extend_from_slice(&control::KIND_HELLO.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&magic.to_le_bytes());
    body.extend_from_slice(&version.to_le_bytes());
    body.extend_from_slice(&layout_hash.to_le_bytes());
    body.extend_from_slice(&std::process::id().to_le_bytes());
    body.extend_from_slice(&(name.len() as u16).to_le_bytes());
    body.extend_from_slice(name.as_bytes());
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(&body);
    f
}

/// Any child process (e.g. the real `sluiced` binary) that the watchdog
/// kills when a test hangs, and that is SIGKILLed and reaped on drop.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    exit: Option<ExitStatus>,
}

impl ChildGuard {
    /// Spawns `cmd` and registers the child.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Self> {
        let child = cmd.spawn()?;
        register_child(child.id());
        Ok(Self { child, exit: None })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn is_alive(&mut self) -> bool {
        self.exit.is_none() && matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `sig` (unless the child has been reaped).
    pub fn signal(&mut self, sig: rustix::process::Signal) {
        if self.exit.is_none() {
            send_signal(self.child.id(), sig);
        }
    }

    /// Sends `sig` and waits up to `timeout` for the exit.
    pub fn signal_and_wait(
        &mut self,
        sig: rustix::process::Signal,
        timeout: Duration,
    ) -> Option<ExitStatus> {
        if self.exit.is_none() {
            send_signal(self.child.id(), sig);
            self.exit = wait_child(&mut self.child, timeout);
        }
        self.exit
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        unregister_child(self.child.id());
    }
}

/// The log a [`spawn_sluiced`] daemon writes: `dir/sluiced.log` (empty when it is
/// not there yet).
pub fn sluiced_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("sluiced.log")).unwrap_or_default()
}

/// Starts the `sluiced` binary as an operator would: writes `config` (TOML text) to
/// `dir/sluiced.toml`, runs `sluiced --config` on it with its stderr in `dir/sluiced.log`
/// ([`sluiced_log`]), and waits up to 30 s ([`secs`]-scaled) until it answers a status
/// query on `socket`; panics with the log when it never does. SIGKILLed on drop.
pub fn spawn_sluiced(sluiced: &Path, dir: &Path, socket: &Path, config: &str) -> ChildGuard {
    let file = dir.join("sluiced.toml");
    std::fs::write(&file, config).expect("write sluiced.toml");
    let log = std::fs::File::create(dir.join("sluiced.log")).expect("create sluiced.log");
    let daemon = ChildGuard::spawn(
        std::process::Command::new(sluiced)
            .arg("--config")
            .arg(&file)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log),
    )
    .expect("spawn sluiced");
    assert!(
        wait_for(|| query_status(socket).is_ok(), secs(30)),
        "sluiced never answered; log:\n{}",
        sluiced_log(dir)
    );
    daemon
}

/// The `sluiced` binary next to this test binary (`target/<profile>/sluiced`,
/// the test binary being `target/<profile>/deps/<name>-<hash>`), if built.
pub fn find_sluiced() -> Option<PathBuf> {
    find_binary("sluiced")
}

/// The workspace binary `name` (`sluiced`, `sluice`) next to this test
/// binary, as [`find_sluiced`] looks for it, if built. With
/// `SLUICE_REQUIRE_BINARIES=1` (`scripts/test-all.sh`, which builds them
/// first) a missing binary panics instead of letting the test skip.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok();
    let found = exe.as_deref().and_then(|exe| {
        let deps = exe.parent()?;
        let profile = deps.parent()?;
        [profile.join(name), deps.join(name)]
            .into_iter()
            .find(|p| p.is_file())
    });
    assert!(
        found.is_some() || std::env::var_os("SLUICE_REQUIRE_BINARIES").is_none_or(|v| v != "1"),
        "no {name} binary next to {exe:?} (SLUICE_REQUIRE_BINARIES=1); build the workspace's \
         binaries first: cargo build --workspace --bins"
    );
    found
}

// ---------------------------------------------------------------------------
// Typed models.

/// The built-in models plus two typed ones on `echo_small`'s manifest:
/// `pair` (inputs `ids` i64[N,128] and `mask` f32[16], outputs `logits`
/// f32[N,10] and `pooled` f32[N,32], batch up to 8) and `one` (input `x`
/// f32[N,16], output `y` f32[N,4], batch up to 4).
pub use sluice_service::test_models::typed_registry;
