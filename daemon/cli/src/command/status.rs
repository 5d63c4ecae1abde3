//! `sluice status`: a running daemon's clients, queues and counters.

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_cli::status;

use super::{fail_chain, print_json};

/// Ask a running daemon for its clients, queues and counters.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Daemon socket (default: $SLUICE_SOCKET, else the per-user default).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Print the daemon's JSON as is.
    #[arg(long)]
    json: bool,
}

/// Reads every page of the client list, merged into one document (so
/// `--json` is one valid document at any number of clients).
pub fn run(Args { socket, json }: Args) -> ExitCode {
    let path = socket.unwrap_or_else(sluice_client::default_socket_path);
    match status::query_all(&path) {
        Ok(s) if json => print_json(&s),
        Ok(s) => {
            print!("{}", status::table(&s));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}
