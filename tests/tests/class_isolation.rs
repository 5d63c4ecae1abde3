//! Isolation between clients of one priority class.
//!
//! A client process keeps 256 real-time resnet152 requests queued (its whole
//! ring); the test process, another client, runs real-time echo_small
//! requests one at a time beside it, under `fifo` and under `reef` on the GPU
//! model, and checks that each waited for at most one of the flood's requests
//! (`clients.on_device_per_client = 1`).
//!
//! The check is on the daemon's own device timestamps, not the wall clock:
//! `started_ns - received_ns` of each echo (time from the dispatcher taking
//! it off the ring to its start on the device) is at most two resnet152 run
//! times (one in `fifo`, where device time is exact; twice that leaves room
//! for the GPU model's policy). Without the fair share it is up to 255 of
//! them, which `unfair_share_lets_the_flood_go_first` shows on purpose.
//!
//! Every echo runs while the flood is backlogged, by construction: after
//! each echo the test reads the flood's queue from the daemon and stops
//! once 16 or fewer of its requests remain (a machine slow enough to run
//! 100 echoes only after the flood's 3.4 s of device work drained stops
//! early), and then requires that at least 10 echoes ran.
//!
//! The client-side wall-clock round trip of every echo is measured and
//! printed (`@@sluice` lines, `--no-capture`); it is asserted only when
//! `SLUICE_FAIRNESS_MAX_MS` is set (a wall-clock bound would be flaky on a
//! shared CI machine):
//!
//! ```sh
//! SLUICE_FAIRNESS_MAX_MS=50 cargo nextest run -p sluice-tests --test class_isolation --no-capture
//! ```

use std::time::{Duration, Instant};

use sluice_client::{Priority, Submit};
use sluice_tests::{
    ClientOpts, ClientProc, DaemonOpts, DaemonProc, TestDir, check_completion, client_by_id,
    connect, lookup, secs, slot_spans, test_input, wait_for,
};

sluice_tests::role_entry!();

/// What one run saw.
#[derive(Debug)]
struct Seen {
    /// Echo requests run.
    echoes: u64,
    /// Longest `started_ns - received_ns` of an echo (daemon stamps).
    max_wait_ns: u64,
    /// Longest client-side round trip of an echo.
    max_rtt: Duration,
    /// Median client-side round trip.
    p50_rtt: Duration,
    /// Longest time from the client's submit to the dispatcher taking the
    /// request (`received_ns`).
    max_take_ns: u64,
    /// Longest time from the device finishing (`finished_ns`) to the client
    /// seeing the completion.
    max_post_ns: u64,
    /// The flood's requests completed while the echoes ran.
    flood_done: u64,
    /// The flood's requests taken into the daemon.
    flood_taken: u64,
}

/// Flood requests still queued when the echoes stop early: about 200 ms
/// of device work (resnet152's 13.4 ms each), more than the few status
/// queries the run makes after the last echo take on a busy machine.
const FLOOD_MARGIN: u64 = 16;

/// The fewest echoes a run must get in while the flood is backlogged.
const MIN_ECHOES: u64 = 10;

fn resnet152_ns() -> u64 {
    sluice_model::ModelRegistry::builtin()
        .lookup("resnet152")
        .unwrap()
        .1
        .total_time_ns
}

/// Runs `echoes` real-time echo_small requests beside a client flooding
/// `flood` real-time resnet152 requests (0 = until its ring is full).
fn run(scheduler: &'static str, on_device: u32, flood: u64, echoes: u64) -> Seen {
    let mut daemon = DaemonProc::spawn(DaemonOpts {
        scheduler,
        on_device_per_client: on_device,
        ..DaemonOpts::default()
    });
    let dir = TestDir::new(&format!("isolation-{scheduler}"));
    let mut o = ClientOpts::flood("flood", "resnet152");
    o.count = flood;
    let mut flooder = ClientProc::spawn(daemon.socket(), &o, &dir);
    let flood_id: u32 = flooder.wait_key("client_id", secs(30)).parse().unwrap();
    let submitted: u64 = flooder.wait_key("submitted", secs(30)).parse().unwrap();
    assert!(submitted >= 16, "flood submitted only {submitted}");
    // Every flood request is in the daemon before the first echo.
    assert!(
        wait_for(
            || client_by_id(&daemon.status(), flood_id).is_some_and(|c| c.submitted == submitted),
            secs(30)
        ),
        "the daemon did not take the flood: {:?}",
        daemon.status()
    );

    let mut c = connect(daemon.socket(), "echo");
    let model = lookup(&mut c, "echo_small");
    let (input_span, out) = slot_spans(&model, 0);
    let mut rtts = Vec::with_capacity(echoes as usize);
    let mut max_wait_ns = 0;
    let (mut max_take_ns, mut max_post_ns) = (0u64, 0u64);
    let mut ran = 0u64;
    for i in 0..echoes {
        let input = test_input(77, i, model.input_bytes as usize);
        c.write_arena(input_span.off, &input).unwrap();
        c.write_arena(out.off, &vec![0u8; out.len as usize])
            .unwrap();
        let t0 = Instant::now();
        let submit_ns = shm_proto::now_ns();
        let t = c
            .submit(&Submit {
                model_id: model.id,
                priority: Priority::RealTime,
                deadline_ns: 0,
                input: input_span,
                output: out,
            })
            .unwrap();
        let done = c
            .wait_timeout(t, Some(secs(30)))
            .unwrap_or_else(|e| panic!("{scheduler}: echo {i}: wait: {e:?}"));
        rtts.push(t0.elapsed());
        let seen_ns = shm_proto::now_ns();
        max_take_ns = max_take_ns.max(done.received_ns.saturating_sub(submit_ns));
        max_post_ns = max_post_ns.max(seen_ns.saturating_sub(done.finished_ns));
        check_completion(&c, &model, &done, &input, out)
            .unwrap_or_else(|e| panic!("{scheduler}: echo {i}: {e}"));
        max_wait_ns = max_wait_ns.max(done.started_ns.saturating_sub(done.received_ns));
        ran += 1;
        // The echoes run while the flood is backlogged, by construction: on
        // a machine slow enough to drain the flood first, the loop stops
        // with `FLOOD_MARGIN` requests still queued (the run then checks
        // that enough echoes ran).
        let left = client_by_id(&daemon.status(), flood_id)
            .map_or(0, |f| f.submitted.saturating_sub(f.completed));
        if left <= FLOOD_MARGIN {
            break;
        }
        // Land at different points of the flood's requests.
        std::thread::sleep(Duration::from_micros(700 + (i * 2_377) % 9_000));
    }
    let st = daemon.assert_healthy();
    let f = client_by_id(&st, flood_id).expect("flood client still connected");
    let (flood_done, flood_taken) = (f.completed, f.submitted);
    assert_eq!(f.errors, 0, "{scheduler}: {f:?}");
    flooder.kill();
    rtts.sort();
    Seen {
        echoes: ran,
        max_wait_ns,
        max_rtt: *rtts.last().unwrap(),
        p50_rtt: rtts[rtts.len() / 2],
        max_take_ns,
        max_post_ns,
        flood_done,
        flood_taken,
    }
}

fn report(scheduler: &str, s: &Seen) {
    println!(
        "@@sluice scheduler={scheduler} echoes={} max_rtt_us={} p50_rtt_us={} \
         max_device_wait_us={} max_take_us={} max_post_us={} resnet152_us={} \
         flood_done={} flood_taken={}",
        s.echoes,
        s.max_rtt.as_micros(),
        s.p50_rtt.as_micros(),
        s.max_wait_ns / 1000,
        s.max_take_ns / 1000,
        s.max_post_ns / 1000,
        resnet152_ns() / 1000,
        s.flood_done,
        s.flood_taken
    );
}

fn bounded(scheduler: &'static str) {
    let s = run(scheduler, 1, 0, 100);
    report(scheduler, &s);
    assert!(
        s.echoes >= MIN_ECHOES,
        "{scheduler}: only {} echoes ran before the flood's backlog fell to {FLOOD_MARGIN} \
         requests (this machine took {:?} per echo at the median); {s:?}",
        s.echoes,
        s.p50_rtt
    );
    // The flood was still backlogged when the last echo ran, so every echo
    // had it to contend with.
    assert!(
        s.flood_done < s.flood_taken,
        "{scheduler}: the flood drained before the echoes ended: {s:?}"
    );
    assert!(
        s.max_wait_ns <= 2 * resnet152_ns(),
        "{scheduler}: an echo waited {} µs on the device, more than two resnet152 \
         requests ({} µs each): {s:?}",
        s.max_wait_ns / 1000,
        resnet152_ns() / 1000
    );
    if let Some(ms) = std::env::var("SLUICE_FAIRNESS_MAX_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        assert!(
            s.max_rtt <= Duration::from_millis(ms),
            "{scheduler}: worst echo round trip {:?} > SLUICE_FAIRNESS_MAX_MS={ms}: {s:?}",
            s.max_rtt
        );
    }
}

#[test]
fn fifo_echo_waits_for_at_most_one_flood_request() {
    let _w = sluice_tests::watchdog("fifo_echo_waits_for_at_most_one_flood_request", 120);
    bounded("fifo");
}

#[test]
fn reef_echo_waits_for_at_most_one_flood_request() {
    let _w = sluice_tests::watchdog("reef_echo_waits_for_at_most_one_flood_request", 120);
    bounded("reef");
}

/// The control: with the share raised to the whole ring the flood's queued
/// requests all go ahead of the echo, and the check above would fail.
#[test]
fn unfair_share_lets_the_flood_go_first() {
    let _w = sluice_tests::watchdog("unfair_share_lets_the_flood_go_first", 120);
    let s = run("fifo", 65536, 24, 1);
    report("fifo-unfair", &s);
    assert!(
        s.max_wait_ns > 8 * resnet152_ns(),
        "with on_device_per_client = 65536 the echo should queue behind the flood: {s:?}"
    );
}

/// `clients.max_in_flight_per_client`: past it a client's requests stay in
/// its ring (the daemon holds at most the limit), and all of them complete,
/// correctly and in full, as earlier ones finish.
#[test]
fn in_flight_limit_leaves_requests_in_the_ring() {
    let _w = sluice_tests::watchdog("in_flight_limit_leaves_requests_in_the_ring", 120);
    const LIMIT: u32 = 3;
    const N: u32 = 20;
    let daemon = DaemonProc::spawn(DaemonOpts {
        max_in_flight_per_client: Some(LIMIT),
        on_device_per_client: 2,
        time_scale: 1000.0, // echo_small: 50 ms
        ..DaemonOpts::default()
    });
    let mut c = connect(daemon.socket(), "limited");
    let id = c.client_id();
    let model = lookup(&mut c, "echo_small");
    let mut tickets = Vec::new();
    let mut inputs = Vec::new();
    for i in 0..N {
        let (input_span, out) = slot_spans(&model, i);
        let input = test_input(5, u64::from(i), model.input_bytes as usize);
        c.write_arena(input_span.off, &input).unwrap();
        let t = c
            .submit(&Submit {
                model_id: model.id,
                priority: Priority::RealTime,
                deadline_ns: 0,
                input: input_span,
                output: out,
            })
            .unwrap();
        tickets.push(t);
        inputs.push((input, out));
    }
    // While they run, the daemon never holds more than LIMIT of them, and at
    // some point holds exactly LIMIT with the rest still in the ring.
    let mut saw_backlog = false;
    let mut max_held = 0;
    let watch_until = Instant::now() + Duration::from_millis(600);
    while Instant::now() < watch_until {
        let st = daemon.status();
        let me = client_by_id(&st, id).unwrap();
        max_held = max_held.max(me.on_device);
        if me.on_device == LIMIT && me.submitted < u64::from(N) {
            saw_backlog = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(max_held <= LIMIT, "daemon held {max_held} > {LIMIT}");
    assert!(
        saw_backlog,
        "never saw {LIMIT} held with the rest in the ring"
    );
    for (i, (t, (input, out))) in tickets.into_iter().zip(inputs).enumerate() {
        let done = c
            .wait_timeout(t, Some(secs(60)))
            .unwrap_or_else(|e| panic!("request {i}: {e:?}"));
        check_completion(&c, &model, &done, &input, out)
            .unwrap_or_else(|e| panic!("request {i}: {e}"));
    }
    let st = daemon.status();
    let me = client_by_id(&st, id).unwrap();
    assert_eq!(
        (me.submitted, me.completed, me.errors),
        (u64::from(N), u64::from(N), 0)
    );
}
