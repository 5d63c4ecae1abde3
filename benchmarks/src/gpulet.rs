//! `sluice bench gpulet`: the planner-level figures of the gpulet paper
//! (Choi et al., USENIX ATC '22; `../shared/papers/gpulet-atc2022.txt`),
//! SIMULATED on the GPU model's `L(b, p)` tables. No serving: a scenario is
//! *schedulable* when the planner returns a placement on the GPU count (and
//! that placement passes `sluice_planner::check`, or
//! `check_with_interference` for the planners with interference; a failure
//! there is reported as a planner bug).
//!
//! - **Fig. 5 / Fig. 16** ([`fig16`]): the 3^9 − 1 = 19,682 rate vectors of
//!   §3.2 (Table 3's nine models, each at level 0, 1 or 2, all-zero left
//!   out) on 4 GPUs, counted for `sbp`, [`Sbp1to1`], `gpulet+int` and
//!   `ideal` (with the same interference model), and the scenarios the
//!   ideal schedules that gpulet+int does not.
//! - **Fig. 17** ([`fig17`]): per shipped scenario (game, traffic,
//!   scen1..scen5), the largest factor on all its rates that gpulet+int and
//!   the ideal schedule, and their ratio.
//! - **Fig. 6** ([`fig6`]): four model pairs on 2 GPUs at equal rates, the
//!   largest schedulable rate of sbp, greedy best-fit and the ideal over
//!   splits 2:8, 4:6, 5:5, normalised to greedy.
//!
//! **Rate rule (a choice).** §3.2's rates 0, 100 and 200 req/s are for an
//! RTX 2080 Ti with Table 3's SLOs; our SLOs differ (the SLO rule of
//! [`crate::cluster`]: 2 × L(32, 100 %) on the device profile). Each
//! model's level-`k` rate is `k · 100 · paper_SLO / our_SLO` req/s, which
//! keeps `rate × SLO` — the number of requests that arrive in one SLO
//! window, the batch a window collects — as in the paper.
//!
//! **Max-rate search (Fig. 17, Fig. 6).** All rates are scaled by one
//! factor. The reported maximum follows the paper ("gradually increases
//! the rate"): an upward scan in steps of [`SCAN_STEP`] (0.5 %, relative)
//! that stops at the first factor the planner refuses. Its start comes from
//! a doubling-then-bisection search (from factor 1, to 0.5 %): the scan
//! starts at a quarter of the bisection's result (halved until schedulable).
//! Schedulability need not be monotone in the factor, so the two can
//! differ; both are reported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_model::ModelRegistry;
use sluice_planner::{
    AnyInterference, GpuPlan, GpuSpec, GpuletInt, GreedyBestFit, Ideal, LatencyTable,
    LinearInterference, ModelSpec, PartitionPlan, PartitionSizes, Placement, PlanError, Planner,
    Sbp,
};

use crate::cluster::scenario::{Scenario, ScenarioError};
use crate::cluster::{ClusterError, TableInfo, slos};

/// §3.2's rate levels, req/s on the paper's 2080 Ti (rescaled per model by
/// the rate rule of the module docs).
pub const RATE_LEVELS: [f64; 3] = [0.0, 100.0, 200.0];

/// The scenarios of Fig. 17.
pub const FIG17_SCENARIOS: [&str; 7] = [
    "game", "traffic", "scen1", "scen2", "scen3", "scen4", "scen5",
];

/// The pairs of Fig. 6 (deployment names of `table3.toml`) and the paper's
/// short names.
pub const FIG6_PAIRS: [(&str, &str, &str); 4] = [
    ("ssd-mobilenet", "bert", "ssd/be"),
    ("resnet50", "vgg16", "res/vgg"),
    ("googlenet", "mobilenet-v2", "goo/mob"),
    ("mnasnet", "densenet", "nas/den"),
];

/// §3.3's splits for the ideal of Fig. 6 (two GPUs): 2:8, 4:6, 5:5.
pub const FIG6_SPLITS: [(u32, u32); 3] = [(20, 80), (40, 60), (50, 50)];

/// Relative step of the upward scan and precision of the bisection.
pub const SCAN_STEP: f64 = 0.005;

/// The gpulet data's GPU whose interference coefficients are used.
pub const INTERFERENCE_GPU: &str = "2080ti";

/// The rate rule, as printed.
pub const RATE_RULE: &str = "Fig. 16: level k of {0, 100, 200} req/s becomes k x paper_SLO / our_SLO per model (keeps rate x SLO, the batch one SLO window collects, as on the paper's 2080 Ti; a choice). Fig. 17: the scenario file's rates, all scaled by one factor. Fig. 6: equal rates for the pair, scaled by one factor";

/// The SLO rule, as printed.
pub const SLO_RULE: &str = "SLO = 2 x L(32, 100%) of the model's manifest on the device profile (slo_rule \"app\": the largest over the application's models), as sluice bench cluster";

/// The search rule, as printed.
pub const SEARCH_RULE: &str = "max rate: upward scan in 0.5 % steps to the first refused factor (the paper's 'gradually increases the rate'), starting at 1/4 of a doubling + bisection search's result (also reported)";

/// A figure of the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Fig {
    /// Fig. 5 and Fig. 16: schedulable scenarios.
    #[serde(rename = "16")]
    Fig16,
    /// Fig. 17: max schedulable rate, gpulet+int over ideal.
    #[serde(rename = "17")]
    Fig17,
    /// Fig. 6: pairs on two GPUs.
    #[serde(rename = "6")]
    Fig6,
}

impl Fig {
    /// `16` (or `5`), `17`, `6`.
    pub fn from_name(s: &str) -> Option<Self> {
        match s.trim() {
            "16" | "5" => Some(Self::Fig16),
            "17" => Some(Self::Fig17),
            "6" => Some(Self::Fig6),
            _ => None,
        }
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuletOptions {
    /// Figures.
    pub figs: Vec<Fig>,
    /// Device profile instead of each scenario's own.
    pub device: Option<String>,
    /// gpulet's data folder (with `2080ti/`); `None`: the built-in copy
    /// of the repository's `data/gpulet`.
    pub gpulet_data: Option<PathBuf>,
    /// Worker threads for Fig. 16.
    pub threads: usize,
    /// Scenarios of Fig. 17.
    pub fig17_scenarios: Vec<String>,
    /// Where `L(b, p)` comes from.
    pub tables: crate::cluster::TableSource,
    /// Measured pairwise interference (see
    /// [`crate::cluster::ClusterOptions::measured_interference`]) for
    /// gpulet+int and the ideal instead of gpulet's linear model.
    pub measured_interference: Option<PathBuf>,
}

impl Default for GpuletOptions {
    fn default() -> Self {
        Self {
            figs: vec![Fig::Fig16, Fig::Fig17, Fig::Fig6],
            device: None,
            gpulet_data: None,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            fig17_scenarios: FIG17_SCENARIOS.iter().map(|s| (*s).to_owned()).collect(),
            tables: crate::cluster::TableSource::GpuModel,
            measured_interference: None,
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuletError {
    /// gpulet's data is not there.
    #[error(
        "gpulet's interference data is not at {path} (gpulet+int and the ideal plan with the authors' {INTERFERENCE_GPU} coefficients); give the folder holding {INTERFERENCE_GPU}/ with --data-dir DIR, or leave it out for the built-in data/gpulet"
    )]
    NoData {
        /// Where it was looked for.
        path: String,
    },
    /// gpulet's data unreadable.
    #[error(
        "gpulet data: {0}; give the folder holding {INTERFERENCE_GPU}/ with --data-dir DIR, or leave it out for the built-in data/gpulet"
    )]
    Data(String),
    /// A scenario problem.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// Measuring or the device.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A model `table3.toml` should have.
    #[error("table3.toml has no model {0:?}, which Fig. 6 needs")]
    MissingModel(String),
    /// A placement that fails the planner crate's own check.
    #[error(
        "{planner} planned {what} and its placement fails sluice_planner::check: {violation}; this is a planner bug, please report it"
    )]
    PlannerBug {
        /// Planner.
        planner: String,
        /// Which input.
        what: String,
        /// The check's finding.
        violation: String,
    },
}

// ---------------------------------------------------------------------------
// SBP on two fixed 50 % partitions per GPU.

/// SBP on GPUs each fixed-split into two 50 % partitions (gpulet §3.2,
/// Fig. 5 right). *Rule we chose:* each half is an SBP "GPU" of its own —
/// twice the GPU count, each model's table reduced to its 50 % column
/// (relabelled 100 % of the half), half the GPU's memory per half (a fixed
/// split of memory too; the paper does not say) — and SBP's placement on
/// the halves is mapped back, halves `2k` and `2k + 1` of its output to GPU
/// `k`, every partition 50 %.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sbp1to1;

impl Sbp1to1 {
    /// The partition size of each half.
    pub const HALF_PCT: u32 = 50;

    /// The half-GPU problem SBP solves: models with their 50 % column as
    /// 100 %, and `2 × count` GPUs of half the memory.
    pub fn halves(
        models: &[ModelSpec],
        gpus: &GpuSpec,
    ) -> Result<(Vec<ModelSpec>, GpuSpec), PlanError> {
        if !gpus.allows(Self::HALF_PCT) {
            return Err(PlanError::SizeNotAllowed {
                planner: "sbp_1to1",
                what: "a 50 % partition".into(),
                allowed: gpus.allowed_sizes(),
            });
        }
        let mut out = Vec::with_capacity(models.len());
        for m in models {
            let t = &m.profile;
            let rows: Option<Vec<Vec<f64>>> = t
                .batches()
                .iter()
                .map(|&b| t.latency_ms(b, Self::HALF_PCT).map(|l| vec![l]))
                .collect();
            let Some(rows) = rows else {
                return Err(PlanError::MissingPartition {
                    planner: "sbp_1to1",
                    model: m.name.clone(),
                    pct: Self::HALF_PCT,
                });
            };
            let profile = LatencyTable::new(t.batches().to_vec(), vec![100], rows)
                .expect("one column of a valid table is a valid table");
            out.push(ModelSpec {
                profile,
                ..m.clone()
            });
        }
        let half = GpuSpec::new(gpus.count * 2, gpus.mem_mb / 2, 100);
        Ok((out, half))
    }

    /// SBP's placement on the halves.
    pub fn plan_halves(models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        let (m, g) = Self::halves(models, gpus)?;
        Sbp.plan(&m, &g)
    }

    /// Halves `2k`, `2k + 1` become GPU `k`'s two 50 % partitions.
    pub fn join(halves: &Placement) -> Placement {
        Placement {
            gpus: halves
                .gpus
                .chunks(2)
                .map(|pair| GpuPlan {
                    partitions: pair
                        .iter()
                        .flat_map(|g| &g.partitions)
                        .map(|p| PartitionPlan {
                            size_pct: Self::HALF_PCT,
                            ..p.clone()
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

impl Planner for Sbp1to1 {
    fn name(&self) -> &'static str {
        "sbp_1to1"
    }

    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        Self::plan_halves(models, gpus).map(|p| Self::join(&p))
    }
}

// ---------------------------------------------------------------------------
// Fig. 5 / 16.

/// The rate-level vectors of §3.2: every vector of `n` digits in `0..3`
/// except all zeros, in base-3 order (the first model the least
/// significant digit).
pub fn combinations(n: u32) -> impl Iterator<Item = Vec<u8>> {
    (1..3u64.pow(n)).map(move |i| combination(n, i))
}

/// The `index`-th vector of [`combinations`] (`index` from 1).
pub fn combination(n: u32, mut index: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            let d = (index % 3) as u8;
            index /= 3;
            d
        })
        .collect()
}

/// One model of Fig. 16.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fig16Model {
    /// Deployment name.
    pub name: String,
    /// Manifest.
    pub model: String,
    /// Table 3's SLO on the 2080 Ti.
    pub paper_slo_ms: Option<f64>,
    /// Ours.
    pub slo_ms: f64,
    /// Its rates at levels 0, 1, 2.
    pub rates_rps: [f64; 3],
}

/// Fig. 5 and Fig. 16's counts.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Fig16 {
    /// Scenarios tried (3^9 − 1).
    pub scenarios: usize,
    /// Schedulable by SBP.
    pub sbp: usize,
    /// By SBP on fixed 1:1 halves.
    pub sbp_1to1: usize,
    /// By gpulet+int.
    pub gpulet_int: usize,
    /// By the ideal (with interference).
    pub ideal: usize,
    /// Schedulable by the ideal but not by gpulet+int.
    pub ideal_not_gpulet_int: usize,
    /// Schedulable by gpulet+int but not by the ideal.
    pub gpulet_int_not_ideal: usize,
    /// `gpulet_int_and_ideal / ideal`.
    pub gpulet_int_share_of_ideal: f64,
    /// Per planner, errors other than "does not fit" (a model no size
    /// serves within its SLO, …): count and the first message.
    pub other_errors: BTreeMap<String, (usize, String)>,
    /// The models and their rates.
    pub models: Vec<Fig16Model>,
    /// Worker threads.
    pub threads: usize,
    /// Wall time of the counting, s.
    pub wall_s: f64,
}

/// Per planner outcome of one scenario.
fn outcome(
    planner: &str,
    r: Result<Placement, PlanError>,
    errors: &mut BTreeMap<String, (usize, String)>,
) -> Option<Placement> {
    match r {
        Ok(p) => Some(p),
        Err(PlanError::NotSchedulable { .. } | PlanError::NoViableLayout { .. }) => None,
        Err(e) => {
            let ent = errors
                .entry(planner.to_owned())
                .or_insert_with(|| (0, e.to_string()));
            ent.0 += 1;
            None
        }
    }
}

/// Checks a placement, `intf` for the planners that plan with it.
fn verify(
    planner: &str,
    what: impl FnOnce() -> String,
    p: &Placement,
    models: &[ModelSpec],
    gpus: &GpuSpec,
    intf: Option<&AnyInterference>,
) -> Result<(), GpuletError> {
    let r = match intf {
        None => sluice_planner::check(p, models, gpus),
        Some(i) => sluice_planner::check_with_interference(p, models, gpus, i),
    };
    r.map(|_| ()).map_err(|v| GpuletError::PlannerBug {
        planner: planner.into(),
        what: what(),
        violation: v.to_string(),
    })
}

/// Counts Fig. 16's schedulable scenarios: `models` (their rates ignored),
/// `unit_rps[i]` model `i`'s rate at level 1, on `gpus` (sbp and sbp_1to1
/// plan on it as is, gpulet+int and the ideal with gpulet's sizes).
/// `progress(done, total)` is called from this thread about 5 times a
/// second.
pub fn fig16(
    models: &[ModelSpec],
    unit_rps: &[f64],
    gpus: GpuSpec,
    intf: &AnyInterference,
    threads: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Fig16, GpuletError> {
    let t0 = Instant::now();
    let n = models.len() as u32;
    let total = 3usize.pow(n) - 1;
    let sized = gpus.with_sizes(PartitionSizes::gpulet());
    let threads = threads.max(1);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let worker = |t: usize| -> Result<Fig16, GpuletError> {
        let gi = GpuletInt::new(intf.clone());
        let ideal = Ideal::new().with_interference(intf.clone());
        let mut acc = Fig16::default();
        let mut specs = models.to_vec();
        for idx in (1 + t as u64..=total as u64).step_by(threads) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let levels = combination(n, idx);
            for ((s, &l), &u) in specs.iter_mut().zip(&levels).zip(unit_rps) {
                s.rate_rps = f64::from(l) * u;
            }
            let what = || format!("rate levels {levels:?}");
            let errs = &mut acc.other_errors;
            if let Some(p) = outcome("sbp", Sbp.plan(&specs, &gpus), errs) {
                verify("sbp", what, &p, &specs, &gpus, None)?;
                acc.sbp += 1;
            }
            if let Some(p) = outcome("sbp_1to1", Sbp1to1.plan(&specs, &gpus), errs) {
                verify("sbp_1to1", what, &p, &specs, &gpus, None)?;
                acc.sbp_1to1 += 1;
            }
            let g = outcome("gpulet+int", gi.plan(&specs, &sized), errs);
            if let Some(p) = &g {
                verify("gpulet+int", what, p, &specs, &sized, Some(intf))?;
                acc.gpulet_int += 1;
            }
            let i = outcome("ideal", ideal.plan(&specs, &sized), errs);
            if let Some(p) = &i {
                verify("ideal", what, p, &specs, &sized, Some(intf))?;
                acc.ideal += 1;
            }
            match (g.is_some(), i.is_some()) {
                (false, true) => acc.ideal_not_gpulet_int += 1,
                (true, false) => acc.gpulet_int_not_ideal += 1,
                _ => {}
            }
            acc.scenarios += 1;
            done.fetch_add(1, Ordering::Relaxed);
        }
        Ok(acc)
    };
    let parts: Vec<Result<Fig16, GpuletError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let w = &worker;
                let stop = &stop;
                s.spawn(move || {
                    let r = w(t);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        let mut last = usize::MAX;
        while !handles.iter().all(|h| h.is_finished()) {
            let d = done.load(Ordering::Relaxed);
            if d != last && d < total {
                progress(d, total);
                last = d;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a fig16 worker panicked"))
            .collect()
    });
    let mut out = Fig16::default();
    for p in parts {
        let p = p?;
        out.scenarios += p.scenarios;
        out.sbp += p.sbp;
        out.sbp_1to1 += p.sbp_1to1;
        out.gpulet_int += p.gpulet_int;
        out.ideal += p.ideal;
        out.ideal_not_gpulet_int += p.ideal_not_gpulet_int;
        out.gpulet_int_not_ideal += p.gpulet_int_not_ideal;
        for (k, (c, m)) in p.other_errors {
            out.other_errors.entry(k).or_insert((0, m)).0 += c;
        }
    }
    progress(out.scenarios, total);
    let both = out.ideal - out.ideal_not_gpulet_int;
    out.gpulet_int_share_of_ideal = if out.ideal == 0 {
        f64::NAN
    } else {
        both as f64 / out.ideal as f64
    };
    out.threads = threads;
    out.wall_s = t0.elapsed().as_secs_f64();
    Ok(out)
}

// ---------------------------------------------------------------------------
// The max-rate search (Fig. 17, Fig. 6).

/// The largest schedulable factor on all rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MaxFactor {
    /// The scan's: the last schedulable factor before the first refused
    /// one (0 when even a tiny factor is refused).
    pub factor: f64,
    /// The doubling + bisection search's.
    pub bisect_factor: f64,
    /// Why the first refused factor of the scan was refused.
    pub limit: String,
    /// Planner calls made.
    pub probes: usize,
}

/// Lowest and highest factors tried: 2^-20 and 2^20.
const FACTOR_RANGE: f64 = 1_048_576.0;

/// The search of the module docs. `refuses(f)` is `Ok(None)` when factor
/// `f` is schedulable, `Ok(Some(why))` when not.
pub fn max_factor<E>(
    mut refuses: impl FnMut(f64) -> Result<Option<String>, E>,
) -> Result<MaxFactor, E> {
    let mut probes = 0;
    let mut try_f = |f: f64| {
        probes += 1;
        refuses(f)
    };
    // Bracket from 1 by doubling or halving.
    let (mut lo, mut hi);
    if try_f(1.0)?.is_none() {
        lo = 1.0;
        hi = 2.0;
        while try_f(hi)?.is_none() {
            lo = hi;
            hi *= 2.0;
            if hi > FACTOR_RANGE {
                break;
            }
        }
    } else {
        hi = 1.0;
        lo = 0.5;
        while try_f(lo)?.is_some() {
            hi = lo;
            lo /= 2.0;
            if lo < 1.0 / FACTOR_RANGE {
                let why = try_f(lo)?.unwrap_or_default();
                return Ok(MaxFactor {
                    factor: 0.0,
                    bisect_factor: 0.0,
                    limit: why,
                    probes,
                });
            }
        }
    }
    while hi / lo > 1.0 + SCAN_STEP {
        let mid = (lo * hi).sqrt();
        if try_f(mid)?.is_none() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let bisect = lo;
    // The scan, from a quarter of it.
    let mut f = bisect / 4.0;
    while try_f(f)?.is_some() {
        f /= 2.0;
        if f < 1.0 / FACTOR_RANGE {
            return Ok(MaxFactor {
                factor: 0.0,
                bisect_factor: bisect,
                limit: String::new(),
                probes,
            });
        }
    }
    let limit;
    loop {
        let g = f * (1.0 + SCAN_STEP);
        if let Some(why) = try_f(g)? {
            limit = format!("{why} at {g:.4}x");
            break;
        }
        f = g;
        if f > FACTOR_RANGE {
            limit = "no limit found".into();
            break;
        }
    }
    Ok(MaxFactor {
        factor: f,
        bisect_factor: bisect,
        limit,
        probes,
    })
}

/// Plans `models` with every rate times `factor`; `Ok(None)` when placed
/// (and the placement checked), else the planner's reason.
fn refuses(
    planner: &dyn Planner,
    models: &[ModelSpec],
    gpus: &GpuSpec,
    intf: Option<&AnyInterference>,
    factor: f64,
    what: &str,
) -> Result<Option<String>, GpuletError> {
    let scaled: Vec<ModelSpec> = models
        .iter()
        .map(|m| ModelSpec {
            rate_rps: m.rate_rps * factor,
            ..m.clone()
        })
        .collect();
    match planner.plan(&scaled, gpus) {
        Ok(p) => {
            verify(
                planner.name(),
                || format!("{what} at {factor}x"),
                &p,
                &scaled,
                gpus,
                intf,
            )?;
            Ok(None)
        }
        Err(e) => Ok(Some(e.to_string())),
    }
}

/// One scenario of Fig. 17.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fig17Row {
    /// Scenario.
    pub scenario: String,
    /// gpulet+int's max rate over the ideal's.
    pub normalised_rate: f64,
    /// gpulet+int's max total rate, req/s.
    pub gpulet_int_rps: f64,
    /// The ideal's.
    pub ideal_rps: f64,
    /// gpulet+int's search.
    pub gpulet_int: MaxFactor,
    /// The ideal's.
    pub ideal: MaxFactor,
    /// The bisection's ratio (cross-check).
    pub normalised_rate_bisect: f64,
    /// Wall time, s.
    pub wall_s: f64,
}

/// A scenario with its measured tables and SLOs, rates at factor 1.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The scenario.
    pub sc: Scenario,
    /// Device profile of its tables.
    pub device: String,
    /// Its models for the planners.
    pub specs: Vec<ModelSpec>,
}

impl Prepared {
    /// Builds the planner input from measured `tables` (scenario order).
    pub fn new(sc: Scenario, device: String, tables: &[&TableInfo]) -> Self {
        let slo = slos(&sc, tables);
        let specs = sc
            .models
            .iter()
            .zip(tables)
            .zip(slo)
            .map(|((m, t), slo_ms)| ModelSpec {
                name: m.name.clone(),
                slo_ms,
                rate_rps: m.peak_rps(),
                mem_mb: m.mem_mb,
                profile: t.table.clone(),
            })
            .collect();
        Self { sc, device, specs }
    }

    /// Its GPUs, with gpulet's sizes.
    pub fn gpulet_gpus(&self) -> GpuSpec {
        self.plain_gpus().with_sizes(PartitionSizes::gpulet())
    }

    /// Its GPUs, any multiple of the step.
    pub fn plain_gpus(&self) -> GpuSpec {
        GpuSpec::new(self.sc.gpus, self.sc.gpu_mem_mb, self.sc.partition_step_pct)
    }
}

/// Fig. 17 on one scenario: gpulet+int and the ideal (both with
/// interference, gpulet's sizes).
pub fn fig17(p: &Prepared, intf: &AnyInterference) -> Result<Fig17Row, GpuletError> {
    let t0 = Instant::now();
    let intf = intf.clone();
    let gpus = p.gpulet_gpus();
    let gi = GpuletInt::new(intf.clone());
    let ideal = Ideal::new().with_interference(intf.clone());
    let name = &p.sc.name;
    let g = max_factor(|f| refuses(&gi, &p.specs, &gpus, Some(&intf), f, name))?;
    let i = max_factor(|f| refuses(&ideal, &p.specs, &gpus, Some(&intf), f, name))?;
    let base: f64 = p.specs.iter().map(|m| m.rate_rps).sum();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    Ok(Fig17Row {
        scenario: name.clone(),
        normalised_rate: ratio(g.factor, i.factor),
        gpulet_int_rps: g.factor * base,
        ideal_rps: i.factor * base,
        normalised_rate_bisect: ratio(g.bisect_factor, i.bisect_factor),
        gpulet_int: g,
        ideal: i,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------
// Fig. 6.

/// One pair of Fig. 6.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fig6Row {
    /// The paper's short names.
    pub pair: String,
    /// Deployment names.
    pub models: [String; 2],
    /// Max total rate (both models, equal rates), req/s.
    pub sbp_rps: f64,
    /// Greedy best-fit's.
    pub greedy_rps: f64,
    /// The ideal's (2:8, 4:6, 5:5).
    pub ideal_rps: f64,
    /// `sbp_rps / greedy_rps`.
    pub sbp_normalised: f64,
    /// `ideal_rps / greedy_rps`.
    pub ideal_normalised: f64,
    /// The searches: sbp, greedy, ideal.
    pub searches: [MaxFactor; 3],
}

/// Base rate of each model of a pair at factor 1, req/s.
pub const FIG6_BASE_RPS: f64 = 100.0;

/// Fig. 6 on one pair `a`, `b` (with rates ignored) on `gpus` (2 GPUs,
/// no interference, as in §3.3).
pub fn fig6(
    pair: &str,
    a: &ModelSpec,
    b: &ModelSpec,
    gpus: GpuSpec,
) -> Result<Fig6Row, GpuletError> {
    let models: Vec<ModelSpec> = [a, b]
        .iter()
        .map(|m| ModelSpec {
            rate_rps: FIG6_BASE_RPS,
            ..(*m).clone()
        })
        .collect();
    let ideal = Ideal::with_splits(FIG6_SPLITS.to_vec());
    let planners: [&dyn Planner; 3] = [&Sbp, &GreedyBestFit, &ideal];
    let mut s = Vec::new();
    for p in planners {
        s.push(max_factor(|f| refuses(p, &models, &gpus, None, f, pair))?);
    }
    let total = |m: &MaxFactor| m.factor * 2.0 * FIG6_BASE_RPS;
    let (sbp, greedy, ideal_rps) = (total(&s[0]), total(&s[1]), total(&s[2]));
    let norm = |x: f64| if greedy > 0.0 { x / greedy } else { f64::NAN };
    Ok(Fig6Row {
        pair: pair.into(),
        models: [a.name.clone(), b.name.clone()],
        sbp_rps: sbp,
        greedy_rps: greedy,
        ideal_rps,
        sbp_normalised: norm(sbp),
        ideal_normalised: norm(ideal_rps),
        searches: s.try_into().expect("three planners"),
    })
}

// ---------------------------------------------------------------------------
// The whole run.

/// Fig. 17's average and the scenarios.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuletReport {
    /// Always true: planner-level, on the GPU model's tables.
    pub simulated: bool,
    /// Device profile(s) of the tables.
    pub device: String,
    /// The SLO rule.
    pub slo_rule: String,
    /// The rate rule.
    pub rate_rule: String,
    /// The max-rate search.
    pub search_rule: String,
    /// The interference model.
    pub interference: String,
    /// Partition sizes of gpulet+int and the ideal.
    pub partition_sizes: String,
    /// Where the tables came from ([`crate::cluster::TableSource::describe`]).
    pub tables: String,
    /// Fig. 5 / 16.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fig16: Option<Fig16>,
    /// Fig. 17.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fig17: Option<Vec<Fig17Row>>,
    /// Fig. 17's mean of `normalised_rate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fig17_average: Option<f64>,
    /// Fig. 6.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fig6: Option<Vec<Fig6Row>>,
    /// Wall time of measuring the tables, s.
    pub tables_wall_s: f64,
    /// Wall time of everything, s.
    pub wall_s: f64,
}

/// Loads gpulet's 2080 Ti data from `dir`, or the built-in copy of the
/// repository's `data/gpulet` when `dir` is `None`, with the error naming
/// `--data-dir DIR`.
pub fn load_gpulet_data(dir: Option<&Path>) -> Result<LinearInterference, GpuletError> {
    let loaded = match dir {
        None => LinearInterference::builtin(INTERFERENCE_GPU),
        Some(dir) => {
            let sub = dir.join(INTERFERENCE_GPU);
            if !sub.is_dir() {
                return Err(GpuletError::NoData {
                    path: dir.display().to_string(),
                });
            }
            LinearInterference::load_dir(&sub)
        }
    };
    loaded.map_err(|e| GpuletError::Data(e.to_string()))
}

/// Runs the figures of `opts`. `on_tables(done, total)` while measuring,
/// `on_fig(what, done, total)` while computing.
pub fn run(
    reg: &ModelRegistry,
    opts: &GpuletOptions,
    mut on_tables: impl FnMut(usize, usize),
    mut on_fig: impl FnMut(&str, usize, usize),
) -> Result<GpuletReport, GpuletError> {
    let t_all = Instant::now();
    let gpulet = load_gpulet_data(opts.gpulet_data.as_deref())?;
    let measured = opts
        .measured_interference
        .as_deref()
        .map(crate::cluster::load_measured_interference)
        .transpose()?;
    let want = |f| opts.figs.contains(&f);
    let table3 = crate::cluster::scenario::builtin("table3").expect("table3 is shipped")?;
    let mut fig17_sc: Vec<Scenario> = Vec::new();
    if want(Fig::Fig17) {
        for n in &opts.fig17_scenarios {
            fig17_sc.extend(crate::cluster::scenario::resolve(n)?);
        }
    }
    let mut scenarios = fig17_sc.clone();
    if want(Fig::Fig16) || want(Fig::Fig6) {
        scenarios.push(table3.clone());
    }
    for sc in &scenarios {
        sc.check_models(reg)?;
    }
    let device_of = |sc: &Scenario| opts.device.clone().unwrap_or_else(|| sc.device.clone());
    let t_tables = Instant::now();
    let tables =
        crate::cluster::measure_tables(&scenarios, &device_of, reg, &opts.tables, &mut on_tables)?;
    let tables_wall_s = t_tables.elapsed().as_secs_f64();
    let prepare = |sc: &Scenario| {
        let d = device_of(sc);
        let ts: Vec<&TableInfo> = sc
            .models
            .iter()
            .map(|m| &tables[&(d.clone(), m.model.clone())])
            .collect();
        Prepared::new(sc.clone(), d, &ts)
    };
    let t3 = (want(Fig::Fig16) || want(Fig::Fig6)).then(|| prepare(&table3));
    let mut devices: Vec<String> = Vec::new();
    let mut report = GpuletReport {
        simulated: true,
        device: String::new(),
        slo_rule: SLO_RULE.into(),
        rate_rule: RATE_RULE.into(),
        search_rule: SEARCH_RULE.into(),
        interference: match &opts.measured_interference {
            Some(d) => format!(
                "{}, for gpulet+int and the ideal of Fig. 16 and 17; none in Fig. 6 and for sbp",
                crate::cluster::measured_note(d)
            ),
            None => format!(
                "gpulet §4.4 linear model, the authors' {INTERFERENCE_GPU} coefficients and UTIL.CSV utilisations ({}, measured inputs), for gpulet+int and the ideal of Fig. 16 and 17; none in Fig. 6 and for sbp",
                crate::cluster::gpulet_data_source(opts.gpulet_data.as_deref(), INTERFERENCE_GPU)
            ),
        },
        partition_sizes: "gpulet+int and the ideal: gpulet's 20/40/50/60/80/100 % (ideal splits 2:8, 4:6, 5:5, 10:0; Fig. 6: 2:8, 4:6, 5:5); sbp: whole GPUs; sbp_1to1: two fixed 50 % halves per GPU, half the memory each; greedy: any multiple of 10 %".into(),
        tables: opts.tables.describe(),
        fig16: None,
        fig17: None,
        fig17_average: None,
        fig6: None,
        tables_wall_s,
        wall_s: 0.0,
    };
    if let Some(t3) = t3.as_ref().filter(|_| want(Fig::Fig16)) {
        devices.push(t3.device.clone());
        let unit: Vec<f64> = t3
            .sc
            .models
            .iter()
            .zip(&t3.specs)
            .map(|(m, s)| RATE_LEVELS[1] * m.paper_slo_ms.unwrap_or(s.slo_ms) / s.slo_ms)
            .collect();
        let intf = crate::cluster::scenario_interference(Some(&gpulet), measured.as_ref(), &t3.sc)
            .expect("gpulet's data is loaded");
        let mut f = fig16(
            &t3.specs,
            &unit,
            t3.plain_gpus(),
            &intf,
            opts.threads,
            &mut |d, t| on_fig("fig16 scenarios", d, t),
        )?;
        f.models = t3
            .sc
            .models
            .iter()
            .zip(&t3.specs)
            .zip(&unit)
            .map(|((m, s), &u)| Fig16Model {
                name: m.name.clone(),
                model: m.model.clone(),
                paper_slo_ms: m.paper_slo_ms,
                slo_ms: s.slo_ms,
                rates_rps: [0.0, u, 2.0 * u],
            })
            .collect();
        report.fig16 = Some(f);
    }
    if want(Fig::Fig17) {
        let mut rows = Vec::new();
        on_fig("fig17 scenarios", 0, fig17_sc.len());
        for sc in &fig17_sc {
            let p = prepare(sc);
            devices.push(p.device.clone());
            let intf = crate::cluster::scenario_interference(Some(&gpulet), measured.as_ref(), sc)
                .expect("gpulet's data is loaded");
            rows.push(fig17(&p, &intf)?);
            on_fig("fig17 scenarios", rows.len(), fig17_sc.len());
        }
        let ok: Vec<f64> = rows
            .iter()
            .map(|r| r.normalised_rate)
            .filter(|v| v.is_finite())
            .collect();
        report.fig17_average = Some(ok.iter().sum::<f64>() / ok.len().max(1) as f64);
        report.fig17 = Some(rows);
    }
    if let Some(t3) = t3.as_ref().filter(|_| want(Fig::Fig6)) {
        devices.push(t3.device.clone());
        let by = |n: &str| {
            t3.specs
                .iter()
                .find(|m| m.name == n)
                .ok_or_else(|| GpuletError::MissingModel(n.into()))
        };
        let gpus = GpuSpec::new(2, t3.sc.gpu_mem_mb, t3.sc.partition_step_pct);
        let mut rows = Vec::new();
        on_fig("fig6 pairs", 0, FIG6_PAIRS.len());
        for (a, b, short) in FIG6_PAIRS {
            rows.push(fig6(short, by(a)?, by(b)?, gpus)?);
            on_fig("fig6 pairs", rows.len(), FIG6_PAIRS.len());
        }
        report.fig6 = Some(rows);
    }
    devices.dedup();
    report.device = match devices.first() {
        Some(d) if devices.iter().all(|x| x == d) => d.clone(),
        Some(_) => "mixed".into(),
        None => "none".into(),
    };
    report.wall_s = t_all.elapsed().as_secs_f64();
    Ok(report)
}

// ---------------------------------------------------------------------------
// Output.

/// The human-readable report.
pub fn table(r: &GpuletReport) -> String {
    use crate::text_table;
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "sluice bench gpulet: SIMULATED, planner-level (schedulable = the planner places every rate on the GPUs; no serving), device profile {}",
        r.device
    );
    let _ = writeln!(s, "tables: {}", r.tables);
    let _ = writeln!(s, "SLO rule: {}", r.slo_rule);
    let _ = writeln!(s, "rate rule: {}", r.rate_rule);
    let _ = writeln!(s, "search: {}", r.search_rule);
    let _ = writeln!(s, "interference: {}", r.interference);
    let _ = writeln!(s, "partition sizes: {}", r.partition_sizes);
    let _ = writeln!(s, "tables measured in {:.1} s", r.tables_wall_s);
    if let Some(f) = &r.fig16 {
        let _ = writeln!(
            s,
            "\nFig. 5 / Fig. 16: schedulable scenarios of 3^9 - 1 on 4 GPUs (simulated, {}), {:.1} s on {} threads",
            r.device, f.wall_s, f.threads
        );
        let mut t = text_table::new(
            &[
                "model",
                "manifest",
                "paper SLO",
                "our SLO",
                "rate lvl1",
                "rate lvl2",
            ],
            2,
        );
        for m in &f.models {
            t.add_row(vec![
                m.name.clone(),
                m.model.clone(),
                m.paper_slo_ms.map_or("-".into(), |v| format!("{v}")),
                format!("{:.1}", m.slo_ms),
                format!("{:.2}", m.rates_rps[1]),
                format!("{:.2}", m.rates_rps[2]),
            ]);
        }
        s += &text_table::lines(&t);
        let pct = |n: usize| format!("{:.1}%", 100.0 * n as f64 / f.scenarios.max(1) as f64);
        let mut t = text_table::new(&["planner", "count", "%", "paper"], 1);
        if let Some(c) = t.column_mut(3) {
            c.set_cell_alignment(comfy_table::CellAlignment::Left);
        }
        for (name, n, paper) in [
            ("sbp", f.sbp, "5,772 (Fig. 5)"),
            ("sbp_1to1", f.sbp_1to1, "19,682 (Fig. 5)"),
            ("gpulet+int", f.gpulet_int, "ideal - 520 (Fig. 16)"),
            ("ideal (+int)", f.ideal, "(Fig. 16)"),
            (
                "ideal, not gpulet+int",
                f.ideal_not_gpulet_int,
                "520 (2.6 %)",
            ),
            ("gpulet+int, not ideal", f.gpulet_int_not_ideal, ""),
        ] {
            t.add_row(vec![
                name.to_owned(),
                n.to_string(),
                pct(n),
                paper.to_owned(),
            ]);
        }
        s += &text_table::lines(&t);
        let _ = writeln!(
            s,
            "gpulet+int schedules {:.2} % of the scenarios the ideal schedules",
            100.0 * f.gpulet_int_share_of_ideal
        );
        for (p, (n, m)) in &f.other_errors {
            let _ = writeln!(s, "{p}: {n} scenarios refused by a model error, e.g. {m}");
        }
    }
    if let Some(rows) = &r.fig17 {
        let _ = writeln!(
            s,
            "\nFig. 17: max schedulable rate, gpulet+int / ideal (both with interference; simulated, {})",
            r.device
        );
        let mut t = text_table::new(
            &[
                "scenario",
                "gpulet+int",
                "ideal",
                "normalised",
                "bisect norm.",
                "wall s",
                "limits (gpulet+int | ideal)",
            ],
            1,
        );
        if let Some(c) = t.column_mut(6) {
            c.set_cell_alignment(comfy_table::CellAlignment::Left);
        }
        for x in rows {
            t.add_row(vec![
                x.scenario.clone(),
                format!("{:.1}", x.gpulet_int_rps),
                format!("{:.1}", x.ideal_rps),
                format!("{:.1}%", 100.0 * x.normalised_rate),
                format!("{:.1}%", 100.0 * x.normalised_rate_bisect),
                format!("{:.2}", x.wall_s),
                format!("{} | {}", x.gpulet_int.limit, x.ideal.limit),
            ]);
        }
        s += &text_table::lines(&t);
        if let Some(a) = r.fig17_average {
            let _ = writeln!(s, "average normalised: {:.1} % (paper: 92.6 %)", 100.0 * a);
        }
    }
    if let Some(rows) = &r.fig6 {
        let _ = writeln!(
            s,
            "\nFig. 6: max schedulable rate of a pair on 2 GPUs, equal rates, normalised to greedy (no interference; simulated, {})",
            r.device
        );
        let mut t = text_table::new(
            &[
                "pair",
                "sbp rps",
                "greedy rps",
                "ideal rps",
                "sbp norm",
                "ideal nrm",
            ],
            1,
        );
        for x in rows {
            t.add_row(vec![
                x.pair.clone(),
                format!("{:.1}", x.sbp_rps),
                format!("{:.1}", x.greedy_rps),
                format!("{:.1}", x.ideal_rps),
                format!("{:.3}", x.sbp_normalised),
                format!("{:.3}", x.ideal_normalised),
            ]);
        }
        s += &text_table::lines(&t);
        let (g_over_s, i_over_g) = fig6_gains(rows);
        let _ = writeln!(
            s,
            "greedy over sbp: {:+.1} % on average (paper: +51 %); ideal over greedy: {:+.1} % (paper: +23 %)",
            100.0 * g_over_s,
            100.0 * i_over_g
        );
    }
    let _ = writeln!(s, "\nwall time {:.1} s", r.wall_s);
    s
}

/// Fig. 6's averages: mean of `greedy / sbp − 1` and of `ideal / greedy
/// − 1` over the pairs with finite ratios.
pub fn fig6_gains(rows: &[Fig6Row]) -> (f64, f64) {
    let mean = |v: Vec<f64>| {
        let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    (
        mean(
            rows.iter()
                .map(|r| r.greedy_rps / r.sbp_rps - 1.0)
                .collect(),
        ),
        mean(rows.iter().map(|r| r.ideal_normalised - 1.0).collect()),
    )
}

/// The SVG charts: `(file name, svg)` for the figures in `r`.
pub fn plots(r: &GpuletReport) -> Result<Vec<(&'static str, String)>, crate::plot::PlotError> {
    use crate::plot::{self, Bar};
    let bar = |label: &str, value: f64, i: usize| Bar {
        label: label.into(),
        value,
        color: plot::color(i),
    };
    let chart =
        |name: &'static str, w: u32, title: String, y_label: &str, bars: &[Bar], top: f64| {
            plot::figure(name, (w, 320), None, |area| {
                plot::bar_chart(area, &title, y_label, bars, top, Some(top))
            })
            .map(|svg| (name, svg))
        };
    let mut out = Vec::new();
    if let Some(f) = &r.fig16 {
        out.push(chart(
            "gpulet-fig16.svg",
            520,
            format!(
                "gpulet Fig. 5/16: schedulable of {} scenarios (simulated, {})",
                f.scenarios, r.device
            ),
            "schedulable scenarios",
            &[
                bar("sbp", f.sbp as f64, 0),
                bar("sbp 1:1", f.sbp_1to1 as f64, 1),
                bar("gpulet+int", f.gpulet_int as f64, 2),
                bar("ideal", f.ideal as f64, 3),
            ],
            f.scenarios as f64,
        )?);
    }
    if let Some(rows) = &r.fig17 {
        let mut bars: Vec<Bar> = rows
            .iter()
            .map(|x| bar(&x.scenario, x.normalised_rate, 0))
            .collect();
        if let Some(a) = r.fig17_average {
            bars.push(bar("average", a, 3));
        }
        out.push(chart(
            "gpulet-fig17.svg",
            620,
            format!(
                "gpulet Fig. 17: max rate, gpulet+int / ideal (simulated, {})",
                r.device
            ),
            "normalised to ideal",
            &bars,
            1.0,
        )?);
    }
    if let Some(rows) = &r.fig6 {
        let mut bars = Vec::new();
        for x in rows {
            bars.push(bar(&format!("{} sbp", x.pair), x.sbp_normalised, 0));
            bars.push(bar(&format!("{} greedy", x.pair), 1.0, 1));
            bars.push(bar(&format!("{} ideal", x.pair), x.ideal_normalised, 3));
        }
        out.push(chart(
            "gpulet-fig6.svg",
            900,
            format!(
                "gpulet Fig. 6: max rate on 2 GPUs, normalised to greedy (simulated, {})",
                r.device
            ),
            "normalised to greedy",
            &bars,
            1.0,
        )?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// `L(b, p) = f(b, p)` on batches 1, 2, 4 and partitions 50, 100 %.
    fn spec(name: &str, slo_ms: f64, rate_rps: f64, mem_mb: u64) -> ModelSpec {
        // Flat in p: half a GPU runs a batch as fast as the whole one.
        let profile =
            LatencyTable::from_fn(vec![1, 2, 4], vec![50, 100], |b, _| 10.0 * f64::from(b))
                .unwrap();
        ModelSpec {
            name: name.into(),
            slo_ms,
            rate_rps,
            mem_mb,
            profile,
        }
    }

    #[test]
    fn the_enumerator_yields_every_nonzero_level_vector_once() {
        let all: Vec<Vec<u8>> = combinations(9).collect();
        assert_eq!(all.len(), 19_682);
        assert_eq!(all.len(), 3usize.pow(9) - 1);
        let set: HashSet<&Vec<u8>> = all.iter().collect();
        assert_eq!(set.len(), all.len(), "repeated vectors");
        assert!(all.iter().all(|v| v.len() == 9));
        assert!(all.iter().all(|v| v.iter().all(|&d| d < 3)));
        assert!(all.iter().all(|v| v.iter().any(|&d| d > 0)), "all-zero");
        assert_eq!(combination(3, 1), vec![1, 0, 0]);
        assert_eq!(combination(3, 26), vec![2, 2, 2]);
    }

    #[test]
    fn sbp_on_fixed_halves_fits_what_plain_sbp_does_not() {
        // Each model: saturated batch 2 (2·L(2) = 40 ≤ SLO 40, 2·L(4) = 80
        // is not), 2 / 20 ms = 100 rps on a whole GPU and on a half alike.
        // Plain SBP gives each 100 rps model a whole GPU: 2 GPUs; on 1:1
        // halves each takes a half: 1 GPU.
        let models = vec![spec("a", 40.0, 100.0, 300), spec("b", 40.0, 100.0, 300)];
        let gpus = GpuSpec::new(1, 1000, 10);
        let e = Sbp.plan(&models, &gpus).unwrap_err();
        assert!(e.to_string().contains("needs 2 GPUs, have 1"), "{e}");
        let halves = Sbp1to1::plan_halves(&models, &gpus).unwrap();
        let (hm, hg) = Sbp1to1::halves(&models, &gpus).unwrap();
        assert_eq!((hg.count, hg.mem_mb), (2, 500));
        sluice_planner::check(&halves, &hm, &hg).unwrap();
        let joined = Sbp1to1.plan(&models, &gpus).unwrap();
        assert_eq!(joined.gpus.len(), 1);
        let sizes: Vec<u32> = joined.gpus[0]
            .partitions
            .iter()
            .map(|p| p.size_pct)
            .collect();
        assert_eq!(sizes, vec![50, 50]);
        sluice_planner::check(&joined, &models, &gpus).unwrap();
        // Half the memory per half: a 600 MB model no longer fits one.
        let big = vec![spec("a", 40.0, 100.0, 600), spec("b", 40.0, 100.0, 300)];
        assert!(Sbp.plan(&big, &GpuSpec::new(2, 1000, 10)).is_ok());
        assert!(Sbp1to1.plan(&big, &GpuSpec::new(2, 1000, 10)).is_err());
    }

    #[test]
    fn the_scan_reports_the_first_failure_and_the_bisection_its_bracket() {
        // Monotone: refused from 3.7 on.
        let m = max_factor(|f| Ok::<_, ()>((f >= 3.7).then(|| "no".to_string()))).unwrap();
        assert!(
            m.factor < 3.7 && m.factor > 3.7 / (1.0 + SCAN_STEP),
            "{m:?}"
        );
        assert!(
            m.bisect_factor < 3.7 && m.bisect_factor > 3.7 / (1.0 + SCAN_STEP),
            "{m:?}"
        );
        assert!(m.limit.starts_with("no at"), "{m:?}");
        // A hole at [1.5, 1.6): doubling passes 1, 2, 4 and brackets
        // (4, 8); the scan from a quarter of ~5 stops at the hole.
        let m = max_factor(|f| {
            Ok::<_, ()>((f >= 5.0 || (1.5..1.6).contains(&f)).then(|| "no".to_string()))
        })
        .unwrap();
        assert!(m.bisect_factor > 4.9 && m.bisect_factor < 5.0, "{m:?}");
        assert!(m.factor < 1.5 && m.factor > 1.49, "{m:?}");
        // Nothing schedulable.
        let m = max_factor(|_| Ok::<_, ()>(Some("no".to_string()))).unwrap();
        assert_eq!(m.factor, 0.0);
    }

    /// The default is the built-in copy of the repository's
    /// `data/gpulet`; `--data-dir` with the checkout's folder reads the
    /// same data.
    #[test]
    fn the_built_in_data_is_the_checkouts_data_gpulet() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/gpulet");
        let built_in = load_gpulet_data(None).unwrap();
        assert_eq!(load_gpulet_data(Some(&dir)).unwrap(), built_in);
        assert!(built_in.util_of("resnet50").is_some());
    }

    #[test]
    fn without_gpulet_data_the_error_names_the_flag() {
        let opts = GpuletOptions {
            gpulet_data: Some(PathBuf::from("/nonexistent/gpulet")),
            ..GpuletOptions::default()
        };
        let e = run(&ModelRegistry::builtin(), &opts, |_, _| {}, |_, _, _| {}).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("--data-dir DIR") && msg.contains("/nonexistent/gpulet"),
            "{msg}"
        );
    }

    #[test]
    fn a_small_fig17_run_stays_under_the_capacity_bound_and_reports_the_keys() {
        let file = std::env::temp_dir().join(format!("sluice-gpulet-{}.toml", std::process::id()));
        std::fs::write(
            &file,
            r#"
name = "pair"
description = "test"
device = "mi50"
gpus = 2
gpu_mem_mb = 11000
planners = ["sbp", "greedy"]
[[model]]
name = "mobilenet-v2"
model = "mobilenet"
gpulet_util = "mobilenet_v2"
rate_rps = 50
mem_mb = 464
[[model]]
name = "densenet"
model = "densenet"
gpulet_util = "densenet161"
rate_rps = 50
mem_mb = 1220
"#,
        )
        .unwrap();
        let opts = GpuletOptions {
            figs: vec![Fig::Fig17],
            fig17_scenarios: vec![file.display().to_string()],
            ..GpuletOptions::default()
        };
        let r = run(&ModelRegistry::builtin(), &opts, |_, _| {}, |_, _, _| {});
        std::fs::remove_file(&file).ok();
        let r = r.unwrap();
        let rows = r.fig17.as_ref().unwrap();
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert!(row.gpulet_int_rps > 0.0 && row.ideal_rps > 0.0, "{row:?}");
        // Capacity bound at equal rates r: each model needs at least
        // r / (its best throughput per percent of a GPU) percent, and the
        // two GPUs have 200 %. Interference only slows models down.
        let reg = ModelRegistry::builtin();
        let prof = crate::cluster::device_profile("mi50").unwrap();
        let mut inv_tpp = 0.0;
        let mut tables = Vec::new();
        for m in ["mobilenet", "densenet"] {
            let (_, model) = reg.lookup(m).unwrap();
            tables.push(crate::cluster::measure_table(&prof, model).unwrap());
        }
        let sc = Scenario::parse(
            "t",
            "name = \"t\"\ndescription = \"t\"\ndevice = \"mi50\"\ngpus = 2\ngpu_mem_mb = 11000\nplanners = [\"sbp\", \"greedy\"]\n[[model]]\nname = \"a\"\nmodel = \"mobilenet\"\nrate_rps = 1\nmem_mb = 1\n[[model]]\nname = \"b\"\nmodel = \"densenet\"\nrate_rps = 1\nmem_mb = 1\n",
        )
        .unwrap();
        let refs: Vec<&TableInfo> = tables.iter().collect();
        let slo = slos(&sc, &refs);
        for (t, slo) in tables.iter().zip(slo) {
            let mut best: f64 = 0.0;
            for &p in t.table.partitions_pct() {
                for &b in t.table.batches() {
                    let l = t.table.latency_ms(b, p).unwrap();
                    if 2.0 * l <= slo {
                        best = best.max(f64::from(b) * 1000.0 / l / f64::from(p));
                    }
                }
            }
            inv_tpp += 1.0 / best;
        }
        let bound = 2.0 * 200.0 / inv_tpp;
        assert!(
            row.gpulet_int_rps <= bound * (1.0 + 1e-9) && row.ideal_rps <= bound * (1.0 + 1e-9),
            "{row:?} over the bound {bound}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("fig16").is_none() && v.get("fig6").is_none(), "{v}");
        assert_eq!(v["simulated"], true);
        assert_eq!(v["device"], "mi50");
        for k in ["scenario", "normalised_rate", "gpulet_int_rps", "ideal_rps"] {
            assert!(!v["fig17"][0][k].is_null(), "{k}");
        }
        assert!(v["fig17_average"].as_f64().unwrap() > 0.0);
        assert!(
            r.interference
                .contains("(data/gpulet/2080ti/, built in, measured inputs)"),
            "{}",
            r.interference
        );
        let t = table(&r);
        assert!(
            t.contains("SIMULATED") && t.contains("device profile mi50"),
            "{t}"
        );
        assert!(t.contains("rate rule") && t.contains("SLO rule"), "{t}");
        let plots = plots(&r).unwrap();
        assert_eq!(plots.len(), 1);
        crate::plot::check_well_formed(&plots[0].1).unwrap();
        let texts = crate::plot::texts(&plots[0].1);
        assert!(
            texts
                .iter()
                .any(|t| t.contains("Fig. 17") && t.contains("simulated, mi50")),
            "{texts:?}"
        );
        assert!(texts.iter().any(|t| t == "average"), "{texts:?}");
    }
}
