//! `sluice models`: a running daemon's model repository.

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_cli::models::{self, Op};

use super::{fail, fail_chain, print_json};

/// List, load, unload or re-scan the models a running daemon serves from
/// its `[models] dir`, without restarting it.
///
/// `load NAME` imports `NAME.onnx` (with its `NAME.toml`) and puts it in
/// force as the next version; a model's id stays the same across versions.
/// Requests already accepted complete on the version they were accepted
/// for; none fails or is lost. `unload NAME` refuses new requests for the
/// model (`UNKNOWN_MODEL`); those already accepted complete. `rescan` does
/// what SIGHUP does: new files loaded, changed ones reloaded, removed ones
/// unloaded. A file that fails to load leaves its model's version in force;
/// the error is printed and kept in `sluice status`. Changing the models
/// needs root or the daemon's user, and a daemon with device.backend =
/// "cpu" (the simulated and CUDA backends serve the models they started
/// with). Exit status 1 when the daemon reports an error.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    op: Cmd,
    /// Daemon socket (default: $SLUICE_SOCKET, else the per-user default).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Print the daemon's JSON report as is.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// Each model served: id, version, tensors, source.
    List,
    /// Load NAME.onnx (or NAME.json) of the repository, or reload it as a
    /// new version.
    Load {
        /// The model's name: its file's stem.
        name: String,
    },
    /// Stop serving NAME.
    Unload {
        /// The model's name.
        name: String,
    },
    /// Re-scan the repository (what SIGHUP does).
    Rescan,
}

/// Sends the command; prints the report.
pub fn run(Args { op, socket, json }: Args) -> ExitCode {
    let path = socket.unwrap_or_else(sluice_client::default_socket_path);
    let op = match op {
        Cmd::List => Op::List,
        Cmd::Load { name } => Op::Load(name),
        Cmd::Unload { name } => Op::Unload(name),
        Cmd::Rescan => Op::Rescan,
    };
    match models::command(&path, &op) {
        Ok((ok, report)) => {
            if json {
                let _ = print_json(&report);
            } else {
                print!("{}", models::table(&report));
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                fail("the daemon reported an error (above)")
            }
        }
        Err(e) => fail_chain(&e),
    }
}
