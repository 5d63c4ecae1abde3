//! `sluice bench gpulet`: gpulet's planner-level figures
//! ([`sluice_bench::gpulet`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_bench::gpulet as bg;

use crate::command::{fail, fail_chain, parse, print_json, progress};

/// gpulet's planner-level figures (Choi et al., ATC '22): Fig. 5/16
/// (schedulable scenarios of the 3^9 - 1 rate vectors over Table 3's
/// models on 4 GPUs: sbp, sbp on fixed 1:1 halves, gpulet+int, ideal),
/// Fig. 17 (max schedulable rate of gpulet+int over the ideal's, game,
/// traffic, scen1-scen5) and Fig. 6 (pairs on 2 GPUs: sbp, greedy,
/// ideal). A scenario is schedulable when the planner places it; no
/// serving. SIMULATED on the GPU model's L(b, p) tables; rules in
/// docs/gpulet.md.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Figures: 16 (also 5), 17, 6; a list.
    #[arg(long = "fig", value_delimiter = ',', value_parser = parse_fig, default_value = "16,17,6")]
    figs: Vec<sluice_bench::gpulet::Fig>,
    /// Device profile of the L(b, p) tables (default: each scenario's
    /// own, mi50).
    #[arg(long, value_parser = parse::device)]
    device: Option<String>,
    /// The gpulet authors' data: a folder with 2080ti/ in the format of
    /// the repository's data/gpulet (default: that data, built in).
    #[arg(long = "data-dir", visible_alias = "gpulet-data", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    tables: super::TableArgs,
    /// gpulet+int and the ideal plan with pairwise interference factors
    /// measured on a GPU instead of gpulet's linear model: the JSON files of
    /// `sluice profile --device cuda A --pair B --split P --json` in DIR.
    #[arg(long, value_name = "DIR")]
    measured_interference: Option<PathBuf>,
    /// Worker threads for Fig. 16 (default: the CPUs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: Option<u32>,
    /// Scenarios of Fig. 17 (shipped names or .toml files).
    #[arg(
        long = "scenario",
        value_delimiter = ',',
        default_value = "game,traffic,scen1,scen2,scen3,scen4,scen5"
    )]
    scenarios: Vec<String>,
    /// Write the charts (gpulet-fig16.svg, gpulet-fig17.svg,
    /// gpulet-fig6.svg) into this folder, e.g. docs.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

fn parse_fig(s: &str) -> Result<bg::Fig, String> {
    bg::Fig::from_name(s).ok_or_else(|| {
        format!("`{s}` is not a figure of sluice bench gpulet; use 16 (or 5), 17 or 6")
    })
}

/// Computes the figures; writes the charts.
pub fn run(a: Args) -> ExitCode {
    let d = bg::GpuletOptions::default();
    let opts = bg::GpuletOptions {
        figs: a.figs,
        device: a.device,
        gpulet_data: a.data_dir,
        threads: a.threads.map_or(d.threads, |t| t as usize),
        fig17_scenarios: a.scenarios,
        tables: a.tables.source(),
        measured_interference: a.measured_interference,
    };
    let mut last: Option<(String, std::time::Instant)> = None;
    let r = bg::run(
        &sluice_model::ModelRegistry::builtin(),
        &opts,
        progress("sluice bench gpulet: measuring L(b, p)", "models"),
        |what, done, total| {
            let now = std::time::Instant::now();
            let started = match &last {
                Some((w, t)) if w == what => *t,
                _ => {
                    last = Some((what.to_owned(), now));
                    now
                }
            };
            eprint!(
                "\rsluice bench gpulet: {done}/{total} {what} ({:.0} s)",
                now.duration_since(started).as_secs_f64()
            );
            if done == total {
                eprintln!();
            }
        },
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    if let Some(dir) = a.plot {
        let plots = match bg::plots(&r) {
            Ok(plots) => plots,
            Err(e) => return fail(e),
        };
        for (name, svg) in plots {
            let path = dir.join(name);
            if let Err(e) = std::fs::write(&path, svg) {
                return fail(format!("--plot: cannot write {}: {e}", path.display()));
            }
            eprintln!("sluice bench gpulet: wrote {}", path.display());
        }
    }
    if a.json {
        print_json(&r)
    } else {
        print!("{}", bg::table(&r));
        ExitCode::SUCCESS
    }
}
