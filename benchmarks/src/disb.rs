//! `sluice bench disb`: REEF's DNN Inference Serving Benchmark (DISB, REEF
//! TOCS 2025 §6.2, Table 2) on the simulated GPU ([`sluice_gpu`]), for every
//! scheduling policy in one run.
//!
//! # Workloads (REEF Table 2)
//!
//! | | A | B | C | D | E |
//! |---|---|---|---|---|---|
//! | RT clients | 1 × vgg19 | 1 × vgg19 | 1 × vgg19 | 5, one per model | 5, one per model |
//! | RT rate, arrivals | 50 %, uniform | 100 %, uniform | 50 %, uniform | 10 % each, uniform | 10 % each, Poisson |
//! | BE clients (closed loop) | 1 × resnet152 | 1 × resnet152 | 5, one per model | 5, one per model | 5, one per model |
//!
//! "One per model" is resnet152, vgg19, yolov3, bert_base, gpt2. Choices
//! where the table leaves room:
//!
//! - **Rate.** "x % of the maximum throughput" is x % of the RT model's
//!   standalone maximum throughput on the chosen device, `1 / standalone
//!   time` (one request at a time, the way a closed-loop client alone gets
//!   it). Each RT client of D and E gets 10 % of its own model's maximum.
//!   Table 2's "100 %" for B (uniform) is taken as uniform too.
//! - **Phase.** A uniform client's first request comes at a random offset
//!   in `[0, period)` drawn from `--seed`, so the five RT clients of D do
//!   not all arrive at t = 0 together. Poisson clients (E) draw their gaps
//!   from `--seed` too. The same seed gives every policy the same arrivals.
//! - **Best-effort clients** all start at t = 0 and issue their next request
//!   when the previous one finishes, until the run's duration.
//! - **Duration.** 2 s of virtual time per run on `mi50`, 1 s on `gv100`
//!   and `h100` (their model is slower to simulate), unless `--duration-ms`
//!   says otherwise. Every run of one invocation sees the same arrivals.
//!
//! # Trace mode
//!
//! `--trace FILE.csv` reads `client,priority,model,arrival_ms` (a header
//! line, then one request per line; `priority` is `rt` or `be`; `model` a
//! registry name; blank lines and lines starting with `#` are skipped). A
//! client's rows must agree on priority and model. A `be` client may give
//! `closed` as its arrival: it then runs closed loop. If the file names no
//! best-effort client, the five closed-loop BE clients of workloads C–E are
//! added, as REEF does with its Apollo trace. The run lasts until the last
//! arrival plus 1 ms unless `--duration-ms` says otherwise.
//!
//! # Metrics (REEF §6.2)
//!
//! - **Standalone time** of each model: measured here, on the chosen device
//!   profile, by running one request alone on a fresh [`GpuSim`] (one
//!   stream, default device-queue capacity). It is not the manifest total:
//!   on the MI50 profile it includes the host push and the command
//!   processor's per-kernel fetch; on GV100/H100 more blocks fit at once
//!   (see `docs/gpu-model.md`). The model is deterministic, so REEF's "mean
//!   of 1000 runs" is the single run. Both numbers are in the report.
//! - **RT normalised latency**: each finished RT request's end-to-end
//!   latency (arrival to last kernel finished) divided by its model's
//!   standalone time; mean, p50, p99, p99.9, max.
//! - **Normalised throughput** of a client: its requests per second divided
//!   by its model's standalone maximum (`1 / standalone time`). An
//!   open-loop client (uniform, Poisson, trace) counts every request that
//!   finished; a closed-loop client counts those that finished within the
//!   duration. **Overall** throughput is the sum over clients: 1.0 means the
//!   GPU did as much work as running the models one at a time back to back.
//! - **Preemption latency** (µs, p50 and p99), from the policy's
//!   [`sluice_sched::PolicyStats::preempt_latency_ns`]; `null` when the
//!   policy did not preempt.
//! - **Decision cost** (ns, p50 and p99): wall-clock time of each policy
//!   callback on this machine, less the GPU model's own dispatch work
//!   (host pushes, fetches, block placement) that the policy's launch and
//!   preemption calls ran inside it
//!   ([`sluice_sched::workload::RunResult::decision_ns`]); and the whole
//!   callbacks, that work included (`callback_ns`).
//!
//! Every policy asked for runs on every workload. Runs go in
//! parallel over `jobs` threads, longest first. They are in virtual time,
//! so only the decision cost and the wall time depend on the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use shm_proto::Priority;
use sluice_rng::{Draws, Stream};

use sluice_gpu::{DeviceProfile, Ns, OpError, ProfileError};
use sluice_gpusim::GpuSim;
use sluice_model::{Model, ModelRegistry};
use sluice_sched::workload::{self, Arrival, ClientSpec, RunResult, Workload};
use sluice_sched::{Policy, PolicyKind, make_policy};

use crate::ModelError;
use sluice_stats::quantile;

use crate::plot::{self, Bar, PlotError, Series};
use crate::text_table;

/// Virtual run time per workload and policy on the `mi50` profile when
/// `--duration-ms` is not given. Chosen so that `--workload all` with every
/// policy stays well under two minutes of wall time on a 2-core machine
/// (about 25 s; see `docs/performance.md`).
pub const DEFAULT_DURATION_MS: u64 = 2_000;

/// The same for the profiles with more CUs and hardware queues (`gv100`,
/// `h100`), whose model runs several times more events per virtual second
/// (about 55 s for `--workload all`).
pub const DEFAULT_DURATION_MS_LARGE: u64 = 1_000;

/// The default virtual run time on `device`, ms.
pub fn default_duration_ms(device: &str) -> u64 {
    if device == "mi50" {
        DEFAULT_DURATION_MS
    } else {
        DEFAULT_DURATION_MS_LARGE
    }
}

/// The five models of REEF's DISB, in the order the paper lists them.
pub const DISB_MODELS: [&str; 5] = ["resnet152", "vgg19", "yolov3", "bert_base", "gpt2"];

/// One of REEF Table 2's workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DisbWorkload {
    /// Low load: 1 RT vgg19 at 50 % (uniform), 1 BE resnet152.
    A,
    /// High RT load: 1 RT vgg19 at 100 % (uniform), 1 BE resnet152.
    B,
    /// High BE load: 1 RT vgg19 at 50 % (uniform), 5 BE (all models).
    C,
    /// Multi-RT: 5 RT (all models) at 10 % each (uniform), 5 BE.
    D,
    /// Random: 5 RT (all models) at 10 % each (Poisson), 5 BE.
    E,
}

impl DisbWorkload {
    /// All five, in order.
    pub const ALL: [Self; 5] = [Self::A, Self::B, Self::C, Self::D, Self::E];

    /// Its letter.
    pub const fn letter(self) -> &'static str {
        match self {
            Self::A => "A",
            Self::B => "B",
            Self::C => "C",
            Self::D => "D",
            Self::E => "E",
        }
    }

    /// Parses a letter (either case).
    pub fn from_letter(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|w| w.letter().eq_ignore_ascii_case(s.trim()))
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct DisbOptions {
    /// Table 2 workloads to run.
    pub workloads: Vec<DisbWorkload>,
    /// A trace to run as well (workload name `trace`).
    pub trace: Option<PathBuf>,
    /// Policies to run, in report order. The default is
    /// [`DEFAULT_POLICIES`].
    pub policies: Vec<PolicyKind>,
    /// Device profile name (`mi50`, `gv100`, `h100`) of the GPU model, or
    /// `cuda` for CUDA device 0 (see [`run_on_device`]).
    pub device: String,
    /// Virtual time of each run, ms; `None`: [`default_duration_ms`] (trace:
    /// until the last arrival).
    pub duration_ms: Option<u64>,
    /// Seed of the arrival phases and Poisson gaps.
    pub seed: u64,
    /// Worker threads (at least 1).
    pub jobs: usize,
    /// Manifests to use instead of the built-in ones of the same name (a
    /// folder of `*.json`, e.g. written by `sluice profile --device cuda`).
    pub models_dir: Option<PathBuf>,
}

/// The policies DISB runs by default: REEF's and Paella's, the first
/// eight of [`PolicyKind::ALL`]. `split`,
/// `prema` and `rt-a` (SPLIT's comparison) are left out so the DISB
/// figures stay as published; name them with `policies` to run them.
pub const DEFAULT_POLICIES: [PolicyKind; 8] = [
    PolicyKind::RtOnly,
    PolicyKind::Seq,
    PolicyKind::Streams,
    PolicyKind::WaitPreempt,
    PolicyKind::Reef,
    PolicyKind::Paella,
    PolicyKind::PaellaSjf,
    PolicyKind::PaellaRr,
];

impl Default for DisbOptions {
    fn default() -> Self {
        Self {
            workloads: DisbWorkload::ALL.to_vec(),
            trace: None,
            policies: DEFAULT_POLICIES.to_vec(),
            device: "mi50".into(),
            duration_ms: None,
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            models_dir: None,
        }
    }
}

/// Why a trace file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("cannot read trace {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The first line is not the expected header.
    #[error(
        "{file} line 1: header is `{found}`; expected `client,priority,model,arrival_ms` \
         (fix the first line)"
    )]
    Header {
        /// The file.
        file: String,
        /// What the first line says.
        found: String,
    },
    /// A line that is not CSV (an unclosed quote, text that is not UTF-8).
    #[error("{file} line {line}: not CSV ({why}); write `client,priority,model,arrival_ms` rows")]
    Csv {
        /// The file.
        file: String,
        /// 1-based line number.
        line: u64,
        /// What the CSV reader said.
        why: String,
    },
    /// A line has the wrong number of columns.
    #[error(
        "{file} line {line}: {found} column(s) in `{text}`; expected 4: \
         client,priority,model,arrival_ms"
    )]
    Columns {
        /// The file.
        file: String,
        /// 1-based line number.
        line: u64,
        /// How many there were.
        found: usize,
        /// The line.
        text: String,
    },
    /// A value is not acceptable.
    #[error("{file} line {line}, column `{column}`: `{value}` {why}")]
    Value {
        /// The file.
        file: String,
        /// 1-based line number.
        line: u64,
        /// Column name.
        column: &'static str,
        /// The value as written.
        value: String,
        /// What is wrong and what would be right.
        why: String,
    },
    /// The file has no real-time request.
    #[error("{file}: no real-time (`rt`) request; a trace needs at least one")]
    NoRealTime {
        /// The file.
        file: String,
    },
}

/// Why a DISB run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum DisbError {
    /// Unknown device profile.
    #[error("bad device profile")]
    Profile(#[from] ProfileError),
    /// A model the workload needs is not in the registry, or cannot run
    /// alone on the device profile.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The trace was refused.
    #[error("bad trace")]
    Trace(#[from] TraceError),
    /// Nothing to run.
    #[error("nothing to run: no workload selected and no --trace given")]
    NoWorkload,
    /// The device could not be opened.
    #[error("{0}")]
    Device(String),
    /// `--models DIR` could not be loaded.
    #[error("loading the manifests in {} (--models)", dir.display())]
    Models {
        /// The folder.
        dir: PathBuf,
        /// Why.
        #[source]
        source: Box<sluice_model::ModelError>,
    },
    /// A model's standalone run on the device did not finish.
    #[error(
        "measuring the standalone time of `{model}` on {device}: the request did not finish: \
         {why}"
    )]
    DeviceStandalone {
        /// The model.
        model: String,
        /// The device.
        device: String,
        /// The device's error, or why none is known.
        why: String,
    },
    /// A run on the daemon's backend failed or could not start.
    #[error("the run of policy `{policy}` on workload {workload}: {message}")]
    Run {
        /// Policy.
        policy: String,
        /// Workload.
        workload: String,
        /// What went wrong.
        message: String,
    },
    /// The ONNX models of `--models DIR` cannot be served.
    #[error("the ONNX models in {} (--models): {why}", dir.display())]
    Onnx {
        /// The folder.
        dir: PathBuf,
        /// Why, and the fix.
        why: String,
    },
    /// A worker thread panicked (a policy bug).
    #[error("the run of policy `{policy}` on workload {workload} panicked: {message}")]
    Panicked {
        /// Policy.
        policy: String,
        /// Workload.
        workload: String,
        /// The panic message.
        message: String,
    },
}

/// A model's standalone figures on the device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standalone {
    /// Model name.
    pub model: String,
    /// One request alone on the simulated device, ms (the normaliser).
    pub time_ms: f64,
    /// The manifest's total kernel time, ms (for comparison only).
    pub manifest_ms: f64,
    /// Standalone maximum throughput, requests/s (`1000 / time_ms`).
    pub max_rps: f64,
    /// Where the model's kernels come from: the manifest's `provenance`
    /// (measured: the REEF MI50 artifact; synthetic: `scripts/gen-models.py`).
    pub provenance: String,
}

/// A client of a workload, as the report describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Label (`rt0`, `be3`, or the trace's client name).
    pub client: String,
    /// `rt` or `be`.
    pub priority: String,
    /// Model name.
    pub model: String,
    /// `uniform 50% (135.1/s)`, `poisson …`, `closed loop`, `trace (N)`.
    pub arrival: String,
}

/// A workload as run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseInfo {
    /// `A`…`E` or `trace`.
    pub workload: String,
    /// Its clients.
    pub clients: Vec<ClientInfo>,
    /// Virtual time of arrivals, ms.
    pub duration_ms: f64,
    /// Anything added or assumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// RT end-to-end latency over standalone time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NormLatency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
    /// Finished RT requests (0: the figures above are 0 and mean nothing).
    pub count: u64,
}

/// Preemption latency, µs; `null` percentiles when there was none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PreemptUs {
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Preemptions.
    pub count: u64,
}

/// Wall-clock cost of the policy's callbacks, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DecisionNs {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Mean.
    pub mean: f64,
    /// Callbacks.
    pub count: u64,
}

/// One client's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientResult {
    /// Label, as in [`ClientInfo::client`].
    pub client: String,
    /// `rt` or `be`.
    pub priority: String,
    /// Model name.
    pub model: String,
    /// Requests counted (see the module docs).
    pub completed: u64,
    /// Requests/s over standalone maximum.
    pub throughput_norm: f64,
}

/// One policy on one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    /// `A`…`E` or `trace`.
    pub workload: String,
    /// Policy name.
    pub policy: String,
    /// RT latency over standalone time.
    pub rt_norm_latency: NormLatency,
    /// Sum of every client's normalised throughput.
    pub throughput_norm: f64,
    /// Preemption latency.
    pub preempt_latency_us: PreemptUs,
    /// Scheduler decision cost: each callback's wall time less the GPU
    /// model's dispatch work it caused.
    pub decision_ns: DecisionNs,
    /// Whole policy callbacks, the model's dispatch work included.
    pub callback_ns: DecisionNs,
    /// Per client.
    pub clients: Vec<ClientResult>,
    /// Sum of the BE clients' normalised throughput.
    pub be_throughput_norm: f64,
    /// Fraction of CU-time busy.
    pub utilisation: f64,
    /// Requests not finished when the run stopped.
    pub unfinished: u64,
    /// Kernels relaunched by restores.
    pub relaunched_kernels: u64,
    /// Wall time of the run, ms.
    pub wall_ms: f64,
    /// Every RT normalised latency, sorted (for the plot; not in the JSON).
    #[serde(skip)]
    pub rt_sorted: Vec<f64>,
}

/// Everything a DISB run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisbReport {
    /// Device profile name, or the device's.
    pub device: String,
    /// Whether the runs went in real time on a device (`--device cuda`),
    /// not in the GPU model's virtual time; decision costs and
    /// utilisation are then not measured (0).
    #[serde(default)]
    pub real_time: bool,
    /// One entry per (workload, policy), workloads outer.
    pub results: Vec<CaseResult>,
    /// The workloads as run.
    pub workloads: Vec<CaseInfo>,
    /// Standalone figures of the models used.
    pub standalone: Vec<Standalone>,
    /// The seed.
    pub seed: u64,
    /// Worker threads.
    pub jobs: usize,
    /// Wall time of the whole benchmark, s.
    pub wall_s: f64,
}

/// Progress of a run, reported after each (workload, policy) pair.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Pairs finished.
    pub done: usize,
    /// Pairs in all.
    pub total: usize,
    /// `C/reef` of the pair just finished.
    pub label: String,
    /// Wall time since the start, s.
    pub elapsed_s: f64,
}

/// Builds a policy, as [`make_policy`] does.
pub type PolicyFactory = dyn Fn(PolicyKind, &Arc<ModelRegistry>) -> Box<dyn Policy> + Sync;

/// A client with its report label.
#[derive(Debug, Clone)]
struct CaseClient {
    info: ClientInfo,
    spec: ClientSpec,
}

/// A workload ready to run.
#[derive(Debug, Clone)]
struct Case {
    name: String,
    clients: Vec<CaseClient>,
    duration_ns: Ns,
    note: Option<String>,
}

/// Standalone time of `model` on `profile`: one request alone on a fresh
/// model GPU, one stream, default device-queue capacity (batch 1 on the
/// whole device: [`sluice_gpusim::lbp::run_point`]).
pub fn standalone_ns(profile: &DeviceProfile, model: &Model) -> Result<Ns, OpError> {
    sluice_gpusim::lbp::run_point(profile, model, 1, profile.compute_units).map(|(ns, _, _)| ns)
}

/// Per-model standalone time and the reported figures, by model id.
struct Normalisers {
    time_ns: BTreeMap<u32, Ns>,
    report: Vec<Standalone>,
}

impl Normalisers {
    fn measure(
        standalone: &mut dyn FnMut(&Model) -> Result<Ns, DisbError>,
        models: &ModelRegistry,
        ids: impl IntoIterator<Item = u32>,
    ) -> Result<Self, DisbError> {
        let mut time_ns = BTreeMap::new();
        let mut report = Vec::new();
        for id in ids {
            if time_ns.contains_key(&id) {
                continue;
            }
            let Some(m) = models.get(id) else { continue };
            let t = standalone(m)?;
            // A zero-time model (`null`) would divide by zero: 1 ns floor.
            let t = t.max(1);
            time_ns.insert(id, t);
            report.push(Standalone {
                model: m.name().to_owned(),
                time_ms: t as f64 / 1e6,
                manifest_ms: m.total_time_ns as f64 / 1e6,
                max_rps: 1e9 / t as f64,
                provenance: m.manifest.provenance.clone(),
            });
        }
        Ok(Self { time_ns, report })
    }

    fn time(&self, model: u32) -> Ns {
        self.time_ns.get(&model).copied().unwrap_or(1)
    }
}

/// `name`'s id, or its small-scale stand-in's (`vgg19_small`, as
/// `scripts/onnx/make-disb-models.py --small` names the reduced models)
/// where the registry has only that.
fn model_id(models: &ModelRegistry, name: &str) -> Result<u32, DisbError> {
    models
        .lookup(name)
        .or_else(|| models.lookup(&format!("{name}_small")))
        .map(|(id, _)| id)
        .ok_or_else(|| ModelError::Missing(name.to_owned()).into())
}

fn prio_str(p: Priority) -> &'static str {
    match p {
        Priority::RealTime => "rt",
        Priority::BestEffort => "be",
    }
}

/// Workload C's real-time load (REEF Table 2): one VGG-19 request every
/// `standalone time / 0.5`, i.e. 50 % of its standalone maximum rate.
pub const WORKLOAD_C_RT_LOAD: f64 = 0.5;

/// The closed-loop BE clients of workloads C–E, one per DISB model.
fn be_all(models: &ModelRegistry) -> Result<Vec<CaseClient>, DisbError> {
    DISB_MODELS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            Ok(CaseClient {
                info: ClientInfo {
                    client: format!("be{i}"),
                    priority: "be".into(),
                    model: (*name).into(),
                    arrival: "closed loop".into(),
                },
                spec: ClientSpec {
                    priority: Priority::BestEffort,
                    model: model_id(models, name)?,
                    arrival: Arrival::ClosedLoop,
                },
            })
        })
        .collect()
}

/// Builds a Table 2 workload.
fn table2_case(
    w: DisbWorkload,
    models: &ModelRegistry,
    norm: &Normalisers,
    duration_ns: Ns,
    seed: u64,
) -> Result<Case, DisbError> {
    let mut rng = Stream::new(seed ^ (w as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f));
    let mut rt =
        |i: usize, name: &str, frac: f64, poisson: bool| -> Result<CaseClient, DisbError> {
            let id = model_id(models, name)?;
            let rate = frac * 1e9 / norm.time(id) as f64;
            let period_ns = (1e9 / rate).round().max(1.0) as Ns;
            let (arrival, text) = if poisson {
                (
                    Arrival::Poisson {
                        rate_per_s: rate,
                        seed: sluice_rng::splitmix(rng.state() ^ i as u64),
                    },
                    format!("poisson {:.0}% ({rate:.1}/s)", frac * 100.0),
                )
            } else {
                let offset_ns = (rng.unit() * period_ns as f64) as Ns;
                (
                    Arrival::Uniform {
                        period_ns,
                        offset_ns,
                    },
                    format!("uniform {:.0}% ({rate:.1}/s)", frac * 100.0),
                )
            };
            Ok(CaseClient {
                info: ClientInfo {
                    client: format!("rt{i}"),
                    priority: "rt".into(),
                    model: name.into(),
                    arrival: text,
                },
                spec: ClientSpec {
                    priority: Priority::RealTime,
                    model: id,
                    arrival,
                },
            })
        };
    let be_rnet = || -> Result<Vec<CaseClient>, DisbError> {
        Ok(vec![CaseClient {
            info: ClientInfo {
                client: "be0".into(),
                priority: "be".into(),
                model: "resnet152".into(),
                arrival: "closed loop".into(),
            },
            spec: ClientSpec {
                priority: Priority::BestEffort,
                model: model_id(models, "resnet152")?,
                arrival: Arrival::ClosedLoop,
            },
        }])
    };
    let mut clients = match w {
        DisbWorkload::A => vec![rt(0, "vgg19", 0.5, false)?],
        DisbWorkload::B => vec![rt(0, "vgg19", 1.0, false)?],
        DisbWorkload::C => vec![rt(0, "vgg19", WORKLOAD_C_RT_LOAD, false)?],
        DisbWorkload::D | DisbWorkload::E => DISB_MODELS
            .iter()
            .enumerate()
            .map(|(i, m)| rt(i, m, 0.1, w == DisbWorkload::E))
            .collect::<Result<_, _>>()?,
    };
    clients.extend(match w {
        DisbWorkload::A | DisbWorkload::B => be_rnet()?,
        _ => be_all(models)?,
    });
    Ok(Case {
        name: w.letter().into(),
        clients,
        duration_ns,
        note: None,
    })
}

/// One client of a trace file.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceClient {
    /// Its name in the file.
    pub name: String,
    /// `rt` or `be`.
    pub priority: Priority,
    /// Model id.
    pub model: u32,
    /// Sorted arrival times (ns); `None`: closed loop.
    pub arrivals: Option<Vec<Ns>>,
}

/// Parses a trace (`client,priority,model,arrival_ms`); `file` names it in
/// errors. Clients come back in order of first appearance.
pub fn parse_trace(
    file: &str,
    text: &str,
    models: &ModelRegistry,
) -> Result<Vec<TraceClient>, TraceError> {
    let mut records = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes())
        .into_records();
    let not_csv = |e: csv::Error| TraceError::Csv {
        file: file.into(),
        line: e.position().map_or(0, |p| p.line()),
        why: e.to_string(),
    };
    let joined = |r: &csv::StringRecord| r.iter().collect::<Vec<_>>().join(",");
    let header = records.next().transpose().map_err(not_csv)?;
    let cols: Vec<&str> = header.iter().flatten().collect();
    if cols != ["client", "priority", "model", "arrival_ms"] {
        return Err(TraceError::Header {
            file: file.into(),
            found: header.as_ref().map(joined).unwrap_or_default(),
        });
    }
    let mut clients: Vec<TraceClient> = Vec::new();
    let mut first_line: Vec<u64> = Vec::new();
    for record in records {
        let f = record.map_err(not_csv)?;
        let line = f.position().map_or(0, |p| p.line());
        if f.len() != 4 {
            return Err(TraceError::Columns {
                file: file.into(),
                line,
                found: f.len(),
                text: joined(&f),
            });
        }
        let bad = |column: &'static str, value: &str, why: String| TraceError::Value {
            file: file.into(),
            line,
            column,
            value: value.into(),
            why,
        };
        let (name, prio, model, arr) = (&f[0], &f[1], &f[2], &f[3]);
        if name.is_empty() {
            return Err(bad(
                "client",
                name,
                "is empty; give the client a name".into(),
            ));
        }
        let priority = match prio.to_ascii_lowercase().as_str() {
            "rt" => Priority::RealTime,
            "be" => Priority::BestEffort,
            _ => {
                return Err(bad(
                    "priority",
                    prio,
                    "is not a priority; use `rt` or `be`".into(),
                ));
            }
        };
        let Some((model_id, _)) = models.lookup(model) else {
            let known: Vec<&str> = models.iter().map(|(_, m)| m.name()).collect();
            return Err(bad(
                "model",
                model,
                format!("is not a known model; use one of {}", known.join(", ")),
            ));
        };
        let arrival = if arr.eq_ignore_ascii_case("closed") {
            if priority == Priority::RealTime {
                return Err(bad(
                    "arrival_ms",
                    arr,
                    "is only allowed for `be` clients; give a real-time request its arrival time in ms"
                        .into(),
                ));
            }
            None
        } else {
            match arr.parse::<f64>() {
                Ok(ms) if (0.0..1e9).contains(&ms) => Some((ms * 1e6).round() as Ns),
                _ => {
                    return Err(bad(
                        "arrival_ms",
                        arr,
                        "is not an arrival time; give milliseconds from the start, \
                         a number from 0 to 1e9 (e.g. 12.5), or `closed` for a closed-loop be client"
                            .into(),
                    ));
                }
            }
        };
        let idx = match clients.iter().position(|c| c.name == name) {
            Some(idx) => idx,
            None => {
                clients.push(TraceClient {
                    name: name.into(),
                    priority,
                    model: model_id,
                    arrivals: arrival.map(|_| Vec::new()),
                });
                first_line.push(line);
                clients.len() - 1
            }
        };
        let c = &mut clients[idx];
        let first = first_line[idx];
        if c.priority != priority {
            return Err(bad(
                "priority",
                prio,
                format!(
                    "differs from client `{name}`'s priority `{}` on line {first}; \
                     one client has one priority",
                    prio_str(c.priority)
                ),
            ));
        }
        if c.model != model_id {
            let was = models.get(c.model).map_or("?", Model::name);
            return Err(bad(
                "model",
                model,
                format!(
                    "differs from client `{name}`'s model `{was}` on line {first}; \
                     one client runs one model"
                ),
            ));
        }
        match (&mut c.arrivals, arrival) {
            (Some(v), Some(t)) => v.push(t),
            (None, None) => {}
            _ => {
                return Err(bad(
                    "arrival_ms",
                    arr,
                    format!(
                        "mixes `closed` and arrival times for client `{name}` \
                         (first seen on line {first}); use one or the other"
                    ),
                ));
            }
        }
    }
    if !clients.iter().any(|c| c.priority == Priority::RealTime) {
        return Err(TraceError::NoRealTime { file: file.into() });
    }
    for c in &mut clients {
        if let Some(v) = &mut c.arrivals {
            v.sort_unstable();
        }
    }
    Ok(clients)
}

/// Builds the trace workload.
fn trace_case(
    path: &Path,
    models: &ModelRegistry,
    duration_ms: Option<u64>,
) -> Result<Case, DisbError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read {
        path: path.to_owned(),
        source,
    })?;
    let parsed = parse_trace(&path.display().to_string(), &text, models)?;
    let last = parsed
        .iter()
        .filter_map(|c| c.arrivals.as_ref()?.last().copied())
        .max()
        .unwrap_or(0);
    let duration_ns = duration_ms.map_or(last + 1_000_000, |ms| ms * 1_000_000);
    let mut clients: Vec<CaseClient> = parsed
        .into_iter()
        .map(|c| {
            let model = models.get(c.model).map_or("?", Model::name).to_owned();
            let (arrival, text) = match c.arrivals {
                Some(v) => {
                    let n = v.iter().filter(|&&t| t < duration_ns).count();
                    (Arrival::Trace(v), format!("trace ({n} requests)"))
                }
                None => (Arrival::ClosedLoop, "closed loop".into()),
            };
            CaseClient {
                info: ClientInfo {
                    client: c.name,
                    priority: prio_str(c.priority).into(),
                    model,
                    arrival: text,
                },
                spec: ClientSpec {
                    priority: c.priority,
                    model: c.model,
                    arrival,
                },
            }
        })
        .collect();
    let mut note = None;
    if !clients
        .iter()
        .any(|c| c.spec.priority == Priority::BestEffort)
    {
        clients.extend(be_all(models)?);
        note = Some(
            "the trace has no best-effort client: added the 5 closed-loop BE clients \
             of workloads C-E (as REEF's Apollo trace experiment)"
                .into(),
        );
    }
    Ok(Case {
        name: "trace".into(),
        clients,
        duration_ns,
        note,
    })
}

/// Turns a driver result into the report's figures.
fn summarise(
    case: &Case,
    kind: PolicyKind,
    norm: &Normalisers,
    r: &RunResult,
    wall_ms: f64,
) -> CaseResult {
    let secs = case.duration_ns as f64 / 1e9;
    let mut counts = vec![0u64; case.clients.len()];
    let mut rt = Vec::new();
    for d in &r.done {
        let ci = d.task.client as usize;
        let Some(c) = case.clients.get(ci) else {
            continue;
        };
        let closed = c.spec.arrival == Arrival::ClosedLoop;
        if !closed || d.finished <= case.duration_ns {
            counts[ci] += 1;
        }
        if d.task.priority == Priority::RealTime {
            let lat = d.finished.saturating_sub(d.task.arrival) as f64;
            rt.push(lat / norm.time(d.task.model) as f64);
        }
    }
    rt.sort_by(f64::total_cmp);
    let clients: Vec<ClientResult> = case
        .clients
        .iter()
        .zip(&counts)
        .map(|(c, &n)| ClientResult {
            client: c.info.client.clone(),
            priority: c.info.priority.clone(),
            model: c.info.model.clone(),
            completed: n,
            throughput_norm: n as f64 / secs * norm.time(c.spec.model) as f64 / 1e9,
        })
        .collect();
    let mut pre: Vec<f64> = r
        .stats
        .preempt_latency_ns
        .iter()
        .map(|&ns| ns as f64 / 1e3)
        .collect();
    pre.sort_by(f64::total_cmp);
    let stats = |h: &hdrhistogram::Histogram<u64>| {
        if h.is_empty() {
            DecisionNs::default()
        } else {
            DecisionNs {
                p50: h.value_at_quantile(0.5),
                p99: h.value_at_quantile(0.99),
                mean: h.mean(),
                count: h.len(),
            }
        }
    };
    CaseResult {
        workload: case.name.clone(),
        policy: kind.as_str().into(),
        rt_norm_latency: NormLatency {
            mean: if rt.is_empty() {
                0.0
            } else {
                rt.iter().sum::<f64>() / rt.len() as f64
            },
            p50: quantile(&rt, 0.5),
            p99: quantile(&rt, 0.99),
            p999: quantile(&rt, 0.999),
            max: rt.last().copied().unwrap_or(0.0),
            count: rt.len() as u64,
        },
        throughput_norm: clients.iter().map(|c| c.throughput_norm).sum(),
        be_throughput_norm: clients
            .iter()
            .filter(|c| c.priority == "be")
            .map(|c| c.throughput_norm)
            .sum(),
        preempt_latency_us: PreemptUs {
            p50: (!pre.is_empty()).then(|| quantile(&pre, 0.5)),
            p99: (!pre.is_empty()).then(|| quantile(&pre, 0.99)),
            count: pre.len() as u64,
        },
        decision_ns: stats(&r.decision_ns),
        callback_ns: stats(&r.callback_ns),
        clients,
        utilisation: r.utilisation,
        unfinished: r.unfinished,
        relaunched_kernels: r.stats.relaunched_kernels,
        wall_ms,
        rt_sorted: rt,
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Runs DISB with the policies [`make_policy`] builds.
pub fn run(
    opts: &DisbOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<DisbReport, DisbError> {
    run_with(opts, &make_policy, progress)
}

/// Runs DISB with the policies `factory` builds, on the GPU model.
pub fn run_with(
    opts: &DisbOptions,
    factory: &PolicyFactory,
    progress: &mut dyn FnMut(&Progress),
) -> Result<DisbReport, DisbError> {
    let profile = DeviceProfile::builtin(&opts.device)?;
    run_backend(opts, factory, &Backend::Model(profile), progress)
}

/// Runs DISB on a device of its own clock (`sluice_cuda::gpu::CudaGpu`
/// on a GPU, or on the fake driver in tests): one run at a time, each on
/// fresh streams; the models' standalone times are measured on the device
/// (one request alone, `rt-only`). `name` is the device's name for the
/// report, `profile` its figures for the policies. The kernels are the
/// models' manifests run as synthetic kernels (see the CUDA adapter), so
/// this measures scheduling on the hardware, not the models' real layers.
pub fn run_on_device(
    opts: &DisbOptions,
    factory: &PolicyFactory,
    device: Box<dyn sluice_gpu::Clocked + Send>,
    name: &str,
    progress: &mut dyn FnMut(&Progress),
) -> Result<DisbReport, DisbError> {
    let backend = Backend::Device {
        gpu: std::sync::Mutex::new(device),
        name: name.to_owned(),
    };
    run_backend(opts, factory, &backend, progress)
}

/// Makes the daemon's CUDA server ([`sluice_cuda::serve::CudaServer`]:
/// the models' real layers, on a GPU or the fake driver) for one policy.
pub type ServerFactory =
    dyn Fn(PolicyKind) -> Result<sluice_cuda::serve::CudaServer, String> + Send + Sync;

/// Runs DISB through the daemon's own CUDA server, in real time
/// ([`crate::served`]): the models of `models` run their real layers (the
/// ONNX files [`onnx_models`] lowers), each policy on a server `factory`
/// makes, one run at a time; the standalone times are measured through a
/// `seq` server (one request alone; median of 5 after one untimed).
/// `rt-only` is the GPU model's reference and is left out (the server
/// refuses it; `seq` with a lone request is the standalone run). `name` is
/// the device's name for the report.
pub fn run_served(
    opts: &DisbOptions,
    models: ModelRegistry,
    factory: Box<ServerFactory>,
    name: &str,
    progress: &mut dyn FnMut(&Progress),
) -> Result<DisbReport, DisbError> {
    let mut opts = opts.clone();
    opts.policies.retain(|k| *k != PolicyKind::RtOnly);
    let backend = Backend::Served {
        factory,
        name: name.to_owned(),
        models: Arc::new(models),
        server: std::sync::Mutex::new(None),
    };
    run_backend(&opts, &make_policy, &backend, progress)
}

/// The DISB models of `dir` as the CUDA backend serves them
/// (`sluice_service::startup::cuda_models`): each `NAME.onnx` lowered to
/// the kernel library with its own weights, at the small scale when the
/// folder holds `vgg19_small.onnx` (`make-disb-models.py --small`), else
/// the full one. Every DISB model must come from a file of the folder.
pub fn onnx_models(
    dir: &Path,
) -> Result<
    (
        ModelRegistry,
        sluice_cuda::serve::GraphModels,
        sluice_nn::builders::Scale,
    ),
    DisbError,
> {
    use sluice_nn::builders::Scale;
    let scale = if dir.join("vgg19_small.onnx").is_file() {
        Scale::Small
    } else {
        Scale::Full
    };
    let suffix = if scale == Scale::Small { "_small" } else { "" };
    let mut config = sluice_service::config::Config::default();
    config.device.backend = sluice_service::config::BackendKind::Cuda;
    config.device.model_scale = scale;
    config.models.dir = Some(dir.to_owned());
    let (models, graphs) =
        sluice_service::startup::cuda_models(&config).map_err(|e| DisbError::Onnx {
            dir: dir.to_owned(),
            why: crate::error_chain(&e),
        })?;
    let missing: Vec<String> = DISB_MODELS
        .iter()
        .map(|m| format!("{m}{suffix}"))
        .filter(|m| !graphs.contains_key(m))
        .map(|m| format!("{m}.onnx"))
        .collect();
    if !missing.is_empty() {
        return Err(DisbError::Onnx {
            dir: dir.to_owned(),
            why: format!(
                "no {}; make the DISB models with `python3 scripts/onnx/make-disb-models.py --out \
                 {}{}`",
                missing.join(", "),
                dir.display(),
                if scale == Scale::Small {
                    " --small"
                } else {
                    ""
                }
            ),
        });
    }
    Ok((models, graphs, scale))
}

/// Whether `dir` holds ONNX files (`--models DIR` then means real layers
/// on the CUDA server rather than manifests).
pub fn holds_onnx(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().extension().is_some_and(|x| x == "onnx"))
    })
}

/// Where the runs go.
enum Backend {
    /// A fresh GPU model per run, runs in parallel.
    Model(DeviceProfile),
    /// One device, one run at a time.
    Device {
        gpu: std::sync::Mutex<Box<dyn sluice_gpu::Clocked + Send>>,
        name: String,
    },
    /// The daemon's CUDA server, one policy's at a time, in real time.
    Served {
        factory: Box<ServerFactory>,
        name: String,
        models: Arc<ModelRegistry>,
        /// The server of the policy that ran last.
        server: std::sync::Mutex<Option<(PolicyKind, Box<sluice_cuda::serve::CudaServer>)>>,
    },
}

impl Backend {
    fn name(&self) -> String {
        match self {
            Self::Model(p) => p.name.clone(),
            Self::Device { name, .. } | Self::Served { name, .. } => name.clone(),
        }
    }

    /// Runs `workload` under policy `kind` (`factory`'s, except on the
    /// server, which makes its own).
    fn run(
        &self,
        models: &Arc<ModelRegistry>,
        factory: &PolicyFactory,
        kind: PolicyKind,
        workload: &Workload,
    ) -> Result<workload::RunResult, String> {
        match self {
            Self::Model(p) => {
                let mut policy = factory(kind, models);
                Ok(workload::run_on(
                    &mut GpuSim::new(p.clone()),
                    models,
                    policy.as_mut(),
                    workload,
                ))
            }
            Self::Device { gpu, .. } => {
                let mut policy = factory(kind, models);
                let mut g = gpu.lock().unwrap_or_else(|e| e.into_inner());
                Ok(workload::run_on(
                    g.as_mut(),
                    models,
                    policy.as_mut(),
                    workload,
                ))
            }
            Self::Served { .. } => self.with_server(kind, |server| {
                let before = server.stats().clone();
                let mut r =
                    crate::served::run(server, models, workload).map_err(|e| e.to_string())?;
                if let Some(f) = r.failed.first() {
                    return Err(format!(
                        "{} of {} requests failed (the first: {})",
                        r.failed.len(),
                        r.failed.len() + r.done.len(),
                        f.error
                    ));
                }
                let after = server.stats();
                r.stats = sluice_sched::PolicyStats {
                    preempt_latency_ns: after
                        .preempt_latency_ns
                        .get(before.preempt_latency_ns.len()..)
                        .unwrap_or_default()
                        .to_vec(),
                    relaunched_kernels: after
                        .relaunched_kernels
                        .saturating_sub(before.relaunched_kernels),
                };
                Ok(r)
            }),
        }
    }

    /// Calls `f` with the server of policy `kind`, made (and the previous
    /// one dropped) if the last run was another policy's.
    fn with_server<T>(
        &self,
        kind: PolicyKind,
        f: impl FnOnce(&mut sluice_cuda::serve::CudaServer) -> Result<T, String>,
    ) -> Result<T, String> {
        let Self::Served {
            factory, server, ..
        } = self
        else {
            return Err("not a server backend".into());
        };
        let mut slot = server.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_none_or(|(k, _)| *k != kind) {
            *slot = None;
            *slot = Some((kind, Box::new(factory(kind)?)));
        }
        let (_, s) = slot.as_mut().ok_or("no server")?;
        f(s)
    }

    fn standalone(&self, models: &Arc<ModelRegistry>, m: &Model) -> Result<Ns, DisbError> {
        match self {
            Self::Model(p) => standalone_ns(p, m).map_err(|source| {
                ModelError::Standalone {
                    model: m.name().to_owned(),
                    device: p.name.clone(),
                    source,
                }
                .into()
            }),
            Self::Device { gpu, name } => {
                let w = Workload {
                    clients: vec![ClientSpec {
                        priority: Priority::RealTime,
                        model: m.id,
                        arrival: Arrival::Trace(vec![0]),
                    }],
                    duration_ns: 1,
                };
                let r = self
                    .run(models, &make_policy, PolicyKind::RtOnly, &w)
                    .map_err(|why| DisbError::DeviceStandalone {
                        model: m.name().to_owned(),
                        device: name.clone(),
                        why,
                    })?;
                r.done
                    .first()
                    .map(|d| d.finished.saturating_sub(d.task.arrival))
                    .ok_or_else(|| DisbError::DeviceStandalone {
                        model: m.name().to_owned(),
                        device: name.clone(),
                        why: gpu
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .failure()
                            .unwrap_or_else(|| "the device reported no error".to_owned()),
                    })
            }
            Self::Served { name, .. } => self
                .with_server(PolicyKind::Seq, |server| {
                    crate::served::standalone_ns(server, models, m.id, STANDALONE_REPS)
                })
                .map_err(|why| DisbError::DeviceStandalone {
                    model: m.name().to_owned(),
                    device: name.clone(),
                    why,
                }),
        }
    }
}

/// Timed standalone requests per model on the daemon's server (after one
/// untimed): their median is the normaliser.
pub const STANDALONE_REPS: u32 = 5;

/// Why one run gave no result.
enum RunFailure {
    /// The policy or the model panicked.
    Panicked(String),
    /// The backend reported failed requests or could not start.
    Failed(String),
}

fn run_backend(
    opts: &DisbOptions,
    factory: &PolicyFactory,
    backend: &Backend,
    progress: &mut dyn FnMut(&Progress),
) -> Result<DisbReport, DisbError> {
    let t0 = Instant::now();
    let models = match (backend, &opts.models_dir) {
        (Backend::Served { models, .. }, _) => models.as_ref().clone(),
        (_, None) => ModelRegistry::builtin(),
        (_, Some(dir)) => ModelRegistry::load_dir(dir)
            .and_then(|o| ModelRegistry::builtin().with_overrides(o))
            .map_err(|source| DisbError::Models {
                dir: dir.clone(),
                source: Box::new(source),
            })?,
    };
    let models = Arc::new(models);
    let duration_ns = opts
        .duration_ms
        .unwrap_or_else(|| default_duration_ms(&opts.device))
        .max(1)
        * 1_000_000;

    let mut ids = Vec::new();
    for name in DISB_MODELS {
        ids.push(model_id(&models, name)?);
    }
    let mut standalone = |m: &Model| backend.standalone(&models, m);
    let mut norm = Normalisers::measure(&mut standalone, &models, ids)?;
    let mut cases = Vec::new();
    for &w in &opts.workloads {
        cases.push(table2_case(w, &models, &norm, duration_ns, opts.seed)?);
    }
    if let Some(path) = &opts.trace {
        let case = trace_case(path, &models, opts.duration_ms)?;
        let extra = Normalisers::measure(
            &mut standalone,
            &models,
            case.clients.iter().map(|c| c.spec.model),
        )?;
        for (id, t) in extra.time_ns {
            norm.time_ns.entry(id).or_insert(t);
        }
        for s in extra.report {
            if !norm.report.iter().any(|r| r.model == s.model) {
                norm.report.push(s);
            }
        }
        cases.push(case);
    }
    if cases.is_empty() {
        return Err(DisbError::NoWorkload);
    }

    let mut kinds = Vec::new();
    for &k in &opts.policies {
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }

    let jobs: Vec<(usize, PolicyKind)> = (0..cases.len())
        .flat_map(|c| kinds.iter().map(move |&k| (c, k)))
        .collect();
    let total = jobs.len();
    // Hand out the longest runs first so that the last worker does not end
    // alone on a long one: the model's cost grows with the busy streams
    // (best-effort clients) and with how much a policy lets run at once.
    let weight = |&(ci, k): &(usize, PolicyKind)| {
        let be = cases[ci]
            .clients
            .iter()
            .filter(|c| c.spec.priority == Priority::BestEffort)
            .count();
        let factor = match k {
            PolicyKind::Streams => 6,
            PolicyKind::WaitPreempt => 4,
            PolicyKind::Reef => 2,
            _ => 1,
        };
        be * factor
    };
    let mut order: Vec<usize> = (0..total).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weight(&jobs[i])));
    if matches!(backend, Backend::Served { .. }) {
        // One server per policy, made once: its runs one after another.
        order.sort_by_key(|&i| kinds.iter().position(|k| *k == jobs[i].1));
    }
    let mut slots: Vec<Option<CaseResult>> = vec![None; total];
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, Result<CaseResult, RunFailure>)>();
    let workers = match backend {
        Backend::Model(_) => opts.jobs.clamp(1, total.max(1)),
        Backend::Device { .. } | Backend::Served { .. } => 1,
    };
    let mut failure = None;
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (jobs, order, cases, norm, models, next) =
                (&jobs, &order, &cases, &norm, &models, &next);
            scope.spawn(move || {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let (ci, kind) = jobs[i];
                    let case = &cases[ci];
                    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let start = Instant::now();
                        let workload = Workload {
                            clients: case.clients.iter().map(|c| c.spec.clone()).collect(),
                            duration_ns: case.duration_ns,
                        };
                        let r = backend.run(models, factory, kind, &workload)?;
                        let wall_ms = start.elapsed().as_secs_f64() * 1e3;
                        Ok(summarise(case, kind, norm, &r, wall_ms))
                    }));
                    let msg = match out {
                        Ok(Ok(r)) => Ok(r),
                        Ok(Err(why)) => Err(RunFailure::Failed(why)),
                        Err(p) => Err(RunFailure::Panicked(panic_message(p.as_ref()))),
                    };
                    if tx.send((i, msg)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (n, (i, r)) in rx.into_iter().enumerate() {
            let done = n + 1;
            let (ci, kind) = jobs[i];
            match r {
                Ok(r) => slots[i] = Some(r),
                Err(f) => {
                    // Stop handing out work; report the first failure.
                    next.store(usize::MAX / 2, Ordering::Relaxed);
                    let (policy, workload) = (kind.as_str().to_owned(), cases[ci].name.clone());
                    failure.get_or_insert(match f {
                        RunFailure::Panicked(message) => DisbError::Panicked {
                            policy,
                            workload,
                            message,
                        },
                        RunFailure::Failed(message) => DisbError::Run {
                            policy,
                            workload,
                            message,
                        },
                    });
                }
            }
            progress(&Progress {
                done,
                total,
                label: format!("{}/{}", cases[ci].name, kind),
                elapsed_s: t0.elapsed().as_secs_f64(),
            });
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(DisbReport {
        device: backend.name(),
        real_time: !matches!(backend, Backend::Model(_)),
        results: slots.into_iter().flatten().collect(),
        workloads: cases
            .iter()
            .map(|c| CaseInfo {
                workload: c.name.clone(),
                clients: c.clients.iter().map(|c| c.info.clone()).collect(),
                duration_ms: c.duration_ns as f64 / 1e6,
                note: c.note.clone(),
            })
            .collect(),
        standalone: norm.report,
        seed: opts.seed,
        jobs: workers,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// A progress display on stderr: a redrawn bar on a terminal, one plain
/// line per step otherwise.
pub fn stderr_progress() -> impl FnMut(&Progress) {
    use std::io::{IsTerminal, Write};
    let tty = std::io::stderr().is_terminal();
    move |p: &Progress| {
        let mut err = std::io::stderr().lock();
        if tty {
            const W: usize = 30;
            let fill = (p.done * W).checked_div(p.total).unwrap_or(W);
            let _ = write!(
                err,
                "\r\x1b[2K[{}{}] {}/{} {} ({:.1} s)",
                "#".repeat(fill),
                ".".repeat(W - fill),
                p.done,
                p.total,
                p.label,
                p.elapsed_s
            );
            if p.done == p.total {
                let _ = writeln!(err);
            }
        } else {
            let _ = writeln!(
                err,
                "disb: {}/{} {} done ({:.1} s)",
                p.done, p.total, p.label, p.elapsed_s
            );
        }
        let _ = err.flush();
    }
}

fn opt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// The report as tables.
pub fn table(r: &DisbReport) -> String {
    let mut s = if r.real_time {
        format!(
            "DISB on {}, in real time, one run at a time (decision cost and utilisation not \
             measured there)\n\n",
            r.device
        )
    } else {
        format!(
            "DISB on the simulated {} GPU (virtual time; decision cost is wall time on this \
             machine)\n\n",
            r.device
        )
    };
    let mut t = text_table::new(
        &[
            "model",
            "standalone ms",
            "manifest ms",
            "max req/s",
            "kernels from",
        ],
        1,
    );
    for m in &r.standalone {
        // The provenance's first word: measured (the REEF artifact, by
        // its authors on an MI50), estimated or synthetic.
        let from = m.provenance.split([' ', ':']).next().unwrap_or("");
        t.add_row(vec![
            m.model.clone(),
            format!("{:.3}", m.time_ms),
            format!("{:.3}", m.manifest_ms),
            format!("{:.1}", m.max_rps),
            from.to_owned(),
        ]);
    }
    if let Some(c) = t.column_mut(4) {
        c.set_cell_alignment(comfy_table::CellAlignment::Left);
    }
    s += &text_table::lines(&t);
    for w in &r.workloads {
        s += &format!("\nworkload {} ({:.0} ms):", w.workload, w.duration_ms);
        for c in &w.clients {
            s += &format!(" {} {} {};", c.client, c.model, c.arrival);
        }
        s.pop();
        s.push('\n');
        if let Some(n) = &w.note {
            s += &format!("note: {n}\n");
        }
        let mut t = text_table::new(
            &[
                "policy", "RT n", "mean", "p50", "p99", "p99.9", "thr", "BE thr", "pre p50",
                "pre p99", "dec50", "dec99", "cb99", "util",
            ],
            1,
        );
        for c in r.results.iter().filter(|c| c.workload == w.workload) {
            let l = &c.rt_norm_latency;
            t.add_row(vec![
                c.policy.clone(),
                l.count.to_string(),
                format!("{:.3}", l.mean),
                format!("{:.3}", l.p50),
                format!("{:.3}", l.p99),
                format!("{:.3}", l.p999),
                format!("{:.3}", c.throughput_norm),
                format!("{:.3}", c.be_throughput_norm),
                opt_us(c.preempt_latency_us.p50),
                opt_us(c.preempt_latency_us.p99),
                c.decision_ns.p50.to_string(),
                c.decision_ns.p99.to_string(),
                c.callback_ns.p99.to_string(),
                format!("{:.2}", c.utilisation),
            ]);
        }
        s += &text_table::lines(&t);
    }
    s += "\nRT latency: end-to-end / standalone time. thr: sum of every client's throughput / its \
          standalone maximum. pre: preemption latency, us. dec: policy decision cost, ns (the GPU \
          model's own dispatch work inside launch/preempt calls left out). cb99: p99 of whole \
          callbacks, that work included, ns.\n";
    s += &format!("wall time {:.1} s on {} thread(s)\n", r.wall_s, r.jobs);
    s
}

/// The colour of a policy in plots: fixed per policy, so every plot agrees.
fn policy_color(name: &str) -> plotters::style::RGBColor {
    let i = PolicyKind::ALL
        .iter()
        .position(|k| k.as_str() == name)
        .unwrap_or(PolicyKind::ALL.len());
    plot::color(i)
}

/// An SVG with one row per workload: the CDF of RT normalised latency per
/// policy (left) and the overall normalised throughput per policy (right).
pub fn plot(r: &DisbReport) -> Result<String, PlotError> {
    let (w, row_h, head) = (980u32, 270u32, 34u32);
    let rows = r.workloads.len().max(1);
    let h = plot::span(rows, row_h).saturating_add(head + 8);
    let title = format!(
        "DISB on the simulated {} GPU ({} ms virtual per run) - RT latency CDF and throughput",
        r.device,
        r.workloads.first().map_or(0.0, |c| c.duration_ms).round()
    );
    plot::figure("disb.svg", (w, h), Some(&title), |area| {
        let body = area.margin(0, 8, 0, 0);
        for (wl, row) in r.workloads.iter().zip(body.split_evenly((rows, 1))) {
            let res: Vec<&CaseResult> = r
                .results
                .iter()
                .filter(|c| c.workload == wl.workload)
                .collect();
            let series: Vec<Series> = res
                .iter()
                .map(|c| Series {
                    name: c.policy.clone(),
                    color: policy_color(&c.policy),
                    sorted: c.rt_sorted.clone(),
                    dashed: c.policy == PolicyKind::RtOnly.as_str(),
                })
                .collect();
            let lo = res
                .iter()
                .filter_map(|c| c.rt_sorted.first().copied())
                .fold(f64::INFINITY, f64::min);
            let hi = res
                .iter()
                .filter(|c| c.rt_norm_latency.count > 0)
                .map(|c| c.rt_norm_latency.p999)
                .fold(0.0, f64::max);
            let lo = if lo.is_finite() {
                (lo * 0.98).clamp(0.1, 1.0)
            } else {
                0.9
            };
            let hi = (hi * 1.05).clamp(lo * 1.2, 100.0);
            let (left, right) = row.split_horizontally(585);
            let (cdf, key) = left.split_horizontally(470);
            plot::cdf_chart(
                &cdf,
                &format!("{}: RT end-to-end latency / standalone", wl.workload),
                "normalised latency (log scale)",
                &series,
                (lo, hi),
                false,
            )?;
            let keys: Vec<plot::Key> = series.iter().map(Series::key).collect();
            plot::legend(&key.margin(30, 0, 0, 0), &keys, None)?;
            let bars: Vec<Bar> = res
                .iter()
                .map(|c| Bar {
                    label: c.policy.clone(),
                    value: c.throughput_norm,
                    color: policy_color(&c.policy),
                })
                .collect();
            plot::bar_chart(
                &right,
                &format!("{}: overall normalised throughput", wl.workload),
                "throughput / standalone max",
                &bars,
                1.0,
                Some(1.0),
            )?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use sluice_gpu::KernelLaunch;
    use sluice_gpu::{Event, Outcome, StreamId};
    use sluice_sched::{Ctx, Task, TaskDone, tag, untag};

    /// A stand-in policy for tests that do not depend on which policies
    /// exist yet: one stream per client, every kernel launched on arrival.
    #[derive(Default)]
    struct PerClientStreams {
        streams: HashMap<u32, StreamId>,
        tasks: HashMap<u64, (Task, usize)>,
    }

    impl Policy for PerClientStreams {
        fn name(&self) -> &'static str {
            "test-streams"
        }
        fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
            let s = *self.streams.entry(task.client).or_insert_with(|| {
                let prio = i32::from(task.priority == Priority::RealTime);
                cx.gpu.create_stream(prio).expect("stream")
            });
            let m = cx.models.get(task.model).expect("model");
            let n = m.manifest.kernels.len();
            if n == 0 {
                cx.done.push(TaskDone {
                    task,
                    finished: cx.gpu.now(),
                });
                return;
            }
            for (i, k) in m.manifest.kernels.iter().enumerate() {
                cx.gpu
                    .launch(s, KernelLaunch::from_model(k, tag(task.id, i)))
                    .expect("launch");
            }
            self.tasks.insert(task.id, (task, n));
        }
        fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
            if let Event::KernelFinished {
                t,
                kernel,
                outcome: Outcome::Completed,
                ..
            } = ev
            {
                let (id, k) = untag(kernel.tag);
                if let Some(&(task, n)) = self.tasks.get(&id)
                    && k + 1 == n
                {
                    self.tasks.remove(&id);
                    cx.done.push(TaskDone { task, finished: *t });
                }
            }
        }
    }

    fn test_factory(_: PolicyKind, _: &Arc<ModelRegistry>) -> Box<dyn Policy> {
        Box::new(PerClientStreams::default())
    }

    fn tiny(w: DisbWorkload) -> DisbReport {
        let opts = DisbOptions {
            workloads: vec![w],
            policies: vec![PolicyKind::RtOnly, PolicyKind::Streams],
            duration_ms: Some(25),
            jobs: 2,
            ..DisbOptions::default()
        };
        let mut steps = 0;
        let r = run_with(&opts, &test_factory, &mut |p| {
            steps += 1;
            assert_eq!(p.done, steps);
        })
        .expect("disb run");
        assert_eq!(steps, 2, "one progress step per (workload, policy)");
        r
    }

    #[test]
    fn disb_tiny_run_gives_finite_figures() {
        let r = tiny(DisbWorkload::A);
        assert_eq!(r.results.len(), 2);
        for c in &r.results {
            let l = &c.rt_norm_latency;
            assert!(l.count > 0, "{c:?}");
            for v in [
                l.mean,
                l.p50,
                l.p99,
                l.p999,
                c.throughput_norm,
                c.utilisation,
            ] {
                assert!(v.is_finite() && v > 0.0, "{c:?}");
            }
            // Nothing runs faster than alone.
            assert!(l.p50 >= 0.999, "{c:?}");
            assert!(c.decision_ns.count > 0);
            assert_eq!(c.preempt_latency_us.count, 0);
            assert_eq!(c.clients.len(), 2);
            assert!(c.clients.iter().all(|k| k.completed > 0), "{c:?}");
        }
        plot::check_well_formed(&plot(&r).unwrap()).unwrap();
    }

    #[test]
    fn disb_tiny_run_with_the_real_policies() {
        // Every default policy, as `make_policy` builds it.
        let opts = DisbOptions {
            workloads: vec![DisbWorkload::C],
            duration_ms: Some(25),
            jobs: 2,
            ..DisbOptions::default()
        };
        let r = run(&opts, &mut |_| {}).expect("disb run");
        assert_eq!(r.results.len(), DEFAULT_POLICIES.len());
        for c in &r.results {
            let l = &c.rt_norm_latency;
            for v in [
                l.mean,
                l.p50,
                l.p99,
                l.p999,
                c.throughput_norm,
                c.utilisation,
            ] {
                assert!(v.is_finite() && v >= 0.0, "{c:?}");
            }
            for v in [c.preempt_latency_us.p50, c.preempt_latency_us.p99]
                .into_iter()
                .flatten()
            {
                assert!(v.is_finite() && v >= 0.0, "{c:?}");
            }
        }
        plot::check_well_formed(&plot(&r).unwrap()).unwrap();
    }

    #[test]
    fn disb_workloads_follow_table_2() {
        let models = ModelRegistry::builtin();
        let p = DeviceProfile::mi50();
        let ids = DISB_MODELS.map(|m| models.lookup(m).unwrap().0);
        let backend = Backend::Model(p);
        let arc = Arc::new(ModelRegistry::builtin());
        let mut standalone = |m: &Model| backend.standalone(&arc, m);
        let norm = Normalisers::measure(&mut standalone, &models, ids).unwrap();
        let vgg = models.lookup("vgg19").unwrap().0;
        for w in DisbWorkload::ALL {
            let c = table2_case(w, &models, &norm, 1_000_000_000, 7).unwrap();
            let rt: Vec<&CaseClient> = c
                .clients
                .iter()
                .filter(|c| c.spec.priority == Priority::RealTime)
                .collect();
            let be: Vec<&CaseClient> = c
                .clients
                .iter()
                .filter(|c| c.spec.priority == Priority::BestEffort)
                .collect();
            let (n_rt, n_be) = match w {
                DisbWorkload::A | DisbWorkload::B => (1, 1),
                DisbWorkload::C => (1, 5),
                _ => (5, 5),
            };
            assert_eq!((rt.len(), be.len()), (n_rt, n_be), "{w:?}");
            assert!(be.iter().all(|c| c.spec.arrival == Arrival::ClosedLoop));
            for c in &rt {
                let frac = match w {
                    DisbWorkload::A | DisbWorkload::C => 0.5,
                    DisbWorkload::B => 1.0,
                    _ => 0.1,
                };
                let t = norm.time(c.spec.model) as f64;
                match &c.spec.arrival {
                    Arrival::Uniform {
                        period_ns,
                        offset_ns,
                    } => {
                        assert!(w != DisbWorkload::E);
                        assert!((*period_ns as f64 * frac / t - 1.0).abs() < 1e-6);
                        assert!(offset_ns < period_ns);
                    }
                    Arrival::Poisson { rate_per_s, .. } => {
                        assert_eq!(w, DisbWorkload::E);
                        assert!((rate_per_s * t / 1e9 / frac - 1.0).abs() < 1e-6);
                    }
                    a => panic!("{w:?}: RT arrival {a:?}"),
                }
                if n_rt == 1 {
                    assert_eq!(c.spec.model, vgg);
                }
            }
        }
    }

    #[test]
    fn disb_standalone_is_measured_not_copied() {
        let models = ModelRegistry::builtin();
        let (_, m) = models.lookup("bert_base").unwrap();
        let t = standalone_ns(&DeviceProfile::mi50(), m).unwrap();
        // BERT's many short kernels pay the 20 us fetch on the MI50 profile.
        assert!(t > m.total_time_ns, "{t} vs {}", m.total_time_ns);
    }

    #[test]
    fn disb_json_has_the_documented_shape_and_round_trips() {
        let r = tiny(DisbWorkload::C);
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert!(v["device"].is_string());
        let first = &v["results"][0];
        assert_eq!(first["workload"], "C");
        assert!(first["policy"].is_string());
        for k in ["mean", "p50", "p99"] {
            assert!(first["rt_norm_latency"][k].is_number(), "{k}");
        }
        assert!(first["throughput_norm"].is_number());
        for k in ["p50", "p99"] {
            assert!(
                first["preempt_latency_us"]
                    .as_object()
                    .unwrap()
                    .contains_key(k),
                "{k}"
            );
        }
        let text = serde_json::to_string(&r).unwrap();
        let back: DisbReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.results.len(), r.results.len());
        // serde_json's default float parser may be 1 ulp off.
        let (a, b) = (
            &back.results[0].rt_norm_latency,
            &r.results[0].rt_norm_latency,
        );
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * y.abs().max(1.0);
        assert!(
            a.count == b.count
                && [(a.mean, b.mean), (a.p50, b.p50), (a.p99, b.p99)]
                    .into_iter()
                    .chain([(a.p999, b.p999), (a.max, b.max)])
                    .all(|(x, y)| close(x, y)),
            "{a:?} vs {b:?}"
        );
        assert_eq!(back.standalone.len(), r.standalone.len());
        for (x, y) in back.standalone.iter().zip(&r.standalone) {
            assert!(
                x.model == y.model
                    && x.provenance == y.provenance
                    && close(x.time_ms, y.time_ms)
                    && close(x.max_rps, y.max_rps),
                "{x:?} vs {y:?}"
            );
        }
        // A preempting policy's figures survive as numbers too.
        let mut c = r.results[0].clone();
        c.preempt_latency_us = PreemptUs {
            p50: Some(31.5),
            p99: Some(80.0),
            count: 3,
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["preempt_latency_us"]["p99"], 80.0);
    }

    fn reg() -> ModelRegistry {
        ModelRegistry::builtin()
    }

    fn trace_err(text: &str) -> String {
        parse_trace("t.csv", text, &reg()).unwrap_err().to_string()
    }

    #[test]
    fn disb_trace_parses_and_sorts() {
        let text = "client,priority,model,arrival_ms\n\
                    cam,rt,vgg19,5\n\
                    \n\
                    # comment\n\
                    cam,rt,vgg19,1.5\n\
                    lidar, RT ,resnet152 , 2\n\
                    bg,be,gpt2,closed\n";
        let c = parse_trace("t.csv", text, &reg()).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].name, "cam");
        assert_eq!(c[0].arrivals, Some(vec![1_500_000, 5_000_000]));
        assert_eq!(c[1].priority, Priority::RealTime);
        assert_eq!(c[2].arrivals, None);
        assert_eq!(c[2].priority, Priority::BestEffort);
    }

    #[test]
    fn disb_trace_errors_name_line_column_and_value() {
        let h = "client,priority,model,arrival_ms\n";
        let e = trace_err("client,prio,model,arrival_ms\ncam,rt,vgg19,1\n");
        assert!(
            e.contains("line 1") && e.contains("client,prio,model"),
            "{e}"
        );
        let e = trace_err(&format!("{h}cam,rt,vgg19\n"));
        assert!(e.contains("line 2") && e.contains("3 column"), "{e}");
        let e = trace_err(&format!("{h}cam,rt,vgg19,1\ncam,urgent,vgg19,2\n"));
        assert!(
            e.contains("line 3") && e.contains("`priority`") && e.contains("`urgent`"),
            "{e}"
        );
        let e = trace_err(&format!("{h}cam,rt,vgg11,1\n"));
        assert!(
            e.contains("line 2") && e.contains("`model`") && e.contains("`vgg11`"),
            "{e}"
        );
        assert!(e.contains("resnet152"), "lists the known models: {e}");
        for bad in ["-1", "abc", "NaN", "inf", ""] {
            let e = trace_err(&format!("{h}cam,rt,vgg19,{bad}\n"));
            assert!(
                e.contains("line 2")
                    && e.contains("`arrival_ms`")
                    && e.contains(&format!("`{bad}`")),
                "{e}"
            );
        }
        let e = trace_err(&format!("{h}cam,rt,vgg19,closed\n"));
        assert!(e.contains("`arrival_ms`") && e.contains("be"), "{e}");
        let e = trace_err(&format!("{h}cam,rt,vgg19,1\ncam,be,vgg19,2\n"));
        assert!(e.contains("line 3") && e.contains("line 2"), "{e}");
        let e = trace_err(&format!("{h}cam,rt,vgg19,1\ncam,rt,yolov3,2\n"));
        assert!(e.contains("line 3") && e.contains("`yolov3`"), "{e}");
        let e = trace_err(&format!("{h}bg,be,gpt2,closed\nbg,be,gpt2,3\n"));
        assert!(e.contains("line 3") && e.contains("mixes"), "{e}");
        let e = trace_err(&format!("{h}bg,be,gpt2,closed\n"));
        assert!(e.contains("no real-time"), "{e}");
        let e = trace_err("");
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn disb_trace_run_adds_background_when_the_trace_has_none() {
        let dir = std::env::temp_dir().join(format!("sluice-disb-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.csv");
        let mut text = String::from("client,priority,model,arrival_ms\n");
        for i in 0..10 {
            text += &format!("cam,rt,vgg19,{}\n", i * 5);
        }
        std::fs::write(&path, text).unwrap();
        let opts = DisbOptions {
            workloads: vec![],
            trace: Some(path),
            policies: vec![PolicyKind::Streams],
            ..DisbOptions::default()
        };
        let r = run_with(&opts, &test_factory, &mut |_| {}).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(r.workloads[0].workload, "trace");
        assert_eq!(r.workloads[0].clients.len(), 6);
        assert!(r.workloads[0].note.is_some());
        assert_eq!(r.results[0].rt_norm_latency.count, 10);
    }

    /// DISB on a device of its own clock: the CUDA adapter over the fake
    /// driver, workload A briefly, `rt-only` and `reef`.
    #[test]
    fn disb_runs_on_a_device_through_the_cuda_adapter() {
        use sluice_cuda::fake::{FakeDriver, FakeKernel};
        use sluice_cuda::gpu::{CudaGpu, Kill, SYNTHETIC_KERNEL};
        let mut d = FakeDriver::default();
        let k = d.kernel_handle(
            SYNTHETIC_KERNEL,
            FakeKernel::new(0).timed_by_arg(12).polling(1_000),
        );
        let g = CudaGpu::new(Box::new(d), k, DeviceProfile::h100(), Kill::Cooperative).unwrap();
        let opts = DisbOptions {
            workloads: vec![DisbWorkload::A],
            policies: vec![PolicyKind::RtOnly, PolicyKind::Reef],
            duration_ms: Some(40),
            ..DisbOptions::default()
        };
        let r = run_on_device(&opts, &make_policy, Box::new(g), "fake", &mut |_| {}).unwrap();
        assert_eq!(r.device, "fake");
        assert_eq!(r.jobs, 1);
        assert_eq!(r.results.len(), 2);
        for c in &r.results {
            assert!(c.rt_norm_latency.count > 0, "{c:?}");
            // Standalone times were measured on the device: an RT request
            // alone is 1.0 of itself, give or take the arrival phase.
            assert!(c.rt_norm_latency.p50 >= 0.9, "{c:?}");
        }
        let reef = r.results.iter().find(|c| c.policy == "reef").unwrap();
        assert!(reef.be_throughput_norm > 0.0, "{reef:?}");
        assert!(reef.preempt_latency_us.p50.is_some(), "{reef:?}");
        assert!(r.standalone.iter().all(|s| s.time_ms > 0.0));
    }
}
