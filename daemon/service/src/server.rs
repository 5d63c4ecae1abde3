//! The control socket: accepting clients, authenticating them with
//! `SO_PEERCRED`, the versioned handshake, handing out sealed regions with
//! `SCM_RIGHTS`, model look-ups and status; and [`Daemon`], the handle that
//! starts and stops the whole service.
//!
//! One thread accepts; one thread per connected client blocks on its socket
//! (the control path is cold). A socket that closes — the client exited or
//! was killed — removes the client from the dispatcher, which cancels its
//! work on the device and unmaps its region.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{EventfdFlags, eventfd};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use serde::Serialize;
use shm_proto::control::{self, Msg, refused};

use crate::config::Config;
pub use crate::dispatch::Counters;
use crate::dispatch::{ClientStats, Command, Dispatcher, Host, NewClient};
use crate::region::Region;
use shm_proto::region::DaemonRings;
use sluice_backend::Backend;
use sluice_model::ModelRegistry;

#[derive(Debug, Clone)]
struct ClientInfo {
    id: u32,
    name: String,
    pid: i32,
    uid: u32,
    connected: Instant,
    stats: Arc<ClientStats>,
}

/// State shared by the dispatcher, the acceptor and connection threads.
#[derive(Debug)]
pub struct Shared {
    /// The configuration in force.
    pub config: Config,
    /// Models served.
    pub registry: Arc<ModelRegistry>,
    /// Counters.
    pub counters: Counters,
    /// Incremented by every dispatcher loop (watchdog).
    pub heartbeat: AtomicU64,
    /// Jobs on the device.
    pub device_queued: AtomicU64,
    device_name: String,
    kill: crate::kill_capability::KillCapability,
    realtime: Mutex<String>,
    clients: Mutex<Vec<ClientInfo>>,
    next_id: AtomicU32,
    shutdown: AtomicBool,
    started: Instant,
    tx: Mutex<Sender<Command>>,
    control: Arc<OwnedFd>,
}

impl Host for Shared {
    fn registry(&self) -> &ModelRegistry {
        &self.registry
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
    fn send(&self, cmd: Command) {
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(cmd);
        }
        let _ = rustix::io::write(&*self.control, &1u64.to_ne_bytes());
    }

    pub(crate) fn unregister(&self, id: u32) {
        if let Ok(mut v) = self.clients.lock() {
            v.retain(|c| c.id != id);
        }
    }

    /// The status document `sluice status` prints.
    pub fn status(&self) -> Status {
        let c = &self.counters;
        let clients = self
            .clients
            .lock()
            .map(|v| {
                v.iter()
                    .map(|ci| ClientStatus {
                        id: ci.id,
                        name: ci.name.clone(),
                        pid: ci.pid,
                        uid: ci.uid,
                        connected_s: ci.connected.elapsed().as_secs_f64(),
                        submitted: ci.stats.submitted.load(Ordering::Relaxed),
                        completed: ci.stats.completed.load(Ordering::Relaxed),
                        errors: ci.stats.errors.load(Ordering::Relaxed),
                        on_device: ci.stats.on_device.load(Ordering::Relaxed),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Status {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol: shm_proto::PROTOCOL_VERSION,
            uptime_s: self.started.elapsed().as_secs_f64(),
            socket: self.config.daemon.socket.display().to_string(),
            device: self.device_name.clone(),
            kill_mechanism: self.kill.to_string(),
            dispatcher: self.realtime.lock().map(|s| s.clone()).unwrap_or_default(),
            models: self
                .registry
                .iter()
                .map(|(_, m)| m.name().to_owned())
                .collect(),
            device_queued: self.device_queued.load(Ordering::Relaxed),
            submitted: c.submitted.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            dropped_clients: c.dropped_clients.load(Ordering::Relaxed),
            wakes: c.wakes.load(Ordering::Relaxed),
            parks: c.parks.load(Ordering::Relaxed),
            clients,
        }
    }
}

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
    /// Device backend.
    pub device: String,
    /// How running GPU work is killed: the start-up probe of the patched
    /// drivers (`amd-wave-kill …`, `nvidia-trap …`, or `none: …` with the
    /// reasons).
    #[serde(default)]
    pub kill_mechanism: String,
    /// Dispatcher thread setup (pinning, SCHED_FIFO, mlock).
    pub dispatcher: String,
    /// Models served.
    pub models: Vec<String>,
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
    /// Connected clients.
    pub clients: Vec<ClientStatus>,
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
}

impl Daemon {
    /// Binds the socket and starts the dispatcher and acceptor threads.
    pub fn start(
        config: Config,
        registry: Arc<ModelRegistry>,
        device: Box<dyn Backend>,
    ) -> Result<Self, StartError> {
        let path = config.daemon.socket.clone();
        let listener = bind(&path)?;
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
        let shared = Arc::new(Shared {
            config,
            registry,
            counters: Counters::default(),
            heartbeat: AtomicU64::new(0),
            device_queued: AtomicU64::new(0),
            device_name: device.name().to_owned(),
            kill,
            realtime: Mutex::new(String::from("starting")),
            clients: Mutex::new(Vec::new()),
            next_id: AtomicU32::new(1),
            shutdown: AtomicBool::new(false),
            started: Instant::now(),
            tx: Mutex::new(tx),
            control: control.clone(),
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
                if let Ok(mut r) = s2.realtime.lock() {
                    *r = report.to_string();
                }
                dispatcher.run();
            })
            .map_err(|e| StartError::Os {
                what: "dispatcher thread",
                source: e,
            })?;
        let s3 = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("sluice-accept".into())
            .spawn(move || accept_loop(listener, s3))
            .map_err(|e| StartError::Os {
                what: "acceptor thread",
                source: e,
            })?;
        tracing::info!(socket = %path.display(), "sluiced listening");
        Ok(Self {
            shared,
            dispatcher: Some(dispatcher),
            acceptor: Some(acceptor),
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
        // Wake the acceptor out of accept().
        let _ = UnixStream::connect(&self.shared.config.daemon.socket);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        if let Some(d) = self.dispatcher.take() {
            let _ = d.join();
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

fn bind(path: &Path) -> Result<UnixListener, StartError> {
    let listen_err = |source| StartError::Listen {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).map_err(listen_err)?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(StartError::AlreadyRunning(path.to_owned()));
        }
        // A socket left by a daemon that died: nobody answers on it.
        std::fs::remove_file(path).map_err(listen_err)?;
    }
    let l = UnixListener::bind(path).map_err(listen_err)?;
    // Access is decided by SO_PEERCRED against [access], not by file mode.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(listen_err)?;
    Ok(l)
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("sluice-conn".into())
            .spawn(move || serve_connection(stream, s));
        if let Err(e) = spawned {
            tracing::error!("cannot start a connection thread: {e}");
        }
    }
}

fn send(sock: &mut UnixStream, msg: &Msg<'_>) -> std::io::Result<()> {
    let mut buf = vec![0u8; control::FRAME_HEADER + 64 + msg_payload_hint(msg)];
    let n = msg
        .encode(&mut buf)
        .map_err(|e| std::io::Error::other(format!("frame needs {} bytes", e.needed)))?;
    sock.write_all(&buf[..n])
}

fn msg_payload_hint(msg: &Msg<'_>) -> usize {
    match msg {
        Msg::StatusReply { json } => json.len(),
        Msg::Refused { message, .. } => message.len(),
        _ => 512,
    }
}

fn refuse(sock: &mut UnixStream, shared: &Shared, code: u32, message: &str) {
    shared.counters.refused.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(code, "refused a client: {message}");
    let _ = send(sock, &Msg::Refused { code, message });
}

/// Reads one frame body. `Ok(None)` on a clean EOF before a frame.
fn read_frame(sock: &mut UnixStream, body: &mut Vec<u8>) -> std::io::Result<Option<()>> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = sock.read(&mut prefix[got..])?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += n;
    }
    let len = Msg::body_len(prefix).map_err(|e| std::io::Error::other(e.to_string()))?;
    body.clear();
    body.resize(len, 0);
    sock.read_exact(body)?;
    Ok(Some(()))
}

fn serve_connection(mut sock: UnixStream, shared: Arc<Shared>) {
    if shared.shutdown.load(Ordering::SeqCst) {
        return;
    }
    let cred = match rustix::net::sockopt::socket_peercred(&sock) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("SO_PEERCRED failed: {e}");
            return;
        }
    };
    let (uid, gid, pid) = (
        cred.uid.as_raw(),
        cred.gid.as_raw(),
        cred.pid.as_raw_nonzero().get(),
    );
    let daemon_uid = rustix::process::geteuid().as_raw();
    // A slow or silent peer must not hold a thread forever before its hello.
    let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
    let mut body = Vec::with_capacity(256);
    match read_frame(&mut sock, &mut body) {
        Ok(Some(())) => {}
        _ => return,
    }
    if !shared.config.access.allows(uid, gid, daemon_uid) {
        let msg = format!(
            "uid {uid} (gid {gid}) is not allowed to use this daemon; add it to \
             access.allowed_uids (or its group to access.allowed_gids) in the daemon's config"
        );
        refuse(&mut sock, &shared, refused::NOT_ALLOWED, &msg);
        return;
    }
    let name = match Msg::decode(&body) {
        Ok(Msg::StatusRequest) => {
            let json = serde_json::to_string(&shared.status()).unwrap_or_default();
            let _ = send(&mut sock, &Msg::StatusReply { json: &json });
            return;
        }
        Ok(Msg::Hello {
            magic,
            version,
            layout_hash,
            name,
            ..
        }) => {
            if magic != shm_proto::MAGIC {
                let msg = format!(
                    "hello carries magic {magic:#018x}, not sluice's {:#018x}; \
                     is this a sluice client library?",
                    shm_proto::MAGIC
                );
                refuse(&mut sock, &shared, refused::BAD_MESSAGE, &msg);
                return;
            }
            if version != shm_proto::PROTOCOL_VERSION {
                let msg = format!(
                    "client speaks sluice protocol v{version}, this daemon speaks v{}; \
                     rebuild the client against the daemon's version of sluice-client",
                    shm_proto::PROTOCOL_VERSION
                );
                refuse(&mut sock, &shared, refused::VERSION_MISMATCH, &msg);
                return;
            }
            if layout_hash != shm_proto::LAYOUT_HASH {
                let msg = format!(
                    "client's shared-memory layout hash {layout_hash:#x} differs from the \
                     daemon's {:#x} (same protocol version, different build); rebuild both \
                     from the same sluice release",
                    shm_proto::LAYOUT_HASH
                );
                refuse(&mut sock, &shared, refused::LAYOUT_MISMATCH, &msg);
                return;
            }
            name.to_owned()
        }
        decoded => {
            let why = match decoded {
                Err(e) => e.to_string(),
                Ok(_) => "the first message must be a sluice Hello or StatusRequest".to_owned(),
            };
            match Msg::peek_hello_version(&body) {
                Some((magic, v))
                    if magic == shm_proto::MAGIC && v != shm_proto::PROTOCOL_VERSION =>
                {
                    let msg = format!(
                        "cannot decode a hello of protocol v{v} ({why}); this daemon speaks v{}; \
                         rebuild the client against the daemon's version of sluice-client",
                        shm_proto::PROTOCOL_VERSION
                    );
                    refuse(&mut sock, &shared, refused::VERSION_MISMATCH, &msg);
                }
                _ => refuse(
                    &mut sock,
                    &shared,
                    refused::BAD_MESSAGE,
                    &format!("malformed first message: {why}"),
                ),
            }
            return;
        }
    };
    // Reserve the client's place under the lock, so concurrent handshakes
    // cannot together exceed clients.max_clients.
    let max = shared.config.clients.max_clients;
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let stats = Arc::new(ClientStats::default());
    let reserved = match shared.clients.lock() {
        Ok(mut v) if v.len() < max => {
            v.push(ClientInfo {
                id,
                name: name.clone(),
                pid,
                uid,
                connected: Instant::now(),
                stats: stats.clone(),
            });
            true
        }
        _ => false,
    };
    if !reserved {
        let msg = format!(
            "daemon already serves clients.max_clients = {max} clients; raise it or retry later"
        );
        refuse(&mut sock, &shared, refused::TOO_MANY_CLIENTS, &msg);
        return;
    }
    // From here on, every early return must give the place back.
    let release = |shared: &Shared| shared.unregister(id);
    let geometry = shm_proto::Geometry {
        sq_entries: shared.config.clients.sq_entries,
        cq_entries: shared.config.clients.cq_entries,
        arena_size: shared.config.clients.arena_bytes,
    };
    let setup = Region::create(id, geometry)
        .map_err(|e| e.to_string())
        .and_then(|r| DaemonRings::new(r, &geometry).map_err(|e| e.to_string()))
        .and_then(|r| {
            eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
                .map(|e| (r, e))
                .map_err(|e| format!("eventfd: {e}"))
        });
    let (rings, wake) = match setup {
        Ok(x) => x,
        Err(e) => {
            release(&shared);
            refuse(&mut sock, &shared, refused::INTERNAL, &e);
            return;
        }
    };
    let welcome = Msg::Welcome {
        version: shm_proto::PROTOCOL_VERSION,
        client_id: id,
        sq_entries: geometry.sq_entries,
        cq_entries: geometry.cq_entries,
        arena_size: geometry.arena_size,
        region_size: geometry.region_size(),
    };
    let mut frame = [0u8; 128];
    let Ok(n) = welcome.encode(&mut frame) else {
        release(&shared);
        return;
    };
    let fds = [rings.mapping().fd().as_fd(), wake.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    anc.push(SendAncillaryMessage::ScmRights(&fds));
    let sent = rustix::net::sendmsg(
        &sock,
        &[std::io::IoSlice::new(&frame[..n])],
        &mut anc,
        SendFlags::NOSIGNAL,
    );
    match sent {
        Ok(k) if k == n => {}
        Ok(k) => {
            if sock.write_all(&frame[k..n]).is_err() {
                release(&shared);
                return;
            }
        }
        Err(_) => {
            release(&shared);
            return;
        }
    }
    let Ok(sock_clone) = sock.try_clone() else {
        release(&shared);
        return;
    };
    tracing::info!(client = id, pid, uid, name = %name, "client connected");
    shared.send(Command::Add(NewClient {
        id,
        rings,
        wake,
        sock: sock_clone,
        stats,
    }));
    let _ = sock.set_read_timeout(None);
    // The session: model look-ups until the socket closes.
    while let Ok(Some(())) = read_frame(&mut sock, &mut body) {
        let reply_ok = match Msg::decode(&body) {
            Ok(Msg::LookupModel { name }) => match shared.registry.lookup(name) {
                Some((mid, m)) => send(
                    &mut sock,
                    &Msg::ModelInfo {
                        id: mid,
                        input_bytes: m.input_bytes,
                        output_bytes: m.output_bytes,
                        standalone_ns: m.total_time_ns,
                        kernels: m.manifest.kernels.len() as u32,
                        name: m.name(),
                    },
                ),
                None => send(&mut sock, &Msg::ModelNotFound { name }),
            },
            Ok(Msg::StatusRequest) => {
                let json = serde_json::to_string(&shared.status()).unwrap_or_default();
                send(&mut sock, &Msg::StatusReply { json: &json })
            }
            _ => {
                tracing::warn!(
                    client = id,
                    "unexpected control message; closing the session"
                );
                break;
            }
        };
        if reply_ok.is_err() {
            break;
        }
    }
    shared.send(Command::Remove(id));
}
