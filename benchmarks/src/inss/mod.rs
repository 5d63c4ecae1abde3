//! `sluice train inss` and `sluice bench inss`: InSS's experiments (§6) on
//! the simulated cluster. **Simulated**: every latency comes from the GPU
//! model on the `a100` device profile (108 SMs; `docs/inss.md`).
//!
//! **Setup** ([`setup`]): the eight models of §6.1 ([`crate::inss::model::MODELS`]),
//! ten instances (ResNet50 and VGG16 twice: the two models whose latency
//! the paper plots in Fig. 13–14; it does not say which two it doubled).
//! The latency model ([`sluice_inss::latency::LatencyModel`]) is fitted on
//! its 16 profile points and co-run observations per model
//! ([`crate::inss::model::run`]): the agents and the planners plan
//! with it. Serving ([`GpuModelExec`]) reads the GPU model itself, at the
//! exact batch and SM count, measured on demand and cached.
//!
//! **SLO rule** (the one `sluice bench cluster` uses for gpulet): SLO =
//! 2 × L(32, 100 %) of the model on the device profile; the paper's SLOs
//! (§6.1: [10, 35, 65, 10, 15, 30, 15, 80] ms on an A100 with PyTorch
//! builds) are kept beside them for reference. **Rates**: an instance's
//! *base rate* is what it serves on 40 % of a GPU (ten instances on four
//! GPUs) at the largest batch with `2 L ≤ SLO`; training draws rates in
//! `[0.2, 1.0] × 1.5 ×` base, evaluations scale every base rate by one
//! load factor.

pub mod cmd;
pub mod model;
pub mod trace;

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;
use sluice_gpu::DeviceProfile;
use sluice_gpusim::lbp::run_point;
use sluice_inss::latency::{LatencyModel, MemoryUse};
use sluice_inss::{CoRunner, ExecModel, Instance, sms_of_pct};
use sluice_model::{Model, ModelRegistry};

use crate::cluster::sim::{
    Batching, Engine, Rounds, Routing, SimModel, SimOptions, SimPartition, SimSlot,
};

/// The paper's SLOs (§6.1), ms, in [`crate::inss::model::MODELS`] order.
pub const PAPER_SLO_MS: [f64; 8] = [10.0, 35.0, 65.0, 10.0, 15.0, 30.0, 15.0, 80.0];

/// The largest batch the server forms: with deadline batching a backlog
/// is served in one batch of up to this many (the cluster simulator's
/// [`Batching::Deadline`]), whatever the planner planned.
pub const MAX_SERVED_BATCH: u32 = 32;

/// Models served twice (indices into [`crate::inss::model::MODELS`]):
/// ResNet50 and VGG16.
pub const DOUBLED: [usize; 2] = [1, 2];

/// Share of a GPU an instance's base rate is measured on, percent.
pub const BASE_SHARE_PCT: u32 = 40;

/// Training rates reach this multiple of the base rate.
pub const TRAIN_RATE_HEADROOM: f64 = 1.5;

/// Why the setup or a run failed.
#[derive(Debug, thiserror::Error)]
pub enum InssBenchError {
    /// Unknown device profile.
    #[error("unknown device profile {0:?}; use one of {1}")]
    Device(String, String),
    /// A model is missing from the registry.
    #[error("model manifest {0:?} is not built in; it should be (daemon/model/manifests)")]
    Model(String),
    /// The latency model could not be fitted.
    #[error("cannot fit the InSS latency model")]
    Fit(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A planner or the simulator failed.
    #[error("{0}")]
    Run(String),
}

/// A measured point: (model, batch, SMs).
type PointKey = (usize, u32, u32);

/// Serving truth: the GPU model's latency of one request of a model at a
/// batch on the lowest `sms` SMs, measured on demand and cached. The GPU
/// model's partitions do not slow each other (docs/performance.md,
/// "Interference between partitions": 0.0 % median, 0.10 % largest over
/// 500 points), so co-runners are not simulated here: a co-located batch
/// takes its alone time.
#[derive(Debug)]
pub struct GpuModelExec {
    profile: DeviceProfile,
    models: Vec<Model>,
    names: Vec<String>,
    memory: Vec<MemoryUse>,
    gpu_mem_mb: f64,
    cache: Mutex<HashMap<PointKey, (f64, f64)>>,
}

impl GpuModelExec {
    /// The truth for `models` (manifest names) on `profile`.
    pub fn new(
        profile: DeviceProfile,
        reg: &ModelRegistry,
        models: &[&str],
        gpu_mem_mb: f64,
    ) -> Result<Self, InssBenchError> {
        let mut ms = Vec::new();
        let mut memory = Vec::new();
        for &name in models {
            let (_, m) = reg
                .lookup(name)
                .ok_or_else(|| InssBenchError::Model(name.into()))?;
            memory.push(crate::inss::model::memory_of(m).unwrap_or(MemoryUse {
                fixed_mb: 0.0,
                per_batch_mb: 0.0,
            }));
            ms.push(m.clone());
        }
        Ok(Self {
            profile,
            models: ms,
            names: models.iter().map(|s| (*s).to_owned()).collect(),
            memory,
            gpu_mem_mb,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// (latency ms, mean bandwidth demand) of one point.
    fn point(&self, model: usize, batch: u32, sms: u32) -> (f64, f64) {
        let key = (model, batch, sms);
        if let Some(v) = self.cache.lock().expect("cache lock").get(&key) {
            return *v;
        }
        let v = match run_point(&self.profile, &self.models[model], batch, sms.max(1)) {
            Ok((ns, bw, _)) => (ns as f64 / 1e6, bw),
            Err(_) => (f64::INFINITY, 0.0),
        };
        self.cache.lock().expect("cache lock").insert(key, v);
        v
    }

    /// Points measured so far.
    pub fn measured(&self) -> usize {
        self.cache.lock().expect("cache lock").len()
    }
}

impl ExecModel for GpuModelExec {
    fn gpu_sms(&self) -> u32 {
        self.profile.compute_units
    }
    fn gpu_mem_mb(&self) -> f64 {
        self.gpu_mem_mb
    }
    fn model_count(&self) -> usize {
        self.models.len()
    }
    fn model_name(&self, model: usize) -> &str {
        &self.names[model]
    }
    fn exec_ms(&self, model: usize, batch: u32, sms: u32, _others: &[CoRunner]) -> f64 {
        self.point(model, batch, sms).0
    }
    fn mem_mb(&self, model: usize, batch: u32) -> f64 {
        self.memory[model].at(batch)
    }
    fn util(&self, model: usize, batch: u32, sms: u32) -> (f64, f64) {
        (0.0, self.point(model, batch, sms).1)
    }
}

/// Everything the experiments share.
#[derive(Debug)]
pub struct InssSetup {
    /// Device profile name.
    pub device: String,
    /// Serving truth.
    pub truth: GpuModelExec,
    /// The fitted latency model (what the agents and planners see).
    pub latency: LatencyModel,
    /// Its profiling and validation (Tables 3–4).
    pub model_report: crate::inss::model::InssModelReport,
    /// The ten instances.
    pub instances: Vec<Instance>,
    /// The paper's SLO of each instance's model, ms.
    pub paper_slo_ms: Vec<f64>,
    /// Base rate of each instance, requests/s.
    pub base_rps: Vec<f64>,
}

/// The largest rate `exec` serves for `model` on `pct` % within `slo_ms`
/// (largest batch with `2 L ≤ SLO`, run back to back).
pub fn capacity_rps(exec: &dyn ExecModel, model: usize, pct: u32, slo_ms: f64) -> f64 {
    let sms = sms_of_pct(pct, exec.gpu_sms());
    (1..=32)
        .map(|b| (b, exec.exec_ms(model, b, sms, &[])))
        .filter(|&(_, t)| 2.0 * t <= slo_ms)
        .map(|(b, t)| f64::from(b) / t * 1e3)
        .fold(0.0, f64::max)
}

/// Builds the setup on `device`; `progress(done, total)` follows the
/// latency model's profiling.
pub fn setup(
    device: &str,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<InssSetup, InssBenchError> {
    let profile = DeviceProfile::builtin(device).map_err(|_| {
        InssBenchError::Device(
            device.into(),
            DeviceProfile::builtin_names()
                .collect::<Vec<_>>()
                .join(", "),
        )
    })?;
    let reg = ModelRegistry::builtin();
    let names: Vec<&str> = crate::inss::model::MODELS.iter().map(|m| m.1).collect();
    let truth = GpuModelExec::new(
        profile.clone(),
        &reg,
        &names,
        crate::inss::model::A100_MEM_MB,
    )?;
    let opts = crate::inss::model::InssModelOptions {
        device: device.into(),
        ..Default::default()
    };
    let model_report =
        crate::inss::model::run(&opts, progress).map_err(|e| InssBenchError::Fit(Box::new(e)))?;
    let latency = model_report.latency_model.clone();
    let c = truth.gpu_sms();
    let mut instances = Vec::new();
    let mut paper = Vec::new();
    let mut base = Vec::new();
    let order: Vec<(usize, usize)> = (0..names.len())
        .map(|m| (m, 1))
        .chain(DOUBLED.iter().map(|&m| (m, 2)))
        .collect();
    for (m, copy) in order {
        let slo = 2.0 * truth.exec_ms(m, 32, c, &[]);
        let b = capacity_rps(&truth, m, BASE_SHARE_PCT, slo);
        instances.push(Instance {
            name: if copy == 1 {
                names[m].to_owned()
            } else {
                format!("{}#{copy}", names[m])
            },
            model: m,
            slo_ms: slo,
            max_rate_rps: TRAIN_RATE_HEADROOM * b,
        });
        paper.push(PAPER_SLO_MS[m]);
        base.push(b);
    }
    Ok(InssSetup {
        device: device.into(),
        truth,
        latency,
        model_report,
        instances,
        paper_slo_ms: paper,
        base_rps: base,
    })
}

/// One serving run's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Served {
    /// Requests completed within their SLO, per second.
    pub goodput_rps: f64,
    /// Of those, the ones completed in each second of the run (InSS Fig.
    /// 11's throughput over time).
    pub goodput_per_s: Vec<u64>,
    /// Late over arrived.
    pub violation: f64,
    /// Dropped or never served over arrived.
    pub drop: f64,
}

impl Served {
    /// Late, dropped or unserved over arrived.
    pub fn total_violation(&self) -> f64 {
        self.violation + self.drop
    }
}

/// Serves `placement` (instances named as in `instances`) at `rates` for
/// `duration_s` virtual seconds on `truth`.
pub fn serve(
    truth: &dyn ExecModel,
    instances: &[Instance],
    rates: &[f64],
    placement: &sluice_planner::Placement,
    duration_s: f64,
    seed: u64,
    engine: Engine,
) -> Result<Served, InssBenchError> {
    let schedule: Vec<Vec<(f64, f64)>> = rates.iter().map(|&r| vec![(0.0, r)]).collect();
    Ok(serve_schedule(
        truth, instances, &schedule, placement, duration_s, seed, engine,
    )?
    .0)
}

/// [`serve`] with each instance's rate a piecewise-constant schedule of
/// `(start s, rate)` segments; also returns each instance's arrivals and
/// the requests late, dropped or unserved.
pub fn serve_schedule(
    truth: &dyn ExecModel,
    instances: &[Instance],
    schedule: &[Vec<(f64, f64)>],
    placement: &sluice_planner::Placement,
    duration_s: f64,
    seed: u64,
    engine: Engine,
) -> Result<(Served, Vec<u64>, u64), InssBenchError> {
    let index: HashMap<&str, usize> = instances
        .iter()
        .enumerate()
        .map(|(i, inst)| (inst.name.as_str(), i))
        .collect();
    let c = truth.gpu_sms();
    let parts: Vec<SimPartition> = placement
        .partitions()
        .map(|(g, p)| SimPartition {
            gpu: g,
            size_pct: p.size_pct,
            duty_cycle_ms: p.duty_cycle_ms,
            slots: p
                .models
                .iter()
                .map(|a| {
                    let i = index[a.model.as_str()];
                    let sms = sms_of_pct(p.size_pct, c);
                    SimSlot {
                        model: i,
                        batch: a.batch,
                        share_rps: a.share_rps,
                        latency_ms: (1..=a.batch.max(MAX_SERVED_BATCH))
                            .map(|n| truth.exec_ms(instances[i].model, n, sms, &[]))
                            .collect(),
                    }
                })
                .collect(),
        })
        .collect();
    let models: Vec<SimModel> = instances
        .iter()
        .zip(schedule)
        .map(|(inst, r)| SimModel {
            name: inst.name.clone(),
            slo_ms: inst.slo_ms,
            rate: r.clone(),
        })
        .collect();
    let opts = SimOptions {
        duration_s,
        seed,
        routing: Routing::Random,
        rounds: Rounds::WorkConserving,
        batching: Batching::Deadline,
        engine,
        arrivals: crate::cluster::sim::ArrivalSeeding::Run,
    };
    let mut r = crate::cluster::serve(&models, &parts, &opts)
        .map_err(|e| InssBenchError::Run(e.to_string()))?;
    let arrived: u64 = r.models.iter().map(|m| m.arrived).sum();
    let violated: u64 = r.models.iter().map(|m| m.violated).sum();
    let lost: u64 = r.models.iter().map(|m| m.dropped + m.unserved).sum();
    let n = arrived.max(1) as f64;
    Ok((
        Served {
            goodput_rps: (arrived - violated) as f64 / duration_s,
            goodput_per_s: std::mem::take(&mut r.goodput_per_s),
            violation: (violated - lost) as f64 / n,
            drop: lost as f64 / n,
        },
        r.models.iter().map(|m| m.arrived).collect(),
        violated,
    ))
}

/// The planners compared (§6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PlannerKind {
    /// InSS's two-stage agents on the latency model.
    Inss,
    /// InSS trained and planning without interference.
    InssNi,
    /// sluice's variant (beyond the paper): InSS's agents place every
    /// instance, then `sluice_inss::resize` re-sizes each GPU's shares and
    /// batches on the latency model for equal headroom. Not in the default
    /// set.
    InssSized,
    /// gpulet (two gpulets per GPU, `sluice_planner::Gpulet`) on tables
    /// read from the latency model.
    Gpulet,
    /// The same planner on tables measured on the GPU model itself (gpulet
    /// profiles `L(b, p)` on its own device; no latency-model error).
    GpuletMeasured,
    /// GSLICE.
    Gslice,
    /// iGniter.
    Igniter,
}

impl PlannerKind {
    /// Every planner, in report order.
    pub const ALL: [PlannerKind; 6] = [
        PlannerKind::Inss,
        PlannerKind::InssNi,
        PlannerKind::Gpulet,
        PlannerKind::GpuletMeasured,
        PlannerKind::Gslice,
        PlannerKind::Igniter,
    ];

    /// A gpulet planner, which refuses loads it cannot place.
    pub fn is_gpulet(self) -> bool {
        matches!(self, PlannerKind::Gpulet | PlannerKind::GpuletMeasured)
    }

    /// Its report name.
    pub fn name(self) -> &'static str {
        match self {
            PlannerKind::Inss => "inss",
            PlannerKind::InssNi => "inss-ni",
            PlannerKind::InssSized => "inss-sized",
            PlannerKind::Gpulet => "gpulet",
            PlannerKind::GpuletMeasured => "gpulet-measured",
            PlannerKind::Gslice => "gslice",
            PlannerKind::Igniter => "igniter",
        }
    }
}

/// GPUs per InSS group: §5.1 groups GPUs by four, models spread evenly,
/// each group deciding on its own; the agents are trained on one group.
pub const GROUP_GPUS: usize = 4;

/// Trained agents: InSS's, and optionally InSS-ni's.
#[derive(Debug)]
pub struct Agents {
    /// Trained on the latency model.
    pub inss: sluice_inss::ts::TwoStage,
    /// Trained on the latency model without interference, with that model
    /// (made once: InSS-ni plans on it at every load tried).
    pub inss_ni: Option<(sluice_inss::ts::TwoStage, LatencyModel)>,
}

/// One planner's plan: the placement, how long deciding took, and its
/// fragments and GPUs in use.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Placement over all GPUs.
    pub placement: sluice_planner::Placement,
    /// Wall ms the planner took.
    pub decision_ms: f64,
    /// InSS §2.4 fragments: unused percent on GPUs in use, summed.
    pub fragment_pct: u32,
    /// GPUs in use.
    pub gpus_used: usize,
    /// Percent of the GPUs in use held by partitions, summed.
    pub used_pct: u32,
}

fn plan_of_placement(p: sluice_planner::Placement, decision_ms: f64) -> Plan {
    let mut used = 0;
    let mut frag = 0;
    let mut gpus = 0;
    for g in &p.gpus {
        let u: u32 = g.partitions.iter().map(|x| x.size_pct).sum();
        if g.partitions.iter().any(|x| !x.models.is_empty()) {
            gpus += 1;
            used += u;
            frag += 100u32.saturating_sub(u);
        }
    }
    Plan {
        placement: p,
        decision_ms,
        fragment_pct: frag,
        gpus_used: gpus,
        used_pct: used,
    }
}

/// What the planners plan on, besides their instances and rates.
#[derive(Clone, Copy)]
pub struct PlanInputs<'a> {
    /// The fitted latency model (InSS, gpulet, GSLICE, iGniter).
    pub latency: &'a LatencyModel,
    /// The GPU model's own latencies (`gpulet-measured`'s tables).
    pub truth: &'a dyn ExecModel,
    /// Every entry of both gpulet planners' tables is multiplied by this
    /// (≥ 1): slack for bursts that gpulet's rule (`b/t ≥ λ`, `2t ≤ S`)
    /// does not leave. 1: the rule as written.
    pub gpulet_margin: f64,
}

impl std::fmt::Debug for PlanInputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanInputs")
            .field("latency", &self.latency.lwr_config())
            .field("gpulet_margin", &self.gpulet_margin)
            .finish_non_exhaustive()
    }
}

impl InssSetup {
    /// The planners' inputs from this setup.
    pub fn plan_inputs(&self, gpulet_margin: f64) -> PlanInputs<'_> {
        PlanInputs {
            latency: &self.latency,
            truth: &self.truth,
            gpulet_margin,
        }
    }
}

/// Multiplies every entry of `rows` by `m`.
fn scale_rows(rows: &mut [Vec<f64>], m: f64) {
    for v in rows.iter_mut().flatten() {
        *v *= m;
    }
}

/// Plans `instances` at `rates` on `gpus` GPUs with `kind`. InSS decides
/// per group of [`GROUP_GPUS`] GPUs, the group's instances being every
/// `groups`-th instance.
pub fn plan(
    kind: PlannerKind,
    inputs: &PlanInputs<'_>,
    agents: Option<&Agents>,
    instances: &[Instance],
    rates: &[f64],
    gpus: usize,
    seed: u64,
) -> Result<Plan, InssBenchError> {
    let started = std::time::Instant::now();
    let latency = inputs.latency;
    let margin = inputs.gpulet_margin;
    let placement = match kind {
        PlannerKind::Inss | PlannerKind::InssNi | PlannerKind::InssSized => {
            let (ts, exec): (_, &dyn ExecModel) = match (kind, agents) {
                (PlannerKind::Inss | PlannerKind::InssSized, Some(a)) => (&a.inss, latency),
                (
                    PlannerKind::InssNi,
                    Some(Agents {
                        inss_ni: Some((t, ni)),
                        ..
                    }),
                ) => (t, ni),
                _ => {
                    return Err(InssBenchError::Run(format!(
                        "{} needs trained agents: run `sluice train inss{} --out DIR` and pass --agents{} DIR",
                        kind.name(),
                        if kind == PlannerKind::InssNi {
                            " --no-interference"
                        } else {
                            ""
                        },
                        if kind == PlannerKind::InssNi {
                            "-ni"
                        } else {
                            ""
                        },
                    )));
                }
            };
            let groups = gpus.div_ceil(GROUP_GPUS).max(1);
            let mut placement = sluice_planner::Placement {
                gpus: vec![Default::default(); gpus],
            };
            let mut rng = <sluice_rl::Rng as sluice_rl::SeedableRng>::seed_from_u64(seed);
            for g in 0..groups {
                let members: Vec<usize> = (g..instances.len()).step_by(groups).collect();
                let group: Vec<Instance> = members.iter().map(|&i| instances[i].clone()).collect();
                let group_rates: Vec<f64> = members.iter().map(|&i| rates[i]).collect();
                let mut cfg = *ts.env_config();
                cfg.gpus = GROUP_GPUS.min(gpus - g * GROUP_GPUS);
                if cfg.gpus != ts.env_config().gpus {
                    return Err(InssBenchError::Run(format!(
                        "the agents place on {} GPUs, and {gpus} GPUs leave a group of {}; use a multiple of {}",
                        ts.env_config().gpus,
                        cfg.gpus,
                        ts.env_config().gpus
                    )));
                }
                let mut env = sluice_inss::Env::new(cfg, group.clone(), seed);
                env.reset_with_rates(&group_rates);
                let empty = sluice_inss::Decision {
                    slots: vec![None; group.len()],
                };
                let (mut d, _) = ts
                    .decide(&env, exec, &empty, false, &mut rng)
                    .map_err(|e| InssBenchError::Run(format!("{}: {e}", kind.name())))?;
                if kind == PlannerKind::InssSized {
                    d = sluice_inss::resize::resize(&d, &group, &group_rates, exec, cfg.max_batch);
                }
                let p = d.to_placement(&group, &group_rates, cfg.gpus);
                for (k, gp) in p.gpus.into_iter().enumerate() {
                    placement.gpus[g * GROUP_GPUS + k] = gp;
                }
            }
            placement
        }
        PlannerKind::Gpulet | PlannerKind::GpuletMeasured => {
            use sluice_planner::Planner;
            let specs = if kind == PlannerKind::Gpulet {
                sluice_inss::baselines::gpulet_specs_with(latency, instances, rates, &|rows| {
                    scale_rows(rows, margin);
                })
            } else {
                // Measured rows, lifted to the planner's rules as `bench
                // cluster`'s are (wave quantisation breaks them by µs).
                sluice_inss::baselines::gpulet_specs_with(inputs.truth, instances, rates, &|rows| {
                    crate::cluster::monotone_envelope(rows);
                    scale_rows(rows, margin);
                })
            }
            .map_err(|e| InssBenchError::Run(format!("gpulet tables: {e}")))?;
            let spec = sluice_planner::GpuSpec::new(gpus as u32, latency.gpu_mem_mb() as u64, 10)
                .with_sizes(sluice_planner::PartitionSizes::gpulet());
            sluice_planner::Gpulet
                .plan(&specs, &spec)
                .map_err(|e| InssBenchError::Run(format!("gpulet: {e}")))?
        }
        PlannerKind::Gslice => sluice_inss::baselines::gslice(latency, instances, rates, gpus)
            .to_placement(instances, rates, gpus),
        PlannerKind::Igniter => sluice_inss::baselines::igniter(latency, instances, rates, gpus)
            .to_placement(instances, rates, gpus),
    };
    Ok(plan_of_placement(
        placement,
        started.elapsed().as_secs_f64() * 1e3,
    ))
}

/// What `sluice bench inss` runs.
#[derive(Debug, Clone, PartialEq)]
pub struct InssBenchOptions {
    /// GPU counts (multiples of [`GROUP_GPUS`]); default 4 and 64.
    pub gpus: Vec<usize>,
    /// Planners.
    pub planners: Vec<PlannerKind>,
    /// Virtual seconds of arrivals per serving run.
    pub duration_s: f64,
    /// Bisection steps of the load search.
    pub search_steps: u32,
    /// Seed of arrivals and routing.
    pub seed: u64,
    /// The common load factor of the fixed-load comparison (Fig. 10–12's
    /// shape: every planner at the same rates).
    pub fixed_load: f64,
    /// Compute the ceilings ([`load_bound`]: 100 shares × up to 32
    /// batches per model on the GPU model, ~40 s here in a release build).
    pub bounds: bool,
    /// [`PlanInputs::gpulet_margin`].
    pub gpulet_margin: f64,
    /// Which code serves the plans ([`Engine`]).
    pub engine: Engine,
}

impl Default for InssBenchOptions {
    fn default() -> Self {
        Self {
            gpus: vec![4, 64],
            planners: PlannerKind::ALL.to_vec(),
            duration_s: 20.0,
            search_steps: 5,
            seed: 1,
            fixed_load: 0.5,
            bounds: true,
            gpulet_margin: 1.0,
            engine: Engine::Daemon,
        }
    }
}

/// Plans and serves `kind` at `load` × every base rate on `gpus` GPUs:
/// the fixed-load comparison's row (its `load_factor` is `load`, whatever
/// the violations).
pub fn at_load(
    s: &InssSetup,
    agents: Option<&Agents>,
    kind: PlannerKind,
    gpus: usize,
    load: f64,
    opts: &InssBenchOptions,
) -> Result<ThroughputRow, InssBenchError> {
    let (inst, base) = cluster_instances(s, gpus);
    let rates: Vec<f64> = base.iter().map(|r| r * load).collect();
    let mut row = ThroughputRow {
        gpus,
        planner: kind.name(),
        load_factor: load,
        throughput_rps: 0.0,
        violation: f64::NAN,
        drop: f64::NAN,
        fragment: 0,
        gpus_used: 0,
        used_pct: 0,
        decision_ms: f64::NAN,
        goodput_per_s: Vec::new(),
        note: None,
    };
    let inputs = s.plan_inputs(opts.gpulet_margin);
    match plan(kind, &inputs, agents, &inst, &rates, gpus, opts.seed) {
        Ok(p) => {
            let sv = serve(
                &s.truth,
                &inst,
                &rates,
                &p.placement,
                opts.duration_s,
                opts.seed,
                opts.engine,
            )?;
            row.throughput_rps = sv.goodput_rps;
            row.goodput_per_s = sv.goodput_per_s;
            row.violation = sv.violation;
            row.drop = sv.drop;
            row.fragment = p.fragment_pct;
            row.gpus_used = p.gpus_used;
            row.used_pct = p.used_pct;
            row.decision_ms = p.decision_ms;
        }
        Err(InssBenchError::Run(m)) => row.note = Some(m),
        Err(e) => return Err(e),
    }
    Ok(row)
}

/// One planner on one cluster at its SLO-preserved maximum load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThroughputRow {
    /// GPUs.
    pub gpus: usize,
    /// Planner.
    pub planner: &'static str,
    /// The largest load factor (× every base rate) served with at most 1 %
    /// of requests late, dropped or unserved.
    pub load_factor: f64,
    /// Requests served within their SLO per second at that load.
    pub throughput_rps: f64,
    /// Late over arrived.
    pub violation: f64,
    /// Dropped or unserved over arrived.
    pub drop: f64,
    /// Fragments, percent of a GPU (InSS §2.4).
    pub fragment: u32,
    /// GPUs in use.
    pub gpus_used: usize,
    /// Percent of the GPUs in use held by partitions, summed.
    pub used_pct: u32,
    /// Wall ms of one planning call at that load (on the machine that ran it).
    pub decision_ms: f64,
    /// Requests served within their SLO in each second of the run at that
    /// load (InSS Fig. 11: throughput over time); empty when none ran.
    pub goodput_per_s: Vec<u64>,
    /// Why no load passed, if none did.
    pub note: Option<String>,
}

/// The instances of a `gpus`-GPU cluster: the setup's ten per group of
/// [`GROUP_GPUS`], renamed `name@g` beyond the first group, with their
/// base rates.
pub fn cluster_instances(s: &InssSetup, gpus: usize) -> (Vec<Instance>, Vec<f64>) {
    let groups = gpus.div_ceil(GROUP_GPUS).max(1);
    let mut inst = Vec::new();
    let mut base = Vec::new();
    // Interleaved so that instance i belongs to group i % groups.
    for (i, x) in s.instances.iter().enumerate() {
        for g in 0..groups {
            let mut y = x.clone();
            if g > 0 {
                y.name = format!("{}@{g}", x.name);
            }
            inst.push(y);
            base.push(s.base_rps[i]);
        }
    }
    (inst, base)
}

/// A ceiling on the load factor any planner can serve: the fluid
/// relaxation of the placement problem on the serving truth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadBound {
    /// The latency rule a batch must meet: `"L <= SLO"` (necessary for any
    /// request of the batch to be on time), `"2L <= SLO"` (the rule the
    /// baselines plan with: a request may wait one batch, then run in the
    /// next), or `"2L <= SLO, bursts"`: that, with a share's rate the most
    /// whose Poisson arrivals its back-to-back batches cover under
    /// `sluice_planner`'s burst rule at [`BOUND_BURST_OVERFLOW`] (not a
    /// hard ceiling: the rule is a planning rule, not a law of queueing).
    pub rule: &'static str,
    /// The load factor (× every base rate) no planner can exceed.
    pub load_factor: f64,
    /// The goodput at that load on [`GROUP_GPUS`] GPUs, requests/s.
    pub throughput_rps: f64,
    /// Per instance: name, the most efficient (share %, batch) under the
    /// rule, and the GPU percent it needs per 1000 requests/s there.
    pub best: Vec<(String, u32, u32, f64)>,
}

/// The overflow share of the `"2L <= SLO, bursts"` ceiling: the 1 %
/// target.
pub const BOUND_BURST_OVERFLOW: f64 = 0.01;

/// The rules [`load_bound`] computes a ceiling under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundRule {
    /// `L ≤ SLO`.
    Within,
    /// `2L ≤ SLO`.
    Twice,
    /// `2L ≤ SLO`, each share serving what its batches cover of Poisson
    /// arrivals ([`BOUND_BURST_OVERFLOW`]).
    TwiceBursts,
}

/// [`LoadBound`] under `rule` (`L ≤ SLO`, `2L ≤ SLO`, or `2L ≤ SLO` with
/// Poisson bursts covered): every
/// instance runs at the share and batch that serve a request with the
/// fewest GPU-percent-seconds, and the GPUs are filled exactly. This
/// relaxes every integrality a real plan has (whole-percent partitions,
/// at most [`GROUP_GPUS`] GPUs per group, memory, Poisson queueing), so no
/// planner serving within the rule can beat it. It assumes a batch never
/// runs faster than a smaller one on the same SMs (checked on the GPU
/// model's points as they are read: the scan of a share stops at the first
/// batch over the SLO).
pub fn load_bound(s: &InssSetup, rule: BoundRule) -> LoadBound {
    load_bound_of(&s.truth, &s.instances, &s.base_rps, rule)
}

/// [`load_bound`] on any latency source: `instances` with their base rates
/// (requests/s) on one group of [`GROUP_GPUS`] GPUs of `exec`.
pub fn load_bound_of(
    exec: &(dyn ExecModel + Sync),
    instances: &[Instance],
    base_rps: &[f64],
    rule: BoundRule,
) -> LoadBound {
    let c = exec.gpu_sms();
    let slo_factor = if rule == BoundRule::Within { 1.0 } else { 2.0 };
    let burst = sluice_planner::Burst::Poisson(BOUND_BURST_OVERFLOW);
    // Distinct models first (the doubled instances share their model's
    // points), in two threads: on the GPU model a point is a simulation.
    let models: Vec<(usize, f64)> = {
        let mut v: Vec<(usize, f64)> = instances.iter().map(|i| (i.model, i.slo_ms)).collect();
        v.sort_by_key(|a| a.0);
        v.dedup_by(|a, b| a.0 == b.0);
        v
    };
    let best_of = |m: usize, slo: f64| -> (u32, u32, f64) {
        let mut best = (0, 0, f64::INFINITY);
        for pct in 1..=100u32 {
            let sms = sms_of_pct(pct, c);
            if sms == 0 {
                continue;
            }
            for b in 1..=MAX_SERVED_BATCH {
                let t = exec.exec_ms(m, b, sms, &[]);
                if slo_factor * t > slo {
                    break;
                }
                // GPU percent per 1000 requests/s: a share of `pct` serves
                // b / t requests per ms back to back, or under the burst
                // rule what covers its Poisson arrivals.
                let cost = if rule == BoundRule::TwiceBursts {
                    let r = burst.served_rps(b, t, t, slo);
                    if r > 0.0 {
                        f64::from(pct) * 1e3 / r
                    } else {
                        f64::INFINITY
                    }
                } else {
                    f64::from(pct) * t / f64::from(b)
                };
                if cost < best.2 {
                    best = (pct, b, cost);
                }
            }
        }
        best
    };
    let per_model: HashMap<usize, (u32, u32, f64)> = std::thread::scope(|sc| {
        let half = models.len().div_ceil(2);
        let hs: Vec<_> = models
            .chunks(half.max(1))
            .map(|ch| {
                sc.spawn(move || {
                    ch.iter()
                        .map(|&(m, slo)| (m, best_of(m, slo)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().expect("bound thread"))
            .collect()
    });
    let mut need = 0.0;
    let mut best = Vec::new();
    for (i, inst) in instances.iter().enumerate() {
        let (pct, b, cost) = per_model[&inst.model];
        need += base_rps[i] * cost / 1e3;
        best.push((inst.name.clone(), pct, b, cost));
    }
    let load_factor = 100.0 * GROUP_GPUS as f64 / need;
    LoadBound {
        rule: match rule {
            BoundRule::Within => "L <= SLO",
            BoundRule::Twice => "2L <= SLO",
            BoundRule::TwiceBursts => "2L <= SLO, bursts",
        },
        load_factor,
        throughput_rps: load_factor * base_rps.iter().sum::<f64>(),
        best,
    }
}

/// The SLO-preserved maximum load of `kind` on `gpus` GPUs.
pub fn max_load(
    s: &InssSetup,
    agents: Option<&Agents>,
    kind: PlannerKind,
    gpus: usize,
    opts: &InssBenchOptions,
) -> Result<ThroughputRow, InssBenchError> {
    let (inst, base) = cluster_instances(s, gpus);
    let try_at = |f: f64| -> Result<Option<(Served, Plan)>, InssBenchError> {
        let rates: Vec<f64> = base.iter().map(|r| r * f).collect();
        let inputs = s.plan_inputs(opts.gpulet_margin);
        let p = match plan(kind, &inputs, agents, &inst, &rates, gpus, opts.seed) {
            Ok(p) => p,
            Err(InssBenchError::Run(m)) if kind.is_gpulet() => {
                // gpulet refuses loads it cannot place: not served.
                let _ = m;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let served = serve(
            &s.truth,
            &inst,
            &rates,
            &p.placement,
            opts.duration_s,
            opts.seed,
            opts.engine,
        )?;
        Ok((served.total_violation() <= crate::cluster::MAX_VIOLATION_RATE).then_some((served, p)))
    };
    let mut best: Option<(f64, Served, Plan)> = None;
    let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
    let mut f = 1.0;
    for _ in 0..12 {
        match try_at(f)? {
            Some((sv, p)) => {
                lo = f;
                best = Some((f, sv, p));
                if hi.is_finite() {
                    break;
                }
                f *= 2.0;
            }
            None => {
                hi = f;
                if lo > 0.0 {
                    break;
                }
                f /= 2.0;
            }
        }
    }
    if lo > 0.0 && hi.is_finite() {
        for _ in 0..opts.search_steps {
            let mid = 0.5 * (lo + hi);
            match try_at(mid)? {
                Some((sv, p)) => {
                    lo = mid;
                    best = Some((mid, sv, p));
                }
                None => hi = mid,
            }
        }
    }
    Ok(match best {
        Some((f, sv, p)) => ThroughputRow {
            gpus,
            planner: kind.name(),
            load_factor: f,
            throughput_rps: sv.goodput_rps,
            violation: sv.violation,
            drop: sv.drop,
            fragment: p.fragment_pct,
            gpus_used: p.gpus_used,
            used_pct: p.used_pct,
            decision_ms: p.decision_ms,
            goodput_per_s: sv.goodput_per_s,
            note: None,
        },
        None => ThroughputRow {
            gpus,
            planner: kind.name(),
            load_factor: 0.0,
            throughput_rps: 0.0,
            violation: f64::NAN,
            drop: f64::NAN,
            fragment: 0,
            gpus_used: 0,
            used_pct: 0,
            decision_ms: f64::NAN,
            goodput_per_s: Vec::new(),
            note: Some(format!(
                "no load factor down to {f} kept violations within 1 %"
            )),
        },
    })
}

/// One planner at one period over the whole trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InssTraceRun {
    /// Planner.
    pub planner: &'static str,
    /// Re-planning period, s.
    pub period_s: f64,
    /// Requests that arrived.
    pub arrived: u64,
    /// Late, dropped or unserved over arrived.
    pub violation: f64,
    /// Requests within their SLO per second, mean over the trace.
    pub goodput_rps: f64,
    /// Violations over arrivals in each 20 s window (Fig. 11's shape).
    pub window_violation: Vec<f64>,
    /// Plans made, and how many failed (previous placement kept).
    pub plans: usize,
    /// See [`InssTraceRun::plans`].
    pub failed_plans: usize,
    /// Median decision time, ms.
    pub decision_ms_median: f64,
}

/// Width of the reported windows, s.
pub const WINDOW_S: f64 = 20.0;

/// The whole report (`sluice bench inss --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InssReport {
    /// Always true: every latency is the GPU model's.
    pub simulated: bool,
    /// Device profile.
    pub device: String,
    /// The SLO rule, in words.
    pub slo_rule: String,
    /// Instances: name, model, SLO (ms), the paper's SLO (ms), base rate.
    pub instances: Vec<(String, String, f64, f64, f64)>,
    /// The LWR fit the latency model uses.
    pub latency_fit: String,
    /// The latency model against the GPU model (Tables 3–4).
    pub model_error: Vec<crate::inss::model::ValidationRow>,
    /// Its largest error, percent.
    pub model_max_error_pct: f64,
    /// The agents' training record (Fig. 8–9), from their checkpoint.
    pub training: Vec<sluice_inss::ts::EpisodeRecord>,
    /// Each planner's SLO-preserved maximum load (Fig. 10, 12, 15–19).
    pub throughput: Vec<ThroughputRow>,
    /// Each planner at one common load (`fixed_load` × base rates).
    pub fixed_load: Vec<ThroughputRow>,
    /// Ceilings on any planner's load factor ([`load_bound`]).
    pub bounds: Vec<LoadBound>,
    /// InSS's greedy score on 5 episodes of its training environment
    /// (seed [`EVAL_SEED`], the score `train inss --eval-every` keeps
    /// agents by), when agents are given.
    pub env_score: Option<sluice_inss::ts::EvalScore>,
    /// GSLICE's and iGniter's decisions scored the same way (re-decided
    /// every step from the step's rates), for scale.
    pub baseline_env_scores: Vec<(String, sluice_inss::ts::EvalScore)>,
    /// The bursty-trace re-planning experiment (`--trace`), with its rules.
    pub trace: Vec<InssTraceRun>,
    /// See [`InssReport::trace`].
    pub trace_rules: Option<String>,
    /// GPU-model points measured for serving.
    pub truth_points: usize,
    /// Wall seconds.
    pub wall_s: f64,
}

/// Runs the experiments: the model validation always, the training record
/// when agents are given, the throughput search for `opts.planners` on
/// each of `opts.gpus` (InSS planners are skipped, with a note, without
/// agents).
pub fn run(
    s: &InssSetup,
    agents: Option<&Agents>,
    training: &[sluice_inss::ts::EpisodeRecord],
    opts: &InssBenchOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<InssReport, InssBenchError> {
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    let mut fixed = Vec::new();
    let jobs: Vec<(usize, PlannerKind)> = opts
        .gpus
        .iter()
        .flat_map(|&g| opts.planners.iter().map(move |&p| (g, p)))
        .collect();
    progress(0, jobs.len());
    for (k, &(g, p)) in jobs.iter().enumerate() {
        let needs_agents = matches!(
            p,
            PlannerKind::Inss | PlannerKind::InssNi | PlannerKind::InssSized
        );
        let have = match (p, agents) {
            (PlannerKind::Inss | PlannerKind::InssSized, Some(_)) => true,
            (PlannerKind::InssNi, Some(a)) => a.inss_ni.is_some(),
            _ => !needs_agents,
        };
        if have {
            fixed.push(at_load(s, agents, p, g, opts.fixed_load, opts)?);
        }
        if !have {
            rows.push(ThroughputRow {
                gpus: g,
                planner: p.name(),
                load_factor: 0.0,
                throughput_rps: 0.0,
                violation: f64::NAN,
                drop: f64::NAN,
                fragment: 0,
                gpus_used: 0,
                used_pct: 0,
                decision_ms: f64::NAN,
                goodput_per_s: Vec::new(),
                note: Some(format!(
                    "not run: no agents (sluice train inss{} --out DIR, then --agents{} DIR)",
                    if p == PlannerKind::InssNi {
                        " --no-interference"
                    } else {
                        ""
                    },
                    if p == PlannerKind::InssNi { "-ni" } else { "" }
                )),
            });
        } else {
            rows.push(max_load(s, agents, p, g, opts)?);
        }
        progress(k + 1, jobs.len());
    }
    let bounds = if opts.bounds {
        vec![
            load_bound(s, BoundRule::Within),
            load_bound(s, BoundRule::Twice),
            load_bound(s, BoundRule::TwiceBursts),
        ]
    } else {
        Vec::new()
    };
    let r = &s.model_report;
    Ok(InssReport {
        simulated: true,
        device: s.device.clone(),
        slo_rule: "SLO = 2 x L(32, 100 %) of the model on the device profile (the gpulet experiments' rule); paper_slo_ms is InSS §6.1's figure on an A100, for reference".into(),
        instances: s
            .instances
            .iter()
            .enumerate()
            .map(|(i, inst)| {
                (
                    inst.name.clone(),
                    s.truth.model_name(inst.model).to_owned(),
                    inst.slo_ms,
                    s.paper_slo_ms[i],
                    s.base_rps[i],
                )
            })
            .collect(),
        latency_fit: r.chosen.clone(),
        model_error: r.rows.clone(),
        model_max_error_pct: r.max_error_pct,
        training: training.to_vec(),
        throughput: rows,
        fixed_load: fixed,
        bounds,
        env_score: None,
        baseline_env_scores: Vec::new(),
        trace: Vec::new(),
        trace_rules: None,
        truth_points: s.truth.measured(),
        wall_s: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU of 108 SMs where a batch of `b` of model `m` takes
    /// `1 + (m + 1)·b·108/SMs` ms: a fixed cost per batch plus work spread
    /// over the SMs.
    struct Lin;

    impl ExecModel for Lin {
        fn gpu_sms(&self) -> u32 {
            108
        }
        fn gpu_mem_mb(&self) -> f64 {
            40_960.0
        }
        fn model_count(&self) -> usize {
            3
        }
        fn model_name(&self, model: usize) -> &str {
            ["a", "b", "c"][model]
        }
        fn exec_ms(&self, model: usize, batch: u32, sms: u32, _: &[CoRunner]) -> f64 {
            1.0 + (model as f64 + 1.0) * f64::from(batch) * 108.0 / f64::from(sms)
        }
        fn mem_mb(&self, _: usize, _: u32) -> f64 {
            100.0
        }
        fn util(&self, _: usize, _: u32, _: u32) -> (f64, f64) {
            (0.0, 0.0)
        }
    }

    /// The training environment's queueing (`sluice_inss::env`: a batch
    /// of exactly `b` once `b` are queued, Eq. 3 drops on arrival) against
    /// the serving engine (the daemon's cluster backend: its adaptive batch
    /// of listed sizes, a backlog batch, deadline drops) on one decision:
    /// three instances on one GPU, each at half and at 1.5 times what its
    /// partition serves at its batch. Below capacity both serve everything
    /// in time (goodput within 2 % of each other, violations under 1 %);
    /// above it both serve about the partition's capacity (within 15 %: the
    /// engine may batch larger than the decision's batch, the environment
    /// never does) and lose the rest.
    #[test]
    fn the_training_environment_agrees_with_the_serving_engine() {
        use sluice_inss::env::{Env, EnvConfig};
        use sluice_inss::workload::{Decision, Slot};
        let lin = Lin;
        let batch = 4;
        let slots = [(0, 30), (1, 30), (2, 40)];
        let capacity: Vec<f64> = slots
            .iter()
            .map(|&(m, pct)| {
                f64::from(batch) * 1e3 / lin.exec_ms(m, batch, sms_of_pct(pct, 108), &[])
            })
            .collect();
        let d = Decision {
            slots: slots
                .iter()
                .map(|&(_, pct)| Some(Slot { gpu: 0, pct, batch }))
                .collect(),
        };
        let steps = 40;
        for load in [0.5, 1.5] {
            let rates: Vec<f64> = capacity.iter().map(|c| c * load).collect();
            let instances: Vec<Instance> = slots
                .iter()
                .zip(&rates)
                .map(|(&(m, _), &r)| Instance {
                    name: format!("i{m}"),
                    model: m,
                    slo_ms: 2.0 * lin.exec_ms(m, 32, 108, &[]),
                    max_rate_rps: r,
                })
                .collect();
            let cfg = EnvConfig {
                gpus: 1,
                steps,
                rate_low: 1.0,
                rate_high: 1.0,
                ..EnvConfig::default()
            };
            let mut env = Env::new(cfg, instances.clone(), 7);
            env.reset_with_rates(&rates);
            let (mut arrived, mut good, mut lost) = (0u64, 0u64, 0u64);
            for _ in 0..steps {
                for o in env.step(&d, &lin) {
                    arrived += o.arrived;
                    good += o.served - o.late;
                    lost += o.late + o.dropped;
                }
            }
            let duration = steps as f64 * cfg.step_s;
            let env_goodput = good as f64 / duration;
            let env_violation = lost as f64 / arrived as f64;
            let placement = d.to_placement(&instances, &rates, 1);
            let served = serve(
                &lin,
                &instances,
                &rates,
                &placement,
                duration,
                7,
                Engine::Daemon,
            )
            .unwrap();
            let offered: f64 = rates.iter().sum();
            let cap: f64 = capacity.iter().sum();
            let gap = (served.goodput_rps - env_goodput).abs() / env_goodput;
            println!(
                "load {load}: offered {offered:.0} rps, capacity {cap:.0}; goodput env {env_goodput:.0} engine {:.0} ({:.1} % apart); violations env {:.2} % engine {:.2} %",
                served.goodput_rps,
                100.0 * gap,
                100.0 * env_violation,
                100.0 * served.total_violation()
            );
            if load < 1.0 {
                assert!(gap < 0.02, "below capacity: {gap}");
                assert!(env_violation < 0.01 && served.total_violation() < 0.01);
            } else {
                assert!(gap < 0.15, "above capacity: {gap}");
                for g in [env_goodput, served.goodput_rps] {
                    assert!(
                        g > 0.8 * cap && g < 1.2 * cap,
                        "goodput {g} against capacity {cap}"
                    );
                }
                let lost_share = 1.0 - cap / offered;
                for v in [env_violation, served.total_violation()] {
                    assert!(
                        (v - lost_share).abs() < 0.15,
                        "violations {v} against {lost_share}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_ceiling_is_the_cheapest_feasible_configuration_and_covers_the_base_plan() {
        // Ten instances of three models, SLOs 2·L(32, 100 %), base rates
        // as `setup` sets them: capacity on 40 % under 2L ≤ SLO.
        let lin = Lin;
        let instances: Vec<Instance> = (0..10)
            .map(|i| {
                let m = i % 3;
                Instance {
                    name: format!("i{i}"),
                    model: m,
                    slo_ms: 2.0 * lin.exec_ms(m, 32, 108, &[]),
                    max_rate_rps: 1.0,
                }
            })
            .collect();
        let base: Vec<f64> = instances
            .iter()
            .map(|i| capacity_rps(&lin, i.model, BASE_SHARE_PCT, i.slo_ms))
            .collect();
        let strict = load_bound_of(&lin, &instances, &base, BoundRule::Twice);
        let loose = load_bound_of(&lin, &instances, &base, BoundRule::Within);
        let bursts = load_bound_of(&lin, &instances, &base, BoundRule::TwiceBursts);
        // Covering Poisson bursts costs capacity: below the plain 2L rule.
        assert!(bursts.load_factor < strict.load_factor, "{bursts:?}");
        assert!(bursts.load_factor > 0.0);
        assert_eq!(bursts.rule, "2L <= SLO, bursts");
        // Every instance on 40 % is one fluid plan under 2L ≤ SLO that
        // fills the four GPUs at load 1, so the ceiling is at least 1; the
        // looser rule admits more configurations.
        assert!(strict.load_factor >= 1.0 - 1e-12, "{strict:?}");
        assert!(loose.load_factor >= strict.load_factor);
        assert_eq!(strict.rule, "2L <= SLO");
        for (b, f) in [(&strict, 2.0), (&loose, 1.0)] {
            let mut need = 0.0;
            for (k, (name, pct, batch, cost)) in b.best.iter().enumerate() {
                let inst = &instances[k];
                assert_eq!(name, &inst.name);
                let sms = sms_of_pct(*pct, 108);
                let t = lin.exec_ms(inst.model, *batch, sms, &[]);
                assert!(f * t <= inst.slo_ms, "{name}: {pct} % b={batch}");
                assert!((cost - f64::from(*pct) * t / f64::from(*batch)).abs() < 1e-9);
                // No feasible configuration serves a request cheaper.
                for p in 1..=100 {
                    let s = sms_of_pct(p, 108);
                    for n in 1..=MAX_SERVED_BATCH {
                        let t = lin.exec_ms(inst.model, n, s.max(1), &[]);
                        if s > 0 && f * t <= inst.slo_ms {
                            assert!(f64::from(p) * t / f64::from(n) >= cost - 1e-9);
                        }
                    }
                }
                need += base[k] * cost / 1e3;
            }
            assert!((b.load_factor - 400.0 / need).abs() < 1e-9);
            let total: f64 = base.iter().sum();
            assert!((b.throughput_rps - b.load_factor * total).abs() < 1e-6);
        }
    }
}
