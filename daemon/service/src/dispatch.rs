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
//! Everything a client wrote is hostile: each request is copied out of the
//! ring by value, every field is checked, and a bad one is answered with an
//! error completion. A client whose ring indices or header magic are
//! corrupt is dropped (its region closed, its socket shut down).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;

use rustix::event::epoll;
use shm_proto::now_ns;
use shm_proto::region::DaemonRings;
use shm_proto::ring::{Consumer, Producer, PushError};
use shm_proto::{Completion, Priority, Request, status};

use crate::backend::fair::FairShare;
use crate::config::ClientsConfig;
use crate::region::Region;
use sluice_backend::{Backend, Finished, Job};
use sluice_model::ModelRegistry;

/// Per-client counters, shared with the status reporter.
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
}

impl Active {
    /// This client's requests on the device. The dispatcher is the only
    /// writer of the counter, so a relaxed load is exact here.
    fn on_device(&self) -> u32 {
        self.stats.on_device.load(Ordering::Relaxed)
    }

    /// Requests we may take from the ring now: room for their completions
    /// (completion credit) and within `max_in_flight`, and which of the two
    /// binds. `unread` is the completions the client has not read.
    fn credit(&self, unread: u32, max_in_flight: u32) -> (u32, Limit) {
        let on_device = self.on_device();
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
/// Longest sleep, so the heartbeat (watched by the systemd watchdog) moves.
const MAX_PARK_NS: u64 = 250_000_000;
/// Longest sleep while a client has requests waiting but no completion
/// credit (it has not read its completions).
const CREDIT_POLL_NS: u64 = 1_000_000;

/// Validates a request copied out of a client's ring.
pub fn validate(
    req: &Request,
    registry: &ModelRegistry,
    geometry: shm_proto::Geometry,
) -> Result<Priority, u32> {
    let priority = Priority::from_raw(req.priority).ok_or(status::BAD_PRIORITY)?;
    if req.flags != 0 {
        return Err(status::BAD_FLAGS);
    }
    let model = registry.get(req.model_id).ok_or(status::UNKNOWN_MODEL)?;
    if !geometry.span_in_arena(req.input_off, req.input_len) {
        return Err(status::BAD_INPUT_SPAN);
    }
    if !geometry.span_in_arena(req.output_off, req.output_len) {
        return Err(status::BAD_OUTPUT_SPAN);
    }
    if req.input_len != model.input_bytes {
        return Err(status::BAD_INPUT_LEN);
    }
    if req.output_len < model.output_bytes {
        return Err(status::OUTPUT_TOO_SMALL);
    }
    Ok(priority)
}

/// Daemon-wide counters.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests taken off rings.
    pub submitted: AtomicU64,
    /// OK completions.
    pub completed: AtomicU64,
    /// Error completions.
    pub errors: AtomicU64,
    /// Sessions refused at the handshake.
    pub refused: AtomicU64,
    /// Clients dropped for corrupting their region.
    pub dropped_clients: AtomicU64,
    /// Futex wakes sent to sleeping clients.
    pub wakes: AtomicU64,
    /// Times the dispatcher parked.
    pub parks: AtomicU64,
}

/// What the dispatcher needs from the rest of the daemon: the models, its
/// idle-spin setting, and the counters and client list it updates. The
/// server's shared state implements it; the dispatcher depends on this
/// trait, not on the server, so imports point one way (server → dispatch).
pub trait Host: Send + Sync {
    /// The models served.
    fn registry(&self) -> &ModelRegistry;
    /// `daemon.idle_spin_us`: how long the dispatcher spins before parking.
    fn idle_spin_us(&self) -> u32;
    /// The daemon's counters.
    fn counters(&self) -> &Counters;
    /// Incremented by every dispatcher loop (the watchdog reads it).
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
    device: Box<dyn Backend>,
    rx: Receiver<Command>,
    control: Arc<OwnedFd>,
    epoll: OwnedFd,
    /// Armed at the device's next event: `epoll_wait`'s own timeout has
    /// only millisecond resolution, a timerfd has the hrtimer's.
    timer: OwnedFd,
    clients: Vec<Active>,
    index: HashMap<u32, usize>,
    done: Vec<Finished>,
    rr: usize,
    /// `clients.max_in_flight_per_client` (`u32::MAX` when unset).
    max_in_flight: u32,
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
        let limits = shared.clients_config();
        let max_in_flight = limits.max_in_flight_per_client.unwrap_or(u32::MAX);
        let device: Box<dyn Backend> =
            Box::new(FairShare::new(device, limits.on_device_per_client));
        Ok(Self {
            shared,
            device,
            rx,
            control,
            epoll: ep,
            timer,
            clients: Vec::new(),
            index: HashMap::new(),
            done: Vec::with_capacity(256),
            rr: 0,
            max_in_flight,
        })
    }

    /// Runs until `Command::Shutdown`.
    pub(crate) fn run(mut self) {
        let idle_spin_ns = u64::from(self.shared.idle_spin_us()) * 1000;
        let mut last_work = now_ns();
        // Built here: epoll events hold a pointer-sized union, not `Send`.
        let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
        loop {
            self.shared.heartbeat().fetch_add(1, Ordering::Relaxed);
            if !self.apply_commands() {
                break;
            }
            let mut work = self.poll_clients();
            work |= self.poll_device();
            let now = now_ns();
            if work {
                last_work = now;
                continue;
            }
            if now.saturating_sub(last_work) < idle_spin_ns {
                std::hint::spin_loop();
                continue;
            }
            self.park(&mut events);
            last_work = now_ns();
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
        if let Err(e) = epoll::add(
            &self.epoll,
            c.wake.as_fd(),
            epoll::EventData::new_u64(u64::from(c.id)),
            epoll::EventFlags::IN,
        ) {
            tracing::error!(
                client = c.id,
                "cannot watch the client's eventfd: {e}; dropping it"
            );
            region.close();
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            return;
        }
        self.index.insert(c.id, self.clients.len());
        self.clients.push(Active {
            sq,
            cq,
            id: c.id,
            region,
            wake: c.wake,
            sock: c.sock,
            stats: c.stats,
        });
    }

    fn remove(&mut self, id: u32, why: &str) {
        let Some(pos) = self.index.remove(&id) else {
            return;
        };
        let gone = self.clients.swap_remove(pos);
        if let Some(moved) = self.clients.get(pos) {
            self.index.insert(moved.id, pos);
        }
        let dropped = self.device.cancel_client(id);
        let _ = epoll::delete(&self.epoll, gone.wake.as_fd());
        gone.region.close();
        let _ = gone.sock.shutdown(std::net::Shutdown::Both);
        self.shared.client_gone(id);
        tracing::info!(client = id, dropped, "{why}; region reclaimed");
    }

    /// Takes what every client has submitted. Returns whether anything was.
    fn poll_clients(&mut self) -> bool {
        let n = self.clients.len();
        if n == 0 {
            return false;
        }
        let mut work = false;
        let mut bad: Vec<(u32, &'static str)> = Vec::new();
        self.rr = (self.rr + 1) % n;
        for k in 0..n {
            let i = (self.rr + k) % n;
            match self.poll_one(i) {
                Ok(w) => work |= w,
                Err(why) => bad.push((self.clients[i].id, why)),
            }
        }
        for (id, why) in bad {
            self.shared
                .counters()
                .dropped_clients
                .fetch_add(1, Ordering::Relaxed);
            self.remove(id, why);
        }
        work
    }

    fn poll_one(&mut self, i: usize) -> Result<bool, &'static str> {
        let registry = self.shared.registry();
        let max_in_flight = self.max_in_flight;
        let c = &mut self.clients[i];
        if !c.region.magic_intact() {
            return Err("client corrupted its region header (magic)");
        }
        let unread =
            c.cq.len()
                .map_err(|_| "client corrupted its completion ring head")?;
        let (mut credit, _) = c.credit(unread, max_in_flight);
        let mut work = false;
        let mut woke = false;
        while credit > 0 {
            let req = match c.sq.pop() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => return Err("client corrupted its submission ring indices"),
            };
            work = true;
            credit -= 1;
            let now = now_ns();
            c.stats.submitted.fetch_add(1, Ordering::Relaxed);
            self.shared
                .counters()
                .submitted
                .fetch_add(1, Ordering::Relaxed);
            match validate(&req, registry, c.region.geometry()) {
                Ok(priority) => {
                    c.stats.on_device.fetch_add(1, Ordering::Relaxed);
                    self.device.submit(
                        Job {
                            client: c.id,
                            request_id: req.request_id,
                            model: req.model_id,
                            priority,
                            deadline_ns: req.deadline_ns,
                            input_off: req.input_off,
                            input_len: req.input_len,
                            output_off: req.output_off,
                            output_len: req.output_len,
                            memory: c.region.clone(),
                            received_ns: now,
                        },
                        now,
                    );
                }
                Err(code) => {
                    let completion = Completion {
                        request_id: req.request_id,
                        status: code,
                        received_ns: now,
                        started_ns: now,
                        finished_ns: now,
                        ..Completion::default()
                    };
                    c.stats.errors.fetch_add(1, Ordering::Relaxed);
                    self.shared
                        .counters()
                        .errors
                        .fetch_add(1, Ordering::Relaxed);
                    match c.cq.push(completion) {
                        Ok(()) => woke = true,
                        Err(PushError::Full) => {
                            return Err(
                                "completion ring full despite credit (client corrupted it)",
                            );
                        }
                        Err(PushError::Corrupt(_)) => {
                            return Err("client corrupted its completion ring head");
                        }
                    }
                }
            }
        }
        if woke && c.cq.needs_wake() {
            shm_proto::futex::wake_all(c.cq.wake_word());
        }
        Ok(work)
    }

    /// Posts the device's finished jobs. Returns whether there were any.
    fn poll_device(&mut self) -> bool {
        self.device.poll(now_ns(), &mut self.done);
        self.shared
            .device_queued()
            .store(self.device.queued() as u64, Ordering::Relaxed);
        if self.done.is_empty() {
            return false;
        }
        let mut done = std::mem::take(&mut self.done);
        let mut bad = Vec::new();
        for f in done.drain(..) {
            let Some(&i) = self.index.get(&f.client) else {
                continue;
            };
            let c = &mut self.clients[i];
            c.stats.on_device.fetch_sub(1, Ordering::Relaxed);
            let ok = f.status == status::OK;
            let (mine, all) = if ok {
                (&c.stats.completed, &self.shared.counters().completed)
            } else {
                (&c.stats.errors, &self.shared.counters().errors)
            };
            mine.fetch_add(1, Ordering::Relaxed);
            all.fetch_add(1, Ordering::Relaxed);
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
                        self.shared.counters().wakes.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(_) => bad.push(c.id),
            }
        }
        self.done = done;
        for id in bad {
            self.shared
                .counters()
                .dropped_clients
                .fetch_add(1, Ordering::Relaxed);
            self.remove(id, "client corrupted its completion ring");
        }
        true
    }

    /// Sleeps until a client rings, a command arrives, or the device's next
    /// event is due.
    fn park(&mut self, events: &mut Vec<epoll::Event>) {
        let mut bad = Vec::new();
        let mut ready = false;
        let mut credit_blocked = false;
        for c in &mut self.clients {
            match c.sq.prepare_park() {
                Ok(Some(_)) => {}
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
                        Err(_) => bad.push(c.id),
                    }
                }
                Err(_) => bad.push(c.id),
            }
        }
        if !bad.is_empty() || ready {
            for c in &self.clients {
                c.sq.unpark();
            }
            for id in bad {
                self.shared
                    .counters()
                    .dropped_clients
                    .fetch_add(1, Ordering::Relaxed);
                self.remove(id, "client corrupted its rings");
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
            self.shared.counters().parks.fetch_add(1, Ordering::Relaxed);
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
                } else {
                    self.index
                        .get(&(token as u32))
                        .map(|&i| self.clients[i].wake.as_fd())
                };
                if let Some(fd) = fd {
                    // Drain the eventfd counter (non-blocking fd).
                    let _ = rustix::io::read(fd, &mut buf);
                }
            }
        }
        for c in &self.clients {
            c.sq.unpark();
        }
    }

    fn shutdown_all(&mut self) {
        let ids: Vec<u32> = self.clients.iter().map(|c| c.id).collect();
        for id in ids {
            self.remove(id, "daemon shutting down");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            seq: 0,
        }
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
            validate(&req(id, (0, i), (i, o)), &reg, g),
            Ok(Priority::RealTime)
        );
        assert_eq!(
            validate(&req(9999, (0, i), (i, o)), &reg, g),
            Err(status::UNKNOWN_MODEL)
        );
        assert_eq!(
            validate(&req(id, (4090, i), (i, o)), &reg, g),
            Err(status::BAD_INPUT_SPAN)
        );
        assert_eq!(
            validate(&req(id, (u64::MAX, i), (i, o)), &reg, g),
            Err(status::BAD_INPUT_SPAN)
        );
        assert_eq!(
            validate(&req(id, (0, i), (u64::MAX - 1, o)), &reg, g),
            Err(status::BAD_OUTPUT_SPAN)
        );
        assert_eq!(
            validate(&req(id, (0, i + 1), (i + 8, o)), &reg, g),
            Err(status::BAD_INPUT_LEN)
        );
        assert_eq!(
            validate(&req(id, (0, i), (i, o - 1)), &reg, g),
            Err(status::OUTPUT_TOO_SMALL)
        );
        let mut r = req(id, (0, i), (i, o));
        r.priority = 7;
        assert_eq!(validate(&r, &reg, g), Err(status::BAD_PRIORITY));
        r.priority = 1;
        r.flags = 1;
        assert_eq!(validate(&r, &reg, g), Err(status::BAD_FLAGS));
    }

    proptest::proptest! {
        /// Any record a client can write is either refused with a status or
        /// names a registered model and spans that lie inside the arena.
        #[test]
        fn arbitrary_requests_are_refused_or_in_bounds(
            model in 0u32..12, priority in 0u32..3, flags in 0u32..2, reserved in 0u32..2,
            input_off in proptest::prelude::any::<u64>(), input_len in proptest::prelude::any::<u64>(),
            output_off in proptest::prelude::any::<u64>(), output_len in proptest::prelude::any::<u64>(),
            small in proptest::prelude::any::<bool>(),
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
                input_off, input_len, output_off, output_len, flags, seq: reserved,
            };
            if validate(&r, &reg, g).is_ok() {
                let m = reg.get(model).unwrap();
                proptest::prop_assert!(input_off + input_len <= g.arena_size);
                proptest::prop_assert!(output_off + output_len <= g.arena_size);
                proptest::prop_assert_eq!(input_len, m.input_bytes);
                proptest::prop_assert!(output_len >= m.output_bytes);
            }
        }
    }
}
