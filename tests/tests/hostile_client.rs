//! Hostile clients: garbage requests, corrupted ring indices, a scribbled
//! region header, and junk on the control socket. The daemon (a separate
//! process) must answer each with the specific error or drop only the
//! offender, never die, and keep serving well-behaved clients.
//!
//! The test process itself plays the hostile client (it needs raw access to
//! its own mapping); the well-behaved clients are in-process connections of
//! their own and a separate client process.

use std::sync::atomic::Ordering::SeqCst;

use shm_proto::status;
use sluice_client::{Client, Error, Priority, Request, Span, Submit, Ticket, refused};
use sluice_tests::{
    ClientOpts, ClientProc, DaemonOpts, DaemonProc, RawReply, TestDir, client_by_id, connect,
    hello_frame, lookup, raw_exchange, run_one, secs, wait_for,
};

sluice_tests::role_entry!();

/// Daemon for the ring tests: small rings; models 100x slower so that long
/// requests are surely still in flight when the client misbehaves.
fn slow_daemon() -> DaemonProc {
    DaemonProc::spawn(DaemonOpts {
        sq_entries: 16,
        cq_entries: 16,
        arena_bytes: 1 << 20,
        time_scale: 100.0,
        ..DaemonOpts::default()
    })
}

/// Submits four best-effort resnet152 requests (0.91 s each at x100), so
/// the client surely has tickets in flight for seconds.
fn busy_client(daemon: &DaemonProc, name: &str) -> (Client, Vec<Ticket>) {
    let mut c = connect(daemon.socket(), name);
    let m = lookup(&mut c, "resnet152");
    let tickets = (0..4)
        .map(|k| {
            let (input, output) = sluice_tests::slot_spans(&m, 0);
            let output = Span {
                off: output.off + k * 4096,
                ..output
            };
            c.submit(&Submit {
                model_id: m.id,
                priority: Priority::BestEffort,
                deadline_ns: 0,
                input,
                output,
            })
            .expect("submit resnet152")
        })
        .collect();
    (c, tickets)
}

/// Waits on the tickets in order: one of them must end in `Disconnected`
/// (not a hang, not `Protocol`), and afterwards every call says so.
fn expect_disconnected(c: &mut Client, tickets: &[Ticket], what: &str) {
    let mut seen = None;
    for &t in tickets {
        match c.wait_timeout(t, Some(secs(30))) {
            Ok(_) => continue,
            Err(e) => {
                seen = Some(e);
                break;
            }
        }
    }
    assert_eq!(
        seen,
        Some(Error::Disconnected),
        "{what}: the client should be dropped by the daemon"
    );
    assert_eq!(
        c.try_poll(*tickets.last().unwrap()),
        Err(Error::Disconnected)
    );
    let r = c.submit(&Submit {
        model_id: 0,
        priority: Priority::RealTime,
        deadline_ns: 0,
        input: Span::default(),
        output: Span::default(),
    });
    assert_eq!(r, Err(Error::Disconnected), "{what}: submit after the drop");
    assert!(c.is_disconnected());
}

/// A well-behaved client still gets correct results, the daemon is alive,
/// and it no longer lists `gone`.
fn still_serving(daemon: &mut DaemonProc, good: &mut Client, gone: u32, round: u64) {
    let echo = lookup(good, "echo_small");
    for i in 0..5 {
        run_one(good, &echo, 99, round * 100 + i)
            .unwrap_or_else(|e| panic!("good client, round {round}: {e}"));
    }
    assert!(
        wait_for(|| client_by_id(&daemon.status(), gone).is_none(), secs(30)),
        "dropped client {gone} still listed: {:?}",
        daemon.status()
    );
    let mut fresh = connect(daemon.socket(), "fresh");
    run_one(&mut fresh, &echo, 98, round).expect("a client connected after the attack");
    daemon.assert_healthy();
}

#[test]
fn garbage_requests_get_specific_errors() {
    let _w = sluice_tests::watchdog("garbage_requests_get_specific_errors", 60);
    let mut daemon = DaemonProc::spawn(DaemonOpts {
        arena_bytes: 1 << 20,
        ..DaemonOpts::default()
    });
    let mut good = connect(daemon.socket(), "good");
    let mut c = connect(daemon.socket(), "garbage");
    let m = lookup(&mut c, "echo_small");
    let arena = c.arena_len();
    let ok = sluice_tests::request(&m, Span { off: 0, len: 64 }, Span { off: 64, len: 64 });
    let with = |f: &dyn Fn(&mut Request)| {
        let mut r = ok;
        f(&mut r);
        r
    };
    let cases: Vec<(&str, Request, u32)> = vec![
        (
            "unknown model id",
            with(&|r| r.model_id = 9999),
            status::UNKNOWN_MODEL,
        ),
        (
            "model id u32::MAX",
            with(&|r| r.model_id = u32::MAX),
            status::UNKNOWN_MODEL,
        ),
        (
            "priority 2",
            with(&|r| r.priority = 2),
            status::BAD_PRIORITY,
        ),
        (
            "priority u32::MAX",
            with(&|r| r.priority = u32::MAX),
            status::BAD_PRIORITY,
        ),
        ("flags bit 1", with(&|r| r.flags = 2), status::BAD_FLAGS),
        (
            "flags high bit",
            with(&|r| r.flags = 1 << 15),
            status::BAD_FLAGS,
        ),
        (
            "tensor-table flag at batch 0",
            with(&|r| r.flags = shm_proto::tensor::FLAG_TENSOR_TABLE),
            status::BAD_BATCH,
        ),
        (
            "tensor-table flag over an input, not a table",
            with(&|r| {
                r.flags = shm_proto::tensor::FLAG_TENSOR_TABLE;
                r.batch = 1;
                r.output_off = 0;
                r.output_len = 0;
            }),
            status::BAD_TENSOR_TABLE,
        ),
        (
            "untyped at batch 2",
            with(&|r| r.batch = 2),
            status::BAD_BATCH,
        ),
        (
            "input at arena end",
            with(&|r| r.input_off = arena),
            status::BAD_INPUT_SPAN,
        ),
        (
            "input straddles end",
            with(&|r| r.input_off = arena - 32),
            status::BAD_INPUT_SPAN,
        ),
        (
            "input off u64::MAX",
            with(&|r| r.input_off = u64::MAX),
            status::BAD_INPUT_SPAN,
        ),
        (
            "input off+len overflows",
            with(&|r| r.input_off = u64::MAX - 8),
            status::BAD_INPUT_SPAN,
        ),
        (
            "input len u64::MAX",
            with(&|r| r.input_len = u64::MAX),
            status::BAD_INPUT_SPAN,
        ),
        (
            "input len > arena",
            with(&|r| r.input_len = arena + 1),
            status::BAD_INPUT_SPAN,
        ),
        (
            "output at arena end",
            with(&|r| r.output_off = arena),
            status::BAD_OUTPUT_SPAN,
        ),
        (
            "output off+len overflows",
            with(&|r| r.output_len = u64::MAX - 10),
            status::BAD_OUTPUT_SPAN,
        ),
        (
            "output len > arena",
            with(&|r| r.output_len = arena + 1),
            status::BAD_OUTPUT_SPAN,
        ),
        (
            "input len 65",
            with(&|r| r.input_len = 65),
            status::BAD_INPUT_LEN,
        ),
        (
            "input len 0",
            with(&|r| r.input_len = 0),
            status::BAD_INPUT_LEN,
        ),
        (
            "output len 63",
            with(&|r| r.output_len = 63),
            status::OUTPUT_TOO_SMALL,
        ),
        (
            "output len 0",
            with(&|r| r.output_len = 0),
            status::OUTPUT_TOO_SMALL,
        ),
        (
            "deadline long past",
            with(&|r| r.deadline_ns = 1),
            status::DEADLINE_MISSED,
        ),
    ];
    // One at a time, then all at once (a burst of garbage).
    for (what, req, want) in &cases {
        let t = c.submit_request(*req).expect(what);
        let done = c.wait_timeout(t, Some(secs(30))).expect(what);
        assert_eq!(
            (done.status, done.output_len, done.request_id),
            (*want, 0, t.0),
            "{what}: got status {} ({})",
            done.status,
            status::describe(done.status)
        );
    }
    let tickets: Vec<Ticket> = cases
        .iter()
        .map(|(what, req, _)| c.submit_request(*req).expect(what))
        .collect();
    for ((what, _, want), t) in cases.iter().zip(tickets) {
        let done = c.wait_timeout(t, Some(secs(30))).expect(what);
        assert_eq!(done.status, *want, "{what} (burst)");
    }

    // The offender was answered, not dropped: it still works.
    run_one(&mut c, &m, 1, 0).expect("the garbage client's valid request");
    run_one(&mut good, &m, 2, 0).expect("the good client");
    let st = daemon.assert_healthy();
    let me = client_by_id(&st, c.client_id()).expect("garbage client still connected");
    let n = 2 * cases.len() as u64;
    assert_eq!(
        (me.errors, me.completed, me.submitted),
        (n, 1, n + 1),
        "{me:?}"
    );
    assert_eq!(st.dropped_clients, 0, "{st:?}");
}

/// Writes `value` into the SQ tail behind the library's back and rings the
/// doorbell.
fn corrupt_sq_tail(c: &mut Client, value: impl Fn(u32) -> u32) {
    let hdr = sluice_tests::sq_header(c);
    let head = hdr.head.load(SeqCst);
    hdr.tail.store(value(head), SeqCst);
    c.ring_doorbell();
}

#[test]
fn corrupt_ring_indices_disconnect_only_the_offender() {
    let _w = sluice_tests::watchdog("corrupt_ring_indices_disconnect_only_the_offender", 60);
    let mut daemon = slow_daemon();
    let dir = TestDir::new("hostile");
    let mut good = connect(daemon.socket(), "good");
    let echo = lookup(&mut good, "echo_small");
    run_one(&mut good, &echo, 99, 0).expect("good client before any attack");

    type Attack = (&'static str, fn(&mut Client));
    let attacks: [Attack; 5] = [
        ("SQ tail far ahead", |c| {
            corrupt_sq_tail(c, |h| h.wrapping_add(1 << 20))
        }),
        ("SQ tail huge", |c| {
            corrupt_sq_tail(c, |_| u32::MAX / 2 + 12345)
        }),
        ("SQ tail wrapped behind head", |c| {
            corrupt_sq_tail(c, |h| h.wrapping_sub(1))
        }),
        ("CQ head far ahead", |c| {
            let hdr = sluice_tests::cq_header(c);
            let head = hdr.head.load(SeqCst);
            hdr.head.store(head.wrapping_add(1000), SeqCst);
            c.ring_doorbell();
        }),
        ("region magic scribbled", |c| {
            sluice_tests::region_header(c)
                .magic
                .store(0xdead_beef, SeqCst);
            c.ring_doorbell();
        }),
    ];
    for (round, (what, attack)) in attacks.iter().enumerate() {
        let before = daemon.status().dropped_clients;
        let (mut bad, tickets) = busy_client(&daemon, "hostile");
        let id = bad.client_id();
        attack(&mut bad);
        expect_disconnected(&mut bad, &tickets, what);
        still_serving(&mut daemon, &mut good, id, round as u64 + 1);
        let st = daemon.status();
        if what.starts_with("SQ") {
            // Known gap: when park() is the one to find a corrupt SQ (a
            // microsecond window) it drops the client without counting it.
            assert!(st.dropped_clients <= before + 1, "{what}: {st:?}");
        } else {
            assert_eq!(st.dropped_clients, before + 1, "{what}: {st:?}");
        }
    }

    // A separate well-behaved process connected after all of it works.
    let r = ClientProc::spawn(daemon.socket(), &ClientOpts::echo("after", 5, 20), &dir)
        .finish(secs(30));
    assert_eq!(r.u64("ok"), 20, "{r:?}");
    daemon.assert_healthy();
    // Exited and dropped clients are reclaimed asynchronously.
    assert!(
        wait_for(
            || {
                let st = daemon.status();
                st.clients.len() == 1 && st.device_queued == 0
            },
            secs(30)
        ),
        "only the good client should be left, with the dropped clients' work \
         cancelled: {:?}",
        daemon.status()
    );
    assert!(client_by_id(&daemon.status(), good.client_id()).is_some());
}

/// A tail moved forward by exactly the ring's capacity is within bounds.
/// Since protocol 2 the daemon polls each slot's ready stamp, not the
/// tail, so the garbage tail is not followed: the zeroed slots past it are
/// never ready, nothing is taken or answered, and the client's own requests
/// (whose pushes move the tail back) still complete. A tail out of range is
/// still caught, when the daemon parks
/// (`corrupt_ring_indices_disconnect_only_the_offender`).
#[test]
fn in_range_garbage_tail_is_not_followed() {
    let _w = sluice_tests::watchdog("in_range_garbage_tail_is_not_followed", 60);
    let mut daemon = slow_daemon();
    let mut good = connect(daemon.socket(), "good");
    let mut c = connect(daemon.socket(), "self-harm");
    let entries = c.geometry().sq_entries;
    let id = c.client_id();
    corrupt_sq_tail(&mut c, |h| h.wrapping_add(entries));
    let echo = lookup(&mut c, "echo_small");
    for i in 0..3 {
        run_one(&mut c, &echo, 97, i).expect("the client's own requests complete");
    }
    let status = daemon.status();
    let st = client_by_id(&status, id).expect("the client is still served");
    assert_eq!(
        (st.submitted, st.completed, st.errors),
        (3, 3, 0),
        "only the client's own requests were taken: {st:?}"
    );
    let echo_good = lookup(&mut good, "echo_small");
    run_one(&mut good, &echo_good, 99, 0).expect("the good client is served");
    daemon.assert_healthy();
}

#[test]
fn control_socket_garbage_is_refused_or_closed() {
    let _w = sluice_tests::watchdog("control_socket_garbage_is_refused_or_closed", 60);
    let mut daemon = DaemonProc::spawn(DaemonOpts::default());
    let sock = daemon.socket().to_owned();
    let mut good = connect(&sock, "good");
    let echo = lookup(&mut good, "echo_small");

    // A peer that connects and says nothing must not block anyone else.
    let silent = std::os::unix::net::UnixStream::connect(&sock).expect("connect");

    let closed_or_bad_message = |what: &str, r: RawReply| match r {
        RawReply::Closed => {}
        RawReply::Refused { code, .. } if code == refused::BAD_MESSAGE => {}
        other => panic!("{what}: expected close or BAD_MESSAGE, got {other:?}"),
    };
    closed_or_bad_message(
        "HTTP junk",
        raw_exchange(&sock, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true),
    );
    closed_or_bad_message(
        "huge length prefix",
        raw_exchange(&sock, &[0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0], true),
    );
    closed_or_bad_message(
        "length prefix just over MAX_FRAME",
        raw_exchange(
            &sock,
            &(shm_proto::control::MAX_FRAME as u32 + 1).to_le_bytes(),
            true,
        ),
    );
    closed_or_bad_message(
        "length prefix below the header",
        raw_exchange(&sock, &[1, 0, 0, 0, 0], true),
    );
    closed_or_bad_message(
        "three bytes then EOF",
        raw_exchange(&sock, &[8, 0, 0], true),
    );
    closed_or_bad_message(
        "truncated frame then EOF",
        raw_exchange(&sock, &[100, 0, 0, 0, 1, 0, 0, 0, 1, 2, 3], true),
    );
    let mut unknown = 4u32.to_le_bytes().to_vec();
    unknown.extend_from_slice(&[0xee, 0xee, 0, 0]);
    assert!(
        matches!(
            raw_exchange(&sock, &unknown, true),
            RawReply::Refused {
                code: refused::BAD_MESSAGE,
                ..
            }
        ),
        "a well-framed unknown kind gets BAD_MESSAGE"
    );
    assert!(
        matches!(
            raw_exchange(
                &sock,
                &sluice_tests::frame(&shm_proto::control::Msg::LookupModel { name: "echo_small" }),
                true
            ),
            RawReply::Refused {
                code: refused::BAD_MESSAGE,
                ..
            }
        ),
        "a look-up before Hello gets BAD_MESSAGE"
    );

    // Versions: a Hello of protocol v99 is refused with a message naming
    // both versions.
    let v99 = hello_frame(
        shm_proto::MAGIC,
        99,
        shm_proto::LAYOUT_HASH,
        "from-the-future",
    );
    match raw_exchange(&sock, &v99, false) {
        RawReply::Refused { code, message } => {
            assert_eq!(code, refused::VERSION_MISMATCH, "{message}");
            assert!(
                message.contains("v99")
                    && message.contains(&format!("v{}", shm_proto::PROTOCOL_VERSION)),
                "the refusal should name both versions: {message}"
            );
        }
        other => panic!("Hello v99: expected Refused, got {other:?}"),
    }
    // Same version, another layout: refused with the layout reason.
    let skew = hello_frame(
        shm_proto::MAGIC,
        shm_proto::PROTOCOL_VERSION,
        shm_proto::LAYOUT_HASH ^ 1,
        "skewed-build",
    );
    match raw_exchange(&sock, &skew, false) {
        RawReply::Refused { code, message } => {
            assert_eq!(code, refused::LAYOUT_MISMATCH, "{message}");
            assert!(message.contains("layout"), "{message}");
        }
        other => panic!("layout skew: expected Refused, got {other:?}"),
    }
    // A Hello whose tail is cut short still has a readable version.
    let mut cut = hello_frame(shm_proto::MAGIC, 99, 0, "x");
    cut.truncate(4 + 16);
    cut[..4].copy_from_slice(&16u32.to_le_bytes());
    match raw_exchange(&sock, &cut, false) {
        RawReply::Refused { code, message } => {
            assert_eq!(code, refused::VERSION_MISMATCH, "{message}");
            assert!(message.contains("v99"), "{message}");
        }
        other => panic!("truncated v99 hello: expected Refused, got {other:?}"),
    }

    // Through all of it the daemon kept serving.
    run_one(&mut good, &echo, 3, 0).expect("good client after the garbage");
    let mut fresh = connect(&sock, "fresh");
    run_one(&mut fresh, &echo, 4, 0).expect("new client after the garbage");
    let st = daemon.assert_healthy();
    assert!(st.refused >= 5, "refusals are counted: {st:?}");
    assert_eq!(st.clients.len(), 2, "{st:?}");
    drop(silent);
}

#[test]
fn too_many_clients_are_refused_until_one_leaves() {
    let _w = sluice_tests::watchdog("too_many_clients_are_refused_until_one_leaves", 60);
    let daemon = DaemonProc::spawn(DaemonOpts {
        max_clients: 2,
        ..DaemonOpts::default()
    });
    let a = connect(daemon.socket(), "a");
    let mut b = connect(daemon.socket(), "b");
    // Wait until the daemon counts both before the third tries (a client
    // whose handshake is still in flight holds its place already, but its
    // process may not have connected yet).
    assert!(
        wait_for(|| daemon.status().clients.len() == 2, secs(30)),
        "{:?}",
        daemon.status()
    );
    let err = Client::connect(daemon.socket(), "c").expect_err("third client");
    assert_eq!(err, Error::Refused(refused::TOO_MANY_CLIENTS));
    assert!(
        sluice_client::last_error_message().contains("max_clients"),
        "{}",
        sluice_client::last_error_message()
    );
    drop(a);
    assert!(
        wait_for(|| daemon.status().clients.len() == 1, secs(30)),
        "a departed client still counts: {:?}",
        daemon.status()
    );
    let mut c = connect(daemon.socket(), "c");
    let echo = lookup(&mut c, "echo_small");
    run_one(&mut c, &echo, 1, 0).expect("admitted client");
    run_one(&mut b, &echo, 2, 0).expect("remaining client");
}

/// After a valid handshake, junk on the session's control socket ends that
/// session only.
#[test]
fn garbage_after_hello_ends_only_that_session() {
    let _w = sluice_tests::watchdog("garbage_after_hello_ends_only_that_session", 60);
    let mut daemon = DaemonProc::spawn(DaemonOpts::default());
    let mut good = connect(daemon.socket(), "good");
    let echo = lookup(&mut good, "echo_small");
    assert_eq!(
        good.lookup_model("no-such-model"),
        Err(Error::ModelNotFound),
        "an unknown name is answered, not fatal"
    );
    for junk in [
        &b"\x04\x00\x00\x00\xee\xee\x00\x00"[..],
        &b"\xff\xff\xff\xff"[..],
        &sluice_tests::hello_frame(shm_proto::MAGIC, 1, shm_proto::LAYOUT_HASH, "again")[..],
    ] {
        let mut c = connect(daemon.socket(), "junk-in-session");
        let id = c.client_id();
        use std::io::Write as _;
        c.raw_socket().write_all(junk).expect("write junk");
        assert!(
            wait_for(|| c.is_disconnected(), secs(30)),
            "the daemon should end the session after {junk:?}"
        );
        assert_eq!(c.lookup_model("echo_small"), Err(Error::Disconnected));
        assert!(
            wait_for(|| client_by_id(&daemon.status(), id).is_none(), secs(30)),
            "{:?}",
            daemon.status()
        );
        run_one(&mut good, &echo, 6, u64::from(id)).expect("good client unaffected");
    }
    daemon.assert_healthy();
}

/// The region is a sealed memfd: a client cannot shrink it under the
/// daemon's mapping (which would make the daemon fault) or grow it.
#[test]
fn region_cannot_be_resized_by_the_client() {
    let _w = sluice_tests::watchdog("region_cannot_be_resized_by_the_client", 60);
    let mut daemon = DaemonProc::spawn(DaemonOpts::default());
    let mut c = connect(daemon.socket(), "resizer");
    let echo = lookup(&mut c, "echo_small");
    let want = format!("sluice-client-{}", c.client_id());
    // Find our region's memfd among this process's descriptors and open it
    // again through /proc (a second, writable file description).
    let mut regions = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if let Ok(target) = std::fs::read_link(e.path())
            && target.to_string_lossy().contains(&format!("memfd:{want} "))
        {
            regions.push(e.path());
        }
    }
    assert!(
        !regions.is_empty(),
        "no memfd named {want} in /proc/self/fd"
    );
    for path in regions {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("reopen the memfd");
        let len = f.metadata().unwrap().len();
        for new_len in [0, len / 2, len + 4096] {
            let e = f.set_len(new_len).expect_err("the region must be sealed");
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "set_len({new_len})");
        }
        assert_eq!(f.metadata().unwrap().len(), len);
    }
    run_one(&mut c, &echo, 1, 0).expect("still works");
    daemon.assert_healthy();
}

#[test]
fn max_clients_holds_under_concurrent_connects() {
    let _w = sluice_tests::watchdog("max_clients_holds_under_concurrent_connects", 60);
    let daemon = DaemonProc::spawn(DaemonOpts {
        max_clients: 2,
        ..DaemonOpts::default()
    });
    let socket = daemon.socket().to_owned();
    for round in 0..20 {
        let barrier = std::sync::Barrier::new(8);
        let admitted: Vec<Client> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|k| {
                    let (socket, barrier) = (&socket, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        Client::connect(socket, &format!("racer-{k}"))
                    })
                })
                .collect();
            hs.into_iter()
                .filter_map(|h| h.join().unwrap().ok())
                .collect()
        });
        assert!(
            admitted.len() <= 2,
            "round {round}: {} clients admitted with max_clients = 2",
            admitted.len()
        );
        drop(admitted);
        assert!(wait_for(|| daemon.status().clients.is_empty(), secs(30)));
    }
}

// Refusal messages must say what was wrong: a bad magic is named as such,
// and an undecodable hello of the current version is a bad message, not a
// version mismatch.

#[test]
fn bad_magic_is_refused_with_a_message_about_the_magic() {
    let _w = sluice_tests::watchdog("bad_magic_is_refused_with_a_message_about_the_magic", 60);
    let daemon = DaemonProc::spawn(DaemonOpts::default());
    let hello = hello_frame(
        0x1234_5678,
        shm_proto::PROTOCOL_VERSION,
        shm_proto::LAYOUT_HASH,
        "not-sluice",
    );
    match raw_exchange(daemon.socket(), &hello, false) {
        RawReply::Refused { code, message } => {
            assert_ne!(code, 0);
            assert!(
                message.contains("magic"),
                "a bad magic should be named as such (code {code}): {message}"
            );
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[test]
fn undecodable_current_version_hello_is_a_bad_message() {
    let _w = sluice_tests::watchdog("undecodable_current_version_hello_is_a_bad_message", 60);
    let daemon = DaemonProc::spawn(DaemonOpts::default());
    let long_name = "n".repeat(shm_proto::control::MAX_NAME + 1);
    let hello = hello_frame(
        shm_proto::MAGIC,
        shm_proto::PROTOCOL_VERSION,
        shm_proto::LAYOUT_HASH,
        &long_name,
    );
    match raw_exchange(daemon.socket(), &hello, false) {
        RawReply::Refused { code, message } => {
            assert_eq!(code, refused::BAD_MESSAGE, "{message}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}
