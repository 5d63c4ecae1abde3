//! Planner output: GPUs, their partitions, and the models time-sharing each
//! partition.

/// A whole plan: the GPUs used, in order. GPUs left idle are not listed, so
/// `gpus.len()` is the number of GPUs the plan needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Placement {
    /// One entry per GPU used.
    pub gpus: Vec<GpuPlan>,
}

/// One GPU's spatial partitions. Their sizes sum to at most 100; the rest of
/// the GPU is unassigned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuPlan {
    /// The partitions, in the order the planner made them.
    pub partitions: Vec<PartitionPlan>,
}

/// One partition, time-shared by its models in rounds of one duty cycle:
/// each round runs one batch of each model, back to back.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionPlan {
    /// Share of the GPU's compute, percent (a multiple of the GPU's step).
    pub size_pct: u32,
    /// Length of one round, ms.
    pub duty_cycle_ms: f64,
    /// The models sharing it, each at most once.
    pub models: Vec<Assignment>,
}

/// One model's part of a partition's round.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// The model's name.
    pub model: String,
    /// At most this many of its requests per round.
    pub batch: u32,
    /// The part of the model's rate this partition serves, requests/s. A
    /// model split over several partitions has shares summing to its rate.
    pub share_rps: f64,
}

impl Placement {
    /// Every partition of every GPU, with its GPU's index.
    pub fn partitions(&self) -> impl Iterator<Item = (usize, &PartitionPlan)> {
        self.gpus
            .iter()
            .enumerate()
            .flat_map(|(g, gpu)| gpu.partitions.iter().map(move |p| (g, p)))
    }
}
