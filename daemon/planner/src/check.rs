//! An independent check of a [`Placement`] against its inputs.
//!
//! It trusts nothing the planner computed: latencies are looked up again in
//! each model's profile, capacities and round lengths recomputed. Rates and
//! times are compared with a relative slack of 1e-9 for rounding.

use std::collections::HashMap;

use crate::batching::{Burst, capacity_rps, le};
use crate::interference::{Interference, combined};
use crate::placement::{GpuPlan, Placement};
use crate::spec::{GpuSpec, ModelSpec};

/// Totals of a placement that passed [`check`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// GPUs used.
    pub gpus: usize,
    /// Partitions over all GPUs.
    pub partitions: usize,
    /// Sum of partition sizes, percent of one GPU (200 = two whole GPUs).
    pub allocated_pct: u64,
    /// GPU time spent executing, in whole GPUs: each partition's size times
    /// the busy fraction of its round (sum of its batches' latencies over
    /// its duty cycle).
    pub busy_gpus: f64,
    /// Requests per second served over all models.
    pub served_rps: f64,
}

/// The first rule a placement breaks. Partitions are named `gpu G
/// partition P`, both counted from 0.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Violation {
    /// The GPU spec's step is unusable.
    #[error("partition_step_pct {step} does not divide 100")]
    BadStep {
        /// The step.
        step: u32,
    },
    /// More GPUs than available.
    #[error("the placement uses {used} GPUs but only {available} are available")]
    TooManyGpus {
        /// GPUs in the placement.
        used: usize,
        /// `GpuSpec::count`.
        available: u32,
    },
    /// A partition size that is 0, above 100 or off the step grid.
    #[error(
        "gpu {gpu} partition {partition} has size {size_pct}%, not a multiple of {step}% in 1..=100"
    )]
    BadSize {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// Its size.
        size_pct: u32,
        /// The GPU's step.
        step: u32,
    },
    /// A partition size not on the GPU's size list.
    #[error(
        "gpu {gpu} partition {partition} has size {size_pct}%, not one of the GPU's allowed sizes {allowed:?}%"
    )]
    DisallowedSize {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// Its size.
        size_pct: u32,
        /// The allowed sizes.
        allowed: Vec<u32>,
    },
    /// Partition sizes on one GPU over 100 %.
    #[error("gpu {gpu} has partitions summing to {sum_pct}% (over 100%)")]
    GpuOverfull {
        /// GPU index.
        gpu: usize,
        /// Sum of its partition sizes.
        sum_pct: u64,
    },
    /// A duty cycle that is not a positive finite time.
    #[error("gpu {gpu} partition {partition} has duty cycle {duty_ms} ms")]
    BadDutyCycle {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// The value.
        duty_ms: f64,
    },
    /// An assignment naming no input model.
    #[error("gpu {gpu} partition {partition} serves {model:?}, which is not an input model")]
    UnknownModel {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// The name.
        model: String,
    },
    /// A model assigned twice within one partition.
    #[error("gpu {gpu} partition {partition} lists {model:?} twice")]
    DuplicateInPartition {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// The model.
        model: String,
    },
    /// A share that is negative or not finite.
    #[error("gpu {gpu} partition {partition} gives {model:?} share {share_rps} rps")]
    BadShare {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// The model.
        model: String,
        /// The share.
        share_rps: f64,
    },
    /// A (batch, size) point missing from the model's profile.
    #[error(
        "gpu {gpu} partition {partition} runs {model:?} at batch {batch} on {size_pct}%, a point its profile does not list"
    )]
    Unprofiled {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// The model.
        model: String,
        /// Batch size.
        batch: u32,
        /// Partition size.
        size_pct: u32,
    },
    /// A batch per round that does not cover the share.
    #[error(
        "gpu {gpu} partition {partition}: {model:?} at batch {batch} every {duty_ms} ms serves {capacity_rps} rps, below its share {share_rps} rps"
    )]
    Capacity {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// The model.
        model: String,
        /// Batch size.
        batch: u32,
        /// Duty cycle.
        duty_ms: f64,
        /// `batch / duty`.
        capacity_rps: f64,
        /// The share to serve.
        share_rps: f64,
    },
    /// Under a [`Burst::Poisson`] rule, rounds whose batches leave more
    /// than the rule's share of the share's Poisson arrivals over.
    #[error(
        "gpu {gpu} partition {partition}: {model:?} at batch {batch} every {duty_ms} ms ({latency_ms} ms each) leaves more than {max_overflow} of its share's {share_rps} rps of Poisson arrivals over (the rule allows at most {covered_rps} rps here)"
    )]
    Burst {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// The model.
        model: String,
        /// Batch size.
        batch: u32,
        /// Duty cycle.
        duty_ms: f64,
        /// `L(batch, size)`, with interference if checked with it.
        latency_ms: f64,
        /// The share to serve.
        share_rps: f64,
        /// The rate the round covers under the rule.
        covered_rps: f64,
        /// The rule's largest overflow share.
        max_overflow: f64,
    },
    /// Batches that do not fit one round.
    #[error(
        "gpu {gpu} partition {partition}: its batches run {busy_ms} ms per round, longer than the {duty_ms} ms duty cycle"
    )]
    RoundOverrun {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// Sum of the batches' latencies.
        busy_ms: f64,
        /// Duty cycle.
        duty_ms: f64,
    },
    /// Worst-case latency over the SLO.
    #[error(
        "gpu {gpu} partition {partition}: {model:?} waits up to {latency_ms} ms (duty cycle + its execution), over its SLO of {slo_ms} ms"
    )]
    SloMissed {
        /// GPU index.
        gpu: usize,
        /// Partition index.
        partition: usize,
        /// The model.
        model: String,
        /// Duty cycle plus `L(batch, size)`.
        latency_ms: f64,
        /// The SLO.
        slo_ms: f64,
    },
    /// Model copies over a GPU's memory.
    #[error("gpu {gpu} holds {used_mb} MB of models, over its {mem_mb} MB")]
    Memory {
        /// GPU index.
        gpu: usize,
        /// One copy per partition serving a model.
        used_mb: u64,
        /// One GPU's memory.
        mem_mb: u64,
    },
    /// A model's shares short of its rate.
    #[error("{model:?} is served {served_rps} rps of its {rate_rps} rps")]
    Underserved {
        /// The model.
        model: String,
        /// Sum of its shares.
        served_rps: f64,
        /// Its rate.
        rate_rps: f64,
    },
}

/// Verifies that `placement` serves `models` on `gpus`: every model's rate
/// fully served; each assignment's batch per duty cycle covers its share (and, under a
/// [`Burst::Poisson`] rule, its Poisson arrivals up to the rule's share);
/// each partition's batches fit its duty cycle; each model's worst-case
/// latency (duty cycle + its own execution) within its SLO; partition sizes
/// on the step grid and summing to at most 100 per GPU; one copy of a model
/// per partition serving it, within each GPU's memory; at most `gpus.count`
/// GPUs.
pub fn check(
    placement: &Placement,
    models: &[ModelSpec],
    gpus: &GpuSpec,
) -> Result<Stats, Violation> {
    check_inner(placement, models, gpus, None)
}

/// [`check`] with every latency `L(b, p)` multiplied by its interference
/// factor: the largest factor `intf` gives the model against any model in
/// another partition of the same GPU, at least 1 (`docs/planners.md`,
/// "Interference"). A placement that passes this passes [`check`].
pub fn check_with_interference(
    placement: &Placement,
    models: &[ModelSpec],
    gpus: &GpuSpec,
    intf: &dyn Interference,
) -> Result<Stats, Violation> {
    check_inner(placement, models, gpus, Some(intf))
}

fn check_inner(
    placement: &Placement,
    models: &[ModelSpec],
    gpus: &GpuSpec,
    intf: Option<&dyn Interference>,
) -> Result<Stats, Violation> {
    let step = gpus.partition_step_pct;
    if step == 0 || 100 % step != 0 {
        return Err(Violation::BadStep { step });
    }
    if placement.gpus.len() > gpus.count as usize {
        return Err(Violation::TooManyGpus {
            used: placement.gpus.len(),
            available: gpus.count,
        });
    }
    let by_name: HashMap<&str, &ModelSpec> = models.iter().map(|m| (m.name.as_str(), m)).collect();
    let mut served: HashMap<&str, f64> = HashMap::new();
    let mut stats = Stats {
        gpus: placement.gpus.len(),
        partitions: 0,
        allocated_pct: 0,
        busy_gpus: 0.0,
        served_rps: 0.0,
    };
    for (g, gpu) in placement.gpus.iter().enumerate() {
        let mut sum_pct = 0u64;
        let mut mem = 0u64;
        for (p, part) in gpu.partitions.iter().enumerate() {
            let size = part.size_pct;
            if size == 0 || size > 100 || size % step != 0 {
                return Err(Violation::BadSize {
                    gpu: g,
                    partition: p,
                    size_pct: size,
                    step,
                });
            }
            if !gpus.allows(size) {
                return Err(Violation::DisallowedSize {
                    gpu: g,
                    partition: p,
                    size_pct: size,
                    allowed: gpus.allowed_sizes(),
                });
            }
            sum_pct += u64::from(size);
            let d = part.duty_cycle_ms;
            if !(d.is_finite() && d > 0.0) {
                return Err(Violation::BadDutyCycle {
                    gpu: g,
                    partition: p,
                    duty_ms: d,
                });
            }
            let mut busy = 0.0;
            for (k, a) in part.models.iter().enumerate() {
                let Some(m) = by_name.get(a.model.as_str()) else {
                    return Err(Violation::UnknownModel {
                        gpu: g,
                        partition: p,
                        model: a.model.clone(),
                    });
                };
                if part.models[..k].iter().any(|o| o.model == a.model) {
                    return Err(Violation::DuplicateInPartition {
                        gpu: g,
                        partition: p,
                        model: a.model.clone(),
                    });
                }
                if !(a.share_rps.is_finite() && a.share_rps >= 0.0) {
                    return Err(Violation::BadShare {
                        gpu: g,
                        partition: p,
                        model: a.model.clone(),
                        share_rps: a.share_rps,
                    });
                }
                let Some(alone) = m.profile.latency_ms(a.batch, size) else {
                    return Err(Violation::Unprofiled {
                        gpu: g,
                        partition: p,
                        model: a.model.clone(),
                        batch: a.batch,
                        size_pct: size,
                    });
                };
                let l = intf.map_or(alone, |intf| {
                    alone * combined(intf, &m.name, a.batch, size, co_runners(gpu, p))
                });
                let cap = capacity_rps(a.batch, d);
                if !le(a.share_rps, cap) {
                    return Err(Violation::Capacity {
                        gpu: g,
                        partition: p,
                        model: a.model.clone(),
                        batch: a.batch,
                        duty_ms: d,
                        capacity_rps: cap,
                        share_rps: a.share_rps,
                    });
                }
                if let Burst::Poisson(eps) = gpus.burst
                    && le(d + l, m.slo_ms)
                    && !gpus.burst.covers(a.batch, a.share_rps, d, l, m.slo_ms)
                {
                    return Err(Violation::Burst {
                        gpu: g,
                        partition: p,
                        model: a.model.clone(),
                        batch: a.batch,
                        duty_ms: d,
                        latency_ms: l,
                        share_rps: a.share_rps,
                        covered_rps: gpus.burst.served_rps(a.batch, d, l, m.slo_ms),
                        max_overflow: eps,
                    });
                }
                if !le(d + l, m.slo_ms) {
                    return Err(Violation::SloMissed {
                        gpu: g,
                        partition: p,
                        model: a.model.clone(),
                        latency_ms: d + l,
                        slo_ms: m.slo_ms,
                    });
                }
                busy += l;
                mem += m.mem_mb;
                *served.entry(m.name.as_str()).or_default() += a.share_rps;
                stats.served_rps += a.share_rps;
            }
            if !le(busy, d) {
                return Err(Violation::RoundOverrun {
                    gpu: g,
                    partition: p,
                    busy_ms: busy,
                    duty_ms: d,
                });
            }
            stats.partitions += 1;
            stats.busy_gpus += f64::from(size) / 100.0 * busy / d;
        }
        if sum_pct > 100 {
            return Err(Violation::GpuOverfull { gpu: g, sum_pct });
        }
        if mem > gpus.mem_mb {
            return Err(Violation::Memory {
                gpu: g,
                used_mb: mem,
                mem_mb: gpus.mem_mb,
            });
        }
        stats.allocated_pct += sum_pct;
    }
    for m in models {
        let s = served.get(m.name.as_str()).copied().unwrap_or(0.0);
        if !le(m.rate_rps, s) {
            return Err(Violation::Underserved {
                model: m.name.clone(),
                served_rps: s,
                rate_rps: m.rate_rps,
            });
        }
    }
    Ok(stats)
}

/// Every model in the partitions of `gpu` other than `p`, as
/// `(name, batch, size)`.
/// Every assignment's interference factor in `placement`, indexed
/// `[gpu][partition][assignment]`: the one [`check_with_interference`]
/// applies (the largest pairwise factor against the models in the GPU's
/// other partitions, at least 1). For serving a placement with the same
/// interference the planner assumed.
pub fn interference_factors(placement: &Placement, intf: &dyn Interference) -> Vec<Vec<Vec<f64>>> {
    placement
        .gpus
        .iter()
        .map(|gpu| {
            gpu.partitions
                .iter()
                .enumerate()
                .map(|(p, part)| {
                    part.models
                        .iter()
                        .map(|a| {
                            combined(intf, &a.model, a.batch, part.size_pct, co_runners(gpu, p))
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

fn co_runners(gpu: &GpuPlan, p: usize) -> impl Iterator<Item = (&str, u32, u32)> {
    gpu.partitions
        .iter()
        .enumerate()
        .filter(move |&(q, _)| q != p)
        .flat_map(|(_, o)| {
            o.models
                .iter()
                .map(move |x| (x.model.as_str(), x.batch, o.size_pct))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Planner;
    use crate::placement::{Assignment, GpuPlan, PartitionPlan};
    use crate::testutil::{gpus, model};

    fn one(size_pct: u32, duty: f64, models: &[(&str, u32, f64)]) -> Placement {
        Placement {
            gpus: vec![GpuPlan {
                partitions: vec![PartitionPlan {
                    size_pct,
                    duty_cycle_ms: duty,
                    models: models
                        .iter()
                        .map(|&(m, b, s)| Assignment {
                            model: m.to_owned(),
                            batch: b,
                            share_rps: s,
                        })
                        .collect(),
                }],
            }],
        }
    }

    #[test]
    fn catches_each_rule() {
        // L(b, p) = b · 100 / p ms: L(4, 100) = 4, L(4, 50) = 8.
        let a = model("a", 30.0, 400.0, 6_000, &[1, 2, 4], &[50, 100], |b, p| {
            f64::from(b) * 100.0 / f64::from(p)
        });
        let ms = [a];
        let g = gpus(1);
        // 4 per 10 ms = 400 rps; busy 4 ≤ 10; latency 10 + 4 = 14 ≤ 30.
        let s = check(&one(100, 10.0, &[("a", 4, 400.0)]), &ms, &g).unwrap();
        assert_eq!((s.gpus, s.partitions, s.allocated_pct), (1, 1, 100));
        assert!((s.busy_gpus - 0.4).abs() < 1e-12);
        let e = check(&one(100, 10.0, &[("a", 4, 300.0)]), &ms, &g).unwrap_err();
        assert!(matches!(e, Violation::Underserved { .. }), "{e}");
        let e = check(&one(100, 12.0, &[("a", 4, 400.0)]), &ms, &g).unwrap_err();
        assert!(matches!(e, Violation::Capacity { .. }), "{e}");
        // 4 per 2 ms on 100 %: execution 4 ms > the 2 ms round.
        let e = check(&one(100, 2.0, &[("a", 4, 400.0)]), &ms, &g).unwrap_err();
        assert!(matches!(e, Violation::RoundOverrun { .. }), "{e}");
        // Batch 4 every 25 ms on 50 %: 25 + L(4, 50) = 25 + 8 = 33 > 30.
        let e = check(&one(50, 25.0, &[("a", 4, 160.0)]), &ms, &g).unwrap_err();
        assert!(matches!(e, Violation::SloMissed { .. }), "{e}");
        let e = check(&one(100, 10.0, &[("a", 3, 300.0)]), &ms, &g).unwrap_err();
        assert!(matches!(e, Violation::Unprofiled { batch: 3, .. }), "{e}");
        // Under a Poisson rule the first plan (a mean of 4 per round,
        // k = ⌊(30 − 4) / 10⌋ = 2 rounds: 8 requests, Poisson(8), 0.140 of
        // them overflow) does not cover its bursts; 4 every 10 ms at 200 rps
        // does (Poisson(4) over 8: 0.0084 ≤ 0.05).
        let poisson = g.with_burst(Burst::Poisson(0.05));
        let e = check(&one(100, 10.0, &[("a", 4, 400.0)]), &ms, &poisson).unwrap_err();
        assert!(
            matches!(
                e,
                Violation::Burst {
                    batch: 4,
                    max_overflow: 0.05,
                    ..
                }
            ),
            "{e}"
        );
        let half = model("a", 30.0, 200.0, 6_000, &[1, 2, 4], &[50, 100], |b, p| {
            f64::from(b) * 100.0 / f64::from(p)
        });
        check(&one(100, 10.0, &[("a", 4, 200.0)]), &[half], &poisson).unwrap();
        let e = check(&one(30, 10.0, &[]), &ms, &g).unwrap_err();
        assert!(matches!(e, Violation::Underserved { .. }), "{e}");
        let e = check(&one(35, 10.0, &[]), &ms, &g).unwrap_err();
        assert!(matches!(e, Violation::BadSize { size_pct: 35, .. }), "{e}");
        let e = check(&one(100, 10.0, &[("b", 4, 400.0)]), &ms, &g).unwrap_err();
        assert!(matches!(e, Violation::UnknownModel { .. }), "{e}");
        let e = check(
            &one(100, 10.0, &[("a", 4, 200.0), ("a", 4, 200.0)]),
            &ms,
            &g,
        )
        .unwrap_err();
        assert!(matches!(e, Violation::DuplicateInPartition { .. }), "{e}");
        let e = check(&one(100, 10.0, &[("a", 4, 400.0)]), &ms, &gpus(0)).unwrap_err();
        assert!(
            matches!(
                e,
                Violation::TooManyGpus {
                    used: 1,
                    available: 0
                }
            ),
            "{e}"
        );

        // Two 50 % partitions each holding a copy: 12 GB on a 16 GB GPU.
        let mut two = one(50, 10.0, &[("a", 2, 200.0)]);
        let p = two.gpus[0].partitions[0].clone();
        two.gpus[0].partitions.push(p.clone());
        check(&two, &ms, &g).unwrap();
        let small = GpuSpec {
            mem_mb: 10_000,
            ..g
        };
        let e = check(&two, &ms, &small).unwrap_err();
        assert_eq!(
            e,
            Violation::Memory {
                gpu: 0,
                used_mb: 12_000,
                mem_mb: 10_000
            }
        );
        two.gpus[0].partitions.push(p);
        let e = check(&two, &ms, &g).unwrap_err();
        assert_eq!(
            e,
            Violation::GpuOverfull {
                gpu: 0,
                sum_pct: 150
            }
        );

        // gpulet's sizes: 30 % is on the 10 % grid but not on the list.
        let listed = crate::testutil::gpulet_gpus(1);
        let e = check(&one(30, 10.0, &[]), &ms, &listed).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gpu 0 partition 0 has size 30%, not one of the GPU's allowed sizes [20, 40, 50, 60, 80, 100]%"
        );
        let e = crate::Sbp
            .plan(
                &ms,
                &GpuSpec::new(1, 16_000, 10).with_sizes(crate::PartitionSizes::new(&[50]).unwrap()),
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the sbp planner needs whole-GPU partitions (100%), but the GPU allows only [50]%; allow whole-GPU partitions (100%) in GpuSpec::sizes_pct"
        );
        assert_eq!(
            crate::PartitionSizes::new(&[0]).unwrap_err().to_string(),
            "partition size 0% is outside 1..=100; give partition sizes in percent of one GPU"
        );
    }
}
