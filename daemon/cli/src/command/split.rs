//! `sluice split MODEL`: SPLIT's evenly sized blocks
//! ([`sluice_cli::split_cmd`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_cli::split_cmd::{self as sc, SplitArgs};

use super::{fail_chain, parse, print_json};

/// Split a model into evenly sized blocks (SPLIT, ICPP'23 §3.3) for
/// block-level preemption on a device profile: a genetic search over
/// cut points for SPLIT's Eq. 2 fitness, with each cut costed on
/// sluice's path (the launch pipeline drains at a block boundary; see
/// docs/split.md). Prints the cut points, block times, their standard
/// deviation, the overhead, Eq. 1's expected wait of a short request,
/// the generations to converge and the wall time; with --exhaustive
/// also the exhaustive optimum and the GA's gap. Without --blocks it
/// tries m = 1..=--max-blocks and picks the m with the least expected
/// wait plus time added to the model.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A built-in model (alexnet, bert205, bert_base, densenet,
    /// efficientnet_b0, gpt2, inception, mnasnet, mobilenet, resnet152,
    /// resnet18, resnet50, vgg16, vgg19, yolov3; docs/models.md).
    model: String,
    /// Exactly this many blocks (default: choose among 1..=--max-blocks).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
    blocks: Option<u64>,
    /// Largest block count tried when --blocks is not given.
    #[arg(long, default_value_t = sluice_split::DEFAULT_MAX_BLOCKS as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
    max_blocks: u64,
    /// Device profile whose launch costs price a cut (mi50, gv100, h100).
    #[arg(long, default_value = "mi50", value_parser = parse::device)]
    device: String,
    /// Seed of the genetic search (same seed, same result).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also evaluate every cut set (refused above 50 million) and
    /// report the optimum, its wall time and the GA's gap.
    #[arg(long)]
    exhaustive: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the chosen split into this manifest as its `splits` entry
    /// for the device (replacing one for the same device; the built-in
    /// manifest is the starting point when the file is new); the
    /// exhaustive optimum when --exhaustive, else the GA's best.
    #[arg(long, value_name = "FILE.json")]
    out: Option<PathBuf>,
}

/// Splits, optionally writes the split into a manifest, prints it.
pub fn run(a: Args) -> ExitCode {
    let args = SplitArgs {
        model: a.model,
        blocks: a.blocks.map(|b| b as usize),
        max_blocks: a.max_blocks as usize,
        device: a.device,
        seed: a.seed,
        exhaustive: a.exhaustive,
    };
    let (r, graph) = match sc::run(&args) {
        Ok(x) => x,
        Err(e) => return fail_chain(&e),
    };
    if let Some(path) = &a.out {
        if let Err(e) = sc::write_into_manifest(&r, &graph, path) {
            return fail_chain(&e);
        }
        eprintln!(
            "sluice split: wrote the {}-block split of `{}` for `{}` into {}",
            r.chosen_blocks,
            r.model,
            r.device,
            path.display()
        );
    }
    if a.json {
        print_json(&r)
    } else {
        print!("{}", sc::table(&r));
        ExitCode::SUCCESS
    }
}
