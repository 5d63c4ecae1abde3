//! `sluice check --device cuda [MODEL]`: the models' real layers on CUDA
//! device 0 against the CPU reference ([`sluice_cuda::measure`]).

use std::process::ExitCode;

use super::parse;

/// Run a model on CUDA device 0 and compare its output with the CPU
/// reference: PASS/FAIL per model (exit 1 if any fails). Needs a build
/// with `--features cuda`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The device: `cuda` (CUDA device 0).
    #[arg(long, value_parser = cuda_only)]
    device: String,
    /// vgg19, resnet152, bert_base or gpt2 (default: all four).
    #[arg(value_parser = parse::model_builder)]
    model: Option<String>,
    /// The Small builds (same layers, shrunk shapes).
    #[arg(long)]
    small: bool,
    /// Seed of the weights (the input's is seed + 1).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest absolute error allowed, as a fraction of the reference
    /// output's largest magnitude.
    #[arg(long, default_value_t = sluice_cuda::measure::DEFAULT_TOLERANCE)]
    tol: f64,
    /// Print one JSON array instead of one line per model.
    #[arg(long)]
    json: bool,
}

/// `cuda`, the one device this command runs on.
fn cuda_only(s: &str) -> Result<String, String> {
    if s == "cuda" {
        Ok(s.into())
    } else {
        Err(format!(
            "`{s}` is not a device for this command; use cuda (the simulated GPU runs no kernels)"
        ))
    }
}

/// Checks each model; exit status 1 if any fails.
#[cfg(feature = "cuda")]
pub fn run(a: Args) -> ExitCode {
    use super::{fail_chain, print_json};
    use sluice_cuda::measure as cm;
    use sluice_cuda::plan_exec::LoadOptions;
    use sluice_nn::builders::{self, BuildOptions, MODEL_NAMES, Scale};
    let _ = &a.device;
    let names: Vec<&str> = match &a.model {
        Some(m) => vec![m.as_str()],
        None => MODEL_NAMES.to_vec(),
    };
    let mut rig = match sluice_cuda::open_cuda() {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    eprintln!("sluice check: {}", rig.drv.info());
    let scale = if a.small { Scale::Small } else { Scale::Full };
    let mut results = Vec::new();
    for name in names {
        let built = match builders::build(name, &BuildOptions { scale }) {
            Ok(b) => b,
            Err(e) => return fail_chain(&e),
        };
        eprintln!(
            "sluice check: {} ({} kernels; the CPU reference of a full model takes a while)",
            built.plan().name(),
            built.plan().steps().len()
        );
        let r = cm::check_model(
            &mut rig.drv,
            &mut rig.q,
            &rig.lib,
            &built,
            a.seed,
            a.tol,
            &LoadOptions::default(),
        );
        match r {
            Ok(r) => {
                if !a.json {
                    println!("{}", r.line());
                }
                results.push(r);
            }
            Err(e) => return fail_chain(&e),
        }
    }
    let code = if a.json {
        print_json(&results)
    } else {
        ExitCode::SUCCESS
    };
    if results.iter().all(|r| r.pass) {
        code
    } else {
        ExitCode::FAILURE
    }
}

/// In a build without the CUDA backend: says so, exit status 2.
#[cfg(not(feature = "cuda"))]
pub fn run(a: Args) -> ExitCode {
    let _ = (a.device, a.model, a.small, a.seed, a.tol, a.json);
    no_cuda("check")
}

/// `sluice check` / `sluice profile --device cuda` in a build without the
/// CUDA backend.
#[cfg(not(feature = "cuda"))]
pub fn no_cuda(cmd: &str) -> ExitCode {
    eprintln!(
        "error: sluice {cmd} --device cuda: this sluice was built without the CUDA backend; \
         rebuild with `cargo build --release --features sluice-cli/cuda`"
    );
    ExitCode::from(2)
}
