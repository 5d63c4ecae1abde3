//! `sluice bench trace`: gpulet's Fig. 15 rate trace re-planned every
//! period, served in virtual time ([`sluice_bench::cluster::trace`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_bench::cluster::trace as bt;

use crate::command::{fail, fail_chain, parse, print_json, progress};

/// gpulet's Fig. 15 rate trace, re-planned every period with GPU
/// scaling (gpulet Algorithm 2), served in virtual time: throughput,
/// GPUs, partition sizes and violations per window, and GPU-seconds,
/// for each scheduling period given (gpulet: 20 s, an MPS restart per
/// repartition; sluice repartitions in place, so 1 s). SIMULATED, on the
/// scenario's device profile; the module docs of benchmarks/src/cluster/trace.rs
/// give every rule.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scenario: a shipped name or a .toml path (gpulet's Fig. 15 uses
    /// scen3).
    #[arg(long, default_value = "scen3")]
    scenario: String,
    /// Planner: sbp, greedy, gpulet, gpulet+int (needs interference
    /// data).
    #[arg(long, default_value = "gpulet+int", value_parser = parse::planner)]
    planner: sluice_bench::cluster::scenario::PlannerKind,
    /// Scheduling periods to compare, s.
    #[arg(long, value_delimiter = ',', default_value = "20,1", value_parser = parse::duration)]
    periods: Vec<f64>,
    /// Length of the trace, s.
    #[arg(long, default_value_t = 3200.0, value_parser = parse::duration)]
    duration: f64,
    /// Total rate at the start and the end, rps.
    #[arg(long, default_value_t = 100.0, value_parser = parse::rate)]
    base: f64,
    /// Total rate at the first wave's peak, rps.
    #[arg(long, default_value_t = 500.0, value_parser = parse::rate)]
    peak1: f64,
    /// Total rate at the second wave's peak, rps.
    #[arg(long, default_value_t = 800.0, value_parser = parse::rate)]
    peak2: f64,
    /// Most GPUs the scaling may use.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=64))]
    gpus: u32,
    /// Plan for the counted rate times 1 + HEADROOM.
    #[arg(long, default_value_t = 0.1, value_parser = parse::headroom)]
    headroom: f64,
    /// Plan every batch so that at most the share EPS of the Poisson
    /// arrivals over the rounds a request can wait overflow them
    /// (sluice's burst rule, e.g. 0.01 for the 1 % violation target)
    /// instead of for the mean rate (the papers' rule, the default).
    /// docs/planners.md, "Burst rule".
    #[arg(long, value_name = "EPS", value_parser = parse::overflow)]
    burst_overflow: Option<f64>,
    /// Count each model's rate over the last SECONDS (whole periods,
    /// at least one) instead of the period just ended: a 1 s period
    /// with a 5 s window plans on a count with √5 less Poisson noise
    /// (the daemon's `rate_window_ms` beside its `replan_ms`). Default:
    /// the period.
    #[arg(long, value_name = "SECONDS", value_parser = parse::duration)]
    rate_window: Option<f64>,
    /// Plan with latencies times MARGIN (gpulet's artifact: 1.1).
    #[arg(long, default_value_t = 1.1, value_parser = parse::margin)]
    latency_margin: f64,
    /// Interference in planning (gpulet+int) and serving.
    #[arg(long, value_enum, default_value = "gpulet-2080ti")]
    interference: sluice_bench::cluster::Interference,
    /// The gpulet authors' data: a folder with 2080ti/ and 3080/ in the
    /// format of the repository's data/gpulet (default: that data, built
    /// in).
    #[arg(long = "data-dir", visible_alias = "gpulet-data", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    tables: super::TableArgs,
    /// Plan and serve with pairwise interference factors measured on a GPU
    /// instead of --interference's model: the JSON files of `sluice profile
    /// --device cuda A --pair B --split P --json` in DIR (a pair never
    /// measured has factor 1).
    #[arg(long, value_name = "DIR")]
    measured_interference: Option<PathBuf>,
    /// Seed of the first run's arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Serve the whole trace this many times, seeded SEED, SEED + 1, ...;
    /// the report gives each period's mean, least and most over them and
    /// judges each shorter period against the first on the means (fewer
    /// late requests, GPU-seconds at most 1 % above).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    seeds: u32,
    /// Worker threads for the seeds (default: one per core).
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    /// What serves each plan: daemon (the daemon's cluster backend in
    /// virtual time: one queue per model that its partitions pull from,
    /// gpulet's adaptive batch, deadline drops) or sim (the request-level
    /// simulator, the planners' execution model: routing by share, rounds,
    /// planned or deadline batches).
    #[arg(long, value_enum, default_value = "daemon")]
    engine: sluice_bench::cluster::sim::Engine,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// Serves the trace once per period.
pub fn run(a: Args) -> ExitCode {
    let sc = match sluice_bench::cluster::scenario::resolve(&a.scenario) {
        Ok(mut v) if v.len() == 1 => v.remove(0),
        Ok(_) => {
            return fail(format!(
                "--scenario {}: give exactly one scenario",
                a.scenario
            ));
        }
        Err(e) => return fail_chain(&e),
    };
    let opts = bt::TraceOptions {
        planner: a.planner,
        periods_s: a.periods,
        duration_s: a.duration,
        base_rps: a.base,
        peak1_rps: a.peak1,
        peak2_rps: a.peak2,
        gpu_limit: a.gpus,
        headroom: a.headroom,
        burst: parse::burst_of(a.burst_overflow),
        rate_window_s: a.rate_window,
        latency_margin: a.latency_margin,
        interference: a.interference,
        gpulet_data: a.data_dir,
        tables: a.tables.source(),
        measured_interference: a.measured_interference,
        seed: a.seed,
        seeds: a.seeds,
        jobs: a.jobs,
        engine: a.engine,
        ..bt::TraceOptions::default()
    };
    match bt::run(
        &sc,
        &sluice_model::ModelRegistry::builtin(),
        &opts,
        progress("sluice bench trace", "periods"),
    ) {
        Ok(r) if a.json => print_json(&r),
        Ok(r) => {
            print!("{}", bt::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}
