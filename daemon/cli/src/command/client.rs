//! `sluice __client` (hidden): one client process of the demo
//! ([`sluice_bench::roles::run_client`]); prints its report as JSON.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use sluice_bench::roles::{self, ClientRole, Pattern};

use super::{fail, print_json};

/// (internal) a demo client process.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long)]
    socket: PathBuf,
    #[arg(long)]
    name: String,
    #[arg(long)]
    model: String,
    #[arg(long, value_enum)]
    priority: Prio,
    #[arg(long)]
    period_us: Option<u64>,
    /// Closed loop: requests kept in flight.
    #[arg(long, default_value_t = 1)]
    window: u32,
    #[arg(long)]
    duration_ms: u64,
    #[arg(long, default_value_t = 200)]
    spin_us: u64,
    /// Do not check outputs (a real backend computes them).
    #[arg(long)]
    no_check: bool,
}

/// `--priority`.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Prio {
    Rt,
    Be,
}

/// Runs the client role.
pub fn run(a: Args) -> ExitCode {
    let role = ClientRole {
        check: !a.no_check,
        socket: a.socket,
        name: a.name,
        model: a.model,
        priority: match a.priority {
            Prio::Rt => sluice_client::Priority::RealTime,
            Prio::Be => sluice_client::Priority::BestEffort,
        },
        pattern: a
            .period_us
            .map_or(Pattern::ClosedLoop { window: a.window }, |p| {
                Pattern::Periodic(Duration::from_micros(p))
            }),
        duration: Duration::from_millis(a.duration_ms),
        spin: Duration::from_micros(a.spin_us),
    };
    match roles::run_client(&role) {
        Ok(r) => print_json(&r),
        Err(e) => fail(e),
    }
}
