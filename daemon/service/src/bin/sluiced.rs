//! `sluiced`: the sluice GPU scheduling daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use sluice_service::config::Config;
use sluice_service::startup::{self, StartupError};
use sluice_service::sys::Systemd;
use sluice_service::{Daemon, config::ConfigError};

/// The privileged sluice daemon: owns the GPU, serves clients over
/// shared-memory rings, schedules their inference requests.
///
/// Clients connect to the control socket (daemon.socket), are checked with
/// SO_PEERCRED against [access], and get a sealed shared-memory region with
/// a submission and a completion ring. Under systemd (Type=notify) it
/// reports readiness and feeds the watchdog. SIGTERM or SIGINT stops it
/// (clients then see Disconnected); SIGHUP re-scans `[models] dir` with
/// device.backend = "cpu".
///
/// Check a configuration without starting: `sluiced --config FILE
/// --check-config`, or `sluiced --check-config FILE` (the same).
#[derive(Parser, Debug)]
#[command(name = "sluiced", version, about, long_about)]
struct Args {
    /// TOML configuration file (see daemon/service/systemd/sluiced.toml and
    /// docs/configuration.md). Without it, every key takes its default.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the configuration and exit instead of starting: 0 and the
    /// effective configuration on stdout when start-up would get as far as
    /// serving, 2 and start-up's own error when it would not. Checks FILE
    /// when given, else the --config file, else the defaults. It runs
    /// start-up's steps (models, the backend's build and driver check, the
    /// simulated GPU), short of opening a real GPU.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    check_config: Option<Option<PathBuf>>,
    /// Override daemon.socket.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Write the man page `sluiced.8`, generated from these options, into
    /// DIR (created if missing) and exit, e.g. `sluiced --man
    /// /usr/share/man/man8`.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "check_config", "socket"])]
    man: Option<PathBuf>,
}

fn print_error(e: &dyn std::error::Error) {
    eprintln!("sluiced: error: {e}");
    let mut src = e.source();
    while let Some(s) = src {
        eprintln!("  caused by: {s}");
        src = s.source();
    }
}

/// The config file to use, if any, and the configuration with `--socket`
/// applied.
fn load_config(file: Option<&Path>, socket: Option<PathBuf>) -> Result<Config, ConfigError> {
    let mut config = match file {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if let Some(s) = socket {
        config.daemon.socket = s;
    }
    Ok(config)
}

/// `--check-config`: prints the effective configuration and what start-up
/// would serve, or start-up's error.
fn check_config(file: Option<&Path>, socket: Option<PathBuf>) -> Result<(), StartupError> {
    let config = load_config(file, socket)?;
    let checked = startup::check(&config)?;
    match file {
        Some(f) => println!("# {} is valid", f.display()),
        None => println!("# no --config: the default configuration is valid"),
    }
    println!("# models: {}", checked.models);
    if checked.device.is_simulated() {
        println!("# device: {}", checked.device);
    } else {
        println!(
            "# device: {} (found; start-up compiles the kernels and loads the models onto it)",
            checked.device
        );
    }
    print!("{}", config.summary());
    Ok(())
}

/// `--man DIR`: writes `DIR/sluiced.8` and names it on stdout.
fn write_man(dir: &Path) -> ExitCode {
    let page = dir.join("sluiced.8");
    let mut roff = Vec::new();
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| {
            // NAME's one line: the package description `-h` shows is longer.
            let cmd = Args::command().about("the sluice GPU inference scheduling daemon");
            clap_mangen::Man::new(cmd).section("8").render(&mut roff)
        })
        .and_then(|()| std::fs::write(&page, &roff));
    match written {
        Ok(()) => {
            println!("sluiced: wrote {}", page.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "sluiced: error: cannot write {}: {e}; give --man a folder this user may write",
                page.display()
            );
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(dir) = &args.man {
        return write_man(dir);
    }
    startup::init_tracing();
    if let Some(check_file) = args.check_config {
        let file = match (check_file, args.config) {
            (Some(a), Some(b)) if a != b => Args::command()
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "--check-config {} and --config {} name different files; give the \
                         file once: `--check-config FILE` or `--config FILE --check-config`",
                        a.display(),
                        b.display()
                    ),
                )
                .exit(),
            (a, b) => a.or(b),
        };
        return match check_config(file.as_deref(), args.socket) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                print_error(&e);
                ExitCode::from(e.exit_status())
            }
        };
    }
    // Block the stop signals in every thread (those the CUDA driver starts
    // included); main waits for them below.
    let signals = startup::block_stop_signals();
    let mut daemon = match start(args.config.as_deref(), args.socket) {
        Ok(d) => d,
        Err(e) => {
            print_error(&e);
            return ExitCode::from(e.exit_status());
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
            if sig == libc::SIGHUP {
                tracing::info!("SIGHUP: re-scanning the model repository");
                if let Err(why) = daemon.rescan_models() {
                    tracing::warn!("SIGHUP: the models stay as they are: {why}");
                }
                continue;
            }
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

/// Start-up: the steps [`startup::check`] runs, then the device is opened
/// and the daemon started.
fn start(file: Option<&Path>, socket: Option<PathBuf>) -> Result<Daemon, StartupError> {
    let config = load_config(file, socket)?;
    startup::serve(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn man_page_is_section_8_and_lists_the_options() {
        let dir = std::env::temp_dir().join(format!("sluiced-man-{}", std::process::id()));
        assert_eq!(write_man(&dir), ExitCode::SUCCESS);
        let page = std::fs::read_to_string(dir.join("sluiced.8")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(page.contains(".TH sluiced 8"), "{page}");
        for option in ["config", "check\\-config", "socket", "man"] {
            assert!(
                page.contains(&format!("\\-\\-{option}")),
                "no --{option} in {page}"
            );
        }
    }

    #[test]
    fn man_refuses_the_serving_options() {
        let e = Args::try_parse_from(["sluiced", "--man", "/tmp/m", "--config", "/etc/x.toml"])
            .unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
}
