//! The dispatcher: one thread that polls every client's submission ring,
//! validates what it finds, feeds the device, and posts completions.
//!
//! Loop (see `run`):
//! 1. apply control commands (client added/removed, shutdown);
//! 2. visit clients round-robin from a rotating start; from each take at
//!    most as many requests as it has completion credit (`cq_entries` minus
//!    completions unread minus requests on the device), so a completion
//!    always has room and nothing is ever dropped, and at most as many as
//!    keep it within `clients.max_in_flight_per_client` (the rest wait in
//!    its ring until some complete);
//! 3. poll the device and post its completions, waking a client only when
//!    its wake word says it sleeps;
//! 4. with no work for `idle_spin_us`, park: set every submission ring's
//!    wake word, re-check them, then `epoll_wait` on the clients' eventfds
//!    and the control eventfd, at most until the device's next event.
//!
//! The device is wrapped in [`FairShare`]: the policy sees at most
//! `clients.on_device_per_client` requests of a client per priority class,
//! and the rest are handed on round robin between clients as those finish,
//! so no client of a class can queue more than that in front of another.
//!
//! The per-request path is kept short, for every model:
//! - clients live in a slot table (`crate::slots`); a client's slot goes with its jobs
//!   through [`FairShare`] (whose lanes are indexed by it) and names its
//!   eventfd's epoll registration, so no look-up hashes;
//! - the counters ([`Counters`], [`ClientStats`]) have one writer, this
//!   thread, so each update is a plain load and store, not a locked
//!   read-modify-write; they are exact whenever read;
//! - the clock is read once per request taken (its `received_ns`); the
//!   device is polled at the time of the last request taken in the pass
//!   when there was one, and a device with nothing queued and no next
//!   event is not polled at all until a request reaches it; an idle pass
//!   reads the clock only every [`IDLE_CLOCK_EVERY`] passes;
//! - a finished job's region reference (a locked decrement) is dropped
//!   after its completion is posted, not before
//!   ([`Backend::release_finished`]);
//! - completion credit is reckoned from the completion ring's head as last
//!   read, which never over-states the room; the shared head, a line the
//!   client writes once per round trip, is reread only when that reckoning
//!   allows nothing and before every park (so a corrupt head is found
//!   then, not on the next pass).
//!
//! Everything a client wrote is hostile: each request is copied out of the
//! ring by value, every field is checked, and a bad one is answered with an
//! error completion. A client whose ring indices or header magic are
//! corrupt is dropped (its region closed, its socket shut down).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;

use rustix::event::epoll;
use shm_proto::now_ns;
use shm_proto::region::DaemonRings;
use shm_proto::ring::{Consumer, Producer, PushError};
use shm_proto::tensor::{self, Detail};
use shm_proto::{Completion, Priority, Request, status};

use crate::backend::fair::{Done, FairShare};
use crate::config::ClientsConfig;
use crate::metrics::RequestMetrics;
use crate::region::Region;
use crate::repo::{LiveModels, Served};
use crate::slots::SlotTable;
use sluice_backend::{Backend, Job, Span, TensorMemory, TensorSpans};
use sluice_model::{ModelIo, ModelRegistry, TensorSpec};

/// Adds one to a counter that only the dispatcher thread writes: a relaxed
/// load and store (plain moves), not a locked read-modify-write. Readers
/// see every value in order, as with `fetch_add`.
#[inline(always)]
fn bump(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// Per-client counters, shared with the status reporter. Written by the
/// dispatcher thread only.
#[derive(Debug, Default)]
pub struct ClientStats {
    /// Requests taken off the ring.
    pub submitted: AtomicU64,
    /// Completions posted with status OK.
    pub completed: AtomicU64,
    /// Completions posted with an error status.
    pub errors: AtomicU64,
    /// Requests on the device now.
    pub on_device: AtomicU32,
}

/// A client handed to the dispatcher by the connection thread.
#[derive(Debug)]
pub struct NewClient {
    /// Daemon-assigned number.
    pub id: u32,
    /// The daemon's ring ends, which own the region (shared with jobs on
    /// the device through [`DaemonRings::mapping`]).
    pub rings: DaemonRings<Region>,
    /// The eventfd the client writes to wake us.
    pub wake: OwnedFd,
    /// A clone of the control socket, shut down when we drop the client.
    pub sock: UnixStream,
    /// Counters.
    pub stats: Arc<ClientStats>,
}

/// Messages to the dispatcher.
#[derive(Debug)]
pub enum Command {
    /// Start serving a client.
    Add(NewClient),
    /// The client's socket closed: reclaim everything.
    Remove(u32),
    /// Stop: close every client and return.
    Shutdown,
}

struct Active {
    // The ring ends hold the region too: field order does not matter.
    sq: Consumer<Request, Arc<Region>>,
    cq: Producer<Completion, Arc<Region>>,
    id: u32,
    region: Arc<Region>,
    wake: OwnedFd,
    sock: UnixStream,
    stats: Arc<ClientStats>,
    /// Its requests on the device (published to `stats.on_device`).
    on_device: u32,
}

impl Active {
    /// Sets the client's count of requests on the device.
    #[inline(always)]
    fn set_on_device(&mut self, n: u32) {
        self.on_device = n;
        self.stats.on_device.store(n, Ordering::Relaxed);
    }

    /// Requests we may take from the ring now: room for their completions
    /// (completion credit) and within `max_in_flight`, and which of the two
    /// binds. `unread` is the completions the client has not read (or more:
    /// [`Producer::len_cached`]).
    fn credit(&self, unread: u32, max_in_flight: u32) -> (u32, Limit) {
        let on_device = self.on_device;
        let room = self.cq.capacity().saturating_sub(unread + on_device);
        let allowed = max_in_flight.saturating_sub(on_device);
        if allowed < room {
            (allowed, Limit::InFlight)
        } else {
            (room, Limit::Completions)
        }
    }
}

/// What stops the dispatcher taking more of a client's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// Its completion ring (the client must read completions).
    Completions,
    /// `clients.max_in_flight_per_client` (its requests must finish).
    InFlight,
}

const CONTROL_TOKEN: u64 = u64::MAX;
const TIMER_TOKEN: u64 = u64::MAX - 1;
const DEVICE_TOKEN: u64 = u64::MAX - 2;
/// An idle pass (no request, device idle) reads the clock, to know when
/// `idle_spin_us` is up, once in this many passes.
pub const IDLE_CLOCK_EVERY: u32 = 16;
/// Longest sleep, so the heartbeat (watched by the systemd watchdog) moves.
const MAX_PARK_NS: u64 = 250_000_000;
/// Longest sleep while a client has requests waiting but no completion
/// credit (it has not read its completions).
const CREDIT_POLL_NS: u64 = 1_000_000;

/// A request that passed [`validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Valid {
    /// Its priority class.
    pub priority: Priority,
    /// The untyped request's input span; a typed request's first input
    /// (empty when the model has none).
    pub input: Span,
    /// The untyped request's output span; a typed request's first output.
    pub output: Span,
    /// A typed request's spans and batch; `None` for an untyped request.
    pub tensors: Option<Arc<TensorSpans>>,
}

/// Why a request was refused: the completion's status and detail
/// (`shm_proto::tensor` says what each status puts in the detail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// A `shm_proto::status` code.
    pub status: u32,
    /// [`Completion::detail`].
    pub detail: [u64; 2],
}

impl Refusal {
    fn plain(status: u32) -> Self {
        Self {
            status,
            detail: [0; 2],
        }
    }
    fn detail(status: u32, what: Detail, given: Detail) -> Self {
        Self {
            status,
            detail: [what.pack(), given.pack()],
        }
    }
}

/// Validates a request copied out of a client's ring. A typed request's
/// tensor table is copied out of `arena` once, and that copy is what is
/// checked and used.
pub fn validate(
    req: &Request,
    registry: &ModelRegistry,
    geometry: shm_proto::Geometry,
    arena: &dyn TensorMemory,
) -> Result<Valid, Refusal> {
    let priority = Priority::from_raw(req.priority).ok_or(Refusal::plain(status::BAD_PRIORITY))?;
    if req.flags & !tensor::KNOWN_FLAGS != 0 {
        return Err(Refusal::plain(status::BAD_FLAGS));
    }
    let model = registry
        .get(req.model_id)
        .ok_or(Refusal::plain(status::UNKNOWN_MODEL))?;
    if req.flags & tensor::FLAG_TENSOR_TABLE != 0 {
        return validate_typed(req, &model.io, geometry, arena).map(|spans| Valid {
            priority,
            input: spans.inputs.first().copied().unwrap_or_default(),
            output: spans.outputs.first().copied().unwrap_or_default(),
            tensors: Some(Arc::new(spans)),
        });
    }
    if req.batch > 1 {
        return Err(Refusal::detail(
            status::BAD_BATCH,
            Detail::new(tensor::ROLE_BATCH, 0, 1),
            Detail::new(tensor::ROLE_BATCH, 0, u64::from(req.batch)),
        ));
    }
    if !geometry.span_in_arena(req.input_off, req.input_len) {
        return Err(Refusal::plain(status::BAD_INPUT_SPAN));
    }
    if !geometry.span_in_arena(req.output_off, req.output_len) {
        return Err(Refusal::plain(status::BAD_OUTPUT_SPAN));
    }
    let io = &model.io;
    if io.is_untyped() {
        // A model known by its manifest: protocol 2's rules, unchanged.
        if req.input_len != model.input_bytes {
            return Err(Refusal::plain(status::BAD_INPUT_LEN));
        }
        if req.output_len < model.output_bytes {
            return Err(Refusal::plain(status::OUTPUT_TOO_SMALL));
        }
    } else if let ([input], [output]) = (io.inputs.as_slice(), io.outputs.as_slice()) {
        // A typed model of one tensor each way: batch 1, exact sizes.
        for (role, spec, given) in [
            (tensor::ROLE_INPUT, input, req.input_len),
            (tensor::ROLE_OUTPUT, output, req.output_len),
        ] {
            let want = spec.bytes(1).unwrap_or(u64::MAX);
            if given != want {
                return Err(Refusal::detail(
                    status::BAD_TENSOR_LEN,
                    Detail::new(role, 0, want),
                    Detail::new(role, 0, given),
                ));
            }
        }
    } else {
        return Err(Refusal::detail(
            status::BAD_TENSOR_TABLE,
            Detail::new(
                tensor::ROLE_TABLE,
                tensor::TABLE_REQUIRED,
                io.inputs.len() as u64,
            ),
            Detail::new(
                tensor::ROLE_TABLE,
                tensor::TABLE_REQUIRED,
                io.outputs.len() as u64,
            ),
        ));
    }
    Ok(Valid {
        priority,
        input: Span {
            off: req.input_off,
            len: req.input_len,
        },
        output: Span {
            off: req.output_off,
            len: req.output_len,
        },
        tensors: None,
    })
}

/// The typed half of [`validate`]: batch, table, then every tensor.
fn validate_typed(
    req: &Request,
    io: &ModelIo,
    geometry: shm_proto::Geometry,
    arena: &dyn TensorMemory,
) -> Result<TensorSpans, Refusal> {
    let batch = u32::from(req.batch);
    if batch == 0 || batch > io.max_batch {
        return Err(Refusal::detail(
            status::BAD_BATCH,
            Detail::new(tensor::ROLE_BATCH, 0, u64::from(io.max_batch)),
            Detail::new(tensor::ROLE_BATCH, 0, u64::from(batch)),
        ));
    }
    let table_fault = |reason, want: u64, given: u64| {
        Refusal::detail(
            status::BAD_TENSOR_TABLE,
            Detail::new(tensor::ROLE_TABLE, reason, want),
            Detail::new(tensor::ROLE_TABLE, reason, given),
        )
    };
    if req.output_off != 0 || req.output_len != 0 {
        return Err(table_fault(
            tensor::TABLE_OUTPUT_FIELDS,
            0,
            req.output_len.max(req.output_off),
        ));
    }
    let (n_in, n_out) = (io.inputs.len(), io.outputs.len());
    let want_len = ((n_in + n_out) * tensor::TABLE_ENTRY_BYTES) as u64;
    if req.input_len != want_len || want_len > tensor::MAX_TABLE_BYTES as u64 {
        return Err(table_fault(tensor::TABLE_LEN, want_len, req.input_len));
    }
    let outside = || {
        table_fault(
            tensor::TABLE_OUTSIDE,
            geometry.arena_size,
            req.input_off.saturating_add(req.input_len),
        )
    };
    if !geometry.span_in_arena(req.input_off, req.input_len) {
        return Err(outside());
    }
    // The one copy out of client memory; everything below reads `table`.
    let mut buf = [0u8; tensor::MAX_TABLE_BYTES];
    let table = &mut buf[..want_len as usize];
    if !arena.read(req.input_off, table) {
        return Err(outside());
    }
    let spans = |role: u8, specs: &[TensorSpec], first: usize| {
        let bad_span = if role == tensor::ROLE_INPUT {
            status::BAD_INPUT_SPAN
        } else {
            status::BAD_OUTPUT_SPAN
        };
        let mut out = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let (off, len) = tensor::read_entry(table, first + i).unwrap_or((u64::MAX, u64::MAX));
            let index = i as u8;
            if !geometry.span_in_arena(off, len) {
                return Err(Refusal::detail(
                    bad_span,
                    Detail::new(role, index, geometry.arena_size),
                    Detail::new(role, index, off.saturating_add(len)),
                ));
            }
            let want = spec.bytes(batch).unwrap_or(u64::MAX);
            if len != want {
                return Err(Refusal::detail(
                    status::BAD_TENSOR_LEN,
                    Detail::new(role, index, want),
                    Detail::new(role, index, len),
                ));
            }
            out.push(Span { off, len });
        }
        Ok(out)
    };
    let inputs = spans(tensor::ROLE_INPUT, &io.inputs, 0)?;
    let outputs = spans(tensor::ROLE_OUTPUT, &io.outputs, n_in)?;
    let overlap =
        |a: Span, b: Span| a.len > 0 && b.len > 0 && a.off < b.off + b.len && b.off < a.off + a.len;
    for (o, &out) in outputs.iter().enumerate() {
        let others = outputs
            .iter()
            .enumerate()
            .filter(|&(k, _)| k != o)
            .map(|(k, &s)| (tensor::ROLE_OUTPUT, k, s))
            .chain(
                inputs
                    .iter()
                    .enumerate()
                    .map(|(k, &s)| (tensor::ROLE_INPUT, k, s)),
            );
        for (role, k, other) in others {
            if overlap(out, other) {
                return Err(Refusal::detail(
                    status::BAD_TENSOR_TABLE,
                    Detail::new(tensor::ROLE_OUTPUT, o as u8, out.off),
                    Detail::new(role, k as u8, other.off),
                ));
            }
        }
    }
    Ok(TensorSpans {
        batch,
        inputs,
        outputs,
    })
}

/// Daemon-wide counters. Every one but `refused` (the control plane's) is
/// written by the dispatcher thread only.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests taken off rings.
    pub submitted: AtomicU64,
    /// OK completions.
    pub completed: AtomicU64,
    /// Error completions.
    pub errors: AtomicU64,
    /// Sessions refused at the handshake (written by the control plane).
    pub refused: AtomicU64,
    /// Clients dropped for corrupting their region.
    pub dropped_clients: AtomicU64,
    /// Futex wakes sent to sleeping clients.
    pub wakes: AtomicU64,
    /// Times the dispatcher parked.
    pub parks: AtomicU64,
    /// Requests completed with `DEADLINE_MISSED` (never started).
    pub deadline_missed: MissedCounters,
    /// Per model and class: latency, queue wait, batch, completions by
    /// status; refusals by status (the metrics endpoint reads them).
    pub requests: RequestMetrics,
}

/// Requests that completed with `DEADLINE_MISSED` (their deadline passed
/// before they started), by class and by model. Written by the dispatcher
/// thread only.
#[derive(Debug, Default)]
pub struct MissedCounters {
    /// Real-time requests.
    pub real_time: AtomicU64,
    /// Best-effort requests.
    pub best_effort: AtomicU64,
    /// By model id, one per model of the registry ([`Self::for_models`]).
    pub by_model: Box<[AtomicU64]>,
}

impl MissedCounters {
    /// Counters for a registry of `models` models, all zero.
    pub fn for_models(models: usize) -> Self {
        Self {
            by_model: (0..models).map(|_| AtomicU64::new(0)).collect(),
            ..Self::default()
        }
    }

    /// Counts one missed request of `model` in class `priority`.
    fn count(&self, model: u32, priority: Priority) {
        bump(match priority {
            Priority::RealTime => &self.real_time,
            Priority::BestEffort => &self.best_effort,
        });
        if let Some(c) = self.by_model.get(model as usize) {
            bump(c);
        }
    }
}

/// What the dispatcher needs from the rest of the daemon: the models, its
/// idle-spin setting, and the counters and client list it updates. The
/// server's shared state implements it; the dispatcher depends on this
/// trait, not on the server, so imports point one way (server → dispatch).
pub trait Host: Send + Sync {
    /// The models served: the snapshot in force, which a reload swaps
    /// (the dispatcher rereads it when its generation changes).
    fn models(&self) -> &LiveModels;
    /// `daemon.idle_spin_us`: how long the dispatcher spins before parking.
    fn idle_spin_us(&self) -> u32;
    /// The daemon's counters.
    fn counters(&self) -> &Counters;
    /// Incremented by every dispatcher loop (the watchdog reads it); the
    /// dispatcher is its only writer.
    fn heartbeat(&self) -> &AtomicU64;
    /// Jobs on the device, as last seen by the dispatcher.
    fn device_queued(&self) -> &AtomicU64;
    /// The dispatcher dropped client `id` (it left or corrupted its region).
    fn client_gone(&self, id: u32);
    /// `[clients]`: the per-client limits the dispatcher enforces
    /// (`max_in_flight_per_client`, `on_device_per_client`).
    fn clients_config(&self) -> &ClientsConfig;
}

/// Generic over its [`Host`] so the counters and the heartbeat it touches
/// on every request are plain field accesses, not calls through a vtable.
pub(crate) struct Dispatcher<H: Host> {
    shared: Arc<H>,
    device: FairShare,
    rx: Receiver<Command>,
    control: Arc<OwnedFd>,
    epoll: OwnedFd,
    /// Armed at the device's next event: `epoll_wait`'s own timeout has
    /// only millisecond resolution, a timerfd has the hrtimer's.
    timer: OwnedFd,
    /// By slot; the slot is also the epoll token of the client's eventfd.
    clients: SlotTable<Active>,
    done: Vec<Done>,
    rr: usize,
    /// `clients.max_in_flight_per_client` (`u32::MAX` when unset).
    max_in_flight: u32,
    /// The device had nothing queued and no next event when last polled,
    /// and nothing was submitted or cancelled since: polling it would do
    /// nothing.
    device_idle: bool,
    /// `device_queued` as last published.
    queued_published: u64,
    /// Dispatcher passes (published to the heartbeat).
    beats: u64,
    /// The models snapshot requests are validated against, and its
    /// generation: reread at the top of a pass when the generation moved.
    served: Arc<Served>,
    models_generation: u64,
}

impl<H: Host> Dispatcher<H> {
    pub(crate) fn new(
        shared: Arc<H>,
        device: Box<dyn Backend>,
        rx: Receiver<Command>,
        control: Arc<OwnedFd>,
    ) -> std::io::Result<Self> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &ep,
            control.as_fd(),
            epoll::EventData::new_u64(CONTROL_TOKEN),
            epoll::EventFlags::IN,
        )?;
        let timer = rustix::time::timerfd_create(
            rustix::time::TimerfdClockId::Monotonic,
            rustix::time::TimerfdFlags::CLOEXEC | rustix::time::TimerfdFlags::NONBLOCK,
        )?;
        epoll::add(
            &ep,
            timer.as_fd(),
            epoll::EventData::new_u64(TIMER_TOKEN),
            epoll::EventFlags::IN,
        )?;
        // The device owns the descriptor for as long as we hold the device.
        if let Some(fd) = device.wake_fd() {
            epoll::add(
                &ep,
                fd,
                epoll::EventData::new_u64(DEVICE_TOKEN),
                epoll::EventFlags::IN,
            )?;
        }
        let models_generation = shared.models().generation();
        let served = shared.models().current();
        shared.counters().requests.ensure(&served.registry);
        let limits = shared.clients_config();
        let max_in_flight = limits.max_in_flight_per_client.unwrap_or(u32::MAX);
        let device = FairShare::new(device, limits.on_device_per_client);
        Ok(Self {
            shared,
            device,
            rx,
            control,
            epoll: ep,
            timer,
            clients: SlotTable::default(),
            done: Vec::with_capacity(256),
            rr: 0,
            max_in_flight,
            device_idle: false,
            queued_published: u64::MAX,
            beats: 0,
            served,
            models_generation,
        })
    }

    /// Runs until `Command::Shutdown`.
    pub(crate) fn run(mut self) {
        let idle_spin_ns = u64::from(self.shared.idle_spin_us()) * 1000;
        let mut last_work = now_ns();
        let mut idle_passes: u32 = 0;
        // Built here: epoll events hold a pointer-sized union, not `Send`.
        let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
        loop {
            self.beats = self.beats.wrapping_add(1);
            self.shared.heartbeat().store(self.beats, Ordering::Relaxed);
            if !self.apply_commands() {
                break;
            }
            let generation = self.shared.models().generation();
            if generation != self.models_generation {
                self.served = self.shared.models().current();
                self.models_generation = generation;
                // A model new to this daemon gets its metrics block here,
                // before its first request is validated.
                self.shared
                    .counters()
                    .requests
                    .ensure(&self.served.registry);
            }
            // The clock as read for the last request taken, if any: the
            // device is polled at that time, not at a second reading.
            let mut now = self.poll_clients();
            let mut work = now.is_some();
            if !self.device_idle {
                let t = *now.get_or_insert_with(now_ns);
                work |= self.poll_device(t);
            }
            if let (true, Some(t)) = (work, now) {
                last_work = t;
                idle_passes = 0;
                continue;
            }
            idle_passes = idle_passes.wrapping_add(1);
            if idle_spin_ns > 0 && now.is_none() && idle_passes % IDLE_CLOCK_EVERY != 0 {
                std::hint::spin_loop();
                continue;
            }
            let now = now.unwrap_or_else(now_ns);
            if now.saturating_sub(last_work) < idle_spin_ns {
                std::hint::spin_loop();
                continue;
            }
            self.park(&mut events);
            last_work = now_ns();
            idle_passes = 0;
        }
        self.shutdown_all();
    }

    fn apply_commands(&mut self) -> bool {
        while let Ok(cmd) = self.rx.try_recv() {
            match cmd {
                Command::Add(c) => self.add(c),
                Command::Remove(id) => self.remove(id, "client disconnected"),
                Command::Shutdown => return false,
            }
        }
        true
    }

    fn add(&mut self, c: NewClient) {
        let region = c.rings.mapping().clone();
        let DaemonRings { sq, cq } = c.rings;
        let on_device = c.stats.on_device.load(Ordering::Relaxed);
        let slot = self.clients.insert(Active {
            sq,
            cq,
            id: c.id,
            region,
            wake: c.wake,
            sock: c.sock,
            stats: c.stats,
            on_device,
        });
        let Some(a) = self.clients.get(slot) else {
            return;
        };
        if let Err(e) = epoll::add(
            &self.epoll,
            a.wake.as_fd(),
            epoll::EventData::new_u64(u64::from(slot)),
            epoll::EventFlags::IN,
        ) {
            tracing::error!(
                client = c.id,
                "cannot watch the client's eventfd: {e}; dropping it"
            );
            if let Some(a) = self.clients.remove(slot) {
                a.region.close();
                let _ = a.sock.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Drops client `id` (a control command: scans the table).
    fn remove(&mut self, id: u32, why: &str) {
        let slot = self
            .clients
            .iter()
            .find(|(_, c)| c.id == id)
            .map(|(s, _)| s);
        if let Some(slot) = slot {
            self.remove_slot(slot, why);
        }
    }

    fn remove_slot(&mut self, slot: u32, why: &str) {
        let Some(gone) = self.clients.remove(slot) else {
            return;
        };
        let id = gone.id;
        let dropped = self.device.cancel(slot, id);
        // A device may keep cancelled work running (CUDA): poll it again.
        self.device_idle = false;
        let _ = epoll::delete(&self.epoll, gone.wake.as_fd());
        gone.region.close();
        let _ = gone.sock.shutdown(std::net::Shutdown::Both);
        self.shared.client_gone(id);
        tracing::info!(client = id, dropped, "{why}; region reclaimed");
    }

    /// Takes what every client has submitted. Returns the clock as read
    /// for the last request taken, or `None` when none was.
    fn poll_clients(&mut self) -> Option<u64> {
        let n = self.clients.len();
        if n == 0 {
            return None;
        }
        let mut taken = None;
        let mut bad: Vec<(u32, &'static str)> = Vec::new();
        self.rr += 1;
        if self.rr >= n {
            self.rr = 0;
        }
        for k in 0..n {
            let mut i = self.rr + k;
            if i >= n {
                i -= n;
            }
            match self.poll_one(i) {
                Ok(Some(t)) => taken = Some(t),
                Ok(None) => {}
                Err((slot, why)) => bad.push((slot, why)),
            }
        }
        for (slot, why) in bad {
            bump(&self.shared.counters().dropped_clients);
            self.remove_slot(slot, why);
        }
        taken
    }

    /// Takes what the client at dense position `i` has submitted, within
    /// its credit. Returns the clock as read for the last request taken.
    fn poll_one(&mut self, i: usize) -> Result<Option<u64>, (u32, &'static str)> {
        let registry = &self.served.registry;
        let counters = self.shared.counters();
        let max_in_flight = self.max_in_flight;
        let Some((slot, c)) = self.clients.nth_mut(i) else {
            return Ok(None);
        };
        if !c.region.magic_intact() {
            return Err((slot, "client corrupted its region header (magic)"));
        }
        // Credit from the completion ring's head as last read (never more
        // than the truth); reread the shared head only when that allows
        // nothing.
        let (mut credit, _) = c.credit(c.cq.len_cached(), max_in_flight);
        if credit == 0 {
            let unread =
                c.cq.len()
                    .map_err(|_| (slot, "client corrupted its completion ring head"))?;
            credit = c.credit(unread, max_in_flight).0;
        }
        let mut taken = None;
        let mut woke = false;
        while credit > 0 {
            let req = match c.sq.pop() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => return Err((slot, "client corrupted its submission ring indices")),
            };
            credit -= 1;
            let now = now_ns();
            taken = Some(now);
            bump(&c.stats.submitted);
            bump(&counters.submitted);
            match validate(&req, registry, c.region.geometry(), c.region.as_ref()) {
                Ok(valid) => {
                    let batch = valid.tensors.as_ref().map_or(1, |t| t.batch);
                    counters
                        .requests
                        .submitted(req.model_id, valid.priority, batch);
                    c.set_on_device(c.on_device + 1);
                    self.device_idle = false;
                    self.device.submit(
                        slot,
                        Job {
                            client: c.id,
                            request_id: req.request_id,
                            model: req.model_id,
                            priority: valid.priority,
                            deadline_ns: req.deadline_ns,
                            input_off: valid.input.off,
                            input_len: valid.input.len,
                            output_off: valid.output.off,
                            output_len: valid.output.len,
                            memory: c.region.clone(),
                            received_ns: now,
                            tensors: valid.tensors,
                        },
                        now,
                    );
                }
                Err(refusal) => {
                    let completion = Completion {
                        request_id: req.request_id,
                        status: refusal.status,
                        detail: refusal.detail,
                        received_ns: now,
                        started_ns: now,
                        finished_ns: now,
                        ..Completion::default()
                    };
                    bump(&c.stats.errors);
                    bump(&counters.errors);
                    counters.requests.refused(refusal.status);
                    match c.cq.push(completion) {
                        Ok(()) => woke = true,
                        Err(PushError::Full) => {
                            return Err((
                                slot,
                                "completion ring full despite credit (client corrupted it)",
                            ));
                        }
                        Err(PushError::Corrupt(_)) => {
                            return Err((slot, "client corrupted its completion ring head"));
                        }
                    }
                }
            }
        }
        if woke && c.cq.needs_wake() {
            shm_proto::futex::wake_all(c.cq.wake_word());
        }
        Ok(taken)
    }

    /// Polls the device at `now` and posts its finished jobs. Returns
    /// whether there were any.
    fn poll_device(&mut self, now: u64) -> bool {
        self.device.poll(now, &mut self.done);
        let work = !self.done.is_empty();
        let mut bad = Vec::new();
        let counters = self.shared.counters();
        for d in self.done.drain(..) {
            let f = d.finished;
            // The id check is a guard: a slot's jobs are cancelled before
            // the slot is given to another client.
            let Some(c) = self.clients.get_mut(d.slot).filter(|c| c.id == f.client) else {
                continue;
            };
            c.set_on_device(c.on_device.saturating_sub(1));
            let ok = f.status == status::OK;
            if f.status == status::DEADLINE_MISSED {
                counters.deadline_missed.count(d.model, d.priority);
            }
            counters.requests.finished(
                d.model,
                d.priority,
                f.status,
                f.received_ns,
                f.started_ns,
                f.finished_ns,
            );
            let (mine, all) = if ok {
                (&c.stats.completed, &counters.completed)
            } else {
                (&c.stats.errors, &counters.errors)
            };
            bump(mine);
            bump(all);
            let completion = Completion {
                request_id: f.request_id,
                status: f.status,
                output_len: f.output_len,
                received_ns: f.received_ns,
                started_ns: f.started_ns,
                finished_ns: f.finished_ns,
                ..Completion::default()
            };
            match c.cq.push(completion) {
                Ok(()) => {
                    if c.cq.needs_wake() {
                        shm_proto::futex::wake_all(c.cq.wake_word());
                        bump(&counters.wakes);
                    }
                }
                Err(_) => bad.push(d.slot),
            }
        }
        // The completions are posted: now drop what the finished jobs held.
        self.device.release_finished();
        let queued = self.device.queued();
        self.device_idle = queued == 0 && self.device.next_event_ns().is_none();
        if queued as u64 != self.queued_published {
            self.queued_published = queued as u64;
            self.shared
                .device_queued()
                .store(self.queued_published, Ordering::Relaxed);
        }
        for slot in bad {
            bump(&self.shared.counters().dropped_clients);
            self.remove_slot(slot, "client corrupted its completion ring");
        }
        work
    }

    /// Sleeps until a client rings, a command arrives, or the device's next
    /// event is due.
    fn park(&mut self, events: &mut Vec<epoll::Event>) {
        let mut bad = Vec::new();
        let mut ready = false;
        let mut credit_blocked = false;
        for (slot, c) in self.clients.iter_mut() {
            match c.sq.prepare_park() {
                // The request path reckons credit from the completion
                // ring's head as last read; check the shared one here, so a
                // client that corrupted it is dropped by the next park.
                Ok(Some(_)) => {
                    if c.cq.len().is_err() {
                        bad.push(slot);
                    }
                }
                Ok(None) => {
                    // Entries are waiting; we can take them only with
                    // completion credit. A client that sits on its
                    // completions does not ring us when it reads them, so
                    // we poll it at CREDIT_POLL_NS instead of spinning. One
                    // at max_in_flight_per_client waits for its own
                    // requests to finish: the device's next event.
                    match c
                        .cq
                        .len()
                        .map(|unread| c.credit(unread, self.max_in_flight))
                    {
                        Ok((credit, _)) if credit > 0 => ready = true,
                        Ok((_, Limit::Completions)) => credit_blocked = true,
                        Ok((_, Limit::InFlight)) => {}
                        Err(_) => bad.push(slot),
                    }
                }
                Err(_) => bad.push(slot),
            }
        }
        if !bad.is_empty() || ready {
            for (_, c) in self.clients.iter() {
                c.sq.unpark();
            }
            for slot in bad {
                bump(&self.shared.counters().dropped_clients);
                self.remove_slot(slot, "client corrupted its rings");
            }
            return;
        }
        let now = now_ns();
        let device_next = self.device.next_event_ns();
        let until = device_next
            .unwrap_or(u64::MAX)
            .min(now.saturating_add(if credit_blocked {
                CREDIT_POLL_NS
            } else {
                MAX_PARK_NS
            }));
        let wait_ns = until.saturating_sub(now);
        if wait_ns > 0 {
            bump(&self.shared.counters().parks);
            // Wake at `until` to the nanosecond: an absolute timerfd.
            let spec = rustix::time::Itimerspec {
                it_interval: rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: rustix::time::Timespec {
                    tv_sec: (until / 1_000_000_000) as i64,
                    tv_nsec: (until % 1_000_000_000) as i64,
                },
            };
            let _ = rustix::time::timerfd_settime(
                &self.timer,
                rustix::time::TimerfdTimerFlags::ABSTIME,
                &spec,
            );
            // The epoll timeout is only a backstop (ms resolution).
            let backstop = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: ((wait_ns + 2_000_000).min(MAX_PARK_NS + 2_000_000)) as i64,
            };
            events.clear();
            let _ = epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(events),
                Some(&backstop),
            );
            let mut buf = [0u8; 8];
            for ev in events.iter() {
                let token = ev.data.u64();
                let fd = if token == CONTROL_TOKEN {
                    Some(self.control.as_fd())
                } else if token == TIMER_TOKEN {
                    Some(self.timer.as_fd())
                } else if token == DEVICE_TOKEN {
                    // The device's completion eventfd ([`Backend::wake_fd`]):
                    // the device drains it when polled.
                    None
                } else {
                    u32::try_from(token)
                        .ok()
                        .and_then(|slot| self.clients.get(slot))
                        .map(|c| c.wake.as_fd())
                };
                if let Some(fd) = fd {
                    // Drain the eventfd counter (non-blocking fd).
                    let _ = rustix::io::read(fd, &mut buf);
                }
            }
        }
        for (_, c) in self.clients.iter() {
            c.sq.unpark();
        }
    }

    fn shutdown_all(&mut self) {
        let slots: Vec<u32> = self.clients.iter().map(|(s, _)| s).collect();
        for slot in slots {
            self.remove_slot(slot, "daemon shutting down");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_backend::testmem::VecMemory;
    use sluice_model::ElemType;

    fn req(model: u32, input: (u64, u64), output: (u64, u64)) -> Request {
        Request {
            request_id: 1,
            model_id: model,
            priority: 0,
            deadline_ns: 0,
            input_off: input.0,
            input_len: input.1,
            output_off: output.0,
            output_len: output.1,
            flags: 0,
            batch: 0,
            seq: 0,
        }
    }

    /// [`validate`] with an empty arena of the geometry's size, as a status.
    fn check(r: &Request, reg: &ModelRegistry, g: shm_proto::Geometry) -> Result<Priority, u32> {
        let mem = VecMemory::new(g.arena_size as usize);
        validate(r, reg, g, mem.as_ref())
            .map(|v| v.priority)
            .map_err(|e| e.status)
    }

    #[test]
    fn validation_names_each_fault() {
        let reg = ModelRegistry::builtin();
        let (id, m) = reg.lookup("echo_small").unwrap();
        let g = shm_proto::Geometry {
            sq_entries: 8,
            cq_entries: 8,
            arena_size: 4096,
        };
        let (i, o) = (m.input_bytes, m.output_bytes);
        assert_eq!(
            check(&req(id, (0, i), (i, o)), &reg, g),
            Ok(Priority::RealTime)
        );
        assert_eq!(
            check(&req(9999, (0, i), (i, o)), &reg, g),
            Err(status::UNKNOWN_MODEL)
        );
        assert_eq!(
            check(&req(id, (4090, i), (i, o)), &reg, g),
            Err(status::BAD_INPUT_SPAN)
        );
        assert_eq!(
            check(&req(id, (u64::MAX, i), (i, o)), &reg, g),
            Err(status::BAD_INPUT_SPAN)
        );
        assert_eq!(
            check(&req(id, (0, i), (u64::MAX - 1, o)), &reg, g),
            Err(status::BAD_OUTPUT_SPAN)
        );
        assert_eq!(
            check(&req(id, (0, i + 1), (i + 8, o)), &reg, g),
            Err(status::BAD_INPUT_LEN)
        );
        assert_eq!(
            check(&req(id, (0, i), (i, o - 1)), &reg, g),
            Err(status::OUTPUT_TOO_SMALL)
        );
        let mut r = req(id, (0, i), (i, o));
        r.priority = 7;
        assert_eq!(check(&r, &reg, g), Err(status::BAD_PRIORITY));
        r.priority = 1;
        r.flags = 2;
        assert_eq!(check(&r, &reg, g), Err(status::BAD_FLAGS));
        // An untyped request is at batch 1: `batch` 0 or 1, nothing else.
        r.flags = 0;
        r.batch = 1;
        assert_eq!(check(&r, &reg, g), Ok(Priority::BestEffort));
        r.batch = 2;
        assert_eq!(check(&r, &reg, g), Err(status::BAD_BATCH));
    }

    use crate::test_models::typed_registry;

    const G: shm_proto::Geometry = shm_proto::Geometry {
        sq_entries: 8,
        cq_entries: 8,
        arena_size: 1 << 16,
    };

    /// Writes `spans` as a tensor table at `at` and returns the request.
    fn typed(mem: &VecMemory, model: u32, batch: u16, at: u64, spans: &[(u64, u64)]) -> Request {
        let mut table = Vec::new();
        for &(off, len) in spans {
            let mut e = [0u8; tensor::TABLE_ENTRY_BYTES];
            tensor::write_entry(&mut e, off, len);
            table.extend_from_slice(&e);
        }
        assert!(mem.write(at, &table));
        Request {
            flags: tensor::FLAG_TENSOR_TABLE,
            batch,
            ..req(model, (at, table.len() as u64), (0, 0))
        }
    }

    /// The spans of `pair` at `batch`, back to back from 4096.
    fn pair_spans(batch: u64) -> Vec<(u64, u64)> {
        let lens = [1024 * batch, 64, 40 * batch, 128 * batch];
        let mut off = 4096;
        lens.iter()
            .map(|&len| {
                let s = (off, len);
                off += len.next_multiple_of(64);
                s
            })
            .collect()
    }

    fn unpack(r: Refusal) -> (u32, Detail, Detail) {
        (
            r.status,
            Detail::unpack(r.detail[0]),
            Detail::unpack(r.detail[1]),
        )
    }

    #[test]
    fn a_typed_request_is_checked_tensor_by_tensor() {
        let reg = typed_registry();
        let (pair, _) = reg.lookup("pair").unwrap();
        let mem = VecMemory::new(G.arena_size as usize);
        let v = |r: &Request| validate(r, &reg, G, mem.as_ref());
        // Good at batch 1 and 8.
        for batch in [1u16, 4, 8] {
            let spans = pair_spans(u64::from(batch));
            let ok = v(&typed(&mem, pair, batch, 0, &spans)).unwrap();
            let t = ok.tensors.unwrap();
            assert_eq!(t.batch, u32::from(batch));
            assert_eq!(t.inputs.len(), 2);
            assert_eq!(
                t.outputs[1],
                Span {
                    off: spans[3].0,
                    len: spans[3].1
                }
            );
            assert_eq!(ok.input, t.inputs[0]);
            assert_eq!(ok.output, t.outputs[0]);
        }
        let role_batch = |value| Detail::new(tensor::ROLE_BATCH, 0, value);
        // Batch 0 and over the maximum.
        for bad in [0u16, 9, u16::MAX] {
            let r = typed(&mem, pair, bad, 0, &pair_spans(1));
            assert_eq!(
                unpack(v(&r).unwrap_err()),
                (status::BAD_BATCH, role_batch(8), role_batch(u64::from(bad)))
            );
        }
        // Wrong count: three entries for four tensors.
        let r = typed(&mem, pair, 1, 0, &pair_spans(1)[..3]);
        assert_eq!(
            unpack(v(&r).unwrap_err()),
            (
                status::BAD_TENSOR_TABLE,
                Detail::new(tensor::ROLE_TABLE, tensor::TABLE_LEN, 64),
                Detail::new(tensor::ROLE_TABLE, tensor::TABLE_LEN, 48)
            )
        );
        // The table itself outside the arena.
        let mut r = typed(&mem, pair, 1, 0, &pair_spans(1));
        r.input_off = G.arena_size - 32;
        assert_eq!(
            unpack(v(&r).unwrap_err()),
            (
                status::BAD_TENSOR_TABLE,
                Detail::new(tensor::ROLE_TABLE, tensor::TABLE_OUTSIDE, G.arena_size),
                Detail::new(tensor::ROLE_TABLE, tensor::TABLE_OUTSIDE, G.arena_size + 32)
            )
        );
        // Output fields set in a typed request.
        let mut r = typed(&mem, pair, 1, 0, &pair_spans(1));
        r.output_len = 40;
        assert_eq!(v(&r).unwrap_err().status, status::BAD_TENSOR_TABLE);
        // A span outside the arena: input 1, then output 0.
        let mut spans = pair_spans(1);
        spans[1] = (G.arena_size - 8, 64);
        assert_eq!(
            unpack(v(&typed(&mem, pair, 1, 0, &spans)).unwrap_err()),
            (
                status::BAD_INPUT_SPAN,
                Detail::new(tensor::ROLE_INPUT, 1, G.arena_size),
                Detail::new(tensor::ROLE_INPUT, 1, G.arena_size + 56)
            )
        );
        let mut spans = pair_spans(1);
        spans[2] = (u64::MAX, 40);
        let (code, what, given) = unpack(v(&typed(&mem, pair, 1, 0, &spans)).unwrap_err());
        assert_eq!(
            (code, what.role, what.index),
            (status::BAD_OUTPUT_SPAN, tensor::ROLE_OUTPUT, 0)
        );
        assert!(given.saturated());
        // Wrong length names the tensor, the size expected and the length given.
        let mut spans = pair_spans(1);
        spans[0].1 = 512;
        assert_eq!(
            unpack(v(&typed(&mem, pair, 1, 0, &spans)).unwrap_err()),
            (
                status::BAD_TENSOR_LEN,
                Detail::new(tensor::ROLE_INPUT, 0, 1024),
                Detail::new(tensor::ROLE_INPUT, 0, 512)
            )
        );
        // At batch 4 the batched output takes 4 x 128; the fixed input 64.
        let mut spans = pair_spans(4);
        spans[3].1 = 128;
        assert_eq!(
            unpack(v(&typed(&mem, pair, 4, 0, &spans)).unwrap_err()),
            (
                status::BAD_TENSOR_LEN,
                Detail::new(tensor::ROLE_OUTPUT, 1, 512),
                Detail::new(tensor::ROLE_OUTPUT, 1, 128)
            )
        );
        let mut spans = pair_spans(4);
        spans[1].1 = 256;
        assert_eq!(
            unpack(v(&typed(&mem, pair, 4, 0, &spans)).unwrap_err()).1,
            Detail::new(tensor::ROLE_INPUT, 1, 64)
        );
        // Overlapping outputs, and an output over an input.
        let mut spans = pair_spans(1);
        spans[3].0 = spans[2].0 + 8;
        assert_eq!(
            unpack(v(&typed(&mem, pair, 1, 0, &spans)).unwrap_err()),
            (
                status::BAD_TENSOR_TABLE,
                Detail::new(tensor::ROLE_OUTPUT, 0, spans[2].0),
                Detail::new(tensor::ROLE_OUTPUT, 1, spans[3].0)
            )
        );
        let mut spans = pair_spans(1);
        spans[2].0 = spans[0].0 + 1000;
        assert_eq!(
            unpack(v(&typed(&mem, pair, 1, 0, &spans)).unwrap_err()),
            (
                status::BAD_TENSOR_TABLE,
                Detail::new(tensor::ROLE_OUTPUT, 0, spans[2].0),
                Detail::new(tensor::ROLE_INPUT, 0, spans[0].0)
            )
        );
        // Inputs may share bytes (the daemon only reads them); adjacent
        // outputs do not overlap.
        let mut spans = pair_spans(1);
        spans[1].0 = spans[0].0;
        spans[3].0 = spans[2].0 + 40;
        assert!(v(&typed(&mem, pair, 1, 0, &spans)).is_ok());
    }

    #[test]
    fn the_table_is_read_once_from_the_arena() {
        // What validation returns is the copy it checked: rewriting the
        // arena's table afterwards changes nothing in the spans.
        let reg = typed_registry();
        let (pair, _) = reg.lookup("pair").unwrap();
        let mem = VecMemory::new(G.arena_size as usize);
        let r = typed(&mem, pair, 1, 128, &pair_spans(1));
        let ok = validate(&r, &reg, G, mem.as_ref()).unwrap();
        assert!(mem.write(128, &[0xff; 64]));
        assert_eq!(
            ok.tensors.unwrap().inputs[0],
            Span {
                off: 4096,
                len: 1024
            }
        );
    }

    #[test]
    fn untyped_requests_to_typed_models() {
        let reg = typed_registry();
        let mem = VecMemory::new(G.arena_size as usize);
        let v = |r: &Request| validate(r, &reg, G, mem.as_ref());
        // One tensor each way: batch 1, exact sizes.
        let (one, _) = reg.lookup("one").unwrap();
        let ok = v(&req(one, (0, 64), (64, 16))).unwrap();
        assert_eq!(ok.tensors, None);
        assert_eq!(ok.output, Span { off: 64, len: 16 });
        assert_eq!(
            unpack(v(&req(one, (0, 60), (64, 16))).unwrap_err()),
            (
                status::BAD_TENSOR_LEN,
                Detail::new(tensor::ROLE_INPUT, 0, 64),
                Detail::new(tensor::ROLE_INPUT, 0, 60)
            )
        );
        assert_eq!(
            unpack(v(&req(one, (0, 64), (64, 32))).unwrap_err()).1,
            Detail::new(tensor::ROLE_OUTPUT, 0, 16)
        );
        // Several tensors: refused, naming the counts.
        let (pair, _) = reg.lookup("pair").unwrap();
        assert_eq!(
            unpack(v(&req(pair, (0, 1088), (2048, 168))).unwrap_err()),
            (
                status::BAD_TENSOR_TABLE,
                Detail::new(tensor::ROLE_TABLE, tensor::TABLE_REQUIRED, 2),
                Detail::new(tensor::ROLE_TABLE, tensor::TABLE_REQUIRED, 2)
            )
        );
        // A typed request to a model known by its manifest: one u8 tensor
        // each way, batch 1.
        let (echo, m) = reg.lookup("echo_small").unwrap();
        let (i, o) = (m.input_bytes, m.output_bytes);
        let ok = v(&typed(&mem, echo, 1, 0, &[(4096, i), (8192, o)])).unwrap();
        assert_eq!(
            ok.tensors.unwrap().outputs,
            vec![Span { off: 8192, len: o }]
        );
        assert_eq!(
            v(&typed(&mem, echo, 2, 0, &[(4096, i), (8192, o)]))
                .unwrap_err()
                .status,
            status::BAD_BATCH
        );
    }

    #[test]
    fn wire_element_codes_are_the_models() {
        for t in ElemType::ALL {
            assert_eq!(tensor::elem_size(t.code()), Some(t.size()), "{t}");
            assert_eq!(tensor::elem_name(t.code()), Some(t.name()), "{t}");
        }
        assert_eq!(tensor::elem_size(ElemType::ALL.len() as u32), None);
    }

    proptest::proptest! {
        /// Any record a client can write is either refused with a status or
        /// names a registered model and spans that lie inside the arena.
        #[test]
        fn arbitrary_requests_are_refused_or_in_bounds(
            model in 0u32..12, priority in 0u32..3, flags in 0u16..2, reserved in 0u32..2,
            input_off in proptest::prelude::any::<u64>(), input_len in proptest::prelude::any::<u64>(),
            output_off in proptest::prelude::any::<u64>(), output_len in proptest::prelude::any::<u64>(),
            small in proptest::prelude::any::<bool>(), batch in 0u16..3,
        ) {
            let reg = ModelRegistry::builtin();
            let g = shm_proto::Geometry { sq_entries: 8, cq_entries: 8, arena_size: 1 << 20 };
            let (input_off, input_len, output_off, output_len) = if small {
                (input_off % 4096, input_len % 4096, output_off % 4096, output_len % 4096)
            } else {
                (input_off, input_len, output_off, output_len)
            };
            let r = Request {
                request_id: 1, model_id: model, priority, deadline_ns: 0,
                input_off, input_len, output_off, output_len, flags, batch, seq: reserved,
            };
            let mem = VecMemory::new(g.arena_size as usize);
            if let Ok(ok) = validate(&r, &reg, g, mem.as_ref()) {
                let m = reg.get(model).unwrap();
                proptest::prop_assert!(ok.input.off + ok.input.len <= g.arena_size);
                proptest::prop_assert!(ok.output.off + ok.output.len <= g.arena_size);
                if ok.tensors.is_none() {
                    proptest::prop_assert_eq!(input_len, m.input_bytes);
                    proptest::prop_assert!(output_len >= m.output_bytes);
                }
            }
        }

        /// Any tensor table in the arena is refused or yields spans inside
        /// the arena, of exactly the model's sizes, no output overlapping.
        #[test]
        fn arbitrary_tables_are_refused_or_sound(
            entries in proptest::collection::vec((0u64..70_000, 0u64..5000), 0..6),
            batch in 0u16..10, at in 0u64..70_000,
        ) {
            let reg = typed_registry();
            let (pair, m) = reg.lookup("pair").unwrap();
            let mem = VecMemory::new(G.arena_size as usize);
            let mut table = Vec::new();
            for &(off, len) in &entries {
                let mut e = [0u8; tensor::TABLE_ENTRY_BYTES];
                tensor::write_entry(&mut e, off, len);
                table.extend_from_slice(&e);
            }
            let _ = mem.write(at, &table);
            let r = Request {
                flags: tensor::FLAG_TENSOR_TABLE,
                batch,
                ..req(pair, (at, table.len() as u64), (0, 0))
            };
            if let Ok(ok) = validate(&r, &reg, G, mem.as_ref()) {
                let t = ok.tensors.unwrap();
                let specs = m.io.inputs.iter().chain(&m.io.outputs);
                for (s, spec) in t.inputs.iter().chain(&t.outputs).zip(specs) {
                    proptest::prop_assert!(s.off + s.len <= G.arena_size);
                    proptest::prop_assert_eq!(Some(s.len), spec.bytes(t.batch));
                }
                for (i, a) in t.outputs.iter().enumerate() {
                    for (j, b) in t.outputs.iter().enumerate().chain(
                        t.inputs.iter().enumerate().map(|(j, b)| (j + 100, b)),
                    ) {
                        if i != j {
                            proptest::prop_assert!(a.off + a.len <= b.off || b.off + b.len <= a.off);
                        }
                    }
                }
            }
        }
    }
}
