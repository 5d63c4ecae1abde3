//! `sluice bench ipc`: round-trip time and throughput of the request path,
//! against a plain Unix-socket request/response baseline in the same run.
//!
//! Every client runs in its own process. Phases, one after another so they
//! do not compete for the two cores of a small machine:
//! 1. `uds`: a blocking echo server thread in this process, a client process
//!    writing a 64-byte request and reading a 64-byte response;
//! 2. `spin`: embedded daemon (dispatcher spinning), client spinning on the
//!    completion ring, zero-time `null` model;
//! 3. `parked`: same daemon, client parks on the futex at once (spin 0), so
//!    each completion costs the daemon a `futex_wake` and the client a
//!    wake-up;
//! 4. `parked_both`: a daemon with `idle_spin_us = 0` (it parks in epoll
//!    between requests) and a parked client: two wake-ups per round trip,
//!    the same count as the socket baseline;
//! 5. `throughput`: spinning client keeping 64 requests in flight.

use std::io::{IsTerminal, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde::Serialize;

use super::roles::{BenchReport, UDS_MSG};
use super::{Summary, embedded_config, temp_socket};
use crate::Daemon;

/// Options.
#[derive(Debug, Clone, Copy)]
pub struct IpcOptions {
    /// Round trips per latency phase.
    pub samples: u64,
    /// Seconds of the throughput phase.
    pub seconds: u64,
    /// Requests in flight in the throughput phase.
    pub inflight: u32,
}

/// Percentiles as the JSON report names them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Pct {
    /// Median, ns.
    pub p50: u64,
    /// 99th percentile, ns.
    pub p99: u64,
    /// 99.9th percentile, ns.
    pub p999: u64,
    /// Mean, ns.
    pub mean: f64,
    /// Samples.
    pub count: u64,
}

impl From<Summary> for Pct {
    fn from(s: Summary) -> Self {
        Self {
            p50: s.p50,
            p99: s.p99,
            p999: s.p999,
            mean: s.mean,
            count: s.count,
        }
    }
}

/// The benchmark's result (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct IpcResult {
    /// Spinning client, spinning daemon.
    pub spin_rtt_ns: Pct,
    /// Parked client, spinning daemon.
    pub parked_rtt_ns: Pct,
    /// Parked client, parked daemon.
    pub parked_both_rtt_ns: Pct,
    /// Unix stream socket request/response baseline.
    pub uds_rtt_ns: Pct,
    /// Zero-time requests per second with `inflight` outstanding.
    pub throughput_rps: f64,
    /// uds p50 / spin p50.
    pub uds_over_spin_p50: f64,
    /// parked p50 / uds p50.
    pub parked_over_uds_p50: f64,
    /// parked_both p50 / uds p50.
    pub parked_both_over_uds_p50: f64,
    /// CPUs online.
    pub cpus: usize,
}

fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K{msg}");
    } else {
        eprintln!("{msg}");
    }
    let _ = std::io::stderr().flush();
}

fn child(exe: &Path, socket: &Path, mode: &str, o: &IpcOptions) -> Result<BenchReport, String> {
    let out = Command::new(exe)
        .arg("__bench-client")
        .arg("--socket")
        .arg(socket)
        .args(["--mode", mode, "--samples", &o.samples.to_string()])
        .args(["--seconds", &o.seconds.to_string()])
        .args(["--inflight", &o.inflight.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{mode} client failed ({}): {}", out.status, text.trim()));
    }
    serde_json::from_str(text.trim()).map_err(|e| format!("{mode} client report: {e}: {text}"))
}

fn uds_phase(exe: &Path, o: &IpcOptions) -> Result<BenchReport, String> {
    let path = temp_socket("bench-uds").map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path).map_err(|e| format!("bind {}: {e}", path.display()))?;
    let server = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut buf = [0u8; UDS_MSG];
            while s.read_exact(&mut buf).is_ok() {
                buf[8] = buf[8].wrapping_add(1);
                if s.write_all(&buf).is_err() {
                    break;
                }
            }
        }
    });
    let r = child(exe, &path, "uds", o);
    let _ = server.join();
    let _ = std::fs::remove_dir_all(path.parent().unwrap_or(Path::new("/nonexistent")));
    r
}

fn with_daemon<T>(
    idle_spin_us: u32,
    f: impl FnOnce(&Path) -> Result<T, String>,
) -> Result<T, String> {
    let socket = temp_socket(&format!("bench-ipc-{idle_spin_us}")).map_err(|e| e.to_string())?;
    let config = embedded_config(socket.clone(), idle_spin_us);
    let models = Arc::new(crate::model::ModelRegistry::builtin());
    let device = crate::runtime::make_device(&config, models.clone()).map_err(|e| e.to_string())?;
    let mut d = Daemon::start(config, models, device).map_err(|e| e.to_string())?;
    let r = f(&socket);
    d.shutdown();
    let _ = std::fs::remove_dir_all(socket.parent().unwrap_or(Path::new("/nonexistent")));
    r
}

/// Runs every phase.
pub fn run(exe: &Path, o: &IpcOptions) -> Result<IpcResult, String> {
    progress("bench ipc [1/5] Unix-socket baseline ...");
    let uds = uds_phase(exe, o)?;
    let (spin, parked, tput) = with_daemon(1_000_000, |s| {
        progress("bench ipc [2/5] spin round trips ...");
        let spin = child(exe, s, "spin", o)?;
        progress("bench ipc [3/5] parked-client round trips ...");
        let parked = child(exe, s, "parked", o)?;
        progress("bench ipc [5/5] throughput ...");
        let tput = child(exe, s, "throughput", o)?;
        Ok((spin, parked, tput))
    })?;
    progress("bench ipc [4/5] parked-client, parked-daemon round trips ...");
    let both = with_daemon(0, |s| child(exe, s, "parked", o))?;
    progress("bench ipc done\n");
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Ok(IpcResult {
        uds_over_spin_p50: ratio(uds.rtt_ns.p50, spin.rtt_ns.p50),
        parked_over_uds_p50: ratio(parked.rtt_ns.p50, uds.rtt_ns.p50),
        parked_both_over_uds_p50: ratio(both.rtt_ns.p50, uds.rtt_ns.p50),
        spin_rtt_ns: spin.rtt_ns.into(),
        parked_rtt_ns: parked.rtt_ns.into(),
        parked_both_rtt_ns: both.rtt_ns.into(),
        uds_rtt_ns: uds.rtt_ns.into(),
        throughput_rps: tput.throughput_rps,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
    })
}

/// The human-readable table.
pub fn table(r: &IpcResult) -> String {
    let row = |name: &str, p: &Pct| {
        format!(
            "{:<34} {:>9} {:>9} {:>9} {:>10.0} {:>8}\n",
            name, p.p50, p.p99, p.p999, p.mean, p.count
        )
    };
    let mut s = format!(
        "{:<34} {:>9} {:>9} {:>9} {:>10} {:>8}\n",
        "round trip (ns)", "p50", "p99", "p99.9", "mean", "samples"
    );
    s += &row("sluice, client spins", &r.spin_rtt_ns);
    s += &row("sluice, client parks (futex)", &r.parked_rtt_ns);
    s += &row("sluice, client and daemon park", &r.parked_both_rtt_ns);
    s += &row("Unix stream socket baseline", &r.uds_rtt_ns);
    s += &format!(
        "\nthroughput: {:.0} requests/s (zero-time model, 64 in flight)\n\
         socket / spin p50: {:.1}x   parked / socket p50: {:.2}x   parked-both / socket p50: {:.2}x\n",
        r.throughput_rps, r.uds_over_spin_p50, r.parked_over_uds_p50, r.parked_both_over_uds_p50
    );
    s
}
