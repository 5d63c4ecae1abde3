//! `sluice demo`: an embedded daemon, one periodic real-time client beside
//! several closed-loop best-effort clients (REEF's DISB workload C), each a
//! separate process, run once per scheduler, and a verdict per scheduler.
//!
//! # What runs
//!
//! - **Workload C** of DISB ([`crate::disb`]): one real-time `vgg19`
//!   client, uniform arrivals at 50 % of the model's standalone maximum
//!   (one request every 2 × its standalone time), and five closed-loop
//!   best-effort clients, one per DISB model. `--rt-model`,
//!   `--rt-period-ms` and `--be-models` change it.
//! - **The reference, "alone"**: the real-time client with no best-effort
//!   client. This is what the `rt-only` policy gives the real-time client
//!   (REEF §6.2's reference: best-effort work dropped, real-time requests
//!   alone, in arrival order, on one stream). The daemon refuses `rt-only`
//!   itself (its best-effort clients would wait forever), so the reference
//!   starts no best-effort client and runs the daemon with `seq`: with no
//!   best-effort work, `seq` launches each real-time request alone on one
//!   stream in arrival order, the same schedule as `rt-only` (the test
//!   `seq_alone_is_rt_only` checks this on the GPU model). With the
//!   `fifo` device the reference is `fifo` alone.
//! - **Each scheduler** (default `reef`, then `streams`) with every client.
//!
//! # The verdict
//!
//! Per scheduler: the real-time client's p99 latency over the reference's,
//! both measured in this run on the **daemon's timestamps**: the completion
//! record's `finished_ns - received_ns`, from the dispatcher reading the
//! request off the ring to the device finishing it. On the simulated GPU
//! `finished_ns` is the model's completion time, so the figure does not
//! depend on when client processes get a CPU. The client-observed latency
//! (submit to completion seen by the client) is shown too; on a machine
//! with few cores it carries the processes' wake-up delays.
//!
//! Every output a client receives is compared with the simulated device's
//! reference function (not on a real backend, which computes the model).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::roles::ClientReport;
use crate::{embedded_config, temp_socket};
use sluice_model::ModelRegistry;
use sluice_sched::PolicyKind;
use sluice_service::Daemon;
use sluice_service::config::{BackendKind, Config, Scheduler};

/// A scheduler keeps the real-time client "as if alone" when its p99 is at
/// most this multiple of the reference's (REEF's bar: within 5 %).
pub const WITHIN: f64 = 1.05;

/// The real-time rate of DISB workload C: this fraction of the model's
/// standalone maximum throughput.
pub const RT_LOAD: f64 = crate::disb::WORKLOAD_C_RT_LOAD;

/// A phase whose requests waited longer than this (p99, µs) for the
/// daemon to read them gets a note under the verdicts.
pub const LAG_NOTE_US: u64 = 1_000;

/// Requests each best-effort client keeps in flight (see
/// [`crate::roles::Pattern::ClosedLoop`]).
pub const BE_WINDOW: u32 = 2;

/// The shortest run of one phase, ms (`--seconds` is split between the
/// phases).
pub const MIN_PHASE_MS: u64 = 500;

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Schedulers to compare (each against its reference).
    pub schedulers: Vec<Scheduler>,
    /// Total client run time, split between the phases.
    pub seconds: u64,
    /// Real-time model.
    pub rt_model: String,
    /// Real-time period, µs; `None`: workload C's rate ([`RT_LOAD`] of the
    /// model's standalone maximum).
    pub rt_period_us: Option<u64>,
    /// Best-effort models, one closed-loop client each.
    pub be_models: Vec<String>,
    /// The GPU backend.
    pub backend: BackendKind,
    /// `cuda` backend: full or small models.
    pub model_scale: sluice_nn::builders::Scale,
    /// `cuda` backend: a folder of ONNX files served instead of the
    /// builders of the same name (`models.dir`: the DISB models from
    /// `scripts/onnx/make-disb-models.py`, or a user's own).
    pub models_dir: Option<std::path::PathBuf>,
    /// Makes each phase's device instead of
    /// [`sluice_service::startup::make_device`] (the fake CUDA driver in
    /// tests); `None` in the product.
    pub device: Option<DeviceFactory>,
}

/// Makes the device of a daemon from its config and models (see
/// [`DemoOptions::device`]).
#[derive(Clone)]
pub struct DeviceFactory(
    #[allow(clippy::type_complexity)]
    pub  Arc<
        dyn Fn(&Config, Arc<ModelRegistry>) -> Result<Box<dyn sluice_backend::Backend>, String>
            + Send
            + Sync,
    >,
);

impl std::fmt::Debug for DeviceFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceFactory")
    }
}

/// The device of a phase: `opts.device`'s, or the daemon's own.
fn make_device(
    opts: &DemoOptions,
    config: &Config,
    models: Arc<ModelRegistry>,
) -> Result<Box<dyn sluice_backend::Backend>, String> {
    match &opts.device {
        Some(f) => (f.0)(config, models),
        None => sluice_service::startup::make_device(config, models).map_err(|e| e.to_string()),
    }
}

/// One daemon run: a scheduler and the clients it served.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Phase {
    /// Scheduler the daemon ran.
    pub scheduler: String,
    /// `true` for a reference run (real-time client alone).
    pub alone: bool,
    /// Device name.
    pub device: String,
    /// Whether the device is simulated (the CUDA fallback included).
    pub simulated: bool,
    /// How long the clients ran, s.
    pub seconds: f64,
    /// Standalone time per model on this device, µs (empty on a real
    /// device): see [`standalone_ns`].
    pub standalone_us: BTreeMap<String, f64>,
    /// One report per client, best-effort clients first.
    pub clients: Vec<ClientReport>,
}

impl Phase {
    /// The real-time client's report.
    pub fn rt(&self) -> Option<&ClientReport> {
        self.clients.iter().find(|c| c.priority == "rt")
    }

    /// Best-effort requests completed per second.
    pub fn be_rate(&self) -> f64 {
        let n: u64 = self
            .clients
            .iter()
            .filter(|c| c.priority == "be")
            .map(|c| c.ok)
            .sum();
        n as f64 / self.seconds.max(1e-9)
    }
}

/// One scheduler's verdict against its reference.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// The scheduler judged.
    pub scheduler: String,
    /// Real-time p99 on the daemon's timestamps, µs.
    pub p99_us: u64,
    /// The reference's, µs.
    pub alone_p99_us: u64,
    /// `p99_us / alone_p99_us`.
    pub ratio: f64,
    /// The same ratio on the client-observed latencies.
    pub client_ratio: f64,
    /// `ratio <= WITHIN`.
    pub within: bool,
    /// Best-effort requests completed per second beside the RT client.
    pub be_per_s: f64,
}

/// The whole demo's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Demo {
    /// GPU model profile (`mi50`, ...).
    pub profile: String,
    /// Real-time model.
    pub rt_model: String,
    /// Real-time period, µs.
    pub rt_period_us: u64,
    /// Whether the period is workload C's (not `--rt-period-ms`).
    pub workload_c_rate: bool,
    /// Best-effort models.
    pub be_models: Vec<String>,
    /// Reference runs (real-time client alone).
    pub references: Vec<Phase>,
    /// One run per scheduler.
    pub runs: Vec<Phase>,
    /// One verdict per run.
    pub verdicts: Vec<Verdict>,
}

/// The scheduler the reference for `s` runs with (see the module docs).
pub fn reference_for(s: Scheduler) -> Scheduler {
    match s {
        Scheduler::Fifo => Scheduler::Fifo,
        Scheduler::Policy(_) => Scheduler::Policy(PolicyKind::Seq),
    }
}

/// The best-effort models of `sluice demo` by default: one of each DISB
/// model on the simulated GPU; on CUDA, `resnet152` (the real layers exist
/// for vgg19, resnet152, bert_base and gpt2 only, and the real-time vgg19
/// beside one best-effort client is the REEF-style pair docs/hardware.md
/// describes).
pub fn default_be_models(backend: BackendKind) -> Vec<String> {
    let names: &[&str] = match backend {
        BackendKind::Cuda => &["resnet152"],
        BackendKind::Sim | BackendKind::Cpu => &crate::disb::DISB_MODELS,
    };
    names.iter().map(|m| (*m).to_owned()).collect()
}

/// The schedulers `sluice demo` compares by default: `reef` against
/// `streams`.
pub fn default_schedulers() -> Vec<Scheduler> {
    vec![
        Scheduler::Policy(PolicyKind::Reef),
        Scheduler::Policy(PolicyKind::Streams),
    ]
}

/// A model's standalone time on the device of `config`, ns: on the GPU
/// model, one request alone on a fresh device of the profile, the figure
/// `sluice bench disb` reports ([`crate::disb::standalone_ns`]); on the
/// `fifo` device, the manifest total times `time_scale`, which is how long
/// that device runs it. `None` for a model it cannot time.
pub fn standalone_ns(config: &Config, models: &ModelRegistry, model: &str) -> Option<u64> {
    let (_, m) = models.lookup(model)?;
    match config.device.scheduler {
        Scheduler::Fifo => Some((m.total_time_ns as f64 * config.device.time_scale).round() as u64),
        Scheduler::Policy(_) => {
            let profile = sluice_gpu::DeviceProfile::builtin(&config.device.profile).ok()?;
            crate::disb::standalone_ns(&profile, m).ok()
        }
    }
}

/// The real-time model's standalone time the demo's rate follows, ns. On
/// the `cuda` backend measured on the device the phases run on, through
/// the daemon's server with the model's real layers (its ONNX file's, from
/// `--models`, or its builder's: [`rt_standalone_on_device_ns`]);
/// otherwise the GPU model's ([`standalone_ns`] under `seq`, also for
/// `fifo`, so every scheduler sees the same arrivals).
fn rt_standalone_ns(
    opts: &DemoOptions,
    probe: &Config,
    models: &Arc<ModelRegistry>,
) -> Result<u64, String> {
    if opts.backend == BackendKind::Cuda {
        return rt_standalone_on_device_ns(opts, probe, models);
    }
    let mut model_cfg = probe.clone();
    model_cfg.device.scheduler = Scheduler::Policy(PolicyKind::Seq);
    standalone_ns(&model_cfg, models, &opts.rt_model).ok_or_else(|| {
        format!(
            "cannot time {:?} on the {} profile; give --rt-period-ms",
            opts.rt_model, probe.device.profile
        )
    })
}

/// The real-time model's standalone time on the device of `probe`, ns:
/// a `seq` server of its models, one request alone, the median of
/// [`crate::disb::STANDALONE_REPS`] after one untimed
/// ([`crate::served::standalone_ns`]).
fn rt_standalone_on_device_ns(
    opts: &DemoOptions,
    probe: &Config,
    models: &Arc<ModelRegistry>,
) -> Result<u64, String> {
    let mut config = probe.clone();
    config.device.scheduler = Scheduler::Policy(PolicyKind::Seq);
    let (id, _) = models
        .lookup(&opts.rt_model)
        .ok_or_else(|| format!("no model named {:?}", opts.rt_model))?;
    let mut device = make_device(opts, &config, models.clone())
        .map_err(|e| format!("timing {} alone: {e}", opts.rt_model))?;
    let t = crate::served::standalone_ns(device.as_mut(), models, id, crate::disb::STANDALONE_REPS)
        .map_err(|e| format!("timing {} alone on {}: {e}", opts.rt_model, device.name()))?;
    eprintln!(
        "sluice demo: {} takes {:.0} us alone on {}; the real-time period is twice that \
         (workload C; --rt-period-ms overrides)",
        opts.rt_model,
        t as f64 / 1e3,
        device.name()
    );
    Ok(t)
}

/// Workload C's real-time period for a model of standalone time `t_ns`:
/// one request every `t_ns / RT_LOAD`, µs.
pub fn workload_c_period_us(t_ns: u64) -> u64 {
    ((t_ns as f64 / RT_LOAD) / 1e3).round().max(1.0) as u64
}

/// How long each of `phases` runs when `seconds` are split between them, ms.
pub fn phase_ms(seconds: u64, phases: usize) -> u64 {
    (seconds.saturating_mul(1000) / phases.max(1) as u64).max(MIN_PHASE_MS)
}

/// What the client processes of one phase share.
struct Clients<'a> {
    exe: &'a Path,
    socket: &'a Path,
    duration_ms: u64,
    /// Whether they check outputs (simulated device).
    check: bool,
}

fn spawn_client(
    c: &Clients<'_>,
    model: &str,
    priority: &str,
    period_us: Option<u64>,
) -> Result<Child, String> {
    let name = format!("{priority}-{model}");
    let mut cmd = Command::new(c.exe);
    cmd.arg("__client")
        .arg("--socket")
        .arg(c.socket)
        .args(["--name", &name, "--model", model, "--priority", priority])
        .args(["--duration-ms", &c.duration_ms.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match period_us {
        Some(p) => cmd.args(["--period-us", &p.to_string()]),
        None => cmd.args(["--window", &BE_WINDOW.to_string()]),
    };
    if !c.check {
        cmd.arg("--no-check");
    }
    cmd.spawn()
        .map_err(|e| format!("cannot start client process {}: {e}", c.exe.display()))
}

fn config_for(opts: &DemoOptions, socket: std::path::PathBuf, sch: Scheduler) -> Config {
    let mut config = embedded_config(socket, 100);
    config.device.scheduler = sch;
    config.device.backend = opts.backend;
    config.device.model_scale = opts.model_scale;
    if opts.backend == BackendKind::Cuda {
        config.models.dir.clone_from(&opts.models_dir);
    }
    config
}

fn check_models(models: &ModelRegistry, names: &[&String]) -> Result<(), String> {
    for m in names {
        if models.lookup(m).is_none() {
            let have: Vec<_> = models.iter().map(|(_, m)| m.name().to_owned()).collect();
            return Err(format!(
                "no model named {m:?}; choose one of {}",
                have.join(", ")
            ));
        }
    }
    Ok(())
}

/// Runs one phase: a daemon with `sch`, the real-time client, and the
/// best-effort clients unless `alone`.
fn run_phase(
    exe: &Path,
    opts: &DemoOptions,
    sch: Scheduler,
    alone: bool,
    period_us: u64,
    duration_ms: u64,
    label: &str,
) -> Result<Phase, String> {
    let socket = temp_socket("demo").map_err(|e| format!("temporary directory: {e}"))?;
    let config = config_for(opts, socket.clone(), sch);
    let models =
        Arc::new(sluice_service::startup::load_models(&config).map_err(|e| e.to_string())?);
    let mut names = vec![&opts.rt_model];
    names.extend(&opts.be_models);
    check_models(&models, &names)?;
    let device = make_device(opts, &config, models.clone())?;
    let device_name = device.name().to_owned();
    let simulated = device.simulated();
    let mut standalone_us = BTreeMap::new();
    if simulated {
        for m in &names {
            if let Some(t) = standalone_ns(&config, &models, m) {
                standalone_us.insert((*m).clone(), t as f64 / 1e3);
            }
        }
    }
    let mut daemon = Daemon::start(config, models, device).map_err(|e| e.to_string())?;
    let clients = Clients {
        exe,
        socket: &socket,
        duration_ms,
        check: simulated,
    };
    let mut children = Vec::new();
    let spawned = (|| -> Result<(), String> {
        if !alone {
            for m in &opts.be_models {
                children.push(spawn_client(&clients, m, "be", None)?);
            }
        }
        children.push(spawn_client(
            &clients,
            &opts.rt_model,
            "rt",
            Some(period_us),
        )?);
        Ok(())
    })();
    let start = Instant::now();
    let total = Duration::from_millis(duration_ms);
    if spawned.is_ok() {
        progress(&daemon, start, total, label, children.len());
    }
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for child in children {
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for a client: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        match serde_json::from_str::<ClientReport>(text.trim()) {
            Ok(r) if out.status.success() => reports.push(r),
            _ => failures.push(format!(
                "client exited with {} ({})",
                out.status,
                text.trim()
            )),
        }
    }
    let seconds = start.elapsed().as_secs_f64().min(total.as_secs_f64());
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(socket.parent().unwrap_or(Path::new("/nonexistent")));
    spawned?;
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    Ok(Phase {
        scheduler: sch.as_str().to_owned(),
        alone,
        device: device_name,
        simulated,
        seconds,
        standalone_us,
        clients: reports,
    })
}

fn progress(daemon: &Daemon, start: Instant, total: Duration, label: &str, n: usize) {
    if !std::io::stderr().is_terminal() {
        eprintln!(
            "sluice demo: {label}: {n} client process{} for {:.1} s ...",
            if n == 1 { "" } else { "es" },
            total.as_secs_f64()
        );
        return;
    }
    while start.elapsed() < total {
        let done = start.elapsed().as_secs_f64() / total.as_secs_f64();
        let filled = ((done * 30.0) as usize).min(30);
        let st = daemon.shared().status();
        eprint!(
            "\r{label:<8} [{}{}] {:>4.1}/{:.1} s  completed {:>6}  errors {}",
            "#".repeat(filled),
            ".".repeat(30 - filled),
            start.elapsed().as_secs_f64(),
            total.as_secs_f64(),
            st.completed,
            st.errors
        );
        let _ = std::io::stderr().flush();
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!();
}

/// Runs the demo: the references, then each scheduler. `exe` is the
/// `sluice` binary (for the client processes).
pub fn run(exe: &Path, opts: &DemoOptions) -> Result<Demo, String> {
    if opts.schedulers.is_empty() {
        return Err("no scheduler to compare; name one with --scheduler".into());
    }
    let probe = config_for(opts, "/nonexistent".into(), opts.schedulers[0]);
    let models = Arc::new(sluice_service::startup::load_models(&probe).map_err(|e| e.to_string())?);
    let mut names = vec![&opts.rt_model];
    names.extend(&opts.be_models);
    check_models(&models, &names)?;
    let period_us = match opts.rt_period_us {
        Some(p) => p,
        None => workload_c_period_us(rt_standalone_ns(opts, &probe, &models)?),
    };
    let mut refs: Vec<Scheduler> = Vec::new();
    for s in &opts.schedulers {
        let r = reference_for(*s);
        if !refs.contains(&r) {
            refs.push(r);
        }
    }
    let each_ms = phase_ms(opts.seconds, refs.len() + opts.schedulers.len());
    let mut references = Vec::new();
    for r in &refs {
        let label = format!("alone ({})", r.as_str());
        let p = run_phase(exe, opts, *r, true, period_us, each_ms, &label)
            .map_err(|e| format!("reference run ({}): {e}", r.as_str()))?;
        references.push(p);
    }
    let mut runs = Vec::new();
    for s in &opts.schedulers {
        let p = run_phase(exe, opts, *s, false, period_us, each_ms, s.as_str())
            .map_err(|e| format!("scheduler {}: {e}", s.as_str()))?;
        runs.push(p);
    }
    let verdicts = runs
        .iter()
        .zip(&opts.schedulers)
        .filter_map(|(run, s)| {
            let r = reference_for(*s);
            let alone = refs
                .iter()
                .position(|x| *x == r)
                .and_then(|i| references.get(i))?;
            verdict(run, alone)
        })
        .collect();
    Ok(Demo {
        profile: probe.device.profile.clone(),
        rt_model: opts.rt_model.clone(),
        rt_period_us: period_us,
        workload_c_rate: opts.rt_period_us.is_none(),
        be_models: opts.be_models.clone(),
        references,
        runs,
        verdicts,
    })
}

/// `run`'s real-time p99 against `alone`'s, on the daemon's timestamps.
/// `None` when either has no real-time completion.
pub fn verdict(run: &Phase, alone: &Phase) -> Option<Verdict> {
    let (rt, a) = (run.rt()?, alone.rt()?);
    if rt.daemon_latency_us.count == 0 || a.daemon_latency_us.count == 0 {
        return None;
    }
    let ratio = rt.daemon_latency_us.p99 as f64 / a.daemon_latency_us.p99.max(1) as f64;
    let client_ratio = rt.latency_us.p99 as f64 / a.latency_us.p99.max(1) as f64;
    Some(Verdict {
        scheduler: run.scheduler.clone(),
        p99_us: rt.daemon_latency_us.p99,
        alone_p99_us: a.daemon_latency_us.p99,
        ratio,
        client_ratio,
        within: ratio <= WITHIN,
        be_per_s: run.be_rate(),
    })
}

/// One verdict line: `reef: RT p99 1.00× alone (...)`.
pub fn verdict_line(v: &Verdict, width: usize) -> String {
    let judged = if v.within {
        format!(
            "within {:.0} % of alone: the best-effort clients do not delay it",
            (WITHIN - 1.0) * 100.0
        )
    } else {
        format!(
            "{:.1}× slower than alone: the best-effort clients delay it",
            v.ratio
        )
    };
    format!(
        "{:<width$} RT p99 {:.2}× alone ({:.2} ms; alone {:.2} ms) — {judged}; best-effort done: {:.0} req/s",
        format!("{}:", v.scheduler),
        v.ratio,
        v.p99_us as f64 / 1e3,
        v.alone_p99_us as f64 / 1e3,
        v.be_per_s,
    )
}

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1e3)
}

fn phase_table(s: &mut String, p: &Phase) {
    let title = if p.alone {
        format!(
            "alone — reference: the real-time client with no best-effort client, scheduler {}",
            p.scheduler
        )
    } else {
        format!("{} — every client", p.scheduler)
    };
    let _ = writeln!(s, "{title}   ({:.1} s; device: {})", p.seconds, p.device);
    let _ = writeln!(
        s,
        "  {:<16} {:<10} {:>3} {:>8} {:>6} │ {:>7} {:>7} {:>7} │ {:>7} {:>7} {:>7} │ {:>7} │ {:>10}",
        "client",
        "model",
        "cls",
        "requests",
        "errors",
        "d.p50",
        "d.p99",
        "d.max",
        "c.p50",
        "c.p99",
        "c.max",
        "lag99",
        "standalone"
    );
    for c in &p.clients {
        let standalone = p
            .standalone_us
            .get(&c.model)
            .map_or_else(|| "–".to_owned(), |t| format!("{:.2}", t / 1e3));
        let _ = writeln!(
            s,
            "  {:<16} {:<10} {:>3} {:>8} {:>6} │ {:>7} {:>7} {:>7} │ {:>7} {:>7} {:>7} │ {:>7} │ {:>10}",
            c.name,
            c.model,
            c.priority,
            c.ok,
            c.errors + c.wrong_outputs,
            ms(c.daemon_latency_us.p50),
            ms(c.daemon_latency_us.p99),
            ms(c.daemon_latency_us.max),
            ms(c.latency_us.p50),
            ms(c.latency_us.p99),
            ms(c.latency_us.max),
            ms(c.ingest_lag_us.p99),
            standalone
        );
    }
}

/// What `sluice demo` prints: header, one table per run, the verdicts and
/// the footer that explains the columns.
pub fn report(d: &Demo) -> String {
    let mut s = String::new();
    let all = d.references.iter().chain(&d.runs);
    let simulated = all.clone().all(|p| p.simulated);
    let checked = all.clone().all(|p| p.clients.iter().all(|c| c.checked));
    let modeled = all.clone().any(|p| p.simulated && p.scheduler != "fifo");
    let device = if simulated && modeled {
        format!(
            "simulated GPU (GPU model, {} profile): latencies are the model's, not measured on a GPU",
            d.profile
        )
    } else if simulated {
        "simulated GPU (`fifo` device: manifest times): not measured on a GPU".to_owned()
    } else {
        "measured on this GPU".to_owned()
    };
    let _ = writeln!(s, "sluice demo — {device}");
    let rate = if d.workload_c_rate {
        format!(", {:.0} % of its standalone maximum", RT_LOAD * 100.0)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "workload{}: 1 real-time client ({}, one request every {:.2} ms{rate}) + {} closed-loop best-effort clients ({})",
        if d.workload_c_rate && d.be_models.len() == crate::disb::DISB_MODELS.len() {
            " (DISB C)"
        } else {
            ""
        },
        d.rt_model,
        d.rt_period_us as f64 / 1e3,
        d.be_models.len(),
        d.be_models.join(", ")
    );
    let _ = writeln!(
        s,
        "outputs: {}\n",
        if checked {
            "every one checked against the reference function"
        } else {
            "not checked (a real backend computes the model)"
        }
    );
    for p in d.references.iter().chain(&d.runs) {
        phase_table(&mut s, p);
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "verdict — real-time p99 on the daemon's timestamps, against the real-time client alone in this run:"
    );
    let width = d
        .verdicts
        .iter()
        .map(|v| v.scheduler.len() + 1)
        .max()
        .unwrap_or(0);
    for v in &d.verdicts {
        let _ = writeln!(s, "  {}", verdict_line(v, width));
    }
    if !d.verdicts.is_empty() {
        let client: Vec<String> = d
            .verdicts
            .iter()
            .map(|v| format!("{} {:.2}×", v.scheduler, v.client_ratio))
            .collect();
        let _ = writeln!(
            s,
            "  (client-observed RT p99 against alone: {}; includes the client processes' wake-ups)",
            client.join(", ")
        );
    }
    let behind: Vec<String> = d
        .references
        .iter()
        .chain(&d.runs)
        .filter_map(|p| {
            let lag = p.clients.iter().map(|c| c.ingest_lag_us.p99).max()?;
            (lag > LAG_NOTE_US).then(|| {
                let label = if p.alone { "alone" } else { &p.scheduler };
                format!("{label} {}", ms(lag))
            })
        })
        .collect();
    if !behind.is_empty() {
        let _ = writeln!(
            s,
            "  note: the daemon's GPU model ran behind real time (lag99, ms: {}): this machine cannot\n  \
             simulate these clients in real time. The daemon-side figures follow the model's clock and\n  \
             hold; the client-observed ones include the lag, and the real-time client, one request in\n  \
             flight, completed fewer requests than its period asks.",
            behind.join(", ")
        );
    }
    s.push('\n');
    s.push_str(FOOTER);
    s
}

/// The footer under the report.
pub const FOOTER: &str = "\
columns (times in ms):
  requests    completed with status OK and, where checked, the right output
  errors      error completions plus wrong outputs (the demo fails if any)
  d.p50/p99/max  daemon-side latency: finished_ns − received_ns of the completion record, from the
              daemon reading the request off the ring to the device finishing it (on the simulated
              GPU, the model's completion time); the verdict uses these
  c.p50/p99/max  client-observed latency: submit → completion seen by the client process; adds the
              request path and the client's wake-up, which depends on how busy this machine's CPUs
              are (the alone run has one client process, the others six)
  lag99       p99 of submit → the daemon reading the request (received_ns less the client's submit
              time): large when the daemon's GPU model cannot keep up with real time on this machine
  standalone  one request alone on an idle device: on the GPU model, a fresh device of the same
              profile, the figure `sluice bench disb` reports; on `fifo`, the manifest time
alone: what the `rt-only` policy gives the real-time client (best-effort work dropped); the daemon
  refuses `rt-only`, so the reference starts no best-effort client and runs `seq`, which then gives
  the same schedule (real-time requests alone, in arrival order, on one stream)
best-effort done: best-effort requests completed per second beside the real-time client
";

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_stats::Summary;

    #[test]
    fn the_default_models_exist_on_each_backend() {
        let builtin = ModelRegistry::builtin();
        for m in default_be_models(BackendKind::Sim) {
            assert!(
                builtin.lookup(&m).is_some(),
                "{m} is not a built-in manifest"
            );
        }
        let cuda = default_be_models(BackendKind::Cuda);
        assert!(!cuda.is_empty());
        for m in cuda {
            assert!(
                sluice_nn::builders::MODEL_NAMES.contains(&m.as_str()),
                "{m} has no real layers on cuda"
            );
        }
    }

    fn summary(p50: u64, p99: u64) -> Summary {
        Summary {
            count: 100,
            mean: p50 as f64,
            min: p50,
            p50,
            p99,
            p999: p99,
            max: p99,
        }
    }

    fn client(
        priority: &str,
        model: &str,
        ok: u64,
        daemon_p99: u64,
        client_p99: u64,
    ) -> ClientReport {
        ClientReport {
            name: format!("{priority}-{model}"),
            model: model.into(),
            priority: priority.into(),
            ok,
            errors: 0,
            wrong_outputs: 0,
            checked: true,
            latency_us: summary(client_p99.saturating_sub(100), client_p99),
            daemon_latency_us: summary(daemon_p99.saturating_sub(10), daemon_p99),
            ingest_lag_us: summary(50, 200),
            queue_wait_p50_us: 0,
            standalone_us: 0,
        }
    }

    fn phase(scheduler: &str, alone: bool, clients: Vec<ClientReport>) -> Phase {
        Phase {
            scheduler: scheduler.into(),
            alone,
            device: format!("modeled mi50 GPU, policy {scheduler}"),
            simulated: true,
            seconds: 2.0,
            standalone_us: [("vgg19".to_owned(), 4039.0)].into(),
            clients,
        }
    }

    #[test]
    fn verdict_is_the_daemon_side_p99_ratio_with_a_5_percent_bar() {
        let alone = phase("seq", true, vec![client("rt", "vgg19", 250, 4000, 4200)]);
        let near = phase(
            "reef",
            false,
            vec![
                client("be", "resnet152", 300, 30_000, 31_000),
                client("rt", "vgg19", 250, 4200, 9000),
            ],
        );
        let v = verdict(&near, &alone).unwrap();
        assert_eq!((v.p99_us, v.alone_p99_us), (4200, 4000));
        assert!((v.ratio - 1.05).abs() < 1e-9 && v.within, "{v:?}");
        // The client-observed figure is reported, not judged.
        assert!((v.client_ratio - 9000.0 / 4200.0).abs() < 1e-9);
        assert!((v.be_per_s - 150.0).abs() < 1e-9);
        let far = phase(
            "streams",
            false,
            vec![client("rt", "vgg19", 250, 4201, 4300)],
        );
        assert!(!verdict(&far, &alone).unwrap().within);
        // No real-time completions: no verdict rather than a made-up one.
        let none = phase("reef", false, vec![client("be", "gpt2", 1, 10, 20)]);
        assert_eq!(verdict(&none, &alone), None);
    }

    #[test]
    fn verdict_lines_and_report_say_what_they_measured() {
        let alone = phase("seq", true, vec![client("rt", "vgg19", 250, 4040, 4200)]);
        let reef = phase("reef", false, vec![client("rt", "vgg19", 250, 4050, 5000)]);
        let streams = phase(
            "streams",
            false,
            vec![client("rt", "vgg19", 250, 25_450, 26_000)],
        );
        let verdicts: Vec<_> = [&reef, &streams]
            .iter()
            .map(|r| verdict(r, &alone).unwrap())
            .collect();
        let line = verdict_line(&verdicts[0], 8);
        assert!(
            line.starts_with("reef:    RT p99 1.00× alone (4.05 ms; alone 4.04 ms)"),
            "{line}"
        );
        assert!(line.contains("within 5 %"), "{line}");
        let line = verdict_line(&verdicts[1], 8);
        assert!(line.starts_with("streams: RT p99 6.30× alone"), "{line}");
        assert!(line.contains("6.3× slower than alone"), "{line}");
        let d = Demo {
            profile: "mi50".into(),
            rt_model: "vgg19".into(),
            rt_period_us: 8078,
            workload_c_rate: true,
            be_models: crate::disb::DISB_MODELS
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
            references: vec![alone],
            runs: vec![reef, streams],
            verdicts,
        };
        let r = report(&d);
        for want in [
            "simulated GPU (GPU model, mi50 profile)",
            "(DISB C)",
            "every 8.08 ms, 50 % of its standalone maximum",
            "every one checked",
            "alone — reference",
            "reef:    RT p99 1.00× alone",
            "streams: RT p99 6.30× alone",
            "client-observed RT p99 against alone: reef 1.19×, streams 6.19×",
            "finished_ns − received_ns",
            "`sluice bench disb` reports",
        ] {
            assert!(r.contains(want), "missing {want:?} in\n{r}");
        }
        assert!(!r.contains("ran behind real time"), "{r}");
        let mut d = d;
        d.runs[1].clients[0].ingest_lag_us = summary(40_000, 55_000);
        let r = report(&d);
        assert!(
            r.contains("ran behind real time (lag99, ms: streams 55.00)"),
            "{r}"
        );
        // The standalone column shows the measured figure, not the manifest.
        assert!(r.contains("4.04\n"), "{r}");
    }

    #[test]
    fn standalone_is_disb_s_and_the_rate_is_workload_c_s() {
        let models = ModelRegistry::builtin();
        let mut c = embedded_config("/nonexistent".into(), 0);
        c.device.scheduler = Scheduler::Policy(PolicyKind::Reef);
        let (_, m) = models.lookup("vgg19").unwrap();
        let disb =
            crate::disb::standalone_ns(&sluice_gpu::DeviceProfile::builtin("mi50").unwrap(), m)
                .unwrap();
        let t = standalone_ns(&c, &models, "vgg19").unwrap();
        assert_eq!(t, disb);
        assert_ne!(t, m.total_time_ns, "measured, not the manifest");
        assert_eq!(
            workload_c_period_us(t),
            ((2 * t) as f64 / 1e3).round() as u64
        );
        c.device.scheduler = Scheduler::Fifo;
        assert_eq!(standalone_ns(&c, &models, "vgg19"), Some(m.total_time_ns));
        assert_eq!(standalone_ns(&c, &models, "no-such-model"), None);
    }

    #[test]
    fn phases_split_the_seconds() {
        assert_eq!(phase_ms(10, 3), 3333);
        assert_eq!(phase_ms(3, 3), 1000);
        assert_eq!(phase_ms(1, 3), MIN_PHASE_MS);
        assert_eq!(
            reference_for(Scheduler::Policy(PolicyKind::Streams)),
            Scheduler::Policy(PolicyKind::Seq)
        );
        assert_eq!(reference_for(Scheduler::Fifo), Scheduler::Fifo);
    }

    /// The reference runs `seq` because the daemon refuses `rt-only`: with
    /// only real-time work they must give identical latencies.
    #[test]
    fn seq_alone_is_rt_only() {
        use shm_proto::Priority;
        use sluice_sched::workload::{Arrival, ClientSpec, Workload, run_on};
        let models = Arc::new(ModelRegistry::builtin());
        let profile = sluice_gpu::DeviceProfile::builtin("mi50").unwrap();
        let (vgg, m) = models.lookup("vgg19").unwrap();
        let t = crate::disb::standalone_ns(&profile, m).unwrap();
        let w = Workload {
            clients: vec![ClientSpec {
                priority: Priority::RealTime,
                model: vgg,
                arrival: Arrival::Uniform {
                    period_ns: 2 * t,
                    offset_ns: 1_000_000,
                },
            }],
            duration_ns: 200_000_000,
        };
        let lat = |kind| {
            let mut p = sluice_sched::make_policy(kind, &models);
            let mut gpu = sluice_gpusim::GpuSim::new(profile.clone());
            let r = run_on(&mut gpu, &models, p.as_mut(), &w);
            r.done
                .iter()
                .map(|d| (d.task.arrival, d.finished))
                .collect::<Vec<_>>()
        };
        let (rt_only, seq) = (lat(PolicyKind::RtOnly), lat(PolicyKind::Seq));
        assert!(rt_only.len() >= 15, "{}", rt_only.len());
        assert_eq!(rt_only, seq);
    }
}
