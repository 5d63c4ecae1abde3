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

use crate::gpulet::Engine;
use crate::interference::Interference;
use crate::placement::Placement;
use crate::spec::{GpuSpec, ModelSpec, order, validate};
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

    /// The search over `splits` instead of the paper's, no interference.
    pub fn with_splits(splits: Vec<(u32, u32)>) -> Self {
        Ideal {
            splits,
            interference: None,
        }
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
            // Here k ≥ 2 (1^count is one layout): the most GPUs whose
            // k^gpus stays within the cap is ⌊log_k MAX_LAYOUTS⌋.
            return Err(PlanError::TooManyLayouts {
                planner: self.name(),
                splits: splits.len(),
                gpus: gpus.count,
                limit: MAX_LAYOUTS,
                max_gpus: MAX_LAYOUTS.ilog(k),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{gpulet_gpus, model};
    use crate::{Gpulet, GreedyBestFit, check, plan_with_scaling};

    /// One batch size; `L(1, p)` for p = 20, 40, 50, 60, 80, 100 is 20,
    /// 10.2, 10.1, 10.05, 10.02, 10 ms, SLO 100 ms: past 40 % more of the
    /// GPU barely helps. Saturated throughput `T = 1000 / L`: 50, 98.04,
    /// 99.01, 99.50, 99.80, 100 rps, so the knee is 40 % (≥ 95).
    fn flat(rate_rps: f64) -> ModelSpec {
        let l = |p: u32| match p {
            20 => 20.0,
            40 => 10.2,
            50 => 10.1,
            60 => 10.05,
            80 => 10.02,
            _ => 10.0,
        };
        model(
            "flat",
            100.0,
            rate_rps,
            1_000,
            &[1],
            &[20, 40, 50, 60, 80, 100],
            move |_, p| l(p),
        )
    }

    #[test]
    fn only_the_ideal_fits_one_gpu() {
        // 198 rps. gpulet: p_eff 40, no size serves 198 → split 40 | 60,
        // 40 % serves 98.04; 99.96 left, served whole only by 100 % → p_ideal
        // 40 → the 60 % serves 99.50; 0.46 left → a second GPU.
        // Greedy: 100 % (100 rps) + 40 % (98) → two GPUs.
        // Ideal, 1 GPU, layouts in order: 2:8 — 80 % serves 99.80, 98.2 left
        // (p_req 50, p_ideal 40), no free gpulet ≥ 40 %, the 20 % serves 50,
        // the rest has nowhere to go; 4:6 — 98.04 + 99.50 < 198; 5:5 — the
        // first 50 % serves 99.01, the second serves the remaining 98.99 by
        // adaptive batching (collect 10.102 ms ≥ L 10.1) → viable.
        let ms = [flat(198.0)];
        let g = gpulet_gpus(1);
        assert_eq!(
            Gpulet.plan(&ms, &g).unwrap_err().to_string(),
            "not schedulable by gpulet: needs 2 GPUs, have 1"
        );
        assert_eq!(
            GreedyBestFit.plan(&ms, &g).unwrap_err().to_string(),
            "not schedulable by greedy-best-fit: needs 2 GPUs, have 1"
        );
        let plan = Ideal::new().plan(&ms, &g).unwrap();
        let sizes: Vec<u32> = plan.partitions().map(|(_, p)| p.size_pct).collect();
        assert_eq!(sizes, [50, 50]);
        check(&plan, &ms, &g).unwrap();
        assert_eq!(Ideal::new().plan(&ms, &g).unwrap(), plan, "deterministic");

        // 250 rps: no layout of one GPU serves it.
        let e = Ideal::new().plan(&[flat(250.0)], &g).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not schedulable by ideal on 1 GPUs: none of its 4 partition layouts serves every model; add GPUs or lower the rates"
        );
    }

    #[test]
    fn caps_the_search_and_skips_disallowed_splits() {
        let e = Ideal::new()
            .plan(&[flat(1.0)], &gpulet_gpus(9))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the ideal planner would search 4^9 partition layouts, over its limit of 65536; give it at most 8 GPUs (or fewer splits), or use the gpulet planner"
        );
        // A 25 % step allows only 50 and 100 of the paper's sizes: 5:5 and
        // 10:0 remain, 2 layouts per GPU.
        let g = crate::GpuSpec::new(1, 16_000, 25);
        let e = Ideal::new().plan(&[flat(250.0)], &g).unwrap_err();
        assert!(
            e.to_string().contains("none of its 2 partition layouts"),
            "{e}"
        );
        let e = Ideal::with_splits(vec![(30, 70)])
            .plan(&[flat(1.0)], &gpulet_gpus(1))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the ideal planner needs a size of one of the splits [(30, 70)], but the GPU allows only [20, 40, 50, 60, 80, 100]%; allow a size of one of the splits [(30, 70)] in GpuSpec::sizes_pct"
        );
    }

    #[test]
    fn scaling_adds_gpus_up_to_the_limit() {
        let ms = [flat(198.0)];
        let g = gpulet_gpus(0);
        // gpulet needs 2: from 1 it tries 1, then 2.
        let (plan, used) = plan_with_scaling(&Gpulet, &ms, &g, 1, 4).unwrap();
        assert_eq!(used, 2);
        check(&plan, &ms, &gpulet_gpus(2)).unwrap();
        // From a previous count of 3 the plan still uses 2: the next period
        // starts there.
        let (_, used) = plan_with_scaling(&Gpulet, &ms, &g, 3, 4).unwrap();
        assert_eq!(used, 2);
        let e = plan_with_scaling(&Gpulet, &ms, &g, 1, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not schedulable by gpulet on up to 1 GPUs (tried 1 to 1); raise the GPU limit or lower the rates"
        );
        // The ideal from 0 GPUs: 0 fails, 1 fits.
        let (plan, used) = plan_with_scaling(&Ideal::new(), &ms, &g, 0, 2).unwrap();
        assert_eq!((used, plan.gpus.len()), (1, 1));
        // An input error is not a lack of GPUs.
        let e = plan_with_scaling(&Gpulet, &[flat(-1.0)], &g, 0, 2).unwrap_err();
        assert!(e.to_string().contains("rate_rps -1"), "{e}");
    }
}
