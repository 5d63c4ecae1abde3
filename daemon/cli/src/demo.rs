//! `sluice demo`: an embedded daemon on the simulated GPU, one real-time
//! client and one best-effort client as separate processes, and a table.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::roles::ClientReport;
use super::{embedded_config, temp_socket};
use sluice_service::Daemon;

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// How long the clients run.
    pub seconds: u64,
    /// Real-time model.
    pub rt_model: String,
    /// Real-time period, ms.
    pub rt_period_ms: u64,
    /// Best-effort model (closed loop).
    pub be_model: String,
    /// How the device schedules.
    pub scheduler: sluice_service::config::Scheduler,
    /// The GPU backend.
    pub backend: sluice_service::config::BackendKind,
    /// `cuda` backend: full or small models.
    pub model_scale: sluice_nn::builders::Scale,
}

/// The demo's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DemoResult {
    /// Scheduler name.
    pub scheduler: String,
    /// Device name.
    pub device: String,
    /// Whether the device is simulated (the fallback included).
    pub simulated: bool,
    /// One report per client.
    pub clients: Vec<ClientReport>,
}

/// What both demo clients share.
struct Clients<'a> {
    exe: &'a Path,
    socket: &'a Path,
    seconds: u64,
    /// Whether they check outputs (simulated device).
    check: bool,
}

fn spawn_client(
    c: &Clients<'_>,
    model: &str,
    priority: &str,
    period_ms: Option<u64>,
) -> Result<Child, String> {
    let Clients {
        exe,
        socket,
        seconds,
        check,
    } = *c;
    let name = format!("{priority}-{model}");
    let name = name.as_str();
    let mut cmd = Command::new(exe);
    cmd.arg("__client")
        .arg("--socket")
        .arg(socket)
        .args(["--name", name, "--model", model, "--priority", priority])
        .args(["--seconds", &seconds.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(p) = period_ms {
        cmd.args(["--period-ms", &p.to_string()]);
    }
    if !check {
        cmd.arg("--no-check");
    }
    cmd.spawn()
        .map_err(|e| format!("cannot start client process {}: {e}", exe.display()))
}

/// Runs the demo. `exe` is the `sluice` binary (for the client processes).
pub fn run(exe: &Path, opts: &DemoOptions) -> Result<DemoResult, String> {
    let socket = temp_socket("demo").map_err(|e| format!("temporary directory: {e}"))?;
    let mut config = embedded_config(socket.clone(), 100);
    config.device.scheduler = opts.scheduler;
    config.device.backend = opts.backend;
    config.device.model_scale = opts.model_scale;
    let models =
        Arc::new(sluice_service::startup::load_models(&config).map_err(|e| e.to_string())?);
    for m in [&opts.rt_model, &opts.be_model] {
        if models.lookup(m).is_none() {
            let names: Vec<_> = models.iter().map(|(_, m)| m.name().to_owned()).collect();
            return Err(format!(
                "no model named {m:?}; choose one of {}",
                names.join(", ")
            ));
        }
    }
    let device =
        sluice_service::startup::make_device(&config, models.clone()).map_err(|e| e.to_string())?;
    let device_name = device.name().to_owned();
    let simulated = device.simulated();
    let mut daemon = Daemon::start(config, models, device).map_err(|e| e.to_string())?;
    let clients = Clients {
        exe,
        socket: &socket,
        seconds: opts.seconds,
        check: simulated,
    };
    let children = [
        spawn_client(&clients, &opts.rt_model, "rt", Some(opts.rt_period_ms))?,
        spawn_client(&clients, &opts.be_model, "be", None)?,
    ];
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let total = Duration::from_secs(opts.seconds);
    if tty {
        while start.elapsed() < total {
            let done = start.elapsed().as_secs_f64() / total.as_secs_f64();
            let filled = (done * 30.0) as usize;
            let st = daemon.shared().status();
            eprint!(
                "\r[{}{}] {:>4.1}/{} s  completed {:>6}  errors {}",
                "#".repeat(filled),
                ".".repeat(30 - filled.min(30)),
                start.elapsed().as_secs_f64(),
                opts.seconds,
                st.completed,
                st.errors
            );
            let _ = std::io::stderr().flush();
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!();
    } else {
        eprintln!(
            "sluice demo: running two client processes for {} s ...",
            opts.seconds
        );
    }
    let mut clients = Vec::new();
    let mut failures = Vec::new();
    for child in children {
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for a client: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        match serde_json::from_str::<ClientReport>(text.trim()) {
            Ok(r) if out.status.success() => clients.push(r),
            _ => failures.push(format!(
                "client exited with {} ({})",
                out.status,
                text.trim()
            )),
        }
    }
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(socket.parent().unwrap_or(Path::new("/nonexistent")));
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    Ok(DemoResult {
        scheduler: opts.scheduler.as_str().to_owned(),
        device: device_name,
        simulated,
        clients,
    })
}

/// The table `sluice demo` prints.
pub fn table(r: &DemoResult) -> String {
    let mut s = String::new();
    let what = if r.simulated {
        "simulated GPU: not measured on a GPU"
    } else {
        "measured on this GPU; outputs not checked"
    };
    s.push_str(&format!(
        "scheduler: {}   device: {} ({what})\n\n",
        r.scheduler, r.device
    ));
    s.push_str(&format!(
        "{:<16} {:<10} {:>3} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11}\n",
        "client",
        "model",
        "cls",
        "requests",
        "errors",
        "mean µs",
        "p50 µs",
        "p99 µs",
        "max µs",
        "queue p50",
        "standalone"
    ));
    for c in &r.clients {
        s.push_str(&format!(
            "{:<16} {:<10} {:>3} {:>8} {:>6} {:>9.0} {:>9} {:>9} {:>9} {:>11} {:>11}\n",
            c.name,
            c.model,
            c.priority,
            c.ok,
            c.errors + c.wrong_outputs,
            c.latency_us.mean,
            c.latency_us.p50,
            c.latency_us.p99,
            c.latency_us.max,
            c.queue_wait_p50_us,
            c.standalone_us
        ));
    }
    s
}

/// The legend printed under the tables.
pub const LEGEND: &str = "latency = submit → completion seen by the client; queue = time in the daemon before the\n\
device started the request. `fifo` runs one request at a time without preemption; the\n\
policies run kernels on the GPU model (docs/gpu-model.md, docs/policies.md).\n";

/// The schedulers `sluice demo` compares by default: `reef` against
/// `streams` where this build has them, else `fifo`.
pub fn default_schedulers() -> Vec<sluice_service::config::Scheduler> {
    use sluice_sched::PolicyKind;
    use sluice_service::config::Scheduler;
    let models = Arc::new(sluice_model::ModelRegistry::builtin());
    let have: Vec<Scheduler> = [PolicyKind::Reef, PolicyKind::Streams]
        .into_iter()
        .filter(|k| sluice_sched::make_policy(*k, &models).is_some())
        .map(Scheduler::Policy)
        .collect();
    if have.is_empty() {
        vec![Scheduler::Fifo]
    } else {
        have
    }
}
