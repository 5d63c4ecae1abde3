//! `[cluster]`: serving models at request rates on several GPUs
//! (`backend::cluster`). Absent, the daemon serves one device as `[device]`
//! says; present, every GPU listed here is a simulated device of that
//! profile, partitioned and re-partitioned by a planner, and `[device]`'s
//! `scheduler` is the policy inside each partition.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Deserialize;

use super::{Float, Int, Validator, toml_string};

/// Default `cluster.slo_ms`.
pub const DEFAULT_SLO_MS: f64 = 100.0;
/// Default `cluster.replan_ms`.
pub const DEFAULT_REPLAN_MS: u32 = 1000;
/// Default `cluster.rate_window_ms`.
pub const DEFAULT_RATE_WINDOW_MS: u32 = 1000;
/// Default `cluster.rate_change`.
pub const DEFAULT_RATE_CHANGE: f64 = 0.25;
/// Default `cluster.headroom`.
pub const DEFAULT_HEADROOM: f64 = 1.2;
/// Default `cluster.batches`: gpulet's profiles.
pub const DEFAULT_BATCHES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Default `cluster.partition_step_pct`: gpulet's grid.
pub const DEFAULT_STEP_PCT: u32 = 10;
/// Most GPUs one daemon serves.
pub const MAX_GPUS: usize = 64;
/// Largest batch size.
pub const MAX_BATCH: u32 = 256;
/// `cluster.partition_sizes = "gpulet"`: the gpulet artifact's sizes
/// (`sluice_planner::PartitionSizes::gpulet`).
pub const GPULET_SIZES_PCT: [u32; 6] = [20, 40, 50, 60, 80, 100];

/// Which planner places the models (`cluster.planner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannerKind {
    /// Spatial only: each model its smallest partition for its rate
    /// (`sluice_planner::GreedyBestFit`).
    Greedy,
    /// Temporal only: whole GPUs, duty cycles (`sluice_planner::Sbp`).
    Sbp,
    /// gpulet's elastic partitioning, spatial and temporal together,
    /// without its interference model (`sluice_planner::Gpulet`).
    Gpulet,
    /// gpulet's elastic partitioning with its linear interference model
    /// (`sluice_planner::GpuletInt` over `sluice_planner::LinearInterference`),
    /// fitted on the GPU of `cluster.interference_data`.
    GpuletInt,
    /// InSS's two reinforcement-learning agents, trained by `sluice train
    /// inss` (`sluice_inss::planner::InssPlanner`), from
    /// `cluster.inss_agents`.
    Inss,
}

impl PlannerKind {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            PlannerKind::Greedy => "greedy",
            PlannerKind::Sbp => "sbp",
            PlannerKind::Gpulet => "gpulet",
            PlannerKind::GpuletInt => "gpulet+int",
            PlannerKind::Inss => "inss",
        }
    }
}

/// `[cluster]`. [`ClusterConfig::enabled`] is false when the file has no
/// `[cluster]` table or lists no GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// One simulated device profile per GPU (`"mi50"`, `"h100"`, ...).
    pub gpus: Vec<String>,
    /// The planner. Default greedy.
    pub planner: PlannerKind,
    /// Models served; empty = every model of the registry.
    pub models: Vec<String>,
    /// Latency objective of a request, arrival to completion, ms.
    pub slo_ms: f64,
    /// Per-model SLOs overriding `slo_ms`.
    pub slo_ms_per_model: BTreeMap<String, f64>,
    /// Re-plan period, ms; 0 = only when a rate moves.
    pub replan_ms: u32,
    /// Window of the rate monitor, ms.
    pub rate_window_ms: u32,
    /// Re-plan early when a model's observed rate leaves
    /// `planned × (1 ± rate_change)`.
    pub rate_change: f64,
    /// Plans for `observed rate × headroom`.
    pub headroom: f64,
    /// When set, every plan's batches leave at most this share of the
    /// Poisson arrivals over the rounds a request can wait over
    /// (`sluice_planner::Burst::Poisson`); unset, the mean rate.
    pub burst_overflow: Option<f64>,
    /// Batch sizes profiled and used, ascending.
    pub batches: Vec<u32>,
    /// Partition sizes are multiples of this percentage of a GPU.
    pub partition_step_pct: u32,
    /// When set, partition sizes are only these percentages (ascending,
    /// 100 included, each a multiple of `partition_step_pct`); unset, every
    /// multiple of the step.
    pub partition_sizes: Option<Vec<u32>>,
    /// gpulet+int: `gpulet-2080ti` or `gpulet-3080` (the gpulet authors'
    /// data in the repository's `data/gpulet`, built in), or the folder
    /// holding gpulet's `INT_MODEL_CONSTANT.CSV` and `UTIL.CSV`, read once
    /// at start-up.
    pub interference_data: Option<PathBuf>,
    /// gpulet+int: the daemon's model name → its bench name in `UTIL.CSV`.
    /// A served model not listed has interference factor 1.
    pub util_names: BTreeMap<String, String>,
    /// inss: the directory `sluice train inss --out` wrote (or its
    /// `best/`): the agents and the latency model they observe through.
    pub inss_agents: Option<PathBuf>,
    /// gpulet's GPU scaling (Algorithm 2): each re-plan starts from the
    /// previous plan's GPU count and adds GPUs only while the plan fails,
    /// up to `gpus.len()`.
    pub scaling: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            gpus: Vec::new(),
            planner: PlannerKind::Greedy,
            models: Vec::new(),
            slo_ms: DEFAULT_SLO_MS,
            slo_ms_per_model: BTreeMap::new(),
            replan_ms: DEFAULT_REPLAN_MS,
            rate_window_ms: DEFAULT_RATE_WINDOW_MS,
            rate_change: DEFAULT_RATE_CHANGE,
            headroom: DEFAULT_HEADROOM,
            burst_overflow: None,
            batches: DEFAULT_BATCHES.to_vec(),
            partition_step_pct: DEFAULT_STEP_PCT,
            partition_sizes: None,
            interference_data: None,
            util_names: BTreeMap::new(),
            inss_agents: None,
            scaling: false,
        }
    }
}

impl ClusterConfig {
    /// Whether the daemon serves through the cluster backend.
    pub fn enabled(&self) -> bool {
        !self.gpus.is_empty()
    }

    /// The SLO of `model`, ms.
    pub fn slo_of(&self, model: &str) -> f64 {
        self.slo_ms_per_model
            .get(model)
            .copied()
            .unwrap_or(self.slo_ms)
    }

    /// Appends the section to a `--check-config` summary.
    pub(super) fn render(&self, s: &mut String) {
        if !self.enabled() {
            let _ = writeln!(
                s,
                "\n# [cluster] unset: one device, as [device] says (no batching, no partitions)"
            );
            return;
        }
        let list = |v: &[String]| {
            v.iter()
                .map(|g| toml_string(g))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(s, "\n[cluster]");
        let _ = writeln!(
            s,
            "gpus = [{}]  # simulated device profiles",
            list(&self.gpus)
        );
        let _ = writeln!(s, "planner = {}", toml_string(self.planner.as_str()));
        if self.models.is_empty() {
            let _ = writeln!(s, "# models unset: every model of the registry");
        } else {
            let _ = writeln!(s, "models = [{}]", list(&self.models));
        }
        let _ = writeln!(s, "slo_ms = {:?}", self.slo_ms);
        let _ = writeln!(
            s,
            "replan_ms = {}  # 0: only when a rate moves",
            self.replan_ms
        );
        let _ = writeln!(s, "rate_window_ms = {}", self.rate_window_ms);
        let _ = writeln!(s, "rate_change = {:?}", self.rate_change);
        let _ = writeln!(s, "headroom = {:?}", self.headroom);
        match self.burst_overflow {
            Some(q) => {
                let _ = writeln!(s, "burst_overflow = {q:?}");
            }
            None => {
                let _ = writeln!(
                    s,
                    "# burst_overflow unset: batches planned for the mean rate"
                );
            }
        }
        let batches: Vec<String> = self.batches.iter().map(u32::to_string).collect();
        let _ = writeln!(s, "batches = [{}]", batches.join(", "));
        let _ = writeln!(s, "partition_step_pct = {}", self.partition_step_pct);
        match &self.partition_sizes {
            Some(sizes) => {
                let v: Vec<String> = sizes.iter().map(u32::to_string).collect();
                let _ = writeln!(s, "partition_sizes = [{}]", v.join(", "));
            }
            None => {
                let _ = writeln!(
                    s,
                    "# partition_sizes unset: every multiple of partition_step_pct"
                );
            }
        }
        let _ = writeln!(
            s,
            "scaling = {}  # {}",
            self.scaling,
            if self.scaling {
                "as few GPUs as suffice, from the last plan's count (gpulet Algorithm 2)"
            } else {
                "plan on every GPU"
            }
        );
        if let Some(dir) = &self.interference_data {
            let _ = writeln!(
                s,
                "interference_data = {}",
                toml_string(&dir.to_string_lossy())
            );
        }
        if let Some(dir) = &self.inss_agents {
            let _ = writeln!(s, "inss_agents = {}", toml_string(&dir.to_string_lossy()));
        }
        if !self.slo_ms_per_model.is_empty() {
            let _ = writeln!(s, "\n[cluster.slo_ms_per_model]");
            for (m, v) in &self.slo_ms_per_model {
                let _ = writeln!(s, "{m} = {v:?}");
            }
        }
        if !self.util_names.is_empty() {
            let _ = writeln!(
                s,
                "\n[cluster.util_names]  # other models: interference factor 1"
            );
            for (m, v) in &self.util_names {
                let _ = writeln!(s, "{m} = {}", toml_string(v));
            }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table ([cluster])")]
pub(super) struct RawCluster {
    gpus: Option<Vec<String>>,
    planner: Option<String>,
    models: Option<Vec<String>>,
    slo_ms: Option<Float>,
    slo_ms_per_model: Option<BTreeMap<String, Float>>,
    replan_ms: Option<Int>,
    rate_window_ms: Option<Int>,
    rate_change: Option<Float>,
    headroom: Option<Float>,
    burst_overflow: Option<Float>,
    batches: Option<Vec<Int>>,
    partition_step_pct: Option<Int>,
    partition_sizes: Option<RawSizes>,
    interference_data: Option<String>,
    util_names: Option<BTreeMap<String, String>>,
    inss_agents: Option<String>,
    scaling: Option<bool>,
}

/// `cluster.partition_sizes`: a name or a list of percentages.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "\"gpulet\" or a list of percentages such as [20, 40, 50, 60, 80, 100]"
)]
enum RawSizes {
    Name(String),
    List(Vec<Int>),
}

fn slo_ok(v: f64) -> bool {
    v.is_finite() && v > 0.0 && v <= 600_000.0
}

impl Validator {
    pub(super) fn cluster(&mut self, raw: RawCluster) -> ClusterConfig {
        let mut c = ClusterConfig::default();
        if let Some(gpus) = raw.gpus {
            if gpus.len() > MAX_GPUS {
                self.fail(
                    "cluster.gpus",
                    format!("a list of {}", gpus.len()),
                    "has too many GPUs",
                    format!("list at most {MAX_GPUS}"),
                );
            }
            for g in &gpus {
                if g.starts_with("cuda") {
                    self.fail(
                        "cluster.gpus",
                        toml_string(g),
                        "is a CUDA device; the cluster backend serves simulated GPUs only so far",
                        "list simulated device profiles (\"mi50\", \"gv100\", \"h100\"), or \
                         remove [cluster] and set device.backend = \"cuda\" for one GPU"
                            .to_owned(),
                    );
                } else if sluice_gpu::DeviceProfile::builtin(g).is_err() {
                    let names: Vec<String> = sluice_gpu::DeviceProfile::builtin_names()
                        .map(toml_string)
                        .collect();
                    self.fail(
                        "cluster.gpus",
                        toml_string(g),
                        "is not a built-in GPU profile",
                        format!("use one of: {}", names.join(", ")),
                    );
                }
            }
            c.gpus = gpus;
        }
        if let Some(p) = raw.planner {
            match p.as_str() {
                "greedy" => c.planner = PlannerKind::Greedy,
                "sbp" => c.planner = PlannerKind::Sbp,
                "gpulet" => c.planner = PlannerKind::Gpulet,
                "gpulet+int" => c.planner = PlannerKind::GpuletInt,
                "inss" => c.planner = PlannerKind::Inss,
                _ => self.fail(
                    "cluster.planner",
                    toml_string(&p),
                    "is not a planner",
                    "use \"greedy\" (spatial partitions, one model each), \"sbp\" (whole \
                     GPUs shared in time), \"gpulet\" (gpulet's elastic partitioning, both) \
                     , \"gpulet+int\" (the same with gpulet's interference model; needs \
                     cluster.interference_data) or \"inss\" (InSS's trained agents; needs \
                     cluster.inss_agents)"
                        .to_owned(),
                ),
            }
        }
        if let Some(models) = raw.models {
            for (i, m) in models.iter().enumerate() {
                if models[..i].contains(m) {
                    self.fail(
                        "cluster.models",
                        toml_string(m),
                        "is listed twice",
                        "list each model once".to_owned(),
                    );
                }
            }
            c.models = models;
        }
        if let Some(Float(v)) = raw.slo_ms {
            if slo_ok(v) {
                c.slo_ms = v;
            } else {
                self.fail(
                    "cluster.slo_ms",
                    format!("{v:?}"),
                    "is not a latency objective",
                    "use a number of milliseconds greater than 0 and at most 600000".to_owned(),
                );
            }
        }
        if let Some(map) = raw.slo_ms_per_model {
            for (m, Float(v)) in map {
                if slo_ok(v) {
                    c.slo_ms_per_model.insert(m, v);
                } else {
                    self.fail(
                        format!("cluster.slo_ms_per_model.{m}"),
                        format!("{v:?}"),
                        "is not a latency objective",
                        "use a number of milliseconds greater than 0 and at most 600000".to_owned(),
                    );
                }
            }
        }
        if let Some(v) = raw.replan_ms
            && let Some(v) = self.in_range(
                "cluster.replan_ms",
                v,
                0,
                3_600_000,
                "use 0 (re-plan only when a rate moves) to 3600000 ms",
            )
        {
            c.replan_ms = v as u32;
        }
        if let Some(v) = raw.rate_window_ms
            && let Some(v) = self.in_range(
                "cluster.rate_window_ms",
                v,
                10,
                600_000,
                "use 10 to 600000 ms",
            )
        {
            c.rate_window_ms = v as u32;
        }
        for (key, raw, lo, hi, slot) in [
            (
                "cluster.rate_change",
                raw.rate_change,
                0.0,
                10.0,
                &mut c.rate_change,
            ),
            ("cluster.headroom", raw.headroom, 1.0, 10.0, &mut c.headroom),
        ] {
            if let Some(Float(v)) = raw {
                if v.is_finite() && v >= lo && v <= hi {
                    *slot = v;
                } else {
                    self.fail(
                        key,
                        format!("{v:?}"),
                        "is out of range",
                        format!("use a number from {lo} to {hi}"),
                    );
                }
            }
        }
        if let Some(Float(eps)) = raw.burst_overflow {
            if eps > 0.0 && eps < 1.0 {
                c.burst_overflow = Some(eps);
            } else {
                self.fail(
                    "cluster.burst_overflow",
                    format!("{eps:?}"),
                    "is not a share strictly between 0 and 1",
                    "use e.g. 0.01 for a 1 % violation target, or leave it unset to plan for the mean rate".into(),
                );
            }
        }
        if let Some(list) = raw.batches {
            let vals: Vec<i64> = list.iter().map(|i| i.0).collect();
            let ok = !vals.is_empty()
                && vals
                    .iter()
                    .all(|&b| (1..=i64::from(MAX_BATCH)).contains(&b))
                && vals.windows(2).all(|w| w[0] < w[1]);
            if ok {
                c.batches = vals.iter().map(|&b| b as u32).collect();
            } else {
                self.fail(
                    "cluster.batches",
                    format!("{vals:?}"),
                    "is not a list of batch sizes",
                    format!(
                        "list strictly ascending sizes from 1 to {MAX_BATCH}, e.g. [1, 2, 4, 8]"
                    ),
                );
            }
        }
        if let Some(v) = raw.partition_step_pct
            && let Some(v) = self.in_range(
                "cluster.partition_step_pct",
                v,
                1,
                100,
                "use a divisor of 100 such as 10, 20, 25 or 50",
            )
        {
            if 100 % v == 0 {
                c.partition_step_pct = v as u32;
            } else {
                self.fail(
                    "cluster.partition_step_pct",
                    v,
                    "does not divide 100",
                    "use a divisor of 100 such as 10, 20, 25 or 50".to_owned(),
                );
            }
        }
        if let Some(sizes) = raw.partition_sizes {
            c.partition_sizes = self.partition_sizes(sizes, c.partition_step_pct);
        }
        if let Some(v) = raw.scaling {
            c.scaling = v;
        }
        self.interference_keys(
            &mut c,
            raw.interference_data,
            raw.util_names.unwrap_or_default(),
        );
        self.inss_keys(&mut c, raw.inss_agents);
        if !c.enabled() && c != ClusterConfig::default() {
            // Keys that only the cluster backend reads, with no GPU to
            // serve on: they would be ignored without a word (and
            // `--check-config` could not show them).
            self.fail(
                "cluster.gpus",
                "[] (none listed)",
                "is empty, so the cluster backend is off and the other [cluster] keys set here \
                 would be ignored",
                "list the simulated GPUs to serve on (e.g. gpus = [\"mi50\", \"mi50\"]), or \
                 remove the other keys of [cluster]"
                    .to_owned(),
            );
        }
        c
    }

    /// `cluster.inss_agents`: required by and only for `inss`.
    fn inss_keys(&mut self, c: &mut ClusterConfig, dir: Option<String>) {
        let inss = c.planner == PlannerKind::Inss;
        match dir {
            Some(d) if d.is_empty() => self.fail(
                "cluster.inss_agents",
                "\"\"",
                "is empty",
                "name the directory `sluice train inss --out DIR` wrote (DIR or DIR/best)"
                    .to_owned(),
            ),
            Some(d) if !inss => self.fail(
                "cluster.inss_agents",
                toml_string(&d),
                "is read only by the inss planner",
                format!(
                    "remove it, or set cluster.planner = \"inss\" (now {})",
                    toml_string(c.planner.as_str())
                ),
            ),
            Some(d) => c.inss_agents = Some(PathBuf::from(d)),
            None if inss => self.fail(
                "cluster.planner",
                "\"inss\"",
                "needs trained agents",
                "set cluster.inss_agents to the directory `sluice train inss --out DIR` wrote \
                 (DIR or DIR/best; the repository ships agents/inss)"
                    .to_owned(),
            ),
            None => {}
        }
    }

    /// `cluster.partition_sizes`: `"gpulet"` or a list of percentages,
    /// each a multiple of `step`, 100 among them.
    fn partition_sizes(&mut self, raw: RawSizes, step: u32) -> Option<Vec<u32>> {
        const KEY: &str = "cluster.partition_sizes";
        let list = match raw {
            RawSizes::Name(n) if n == "gpulet" => GPULET_SIZES_PCT
                .iter()
                .map(|&p| Int(i64::from(p)))
                .collect(),
            RawSizes::Name(n) => {
                self.fail(
                    KEY,
                    toml_string(&n),
                    "is not a set of partition sizes",
                    "use \"gpulet\" (20, 40, 50, 60, 80 and 100 %) or a list of percentages \
                     such as [25, 50, 75, 100]"
                        .to_owned(),
                );
                return None;
            }
            RawSizes::List(l) => l,
        };
        let vals: Vec<i64> = list.iter().map(|i| i.0).collect();
        let ok = !vals.is_empty()
            && vals.iter().all(|&p| (1..=100).contains(&p))
            && vals.windows(2).all(|w| w[0] < w[1]);
        if !ok {
            self.fail(
                KEY,
                format!("{vals:?}"),
                "is not a list of partition sizes",
                "list strictly ascending percentages from 1 to 100, e.g. [20, 40, 50, 60, 80, 100]"
                    .to_owned(),
            );
            return None;
        }
        if vals.last() != Some(&100) {
            self.fail(
                KEY,
                format!("{vals:?}"),
                "does not list 100",
                "add 100: a whole GPU is the fallback placement and the sbp planner's only size"
                    .to_owned(),
            );
            return None;
        }
        if let Some(p) = vals.iter().find(|&&p| p % i64::from(step.max(1)) != 0) {
            self.fail(
                KEY,
                format!("{vals:?}"),
                "lists a size off the profiled grid",
                format!(
                    "{p} is not a multiple of cluster.partition_step_pct = {step}; use multiples \
                     of it, or a step that divides every size (10 for gpulet's sizes)"
                ),
            );
            return None;
        }
        Some(vals.iter().map(|&p| p as u32).collect())
    }

    /// `cluster.interference_data` and `cluster.util_names`: required by
    /// and only for `gpulet+int`.
    fn interference_keys(
        &mut self,
        c: &mut ClusterConfig,
        dir: Option<String>,
        names: BTreeMap<String, String>,
    ) {
        let int = c.planner == PlannerKind::GpuletInt;
        match dir {
            Some(d) if d.is_empty() => self.fail(
                "cluster.interference_data",
                "\"\"",
                "is empty",
                "use \"gpulet-2080ti\" or \"gpulet-3080\" (gpulet's measured data, built in), \
                 or name the folder holding gpulet's INT_MODEL_CONSTANT.CSV and UTIL.CSV"
                    .to_owned(),
            ),
            Some(d) if !int => self.fail(
                "cluster.interference_data",
                toml_string(&d),
                "is read only by the gpulet+int planner",
                format!(
                    "remove it, or set cluster.planner = \"gpulet+int\" (now {})",
                    toml_string(c.planner.as_str())
                ),
            ),
            Some(d) => c.interference_data = Some(PathBuf::from(d)),
            None if int => self.fail(
                "cluster.planner",
                "\"gpulet+int\"",
                "needs gpulet's interference data",
                "set cluster.interference_data to \"gpulet-2080ti\" or \"gpulet-3080\" (gpulet's \
                 measured data, built in) or to the folder holding INT_MODEL_CONSTANT.CSV and \
                 UTIL.CSV, or use planner = \"gpulet\""
                    .to_owned(),
            ),
            None => {}
        }
        for (m, bench) in names {
            if !int {
                self.fail(
                    format!("cluster.util_names.{m}"),
                    toml_string(&bench),
                    "is read only by the gpulet+int planner",
                    "remove [cluster.util_names], or set cluster.planner = \"gpulet+int\""
                        .to_owned(),
                );
            } else if bench.is_empty() || bench.contains(',') {
                self.fail(
                    format!("cluster.util_names.{m}"),
                    toml_string(&bench),
                    "is not a bench name",
                    "use the model's name in the first column of UTIL.CSV, e.g. \"resnet50\""
                        .to_owned(),
                );
            } else {
                c.util_names.insert(m, bench);
            }
        }
    }
}
