//! The CPU backend serving an ONNX model from `[models] dir` while the
//! file is replaced and reloaded ten times (two versions with different
//! weights, alternating), with several clients submitting all along:
//! every request completes exactly once, OK, with the output of one of the
//! two versions (checked against a direct computation of `x · w + b`);
//! then `models unload` under load: requests accepted before it complete
//! OK, later ones get `UNKNOWN_MODEL`, none is lost; a load brings the
//! model back under its old id.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use shm_proto::{Priority, status};
use sluice_cli::models::{Op, command};
use sluice_client::{Client, Span, Submit};
use sluice_onnx::test_models::{gemm, gemm_reference};
use sluice_service::config::{BackendKind, Config};
use sluice_tests::{TestDir, secs, wait_for};

sluice_tests::role_entry!();

const K: usize = 64;
const M: usize = 16;
const CLIENTS: usize = 4;
const DEPTH: usize = 4;
const RELOADS: u32 = 10;

fn version_weights(v: usize) -> (Vec<f32>, Vec<f32>) {
    let s = if v == 0 { 1.0 } else { -0.5 };
    let w = (0..K * M)
        .map(|i| s * (((i * 7919) % 97) as f32 / 97.0 - 0.5))
        .collect();
    let b = (0..M).map(|i| s * i as f32 * 0.25).collect();
    (w, b)
}

fn write_version(dir: &Path, v: usize) {
    let (w, b) = version_weights(v);
    let tmp = dir.join(".fc.onnx.tmp");
    std::fs::write(&tmp, gemm(K, M, &w, &b, true)).unwrap();
    std::fs::rename(&tmp, dir.join("fc.onnx")).unwrap();
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[derive(Debug, Default)]
struct Tally {
    submitted: u64,
    ok: [u64; 2],
    unknown_model: u64,
    unloaded: u64,
    problems: Vec<String>,
}

/// One client: `DEPTH` requests in flight, each with its own input, until
/// `stop`; after `unloading` it also stops at its first `UNKNOWN_MODEL`.
fn client(
    socket: &Path,
    k: usize,
    stop: &AtomicBool,
    unloading: &AtomicBool,
    done: &AtomicU64,
    ready: &AtomicU64,
) -> Tally {
    let mut c = Client::connect(socket, &format!("reload-{k}")).unwrap();
    let info = c.lookup_model("fc").unwrap();
    ready.fetch_add(1, Ordering::SeqCst);
    assert_eq!(info.input_bytes, (K * 4) as u64);
    let refs: Vec<_> = (0..2).map(version_weights).collect();
    let mut t = Tally::default();
    let slot = (K * 4 + M * 4) as u64;
    let mut in_flight: Vec<Option<(sluice_client::Ticket, Vec<f32>)>> = vec![None; DEPTH];
    let mut seq = 0u64;
    let mut finished = false;
    while !finished || in_flight.iter().any(Option::is_some) {
        for (i, f) in in_flight.iter_mut().enumerate() {
            if let Some((ticket, x)) = f.take() {
                let done_c = c.wait(ticket).unwrap();
                done.fetch_add(1, Ordering::Relaxed);
                match done_c.status {
                    status::OK => {
                        let mut out = vec![0u8; M * 4];
                        c.read_arena(i as u64 * slot + (K * 4) as u64, &mut out)
                            .unwrap();
                        let got: Vec<f32> = out
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect();
                        let which = (0..2).find(|&v| {
                            let want = gemm_reference(K, M, &refs[v].0, &refs[v].1, &x);
                            got.iter().zip(&want).all(|(g, r)| (g - r).abs() <= 1e-5)
                        });
                        match which {
                            Some(v) => t.ok[v] += 1,
                            None => t
                                .problems
                                .push(format!("output of neither version: {got:?}")),
                        }
                    }
                    status::UNKNOWN_MODEL if unloading.load(Ordering::SeqCst) => {
                        t.unknown_model += 1;
                        finished = true;
                    }
                    status::MODEL_UNLOADED if unloading.load(Ordering::SeqCst) => {
                        t.unloaded += 1;
                        finished = true;
                    }
                    s => t
                        .problems
                        .push(format!("status {s} ({})", status::describe(s))),
                }
            }
            if finished || stop.load(Ordering::SeqCst) {
                finished = true;
                continue;
            }
            seq += 1;
            let x: Vec<f32> = (0..K)
                .map(|j| ((seq as usize * 31 + j * 17 + k * 1000) % 101) as f32 / 50.0 - 1.0)
                .collect();
            c.write_arena(i as u64 * slot, &f32s(&x)).unwrap();
            let ticket = c
                .submit(&Submit {
                    model_id: info.id,
                    priority: if seq % 2 == 0 {
                        Priority::RealTime
                    } else {
                        Priority::BestEffort
                    },
                    deadline_ns: 0,
                    input: Span {
                        off: i as u64 * slot,
                        len: (K * 4) as u64,
                    },
                    output: Span {
                        off: i as u64 * slot + (K * 4) as u64,
                        len: (M * 4) as u64,
                    },
                })
                .unwrap();
            t.submitted += 1;
            *f = Some((ticket, x));
        }
    }
    t
}

fn wait_done(done: &AtomicU64, at_least: u64) {
    assert!(
        wait_for(|| done.load(Ordering::Relaxed) >= at_least, secs(60)),
        "requests stopped completing"
    );
}

#[test]
fn requests_survive_ten_reloads_and_an_unload() {
    let _w = sluice_tests::watchdog("model_reload", 240);
    let dir = TestDir::new("reload");
    let models = dir.join("models");
    std::fs::create_dir_all(&models).unwrap();
    write_version(&models, 0);
    let mut config = Config::default();
    config.daemon.socket = dir.join("sluiced.sock");
    config.daemon.idle_spin_us = 0;
    config.device.backend = BackendKind::Cpu;
    config.device.cpu_threads = 2;
    config.models.dir = Some(models.clone());
    config.clients.on_device_per_client = 2;
    let daemon = sluice_service::startup::serve(config).unwrap();
    let socket = daemon.socket_path().to_owned();

    let stop = Arc::new(AtomicBool::new(false));
    let unloading = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicU64::new(0));
    let spawn_clients = || -> Vec<std::thread::JoinHandle<Tally>> {
        ready.store(0, Ordering::SeqCst);
        let handles = (0..CLIENTS)
            .map(|k| {
                let (s, st, un, d, r) = (
                    socket.clone(),
                    stop.clone(),
                    unloading.clone(),
                    done.clone(),
                    ready.clone(),
                );
                std::thread::spawn(move || client(&s, k, &st, &un, &d, &r))
            })
            .collect();
        assert!(
            wait_for(|| ready.load(Ordering::SeqCst) == CLIENTS as u64, secs(60)),
            "the clients never looked the model up"
        );
        handles
    };
    let clients = spawn_clients();
    wait_done(&done, 50);

    // Ten reloads, alternating the two versions; after each, more requests
    // complete than can have been in flight before it, so some ran on it.
    let in_flight_max = (CLIENTS * DEPTH) as u64;
    for r in 1..=RELOADS {
        write_version(&models, r as usize % 2);
        let (ok, report) = command(&socket, &Op::Load("fc".into())).unwrap();
        assert!(ok, "{report:?}");
        assert_eq!(report.reloaded, ["fc"]);
        assert_eq!(report.models.len(), 1);
        assert_eq!(report.models[0].id, 0, "the id is stable across versions");
        assert_eq!(report.models[0].version, 1 + r);
        let now = done.load(Ordering::Relaxed);
        wait_done(&done, now + in_flight_max + 20);
    }
    // A re-scan (what SIGHUP does) sees the changed file too.
    write_version(&models, 1);
    daemon.rescan_models().unwrap();
    assert!(
        wait_for(
            || {
                let st = sluice_tests::query_status(&socket).unwrap();
                st.model_versions
                    .first()
                    .is_some_and(|m| m.version == 2 + RELOADS)
            },
            secs(60)
        ),
        "the re-scan did not load the changed file"
    );
    let now = done.load(Ordering::Relaxed);
    wait_done(&done, now + in_flight_max + 20);
    stop.store(true, Ordering::SeqCst);
    let mut total = Tally::default();
    for h in clients {
        let t = h.join().unwrap();
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        assert_eq!(t.submitted, t.ok[0] + t.ok[1], "{t:?}");
        total.submitted += t.submitted;
        total.ok[0] += t.ok[0];
        total.ok[1] += t.ok[1];
    }
    assert!(
        total.ok[0] > 0 && total.ok[1] > 0,
        "both versions served: {total:?}"
    );
    let st = sluice_tests::query_status(&socket).unwrap();
    assert_eq!(st.submitted, total.submitted, "{st:?}");
    assert_eq!(
        st.completed, total.submitted,
        "every request completed once"
    );
    assert_eq!(st.errors, 0, "{st:?}");
    assert!(
        st.models_reload.starts_with("supported"),
        "{}",
        st.models_reload
    );
    eprintln!(
        "reloads: {} requests, {} on version A, {} on version B",
        total.submitted, total.ok[0], total.ok[1]
    );

    // Unload under load: what was accepted completes, later requests are
    // refused, none is lost.
    stop.store(false, Ordering::SeqCst);
    let before = sluice_tests::query_status(&socket).unwrap();
    let clients = spawn_clients();
    let now = done.load(Ordering::Relaxed);
    wait_done(&done, now + 50);
    unloading.store(true, Ordering::SeqCst);
    let (ok, report) = command(&socket, &Op::Unload("fc".into())).unwrap();
    assert!(ok, "{report:?}");
    assert_eq!(report.unloaded, ["fc"]);
    assert!(report.models.is_empty());
    let mut after_unload = Tally::default();
    for h in clients {
        let t = h.join().unwrap();
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        assert_eq!(
            t.submitted,
            t.ok[0] + t.ok[1] + t.unknown_model + t.unloaded,
            "every request completed: {t:?}"
        );
        assert!(t.unknown_model + t.unloaded >= 1, "{t:?}");
        after_unload.submitted += t.submitted;
        after_unload.ok[1] += t.ok[0] + t.ok[1];
        after_unload.unknown_model += t.unknown_model;
        after_unload.unloaded += t.unloaded;
    }
    let st = sluice_tests::query_status(&socket).unwrap();
    assert_eq!(st.submitted - before.submitted, after_unload.submitted);
    assert_eq!(
        (st.completed - before.completed) + (st.errors - before.errors),
        after_unload.submitted,
        "none lost, none duplicated: {st:?}"
    );
    eprintln!(
        "unload: {} requests, {} OK, {} UNKNOWN_MODEL, {} MODEL_UNLOADED",
        after_unload.submitted,
        after_unload.ok[1],
        after_unload.unknown_model,
        after_unload.unloaded
    );
    let mut probe = Client::connect(&socket, "probe").unwrap();
    assert!(probe.lookup_model("fc").is_err(), "fc is unloaded");
    // Loading it again gives it back its id, as the next version.
    let (ok, report) = command(&socket, &Op::Load("fc".into())).unwrap();
    assert!(ok, "{report:?}");
    assert_eq!(report.loaded, ["fc"]);
    assert_eq!(
        (report.models[0].id, report.models[0].version),
        (0, 3 + RELOADS)
    );
    assert_eq!(probe.lookup_model("fc").unwrap().id, 0);
    // A broken file at reload keeps the version in force.
    std::fs::write(models.join("fc.onnx"), b"not onnx").unwrap();
    let (ok, report) = command(&socket, &Op::Load("fc".into())).unwrap();
    assert!(!ok);
    assert!(report.errors[0].contains("fc.onnx"), "{report:?}");
    assert_eq!(report.models[0].version, 3 + RELOADS);
    let st = sluice_tests::query_status(&socket).unwrap();
    assert!(
        st.models_errors[0].contains("fc.onnx"),
        "{:?}",
        st.models_errors
    );
    drop(probe);
    drop(daemon);
}
