//! Squishy bin packing (Nexus, SOSP '19), the gpulet paper's temporal
//! baseline (§2.2): every partition is a whole GPU, shared in time.
//!
//! 1. Per model, the *saturated* batch `b_sat` is the largest listed batch
//!    with `2·L(b, 100) ≤ SLO`; a GPU running it back to back (duty cycle
//!    `L(b_sat, 100)`) serves `T = b_sat / L(b_sat, 100)`. The model gets
//!    `⌊rate / T⌋` whole GPUs at that batch.
//! 2. The residual rate `r' = rate − n·T`, if any, gets a *node*: adaptive
//!    batching (`crate::batching::adaptive`) on 100 % picks its batch and
//!    duty cycle `b / r'`; its execution occupies `L/d < 1` of the GPU.
//! 3. Nodes merge pairwise (the paper: "compares all eligible pairwise
//!    combinations … until no more pairs can be temporally shared"). Two
//!    nodes merge into one GPU with the shorter duty cycle `d`; every model
//!    in them takes the smallest listed batch that still covers its share in
//!    `d` (never larger than before, since `d` did not grow). The merge is
//!    eligible when the new batches' latencies sum to at most `d`, every
//!    model still has `d + L(b') ≤ SLO`, and the models' memory fits a GPU.
//!    Of all eligible pairs, the one whose merged GPU is busiest (sum of
//!    latencies over `d`) merges first; ties go to the pair earliest in
//!    input order. Repeat until no pair is eligible.

use crate::batching::{EPS, adaptive, covering, le, saturated, saturated_rps};
use crate::placement::{Assignment, GpuPlan, PartitionPlan, Placement};
use crate::spec::{GpuSpec, ModelSpec, validate};
use crate::{PlanError, Planner};

/// Nexus's squishy bin packing: temporal sharing of whole GPUs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sbp;

const WHOLE: u32 = 100;

/// One model's part of a residual node.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Member {
    model: usize,
    batch: u32,
    share_rps: f64,
}

/// Residual loads sharing one GPU in rounds of `duty_ms`.
#[derive(Debug, Clone, PartialEq)]
struct Node {
    duty_ms: f64,
    members: Vec<Member>,
}

fn l100(m: &ModelSpec, batch: u32) -> f64 {
    m.profile
        .latency_ms(batch, WHOLE)
        .expect("validated: the profile lists 100 % and the batch")
}

impl Node {
    fn busy(&self, models: &[ModelSpec]) -> f64 {
        self.members
            .iter()
            .map(|m| l100(&models[m.model], m.batch))
            .sum::<f64>()
            / self.duty_ms
    }
}

/// `a` and `b` on one GPU, or `None` if that breaks a round, an SLO or the
/// GPU's memory.
fn merge(a: &Node, b: &Node, models: &[ModelSpec], gpus: &GpuSpec) -> Option<Node> {
    let d = a.duty_ms.min(b.duty_ms);
    let mut busy = 0.0;
    let mut mem = 0u64;
    let mut members = Vec::with_capacity(a.members.len() + b.members.len());
    for m in a.members.iter().chain(&b.members) {
        let spec = &models[m.model];
        // The old batch covers the share in the shorter cycle under either
        // rule (coverage only grows as the cycle shrinks), so `None` here
        // would be rounding: the pair is then not merged.
        let lat = |b: u32| Some(l100(spec, b));
        let batch = covering(
            spec.profile.batches(),
            m.share_rps,
            d,
            gpus.burst,
            lat,
            spec.slo_ms,
        )?;
        let l = l100(spec, batch);
        if !le(d + l, spec.slo_ms) {
            return None;
        }
        busy += l;
        mem += spec.mem_mb;
        members.push(Member { batch, ..*m });
    }
    if !le(busy, d) || mem > gpus.mem_mb {
        return None;
    }
    members.sort_by_key(|m| m.model);
    Some(Node {
        duty_ms: d,
        members,
    })
}

fn pack(nodes: &mut Vec<Node>, models: &[ModelSpec], gpus: &GpuSpec) {
    loop {
        let mut best: Option<(f64, usize, usize, Node)> = None;
        for i in 0..nodes.len() {
            for j in i + 1..nodes.len() {
                if let Some(n) = merge(&nodes[i], &nodes[j], models, gpus) {
                    let busy = n.busy(models);
                    if best.as_ref().is_none_or(|b| busy > b.0) {
                        best = Some((busy, i, j, n));
                    }
                }
            }
        }
        let Some((_, i, j, n)) = best else {
            return;
        };
        nodes[i] = n;
        nodes.remove(j);
    }
}

fn partition(duty_ms: f64, members: impl IntoIterator<Item = Assignment>) -> GpuPlan {
    GpuPlan {
        partitions: vec![PartitionPlan {
            size_pct: WHOLE,
            duty_cycle_ms: duty_ms,
            models: members.into_iter().collect(),
        }],
    }
}

impl Planner for Sbp {
    fn name(&self) -> &'static str {
        "sbp"
    }

    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        validate(models, gpus)?;
        if !gpus.allows(WHOLE) && models.iter().any(|m| m.rate_rps > 0.0) {
            return Err(PlanError::SizeNotAllowed {
                planner: self.name(),
                what: "whole-GPU partitions (100%)".to_owned(),
                allowed: gpus.allowed_sizes(),
            });
        }
        // (model, whole GPUs, saturated batch, its duty cycle, its throughput)
        let mut whole = Vec::new();
        let mut nodes = Vec::new();
        for (i, m) in models.iter().enumerate() {
            if m.rate_rps == 0.0 {
                continue;
            }
            if !m.profile.partitions_pct().contains(&WHOLE) {
                return Err(PlanError::MissingPartition {
                    planner: self.name(),
                    model: m.name.clone(),
                    pct: WHOLE,
                });
            }
            let sat = saturated(&m.profile, WHOLE, m.slo_ms)
                .ok_or_else(|| PlanError::slo_unreachable(m, WHOLE))?;
            let t = saturated_rps(sat, m.slo_ms, gpus.burst);
            let n = (m.rate_rps / t).floor();
            let residual = m.rate_rps - n * t;
            if n > 0.0 {
                whole.push((i, n as u64, sat, t));
            }
            if residual > EPS * m.rate_rps {
                let a = adaptive(&m.profile, WHOLE, residual, m.slo_ms, gpus.burst)
                    .expect("the saturated batch serves any residual below its throughput");
                nodes.push(Node {
                    duty_ms: a.duty_ms,
                    members: vec![Member {
                        model: i,
                        batch: a.batch,
                        share_rps: residual,
                    }],
                });
            }
        }
        pack(&mut nodes, models, gpus);
        let needed = whole
            .iter()
            .fold(nodes.len() as u64, |acc, w| acc.saturating_add(w.1));
        if needed > u64::from(gpus.count) {
            return Err(PlanError::NotSchedulable {
                planner: self.name(),
                needed,
                available: gpus.count,
            });
        }
        let mut plan = Placement::default();
        for (i, n, sat, t) in whole {
            for _ in 0..n {
                plan.gpus.push(partition(
                    sat.duty_ms,
                    [Assignment {
                        model: models[i].name.clone(),
                        batch: sat.batch,
                        share_rps: t,
                    }],
                ));
            }
        }
        for node in nodes {
            plan.gpus.push(partition(
                node.duty_ms,
                node.members.iter().map(|m| Assignment {
                    model: models[m.model].name.clone(),
                    batch: m.batch,
                    share_rps: m.share_rps,
                }),
            ));
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batching::Burst;
    use crate::check;
    use crate::testutil::{gpus, model};

    const B: &[u32] = &[1, 2, 4, 8, 16, 32];

    /// `L(b, 100) = 1 + b/2` ms: 1.5, 2, 3, 5, 9, 17.
    fn light(name: &str, slo_ms: f64, rate_rps: f64) -> ModelSpec {
        model(name, slo_ms, rate_rps, 2_000, B, &[100], |b, _| {
            1.0 + f64::from(b) / 2.0
        })
    }

    #[test]
    fn under_the_burst_rule_a_merge_takes_batches_that_cover_bursts() {
        // L(b, 100) = b + 1 ms, SLO 20; a at 200 rps, b at 20 rps.
        let t = |name: &str, rate: f64| {
            model(name, 20.0, rate, 2_000, B, &[100], |b, _| {
                f64::from(b) + 1.0
            })
        };
        let ms = [t("a", 200.0), t("b", 20.0)];
        // Mean rule: a (2 every 10 ms, Nexus) and b (1 every 18 ms, rule 2)
        // merge at d = 10 with batches 2 and 1: busy 3 + 2 ≤ 10, one GPU.
        let mean = Sbp.plan(&ms, &gpus(2)).unwrap();
        assert_eq!(mean.gpus.len(), 1);
        // Under the rule (1 % overflow) a takes 4 every 7.5 ms (k = 2
        // rounds of 4 against Poisson(3)). At d = 7.5 b's batch of 1
        // (k = 2 rounds, 2 requests, Poisson(0.3): 1.3 % overflow) does not
        // cover, 2 does; 5 + 3 > 7.5, so no merge: two GPUs. A merge that
        // took the mean's covering batch (1: 5 + 2 ≤ 7.5) would fail check.
        let g = gpus(2).with_burst(Burst::Poisson(0.01));
        let plan = Sbp.plan(&ms, &g).unwrap();
        check(&plan, &ms, &g).unwrap();
        assert_eq!(plan.gpus.len(), 2, "{plan:?}");
        assert!(!Burst::Poisson(0.01).covers(1, 20.0, 7.5, 2.0, 20.0));
        assert!(Burst::Poisson(0.01).covers(2, 20.0, 7.5, 3.0, 20.0));
    }

    #[test]
    fn merges_two_light_models_when_slos_allow() {
        // a: 200 rps, SLO 40. Saturated: 2·L(32) = 34 ≤ 40 → b_sat 32,
        //    T = 32 / 17 ms = 1882 rps > 200, so no whole GPU.
        //    Residual: b = 32 collects in 160 ms (> 40); b = 16: 80 ms;
        //    b = 8: 40 + 5 = 45 > 40; b = 4: 20 + 3 = 23 ≤ 40, L = 3 ≤ 20
        //    → node (b 4, d 20 ms), busy 3/20.
        // b: 100 rps, SLO 40. b = 4: 40 + 3 > 40; b = 2: 20 + 2 = 22 ≤ 40
        //    → node (b 2, d 20 ms), busy 2/20.
        // Merge: d = min(20, 20) = 20; a keeps 4 (4 per 20 ms = 200 rps),
        //    b keeps 2; busy 3 + 2 = 5 ≤ 20; latencies 20 + 3 = 23 and
        //    20 + 2 = 22 ≤ 40 → one GPU.
        let ms = [light("a", 40.0, 200.0), light("b", 40.0, 100.0)];
        let plan = Sbp.plan(&ms, &gpus(1)).unwrap();
        assert_eq!(plan.gpus.len(), 1);
        let p = &plan.gpus[0].partitions[0];
        assert_eq!((p.size_pct, p.duty_cycle_ms), (100, 20.0));
        let got: Vec<_> = p
            .models
            .iter()
            .map(|a| (a.model.as_str(), a.batch))
            .collect();
        assert_eq!(got, [("a", 4), ("b", 2)]);
        check(&plan, &ms, &gpus(1)).unwrap();
    }

    #[test]
    fn merge_shrinks_the_longer_cycles_batch() {
        // a: 200 rps, SLO 40 → (b 4, d 20) as above.
        // c: 100 rps, SLO 100: b = 8 collects in 80 ms, 80 + 5 = 85 ≤ 100
        //    → (b 8, d 80).
        // Merged d = 20: c needs ≥ 100 · 20 / 1000 = 2 per round → b 2
        //    (L 2); busy 3 + 2 = 5 ≤ 20; 20 + 2 = 22 ≤ 100.
        let ms = [light("a", 40.0, 200.0), light("c", 100.0, 100.0)];
        let plan = Sbp.plan(&ms, &gpus(1)).unwrap();
        let p = &plan.gpus[0].partitions[0];
        assert_eq!(p.duty_cycle_ms, 20.0);
        assert_eq!(p.models[1].batch, 2);
        check(&plan, &ms, &gpus(1)).unwrap();
    }

    #[test]
    fn merges_only_when_the_slos_leave_room_in_the_round() {
        // Two models with L(b) = 2 + b ms: 3, 4, 6, 10, 18, 34; SLO 20,
        // 400 rps each. Saturated: 2·L(8) = 20 ≤ 20 → b_sat 8,
        // T = 8 / 10 ms = 800 rps > 400. Residual 400 rps: b = 8 collects
        // in 20 ms (+ 10 > 20); b = 4: 10 + 6 = 16 ≤ 20, L 6 ≤ 10
        // → (b 4, d 10), busy 0.6 each.
        // Merge: d = 10, batches stay 4 (4 per 10 ms = 400 rps), busy
        // 6 + 6 = 12 > 10: the round overruns; no smaller batch covers 400
        // rps in 10 ms, so the pair stays apart → 2 GPUs.
        let heavy = |n: &str| model(n, 20.0, 400.0, 2_000, B, &[100], |b, _| 2.0 + f64::from(b));
        let ms = [heavy("x"), heavy("y")];
        let plan = Sbp.plan(&ms, &gpus(2)).unwrap();
        assert_eq!(plan.gpus.len(), 2);
        check(&plan, &ms, &gpus(2)).unwrap();
        let e = Sbp.plan(&ms, &gpus(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not schedulable by sbp: needs 2 GPUs, have 1"
        );

        // The same pair under SLO 40: b_sat: 2·L(16) = 36 ≤ 40 → 16,
        // T = 16 / 18 ms = 889 rps > 400. Residual: b = 16 collects in 40 ms
        // (+ 18 > 40); b = 8: 20 + 10 = 30 ≤ 40, L 10 ≤ 20 → (b 8, d 20),
        // busy 0.5 each. Merge: d = 20, batches stay 8, busy 10 + 10 = 20
        // ≤ 20, latencies 20 + 10 = 30 ≤ 40 → one GPU, fully busy.
        let loose = |n: &str| model(n, 40.0, 400.0, 2_000, B, &[100], |b, _| 2.0 + f64::from(b));
        let ms = [loose("x"), loose("y")];
        let plan = Sbp.plan(&ms, &gpus(1)).unwrap();
        assert_eq!(plan.gpus.len(), 1);
        assert_eq!(plan.gpus[0].partitions[0].duty_cycle_ms, 20.0);
        let s = check(&plan, &ms, &gpus(1)).unwrap();
        assert!((s.busy_gpus - 1.0).abs() < 1e-12);
    }

    #[test]
    fn does_not_merge_past_memory() {
        // The mergeable pair of the first test, at 9 GB each on 16 GB GPUs.
        let mut ms = [light("a", 40.0, 200.0), light("b", 40.0, 100.0)];
        for m in &mut ms {
            m.mem_mb = 9_000;
        }
        let plan = Sbp.plan(&ms, &gpus(2)).unwrap();
        assert_eq!(plan.gpus.len(), 2);
        check(&plan, &ms, &gpus(2)).unwrap();
    }

    #[test]
    fn heavy_model_spans_whole_gpus_plus_a_residual() {
        // L(b) = 1 + b/2, SLO 40, 5000 rps: b_sat 32, T = 32/17 ms =
        // 1882.35 rps; ⌊5000 / 1882.35⌋ = 2 whole GPUs (3764.7 rps), residual
        // 1235.3 rps: b = 32 collects in 25.9 ms + 17 = 42.9 > 40; b = 16:
        // 12.95 ms, L 9 ≤ 12.95, 12.95 + 9 = 21.95 ≤ 40 → (16, 12.95 ms).
        let ms = [light("big", 40.0, 5000.0)];
        let plan = Sbp.plan(&ms, &gpus(4)).unwrap();
        assert_eq!(plan.gpus.len(), 3);
        let batches: Vec<u32> = plan.partitions().map(|(_, p)| p.models[0].batch).collect();
        assert_eq!(batches, [32, 32, 16]);
        let s = check(&plan, &ms, &gpus(4)).unwrap();
        assert!((s.served_rps - 5000.0).abs() < 1e-6);
    }

    #[test]
    fn errors_name_the_model_and_value() {
        // L(1) = 1.5 ms, so the SLO must be at least 3 ms.
        let e = Sbp.plan(&[light("tiny", 2.5, 10.0)], &gpus(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "model \"tiny\" cannot meet its SLO of 2.5 ms: on 100% of a GPU its smallest batch (1) runs 1.5 ms, and a request may wait one duty cycle (at least one execution) before its own execution, so the SLO must be at least 3 ms; raise the SLO or profile a faster partition"
        );
        let m = model("half", 40.0, 10.0, 1, B, &[50], |b, _| f64::from(b));
        let e = Sbp.plan(&[m], &gpus(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "model \"half\": the sbp planner needs L(b, 100%) but the profile does not list 100%; profile it there"
        );
        let mut big = light("fat", 40.0, 10.0);
        big.mem_mb = 20_000;
        let e = Sbp.plan(&[big], &gpus(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "model \"fat\" needs 20000 MB but a GPU has 16000 MB; it cannot be placed on these GPUs"
        );
        let e = Sbp.plan(&[light("r", 40.0, -1.0)], &gpus(1)).unwrap_err();
        assert!(e.to_string().contains("rate_rps -1"), "{e}");
    }

    #[test]
    fn zero_rate_models_take_nothing() {
        let ms = [light("idle", 40.0, 0.0)];
        let plan = Sbp.plan(&ms, &gpus(0)).unwrap();
        assert!(plan.gpus.is_empty());
        check(&plan, &ms, &gpus(0)).unwrap();
    }
}
