//! Paella's own evaluation (Paella SOSP'23 §7: Fig. 11 and Fig. 12), in
//! virtual time on the GPU model. Every figure it prints is **simulated**
//! and names its device profile.
//!
//! - **Fig. 11**: a mix of the models of Table 2 (ResNet-18, MobileNet,
//!   ResNet-50, DenseNet, Inception) with equal GPU time per model (request
//!   shares ∝ 1 / standalone time, [`gpu_time_shares`]: the paper's
//!   "uniform mix" as its artifact builds it), open loop, lognormal
//!   inter-arrival times with σ = 1.5 and σ = 2 (Paella §7 methodology), p99
//!   latency and throughput against offered load.
//! - **Fig. 12**: ResNet-18 (short) beside Inception (long; another model
//!   with [`PaellaBenchOptions::long`], `--long`), the ratio of short to
//!   long requests inversely proportional to their standalone times (so
//!   each gets the same GPU time), p99 latency of each against load.
//!
//! Policies (Paella Table 3): `paella`; `streams` (CUDA-MS: one stream per
//! client); `seq` (CUDA-SS: one
//! stream, FIFO; it launches a job's kernels when the previous job has
//! finished, so it also pays one launch and fetch per job, which CUDA-SS
//! overlaps); `paella-sjf` and `paella-rr` (Paella's dispatcher with SJF and
//! round-robin queueing).
//!
//! **Clients** (Paella's artifact, [`PAPER_CONCURRENCY`]): each model's
//! requests are served by a pool of [`instances`] clients
//! (`Arrival::Pool`), one request each at a time, 187 in all for Fig. 11
//! and 125 for Fig. 12 split by the models' shares; a request arriving with
//! every instance of its model busy waits in the client, its latency
//! counted from its arrival. Under `streams` each client is one stream, so
//! CUDA-MS has as many streams as the artifact's (125 for Fig. 12).
//!
//! **Models.** The measured manifests of Table 2's models are looked up by
//! name ([`PAPER_MODELS`], [`PAPER_SHORT`], [`PAPER_LONG`]); where they are
//! missing from the registry, the run uses [`FALLBACK_MODELS`] (the
//! synthetic built-in models) and says so in its output (`models`,
//! `fallback`).
//!
//! **Loads.** Offered load is given in requests per second, calibrated from
//! the standalone times the GPU model gives each model (one request alone
//! under `seq`): the *serial capacity* is the rate at which back-to-back
//! requests of the mix would keep the device busy, `1 / mean standalone
//! time` of its requests (Fig. 12: two equal halves of GPU time, `2 / (1/t_s + 1/t_l)`...
//! see [`fig12_rates`]). The sweep is a list of fractions of it.
//!
//! **Measurement** (Paella §7: "we waited for results to stabilize before
//! gathering measurements"). Every load of one σ replays *one* arrival
//! trace, its gaps scaled by the mean (the paper varies the mean µ): the
//! same standard normal draws and model choices at every load, so that the
//! curves differ by load only and the saturation search below does not
//! step through independent windows. Requests arriving in the first
//! [`WARM_UP`] of the window run but are left out of the p99s (the device
//! starts empty); the rest are the p99's samples, reported beside it. The
//! window is [`PaellaBenchOptions::seconds`] long, 10 s by default: with
//! σ = 2 the gaps' coefficient of variation is `sqrt(e^4 - 1)` ≈ 7.3, so the
//! arrivals of a window of `n` expected ones vary by about `7.3 / sqrt(n)`
//! (half the mean for a 1 s window at 222.8 req/s), and a p99 over a 1 s
//! window was the second-largest of a few hundred latencies. A p99 over
//! fewer than [`MIN_P99_SAMPLES`] samples does not count for the goals.
//!
//! **Sustains.** A policy *sustains* a load when its throughput (requests
//! finished before arrivals stop, over the arrival window) is at least 0.95
//! of the rate at which requests actually arrived in that window
//! (`arrived_rps`; lognormal gaps with σ = 2 make the realised rate of a
//! short window stray far from the nominal `load_rps`). Requests still unfinished when the run stops count
//! in the p99 with the time they had waited by then (a lower bound).

use std::fmt::Write as _;
use std::sync::Arc;

use shm_proto::Priority;

use sluice_gpu::{DeviceProfile, Ns};
use sluice_gpusim::GpuSim;
use sluice_model::ModelRegistry;
use sluice_sched::paella::{Paella, PaellaConfig};
use sluice_sched::workload::{self, Arrival, ClientSpec, Workload};
use sluice_sched::{PolicyKind, make_policy};

/// Fig. 11's mix: the models of Paella Table 2 that REEF's MI50 measurements
/// cover, by manifest name.
pub const PAPER_MODELS: [&str; 5] = ["resnet18", "mobilenet", "resnet50", "densenet", "inception"];
/// Fig. 12's short model.
pub const PAPER_SHORT: &str = "resnet18";
/// Fig. 12's long model (InceptionV3).
pub const PAPER_LONG: &str = "inception";
/// The mix used when a model of [`PAPER_MODELS`] is not in the registry:
/// the synthetic built-in models, shortest to longest.
pub const FALLBACK_MODELS: [&str; 5] = ["vgg19", "bert_base", "resnet152", "yolov3", "gpt2"];
/// Fig. 12's pair when the paper's is missing: the shortest and longest
/// built-in models.
pub const FALLBACK_PAIR: (&str, &str) = ("vgg19", "gpt2");

/// The policies of the comparison, in the order reports list them.
pub const POLICIES: [PolicyKind; 5] = [
    PolicyKind::Paella,
    PolicyKind::Streams,
    PolicyKind::Seq,
    PolicyKind::PaellaSjf,
    PolicyKind::PaellaRr,
];

/// Throughput at or above this fraction of the offered load: sustained.
pub const SUSTAIN: f64 = 0.95;

/// Fraction of the arrival window at its start whose requests are left out
/// of the p99s (warm-up: the device starts empty).
pub const WARM_UP: f64 = 0.1;

/// Fewest latencies a p99 may be taken over for the goals: below it the
/// "p99" is one of the few largest samples.
pub const MIN_P99_SAMPLES: usize = 100;

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct PaellaBenchOptions {
    /// Device profile of the GPU model.
    pub device: String,
    /// Virtual seconds of arrivals per point.
    pub seconds: f64,
    /// Offered loads, fractions of serial capacity.
    pub loads: Vec<f64>,
    /// Lognormal σ of the inter-arrival times.
    pub sigmas: Vec<f64>,
    /// Policies.
    pub policies: Vec<PolicyKind>,
    /// Requests in flight at most, Fig. 11 and Fig. 12: each model gets a
    /// pool of [`instances`] clients, one request each at a time (Paella's
    /// artifact client); default [`PAPER_CONCURRENCY`].
    pub concurrency: [u32; 2],
    /// Seed of the arrival times and model choices.
    pub seed: u64,
    /// Worker threads.
    pub jobs: usize,
    /// Fig. 12's long model; `None`: [`PAPER_LONG`] (the paper's
    /// InceptionV3). The paper's point is the size difference (Table 2:
    /// InceptionV3 19.7× ResNet-18 on a T4); on the `mi50` manifests
    /// `inception` is 3.9× `resnet18` and `resnet50` 9.2×.
    pub long: Option<String>,
    /// `paella`'s deficit threshold (Paella §6 (2); its Fig. 13 sweeps it);
    /// `None`: [`PAPER_THRESHOLD`], the one the paper's Fig. 11 and 12 ran
    /// with; infinity turns fairness off. Only `paella` has one.
    pub deficit_threshold: Option<f64>,
}

/// The deficit threshold of Paella's own Fig. 11 and Fig. 12 runs: the
/// authors' artifact (`eniac/paella`, `sosp23_artifact/gen_data_fig11_paella.sh`
/// and `gen_data_fig12_paella.sh`) starts `llis_server --sched full3`
/// without `--unfair`, whose default in `src/server/server.cpp` is
/// 1,000,000 (only `gen_data_fig13.sh` sweeps it). In these windows no
/// deficit gets near it, so it runs as SRPT without fairness. The daemon's
/// `paella` keeps its own default ([`PaellaConfig::default`], 16 kernels).
pub const PAPER_THRESHOLD: f64 = 1_000_000.0;

/// Requests in flight at most in Paella's own Fig. 11 and Fig. 12 runs:
/// `llis_client --concurrency 187` (`gen_data_fig11_paella.sh`) and
/// `llis_app_client --concurrency 125` (`gen_data_fig12_paella.sh`), split
/// over the models by their shares (e.g. 119 resnet18 and 6 inception
/// instances), and CUDA-MS with as many streams (`gen_data_fig12_cuda.sh`:
/// 125). Requests of a model with every instance busy wait in the client.
pub const PAPER_CONCURRENCY: [u32; 2] = [187, 125];

impl Default for PaellaBenchOptions {
    fn default() -> Self {
        Self {
            device: "mi50".to_owned(),
            seconds: 10.0,
            loads: vec![0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6],
            sigmas: vec![1.5, 2.0],
            policies: POLICIES.to_vec(),
            concurrency: PAPER_CONCURRENCY,
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            long: None,
            deficit_threshold: None,
        }
    }
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum PaellaBenchError {
    /// The device profile does not exist.
    #[error("no device profile `{0}`; use mi50, gv100 or h100")]
    Device(String),
    /// A model of the fallback table is missing too.
    #[error(transparent)]
    Model(#[from] crate::ModelError),
    /// Nothing to run.
    #[error("no {0} given; give at least one")]
    Empty(&'static str),
    /// A deficit threshold that is not a positive number of kernels.
    #[error("deficit threshold {0} is not positive; give kernels > 0, or inf to turn fairness off")]
    Threshold(f64),
    /// `--long` names no built-in model, or the short one.
    #[error("--long `{0}`: {1}")]
    Long(String, String),
}

/// A model of the mix.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelInfo {
    /// Manifest name.
    pub name: String,
    /// Kernels.
    pub kernels: usize,
    /// One request alone under `seq` on the GPU model, ms.
    pub standalone_ms: f64,
}

/// One point of Fig. 11.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fig11Point {
    /// Lognormal σ.
    pub sigma: f64,
    /// Policy name.
    pub policy: String,
    /// Offered load, requests/s.
    pub load_rps: f64,
    /// p99 latency, ms.
    pub p99_ms: f64,
    /// Latencies the p99 is taken over (arrivals after the warm-up).
    pub samples: usize,
    /// Requests finished in the arrival window, per second of it.
    pub throughput_rps: f64,
}

/// One point of Fig. 12.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fig12Point {
    /// Lognormal σ.
    pub sigma: f64,
    /// Policy name.
    pub policy: String,
    /// Offered load (both models), requests/s.
    pub load_rps: f64,
    /// p99 latency of the short model, ms.
    pub short_p99_ms: f64,
    /// p99 latency of the long model, ms.
    pub long_p99_ms: f64,
    /// Latencies the short model's p99 is taken over.
    pub short_samples: usize,
    /// Latencies the long model's p99 is taken over.
    pub long_samples: usize,
}

/// The reproduction's goals (Paella Fig. 11 and 12), evaluated on this run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Goal {
    /// Lognormal σ.
    pub sigma: f64,
    /// Fig. 11: the highest offered load each policy sustains with every
    /// lower load sustained too, requests/s (0: none), as (policy, load).
    pub fig11_saturation_rps: Vec<(String, f64)>,
    /// Fig. 11: paella sustains every load `streams` does.
    pub fig11_met: bool,
    /// Fig. 12: the highest load both `paella` and `streams` sustain.
    pub fig12_load_rps: Option<f64>,
    /// Fig. 12: `streams`' short-model p99 over `paella`'s there (none
    /// when either p99 is over fewer than [`MIN_P99_SAMPLES`] latencies).
    pub fig12_short_p99_ratio: Option<f64>,
    /// Fig. 12: that ratio is at least 2.
    pub fig12_met: bool,
}

/// Everything the benchmark measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PaellaBenchResult {
    /// Device profile of the GPU model.
    pub device: String,
    /// Always true: virtual time on the GPU model.
    pub simulated: bool,
    /// Whether the paper's models were missing and the fallback ran.
    pub fallback: bool,
    /// Virtual seconds of arrivals per point.
    pub seconds: f64,
    /// Fig. 11's mix.
    pub models: Vec<ModelInfo>,
    /// Serial capacity of Fig. 11's mix, requests/s.
    pub capacity_rps: f64,
    /// Fig. 12's short and long model.
    pub short: ModelInfo,
    /// Fig. 12's long model.
    pub long: ModelInfo,
    /// `paella`'s deficit threshold, kernels (`null`: fairness off).
    pub deficit_threshold: Option<f64>,
    /// Requests in flight at most, Fig. 11 and Fig. 12 (the artifact's
    /// client concurrency, [`PAPER_CONCURRENCY`] by default).
    pub concurrency: [u32; 2],
    /// Fig. 11: client instances per model, in `models` order.
    pub fig11_instances: Vec<u32>,
    /// Fig. 12: client instances of the short and the long model.
    pub fig12_instances: [u32; 2],
    /// Serial capacity of Fig. 12's pair, requests/s.
    pub fig12_capacity_rps: f64,
    /// Fig. 11 points.
    pub fig11: Vec<Fig11Point>,
    /// Fig. 12 points.
    pub fig12: Vec<Fig12Point>,
    /// Per figure, σ and nominal load: the realised arrival rate and which
    /// policies sustain it.
    pub sustained: Vec<Sustained>,
    /// The goals per σ.
    pub goals: Vec<Goal>,
}

/// Which policies sustain one load of one figure.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sustained {
    /// 11 or 12.
    pub fig: u8,
    /// Lognormal σ.
    pub sigma: f64,
    /// Nominal offered load, requests/s.
    pub load_rps: f64,
    /// Requests that arrived in the window, per second of it.
    pub arrived_rps: f64,
    /// Policies whose throughput is at least [`SUSTAIN`] × `arrived_rps`.
    pub policies: Vec<String>,
}

pub use crate::runs::Progress;

use sluice_rng::{Draws, Stream};

/// `n` lognormal inter-arrival gaps of mean `mean_ns` and shape `sigma`
/// (`mu = ln(mean) - sigma^2 / 2`), by Box-Muller, as arrival times from 0
/// until `until`.
pub fn lognormal_arrivals(mean_ns: f64, sigma: f64, until: Ns, seed: u64) -> Vec<Ns> {
    let mu = mean_ns.ln() - sigma * sigma / 2.0;
    let mut rng = Stream::new(seed);
    let mut t = 0.0f64;
    let mut out = Vec::new();
    loop {
        let (u1, u2) = (rng.unit_open(), rng.unit_open());
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        t += (mu + sigma * z).exp();
        if t >= until as f64 {
            return out;
        }
        out.push(t as Ns);
    }
}

/// Per-model arrival rates of Fig. 12 at `total_rps` requests/s: equal GPU
/// time for each (`rate_short / rate_long = time_long / time_short`).
pub fn fig12_rates(total_rps: f64, short_ms: f64, long_ms: f64) -> (f64, f64) {
    let short_share = long_ms / (short_ms + long_ms);
    (total_rps * short_share, total_rps * (1.0 - short_share))
}

/// One request of `model` alone under `seq` on the GPU model, ns.
fn standalone_ns(profile: &DeviceProfile, models: &Arc<ModelRegistry>, model: u32) -> Ns {
    let mut p = sluice_sched::seq::Seq::new();
    let w = Workload {
        clients: vec![ClientSpec {
            priority: Priority::BestEffort,
            model,
            arrival: Arrival::Trace(vec![0]),
        }],
        duration_ns: 1,
    };
    let r = workload::run_on(&mut GpuSim::new(profile.clone()), models, &mut p, &w);
    r.done.first().map_or(0, |d| d.finished)
}

/// One open-loop run: the requests (arrival, model index into `mix`).
struct Point {
    fig: u8,
    sigma: f64,
    load_rps: f64,
    policy: PolicyKind,
    clients: Vec<ClientSpec>,
    /// Per client, the index of its model in `mix`.
    client_model: Vec<usize>,
    /// Per model index, its requests' arrival times.
    arrivals: Arc<Vec<Vec<Ns>>>,
    /// Requests arriving in the window, per second of it.
    arrived_rps: f64,
}

/// What one run gave: p99 per model index (and all) with the samples each
/// is over, throughput.
struct Outcome {
    p99_all_ms: f64,
    samples_all: usize,
    p99_ms: Vec<f64>,
    samples: Vec<usize>,
    throughput_rps: f64,
}

/// Builds the clients of one point: one lognormal arrival stream of
/// `total_rps`, each request of model `i` with probability `share[i]`,
/// served by model `i`'s pool of `pool[i]` clients (`Arrival::Pool`, one
/// task each at a time; [`instances`] sizes them). Returns the
/// clients, each client's model index, and each model's arrival times.
fn clients_for(
    ids: &[u32],
    share: &[f64],
    total_rps: f64,
    sigma: f64,
    until: Ns,
    pool: &[u32],
    seed: u64,
) -> (Vec<ClientSpec>, Vec<usize>, Vec<Vec<Ns>>) {
    let times = lognormal_arrivals(1e9 / total_rps, sigma, until, seed);
    let mut traces: Vec<Vec<Ns>> = vec![Vec::new(); ids.len()];
    let mut rng = Stream::new(seed ^ 0x5eed);
    for t in times {
        let u = rng.unit_open();
        let mut acc = 0.0;
        let mut m = ids.len() - 1;
        for (i, s) in share.iter().enumerate() {
            acc += s;
            if u < acc {
                m = i;
                break;
            }
        }
        traces[m].push(t);
    }
    let mut clients = Vec::new();
    let mut client_model = Vec::new();
    for (m, trace) in traces.iter().enumerate() {
        let times: Arc<[Ns]> = trace.as_slice().into();
        for _ in 0..pool[m] {
            clients.push(ClientSpec {
                priority: Priority::BestEffort,
                model: ids[m],
                arrival: Arrival::Pool {
                    pool: m as u32,
                    times: times.clone(),
                },
            });
            client_model.push(m);
        }
    }
    (clients, client_model, traces)
}

/// Request shares that give each model the same GPU time: proportional to
/// 1 / its standalone time. Paella's artifact mixes Fig. 11 so
/// (`gen_data_fig11_paella.sh`'s proportions are 1 / Table 2's TVM times,
/// normalised, to three digits), and Fig. 12 likewise ([`fig12_rates`]).
pub fn gpu_time_shares(standalone_ms: &[f64]) -> Vec<f64> {
    let total: f64 = standalone_ms.iter().map(|t| 1.0 / t).sum();
    standalone_ms.iter().map(|t| 1.0 / t / total).collect()
}

/// Instances of a model's pool: the client's concurrency times the model's
/// share of the requests, rounded, at least one (the artifact's rule:
/// 125 × 0.952 = 119 resnet18 and 125 × 0.048 = 6 inception instances).
pub fn instances(concurrency: u32, share: f64) -> u32 {
    ((f64::from(concurrency) * share).round() as u32).max(1)
}

/// The p99 of latencies `v` in ms (nearest rank; 0 for none).
fn p99(mut v: Vec<Ns>) -> f64 {
    v.sort_unstable();
    let ms: Vec<f64> = v.iter().map(|&ns| ns as f64 / 1e6).collect();
    sluice_stats::quantile(&ms, 0.99)
}

fn run_point(
    profile: &DeviceProfile,
    models: &Arc<ModelRegistry>,
    pt: &Point,
    nmodels: usize,
    until: Ns,
    paella: PaellaConfig,
) -> Outcome {
    let w = Workload {
        clients: pt.clients.clone(),
        duration_ns: until,
    };
    let mut policy: Box<dyn sluice_sched::Policy> = if pt.policy == PolicyKind::Paella {
        Box::new(Paella::with_config(models, paella))
    } else {
        make_policy(pt.policy, models)
    };
    let mut gpu = GpuSim::new(profile.clone());
    let r = workload::run_on(&mut gpu, models, policy.as_mut(), &w);
    let mut lat: Vec<Vec<Ns>> = vec![Vec::new(); nmodels];
    let mut in_window = 0u64;
    // (model index, arrival) of every finished request, with multiplicity.
    let mut seen: std::collections::HashMap<(usize, Ns), u32> = std::collections::HashMap::new();
    // Arrivals before this are the warm-up: run, not measured.
    let warm = (until as f64 * WARM_UP) as Ns;
    for d in &r.done {
        if d.task.arrival >= warm {
            lat[pt.client_model[d.task.client as usize]].push(d.finished - d.task.arrival);
        }
        *seen
            .entry((pt.client_model[d.task.client as usize], d.task.arrival))
            .or_default() += 1;
        if d.finished <= until {
            in_window += 1;
        }
    }
    // Unfinished requests: the time they had waited when the run stopped.
    for (m, ts) in pt.arrivals.iter().enumerate() {
        for &t in ts {
            match seen.get_mut(&(m, t)) {
                Some(n) if *n > 0 => *n -= 1,
                _ if t >= warm => lat[m].push(r.end_ns.saturating_sub(t)),
                _ => {}
            }
        }
    }
    let all: Vec<Ns> = lat.iter().flatten().copied().collect();
    Outcome {
        samples_all: all.len(),
        p99_all_ms: p99(all),
        samples: lat.iter().map(Vec::len).collect(),
        p99_ms: lat.into_iter().map(p99).collect(),
        throughput_rps: in_window as f64 / (until as f64 / 1e9),
    }
}

/// Runs both figures; `progress` sees every finished run.
pub fn run(
    opts: &PaellaBenchOptions,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<PaellaBenchResult, PaellaBenchError> {
    let profile = DeviceProfile::builtin(&opts.device)
        .map_err(|_| PaellaBenchError::Device(opts.device.clone()))?;
    if opts.loads.is_empty() {
        return Err(PaellaBenchError::Empty("loads"));
    }
    if opts.sigmas.is_empty() {
        return Err(PaellaBenchError::Empty("sigmas"));
    }
    if opts.policies.is_empty() {
        return Err(PaellaBenchError::Empty("policies"));
    }
    let models = Arc::new(ModelRegistry::builtin());
    let fallback = PAPER_MODELS
        .iter()
        .chain([&PAPER_SHORT, &PAPER_LONG])
        .any(|n| models.lookup(n).is_none());
    let (mix, (short, long)) = if fallback {
        (FALLBACK_MODELS, FALLBACK_PAIR)
    } else {
        (PAPER_MODELS, (PAPER_SHORT, PAPER_LONG))
    };
    let long = match &opts.long {
        None => long,
        Some(l) if l == short => {
            return Err(PaellaBenchError::Long(
                l.clone(),
                format!("it is Fig. 12's short model; give a longer one, e.g. {PAPER_LONG}"),
            ));
        }
        Some(l) if models.lookup(l).is_none() => {
            let names: Vec<&str> = models.iter().map(|(_, m)| m.name()).collect();
            return Err(PaellaBenchError::Long(
                l.clone(),
                format!("no such built-in model; use one of {}", names.join(", ")),
            ));
        }
        Some(l) => l.as_str(),
    };
    let info = |name: &str| -> Result<(u32, ModelInfo), PaellaBenchError> {
        let (id, m) = models
            .lookup(name)
            .ok_or_else(|| crate::ModelError::Missing(name.to_owned()))?;
        Ok((
            id,
            ModelInfo {
                name: name.to_owned(),
                kernels: m.manifest.kernels.len(),
                standalone_ms: standalone_ns(&profile, &models, id) as f64 / 1e6,
            },
        ))
    };
    let mix: Vec<(u32, ModelInfo)> = mix.iter().map(|n| info(n)).collect::<Result<_, _>>()?;
    let (short_id, short_info) = info(short)?;
    let (long_id, long_info) = info(long)?;
    if opts.long.is_some() && long_info.standalone_ms <= short_info.standalone_ms {
        return Err(PaellaBenchError::Long(
            long.to_owned(),
            format!(
                "it takes {:.2} ms alone on `{}`, not longer than {short}'s {:.2} ms; give a longer model, e.g. {PAPER_LONG}",
                long_info.standalone_ms, profile.name, short_info.standalone_ms
            ),
        ));
    }
    // Fig. 11's mix: equal GPU time per model, as the artifact's (module
    // docs); a request's mean standalone time is then Σ sᵢ tᵢ.
    let share11 = gpu_time_shares(&mix.iter().map(|(_, m)| m.standalone_ms).collect::<Vec<_>>());
    let mean_ms: f64 = mix
        .iter()
        .zip(&share11)
        .map(|((_, m), s)| s * m.standalone_ms)
        .sum();
    let capacity = 1e3 / mean_ms;
    let (ts, tl) = (short_info.standalone_ms, long_info.standalone_ms);
    // At capacity the two halves of GPU time add up to the whole device:
    // r_s t_s + r_l t_l = 1 s with r_s t_s = r_l t_l.
    let cap12 = {
        let (rs, rl) = fig12_rates(1.0, ts, tl);
        1e3 / (rs * ts + rl * tl)
    };
    // Each model's pool (the shares do not depend on the load): what
    // `clients_for` builds at every load, and what the report gives.
    let fig11_instances: Vec<u32> = share11
        .iter()
        .map(|&s| instances(opts.concurrency[0], s))
        .collect();
    let fig12_instances = {
        let (rs, rl) = fig12_rates(1.0, ts, tl);
        [
            instances(opts.concurrency[1], rs),
            instances(opts.concurrency[1], rl),
        ]
    };
    let until = (opts.seconds * 1e9) as Ns;
    let mut paella = PaellaConfig::default();
    let t = opts.deficit_threshold.unwrap_or(PAPER_THRESHOLD);
    if t.is_nan() || t <= 0.0 {
        return Err(PaellaBenchError::Threshold(t));
    }
    paella.deficit_threshold = t;
    let ids: Vec<u32> = mix.iter().map(|(id, _)| *id).collect();
    let mut points = Vec::new();
    for &sigma in &opts.sigmas {
        for &load in &opts.loads {
            // One trace per σ, scaled to each load (module docs,
            // *Measurement*): the seed does not depend on the load.
            let seed = opts.seed ^ (sigma.to_bits() >> 40);
            let rps = load * capacity;
            let (c11, m11, t11) =
                clients_for(&ids, &share11, rps, sigma, until, &fig11_instances, seed);
            let rps12 = load * cap12;
            let (rs, _) = fig12_rates(rps12, ts, tl);
            let (c12, m12, t12) = clients_for(
                &[short_id, long_id],
                &[rs / rps12, 1.0 - rs / rps12],
                rps12,
                sigma,
                until,
                &fig12_instances,
                seed ^ 12,
            );
            let arrived =
                |ts: &[Vec<Ns>]| ts.iter().map(Vec::len).sum::<usize>() as f64 / opts.seconds;
            let (a11, a12) = (arrived(&t11), arrived(&t12));
            let (t11, t12) = (Arc::new(t11), Arc::new(t12));
            for &policy in &opts.policies {
                points.push(Point {
                    fig: 11,
                    sigma,
                    load_rps: rps,
                    policy,
                    clients: c11.clone(),
                    client_model: m11.clone(),
                    arrivals: t11.clone(),
                    arrived_rps: a11,
                });
                points.push(Point {
                    fig: 12,
                    sigma,
                    load_rps: rps12,
                    policy,
                    clients: c12.clone(),
                    client_model: m12.clone(),
                    arrivals: t12.clone(),
                    arrived_rps: a12,
                });
            }
        }
    }
    // The longest runs (highest load) first, so the workers finish together.
    points.sort_by(|a, b| b.load_rps.total_cmp(&a.load_rps));
    let results = crate::runs::run_all(
        &points,
        opts.jobs,
        |pt| {
            let n = if pt.fig == 11 { mix.len() } else { 2 };
            run_point(&profile, &models, pt, n, until, paella)
        },
        progress,
    );
    let mut fig11 = Vec::new();
    let mut fig12 = Vec::new();
    // (sigma, policy, load, throughput) of Fig. 12, for the goals.
    let mut thr12 = Vec::new();
    let mut sustained: Vec<Sustained> = Vec::new();
    for (pt, o) in points.iter().zip(results) {
        let at = match sustained
            .iter()
            .position(|x| x.fig == pt.fig && x.sigma == pt.sigma && x.load_rps == pt.load_rps)
        {
            Some(at) => at,
            None => {
                sustained.push(Sustained {
                    fig: pt.fig,
                    sigma: pt.sigma,
                    load_rps: pt.load_rps,
                    arrived_rps: pt.arrived_rps,
                    policies: Vec::new(),
                });
                sustained.len() - 1
            }
        };
        if o.throughput_rps >= SUSTAIN * pt.arrived_rps {
            sustained[at].policies.push(pt.policy.as_str().to_owned());
        }
        if pt.fig == 11 {
            fig11.push(Fig11Point {
                sigma: pt.sigma,
                policy: pt.policy.as_str().to_owned(),
                load_rps: pt.load_rps,
                p99_ms: o.p99_all_ms,
                samples: o.samples_all,
                throughput_rps: o.throughput_rps,
            });
        } else {
            thr12.push((pt.sigma, pt.policy, pt.load_rps));
            fig12.push(Fig12Point {
                sigma: pt.sigma,
                policy: pt.policy.as_str().to_owned(),
                load_rps: pt.load_rps,
                short_p99_ms: o.p99_ms[0],
                long_p99_ms: o.p99_ms[1],
                short_samples: o.samples[0],
                long_samples: o.samples[1],
            });
        }
    }
    let order = |p: &str| opts.policies.iter().position(|k| k.as_str() == p);
    fig11.sort_by(|a, b| {
        (a.sigma, order(&a.policy), a.load_rps)
            .partial_cmp(&(b.sigma, order(&b.policy), b.load_rps))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    fig12.sort_by(|a, b| {
        (a.sigma, order(&a.policy), a.load_rps)
            .partial_cmp(&(b.sigma, order(&b.policy), b.load_rps))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    sustained.sort_by(|a, b| {
        (a.fig, a.sigma, a.load_rps)
            .partial_cmp(&(b.fig, b.sigma, b.load_rps))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let goals = opts
        .sigmas
        .iter()
        .map(|&sigma| goal(sigma, &opts.policies, &fig12, &sustained))
        .collect();
    Ok(PaellaBenchResult {
        device: profile.name.clone(),
        simulated: true,
        fallback,
        seconds: opts.seconds,
        models: mix.into_iter().map(|(_, m)| m).collect(),
        capacity_rps: capacity,
        short: short_info,
        long: long_info,
        deficit_threshold: Some(paella.deficit_threshold).filter(|t| t.is_finite()),
        concurrency: opts.concurrency,
        fig11_instances,
        fig12_instances,
        fig12_capacity_rps: cap12,
        fig11,
        fig12,
        sustained,
        goals,
    })
}

/// Whether `policy` sustains `load` of figure `fig` at `sigma`.
/// One table cell: a figure's point for one policy, already formatted.
struct Cell<'a> {
    sigma: f64,
    policy: &'a str,
    load: f64,
    text: String,
}

/// One figure as a table per σ: a row per offered load, a column per
/// policy, `*` after the points the policy sustains.
fn write_figure(
    s: &mut String,
    sigmas: &[f64],
    policies: &[&str],
    cells: &[Cell<'_>],
    sustained: impl Fn(f64, f64, &str) -> bool,
) {
    for &sigma in sigmas {
        s.push_str(&format!("sigma {sigma}\n"));
        let mut header = vec!["load r/s"];
        header.extend_from_slice(policies);
        let mut t = crate::text_table::new(&header, 0);
        let mut loads: Vec<f64> = cells
            .iter()
            .filter(|c| c.sigma == sigma)
            .map(|c| c.load)
            .collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        for &l in &loads {
            let mut row = vec![format!("{l:.1}")];
            for &p in policies {
                row.push(
                    match cells
                        .iter()
                        .find(|c| c.sigma == sigma && c.policy == p && c.load == l)
                    {
                        Some(c) => {
                            let mark = if sustained(sigma, l, p) { '*' } else { ' ' };
                            format!("{}{mark}", c.text)
                        }
                        None => "- ".to_owned(),
                    },
                );
            }
            t.add_row(row);
        }
        s.push_str(&crate::text_table::lines(&t));
    }
}

fn sustains(sustained: &[Sustained], fig: u8, sigma: f64, load: f64, policy: &str) -> bool {
    sustained.iter().any(|x| {
        x.fig == fig
            && x.sigma == sigma
            && x.load_rps == load
            && x.policies.iter().any(|p| p == policy)
    })
}

fn goal(
    sigma: f64,
    policies: &[PolicyKind],
    fig12: &[Fig12Point],
    sustained: &[Sustained],
) -> Goal {
    // The highest nominal load below the first one not sustained (0: none;
    // `sustained` is sorted by load). A lone sustained point above a
    // failure is a window with few arrivals, not capacity.
    let sat = |fig: u8, p: &str| {
        sustained
            .iter()
            .filter(|x| x.fig == fig && x.sigma == sigma)
            .take_while(|x| x.policies.iter().any(|q| q == p))
            .map(|x| x.load_rps)
            .fold(0.0, f64::max)
    };
    let sat11 = |p: &str| sat(11, p);
    let fig11_saturation_rps: Vec<(String, f64)> = policies
        .iter()
        .map(|k| (k.as_str().to_owned(), sat11(k.as_str())))
        .collect();
    let fig11_met = sat11("paella") >= sat11("streams");
    let both = sat(12, "paella").min(sat(12, "streams"));
    let fig12_load_rps = (both > 0.0).then_some(both);
    // A p99 over too few samples is not one (`MIN_P99_SAMPLES`).
    let short_p99 = |p: &str, load: f64| {
        fig12
            .iter()
            .find(|x| x.sigma == sigma && x.policy == p && x.load_rps == load)
            .filter(|x| x.short_samples >= MIN_P99_SAMPLES)
            .map(|x| x.short_p99_ms)
    };
    let fig12_short_p99_ratio = fig12_load_rps.and_then(|l| {
        let (pa, st) = (short_p99("paella", l)?, short_p99("streams", l)?);
        (pa > 0.0).then(|| st / pa)
    });
    Goal {
        sigma,
        fig11_saturation_rps,
        fig11_met,
        fig12_load_rps,
        fig12_short_p99_ratio,
        fig12_met: fig12_short_p99_ratio.is_some_and(|r| r >= 2.0),
    }
}

/// The result as readable tables.
pub fn table(r: &PaellaBenchResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Paella §7 evaluation, simulated on the GPU model (device profile {}), {} s of arrivals per point{}",
        r.device,
        r.seconds,
        if r.fallback {
            "; the paper's models are not in the registry: fallback mix of built-in synthetic models"
        } else {
            ""
        }
    );
    let _ = writeln!(s, "\nModels (standalone: one request alone under seq):");
    let mut t = crate::text_table::new(&["model", "kernels", "standalone ms"], 1);
    for m in r.models.iter().chain([&r.short, &r.long]) {
        t.add_row(vec![
            m.name.clone(),
            m.kernels.to_string(),
            format!("{:.3}", m.standalone_ms),
        ]);
    }
    s.push_str(&crate::text_table::lines(&t));
    let _ = writeln!(
        s,
        "Fig. 11 serial capacity {:.1} req/s; Fig. 12 ({} : {}) {:.1} req/s",
        r.capacity_rps, r.short.name, r.long.name, r.fig12_capacity_rps
    );
    let _ = writeln!(
        s,
        "paella: backlog B = the device's dispatch path; deficit threshold {}",
        r.deficit_threshold
            .map_or_else(|| "off (inf)".to_owned(), |t| format!("{t} kernels"))
    );
    let _ = writeln!(
        s,
        "clients: a pool per model, one request per instance at a time; Fig. 11 {} in flight ({} per model), Fig. 12 {} ({} {}, {} {})",
        r.concurrency[0],
        r.fig11_instances
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("/"),
        r.concurrency[1],
        r.short.name,
        r.fig12_instances[0],
        r.long.name,
        r.fig12_instances[1]
    );
    let _ = writeln!(
        s,
        "\nFig. 11: mix of equal GPU time per model, p99 ms / throughput req/s (* = sustains: throughput >= {SUSTAIN} x the rate that arrived)"
    );
    let policies: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for p in &r.fig11 {
            if !v.contains(&p.policy.as_str()) {
                v.push(&p.policy);
            }
        }
        v
    };
    let sigmas: Vec<f64> = {
        let mut v: Vec<f64> = r.fig11.iter().map(|p| p.sigma).collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    };
    let fig11: Vec<Cell<'_>> = r
        .fig11
        .iter()
        .map(|x| Cell {
            sigma: x.sigma,
            policy: &x.policy,
            load: x.load_rps,
            text: format!("{:.2} / {:.1}", x.p99_ms, x.throughput_rps),
        })
        .collect();
    write_figure(&mut s, &sigmas, &policies, &fig11, |sigma, l, p| {
        sustains(&r.sustained, 11, sigma, l, p)
    });
    let _ = writeln!(
        s,
        "\nFig. 12: {} (short) beside {} (long), p99 ms short / long (* = sustains)",
        r.short.name, r.long.name
    );
    let fig12: Vec<Cell<'_>> = r
        .fig12
        .iter()
        .map(|x| Cell {
            sigma: x.sigma,
            policy: &x.policy,
            load: x.load_rps,
            text: format!("{:.2} / {:.2}", x.short_p99_ms, x.long_p99_ms),
        })
        .collect();
    write_figure(&mut s, &sigmas, &policies, &fig12, |sigma, l, p| {
        sustains(&r.sustained, 12, sigma, l, p)
    });
    let _ = writeln!(s, "\nGoals:");
    for g in &r.goals {
        let sat: Vec<String> = g
            .fig11_saturation_rps
            .iter()
            .map(|(p, l)| format!("{p} {l:.1}"))
            .collect();
        let _ = writeln!(
            s,
            "  sigma {}: Fig. 11 highest sustained load (req/s): {}; paella >= streams: {}",
            g.sigma,
            sat.join(", "),
            if g.fig11_met { "met" } else { "NOT met" }
        );
        let _ = writeln!(
            s,
            "  sigma {}: Fig. 12 short p99 streams/paella at {}: {} (goal >= 2: {})",
            g.sigma,
            g.fig12_load_rps
                .map_or("no load both sustain".to_owned(), |l| format!(
                    "{l:.1} req/s"
                )),
            g.fig12_short_p99_ratio
                .map_or("-".to_owned(), |x| format!("{x:.2}x")),
            if g.fig12_met { "met" } else { "NOT met" }
        );
    }
    s
}

/// A progress line on stderr.
pub fn stderr_progress() -> impl FnMut(Progress) + Send {
    crate::runs::stderr_progress("bench paella")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lognormal_gaps_have_the_asked_mean() {
        let ts = lognormal_arrivals(1e6, 1.5, 20_000_000_000, 3);
        let mean = 20e9 / ts.len() as f64;
        assert!((mean / 1e6 - 1.0).abs() < 0.2, "mean gap {mean} ns");
    }

    #[test]
    fn fig12_gives_each_model_the_same_gpu_time() {
        let (rs, rl) = fig12_rates(100.0, 1.5, 30.0);
        assert!((rs * 1.5 - rl * 30.0).abs() < 1e-9);
        assert!((rs + rl - 100.0).abs() < 1e-9);
    }

    /// Arrived requests per second of the window, per (fig, σ), in load
    /// order.
    fn arrivals(r: &PaellaBenchResult) -> Vec<(u8, f64, Vec<f64>)> {
        let mut out: Vec<(u8, f64, Vec<f64>)> = Vec::new();
        for x in &r.sustained {
            match out
                .iter_mut()
                .find(|(f, s, _)| *f == x.fig && *s == x.sigma)
            {
                Some((_, _, v)) => v.push(x.arrived_rps),
                None => out.push((x.fig, x.sigma, vec![x.arrived_rps])),
            }
        }
        out
    }

    #[test]
    fn every_load_replays_one_arrival_trace_scaled() {
        // Independent draws per load made the realised rate of a σ = 2
        // window fall as the offered load rose, and the saturation search
        // stepped through unrelated windows. One trace scaled by the mean
        // gives every higher load at least the arrivals of a lower one.
        let opts = PaellaBenchOptions {
            seconds: 0.5,
            loads: vec![0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6],
            sigmas: vec![1.5, 2.0],
            policies: vec![PolicyKind::Seq],
            jobs: 2,
            ..PaellaBenchOptions::default()
        };
        let r = run(&opts, &mut |_| {}).expect("runs");
        for (fig, sigma, rates) in arrivals(&r) {
            assert!(
                rates.windows(2).all(|w| w[0] <= w[1]),
                "fig {fig} sigma {sigma}: arrivals per second by load {rates:?}"
            );
        }
    }

    #[test]
    fn the_default_window_gives_every_p99_enough_samples_after_warm_up() {
        // The lowest default load, every default σ: a p99 over fewer than
        // MIN_P99_SAMPLES latencies is one of the few largest.
        let d = PaellaBenchOptions::default();
        let opts = PaellaBenchOptions {
            loads: vec![d.loads[0]],
            policies: vec![PolicyKind::Streams],
            jobs: 2,
            ..d
        };
        let r = run(&opts, &mut |_| {}).expect("runs");
        let arrived = |fig: u8, sigma: f64| {
            r.sustained
                .iter()
                .find(|x| x.fig == fig && x.sigma == sigma)
                .map(|x| x.arrived_rps * opts.seconds)
                .expect("arrivals")
        };
        for p in &r.fig11 {
            assert!(p.samples >= MIN_P99_SAMPLES, "{p:?}");
            // The warm-up's arrivals are not measured.
            assert!((p.samples as f64) < arrived(11, p.sigma), "{p:?}");
        }
        for p in &r.fig12 {
            assert!(p.short_samples >= MIN_P99_SAMPLES, "{p:?}");
            let n = (p.short_samples + p.long_samples) as f64;
            assert!(n < arrived(12, p.sigma), "{p:?}");
        }
    }

    #[test]
    fn a_p99_over_too_few_samples_does_not_count_for_the_goals() {
        let opts = PaellaBenchOptions {
            seconds: 0.05,
            loads: vec![0.2],
            sigmas: vec![1.5],
            policies: vec![PolicyKind::Paella, PolicyKind::Streams],
            jobs: 2,
            ..PaellaBenchOptions::default()
        };
        let r = run(&opts, &mut |_| {}).expect("runs");
        assert!(r.fig12.iter().all(|p| p.short_samples < MIN_P99_SAMPLES));
        for g in &r.goals {
            assert_eq!(g.fig12_short_p99_ratio, None, "{g:?}");
            assert!(!g.fig12_met, "{g:?}");
        }
    }

    /// Sensitivity report, not a check (`docs/performance.md`, Paella
    /// section): a backlog of resnet18 (and inception) requests all at t = 0
    /// over 16 clients per model, drained by `streams`, `seq` and `paella`
    /// under several of its parameters, none of which the paper gives
    /// (B, the deficit threshold; launch ahead is sluice's own). Prints the
    /// makespan, the short model's last and mean finish, and CU-busy
    /// utilisation. Simulated, mi50 profile.
    ///
    /// `cargo test -p sluice-bench --release --lib paella_drain_sensitivity -- --ignored --nocapture`
    #[test]
    #[ignore = "prints a sensitivity table"]
    fn paella_drain_sensitivity() {
        use sluice_sched::paella::{Backlog, Paella, PaellaConfig};
        let profile = DeviceProfile::builtin("mi50").expect("mi50");
        let models = Arc::new(ModelRegistry::builtin());
        let (s, _) = models.lookup(PAPER_SHORT).expect("resnet18");
        let (l, _) = models.lookup(PAPER_LONG).expect("inception");
        let d = PaellaConfig::default();
        let configs: [(&str, Option<PaellaConfig>); 10] = [
            ("streams", None),
            ("seq", None),
            ("paella", Some(d)),
            (
                "B=8 blocks",
                Some(PaellaConfig {
                    backlog: Backlog::Blocks(8),
                    ..d
                }),
            ),
            (
                "launch_ahead=0",
                Some(PaellaConfig {
                    launch_ahead: 0,
                    ..d
                }),
            ),
            (
                "B=64",
                Some(PaellaConfig {
                    backlog: Backlog::Blocks(64),
                    ..d
                }),
            ),
            (
                "B=1000",
                Some(PaellaConfig {
                    backlog: Backlog::Blocks(1000),
                    ..d
                }),
            ),
            (
                "threshold=inf",
                Some(PaellaConfig {
                    deficit_threshold: f64::INFINITY,
                    ..d
                }),
            ),
            (
                "threshold=inf,B=1000",
                Some(PaellaConfig {
                    deficit_threshold: f64::INFINITY,
                    backlog: Backlog::Blocks(1000),
                    ..d
                }),
            ),
            (
                "threshold=64",
                Some(PaellaConfig {
                    deficit_threshold: 64.0,
                    ..d
                }),
            ),
        ];
        println!("simulated, mi50 profile; all requests at t = 0, 16 clients per model");
        for (ns, nl) in [(40u32, 0u32), (40, 10)] {
            for (name, cfg) in configs {
                let k = 16u32;
                let mut clients = Vec::new();
                for (m, n) in [(s, ns), (l, nl)] {
                    for c in 0..k.min(n) {
                        let cnt = n / k + u32::from(c < n % k);
                        clients.push(ClientSpec {
                            priority: Priority::BestEffort,
                            model: m,
                            arrival: Arrival::Trace(vec![0; cnt as usize]),
                        });
                    }
                }
                let w = Workload {
                    clients,
                    duration_ns: 1,
                };
                let mut policy: Box<dyn sluice_sched::Policy> = match (name, cfg) {
                    (_, Some(c)) => Box::new(Paella::with_config(&models, c)),
                    ("seq", None) => make_policy(PolicyKind::Seq, &models),
                    _ => make_policy(PolicyKind::Streams, &models),
                };
                let mut gpu = GpuSim::new(profile.clone());
                let r = workload::run_on(&mut gpu, &models, policy.as_mut(), &w);
                let ms = |t: Ns| t as f64 / 1e6;
                let short: Vec<Ns> = r
                    .done
                    .iter()
                    .filter(|x| x.task.model == s)
                    .map(|x| x.finished)
                    .collect();
                let last = short.iter().copied().max().unwrap_or(0);
                let mean = short.iter().sum::<Ns>() / (short.len().max(1) as Ns);
                let end = r.done.iter().map(|x| x.finished).max().unwrap_or(0);
                println!(
                    "{ns:3} resnet18 + {nl:2} inception  {name:<22} makespan {:7.2} ms  resnet18 last {:7.2} mean {:7.2} ms  util {:.2}",
                    ms(end),
                    ms(last),
                    ms(mean),
                    r.utilisation
                );
            }
        }
    }

    #[test]
    fn a_long_model_that_is_unknown_or_the_short_one_is_refused() {
        for (long, says) in [
            ("resnet18", "short model"),
            ("nope", "no such built-in model"),
            ("mobilenet", "not longer than resnet18"),
        ] {
            let opts = PaellaBenchOptions {
                long: Some(long.to_owned()),
                ..PaellaBenchOptions::default()
            };
            let e = run(&opts, &mut |_| {}).expect_err(long).to_string();
            assert!(e.contains(long) && e.contains(says), "{e}");
        }
        let opts = PaellaBenchOptions {
            seconds: 0.05,
            loads: vec![0.5],
            sigmas: vec![1.5],
            policies: vec![PolicyKind::Paella],
            long: Some("resnet50".to_owned()),
            jobs: 1,
            ..PaellaBenchOptions::default()
        };
        let r = run(&opts, &mut |_| {}).expect("runs");
        assert_eq!(r.long.name, "resnet50");
    }

    #[test]
    fn the_pools_follow_the_artifacts_split_of_its_concurrency() {
        // gen_data_fig12_paella.sh: --concurrency 125, resnet18 0.952 119,
        // inception 0.048 6; gen_data_fig11_paella.sh: --concurrency 187 and
        // eight models with their instance counts.
        assert_eq!(instances(125, 0.952), 119);
        assert_eq!(instances(125, 0.048), 6);
        for (share, n) in [
            (0.257, 48),
            (0.0706, 13),
            (0.0546, 10),
            (0.0138, 3),
            (0.272, 51),
            (0.168, 31),
            (0.0745, 14),
            (0.0895, 17),
        ] {
            assert_eq!(instances(187, share), n, "share {share}");
        }
        assert_eq!(instances(10, 0.001), 1, "every model gets an instance");
        // Fig. 11's proportions are equal GPU time over Table 2's TVM times.
        let table2_ms = [1.58, 1.67, 2.55, 4.79, 5.76, 6.08, 7.86, 31.2];
        let artifact = [0.272, 0.257, 0.168, 0.0895, 0.0745, 0.0706, 0.0546, 0.0138];
        for (s, a) in gpu_time_shares(&table2_ms).iter().zip(artifact) {
            assert!((s - a).abs() < 0.0006, "{s} against the artifact's {a}");
        }
        // A point's clients: one pool per model, every instance with the
        // model's whole trace, and every arrival in exactly one trace.
        let (clients, model, traces) = clients_for(
            &[7, 9],
            &[0.8, 0.2],
            2000.0,
            1.5,
            1_000_000_000,
            &[instances(125, 0.8), instances(125, 0.2)],
            3,
        );
        assert_eq!(clients.len(), 125);
        assert_eq!(model.iter().filter(|&&m| m == 0).count(), 100);
        assert_eq!(model.iter().filter(|&&m| m == 1).count(), 25);
        let all = lognormal_arrivals(1e9 / 2000.0, 1.5, 1_000_000_000, 3);
        assert_eq!(traces.iter().map(Vec::len).sum::<usize>(), all.len());
        for (c, m) in clients.iter().zip(&model) {
            assert_eq!(c.model, [7, 9][*m]);
            match &c.arrival {
                Arrival::Pool { pool, times } => {
                    assert_eq!(*pool as usize, *m);
                    assert_eq!(times[..], traces[*m][..]);
                }
                other => panic!("not pooled: {other:?}"),
            }
        }
    }

    #[test]
    fn a_threshold_that_is_not_positive_is_refused_and_a_given_one_is_reported() {
        for t in [0.0, -1.0, f64::NAN] {
            let opts = PaellaBenchOptions {
                deficit_threshold: Some(t),
                ..PaellaBenchOptions::default()
            };
            let e = run(&opts, &mut |_| {}).expect_err("refused").to_string();
            assert!(e.contains("not positive"), "{e}");
        }
        let small = |t| PaellaBenchOptions {
            seconds: 0.05,
            loads: vec![0.5],
            sigmas: vec![1.5],
            policies: vec![PolicyKind::Paella],
            deficit_threshold: t,
            jobs: 1,
            ..PaellaBenchOptions::default()
        };
        let r = run(&small(Some(64.0)), &mut |_| {}).expect("runs");
        assert_eq!(r.deficit_threshold, Some(64.0));
        let r = run(&small(Some(f64::INFINITY)), &mut |_| {}).expect("runs");
        assert_eq!(r.deficit_threshold, None, "fairness off is null");
        let r = run(&small(None), &mut |_| {}).expect("runs");
        assert_eq!(r.deficit_threshold, Some(PAPER_THRESHOLD), "the artifact's");
    }

    #[test]
    fn a_small_run_has_every_field_and_policy() {
        let opts = PaellaBenchOptions {
            seconds: 0.05,
            loads: vec![0.5],
            sigmas: vec![1.5],
            jobs: 2,
            ..PaellaBenchOptions::default()
        };
        let r = run(&opts, &mut |_| {}).expect("runs");
        let v = serde_json::to_value(&r).expect("serialises");
        assert_eq!(v["device"], "mi50");
        assert_eq!(v["simulated"], true);
        // The pools that ran: the artifact's concurrency split by share
        // (both figures by GPU time).
        assert_eq!(v["concurrency"], serde_json::json!([187, 125]));
        let f11: Vec<u64> = v["fig11_instances"]
            .as_array()
            .expect("array")
            .iter()
            .map(|n| n.as_u64().expect("count"))
            .collect();
        let ms: Vec<f64> = r.models.iter().map(|m| m.standalone_ms).collect();
        let want: Vec<u64> = gpu_time_shares(&ms)
            .iter()
            .map(|&s| u64::from(instances(187, s)))
            .collect();
        assert_eq!(f11, want);
        // The shortest model has the most instances, the longest the fewest.
        let (short, long) = ms.iter().enumerate().fold((0, 0), |(a, b), (i, &t)| {
            (if t < ms[a] { i } else { a }, if t > ms[b] { i } else { b })
        });
        assert!(f11[short] > f11[long], "{f11:?} for {ms:?}");
        let f12 = &v["fig12_instances"];
        assert_eq!(f12[0].as_u64().unwrap() + f12[1].as_u64().unwrap(), 125);
        assert!(
            f12[0].as_u64() > f12[1].as_u64(),
            "more short instances: {f12}"
        );
        for (fig, fields) in [
            (
                "fig11",
                &[
                    "sigma",
                    "policy",
                    "load_rps",
                    "p99_ms",
                    "samples",
                    "throughput_rps",
                ][..],
            ),
            (
                "fig12",
                &[
                    "sigma",
                    "policy",
                    "load_rps",
                    "short_p99_ms",
                    "long_p99_ms",
                    "short_samples",
                    "long_samples",
                ][..],
            ),
        ] {
            let pts = v[fig].as_array().expect("array");
            assert_eq!(pts.len(), POLICIES.len(), "{fig}");
            for p in pts {
                let keys: Vec<&str> = p
                    .as_object()
                    .expect("object")
                    .keys()
                    .map(|k| k.as_str())
                    .collect();
                let mut want = fields.to_vec();
                want.sort_unstable();
                let mut got = keys.clone();
                got.sort_unstable();
                assert_eq!(got, want, "{fig}");
                assert!(p["load_rps"].as_f64().expect("number") > 0.0);
            }
            for k in POLICIES {
                assert!(
                    pts.iter().any(|p| p["policy"] == k.as_str()),
                    "{fig}: {k} missing"
                );
            }
        }
        assert!(!table(&r).is_empty());
    }
}
