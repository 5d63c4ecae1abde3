//! `sluice bench cluster`: the multi-GPU planners' SLO-preserved max
//! throughput, served in virtual time ([`sluice_bench::cluster`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_bench::cluster::{self as bc, scenario as bs};

use crate::command::{fail, fail_chain, parse, print_json, progress};

/// Multi-GPU placement planners served in virtual time (gpulet §5.2's
/// SLO-preserved max throughput): for each scenario (models, rates,
/// GPUs, memory; shipped: game, traffic, scen1-scen5 of gpulet, and
/// cluster-64gpu) and planner, every rate is scaled by one factor, the
/// planner places the scaled rates, a request-level simulator serves
/// the placement with Poisson arrivals and batch times L(b, p) measured
/// on the GPU model, and the largest factor with at most 1 % of
/// requests late, dropped or unserved is reported. SIMULATED figures,
/// on the named device profile; docs/performance.md ("Serving on
/// several GPUs") gives the rules.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scenarios: shipped names (game, traffic, scen1..scen5,
    /// cluster-64gpu), paths to scenario .toml files, a list, or all.
    #[arg(long = "scenario", value_delimiter = ',', default_value = "all")]
    scenarios: Vec<String>,
    /// Planners: sbp, greedy (= greedy-best-fit), gpulet, gpulet+int
    /// (needs --interference gpulet-*), ideal (at most 8 GPUs); a list
    /// (default: the ones each scenario file names).
    #[arg(long = "planner", value_delimiter = ',', value_parser = parse::planner)]
    planners: Vec<sluice_bench::cluster::scenario::PlannerKind>,
    /// Device profile of the L(b, p) tables for every scenario
    /// (default: each scenario's own).
    #[arg(long, value_parser = parse::device)]
    device: Option<String>,
    /// Virtual seconds of arrivals per simulation.
    #[arg(long, default_value_t = 60.0, value_parser = parse::duration)]
    duration: f64,
    /// Seed of the arrivals and of random routing.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What serves each plan: daemon (the daemon's cluster backend in
    /// virtual time: one queue per model that its partitions pull from,
    /// gpulet's adaptive batch, deadline drops) or sim (the request-level
    /// simulator, the planners' execution model: routing by share, rounds,
    /// planned or deadline batches).
    #[arg(long, value_enum, default_value = "daemon")]
    engine: sluice_bench::cluster::sim::Engine,
    /// With --engine sim, how a model's requests are split over its partitions: random
    /// (weighted by planned share; each partition sees Poisson arrivals
    /// at its share) or wrr (smooth weighted round robin).
    #[arg(long, value_enum, default_value = "random")]
    routing: sluice_bench::cluster::sim::Routing,
    /// With --engine sim, when a partition starts its next round: work-conserving (as soon
    /// as the last ends) or fixed (every duty cycle, Nexus).
    #[arg(long, value_enum, default_value = "work-conserving")]
    rounds: sluice_bench::cluster::sim::Rounds,
    /// With --engine sim, how many queued requests a turn takes: planned (at most the
    /// planned batch) or deadline (more when they are queued, as long
    /// as the oldest still meets its SLO: a burst goes in one larger
    /// batch instead of waiting a round).
    #[arg(long, value_enum, default_value = "planned")]
    batching: sluice_bench::cluster::sim::Batching,
    /// Latency factor for partitions sharing a GPU: none (the GPU
    /// model's finding), gpulet-2080ti or gpulet-3080 (gpulet's linear
    /// model and the authors' measured coefficients).
    #[arg(long, value_enum, default_value = "none")]
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
    /// Simulate once at the scenario's own rates instead of searching
    /// the maximum (e.g. to time a large scenario).
    #[arg(long)]
    no_search: bool,
    /// Bisection steps after the maximum is bracketed (each halves the
    /// bracket).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(0..=30))]
    search_steps: u32,
    /// Plan for each rate times 1 + HEADROOM while offering the rate
    /// itself (0: plan exactly the offered rates, as gpulet's planners
    /// do; 0.1: 10 % spare capacity against Poisson bursts).
    #[arg(long, default_value_t = 0.0, value_parser = parse::headroom)]
    headroom: f64,
    /// Plan every batch so that at most the share EPS of the Poisson
    /// arrivals over the rounds a request can wait overflow them
    /// (sluice's burst rule, e.g. 0.01 for the 1 % violation target)
    /// instead of for the mean rate (the papers' rule, the default).
    /// Applies to every planner alike; docs/planners.md, "Burst rule".
    #[arg(long, value_name = "EPS", value_parser = parse::overflow)]
    burst_overflow: Option<f64>,
    /// Plan with every latency times MARGIN while the simulation runs
    /// the latencies themselves (1: plan exactly the tables; gpulet's
    /// artifact plans with 1.1, its `Latency Ratio`). Applies to every
    /// planner alike.
    #[arg(long, default_value_t = 1.0, value_parser = parse::margin)]
    latency_margin: f64,
    /// How the maximum is searched: bisect (double from factor 1, then
    /// bisect; fast, but may step over a failing rate where the
    /// outcome is not monotone) or scan (gpulet §5.2: raise the rate by
    /// --scan-step from --scan-from rps in all and stop at the first
    /// failure).
    #[arg(long = "search", value_enum, default_value = "bisect")]
    search_mode: SearchArg,
    /// What a rate must do to pass: served (placed, and at most 1 % of
    /// requests late, dropped or unserved: the SLO-preserved maximum)
    /// or planned (placed: the largest rate the planner calls
    /// schedulable, with the violations served there and the worst
    /// served at any rate accepted on the way up; gpulet Fig. 14).
    #[arg(long, value_enum, default_value = "served")]
    pass: sluice_bench::cluster::PassRule,
    /// Scan: relative step between probes.
    #[arg(long, default_value_t = 0.05, value_parser = parse_scan_step)]
    scan_step: f64,
    /// Scan: total offered rate of the first probe, rps.
    #[arg(long, default_value_t = 10.0, value_parser = parse::rate)]
    scan_from: f64,
    /// Partition sizes of gpulet, gpulet+int and ideal: step (every
    /// multiple of the scenario's partition step) or gpulet (20, 40,
    /// 50, 60, 80, 100 %: the gpulet artifact's sizes and §5.2's
    /// splits). SBP and greedy always use every multiple of the step.
    #[arg(long, value_enum, default_value = "step")]
    partition_sizes: SizesArg,
    /// Folder of model manifests (`*.json`) added to the built-in ones,
    /// replacing those of the same name.
    #[arg(long = "models", value_name = "DIR")]
    models_dir: Option<PathBuf>,
    /// List the shipped scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Write gpulet Fig. 13 as an SVG into DIR (`gpulet-fig13.svg`, or
    /// `gpulet-fig13-burst.svg` under --burst-overflow): each planner's
    /// max rps over SBP's per scenario. Needs sbp among the planners and
    /// the served search (not --pass planned).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// `--search`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SearchArg {
    /// Double from factor 1 until the outcome flips, then bisect.
    Bisect,
    /// Raise the rate step by step from a low total and stop at the first
    /// failure (gpulet §5.2).
    Scan,
}

/// `--partition-sizes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SizesArg {
    /// Every multiple of the scenario's partition step.
    Step,
    /// gpulet's 20, 40, 50, 60, 80 and 100 %.
    Gpulet,
}

fn parse_scan_step(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.001..=1.0).contains(&x) => Ok(x),
        _ => Err(format!(
            "`{s}` is not a scan step in [0.001, 1]; give e.g. 0.05 to raise the rate by 5 % per probe"
        )),
    }
}

/// Lists the scenarios, or searches each planner's maximum on each
/// scenario; writes Fig. 13.
pub fn run(a: Args) -> ExitCode {
    if a.list {
        return match bs::all() {
            Ok(all) => {
                for s in all {
                    println!(
                        "{:<14} {} GPUs, {} models, {}: {}",
                        s.name,
                        s.gpus,
                        s.models.len(),
                        s.device,
                        s.description
                    );
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail_chain(&e),
        };
    }
    let opts = bc::ClusterOptions {
        planners: a.planners,
        device: a.device,
        duration_s: a.duration,
        seed: a.seed,
        routing: a.routing,
        rounds: a.rounds,
        batching: a.batching,
        engine: a.engine,
        interference: a.interference,
        gpulet_data: a.data_dir,
        tables: a.tables.source(),
        measured_interference: a.measured_interference,
        search: !a.no_search,
        search_steps: a.search_steps,
        headroom: a.headroom,
        burst: parse::burst_of(a.burst_overflow),
        latency_margin: a.latency_margin,
        search_mode: match a.search_mode {
            SearchArg::Bisect => bc::SearchMode::Bisect,
            SearchArg::Scan => bc::SearchMode::Scan {
                step: a.scan_step,
                from_rps: a.scan_from,
            },
        },
        pass: a.pass,
        gpulet_sizes: match a.partition_sizes {
            SizesArg::Step => None,
            SizesArg::Gpulet => Some(sluice_planner::PartitionSizes::gpulet()),
        },
    };
    let mut scenarios = Vec::new();
    for spec in &a.scenarios {
        match bs::resolve(spec) {
            Ok(v) => scenarios.extend(v),
            Err(e) => return fail_chain(&e),
        }
    }
    let reg = match &a.models_dir {
        None => sluice_model::ModelRegistry::builtin(),
        Some(dir) => match sluice_model::ModelRegistry::load_dir(dir)
            .and_then(|o| sluice_model::ModelRegistry::builtin().with_overrides(o))
        {
            Ok(r) => r,
            Err(e) => return fail(format!("--models {}: {e}", dir.display())),
        },
    };
    let r = bc::run(
        &scenarios,
        &reg,
        &opts,
        progress("sluice bench cluster: measuring L(b, p)", "models"),
        progress("sluice bench cluster", "scenario x planner runs"),
    );
    if let (Ok(r), Some(dir)) = (&r, &a.plot) {
        let (name, svg) = match bc::fig13_plot(r) {
            Ok(Some(plot)) => plot,
            Ok(None) => {
                return fail(
                    "--plot: no Fig. 13 to draw; it needs sbp among the planners and the served search (drop --pass planned and --no-search)",
                );
            }
            Err(e) => return fail(e),
        };
        if let Err(e) = std::fs::create_dir_all(dir) {
            return fail(format!(
                "cannot create the plot directory {}: {e}",
                dir.display()
            ));
        }
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, svg) {
            return fail(format!("cannot write the plot to {}: {e}", path.display()));
        }
        eprintln!("sluice bench cluster: wrote {}", path.display());
    }
    match r {
        Ok(r) if a.json => print_json(&r),
        Ok(r) => {
            print!("{}", bc::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}
