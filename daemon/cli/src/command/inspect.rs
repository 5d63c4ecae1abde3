//! `sluice inspect MODEL.onnx`: what a model file holds
//! ([`sluice_cli::model_file::inspect`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_cli::model_file::{self, InspectRequest};

use super::fail;

/// Describe an ONNX model: inputs and outputs with types and shapes (the
/// batch dimension as N), operator counts, parameter bytes and estimated
/// FLOPs. A model sluice cannot run gets an error that names why
/// (unsupported operators with their nodes, bad tensors, external data
/// outside the model's folder, mismatched shapes); docs/onnx.md.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The ONNX model file.
    model: PathBuf,
    /// Also write the model's manifest for the simulated GPU (one kernel
    /// per node, launch configurations and times ESTIMATED on the h100
    /// profile) to FILE; a folder of such files is a `[models] dir` the
    /// daemon's simulated backends serve.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// Batch size of the manifest (models without a symbolic batch: 1).
    #[arg(long, default_value_t = 1)]
    batch: usize,
}

/// Runs the command.
pub fn run(a: Args) -> ExitCode {
    match model_file::inspect(&InspectRequest {
        model: a.model,
        manifest: a.manifest,
        batch: a.batch,
    }) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
