//! `sluice bench inss --trace`: an experiment beyond the InSS paper.
//! InSS and gpulet repartition a GPU by restarting MPS processes, so they
//! re-plan at most every few tens of seconds (gpulet: 20 s); sluice
//! repartitions in place (green contexts, CU masks), so a planner can
//! re-plan as often as it decides. This serves a rate trace with bursts
//! on a fixed group of GPUs and compares re-planning periods per planner.
//! **Simulated**: the serving truth is the GPU model (`a100` profile).
//!
//! Rules, stated in the report:
//! - **Trace**: gpulet Fig. 15's two waves ([`wave_rps`]) over
//!   `duration_s`, as a load factor on every instance's base rate (low →
//!   first peak → low → second peak → low), sampled once per second.
//! - **Re-planning**: at the start of every period the planner plans for
//!   the rate each instance showed in the period just ended (arrivals /
//!   length) × `1 + headroom`; the first period plans for the trace's
//!   rate at 0. A plan that fails keeps the previous placement (the first
//!   period then serves nothing) and is counted.
//! - **Serving**: each period is one run of `sluice bench cluster`'s
//!   request-level simulator ([`serve_schedule`]) with fresh arrivals
//!   (seed + period); requests still queued at its end drain on the
//!   placement they arrived under. Decision time is not charged to the
//!   period: the new placement takes effect at its start.

use crate::cluster::trace::wave_rps;
use crate::inss::{
    Agents, InssBenchError, InssSetup, PlannerKind, cluster_instances, plan, serve_schedule,
};
pub use crate::inss::{InssTraceRun, WINDOW_S};

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct InssTraceOptions {
    /// Planners.
    pub planners: Vec<PlannerKind>,
    /// Re-planning periods to compare, s.
    pub periods_s: Vec<f64>,
    /// Length of the trace, s.
    pub duration_s: f64,
    /// Load factor (× base rates) at the start and end.
    pub low: f64,
    /// Load factor at the first wave's peak.
    pub peak1: f64,
    /// Load factor at the second wave's peak.
    pub peak2: f64,
    /// Planned rate over the counted rate, less 1.
    pub headroom: f64,
    /// GPUs (a multiple of the group size).
    pub gpus: usize,
    /// Seed.
    pub seed: u64,
    /// [`crate::inss::PlanInputs::gpulet_margin`].
    pub gpulet_margin: f64,
    /// Which code serves each period's plan.
    pub engine: crate::cluster::sim::Engine,
}

impl Default for InssTraceOptions {
    fn default() -> Self {
        Self {
            planners: vec![PlannerKind::Inss, PlannerKind::Gpulet],
            periods_s: vec![20.0, 1.0],
            duration_s: 800.0,
            low: 0.2,
            peak1: 0.5,
            peak2: 0.7,
            headroom: 0.1,
            gpus: 4,
            seed: 1,
            gpulet_margin: 1.0,
            engine: crate::cluster::sim::Engine::Daemon,
        }
    }
}

/// Runs every planner at every period; `progress(done, total)` counts
/// periods.
pub fn run_trace(
    s: &InssSetup,
    agents: Option<&Agents>,
    opts: &InssTraceOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<InssTraceRun>, InssBenchError> {
    let (inst, base) = cluster_instances(s, opts.gpus);
    let load = |t: f64| wave_rps(t, opts.duration_s, opts.low, opts.peak1, opts.peak2);
    let total: usize = opts.planners.len()
        * opts
            .periods_s
            .iter()
            .map(|p| (opts.duration_s / p).ceil() as usize)
            .sum::<usize>();
    let mut done = 0;
    progress(0, total);
    let mut runs = Vec::new();
    for &kind in &opts.planners {
        for &period in &opts.periods_s {
            let periods = (opts.duration_s / period).ceil() as usize;
            let windows = (opts.duration_s / WINDOW_S).ceil() as usize;
            let (mut w_arr, mut w_vio) = (vec![0u64; windows], vec![0u64; windows]);
            let mut counted: Vec<f64> = base.iter().map(|b| b * load(0.0)).collect();
            let mut last: Option<sluice_planner::Placement> = None;
            let (mut arrived, mut violated) = (0u64, 0u64);
            let (mut failed, mut ms) = (0usize, Vec::with_capacity(periods));
            for k in 0..periods {
                let t0 = k as f64 * period;
                let len = period.min(opts.duration_s - t0);
                let rates: Vec<f64> = counted.iter().map(|r| r * (1.0 + opts.headroom)).collect();
                let inputs = s.plan_inputs(opts.gpulet_margin);
                match plan(kind, &inputs, agents, &inst, &rates, opts.gpus, opts.seed) {
                    Ok(p) => {
                        ms.push(p.decision_ms);
                        last = Some(p.placement);
                    }
                    Err(InssBenchError::Run(_)) if kind.is_gpulet() => failed += 1,
                    Err(e) => return Err(e),
                }
                let seg = len.min(1.0);
                let nseg = (len / seg).ceil() as usize;
                let schedule: Vec<Vec<(f64, f64)>> = base
                    .iter()
                    .map(|b| {
                        (0..nseg)
                            .map(|i| {
                                let x = i as f64 * seg;
                                (x, b * load(t0 + x + 0.5 * seg.min(len - x)))
                            })
                            .collect()
                    })
                    .collect();
                let empty = sluice_planner::Placement { gpus: Vec::new() };
                let (_, arr, v) = serve_schedule(
                    &s.truth,
                    &inst,
                    &schedule,
                    last.as_ref().unwrap_or(&empty),
                    len,
                    opts.seed.wrapping_add(k as u64),
                    opts.engine,
                )?;
                let a: u64 = arr.iter().sum();
                let w = ((t0 / WINDOW_S) as usize).min(windows - 1);
                w_arr[w] += a;
                w_vio[w] += v;
                arrived += a;
                violated += v;
                for (c, &x) in counted.iter_mut().zip(&arr) {
                    *c = x as f64 / len;
                }
                done += 1;
                progress(done, total);
            }
            ms.sort_by(f64::total_cmp);
            runs.push(InssTraceRun {
                planner: kind.name(),
                period_s: period,
                arrived,
                violation: if arrived == 0 {
                    0.0
                } else {
                    violated as f64 / arrived as f64
                },
                goodput_rps: (arrived - violated) as f64 / opts.duration_s,
                window_violation: w_arr
                    .iter()
                    .zip(&w_vio)
                    .map(|(&a, &v)| if a == 0 { 0.0 } else { v as f64 / a as f64 })
                    .collect(),
                plans: periods,
                failed_plans: failed,
                decision_ms_median: ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN),
            });
        }
    }
    Ok(runs)
}

/// The rules in one sentence, for the report.
pub fn rules(opts: &InssTraceOptions) -> String {
    format!(
        "trace: gpulet Fig. 15's two waves over {} s as a load factor on every base rate ({} -> {} -> {} -> {} -> {}), on {} GPUs; every period the planner plans for the rate counted in the period just ended x {:.2}; a failed plan keeps the previous placement; each period is one simulation of bench cluster's serving (Poisson arrivals, deadline batching), queued requests drain on the placement they arrived under; decision time not charged",
        opts.duration_s,
        opts.low,
        opts.peak1,
        opts.low,
        opts.peak2,
        opts.low,
        opts.gpus,
        1.0 + opts.headroom
    )
}
