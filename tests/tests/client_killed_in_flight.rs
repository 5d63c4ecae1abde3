//! A client process is SIGKILLed with its rings full of long requests. The
//! daemon must notice (its socket closes), cancel the dead client's work on
//! the device, reclaim its region, and keep serving everyone else.

use sluice_tests::{
    ClientOpts, ClientProc, DaemonOpts, DaemonProc, TestDir, client_by_id, connect, lookup, secs,
    wait_for,
};

sluice_tests::role_entry!();

#[test]
fn client_killed_in_flight() {
    let _w = sluice_tests::watchdog("client_killed_in_flight", 60);
    // Time x100: each resnet152 request takes 1.34 s, so the flood below
    // (256 real-time requests) would keep the device busy for ~6 minutes,
    // far past the watchdog, unless the daemon cancels it.
    let mut daemon = DaemonProc::spawn(DaemonOpts {
        time_scale: 100.0,
        ..DaemonOpts::default()
    });
    let dir = TestDir::new("killed");

    // A well-behaved client, connected before the victim.
    let mut survivor = connect(daemon.socket(), "survivor");
    let echo = lookup(&mut survivor, "echo_small");
    sluice_tests::run_one(&mut survivor, &echo, 7, 0).expect("survivor before the flood");

    let mut victim = ClientProc::spawn(
        daemon.socket(),
        &ClientOpts::flood("victim", "resnet152"),
        &dir,
    );
    let victim_id: u32 = victim.wait_key("client_id", secs(30)).parse().unwrap();
    victim.wait_key("ready", secs(30));
    let submitted: u64 = victim.wait_key("submitted", secs(1)).parse().unwrap();
    assert_eq!(
        submitted, 256,
        "the flood should stop at cq_entries requests in flight"
    );

    // The daemon has taken the victim's requests: one runs, the rest queue.
    assert!(
        wait_for(
            || {
                let st = daemon.status();
                client_by_id(&st, victim_id).is_some_and(|c| c.submitted == submitted)
                    && st.device_queued >= 2
            },
            secs(30)
        ),
        "the daemon never took the victim's requests: {:?}",
        daemon.status()
    );
    let st = daemon.status();
    assert!(
        client_by_id(&st, victim_id).unwrap().on_device >= 1,
        "{st:?}"
    );

    victim.kill();

    // The victim disappears from status and its device work is cancelled.
    assert!(
        wait_for(
            || {
                let st = daemon.status();
                client_by_id(&st, victim_id).is_none() && st.device_queued == 0
            },
            secs(30)
        ),
        "killed client not reclaimed / its work not cancelled: {:?}",
        daemon.status()
    );
    let st = daemon.assert_healthy();
    assert_eq!(
        st.dropped_clients, 0,
        "a killed client is a disconnect, not a protocol violation"
    );
    assert_eq!(st.clients.len(), 1, "only the survivor is left: {st:?}");
    assert!(
        st.completed < 1 + submitted,
        "the victim's queue cannot have run to completion: {st:?}"
    );

    // The survivor's requests complete correctly afterwards (they would sit
    // behind minutes of the victim's work had it not been cancelled).
    for i in 1..=20 {
        sluice_tests::run_one(&mut survivor, &echo, 7, i)
            .unwrap_or_else(|e| panic!("survivor request {i} after the kill: {e}"));
    }
    // And a brand-new client process works too.
    let r = ClientProc::spawn(daemon.socket(), &ClientOpts::echo("after", 8, 50), &dir)
        .finish(secs(30));
    assert_eq!(r.u64("ok"), 50, "{r:?}");

    let st = daemon.assert_healthy();
    let me = client_by_id(&st, survivor.client_id()).expect("survivor still connected");
    assert_eq!(me.completed, 21, "{me:?}");
    assert_eq!(me.errors, 0, "{me:?}");
    assert_eq!(st.device_queued, 0, "{st:?}");
}
