//! `sluice bench hol`: Paella's head-of-line blocking workload on the GPU
//! model ([`sluice_bench::hol`]).

use std::process::ExitCode;

use sluice_bench::hol;

use crate::command::{parse, print_json};

/// Paella's head-of-line blocking workload (Paella §2.1) on the
/// simulated GPU: naive submission against `paella`, utilisation and
/// p99 latency against offered load.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Offered loads, fractions of capacity (default 0.1,0.2,...,1.0).
    #[arg(long, value_delimiter = ',', value_parser = parse::load)]
    loads: Vec<f64>,
    /// Jobs per load point.
    #[arg(long, value_parser = clap::value_parser!(u32).range(10..=10_000_000))]
    jobs: Option<u32>,
    /// Streams the naive submission cycles through.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    naive_streams: Option<u32>,
    /// Seed of the arrival process.
    #[arg(long)]
    seed: Option<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs every load point.
pub fn run(a: Args) -> ExitCode {
    let d = hol::HolOptions::default();
    let opts = hol::HolOptions {
        loads: if a.loads.is_empty() {
            d.loads.clone()
        } else {
            a.loads
        },
        jobs: a.jobs.unwrap_or(d.jobs),
        naive_streams: a.naive_streams.unwrap_or(d.naive_streams),
        seed: a.seed.unwrap_or(d.seed),
        ..d
    };
    let r = hol::run(&opts);
    if a.json {
        print_json(&r)
    } else {
        print!("{}", hol::table(&r));
        ExitCode::SUCCESS
    }
}
