//! `sluice run MODEL.onnx`: one inference outside the daemon
//! ([`sluice_cli::model_file::run`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_cli::model_file::{self, RunRequest};

use super::fail;

/// Run one inference of an ONNX model outside the daemon, on the CPU
/// reference executor: `sluice run MODEL.onnx --input NAME=FILE.npy --out
/// DIR` writes one .npy per graph output and prints each output's type and
/// shape and the load and run times (docs/onnx.md).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The ONNX model file.
    model: PathBuf,
    /// An input tensor as `NAME=FILE.npy` (repeat for each input; `sluice
    /// inspect` lists the model's inputs).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Folder to write one `.npy` per graph output into, named after the
    /// output with every character outside `[A-Za-z0-9._-]` replaced by `_`.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Where to run: `cpu` (the reference executor) or `cuda` (not yet for
    /// imported models: refused with a message).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    device: String,
    /// Batch size; by default the inputs' first dimension. Models whose
    /// inputs have no symbolic first dimension take batch 1 only.
    #[arg(long)]
    batch: Option<usize>,
}

/// Runs the command.
pub fn run(a: Args) -> ExitCode {
    let req = RunRequest {
        model: a.model,
        inputs: a.inputs,
        out: a.out,
        device: a.device,
        batch: a.batch,
    };
    match model_file::run(&req) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
