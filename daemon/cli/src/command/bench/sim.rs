//! `sluice bench sim`: what the GPU model itself costs to run
//! ([`sluice_bench::sim`]).

use std::process::ExitCode;

use sluice_bench::sim;
use sluice_sched::PolicyKind;

use crate::command::{fail_chain, parse, print_json};

/// What the GPU model itself costs: one real-time VGG-19 (DISB C's
/// load) beside N closed-loop best-effort clients (the DISB models in
/// turn), wall-clock seconds on this machine per simulated second, per
/// device profile, policy and N. Compare rows of one run only.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Device profiles (default mi50,gv100).
    #[arg(long = "device", value_delimiter = ',')]
    devices: Vec<String>,
    /// Policies (default reef,streams).
    #[arg(long = "policy", value_name = "NAME", num_args = 1.., value_delimiter = ',', value_parser = parse::policy)]
    policies: Vec<PolicyKind>,
    /// Best-effort client counts (default 1,5,20,100).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=10_000))]
    clients: Vec<u32>,
    /// Virtual time during which clients issue tasks, ms; tasks in
    /// flight then finish.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    sim_ms: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs every device, policy and client count.
pub fn run(a: Args) -> ExitCode {
    let d = sim::SimBenchOptions::default();
    let opts = sim::SimBenchOptions {
        devices: if a.devices.is_empty() {
            d.devices
        } else {
            a.devices
        },
        policies: if a.policies.is_empty() {
            d.policies
        } else {
            a.policies
        },
        clients: if a.clients.is_empty() {
            d.clients
        } else {
            a.clients
        },
        sim_ms: a.sim_ms,
    };
    match sim::run(&opts, &mut |line| eprintln!("{line}")) {
        Ok(r) if a.json => print_json(&r),
        Ok(r) => {
            print!("{}", sim::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}
