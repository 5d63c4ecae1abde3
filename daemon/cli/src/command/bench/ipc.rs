//! `sluice bench ipc`: the request path's round trip against a Unix
//! socket ([`sluice_bench::ipc`]).

use std::process::ExitCode;

use sluice_bench::ipc;

use crate::command::{exe, fail, print_json};

/// Round-trip time of the request path (submit → daemon → completion
/// seen by the client, zero-time model, separate processes): spinning,
/// parked, and a plain Unix-socket request/response baseline measured
/// in the same run; plus requests/s with many in flight.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Round trips per latency phase.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(100..=100_000_000))]
    samples: u64,
    /// Seconds of the throughput phase.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=600))]
    seconds: u64,
    /// Requests kept in flight in the throughput phase.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    inflight: u32,
    /// Serve the daemon's metrics endpoint and scrape it every this many
    /// ms during the daemon phases (0: no endpoint); compare runs with and
    /// without it to see what being scraped costs the request path.
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=60_000))]
    scrape_every_ms: u32,
    /// Print one JSON object (nanoseconds) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Starts an embedded daemon and this executable's benchmark clients.
pub fn run(a: Args) -> ExitCode {
    sluice_service::startup::init_tracing_quiet();
    let exe = match exe() {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let o = ipc::IpcOptions {
        samples: a.samples,
        seconds: a.seconds,
        inflight: a.inflight,
        scrape_every_ms: a.scrape_every_ms,
    };
    match ipc::run(&exe, &o) {
        Ok(r) if a.json => print_json(&r),
        Ok(r) => {
            print!("{}", ipc::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
