//! `sluice __bench-client` (hidden): one client process of `sluice bench
//! ipc` ([`sluice_bench::roles::run_bench`]); prints its report as JSON.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use sluice_bench::roles::{self, BenchMode, BenchRole};

use super::{fail, print_json};

/// (internal) an IPC benchmark client process.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long)]
    socket: PathBuf,
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long)]
    samples: u64,
    #[arg(long)]
    seconds: u64,
    #[arg(long)]
    inflight: u32,
    #[arg(long)]
    cpu: Option<usize>,
}

/// `--mode`: [`BenchMode`] by name.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Mode {
    Spin,
    Parked,
    ParkedDevice,
    Uds,
    Throughput,
    Floor,
    FloorPair,
    Spin50,
    Adaptive,
}

/// Runs the benchmark role.
pub fn run(a: Args) -> ExitCode {
    let role = BenchRole {
        cpu: a.cpu,
        socket: a.socket,
        mode: match a.mode {
            Mode::Spin => BenchMode::Spin,
            Mode::Parked => BenchMode::Parked,
            Mode::ParkedDevice => BenchMode::ParkedDevice,
            Mode::Uds => BenchMode::Uds,
            Mode::Throughput => BenchMode::Throughput,
            Mode::Floor => BenchMode::Floor,
            Mode::FloorPair => BenchMode::FloorPair,
            Mode::Spin50 => BenchMode::Spin50,
            Mode::Adaptive => BenchMode::Adaptive,
        },
        samples: a.samples,
        inflight: a.inflight,
        duration: Duration::from_secs(a.seconds),
    };
    match roles::run_bench(&role) {
        Ok(r) => print_json(&r),
        Err(e) => fail(e),
    }
}
