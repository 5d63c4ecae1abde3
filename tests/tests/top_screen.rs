//! `sluice top` on a real terminal: the `sluiced` and `sluice` binaries
//! (built next to this test binary), `sluice top` in a detached tmux
//! session of 160 × 48 cells, the screen read with `tmux capture-pane -p`
//! every 50 ms. A client that connects and a model that is loaded appear
//! on the screen (the delay is printed, not bounded); a request's
//! latency fills its model's row; a killed daemon leaves "daemon gone: …,
//! retrying" on the screen with `top` still running; `q` quits and gives
//! the terminal back.
//!
//! Without tmux the test prints a SKIPPED banner and passes, unless
//! `SLUICE_REQUIRE_TMUX=1` (CI), which makes it fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_cli::models::{Op, command};
use sluice_client::{Client, Priority, Span, Submit, status};
use sluice_onnx::test_models::gemm;
use sluice_tests::{TestDir, secs, skipped};

sluice_tests::role_entry!();

const K: usize = 16;
const M: usize = 4;

/// A tmux server of this test's own (its socket in the test's directory),
/// killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c.stdin(Stdio::null());
        c
    }

    /// The pane's visible text.
    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "top"])
            .output()
            .expect("run tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls the screen every 50 ms until `pred` holds; the time it took,
    /// or the last screen after `limit`.
    fn wait_screen(
        &self,
        limit: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return Ok(start.elapsed());
            }
            if start.elapsed() > limit {
                return Err(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").stderr(Stdio::null()).status();
    }
}

fn tmux_or_skip(test: &str) -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let why = "tmux not found; install it (apt-get install -y tmux) to run this test";
        assert!(
            std::env::var_os("SLUICE_REQUIRE_TMUX").is_none_or(|v| v != "1"),
            "{test}: {why} (SLUICE_REQUIRE_TMUX=1)"
        );
        eprintln!("\n{}\n", "!".repeat(72));
        skipped(test, why);
        eprintln!("{}\n", "!".repeat(72));
    }
    ok
}

fn binary_or_skip(test: &str, name: &str, build: &str) -> Option<PathBuf> {
    let found = sluice_tests::find_binary(name);
    if found.is_none() {
        skipped(
            test,
            &format!("no {name} binary next to this test binary; run `{build}` first"),
        );
    }
    found
}

fn write_model(dir: &Path, name: &str) {
    let w: Vec<f32> = (0..K * M).map(|i| i as f32 / 64.0).collect();
    let b = vec![0.5f32; M];
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, gemm(K, M, &w, &b, true)).unwrap();
    std::fs::rename(&tmp, dir.join(format!("{name}.onnx"))).unwrap();
}

/// The row of `model` in the models table (the line that starts with it
/// inside the table's border).
fn model_row<'a>(screen: &'a str, model: &str) -> Option<&'a str> {
    screen
        .lines()
        .find(|l| l.trim_start_matches('│').starts_with(model))
}

#[test]
fn top_shows_a_client_and_a_model_as_they_arrive() {
    const TEST: &str = "top_screen";
    let _w = sluice_tests::watchdog(TEST, 120);
    if !tmux_or_skip(TEST) {
        return;
    }
    let Some(sluiced) = binary_or_skip(TEST, "sluiced", "cargo build -p sluice-service") else {
        return;
    };
    let Some(sluice) = binary_or_skip(TEST, "sluice", "cargo build -p sluice-cli") else {
        return;
    };
    let dir = TestDir::new("top");
    let models = dir.join("models");
    std::fs::create_dir_all(&models).unwrap();
    write_model(&models, "base_fc");
    let socket = dir.join("sluiced.sock");
    let config = format!(
        "[daemon]\nsocket = {:?}\nrealtime_priority = 0\nlock_memory = false\n\n\
         [device]\nbackend = \"cpu\"\ncpu_threads = 1\n\n[models]\ndir = {:?}\n\n\
         [clients]\narena_bytes = 65536\n",
        socket.display().to_string(),
        models.display().to_string()
    );
    let mut daemon = sluice_tests::spawn_sluiced(&sluiced, dir.path(), &socket, &config);

    let tmux = Tmux {
        socket: dir.join("tmux.sock"),
    };
    let top = format!(
        "{} top --socket {}; echo TOP-EXITED $?; sleep 60",
        sluice.display(),
        socket.display()
    );
    let started = tmux
        .cmd()
        .args(["new-session", "-d", "-x", "160", "-y", "48", "-s", "top"])
        .arg(&top)
        .env("TERM", "xterm-256color")
        .status()
        .expect("run tmux new-session");
    assert!(started.success(), "tmux new-session failed: {started}");
    let pid_line = format!("sluiced pid {}", daemon.pid());
    tmux.wait_screen(secs(10), |s| {
        s.contains(&pid_line) && model_row(s, "base_fc").is_some()
    })
    .unwrap_or_else(|s| panic!("top never showed the daemon and its model:\n{s}"));

    // A client connects: its name on the screen.
    let arrived = Instant::now();
    let mut client = Client::connect(&socket, "top-e2e-watcher").expect("connect");
    tmux.wait_screen(secs(10), |s| s.contains("top-e2e-watcher"))
        .unwrap_or_else(|s| panic!("the client never appeared:\n{s}"));
    let client_ms = arrived.elapsed().as_secs_f64() * 1e3;
    println!("top: client on the screen {client_ms:.0} ms after it connected");
    eprintln!("top: client on the screen {client_ms:.0} ms after it connected");

    // A model is loaded: its row on the screen after the daemon's reply.
    write_model(&models, "arrived_fc");
    let (ok, report) = command(&socket, &Op::Load("arrived_fc".into())).expect("models load");
    assert!(ok, "{report:?}");
    let loaded = Instant::now();
    tmux.wait_screen(secs(10), |s| model_row(s, "arrived_fc").is_some())
        .unwrap_or_else(|s| panic!("the model never appeared:\n{s}"));
    let model_ms = loaded.elapsed().as_secs_f64() * 1e3;
    println!("top: model on the screen {model_ms:.0} ms after it was loaded");
    eprintln!("top: model on the screen {model_ms:.0} ms after it was loaded");

    // Requests on it: its real-time row gets a rate and percentiles.
    let info = client.lookup_model("arrived_fc").expect("lookup");
    for _ in 0..20 {
        client.write_arena(0, &[0u8; K * 4]).unwrap();
        let t = client
            .submit(&Submit {
                model_id: info.id,
                priority: Priority::RealTime,
                deadline_ns: 0,
                input: Span {
                    off: 0,
                    len: (K * 4) as u64,
                },
                output: Span {
                    off: (K * 4) as u64,
                    len: (M * 4) as u64,
                },
            })
            .expect("submit");
        let done = client.wait(t).expect("wait");
        assert_eq!(done.status, status::OK, "{}", status::describe(done.status));
    }
    tmux.wait_screen(secs(10), |s| {
        model_row(s, "arrived_fc").is_some_and(|r| r.contains(" rt ") && r.contains("µs"))
    })
    .unwrap_or_else(|s| panic!("the model's latency never showed:\n{s}"));

    // The daemon dies: top says so and keeps running.
    drop(client);
    daemon.signal_and_wait(rustix::process::Signal::KILL, secs(10));
    tmux.wait_screen(secs(10), |s| {
        s.contains("daemon gone: ") && s.contains("retrying")
    })
    .unwrap_or_else(|s| panic!("top did not say the daemon is gone:\n{s}"));
    std::thread::sleep(Duration::from_millis(600));
    let s = tmux.screen();
    assert!(
        !s.contains("TOP-EXITED") && s.contains("retrying"),
        "top should keep retrying:\n{s}"
    );

    // q quits with status 0 and leaves the alternate screen.
    let sent = tmux
        .cmd()
        .args(["send-keys", "-t", "top", "q"])
        .status()
        .expect("run tmux send-keys");
    assert!(sent.success());
    let s = tmux
        .wait_screen(secs(10), |s| s.contains("TOP-EXITED"))
        .map(|_| tmux.screen())
        .unwrap_or_else(|s| panic!("q did not quit top:\n{s}"));
    assert!(s.contains("TOP-EXITED 0"), "{s}");
    assert!(
        !s.contains("daemon gone"),
        "the terminal should be back on its main screen:\n{s}"
    );
    // The delays are printed, not bounded: a test's verdict must not depend on how fast the
    // machine is. By construction they are at most one refresh (`--interval-ms`, 250 ms) plus
    // a status query and a draw; docs/metrics.md gives the measured figures.
    println!("top: delays to the screen: client {client_ms:.0} ms, model {model_ms:.0} ms");
}
