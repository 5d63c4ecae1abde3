//! `sluice bench ipc`: round-trip time and throughput of the request path,
//! against a plain Unix-socket request/response baseline in the same run.
//!
//! Placement is fixed so every variant pays the same cross-core costs: on a
//! machine with two or more CPUs the client process is pinned to CPU 0 and
//! the server side — the daemon's dispatcher thread, or the socket echo
//! thread — to CPU 1 (a deployment pins the daemon to its own core too).
//!
//! Every client runs in its own process. Phases, one after another so they
//! do not compete for the two cores of a small machine:
//! 1. `uds`: a blocking echo server thread in this process, a client process
//!    writing a 64-byte request and reading a 64-byte response; then
//!    `floor`, the hardware floor, measured the way `spin` is (client
//!    process on CPU 0, server thread of this process on CPU 1, the client
//!    reading the clock before and after each round trip): the client
//!    stores a counter to one cache line, a server thread spinning on it
//!    stores it back to another, the client spins until it sees it. Both
//!    spin with the CPU's pause hint, as the request path does. No round
//!    trip moves fewer cache lines, so `spin / floor` is the request
//!    path's overhead over the machine. Round trip `i` uses line `i % 256`
//!    of each side, as the rings use their slots; `floor_pair`, the same on
//!    one fixed pair of lines, is measured just before it
//!    ([`crate::ipc_floor`] says why the ring is the yardstick);
//! 2. `spin`: embedded daemon (dispatcher spinning), client spinning on the
//!    completion ring, zero-time `null` model;
//! 3. `nospin`: same daemon, zero-time model, client spin budget 0: it goes
//!    straight to the park protocol, and sleeps only if the completion has
//!    not arrived by then (mostly it has: see `slept`);
//! 4. `parked`: same daemon, client spin budget 0 on the 50 µs `echo_small`
//!    model, so the client is asleep on its futex when the completion comes;
//!    the device time the daemon stamped (`finished_ns - started_ns`) is
//!    subtracted, leaving submit path + `futex_wake` + the client's wake-up;
//! 5. `throughput`: spinning client keeping 64 requests in flight;
//! 6. `parked_both`: a daemon with `idle_spin_us = 0` (it sleeps in
//!    `epoll_wait` between requests) and a client with spin budget 0,
//!    zero-time model: two wake-ups per round trip, as in the socket
//!    baseline; then, on the same sleeping daemon, `sleepy_daemon_spin50`
//!    (client spin budget fixed at 50 µs, the old default) and
//!    `sleepy_daemon_adaptive` (the adaptive budget, the default now): a
//!    client whose budget is shorter than the daemon's wake-up falls asleep
//!    too and pays a second wake-up.

use std::io::{IsTerminal, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::ipc_floor::{FloorKind, FloorMap};
use crate::roles::{BenchReport, UDS_MSG};
use crate::{embedded_config, temp_socket};
use sluice_service::Daemon;
use sluice_stats::Summary;

/// Options.
#[derive(Debug, Clone, Copy)]
pub struct IpcOptions {
    /// Round trips per latency phase.
    pub samples: u64,
    /// Seconds of the throughput phase.
    pub seconds: u64,
    /// Requests in flight in the throughput phase.
    pub inflight: u32,
    /// With a non-zero value, every daemon of the run serves its metrics
    /// endpoint (`[metrics] listen` on a free loopback port) and a thread
    /// of this process scrapes `GET /metrics` every this many ms while the
    /// phases run: the cost of being scraped, on the same machine.
    pub scrape_every_ms: u32,
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

/// A round trip split at the daemon's `received_ns` clock read.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Split {
    /// Client submit → daemon took the request (the line there, the
    /// dispatcher's polling delay).
    pub to_daemon: u64,
    /// Daemon took the request → client holds the completion (the
    /// dispatcher's and device's work, the line back, the client's wait).
    pub from_daemon: u64,
}

/// Fraction of waits that actually slept on the futex.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Slept {
    /// `parked` phase.
    pub parked: f64,
    /// `nospin` phase.
    pub nospin: f64,
    /// `parked_both` phase.
    pub parked_both: f64,
    /// `sleepy_daemon_spin50` phase.
    pub sleepy_daemon_spin50: f64,
    /// `sleepy_daemon_adaptive` phase.
    pub sleepy_daemon_adaptive: f64,
}

/// The benchmark's result (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct IpcResult {
    /// The hardware floor: a raw cross-process cache-line ping-pong with
    /// the same placement as `spin`, one line each way per round trip, the
    /// lines rotating through 256 per side as a ring's slots do
    /// ([`FloorKind::Ring`]).
    pub floor_rtt_ns: Pct,
    /// The same ping-pong on one fixed pair of lines ([`FloorKind::Pair`]):
    /// on a mesh CPU its cost depends on where those two lines live.
    pub floor_pair_rtt_ns: Pct,
    /// Spinning client, spinning daemon.
    pub spin_rtt_ns: Pct,
    /// spin p50 / floor p50 (same run).
    pub ratio_p50: f64,
    /// spin p99 / floor p99 (same run).
    pub ratio_p99: f64,
    /// spin p50 / pair floor p50 (same run).
    pub ratio_pair_p50: f64,
    /// spin p99 / pair floor p99 (same run).
    pub ratio_pair_p99: f64,
    /// Where a `spin` round trip's time goes (medians, split at the
    /// daemon's `received_ns` stamp).
    pub spin_split_p50_ns: Split,
    /// Client asleep on its futex when the completion comes, spinning
    /// daemon (device time subtracted).
    pub parked_rtt_ns: Pct,
    /// Client with spin budget 0, zero-time model, spinning daemon.
    pub nospin_rtt_ns: Pct,
    /// Parked client, parked daemon.
    pub parked_both_rtt_ns: Pct,
    /// Daemon asleep between requests (`idle_spin_us = 0`), client with a
    /// fixed 50 µs spin budget (the old default), zero-time model.
    pub sleepy_daemon_spin50_rtt_ns: Pct,
    /// The same with the adaptive spin budget (the default now).
    pub sleepy_daemon_adaptive_rtt_ns: Pct,
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
    /// Fraction of waits that slept on the futex, per phase.
    pub slept: Slept,
    /// CPUs online.
    pub cpus: usize,
    /// `"client cpu 0, server cpu 1"`, or `"unpinned"` on one CPU.
    pub placement: String,
    /// [`IpcOptions::scrape_every_ms`] (0: no endpoint, no scraper).
    pub scrape_every_ms: u32,
    /// Scrapes answered 200 during the daemon phases.
    pub scrapes: u64,
    /// Scrapes that failed (connect, read, or not 200).
    pub scrape_failures: u64,
}

/// What the scraper thread of [`with_daemon`] did.
#[derive(Debug, Clone, Copy, Default)]
struct Scrapes {
    ok: u64,
    failed: u64,
}

/// One `GET /metrics` over TCP; whether it was answered 200.
fn scrape_once(at: &str) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(at) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: sluice\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = Vec::new();
    s.read_to_end(&mut body).is_ok() && body.starts_with(b"HTTP/1.1 200 ")
}

fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K{msg}");
    } else {
        eprintln!("{msg}");
    }
    let _ = std::io::stderr().flush();
}

/// (client CPU, server CPU) when the machine has two CPUs or more.
fn placement() -> Option<(usize, usize)> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (n >= 2).then_some((0, 1))
}

fn child(exe: &Path, socket: &Path, mode: &str, o: &IpcOptions) -> Result<BenchReport, String> {
    let mut cmd = Command::new(exe);
    cmd.arg("__bench-client");
    if let Some((client, _)) = placement() {
        cmd.args(["--cpu", &client.to_string()]);
    }
    let out = cmd
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
        return Err(format!(
            "{mode} client failed ({}): {}",
            out.status,
            text.trim()
        ));
    }
    serde_json::from_str(text.trim()).map_err(|e| format!("{mode} client report: {e}: {text}"))
}

fn uds_phase(exe: &Path, o: &IpcOptions) -> Result<BenchReport, String> {
    let path = temp_socket("bench-uds").map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path).map_err(|e| format!("bind {}: {e}", path.display()))?;
    let server = std::thread::spawn(move || {
        if let Some((_, cpu)) = placement() {
            let _ = sluice_service::sys::pin_current_thread(cpu);
        }
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

/// Runs `f` against an embedded daemon; with `scrape_every_ms`, its
/// metrics endpoint is scraped that often meanwhile.
fn with_daemon<T>(
    idle_spin_us: u32,
    scrape_every_ms: u32,
    f: impl FnOnce(&Path) -> Result<T, String>,
) -> Result<(T, Scrapes), String> {
    let socket = temp_socket(&format!("bench-ipc-{idle_spin_us}")).map_err(|e| e.to_string())?;
    let mut config = embedded_config(socket.clone(), idle_spin_us);
    config.daemon.dispatcher_core = placement().map(|(_, server)| server);
    if scrape_every_ms > 0 {
        config.metrics.listen = Some(sluice_service::config::MetricsListen::Tcp(
            std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        ));
    }
    let models = Arc::new(sluice_model::ModelRegistry::builtin());
    let device =
        sluice_service::startup::make_device(&config, models.clone()).map_err(|e| e.to_string())?;
    let mut d = Daemon::start(config, models, device).map_err(|e| e.to_string())?;
    let at = d.shared().status().metrics;
    let stop = AtomicBool::new(false);
    let (r, scrapes) = std::thread::scope(|s| {
        let scraper = (scrape_every_ms > 0).then(|| {
            let (stop, at) = (&stop, &at);
            s.spawn(move || {
                let mut n = Scrapes::default();
                let every = std::time::Duration::from_millis(u64::from(scrape_every_ms));
                while !stop.load(Ordering::Relaxed) {
                    if scrape_once(at) {
                        n.ok += 1;
                    } else {
                        n.failed += 1;
                    }
                    std::thread::sleep(every);
                }
                n
            })
        });
        let r = f(&socket);
        stop.store(true, Ordering::Relaxed);
        let n = scraper
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        (r, n)
    });
    d.shutdown();
    let _ = std::fs::remove_dir_all(socket.parent().unwrap_or(Path::new("/nonexistent")));
    Ok((r?, scrapes))
}

fn floor_phase(exe: &Path, o: &IpcOptions, kind: FloorKind) -> Result<BenchReport, String> {
    let path = temp_socket("bench-floor").map_err(|e| e.to_string())?;
    let m = FloorMap::map(&path, true, kind)?;
    let stop = AtomicBool::new(false);
    let mode = match kind {
        FloorKind::Ring => "floor",
        FloorKind::Pair => "floor-pair",
    };
    let r = std::thread::scope(|s| {
        let (m, stop) = (&m, &stop);
        s.spawn(move || {
            if let Some((_, cpu)) = placement() {
                let _ = sluice_service::sys::pin_current_thread(cpu);
            }
            m.serve(stop);
        });
        let r = child(exe, &path, mode, o);
        stop.store(true, Ordering::Relaxed);
        r
    });
    drop(m);
    let _ = std::fs::remove_dir_all(path.parent().unwrap_or(Path::new("/nonexistent")));
    r
}

/// Runs every phase.
pub fn run(exe: &Path, o: &IpcOptions) -> Result<IpcResult, String> {
    progress("bench ipc [1/6] Unix-socket baseline ...");
    let uds = uds_phase(exe, o)?;
    progress("bench ipc [1/6] cache-line ping-pong floors ...");
    let floor_pair = floor_phase(exe, o, FloorKind::Pair)?;
    let floor = floor_phase(exe, o, FloorKind::Ring)?;
    let ((spin, nospin, parked, tput), scrapes_a) =
        with_daemon(1_000_000, o.scrape_every_ms, |s| {
            progress("bench ipc [2/6] spinning client ...");
            let spin = child(exe, s, "spin", o)?;
            progress("bench ipc [3/6] client with spin budget 0 ...");
            let nospin = child(exe, s, "parked", o)?;
            progress("bench ipc [4/6] sleeping client ...");
            let parked = child(exe, s, "parked-device", o)?;
            progress("bench ipc [5/6] throughput ...");
            let tput = child(exe, s, "throughput", o)?;
            Ok((spin, nospin, parked, tput))
        })?;
    progress("bench ipc [6/6] sleeping client, sleeping daemon ...");
    let ((both, spin50, adaptive), scrapes_b) = with_daemon(0, o.scrape_every_ms, |s| {
        let both = child(exe, s, "parked", o)?;
        progress("bench ipc [6/6] sleeping daemon, client spin budget 50 µs / adaptive ...");
        let spin50 = child(exe, s, "spin50", o)?;
        let adaptive = child(exe, s, "adaptive", o)?;
        Ok((both, spin50, adaptive))
    })?;
    progress("bench ipc done\n");
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Ok(IpcResult {
        ratio_p50: ratio(spin.rtt_ns.p50, floor.rtt_ns.p50),
        ratio_p99: ratio(spin.rtt_ns.p99, floor.rtt_ns.p99),
        ratio_pair_p50: ratio(spin.rtt_ns.p50, floor_pair.rtt_ns.p50),
        ratio_pair_p99: ratio(spin.rtt_ns.p99, floor_pair.rtt_ns.p99),
        floor_pair_rtt_ns: floor_pair.rtt_ns.into(),
        spin_split_p50_ns: Split {
            to_daemon: spin.to_daemon_p50_ns,
            from_daemon: spin.from_daemon_p50_ns,
        },
        floor_rtt_ns: floor.rtt_ns.into(),
        uds_over_spin_p50: ratio(uds.rtt_ns.p50, spin.rtt_ns.p50),
        parked_over_uds_p50: ratio(parked.rtt_ns.p50, uds.rtt_ns.p50),
        parked_both_over_uds_p50: ratio(both.rtt_ns.p50, uds.rtt_ns.p50),
        spin_rtt_ns: spin.rtt_ns.into(),
        parked_rtt_ns: parked.rtt_ns.into(),
        nospin_rtt_ns: nospin.rtt_ns.into(),
        slept: Slept {
            parked: parked.slept_fraction,
            nospin: nospin.slept_fraction,
            parked_both: both.slept_fraction,
            sleepy_daemon_spin50: spin50.slept_fraction,
            sleepy_daemon_adaptive: adaptive.slept_fraction,
        },
        sleepy_daemon_spin50_rtt_ns: spin50.rtt_ns.into(),
        sleepy_daemon_adaptive_rtt_ns: adaptive.rtt_ns.into(),
        parked_both_rtt_ns: both.rtt_ns.into(),
        uds_rtt_ns: uds.rtt_ns.into(),
        throughput_rps: tput.throughput_rps,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        placement: placement().map_or("unpinned".into(), |(c, s)| {
            format!("client cpu {c}, server cpu {s}")
        }),
        scrape_every_ms: o.scrape_every_ms,
        scrapes: scrapes_a.ok + scrapes_b.ok,
        scrape_failures: scrapes_a.failed + scrapes_b.failed,
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
    s += &row("cache-line ping-pong (floor)", &r.floor_rtt_ns);
    s += &row("  the same on one pair of lines", &r.floor_pair_rtt_ns);
    s += &row("sluice, client spins", &r.spin_rtt_ns);
    s += &row("sluice, client spin budget 0", &r.nospin_rtt_ns);
    s += &row("sluice, client asleep (futex)", &r.parked_rtt_ns);
    s += &row("sluice, client and daemon asleep", &r.parked_both_rtt_ns);
    s += &row(
        "daemon asleep, client spin 50 µs",
        &r.sleepy_daemon_spin50_rtt_ns,
    );
    s += &row(
        "daemon asleep, client adaptive spin",
        &r.sleepy_daemon_adaptive_rtt_ns,
    );
    s += &row("Unix stream socket baseline", &r.uds_rtt_ns);
    s += &format!(
        "\nspin / floor: p50 {:.2}x, p99 {:.2}x (one pair of lines: {:.2}x, {:.2}x)   \
         spin p50 split: {} ns to the daemon, {} ns back\n",
        r.ratio_p50,
        r.ratio_p99,
        r.ratio_pair_p50,
        r.ratio_pair_p99,
        r.spin_split_p50_ns.to_daemon,
        r.spin_split_p50_ns.from_daemon
    );
    s += &format!(
        "throughput: {:.0} requests/s (zero-time model, 64 in flight)\n\
         socket / spin p50: {:.1}x   asleep / socket p50: {:.2}x   both asleep / socket p50: {:.2}x\n\
         waits that slept: spin budget 0 {:.0}%, client asleep {:.0}%, both asleep {:.0}%, \
         daemon asleep + client spin 50 µs {:.0}%, + adaptive {:.0}%\n\
         ('client asleep' excludes the 50 µs the simulated device spends on echo_small)\n",
        r.throughput_rps,
        r.uds_over_spin_p50,
        r.parked_over_uds_p50,
        r.parked_both_over_uds_p50,
        r.slept.nospin * 100.0,
        r.slept.parked * 100.0,
        r.slept.parked_both * 100.0,
        r.slept.sleepy_daemon_spin50 * 100.0,
        r.slept.sleepy_daemon_adaptive * 100.0
    );
    if r.scrape_every_ms > 0 {
        s += &format!(
            "metrics endpoint scraped every {} ms during the daemon phases: {} scrapes, {} failed\n",
            r.scrape_every_ms, r.scrapes, r.scrape_failures
        );
    }
    s
}
