//! Planner inputs: the models to serve and the GPUs to serve them on, and
//! the checks both planners run on them before planning.

use crate::PlanError;
use crate::table::LatencyTable;

/// One model to serve.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// Unique name; placements refer to the model by it.
    pub name: String,
    /// Latency objective per request, arrival to completion, in ms.
    pub slo_ms: f64,
    /// Arrival rate to serve, requests per second. A rate of 0 places
    /// nothing.
    pub rate_rps: f64,
    /// GPU memory one loaded copy needs, in MB. Every partition that serves
    /// the model holds its own copy.
    pub mem_mb: u64,
    /// Profiled `L(b, p)`, from `sluice profile` (`sluice_gpusim::lbp`) or from
    /// measurement.
    pub profile: LatencyTable,
}

/// The GPUs available; all identical.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuSpec {
    /// How many.
    pub count: u32,
    /// Memory of each, in MB.
    pub mem_mb: u64,
    /// Partition sizes are multiples of this many percent; it must divide
    /// 100 (MPS takes any percentage; 10 is the gpulet paper's grid).
    pub partition_step_pct: u32,
}

/// Refuses inputs no planner can use: a step that does not divide 100,
/// repeated or empty names, a non-positive or non-finite SLO, a negative or
/// non-finite rate, a model larger than a GPU's memory.
pub(crate) fn validate(models: &[ModelSpec], gpus: &GpuSpec) -> Result<(), PlanError> {
    let step = gpus.partition_step_pct;
    if step == 0 || 100 % step != 0 {
        return Err(PlanError::BadStep { step });
    }
    for (i, m) in models.iter().enumerate() {
        if m.name.is_empty() {
            return Err(PlanError::EmptyName { index: i });
        }
        if models[..i].iter().any(|o| o.name == m.name) {
            return Err(PlanError::DuplicateModel {
                model: m.name.clone(),
            });
        }
        if !(m.slo_ms.is_finite() && m.slo_ms > 0.0) {
            return Err(PlanError::BadSlo {
                model: m.name.clone(),
                slo_ms: m.slo_ms,
            });
        }
        if !(m.rate_rps.is_finite() && m.rate_rps >= 0.0) {
            return Err(PlanError::BadRate {
                model: m.name.clone(),
                rate_rps: m.rate_rps,
            });
        }
        if m.rate_rps > 0.0 && m.mem_mb > gpus.mem_mb {
            return Err(PlanError::ModelTooBig {
                model: m.name.clone(),
                mem_mb: m.mem_mb,
                gpu_mem_mb: gpus.mem_mb,
            });
        }
    }
    Ok(())
}

/// The partition sizes a model may be given: listed in its profile and a
/// multiple of the GPU's step, ascending.
pub(crate) fn usable_sizes(m: &ModelSpec, gpus: &GpuSpec) -> Result<Vec<u32>, PlanError> {
    let sizes: Vec<u32> = m
        .profile
        .partitions_pct()
        .iter()
        .copied()
        .filter(|p| p % gpus.partition_step_pct == 0)
        .collect();
    if sizes.is_empty() {
        return Err(PlanError::NoUsablePartition {
            model: m.name.clone(),
            listed: m.profile.partitions_pct().to_vec(),
            step: gpus.partition_step_pct,
        });
    }
    Ok(sizes)
}
