//! Eight client processes at once against one daemon process: every
//! request of every client completes with exactly the output the simulated
//! GPU computes for *that* client's input.

use sluice_tests::{ClientOpts, ClientProc, DaemonOpts, DaemonProc, PrioMix, TestDir, secs};

sluice_tests::role_entry!();

const CLIENTS: u64 = 8;
const PER_CLIENT: u64 = 200;

#[test]
fn many_clients() {
    let _w = sluice_tests::watchdog("many_clients", 60);
    let mut daemon = DaemonProc::spawn(DaemonOpts::default());
    let dir = TestDir::new("many");

    let procs: Vec<ClientProc> = (0..CLIENTS)
        .map(|k| {
            let mut o = ClientOpts::echo(&format!("many-{k}"), 1000 + k, PER_CLIENT);
            // Different pipelining depths and priority mixes per client.
            o.depth = 1 + (k as u32 % 4) * 3;
            // Half never spin: every wait sleeps on the completion futex,
            // so a lost wake-up would show as a timeout.
            o.spin_us = (k % 2 == 1).then_some(0);
            o.prio = match k % 3 {
                0 => PrioMix::Mixed,
                1 => PrioMix::RealTime,
                _ => PrioMix::BestEffort,
            };
            ClientProc::spawn(daemon.socket(), &o, &dir)
        })
        .collect();

    let mut ids = Vec::new();
    let (mut rt, mut be) = (0, 0);
    for (k, p) in procs.into_iter().enumerate() {
        let r = p.finish(secs(45));
        assert_eq!(r.get("problem"), None, "client {k}: {r:?}");
        assert_eq!(r.u64("ok"), PER_CLIENT, "client {k}: {r:?}");
        assert_eq!(r.u64("bad"), 0, "client {k}: {r:?}");
        rt += r.u64("rt");
        be += r.u64("be");
        ids.push(r.u64("client_id"));
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, CLIENTS, "client ids must be distinct");
    assert_eq!(rt + be, CLIENTS * PER_CLIENT);
    assert!(rt > 0 && be > 0, "both priority classes were exercised");

    // The daemon counted every request exactly once, and every client has
    // been reclaimed after it exited.
    let st = daemon.assert_healthy();
    assert_eq!(st.submitted, CLIENTS * PER_CLIENT, "{st:?}");
    assert_eq!(st.completed, CLIENTS * PER_CLIENT, "{st:?}");
    assert_eq!(st.errors, 0, "{st:?}");
    assert_eq!(st.dropped_clients, 0, "{st:?}");
    assert!(
        sluice_tests::wait_for(
            || daemon.status().clients.is_empty() && daemon.status().device_queued == 0,
            secs(30)
        ),
        "exited clients were not reclaimed: {:?}",
        daemon.status()
    );
}
