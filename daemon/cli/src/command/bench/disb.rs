//! `sluice bench disb`: REEF's DISB on the GPU model or on CUDA device 0
//! ([`sluice_bench::disb`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_bench::disb::{self, DisbWorkload};
use sluice_sched::PolicyKind;

use crate::command::{fail, fail_chain, parse, print_json};

/// REEF's DNN inference serving benchmark (DISB, workloads A-E of REEF
/// Table 2, or a trace) on the simulated GPU, for every scheduling
/// policy: RT latency over standalone time, normalised throughput,
/// preemption latency, decision cost.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Workload: A, B, C, D, E, a list such as A,C, or all (default:
    /// all, or none when --trace is given).
    #[arg(long, value_parser = parse_workloads)]
    workload: Option<Workloads>,
    /// Policies to run (repeat or list; default: all).
    #[arg(long = "policy", value_name = "NAME", num_args = 1.., value_delimiter = ',', value_parser = parse::policy)]
    policies: Vec<PolicyKind>,
    /// Device profile of the simulated GPU (mi50, gv100, h100), or
    /// `cuda`: CUDA device 0 (a build with `--features cuda`), one run at
    /// a time, in real time. With `--models DIR` holding the DISB models'
    /// ONNX files (scripts/onnx/make-disb-models.py), their real layers
    /// on the daemon's CUDA server under each policy; otherwise the
    /// models' kernels as synthetic kernels on their manifest timings.
    #[arg(long, default_value = "mi50", value_parser = parse::device_or_cuda)]
    device: String,
    /// Virtual time of each run, ms (default 2000 on mi50, 1000 on
    /// gv100 and h100; trace: until the last arrival).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    duration_ms: Option<u64>,
    /// Seed of the arrival phases and Poisson gaps.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Trace CSV (client,priority,model,arrival_ms), run as workload
    /// `trace`.
    #[arg(long, value_name = "FILE.csv")]
    trace: Option<PathBuf>,
    /// Worker threads (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    jobs: Option<u64>,
    /// Folder of model manifests (`*.json`) used instead of the
    /// built-in ones of the same name, e.g. profiles measured with
    /// `sluice profile --device cuda` to calibrate the GPU model; with
    /// `--device cuda`, or a folder of the DISB models' ONNX files
    /// (`vgg19.onnx` ..., or `vgg19_small.onnx` ... from `--small`).
    #[arg(long = "models", value_name = "DIR")]
    models_dir: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot (RT latency CDF and throughput per policy).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// `--workload`'s value.
#[derive(Clone, Debug)]
struct Workloads(Vec<DisbWorkload>);

fn parse_workloads(s: &str) -> Result<Workloads, String> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(Workloads(DisbWorkload::ALL.to_vec()));
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        let w = DisbWorkload::from_letter(part).ok_or_else(|| {
            format!(
                "`{part}` is not a DISB workload; use A, B, C, D, E, a list such as A,C, or all"
            )
        })?;
        if !v.contains(&w) {
            v.push(w);
        }
    }
    Ok(Workloads(v))
}

/// Runs the workloads under every policy asked for; writes the plot.
pub fn run(a: Args) -> ExitCode {
    let workloads = match a.workload {
        Some(Workloads(w)) => w,
        None if a.trace.is_some() => Vec::new(),
        None => DisbWorkload::ALL.to_vec(),
    };
    let defaults = disb::DisbOptions::default();
    let opts = disb::DisbOptions {
        workloads,
        trace: a.trace,
        policies: if a.policies.is_empty() {
            PolicyKind::ALL.to_vec()
        } else {
            a.policies
        },
        device: a.device,
        duration_ms: a.duration_ms,
        seed: a.seed,
        jobs: a
            .jobs
            .map_or(defaults.jobs, |j| usize::try_from(j).unwrap_or(1)),
        models_dir: a.models_dir,
    };
    let mut progress = disb::stderr_progress();
    let r = if opts.device == "cuda" {
        on_cuda(&opts, &mut progress)
    } else {
        disb::run(&opts, &mut progress)
    };
    let r = match r {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    if let Some(path) = a.plot {
        let svg = match disb::plot(&r) {
            Ok(svg) => svg,
            Err(e) => return fail(e),
        };
        if let Err(e) = std::fs::write(&path, svg) {
            return fail(format!("cannot write the plot to {}: {e}", path.display()));
        }
    }
    if a.json {
        print_json(&r)
    } else {
        print!("{}", disb::table(&r));
        ExitCode::SUCCESS
    }
}

/// `sluice bench disb --device cuda`.
#[cfg(feature = "cuda")]
fn on_cuda(
    opts: &disb::DisbOptions,
    progress: &mut dyn FnMut(&disb::Progress),
) -> Result<disb::DisbReport, disb::DisbError> {
    use sluice_cuda::{Kill, open_device0};
    if let Some(dir) = opts.models_dir.as_ref().filter(|d| disb::holds_onnx(d)) {
        return on_cuda_served(opts, dir, progress);
    }
    let (g, info) =
        open_device0(Kill::Cooperative).map_err(|e| disb::DisbError::Device(e.to_string()))?;
    let name = format!("cuda: {}", info.name);
    disb::run_on_device(
        opts,
        &sluice_sched::make_policy,
        Box::new(g),
        &name,
        progress,
    )
}

/// `sluice bench disb --device cuda --models DIR` with the DISB models'
/// ONNX files in DIR: their real layers on the daemon's CUDA server, one
/// server per policy (the kernel library compiled and the models loaded
/// for each).
#[cfg(feature = "cuda")]
fn on_cuda_served(
    opts: &disb::DisbOptions,
    dir: &std::path::Path,
    progress: &mut dyn FnMut(&disb::Progress),
) -> Result<disb::DisbReport, disb::DisbError> {
    use sluice_cli::error_chain;
    use sluice_cuda::serve::{CudaServer, ServeOptions};
    use sluice_cuda::{Kill, open_gpu};
    let info = sluice_cuda::real::probe().map_err(|e| disb::DisbError::Device(e.to_string()))?;
    let (models, graphs, scale) = disb::onnx_models(dir)?;
    let shared = std::sync::Arc::new(models.clone());
    let serve = ServeOptions {
        scale,
        ..ServeOptions::default()
    };
    let device = info.to_string();
    let factory = Box::new(move |kind| {
        let (gpu, lib, _) = open_gpu(Kill::Cooperative).map_err(|e| error_chain(&e))?;
        CudaServer::with_graphs(
            gpu,
            &lib,
            kind,
            shared.clone(),
            &serve,
            &graphs,
            &device,
            shm_proto::now_ns(),
        )
        .map_err(|e| error_chain(&e))
    });
    let name = format!("cuda: {} (the ONNX models' real layers)", info.name);
    disb::run_served(opts, models, factory, &name, progress)
}

/// `sluice bench disb --device cuda` in a build without the backend.
#[cfg(not(feature = "cuda"))]
fn on_cuda(
    _: &disb::DisbOptions,
    _: &mut dyn FnMut(&disb::Progress),
) -> Result<disb::DisbReport, disb::DisbError> {
    Err(disb::DisbError::Device(
        "--device cuda: this sluice was built without the CUDA backend; rebuild with \
         `cargo build --release --features sluice-cli/cuda`"
            .into(),
    ))
}
