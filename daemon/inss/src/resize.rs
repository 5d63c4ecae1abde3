//! sluice's local stage for InSS's placement (beyond the paper): keep the
//! GPU each instance was placed on, and re-size every share and batch on
//! the latency model so that all instances of a GPU get the same headroom.
//!
//! InSS's TD3 agent picks shares through a softmax and batches from its
//! own output (§5.2); on the serving benchmark its plans leave GPU time
//! idle while one instance saturates first (docs/inss.md, "Not done yet").
//! This pass replaces only that local stage:
//!
//! - an instance's *capacity* at a share `p` is the most it serves with a
//!   batch run back to back within its SLO, `C(p) = max_b b / L(b, p)` over
//!   the batches with `2·L(b, p) ≤ SLO` (the saturated rule of gpulet's
//!   and Nexus's adaptive batching, `sluice_planner`);
//! - on each GPU, the largest `α` for which the instances' smallest shares
//!   with `C(p_i) ≥ α·λ_i` sum to at most 100 % (bisection; `C` is
//!   non-decreasing in `p` after a running maximum), those shares, then the
//!   rest of the GPU spread over the instances in proportion to their
//!   shares (whole percents, largest remainders first);
//! - each instance's batch: the saturated batch at its final share.
//!
//! Latencies come from the same [`ExecModel`] the agents plan with, with
//! the co-runners of the agents' decision (interference, where the model
//! has any). An instance whose SLO no share meets keeps the agents' slot.

use crate::types::{ExecModel, sms_of_pct};
use crate::workload::{Decision, Instance, Slot};

/// Bisection steps on the headroom factor.
const STEPS: u32 = 40;

/// Capacity `C(p)` (requests/s) and its batch for `p` = 1..=100 %, made
/// non-decreasing in `p` (a larger share can always run the smaller
/// share's batching); `(0, 0)` where no batch meets `2·L ≤ SLO`.
fn capacities(
    exec: &dyn ExecModel,
    inst: &Instance,
    others: &[crate::types::CoRunner],
    max_batch: u32,
) -> Vec<(f64, u32)> {
    let sms = exec.gpu_sms();
    let mut best = (0.0f64, 0u32);
    (1..=100u32)
        .map(|p| {
            let s = sms_of_pct(p, sms);
            for b in 1..=max_batch {
                let l = exec.exec_ms(inst.model, b, s, others);
                if !(l.is_finite() && l > 0.0) || 2.0 * l > inst.slo_ms {
                    continue;
                }
                let c = f64::from(b) * 1000.0 / l;
                if c > best.0 {
                    best = (c, b);
                }
            }
            best
        })
        .collect()
}

/// The smallest share (1..=100) whose capacity covers `rps`, if any.
fn smallest_share(cap: &[(f64, u32)], rps: f64) -> Option<u32> {
    cap.iter()
        .position(|&(c, _)| c > 0.0 && c >= rps)
        .map(|i| i as u32 + 1)
}

/// `d` with every GPU's shares and batches re-sized as the module says;
/// `rates` are the rates planned for (one per instance).
pub fn resize(
    d: &Decision,
    instances: &[Instance],
    rates: &[f64],
    exec: &dyn ExecModel,
    max_batch: u32,
) -> Decision {
    let mut out = d.clone();
    let gpus = d
        .slots
        .iter()
        .flatten()
        .map(|s| s.gpu + 1)
        .max()
        .unwrap_or(0);
    for g in 0..gpus {
        let members: Vec<usize> = (0..instances.len())
            .filter(|&i| d.slots[i].is_some_and(|s| s.gpu == g && s.pct > 0))
            .collect();
        let caps: Vec<Vec<(f64, u32)>> = members
            .iter()
            .map(|&i| {
                let others = d.co_runners(i, instances, exec.gpu_sms());
                capacities(exec, &instances[i], &others, max_batch)
            })
            .collect();
        // Instances with a reachable SLO and a rate are re-sized; the rest
        // keep their slots, and their shares are taken off the top.
        let sized: Vec<usize> = (0..members.len())
            .filter(|&k| caps[k][99].0 > 0.0 && rates[members[k]] > 0.0)
            .collect();
        if sized.is_empty() {
            continue;
        }
        let kept: u32 = (0..members.len())
            .filter(|k| !sized.contains(k))
            .map(|k| d.slots[members[k]].expect("member").pct)
            .sum();
        let room = 100u32.saturating_sub(kept);
        let shares = |alpha: f64| -> Option<Vec<u32>> {
            let v: Option<Vec<u32>> = sized
                .iter()
                .map(|&k| smallest_share(&caps[k], alpha * rates[members[k]]))
                .collect();
            v.filter(|v| v.iter().sum::<u32>() <= room)
        };
        // The largest α that fits: bracket, then bisect.
        let mut lo = 0.0f64;
        let mut hi = 1.0f64;
        while shares(hi).is_some() && hi < 1e6 {
            lo = hi;
            hi *= 2.0;
        }
        for _ in 0..STEPS {
            let mid = 0.5 * (lo + hi);
            if shares(mid).is_some() {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let Some(mut pct) = shares(lo) else {
            continue;
        };
        spread(&mut pct, room);
        for (j, &k) in sized.iter().enumerate() {
            let i = members[k];
            let p = pct[j];
            let batch = caps[k][p as usize - 1].1.max(1);
            out.slots[i] = Some(Slot {
                gpu: g,
                pct: p,
                batch,
            });
        }
    }
    out
}

/// Adds `room − Σ pct` whole percents to `pct` in proportion to each
/// entry, largest remainders first (ties to the earlier entry).
fn spread(pct: &mut [u32], room: u32) {
    let used: u32 = pct.iter().sum();
    let extra = room.saturating_sub(used);
    if extra == 0 || used == 0 {
        return;
    }
    let ideal: Vec<f64> = pct
        .iter()
        .map(|&p| f64::from(extra) * f64::from(p) / f64::from(used))
        .collect();
    let mut given = 0;
    for (p, x) in pct.iter_mut().zip(&ideal) {
        let whole = x.floor() as u32;
        *p += whole;
        given += whole;
    }
    let mut order: Vec<usize> = (0..pct.len()).collect();
    order.sort_by(|&a, &b| {
        let (fa, fb) = (ideal[a] - ideal[a].floor(), ideal[b] - ideal[b].floor());
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &k in order.iter().take((extra - given) as usize) {
        pct[k] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Toy;

    /// `L(b, sms) = (b + 1) · 100 / sms` ms on a 100-SM GPU: a share of
    /// `p` % runs batch `b` at `10·p·b / (b + 1)` requests/s.
    fn linear() -> Toy {
        Toy {
            batch_ms: 1.0,
            ..Toy::one()
        }
    }

    fn inst(name: &str, slo_ms: f64) -> Instance {
        Instance {
            name: name.into(),
            model: 0,
            slo_ms,
            max_rate_rps: 1.0,
        }
    }

    /// Every instance on GPU 0 with these `(pct, batch)`.
    fn on_gpu0(slots: &[(u32, u32)]) -> Decision {
        Decision {
            slots: slots
                .iter()
                .map(|&(pct, batch)| Some(Slot { gpu: 0, pct, batch }))
                .collect(),
        }
    }

    #[test]
    fn shares_follow_the_rates_and_fill_the_gpu() {
        // SLO 1000 lets batch 32 run on any share from 7 % (2 · 33 · 100 /
        // 7 = 943 ms): 9.70 rps per %. Rates 300 and 100 rps, 3 : 1, fill
        // the GPU at α = 2.42 with 75 % and 25 %. The agents gave 50/50.
        let is = [inst("a", 1000.0), inst("b", 1000.0)];
        let d = on_gpu0(&[(50, 1), (50, 1)]);
        let r = resize(&d, &is, &[300.0, 100.0], &linear(), 32);
        let s: Vec<(usize, u32)> = r
            .slots
            .iter()
            .map(|s| (s.unwrap().gpu, s.unwrap().pct))
            .collect();
        assert_eq!(s, vec![(0, 75), (0, 25)]);
        assert!(r.slots.iter().all(|s| s.unwrap().batch == 32));
    }

    #[test]
    fn the_slo_limits_the_batch_and_an_unreachable_one_keeps_its_slot() {
        // SLO 20 ms: at 60 %, 2 · (b + 1) · 100 / 60 ≤ 20 → b ≤ 5.
        let is = [inst("a", 20.0), inst("b", 0.5)];
        let d = on_gpu0(&[(40, 3), (40, 1)]);
        let r = resize(&d, &is, &[100.0, 100.0], &linear(), 32);
        // b's SLO (0.5 ms) is out of reach at any share (2 · L(1, 100 %) =
        // 4 ms): it keeps 40 %, a gets the other 60 %.
        assert_eq!(r.slots[1], d.slots[1]);
        assert_eq!(
            r.slots[0],
            Some(Slot {
                gpu: 0,
                pct: 60,
                batch: 5
            })
        );
    }

    #[test]
    fn spreading_hands_out_every_percent() {
        let mut p = vec![10, 20, 30];
        spread(&mut p, 100);
        assert_eq!(p.iter().sum::<u32>(), 100);
        assert_eq!(p, vec![17, 33, 50]);
    }
}
