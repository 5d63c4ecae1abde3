//! Scenario files of `sluice bench cluster`: which models to serve, at which
//! rates, on how many GPUs of which memory, with which planners.
//!
//! A scenario is a TOML file (the shipped ones are in
//! `benchmarks/scenarios/`, embedded in the binary, so `--scenario all`
//! needs no paths):
//!
//! ```toml
//! name = "scen3"
//! description = "..."
//! source = "..."              # where the models, rates and SLOs come from
//! device = "mi50"             # device profile of the L(b, p) tables
//! gpus = 4                    # GPUs available to the planner
//! gpu_mem_mb = 11000          # memory of each
//! partition_step_pct = 10     # optional, default 10
//! planners = ["sbp", "greedy"]
//! slo_rule = "per-model"      # or "app": one SLO for all, the largest
//!
//! [[model]]
//! name = "vgg16"              # unique deployment name
//! model = "vgg16"             # manifest (sluice's built-in models)
//! stands_for = "VGG-16 (vgg)" # what it plays in the source
//! gpulet_util = "vgg16"       # optional: its row in gpulet's UTIL.CSV
//! paper_slo_ms = 142          # optional, for reference
//! slo_ms = 500                # optional: used as is instead of the rule
//! rate_rps = 10               # or rate_trace = [[0.0, 10.0], [30.0, 20.0]]
//! mem_mb = 2920
//! ```
//!
//! A rate trace is piecewise constant: `[start s, rps]` segments, the first
//! at 0 s, the last rate holding to the end of the run.

use std::path::Path;

use serde::Deserialize;
use sluice_gpu::DeviceProfile;
use sluice_model::ModelRegistry;

/// The shipped scenarios: (name, TOML).
pub const BUILTIN: &[(&str, &str)] = &[
    ("game", include_str!("../../scenarios/game.toml")),
    ("traffic", include_str!("../../scenarios/traffic.toml")),
    ("scen1", include_str!("../../scenarios/scen1.toml")),
    ("scen2", include_str!("../../scenarios/scen2.toml")),
    ("scen3", include_str!("../../scenarios/scen3.toml")),
    ("scen4", include_str!("../../scenarios/scen4.toml")),
    ("scen5", include_str!("../../scenarios/scen5.toml")),
    ("table3", include_str!("../../scenarios/table3.toml")),
    (
        "cluster-64gpu",
        include_str!("../../scenarios/cluster-64gpu.toml"),
    ),
];

/// A planner `sluice bench cluster` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PlannerKind {
    /// `sluice_planner::Sbp`.
    #[serde(rename = "sbp")]
    Sbp,
    /// `sluice_planner::GreedyBestFit`.
    #[serde(rename = "greedy")]
    Greedy,
    /// `sluice_planner::Gpulet` (elastic partitioning without the
    /// interference model).
    #[serde(rename = "gpulet")]
    Gpulet,
    /// `sluice_planner::GpuletInt` with gpulet's linear interference model
    /// on the data of `--interference gpulet-*`.
    #[serde(rename = "gpulet+int")]
    GpuletInt,
    /// `sluice_planner::Ideal`: §5.2's exhaustive search over per-GPU
    /// splits (2:8), (4:6), (5:5), (10:0); at most 8 GPUs.
    #[serde(rename = "ideal")]
    Ideal,
}

impl PlannerKind {
    /// The names accepted, canonical first.
    pub const NAMES: &[&str] = &[
        "sbp",
        "greedy",
        "greedy-best-fit",
        "gpulet",
        "gpulet+int",
        "ideal",
    ];

    /// By name (`sbp`, `greedy` or `greedy-best-fit`).
    pub fn from_name(s: &str) -> Option<Self> {
        match s.trim() {
            "sbp" => Some(Self::Sbp),
            "greedy" | "greedy-best-fit" => Some(Self::Greedy),
            "gpulet" => Some(Self::Gpulet),
            "gpulet+int" => Some(Self::GpuletInt),
            "ideal" => Some(Self::Ideal),
            _ => None,
        }
    }

    /// gpulet's own planners (`gpulet`, `gpulet+int`, `ideal`): the ones
    /// that take gpulet's partition sizes.
    pub fn is_gpulet(self) -> bool {
        matches!(self, Self::Gpulet | Self::GpuletInt | Self::Ideal)
    }

    /// The short name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sbp => "sbp",
            Self::Greedy => "greedy",
            Self::Gpulet => "gpulet",
            Self::GpuletInt => "gpulet+int",
            Self::Ideal => "ideal",
        }
    }

    /// The planner; `interference` is the model `gpulet+int` plans with
    /// (the others ignore it), `None` when the run has no interference
    /// data.
    pub fn planner(
        self,
        interference: Option<sluice_planner::AnyInterference>,
    ) -> Option<Box<dyn sluice_planner::Planner>> {
        Some(match self {
            Self::Sbp => Box::new(sluice_planner::Sbp),
            Self::Greedy => Box::new(sluice_planner::GreedyBestFit),
            Self::Gpulet => Box::new(sluice_planner::Gpulet),
            Self::GpuletInt => Box::new(sluice_planner::GpuletInt::new(interference?)),
            Self::Ideal => Box::new(sluice_planner::Ideal::new()),
        })
    }
}

/// How SLOs are set where a model gives no `slo_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SloRule {
    /// Each model its own: twice its latency at the largest profiled batch
    /// on a whole GPU.
    #[default]
    PerModel,
    /// One SLO for every model of an application: the largest of the
    /// per-model values (gpulet §5.1: "doubling the longest model inference
    /// latency").
    App,
}

/// One model of a scenario.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioModel {
    /// Unique deployment name.
    pub name: String,
    /// Manifest name.
    pub model: String,
    /// What the model plays in the scenario's source.
    #[serde(default)]
    pub stands_for: String,
    /// Row name in gpulet's `UTIL.CSV`, for `--interference gpulet-*`.
    #[serde(default)]
    pub gpulet_util: Option<String>,
    /// The source's SLO, for reference only.
    #[serde(default)]
    pub paper_slo_ms: Option<f64>,
    /// An SLO used as is instead of the scenario's rule.
    #[serde(default)]
    pub slo_ms: Option<f64>,
    /// Constant rate, requests/s.
    #[serde(default)]
    pub rate_rps: Option<f64>,
    /// Piecewise-constant rate: `[start s, rps]`.
    #[serde(default)]
    pub rate_trace: Option<Vec<[f64; 2]>>,
    /// Memory of one loaded copy, MB.
    pub mem_mb: u64,
}

impl ScenarioModel {
    /// The rate as `(start s, rps)` segments.
    pub fn segments(&self) -> Vec<(f64, f64)> {
        match (&self.rate_trace, self.rate_rps) {
            (Some(t), _) => t.iter().map(|&[s, r]| (s, r)).collect(),
            (None, Some(r)) => vec![(0.0, r)],
            (None, None) => vec![(0.0, 0.0)],
        }
    }

    /// The largest rate of its trace (what the planner is given).
    pub fn peak_rps(&self) -> f64 {
        self.segments().iter().map(|s| s.1).fold(0.0, f64::max)
    }

    /// Its mean rate over `duration_s`.
    pub fn mean_rps(&self, duration_s: f64) -> f64 {
        let seg = self.segments();
        let mut sum = 0.0;
        for (i, &(s, r)) in seg.iter().enumerate() {
            let e = seg.get(i + 1).map_or(duration_s, |n| n.0).min(duration_s);
            if e > s {
                sum += r * (e - s);
            }
        }
        sum / duration_s
    }
}

/// One scenario file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// One line on what it is.
    pub description: String,
    /// Where its numbers come from.
    #[serde(default)]
    pub source: String,
    /// Device profile of the latency tables.
    pub device: String,
    /// GPUs available.
    pub gpus: u32,
    /// Memory of each GPU, MB.
    pub gpu_mem_mb: u64,
    /// Partition sizes are multiples of this, percent.
    #[serde(default = "default_step")]
    pub partition_step_pct: u32,
    /// Planners run when `--planner` is not given.
    pub planners: Vec<String>,
    /// SLO rule for models without `slo_ms`.
    #[serde(default)]
    pub slo_rule: SloRule,
    /// The models.
    #[serde(rename = "model")]
    pub models: Vec<ScenarioModel>,
}

fn default_step() -> u32 {
    10
}

/// Why a scenario cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// No such shipped scenario and no such file.
    #[error(
        "`{name}` is neither a shipped scenario nor a readable .toml file; use one of {available} or all, or a path to a scenario file"
    )]
    Unknown {
        /// What was asked for.
        name: String,
        /// Shipped names.
        available: String,
    },
    /// A file that could not be read.
    #[error("cannot read scenario file {path}")]
    Read {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// TOML that does not parse into a scenario.
    #[error("scenario {file}: {message}")]
    Parse {
        /// File.
        file: String,
        /// The parser's message.
        message: String,
    },
    /// A value that is out of range.
    #[error("scenario {file}: {message}")]
    Invalid {
        /// File.
        file: String,
        /// What is wrong and the fix.
        message: String,
    },
    /// A model with no manifest.
    #[error(
        "scenario {scenario}: model {entry:?} names manifest {model:?}, which is not a known model; known: {available}. Fix the name, or give its manifest with --models DIR"
    )]
    MissingModel {
        /// Scenario name.
        scenario: String,
        /// The entry's deployment name.
        entry: String,
        /// The manifest asked for.
        model: String,
        /// Known manifests.
        available: String,
    },
}

impl Scenario {
    /// Parses and validates one scenario; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Self, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            file: file.to_owned(),
            message: e.message().to_owned(),
        })?;
        s.validate(file)?;
        Ok(s)
    }

    /// Every rule the simulator and planners rely on.
    fn validate(&self, file: &str) -> Result<(), ScenarioError> {
        let bad = |message: String| {
            Err(ScenarioError::Invalid {
                file: file.to_owned(),
                message,
            })
        };
        if self.name.trim().is_empty() {
            return bad("name is empty; give the scenario a name".into());
        }
        if DeviceProfile::builtin(&self.device).is_err() {
            let names: Vec<&str> = DeviceProfile::builtin_names().collect();
            return bad(format!(
                "device {:?} is not a device profile; use one of {}",
                self.device,
                names.join(", ")
            ));
        }
        if self.gpus == 0 {
            return bad("gpus = 0; give at least 1 GPU".into());
        }
        if self.gpu_mem_mb == 0 {
            return bad("gpu_mem_mb = 0; give each GPU's memory in MB, e.g. 11000".into());
        }
        let step = self.partition_step_pct;
        if step == 0 || 100 % step != 0 {
            return bad(format!(
                "partition_step_pct = {step} does not divide 100; use 10, 20, 25 or 50"
            ));
        }
        if self.planners.is_empty() {
            return bad("planners is empty; list at least one of sbp, greedy".into());
        }
        for p in &self.planners {
            if PlannerKind::from_name(p).is_none() {
                return bad(format!(
                    "planner {p:?} is not known; use {}",
                    PlannerKind::NAMES.join(", ")
                ));
            }
        }
        if self.models.is_empty() {
            return bad("no [[model]] entries; a scenario serves at least one model".into());
        }
        for (i, m) in self.models.iter().enumerate() {
            if m.name.trim().is_empty() {
                return bad(format!(
                    "model {i} has an empty name; give every model a unique name"
                ));
            }
            if self.models[..i].iter().any(|o| o.name == m.name) {
                return bad(format!(
                    "model name {:?} appears twice; names must be unique (the same manifest may serve under two names)",
                    m.name
                ));
            }
            if let Some(slo) = m.slo_ms
                && !(slo.is_finite() && slo > 0.0)
            {
                return bad(format!(
                    "model {:?}: slo_ms = {slo} is not a positive number of ms",
                    m.name
                ));
            }
            match (&m.rate_rps, &m.rate_trace) {
                (Some(_), Some(_)) | (None, None) => {
                    return bad(format!(
                        "model {:?}: give exactly one of rate_rps and rate_trace",
                        m.name
                    ));
                }
                (Some(r), None) if !(r.is_finite() && *r >= 0.0) => {
                    return bad(format!(
                        "model {:?}: rate_rps = {r} is not a finite rate ≥ 0",
                        m.name
                    ));
                }
                (None, Some(t)) => {
                    if t.is_empty() || t[0][0] != 0.0 {
                        return bad(format!(
                            "model {:?}: rate_trace must start with a segment at 0 s, e.g. [[0.0, 100.0], [30.0, 200.0]]",
                            m.name
                        ));
                    }
                    for (j, seg) in t.iter().enumerate() {
                        let rising = j == 0 || seg[0] > t[j - 1][0];
                        if !(seg[0].is_finite() && rising && seg[1].is_finite() && seg[1] >= 0.0) {
                            return bad(format!(
                                "model {:?}: rate_trace segment {j} [{}, {}] is invalid; starts must rise and rates be finite and ≥ 0",
                                m.name, seg[0], seg[1]
                            ));
                        }
                    }
                }
                _ => {}
            }
            if m.mem_mb > self.gpu_mem_mb {
                return bad(format!(
                    "model {:?}: mem_mb = {} exceeds gpu_mem_mb = {}; it cannot be placed",
                    m.name, m.mem_mb, self.gpu_mem_mb
                ));
            }
        }
        Ok(())
    }

    /// The planners its file names.
    pub fn planner_kinds(&self) -> Vec<PlannerKind> {
        let mut v = Vec::new();
        for p in &self.planners {
            if let Some(k) = PlannerKind::from_name(p)
                && !v.contains(&k)
            {
                v.push(k);
            }
        }
        v
    }

    /// Fails, naming the model, the manifest and the known ones, when a
    /// model's manifest is not in `reg`.
    pub fn check_models(&self, reg: &ModelRegistry) -> Result<(), ScenarioError> {
        for m in &self.models {
            if reg.lookup(&m.model).is_none() {
                let mut names: Vec<&str> = reg.iter().map(|(_, x)| x.name()).collect();
                names.sort_unstable();
                return Err(ScenarioError::MissingModel {
                    scenario: self.name.clone(),
                    entry: m.name.clone(),
                    model: m.model.clone(),
                    available: names.join(", "),
                });
            }
        }
        Ok(())
    }
}

/// The shipped scenario `name`.
pub fn builtin(name: &str) -> Option<Result<Scenario, ScenarioError>> {
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, text)| Scenario::parse(&format!("builtin:{n}.toml"), text))
}

/// Every shipped scenario, in order.
pub fn all() -> Result<Vec<Scenario>, ScenarioError> {
    BUILTIN
        .iter()
        .map(|(n, text)| Scenario::parse(&format!("builtin:{n}.toml"), text))
        .collect()
}

/// What `--scenario` names: `all`, a shipped name, or a file.
pub fn resolve(spec: &str) -> Result<Vec<Scenario>, ScenarioError> {
    if spec == "all" {
        return all();
    }
    if let Some(s) = builtin(spec) {
        return s.map(|s| vec![s]);
    }
    let path = Path::new(spec);
    if path.is_file() {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: spec.to_owned(),
            source,
        })?;
        return Scenario::parse(spec, &text).map(|s| vec![s]);
    }
    Err(ScenarioError::Unknown {
        name: spec.to_owned(),
        available: BUILTIN
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "t"
description = "test"
device = "mi50"
gpus = 2
gpu_mem_mb = 1000
planners = ["sbp", "greedy-best-fit"]
[[model]]
name = "a"
model = "resnet18"
rate_rps = 10
mem_mb = 100
"#;

    #[test]
    fn every_shipped_scenario_parses_and_names_known_planners() {
        let reg = ModelRegistry::builtin();
        let all = all().unwrap();
        assert_eq!(all.len(), BUILTIN.len());
        for s in &all {
            assert_eq!(s.planner_kinds().len(), s.planners.len(), "{}", s.name);
            assert!(s.planner_kinds().contains(&PlannerKind::Sbp), "{}", s.name);
            assert!(
                s.planner_kinds().contains(&PlannerKind::Greedy),
                "{}",
                s.name
            );
            // Models being added elsewhere (vgg16, mnasnet, efficientnet_b0)
            // may be missing from this tree: the error names them.
            if let Err(e) = s.check_models(&reg) {
                let msg = e.to_string();
                assert!(
                    ["vgg16", "mnasnet", "efficientnet_b0"]
                        .iter()
                        .any(|m| msg.contains(&format!("manifest \"{m}\""))),
                    "{msg}"
                );
            }
        }
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        for n in [
            "game",
            "traffic",
            "scen1",
            "scen2",
            "scen3",
            "scen4",
            "scen5",
            "cluster-64gpu",
        ] {
            assert!(names.contains(&n), "{n}");
        }
        let big = all.iter().find(|s| s.name == "cluster-64gpu").unwrap();
        assert_eq!((big.gpus, big.models.len()), (64, 16));
    }

    #[test]
    fn a_missing_model_is_named_with_the_known_ones() {
        let mut s = Scenario::parse("t", MINIMAL).unwrap();
        s.models[0].model = "no_such_model".into();
        let e = s.check_models(&ModelRegistry::builtin()).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("\"no_such_model\""), "{msg}");
        assert!(
            msg.contains("resnet50") && msg.contains("--models DIR"),
            "{msg}"
        );
    }

    #[test]
    fn bad_values_are_named_with_the_fix() {
        let bad = |from: &str, to: &str| {
            let text = MINIMAL.replacen(from, to, 1);
            Scenario::parse("t.toml", &text).unwrap_err().to_string()
        };
        let e = bad("\"sbp\"", "\"glet\"");
        assert!(
            e.contains("\"glet\"") && e.contains("use sbp, greedy"),
            "{e}"
        );
        let e = bad("rate_rps = 10", "rate_rps = -1");
        assert!(e.contains("rate_rps = -1"), "{e}");
        let e = bad("rate_rps = 10", "rate_rps = 1\nrate_trace = [[0.0, 1.0]]");
        assert!(e.contains("exactly one of rate_rps and rate_trace"), "{e}");
        let e = bad("rate_rps = 10", "rate_trace = [[5.0, 1.0]]");
        assert!(e.contains("start with a segment at 0 s"), "{e}");
        let e = bad("device = \"mi50\"", "device = \"rtx2080\"");
        assert!(e.contains("\"rtx2080\"") && e.contains("mi50"), "{e}");
        let e = bad("gpus = 2", "gpus = 0");
        assert!(e.contains("gpus = 0"), "{e}");
        let e = bad("mem_mb = 100\n", "mem_mb = 5000\n");
        assert!(e.contains("exceeds gpu_mem_mb = 1000"), "{e}");
        let e = bad("gpus = 2", "gpus = 2\npartition_step_pct = 30");
        assert!(e.contains("partition_step_pct = 30"), "{e}");
        let e = bad("gpus = 2", "gpus = 2\nfoo = 1");
        assert!(e.contains("t.toml") && e.contains("foo"), "{e}");
        let dup = format!(
            "{MINIMAL}[[model]]\nname = \"a\"\nmodel = \"resnet50\"\nrate_rps = 1\nmem_mb = 1\n"
        );
        let e = Scenario::parse("t", &dup).unwrap_err().to_string();
        assert!(e.contains("\"a\" appears twice"), "{e}");
        let e = resolve("no-such-scenario").unwrap_err().to_string();
        assert!(
            e.contains("`no-such-scenario`") && e.contains("scen3"),
            "{e}"
        );
    }

    #[test]
    fn rates_and_traces() {
        let s = Scenario::parse(
            "t",
            &MINIMAL.replace("rate_rps = 10", "rate_trace = [[0.0, 10.0], [30.0, 40.0]]"),
        )
        .unwrap();
        let m = &s.models[0];
        assert_eq!(m.peak_rps(), 40.0);
        assert_eq!(m.mean_rps(60.0), 25.0);
        assert_eq!(m.mean_rps(20.0), 10.0);
        assert_eq!(PlannerKind::from_name("greedy"), Some(PlannerKind::Greedy));
        assert_eq!(PlannerKind::from_name("glet"), None);
        assert_eq!(
            PlannerKind::from_name("gpulet+int"),
            Some(PlannerKind::GpuletInt)
        );
    }
}
