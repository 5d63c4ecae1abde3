//! The control socket: accepting clients, authenticating them with
//! `SO_PEERCRED`, the versioned handshake, handing out sealed regions with
//! `SCM_RIGHTS`, model look-ups and status; and [`Daemon`], the handle that
//! starts and stops the whole service.
//!
//! One thread, `sluice-control`, runs the whole control plane as an epoll
//! event loop over non-blocking sockets ([`control_plane`]); no thread or
//! buffer is spent on a peer before it is known:
//!
//! 1. the socket file is mode 0660 (group `access.socket_group`), so the
//!    kernel turns away everyone but its owner, that group and root;
//! 2. at accept, before a byte is read, `SO_PEERCRED` is checked against
//!    `[access]`; a peer it does not allow gets `Refused(NOT_ALLOWED)`
//!    (sent without waiting) and is closed at once;
//! 3. an allowed connection has `daemon.handshake_timeout_ms` *in all* to
//!    finish its first message, and at most `daemon.max_handshakes` such
//!    connections exist at once (a new one closes the oldest);
//! 4. `clients.max_clients` is checked when the `Hello` arrives, before the
//!    client's region, eventfd or counters are created;
//! 5. when accept runs out of descriptors (`EMFILE`/`ENFILE`), the oldest
//!    unfinished handshake is closed, or, with none, a reserve descriptor
//!    is given up to accept and close the waiting connection (it gets
//!    `Refused(INTERNAL)` naming the limit), and accepting pauses 100 ms
//!    instead of spinning.
//!
//! A socket that closes — the client exited or was killed — removes the
//! client from the dispatcher, which cancels its work on the device and
//! unmaps its region.

mod control_plane;
mod metrics;

use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use rustix::event::{EventfdFlags, eventfd};
use serde::Serialize;
use shm_proto::control::STATUS_PAGE_BUDGET;

use crate::config::Config;
pub use crate::dispatch::Counters;
use crate::dispatch::{ClientStats, Command, Dispatcher, Host};
use crate::repo::{LiveModels, ModelRepo, ModelVersion, Reload, Served};
use shm_proto::control::models_op;
use sluice_backend::Backend;
use sluice_model::ModelRegistry;

/// Where the outcome of a repository command goes: the control-plane
/// connection's token.
pub(crate) type RepoReply = u64;

/// A command for the repository's thread.
#[derive(Debug)]
pub(crate) struct RepoJob {
    op: u32,
    name: String,
    reply: Option<RepoReply>,
}

/// The repository's thread: runs each command (an ONNX import may take
/// seconds, off the dispatcher's and the control plane's threads), and
/// sends the outcome to the control plane.
fn repo_thread(
    mut repo: ModelRepo,
    rx: &std::sync::mpsc::Receiver<RepoJob>,
    replies: &Sender<(u64, bool, String)>,
    wake: &OwnedFd,
) {
    while let Ok(job) = rx.recv() {
        let report = match job.op {
            models_op::LOAD => repo.load(&job.name),
            models_op::UNLOAD => repo.unload(&job.name),
            models_op::RESCAN => repo.rescan(),
            _ => repo.list(),
        };
        if let Some(token) = job.reply {
            let ok = report.errors.is_empty();
            let json = report.to_json_within(STATUS_PAGE_BUDGET);
            let _ = replies.send((token, ok, json));
            let _ = rustix::io::write(wake, &1u64.to_ne_bytes());
        }
    }
}

#[derive(Debug, Clone)]
struct ClientInfo {
    id: u32,
    name: String,
    pid: i32,
    uid: u32,
    connected: Instant,
    stats: Arc<ClientStats>,
}

/// The control plane's counters (all since start).
#[derive(Debug, Default)]
pub struct ControlCounters {
    /// Connections closed at accept: `[access]` does not allow the peer.
    pub not_allowed: AtomicU64,
    /// Connections closed because their first message did not arrive
    /// within `daemon.handshake_timeout_ms`.
    pub handshake_timeouts: AtomicU64,
    /// Unfinished handshakes closed to make room (`daemon.max_handshakes`
    /// reached, or out of descriptors).
    pub handshakes_evicted: AtomicU64,
    /// Connections that arrived while accept failed for want of
    /// descriptors (`EMFILE`/`ENFILE`), taken on the reserve descriptor.
    pub fd_exhausted: AtomicU64,
    /// Connections accepted on the reserve descriptor and closed at once.
    pub shed: AtomicU64,
    /// Connections now open (handshakes and sessions).
    pub open: AtomicU64,
    /// Connections now open that have not finished their first message.
    pub handshaking: AtomicU64,
}

/// State shared by the dispatcher and the control plane.
#[derive(Debug)]
pub struct Shared {
    /// The configuration in force.
    pub config: Config,
    /// Models served: the snapshot in force, swapped by reloads.
    pub models: Arc<LiveModels>,
    /// Counters.
    pub counters: Counters,
    /// Incremented by every dispatcher loop (watchdog).
    pub heartbeat: AtomicU64,
    /// Jobs on the device.
    pub device_queued: AtomicU64,
    /// Control-plane counters.
    pub control_counters: ControlCounters,
    device_name: String,
    layout: Option<Arc<Mutex<sluice_backend::Layout>>>,
    kill: crate::kill_capability::KillCapability,
    realtime: Mutex<String>,
    dispatcher_warning: Mutex<Option<String>>,
    nofile: crate::sys::NofileLimit,
    clients: Mutex<Vec<ClientInfo>>,
    next_id: AtomicU32,
    shutdown: AtomicBool,
    started: Instant,
    tx: Mutex<Sender<Command>>,
    control: Arc<OwnedFd>,
    /// The repository's thread, when reloads are supported.
    repo: Option<Mutex<Sender<RepoJob>>>,
    /// Where the metrics endpoint listens (the address bound), or empty.
    metrics_at: String,
}

impl Host for Shared {
    fn models(&self) -> &LiveModels {
        &self.models
    }
    fn idle_spin_us(&self) -> u32 {
        self.config.daemon.idle_spin_us
    }
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn heartbeat(&self) -> &AtomicU64 {
        &self.heartbeat
    }
    fn device_queued(&self) -> &AtomicU64 {
        &self.device_queued
    }
    fn client_gone(&self, id: u32) {
        self.unregister(id);
    }
    fn clients_config(&self) -> &crate::config::ClientsConfig {
        &self.config.clients
    }
}

impl Shared {
    fn repo_close(&self) {
        if let Some(tx) = &self.repo
            && let Ok(mut tx) = tx.lock()
        {
            // A sender to nowhere: the thread's receiver sees the channel
            // closed.
            *tx = channel().0;
        }
    }

    fn send(&self, cmd: Command) {
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(cmd);
        }
        let _ = rustix::io::write(&*self.control, &1u64.to_ne_bytes());
    }

    /// Hands a repository command to the repository's thread; `reply`
    /// gets the outcome. `false` when reloads are not supported (the
    /// caller answers with [`LiveModels::reload`]'s reason).
    pub(crate) fn repo_command(&self, op: u32, name: String, reply: Option<RepoReply>) -> bool {
        let Some(tx) = &self.repo else {
            return false;
        };
        tx.lock()
            .map(|tx| tx.send(RepoJob { op, name, reply }).is_ok())
            .unwrap_or(false)
    }

    pub(crate) fn unregister(&self, id: u32) {
        if let Ok(mut v) = self.clients.lock() {
            v.retain(|c| c.id != id);
        }
    }

    /// The status document `sluice status` prints, with every client
    /// (may be too large for one control frame: see [`Shared::status_page`]).
    pub fn status(&self) -> Status {
        let clients: Vec<ClientStatus> = self
            .clients
            .lock()
            .map(|v| v.iter().map(ClientInfo::status).collect())
            .unwrap_or_default();
        let mut s = self.status_header(clients.len(), true);
        s.clients = clients;
        s
    }

    /// One page of status as JSON, at most
    /// [`STATUS_PAGE_BUDGET`] bytes: the clients with id `from_id` or
    /// more in id order, as many as fit, and `next_client_id` when more
    /// remain. The latency histograms go in the first page only
    /// (`from_id` 0), whose header a reader of every page keeps.
    pub fn status_page(&self, from_id: u32) -> String {
        let (total, mut clients): (usize, Vec<ClientStatus>) = self
            .clients
            .lock()
            .map(|v| {
                let page = v
                    .iter()
                    .filter(|c| c.id >= from_id)
                    .map(ClientInfo::status)
                    .collect();
                (v.len(), page)
            })
            .unwrap_or_default();
        clients.sort_unstable_by_key(|c| c.id);
        page_json(
            self.status_header(total, from_id == 0),
            clients,
            STATUS_PAGE_BUDGET,
        )
    }

    fn status_header(&self, clients_total: usize, with_latency: bool) -> Status {
        let served = self.models.current();
        let c = &self.counters;
        let cc = &self.control_counters;
        let warning = self
            .dispatcher_warning
            .lock()
            .map(|w| w.clone())
            .unwrap_or_default();
        Status {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol: shm_proto::PROTOCOL_VERSION,
            uptime_s: self.started.elapsed().as_secs_f64(),
            socket: self.config.daemon.socket.display().to_string(),
            metrics: self.metrics_at.clone(),
            device: self.device_name.clone(),
            cluster: self
                .layout
                .as_ref()
                .and_then(|l| l.lock().ok().map(|l| l.clone())),
            kill_mechanism: self.kill.to_string(),
            dispatcher: self.realtime.lock().map(|s| s.clone()).unwrap_or_default(),
            dispatcher_realtime: warning.is_none(),
            dispatcher_warning: warning.unwrap_or_default(),
            models: served
                .registry
                .iter()
                .map(|(_, m)| m.name().to_owned())
                .collect(),
            model_versions: served
                .list()
                .into_iter()
                .take(MODEL_VERSIONS_IN_STATUS)
                .collect(),
            models_reload: match self.models.reload() {
                Reload::Supported => "supported".to_owned(),
                Reload::Refused(why) => format!("refused: {why}"),
            },
            models_errors: self.models.last_errors(),
            device_queued: self.device_queued.load(Ordering::Relaxed),
            submitted: c.submitted.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            dropped_clients: c.dropped_clients.load(Ordering::Relaxed),
            wakes: c.wakes.load(Ordering::Relaxed),
            parks: c.parks.load(Ordering::Relaxed),
            deadline_missed: self.missed_status(&served),
            latency_bounds_ns: if with_latency {
                crate::metrics::LATENCY_BOUNDS_NS.to_vec()
            } else {
                Vec::new()
            },
            latency: if with_latency {
                self.latency_status(&served)
            } else {
                Vec::new()
            },
            control: ControlStatus {
                open_connections: cc.open.load(Ordering::Relaxed),
                handshaking: cc.handshaking.load(Ordering::Relaxed),
                not_allowed: cc.not_allowed.load(Ordering::Relaxed),
                handshake_timeouts: cc.handshake_timeouts.load(Ordering::Relaxed),
                handshakes_evicted: cc.handshakes_evicted.load(Ordering::Relaxed),
                fd_exhausted: cc.fd_exhausted.load(Ordering::Relaxed),
                shed: cc.shed.load(Ordering::Relaxed),
                nofile_limit: self.nofile.now,
            },
            clients_total: clients_total as u64,
            next_client_id: None,
            clients: Vec::new(),
        }
    }
}

impl Shared {
    fn missed_status(&self, served: &Served) -> MissedStatus {
        let m = &self.counters.deadline_missed;
        let real_time = m.real_time.load(Ordering::Relaxed);
        let best_effort = m.best_effort.load(Ordering::Relaxed);
        MissedStatus {
            total: real_time + best_effort,
            real_time,
            best_effort,
            by_model: served
                .registry
                .iter()
                .filter_map(|(id, model)| {
                    let n = m.by_model.get(id as usize)?.load(Ordering::Relaxed);
                    (n > 0).then(|| (model.name().to_owned(), n))
                })
                .collect(),
        }
    }
}

impl Shared {
    /// Each served model's latency histogram per class with a completion,
    /// read from what the dispatcher records for the metrics endpoint
    /// (relaxed loads; the dispatcher does nothing more for it). At most
    /// [`MODEL_VERSIONS_IN_STATUS`] models, in id order.
    fn latency_status(&self, served: &Served) -> Vec<LatencyStatus> {
        let rm = &self.counters.requests;
        let mut out = Vec::new();
        for (id, model) in served.registry.iter().take(MODEL_VERSIONS_IN_STATUS) {
            let Some(mm) = rm.model(id) else { continue };
            for p in [
                shm_proto::Priority::RealTime,
                shm_proto::Priority::BestEffort,
            ] {
                let h = mm.of(p).latency.raw();
                let Some(last) = h.counts.iter().rposition(|&n| n > 0) else {
                    continue;
                };
                out.push(LatencyStatus {
                    model: model.name().to_owned(),
                    priority: p.as_str().to_owned(),
                    counts: h.counts[..=last].to_vec(),
                    sum_ns: h.sum,
                });
            }
        }
        out
    }
}

impl ClientInfo {
    fn status(&self) -> ClientStatus {
        ClientStatus {
            id: self.id,
            name: self.name.clone(),
            pid: self.pid,
            uid: self.uid,
            connected_s: self.connected.elapsed().as_secs_f64(),
            submitted: self.stats.submitted.load(Ordering::Relaxed),
            completed: self.stats.completed.load(Ordering::Relaxed),
            errors: self.stats.errors.load(Ordering::Relaxed),
            on_device: self.stats.on_device.load(Ordering::Relaxed),
        }
    }
}

/// `header` with as many of `clients` (sorted by id) as keep the JSON
/// within `budget` bytes, and `next_client_id` set to the first one left
/// out. At least one client goes in whatever its size, so paging always
/// advances (an entry is a few hundred bytes; a budget is many KiB).
fn page_json(mut header: Status, clients: Vec<ClientStatus>, budget: usize) -> String {
    let to_json = |s: &Status| serde_json::to_string(s).unwrap_or_default();
    // The header with a placeholder next id as large as any real one, so
    // setting the real one later cannot push the page over the budget.
    header.next_client_id = Some(u32::MAX);
    let mut used = to_json(&header).len();
    let mut n = 0;
    for c in &clients {
        // An entry costs its JSON plus a separating comma.
        let cost = serde_json::to_string(c).map(|j| j.len()).unwrap_or(0) + 1;
        if n > 0 && used + cost > budget {
            break;
        }
        used += cost;
        n += 1;
    }
    header.next_client_id = clients.get(n).map(|c| c.id);
    let mut clients = clients;
    clients.truncate(n);
    header.clients = clients;
    to_json(&header)
}

/// Most models [`Status::model_versions`] lists (each page of status must
/// fit a frame); `sluice models list` lists them all.
pub const MODEL_VERSIONS_IN_STATUS: usize = 64;

/// One client in [`Status`].
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ClientStatus {
    /// Daemon-assigned number.
    pub id: u32,
    /// Name from the client's hello.
    pub name: String,
    /// Peer pid (`SO_PEERCRED`).
    pub pid: i32,
    /// Peer uid.
    pub uid: u32,
    /// Seconds since it connected.
    pub connected_s: f64,
    /// Requests taken off its ring.
    pub submitted: u64,
    /// OK completions.
    pub completed: u64,
    /// Error completions.
    pub errors: u64,
    /// Its requests on the device now.
    pub on_device: u32,
}

/// What `sluice status` shows.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Status {
    /// Daemon pid.
    pub pid: u32,
    /// Daemon version.
    pub version: String,
    /// Protocol version.
    pub protocol: u32,
    /// Seconds since start.
    pub uptime_s: f64,
    /// Control socket.
    pub socket: String,
    /// Where `GET /metrics` is served (`[metrics] listen`, with the port
    /// bound when 0 was asked for); empty when there is no endpoint.
    #[serde(default)]
    pub metrics: String,
    /// Device backend.
    pub device: String,
    /// With `[cluster]`: each GPU's partitions, what runs where, and each
    /// model's load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<sluice_backend::Layout>,
    /// How running GPU work is killed: the start-up probe of the patched
    /// drivers (`amd-wave-kill …`, `nvidia-trap …`, or `none: …` with the
    /// reasons).
    #[serde(default)]
    pub kill_mechanism: String,
    /// Dispatcher thread setup (pinning, SCHED_FIFO, mlock).
    pub dispatcher: String,
    /// Whether the dispatcher thread runs `SCHED_FIFO`.
    #[serde(default)]
    pub dispatcher_realtime: bool,
    /// When it does not: what that costs and how to fix it (one line);
    /// empty otherwise.
    #[serde(default)]
    pub dispatcher_warning: String,
    /// Models served.
    pub models: Vec<String>,
    /// Each model served with its id, version and where it came from (the
    /// first [`MODEL_VERSIONS_IN_STATUS`] by name).
    #[serde(default)]
    pub model_versions: Vec<ModelVersion>,
    /// Whether `sluice models load|unload` and SIGHUP can change the
    /// models (`supported`, or `refused: ` and why).
    #[serde(default)]
    pub models_reload: String,
    /// The last reload's errors (the models named kept their version).
    #[serde(default)]
    pub models_errors: Vec<String>,
    /// Jobs queued or running on the device.
    pub device_queued: u64,
    /// Requests taken off rings.
    pub submitted: u64,
    /// OK completions.
    pub completed: u64,
    /// Error completions.
    pub errors: u64,
    /// Sessions refused.
    pub refused: u64,
    /// Clients dropped for corrupting their region.
    pub dropped_clients: u64,
    /// Futex wakes sent to clients.
    pub wakes: u64,
    /// Dispatcher parks.
    pub parks: u64,
    /// Requests that completed with `DEADLINE_MISSED`: their deadline
    /// passed before they started, and none of their kernels ran.
    #[serde(default)]
    pub deadline_missed: MissedStatus,
    /// Upper bounds, ns, of the buckets of [`Status::latency`]'s
    /// histograms (a last bucket, `+Inf`, follows them). Empty from a
    /// daemon that predates it, and on status pages after the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_bounds_ns: Vec<u64>,
    /// Each served model's latency histogram, per priority class that has
    /// had an OK completion: the counts behind the metrics endpoint's
    /// `sluice_request_latency_seconds`, since start. The first
    /// [`MODEL_VERSIONS_IN_STATUS`] models; first page only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency: Vec<LatencyStatus>,
    /// The control socket's connections and what it turned away.
    #[serde(default)]
    pub control: ControlStatus,
    /// Clients connected in all (`clients` may hold only a page of them).
    #[serde(default)]
    pub clients_total: u64,
    /// When `clients` is one page of several: the id to ask for next
    /// (`StatusPage { from_id }`); absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_client_id: Option<u32>,
    /// Connected clients (in a paged reply: those of this page, by id).
    pub clients: Vec<ClientStatus>,
}

/// [`Status::deadline_missed`]: requests not started because their deadline
/// had passed, by class and by model.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct MissedStatus {
    /// All of them.
    pub total: u64,
    /// Real-time requests.
    pub real_time: u64,
    /// Best-effort requests.
    pub best_effort: u64,
    /// By model name; models with none are left out.
    #[serde(default)]
    pub by_model: std::collections::BTreeMap<String, u64>,
}

/// One model's latency histogram in one class, in [`Status::latency`]:
/// received (taken off the ring) to finished on the device, of the requests
/// completed OK, since the daemon started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct LatencyStatus {
    /// The model's name.
    pub model: String,
    /// Its class: `rt` (real-time) or `be` (best-effort).
    pub priority: String,
    /// Completions per bucket, not cumulative: bucket `i` holds latencies
    /// up to [`Status::latency_bounds_ns`]`[i]` (above the one before);
    /// the bucket after the last bound is `+Inf`. Trailing empty buckets
    /// are left out.
    pub counts: Vec<u64>,
    /// Sum of the latencies, ns (read apart from the counts: it may lag
    /// them by the completion being recorded).
    pub sum_ns: u64,
}

/// The control plane in [`Status`].
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct ControlStatus {
    /// Connections open now (handshakes and sessions).
    pub open_connections: u64,
    /// Open connections that have not finished their first message.
    pub handshaking: u64,
    /// Closed at accept: `[access]` does not allow the peer.
    pub not_allowed: u64,
    /// Closed for missing `daemon.handshake_timeout_ms`.
    pub handshake_timeouts: u64,
    /// Unfinished handshakes closed to make room.
    pub handshakes_evicted: u64,
    /// Connections that arrived while the daemon was out of descriptors.
    pub fd_exhausted: u64,
    /// Connections accepted on the reserve descriptor and closed.
    pub shed: u64,
    /// The daemon's `RLIMIT_NOFILE` soft limit (`None`: unlimited).
    pub nofile_limit: Option<u64>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another daemon answers on the socket.
    #[error(
        "another sluiced is already listening on {0}; stop it first or set daemon.socket to another path"
    )]
    AlreadyRunning(PathBuf),
    /// The socket's directory or the socket could not be created.
    #[error("cannot listen on {path}: check that its directory is writable by this user")]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `access.socket_group` names no group, or the socket cannot be given
    /// to it.
    #[error("cannot give the socket {path} to group {group}: {why}")]
    SocketGroup {
        /// The socket path.
        path: PathBuf,
        /// `access.socket_group`.
        group: String,
        /// What went wrong and the fix.
        why: String,
    },
    /// The metrics endpoint could not be bound.
    #[error(
        "cannot serve metrics on {listen}: choose a free port or another socket path in \
         [metrics] listen, or remove the key"
    )]
    Metrics {
        /// `metrics.listen`.
        listen: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A thread, eventfd or epoll instance could not be created.
    #[error("cannot start the daemon's {what}")]
    Os {
        /// What could not be created.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A running daemon: its threads and its socket. Dropping it shuts it down.
#[derive(Debug)]
pub struct Daemon {
    shared: Arc<Shared>,
    dispatcher: Option<JoinHandle<()>>,
    acceptor: Option<JoinHandle<()>>,
    repo_thread: Option<JoinHandle<()>>,
    metrics_thread: Option<JoinHandle<()>>,
    control_wake: Arc<OwnedFd>,
}

/// Descriptors a session holds in the daemon: its socket, the
/// dispatcher's duplicate of it, the region memfd and the wake eventfd.
pub const FDS_PER_CLIENT: u64 = 4;

impl Daemon {
    /// Binds the socket and starts the dispatcher and acceptor threads,
    /// serving `registry` as it is (reloads are refused).
    pub fn start(
        config: Config,
        registry: Arc<ModelRegistry>,
        device: Box<dyn Backend>,
    ) -> Result<Self, StartError> {
        let why = LiveModels::refusal(config.device.backend.as_str());
        let live = Arc::new(LiveModels::fixed((*registry).clone(), why));
        Self::start_live(config, live, None, device)
    }

    /// [`Daemon::start`] serving `models`; with `repo`, reloads are
    /// carried out on a thread of the repository's own
    /// (`sluice models`, [`Daemon::rescan_models`]).
    pub fn start_live(
        config: Config,
        models: Arc<LiveModels>,
        repo: Option<ModelRepo>,
        device: Box<dyn Backend>,
    ) -> Result<Self, StartError> {
        let path = config.daemon.socket.clone();
        let nofile = crate::sys::raise_nofile_limit();
        let need = FDS_PER_CLIENT * config.clients.max_clients as u64
            + config.daemon.max_handshakes as u64
            + 64;
        match nofile.now {
            Some(n) if n < need => tracing::warn!(
                "RLIMIT_NOFILE is {n} (hard limit {}), but clients.max_clients = {} sessions \
                 need about {need} descriptors; beyond ~{} sessions new connections are shed. \
                 Raise LimitNOFILE= in the unit (or `ulimit -Hn`), or lower clients.max_clients",
                nofile
                    .hard
                    .map_or_else(|| "unlimited".to_owned(), |h| h.to_string()),
                config.clients.max_clients,
                n.saturating_sub(64 + config.daemon.max_handshakes as u64) / FDS_PER_CLIENT
            ),
            _ => tracing::info!(
                "RLIMIT_NOFILE {} (was {})",
                nofile
                    .now
                    .map_or_else(|| "unlimited".to_owned(), |n| n.to_string()),
                nofile
                    .before
                    .map_or_else(|| "unlimited".to_owned(), |n| n.to_string())
            ),
        }
        let listener = bind(&path, config.access.socket_group.as_deref())?;
        let metrics_listener = config
            .metrics
            .listen
            .as_ref()
            .map(metrics::Listener::bind)
            .transpose()?;
        let control_wake = Arc::new(
            eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(|e| {
                StartError::Os {
                    what: "control-plane eventfd",
                    source: e.into(),
                }
            })?,
        );
        let control = Arc::new(
            eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(|e| {
                StartError::Os {
                    what: "control eventfd",
                    source: e.into(),
                }
            })?,
        );
        let (tx, rx) = channel();
        let kill = crate::kill_capability::probe();
        tracing::info!("kill mechanism for running GPU work: {kill}");
        let model_slots = if repo.is_some() {
            crate::repo::MAX_MODEL_IDS as usize
        } else {
            models.current().registry.id_bound()
        };
        let (repo_tx, repo_rx) = channel::<RepoJob>();
        let shared = Arc::new(Shared {
            config,
            models,
            repo: repo.as_ref().map(|_| Mutex::new(repo_tx)),
            counters: Counters {
                deadline_missed: crate::dispatch::MissedCounters::for_models(model_slots),
                requests: crate::metrics::RequestMetrics::for_models(model_slots),
                ..Counters::default()
            },
            heartbeat: AtomicU64::new(0),
            device_queued: AtomicU64::new(0),
            control_counters: ControlCounters::default(),
            device_name: device.name().to_owned(),
            layout: device.layout(),
            kill,
            realtime: Mutex::new(String::from("starting")),
            dispatcher_warning: Mutex::new(None),
            nofile,
            clients: Mutex::new(Vec::new()),
            next_id: AtomicU32::new(1),
            shutdown: AtomicBool::new(false),
            started: Instant::now(),
            tx: Mutex::new(tx),
            control: control.clone(),
            metrics_at: metrics_listener
                .as_ref()
                .map(|(_, at)| at.clone())
                .unwrap_or_default(),
        });
        let dispatcher =
            Dispatcher::new(shared.clone(), device, rx, control).map_err(|e| StartError::Os {
                what: "dispatcher epoll",
                source: e,
            })?;
        let s2 = shared.clone();
        let dispatcher = std::thread::Builder::new()
            .name("sluice-dispatch".into())
            .spawn(move || {
                let report = crate::sys::apply_dispatcher_setup(&s2.config.daemon);
                for w in report.warnings() {
                    tracing::warn!("{w}");
                }
                let cpu = report.cpu_warning();
                if let Some(w) = &cpu {
                    tracing::warn!("{w}");
                }
                if let Ok(mut r) = s2.dispatcher_warning.lock() {
                    *r = cpu;
                }
                if let Ok(mut r) = s2.realtime.lock() {
                    *r = report.to_string();
                }
                dispatcher.run();
            })
            .map_err(|e| StartError::Os {
                what: "dispatcher thread",
                source: e,
            })?;
        let (replies_tx, replies_rx) = channel::<(u64, bool, String)>();
        let repo_thread = match repo {
            Some(repo) => {
                let wake = control_wake.clone();
                Some(
                    std::thread::Builder::new()
                        .name("sluice-models".into())
                        .spawn(move || repo_thread(repo, &repo_rx, &replies_tx, &wake))
                        .map_err(|e| StartError::Os {
                            what: "model repository thread",
                            source: e,
                        })?,
                )
            }
            None => None,
        };
        let plane = control_plane::ControlPlane::new(
            listener,
            shared.clone(),
            control_wake.clone(),
            replies_rx,
        )
        .map_err(|e| StartError::Os {
            what: "control-plane epoll",
            source: e,
        })?;
        let acceptor = std::thread::Builder::new()
            .name("sluice-control".into())
            .spawn(move || plane.run())
            .map_err(|e| StartError::Os {
                what: "control-plane thread",
                source: e,
            })?;
        let metrics_thread = match metrics_listener {
            Some((listener, at)) => {
                let s = shared.clone();
                let t = std::thread::Builder::new()
                    .name("sluice-metrics".into())
                    .spawn(move || metrics::serve(listener, s))
                    .map_err(|e| StartError::Os {
                        what: "metrics thread",
                        source: e,
                    })?;
                tracing::info!(
                    metrics = %at,
                    "serving GET /metrics (unauthenticated: keep it on loopback)"
                );
                Some(t)
            }
            None => None,
        };
        tracing::info!(socket = %path.display(), "sluiced listening");
        Ok(Self {
            shared,
            dispatcher: Some(dispatcher),
            acceptor: Some(acceptor),
            repo_thread,
            metrics_thread,
            control_wake,
        })
    }

    /// Re-scans `[models] dir` (what SIGHUP does): new files loaded,
    /// changed ones loaded as a new version, removed ones unloaded. Returns
    /// at once; the work is done on the repository's thread. `Err` with
    /// the reason when this daemon's backend does not reload.
    pub fn rescan_models(&self) -> Result<(), String> {
        if self
            .shared
            .repo_command(models_op::RESCAN, String::new(), None)
        {
            return Ok(());
        }
        Err(match self.shared.models.reload() {
            Reload::Refused(why) => why.clone(),
            Reload::Supported => "the model repository's thread has stopped".to_owned(),
        })
    }

    /// The socket clients connect to.
    pub fn socket_path(&self) -> &Path {
        &self.shared.config.daemon.socket
    }

    /// Shared state (status, counters, heartbeat).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Whether the dispatcher thread is still running.
    pub fn is_running(&self) -> bool {
        self.dispatcher.as_ref().is_some_and(|d| !d.is_finished())
    }

    /// Stops accepting, closes every client (they see `Disconnected`),
    /// joins the threads and removes the socket.
    pub fn shutdown(&mut self) {
        if self.shared.shutdown.swap(true, Ordering::SeqCst) {
            return;
        }
        self.shared.send(Command::Shutdown);
        // Wake the control plane out of epoll_wait.
        let _ = rustix::io::write(&*self.control_wake, &1u64.to_ne_bytes());
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        if let Some(d) = self.dispatcher.take() {
            let _ = d.join();
        }
        // It looks at the stop flag at least every 100 ms.
        if let Some(m) = self.metrics_thread.take() {
            let _ = m.join();
        }
        // Closing the command channel ends the repository's thread once
        // it has finished what it is doing.
        self.shared.repo_close();
        if let Some(r) = self.repo_thread.take() {
            let _ = r.join();
        }
        let _ = std::fs::remove_file(&self.shared.config.daemon.socket);
        tracing::info!("sluiced stopped");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn bind(path: &Path, socket_group: Option<&str>) -> Result<UnixListener, StartError> {
    let listen_err = |source| StartError::Listen {
        path: path.to_owned(),
        source,
    };
    let group_err = |group: &str, why: String| StartError::SocketGroup {
        path: path.to_owned(),
        group: group.to_owned(),
        why,
    };
    let gid = match socket_group {
        Some(g) => Some(crate::sys::group_id(g).ok_or_else(|| {
            group_err(
                g,
                "no such group; create it (`groupadd --system sluice`) or correct \
                     access.socket_group"
                    .to_owned(),
            )
        })?),
        None => None,
    };
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        // A directory we create gets the socket's access: owner and group
        // may enter it. An existing one (/run/sluice from systemd's
        // RuntimeDirectory=, or a user's own) is left as it is.
        std::fs::create_dir_all(dir).map_err(listen_err)?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750));
        if let Some(gid) = gid {
            std::os::unix::fs::chown(dir, None, Some(gid)).map_err(|e| {
                group_err(
                    socket_group.unwrap_or_default(),
                    format!(
                        "chown of its directory {} failed ({e}); the daemon's user must be a \
                         member of that group",
                        dir.display()
                    ),
                )
            })?;
        }
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(StartError::AlreadyRunning(path.to_owned()));
        }
        // A socket left by a daemon that died: nobody answers on it.
        std::fs::remove_file(path).map_err(listen_err)?;
    }
    let l = UnixListener::bind(path).map_err(listen_err)?;
    // Owner and group may connect (the kernel checks write permission on
    // the socket file at connect); then SO_PEERCRED against [access] at
    // accept.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(listen_err)?;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
            group_err(
                socket_group.unwrap_or_default(),
                format!("{e}; the daemon's user must be a member of that group (or run as root)"),
            )
        })?;
    }
    l.set_nonblocking(true).map_err(listen_err)?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shm_proto::control::{MAX_FRAME, Msg};

    fn header() -> Status {
        Status {
            pid: 1,
            version: "0.1.0".into(),
            protocol: 1,
            uptime_s: 1e9,
            socket: "/run/sluice/sluiced.sock".into(),
            metrics: format!("unix:/run/sluice/{}.sock", "m".repeat(100)),
            device: "sim".into(),
            cluster: None,
            kill_mechanism: "none".into(),
            dispatcher: "not pinned, SCHED_OTHER".into(),
            dispatcher_realtime: false,
            dispatcher_warning: "w".repeat(400),
            models: (0..32).map(|i| format!("model_{i}")).collect(),
            model_versions: (0..MODEL_VERSIONS_IN_STATUS as u32)
                .map(|i| ModelVersion {
                    id: i,
                    name: format!("model_{i:025}"),
                    version: u32::MAX,
                    source: format!("/var/lib/sluice/models/{}.onnx (+ .toml)", "m".repeat(100)),
                    inputs: vec![format!("input: f32[N,3,224,224]")],
                    outputs: vec![format!("output: f32[N,1000]")],
                    max_batch: 1024,
                    runs_on_cpu: true,
                })
                .collect(),
            models_reload: "refused: ".to_owned() + &"r".repeat(200),
            models_errors: vec!["e".repeat(300); 4],
            device_queued: u64::MAX,
            submitted: u64::MAX,
            completed: u64::MAX,
            errors: u64::MAX,
            refused: u64::MAX,
            dropped_clients: u64::MAX,
            wakes: u64::MAX,
            parks: u64::MAX,
            deadline_missed: MissedStatus {
                total: u64::MAX,
                real_time: u64::MAX,
                best_effort: u64::MAX,
                by_model: (0..32).map(|i| (format!("model_{i}"), u64::MAX)).collect(),
            },
            latency_bounds_ns: crate::metrics::LATENCY_BOUNDS_NS.to_vec(),
            // Every model in both classes, every bucket at its maximum.
            latency: (0..MODEL_VERSIONS_IN_STATUS * 2)
                .map(|i| LatencyStatus {
                    model: format!("model_{:025}", i / 2),
                    priority: ["rt", "be"][i % 2].into(),
                    counts: vec![u64::MAX; crate::metrics::LATENCY_SLOTS],
                    sum_ns: u64::MAX,
                })
                .collect(),
            control: ControlStatus::default(),
            clients_total: 4096,
            next_client_id: None,
            clients: Vec::new(),
        }
    }

    /// The largest entry a client can have: a 64-byte name of control
    /// characters (each escaped as `\u00XX`), every counter at its maximum.
    fn worst_client(id: u32) -> ClientStatus {
        ClientStatus {
            id,
            name: "\u{1}".repeat(shm_proto::control::MAX_NAME),
            pid: i32::MIN,
            uid: u32::MAX,
            connected_s: f64::MAX,
            submitted: u64::MAX,
            completed: u64::MAX,
            errors: u64::MAX,
            on_device: u32::MAX,
        }
    }

    #[test]
    fn pages_of_4096_worst_case_clients_fit_a_frame_and_cover_every_id_once() {
        let all: Vec<ClientStatus> = (1..=4096).map(|i| worst_client(i * 3)).collect();
        let mut from = 0;
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let page: Vec<ClientStatus> = all.iter().filter(|c| c.id >= from).cloned().collect();
            let json = page_json(header(), page, STATUS_PAGE_BUDGET);
            assert!(json.len() <= STATUS_PAGE_BUDGET, "{} bytes", json.len());
            let mut buf = vec![0u8; MAX_FRAME + 4];
            Msg::StatusReply { json: &json }
                .encode(&mut buf)
                .expect("a page fits one frame");
            let s: Status = serde_json::from_str(&json).expect("a page is valid JSON");
            assert_eq!(s.clients_total, 4096);
            pages += 1;
            seen.extend(s.clients.iter().map(|c| c.id));
            match s.next_client_id {
                Some(n) => {
                    assert!(n > from);
                    from = n;
                }
                None => break,
            }
        }
        let want: Vec<u32> = all.iter().map(|c| c.id).collect();
        assert_eq!(seen, want, "every id once, in order");
        assert!(pages > 1, "4096 worst-case entries cannot fit one page");
    }

    #[test]
    fn a_page_always_holds_at_least_one_client() {
        let json = page_json(header(), vec![worst_client(7), worst_client(8)], 10);
        let s: Status = serde_json::from_str(&json).unwrap();
        assert_eq!(s.clients.len(), 1);
        assert_eq!(s.next_client_id, Some(8));
        let json = page_json(header(), Vec::new(), STATUS_PAGE_BUDGET);
        let s: Status = serde_json::from_str(&json).unwrap();
        assert!(s.clients.is_empty());
        assert_eq!(s.next_client_id, None);
        assert!(!json.contains("next_client_id"));
    }
}
