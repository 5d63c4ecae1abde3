//! Fair sharing of a priority class between clients, in front of any
//! [`Backend`].
//!
//! [`FairShare`] wraps the device the daemon runs (`fifo`, a policy on the
//! GPU model, CUDA) and bounds what each client puts in front of the
//! others: the wrapped device holds at most `share` requests of each client
//! in each priority class (`clients.on_device_per_client`, default 1). A
//! client's further requests of that class wait here, in a queue of their
//! own (earliest deadline first, FIFO without deadlines:
//! [`EdfQueue`]), and one is handed on each time one of that client's
//! requests of that class completes. A request whose deadline passes while
//! it waits here is handed on all the same: the wrapped device completes it
//! with `DEADLINE_MISSED` without starting it.
//!
//! The policy underneath therefore never holds more than `share` requests of
//! any one client per class, whatever it does with them: a request handed to
//! it has at most `share` requests of each *other* client of its class
//! queued with it (and its own client's earlier ones). Because a client's
//! next request is handed on only when its previous one finishes, it joins
//! the back of the device's queue: backlogged clients of one class are
//! served round robin, one request each per turn (per request, not per
//! device time: a client of long requests gets more device time per turn
//! than a client of short ones). This is deficit round robin with a quantum
//! of one request; it needs nothing from the policy, so every policy gets it
//! unchanged.
//!
//! Jobs are renamed on the way down: the wrapped device sees a request id
//! of our own (a slot in a table of tickets, reused once its job is back),
//! which maps back to the client's id, the class and the client on the way
//! up. A client's own ids are not trusted to be unique.
//!
//! The caller names each client by a small *slot* number it keeps while the
//! client lives (the dispatcher's client table, `crate::slots`); lanes are
//! a vector indexed by it and every completion comes back with it
//! ([`Done`]), so neither side hashes a client id per request.
//!
//! Cost: the device sees only `share` requests of a client per class, so a
//! single client cannot overlap more than `share` of its own requests of one
//! class on a device that runs several at once (the GPU-model policies).
//! Raise `on_device_per_client` to trade isolation for that overlap.

use shm_proto::Priority;
use sluice_backend::{Backend, Finished, Job};
use sluice_sched::queue::EdfQueue;

/// Number of priority classes.
const CLASSES: usize = 2;

fn class(p: Priority) -> usize {
    match p {
        Priority::RealTime => 0,
        Priority::BestEffort => 1,
    }
}

/// One client's requests of one class.
#[derive(Debug, Default)]
struct Lane {
    /// Waiting here, earliest deadline first, else in submission order.
    waiting: EdfQueue<Job>,
    /// Handed to the wrapped device and not yet finished.
    on_device: u32,
}

/// What a renamed job was.
#[derive(Debug, Clone, Copy)]
struct Ticket {
    slot: u32,
    client: u32,
    request_id: u64,
    class: usize,
    model: u32,
    priority: Priority,
}

/// A finished job, its request id the client's again, and the slot its
/// client was submitted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// The caller's slot for the client ([`FairShare::submit`]).
    pub slot: u32,
    /// The wrapped device's completion.
    pub finished: Finished,
    /// The request's model.
    pub model: u32,
    /// The request's class.
    pub priority: Priority,
}

/// The wrapped device behind per-client lanes: it holds at most `share`
/// requests of each client per priority class; see the module docs.
///
/// Clients are named by a *slot*, a small number the caller chooses and
/// keeps while the client lives (the dispatcher's client table): lanes are
/// indexed by it, so nothing on the request path hashes. The caller must
/// [`FairShare::cancel`] a slot's client before giving the slot to another.
pub struct FairShare {
    inner: Box<dyn Backend>,
    share: u32,
    /// By slot.
    lanes: Vec<[Lane; CLASSES]>,
    /// Jobs on the wrapped device, by the request id it sees (the index).
    tickets: Vec<Option<Ticket>>,
    /// Free indices of `tickets`.
    free_tickets: Vec<u64>,
    /// Jobs waiting in the lanes, all clients and classes.
    held: usize,
    /// The wrapped device's completions, before renaming back.
    scratch: Vec<Finished>,
}

impl std::fmt::Debug for FairShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairShare")
            .field("inner", &self.inner.name())
            .field("share", &self.share)
            .field("held", &self.held)
            .field("on_device", &(self.tickets.len() - self.free_tickets.len()))
            .finish_non_exhaustive()
    }
}

impl FairShare {
    /// Wraps `inner`, handing it at most `share` (at least 1) requests of
    /// each client per priority class.
    pub fn new(inner: Box<dyn Backend>, share: u32) -> Self {
        Self {
            inner,
            share: share.max(1),
            lanes: Vec::new(),
            tickets: Vec::new(),
            free_tickets: Vec::new(),
            held: 0,
            scratch: Vec::with_capacity(64),
        }
    }

    /// Requests of each client per class the wrapped device may hold.
    pub fn share(&self) -> u32 {
        self.share
    }

    /// Jobs waiting here (not yet handed to the wrapped device).
    pub fn held(&self) -> usize {
        self.held
    }

    /// The wrapped device's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The wrapped device's completion descriptor ([`Backend::wake_fd`]).
    pub fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.wake_fd()
    }

    /// Renames `job` and hands it to the wrapped device.
    fn hand_on(&mut self, slot: u32, mut job: Job, class: usize, now_ns: u64) {
        let t = Some(Ticket {
            slot,
            client: job.client,
            request_id: job.request_id,
            class,
            model: job.model,
            priority: job.priority,
        });
        let ticket = match self.free_tickets.pop() {
            Some(i) => {
                self.tickets[i as usize] = t;
                i
            }
            None => {
                self.tickets.push(t);
                (self.tickets.len() - 1) as u64
            }
        };
        job.request_id = ticket;
        self.inner.submit(job, now_ns);
    }

    /// Queues `job` of the client in `slot`. `now_ns` is the current
    /// `CLOCK_MONOTONIC` time.
    pub fn submit(&mut self, slot: u32, job: Job, now_ns: u64) {
        let c = class(job.priority);
        let s = slot as usize;
        if s >= self.lanes.len() {
            self.lanes.resize_with(s + 1, Default::default);
        }
        let lane = &mut self.lanes[s][c];
        if lane.on_device < self.share && lane.waiting.is_empty() {
            lane.on_device += 1;
            self.hand_on(slot, job, c, now_ns);
        } else {
            lane.waiting.push(super::fifo::deadline_of(&job), job);
            self.held += 1;
        }
    }

    /// Advances the device to `now_ns` and appends every job finished by
    /// then to `done`, handing on the next job of each lane that frees.
    pub fn poll(&mut self, now_ns: u64, done: &mut Vec<Done>) {
        // Jobs handed on here can finish at once (a zero-time model, a
        // missed deadline), so poll again while this pass handed one on.
        // Each pass finishes a job or stops, so this ends; a pass that
        // handed nothing on leaves the device as its poll found it.
        loop {
            self.scratch.clear();
            self.inner.poll(now_ns, &mut self.scratch);
            if self.scratch.is_empty() {
                return;
            }
            let mut handed_on = false;
            let mut finished = std::mem::take(&mut self.scratch);
            for mut f in finished.drain(..) {
                let slot = usize::try_from(f.request_id)
                    .ok()
                    .and_then(|i| self.tickets.get_mut(i))
                    .filter(|t| t.is_some_and(|t| t.client == f.client));
                let Some(t) = slot.and_then(Option::take) else {
                    tracing::warn!(
                        client = f.client,
                        ticket = f.request_id,
                        "fair share: completion for a job it did not hand on; ignored"
                    );
                    continue;
                };
                self.free_tickets.push(f.request_id);
                f.request_id = t.request_id;
                done.push(Done {
                    slot: t.slot,
                    finished: f,
                    model: t.model,
                    priority: t.priority,
                });
                let Some(lanes) = self.lanes.get_mut(t.slot as usize) else {
                    continue;
                };
                let lane = &mut lanes[t.class];
                lane.on_device = lane.on_device.saturating_sub(1);
                if let Some(next) = lane.waiting.pop() {
                    lane.on_device += 1;
                    self.held -= 1;
                    self.hand_on(t.slot, next, t.class, now_ns);
                    handed_on = true;
                }
            }
            self.scratch = finished;
            if !handed_on {
                return;
            }
        }
    }

    /// Lets the wrapped device drop what its finished jobs still hold
    /// ([`Backend::release_finished`]); call once their completions are
    /// posted.
    pub fn release_finished(&mut self) {
        self.inner.release_finished();
    }

    /// The `CLOCK_MONOTONIC` time of the next completion, or `None` when
    /// idle.
    pub fn next_event_ns(&self) -> Option<u64> {
        // A job waits here only while its client's slots on the device are
        // taken, so the next thing that can happen is the device's.
        self.inner.next_event_ns()
    }

    /// Drops every job of `client`, whose slot is `slot` (it has gone),
    /// here and on the device, and returns how many were dropped; no
    /// completion comes for them. The slot may then be given to another
    /// client.
    pub fn cancel(&mut self, slot: u32, client: u32) -> usize {
        let mut dropped = 0;
        if let Some(lanes) = self.lanes.get_mut(slot as usize) {
            let waiting: usize = lanes.iter().map(|l| l.waiting.len()).sum();
            *lanes = Default::default();
            self.held -= waiting;
            dropped += waiting;
        }
        for (i, t) in self.tickets.iter_mut().enumerate() {
            if t.is_some_and(|t| t.slot == slot) {
                *t = None;
                self.free_tickets.push(i as u64);
            }
        }
        dropped + self.inner.cancel_client(client)
    }

    /// Jobs waiting here or queued or running on the device.
    pub fn queued(&self) -> usize {
        self.held + self.inner.queued()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shm_proto::status;
    use sluice_model::ModelRegistry;

    use super::super::fifo::FifoBackend;
    use super::*;

    const MS: u64 = 1_000_000;

    fn job(model: &str, client: u32, request_id: u64, priority: Priority, at: u64) -> Job {
        let reg = ModelRegistry::builtin();
        let (model, m) = reg.lookup(model).unwrap();
        sluice_backend::testmem::job(
            client,
            request_id,
            model,
            priority,
            (m.input_bytes, m.output_bytes),
            at,
        )
    }

    fn fair(share: u32) -> FairShare {
        let fifo = FifoBackend::new(Arc::new(ModelRegistry::builtin()), 1.0).unwrap();
        FairShare::new(Box::new(fifo), share)
    }

    fn duration(model: &str) -> u64 {
        ModelRegistry::builtin()
            .lookup(model)
            .unwrap()
            .1
            .total_time_ns
    }

    /// Submits `job` under a slot equal to its client's id.
    fn put(dev: &mut FairShare, job: Job, now: u64) {
        dev.submit(job.client, job, now);
    }

    /// Polls once; checks each completion comes back under its client's
    /// slot.
    fn poll(dev: &mut FairShare, now: u64) -> Vec<Finished> {
        let mut done = Vec::new();
        dev.poll(now, &mut done);
        done.iter()
            .map(|d| {
                assert_eq!(d.slot, d.finished.client);
                d.finished
            })
            .collect()
    }

    /// Runs the device event by event until idle; returns the completions.
    fn drain(dev: &mut FairShare, from: u64) -> Vec<Finished> {
        let mut done = Vec::new();
        let mut now = from;
        for _ in 0..100_000 {
            done.extend(poll(dev, now));
            match dev.next_event_ns() {
                Some(t) => now = now.max(t),
                None => break,
            }
        }
        assert_eq!(dev.queued(), 0, "device did not drain");
        done
    }

    #[test]
    fn a_flood_delays_another_clients_request_by_at_most_one_of_its_own() {
        for share in [1u32, 2, 4] {
            let mut dev = fair(share);
            // Client 1 queues 12 long real-time requests, then client 2 one
            // short one, all at time 0.
            for r in 0..12 {
                put(&mut dev, job("resnet152", 1, r, Priority::RealTime, 0), 0);
            }
            put(&mut dev, job("echo_small", 2, 7, Priority::RealTime, 0), 0);
            assert_eq!(dev.held(), 12 - share as usize);
            let done = drain(&mut dev, 0);
            assert_eq!(done.len(), 13);
            assert!(done.iter().all(|f| f.status == status::OK));
            let echo = done.iter().find(|f| f.client == 2).unwrap();
            assert_eq!(echo.request_id, 7, "the client's own id comes back");
            let ahead = done
                .iter()
                .take_while(|f| f.client != 2)
                .filter(|f| f.client == 1)
                .count();
            assert_eq!(ahead, share as usize, "share {share}");
            assert_eq!(
                echo.finished_ns,
                u64::from(share) * duration("resnet152") + duration("echo_small")
            );
            // Client 1's ids come back in its order.
            let ids: Vec<u64> = done
                .iter()
                .filter(|f| f.client == 1)
                .map(|f| f.request_id)
                .collect();
            assert_eq!(ids, (0..12).collect::<Vec<_>>());
        }
    }

    #[test]
    fn without_the_wrapper_the_flood_goes_first() {
        // The baseline the wrapper fixes: FIFO within a class.
        let mut dev = FifoBackend::new(Arc::new(ModelRegistry::builtin()), 1.0).unwrap();
        for r in 0..12 {
            dev.submit(job("resnet152", 1, r, Priority::RealTime, 0), 0);
        }
        dev.submit(job("echo_small", 2, 7, Priority::RealTime, 0), 0);
        let mut done = Vec::new();
        dev.poll(u64::MAX / 2, &mut done);
        assert_eq!(done.last().unwrap().client, 2);
    }

    /// Every policy on the GPU model: a real-time request of another client
    /// finishes after at most one of the flood's (it is handed the policy
    /// while at most one flood request is there).
    #[test]
    fn every_policy_runs_the_echo_after_at_most_one_flood_request() {
        use sluice_sched::PolicyKind;
        let models = Arc::new(ModelRegistry::builtin());
        for kind in [
            PolicyKind::Seq,
            PolicyKind::Streams,
            PolicyKind::WaitPreempt,
            PolicyKind::Reef,
            PolicyKind::Paella,
        ] {
            let profile = sluice_gpu::DeviceProfile::mi50();
            let inner =
                super::super::modeled::ModeledBackend::new(profile, kind, models.clone(), 0)
                    .unwrap();
            let mut dev = FairShare::new(Box::new(inner), 1);
            for r in 0..6 {
                put(&mut dev, job("resnet152", 1, r, Priority::RealTime, 0), 0);
            }
            // Client 2 arrives while the first flood request runs.
            assert!(poll(&mut dev, MS).is_empty());
            put(
                &mut dev,
                job("echo_small", 2, 7, Priority::RealTime, MS),
                MS,
            );
            let done = drain(&mut dev, MS);
            assert_eq!(done.len(), 7, "{kind}");
            let ahead = done.iter().take_while(|f| f.client != 2).count();
            assert!(ahead <= 1, "{kind}: {ahead} flood requests finished first");
        }
    }

    #[test]
    fn backlogged_clients_take_turns() {
        let mut dev = fair(1);
        for client in 1..=3u32 {
            for r in 0..4 {
                put(
                    &mut dev,
                    job("echo_small", client, r, Priority::BestEffort, 0),
                    0,
                );
            }
        }
        let done = drain(&mut dev, 0);
        let order: Vec<u32> = done.iter().map(|f| f.client).collect();
        assert_eq!(order, [1, 2, 3].repeat(4));
    }

    #[test]
    fn a_clients_waiting_requests_go_on_earliest_deadline_first() {
        let mut dev = fair(1);
        let far = 1_000_000 * MS;
        // The first goes on at once; the others wait in the client's lane.
        for (id, d) in [
            (0, 0),
            (1, 0),
            (2, far + 3),
            (3, far + 1),
            (4, 0),
            (5, far + 2),
        ] {
            let mut j = job("echo_small", 7, id, Priority::RealTime, 0);
            j.deadline_ns = d;
            put(&mut dev, j, 0);
        }
        let ids: Vec<u64> = drain(&mut dev, 0).iter().map(|f| f.request_id).collect();
        assert_eq!(ids, [0, 3, 5, 2, 1, 4]);
    }

    #[test]
    fn a_request_that_waited_past_its_deadline_is_missed_and_names_its_model() {
        let mut dev = fair(1);
        let (resnet, _) = ModelRegistry::builtin().lookup("resnet152").unwrap();
        put(&mut dev, job("resnet152", 7, 0, Priority::BestEffort, 0), 0);
        let mut late = job("resnet152", 7, 1, Priority::BestEffort, 0);
        late.deadline_ns = MS; // waits in the lane behind a 14 ms request
        put(&mut dev, late, 0);
        let mut done = Vec::new();
        let mut now = 0;
        while let Some(t) = dev.next_event_ns() {
            now = now.max(t);
            dev.poll(now, &mut done);
        }
        let missed: Vec<&Done> = done
            .iter()
            .filter(|d| d.finished.status == shm_proto::status::DEADLINE_MISSED)
            .collect();
        assert_eq!(missed.len(), 1);
        assert_eq!(missed[0].finished.request_id, 1);
        assert_eq!(
            (missed[0].model, missed[0].priority),
            (resnet, Priority::BestEffort)
        );
    }

    #[test]
    fn classes_have_separate_shares() {
        let mut dev = fair(1);
        for r in 0..3 {
            put(
                &mut dev,
                job("echo_small", 1, r, Priority::BestEffort, 0),
                0,
            );
        }
        // The client's real-time request is not stuck behind its own
        // best-effort backlog: it has a slot of its own class.
        put(&mut dev, job("echo_small", 1, 10, Priority::RealTime, 0), 0);
        assert_eq!(dev.held(), 2);
        let done = drain(&mut dev, 0);
        assert_eq!(done[0].request_id, 10);
    }

    #[test]
    fn duplicate_client_request_ids_are_kept_apart() {
        let mut dev = fair(2);
        for _ in 0..5 {
            put(&mut dev, job("echo_small", 1, 42, Priority::RealTime, 0), 0);
        }
        let done = drain(&mut dev, 0);
        assert_eq!(done.len(), 5);
        assert!(done.iter().all(|f| f.request_id == 42));
    }

    #[test]
    fn cancel_drops_waiting_and_device_jobs() {
        let mut dev = fair(1);
        for r in 0..5 {
            put(&mut dev, job("echo_small", 1, r, Priority::RealTime, 0), 0);
        }
        put(&mut dev, job("echo_small", 2, 9, Priority::RealTime, 0), 0);
        assert_eq!(dev.queued(), 6);
        assert_eq!(dev.cancel(1, 1), 5);
        assert_eq!(dev.held(), 0);
        assert_eq!(dev.cancel(1, 1), 0);
        let done = drain(&mut dev, 0);
        assert_eq!(done.iter().map(|f| f.request_id).collect::<Vec<_>>(), [9]);
        // The client can come back under the same id with a clean slate.
        put(&mut dev, job("echo_small", 1, 3, Priority::RealTime, 0), 0);
        assert_eq!(drain(&mut dev, 0).len(), 1);
    }

    #[test]
    fn a_reused_slot_starts_clean_and_gets_only_its_clients_completions() {
        let mut dev = fair(1);
        // Client 7 in slot 0: one job on the device, three waiting.
        for r in 0..4 {
            dev.submit(0, job("echo_small", 7, r, Priority::RealTime, 0), 0);
        }
        assert_eq!(dev.cancel(0, 7), 4);
        // Client 8 takes slot 0: its first job goes straight to the device
        // (the lane is empty), and only its completions come back.
        dev.submit(0, job("echo_small", 8, 100, Priority::RealTime, 0), 0);
        assert_eq!(dev.held(), 0);
        let mut done = Vec::new();
        let mut now = 0;
        while let Some(t) = dev.next_event_ns() {
            now = now.max(t);
            dev.poll(now, &mut done);
        }
        assert_eq!(
            done.iter()
                .map(|d| (d.slot, d.finished.client, d.finished.request_id))
                .collect::<Vec<_>>(),
            [(0, 8, 100)]
        );
        assert_eq!(dev.queued(), 0);
    }

    #[test]
    fn zero_time_and_missed_jobs_release_the_next_in_one_poll() {
        let mut dev = fair(1);
        for r in 0..10 {
            put(
                &mut dev,
                job("null", 1, r, Priority::RealTime, 5 * MS),
                5 * MS,
            );
        }
        assert_eq!(poll(&mut dev, 5 * MS).len(), 10);
        assert_eq!(dev.queued(), 0);
    }
}
