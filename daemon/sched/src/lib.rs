//! # sluice-sched
//!
//! Per-GPU scheduling policies over the device interface of `sluice-gpu`,
//! and a driver ([`workload`]) that runs a workload through one on any
//! [`Clocked`](sluice_gpu::Clocked) device. This crate depends on the
//! interface only; its tests run the policies on the GPU model
//! (`sluice-gpusim`, a dev-dependency).
//!
//! A [`Policy`] sees task arrivals and GPU events and decides what to
//! launch on which stream, and when to preempt. Policies drive the device
//! through the [`Gpu`](sluice_gpu::Gpu) trait: in benchmarks and the
//! simulated daemon the same GPU model (`sluice_gpusim::GpuSim`), so their
//! results compare like for like; on hardware a real backend. The policies
//! are REEF's and Paella's: `seq`, `streams`, `rt-only`, `wait-preempt`,
//! `reef`, `paella`, and Paella's own baselines `paella-sjf` and
//! `paella-rr`, and SPLIT's: `split` (SPLIT's block-level
//! preemption, [`split`]) and its baselines `prema` ([`prema`]) and `rt-a`
//! ([`rt_a`]) (see [`PolicyKind`]); each lives in its own module (Paella's
//! baselines in `paella`).
//!
//! Kernel tags encode the task and the kernel's index in its model
//! ([`tag`], [`untag`]), so a policy can map GPU events back to tasks.
//!
//! **Failures.** A policy never panics on a device error. Errors of
//! optional mechanisms (padding, packed placement, preemption) are logged
//! and the decision falls back. A task the device cannot run (no stream for
//! it, a refused launch of one of its kernels) is failed with
//! [`Ctx::fail`]: it goes to [`Ctx::failed`] instead of [`Ctx::done`], and
//! the policy forgets it (kernels of it already on the device run on and
//! are ignored). The daemon's backends complete a failed task's request
//! with `DEVICE_ERROR`; the workload driver counts them
//! ([`workload::RunResult::failed`]). On the GPU model nothing fails.

pub mod paella;
pub mod prema;
pub mod queue;
pub mod reef;
pub mod rt_a;
pub mod rt_only;
pub mod seq;
pub mod split;
pub mod streams;
pub mod wait_preempt;
pub mod workload;

#[cfg(test)]
mod deadline_tests;

use std::sync::Arc;

use shm_proto::Priority;

use sluice_gpu::{Event, Gpu, GpuError, Ns};
use sluice_model::ModelRegistry;

/// Identifies a task (one inference request) within a run.
pub type TaskId = u64;

/// One inference request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    /// Unique within the run.
    pub id: TaskId,
    /// The client that issued it.
    pub client: u32,
    /// Real-time or best-effort.
    pub priority: Priority,
    /// Model id in the registry.
    pub model: u32,
    /// Arrival time (virtual ns).
    pub arrival: Ns,
    /// Absolute deadline on the device's clock, if any: a task still
    /// waiting after it is not started ([`Ctx::drop_if_late`]).
    pub deadline: Option<Ns>,
}

impl Task {
    /// Whether the task's deadline has passed at `now` (a task may still
    /// start exactly at its deadline).
    pub fn late_at(&self, now: Ns) -> bool {
        self.deadline.is_some_and(|d| now > d)
    }
}

/// A finished task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskDone {
    /// Which.
    pub task: Task,
    /// When its last kernel completed.
    pub finished: Ns,
}

/// A task the policy could not run: the device refused to start it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFailed {
    /// Which.
    pub task: Task,
    /// When the policy gave up on it (device clock).
    pub at: Ns,
    /// What the device said.
    pub error: GpuError,
}

/// A task that was not started because its deadline had passed while it
/// waited ([`Ctx::drop_if_late`]); none of its kernels was launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMissed {
    /// Which.
    pub task: Task,
    /// When the policy dropped it (device clock).
    pub at: Ns,
}

/// What a policy reports besides completions.
#[derive(Debug, Clone, Default)]
pub struct PolicyStats {
    /// Latency of each preemption (request to BE streams idle), ns.
    pub preempt_latency_ns: Vec<Ns>,
    /// Kernels launched more than once because of restores.
    pub relaunched_kernels: u64,
}

/// Everything a policy works with during one callback.
pub struct Ctx<'a> {
    /// The GPU.
    pub gpu: &'a mut dyn Gpu,
    /// Models (kernels, times).
    pub models: &'a ModelRegistry,
    /// Append finished tasks here.
    pub done: &'a mut Vec<TaskDone>,
    /// Append tasks that cannot run here (through [`Ctx::fail`]).
    pub failed: &'a mut Vec<TaskFailed>,
    /// Append tasks dropped for a passed deadline here (through
    /// [`Ctx::drop_if_late`]).
    pub missed: &'a mut Vec<TaskMissed>,
    /// Append statistics here.
    pub stats: &'a mut PolicyStats,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("now", &self.gpu.now())
            .finish_non_exhaustive()
    }
}

impl Ctx<'_> {
    /// Gives up on `task`, which the device could not run because of
    /// `error`: logs it and records it in [`Ctx::failed`] at the device's
    /// current time. The caller forgets the task.
    pub fn fail(&mut self, task: Task, error: GpuError) {
        tracing::error!(
            task = task.id,
            client = task.client,
            model = task.model,
            "task failed: {error}"
        );
        self.failed.push(TaskFailed {
            task,
            at: self.gpu.now(),
            error,
        });
    }

    /// The deadline check every policy makes before it launches a task's
    /// first kernel: when `task`'s deadline has passed, records it in
    /// [`Ctx::missed`] and returns `true`, and the caller forgets the task
    /// without launching anything of it. A task that has started is never
    /// dropped: it may finish after its deadline.
    pub fn drop_if_late(&mut self, task: Task) -> bool {
        let now = self.gpu.now();
        if !task.late_at(now) {
            return false;
        }
        self.missed.push(TaskMissed { task, at: now });
        true
    }
}

/// Hands `task`, arriving now, to `policy`, unless its deadline has already
/// passed: then it goes to [`Ctx::missed`] and the policy never sees it.
/// Every driver of a policy (the workload driver, the daemon's backends)
/// delivers arrivals through this, so a task late on arrival is dropped
/// the same way under every policy, including those that launch a task's
/// kernels as soon as it arrives (`streams`, `rt-a`, `rt-only`).
pub fn arrive(policy: &mut dyn Policy, cx: &mut Ctx<'_>, task: Task) {
    if !cx.drop_if_late(task) {
        policy.on_arrival(cx, task);
    }
}

/// A scheduling policy.
pub trait Policy: Send {
    /// Its name as the config and the CLI spell it.
    fn name(&self) -> &'static str;
    /// A task arrives at `cx.gpu.now()`.
    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task);
    /// The GPU reported `ev`.
    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event);
}

/// The policies, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// One task at a time, real-time first, no preemption (Clockwork-like).
    Seq,
    /// One stream per client, the GPU decides (Triton-like).
    Streams,
    /// Reference: real-time tasks alone (best-effort tasks are dropped).
    RtOnly,
    /// Wait-based preemption of best-effort work.
    WaitPreempt,
    /// REEF: reset-based preemption and dynamic kernel padding.
    Reef,
    /// Paella: software-defined, occupancy-aware kernel dispatch.
    Paella,
    /// Paella's dispatcher with shortest-job-first queueing (Paella §7
    /// baseline Paella-SJF).
    PaellaSjf,
    /// Paella's dispatcher with round-robin queueing, kernel by kernel
    /// (Paella §7 baseline Paella-RR).
    PaellaRr,
    /// SPLIT: one request at a time, preemptible at the block boundaries
    /// of split models, queue ordered by response ratio (ICPP'23).
    Split,
    /// PREMA: token-gated shortest-remaining-first, preemptive at kernel
    /// boundaries (HPCA'20; SPLIT §5.3 baseline).
    Prema,
    /// RT-A: every request on its own stream, all at once (ICCAD'21;
    /// SPLIT §5.3 baseline, without its operator alignment).
    RtA,
}

impl PolicyKind {
    /// Every policy, in the order reports list them.
    pub const ALL: [Self; 11] = [
        Self::RtOnly,
        Self::Seq,
        Self::Streams,
        Self::WaitPreempt,
        Self::Reef,
        Self::Paella,
        Self::PaellaSjf,
        Self::PaellaRr,
        Self::Split,
        Self::Prema,
        Self::RtA,
    ];

    /// The name as the config and the CLI spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Seq => "seq",
            Self::Streams => "streams",
            Self::RtOnly => "rt-only",
            Self::WaitPreempt => "wait-preempt",
            Self::Reef => "reef",
            Self::Paella => "paella",
            Self::PaellaSjf => "paella-sjf",
            Self::PaellaRr => "paella-rr",
            Self::Split => "split",
            Self::Prema => "prema",
            Self::RtA => "rt-a",
        }
    }

    /// Parses a name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Bits of a kernel tag that hold the kernel's index in its model.
pub const KERNEL_BITS: u32 = 16;

/// The tag of kernel `kernel` of task `task`.
pub const fn tag(task: TaskId, kernel: usize) -> u64 {
    (task << KERNEL_BITS) | (kernel as u64 & ((1 << KERNEL_BITS) - 1))
}

/// The (task, kernel index) of a tag.
pub const fn untag(tag: u64) -> (TaskId, usize) {
    (
        tag >> KERNEL_BITS,
        (tag & ((1 << KERNEL_BITS) - 1)) as usize,
    )
}

/// Builds a policy. `models` is the registry the tasks refer to.
///
/// Each policy module adds its arm here.
pub fn make_policy(kind: PolicyKind, models: &Arc<ModelRegistry>) -> Box<dyn Policy> {
    match kind {
        PolicyKind::Seq => Box::new(seq::Seq::new()),
        PolicyKind::Streams => Box::new(streams::Streams::new()),
        PolicyKind::RtOnly => Box::new(rt_only::RtOnly::new()),
        PolicyKind::WaitPreempt => Box::new(wait_preempt::wait_preempt(Arc::clone(models))),
        PolicyKind::Reef => Box::new(reef::Reef::new(
            Arc::clone(models),
            reef::ReefConfig::reef(),
        )),
        PolicyKind::Paella => Box::new(paella::Paella::new(models)),
        PolicyKind::PaellaSjf => Box::new(paella::Paella::with_config(
            models,
            paella::PaellaConfig::sjf(),
        )),
        PolicyKind::PaellaRr => Box::new(paella::Paella::with_config(
            models,
            paella::PaellaConfig::round_robin(),
        )),
        PolicyKind::Split => Box::new(split::SplitPolicy::new(
            models,
            split::SplitConfig::from_manifests(models),
        )),
        PolicyKind::Prema => Box::new(prema::Prema::new(models, prema::PremaConfig::default())),
        PolicyKind::RtA => Box::new(rt_a::RtA::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        assert_eq!(untag(tag(12345, 439)), (12345, 439));
        assert_eq!(untag(tag(0, 0)), (0, 0));
    }

    #[test]
    fn names_round_trip() {
        for k in PolicyKind::ALL {
            assert_eq!(PolicyKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(PolicyKind::from_name("fifo"), None);
    }
}
