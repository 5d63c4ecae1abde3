//! The exhaustive "ideal" scheduler of gpulet §5.2: every combination of
//! per-GPU splits among (2:8), (4:6), (5:5) and (10:0), each filled with
//! elastic partitioning's batch and temporal rules; the first layout that
//! serves every model wins.
//!
//! - Layouts are enumerated as an odometer over the GPUs, GPU 0 the most
//!   significant digit and the last GPU the fastest, each digit running
//!   through [`Ideal::splits`] in order (by default [`PAPER_SPLITS`], the
//!   paper's order). Splits with a size the GPU does not allow are left
//!   out. `splits^count` layouts are searched, at most [`MAX_LAYOUTS`].
//! - A layout is filled like gpulet's Algorithm 1 (`crate::gpulet`): models
//!   in ascending `rate × SLO`, `p_eff`, `p_req`, `p_ideal`, the first free
//!   gpulet of size `≥ p_ideal` in ascending size, the same batch rule and
//!   temporal merging; but nothing is split (the layout is fixed) and, when
//!   no free gpulet of size `≥ p_ideal` takes the model, the largest smaller
//!   free gpulet on which a batch exists serves what it can.
//! - A model error (an SLO no size meets, no usable size) is reported as
//!   such, not as an unschedulable layout.

use crate::gpulet::{Engine, order};
use crate::interference::Interference;
use crate::placement::Placement;
use crate::spec::{GpuSpec, ModelSpec, validate};
use crate::{PlanError, Planner};

/// The paper's per-GPU splits (§5.2), in percent: 2:8, 4:6, 5:5, 10:0.
pub const PAPER_SPLITS: [(u32, u32); 4] = [(20, 80), (40, 60), (50, 50), (100, 0)];

/// The most layouts [`Ideal`] searches: 4^8, the paper's four splits on
/// eight GPUs.
pub const MAX_LAYOUTS: u64 = 65_536;

/// The exhaustive scheduler of gpulet §5.2, optionally with an
/// interference model (`I`).
#[derive(Debug, Clone)]
pub struct Ideal<I = crate::NoInterference> {
    /// The splits each GPU may take, `(a, b)` with `a + b ≤ 100` (a 0 is
    /// no partition); enumeration follows this order.
    pub splits: Vec<(u32, u32)>,
    /// Interference between a GPU's partitions, if any.
    pub interference: Option<I>,
}

impl Default for Ideal {
    fn default() -> Self {
        Ideal {
            splits: PAPER_SPLITS.to_vec(),
            interference: None,
        }
    }
}

impl Ideal {
    /// The paper's ideal: [`PAPER_SPLITS`], no interference.
    pub fn new() -> Self {
        Ideal::default()
    }
}

impl<I> Ideal<I> {
    /// The same search with an interference model.
    pub fn with_interference<J: Interference>(self, interference: J) -> Ideal<J> {
        Ideal {
            splits: self.splits,
            interference: Some(interference),
        }
    }
}

impl<I: Interference> Planner for Ideal<I> {
    fn name(&self) -> &'static str {
        if self.interference.is_some() {
            "ideal+int"
        } else {
            "ideal"
        }
    }

    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        validate(models, gpus)?;
        let splits: Vec<(u32, u32)> = self
            .splits
            .iter()
            .copied()
            .filter(|&(a, b)| {
                a + b <= 100 && a + b > 0 && [a, b].iter().all(|&s| s == 0 || gpus.allows(s))
            })
            .collect();
        if splits.is_empty() {
            return Err(PlanError::SizeNotAllowed {
                planner: self.name(),
                what: format!("a size of one of the splits {:?}", self.splits),
                allowed: gpus.allowed_sizes(),
            });
        }
        let k = splits.len() as u64;
        let layouts = k.checked_pow(gpus.count).filter(|&n| n <= MAX_LAYOUTS);
        let Some(layouts) = layouts else {
            let mut max_gpus = 0u32;
            while k.checked_pow(max_gpus + 1).is_some_and(|n| n <= MAX_LAYOUTS) && k > 1 {
                max_gpus += 1;
            }
            return Err(PlanError::TooManyLayouts {
                planner: self.name(),
                splits: splits.len(),
                gpus: gpus.count,
                limit: MAX_LAYOUTS,
                max_gpus,
            });
        };
        let order = order(models);
        let intf = self.interference.as_ref().map(|i| i as &dyn Interference);
        'layout: for n in 0..layouts {
            let mut e = Engine::new(models, gpus, intf, false);
            let mut digits = vec![0usize; gpus.count as usize];
            let mut rest = n;
            for d in digits.iter_mut().rev() {
                *d = (rest % k) as usize;
                rest /= k;
            }
            for &d in &digits {
                let (a, b) = splits[d];
                e.add_gpu(&[a, b]);
            }
            for &i in &order {
                if models[i].rate_rps == 0.0 {
                    continue;
                }
                if !e.place_model(i)? {
                    continue 'layout;
                }
            }
            return Ok(e.into_placement());
        }
        Err(PlanError::NoViableLayout {
            planner: self.name(),
            gpus: gpus.count,
            layouts,
        })
    }
}
