//! Where the planner runs: on the dispatcher thread itself (`Inline`: the
//! benchmarks and the unit tests, whose virtual time must not depend on
//! another thread's speed), or on a planner thread of its own (`Thread`:
//! the daemon), so that a slow planner never holds up requests. The
//! dispatcher hands the thread one job at a time through a channel and
//! picks the placement up on a later poll; meanwhile the placement in
//! force keeps serving.

use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;
use std::time::Instant;

use sluice_planner::{GpuSpec, ModelSpec, Placement, PlanError, Planner, plan_with_scaling};

/// One planner run's inputs.
pub(super) struct PlanJob {
    pub(super) specs: Vec<ModelSpec>,
    pub(super) gpus: GpuSpec,
    /// gpulet's GPU scaling (Algorithm 2): `(previous count, limit)`;
    /// `None` plans on `gpus.count` GPUs.
    pub(super) scaling: Option<(u32, u32)>,
}

/// One planner run's result, with its inputs and its wall time.
pub(super) struct PlanDone {
    pub(super) job: PlanJob,
    pub(super) result: Result<Placement, PlanError>,
    pub(super) plan_ns: u64,
}

fn run(planner: &dyn Planner, job: PlanJob) -> PlanDone {
    let t0 = Instant::now();
    let result = match job.scaling {
        Some((prev, limit)) => {
            plan_with_scaling(planner, &job.specs, &job.gpus, prev, limit).map(|(p, _)| p)
        }
        None => planner.plan(&job.specs, &job.gpus),
    };
    PlanDone {
        job,
        result,
        plan_ns: t0.elapsed().as_nanos() as u64,
    }
}

/// The planner and where it runs.
pub(super) enum PlanRunner {
    /// On the caller's thread.
    Inline(Box<dyn Planner + Send>),
    /// On a thread of its own.
    Thread {
        name: &'static str,
        worker: Worker,
        rx: Receiver<PlanDone>,
        in_flight: bool,
    },
}

/// The planner thread's end of things: closing `tx` ends its loop, and
/// dropping this joins it. Its one result fits the result channel's
/// buffer, so it never blocks on a receiver that has gone.
pub(super) struct Worker {
    tx: Option<SyncSender<PlanJob>>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl PlanRunner {
    /// Moves `planner` to a thread of its own.
    pub(super) fn thread(planner: Box<dyn Planner + Send>) -> std::io::Result<Self> {
        let name = planner.name();
        let (tx, jobs) = sync_channel::<PlanJob>(1);
        let (done, rx) = sync_channel::<PlanDone>(1);
        let handle = std::thread::Builder::new()
            .name("sluice-planner".into())
            .spawn(move || {
                while let Ok(job) = jobs.recv() {
                    if done.send(run(planner.as_ref(), job)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(PlanRunner::Thread {
            name,
            worker: Worker {
                tx: Some(tx),
                handle: Some(handle),
            },
            rx,
            in_flight: false,
        })
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            PlanRunner::Inline(p) => p.name(),
            PlanRunner::Thread { name, .. } => name,
        }
    }

    /// Whether a job is with the planner thread.
    pub(super) fn busy(&self) -> bool {
        matches!(
            self,
            PlanRunner::Thread {
                in_flight: true,
                ..
            }
        )
    }

    /// Plans `job`: inline, the result at once; on the thread, `None` now
    /// and the result from a later [`PlanRunner::poll`]. A job given while
    /// one is in flight is dropped (the caller asks again later).
    pub(super) fn submit(&mut self, job: PlanJob) -> Option<PlanDone> {
        match self {
            PlanRunner::Inline(p) => Some(run(p.as_ref(), job)),
            PlanRunner::Thread {
                worker, in_flight, ..
            } => {
                if *in_flight {
                    return None;
                }
                if let Some(tx) = &worker.tx
                    && tx.try_send(job).is_ok()
                {
                    *in_flight = true;
                }
                None
            }
        }
    }

    /// The result of the job in flight, if it is ready.
    pub(super) fn poll(&mut self) -> Option<PlanDone> {
        let PlanRunner::Thread { rx, in_flight, .. } = self else {
            return None;
        };
        if !*in_flight {
            return None;
        }
        match rx.try_recv() {
            Ok(done) => {
                *in_flight = false;
                Some(done)
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                // The thread is gone (a planner panicked); the placement in
                // force keeps serving and no further plan is asked for.
                *in_flight = false;
                None
            }
        }
    }
}
