//! `sluice demo`: DISB workload C on an embedded daemon, per scheduler.

use std::process::ExitCode;

use sluice_bench::demo;
use sluice_service::config::{BackendKind, Scheduler};

use super::{exe, fail, print_json};

/// Start an embedded daemon on the simulated GPU and run REEF's DISB
/// workload C as separate client processes: a periodic real-time client
/// (VGG-19 at 50 % of its standalone maximum) beside five closed-loop
/// best-effort clients (one per DISB model). Once with the real-time
/// client alone (the reference), then once per scheduler (default:
/// reef, then streams); prints latencies and, per scheduler, a verdict:
/// its real-time p99 against the reference, on the daemon's timestamps.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Schedulers to compare, comma-separated: fifo, seq, streams,
    /// wait-preempt, reef, paella. Default: reef,streams.
    #[arg(long, value_delimiter = ',')]
    scheduler: Vec<String>,
    /// How long the clients run in all, in seconds (split between the
    /// reference run and the schedulers; at least 0.5 s each).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// Real-time model.
    #[arg(long, default_value = "vgg19")]
    rt_model: String,
    /// Real-time request period in milliseconds (default: workload C's,
    /// twice the model's standalone time: on the simulated GPU, or with
    /// `--backend cuda` measured on the device first, median of 5
    /// inferences alone).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    rt_period_ms: Option<u64>,
    /// Best-effort models, one closed-loop client each, comma-separated.
    /// Default: resnet152,vgg19,yolov3,bert_base,gpt2 on `sim`;
    /// resnet152 on `cuda` (whose builders are vgg19, resnet152,
    /// bert_base and gpt2).
    #[arg(long, alias = "be-model", value_delimiter = ',')]
    be_models: Vec<String>,
    /// GPU backend: `sim` (the simulated GPU) or `cuda` (the models'
    /// real layers on CUDA device 0; needs a build with `--features
    /// cuda`; without a driver it stops with the daemon's start-up
    /// error, which names the fix). Outputs of the cuda backend are
    /// not checked.
    #[arg(long, default_value = "sim")]
    backend: String,
    /// With `--backend cuda`: the small test models (`vgg19_small`,
    /// ...) instead of the full ones; name them with the `_small`
    /// suffix in --rt-model and --be-model.
    #[arg(long)]
    small: bool,
    /// With `--backend cuda`: a folder of ONNX files served in place of
    /// the builders of the same name, and beside them (`models.dir`):
    /// e.g. the DISB models from `scripts/onnx/make-disb-models.py --out
    /// DIR [--small]`, so that `--be-model yolov3` or a user's own model
    /// runs too.
    #[arg(long = "models", value_name = "DIR")]
    models_dir: Option<std::path::PathBuf>,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs the demo; fails if a client saw errors or wrong outputs.
pub fn run(a: Args) -> ExitCode {
    sluice_service::startup::init_tracing_quiet();
    let Some(backend) = BackendKind::from_name(&a.backend) else {
        return fail(format!(
            "unknown backend {:?}; use one of: {}",
            a.backend,
            BackendKind::ALL
                .iter()
                .map(|b| b.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    if backend == BackendKind::Cpu {
        return fail(
            "the demo compares GPU schedulers, which --backend cpu does not have; use --backend \
             sim or cuda (the cpu backend serves ONNX models: docs/onnx.md)",
        );
    }
    if backend != BackendKind::Cuda && a.models_dir.is_some() {
        return fail(
            "--models serves ONNX files on --backend cuda; the simulated GPU's demo runs the \
             built-in DISB models",
        );
    }
    if backend == BackendKind::Cuda && a.scheduler.iter().any(|s| s == "fifo") {
        return fail(
            "scheduler \"fifo\" is the simulated device's; with --backend cuda use reef, streams, seq, wait-preempt or paella",
        );
    }
    let exe = match exe() {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let schedulers = if a.scheduler.is_empty() {
        demo::default_schedulers()
    } else {
        let mut v = Vec::new();
        for name in &a.scheduler {
            match Scheduler::from_name(name) {
                Some(s) => v.push(s),
                None => {
                    return fail(format!(
                        "unknown scheduler {name:?}; use one of: {}",
                        Scheduler::names().join(", ")
                    ));
                }
            }
        }
        v
    };
    let be_models = if a.be_models.is_empty() {
        demo::default_be_models(backend)
    } else {
        a.be_models
    };
    let opts = demo::DemoOptions {
        schedulers,
        seconds: a.seconds,
        rt_model: a.rt_model,
        rt_period_us: a.rt_period_ms.map(|ms| ms * 1000),
        be_models,
        backend,
        model_scale: if a.small {
            sluice_nn::builders::Scale::Small
        } else {
            sluice_nn::builders::Scale::Full
        },
        models_dir: a.models_dir,
        device: None,
    };
    let d = match demo::run(&exe, &opts) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let bad = d
        .references
        .iter()
        .chain(&d.runs)
        .flat_map(|r| &r.clients)
        .any(|c| c.errors + c.wrong_outputs > 0 || c.ok == 0);
    let code = if a.json {
        print_json(&d)
    } else {
        print!("{}", demo::report(&d));
        ExitCode::SUCCESS
    };
    if bad {
        return fail("a client saw errors or wrong outputs (see the table)");
    }
    code
}
