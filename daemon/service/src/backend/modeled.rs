//! A real-time device backed by the discrete-event GPU model and a
//! scheduling policy: the daemon's requests become tasks of the policy
//! ([`sluice_sched`]), whose kernels run on [`GpuSim`] with virtual time
//! locked to `CLOCK_MONOTONIC` (virtual 0 = when the device was built).
//!
//! Finished tasks write the same reference output as [`super::fifo`]. The
//! policies are the ones the DISB benchmark measures in virtual time; here
//! they run against real clients, so `sluice demo --policy reef` and
//! `--policy streams` show the difference with real processes.
//!
//! A task the policy fails ([`Ctx::fail`]: the device refused it; the GPU
//! model never does) completes with `DEVICE_ERROR`.
//!
//! A request's deadline becomes its task's deadline on the device clock.
//! A task late on arrival is never handed to the policy, and one whose
//! deadline passes while it waits in the policy is dropped unstarted
//! ([`sluice_sched::arrive`], [`Ctx::drop_if_late`]); either completes with
//! `DEADLINE_MISSED` and no output, no kernel of it launched. A task that
//! started runs to its end and returns its output, however late.
//!
//! A departed client's tasks are forgotten (no completion is produced), but
//! kernels already handed to the model run to their end: the policy
//! interface has no cancellation yet.

use std::collections::HashMap;
use std::sync::Arc;

use shm_proto::status;

use sluice_backend::{Backend, Finished, Job};
use sluice_gpu::{DeviceProfile, Event};
use sluice_gpusim::GpuSim;
use sluice_model::ModelRegistry;
use sluice_sched::{
    Ctx, Policy, PolicyKind, PolicyStats, Task, TaskDone, TaskFailed, TaskId, TaskMissed, arrive,
    untag,
};

/// Why a modeled device could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ModeledError {
    /// `rt-only` drops best-effort requests, which clients would wait for
    /// forever.
    #[error(
        "policy `rt-only` is a benchmark reference that drops best-effort work; choose another for the daemon"
    )]
    RtOnly,
}

struct Pending {
    job: Job,
    started: Option<u64>,
}

/// The GPU model plus a policy, as a [`Backend`].
pub struct ModeledBackend {
    name: String,
    gpu: GpuSim,
    policy: Box<dyn Policy>,
    models: Arc<ModelRegistry>,
    epoch: u64,
    next_task: TaskId,
    jobs: HashMap<TaskId, Pending>,
    events: Vec<Event>,
    fresh: Vec<TaskDone>,
    failed: Vec<TaskFailed>,
    missed: Vec<TaskMissed>,
    stats: PolicyStats,
    buf: Vec<u8>,
    /// Jobs finished by the last `poll`, kept until
    /// [`Backend::release_finished`] (or the next `poll`) drops their
    /// region references, after the dispatcher has posted the completions.
    finished_jobs: Vec<Job>,
}

impl std::fmt::Debug for ModeledBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModeledBackend")
            .field("name", &self.name)
            .field("jobs", &self.jobs.len())
            .finish_non_exhaustive()
    }
}

/// Logs which models `split` runs in blocks (the `splits` entry for
/// `device`, else the first of each manifest) and which it runs whole.
fn log_splits(models: &ModelRegistry, device: &str) {
    let mut unsplit = Vec::new();
    for (_, m) in models.iter() {
        match sluice_sched::split::split_for_device(&m.manifest, Some(device)) {
            Some(s) if !s.cuts.is_empty() => tracing::info!(
                model = m.name(),
                blocks = s.cuts.len() + 1,
                cuts = ?s.cuts,
                device = %s.device,
                "split: model runs in blocks"
            ),
            _ => unsplit.push(m.name().to_owned()),
        }
    }
    tracing::info!(models = ?unsplit, "split: models without a split run whole");
}

impl ModeledBackend {
    /// A device of `profile` scheduled by `kind`, starting at `now_ns`.
    pub fn new(
        profile: DeviceProfile,
        kind: PolicyKind,
        models: Arc<ModelRegistry>,
        now_ns: u64,
    ) -> Result<Self, ModeledError> {
        if kind == PolicyKind::RtOnly {
            return Err(ModeledError::RtOnly);
        }
        let policy: Box<dyn sluice_sched::Policy> = if kind == PolicyKind::Split {
            // The split chosen for this device profile where a manifest
            // has one.
            log_splits(&models, &profile.name);
            Box::new(sluice_sched::split::SplitPolicy::new(
                &models,
                sluice_sched::split::SplitConfig::for_device(&models, Some(&profile.name)),
            ))
        } else {
            sluice_sched::make_policy(kind, &models)
        };
        Ok(Self {
            name: format!("modeled {} GPU, policy {kind}", profile.name),
            gpu: GpuSim::new(profile),
            policy,
            models,
            epoch: now_ns,
            next_task: 0,
            jobs: HashMap::new(),
            events: Vec::new(),
            fresh: Vec::new(),
            failed: Vec::new(),
            missed: Vec::new(),
            stats: PolicyStats::default(),
            buf: vec![0u8; super::fifo::CHUNK],
            finished_jobs: Vec::new(),
        })
    }

    /// Preemption latencies and relaunches so far.
    pub fn stats(&self) -> &PolicyStats {
        &self.stats
    }

    fn vt(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.epoch)
    }

    /// Runs the model up to `now_ns`, handing every event to the policy.
    fn advance(&mut self, now_ns: u64) {
        let target = self.vt(now_ns);
        loop {
            let t = match self.gpu.next_event_time() {
                Some(t) if t <= target => t,
                _ => break,
            };
            self.gpu.run_until(t);
            self.deliver();
        }
        if target > self.gpu.now() {
            self.gpu.run_until(target);
            self.deliver();
        }
    }

    fn deliver(&mut self) {
        // Taken out and put back so its capacity is kept: no allocation
        // per event on the request path.
        let mut events = std::mem::take(&mut self.events);
        events.extend(self.gpu.drain_events());
        for ev in events.drain(..) {
            if let Event::KernelStarted { t, kernel, .. } = &ev {
                let (task, _) = untag(kernel.tag);
                if let Some(p) = self.jobs.get_mut(&task)
                    && p.started.is_none()
                {
                    p.started = Some(*t);
                }
            }
            let mut cx = Ctx {
                gpu: &mut self.gpu,
                models: &self.models,
                done: &mut self.fresh,
                failed: &mut self.failed,
                missed: &mut self.missed,
                stats: &mut self.stats,
            };
            self.policy.on_event(&mut cx, &ev);
        }
        self.events = events;
    }
}

impl Backend for ModeledBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn submit(&mut self, job: Job, now_ns: u64) {
        self.advance(now_ns);
        let id = self.next_task;
        self.next_task += 1;
        let task = Task {
            id,
            client: job.client,
            priority: job.priority,
            model: job.model,
            arrival: self.gpu.now(),
            deadline: (job.deadline_ns != 0).then(|| self.vt(job.deadline_ns)),
        };
        self.jobs.insert(id, Pending { job, started: None });
        let mut cx = Ctx {
            gpu: &mut self.gpu,
            models: &self.models,
            done: &mut self.fresh,
            failed: &mut self.failed,
            missed: &mut self.missed,
            stats: &mut self.stats,
        };
        arrive(&mut *self.policy, &mut cx, task);
    }

    fn poll(&mut self, now_ns: u64, done: &mut Vec<Finished>) {
        self.finished_jobs.clear();
        self.advance(now_ns);
        // A failed task completes with DEVICE_ERROR when the policy gave up
        // on it, a dropped one with DEADLINE_MISSED, a finished one (however
        // late) with its output.
        let completed = self
            .fresh
            .drain(..)
            .map(|d| (d.task.id, d.finished, status::OK));
        let refused = self
            .failed
            .drain(..)
            .map(|f| (f.task.id, f.at, status::DEVICE_ERROR));
        let missed = self
            .missed
            .drain(..)
            .map(|m| (m.task.id, m.at, status::DEADLINE_MISSED));
        for (id, at, code) in completed.chain(refused).chain(missed) {
            let Some(p) = self.jobs.remove(&id) else {
                continue; // its client went away
            };
            let finished = self.epoch + at;
            let started = p.started.map_or(finished, |s| self.epoch + s);
            let (status, output_len) = if code == status::OK {
                super::fifo::compute_output(&self.models, &mut self.buf, &p.job)
            } else {
                (code, 0)
            };
            done.push(Finished {
                client: p.job.client,
                request_id: p.job.request_id,
                status,
                output_len,
                received_ns: p.job.received_ns,
                started_ns: started,
                finished_ns: finished,
            });
            self.finished_jobs.push(p.job);
        }
    }

    fn next_event_ns(&self) -> Option<u64> {
        if !self.fresh.is_empty() || !self.failed.is_empty() || !self.missed.is_empty() {
            return Some(self.epoch + self.gpu.now());
        }
        self.gpu.next_event_time().map(|t| self.epoch + t)
    }

    fn cancel_client(&mut self, client: u32) -> usize {
        let before = self.jobs.len();
        self.jobs.retain(|_, p| p.job.client != client);
        self.finished_jobs.retain(|j| j.client != client);
        before - self.jobs.len()
    }

    fn release_finished(&mut self) {
        self.finished_jobs.clear();
    }

    fn queued(&self) -> usize {
        self.jobs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shm_proto::Priority;
    use sluice_gpu::DeviceProfile;

    const MS: u64 = 1_000_000;
    /// `CLOCK_MONOTONIC` of the device's virtual 0.
    const EPOCH: u64 = 1_000 * MS;

    fn registry() -> Arc<ModelRegistry> {
        Arc::new(ModelRegistry::builtin())
    }

    fn job(model: &str, client: u32, request_id: u64, received_ns: u64, deadline_ns: u64) -> Job {
        let reg = ModelRegistry::builtin();
        let (model, m) = reg.lookup(model).unwrap();
        let mut j = sluice_backend::testmem::job(
            client,
            request_id,
            model,
            Priority::RealTime,
            (m.input_bytes, m.output_bytes),
            received_ns,
        );
        j.deadline_ns = deadline_ns;
        j
    }

    fn backend(kind: PolicyKind) -> ModeledBackend {
        let mut b = ModeledBackend::new(DeviceProfile::mi50(), kind, registry(), EPOCH).unwrap();
        b.gpu.record_launches(true);
        b
    }

    /// Polls far enough ahead for everything to finish, in virtual time.
    fn drain(b: &mut ModeledBackend) -> Vec<Finished> {
        let mut done = Vec::new();
        while let Some(t) = b.next_event_ns() {
            b.poll(t, &mut done);
        }
        done
    }

    fn launched_tasks(b: &ModeledBackend) -> Vec<TaskId> {
        b.gpu.launched_tags().iter().map(|&t| untag(t).0).collect()
    }

    #[test]
    fn a_request_late_on_arrival_launches_nothing_and_misses_its_deadline() {
        for kind in [
            PolicyKind::Reef,
            PolicyKind::Paella,
            PolicyKind::Streams,
            PolicyKind::Seq,
            PolicyKind::WaitPreempt,
            PolicyKind::Split,
            PolicyKind::Prema,
            PolicyKind::RtA,
        ] {
            let mut b = backend(kind);
            let at = EPOCH + 5 * MS;
            // Task 0: deadline 1 ms before it arrives. Task 1: plenty.
            let late = job("resnet152", 1, 10, at, at - MS);
            let memory = late.memory.clone();
            b.submit(late, at);
            b.submit(job("resnet152", 2, 20, at, at + 10_000 * MS), at);
            let done = drain(&mut b);
            let status = |id| done.iter().find(|f| f.request_id == id).map(|f| f.status);
            assert_eq!(status(10), Some(status::DEADLINE_MISSED), "{kind}");
            assert_eq!(status(20), Some(status::OK), "{kind}");
            let launched = launched_tasks(&b);
            assert!(
                !launched.contains(&0),
                "{kind}: the late request launched a kernel"
            );
            assert!(launched.contains(&1), "{kind}");
            let mut out = vec![1u8; 64];
            let input_bytes = registry().lookup("resnet152").unwrap().1.input_bytes;
            assert!(memory.read(input_bytes, &mut out));
            assert_eq!(out, [0; 64], "{kind}: a missed request writes no output");
            assert_eq!(b.queued(), 0, "{kind}");
        }
    }

    #[test]
    fn a_request_whose_deadline_passes_behind_a_long_one_is_not_started() {
        for kind in [PolicyKind::Reef, PolicyKind::Seq, PolicyKind::WaitPreempt] {
            let mut b = backend(kind);
            let at = EPOCH + MS;
            b.submit(job("resnet152", 1, 10, at, 0), at);
            // Arrives in time, but resnet152 runs for about 14 ms.
            b.submit(job("resnet152", 2, 20, at, at + 2 * MS), at);
            b.submit(job("resnet152", 3, 30, at, at + 10_000 * MS), at);
            let done = drain(&mut b);
            let mut order: Vec<(u64, u32)> =
                done.iter().map(|f| (f.request_id, f.status)).collect();
            order.sort_unstable();
            assert_eq!(
                order,
                [
                    (10, status::OK),
                    (20, status::DEADLINE_MISSED),
                    (30, status::OK)
                ],
                "{kind}"
            );
            assert!(!launched_tasks(&b).contains(&1), "{kind}");
        }
    }

    #[test]
    fn a_request_that_started_returns_its_output_however_late() {
        let mut b = backend(PolicyKind::Seq);
        let at = EPOCH + MS;
        // Starts at once, so it runs, but it cannot finish by its deadline.
        b.submit(job("resnet152", 1, 10, at, at + MS / 10), at);
        let done = drain(&mut b);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].status, status::OK);
        assert!(done[0].finished_ns > at + MS / 10);
    }
}
