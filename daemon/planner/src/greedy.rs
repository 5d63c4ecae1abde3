//! Greedy best-fit partitioning, the gpulet paper's spatial baseline (§2.3,
//! §5.2): one model per partition, no temporal sharing.
//!
//! Models are taken in Algorithm 1's order, ascending `rate × SLO` (ties in
//! input order). For each, while some of its rate is unplaced:
//!
//! 1. The partition is the smallest usable size (listed in its profile and a
//!    multiple of the GPU's step) on which adaptive batching
//!    (`crate::batching::adaptive`) serves the whole remaining rate within
//!    the SLO, with adaptive batching's batch and duty cycle there.
//! 2. When no size serves it (more than one whole partition's worth), a
//!    partition of the largest usable size runs back to back at its
//!    saturated batch (largest `b` with `2·L(b, p) ≤ SLO`, duty cycle
//!    `L(b, p)`), takes that throughput off the rate, and the loop goes on.
//! 3. Each partition goes best-fit, FINDBESTFIT's sweep (Algorithm 1, lines
//!    14–16): onto the GPU whose free share is the smallest that still holds
//!    it and whose free memory holds one more copy of the model, the lowest
//!    index on a tie; a fresh GPU only when none does.
//!
//! Unlike Algorithm 1, a GPU's free share may be split again by a later
//! partition (MPS takes any percentage), and nothing is merged in time
//! afterwards (line 22 is gpulet's own step, not this baseline's).

use crate::batching::{Batching, EPS, adaptive, saturated, saturated_rps};
use crate::placement::{Assignment, GpuPlan, PartitionPlan, Placement};
use crate::spec::{GpuSpec, ModelSpec, order, usable_sizes, validate};
use crate::{PlanError, Planner};

/// Greedy best-fit partitioning: spatial sharing, one model per partition.
#[derive(Debug, Clone, Copy, Default)]
pub struct GreedyBestFit;

/// Whole partitions one model may take before planning stops with a lower
/// bound on the GPUs needed.
const MAX_CHUNKS: f64 = 1e6;

#[derive(Debug)]
struct Gpu {
    free_pct: u32,
    free_mb: u64,
    plan: GpuPlan,
}

fn place(
    open: &mut Vec<Gpu>,
    spec: &GpuSpec,
    m: &ModelSpec,
    size_pct: u32,
    b: Batching,
    share_rps: f64,
) {
    let fit = open
        .iter()
        .enumerate()
        .filter(|(_, g)| g.free_pct >= size_pct && g.free_mb >= m.mem_mb)
        .min_by_key(|&(i, g)| (g.free_pct, i))
        .map(|(i, _)| i);
    let i = fit.unwrap_or_else(|| {
        open.push(Gpu {
            free_pct: 100,
            free_mb: spec.mem_mb,
            plan: GpuPlan::default(),
        });
        open.len() - 1
    });
    let g = &mut open[i];
    g.free_pct -= size_pct;
    g.free_mb -= m.mem_mb;
    g.plan.partitions.push(PartitionPlan {
        size_pct,
        duty_cycle_ms: b.duty_ms,
        models: vec![Assignment {
            model: m.name.clone(),
            batch: b.batch,
            share_rps,
        }],
    });
}

impl Planner for GreedyBestFit {
    fn name(&self) -> &'static str {
        "greedy-best-fit"
    }

    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        validate(models, gpus)?;
        let mut open = Vec::new();
        for i in order(models) {
            let m = &models[i];
            if m.rate_rps == 0.0 {
                continue;
            }
            let sizes = usable_sizes(m, gpus)?;
            let p_max = *sizes.last().expect("usable_sizes is never empty");
            let sat = saturated(&m.profile, p_max, m.slo_ms)
                .ok_or_else(|| PlanError::slo_unreachable(m, p_max))?;
            let t = saturated_rps(sat, m.slo_ms, gpus.burst);
            // A rate worth more than a million whole partitions, more than
            // the GPUs could hold (at most ⌊100 / p_max⌋ fit one), is refused
            // before the loop builds them.
            let chunks = (m.rate_rps / t).floor();
            let at_least = (chunks / f64::from(100 / p_max)).ceil();
            if chunks > MAX_CHUNKS && at_least > f64::from(gpus.count) {
                return Err(PlanError::NotSchedulable {
                    planner: self.name(),
                    needed: at_least as u64,
                    available: gpus.count,
                });
            }
            let mut rate = m.rate_rps;
            while rate > EPS * m.rate_rps {
                let fit = sizes.iter().find_map(|&p| {
                    adaptive(&m.profile, p, rate, m.slo_ms, gpus.burst).map(|b| (p, b))
                });
                if let Some((p, b)) = fit {
                    place(&mut open, gpus, m, p, b, rate);
                    break;
                }
                place(&mut open, gpus, m, p_max, sat, t);
                rate -= t;
            }
        }
        if open.len() > gpus.count as usize {
            return Err(PlanError::NotSchedulable {
                planner: self.name(),
                needed: open.len() as u64,
                available: gpus.count,
            });
        }
        Ok(Placement {
            gpus: open.into_iter().map(|g| g.plan).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{gpus, model};
    use crate::{Sbp, check};

    const B: &[u32] = &[1, 2, 4, 8, 16, 32];
    const P: &[u32] = &[10, 20, 30, 40, 50, 60, 70, 80, 90, 100];

    /// `L(b, p) = 100·b / p` ms: a batch of `b` takes `b` ms on a whole GPU
    /// and scales perfectly with the partition. Alone at rate `r`, a batch
    /// keeps up (`L ≤ b / r`) exactly when `p ≥ r / 10`.
    fn linear(name: &str, slo_ms: f64, rate_rps: f64) -> ModelSpec {
        model(name, slo_ms, rate_rps, 2_000, B, P, |b, p| {
            100.0 * f64::from(b) / f64::from(p)
        })
    }

    /// `L(b, p) = 40·b / min(p, 40)` ms: more of the GPU helps up to the
    /// knee at 40 %, nothing past it.
    fn knee(name: &str, rate_rps: f64) -> ModelSpec {
        model(name, 40.0, rate_rps, 2_000, B, P, |b, p| {
            40.0 * f64::from(b) / f64::from(p.min(40))
        })
    }

    #[test]
    fn picks_the_knee_partition() {
        // 900 rps, SLO 40. Keeping up needs L(b, p) ≤ b / 900 s = 1.11·b ms:
        // 10 % → 4b, 20 % → 2b, 30 % → 1.33b: too slow for any batch.
        // 40 % → L = b ≤ 1.11b; largest batch with 1.11b + b ≤ 40 is 16
        // (33.8 ms; 32 gives 67.6) → 40 %, batch 16, d = 16 / 900 s = 17.8 ms.
        // Past 40 % nothing improves, so a whole GPU would idle 60 %.
        let ms = [knee("k1", 900.0), knee("k2", 900.0)];
        let plan = GreedyBestFit.plan(&ms, &gpus(1)).unwrap();
        // Both 40 % partitions best-fit onto one GPU (free 100 → 60 → 20).
        assert_eq!(plan.gpus.len(), 1);
        for (_, p) in plan.partitions() {
            assert_eq!((p.size_pct, p.models[0].batch), (40, 16));
            assert!((p.duty_cycle_ms - 16_000.0 / 900.0).abs() < 1e-9);
        }
        let s = check(&plan, &ms, &gpus(1)).unwrap();
        assert_eq!(s.allocated_pct, 80);

        // SBP on the same pair: on 100 %, b_sat = 16 (2·16 ≤ 40), T = 1000
        // rps; each model's residual 900 rps runs batch 16 every 17.8 ms,
        // busy 16 / 17.8 = 0.9, and two of them cannot share a round
        // (busy 1.8) → two GPUs.
        assert_eq!(
            Sbp.plan(&ms, &gpus(1)).unwrap_err().to_string(),
            "not schedulable by sbp: needs 2 GPUs, have 1"
        );
    }

    #[test]
    fn packs_best_fit_not_first_fit() {
        // Order by rate × SLO: a 400·200 = 80 000, b 700·200 = 140 000,
        // c 300·1000 = 300 000. Sizes: p ≥ r / 10 → a 40 %, b 70 %, c 30 %
        // (one step smaller is too slow; the SLOs allow batch 32 on each:
        // a 2.5·32 + 2.5·32 = 160 ≤ 200, b 1.43·32 · 2 = 91 ≤ 200,
        // c 3.33·32 · 2 = 213 ≤ 1000).
        // a → GPU 0 (free 60); b does not fit there → GPU 1 (free 30);
        // c (30) → GPU 1, the smallest free share that holds it; first fit
        // would have taken GPU 0.
        let ms = [
            linear("a", 200.0, 400.0),
            linear("b", 200.0, 700.0),
            linear("c", 1000.0, 300.0),
        ];
        let plan = GreedyBestFit.plan(&ms, &gpus(2)).unwrap();
        let layout: Vec<Vec<(&str, u32)>> = plan
            .gpus
            .iter()
            .map(|g| {
                g.partitions
                    .iter()
                    .map(|p| (p.models[0].model.as_str(), p.size_pct))
                    .collect()
            })
            .collect();
        assert_eq!(layout, [vec![("a", 40)], vec![("b", 70), ("c", 30)]]);
        check(&plan, &ms, &gpus(2)).unwrap();
        assert_eq!(
            GreedyBestFit.plan(&ms, &gpus(2)).unwrap(),
            plan,
            "deterministic"
        );
    }

    #[test]
    fn best_fit_respects_memory() {
        // As above, but c needs 15 GB. GPU 1 (30 % free) and GPU 0 (60 %
        // free) each hold one 2 GB model, 14 GB free of 16: neither holds
        // another 15 GB, so c opens GPU 2.
        let mut ms = [
            linear("a", 200.0, 400.0),
            linear("b", 200.0, 700.0),
            linear("c", 1000.0, 300.0),
        ];
        ms[2].mem_mb = 15_000;
        let plan = GreedyBestFit.plan(&ms, &gpus(3)).unwrap();
        assert_eq!(plan.gpus.len(), 3);
        check(&plan, &ms, &gpus(3)).unwrap();
        let e = GreedyBestFit.plan(&ms, &gpus(2)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not schedulable by greedy-best-fit: needs 3 GPUs, have 2"
        );
    }

    #[test]
    fn heavy_model_spans_several_gpus() {
        // 2500 rps, SLO 200, L(b, 100) = b: b_sat = 32 (2·32 ≤ 200),
        // T = 32 / 32 ms = 1000 rps. No size keeps up with 2500 (needs
        // p ≥ 250 %) → a 100 % partition at 1000 rps; 1500 left, again;
        // 500 left → p ≥ 50: 50 %, collect 2b + run 2b ≤ 200 → batch 32,
        // d = 64 ms.
        let ms = [linear("big", 200.0, 2500.0)];
        let plan = GreedyBestFit.plan(&ms, &gpus(3)).unwrap();
        let sizes: Vec<(usize, u32, u32)> = plan
            .partitions()
            .map(|(g, p)| (g, p.size_pct, p.models[0].batch))
            .collect();
        assert_eq!(sizes, [(0, 100, 32), (1, 100, 32), (2, 50, 32)]);
        let s = check(&plan, &ms, &gpus(3)).unwrap();
        assert!((s.served_rps - 2500.0).abs() < 1e-9);
    }

    #[test]
    fn errors_name_the_model_and_value() {
        let m = model("odd", 40.0, 10.0, 1, B, &[15, 35], |b, _| f64::from(b));
        let e = GreedyBestFit.plan(&[m], &gpus(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "model \"odd\": its profile lists partition sizes [15, 35]%, none a multiple of the GPU's 10% step; profile it at multiples of 10%"
        );
        // On 100 %, L(1, 100) = 1 ms: the SLO must be ≥ 2 ms.
        let e = GreedyBestFit
            .plan(&[linear("fast", 1.5, 10.0)], &gpus(1))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("model \"fast\" cannot meet its SLO of 1.5 ms"),
            "{e}"
        );
        let bad = GpuSpec {
            partition_step_pct: 30,
            ..gpus(1)
        };
        let e = GreedyBestFit
            .plan(&[linear("a", 200.0, 1.0)], &bad)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "partition_step_pct 30 does not divide 100; use a divisor of 100 such as 10, 20, 25 or 50"
        );
        // 1e12 rps at 1000 rps per whole GPU: refused before building 1e9
        // partitions, with the lower bound 1e9 GPUs.
        let e = GreedyBestFit
            .plan(&[linear("huge", 200.0, 1e12)], &gpus(8))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "not schedulable by greedy-best-fit: needs 1000000000 GPUs, have 8"
        );
        let e = Sbp
            .plan(&[linear("huge", 200.0, 1e12)], &gpus(8))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "not schedulable by sbp: needs 1000000000 GPUs, have 8"
        );
        let e = GreedyBestFit
            .plan(
                &[linear("a", 200.0, 1.0), linear("a", 100.0, 1.0)],
                &gpus(1),
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "model name \"a\" appears twice; model names must be unique"
        );
    }
}
