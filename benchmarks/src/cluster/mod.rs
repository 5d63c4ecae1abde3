//! `sluice bench cluster`: multi-GPU placement planners (`sluice-planner`)
//! judged by serving, in virtual time, the scenarios they plan for.
//!
//! For each scenario (a TOML file: [`crate::cluster::scenario`]) and
//! planner, it finds the *SLO-preserved max throughput* of gpulet §5.2: the
//! scenario's rates are all scaled by one factor, the planner plans for the
//! scaled rates on the scenario's GPUs, the plan is served by the
//! request-level simulator ([`crate::cluster::sim`]) for `--duration`
//! virtual seconds of Poisson arrivals, and the largest factor whose
//! requests miss their SLO (late, dropped or unserved) at most 1 % of the
//! time, and for which the planner finds a placement, is the maximum. The
//! search starts at factor 1, doubles (or halves) until the outcome
//! changes, then bisects `--search-steps` times.
//!
//! Batch durations are `L(b, p)` from the GPU model
//! ([`sluice_gpusim::lbp::measure`], the scenario's device profile; batches
//! 1, 2, 4, …, 32, partitions 10, 20, …, 100 %), measured once per model and
//! run; a partial batch of `n` takes the linear interpolation between the
//! listed batches around it. Measured tables that break the planners'
//! monotonicity rules by rounding are lifted to their monotone envelope
//! (each adjusted entry is counted in the report).
//!
//! **SLO rule.** gpulet's SLOs (Table 3) are for its RTX 2080 Ti and its
//! own PyTorch builds; neither the paper nor its artifact gives the
//! latencies they came from, so they cannot be rescaled by a measured
//! ratio. The paper states its rule for the applications — "each SLO
//! latency is calculated by doubling the longest model inference latency"
//! (§5.1) — and the applications' SLOs (108 and 202 ms) are exactly the
//! Table 3 SLOs of their longest models (ResNet50, SSD-MobileNet), so
//! Table 3's SLOs are the same rule per model. The artifact serves every
//! model with `max_batch` 32. So here: SLO = 2 × L(32, 100 %) of the
//! model's manifest on the device profile (the largest profiled batch), and
//! for an application (`slo_rule = "app"`) the largest of its models'
//! values. A model may instead give `slo_ms`. The rule inherits the
//! batch-axis error of the GPU model (docs/planners.md): a model whose
//! simulated latency grows too fast with the batch gets a loose SLO.

pub mod engine;
pub mod scenario;
pub mod sim;
pub mod trace;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use sluice_gpu::DeviceProfile;
use sluice_gpusim::lbp::{self, DEFAULT_BATCHES, DEFAULT_PARTITIONS};
use sluice_model::{Model, ModelRegistry};
use sluice_planner::{GpuSpec, LatencyTable, ModelSpec, Placement};

use crate::cluster::scenario::{PlannerKind, Scenario, ScenarioError, SloRule};
use crate::cluster::sim::{
    Batching, Engine, ModelOutcome, Rounds, Routing, SimModel, SimOptions, SimPartition, SimSlot,
};

/// Serves `parts` for `models`' arrivals on the engine `opts` names: the
/// daemon's cluster backend ([`engine::serve`]) or the request-level
/// simulator ([`sim::simulate`]).
pub fn serve(
    models: &[SimModel],
    parts: &[SimPartition],
    opts: &SimOptions,
) -> Result<sim::SimResult, sim::SimError> {
    match opts.engine {
        Engine::Daemon => engine::serve(models, parts, opts),
        Engine::Sim => sim::simulate(models, parts, opts),
    }
}

/// The violation rate a factor may reach and still pass (gpulet §5.2).
pub const MAX_VIOLATION_RATE: f64 = 0.01;

/// Latency factor for partitions sharing a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interference {
    /// None: the GPU model's own finding (docs/performance.md,
    /// "Interference between partitions").
    None,
    /// gpulet's linear model with the authors' RTX 2080 Ti coefficients and
    /// utilisations.
    #[value(name = "gpulet-2080ti")]
    #[serde(rename = "gpulet-2080ti")]
    Gpulet2080Ti,
    /// The same with their RTX 3080 data.
    #[value(name = "gpulet-3080")]
    #[serde(rename = "gpulet-3080")]
    Gpulet3080,
}

impl Interference {
    /// The data subfolder (`2080ti`, `3080`), `None` without interference.
    pub fn gpu(self) -> Option<&'static str> {
        match self {
            Self::None => None,
            Self::Gpulet2080Ti => Some("2080ti"),
            Self::Gpulet3080 => Some("3080"),
        }
    }

    /// How the report names it, with the data folder given (`None`: the
    /// built-in copy of the repository's `data/gpulet`).
    pub fn describe(self, data_dir: Option<&std::path::Path>) -> String {
        match self.gpu() {
            None => "none (the GPU model shows ~0 between partitions)".into(),
            Some(g) => format!(
                "gpulet §4.4 linear model, the authors' {g} coefficients and utilisations ({}, measured inputs)",
                gpulet_data_source(data_dir, g)
            ),
        }
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterOptions {
    /// Planners; empty: each scenario's own list.
    pub planners: Vec<PlannerKind>,
    /// Device profile for every scenario instead of its own.
    pub device: Option<String>,
    /// Virtual seconds of arrivals per simulation.
    pub duration_s: f64,
    /// Seed of arrivals and routing (the same for every probe).
    pub seed: u64,
    /// See [`Routing`].
    pub routing: Routing,
    /// See [`Rounds`].
    pub rounds: Rounds,
    /// See [`Batching`].
    pub batching: Batching,
    /// See [`Engine`].
    pub engine: Engine,
    /// See [`Interference`].
    pub interference: Interference,
    /// gpulet's data folder (with `2080ti/` and `3080/`); `None`: the
    /// built-in copy of the repository's `data/gpulet`.
    pub gpulet_data: Option<PathBuf>,
    /// Search the maximum; false: one simulation at the scenario's rates.
    pub search: bool,
    /// Bisection steps after bracketing.
    pub search_steps: u32,
    /// The planner is given each rate times `1 + headroom` (the
    /// simulation offers the rate itself); 0: exactly the rate.
    pub headroom: f64,
    /// The planner is given every latency times this (the simulation runs
    /// the latencies themselves); 1: exactly the tables. The gpulet
    /// artifact plans with 1.1 (`Latency Ratio`).
    pub latency_margin: f64,
    /// How every planner covers Poisson bursts
    /// ([`sluice_planner::Burst`]; `Mean`, the papers' rule, by default).
    pub burst: sluice_planner::Burst,
    /// How the maximum is searched.
    pub search_mode: SearchMode,
    /// What a probe must do to pass.
    pub pass: PassRule,
    /// Partition sizes the gpulet planners (`gpulet`, `gpulet+int`,
    /// `ideal`) may use; `None`: every multiple of the scenario's step.
    /// The baselines always use every multiple of the step.
    pub gpulet_sizes: Option<sluice_planner::PartitionSizes>,
    /// Where `L(b, p)` comes from.
    pub tables: TableSource,
    /// Pairwise interference factors measured on a GPU (the JSON files of
    /// `sluice profile --device cuda A --pair B` in this folder), for
    /// planning and serving in place of `interference`'s model.
    pub measured_interference: Option<PathBuf>,
}

/// Where the benchmarks' `L(b, p)` tables come from.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum TableSource {
    /// Measured on the GPU model, on each scenario's device profile.
    #[default]
    GpuModel,
    /// The `lbp` entries of manifests `dir/<model>.json`, as `sluice
    /// profile … --out` writes them (on a simulated profile, or measured on
    /// a CUDA device with `--partitions`): the entry of `device`, or the
    /// file's only entry when `device` is `None`.
    Dir {
        /// The folder.
        dir: PathBuf,
        /// The entry's device name (`mi50`, `NVIDIA H200`, ...).
        device: Option<String>,
    },
}

impl TableSource {
    /// How reports name it.
    pub fn describe(&self) -> String {
        match self {
            Self::GpuModel => {
                "L(b, p) measured on the GPU model, on each scenario's device profile".into()
            }
            Self::Dir { dir, device } => format!(
                "L(b, p) from the manifests in {} ({})",
                dir.display(),
                device.as_deref().map_or_else(
                    || "each file's only table".to_string(),
                    |d| format!("their tables of `{d}`")
                )
            ),
        }
    }
}

/// When a probe passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PassRule {
    /// The planner finds a placement and its simulation has at most 1 % of
    /// requests late, dropped or unserved: the SLO-preserved maximum.
    Served,
    /// The planner finds a placement: the largest rate the planner calls
    /// schedulable (the simulation still runs, and its violations at that
    /// rate are reported, with the worst at any rate accepted on the way
    /// up; gpulet's Fig. 14).
    Planned,
}

/// How `sluice bench cluster` searches the SLO-preserved maximum.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SearchMode {
    /// Double (or halve) from factor 1 until the outcome flips, then bisect
    /// `search_steps` times. Fast, but where the outcome is not monotone in
    /// the rate it may report a passing factor above a failing one.
    Bisect,
    /// gpulet §5.2's way: raise the rate gradually, each probe `1 + step`
    /// times the last, from a total of `from_rps`, and stop at the first
    /// failure; the last passing factor is the maximum.
    Scan {
        /// Relative step (0.05: 5 %).
        step: f64,
        /// The first probe's total offered rate, rps.
        from_rps: f64,
    },
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            planners: Vec::new(),
            device: None,
            duration_s: 60.0,
            seed: 1,
            routing: Routing::Random,
            rounds: Rounds::WorkConserving,
            batching: Batching::Planned,
            engine: Engine::Daemon,
            interference: Interference::None,
            gpulet_data: None,
            search: true,
            search_steps: 7,
            headroom: 0.0,
            latency_margin: 1.0,
            burst: sluice_planner::Burst::Mean,
            search_mode: SearchMode::Bisect,
            pass: PassRule::Served,
            gpulet_sizes: None,
            tables: TableSource::GpuModel,
            measured_interference: None,
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// `gpulet+int` without interference data.
    #[error(
        "planner {0} plans with gpulet's interference model and needs its data: add --interference gpulet-2080ti or gpulet-3080 (the built-in data/gpulet, or another copy with --data-dir DIR)"
    )]
    NeedsInterference(String),
    /// A scenario problem.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// An unknown device profile.
    #[error("`{0}` is not a device profile; use one of {1}")]
    Device(String, String),
    /// Measuring a table failed.
    #[error("measuring L(b, p) of {model} on {device}")]
    Measure {
        /// Model.
        model: String,
        /// Device.
        device: String,
        /// Why.
        #[source]
        source: Box<lbp::LbpError>,
    },
    /// A measured-interference file missing or malformed.
    #[error("--measured-interference: {path}: {why}")]
    InterferenceFile {
        /// The file or folder.
        path: String,
        /// What is wrong, and the fix.
        why: String,
    },
    /// A table file missing, unreadable or without a usable entry.
    #[error("--tables: {path}: {why}")]
    TableFile {
        /// The file.
        path: String,
        /// What is wrong, and the fix.
        why: String,
    },
    /// A measured table the planner crate refuses even after the envelope.
    #[error("L(b, p) of {model} on {device}: {source}")]
    Table {
        /// Model.
        model: String,
        /// Device.
        device: String,
        /// Why.
        #[source]
        source: sluice_planner::TableError,
    },
    /// gpulet's data missing or malformed.
    #[error(
        "--interference {which}: {message}; give the folder with 2080ti/ and 3080/ with --data-dir DIR, or leave it out for the built-in data/gpulet"
    )]
    GpuletData {
        /// The option's value.
        which: String,
        /// What went wrong.
        message: String,
    },
    /// A placement that fails the planner crate's own check: a planner bug.
    #[error(
        "{planner} planned {scenario} at {factor}x and its placement fails sluice_planner::check: {violation}; this is a planner bug, please report it"
    )]
    PlannerBug {
        /// Planner.
        planner: String,
        /// Scenario.
        scenario: String,
        /// Rate factor.
        factor: f64,
        /// The check's finding.
        violation: String,
    },
    /// The simulator refused its input.
    #[error(transparent)]
    Sim(#[from] crate::cluster::sim::SimError),
}

/// One model's measured table and the points the SLO rule reads.
#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    /// The planner's table (ms).
    pub table: LatencyTable,
    /// Entries lifted to the monotone envelope.
    pub adjusted: usize,
}

impl TableInfo {
    /// `L(largest batch, 100 %)`, ms.
    pub fn l_max_full(&self) -> f64 {
        let b = *self.table.batches().last().expect("tables are non-empty");
        self.table.latency_ms(b, 100).unwrap_or(f64::NAN)
    }

    /// Time of a batch of `n` on `pct` %: listed batches as measured, others
    /// linearly between their listed neighbours (below the smallest: the
    /// smallest's).
    pub fn batch_ms(&self, n: u32, pct: u32) -> f64 {
        let bs = self.table.batches();
        let l = |b| self.table.latency_ms(b, pct).unwrap_or(f64::NAN);
        match bs.binary_search(&n) {
            Ok(_) => l(n),
            Err(0) => l(bs[0]),
            Err(i) if i >= bs.len() => l(bs[bs.len() - 1]),
            Err(i) => {
                let (b0, b1) = (bs[i - 1], bs[i]);
                let w = f64::from(n - b0) / f64::from(b1 - b0);
                l(b0) + w * (l(b1) - l(b0))
            }
        }
    }
}

/// The built-in device profile `name`, or an error listing the known ones.
pub fn device_profile(name: &str) -> Result<DeviceProfile, ClusterError> {
    DeviceProfile::builtin(name).map_err(|_| {
        ClusterError::Device(
            name.to_string(),
            DeviceProfile::builtin_names()
                .collect::<Vec<_>>()
                .join(", "),
        )
    })
}

/// Where the gpulet data of GPU `g` comes from, for reports: `dir/g/`, or
/// the built-in copy of the repository's `data/gpulet/g/` when `dir` is
/// `None`.
pub fn gpulet_data_source(dir: Option<&std::path::Path>, g: &str) -> String {
    match dir {
        Some(d) => format!("{}/{g}/", d.display()),
        None => format!("data/gpulet/{g}/, built in"),
    }
}

/// The gpulet authors' data `interference` names, from `dir` (the folder
/// with `2080ti/` and `3080/`), or built in (the repository's
/// `data/gpulet`, [`sluice_planner::GPULET_DATA`]) when `dir` is `None`;
/// `None` for [`Interference::None`].
pub fn load_gpulet(
    interference: Interference,
    dir: Option<&std::path::Path>,
) -> Result<Option<sluice_planner::LinearInterference>, ClusterError> {
    let Some(g) = interference.gpu() else {
        return Ok(None);
    };
    match dir {
        Some(dir) => sluice_planner::LinearInterference::load_dir(&dir.join(g)),
        None => sluice_planner::LinearInterference::builtin(g),
    }
    .map(Some)
    .map_err(|e| ClusterError::GpuletData {
        which: format!("gpulet-{g}"),
        message: e.to_string(),
    })
}

/// Every `(device, manifest)` table the scenarios need, measured once each
/// ([`measure_table`]); `device_of` picks a scenario's profile, `on_tables`
/// gets `(done, total)`. Models must have been checked against `reg`.
pub fn measure_tables(
    scenarios: &[Scenario],
    device_of: &dyn Fn(&Scenario) -> String,
    reg: &ModelRegistry,
    source: &TableSource,
    on_tables: &mut dyn FnMut(usize, usize),
) -> Result<HashMap<(String, String), TableInfo>, ClusterError> {
    let mut need: Vec<(String, String)> = Vec::new();
    for sc in scenarios {
        for m in &sc.models {
            let k = (device_of(sc), m.model.clone());
            if !need.contains(&k) {
                need.push(k);
            }
        }
    }
    let mut profiles: HashMap<String, DeviceProfile> = HashMap::new();
    let mut tables = HashMap::new();
    on_tables(0, need.len());
    for (i, (d, m)) in need.iter().enumerate() {
        let t = match source {
            TableSource::GpuModel => {
                if !profiles.contains_key(d) {
                    profiles.insert(d.clone(), device_profile(d)?);
                }
                let (_, model) = reg.lookup(m).expect("models checked by the caller");
                measure_table(&profiles[d], model)?
            }
            TableSource::Dir { dir, device } => load_table(dir, m, device.as_deref())?,
        };
        tables.insert((d.clone(), m.clone()), t);
        on_tables(i + 1, need.len());
    }
    Ok(tables)
}

/// `model`'s table from the manifest `dir/<model>.json` ([`TableSource::Dir`]),
/// lifted to its monotone envelope like a measured one. The entry must
/// list 100 % (the SLO rule reads `L(largest batch, 100 %)`).
pub fn load_table(
    dir: &std::path::Path,
    model: &str,
    device: Option<&str>,
) -> Result<TableInfo, ClusterError> {
    let path = dir.join(format!("{model}.json"));
    let shown = path.display().to_string();
    let bad = |why: String| ClusterError::TableFile {
        path: shown.clone(),
        why,
    };
    let make = format!(
        "write it with `sluice profile --device <profile> {model} --out {shown}` (GPU model) or `sluice profile --device cuda {model} --partitions 10,20,30,40,50,60,70,80,90,100 --batches 1,2,4,8,16,32 --out {shown}` (measured)"
    );
    let text =
        std::fs::read_to_string(&path).map_err(|e| bad(format!("cannot read it ({e}); {make}")))?;
    let man = sluice_model::Manifest::parse(&shown, &text)
        .map_err(|e| bad(format!("not a valid manifest: {e}")))?;
    let names = || {
        man.lbp
            .iter()
            .map(|t| format!("`{}`", t.device))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let t = match device {
        Some(d) => man.lbp.iter().find(|t| t.device == d).ok_or_else(|| {
            bad(if man.lbp.is_empty() {
                format!("has no L(b, p) table; {make}")
            } else {
                format!(
                    "has no L(b, p) table of `{d}`, only of {}; pick one with --tables-device",
                    names()
                )
            })
        })?,
        None => match man.lbp.as_slice() {
            [t] => t,
            [] => return Err(bad(format!("has no L(b, p) table; {make}"))),
            _ => {
                return Err(bad(format!(
                    "has L(b, p) tables of {}; pick one with --tables-device",
                    names()
                )));
            }
        },
    };
    if !t.partitions_pct.contains(&100) {
        return Err(bad(format!(
            "the table of `{}` lists partitions {:?} % without 100 % (the SLO rule reads L(largest batch, 100 %)); measure it with 100 in --partitions",
            t.device, t.partitions_pct
        )));
    }
    let mut rows = t.latency_ms.clone();
    let adjusted = monotone_envelope(&mut rows);
    let table =
        LatencyTable::new(t.batches.clone(), t.partitions_pct.clone(), rows).map_err(|source| {
            ClusterError::Table {
                model: model.to_owned(),
                device: t.device.clone(),
                source,
            }
        })?;
    Ok(TableInfo { table, adjusted })
}

/// The largest batch a slot's latency list must reach under `batching`
/// (deadline batching may take up to the tables' largest batch; planned:
/// 0, the planned batch alone).
pub fn batch_cap(tables: &[&TableInfo], batching: Batching) -> u32 {
    match batching {
        Batching::Planned => 0,
        Batching::Deadline => tables
            .iter()
            .filter_map(|t| t.table.batches().last().copied())
            .max()
            .unwrap_or(0),
    }
}

/// Measures `model`'s `L(b, p)` on `profile` (batches 1…32, partitions
/// 10…100 %) and lifts it to its monotone envelope: along the partition
/// axis each entry is at most the one on the next smaller partition, then
/// along the batch axis at least the one of the next smaller batch.
pub fn measure_table(profile: &DeviceProfile, model: &Model) -> Result<TableInfo, ClusterError> {
    let pts = lbp::measure(
        profile,
        model,
        &DEFAULT_BATCHES,
        &DEFAULT_PARTITIONS,
        |_, _| {},
    )
    .map_err(|source| ClusterError::Measure {
        model: model.name().to_owned(),
        device: profile.name.clone(),
        source: Box::new(source),
    })?;
    let mut rows = sluice_gpusim::lbp::latency_rows_ms(&pts, DEFAULT_PARTITIONS.len());
    let adjusted = monotone_envelope(&mut rows);
    let table = LatencyTable::new(DEFAULT_BATCHES.to_vec(), DEFAULT_PARTITIONS.to_vec(), rows)
        .map_err(|source| ClusterError::Table {
            model: model.name().to_owned(),
            device: profile.name.clone(),
            source,
        })?;
    Ok(TableInfo { table, adjusted })
}

/// Lifts `rows[batch][partition]` to the planners' monotonicity rules with
/// the daemon's cluster backend's envelope
/// ([`sluice_service::backend::cluster::setup::monotone_rows`]); returns
/// how many entries changed.
pub fn monotone_envelope(rows: &mut [Vec<f64>]) -> usize {
    let lifted = sluice_service::backend::cluster::setup::monotone_rows(rows.to_vec());
    let mut changed = 0;
    for (row, new) in rows.iter_mut().zip(lifted) {
        changed += row.iter().zip(&new).filter(|(a, b)| a != b).count();
        *row = new;
    }
    changed
}

/// The pairwise factors of `sluice profile --device cuda A --pair B --split
/// P --json` files in `dir` (every `*.json`): side A's factor at P %, side
/// B's at 100 − P %, under the manifests' model names.
pub fn load_measured_interference(
    dir: &std::path::Path,
) -> Result<sluice_planner::MeasuredInterference, ClusterError> {
    #[derive(serde::Deserialize)]
    struct Side {
        model: String,
        factor: f64,
    }
    #[derive(serde::Deserialize)]
    struct Pair {
        split_pct: u32,
        sides: [Side; 2],
    }
    let bad = |path: &std::path::Path, why: String| ClusterError::InterferenceFile {
        path: path.display().to_string(),
        why,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| bad(dir, format!("cannot list it ({e})")))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(bad(
            dir,
            "holds no .json file; write them with `sluice profile --device cuda A --pair B --split P --json > DIR/A+B-P.json`".into(),
        ));
    }
    let mut m = sluice_planner::MeasuredInterference::default();
    for f in &files {
        let text =
            std::fs::read_to_string(f).map_err(|e| bad(f, format!("cannot read it ({e})")))?;
        let p: Pair = serde_json::from_str(&text)
            .map_err(|e| bad(f, format!("not the JSON of `sluice profile --pair` ({e})")))?;
        if !(1..=99).contains(&p.split_pct) {
            return Err(bad(
                f,
                format!("split_pct {} is outside 1..=99", p.split_pct),
            ));
        }
        for side in &p.sides {
            if !(side.factor.is_finite() && side.factor > 0.0) {
                return Err(bad(
                    f,
                    format!(
                        "{}'s factor {} is not a positive number",
                        side.model, side.factor
                    ),
                ));
            }
        }
        let [a, b] = &p.sides;
        m = m
            .with_point(&a.model, &b.model, p.split_pct, a.factor)
            .with_point(&b.model, &a.model, 100 - p.split_pct, b.factor);
    }
    Ok(m)
}

/// The interference a scenario plans and serves with: the measured
/// factors under the scenario's model names when given, else gpulet's
/// linear model ([`linear_interference`]), else none.
pub fn scenario_interference(
    gpulet: Option<&sluice_planner::LinearInterference>,
    measured: Option<&sluice_planner::MeasuredInterference>,
    sc: &Scenario,
) -> Option<sluice_planner::AnyInterference> {
    if let Some(m) = measured {
        let names = |manifest: &str| -> Vec<String> {
            sc.models
                .iter()
                .filter(|x| x.model == manifest)
                .map(|x| x.name.clone())
                .collect()
        };
        return Some(sluice_planner::AnyInterference::Measured(m.renamed(&names)));
    }
    gpulet.map(|g| sluice_planner::AnyInterference::Linear(linear_interference(g, sc)))
}

/// gpulet's linear model on the coefficients of `g` (the authors' data for
/// one GPU, [`load_gpulet`]), with the utilisation table each of the
/// scenario's models names (`gpulet_util`) under the scenario's model name;
/// a model without one gets factor 1, as in the simulation
/// ([`interference_factors`]).
pub fn linear_interference(
    g: &sluice_planner::LinearInterference,
    sc: &Scenario,
) -> sluice_planner::LinearInterference {
    let mut li = sluice_planner::LinearInterference::new(g.coeffs);
    for m in &sc.models {
        let Some(t) = m.gpulet_util.as_deref().and_then(|u| g.util_of(u)) else {
            continue;
        };
        li = li.with_util(&m.name, t.clone());
    }
    li
}

/// How reports name measured interference from `dir`.
pub fn measured_note(dir: &std::path::Path) -> String {
    format!(
        "measured pairwise factors from {} (sluice profile --pair: two partitions busy at once; a pair never measured has factor 1)",
        dir.display()
    )
}

/// Per slot of `placement` (GPU-major, partition, assignment order), its
/// latency factor in the simulation: with interference data, exactly what
/// `gpulet+int` plans with ([`sluice_planner::interference_factors`] on
/// [`linear_interference`]: gpulet's linear model, utilisations
/// interpolated at the batch and scaled by the partition's share, the
/// largest pairwise factor against the GPU's other partitions, at least 1),
/// so planner and serving agree; without, 1 everywhere.
pub fn interference_factors(
    placement: &Placement,
    intf: Option<&sluice_planner::AnyInterference>,
) -> Vec<Vec<Vec<f64>>> {
    match intf {
        Some(i) => sluice_planner::interference_factors(placement, i),
        None => placement
            .gpus
            .iter()
            .map(|g| {
                g.partitions
                    .iter()
                    .map(|p| vec![1.0; p.models.len()])
                    .collect()
            })
            .collect(),
    }
}

/// One model's line at the reported factor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelResult {
    /// Deployment name.
    pub name: String,
    /// Manifest.
    pub model: String,
    /// What it plays in the source.
    pub stands_for: String,
    /// SLO used, ms.
    pub slo_ms: f64,
    /// The source's SLO, for reference.
    pub paper_slo_ms: Option<f64>,
    /// Offered rate at the reported factor (mean over the run), rps.
    pub rate_rps: f64,
    /// Completed requests per virtual second.
    pub throughput_rps: f64,
    /// Violations over arrivals.
    pub violation_rate: f64,
    /// Completed requests' latency, ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// Partitions serving it.
    pub partitions: usize,
    /// Largest interference factor over its partitions.
    pub interference: f64,
}

/// One scenario under one planner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioResult {
    /// Scenario.
    pub name: String,
    /// Planner.
    pub planner: String,
    /// Device profile.
    pub device: String,
    /// SLO-preserved max throughput, rps (sum of the mean rates at the
    /// largest passing factor; 0 if none passed); `None` without a search.
    pub max_rps: Option<f64>,
    /// Offered rps at the reported factor.
    pub offered_rps: f64,
    /// The reported factor (the maximum, or 1 without a search).
    pub factor: f64,
    /// Violation rate at the reported factor.
    pub violation_rate: f64,
    /// GPUs the placement uses.
    pub gpus: usize,
    /// GPUs available.
    pub gpus_available: u32,
    /// Sum of partition sizes, percent of one GPU (250 = 2.5 GPUs).
    pub partition_sum: u64,
    /// GPU time executing, whole GPUs (simulated).
    pub busy_gpus: f64,
    /// The most violations served at any rate the search accepted (with
    /// `--pass planned`, every rate the planner calls schedulable up to
    /// `max_rps`); 0 without a search.
    pub worst_violation_rate: f64,
    /// The offered rate, rps, where `worst_violation_rate` was served (0:
    /// no accepted rate had violations).
    pub worst_violation_rps: f64,
    /// What stopped the search: the first failing factor and why.
    pub limit: String,
    /// Simulations run.
    pub probes: u32,
    /// Requests and events of the reported simulation.
    pub requests: u64,
    /// See `requests`.
    pub events: u64,
    /// Wall time of this scenario × planner (plans and simulations), s.
    pub wall_s: f64,
    /// Wall time of the reported simulation alone, s.
    pub sim_wall_s: f64,
    /// Per model.
    pub models: Vec<ModelResult>,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterReport {
    /// Always true: virtual time, tables from the GPU model.
    pub simulated: bool,
    /// Device profile (of every scenario, or `mixed`).
    pub device: String,
    /// The SLO rule.
    pub slo_rule: String,
    /// Interference.
    pub interference: Interference,
    /// Its description.
    pub interference_note: String,
    /// What served the plans.
    pub engine: Engine,
    /// Routing (the simulator's).
    pub routing: Routing,
    /// Rounds.
    pub rounds: Rounds,
    /// Batching.
    pub batching: Batching,
    /// Virtual seconds of arrivals per simulation.
    pub duration_s: f64,
    /// Seed.
    pub seed: u64,
    /// Pass threshold.
    pub max_violation_rate: f64,
    /// Whether the maximum was searched.
    pub search: bool,
    /// How the maximum was searched.
    pub search_mode: SearchMode,
    /// What a probe had to do to pass.
    pub pass: PassRule,
    /// Planned rates over offered rates, less 1.
    pub headroom: f64,
    /// Planned latencies over simulated ones.
    pub latency_margin: f64,
    /// The planners' Poisson overflow share (`--burst-overflow`); `None`:
    /// planned for the mean rate, as the papers do.
    pub burst_overflow: Option<f64>,
    /// Partition sizes of the gpulet planners (`None`: every multiple of
    /// the step).
    pub gpulet_sizes: Option<Vec<u32>>,
    /// Where the tables came from ([`TableSource::describe`]).
    pub tables: String,
    /// Wall time measuring the tables, s.
    pub tables_wall_s: f64,
    /// Tables' entries lifted to the monotone envelope, per manifest.
    pub tables_adjusted: Vec<(String, usize)>,
    /// Wall time of everything, s.
    pub wall_s: f64,
    /// Per scenario × planner.
    pub scenarios: Vec<ScenarioResult>,
    /// gpulet Fig. 13's rows, when the search ran
    /// with [`PassRule::Served`]: the SLO-preserved maximum per scenario
    /// and planner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fig13: Option<Vec<Fig13Row>>,
    /// gpulet Fig. 14's rows, when the search ran with
    /// [`PassRule::Planned`]: the violations served at the largest rate the
    /// planner accepts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fig14: Option<Vec<Fig14Row>>,
}

/// One row of gpulet Fig. 13.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fig13Row {
    /// Scenario.
    pub scenario: String,
    /// Planner.
    pub planner: String,
    /// SLO-preserved max throughput, rps.
    pub max_rps: f64,
}

/// One row of gpulet Fig. 14.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fig14Row {
    /// Scenario.
    pub scenario: String,
    /// Planner.
    pub planner: String,
    /// The largest rate the planner calls schedulable, rps.
    pub rate_rps: f64,
    /// Violations served there.
    pub violation_rate: f64,
    /// The most violations served at any rate the planner calls
    /// schedulable, up to `rate_rps`.
    pub worst_violation_rate: f64,
    /// The rate, rps, where that was served (0: none had violations).
    pub worst_violation_rps: f64,
}

/// The SLO of each of `sc`'s models, ms, by the rule of the module docs.
pub fn slos(sc: &Scenario, tables: &[&TableInfo]) -> Vec<f64> {
    let rule: Vec<f64> = tables.iter().map(|t| 2.0 * t.l_max_full()).collect();
    let app = sc
        .models
        .iter()
        .zip(&rule)
        .filter(|(m, _)| m.slo_ms.is_none())
        .map(|(_, r)| *r)
        .fold(0.0, f64::max);
    sc.models
        .iter()
        .zip(&rule)
        .map(|(m, r)| {
            m.slo_ms.unwrap_or(match sc.slo_rule {
                SloRule::PerModel => *r,
                SloRule::App => app,
            })
        })
        .collect()
}

/// A scenario ready to plan and simulate.
struct Prepared<'a> {
    sc: &'a Scenario,
    device: String,
    tables: Vec<&'a TableInfo>,
    /// What the planners are given: the tables times the latency margin.
    planner_tables: Vec<LatencyTable>,
    /// gpulet's model on the run's data, for `gpulet+int` and the
    /// simulation alike.
    interference: Option<sluice_planner::AnyInterference>,
    slo_ms: Vec<f64>,
}

/// The outcome at one factor.
struct Probe {
    factor: f64,
    placement: Option<Placement>,
    plan_error: Option<String>,
    sim: Option<crate::cluster::sim::SimResult>,
    interference: Vec<Vec<Vec<f64>>>,
    sim_wall_s: f64,
}

impl Probe {
    fn pass(&self, rule: PassRule) -> bool {
        match rule {
            PassRule::Served => self
                .sim
                .as_ref()
                .is_some_and(|s| s.violation_rate() <= MAX_VIOLATION_RATE),
            PassRule::Planned => self.placement.is_some(),
        }
    }

    fn why(&self) -> String {
        match (&self.plan_error, &self.sim) {
            (Some(e), _) => format!("{e} at {:.3}x", self.factor),
            (None, Some(s)) => format!(
                "{:.2} % violations at {:.3}x",
                100.0 * s.violation_rate(),
                self.factor
            ),
            _ => String::new(),
        }
    }
}

fn probe(
    p: &Prepared<'_>,
    kind: PlannerKind,
    factor: f64,
    opts: &ClusterOptions,
) -> Result<Probe, ClusterError> {
    let sc = p.sc;
    let specs: Vec<ModelSpec> = sc
        .models
        .iter()
        .zip(&p.planner_tables)
        .zip(&p.slo_ms)
        .map(|((m, t), &slo)| ModelSpec {
            name: m.name.clone(),
            slo_ms: slo,
            rate_rps: m.peak_rps() * factor * (1.0 + opts.headroom),
            mem_mb: m.mem_mb,
            profile: t.clone(),
        })
        .collect();
    let gpus = GpuSpec {
        count: sc.gpus,
        mem_mb: sc.gpu_mem_mb,
        partition_step_pct: sc.partition_step_pct,
        sizes_pct: if kind.is_gpulet() {
            opts.gpulet_sizes
        } else {
            None
        },
        burst: opts.burst,
    };
    let mut out = Probe {
        factor,
        placement: None,
        plan_error: None,
        sim: None,
        interference: Vec::new(),
        sim_wall_s: 0.0,
    };
    let planner = kind
        .planner(p.interference.clone())
        .ok_or_else(|| ClusterError::NeedsInterference(kind.as_str().into()))?;
    let placement = match planner.plan(&specs, &gpus) {
        Ok(pl) => pl,
        Err(e) => {
            out.plan_error = Some(e.to_string());
            return Ok(out);
        }
    };
    if let Err(v) = sluice_planner::check(&placement, &specs, &gpus) {
        return Err(ClusterError::PlannerBug {
            planner: kind.as_str().into(),
            scenario: sc.name.clone(),
            factor,
            violation: v.to_string(),
        });
    }
    let index: HashMap<&str, usize> = sc
        .models
        .iter()
        .enumerate()
        .map(|(i, m)| (m.name.as_str(), i))
        .collect();
    let intf = interference_factors(&placement, p.interference.as_ref());
    let most = batch_cap(&p.tables, opts.batching);
    let parts = sim_partitions(&p.tables, &placement, &intf, most, &index);
    let models: Vec<SimModel> = sc
        .models
        .iter()
        .zip(&p.slo_ms)
        .map(|(m, &slo)| SimModel {
            name: m.name.clone(),
            slo_ms: slo,
            rate: m
                .segments()
                .into_iter()
                .map(|(s, r)| (s, r * factor))
                .collect(),
        })
        .collect();
    let t0 = Instant::now();
    let sim = serve(
        &models,
        &parts,
        &SimOptions {
            duration_s: opts.duration_s,
            seed: opts.seed,
            routing: opts.routing,
            rounds: opts.rounds,
            batching: opts.batching,
            engine: opts.engine,
            arrivals: crate::cluster::sim::ArrivalSeeding::Run,
        },
    )?;
    out.sim_wall_s = t0.elapsed().as_secs_f64();
    out.sim = Some(sim);
    out.placement = Some(placement);
    out.interference = intf;
    Ok(out)
}

/// The largest passing factor by doubling/halving from 1 and bisecting:
/// (best passing probe, first failing probe above it, probes run).
fn search(
    mut run: impl FnMut(f64) -> Result<Probe, ClusterError>,
    steps: u32,
    rule: PassRule,
) -> Result<(Option<Probe>, Option<Probe>, u32), ClusterError> {
    let mut n = 0u32;
    let mut go = |f: f64| {
        n += 1;
        run(f)
    };
    let first = go(1.0)?;
    let (mut lo, mut hi): (Option<Probe>, Option<Probe>);
    if first.pass(rule) {
        lo = Some(first);
        hi = None;
        let mut f = 2.0;
        while f <= 65536.0 {
            let p = go(f)?;
            if p.pass(rule) {
                lo = Some(p);
                f *= 2.0;
            } else {
                hi = Some(p);
                break;
            }
        }
    } else {
        hi = Some(first);
        lo = None;
        let mut f = 0.5;
        while f >= 1.0 / 1024.0 {
            let p = go(f)?;
            if p.pass(rule) {
                lo = Some(p);
                break;
            }
            hi = Some(p);
            f /= 2.0;
        }
    }
    for _ in 0..steps {
        let (Some(a), Some(b)) = (&lo, &hi) else {
            break;
        };
        let p = go(0.5 * (a.factor + b.factor))?;
        if p.pass(rule) {
            lo = Some(p);
        } else {
            hi = Some(p);
        }
    }
    Ok((lo, hi, n))
}

/// gpulet §5.2's search: probes at `from`, `from·(1 + step)`, … until the
/// first failure (or past 65536×): (last passing probe, the failing one,
/// probes run).
fn scan(
    mut run: impl FnMut(f64) -> Result<Probe, ClusterError>,
    from: f64,
    step: f64,
    rule: PassRule,
) -> Result<(Option<Probe>, Option<Probe>, u32), ClusterError> {
    let mut n = 0u32;
    let mut lo = None;
    let mut f = from;
    while f <= 65536.0 {
        n += 1;
        let p = run(f)?;
        if !p.pass(rule) {
            return Ok((lo, Some(p), n));
        }
        lo = Some(p);
        f *= 1.0 + step;
    }
    Ok((lo, None, n))
}

fn result_of(
    p: &Prepared<'_>,
    kind: PlannerKind,
    at: Option<&Probe>,
    limit: String,
    probes: u32,
    opts: &ClusterOptions,
) -> ScenarioResult {
    let sc = p.sc;
    let factor = at.map_or(0.0, |a| a.factor);
    let sim = at.and_then(|a| a.sim.as_ref());
    let pl = at.and_then(|a| a.placement.as_ref());
    // Every slot of the placement: (model, interference factor).
    let slots: Vec<(&str, f64)> = match (pl, at) {
        (Some(pl), Some(a)) => pl
            .partitions()
            .zip(a.interference.iter().flatten())
            .flat_map(|((_, part), fs)| {
                part.models
                    .iter()
                    .map(|x| x.model.as_str())
                    .zip(fs.iter().copied())
            })
            .collect(),
        _ => Vec::new(),
    };
    let models: Vec<ModelResult> = sc
        .models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let o = sim.map(|s| &s.models[i]);
            let mine = || slots.iter().filter(|(n, _)| *n == m.name);
            ModelResult {
                name: m.name.clone(),
                model: m.model.clone(),
                stands_for: m.stands_for.clone(),
                slo_ms: p.slo_ms[i],
                paper_slo_ms: m.paper_slo_ms,
                rate_rps: m.mean_rps(opts.duration_s) * factor,
                throughput_rps: o.map_or(0.0, |o| o.completed as f64 / opts.duration_s),
                violation_rate: o.map_or(0.0, ModelOutcome::violation_rate),
                p50_ms: o.map_or(0.0, |o| o.latency_ms[0]),
                p99_ms: o.map_or(0.0, |o| o.latency_ms[1]),
                partitions: mine().count(),
                interference: mine().fold(1.0, |acc: f64, &(_, f)| acc.max(f)),
            }
        })
        .collect();
    let offered: f64 = models.iter().map(|m| m.rate_rps).sum();
    ScenarioResult {
        name: sc.name.clone(),
        planner: kind.as_str().into(),
        device: p.device.clone(),
        max_rps: opts.search.then_some(offered),
        offered_rps: offered,
        factor,
        violation_rate: sim.map_or(0.0, |s| s.violation_rate()),
        gpus: pl.map_or(0, |pl| pl.gpus.len()),
        gpus_available: sc.gpus,
        partition_sum: pl.map_or(0, |pl| {
            pl.partitions().map(|(_, q)| u64::from(q.size_pct)).sum()
        }),
        busy_gpus: sim.map_or(0.0, |s| s.busy_gpus),
        worst_violation_rate: 0.0,
        worst_violation_rps: 0.0,
        limit,
        probes,
        requests: sim.map_or(0, |s| s.arrived()),
        events: sim.map_or(0, |s| s.events),
        wall_s: 0.0,
        sim_wall_s: at.map_or(0.0, |a| a.sim_wall_s),
        models,
    }
}

/// One scenario under one planner: the search, or one simulation at the
/// scenario's rates.
fn run_pair(
    prep: &Prepared<'_>,
    kind: PlannerKind,
    opts: &ClusterOptions,
) -> Result<ScenarioResult, ClusterError> {
    if opts.search {
        // The most violations served at any rate the search accepts:
        // (factor, violation rate).
        let worst = std::cell::Cell::new((0.0f64, 0.0f64));
        let run = |f| {
            let p = probe(prep, kind, f, opts)?;
            if p.pass(opts.pass)
                && let Some(s) = &p.sim
                && s.violation_rate() > worst.get().1
            {
                worst.set((f, s.violation_rate()));
            }
            Ok(p)
        };
        let (lo, hi, n) = match opts.search_mode {
            SearchMode::Bisect => search(run, opts.search_steps, opts.pass)?,
            SearchMode::Scan { step, from_rps } => {
                let total: f64 = prep.sc.models.iter().map(|m| m.peak_rps()).sum();
                scan(
                    run,
                    from_rps / total.max(f64::MIN_POSITIVE),
                    step,
                    opts.pass,
                )?
            }
        };
        let limit = hi
            .as_ref()
            .map_or_else(|| "no limit found up to 65536x".into(), Probe::why);
        let mut r = result_of(prep, kind, lo.as_ref(), limit, n, opts);
        let (f, v) = worst.get();
        r.worst_violation_rate = v;
        r.worst_violation_rps = prep
            .sc
            .models
            .iter()
            .map(|m| m.mean_rps(opts.duration_s) * f)
            .sum();
        Ok(r)
    } else {
        let p = probe(prep, kind, 1.0, opts)?;
        let limit = if p.pass(opts.pass) {
            String::new()
        } else {
            p.why()
        };
        Ok(result_of(prep, kind, Some(&p), limit, 1, opts))
    }
}

/// Runs every scenario × planner. `reg` resolves manifests (every
/// scenario's models are checked before anything runs); `on_tables` and
/// `on_runs` get `(done, total)` for the two phases.
pub fn run(
    scenarios: &[Scenario],
    reg: &ModelRegistry,
    opts: &ClusterOptions,
    mut on_tables: impl FnMut(usize, usize),
    mut on_runs: impl FnMut(usize, usize),
) -> Result<ClusterReport, ClusterError> {
    let t_all = Instant::now();
    for sc in scenarios {
        sc.check_models(reg)?;
    }
    let device_of = |sc: &Scenario| opts.device.clone().unwrap_or_else(|| sc.device.clone());
    let gpulet = load_gpulet(opts.interference, opts.gpulet_data.as_deref())?;
    let measured = opts
        .measured_interference
        .as_deref()
        .map(load_measured_interference)
        .transpose()?;
    let t_tables = Instant::now();
    let tables = measure_tables(scenarios, &device_of, reg, &opts.tables, &mut on_tables)?;
    let tables_wall_s = t_tables.elapsed().as_secs_f64();
    let mut tables_adjusted: Vec<(String, usize)> = tables
        .iter()
        .map(|(k, t)| (format!("{}@{}", k.1, k.0), t.adjusted))
        .filter(|(_, a)| *a > 0)
        .collect();
    tables_adjusted.sort();

    let pairs: Vec<(&Scenario, PlannerKind)> = scenarios
        .iter()
        .flat_map(|sc| {
            let ks = if opts.planners.is_empty() {
                sc.planner_kinds()
            } else {
                opts.planners.clone()
            };
            ks.into_iter().map(move |k| (sc, k))
        })
        .collect();
    let mut results = Vec::new();
    on_runs(0, pairs.len());
    for (i, (sc, kind)) in pairs.iter().enumerate() {
        let t0 = Instant::now();
        let device = device_of(sc);
        let ts: Vec<&TableInfo> = sc
            .models
            .iter()
            .map(|m| &tables[&(device.clone(), m.model.clone())])
            .collect();
        let slo_ms = slos(sc, &ts);
        let planner_tables = ts
            .iter()
            .map(|t| scaled(&t.table, opts.latency_margin))
            .collect();
        let prep = Prepared {
            sc,
            device,
            tables: ts,
            planner_tables,
            interference: scenario_interference(gpulet.as_ref(), measured.as_ref(), sc),
            slo_ms,
        };
        let mut r = run_pair(&prep, *kind, opts)?;
        r.wall_s = t0.elapsed().as_secs_f64();
        results.push(r);
        on_runs(i + 1, pairs.len());
    }
    let devices: Vec<String> = scenarios.iter().map(device_of).collect();
    let device = match devices.first() {
        Some(d) if devices.iter().all(|x| x == d) => d.clone(),
        Some(_) => "mixed".into(),
        None => "none".into(),
    };
    Ok(ClusterReport {
        simulated: true,
        device,
        slo_rule: "2 x L(32, 100%) of the model's manifest on the device profile (slo_rule \"app\": the largest over the application's models); a scenario's slo_ms overrides".into(),
        interference: opts.interference,
        interference_note: match &opts.measured_interference {
            Some(d) => measured_note(d),
            None => opts.interference.describe(opts.gpulet_data.as_deref()),
        },
        engine: opts.engine,
        routing: opts.routing,
        rounds: opts.rounds,
        batching: opts.batching,
        duration_s: opts.duration_s,
        seed: opts.seed,
        max_violation_rate: MAX_VIOLATION_RATE,
        search: opts.search,
        search_mode: opts.search_mode,
        pass: opts.pass,
        headroom: opts.headroom,
        latency_margin: opts.latency_margin,
        burst_overflow: burst_overflow(opts.burst),
        gpulet_sizes: opts.gpulet_sizes.map(|s| s.to_vec()),
        tables: opts.tables.describe(),
        tables_wall_s,
        tables_adjusted,
        wall_s: t_all.elapsed().as_secs_f64(),
        fig13: (opts.search && opts.pass == PassRule::Served).then(|| {
            results
                .iter()
                .map(|r| Fig13Row {
                    scenario: r.name.clone(),
                    planner: r.planner.clone(),
                    max_rps: r.max_rps.unwrap_or(0.0),
                })
                .collect()
        }),
        fig14: (opts.search && opts.pass == PassRule::Planned).then(|| {
            results
                .iter()
                .map(|r| Fig14Row {
                    scenario: r.name.clone(),
                    planner: r.planner.clone(),
                    rate_rps: r.max_rps.unwrap_or(0.0),
                    violation_rate: r.violation_rate,
                    worst_violation_rate: r.worst_violation_rate,
                    worst_violation_rps: r.worst_violation_rps,
                })
                .collect()
        }),
        scenarios: results,
    })
}

/// The overflow share of a [`sluice_planner::Burst`] rule, `None` for the
/// mean.
pub fn burst_overflow(b: sluice_planner::Burst) -> Option<f64> {
    match b {
        sluice_planner::Burst::Mean => None,
        sluice_planner::Burst::Poisson(eps) => Some(eps),
    }
}

/// One line naming the planners' burst rule.
pub fn burst_rule(overflow: Option<f64>) -> String {
    match overflow {
        None => "batches planned for the mean rate (the papers' rule)".into(),
        Some(eps) => format!(
            "batches planned so that at most {eps} of the Poisson arrivals over the rounds a request can wait overflow them (sluice's burst rule)"
        ),
    }
}

/// The simulator's partitions for `placement`: each slot's batch times
/// from its model's table (`tables[index[name]]`) at the partition's size,
/// times its interference factor (`factors`, as [`interference_factors`]
/// returns), for batches 1 to the larger of the planned one and `most`.
pub fn sim_partitions(
    tables: &[&TableInfo],
    placement: &Placement,
    factors: &[Vec<Vec<f64>>],
    most: u32,
    index: &HashMap<&str, usize>,
) -> Vec<SimPartition> {
    placement
        .partitions()
        .zip(factors.iter().flatten())
        .map(|((g, part), fs)| SimPartition {
            gpu: g,
            size_pct: part.size_pct,
            duty_cycle_ms: part.duty_cycle_ms,
            slots: part
                .models
                .iter()
                .zip(fs)
                .map(|(a, &f)| {
                    let m = index[a.model.as_str()];
                    SimSlot {
                        model: m,
                        batch: a.batch,
                        share_rps: a.share_rps,
                        latency_ms: (1..=a.batch.max(most))
                            .map(|n| f * tables[m].batch_ms(n, part.size_pct))
                            .collect(),
                    }
                })
                .collect(),
        })
        .collect()
}

/// `t` with every latency times `k`.
pub fn scaled(t: &LatencyTable, k: f64) -> LatencyTable {
    if k == 1.0 {
        return t.clone();
    }
    LatencyTable::from_fn(t.batches().to_vec(), t.partitions_pct().to_vec(), |b, p| {
        k * t.latency_ms(b, p).expect("listed")
    })
    .expect("a positive multiple of a valid table is valid")
}

/// gpulet Fig. 13 as an SVG bar chart: every planner's SLO-preserved max
/// throughput over SBP's, per scenario, with the gpulet+int mean; `(file
/// name, svg)`, or `None` without Fig. 13 rows (`--pass planned`, no
/// search) or without SBP among the planners. The file name says the rule
/// (`gpulet-fig13.svg` for the mean, `gpulet-fig13-burst.svg` for the burst
/// rule).
pub fn fig13_plot(r: &ClusterReport) -> Result<Option<(String, String)>, crate::plot::PlotError> {
    use crate::plot::{self, Bar, Key, Mark};
    let Some(rows) = r.fig13.as_ref() else {
        return Ok(None);
    };
    let mut scenarios: Vec<&str> = Vec::new();
    for x in rows {
        if !scenarios.contains(&x.scenario.as_str()) {
            scenarios.push(&x.scenario);
        }
    }
    let rps = |sc: &str, planner: &str| {
        rows.iter()
            .find(|x| x.scenario == sc && x.planner == planner)
            .map(|x| x.max_rps)
    };
    let others: Vec<&str> = ["greedy", "gpulet", "gpulet+int"]
        .into_iter()
        .filter(|p| rows.iter().any(|x| x.planner == *p))
        .collect();
    let mut bars = Vec::new();
    let mut ratios = Vec::new();
    for sc in &scenarios {
        let Some(base) = rps(sc, "sbp").filter(|&b| b > 0.0) else {
            return Ok(None);
        };
        for (k, p) in others.iter().enumerate() {
            let v = rps(sc, p).unwrap_or(0.0) / base;
            if *p == "gpulet+int" {
                ratios.push(v);
            }
            bars.push(Bar {
                label: if k == others.len() / 2 {
                    (*sc).to_owned()
                } else {
                    String::new()
                },
                value: v,
                color: plot::color(k),
            });
        }
    }
    if !ratios.is_empty() {
        bars.push(Bar {
            label: "g+int mean".into(),
            value: ratios.iter().sum::<f64>() / ratios.len() as f64,
            color: plot::color(others.len().saturating_sub(1)),
        });
    }
    let rule = match r.burst_overflow {
        None => "mean rule".to_owned(),
        Some(eps) => format!("burst rule {eps}"),
    };
    let name = if r.burst_overflow.is_some() {
        "gpulet-fig13-burst.svg"
    } else {
        "gpulet-fig13.svg"
    };
    let keys: Vec<Key> = others
        .iter()
        .enumerate()
        .map(|(k, p)| Key {
            name: (*p).to_owned(),
            color: plot::color(k),
            mark: Mark::Box,
        })
        .collect();
    let w = plot::span(bars.len(), 34).saturating_add(90);
    let svg = plot::figure(name, (w, 340), None, |area| {
        let (chart, key_row) = area.split_vertically(320);
        plot::bar_chart(
            &chart,
            &format!(
                "gpulet Fig. 13: SLO-preserved max rps / SBP's (simulated, {}; {rule})",
                r.device
            ),
            "max rps / SBP's",
            &bars,
            1.0,
            Some(1.0),
        )?;
        plot::legend(&key_row.margin(0, 0, 40, 0), &keys, Some(110))
    })?;
    Ok(Some((name.to_owned(), svg)))
}

/// The human-readable report.
pub fn table(r: &ClusterReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "sluice bench cluster: SIMULATED serving, device profile {}; L(b, p) from the GPU model",
        devices(r)
    );
    let _ = writeln!(s, "SLO rule: {}", r.slo_rule);
    let _ = writeln!(s, "tables: {}", r.tables);
    let _ = writeln!(s, "interference: {}", r.interference_note);
    let serving = match r.engine {
        Engine::Daemon => "served by the daemon's cluster backend (one queue per model, adaptive batch, deadline drops)".to_string(),
        Engine::Sim => format!(
            "served by the request-level simulator, routing {}, rounds {}, batching {}",
            json_name(r.routing),
            json_name(r.rounds),
            json_name(r.batching)
        ),
    };
    let _ = writeln!(
        s,
        "{} virtual s of Poisson arrivals per simulation, seed {}, {serving}, planned for {:.0} % over the offered rates; a point passes with at most {:.0} % of requests late, dropped or unserved",
        r.duration_s,
        r.seed,
        100.0 * r.headroom,
        100.0 * r.max_violation_rate
    );
    let search = match r.search_mode {
        SearchMode::Bisect => "doubling from 1x, then bisection".to_string(),
        SearchMode::Scan { step, from_rps } => format!(
            "gradual: from {from_rps} rps in all, +{:.1} % per probe, up to the first failure (gpulet §5.2)",
            100.0 * step
        ),
    };
    let sizes = match &r.gpulet_sizes {
        None => "every multiple of the scenario's step".to_string(),
        Some(v) => format!("{v:?} %"),
    };
    let _ = writeln!(
        s,
        "planners see latencies x {}; {}; search: {search}; gpulet/gpulet+int/ideal partition sizes: {sizes}",
        r.latency_margin,
        burst_rule(r.burst_overflow)
    );
    if !r.tables_adjusted.is_empty() {
        let v: Vec<String> = r
            .tables_adjusted
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        let _ = writeln!(
            s,
            "table entries lifted to the monotone envelope: {}",
            v.join(", ")
        );
    }
    let _ = writeln!(s);
    let head = if r.search { "max rps" } else { "offered rps" };
    let mut t = crate::text_table::new(
        &[
            "scenario", "planner", head, "viol %", "worst %", "GPUs", "part. %", "busy GPU",
            "factor", "probes", "wall s", "limit",
        ],
        2,
    );
    if let Some(c) = t.column_mut(11) {
        c.set_cell_alignment(comfy_table::CellAlignment::Left);
    }
    for x in &r.scenarios {
        t.add_row(vec![
            x.name.clone(),
            x.planner.clone(),
            format!("{:.1}", x.max_rps.unwrap_or(x.offered_rps)),
            format!("{:.2}", 100.0 * x.violation_rate),
            format!("{:.2}", 100.0 * x.worst_violation_rate),
            format!("{}/{}", x.gpus, x.gpus_available),
            x.partition_sum.to_string(),
            format!("{:.2}", x.busy_gpus),
            format!("{:.3}", x.factor),
            x.probes.to_string(),
            format!("{:.2}", x.wall_s),
            x.limit.clone(),
        ]);
    }
    s += &crate::text_table::lines(&t);
    if r.search {
        let _ = writeln!(
            s,
            "worst %: the most violations served at any rate the search accepted, up to max rps"
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "per model at the reported factor, simulated on device profile {} (SLO: used here / the source's):",
        devices(r)
    );
    let mut t = crate::text_table::new(
        &[
            "scenario", "planner", "model", "manifest", "SLO ms", "rate", "served", "viol %",
            "p99 ms", "parts", "intf",
        ],
        4,
    );
    for x in &r.scenarios {
        for m in &x.models {
            let slo = match m.paper_slo_ms {
                Some(p) => format!("{:.1} / {p}", m.slo_ms),
                None => format!("{:.1}", m.slo_ms),
            };
            t.add_row(vec![
                x.name.clone(),
                x.planner.clone(),
                m.name.clone(),
                m.model.clone(),
                slo,
                format!("{:.1}", m.rate_rps),
                format!("{:.1}", m.throughput_rps),
                format!("{:.2}", 100.0 * m.violation_rate),
                format!("{:.1}", m.p99_ms),
                m.partitions.to_string(),
                format!("{:.2}", m.interference),
            ]);
        }
    }
    s += &crate::text_table::lines(&t);
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "wall time: {:.2} s in all, {:.2} s of it measuring L(b, p) tables",
        r.wall_s, r.tables_wall_s
    );
    for x in &r.scenarios {
        if x.requests > 0 {
            let _ = writeln!(
                s,
                "  {} / {}: reported simulation {} requests, {} events, {:.2} s wall ({:.0} virtual s on {} GPUs)",
                x.name, x.planner, x.requests, x.events, x.sim_wall_s, r.duration_s, x.gpus
            );
        }
    }
    s
}

/// The report's device profile; when mixed, each scenario's.
fn devices(r: &ClusterReport) -> String {
    if r.device != "mixed" {
        return r.device.clone();
    }
    let mut each: Vec<String> = r
        .scenarios
        .iter()
        .map(|x| format!("{}: {}", x.name, x.device))
        .collect();
    each.dedup();
    format!("mixed ({})", each.join(", "))
}

/// How the JSON names a unit enum.
fn json_name(v: impl Serialize) -> String {
    serde_json::to_value(v).map_or_else(|_| String::new(), |v| v.as_str().unwrap_or("").to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::scenario::Scenario;

    /// A scenario on `gpus` mi50s of `gpu_mem_mb`, serving `models` (its
    /// `[[model]]` tables).
    fn scenario(name: &str, gpus: u32, gpu_mem_mb: u64, planners: &str, models: &str) -> Scenario {
        let head = format!(
            "name = {name:?}\ndescription = \"test\"\ndevice = \"mi50\"\ngpus = {gpus}\ngpu_mem_mb = {gpu_mem_mb}\nplanners = [{planners}]\n"
        );
        Scenario::parse("t", &(head + models)).unwrap()
    }

    /// A one-model scenario on one GPU with an explicit SLO.
    fn one_model(rate: f64, slo_ms: f64) -> Scenario {
        scenario(
            "one",
            1,
            1000,
            r#""sbp""#,
            &format!(
                r#"
[[model]]
name = "m"
model = "resnet18"
stands_for = "a hand-made table, not resnet18's"
slo_ms = {slo_ms}
rate_rps = {rate}
mem_mb = 100
"#
            ),
        )
    }

    /// A built-in model at 50 rps, chosen for its fast table, not from any
    /// paper.
    fn standin(name: &str, model: &str, mem_mb: u64) -> String {
        format!(
            "[[model]]\nname = {name:?}\nmodel = {model:?}\nstands_for = \"test stand-in\"\nrate_rps = 50\nmem_mb = {mem_mb}\n"
        )
    }

    /// SBP serving [`one_model`] with the [`flat_table`] for 20 virtual s.
    fn sbp_on_flat(rate: f64, slo_ms: f64, headroom: f64) -> ScenarioResult {
        sbp_on_flat_passing(rate, slo_ms, headroom, PassRule::Served)
    }

    /// [`sbp_on_flat`] with the search's pass rule `pass`.
    fn sbp_on_flat_passing(
        rate: f64,
        slo_ms: f64,
        headroom: f64,
        pass: PassRule,
    ) -> ScenarioResult {
        let opts = ClusterOptions {
            duration_s: 20.0,
            headroom,
            pass,
            ..ClusterOptions::default()
        };
        sbp_on_flat_with(rate, slo_ms, &opts)
    }

    /// SBP serving [`one_model`] with the [`flat_table`] under `opts`.
    fn sbp_on_flat_with(rate: f64, slo_ms: f64, opts: &ClusterOptions) -> ScenarioResult {
        let sc = one_model(rate, slo_ms);
        let t = flat_table();
        let prep = Prepared {
            sc: &sc,
            device: "mi50".into(),
            tables: vec![&t],
            planner_tables: vec![t.table.clone()],
            interference: None,
            slo_ms: vec![slo_ms],
        };
        run_pair(&prep, PlannerKind::Sbp, opts).unwrap()
    }

    /// L(b, p) = 1 + b ms on every partition.
    fn flat_table() -> TableInfo {
        TableInfo {
            table: LatencyTable::from_fn(
                DEFAULT_BATCHES.to_vec(),
                DEFAULT_PARTITIONS.to_vec(),
                |b, _| 1.0 + f64::from(b),
            )
            .unwrap(),
            adjusted: 0,
        }
    }

    #[test]
    fn the_search_finds_the_hand_computed_knee() {
        // L(b) = 1 + b ms, SLO 1000 ms, one GPU. SBP's saturated batch is
        // the largest with 2 L(b) ≤ 1000: b = 32, L = 33 ms, so one GPU
        // serves T = 32 / 33 ms = 969.70 rps; above that SBP needs a second
        // GPU and fails. Planning with 25 % headroom, offered rate 100 × f
        // is planned as 125 × f, so the knee is f* = 969.70 / 125 = 7.7576
        // (max 775.76 rps). At f* the partition is 80 % busy with an SLO
        // 30 times its batch time: no violations, so placement is the
        // limit. Doubling brackets it in [4, 8]; 7 bisections leave 4/128.
        let r = sbp_on_flat(100.0, 1000.0, 0.25);
        let knee = 32.0 / 33.0 * 1000.0 / 125.0;
        assert!(
            r.factor <= knee && r.factor > knee - 4.0 / 128.0,
            "{} vs {knee}",
            r.factor
        );
        assert!((r.max_rps.unwrap() - 100.0 * r.factor).abs() < 1e-9);
        assert!(r.limit.contains("needs 2 GPUs, have 1"), "{}", r.limit);
        assert!(r.violation_rate <= MAX_VIOLATION_RATE);
        assert_eq!((r.gpus, r.partition_sum), (1, 100));
        assert_eq!(r.probes, 1 + 3 + 7);
    }

    #[test]
    fn under_the_poisson_rule_the_planner_not_queueing_sets_the_limit() {
        // The model of `without_headroom_queueing_sets_the_knee`, planned
        // at exactly its rate, once for the mean (late requests set the
        // maximum) and once to leave at most 1 % of Poisson arrivals over:
        // SBP's saturated batch 32 (L = 33 ms, k = ⌊67 / 33⌋ = 2 rounds, 64
        // requests) serves the r at which 1 % of Poisson(2 · 0.033 · r)
        // overflows 64, about 846 rps, so the planner refuses a second GPU
        // before anything is late.
        let mean = sbp_on_flat(100.0, 100.0, 0.0);
        assert!(mean.limit.contains("% violations"), "{}", mean.limit);
        let opts = ClusterOptions {
            duration_s: 20.0,
            burst: sluice_planner::Burst::Poisson(0.01),
            ..ClusterOptions::default()
        };
        let poisson = sbp_on_flat_with(100.0, 100.0, &opts);
        assert!(
            poisson.limit.contains("needs 2 GPUs, have 1"),
            "{}",
            poisson.limit
        );
        assert!(poisson.violation_rate <= MAX_VIOLATION_RATE, "{poisson:?}");
        let covered = sluice_planner::Burst::Poisson(0.01).served_rps(32, 33.0, 33.0, 100.0);
        assert!((covered - 846.1).abs() < 0.5, "{covered}");
        assert!(poisson.factor * 100.0 <= covered && poisson.factor * 100.0 > 0.9 * covered);
    }

    #[test]
    fn without_headroom_queueing_sets_the_knee() {
        // The same model planned at exactly its rate: at the saturated point
        // the partition is ~100 % busy and Poisson bursts make requests
        // late, so the maximum lies below the placement limit 9.697.
        let r = sbp_on_flat(100.0, 100.0, 0.0);
        assert!(r.factor > 0.0 && r.factor < 9.697, "{r:?}");
        assert!(r.limit.contains("% violations"), "{}", r.limit);
    }

    #[test]
    fn the_worst_violations_over_the_accepted_rates_are_reported() {
        // As above, but passing on the planner's word alone: the search
        // runs up to the placement limit (9.697), and on the way it accepts
        // rates where queueing makes more than 1 % late. The worst of those
        // is reported beside the violations at the maximum.
        let r = sbp_on_flat_passing(100.0, 100.0, 0.0, PassRule::Planned);
        assert!(r.limit.contains("needs 2 GPUs, have 1"), "{}", r.limit);
        assert!(r.worst_violation_rate > MAX_VIOLATION_RATE, "{r:?}");
        assert!(r.worst_violation_rate >= r.violation_rate, "{r:?}");
        let max = r.max_rps.unwrap();
        assert!(
            r.worst_violation_rps > 0.0 && r.worst_violation_rps <= max + 1e-9,
            "{r:?}"
        );
        // Passing on what is served, no accepted rate is above 1 %.
        let r = sbp_on_flat(100.0, 100.0, 0.0);
        assert!(r.worst_violation_rate <= MAX_VIOLATION_RATE, "{r:?}");
    }

    #[test]
    fn search_brackets_then_bisects() {
        let mk = |f: f64, pass: bool| Probe {
            factor: f,
            placement: None,
            plan_error: (!pass).then(|| "no".to_string()),
            sim: pass.then(|| crate::cluster::sim::SimResult {
                models: vec![],
                batches: 0,
                events: 0,
                end_s: 0.0,
                busy_gpus: 0.0,
                partition_completed: vec![],
                goodput_per_s: vec![],
            }),
            interference: vec![],
            sim_wall_s: 0.0,
        };
        // Knee at 0.3: halving from 1 finds 0.25, bisection closes in.
        let (lo, hi, n) = search(|f| Ok(mk(f, f <= 0.3)), 6, PassRule::Served).unwrap();
        let (lo, hi) = (lo.unwrap().factor, hi.unwrap().factor);
        assert!(lo <= 0.3 && hi > 0.3 && hi - lo <= 0.25 / 64.0 + 1e-12);
        assert_eq!(n, 3 + 6);
        // Nothing passes: no maximum.
        let (lo, _, _) = search(|f| Ok(mk(f, false)), 3, PassRule::Served).unwrap();
        assert!(lo.is_none());
    }

    #[test]
    fn the_envelope_lifts_only_what_breaks_monotonicity() {
        let mut rows = vec![vec![10.0, 6.0, 6.1], vec![9.0, 12.0, 7.0]];
        assert_eq!(monotone_envelope(&mut rows), 3);
        // Row 0: 6.1 on the larger partition → 6.0. Row 1: 12 → 9 (the
        // partition pass gives 9, 9, 7), then 9 → 10 (not below row 0).
        assert_eq!(rows, vec![vec![10.0, 6.0, 6.0], vec![10.0, 9.0, 7.0]]);
    }

    #[test]
    fn batch_times_interpolate_between_listed_batches() {
        let t = flat_table();
        assert_eq!(t.batch_ms(4, 50), 5.0);
        assert_eq!(t.batch_ms(3, 50), 4.0);
        assert_eq!(t.batch_ms(12, 50), 13.0);
        assert_eq!(t.l_max_full(), 33.0);
        let sc = one_model(1.0, 1.0);
        let mut sc2 = sc.clone();
        sc2.models[0].slo_ms = None;
        assert_eq!(slos(&sc2, &[&t]), vec![66.0]);
        assert_eq!(slos(&sc, &[&t]), vec![1.0]);
    }

    #[test]
    fn the_scan_stops_at_the_first_failure_even_if_a_higher_rate_passes() {
        // Fails on [2, 3) only: bisection from 1 doubles to 2 (fail) and
        // reports just under 2; the scan from 1 by 50 % probes 1, 1.5,
        // 2.25 (fail) and stops there, never reaching 3.375, which passes.
        let probe = |f: f64| {
            Ok(Probe {
                factor: f,
                placement: (!(2.0..3.0).contains(&f)).then(|| Placement { gpus: vec![] }),
                plan_error: (2.0..3.0).contains(&f).then(|| "no".into()),
                sim: None,
                interference: Vec::new(),
                sim_wall_s: 0.0,
            })
        };
        let (lo, hi, n) = scan(probe, 1.0, 0.5, PassRule::Planned).unwrap();
        assert_eq!(lo.unwrap().factor, 1.5);
        assert_eq!(hi.unwrap().factor, 2.25);
        assert_eq!(n, 3);
        let (lo, hi, _) = search(probe, 3, PassRule::Planned).unwrap();
        assert!(lo.unwrap().factor < 2.0 && hi.unwrap().factor >= 2.0);
        // Served needs a simulation: a placement alone does not pass.
        assert!(!probe(1.0).unwrap().pass(PassRule::Served));
    }

    #[test]
    fn the_latency_margin_scales_every_entry() {
        let t = flat_table().table;
        let m = scaled(&t, 1.1);
        for &b in t.batches() {
            for &p in t.partitions_pct() {
                let (x, y) = (t.latency_ms(b, p).unwrap(), m.latency_ms(b, p).unwrap());
                assert!((y - 1.1 * x).abs() < 1e-12, "{b} {p}");
            }
        }
    }

    #[test]
    fn the_simulation_applies_exactly_the_planners_interference() {
        use sluice_planner::{Assignment, GpuPlan, PartitionPlan};
        let part = |m: &str, size| PartitionPlan {
            size_pct: size,
            duty_cycle_ms: 10.0,
            models: vec![Assignment {
                model: m.into(),
                batch: 8,
                share_rps: 1.0,
            }],
        };
        let pl = Placement {
            gpus: vec![
                GpuPlan {
                    partitions: vec![part("a", 50), part("b", 50)],
                },
                GpuPlan {
                    partitions: vec![part("a", 100)],
                },
            ],
        };
        let coef = sluice_planner::LinearCoefficients {
            l2_own: 0.1,
            l2_other: 0.2,
            dram_own: 0.3,
            dram_other: 0.4,
            constant: 0.9,
        };
        let li = sluice_planner::LinearInterference::new(coef)
            .with_util(
                "a",
                sluice_planner::UtilTable::new(vec![(8, 0.4, 0.8)]).unwrap(),
            )
            .with_util(
                "b",
                sluice_planner::UtilTable::new(vec![(8, 1.0, 0.2)]).unwrap(),
            );
        let f = interference_factors(
            &pl,
            Some(&sluice_planner::AnyInterference::Linear(li.clone())),
        );
        // Utilisations scaled by the 50 % share: a (0.2, 0.4), b (0.5, 0.1).
        // a: 0.1·0.2 + 0.2·0.5 + 0.3·0.4 + 0.4·0.1 + 0.9 = 1.18
        // b: 0.1·0.5 + 0.2·0.2 + 0.3·0.1 + 0.4·0.4 + 0.9 = 1.18
        assert!((f[0][0][0] - 1.18).abs() < 1e-12, "{f:?}");
        assert!((f[0][1][0] - 1.18).abs() < 1e-12, "{f:?}");
        assert_eq!(f[1][0][0], 1.0, "alone on its GPU");
        assert_eq!(f, sluice_planner::interference_factors(&pl, &li));
        let none = interference_factors(&pl, None);
        assert_eq!(none[0], vec![vec![1.0], vec![1.0]]);
    }

    #[test]
    fn a_small_scenario_runs_end_to_end_and_reports_the_json_keys() {
        let sc = scenario(
            "standins",
            2,
            11000,
            r#""sbp", "greedy""#,
            &(standin("mob", "mobilenet", 464) + &standin("den", "densenet", 1220)),
        );
        let opts = ClusterOptions {
            duration_s: 5.0,
            search_steps: 2,
            ..ClusterOptions::default()
        };
        let r = run(
            &[sc],
            &ModelRegistry::builtin(),
            &opts,
            |_, _| {},
            |_, _| {},
        )
        .unwrap();
        assert_eq!(r.scenarios.len(), 2);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["device"], "mi50");
        assert_eq!(v["simulated"], true);
        for s in v["scenarios"].as_array().unwrap() {
            for k in [
                "name",
                "planner",
                "max_rps",
                "violation_rate",
                "gpus",
                "partition_sum",
            ] {
                assert!(!s[k].is_null(), "{k} in {s}");
            }
            assert!(s["max_rps"].as_f64().unwrap() > 0.0, "{s}");
        }
        assert_eq!(v["scenarios"][1]["planner"], "greedy");
        // Fig. 13's rows; no Fig. 14 rows without --pass planned.
        for k in ["scenario", "planner", "max_rps"] {
            assert!(!v["fig13"][1][k].is_null(), "{k}");
        }
        assert_eq!(v["fig13"][1]["max_rps"], v["scenarios"][1]["max_rps"]);
        assert!(v.get("fig14").is_none());
        assert!(table(&r).contains("SIMULATED"));
        assert!(table(&r).contains("simulated on device profile mi50"));
        // Fig. 13 as a plot: greedy over SBP for the one scenario, and the
        // rule in the title and the file name.
        let (name, svg) = fig13_plot(&r).unwrap().unwrap();
        assert_eq!(name, "gpulet-fig13.svg");
        crate::plot::check_well_formed(&svg).unwrap();
        let texts = crate::plot::texts(&svg);
        assert!(
            texts
                .iter()
                .any(|t| t.contains("simulated, mi50; mean rule")),
            "{texts:?}"
        );
        let ratio = r.scenarios[1].max_rps.unwrap() / r.scenarios[0].max_rps.unwrap();
        assert!(
            texts.contains(&format!("{ratio:.2}")),
            "{ratio} in {texts:?}"
        );
        assert!(texts.iter().any(|t| t == "greedy"), "{texts:?}");
        let mut no_sbp = r.clone();
        no_sbp
            .fig13
            .as_mut()
            .unwrap()
            .retain(|x| x.planner != "sbp");
        assert!(fig13_plot(&no_sbp).unwrap().is_none());
    }

    /// Writes `model`'s built-in manifest with `tables` as its `lbp` list
    /// into `dir/<model>.json`.
    fn write_manifest(dir: &std::path::Path, model: &str, tables: &[sluice_model::LbpTable]) {
        let mut v: serde_json::Value =
            serde_json::from_str(ModelRegistry::builtin_json(model).unwrap()).unwrap();
        v["lbp"] = serde_json::to_value(tables).unwrap();
        std::fs::write(dir.join(format!("{model}.json")), v.to_string()).unwrap();
    }

    /// `model`'s table on mi50 as `sluice profile --device mi50 --out`
    /// writes it (before the envelope), every entry times `scale`.
    fn mi50_table(model: &str, scale: f64) -> sluice_model::LbpTable {
        let reg = ModelRegistry::builtin();
        let (_, m) = reg.lookup(model).unwrap();
        let prof = device_profile("mi50").unwrap();
        let pts = lbp::measure(&prof, m, &DEFAULT_BATCHES, &DEFAULT_PARTITIONS, |_, _| {}).unwrap();
        let rows = lbp::latency_rows_ms(&pts, DEFAULT_PARTITIONS.len());
        sluice_model::LbpTable {
            device: "mi50".into(),
            simulated: true,
            rule: "test".into(),
            batches: DEFAULT_BATCHES.to_vec(),
            partitions_pct: DEFAULT_PARTITIONS.to_vec(),
            latency_ms: rows
                .into_iter()
                .map(|r| r.into_iter().map(|x| x * scale).collect())
                .collect(),
            mem_demand: Vec::new(),
        }
    }

    /// `--tables DIR`: a manifest holding the GPU model's own table gives
    /// the run the GPU model gives; the same table doubled is what the run
    /// then plans and serves on (lower maxima); a missing file, a file
    /// with two tables and no `--tables-device`, an absent device and a
    /// table without 100 % are refused with the fix.
    #[test]
    fn tables_from_manifests_are_what_the_run_plans_and_serves_on() {
        let dir = std::env::temp_dir().join(format!("sluice-tables-{}", std::process::id()));
        let twice = dir.join("twice");
        std::fs::create_dir_all(&twice).unwrap();
        for m in ["mobilenet", "densenet"] {
            write_manifest(&dir, m, &[mi50_table(m, 1.0)]);
            write_manifest(&twice, m, &[mi50_table(m, 2.0)]);
        }
        let sc = scenario(
            "standins",
            2,
            11000,
            r#""sbp", "greedy""#,
            &(standin("mob", "mobilenet", 464) + &standin("den", "densenet", 1220)),
        );
        let reg = ModelRegistry::builtin();
        let go = |tables: TableSource| {
            let opts = ClusterOptions {
                duration_s: 5.0,
                search_steps: 2,
                tables,
                ..ClusterOptions::default()
            };
            run(std::slice::from_ref(&sc), &reg, &opts, |_, _| {}, |_, _| {}).unwrap()
        };
        let gm = go(TableSource::GpuModel);
        let from = |d: &std::path::Path| TableSource::Dir {
            dir: d.to_path_buf(),
            device: None,
        };
        let same = go(from(&dir));
        let max = |r: &ClusterReport| -> Vec<Option<f64>> {
            r.scenarios.iter().map(|x| x.max_rps).collect()
        };
        assert_eq!(max(&same), max(&gm));
        // Everything but the wall times.
        let unclocked = |r: &ClusterReport| {
            let mut v = serde_json::to_value(&r.scenarios).unwrap();
            for x in v.as_array_mut().unwrap() {
                let o = x.as_object_mut().unwrap();
                o.remove("wall_s");
                o.remove("sim_wall_s");
            }
            v
        };
        assert_eq!(unclocked(&same), unclocked(&gm));
        assert!(
            table(&same).contains("from the manifests in"),
            "{}",
            table(&same)
        );
        let slow = go(from(&twice));
        for (a, b) in max(&slow).iter().zip(max(&gm)) {
            assert!(
                a.unwrap() < b.unwrap(),
                "doubled tables: {a:?} against {b:?}"
            );
        }
        // The loaded table is the file's, lifted like a measured one.
        let loaded = load_table(&twice, "densenet", Some("mi50")).unwrap();
        let (_, den) = reg.lookup("densenet").unwrap();
        let measured = measure_table(&device_profile("mi50").unwrap(), den).unwrap();
        for &b in &DEFAULT_BATCHES {
            let (x, y) = (
                loaded.table.latency_ms(b, 100).unwrap(),
                measured.table.latency_ms(b, 100).unwrap(),
            );
            assert!(
                (x - 2.0 * y).abs() < 1e-9 * y,
                "batch {b}: {x} against 2 x {y}"
            );
        }
        // Refusals name the value and the fix.
        let e = load_table(&dir, "resnet50", None).unwrap_err().to_string();
        assert!(
            e.contains("resnet50.json") && e.contains("sluice profile --device cuda resnet50"),
            "{e}"
        );
        let mut other = mi50_table("mobilenet", 1.0);
        other.device = "NVIDIA H200".into();
        write_manifest(&dir, "mobilenet", &[mi50_table("mobilenet", 1.0), other]);
        let e = load_table(&dir, "mobilenet", None).unwrap_err().to_string();
        assert!(
            e.contains("`mi50`, `NVIDIA H200`") && e.contains("--tables-device"),
            "{e}"
        );
        assert!(load_table(&dir, "mobilenet", Some("NVIDIA H200")).is_ok());
        let e = load_table(&dir, "mobilenet", Some("a100"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no L(b, p) table of `a100`"), "{e}");
        let mut part = mi50_table("densenet", 1.0);
        part.partitions_pct.pop();
        for r in &mut part.latency_ms {
            r.pop();
        }
        write_manifest(&dir, "densenet", &[part]);
        let e = load_table(&dir, "densenet", None).unwrap_err().to_string();
        assert!(e.contains("without 100 %"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--measured-interference DIR`: the pair files' factors, side A at
    /// its split and side B at the rest, under the scenario's names; what
    /// gpulet+int then plans with (it runs, and the report says so); an
    /// empty folder and a malformed file are refused naming them.
    #[test]
    fn measured_interference_is_read_from_pair_files_and_planned_with() {
        let dir = std::env::temp_dir().join(format!("sluice-pairs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = load_measured_interference(&dir).unwrap_err().to_string();
        assert!(
            e.contains("holds no .json file") && e.contains("--pair"),
            "{e}"
        );
        let pair = |a: &str, fa: f64, b: &str, fb: f64, split: u32| {
            format!(
                r#"{{"simulated":false,"device":"x","rule":"r","split_pct":{split},"sides":[{{"model":"{a}","batch":8,"sms":40,"factor":{fa}}},{{"model":"{b}","batch":8,"sms":88,"factor":{fb}}}]}}"#
            )
        };
        std::fs::write(
            dir.join("a.json"),
            pair("mobilenet", 1.4, "densenet", 1.2, 50),
        )
        .unwrap();
        std::fs::write(
            dir.join("b.json"),
            pair("mobilenet", 1.6, "densenet", 1.1, 20),
        )
        .unwrap();
        let m = load_measured_interference(&dir).unwrap();
        use sluice_planner::Interference as _;
        assert_eq!(m.factor("mobilenet", 8, 50, "densenet", 8, 50), 1.4);
        assert_eq!(m.factor("mobilenet", 8, 20, "densenet", 8, 80), 1.6);
        assert_eq!(m.factor("densenet", 8, 80, "mobilenet", 8, 20), 1.1);
        let sc = scenario(
            "standins",
            2,
            11000,
            r#""gpulet+int""#,
            &(standin("mob", "mobilenet", 464) + &standin("den", "densenet", 1220)),
        );
        let any = scenario_interference(None, Some(&m), &sc).unwrap();
        assert_eq!(any.factor("mob", 1, 50, "den", 1, 50), 1.4);
        assert_eq!(any.factor("mobilenet", 1, 50, "densenet", 1, 50), 1.0);
        let opts = ClusterOptions {
            duration_s: 5.0,
            search_steps: 1,
            measured_interference: Some(dir.clone()),
            ..ClusterOptions::default()
        };
        let r = run(
            std::slice::from_ref(&sc),
            &ModelRegistry::builtin(),
            &opts,
            |_, _| {},
            |_, _| {},
        )
        .unwrap();
        assert_eq!(r.scenarios[0].planner, "gpulet+int");
        assert!(
            r.interference_note.contains("measured pairwise"),
            "{}",
            r.interference_note
        );
        std::fs::write(dir.join("c.json"), "{}").unwrap();
        let e = load_measured_interference(&dir).unwrap_err().to_string();
        assert!(e.contains("c.json") && e.contains("not the JSON"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--interference gpulet-*` reads the built-in data/gpulet without
    /// `--data-dir`, the same data from the checkout's folder with it, and
    /// names the flag when the folder lacks the GPU's files.
    #[test]
    fn gpulet_data_is_built_in_or_read_from_the_data_dir() {
        let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/gpulet");
        for i in [Interference::Gpulet2080Ti, Interference::Gpulet3080] {
            let built_in = load_gpulet(i, None).unwrap().unwrap();
            assert_eq!(load_gpulet(i, Some(&checkout)).unwrap().unwrap(), built_in);
            let g = i.gpu().unwrap();
            assert!(
                i.describe(None)
                    .contains(&format!("(data/gpulet/{g}/, built in, measured inputs)")),
                "{}",
                i.describe(None)
            );
        }
        assert!(load_gpulet(Interference::None, None).unwrap().is_none());
        let e = load_gpulet(
            Interference::Gpulet3080,
            Some(std::path::Path::new("/nonexistent/gpulet")),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("/nonexistent/gpulet/3080/INT_MODEL_CONSTANT.CSV")
                && e.contains("--data-dir DIR"),
            "{e}"
        );
    }

    #[test]
    fn gpulet_int_needs_interference_data_and_the_new_planners_run() {
        let sc = scenario(
            "standins",
            2,
            11000,
            r#""gpulet""#,
            &(standin("mob", "mobilenet", 464) + "gpulet_util = \"mobilenet\"\n"),
        );
        let reg = ModelRegistry::builtin();
        let opts = |planners: Vec<PlannerKind>| ClusterOptions {
            duration_s: 5.0,
            search_steps: 2,
            planners,
            ..ClusterOptions::default()
        };
        let e = run(
            std::slice::from_ref(&sc),
            &reg,
            &opts(vec![PlannerKind::GpuletInt]),
            |_, _| {},
            |_, _| {},
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("--interference gpulet-2080ti"),
            "{e}"
        );
        let r = run(
            std::slice::from_ref(&sc),
            &reg,
            &opts(vec![PlannerKind::Gpulet, PlannerKind::Ideal]),
            |_, _| {},
            |_, _| {},
        )
        .unwrap();
        for s in &r.scenarios {
            assert!(
                s.max_rps.is_some_and(|r| r > 0.0),
                "{} found nothing",
                s.planner
            );
        }
        // The linear model gets the scenario's names and the data's rows.
        let g = sluice_planner::LinearInterference::new(sluice_planner::LinearCoefficients {
            l2_own: 0.1,
            l2_other: 0.2,
            dram_own: 0.3,
            dram_other: 0.4,
            constant: 1.0,
        })
        .with_util(
            "mobilenet",
            sluice_planner::UtilTable::new(vec![(1, 0.5, 0.25), (8, 0.75, 0.5)]).unwrap(),
        );
        let li = linear_interference(&g, &sc);
        assert!(li.util.contains_key("mob"), "{:?}", li.util.keys());
        use sluice_planner::Interference;
        // mob (b1) beside mob (b1), both on the whole GPU:
        // 0.1·0.5 + 0.2·0.5 + 0.3·0.25 + 0.4·0.25 + 1 = 1.325.
        let f = li.factor("mob", 1, 100, "mob", 1, 100);
        assert!((f - 1.325).abs() < 1e-9, "{f}");
    }
}
