//! The daemon goes away under a client that is waiting on a request:
//! SIGKILL (crash) or SIGTERM (graceful stop). The client must see
//! `Disconnected` — never hang — and a new daemon on the same socket path
//! (with the crashed one's stale socket file still there) must serve new
//! connections.

use std::sync::mpsc;

use sluice_client::{Client, Completion, Error, Priority, Submit, Ticket};
use sluice_tests::{
    DaemonOpts, DaemonProc, TestDir, client_by_id, connect, lookup, run_one, secs, slot_spans,
    wait_for,
};

sluice_tests::role_entry!();

/// Models 100x slower: resnet152 takes 0.91 s, so eight queued requests
/// keep a client waiting for over 7 s.
fn slow_daemon(socket: &std::path::Path) -> DaemonProc {
    DaemonProc::spawn(DaemonOpts {
        socket: Some(socket.to_owned()),
        time_scale: 100.0,
        ..DaemonOpts::default()
    })
}

/// A client blocked in `wait` on another thread:
/// where the client and its result arrive, and a signal that it started.
struct Waiter {
    result: mpsc::Receiver<(Client, Result<Completion, Error>)>,
    started: mpsc::Receiver<()>,
}

/// Connects, queues eight resnet152 requests, waits until the daemon has
/// them on the device, then blocks in `wait` on the last one on another
/// thread.
fn client_waiting(daemon: &DaemonProc) -> Waiter {
    let mut c = connect(daemon.socket(), "waiter");
    let m = lookup(&mut c, "resnet152");
    let (input, output) = slot_spans(&m, 0);
    let tickets: Vec<Ticket> = (0..8)
        .map(|_| {
            c.submit(&Submit {
                model_id: m.id,
                priority: Priority::RealTime,
                deadline_ns: 0,
                input,
                output,
            })
            .expect("submit")
        })
        .collect();
    let id = c.client_id();
    assert!(
        wait_for(
            || client_by_id(&daemon.status(), id).is_some_and(|s| s.on_device >= 1),
            secs(30)
        ),
        "requests never reached the device: {:?}",
        daemon.status()
    );
    let (tx, rx) = mpsc::channel();
    let (started_tx, started) = mpsc::channel();
    std::thread::spawn(move || {
        let last = *tickets.last().unwrap();
        let _ = started_tx.send(());
        let r = c.wait(last);
        let _ = tx.send((c, r));
    });
    Waiter {
        result: rx,
        started,
    }
}

#[test]
fn sigkill_then_restart_on_the_same_socket() {
    let _w = sluice_tests::watchdog("sigkill_then_restart_on_the_same_socket", 60);
    let dir = TestDir::new("restart");
    let socket = dir.join("sluiced.sock");
    let mut first = slow_daemon(&socket);
    let w = client_waiting(&first);
    w.started.recv_timeout(secs(30)).expect("waiter started");

    first.kill();
    assert!(!first.is_alive());
    let (mut c, r) = w
        .result
        .recv_timeout(secs(30))
        .expect("a client waiting on a killed daemon must not hang");
    assert_eq!(r.map(|_| ()), Err(Error::Disconnected));
    // Every later call says so too.
    let echo_id = 1;
    let again = c.submit(&Submit {
        model_id: echo_id,
        priority: Priority::RealTime,
        deadline_ns: 0,
        input: Default::default(),
        output: Default::default(),
    });
    assert_eq!(again, Err(Error::Disconnected));
    assert_eq!(c.lookup_model("echo_small"), Err(Error::Disconnected));

    // The crashed daemon left its socket file behind; nobody answers on it.
    assert!(socket.exists(), "SIGKILL cannot remove the socket file");
    assert_eq!(
        Client::connect(&socket, "too-early").err(),
        Some(Error::DaemonUnreachable)
    );

    // A new daemon on the same path replaces the stale file and serves.
    let mut second = slow_daemon(&socket);
    assert_ne!(second.pid(), first.pid());
    let mut c2 = connect(&socket, "reconnected");
    let echo = lookup(&mut c2, "echo_small");
    for i in 0..10 {
        run_one(&mut c2, &echo, 11, i).expect("request on the new daemon");
    }
    let st = second.assert_healthy();
    assert_eq!(st.clients.len(), 1, "{st:?}");
    assert_eq!(st.completed, 10, "{st:?}");
}

#[test]
fn sigterm_disconnects_waiting_clients_and_exits_cleanly() {
    let _w = sluice_tests::watchdog("sigterm_disconnects_waiting_clients_and_exits_cleanly", 60);
    let dir = TestDir::new("sigterm");
    let socket = dir.join("sluiced.sock");
    let mut daemon = slow_daemon(&socket);
    let w = client_waiting(&daemon);
    w.started.recv_timeout(secs(30)).expect("waiter started");
    // A second client, idle (not waiting), must learn it too.
    let mut idle = connect(&socket, "idle");

    let exit = daemon
        .terminate(secs(30))
        .expect("the daemon should stop on SIGTERM");
    assert!(exit.success(), "graceful stop exits 0, got {exit}");
    let (_, r) = w
        .result
        .recv_timeout(secs(30))
        .expect("a client waiting on a stopped daemon must not hang");
    assert_eq!(r.map(|_| ()), Err(Error::Disconnected));
    assert!(
        wait_for(|| idle.is_disconnected(), secs(30)),
        "an idle client should see the daemon gone"
    );
    assert!(!socket.exists(), "a graceful stop removes its socket file");
    assert_eq!(
        Client::connect(&socket, "after").err(),
        Some(Error::DaemonUnreachable)
    );

    // And a new daemon starts on the same path.
    let _again = slow_daemon(&socket);
    let mut c = connect(&socket, "again");
    let echo = lookup(&mut c, "echo_small");
    run_one(&mut c, &echo, 12, 0).expect("request on the restarted daemon");
}

#[test]
fn second_daemon_on_a_live_socket_refuses_to_start() {
    let _w = sluice_tests::watchdog("second_daemon_on_a_live_socket_refuses_to_start", 60);
    let dir = TestDir::new("twice");
    let socket = dir.join("sluiced.sock");
    let mut first = slow_daemon(&socket);
    let mut c = connect(&socket, "keeps-working");
    let echo = lookup(&mut c, "echo_small");
    run_one(&mut c, &echo, 13, 0).expect("first request");
    // The second daemon must fail to start rather than steal the socket.
    match DaemonProc::try_spawn(DaemonOpts {
        socket: Some(socket.clone()),
        ..DaemonOpts::default()
    }) {
        Ok(d) => panic!("a second daemon (pid {}) started on a live socket", d.pid()),
        Err(e) => assert!(e.contains("already listening"), "{e}"),
    }
    first.assert_healthy();
    run_one(&mut c, &echo, 13, 1).expect("the first daemon still serves");
}

/// A daemon that hangs (SIGSTOP) is not a dead one: `wait_timeout` times
/// out, the request stays in flight, and it completes once the daemon runs
/// again.
#[test]
fn stopped_daemon_times_out_then_resumes() {
    let _w = sluice_tests::watchdog("stopped_daemon_times_out_then_resumes", 60);
    let dir = TestDir::new("sigstop");
    let mut daemon = DaemonProc::spawn(DaemonOpts {
        socket: Some(dir.join("sluiced.sock")),
        ..DaemonOpts::default()
    });
    let mut c = connect(daemon.socket(), "patient");
    let echo = lookup(&mut c, "echo_small");
    run_one(&mut c, &echo, 14, 0).expect("before the stop");

    let pid = rustix::process::Pid::from_raw(daemon.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    // kill() returns before every thread has actually stopped.
    assert!(
        wait_for(|| all_threads_stopped(daemon.pid()), secs(30)),
        "the daemon's threads did not stop"
    );
    let (input, output) = slot_spans(&echo, 0);
    c.write_arena(input.off, &sluice_tests::test_input(14, 1, 64))
        .unwrap();
    let t = c
        .submit(&Submit {
            model_id: echo.id,
            priority: Priority::RealTime,
            deadline_ns: 0,
            input,
            output,
        })
        .expect("submit goes into shared memory even while the daemon is stopped");
    let r = c.wait_timeout(t, Some(std::time::Duration::from_millis(200)));
    // Resume before asserting, so a failure does not leave it stopped.
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    assert_eq!(
        r.map(|_| ()),
        Err(Error::Timeout),
        "a stopped daemon is not a dead one"
    );
    let done = c
        .wait_timeout(t, Some(secs(30)))
        .expect("completes after SIGCONT");
    sluice_tests::check_completion(
        &c,
        &echo,
        &done,
        &sluice_tests::test_input(14, 1, 64),
        output,
    )
    .unwrap();
    daemon.assert_healthy();
}

/// Whether every thread of `pid` is in state `T` (stopped by a signal),
/// from `/proc/<pid>/task/*/stat`.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            return false;
        };
        // "tid (comm) S ...": the state follows the last ')'.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if state != Some('T') {
            return false;
        }
        any = true;
    }
    any
}
