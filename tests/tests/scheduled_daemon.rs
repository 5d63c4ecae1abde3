//! The daemon with each scheduling policy on the GPU model
//! (`device.scheduler`): real client processes, real-time and best-effort
//! requests mixed, every output checked, everything reclaimed. Policies
//! this build does not have yet are skipped with a note.

use std::sync::Arc;

use sluice_sched::{PolicyKind, make_policy};
use sluice_tests::{ClientOpts, ClientProc, DaemonOpts, DaemonProc, PrioMix, TestDir, secs};

sluice_tests::role_entry!();

fn run_with(kind: PolicyKind) {
    let models = Arc::new(sluice_model::ModelRegistry::builtin());
    if make_policy(kind, &models).is_none() {
        eprintln!("note: policy {kind} is not built yet; skipped");
        return;
    }
    let mut daemon = DaemonProc::spawn(DaemonOpts {
        scheduler: kind.as_str(),
        ..DaemonOpts::default()
    });
    let dir = TestDir::new(&format!("sched-{kind}"));
    let procs: Vec<ClientProc> = (0..3u64)
        .map(|k| {
            let mut o = ClientOpts::echo(&format!("{kind}-{k}"), 500 + k, 60);
            o.depth = 1 + k as u32 * 2;
            o.prio = match k {
                0 => PrioMix::RealTime,
                1 => PrioMix::BestEffort,
                _ => PrioMix::Mixed,
            };
            ClientProc::spawn(daemon.socket(), &o, &dir)
        })
        .collect();
    for (k, p) in procs.into_iter().enumerate() {
        let r = p.finish(secs(60));
        assert_eq!(r.get("problem"), None, "{kind} client {k}: {r:?}");
        assert_eq!(r.u64("ok"), 60, "{kind} client {k}: {r:?}");
        assert_eq!(r.u64("bad"), 0, "{kind} client {k}: {r:?}");
    }
    let st = daemon.assert_healthy();
    assert_eq!(st.completed, 180, "{kind}: {st:?}");
    assert_eq!(st.errors, 0, "{kind}: {st:?}");
    assert!(st.device.contains(kind.as_str()), "{kind}: {}", st.device);
    assert!(
        sluice_tests::wait_for(|| daemon.status().clients.is_empty(), secs(30)),
        "{kind}: clients not reclaimed: {:?}",
        daemon.status()
    );
}

#[test]
fn seq_serves_real_clients() {
    let _w = sluice_tests::watchdog("seq_serves_real_clients", 90);
    run_with(PolicyKind::Seq);
}

#[test]
fn streams_serves_real_clients() {
    let _w = sluice_tests::watchdog("streams_serves_real_clients", 90);
    run_with(PolicyKind::Streams);
}

#[test]
fn wait_preempt_serves_real_clients() {
    let _w = sluice_tests::watchdog("wait_preempt_serves_real_clients", 90);
    run_with(PolicyKind::WaitPreempt);
}

#[test]
fn reef_serves_real_clients() {
    let _w = sluice_tests::watchdog("reef_serves_real_clients", 90);
    run_with(PolicyKind::Reef);
}

#[test]
fn paella_serves_real_clients() {
    let _w = sluice_tests::watchdog("paella_serves_real_clients", 90);
    run_with(PolicyKind::Paella);
}

#[test]
fn split_serves_real_clients() {
    let _w = sluice_tests::watchdog("split_serves_real_clients", 90);
    run_with(PolicyKind::Split);
}

#[test]
fn prema_serves_real_clients() {
    let _w = sluice_tests::watchdog("prema_serves_real_clients", 90);
    run_with(PolicyKind::Prema);
}

#[test]
fn rt_a_serves_real_clients() {
    let _w = sluice_tests::watchdog("rt_a_serves_real_clients", 90);
    run_with(PolicyKind::RtA);
}
