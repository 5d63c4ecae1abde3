//! `sluice bench trace`: gpulet's Figure 15 experiment (§5.3) and sluice's
//! "repartition in place" comparison (1 s periods against gpulet's 20 s),
//! simulated.
//!
//! A scenario's models receive a rate trace that rises and falls in two
//! waves over 3,200 s (gpulet Fig. 15: from the base rate up to a first
//! peak and back by 1,200 s; from 1,400 s up to a higher peak and back by
//! 3,000 s; every model the same share). Every *period* the planner
//! re-plans with GPU scaling (`sluice_planner::plan_with_scaling`, gpulet
//! Algorithm 2: start from the previous period's GPU count, add GPUs up to
//! the limit) for the rate each model showed in the period just ended
//! (arrivals counted / period length, times `1 + headroom`; with a rate
//! window, arrivals over the newest periods covering it / their length; the first
//! period plans for the trace's rate at 0), and the period is served by
//! that placement in the request-level simulator of `sluice bench cluster`
//! ([`crate::cluster::sim`]). gpulet re-plans every 20 s because a new
//! partition is a new MPS process; sluice repartitions in place (green
//! contexts, CU masks), so it can re-plan every second.
//!
//! Rules chosen here, stated in the report:
//! - **A period is one simulation.** Arrivals of the period go to its
//!   placement; requests still queued when it ends are served by that
//!   placement until done (the daemon's shadow switch: old partitions
//!   drain while the new ones take new arrivals). The drain is not charged
//!   to the next period's GPUs and does not slow it.
//! - **Unschedulable periods** keep the previous placement (the last
//!   one that worked) and are counted; the first period has nothing to keep
//!   and serves nothing (every request a violation).
//! - **GPU-seconds** are the GPUs the placement uses times the period.
//! - **Every period length serves the same requests.** Arrivals are drawn
//!   per whole second of the trace from the run's seed
//!   ([`crate::cluster::sim::ArrivalSeeding::PerSecond`]), so the 20 s and
//!   the 1 s periods of one seed see the same arrivals at the same times and
//!   the comparison between them is paired; what else is random in a
//!   period (the simulator's routing) is seeded by [`period_seed`] from the
//!   run's seed and the period's index (a hash, so that seed `s + 1` is not
//!   seed `s` one period later).
//! - **Several seeds** (`seeds`, default 5): the whole trace is served once
//!   per seed (`seed`, `seed + 1`, ...); per period length the report gives
//!   the mean, least and most over the seeds, and a [`Verdict`] of each
//!   shorter period against the first (gpulet's 20 s) on those means:
//!   fewer requests late, dropped or unserved, and GPU-seconds at most
//!   [`GPU_SECONDS_SLACK`] above the first period's.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use serde::Serialize;
use sluice_model::ModelRegistry;
use sluice_planner::{GpuSpec, ModelSpec, PartitionSizes, Placement};

use crate::cluster::scenario::{PlannerKind, Scenario};
use crate::cluster::sim::{Batching, Engine, Rounds, Routing, SimModel, SimOptions};
use crate::cluster::{
    ClusterError, Interference, TableInfo, batch_cap, interference_factors, load_gpulet,
    measure_tables, scaled, sim_partitions, slos,
};

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceOptions {
    /// The planner.
    pub planner: PlannerKind,
    /// Scheduling periods to compare, s.
    pub periods_s: Vec<f64>,
    /// Length of the trace, s.
    pub duration_s: f64,
    /// Total rate (all models) at the start and end, rps.
    pub base_rps: f64,
    /// Total rate at the first wave's peak, rps.
    pub peak1_rps: f64,
    /// Total rate at the second wave's peak, rps.
    pub peak2_rps: f64,
    /// Most GPUs the scaling may use.
    pub gpu_limit: u32,
    /// Reporting window, s (gpulet's Fig. 15: 20).
    pub window_s: f64,
    /// Planned rate over the counted rate, less 1.
    pub headroom: f64,
    /// Count the rate over the last periods covering this many seconds
    /// (at least the period just ended); `None`: the period just ended.
    pub rate_window_s: Option<f64>,
    /// Planned latencies over served ones.
    pub latency_margin: f64,
    /// How the planner covers Poisson bursts.
    pub burst: sluice_planner::Burst,
    /// See [`Batching`].
    pub batching: Batching,
    /// See [`Engine`].
    pub engine: Engine,
    /// Interference (and the data for `gpulet+int`).
    pub interference: Interference,
    /// gpulet's data folder (with `2080ti/` and `3080/`); `None`: the
    /// built-in copy of the repository's `data/gpulet`.
    pub gpulet_data: Option<std::path::PathBuf>,
    /// Where `L(b, p)` comes from.
    pub tables: crate::cluster::TableSource,
    /// Measured pairwise interference (see
    /// [`crate::cluster::ClusterOptions::measured_interference`]).
    pub measured_interference: Option<std::path::PathBuf>,
    /// Partition sizes of the gpulet planners.
    pub gpulet_sizes: Option<PartitionSizes>,
    /// Seed of the first run.
    pub seed: u64,
    /// Runs, seeded `seed`, `seed + 1`, ... (at least 1).
    pub seeds: u32,
    /// Worker threads for the seeds (0: one per core).
    pub jobs: usize,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self {
            planner: PlannerKind::GpuletInt,
            periods_s: vec![20.0, 1.0],
            duration_s: 3200.0,
            base_rps: 100.0,
            peak1_rps: 500.0,
            peak2_rps: 800.0,
            gpu_limit: 10,
            window_s: 20.0,
            headroom: 0.1,
            rate_window_s: None,
            latency_margin: 1.1,
            burst: sluice_planner::Burst::Mean,
            batching: Batching::Deadline,
            engine: Engine::Daemon,
            interference: Interference::Gpulet2080Ti,
            gpulet_data: None,
            tables: crate::cluster::TableSource::GpuModel,
            measured_interference: None,
            gpulet_sizes: Some(PartitionSizes::gpulet()),
            seed: 1,
            seeds: 5,
            jobs: 0,
        }
    }
}

/// Each model's rate over the newest periods of `recent` that cover
/// `window_s` seconds (at least the newest one): their arrivals over their
/// length. Older periods are dropped from `recent`.
fn windowed_rates(recent: &mut VecDeque<(f64, Vec<u64>)>, window_s: f64) -> Vec<f64> {
    // Drop the oldest while the rest still cover the window.
    let mut total: f64 = recent.iter().map(|r| r.0).sum();
    while recent.len() > 1 && total - recent[0].0 >= window_s {
        total -= recent[0].0;
        recent.pop_front();
    }
    let models = recent.back().map_or(0, |r| r.1.len());
    (0..models)
        .map(|i| recent.iter().map(|r| r.1[i] as f64).sum::<f64>() / total)
        .collect()
}

/// gpulet Fig. 15's two waves: the total rate at `t` s of a `len` s trace
/// (the paper's 3,200 s; other lengths scale the times).
pub fn wave_rps(t: f64, len: f64, base: f64, peak1: f64, peak2: f64) -> f64 {
    let k = len / 3200.0;
    let tri = |a: f64, top: f64, b: f64| {
        if t <= a || t >= b {
            0.0
        } else if t <= top {
            (t - a) / (top - a)
        } else {
            (b - t) / (b - top)
        }
    };
    base + (peak1 - base) * tri(0.0, 600.0 * k, 1200.0 * k)
        + (peak2 - base) * tri(1400.0 * k, 2200.0 * k, 3000.0 * k)
}

/// The seed of period `k`'s arrivals in the run seeded `seed`: a hash of
/// both, so that consecutive periods, and consecutive seeds, draw unrelated
/// arrivals (with `seed + k`, the run seeded 2 would replay the run seeded
/// 1 one period later).
pub fn period_seed(seed: u64, k: u64) -> u64 {
    sluice_rng::splitmix(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k)
}

/// How much above the first period's GPU-seconds a shorter period's may be
/// (mean over the seeds) and still pass: 1 %.
pub const GPU_SECONDS_SLACK: f64 = 0.01;

/// One seed's run of one period length, in brief.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedRow {
    /// The run's seed.
    pub seed: u64,
    /// Requests that arrived.
    pub arrived: u64,
    /// Of those, late, dropped or unserved.
    pub violated: u64,
    /// `violated / arrived`.
    pub violation_rate: f64,
    /// Σ GPUs in use × period.
    pub gpu_seconds: f64,
    /// Periods the planner could not schedule.
    pub unschedulable_periods: u32,
}

/// One period length over every seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodSeeds {
    /// Scheduling period, s.
    pub period_s: f64,
    /// Mean over the seeds of the requests late, dropped or unserved.
    pub violated_mean: f64,
    /// Mean, least and most violation rate over the seeds.
    pub violation_rate_mean: f64,
    /// See `violation_rate_mean`.
    pub violation_rate_min: f64,
    /// See `violation_rate_mean`.
    pub violation_rate_max: f64,
    /// Mean, least and most GPU-seconds over the seeds.
    pub gpu_seconds_mean: f64,
    /// See `gpu_seconds_mean`.
    pub gpu_seconds_min: f64,
    /// See `gpu_seconds_mean`.
    pub gpu_seconds_max: f64,
    /// Per seed, in seed order.
    pub per_seed: Vec<SeedRow>,
}

impl PeriodSeeds {
    fn new(period_s: f64, per_seed: Vec<SeedRow>) -> Self {
        let n = per_seed.len().max(1) as f64;
        let mean = |f: &dyn Fn(&SeedRow) -> f64| per_seed.iter().map(f).sum::<f64>() / n;
        let fold = |f: &dyn Fn(&SeedRow) -> f64, least: bool| {
            per_seed
                .iter()
                .map(f)
                .reduce(if least { f64::min } else { f64::max })
                .unwrap_or(0.0)
        };
        Self {
            period_s,
            violated_mean: mean(&|r| r.violated as f64),
            violation_rate_mean: mean(&|r| r.violation_rate),
            violation_rate_min: fold(&|r| r.violation_rate, true),
            violation_rate_max: fold(&|r| r.violation_rate, false),
            gpu_seconds_mean: mean(&|r| r.gpu_seconds),
            gpu_seconds_min: fold(&|r| r.gpu_seconds, true),
            gpu_seconds_max: fold(&|r| r.gpu_seconds, false),
            per_seed,
        }
    }
}

/// A shorter period against the first, on the means over the seeds
/// (gpulet Fig. 15's question: does re-planning more often serve better
/// without costing GPUs?).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The first period (the baseline), s.
    pub baseline_period_s: f64,
    /// The period judged, s.
    pub period_s: f64,
    /// Seeds the means are over.
    pub seeds: usize,
    /// Mean requests late, dropped or unserved: the baseline's, then this
    /// period's.
    pub violated_mean: [f64; 2],
    /// This period's mean is below the baseline's.
    pub fewer_late: bool,
    /// Mean GPU-seconds over the baseline's, less 1.
    pub gpu_seconds_change: f64,
    /// `gpu_seconds_change <= GPU_SECONDS_SLACK`.
    pub gpu_seconds_within: bool,
    /// Both.
    pub met: bool,
}

impl Verdict {
    /// `short` against `base`.
    pub fn of(base: &PeriodSeeds, short: &PeriodSeeds) -> Self {
        let change = if base.gpu_seconds_mean > 0.0 {
            short.gpu_seconds_mean / base.gpu_seconds_mean - 1.0
        } else {
            0.0
        };
        let fewer_late = short.violated_mean < base.violated_mean;
        let within = change <= GPU_SECONDS_SLACK;
        Self {
            baseline_period_s: base.period_s,
            period_s: short.period_s,
            seeds: short.per_seed.len(),
            violated_mean: [base.violated_mean, short.violated_mean],
            fewer_late,
            gpu_seconds_change: change,
            gpu_seconds_within: within,
            met: fewer_late && within,
        }
    }
}

/// One reporting window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Start, s.
    pub t_s: f64,
    /// GPUs in use, mean over the window.
    pub gpus: f64,
    /// Partition sizes summed, percent of one GPU, mean over the window.
    pub partition_sum: f64,
    /// Violations over arrivals in the window.
    pub violation_rate: f64,
    /// Requests served within their SLO per second, all models.
    pub throughput_rps: f64,
    /// The same per model, in the scenario's order.
    pub model_throughput_rps: Vec<f64>,
    /// Offered rate (the trace's mean over the window), all models.
    pub offered_rps: f64,
}

/// One period length over the whole trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceRun {
    /// Scheduling period, s.
    pub period_s: f64,
    /// Requests that arrived.
    pub arrived: u64,
    /// Of those, late, dropped or unserved.
    pub violated: u64,
    /// `violated / arrived`.
    pub violation_rate: f64,
    /// Σ GPUs in use × period.
    pub gpu_seconds: f64,
    /// Most GPUs in use at once.
    pub max_gpus: usize,
    /// Periods the planner could not schedule (previous placement kept).
    pub unschedulable_periods: u32,
    /// Plans made.
    pub plans: u32,
    /// Median wall time of one plan, ms.
    pub plan_ms_median: f64,
    /// Wall time of the run, s.
    pub wall_s: f64,
    /// Per window.
    pub windows: Vec<Window>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceReport {
    /// Always true.
    pub simulated: bool,
    /// Device profile.
    pub device: String,
    /// Scenario.
    pub scenario: String,
    /// Planner.
    pub planner: String,
    /// The rules, in words.
    pub rules: String,
    /// The SLO rule.
    pub slo_rule: String,
    /// Where the tables came from ([`crate::cluster::TableSource::describe`]).
    pub tables: String,
    /// Interference.
    pub interference_note: String,
    /// Per period length, the first seed's run (with its windows).
    pub runs: Vec<TraceRun>,
    /// gpulet Fig. 15's series: the first seed's run of the first period
    /// (`period_s`, `windows`; the default's first period is gpulet's 20 s).
    pub fig15: Option<TraceRun>,
    /// The seeds served, in order.
    pub seeds: Vec<u64>,
    /// Per period length, every seed and their mean.
    pub over_seeds: Vec<PeriodSeeds>,
    /// Each period after the first against the first, on the means.
    pub verdicts: Vec<Verdict>,
}

/// What every seed's run shares: the scenario's tables, SLOs and GPUs.
struct Setup<'a> {
    sc: &'a Scenario,
    opts: &'a TraceOptions,
    intf: Option<sluice_planner::AnyInterference>,
    tables: Vec<&'a TableInfo>,
    slo_ms: Vec<f64>,
    planner_tables: Vec<sluice_planner::LatencyTable>,
    index: HashMap<&'a str, usize>,
    most: u32,
    gpus: GpuSpec,
}

impl Setup<'_> {
    /// Each model's share of the trace's rate at `t` s.
    fn per_model(&self, t: f64) -> f64 {
        let o = self.opts;
        wave_rps(t, o.duration_s, o.base_rps, o.peak1_rps, o.peak2_rps)
            / self.sc.models.len() as f64
    }
}

/// Runs `sc` under the trace once per period length and seed.
pub fn run(
    sc: &Scenario,
    reg: &ModelRegistry,
    opts: &TraceOptions,
    on_progress: impl FnMut(usize, usize) + Send,
) -> Result<TraceReport, ClusterError> {
    sc.check_models(reg)?;
    let gpulet = load_gpulet(opts.interference, opts.gpulet_data.as_deref())?;
    let measured = opts
        .measured_interference
        .as_deref()
        .map(crate::cluster::load_measured_interference)
        .transpose()?;
    let intf = crate::cluster::scenario_interference(gpulet.as_ref(), measured.as_ref(), sc);
    if opts.planner.planner(intf.clone()).is_none() {
        return Err(ClusterError::NeedsInterference(
            opts.planner.as_str().into(),
        ));
    }
    let measured = measure_tables(
        std::slice::from_ref(sc),
        &|sc: &Scenario| sc.device.clone(),
        reg,
        &opts.tables,
        &mut |_, _| {},
    )?;
    let tables: Vec<&TableInfo> = sc
        .models
        .iter()
        .map(|m| &measured[&(sc.device.clone(), m.model.clone())])
        .collect();
    let slo_ms = slos(sc, &tables);
    let planner_tables: Vec<_> = tables
        .iter()
        .map(|t| scaled(&t.table, opts.latency_margin))
        .collect();
    let index: HashMap<&str, usize> = sc
        .models
        .iter()
        .enumerate()
        .map(|(i, m)| (m.name.as_str(), i))
        .collect();
    let most = batch_cap(&tables, opts.batching);
    let gpus = GpuSpec {
        count: opts.gpu_limit,
        mem_mb: sc.gpu_mem_mb,
        partition_step_pct: sc.partition_step_pct,
        sizes_pct: if opts.planner.is_gpulet() {
            opts.gpulet_sizes
        } else {
            None
        },
        burst: opts.burst,
    };
    let setup = Setup {
        sc,
        opts,
        intf,
        tables,
        slo_ms,
        planner_tables,
        index,
        most,
        gpus,
    };
    let seeds: Vec<u64> = (0..opts.seeds.max(1))
        .map(|i| opts.seed.wrapping_add(u64::from(i)))
        .collect();
    let per_seed_periods: usize = opts
        .periods_s
        .iter()
        .map(|p| (opts.duration_s / p).ceil() as usize)
        .sum();
    let total = per_seed_periods * seeds.len();
    let progress = std::sync::Mutex::new((0usize, on_progress));
    let tick = || {
        let mut g = progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.0 += 1;
        let done = g.0;
        (g.1)(done, total);
    };
    (progress
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .1)(0, total);
    let jobs = match opts.jobs {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        j => j,
    };
    // One seed per run of the work queue, each with a planner of its own;
    // progress counts periods (`tick`), not seeds.
    let mut all: Vec<Vec<TraceRun>> = crate::runs::run_all(
        &seeds,
        jobs,
        |&seed| {
            let planner = opts
                .planner
                .planner(setup.intf.clone())
                .expect("checked above");
            serve_seed(&setup, planner.as_ref(), seed, &tick)
        },
        &mut |_| {},
    )
    .into_iter()
    .collect::<Result<_, _>>()?;
    let over_seeds: Vec<PeriodSeeds> = opts
        .periods_s
        .iter()
        .enumerate()
        .map(|(p, &period)| {
            PeriodSeeds::new(
                period,
                all.iter()
                    .zip(&seeds)
                    .map(|(runs, &seed)| SeedRow {
                        seed,
                        arrived: runs[p].arrived,
                        violated: runs[p].violated,
                        violation_rate: runs[p].violation_rate,
                        gpu_seconds: runs[p].gpu_seconds,
                        unschedulable_periods: runs[p].unschedulable_periods,
                    })
                    .collect(),
            )
        })
        .collect();
    let verdicts = over_seeds
        .iter()
        .skip(1)
        .map(|x| Verdict::of(&over_seeds[0], x))
        .collect();
    let runs = all.swap_remove(0);
    let gpus = &setup.gpus;
    Ok(TraceReport {
        simulated: true,
        device: sc.device.clone(),
        scenario: sc.name.clone(),
        planner: opts.planner.as_str().into(),
        rules: format!(
            "trace: two waves over {} s (gpulet Fig. 15 shape), total {} -> {} -> {} -> {} -> {} rps, equal per model; every period the planner re-plans with GPU scaling (gpulet Algorithm 2, up to {} GPUs) for the rate counted {} x {:.2}, latencies x {}, {}, partition sizes {}; an unschedulable period keeps the previous placement; each period is one run of bench cluster's serving (Poisson arrivals, {}), queued requests drain on the placement they arrived under",
            opts.duration_s,
            opts.base_rps,
            opts.peak1_rps,
            opts.base_rps,
            opts.peak2_rps,
            opts.base_rps,
            opts.gpu_limit,
            match opts.rate_window_s {
                Some(w) =>
                    format!("over the last {w} s (whole periods, at least the one just ended)"),
                None => "in the period just ended".into(),
            },
            1.0 + opts.headroom,
            opts.latency_margin,
            crate::cluster::burst_rule(crate::cluster::burst_overflow(opts.burst)),
            match gpus.sizes_pct {
                Some(s) => format!("{:?} %", s.to_vec()),
                None => "every multiple of the step".into(),
            },
            match opts.engine {
                Engine::Daemon => "on the daemon's cluster backend".to_string(),
                Engine::Sim => format!(
                    "on the request-level simulator, work-conserving rounds, batching {:?}",
                    opts.batching
                ),
            },
        ),
        slo_rule:
            "2 x L(32, 100%) of the model's manifest on the device profile (bench cluster's rule)"
                .into(),
        tables: opts.tables.describe(),
        interference_note: match &opts.measured_interference {
            Some(d) => crate::cluster::measured_note(d),
            None => opts.interference.describe(opts.gpulet_data.as_deref()),
        },
        fig15: runs.first().cloned(),
        runs,
        seeds,
        over_seeds,
        verdicts,
    })
}

/// One seed's runs, one per period length.
fn serve_seed(
    setup: &Setup<'_>,
    planner: &dyn sluice_planner::Planner,
    seed: u64,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<TraceRun>, ClusterError> {
    let Setup {
        sc,
        opts,
        intf,
        tables,
        slo_ms,
        planner_tables,
        index,
        most,
        gpus,
    } = setup;
    let (most, n) = (*most, sc.models.len() as f64);
    let per_model = |t: f64| setup.per_model(t);
    let mut runs = Vec::new();
    for &period in &opts.periods_s {
        let t_run = Instant::now();
        let periods = (opts.duration_s / period).ceil() as usize;
        let windows = (opts.duration_s / opts.window_s).ceil() as usize;
        let nm = sc.models.len();
        // Per window: arrived, violated, served ok per model, gpu·s, pct·s.
        let mut w_arr = vec![0u64; windows];
        let mut w_vio = vec![0u64; windows];
        let mut w_ok = vec![vec![0u64; nm]; windows];
        let mut w_gpu = vec![0.0f64; windows];
        let mut w_pct = vec![0.0f64; windows];
        let mut last: Option<Placement> = None;
        let mut counted: Vec<f64> = (0..nm).map(|_| per_model(0.0)).collect();
        // The periods the rate window covers, newest last: (length, arrivals
        // per model).
        let mut recent: VecDeque<(f64, Vec<u64>)> = VecDeque::new();
        let mut prev_count = 1u32;
        let mut out = TraceRun {
            period_s: period,
            arrived: 0,
            violated: 0,
            violation_rate: 0.0,
            gpu_seconds: 0.0,
            max_gpus: 0,
            unschedulable_periods: 0,
            plans: 0,
            plan_ms_median: 0.0,
            wall_s: 0.0,
            windows: Vec::new(),
        };
        let mut plan_ms = Vec::with_capacity(periods);
        for k in 0..periods {
            let t0 = k as f64 * period;
            let len = period.min(opts.duration_s - t0);
            let specs: Vec<ModelSpec> = sc
                .models
                .iter()
                .zip(planner_tables.iter())
                .zip(slo_ms.iter())
                .zip(&counted)
                .map(|(((m, t), &slo), &r)| ModelSpec {
                    name: m.name.clone(),
                    slo_ms: slo,
                    rate_rps: r * (1.0 + opts.headroom),
                    mem_mb: m.mem_mb,
                    profile: t.clone(),
                })
                .collect();
            let tp = Instant::now();
            let planned = sluice_planner::plan_with_scaling(
                planner,
                &specs,
                gpus,
                prev_count.clamp(1, opts.gpu_limit),
                opts.gpu_limit,
            );
            plan_ms.push(tp.elapsed().as_secs_f64() * 1e3);
            out.plans += 1;
            match planned {
                Ok((pl, count)) => {
                    prev_count = count.max(1);
                    last = Some(pl);
                }
                Err(_) => out.unschedulable_periods += 1,
            }
            // Rate segments of the period, one per second (or the period).
            let seg = len.min(1.0);
            let nseg = (len / seg).ceil() as usize;
            let models: Vec<SimModel> = sc
                .models
                .iter()
                .zip(slo_ms.iter())
                .map(|(m, &slo)| SimModel {
                    name: m.name.clone(),
                    slo_ms: slo,
                    rate: (0..nseg)
                        .map(|i| {
                            let s = i as f64 * seg;
                            (s, per_model(t0 + s + 0.5 * seg.min(len - s)))
                        })
                        .collect(),
                })
                .collect();
            let (parts, used, pct) = match &last {
                Some(pl) => {
                    let f = interference_factors(pl, intf.as_ref());
                    let pct: u32 = pl.partitions().map(|(_, p)| p.size_pct).sum();
                    (
                        sim_partitions(tables, pl, &f, most, index),
                        pl.gpus.len(),
                        pct,
                    )
                }
                None => (Vec::new(), 0, 0),
            };
            let sim = crate::cluster::serve(
                &models,
                &parts,
                &SimOptions {
                    duration_s: len,
                    seed: period_seed(seed, k as u64),
                    routing: Routing::Random,
                    rounds: Rounds::WorkConserving,
                    batching: opts.batching,
                    engine: opts.engine,
                    arrivals: crate::cluster::sim::ArrivalSeeding::PerSecond {
                        seed: period_seed(seed, u64::MAX),
                        t0_s: t0,
                    },
                },
            )?;
            out.max_gpus = out.max_gpus.max(used);
            out.gpu_seconds += used as f64 * len;
            let w = ((t0 / opts.window_s) as usize).min(windows - 1);
            w_gpu[w] += used as f64 * len;
            w_pct[w] += f64::from(pct) * len;
            for (i, mo) in sim.models.iter().enumerate() {
                w_arr[w] += mo.arrived;
                w_vio[w] += mo.violated;
                w_ok[w][i] += mo.arrived - mo.violated;
                out.arrived += mo.arrived;
                out.violated += mo.violated;
            }
            recent.push_back((len, sim.models.iter().map(|m| m.arrived).collect()));
            counted = windowed_rates(&mut recent, opts.rate_window_s.unwrap_or(0.0));
            tick();
        }
        out.violation_rate = if out.arrived == 0 {
            0.0
        } else {
            out.violated as f64 / out.arrived as f64
        };
        plan_ms.sort_by(f64::total_cmp);
        out.plan_ms_median = plan_ms.get(plan_ms.len() / 2).copied().unwrap_or(0.0);
        out.windows = (0..windows)
            .map(|w| {
                let t = w as f64 * opts.window_s;
                let span = opts.window_s.min(opts.duration_s - t);
                Window {
                    t_s: t,
                    gpus: w_gpu[w] / span,
                    partition_sum: w_pct[w] / span,
                    violation_rate: if w_arr[w] == 0 {
                        0.0
                    } else {
                        w_vio[w] as f64 / w_arr[w] as f64
                    },
                    throughput_rps: w_ok[w].iter().sum::<u64>() as f64 / span,
                    model_throughput_rps: w_ok[w].iter().map(|&x| x as f64 / span).collect(),
                    offered_rps: per_model(t + 0.5 * span) * n,
                }
            })
            .collect();
        out.wall_s = t_run.elapsed().as_secs_f64();
        runs.push(out);
    }
    Ok(runs)
}

/// The human-readable report.
pub fn table(r: &TraceReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "sluice bench trace: SIMULATED, device profile {}, scenario {}, planner {}",
        r.device, r.scenario, r.planner
    );
    let _ = writeln!(s, "{}", r.rules);
    let _ = writeln!(s, "SLO rule: {}", r.slo_rule);
    let _ = writeln!(s, "tables: {}", r.tables);
    let _ = writeln!(s, "interference: {}", r.interference_note);
    let _ = writeln!(
        s,
        "\n{:>8} {:>10} {:>8} {:>12} {:>9} {:>8} {:>10} {:>8}",
        "period s", "requests", "viol %", "GPU-seconds", "max GPUs", "unsched", "plan ms", "wall s"
    );
    for x in &r.runs {
        let _ = writeln!(
            s,
            "{:>8} {:>10} {:>8.3} {:>12.0} {:>9} {:>8} {:>10.3} {:>8.2}",
            x.period_s,
            x.arrived,
            100.0 * x.violation_rate,
            x.gpu_seconds,
            x.max_gpus,
            x.unschedulable_periods,
            x.plan_ms_median,
            x.wall_s
        );
    }
    if r.seeds.len() > 1 {
        let _ = writeln!(
            s,
            "\nover {} seeds ({}), mean [least, most]:",
            r.seeds.len(),
            r.seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            s,
            "{:>8} {:>12} {:>24} {:>28}",
            "period s", "late mean", "viol % [least, most]", "GPU-seconds [least, most]"
        );
        for x in &r.over_seeds {
            let _ = writeln!(
                s,
                "{:>8} {:>12.1} {:>24} {:>28}",
                x.period_s,
                x.violated_mean,
                format!(
                    "{:.3} [{:.3}, {:.3}]",
                    100.0 * x.violation_rate_mean,
                    100.0 * x.violation_rate_min,
                    100.0 * x.violation_rate_max
                ),
                format!(
                    "{:.0} [{:.0}, {:.0}]",
                    x.gpu_seconds_mean, x.gpu_seconds_min, x.gpu_seconds_max
                ),
            );
        }
    }
    for v in &r.verdicts {
        let _ = writeln!(
            s,
            "\n{} s against {} s, means over {} seed(s): late {:.1} vs {:.1} ({}), GPU-seconds {:+.2} % (at most {:+.0} %: {}) => {}",
            v.period_s,
            v.baseline_period_s,
            v.seeds,
            v.violated_mean[1],
            v.violated_mean[0],
            if v.fewer_late { "fewer" } else { "not fewer" },
            100.0 * v.gpu_seconds_change,
            100.0 * GPU_SECONDS_SLACK,
            if v.gpu_seconds_within {
                "within"
            } else {
                "over"
            },
            if v.met { "MET" } else { "NOT MET" }
        );
    }
    for x in &r.runs {
        let _ = writeln!(
            s,
            "\nperiod {} s, first seed, per {} s window (every 8th shown; --json has all):",
            x.period_s,
            x.windows.get(1).map_or(0.0, |w| w.t_s)
        );
        let _ = writeln!(
            s,
            "{:>7} {:>9} {:>9} {:>6} {:>8} {:>8}",
            "t s", "offered", "served", "GPUs", "part %", "viol %"
        );
        for w in x.windows.iter().step_by(8) {
            let _ = writeln!(
                s,
                "{:>7.0} {:>9.1} {:>9.1} {:>6.2} {:>8.0} {:>8.2}",
                w.t_s,
                w.offered_rps,
                w.throughput_rps,
                w.gpus,
                w.partition_sum,
                100.0 * w.violation_rate
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_window_counts_whole_periods_covering_it() {
        let mut recent = VecDeque::new();
        // No window: the period just ended, older ones dropped.
        recent.push_back((1.0, vec![10, 0]));
        recent.push_back((1.0, vec![20, 4]));
        assert_eq!(windowed_rates(&mut recent, 0.0), [20.0, 4.0]);
        assert_eq!(recent.len(), 1);
        // A 3 s window over 1 s periods: the newest three once there are
        // three, fewer before.
        recent.push_back((1.0, vec![30, 2]));
        assert_eq!(windowed_rates(&mut recent, 3.0), [25.0, 3.0]);
        recent.push_back((1.0, vec![40, 0]));
        recent.push_back((1.0, vec![50, 6]));
        assert_eq!(windowed_rates(&mut recent, 3.0), [40.0, 8.0 / 3.0]);
        assert_eq!(recent.len(), 3);
        // A window shorter than the period: that period alone; a short last
        // period counts by its own length.
        recent.push_back((0.5, vec![10, 1]));
        assert_eq!(windowed_rates(&mut recent, 0.2), [20.0, 2.0]);
    }

    #[test]
    fn the_waves_rise_and_fall_as_gpulets_figure_15() {
        let r = |t| wave_rps(t, 3200.0, 100.0, 500.0, 800.0);
        assert_eq!(r(0.0), 100.0);
        assert_eq!(r(600.0), 500.0);
        assert_eq!(r(300.0), 300.0);
        assert_eq!(r(1300.0), 100.0);
        assert_eq!(r(2200.0), 800.0);
        assert_eq!(r(3100.0), 100.0);
        // Scaled to a shorter trace.
        assert_eq!(wave_rps(60.0, 320.0, 100.0, 500.0, 800.0), 500.0);
    }

    #[test]
    fn a_short_trace_scales_gpus_with_the_rate_and_reports_each_period() {
        let sc = crate::cluster::scenario::builtin("scen3")
            .expect("shipped")
            .expect("parses");
        let opts = TraceOptions {
            planner: PlannerKind::Gpulet,
            periods_s: vec![20.0, 5.0],
            duration_s: 320.0,
            base_rps: 20.0,
            peak1_rps: 300.0,
            peak2_rps: 400.0,
            interference: Interference::None,
            seeds: 1,
            ..TraceOptions::default()
        };
        let r = run(&sc, &ModelRegistry::builtin(), &opts, |_, _| {}).unwrap();
        assert_eq!(r.runs.len(), 2);
        for x in &r.runs {
            assert_eq!(x.plans as f64, 320.0 / x.period_s);
            assert_eq!(x.windows.len(), 16);
            assert!(x.arrived > 0 && x.gpu_seconds > 0.0);
            // More GPUs at the second peak (t = 220 s) than at the start.
            let at = |t: f64| x.windows[(t / 20.0) as usize].gpus;
            assert!(at(220.0) > at(0.0), "{:?}", x.windows);
        }
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["simulated"], true);
        assert!(v["runs"][0]["windows"][0]["partition_sum"].is_number());
        for k in [
            "t_s",
            "gpus",
            "partition_sum",
            "violation_rate",
            "throughput_rps",
        ] {
            assert!(v["fig15"]["windows"][0][k].is_number(), "{k}");
        }
        assert_eq!(v["fig15"]["period_s"], 20.0);
    }

    #[test]
    fn period_seeds_of_neighbouring_runs_do_not_coincide() {
        assert_eq!(period_seed(1, 7), period_seed(1, 7));
        for seed in 0..20u64 {
            for k in 0..200u64 {
                assert_ne!(period_seed(seed + 1, k), period_seed(seed, k + 1));
                assert_ne!(period_seed(seed, k), period_seed(seed, k + 1));
            }
        }
    }

    fn seeds_of(period_s: f64, rows: &[(u64, f64)]) -> PeriodSeeds {
        PeriodSeeds::new(
            period_s,
            rows.iter()
                .enumerate()
                .map(|(i, &(violated, gpu_seconds))| SeedRow {
                    seed: i as u64 + 1,
                    arrived: 1000,
                    violated,
                    violation_rate: violated as f64 / 1000.0,
                    gpu_seconds,
                    unschedulable_periods: 0,
                })
                .collect(),
        )
    }

    #[test]
    fn the_verdict_takes_means_and_needs_both_fewer_late_and_the_gpu_seconds() {
        let base = seeds_of(20.0, &[(10, 1000.0), (20, 1000.0)]);
        assert_eq!(base.violated_mean, 15.0);
        assert_eq!(
            (base.violation_rate_min, base.violation_rate_max),
            (0.01, 0.02)
        );
        // Fewer on the mean (one seed worse), GPU-seconds +0.5 %: met.
        let v = Verdict::of(&base, &seeds_of(1.0, &[(12, 1000.0), (10, 1010.0)]));
        assert!(v.fewer_late && v.gpu_seconds_within && v.met, "{v:?}");
        assert!((v.gpu_seconds_change - 0.005).abs() < 1e-12);
        // Equal late counts are not fewer.
        let v = Verdict::of(&base, &seeds_of(1.0, &[(15, 990.0), (15, 990.0)]));
        assert!(!v.fewer_late && v.gpu_seconds_within && !v.met, "{v:?}");
        // Fewer late, but 1.5 % more GPU-seconds.
        let v = Verdict::of(&base, &seeds_of(1.0, &[(0, 1015.0), (0, 1015.0)]));
        assert!(v.fewer_late && !v.gpu_seconds_within && !v.met, "{v:?}");
        // Fewer GPU-seconds always pass that half.
        let v = Verdict::of(&base, &seeds_of(1.0, &[(1, 900.0), (1, 900.0)]));
        assert!(v.met && v.gpu_seconds_change < 0.0, "{v:?}");
    }

    #[test]
    fn several_seeds_are_served_the_same_on_any_number_of_workers() {
        let sc = crate::cluster::scenario::builtin("scen3")
            .expect("shipped")
            .expect("parses");
        let opts = TraceOptions {
            planner: PlannerKind::Gpulet,
            periods_s: vec![20.0, 5.0],
            duration_s: 120.0,
            base_rps: 20.0,
            peak1_rps: 200.0,
            peak2_rps: 300.0,
            interference: Interference::None,
            seeds: 3,
            seed: 4,
            jobs: 2,
            ..TraceOptions::default()
        };
        let mut ticks = Vec::new();
        let two = run(&sc, &ModelRegistry::builtin(), &opts, |d, t| {
            ticks.push((d, t))
        })
        .unwrap();
        // 6 + 24 periods per seed, three seeds, counted once each.
        assert_eq!(ticks.first(), Some(&(0, 90)));
        assert_eq!(ticks.last(), Some(&(90, 90)));
        assert_eq!(ticks.len(), 91);
        let one = run(
            &sc,
            &ModelRegistry::builtin(),
            &TraceOptions {
                jobs: 1,
                ..opts.clone()
            },
            |_, _| {},
        )
        .unwrap();
        assert_eq!(two.seeds, [4, 5, 6]);
        assert_eq!(two.over_seeds, one.over_seeds);
        assert_eq!(two.over_seeds.len(), 2);
        for (p, x) in two.over_seeds.iter().enumerate() {
            assert_eq!(x.per_seed.len(), 3);
            // The first seed's row is the run the report keeps whole.
            assert_eq!(x.per_seed[0].arrived, two.runs[p].arrived);
            assert_eq!(x.per_seed[0].violated, two.runs[p].violated);
            // Other seeds draw other arrivals.
            assert_ne!(x.per_seed[0].arrived, x.per_seed[1].arrived);
            let mean = x.per_seed.iter().map(|r| r.gpu_seconds).sum::<f64>() / 3.0;
            assert!((x.gpu_seconds_mean - mean).abs() < 1e-9);
        }
        // Both period lengths of a seed serve the same requests (paired).
        for i in 0..3 {
            assert_eq!(
                two.over_seeds[0].per_seed[i].arrived, two.over_seeds[1].per_seed[i].arrived,
                "seed {i}"
            );
        }
        assert_eq!(two.verdicts.len(), 1);
        assert_eq!(two.verdicts[0].period_s, 5.0);
        assert_eq!(two.verdicts[0].baseline_period_s, 20.0);
        let v = serde_json::to_value(&two).unwrap();
        assert!(v["verdicts"][0]["met"].is_boolean());
        assert!(v["over_seeds"][1]["per_seed"][2]["gpu_seconds"].is_number());
    }
}
