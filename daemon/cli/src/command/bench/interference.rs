//! `sluice bench interference`: gpulet's interference study on the GPU
//! model's partitions ([`sluice_bench::interference`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_bench::interference as bi;

use crate::command::{fail, print_json, progress};

/// gpulet's interference study (§3.4, §4.4) on the GPU model: pairs of
/// models side by side in two partitions of one simulated GPU (pairs of
/// inception, resnet50, mobilenet, vgg19, resnet18 × batches × splits),
/// each one's latency against alone in its partition; the slowdown
/// distribution (beside gpulet Fig. 7), gpulet's linear model fitted to
/// it and its error (beside Fig. 10), and the gpulet authors' own
/// coefficients on their measured utilisations for the same pairs.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Device profile.
    #[arg(long, default_value = "mi50")]
    device: String,
    /// Batch sizes (both models; default 2,4,8,16,32).
    #[arg(long, value_delimiter = ',')]
    batches: Vec<u32>,
    /// Percent of the CUs for the first model of a pair (default
    /// 20,40,50,60,80).
    #[arg(long, value_delimiter = ',')]
    splits: Vec<u32>,
    /// Requests each model completes at least while co-running.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    requests: u32,
    /// The gpulet authors' data: a folder with 2080ti/ and 3080/ in the
    /// format of the repository's data/gpulet (default: that data, built
    /// in).
    #[arg(long = "data-dir", visible_alias = "gpulet-data", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Also draw the slowdown CDF (beside gpulet Fig. 7) and the fit's
    /// error CDF (beside Fig. 10) into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

/// Runs every pair, batch and split; writes the plot.
pub fn run(a: Args) -> ExitCode {
    let d = bi::InterferenceOptions::default();
    let opts = bi::InterferenceOptions {
        device: a.device,
        batches: if a.batches.is_empty() {
            d.batches
        } else {
            a.batches
        },
        splits: if a.splits.is_empty() {
            d.splits
        } else {
            a.splits
        },
        requests: a.requests,
        gpulet_data: a.data_dir,
    };
    let r = bi::run(&opts, progress("sluice bench interference", "cases"));
    if let (Ok(r), Some(path)) = (&r, &a.plot) {
        let svg = match bi::plot(r) {
            Ok(svg) => svg,
            Err(e) => return fail(e),
        };
        if let Err(e) = std::fs::write(path, svg) {
            return fail(format!("cannot write the plot to {}: {e}", path.display()));
        }
    }
    match r {
        Ok(r) if a.json => print_json(&r),
        Ok(r) => {
            print!("{}", bi::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
