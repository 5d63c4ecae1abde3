//! `sluice train <planner>`: train a learned planner's agents.

use std::process::ExitCode;

use sluice_bench::inss::cmd::{self as inss, TrainInssArgs};

use super::{fail, print_json};

/// The planners `sluice train` trains.
#[derive(clap::Subcommand, Debug)]
pub enum Train {
    /// InSS's two agents (Algorithm 1, Table 2's parameters) trained on
    /// its latency model fitted to the simulated GPU (default profile
    /// a100), ten instances of its eight models; writes a checkpoint
    /// directory `sluice bench inss --agents` reads. Runs on one CPU
    /// thread unless RAYON_NUM_THREADS says otherwise; the same seed gives
    /// the same agents.
    Inss(TrainInssArgs),
}

/// Trains; with `--json`, prints every episode's record.
pub fn run(which: Train) -> ExitCode {
    match which {
        Train::Inss(args) => match inss::train_cmd(&args) {
            Ok(rec) if args.json => print_json(&rec),
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        },
    }
}
