//! The planners InSS is compared with (§6.1), on the same latency model:
//!
//! - [`gslice`]: GSLICE (Dhakal et al., SoCC '20) as InSS describes it,
//!   "adjusts the allocation of GPU resources and batch sizes by traversing
//!   the average latency and throughput": each instance alone, the
//!   smallest share (in GSLICE's 5 % steps) on which some batch serves its
//!   rate within its SLO, the largest such batch, placed first fit. It does
//!   not model interference and never gives leftover shares away, so GPUs
//!   keep fragments.
//! - [`igniter`]: iGniter (Xu et al., TPDS '23): batch from the rate and
//!   half the SLO, the minimum share (1 % steps) meeting half the SLO with
//!   the predicted interference of the GPU it lands on, GPUs chosen to
//!   minimise the shares the co-runners must grow by, a new GPU opened
//!   only when no open one fits: few GPUs, with small unusable remainders.
//!
//! gpulet, the third baseline, is `sluice_planner::Gpulet` (two gpulets
//! per GPU at most, temporal sharing inside each) on tables read from the
//! same latency model ([`gpulet_specs`]).
//!
//! **Feasibility rule** shared by both (and by gpulet in `sluice-planner`):
//! a batch `b` whose execution takes `t` serves rate `λ` within SLO `S`
//! when `b / t ≥ λ` (the partition keeps up) and `2 t ≤ S` (a task may wait
//! for the running batch, then run in the next: Nexus's rule, gpulet §4.3).

use sluice_planner::{LatencyTable, ModelSpec, TableError};

use crate::types::{CoRunner, ExecModel, sms_of_pct};
use crate::workload::{Decision, Instance, Slot};

/// Largest batch the baselines consider (InSS: 1–32).
pub const MAX_BATCH: u32 = 32;

/// Whether batch `b` at `t_ms` serves `rate_rps` within `slo_ms`.
pub fn feasible(b: u32, t_ms: f64, rate_rps: f64, slo_ms: f64) -> bool {
    t_ms.is_finite() && 2.0 * t_ms <= slo_ms && f64::from(b) / t_ms * 1e3 >= rate_rps
}

/// The largest feasible batch for instance `inst` at `rate` on `pct` %
/// beside `others` (None: none is).
fn best_batch(
    exec: &dyn ExecModel,
    inst: &Instance,
    rate: f64,
    pct: u32,
    others: &[CoRunner],
) -> Option<u32> {
    let sms = sms_of_pct(pct, exec.gpu_sms());
    (1..=MAX_BATCH).rev().find(|&b| {
        feasible(
            b,
            exec.exec_ms(inst.model, b, sms, others),
            rate,
            inst.slo_ms,
        )
    })
}

/// GSLICE: per instance (input order) the smallest 5 % step share with a
/// feasible batch (alone: GSLICE has no interference model), placed on the
/// first GPU with that much share and memory left. An instance no share
/// serves, or that fits no GPU, is left unserved.
pub fn gslice(
    exec: &dyn ExecModel,
    instances: &[Instance],
    rates: &[f64],
    gpus: usize,
) -> Decision {
    let mut left = vec![100u32; gpus];
    let mut mem = vec![exec.gpu_mem_mb(); gpus];
    let mut slots = vec![None; instances.len()];
    for (i, inst) in instances.iter().enumerate() {
        if rates[i] <= 0.0 {
            continue;
        }
        let Some((pct, b)) = (1..=20)
            .map(|k| k * 5)
            .find_map(|p| best_batch(exec, inst, rates[i], p, &[]).map(|b| (p, b)))
        else {
            continue;
        };
        let need = exec.mem_mb(inst.model, b);
        if let Some(g) = (0..gpus).find(|&g| left[g] >= pct && mem[g] >= need) {
            left[g] -= pct;
            mem[g] -= need;
            slots[i] = Some(Slot {
                gpu: g,
                pct,
                batch: b,
            });
        }
    }
    Decision { slots }
}

/// iGniter's batch: the tasks arriving in half the SLO, 1 to
/// [`MAX_BATCH`].
pub fn igniter_batch(rate_rps: f64, slo_ms: f64) -> u32 {
    ((rate_rps * slo_ms / 2e3).ceil() as u32).clamp(1, MAX_BATCH)
}

/// iGniter's minimum share (1 % steps) on which instance `inst` at batch
/// `b` runs within half its SLO and keeps up with `rate`, beside
/// `others`.
fn igniter_share(
    exec: &dyn ExecModel,
    inst: &Instance,
    b: u32,
    rate: f64,
    others: &[CoRunner],
    max_pct: u32,
) -> Option<u32> {
    (1..=max_pct).find(|&p| {
        let t = exec.exec_ms(inst.model, b, sms_of_pct(p, exec.gpu_sms()), others);
        feasible(b, t, rate, inst.slo_ms)
    })
}

/// The shares every instance on one GPU needs once `members` (instance,
/// batch) all run there, each recomputed with the others' interference;
/// None when they do not fit in 100 %.
fn igniter_fit(
    exec: &dyn ExecModel,
    instances: &[Instance],
    rates: &[f64],
    members: &[(usize, u32)],
) -> Option<Vec<u32>> {
    let c = exec.gpu_sms();
    // Start from each alone; grow shares until every one meets its SLO
    // beside the others at their current shares (a fixed point, at most a
    // few rounds since shares only grow).
    let mut pct: Vec<u32> = members
        .iter()
        .map(|&(i, b)| igniter_share(exec, &instances[i], b, rates[i], &[], 100))
        .collect::<Option<_>>()?;
    for _ in 0..8 {
        let mut changed = false;
        for (k, &(i, b)) in members.iter().enumerate() {
            let others: Vec<CoRunner> = members
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != k)
                .map(|(j, &(o, ob))| CoRunner {
                    model: instances[o].model,
                    batch: ob,
                    sms: sms_of_pct(pct[j], c),
                })
                .collect();
            let p = igniter_share(exec, &instances[i], b, rates[i], &others, 100)?;
            if p > pct[k] {
                pct[k] = p;
                changed = true;
            }
        }
        if pct.iter().sum::<u32>() > 100 {
            return None;
        }
        if !changed {
            return Some(pct);
        }
    }
    None
}

/// iGniter: batches from the rates, instances in descending alone share;
/// each goes to the open GPU where the GPU's total share grows least (its
/// co-runners' shares recomputed with the new interference), else to a new
/// GPU; an instance that fits nowhere is left unserved.
pub fn igniter(
    exec: &dyn ExecModel,
    instances: &[Instance],
    rates: &[f64],
    gpus: usize,
) -> Decision {
    let batch: Vec<u32> = instances
        .iter()
        .zip(rates)
        .map(|(inst, &r)| igniter_batch(r, inst.slo_ms))
        .collect();
    let alone: Vec<Option<u32>> = instances
        .iter()
        .enumerate()
        .map(|(i, inst)| igniter_share(exec, inst, batch[i], rates[i], &[], 100))
        .collect();
    let mut order: Vec<usize> = (0..instances.len())
        .filter(|&i| rates[i] > 0.0 && alone[i].is_some())
        .collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(alone[i]), i));
    let mut members: Vec<Vec<(usize, u32)>> = vec![Vec::new(); gpus];
    let mut shares: Vec<Vec<u32>> = vec![Vec::new(); gpus];
    for i in order {
        let need = exec.mem_mb(instances[i].model, batch[i]);
        let mut best: Option<(u32, usize, Vec<u32>)> = None;
        for g in 0..gpus {
            if members[g].is_empty() {
                continue;
            }
            let used: f64 = members[g]
                .iter()
                .map(|&(j, b)| exec.mem_mb(instances[j].model, b))
                .sum();
            if used + need > exec.gpu_mem_mb() {
                continue;
            }
            let mut m = members[g].clone();
            m.push((i, batch[i]));
            if let Some(p) = igniter_fit(exec, instances, rates, &m) {
                let growth = p.iter().sum::<u32>() - shares[g].iter().sum::<u32>();
                if best.as_ref().is_none_or(|(bg, _, _)| growth < *bg) {
                    best = Some((growth, g, p));
                }
            }
        }
        let chosen = match best {
            Some((_, g, p)) => Some((g, p)),
            None => (0..gpus).find(|&g| members[g].is_empty()).and_then(|g| {
                igniter_fit(exec, instances, rates, &[(i, batch[i])]).map(|p| (g, p))
            }),
        };
        if let Some((g, p)) = chosen {
            members[g].push((i, batch[i]));
            shares[g] = p;
        }
    }
    let mut slots = vec![None; instances.len()];
    for g in 0..gpus {
        for (k, &(i, b)) in members[g].iter().enumerate() {
            slots[i] = Some(Slot {
                gpu: g,
                pct: shares[g][k],
                batch: b,
            });
        }
    }
    Decision { slots }
}

/// Batches of the tables [`gpulet_specs`] reads.
pub const GPULET_BATCHES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Partitions of those tables, percent (gpulet's planner picks among
/// these).
pub const GPULET_PARTITIONS: [u32; 10] = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];

/// gpulet's inputs for `instances` at `rates`: each instance's `L(b, p)`
/// table from `exec` alone (gpulet plans without interference), its
/// memory at the largest batch.
pub fn gpulet_specs(
    exec: &dyn ExecModel,
    instances: &[Instance],
    rates: &[f64],
) -> Result<Vec<ModelSpec>, TableError> {
    gpulet_specs_with(exec, instances, rates, &|_| {})
}

/// [`gpulet_specs`] with each table's rows (`[batch][partition]`, ms)
/// passed through `adjust` first (e.g. measured rows lifted to the
/// planner's monotonicity rules).
pub fn gpulet_specs_with(
    exec: &dyn ExecModel,
    instances: &[Instance],
    rates: &[f64],
    adjust: &dyn Fn(&mut Vec<Vec<f64>>),
) -> Result<Vec<ModelSpec>, TableError> {
    instances
        .iter()
        .zip(rates)
        .map(|(inst, &rate)| {
            let mut rows: Vec<Vec<f64>> = GPULET_BATCHES
                .iter()
                .map(|&b| {
                    GPULET_PARTITIONS
                        .iter()
                        .map(|&p| exec.exec_ms(inst.model, b, sms_of_pct(p, exec.gpu_sms()), &[]))
                        .collect()
                })
                .collect();
            adjust(&mut rows);
            let profile =
                LatencyTable::new(GPULET_BATCHES.to_vec(), GPULET_PARTITIONS.to_vec(), rows)?;
            Ok(ModelSpec {
                name: inst.name.clone(),
                slo_ms: inst.slo_ms,
                rate_rps: rate,
                mem_mb: exec.mem_mb(inst.model, MAX_BATCH).ceil() as u64,
                profile,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Toy;

    /// `t = b × 100 / sms` ms, 10 % slower per co-runner.
    fn toy() -> Toy {
        Toy {
            per_corunner: 0.1,
            mem_mb: 100.0,
            gpu_mem_mb: 1000.0,
            ..Toy::one()
        }
    }

    fn inst(n: usize, slo: f64) -> Vec<Instance> {
        (0..n)
            .map(|i| Instance {
                name: format!("m{i}"),
                model: 0,
                slo_ms: slo,
                max_rate_rps: 100.0,
            })
            .collect()
    }

    #[test]
    fn feasibility_rule() {
        assert!(feasible(4, 10.0, 400.0, 20.0));
        assert!(!feasible(4, 10.0, 401.0, 20.0));
        assert!(!feasible(4, 10.1, 100.0, 20.0));
    }

    #[test]
    fn gslice_takes_the_smallest_step_and_the_largest_batch() {
        // 100 rps, SLO 100 ms: on p % a batch b takes b×100/p ms, so
        // capacity is 10·p rps whatever b: p = 10 % is the smallest step;
        // 2·b·10 ≤ 100 gives b = 5.
        let d = gslice(&toy(), &inst(1, 100.0), &[100.0], 1);
        assert_eq!(
            d.slots[0],
            Some(Slot {
                gpu: 0,
                pct: 10,
                batch: 5
            })
        );
        // Eleven such instances fill one GPU with ten (first fit) and put
        // the last on the second.
        let d = gslice(&toy(), &inst(11, 100.0), &[100.0; 11], 2);
        assert_eq!(d.used_pct(2), vec![100, 10]);
        assert_eq!(d.fragment_pct(2), 90);
    }

    #[test]
    fn igniter_packs_with_interference_and_opens_few_gpus() {
        // Batch: 100 rps × 50 ms = 5. Alone: 2·5·100/p ≤ 100 → p ≥ 10,
        // capacity 10·p ≥ 100 → p ≥ 10. Beside one: 10 % slower → 11 %.
        assert_eq!(igniter_batch(100.0, 100.0), 5);
        let d = igniter(&toy(), &inst(2, 100.0), &[100.0; 2], 4);
        assert_eq!(d.gpus_used(), 1);
        let s: Vec<u32> = d.slots.iter().map(|s| s.unwrap().pct).collect();
        assert_eq!(s, vec![11, 11]);
        // Nothing fits a SLO below one batch's time: unserved.
        let d = igniter(&toy(), &inst(1, 1.0), &[100.0], 4);
        assert_eq!(d.slots[0], None);
    }
}
