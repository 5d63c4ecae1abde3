//! `sluiced`: the sluice GPU scheduling daemon.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sluice_service::config::Config;
use sluice_service::sys::Systemd;
use sluice_service::{Daemon, startup};

/// The privileged sluice daemon: owns the GPU, serves clients over
/// shared-memory rings, schedules their inference requests.
///
/// Clients connect to the control socket (daemon.socket), are checked with
/// SO_PEERCRED against [access], and get a sealed shared-memory region with
/// a submission and a completion ring. Under systemd (Type=notify) it
/// reports readiness and feeds the watchdog. SIGTERM or SIGINT stops it;
/// clients then see Disconnected.
#[derive(Parser, Debug)]
#[command(name = "sluiced", version, about, long_about)]
struct Args {
    /// TOML configuration file (see daemon/service/systemd/sluiced.toml and
    /// docs/configuration.md). Without it, every key takes its default.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check FILE, print the configuration that would be used, and exit
    /// (0 when valid, 2 when not).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// Override daemon.socket.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

fn print_error(e: &dyn std::error::Error) {
    eprintln!("sluiced: error: {e}");
    let mut src = e.source();
    while let Some(s) = src {
        eprintln!("  caused by: {s}");
        src = s.source();
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    startup::init_tracing();
    if let Some(path) = args.check_config {
        return match Config::load(&path)
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
            .and_then(|c| startup::load_models(&c).map(|m| (c, m)))
        {
            Ok((c, models)) => {
                println!("# {} is valid ({} models)", path.display(), models.len());
                print!("{}", c.summary());
                ExitCode::SUCCESS
            }
            Err(e) => {
                print_error(e.as_ref());
                ExitCode::from(2)
            }
        };
    }
    let mut config = match &args.config {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                print_error(&e);
                return ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    if let Some(s) = args.socket {
        config.daemon.socket = s;
    }
    let models = match startup::load_models(&config) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            print_error(e.as_ref());
            return ExitCode::from(2);
        }
    };
    // Block the stop signals in every thread; main waits for them below.
    let signals = startup::block_stop_signals();
    let device = match startup::make_device(&config, models.clone()) {
        Ok(d) => d,
        Err(e) => {
            print_error(e.as_ref());
            return ExitCode::from(2);
        }
    };
    let mut daemon = match Daemon::start(config, models, device) {
        Ok(d) => d,
        Err(e) => {
            print_error(&e);
            return ExitCode::FAILURE;
        }
    };
    let systemd = Systemd::from_env();
    let _ = systemd.notify_ready();
    let _ = systemd.notify_status(&format!("serving on {}", daemon.socket_path().display()));
    let tick = systemd
        .watchdog_interval()
        .unwrap_or(Duration::from_secs(1))
        .min(Duration::from_secs(1));
    let mut last_beat = u64::MAX;
    loop {
        if let Some(sig) = startup::wait_signal(&signals, tick) {
            tracing::info!(signal = sig, "stopping");
            break;
        }
        let beat = daemon
            .shared()
            .heartbeat
            .load(std::sync::atomic::Ordering::Relaxed);
        // Feed the watchdog only while the dispatcher makes progress.
        if beat != last_beat && daemon.is_running() {
            let _ = systemd.notify_watchdog();
        }
        if !daemon.is_running() {
            tracing::error!("dispatcher thread ended unexpectedly");
            return ExitCode::FAILURE;
        }
        last_beat = beat;
    }
    let _ = systemd.notify_stopping();
    daemon.shutdown();
    ExitCode::SUCCESS
}
