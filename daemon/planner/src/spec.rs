//! Planner inputs: the models to serve and the GPUs to serve them on, and
//! the checks every planner runs on them, and Algorithm 1's model order.

use crate::PlanError;
use crate::batching::Burst;
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuSpec {
    /// How many.
    pub count: u32,
    /// Memory of each, in MB.
    pub mem_mb: u64,
    /// Partition sizes are multiples of this many percent; it must divide
    /// 100 (MPS takes any percentage; 10 is the gpulet paper's grid).
    pub partition_step_pct: u32,
    /// When set, a partition size must also be one of these (gpulet's
    /// artifact allows 20, 40, 50, 60, 80 and 100 %:
    /// [`PartitionSizes::gpulet`]). `None` allows every multiple of the
    /// step, the behaviour before this field existed.
    pub sizes_pct: Option<PartitionSizes>,
    /// How every planner covers the randomness of arrivals
    /// ([`Burst::Mean`], the papers' rule, by default).
    pub burst: Burst,
}

impl GpuSpec {
    /// `count` GPUs of `mem_mb` MB whose partitions are any multiple of
    /// `partition_step_pct` (no explicit size list).
    pub fn new(count: u32, mem_mb: u64, partition_step_pct: u32) -> Self {
        GpuSpec {
            count,
            mem_mb,
            partition_step_pct,
            sizes_pct: None,
            burst: Burst::Mean,
        }
    }

    /// The same GPUs, planned under `burst`.
    pub fn with_burst(self, burst: Burst) -> Self {
        GpuSpec { burst, ..self }
    }

    /// The same GPUs, with partition sizes limited to `sizes`.
    pub fn with_sizes(self, sizes: PartitionSizes) -> Self {
        GpuSpec {
            sizes_pct: Some(sizes),
            ..self
        }
    }

    /// Whether a partition of `pct` % is allowed: in `1..=100`, a multiple
    /// of the step and, when a size list is set, on it.
    pub fn allows(&self, pct: u32) -> bool {
        (1..=100).contains(&pct)
            && self.partition_step_pct != 0
            && pct % self.partition_step_pct == 0
            && self.sizes_pct.is_none_or(|s| s.contains(pct))
    }

    /// Every allowed size, ascending.
    pub fn allowed_sizes(&self) -> Vec<u32> {
        (1..=100).filter(|&p| self.allows(p)).collect()
    }
}

/// A set of partition sizes in percent of a GPU, each in `1..=100`. `Copy`
/// (a bit set), so [`GpuSpec`] stays `Copy`.
///
/// Integer percentages express MPS's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`
/// exactly. MIG's slices (sevenths of an H100 or A100) are not whole
/// percentages; listing 14, 28, 42, 57 and 100 only approximates them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionSizes(u128);

impl PartitionSizes {
    /// The sizes in `pcts` (any order, repeats ignored); refuses an empty
    /// list and a size outside `1..=100`.
    pub fn new(pcts: &[u32]) -> Result<Self, PlanError> {
        if pcts.is_empty() {
            return Err(PlanError::EmptySizes);
        }
        let mut bits = 0u128;
        for &p in pcts {
            if !(1..=100).contains(&p) {
                return Err(PlanError::SizeOutOfRange { pct: p });
            }
            bits |= 1 << p;
        }
        Ok(PartitionSizes(bits))
    }

    /// The gpulet artifact's sizes, 20, 40, 50, 60, 80 and 100 %
    /// (`resource/SchedConfigs/config-gpulet-int.json` lists 20/40/60/80/100;
    /// its splits also make 50/50, and §5.2's ideal uses 2:8, 4:6, 5:5 and
    /// 10:0).
    pub fn gpulet() -> Self {
        PartitionSizes::new(&[20, 40, 50, 60, 80, 100]).expect("valid sizes")
    }

    /// Whether `pct` is in the set.
    pub fn contains(&self, pct: u32) -> bool {
        pct <= 100 && self.0 & (1 << pct) != 0
    }

    /// The sizes, ascending.
    pub fn to_vec(&self) -> Vec<u32> {
        (1..=100).filter(|&p| self.contains(p)).collect()
    }
}

impl std::fmt::Debug for PartitionSizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.to_vec()).finish()
    }
}

/// Refuses inputs no planner can use: a step that does not divide 100,
/// repeated or empty names, a non-positive or non-finite SLO, a negative or
/// non-finite rate, a model larger than a GPU's memory.
pub fn validate(models: &[ModelSpec], gpus: &GpuSpec) -> Result<(), PlanError> {
    let step = gpus.partition_step_pct;
    if step == 0 || 100 % step != 0 {
        return Err(PlanError::BadStep { step });
    }
    if let Some(sizes) = gpus.sizes_pct
        && gpus.allowed_sizes().is_empty()
    {
        return Err(PlanError::NoAllowedSize {
            sizes: sizes.to_vec(),
            step,
        });
    }
    if !gpus.burst.is_valid() {
        return Err(PlanError::BadBurst { burst: gpus.burst });
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

/// Algorithm 1's model order: ascending `rate × SLO`, ties in input order.
pub(crate) fn order(models: &[ModelSpec]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..models.len()).collect();
    order.sort_by(|&a, &b| {
        let w = |i: usize| models[i].rate_rps * models[i].slo_ms;
        w(a).total_cmp(&w(b)).then(a.cmp(&b))
    });
    order
}

/// The partition sizes a model may be given: listed in its profile and
/// allowed by the GPU ([`GpuSpec::allows`]), ascending.
pub(crate) fn usable_sizes(m: &ModelSpec, gpus: &GpuSpec) -> Result<Vec<u32>, PlanError> {
    let sizes: Vec<u32> = m
        .profile
        .partitions_pct()
        .iter()
        .copied()
        .filter(|&p| gpus.allows(p))
        .collect();
    if sizes.is_empty() {
        if gpus.sizes_pct.is_some() {
            return Err(PlanError::NoAllowedPartition {
                model: m.name.clone(),
                listed: m.profile.partitions_pct().to_vec(),
                allowed: gpus.allowed_sizes(),
            });
        }
        return Err(PlanError::NoUsablePartition {
            model: m.name.clone(),
            listed: m.profile.partitions_pct().to_vec(),
            step: gpus.partition_step_pct,
        });
    }
    Ok(sizes)
}
