//! `sluice bench split`: SPLIT's evaluation on the GPU model
//! ([`sluice_bench::split`]), with `sluice split`'s GA as the splitter.

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_bench::split as bs;

use crate::command::{fail, parse, print_json};

/// SPLIT's evaluation (ICPP'23 §5: Table 3, Fig. 6 and Fig. 7) on the
/// simulated GPU (default profile jetson-nano, SPLIT's testbed): the
/// five models of Table 1 scaled to its latencies, the six Poisson
/// scenarios of Table 2 (1000 requests each) at the load SPLIT's
/// saturation implies, the violation rate against α = 2..20, latency
/// jitter per model, the splitter's block splits of ResNet-50 and
/// VGG-19, and whether split meets the evaluation's criterion at α = 4
/// (docs/split-eval.md).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Device profile of the simulated GPU.
    #[arg(long, default_value = "jetson-nano", value_parser = parse::device)]
    device: String,
    /// Policies to run (list; default split,seq,prema,rt-a; seq is the
    /// Clockwork baseline).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Mean inter-arrival times of the scenarios, ms (default
    /// 160,150,140,130,120,110: SPLIT Table 2).
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<f64>,
    /// Requests per scenario.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// How requests get models and arrival times: saturation (the
    /// default: one Poisson stream per model of mean gap λ × λ_sat / 90
    /// ms, λ_sat the profile's saturation interval measured on the GPU
    /// model, so scenario λ loads the device at 90/λ as SPLIT's did),
    /// per-model (one stream of mean λ per model) or shared (one stream
    /// of mean λ, uniform model draw).
    #[arg(long, default_value = "saturation")]
    mix: String,
    /// Clients per model; a model's requests go to them in turn.
    #[arg(long, default_value_t = 4)]
    clients_per_model: u32,
    /// Seed of the arrival times and model choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    jobs: Option<u64>,
    /// Write split-fig6.svg and split-fig7.svg into this directory.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Print Markdown tables (the default output).
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
}

/// Runs the scenarios; writes the plots; prints Markdown or JSON.
pub fn run(a: Args) -> ExitCode {
    let d = bs::SplitBenchOptions::default();
    let mix = match bs::Mix::from_name(&a.mix) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let opts = bs::SplitBenchOptions {
        device: a.device,
        scenarios_ms: if a.scenarios.is_empty() {
            d.scenarios_ms.clone()
        } else {
            a.scenarios
        },
        requests: a.requests,
        policies: if a.policies.is_empty() {
            d.policies.clone()
        } else {
            a.policies
        },
        mix,
        clients_per_model: a.clients_per_model,
        seed: a.seed,
        jobs: a.jobs.map_or(d.jobs, |j| usize::try_from(j).unwrap_or(1)),
    };
    // `--markdown` is the default output; it only conflicts with --json.
    let _ = a.markdown;
    let splitter = sluice_cli::split_cmd::GaSplitter;
    let mut progress = bs::stderr_progress();
    let r = match bs::run_with_progress(&opts, &splitter, &mut progress) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if let Some(dir) = a.plot {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return fail(format!(
                "cannot create the plot directory {}: {e}",
                dir.display()
            ));
        }
        let plots = match bs::plots(&r) {
            Ok(plots) => plots,
            Err(e) => return fail(e),
        };
        for (name, svg) in plots {
            let path = dir.join(name);
            if let Err(e) = std::fs::write(&path, svg) {
                return fail(format!("cannot write the plot to {}: {e}", path.display()));
            }
        }
    }
    if a.json {
        print_json(&r)
    } else {
        print!("{}", bs::markdown(&r));
        ExitCode::SUCCESS
    }
}
