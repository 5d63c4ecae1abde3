//! Runs a workload through a policy on the GPU model, in virtual time.
//!
//! Clients issue tasks: real-time clients at uniform or Poisson intervals or
//! from a trace, best-effort clients in a closed loop (the next task as soon
//! as the last one finishes). The driver merges arrivals with the model's
//! events in time order, hands both to the policy, and records every
//! finished task, and every task the policy failed (the device refused it;
//! on the GPU model none). Arrivals stop at `duration_ns`; tasks in flight
//! then may finish for up to [`DRAIN_NS`] more.
//!
//! It also times every policy callback (wall clock, on this machine): the
//! whole callback, and the scheduler's decision cost, which leaves out the
//! GPU model's own dispatch work done inside the policy's launch and
//! preemption calls (on a GPU, hardware and driver work).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use sluice_rng::{Draws, Stream};
use std::time::Instant;

use shm_proto::Priority;

use super::{Ctx, Policy, PolicyStats, Task, TaskDone, TaskFailed, TaskMissed, arrive};
#[cfg(test)]
use sluice_gpu::DeviceProfile;
use sluice_gpu::{Clocked, Event, Ns};
use sluice_model::ModelRegistry;

/// How long after the last arrival the driver lets tasks finish.
pub const DRAIN_NS: Ns = 2_000_000_000;

/// How long after a failed task a closed-loop client issues its next one
/// (not at once, so that a device that refuses everything cannot hold the
/// run at one instant).
pub const RETRY_AFTER_FAILURE_NS: Ns = 1_000;

/// When a client issues its tasks.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrival {
    /// Every `period_ns`, starting at `offset_ns`.
    Uniform {
        /// Interval.
        period_ns: Ns,
        /// First arrival.
        offset_ns: Ns,
    },
    /// Poisson process of `rate_per_s`, seeded.
    Poisson {
        /// Mean arrivals per second.
        rate_per_s: f64,
        /// Seed of the generator.
        seed: u64,
    },
    /// The next task when the previous one finishes (first at 0).
    ClosedLoop,
    /// Arrival times given explicitly (sorted).
    Trace(Vec<Ns>),
    /// One instance of a pool of clients sharing one arrival trace: every
    /// client with the same `pool` is an instance (give them the same
    /// `times`). A time is issued on a free instance (the lowest-numbered
    /// client), or, when all are busy, waits in the pool's FIFO and is
    /// issued on the first instance whose task finishes; an instance has one
    /// task at a time, and a task's latency counts from its own time. This
    /// is the client side of Paella's artifact (`app/client.cpp`: a pool of
    /// job instances per model; a job with none free waits, stamped with
    /// its arrival time).
    Pool {
        /// Which pool.
        pool: u32,
        /// Its arrival times (sorted), the same for every instance.
        times: Arc<[Ns]>,
    },
}

/// One client of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSpec {
    /// Real-time or best-effort.
    pub priority: Priority,
    /// Model id in the registry.
    pub model: u32,
    /// Arrival process.
    pub arrival: Arrival,
}

/// A workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Clients.
    pub clients: Vec<ClientSpec>,
    /// Arrivals stop after this much virtual time.
    pub duration_ns: Ns,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Every finished task.
    pub done: Vec<TaskDone>,
    /// Every task the policy failed ([`Ctx::fail`]), times relative to the
    /// start like `done`'s; not in `done`. A closed-loop client issues its
    /// next task [`RETRY_AFTER_FAILURE_NS`] after a failure.
    pub failed: Vec<TaskFailed>,
    /// Tasks dropped unstarted because their deadline had passed
    /// ([`Ctx::drop_if_late`]), times relative to the start; none for a
    /// [`Workload`], whose tasks have no deadline (see [`run_tasks`]).
    pub missed: Vec<TaskMissed>,
    /// Tasks that arrived and had neither finished, failed nor been
    /// dropped when the run stopped.
    pub unfinished: u64,
    /// The policy's statistics (preemption latencies, relaunches).
    pub stats: PolicyStats,
    /// Virtual time at the end.
    pub end_ns: Ns,
    /// Fraction of CU-time busy over the run (0 on a device that does not
    /// report it).
    pub utilisation: f64,
    /// Wall-clock cost of each policy callback's decision, ns: the
    /// callback's time less the GPU model's dispatch work it caused.
    pub decision_ns: hdrhistogram::Histogram<u64>,
    /// Wall-clock ns of each policy callback, whole: the decision plus the
    /// GPU model's dispatch work inside the policy's launch and preemption
    /// calls ([`GpuSim::model_work_ns`]), which `decision_ns` leaves out.
    pub callback_ns: hdrhistogram::Histogram<u64>,
}

struct ClientState {
    spec: ClientSpec,
    rng: Stream,
    trace_pos: usize,
    /// Index of its pool in `run_on`'s pools, for [`Arrival::Pool`].
    pool: Option<u32>,
    /// The arrival time of the pool task this instance issues next.
    pool_at: Option<Ns>,
}

/// Heap tag of a pool's arrival (`POOL | pool index`), apart from client ids.
const POOL: u32 = 1 << 31;

/// The shared side of an [`Arrival::Pool`].
struct PoolState {
    id: u32,
    times: Arc<[Ns]>,
    /// Index of the next time to arrive.
    next: usize,
    /// Times that arrived with every instance busy, oldest first.
    waiting: VecDeque<Ns>,
    /// Free instances, the lowest-numbered last.
    free: Vec<u32>,
}

impl PoolState {
    /// Instance `member`'s task ended at `t`: it takes the oldest waiting
    /// time, issued at `t`, or becomes free.
    fn instance_free(
        &mut self,
        member: u32,
        t: Ns,
        c: &mut ClientState,
        arrivals: &mut BinaryHeap<Reverse<(Ns, u32)>>,
    ) {
        match self.waiting.pop_front() {
            Some(at) => {
                c.pool_at = Some(at);
                arrivals.push(Reverse((t, member)));
            }
            None => {
                let i = self.free.partition_point(|&m| m > member);
                self.free.insert(i, member);
            }
        }
    }
}

impl ClientState {
    /// Client `index` of a workload: a Poisson client draws from its own
    /// seed, every other one from its index.
    fn new(index: usize, spec: &ClientSpec) -> Self {
        Self {
            spec: spec.clone(),
            rng: match spec.arrival {
                Arrival::Poisson { seed, .. } => Stream::new(seed),
                _ => Stream::new(index as u64),
            },
            trace_pos: 0,
            pool: None,
            pool_at: None,
        }
    }

    /// The arrival after one at `t` (None: no more).
    fn next_after(&mut self, t: Ns, first: bool) -> Option<Ns> {
        match &self.spec.arrival {
            Arrival::Uniform {
                period_ns,
                offset_ns,
            } => Some(if first {
                *offset_ns
            } else {
                t + (*period_ns).max(1)
            }),
            Arrival::Poisson { rate_per_s, .. } => {
                let u = self.rng.unit();
                let gap = -(1.0 - u).ln() / rate_per_s.max(1e-9) * 1e9;
                Some(if first { 0 } else { t } + gap as Ns)
            }
            Arrival::ClosedLoop => first.then_some(0),
            // A pool issues its instances' tasks (see `run_on`).
            Arrival::Pool { .. } => None,
            Arrival::Trace(times) => {
                let v = times.get(self.trace_pos).copied();
                self.trace_pos += 1;
                v
            }
        }
    }
}

/// The open-loop arrival times of client `index` of a workload, in order
/// and relative to the run's start, drawn exactly as [`run_on`] draws
/// them (the same seeded streams): for drivers that run a workload on
/// another device, such as a daemon backend in real time. A closed-loop
/// client yields only its first arrival (0): its next one is its previous
/// task's end, which the driver knows. Pools are not drawn here (`None`
/// at once).
pub struct ArrivalTimes {
    state: ClientState,
    last: Option<Ns>,
}

impl std::fmt::Debug for ArrivalTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrivalTimes")
            .field("arrival", &self.state.spec.arrival)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl ArrivalTimes {
    /// The arrivals of client `index`, whose spec is `spec`.
    pub fn new(index: usize, spec: &ClientSpec) -> Self {
        Self {
            state: ClientState::new(index, spec),
            last: None,
        }
    }
}

impl Iterator for ArrivalTimes {
    type Item = Ns;

    fn next(&mut self) -> Option<Ns> {
        let t = match self.last {
            None => self.state.next_after(0, true),
            Some(t) => self.state.next_after(t, false),
        }?;
        self.last = Some(t);
        Some(t)
    }
}

/// Runs `workload` through `policy` on a fresh GPU model of `profile`
/// (the tests' shorthand; callers outside use [`run_on`] with a
/// `sluice_gpusim::GpuSim`).
#[cfg(test)]
pub(crate) fn run(
    profile: &DeviceProfile,
    models: &Arc<ModelRegistry>,
    policy: &mut dyn Policy,
    workload: &Workload,
) -> RunResult {
    run_on(
        &mut sluice_gpusim::GpuSim::new(profile.clone()),
        models,
        policy,
        workload,
    )
}

/// Runs `workload` through `policy` on `gpu`, from the device's current
/// time; the result's times are relative to that start.
pub fn run_on(
    gpu: &mut dyn Clocked,
    models: &Arc<ModelRegistry>,
    policy: &mut dyn Policy,
    workload: &Workload,
) -> RunResult {
    let t0 = gpu.now();
    let mut clients: Vec<ClientState> = workload
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| ClientState::new(i, c))
        .collect();
    // Arrival times are relative to the start; the device's are absolute.
    let mut arrivals: BinaryHeap<Reverse<(Ns, u32)>> = BinaryHeap::new();
    for (i, c) in clients.iter_mut().enumerate() {
        if let Some(t) = c.next_after(0, true)
            && t < workload.duration_ns
        {
            arrivals.push(Reverse((t, i as u32)));
        }
    }
    // Pools: their arrivals enter the heap as `POOL | index`.
    let mut pools: Vec<PoolState> = Vec::new();
    for (i, c) in workload.clients.iter().enumerate() {
        if let Arrival::Pool { pool, times } = &c.arrival {
            let k = match pools.iter().position(|p| p.id == *pool) {
                Some(k) => k,
                None => {
                    pools.push(PoolState {
                        id: *pool,
                        times: times.clone(),
                        next: 0,
                        waiting: VecDeque::new(),
                        free: Vec::new(),
                    });
                    pools.len() - 1
                }
            };
            pools[k].free.push(i as u32);
            clients[i].pool = Some(k as u32);
        }
    }
    for (k, p) in pools.iter_mut().enumerate() {
        // Lowest-numbered instance first: popped from the back.
        p.free.sort_unstable_by(|a, b| b.cmp(a));
        if let Some(&t) = p.times.first()
            && t < workload.duration_ns
        {
            arrivals.push(Reverse((t, POOL | k as u32)));
        }
    }
    let mut done = Vec::new();
    let mut fresh = Vec::new();
    let mut failed = Vec::new();
    let mut fresh_failed = Vec::new();
    let mut missed = Vec::new();
    let mut stats = PolicyStats::default();
    let mut decision = sluice_stats::histogram();
    let mut callback = sluice_stats::histogram();
    gpu.time_model_work();
    let mut events: Vec<Event> = Vec::new();
    let mut next_id = 0u64;
    let mut arrived = 0u64;
    let stop = workload.duration_ns.saturating_add(DRAIN_NS);
    loop {
        let t_arr = arrivals.peek().map(|Reverse((t, _))| t0 + *t);
        let Some(t_abs) = gpu.advance(t_arr.map(|a| a.min(t0 + stop)), &mut events) else {
            break;
        };
        let t = t_abs.saturating_sub(t0);
        if t > stop {
            break;
        }
        // Times one policy callback: the scheduler's decision cost.
        let mut decide =
            |gpu: &mut dyn Clocked,
             fresh: &mut Vec<TaskDone>,
             f: &mut dyn FnMut(&mut dyn Policy, &mut Ctx<'_>)| {
                let mut cx = Ctx {
                    gpu,
                    models,
                    done: fresh,
                    failed: &mut fresh_failed,
                    missed: &mut missed,
                    stats: &mut stats,
                };
                let m0 = cx.gpu.model_work_ns();
                let t0 = Instant::now();
                f(&mut *policy, &mut cx);
                let total = t0.elapsed().as_nanos() as u64;
                let model = cx.gpu.model_work_ns() - m0;
                callback.saturating_record(total);
                decision.saturating_record(total.saturating_sub(model));
            };
        for ev in events.drain(..) {
            decide(&mut *gpu, &mut fresh, &mut |p, cx| p.on_event(cx, &ev));
        }
        while let Some(&Reverse((ta, ci))) = arrivals.peek() {
            if ta > t {
                break;
            }
            arrivals.pop();
            if ci & POOL != 0 {
                // A pool's arrival: to a free instance now, else it waits.
                let p = &mut pools[(ci & !POOL) as usize];
                p.waiting.push_back(p.times[p.next]);
                p.next += 1;
                if let Some(&tn) = p.times.get(p.next)
                    && tn < workload.duration_ns
                {
                    arrivals.push(Reverse((tn, ci)));
                }
                if let Some(member) = p.free.pop() {
                    let at = p.waiting.pop_front().expect("just queued");
                    clients[member as usize].pool_at = Some(at);
                    arrivals.push(Reverse((ta, member)));
                }
                continue;
            }
            let c = &mut clients[ci as usize];
            // A pool instance's task keeps its own arrival time, and the
            // pool, not the client, issues the next one.
            let pooled = c.pool_at.take();
            let task = Task {
                id: next_id,
                client: ci,
                priority: c.spec.priority,
                model: c.spec.model,
                arrival: t0 + pooled.unwrap_or(ta),
                deadline: None,
            };
            next_id += 1;
            arrived += 1;
            if pooled.is_none()
                && let Some(tn) = c.next_after(ta, false)
                && tn < workload.duration_ns
            {
                arrivals.push(Reverse((tn, ci)));
            }
            decide(&mut *gpu, &mut fresh, &mut |p, cx| arrive(p, cx, task));
        }
        for mut d in fresh.drain(..) {
            d.task.arrival -= t0;
            d.finished = d.finished.saturating_sub(t0);
            let c = &mut clients[d.task.client as usize];
            if c.spec.arrival == Arrival::ClosedLoop && d.finished < workload.duration_ns {
                arrivals.push(Reverse((d.finished, d.task.client)));
            }
            if let Some(k) = c.pool {
                pools[k as usize].instance_free(d.task.client, d.finished, c, &mut arrivals);
            }
            done.push(d);
        }
        for mut f in fresh_failed.drain(..) {
            f.task.arrival -= t0;
            f.at = f.at.saturating_sub(t0);
            let c = &mut clients[f.task.client as usize];
            let next = f.at.saturating_add(RETRY_AFTER_FAILURE_NS);
            if c.spec.arrival == Arrival::ClosedLoop && next < workload.duration_ns {
                arrivals.push(Reverse((next, f.task.client)));
            }
            if let Some(k) = c.pool {
                pools[k as usize].instance_free(f.task.client, f.at, c, &mut arrivals);
            }
            failed.push(f);
        }
    }
    for m in &mut missed {
        m.task.arrival -= t0;
        m.at = m.at.saturating_sub(t0);
    }
    RunResult {
        unfinished: arrived - done.len() as u64 - failed.len() as u64 - missed.len() as u64,
        done,
        failed,
        missed,
        stats,
        end_ns: gpu.now() - t0,
        utilisation: gpu.utilisation().unwrap_or(0.0),
        decision_ns: decision,
        callback_ns: callback,
    }
}

/// What [`run_tasks`] produced, times on the device's clock.
#[derive(Debug, Clone, Default)]
pub struct TaskRun {
    /// Finished tasks, in completion order.
    pub done: Vec<TaskDone>,
    /// Tasks the policy failed.
    pub failed: Vec<TaskFailed>,
    /// Tasks dropped unstarted for a passed deadline.
    pub missed: Vec<TaskMissed>,
    /// Every event the device reported, in order (kernel starts included:
    /// which task's kernels ran, and when).
    pub events: Vec<Event>,
}

/// Runs explicit `tasks` through `policy` on `gpu`, each arriving at its
/// own `arrival` (device clock, sorted) with its own deadline, until the
/// device is idle. For tests of deadline handling, which a [`Workload`]
/// (no deadlines) cannot express.
pub fn run_tasks(
    gpu: &mut dyn Clocked,
    models: &ModelRegistry,
    policy: &mut dyn Policy,
    tasks: &[Task],
) -> TaskRun {
    let mut r = TaskRun::default();
    let mut stats = PolicyStats::default();
    let mut events = Vec::new();
    let mut next = 0;
    loop {
        let until = tasks.get(next).map(|t| t.arrival);
        let Some(now) = gpu.advance(until, &mut events) else {
            break;
        };
        let mut cx = Ctx {
            gpu: &mut *gpu,
            models,
            done: &mut r.done,
            failed: &mut r.failed,
            missed: &mut r.missed,
            stats: &mut stats,
        };
        for ev in events.drain(..) {
            policy.on_event(&mut cx, &ev);
            r.events.push(ev);
        }
        while let Some(&t) = tasks.get(next).filter(|t| t.arrival <= now) {
            next += 1;
            arrive(policy, &mut cx, t);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PolicyKind, make_policy, untag};
    use sluice_gpu::{DeviceProfile, Gpu, GpuError, HostReset, KernelLaunch, KernelRef, StreamId};
    use sluice_gpusim::GpuSim;

    /// The GPU model, with device failures injected: the first
    /// `fail_streams` stream creations fail, and so does every launch of
    /// kernel `fail_kernel` of a task whose id is a multiple of
    /// `fail_every`.
    struct Flaky {
        sim: GpuSim,
        fail_streams: u32,
        fail_every: u64,
        fail_kernel: usize,
    }

    fn injected(op: &'static str) -> GpuError {
        GpuError::Driver {
            backend: "flaky",
            op,
            message: "injected failure".into(),
        }
    }

    impl Gpu for Flaky {
        fn profile(&self) -> &DeviceProfile {
            Gpu::profile(&self.sim)
        }
        fn now(&self) -> Ns {
            Gpu::now(&self.sim)
        }
        fn create_stream(&mut self, priority: i32) -> Result<StreamId, GpuError> {
            if self.fail_streams > 0 {
                self.fail_streams -= 1;
                return Err(injected("create stream"));
            }
            Gpu::create_stream(&mut self.sim, priority)
        }
        fn set_dq_capacity(&mut self, s: StreamId, c: u32) -> Result<(), GpuError> {
            Gpu::set_dq_capacity(&mut self.sim, s, c)
        }
        fn set_packed_placement(&mut self, s: StreamId, p: bool) -> Result<(), GpuError> {
            Gpu::set_packed_placement(&mut self.sim, s, p)
        }
        fn launch(&mut self, s: StreamId, k: KernelLaunch) -> Result<KernelRef, GpuError> {
            let (task, kernel) = untag(k.tag);
            if task % self.fail_every == 0 && kernel == self.fail_kernel {
                return Err(injected("launch"));
            }
            Gpu::launch(&mut self.sim, s, k)
        }
        fn launch_padded(
            &mut self,
            s: StreamId,
            k: KernelLaunch,
            host: StreamId,
            with: KernelRef,
        ) -> Result<KernelRef, GpuError> {
            let (task, kernel) = untag(k.tag);
            if task % self.fail_every == 0 && kernel == self.fail_kernel {
                return Err(injected("padded launch"));
            }
            Gpu::launch_padded(&mut self.sim, s, k, host, with)
        }
        fn preempt_reset(&mut self, s: StreamId) -> Result<HostReset, GpuError> {
            Gpu::preempt_reset(&mut self.sim, s)
        }
        fn wait_based_preempt(&mut self, s: StreamId) -> Result<(), GpuError> {
            Gpu::wait_based_preempt(&mut self.sim, s)
        }
        fn resume(&mut self, s: StreamId) -> Result<(), GpuError> {
            Gpu::resume(&mut self.sim, s)
        }
    }

    impl Clocked for Flaky {
        fn advance(&mut self, until: Option<Ns>, out: &mut Vec<Event>) -> Option<Ns> {
            Clocked::advance(&mut self.sim, until, out)
        }
        fn utilisation(&self) -> Option<f64> {
            Clocked::utilisation(&self.sim)
        }
    }

    #[test]
    fn every_policy_fails_the_tasks_the_device_refuses_and_serves_the_rest() {
        let models = Arc::new(ModelRegistry::builtin());
        let id = |n| models.lookup(n).unwrap().0;
        let w = Workload {
            clients: vec![
                ClientSpec {
                    priority: Priority::RealTime,
                    model: id("resnet152"),
                    arrival: Arrival::Uniform {
                        period_ns: 10_000_000,
                        offset_ns: 500_000,
                    },
                },
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: id("vgg19"),
                    arrival: Arrival::ClosedLoop,
                },
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: id("bert_base"),
                    arrival: Arrival::ClosedLoop,
                },
            ],
            duration_ns: 100_000_000,
        };
        for kind in PolicyKind::ALL {
            let mut gpu = Flaky {
                sim: GpuSim::new(DeviceProfile::mi50()),
                fail_streams: 1,
                fail_every: 4,
                fail_kernel: 3,
            };
            let mut p = make_policy(kind, &models);
            let r = run_on(&mut gpu, &models, p.as_mut(), &w);
            // The first task to need a stream found none; after it, every
            // fourth task's fourth kernel was refused, and nothing else.
            let op = |f: &TaskFailed| match f.error {
                GpuError::Driver { op, .. } => op,
                _ => "other",
            };
            assert_eq!(op(&r.failed[0]), "create stream", "{kind}");
            for f in &r.failed[1..] {
                assert!(
                    op(f).ends_with("launch") && f.task.id % 4 == 0,
                    "{kind}: {f:?}"
                );
            }
            assert!(r.failed.len() >= 3, "{kind}: {:?}", r.failed);
            assert!(r.done.iter().all(|d| d.task.id % 4 != 0), "{kind}");
            assert_eq!(r.failed.len() + r.done.len() + r.unfinished as usize, {
                let mut ids: Vec<u64> = r.done.iter().map(|d| d.task.id).collect();
                ids.extend(r.failed.iter().map(|f| f.task.id));
                ids.sort_unstable();
                ids.dedup();
                ids.len() + r.unfinished as usize
            });
            // The others ran: real-time tasks, and (but under rt-only) the
            // closed-loop best-effort clients kept issuing after failures.
            let rt = r
                .done
                .iter()
                .filter(|d| d.task.priority == Priority::RealTime);
            assert!(rt.count() >= 5, "{kind}: {:?}", r.done);
            if kind != PolicyKind::RtOnly {
                for c in [1, 2] {
                    assert!(r.done.iter().any(|d| d.task.client == c), "{kind}: {c}");
                }
            }
        }
    }

    #[test]
    fn poisson_gaps_have_the_right_mean() {
        let mut c = ClientState {
            spec: ClientSpec {
                priority: Priority::RealTime,
                model: 0,
                arrival: Arrival::Poisson {
                    rate_per_s: 1000.0,
                    seed: 7,
                },
            },
            rng: Stream::new(7),
            trace_pos: 0,
            pool: None,
            pool_at: None,
        };
        let mut t = c.next_after(0, true).unwrap();
        let n = 20_000;
        let start = t;
        for _ in 0..n {
            t = c.next_after(t, false).unwrap();
        }
        let mean_ms = (t - start) as f64 / n as f64 / 1e6;
        assert!((mean_ms - 1.0).abs() < 0.05, "mean gap {mean_ms} ms");
    }

    #[test]
    fn a_pool_runs_one_task_per_instance_and_keeps_each_arrival_time() {
        let models = Arc::new(ModelRegistry::builtin());
        let id = models.lookup("resnet18").expect("resnet18").0;
        let profile = DeviceProfile::mi50();
        // Four arrivals 100 µs apart, each task far longer than that.
        let times: Arc<[Ns]> = vec![0, 100_000, 200_000, 300_000].into();
        let pool = |instances: u32| Workload {
            clients: (0..instances)
                .map(|_| ClientSpec {
                    priority: Priority::BestEffort,
                    model: id,
                    arrival: Arrival::Pool {
                        pool: 3,
                        times: times.clone(),
                    },
                })
                .collect(),
            duration_ns: 1_000_000,
        };
        for kind in [PolicyKind::Paella, PolicyKind::Streams] {
            let mut ends = Vec::new();
            for instances in [1, 2, 4] {
                let mut p = make_policy(kind, &models);
                let r = run(&profile, &models, p.as_mut(), &pool(instances));
                let mut done = r.done.clone();
                done.sort_by_key(|d| d.task.arrival);
                let arrivals: Vec<Ns> = done.iter().map(|d| d.task.arrival).collect();
                assert_eq!(arrivals[..], times[..], "{kind:?} x{instances}: own times");
                // Instances in use: the lowest-numbered, one task each at a time.
                let mut clients: Vec<u32> = done.iter().map(|d| d.task.client).collect();
                clients.sort_unstable();
                clients.dedup();
                assert_eq!(clients, (0..instances).collect::<Vec<_>>(), "{kind:?}");
                for c in 0..instances {
                    let mine: Vec<&TaskDone> = done.iter().filter(|d| d.task.client == c).collect();
                    for w in mine.windows(2) {
                        // The next one was issued only when this one ended.
                        assert!(w[1].finished > w[0].finished + 1_000_000, "{kind:?}: {w:?}");
                    }
                }
                ends.push(done.iter().map(|d| d.finished).max().unwrap_or(0));
            }
            // More instances, more side by side: the last ends sooner.
            assert!(ends[0] > ends[1] && ends[1] > ends[2], "{kind:?}: {ends:?}");
        }
    }
}

#[cfg(test)]
mod arrival_times {
    use super::*;
    use crate::{PolicyKind, make_policy};

    /// A model id of the built-in registry.
    fn model(models: &ModelRegistry, name: &str) -> u32 {
        models.lookup(name).expect("a built-in model").0
    }

    /// Every task `run_on` issued for `client`, by arrival time.
    fn arrivals_of(r: &RunResult, client: u32) -> Vec<Ns> {
        let mut v: Vec<Ns> = r
            .done
            .iter()
            .filter(|d| d.task.client == client)
            .map(|d| d.task.arrival)
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn arrival_times_are_the_ones_run_on_issues() {
        let models = Arc::new(ModelRegistry::builtin());
        let m = model(&models, "resnet152");
        let workload = Workload {
            clients: vec![
                ClientSpec {
                    priority: Priority::RealTime,
                    model: m,
                    arrival: Arrival::Uniform {
                        period_ns: 7_000_000,
                        offset_ns: 1_500_000,
                    },
                },
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: m,
                    arrival: Arrival::Poisson {
                        rate_per_s: 90.0,
                        seed: 11,
                    },
                },
            ],
            duration_ns: 200_000_000,
        };
        let profile = DeviceProfile::builtin("mi50").expect("built-in profile");
        let mut policy = make_policy(PolicyKind::Seq, &models);
        let r = run(&profile, &models, policy.as_mut(), &workload);
        assert_eq!(r.unfinished, 0, "every task finishes in the drain");
        for (i, c) in workload.clients.iter().enumerate() {
            let drawn: Vec<Ns> = ArrivalTimes::new(i, c)
                .take_while(|&t| t < workload.duration_ns)
                .collect();
            assert!(drawn.len() > 10, "client {i} drew {} arrivals", drawn.len());
            assert_eq!(drawn, arrivals_of(&r, i as u32), "client {i}");
        }
    }

    #[test]
    fn a_closed_loop_client_yields_only_its_first_arrival() {
        let spec = ClientSpec {
            priority: Priority::BestEffort,
            model: 0,
            arrival: Arrival::ClosedLoop,
        };
        assert_eq!(ArrivalTimes::new(0, &spec).collect::<Vec<_>>(), vec![0]);
    }
}
