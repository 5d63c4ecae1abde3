//! Several simulated GPUs serving models at request rates (gpulet's setting):
//! a rate monitor per model, batching of requests from different clients,
//! spatial partitions of each GPU, and a planner (`sluice-planner`) whose
//! placement says which partition serves which model at which batch size.
//! The daemon re-plans on a period or when a rate moves, and applies a new
//! placement in place with shadow partitions.
//!
//! # The request path
//!
//! The dispatcher hands every validated request to [`ClusterBackend`], which
//! queues it on its model's queue (real-time requests ahead of best-effort
//! ones) and counts it in the model's [`rate::RateMonitor`]. A partition
//! serving the model *pulls* from that queue whenever it has no batch of
//! the model running: it takes `n` requests, the largest listed batch size
//! with `n ≤ queued` and `n ≤ b_max`, where `b_max` is gpulet's adaptive
//! batch (§2.1): the largest listed `b` with `b / rate + L(b, p) ≤ SLO`,
//! `rate` the model's observed rate over the partitions serving it and
//! `L(b, p)` the model's profiled latency at batch `b` on the partition's
//! size. When more are queued than `b_max` allows (a burst, or a model
//! waiting its turn in a shared partition), the batch takes as many more as
//! the oldest queued request can still wait for: the largest listed `n ≤
//! queued` with `now + L(n, p) ≤` its arrival plus the SLO, so a backlog is
//! served in one batch instead of one `b_max` per turn. A batch never waits
//! to fill: at low load it is one request, under load the queue that builds
//! while a batch runs is the next batch. The
//! batch runs as one task of the partition's policy on the model's
//! batch-`n` kernels (grids scaled by [`sluice_model::Model::batch_scaled`]);
//! when it finishes each request's output is written to its own client.
//! A request that can no longer meet its deadline completes with
//! `DEADLINE_MISSED` without running: each request is checked when a batch
//! is formed, and one that would finish after its deadline in the batch
//! being formed (`now + L(n, p) >` deadline, `n` the batch the queue and the
//! limits above give; Nexus's early drop) gives its place to the requests
//! behind it. Under overload that keeps the batches full of requests that
//! still make it, where running the oldest late would make every request
//! behind them late too (goodput collapses). A batch, once formed, has no
//! deadline of its own (its
//! partition's policy runs it; it never drops it). A request that went into
//! a batch runs to its end, and one that finishes later than its model's
//! SLO completes normally and is counted as an SLO violation. The model's
//! queues are FIFO per class (a batch takes the oldest requests).
//!
//! # Placement and re-placement
//!
//! In the daemon the planner runs on a thread of its own
//! ([`ClusterBackend::with_planner_thread`]) and the dispatcher applies its
//! placement on a later poll; benchmarks and tests plan inline, in virtual
//! time. A placement comes from the planner for the observed rates times
//! `cluster.headroom` (a model with queued requests but no observed rate is
//! planned at one request per window). Applying it is a *shadow switch*:
//! every partition of the new placement is built at once (its own policy
//! instance, its streams confined to its CUs), every old partition stops
//! taking batches and drains, and goes away when its last batch finishes.
//! Queued requests stay on their model's queue throughout, so nothing is
//! dropped, duplicated or stalled; for a while old and new partitions
//! overlap on some CUs and share them. A partition identical to one in
//! force (same GPU, CUs and models) is kept as it is. When the planner finds no placement (rates beyond the GPUs, an
//! SLO no partition meets) the daemon falls back to every GPU whole,
//! serving every model, says why in the log and in `sluice status`, and
//! keeps serving: no request is ever left without a partition.
//!
//! # Execution: the GPU model, or batch times given
//!
//! In the daemon ([`Execution::GpuModel`]) a batch runs its kernels on the
//! GPU model, inside its partition's policy, and partitions of one GPU
//! interfere as the model makes them. Benchmarks of tens of GPUs over
//! minutes ([`Execution::Timed`], `sluice bench cluster`, `trace`, `inss`)
//! would take hours that way, so there a batch is one event whose length
//! a [`BatchTimes`] gives for each slot of a placement (from the latency
//! tables, interference included). Everything else is the code above: the
//! queues, the rate monitors, the adaptive batch, the deadline checks, the
//! plans and the shadow switches. With batch times a partition runs one
//! batch at a time and visits its models round robin (gpulet's temporal
//! sharing inside a partition), and the adaptive batch reads the slot's
//! own times; a draining partition's last batches and the new partitions'
//! first overlap without slowing each other.

mod part;
mod planning;
mod rate;
pub mod setup;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use shm_proto::{Priority, status};
use sluice_backend::{
    Backend, Finished, GpuLayout, Job, Layout, ModelLoad, PartitionLayout, PlanRecord, RECENT_PLANS,
};
use sluice_gpu::{DeviceProfile, Event};
use sluice_model::ModelRegistry;
use sluice_planner::{GpuSpec, LatencyTable, ModelSpec, PartitionSizes, Placement, Planner};
use sluice_sched::{
    Ctx, Policy, PolicyKind, PolicyStats, Task, TaskDone, TaskFailed, TaskId, TaskMissed, untag,
};

use part::{GpuState, NO_OWNER, PartGpu};
use planning::{PlanDone, PlanJob, PlanRunner};
use rate::RateMonitor;

/// What the cluster serves, with its profiles: everything but the planner.
#[derive(Debug, Clone)]
pub struct ClusterSetup {
    /// One device profile per GPU; all alike (the planners assume identical
    /// GPUs).
    pub gpus: Vec<DeviceProfile>,
    /// Memory of one GPU, MB.
    pub gpu_mem_mb: u64,
    /// The policy inside every partition.
    pub policy: PolicyKind,
    /// The models, by registry id.
    pub models: Vec<ServedModel>,
    /// Partition sizes are multiples of this many percent.
    pub partition_step_pct: u32,
    /// When set, partition sizes are only these (`cluster.partition_sizes`).
    pub sizes_pct: Option<PartitionSizes>,
    /// Plan with gpulet's GPU scaling (Algorithm 2,
    /// [`sluice_planner::plan_with_scaling`]): from the last plan's GPU
    /// count up to every GPU, the first count that suffices.
    pub scaling: bool,
    /// Re-plan period, ns (0: only when a rate moves).
    pub replan_ns: u64,
    /// Rate monitor window, ns.
    pub rate_window_ns: u64,
    /// Re-plan when a rate leaves `planned × (1 ± rate_change)`.
    pub rate_change: f64,
    /// Plan for `observed × headroom`.
    pub headroom: f64,
    /// How plans cover Poisson bursts (`cluster.burst_overflow`).
    pub burst: sluice_planner::Burst,
    /// How a batch executes (module docs).
    pub execution: Execution,
}

/// How the cluster's batches execute (module docs).
#[derive(Clone, Default)]
pub enum Execution {
    /// On the GPU model, kernel by kernel, in the partition's policy (the
    /// daemon).
    #[default]
    GpuModel,
    /// As one event each, of the length these give.
    Timed(Arc<dyn BatchTimes>),
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Execution::GpuModel => f.write_str("GpuModel"),
            Execution::Timed(_) => f.write_str("Timed"),
        }
    }
}

/// Batch lengths for [`Execution::Timed`].
pub trait BatchTimes: Send + Sync {
    /// The time, ns, a batch of `n` takes for `n` from 1 to the vector's
    /// length (at least 1), for the model in slot `slot` of partition
    /// `part` of GPU `gpu` as `placement` places them (partitions of a GPU
    /// and the models of a partition in the placement's order). Batches
    /// longer than the vector are not formed.
    fn slot_ns(&self, placement: &Placement, gpu: usize, part: usize, slot: usize) -> Vec<u64>;
}

/// One model the cluster serves.
#[derive(Debug, Clone)]
pub struct ServedModel {
    /// Its id in the registry clients see.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Latency objective, ms.
    pub slo_ms: f64,
    /// GPU memory one copy takes, MB.
    pub mem_mb: u64,
    /// Profiled `L(b, p)` on one GPU of the cluster.
    pub table: LatencyTable,
}

/// Why the cluster backend could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No GPUs.
    #[error("the cluster has no GPUs; list at least one in cluster.gpus")]
    NoGpus,
    /// GPUs of different profiles.
    #[error(
        "cluster.gpus mixes device profiles ({first:?} and {other:?}); the planners assume identical GPUs, so list one profile"
    )]
    Mixed {
        /// The first GPU's profile.
        first: String,
        /// A different one.
        other: String,
    },
    /// A model id not in the registry, or served twice.
    #[error("model id {0} is not in the registry or is listed twice")]
    BadModel(u32),
    /// The policy cannot run in a daemon.
    #[error(
        "policy `{0}` cannot run inside a partition; use seq, streams, wait-preempt, reef or paella"
    )]
    Policy(PolicyKind),
    /// The planner thread could not be started.
    #[error("cannot start the planner thread: {0}")]
    Thread(#[source] std::io::Error),
    /// A profile that is not built in.
    #[error("cluster.gpus: {profile:?} is not a GPU model profile: {why}")]
    Profile {
        /// The name.
        profile: String,
        /// Why.
        why: String,
    },
    /// A model could not be profiled.
    #[error("cannot profile model {model:?} for the planner: {why}")]
    Profiling {
        /// The model.
        model: String,
        /// Why.
        why: String,
    },
    /// An SLO no partition can meet.
    #[error(
        "model {model:?}: its SLO of {slo_ms} ms is below twice its fastest batch ({fastest_ms:.3} ms alone on a whole simulated {profile}), so no placement can meet it (a request may wait for one batch before its own); raise cluster.slo_ms_per_model.{model} to at least {need:.1}",
        need = 2.0 * fastest_ms
    )]
    SloUnreachable {
        /// The model.
        model: String,
        /// Its SLO.
        slo_ms: f64,
        /// `L(smallest batch, 100 %)`.
        fastest_ms: f64,
        /// The device profile.
        profile: String,
    },
    /// The batch-scaled models could not form a registry.
    #[error("cannot build the batch-scaled models for the policies: {0}")]
    BatchedRegistry(String),
    /// `gpulet+int` without `cluster.interference_data`.
    #[error(
        "the gpulet+int planner needs gpulet's interference data; set cluster.interference_data \
         to \"gpulet-2080ti\" or \"gpulet-3080\" (built in) or to the folder holding \
         INT_MODEL_CONSTANT.CSV and UTIL.CSV"
    )]
    NoInterferenceData,
    /// `inss` without `cluster.inss_agents`.
    #[error(
        "the inss planner needs trained agents; set cluster.inss_agents to the directory \
         `sluice train inss --out DIR` wrote"
    )]
    NoInssAgents,
    /// InSS agents that cannot be loaded or cannot serve this cluster.
    #[cfg(feature = "inss")]
    #[error("cluster.inss_agents: {0}")]
    InssAgents(#[source] Box<sluice_inss::planner::InssPlannerError>),
    /// `inss` asked of a daemon built without the planner.
    #[cfg(not(feature = "inss"))]
    #[error(
        "cluster.planner = \"inss\" is not built into this sluiced (it links the candle ML \
         framework, left out by default); build it with `cargo build --release -p \
         sluice-service --features inss`, or choose another cluster.planner"
    )]
    InssNotBuilt,
    /// An interference file that cannot be read or parsed.
    #[error("cluster.interference_data: {file}: {why}")]
    InterferenceData {
        /// The file.
        file: String,
        /// Why, with the line where there is one.
        why: String,
    },
    /// A `cluster.util_names` entry for a model the cluster does not serve.
    #[error(
        "cluster.util_names.{model} names a model the cluster does not serve; the cluster serves \
         {served}: fix the name or remove the entry"
    )]
    UtilName {
        /// The key.
        model: String,
        /// The models served.
        served: String,
    },
    /// `cluster.partition_sizes` refused by the planner crate.
    #[error("cluster.partition_sizes: {0}")]
    Sizes(String),
    /// A model's batch-scaled manifest was refused.
    #[error("cannot build model {model:?} at batch {batch}: {why}")]
    Batched {
        /// The model.
        model: String,
        /// The batch.
        batch: u32,
        /// The registry's reason.
        why: String,
    },
}

/// One model's state in the backend.
struct Served {
    spec: ServedModel,
    slo_ns: u64,
    /// Registry (batched) id of the model at each listed batch size.
    batched: Vec<u32>,
    rt: VecDeque<Job>,
    be: VecDeque<Job>,
    rate: RateMonitor,
    planned_rps: f64,
    /// Partitions in force serving it.
    serving: u32,
    completed: u64,
    slo_violations: u64,
    batches: u64,
    max_batch: u32,
}

impl Served {
    fn queued(&self) -> usize {
        self.rt.len() + self.be.len()
    }
}

/// One model's part of a partition.
struct Slot {
    served: usize,
    planned_batch: u32,
    share_rps: f64,
    /// A batch of it is running here.
    busy: bool,
    /// [`Execution::Timed`]: a batch of `n` takes `timed_ns[n - 1]`.
    timed_ns: Vec<u64>,
}

struct Partition {
    gpu: usize,
    size_pct: u32,
    first_cu: u32,
    cus: Vec<u32>,
    policy: Box<dyn Policy>,
    streams: Vec<(i32, sluice_gpu::StreamId)>,
    slots: Vec<Slot>,
    draining: bool,
    in_flight: u32,
    stats: PolicyStats,
    /// [`Execution::Timed`]: the slot the next round-robin visit starts at.
    next_slot: usize,
    /// Requests it completed.
    completed: u64,
    /// Batches it completed.
    batches: u64,
    /// [`Execution::Timed`]: time it spent running batches, ns.
    busy_ns: u64,
}

impl Partition {
    /// CUs it owns on a GPU of `ncu` CUs.
    fn cu_count(&self, ncu: u32) -> u32 {
        if self.cus.is_empty() {
            ncu
        } else {
            self.cus.len() as u32
        }
    }
}

struct Batch {
    part: usize,
    slot: usize,
    jobs: Vec<Job>,
    started: Option<u64>,
}

/// One partition as [`ClusterBackend::partitions`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionReport {
    /// Its GPU.
    pub gpu: usize,
    /// Share of the GPU, percent.
    pub size_pct: u32,
    /// Its first CU.
    pub first_cu: u32,
    /// Whether it drains (replaced by a newer placement).
    pub draining: bool,
    /// Requests it completed.
    pub completed: u64,
    /// Batches it completed.
    pub batches: u64,
    /// [`Execution::Timed`]: time it spent running batches, ns (0 on the
    /// GPU model).
    pub busy_ns: u64,
}

/// The cluster as a [`Backend`].
pub struct ClusterBackend {
    name: String,
    planner: PlanRunner,
    setup: ClusterSetup,
    gpus: Vec<GpuState>,
    /// The registry clients see.
    models: Arc<ModelRegistry>,
    /// Every served model at every listed batch size, for the policies.
    batched: Arc<ModelRegistry>,
    served: Vec<Served>,
    /// Registry id → index into `served`.
    by_id: Vec<Option<usize>>,
    parts: Vec<Option<Partition>>,
    batches: HashMap<TaskId, Batch>,
    next_task: TaskId,
    epoch: u64,
    /// The latest time the backend has been advanced to (virtual ns).
    clock: u64,
    last_plan: u64,
    replan_now: bool,
    events: Vec<Event>,
    fresh: Vec<TaskDone>,
    failed: Vec<TaskFailed>,
    /// Always empty: batches have no deadline (see the module docs).
    missed: Vec<TaskMissed>,
    out: Vec<Finished>,
    buf: Vec<u8>,
    layout: Arc<Mutex<Layout>>,
    layout_at: u64,
    /// The last 1024 switches' dispatcher time, ns (a ring).
    switch_ns: Vec<u64>,
    switches: u64,
    /// GPUs the placement in force uses.
    gpus_in_use: u32,
    /// With `setup.scaling`, the GPU count the next plan starts from
    /// (Algorithm 2's previous period): 1 before the first plan, then the
    /// count the last plan used (every GPU after a fallback).
    scale_from: u32,
    /// The last [`RECENT_PLANS`] plans applied.
    recent: VecDeque<PlanRecord>,
    /// [`Execution::Timed`]: batches running, by end time (virtual ns).
    timed: std::collections::BinaryHeap<std::cmp::Reverse<(u64, TaskId)>>,
    /// [`Execution::Timed`]: batches that ended, not yet settled.
    timed_done: Vec<(TaskId, u64)>,
}

impl std::fmt::Debug for ClusterBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBackend")
            .field("name", &self.name)
            .field("gpus", &self.gpus.len())
            .field("batches", &self.batches.len())
            .finish_non_exhaustive()
    }
}

/// A batch's length as its source gives it: a slot's own nanoseconds
/// ([`Execution::Timed`]) or a table's milliseconds.
#[derive(Clone, Copy)]
enum BatchTime {
    Ns(u64),
    Ms(f64),
}

impl BatchTime {
    fn ms(self) -> f64 {
        match self {
            BatchTime::Ns(ns) => ns as f64 / 1e6,
            BatchTime::Ms(ms) => ms,
        }
    }

    fn ns(self) -> u64 {
        match self {
            BatchTime::Ns(ns) => ns,
            BatchTime::Ms(ms) => (ms * 1e6) as u64,
        }
    }
}

/// The name of `model` at batch `b` in the policies' registry.
fn batched_name(model: &str, b: u32) -> String {
    format!("{model}__b{b}")
}

const MS: u64 = 1_000_000;

/// How often the dispatcher looks for the planner thread's result while
/// one is due.
const PLAN_POLL_NS: u64 = 200_000;

impl ClusterBackend {
    /// The cluster of `setup`, placed by `planner`, serving clients that
    /// see `models`; virtual time 0 is `now_ns`.
    pub fn new(
        setup: ClusterSetup,
        planner: Box<dyn Planner + Send>,
        models: Arc<ModelRegistry>,
        now_ns: u64,
    ) -> Result<Self, ClusterError> {
        let first = setup.gpus.first().ok_or(ClusterError::NoGpus)?;
        if let Some(o) = setup.gpus.iter().find(|g| g.name != first.name) {
            return Err(ClusterError::Mixed {
                first: first.name.clone(),
                other: o.name.clone(),
            });
        }
        if matches!(setup.policy, PolicyKind::RtOnly) {
            return Err(ClusterError::Policy(setup.policy));
        }
        let mut by_id = vec![None; models.len()];
        let mut parts = Vec::new();
        for (i, m) in setup.models.iter().enumerate() {
            let model = models.get(m.id).ok_or(ClusterError::BadModel(m.id))?;
            let slot = &mut by_id[m.id as usize];
            if slot.is_some() {
                return Err(ClusterError::BadModel(m.id));
            }
            *slot = Some(i);
            for &b in m.table.batches() {
                let mut at_b = model.at_batch(b);
                at_b.manifest.name = batched_name(&model.manifest.name, b);
                parts.push((
                    format!("cluster:{}@{b}", m.name),
                    at_b.manifest,
                    at_b.memory,
                ));
            }
        }
        let batched = ModelRegistry::from_parts(parts)
            .map_err(|e| ClusterError::BatchedRegistry(e.to_string()))?;
        let served = setup
            .models
            .iter()
            .map(|m| {
                let base = &models.get(m.id).expect("checked above").manifest.name;
                let batched_ids = m
                    .table
                    .batches()
                    .iter()
                    .map(|b| {
                        batched
                            .lookup(&batched_name(base, *b))
                            .map(|(id, _)| id)
                            .ok_or_else(|| ClusterError::Batched {
                                model: m.name.clone(),
                                batch: *b,
                                why: "missing after building".into(),
                            })
                    })
                    .collect::<Result<Vec<u32>, _>>()?;
                Ok(Served {
                    slo_ns: (m.slo_ms * 1e6) as u64,
                    batched: batched_ids,
                    rt: VecDeque::new(),
                    be: VecDeque::new(),
                    rate: RateMonitor::new(setup.rate_window_ns, 0),
                    planned_rps: 0.0,
                    serving: 0,
                    completed: 0,
                    slo_violations: 0,
                    batches: 0,
                    max_batch: 0,
                    spec: m.clone(),
                })
            })
            .collect::<Result<Vec<_>, ClusterError>>()?;
        let name = match setup.execution {
            Execution::GpuModel => format!(
                "cluster of {} simulated {} GPUs, planner {}, policy {} in each partition",
                setup.gpus.len(),
                first.name,
                planner.name(),
                setup.policy
            ),
            Execution::Timed(_) => format!(
                "cluster of {} {} GPUs with given batch times, planner {}",
                setup.gpus.len(),
                first.name,
                planner.name()
            ),
        };
        let gpus = setup.gpus.iter().cloned().map(GpuState::new).collect();
        let mut me = Self {
            name,
            planner: PlanRunner::Inline(planner),
            gpus,
            models,
            batched: Arc::new(batched),
            served,
            by_id,
            parts: Vec::new(),
            batches: HashMap::new(),
            next_task: 0,
            epoch: now_ns,
            clock: 0,
            last_plan: 0,
            replan_now: false,
            events: Vec::new(),
            fresh: Vec::new(),
            failed: Vec::new(),
            missed: Vec::new(),
            out: Vec::new(),
            buf: vec![0u8; super::fifo::CHUNK],
            layout: Arc::new(Mutex::new(Layout::default())),
            layout_at: 0,
            switch_ns: Vec::with_capacity(1024),
            switches: 0,
            gpus_in_use: setup.gpus.len() as u32,
            scale_from: 1,
            recent: VecDeque::with_capacity(RECENT_PLANS),
            timed: std::collections::BinaryHeap::new(),
            timed_done: Vec::new(),
            setup,
        };
        // Until rates are seen: every GPU whole, serving every model.
        let start = me.fallback_placement();
        me.apply(&start);
        me.publish();
        Ok(me)
    }

    /// The placement the backend falls back to: every GPU one whole
    /// partition serving every model at its largest listed batch.
    fn fallback_placement(&self) -> Placement {
        let models: Vec<sluice_planner::Assignment> = self
            .served
            .iter()
            .map(|s| sluice_planner::Assignment {
                model: s.spec.name.clone(),
                batch: *s.spec.table.batches().last().unwrap_or(&1),
                share_rps: 0.0,
            })
            .collect();
        Placement {
            gpus: (0..self.gpus.len())
                .map(|_| sluice_planner::GpuPlan {
                    partitions: vec![sluice_planner::PartitionPlan {
                        size_pct: 100,
                        duty_cycle_ms: 0.0,
                        models: models.clone(),
                    }],
                })
                .collect(),
        }
    }

    /// Applies `placement` as a shadow switch (module docs); returns the
    /// wall-clock ns it took.
    fn apply(&mut self, placement: &Placement) -> u64 {
        let t0 = Instant::now();
        // What is in force now, to keep identical partitions.
        let mut keep: Vec<bool> = vec![false; self.parts.len()];
        let mut new_parts: Vec<(usize, u32, u32, Vec<Slot>)> = Vec::new();
        for (g, gp) in placement.gpus.iter().enumerate().take(self.gpus.len()) {
            let ncu = self.gpus[g].sim.profile().compute_units;
            let mut first = 0u32;
            for (k, pp) in gp.partitions.iter().enumerate() {
                let cus =
                    sluice_gpusim::lbp::partition_cus(self.gpus[g].sim.profile(), pp.size_pct)
                        .min(ncu.saturating_sub(first))
                        .max(1);
                let slots: Vec<Slot> = pp
                    .models
                    .iter()
                    .filter_map(|a| {
                        let served = self.served.iter().position(|s| s.spec.name == a.model)?;
                        Some(Slot {
                            served,
                            planned_batch: a.batch,
                            share_rps: a.share_rps,
                            busy: false,
                            timed_ns: Vec::new(),
                        })
                    })
                    .collect();
                let mut slots = slots;
                if let Execution::Timed(t) = &self.setup.execution {
                    // Slots kept from `pp.models` in order; a model the
                    // backend does not serve was left out above.
                    let mut si = 0;
                    for (j, a) in pp.models.iter().enumerate() {
                        if si < slots.len() && self.served[slots[si].served].spec.name == a.model {
                            let mut v = t.slot_ns(placement, g, k, j);
                            if v.is_empty() {
                                v.push(1);
                            }
                            slots[si].timed_ns = v;
                            si += 1;
                        }
                    }
                }
                let first_cu = first.min(ncu - 1);
                first = (first + cus).min(ncu);
                let same = self.parts.iter().position(|p| {
                    p.as_ref().is_some_and(|p| {
                        !p.draining
                            && p.gpu == g
                            && p.first_cu == first_cu
                            && p.cu_count(ncu) == cus
                            && p.slots.len() == slots.len()
                            && p.slots.iter().zip(&slots).all(|(a, b)| {
                                a.served == b.served
                                    && a.planned_batch == b.planned_batch
                                    && a.timed_ns == b.timed_ns
                            })
                    })
                });
                match same {
                    Some(i) if !keep[i] => {
                        keep[i] = true;
                        if let Some(p) = self.parts[i].as_mut() {
                            for (a, b) in p.slots.iter_mut().zip(&slots) {
                                a.share_rps = b.share_rps;
                            }
                        }
                    }
                    _ => new_parts.push((g, first_cu, cus, slots)),
                }
            }
        }
        for (i, p) in self.parts.iter_mut().enumerate() {
            if let Some(p) = p
                && !keep.get(i).copied().unwrap_or(false)
            {
                p.draining = true;
            }
        }
        for (g, first_cu, cus, slots) in new_parts {
            let ncu = self.gpus[g].sim.profile().compute_units;
            let list: Vec<u32> = if first_cu == 0 && cus >= ncu {
                Vec::new()
            } else {
                (first_cu..first_cu + cus).collect()
            };
            let policy = sluice_sched::make_policy(self.setup.policy, &self.batched);
            let size_pct = ((u64::from(cus) * 100).div_ceil(u64::from(ncu))) as u32;
            let part = Partition {
                gpu: g,
                size_pct,
                first_cu,
                cus: list,
                policy,
                streams: Vec::new(),
                slots,
                draining: false,
                in_flight: 0,
                stats: PolicyStats::default(),
                next_slot: 0,
                completed: 0,
                batches: 0,
                busy_ns: 0,
            };
            match self.parts.iter().position(Option::is_none) {
                Some(i) => self.parts[i] = Some(part),
                None => self.parts.push(Some(part)),
            }
        }
        // Partitions that drain with nothing running go at once.
        for i in 0..self.parts.len() {
            self.retire_if_done(i);
        }
        for s in &mut self.served {
            s.serving = 0;
        }
        for p in self.parts.iter().flatten().filter(|p| !p.draining) {
            for sl in &p.slots {
                self.served[sl.served].serving += 1;
            }
        }
        t0.elapsed().as_nanos() as u64
    }

    fn retire_if_done(&mut self, i: usize) {
        let done = self.parts[i]
            .as_ref()
            .is_some_and(|p| p.draining && p.in_flight == 0);
        if done && let Some(p) = self.parts[i].take() {
            self.gpus[p.gpu].release(&p.streams);
        }
    }

    /// Runs the planner on a thread of its own from now on, so that the
    /// dispatcher never waits for it (the daemon does; the benchmarks and
    /// tests plan inline, in virtual time).
    pub fn with_planner_thread(mut self) -> Result<Self, ClusterError> {
        let inline = std::mem::replace(
            &mut self.planner,
            PlanRunner::Inline(Box::new(sluice_planner::Sbp)),
        );
        let PlanRunner::Inline(p) = inline else {
            self.planner = inline;
            return Ok(self);
        };
        self.planner = PlanRunner::thread(p).map_err(ClusterError::Thread)?;
        Ok(self)
    }

    /// Plans now, for the rates seen so far, rather than when a plan falls
    /// due (a benchmark places its plan at virtual time 0 this way).
    pub fn plan_now(&mut self) {
        self.replan_now = true;
        self.replan();
    }

    /// The partitions in force and draining, by GPU and first CU.
    pub fn partitions(&self) -> Vec<PartitionReport> {
        let mut v: Vec<PartitionReport> = self
            .parts
            .iter()
            .flatten()
            .map(|p| PartitionReport {
                gpu: p.gpu,
                size_pct: p.size_pct,
                first_cu: p.first_cu,
                draining: p.draining,
                completed: p.completed,
                batches: p.batches,
                busy_ns: p.busy_ns,
            })
            .collect();
        v.sort_by_key(|p| (p.gpu, p.first_cu, p.draining));
        v
    }

    /// Asks the planner for a placement for the observed rates; applies it
    /// at once when the planner runs inline, on a later poll otherwise.
    fn replan(&mut self) {
        if self.planner.busy() {
            return;
        }
        let now = self.clock;
        let window_rps = 1e9 / self.setup.rate_window_ns as f64;
        let specs: Vec<ModelSpec> = self
            .served
            .iter_mut()
            .map(|s| {
                let mut r = s.rate.rate(now);
                if r == 0.0 && s.queued() > 0 {
                    r = window_rps;
                }
                ModelSpec {
                    name: s.spec.name.clone(),
                    slo_ms: s.spec.slo_ms,
                    rate_rps: r * self.setup.headroom,
                    mem_mb: s.spec.mem_mb,
                    profile: s.spec.table.clone(),
                }
            })
            .collect();
        let count = self.gpus.len() as u32;
        let gpus = GpuSpec {
            count,
            mem_mb: self.setup.gpu_mem_mb,
            partition_step_pct: self.setup.partition_step_pct,
            sizes_pct: self.setup.sizes_pct,
            burst: self.setup.burst,
        };
        // Algorithm 2: from the count the last plan used, up to all.
        let scaling = self
            .setup
            .scaling
            .then(|| (self.scale_from.clamp(1, count), count));
        // Asked for: not again until this one is in.
        self.last_plan = now;
        self.replan_now = false;
        if let Some(done) = self.planner.submit(PlanJob {
            specs,
            gpus,
            scaling,
        }) {
            self.finish_plan(done);
        }
    }

    /// Applies a finished planner run.
    fn finish_plan(&mut self, done: PlanDone) {
        let PlanDone {
            job,
            result,
            plan_ns,
        } = done;
        let (placement, error) = match result {
            Ok(p) if self.covers_queued(&p) => (p, None),
            Ok(_) => (
                self.fallback_placement(),
                Some("the plan leaves a model with queued requests unserved".to_owned()),
            ),
            Err(e) => (self.fallback_placement(), Some(e.to_string())),
        };
        if let Some(e) = &error {
            tracing::warn!(
                "cluster: planner {} found no placement ({e}); every GPU serves every model until the next plan",
                self.planner.name()
            );
        }
        for (s, spec) in self.served.iter_mut().zip(&job.specs) {
            s.planned_rps = spec.rate_rps;
        }
        let fallback = error.is_some();
        let switch_ns = self.apply(&placement);
        self.gpus_in_use = placement
            .gpus
            .iter()
            .take(self.gpus.len())
            .filter(|g| g.partitions.iter().any(|p| !p.models.is_empty()))
            .count() as u32;
        self.scale_from = self.gpus_in_use;
        if self.recent.len() == RECENT_PLANS {
            self.recent.pop_front();
        }
        self.recent.push_back(PlanRecord {
            at_ms: self.clock / MS,
            gpus_in_use: self.gpus_in_use,
            plan_ns,
            fallback,
        });
        self.publish_switch(error, plan_ns, switch_ns);
        // A model that arrived unserved while the plan was out.
        if self.served.iter().any(|s| s.serving == 0 && s.queued() > 0) {
            self.replan_now = true;
        }
    }

    fn covers_queued(&self, p: &Placement) -> bool {
        self.served.iter().all(|s| {
            s.queued() == 0
                || p.partitions()
                    .any(|(_, pp)| pp.models.iter().any(|a| a.model == s.spec.name))
        })
    }

    fn due_for_plan(&mut self) -> bool {
        if self.replan_now {
            return true;
        }
        let now = self.clock;
        if self.setup.replan_ns > 0 && now >= self.last_plan + self.setup.replan_ns {
            return true;
        }
        // A rate move re-plans at most once per quarter window: the
        // monitor's own noise must not turn into a switch storm.
        if now < self.last_plan + self.setup.rate_window_ns / 4 {
            return false;
        }
        let band = self.setup.rate_change;
        let headroom = self.setup.headroom;
        self.served.iter_mut().any(|s| {
            let r = s.rate.rate(now) * headroom;
            let p = s.planned_rps;
            r > p * (1.0 + band) + 1e-9 || r < p * (1.0 - band) - 1e-9
        })
    }

    fn vt(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.epoch)
    }

    /// Runs every GPU up to virtual `target`, handing events to the
    /// partitions' policies, finishing batches and starting new ones as
    /// they free up.
    fn advance(&mut self, target: u64) {
        loop {
            let t = match self.next_internal() {
                Some(t) if t <= target => t,
                _ => break,
            };
            self.clock = self.clock.max(t);
            for g in 0..self.gpus.len() {
                if self.gpus[g].sim.next_event_time() == Some(t) {
                    self.gpus[g].sim.run_until(t);
                    self.deliver(g);
                }
            }
            while let Some(&std::cmp::Reverse((at, id))) = self.timed.peek() {
                if at > t {
                    break;
                }
                self.timed.pop();
                self.timed_done.push((id, at));
            }
            self.settle();
            self.pump();
        }
        self.clock = self.clock.max(target);
        for g in 0..self.gpus.len() {
            if self.gpus[g].sim.now() < target {
                self.gpus[g].sim.run_until(target);
                self.deliver(g);
            }
        }
        self.settle();
        if let Some(done) = self.planner.poll() {
            self.finish_plan(done);
        }
        if self.due_for_plan() {
            self.replan();
        }
        self.pump();
    }

    /// The next GPU-model event or timed batch end, virtual ns.
    fn next_internal(&self) -> Option<u64> {
        let gpus = self
            .gpus
            .iter()
            .filter_map(|g| g.sim.next_event_time())
            .min();
        let timed = self.timed.peek().map(|r| r.0.0);
        match (gpus, timed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn deliver(&mut self, g: usize) {
        let mut events = std::mem::take(&mut self.events);
        events.extend(self.gpus[g].sim.drain_events());
        for ev in events.drain(..) {
            let stream = match &ev {
                Event::KernelStarted { stream, .. }
                | Event::KernelFinished { stream, .. }
                | Event::BlocksCompleted { stream, .. } => *stream,
                Event::Preempted(r) => r.stream,
            };
            if let Event::KernelStarted { t, kernel, .. } = &ev {
                let (task, _) = untag(kernel.tag);
                if let Some(b) = self.batches.get_mut(&task)
                    && b.started.is_none()
                {
                    b.started = Some(*t);
                }
            }
            let owner = self.gpus[g]
                .owner
                .get(stream.0 as usize)
                .copied()
                .unwrap_or(NO_OWNER);
            let Some(Some(p)) = self.parts.get_mut(owner as usize) else {
                continue;
            };
            let mut gpu = PartGpu {
                gpu: &mut self.gpus[g],
                cus: &p.cus,
                streams: &mut p.streams,
                slot: owner,
            };
            let mut cx = Ctx {
                gpu: &mut gpu,
                models: &self.batched,
                done: &mut self.fresh,
                failed: &mut self.failed,
                missed: &mut self.missed,
                stats: &mut p.stats,
            };
            p.policy.on_event(&mut cx, &ev);
        }
        self.events = events;
    }

    /// Completes the batches the policies finished or failed.
    fn settle(&mut self) {
        let done: Vec<(TaskId, u64, bool)> = self
            .fresh
            .drain(..)
            .map(|d| (d.task.id, d.finished, false))
            .chain(self.failed.drain(..).map(|f| (f.task.id, f.at, true)))
            .chain(self.timed_done.drain(..).map(|(id, at)| (id, at, false)))
            .collect();
        for (id, at, failed) in done {
            let Some(b) = self.batches.remove(&id) else {
                continue;
            };
            let finished = self.epoch + at;
            let started = b.started.map_or(finished, |s| self.epoch + s);
            let Some(p) = self.parts[b.part].as_mut() else {
                continue;
            };
            p.in_flight -= 1;
            if !failed {
                p.completed += b.jobs.len() as u64;
                p.batches += 1;
            }
            let sl = &mut p.slots[b.slot];
            sl.busy = false;
            let s = &mut self.served[sl.served];
            for job in b.jobs {
                let (status, output_len) = if failed {
                    (status::DEVICE_ERROR, 0)
                } else {
                    super::fifo::compute_output(&self.models, &mut self.buf, &job)
                };
                if !failed {
                    s.completed += 1;
                    if finished.saturating_sub(job.received_ns) > s.slo_ns {
                        s.slo_violations += 1;
                    }
                }
                self.out.push(Finished {
                    client: job.client,
                    request_id: job.request_id,
                    status,
                    output_len,
                    received_ns: job.received_ns,
                    started_ns: started,
                    finished_ns: finished,
                });
            }
            self.retire_if_done(b.part);
        }
    }

    /// gpulet's adaptive batch for `served` in slot `si` of partition `pi`,
    /// a `pct` % partition: the largest listed `b` with `b / rate + L(b,
    /// pct) ≤ SLO`, at least the smallest listed. `L` is the slot's own
    /// batch time with [`Execution::Timed`], the model's table otherwise.
    fn batch_limit(&mut self, served: usize, pct: u32, pi: usize, si: usize) -> u32 {
        let now = self.clock;
        let rate = {
            let s = &mut self.served[served];
            s.rate.rate(now) / f64::from(s.serving.max(1))
        };
        let s = &self.served[served];
        let batches = s.spec.table.batches();
        let mut best = batches[0];
        for &b in batches {
            let Some(l) = self.batch_time(served, pct, pi, si, b).map(BatchTime::ms) else {
                continue;
            };
            let build_ms = if rate > 0.0 {
                f64::from(b) * 1e3 / rate
            } else {
                f64::INFINITY
            };
            if build_ms + l <= s.spec.slo_ms || b == batches[0] {
                best = b;
            }
        }
        best
    }

    /// How long a batch of `b` of `served` takes in slot `si` of partition
    /// `pi` (`pct` %): the slot's own time with [`Execution::Timed`], the
    /// model's table otherwise; `None` where neither lists `b`.
    fn batch_time(
        &self,
        served: usize,
        pct: u32,
        pi: usize,
        si: usize,
        b: u32,
    ) -> Option<BatchTime> {
        let timed = self.parts[pi]
            .as_ref()
            .map(|p| p.slots[si].timed_ns.as_slice())
            .filter(|v| !v.is_empty());
        match timed {
            Some(v) => v
                .get((b as usize).checked_sub(1)?)
                .copied()
                .map(BatchTime::Ns),
            None => self.served[served]
                .spec
                .table
                .latency_ms(b, pct)
                .map(BatchTime::Ms),
        }
    }

    /// The largest listed batch of `served`'s queued requests (slot `si` of
    /// partition `pi`, `pct` %) that its oldest queued request can still
    /// wait for: `now + L(n) ≤ arrival + SLO`; 0 when none (module docs).
    fn backlog_batch(&self, served: usize, pct: u32, pi: usize, si: usize) -> u32 {
        let s = &self.served[served];
        let Some(oldest) = s.rt.front().or_else(|| s.be.front()) else {
            return 0;
        };
        let due = oldest.received_ns.saturating_add(s.slo_ns);
        let now = self.epoch + self.clock;
        let q = s.queued() as u64;
        let mut best = 0;
        for &b in s.spec.table.batches() {
            if u64::from(b) > q {
                break;
            }
            if let Some(l) = self.batch_time(served, pct, pi, si, b).map(BatchTime::ns)
                && now.saturating_add(l) <= due
            {
                best = b;
            }
        }
        best
    }

    /// Starts a batch in every partition slot that is free and has
    /// requests queued; with [`Execution::Timed`], one batch per idle
    /// partition, its slots visited round robin.
    fn pump(&mut self) {
        let timed = matches!(self.setup.execution, Execution::Timed(_));
        for pi in 0..self.parts.len() {
            let Some(p) = self.parts[pi].as_ref() else {
                continue;
            };
            if p.draining || (timed && p.in_flight > 0) {
                continue;
            }
            let n = p.slots.len();
            let from = if timed { p.next_slot } else { 0 };
            for k in 0..n {
                let si = (from + k) % n;
                let Some(p) = self.parts[pi].as_ref() else {
                    break;
                };
                let sl = &p.slots[si];
                if sl.busy || self.served[sl.served].queued() == 0 {
                    continue;
                }
                let (served, size_pct, g) = (sl.served, p.size_pct, p.gpu);
                // The table lists the planner's sizes; a partition of
                // another size (the fallback's whole GPU) reads 100 %.
                let pct = if self.served[served]
                    .spec
                    .table
                    .partitions_pct()
                    .contains(&size_pct)
                {
                    size_pct
                } else {
                    100
                };
                let limit = self
                    .batch_limit(served, pct, pi, si)
                    .max(self.backlog_batch(served, pct, pi, si));
                if self.start_batch(pi, si, served, g, limit, pct) && timed {
                    if let Some(p) = self.parts[pi].as_mut() {
                        p.next_slot = (si + 1) % n;
                    }
                    break;
                }
            }
        }
    }

    /// Forms a batch of at most `limit` of `served`'s queued requests and
    /// starts it in slot `si` of partition `pi` (`pct` %, as its batch
    /// times read it); whether one started (all may have missed their
    /// deadlines).
    #[allow(clippy::too_many_arguments)]
    fn start_batch(
        &mut self,
        pi: usize,
        si: usize,
        served: usize,
        g: usize,
        limit: u32,
        pct: u32,
    ) -> bool {
        let now_abs = self.epoch + self.clock;
        // With batch times, no batch longer than the slot's times.
        let limit = match self.parts[pi].as_ref().map(|p| p.slots[si].timed_ns.len()) {
            Some(len) if len > 0 => limit.min(len as u32),
            _ => limit,
        };
        let batches = self.served[served].spec.table.batches().to_vec();
        let want = {
            let q = self.served[served].queued() as u32;
            batches
                .iter()
                .copied()
                .filter(|&b| b <= q.min(limit))
                .max()
                .unwrap_or(1)
        };
        // Requests that would finish after their deadline in the batch
        // being formed do not run (module docs): under overload the oldest
        // have too little time left for any batch, and running them late
        // would make every request behind them late too.
        let need_ns = batches
            .iter()
            .rev()
            .filter(|&&b| b <= want)
            .find_map(|&b| self.batch_time(served, pct, pi, si, b))
            .map_or(0, BatchTime::ns);
        let s = &mut self.served[served];
        let mut jobs = Vec::new();
        while jobs.len() < want as usize {
            let Some(job) = s.rt.pop_front().or_else(|| s.be.pop_front()) else {
                break;
            };
            if job.deadline_ns != 0 && now_abs.saturating_add(need_ns) > job.deadline_ns {
                self.out.push(Finished {
                    client: job.client,
                    request_id: job.request_id,
                    status: status::DEADLINE_MISSED,
                    output_len: 0,
                    received_ns: job.received_ns,
                    started_ns: now_abs,
                    finished_ns: now_abs,
                });
                continue;
            }
            jobs.push(job);
        }
        if jobs.is_empty() {
            return false;
        }
        // Fewer left than wanted (deadlines dropped some): the largest
        // listed batch that fits; the rest go back to the front.
        let n = batches
            .iter()
            .copied()
            .filter(|&b| b as usize <= jobs.len())
            .max()
            .unwrap_or(1);
        while jobs.len() > n as usize {
            let j = jobs.pop().expect("longer than n");
            match j.priority {
                Priority::RealTime => s.rt.push_front(j),
                _ => s.be.push_front(j),
            }
        }
        let bi = batches.iter().position(|&b| b == n).unwrap_or(0);
        let model = s.batched[bi];
        s.batches += 1;
        s.max_batch = s.max_batch.max(n);
        let priority = if jobs.iter().any(|j| j.priority == Priority::RealTime) {
            Priority::RealTime
        } else {
            Priority::BestEffort
        };
        let id = self.next_task;
        self.next_task += 1;
        let client = jobs[0].client;
        // With batch times, the batch is one event of its slot's length.
        let timed_ns = match self.setup.execution {
            Execution::Timed(_) => self.parts[pi].as_ref().map(|p| {
                let v = &p.slots[si].timed_ns;
                v[(n as usize).clamp(1, v.len()) - 1]
            }),
            Execution::GpuModel => None,
        };
        if !self.record_batch(pi, si, id, jobs, timed_ns.map(|_| self.clock)) {
            return false;
        }
        if let Some(dur) = timed_ns {
            if let Some(p) = self.parts[pi].as_mut() {
                p.busy_ns += dur;
            }
            self.timed.push(std::cmp::Reverse((self.clock + dur, id)));
            return true;
        }
        let gpu = &mut self.gpus[g];
        if gpu.sim.now() < self.clock {
            gpu.sim.run_until(self.clock);
            // Nothing was due before `clock` (advance runs every GPU to
            // each event time), so there are no events to hand on here.
        }
        let task = Task {
            id,
            client,
            priority,
            model,
            arrival: gpu.sim.now(),
            deadline: None,
        };
        let Some(p) = self.parts[pi].as_mut() else {
            return false;
        };
        let mut pg = PartGpu {
            gpu,
            cus: &p.cus,
            streams: &mut p.streams,
            slot: pi as u32,
        };
        let mut cx = Ctx {
            gpu: &mut pg,
            models: &self.batched,
            done: &mut self.fresh,
            failed: &mut self.failed,
            missed: &mut self.missed,
            stats: &mut p.stats,
        };
        p.policy.on_arrival(&mut cx, task);
        true
    }

    /// Marks slot `si` of partition `pi` busy with batch `id` of `jobs`
    /// (`started`: when it started, if known now); false if the partition
    /// is gone.
    fn record_batch(
        &mut self,
        pi: usize,
        si: usize,
        id: TaskId,
        jobs: Vec<Job>,
        started: Option<u64>,
    ) -> bool {
        let Some(p) = self.parts[pi].as_mut() else {
            return false;
        };
        p.slots[si].busy = true;
        p.in_flight += 1;
        self.batches.insert(
            id,
            Batch {
                part: pi,
                slot: si,
                jobs,
                started,
            },
        );
        true
    }

    fn publish_switch(&mut self, error: Option<String>, plan_ns: u64, switch_ns: u64) {
        if self.switch_ns.len() < 1024 {
            self.switch_ns.push(switch_ns);
        } else {
            self.switch_ns[(self.switches % 1024) as usize] = switch_ns;
        }
        self.switches += 1;
        let switches = self.switches;
        let mut sorted = self.switch_ns.clone();
        sorted.sort_unstable();
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        let (p50, p99) = (at(0.5), at(0.99));
        if let Ok(mut l) = self.layout.lock() {
            l.switch_p50_ns = p50;
            l.switch_p99_ns = p99;
            l.switches = switches;
            l.last_switch_ns = switch_ns;
            l.max_switch_ns = l.max_switch_ns.max(switch_ns);
            l.last_plan_ns = plan_ns;
            l.plan_error = error;
            l.recent_plans = self.recent.iter().cloned().collect();
        }
        self.publish();
    }

    /// Refreshes what `sluice status` shows.
    fn publish(&mut self) {
        let now = self.clock;
        self.layout_at = now;
        let mut gpus: Vec<GpuLayout> = self
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| GpuLayout {
                index: i as u32,
                profile: g.sim.profile().name.clone(),
                compute_units: g.sim.profile().compute_units,
                partitions: Vec::new(),
            })
            .collect();
        let mut parts: Vec<&Partition> = self.parts.iter().flatten().collect();
        parts.sort_by_key(|p| (p.draining, p.gpu, p.first_cu));
        for p in parts {
            let ncu = gpus[p.gpu].compute_units;
            gpus[p.gpu].partitions.push(PartitionLayout {
                size_pct: p.size_pct,
                first_cu: p.first_cu,
                cus: p.cu_count(ncu),
                draining: p.draining,
                in_flight: p.in_flight,
                models: p
                    .slots
                    .iter()
                    .map(|s| {
                        (
                            self.served[s.served].spec.name.clone(),
                            s.planned_batch,
                            s.share_rps,
                        )
                    })
                    .collect(),
            });
        }
        let models: Vec<ModelLoad> = self
            .served
            .iter_mut()
            .map(|s| ModelLoad {
                name: s.spec.name.clone(),
                slo_ms: s.spec.slo_ms,
                rate_rps: s.rate.rate(now),
                planned_rps: s.planned_rps,
                queued: s.queued() as u64,
                completed: s.completed,
                slo_violations: s.slo_violations,
                batches: s.batches,
                max_batch: s.max_batch,
            })
            .collect();
        if let Ok(mut l) = self.layout.lock() {
            l.planner = self.planner.name().to_owned();
            l.gpus_in_use = self.gpus_in_use;
            l.gpus = gpus;
            l.models = models;
        }
    }
}

impl Backend for ClusterBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn submit(&mut self, job: Job, now_ns: u64) {
        let t = self.vt(now_ns);
        self.advance(t);
        let Some(Some(si)) = self.by_id.get(job.model as usize).copied() else {
            // Every registry model is served (startup builds the registry
            // from the served list); refuse anything else rather than hold it.
            self.out.push(Finished {
                client: job.client,
                request_id: job.request_id,
                status: status::UNKNOWN_MODEL,
                output_len: 0,
                received_ns: job.received_ns,
                started_ns: now_ns,
                finished_ns: now_ns,
            });
            return;
        };
        let s = &mut self.served[si];
        s.rate.record(self.clock);
        match job.priority {
            Priority::RealTime => s.rt.push_back(job),
            _ => s.be.push_back(job),
        }
        if s.serving == 0 {
            self.replan_now = true;
            self.replan();
        }
        self.pump();
    }

    fn poll(&mut self, now_ns: u64, done: &mut Vec<Finished>) {
        let t = self.vt(now_ns);
        self.advance(t);
        // Every 100 ms, and whenever the cluster falls idle, so that what
        // `sluice status` shows after a burst is its end.
        let idle_now = self.batches.is_empty() && !self.out.is_empty();
        if self.clock >= self.layout_at + 100 * MS || idle_now {
            self.publish();
        }
        done.append(&mut self.out);
    }

    fn next_event_ns(&self) -> Option<u64> {
        if !self.out.is_empty() || !self.fresh.is_empty() || !self.failed.is_empty() {
            return Some(self.epoch + self.clock);
        }
        let mut next = self.next_internal();
        // A plan with the planner thread is picked up by polling.
        if self.planner.busy() {
            let at = self.clock + PLAN_POLL_NS;
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        // A periodic re-plan matters only while requests are around.
        if self.setup.replan_ns > 0 && !self.batches.is_empty() {
            let at = self.last_plan + self.setup.replan_ns;
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        next.map(|t| self.epoch + t)
    }

    fn cancel_client(&mut self, client: u32) -> usize {
        let mut n = 0;
        for s in &mut self.served {
            let before = s.queued();
            s.rt.retain(|j| j.client != client);
            s.be.retain(|j| j.client != client);
            n += before - s.queued();
        }
        for b in self.batches.values_mut() {
            let before = b.jobs.len();
            b.jobs.retain(|j| j.client != client);
            n += before - b.jobs.len();
        }
        let before = self.out.len();
        self.out.retain(|f| f.client != client);
        n += before - self.out.len();
        n
    }

    fn queued(&self) -> usize {
        self.served.iter().map(Served::queued).sum::<usize>()
            + self.batches.values().map(|b| b.jobs.len()).sum::<usize>()
    }

    fn layout(&self) -> Option<Arc<Mutex<Layout>>> {
        Some(Arc::clone(&self.layout))
    }
}

#[cfg(test)]
mod tests;
