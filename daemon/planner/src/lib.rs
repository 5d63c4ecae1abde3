//! # sluice-planner
//!
//! Multi-GPU placement planners: given models with a rate, an SLO, a memory
//! footprint and a profiled latency table `L(batch, partition)`, decide how
//! to partition each GPU, which models run in each partition, at which batch
//! size and duty cycle, and how each model's rate is split.
//!
//! From the gpulet paper (Choi et al., USENIX ATC '22):
//!
//! - [`Sbp`]: Nexus's *squishy bin packing*, temporal sharing only; every
//!   partition is a whole GPU (§2.2).
//! - [`GreedyBestFit`]: spatial sharing only; each model gets the smallest
//!   partition that serves its rate at the largest batch meeting its SLO,
//!   packed best-fit onto GPUs, one model per partition (§2.3).
//! - [`Gpulet`] and [`GpuletInt`]: elastic partitioning (§4.3 Algorithm 1),
//!   the latter with an [`Interference`] model such as gpulet's linear
//!   [`LinearInterference`] (§4.4).
//! - [`Ideal`]: the exhaustive search over per-GPU splits of §5.2.
//! - [`plan_with_scaling`]: Algorithm 2's GPU scaling around any planner.
//!
//! [`check`] verifies any [`Placement`] against the inputs on its own,
//! without trusting the planner that made it. `docs/planners.md` states
//! every rule, including those the paper leaves open.
//!
//! A library only: no daemon, no GPU model. Tables come from `sluice
//! profile --device <profile>` on the GPU model (whose batch axis does not
//! yet pass its check, `docs/planners.md`) or from measurement.

mod batching;
mod check;
mod gpulet;
mod greedy;
mod ideal;
mod interference;
mod placement;
mod sbp;
mod scaling;
mod spec;
mod table;

#[cfg(feature = "test-util")]
pub mod churn;
#[cfg(test)]
mod proptests;

pub use batching::Burst;
pub use check::{Stats, Violation, check, check_with_interference, interference_factors};
pub use gpulet::{Gpulet, GpuletInt, KNEE_TOLERANCE};
pub use greedy::GreedyBestFit;
pub use ideal::{Ideal, MAX_LAYOUTS, PAPER_SPLITS};
pub use interference::{
    AnyInterference, GPULET_DATA, Interference, InterferenceError, LinearCoefficients,
    LinearInterference, MeasuredInterference, NoInterference, UtilTable, parse_util_csv,
};
pub use placement::{Assignment, GpuPlan, PartitionPlan, Placement};
pub use sbp::Sbp;
pub use scaling::plan_with_scaling;
pub use spec::{GpuSpec, ModelSpec, PartitionSizes, validate};
pub use table::{LatencyTable, TableError};

/// A multi-GPU placement planner.
pub trait Planner {
    /// A short name for logs and errors (`"sbp"`, `"greedy-best-fit"`).
    fn name(&self) -> &'static str;

    /// A placement serving every model's rate within its SLO on at most
    /// `gpus.count` GPUs, or why there is none. The same inputs always give
    /// the same placement.
    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError>;
}

/// Why a planner found no placement.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A burst quantile that is not a probability.
    #[error(
        "burst rule {burst:?}: the overflow share must lie strictly between 0 and 1, e.g. 0.01 for a 1 % violation target"
    )]
    BadBurst {
        /// The rule given.
        burst: Burst,
    },
    /// The partition step does not divide 100.
    #[error(
        "partition_step_pct {step} does not divide 100; use a divisor of 100 such as 10, 20, 25 or 50"
    )]
    BadStep {
        /// The step given.
        step: u32,
    },
    /// A model without a name.
    #[error("model {index} has an empty name; give every model a unique name")]
    EmptyName {
        /// Its position in the input.
        index: usize,
    },
    /// Two models with one name.
    #[error("model name {model:?} appears twice; model names must be unique")]
    DuplicateModel {
        /// The repeated name.
        model: String,
    },
    /// An SLO that is not a positive finite number.
    #[error("model {model:?}: slo_ms {slo_ms} is not a positive number of milliseconds")]
    BadSlo {
        /// The model.
        model: String,
        /// The value given.
        slo_ms: f64,
    },
    /// A rate that is negative or not finite.
    #[error("model {model:?}: rate_rps {rate_rps} is not a finite rate ≥ 0 requests per second")]
    BadRate {
        /// The model.
        model: String,
        /// The value given.
        rate_rps: f64,
    },
    /// A model that does not fit one GPU's memory.
    #[error(
        "model {model:?} needs {mem_mb} MB but a GPU has {gpu_mem_mb} MB; it cannot be placed on these GPUs"
    )]
    ModelTooBig {
        /// The model.
        model: String,
        /// Its footprint.
        mem_mb: u64,
        /// One GPU's memory.
        gpu_mem_mb: u64,
    },
    /// No listed partition size is a multiple of the step.
    #[error(
        "model {model:?}: its profile lists partition sizes {listed:?}%, none a multiple of the GPU's {step}% step; profile it at multiples of {step}%"
    )]
    NoUsablePartition {
        /// The model.
        model: String,
        /// The sizes its profile lists.
        listed: Vec<u32>,
        /// The GPU's step.
        step: u32,
    },
    /// The planner needs a size the profile does not list.
    #[error(
        "model {model:?}: the {planner} planner needs L(b, {pct}%) but the profile does not list {pct}%; profile it there"
    )]
    MissingPartition {
        /// The planner.
        planner: &'static str,
        /// The model.
        model: String,
        /// The size needed.
        pct: u32,
    },
    /// Even the smallest batch on the largest usable partition misses the SLO.
    #[error(
        "model {model:?} cannot meet its SLO of {slo_ms} ms: on {pct}% of a GPU its smallest batch ({batch}) runs {exec_ms} ms, and a request may wait one duty cycle (at least one execution) before its own execution, so the SLO must be at least {need_ms} ms; raise the SLO or profile a faster partition"
    )]
    SloUnreachable {
        /// The model.
        model: String,
        /// Its SLO.
        slo_ms: f64,
        /// The partition size tried.
        pct: u32,
        /// The smallest listed batch.
        batch: u32,
        /// `L(batch, pct)`.
        exec_ms: f64,
        /// `2 · exec_ms`.
        need_ms: f64,
    },
    /// An empty list of partition sizes.
    #[error(
        "the GPU's partition size list is empty; list at least one size, for example 20, 40, 50, 60, 80, 100"
    )]
    EmptySizes,
    /// A listed partition size outside `1..=100`.
    #[error("partition size {pct}% is outside 1..=100; give partition sizes in percent of one GPU")]
    SizeOutOfRange {
        /// The size given.
        pct: u32,
    },
    /// No listed size is a multiple of the step.
    #[error(
        "none of the GPU's partition sizes {sizes:?}% is a multiple of its {step}% step; use a step that divides them (10 for gpulet's 20/40/50/60/80/100)"
    )]
    NoAllowedSize {
        /// The listed sizes.
        sizes: Vec<u32>,
        /// The step.
        step: u32,
    },
    /// No size the profile lists is allowed by the GPU.
    #[error(
        "model {model:?}: its profile lists partition sizes {listed:?}%, none of them among the GPU's allowed sizes {allowed:?}%; profile it at one of those"
    )]
    NoAllowedPartition {
        /// The model.
        model: String,
        /// The sizes its profile lists.
        listed: Vec<u32>,
        /// The sizes the GPU allows.
        allowed: Vec<u32>,
    },
    /// The planner needs a size the GPU does not allow.
    #[error(
        "the {planner} planner needs {what}, but the GPU allows only {allowed:?}%; allow {what} in GpuSpec::sizes_pct"
    )]
    SizeNotAllowed {
        /// The planner.
        planner: &'static str,
        /// What it needs, e.g. `"100%"` or `"a size of one of the splits [(20, 80), …]"`.
        what: String,
        /// The sizes the GPU allows.
        allowed: Vec<u32>,
    },
    /// A layout search larger than the planner's cap.
    #[error(
        "the {planner} planner would search {splits}^{gpus} partition layouts, over its limit of {limit}; give it at most {max_gpus} GPUs (or fewer splits), or use the gpulet planner"
    )]
    TooManyLayouts {
        /// The planner.
        planner: &'static str,
        /// Splits per GPU.
        splits: usize,
        /// GPUs given.
        gpus: u32,
        /// The most layouts it searches.
        limit: u64,
        /// The most GPUs within the limit.
        max_gpus: u32,
    },
    /// An exhaustive search found no layout.
    #[error(
        "not schedulable by {planner} on {gpus} GPUs: none of its {layouts} partition layouts serves every model; add GPUs or lower the rates"
    )]
    NoViableLayout {
        /// The planner.
        planner: &'static str,
        /// GPUs given.
        gpus: u32,
        /// Layouts tried.
        layouts: u64,
    },
    /// Algorithm 2 reached its GPU limit.
    #[error(
        "not schedulable by {planner} on up to {limit} GPUs (tried {from} to {limit}); raise the GPU limit or lower the rates"
    )]
    Unschedulable {
        /// The planner.
        planner: &'static str,
        /// The first GPU count tried.
        from: u32,
        /// The GPU limit.
        limit: u32,
    },
    /// A model the planner cannot place at all (a learned planner's agents
    /// were not trained on it).
    #[error(
        "the {planner} planner cannot place model {model:?}: it knows only {known}; serve only those or use another planner"
    )]
    UnknownModel {
        /// The planner.
        planner: &'static str,
        /// The model.
        model: String,
        /// The models it knows, comma-separated.
        known: String,
    },
    /// More GPUs needed than available.
    #[error("not schedulable by {planner}: needs {needed} GPUs, have {available}")]
    NotSchedulable {
        /// The planner.
        planner: &'static str,
        /// GPUs the plan needs.
        needed: u64,
        /// `GpuSpec::count`.
        available: u32,
    },
}

impl PlanError {
    /// The [`PlanError::SloUnreachable`] of `m` on a `pct` partition.
    pub(crate) fn slo_unreachable(m: &ModelSpec, pct: u32) -> Self {
        let batch = m.profile.batches()[0];
        let exec_ms = m.profile.latency_ms(batch, pct).unwrap_or(f64::NAN);
        PlanError::SloUnreachable {
            model: m.name.clone(),
            slo_ms: m.slo_ms,
            pct,
            batch,
            exec_ms,
            need_ms: 2.0 * exec_ms,
        }
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Builders for the tests' hand-worked examples.

    use super::*;

    /// A model whose latency on partition `p` is `f(batch, p)`.
    pub fn model(
        name: &str,
        slo_ms: f64,
        rate_rps: f64,
        mem_mb: u64,
        batches: &[u32],
        parts: &[u32],
        f: impl Fn(u32, u32) -> f64,
    ) -> ModelSpec {
        ModelSpec {
            name: name.to_owned(),
            slo_ms,
            rate_rps,
            mem_mb,
            profile: LatencyTable::from_fn(batches.to_vec(), parts.to_vec(), f).unwrap(),
        }
    }

    /// `count` GPUs of 16 GB with a 10 % step.
    pub fn gpus(count: u32) -> GpuSpec {
        GpuSpec::new(count, 16_000, 10)
    }

    /// `count` GPUs of 16 GB with gpulet's sizes 20/40/50/60/80/100 %.
    pub fn gpulet_gpus(count: u32) -> GpuSpec {
        gpus(count).with_sizes(PartitionSizes::gpulet())
    }
}
