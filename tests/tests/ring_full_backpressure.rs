//! Back-pressure with tiny rings (4 submission, 4 completion slots): the
//! library pushes back with `TooManyInFlight` / `RingFull`, and a client
//! that bypasses the library and overfills its submission ring past its
//! completion credit never loses a request: the daemon takes only what it
//! can complete, and every request completes exactly once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shm_proto::status;
use sluice_client::{Error, Priority, Submit};
use sluice_tests::{
    DaemonOpts, DaemonProc, PrioMix, RawRings, RunSpec, client_by_id, connect, expected, lookup,
    run_requests, secs, slot_spans, test_input, wait_for,
};

sluice_tests::role_entry!();

fn tiny_daemon(sq: u32, cq: u32, time_scale: f64) -> DaemonProc {
    DaemonProc::spawn(DaemonOpts {
        sq_entries: sq,
        cq_entries: cq,
        arena_bytes: 2 << 20,
        time_scale,
        ..DaemonOpts::default()
    })
}

#[test]
fn library_pushes_back_and_nothing_is_lost() {
    let _w = sluice_tests::watchdog("library_pushes_back_and_nothing_is_lost", 60);
    let mut daemon = tiny_daemon(4, 4, 1.0);
    let mut c = connect(daemon.socket(), "tiny");
    // vgg19: 4.4 ms of kernels a request, 48 KiB in, 8 KiB out.
    let m = lookup(&mut c, "vgg19");

    // Submit until the library says stop.
    let mut tickets = Vec::new();
    let stop = loop {
        let slot = tickets.len() as u32;
        let (input, output) = slot_spans(&m, slot);
        c.write_arena(
            input.off,
            &test_input(1, u64::from(slot), m.input_bytes as usize),
        )
        .unwrap();
        match c.submit(&Submit {
            model_id: m.id,
            priority: Priority::RealTime,
            deadline_ns: 0,
            input,
            output,
        }) {
            Ok(t) => tickets.push((t, slot)),
            Err(e) => break e,
        }
        assert!(
            tickets.len() <= 4,
            "more in flight than the completion ring holds"
        );
    };
    assert!(
        matches!(stop, Error::TooManyInFlight | Error::RingFull),
        "unexpected {stop:?}"
    );
    assert_eq!(tickets.len(), 4, "cq_entries requests fit in flight");
    assert_eq!(c.in_flight(), 4);

    // Every one completes exactly once, with the right output.
    for &(t, slot) in &tickets {
        let done = c.wait_timeout(t, Some(secs(30))).expect("wait");
        let (_, out) = slot_spans(&m, slot);
        let input = test_input(1, u64::from(slot), m.input_bytes as usize);
        sluice_tests::check_completion(&c, &m, &done, &input, out)
            .unwrap_or_else(|e| panic!("request in slot {slot}: {e}"));
        assert_eq!(
            c.wait(t),
            Err(Error::BadTicket),
            "a completion is taken once"
        );
    }
    assert_eq!(c.in_flight(), 0);

    // Keep twice as many in flight as fit: the helper retries on
    // back-pressure, and every request still completes correctly.
    let echo = lookup(&mut c, "echo_small");
    let r = run_requests(
        &mut c,
        &echo,
        &RunSpec {
            count: 300,
            seed: 2,
            depth: 8,
            prio: PrioMix::Mixed,
        },
    );
    assert_eq!((r.ok, r.bad, r.problem.as_deref()), (300, 0, None), "{r:?}");
    assert!(
        r.backpressure > 0,
        "depth 8 > 4 slots must push back: {r:?}"
    );

    let st = daemon.assert_healthy();
    let me = client_by_id(&st, c.client_id()).unwrap();
    assert_eq!(
        (me.submitted, me.completed, me.errors),
        (304, 304, 0),
        "{me:?}"
    );
}

#[test]
fn submission_ring_smaller_than_completion_ring() {
    let _w = sluice_tests::watchdog("submission_ring_smaller_than_completion_ring", 60);
    let mut daemon = tiny_daemon(2, 8, 1.0);
    let mut c = connect(daemon.socket(), "narrow-sq");
    let echo = lookup(&mut c, "echo_small");
    let r = run_requests(
        &mut c,
        &echo,
        &RunSpec {
            count: 500,
            seed: 3,
            depth: 8,
            prio: PrioMix::Mixed,
        },
    );
    assert_eq!((r.ok, r.bad, r.problem.as_deref()), (500, 0, None), "{r:?}");
    let st = daemon.assert_healthy();
    let me = client_by_id(&st, c.client_id()).unwrap();
    assert_eq!((me.submitted, me.completed), (500, 500), "{me:?}");
}

/// Raw pushes past the library's limit: 4 submission slots full *and* 4
/// completions unread. The daemon must hold the submissions (no credit)
/// rather than take them and have nowhere to put their completions.
#[test]
fn raw_overfill_beyond_completion_credit_loses_nothing() {
    let _w = sluice_tests::watchdog("raw_overfill_beyond_completion_credit_loses_nothing", 60);
    // echo_small at x20: 1 ms a request.
    let mut daemon = tiny_daemon(4, 4, 20.0);
    let mut c = connect(daemon.socket(), "raw");
    let m = lookup(&mut c, "echo_small");
    let id = c.client_id();
    let mut raw = RawRings::take(c);
    const N: u64 = 64;
    for i in 0..N {
        let (input, _) = slot_spans(&m, i as u32);
        raw.write_arena(input.off, &test_input(9, i, 64)).unwrap();
    }
    let req = |i: u64| {
        let (input, output) = slot_spans(&m, i as u32);
        let mut r = sluice_tests::request(&m, input, output);
        r.request_id = 0xabc0_0000 + i;
        r.priority = (i % 2) as u32;
        r
    };

    // Phase 1: push until the submission ring stays full, never reading a
    // completion. The daemon takes 4 (its credit), completes them into the
    // 4-slot completion ring, and must leave the next 4 in the ring.
    let mut pushed = 0u64;
    let full = wait_for(
        || {
            while pushed < N && raw.push(req(pushed)).is_ok() {
                pushed += 1;
            }
            pushed >= 8
        },
        secs(30),
    );
    assert!(full, "could not fill the rings: pushed {pushed}");
    assert_eq!(pushed, 8, "4 taken by the daemon + 4 waiting in the ring");
    assert!(
        wait_for(
            || client_by_id(&daemon.status(), id).is_some_and(|s| s.completed == 4),
            secs(30)
        ),
        "{:?}",
        daemon.status()
    );
    let st = daemon.assert_healthy();
    let me = client_by_id(&st, id).expect("client still connected (not dropped)");
    assert_eq!(
        (me.submitted, me.completed, me.on_device),
        (4, 4, 0),
        "the daemon took more than its completion credit: {me:?}"
    );
    assert!(raw.push(req(pushed)).is_err(), "the ring is still full");
    assert_eq!(st.dropped_clients, 0, "{st:?}");

    // Phase 2: read completions one at a time, refilling as room appears.
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    let mut problems = Vec::new();
    let deadline = Instant::now() + secs(40);
    while (seen.len() as u64) < N && problems.is_empty() && Instant::now() < deadline {
        while pushed < N && raw.push(req(pushed)).is_ok() {
            pushed += 1;
        }
        match raw.pop() {
            Ok(Some(comp)) => {
                *seen.entry(comp.request_id).or_default() += 1;
                let i = comp.request_id.wrapping_sub(0xabc0_0000);
                if i >= N {
                    problems.push(format!("completion for an unknown request {comp:?}"));
                    continue;
                }
                let (_, out) = slot_spans(&m, i as u32);
                let mut got = vec![0u8; 64];
                raw.read_arena(out.off, &mut got).unwrap();
                if comp.status != status::OK
                    || comp.output_len != 64
                    || got != expected(&m, &test_input(9, i, 64))
                {
                    problems.push(format!("bad completion {comp:?}"));
                }
            }
            Ok(None) => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => problems.push(format!("completion ring: {e}")),
        }
    }
    let done = seen.len() as u64 == N;
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(done, "only {} of {N} completions arrived", seen.len());
    assert!(
        seen.values().all(|&n| n == 1),
        "a request completed twice: {seen:?}"
    );
    assert_eq!(raw.pop().unwrap(), None, "no extra completions");
    let st = daemon.assert_healthy();
    let me = client_by_id(&st, id).unwrap();
    assert_eq!(
        (me.submitted, me.completed, me.errors, me.on_device),
        (N, N, 0, 0),
        "{me:?}"
    );
    assert!(!raw.is_disconnected());
}

/// While a client keeps its submission ring full and its completion ring
/// unread (so the daemon has no credit to take anything), the daemon has
/// nothing to do and should park, not spin on that ring.
#[test]
fn dispatcher_parks_while_a_client_sits_on_its_completions() {
    let _w = sluice_tests::watchdog(
        "dispatcher_parks_while_a_client_sits_on_its_completions",
        60,
    );
    let daemon = tiny_daemon(4, 4, 1.0);
    let mut c = connect(daemon.socket(), "stuck");
    let m = lookup(&mut c, "echo_small");
    let id = c.client_id();
    let mut raw = RawRings::take(c);
    let (input, output) = slot_spans(&m, 0);
    let mut pushed = 0;
    assert!(wait_for(
        || {
            while raw.push(sluice_tests::request(&m, input, output)).is_ok() {
                pushed += 1;
            }
            pushed >= 8
        },
        secs(30)
    ));
    assert!(wait_for(
        || client_by_id(&daemon.status(), id).is_some_and(|s| s.completed == 4),
        secs(30)
    ));
    // Idle apart from the stuck ring: parks must keep increasing (at least
    // every 250 ms, the dispatcher's longest sleep).
    let p0 = daemon.status().parks;
    assert!(
        wait_for(|| daemon.status().parks >= p0 + 3, secs(10)),
        "the dispatcher never parked: parks stuck at {p0}: {:?}",
        daemon.status()
    );
}
