//! `sluice bench preempt`: preemption latency, wait-based against
//! reset-based, on the GPU model ([`sluice_bench::preempt`]) or on CUDA
//! device 0 ([`sluice_bench::preempt::device`]).

use std::process::ExitCode;

use sluice_bench::preempt;

use crate::command::{fail_chain, parse, print_json};

/// Preemption latency, wait-based against reset-based, as launched
/// kernels and kernel time grow (REEF Fig. 19), and on the simulated GPU
/// against device-queue capacity (REEF Fig. 21). `--device cuda` runs
/// Fig. 19 on CUDA device 0 (a build with `--features cuda`).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Device profile of the simulated GPU (mi50, gv100, h100), or
    /// `cuda` for the real GPU.
    #[arg(long, default_value = "mi50", value_parser = parse::device_or_cuda)]
    device: String,
    /// `--device cuda`: repetitions per point (p50 and p99 over them).
    #[arg(long, default_value_t = 20)]
    reps: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs REEF Fig. 19 (and on the GPU model Fig. 21).
pub fn run(a: Args) -> ExitCode {
    if a.device == "cuda" {
        return on_cuda(a.reps, a.json);
    }
    match preempt::run(&preempt::PreemptOptions {
        device: a.device.clone(),
    }) {
        Ok(r) if a.json => print_json(&r),
        Ok(r) => {
            print!("{}", preempt::table(&r, &a.device));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

/// `sluice bench preempt --device cuda`.
#[cfg(feature = "cuda")]
fn on_cuda(reps: u32, json: bool) -> ExitCode {
    use sluice_bench::preempt::device as dev;
    let mut last = 0;
    let mut progress = |done: usize, total: usize| {
        let pct = done * 100 / total.max(1);
        if pct != last || done == total {
            last = pct;
            eprint!("\rbench preempt --device cuda: {done}/{total} measurements ({pct}%)");
            if done == total {
                eprintln!();
            }
        }
    };
    match dev::run_cuda(reps, &mut progress) {
        Ok(r) if json => print_json(&r),
        Ok(r) => {
            print!("{}", dev::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

/// `sluice bench preempt --device cuda` in a build without the backend.
#[cfg(not(feature = "cuda"))]
fn on_cuda(_reps: u32, _json: bool) -> ExitCode {
    eprintln!(
        "error: --device cuda: this sluice was built without the CUDA backend; rebuild with \
         `cargo build --release --features sluice-cli/cuda`"
    );
    ExitCode::from(2)
}
