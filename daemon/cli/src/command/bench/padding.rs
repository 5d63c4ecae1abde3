//! `sluice bench padding`: REEF §6.5's padding matrix on the GPU model
//! ([`sluice_bench::padding`]).

use std::process::ExitCode;

use sluice_bench::padding;

use crate::command::{fail_chain, print_json, progress};

/// REEF §6.5's one-to-one dynamic kernel padding matrix on the
/// simulated GPU: one closed-loop real-time and one closed-loop
/// best-effort client for every ordered pair of models, under streams,
/// reef without padding, reef with padding (DKP) and with multi-version
/// selection (DKP-MV); RT latency over standalone and overall
/// normalised throughput, beside REEF's published figures.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Device profile of the simulated GPU (mi50, gv100, h100).
    #[arg(long, default_value = "mi50")]
    device: String,
    /// Models (default: the DISB five).
    #[arg(long = "model", value_delimiter = ',')]
    models: Vec<String>,
    /// Virtual time of each run, ms.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    duration_ms: u64,
    /// Worker threads (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    jobs: Option<u64>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// Runs every ordered pair of models.
pub fn run(a: Args) -> ExitCode {
    let d = padding::PaddingOptions::default();
    let opts = padding::PaddingOptions {
        device: a.device,
        models: if a.models.is_empty() {
            d.models
        } else {
            a.models
        },
        duration_ms: a.duration_ms,
        jobs: a.jobs.map_or(d.jobs, |j| j as usize),
    };
    let mut progress = progress("padding matrix", "runs");
    match padding::run(&opts, &mut progress) {
        Ok(r) if a.json => print_json(&r),
        Ok(r) => {
            print!("{}", padding::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}
