//! The control socket under attack and at scale:
//!
//! - a local user that `[access]` does not allow, trickling 1100
//!   connections at a daemon limited to 1024 descriptors, is closed at
//!   accept and never holds the daemon's descriptors, while an allowed
//!   client keeps opening sessions;
//! - an *allowed* user doing the same is cut off by the total handshake
//!   deadline and, at the descriptor limit, by shedding unfinished
//!   handshakes, while an allowed client keeps opening sessions;
//! - `sluice status` (every page) with 4096 connected clients is one valid
//!   JSON document listing all of them;
//! - a model look-up with a name far over 574 bytes is answered
//!   `ModelNotFound`, and the session goes on.
//!
//! The attack tests need root: the attacker drops to uid/gid 65534
//! (`nobody`/`nogroup`) itself, and the 4096-client test raises its
//! descriptor limits. Without root they print a `SKIPPED` line (`sluice_tests::skipped`) and
//! return without checking anything.
//!
//! Deadlines here are functional bounds (a connection must be gone by
//! `handshake_timeout_ms` plus slack, scaled by
//! `SLUICE_TEST_TIMEOUT_SCALE`), not performance claims; the measured
//! figures are printed (`--nocapture`).

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shm_proto::control::{Msg, refused};
use sluice_client::Client;
use sluice_tests::{
    ClientProc, ControlOpts, DaemonOpts, DaemonProc, TestDir, TrickleOpts, frame, hello_frame,
    lookup, secs, spawn_trickle,
};

sluice_tests::role_entry!();

const NOBODY: u32 = 65534;
const HANDSHAKE_MS: u32 = 2000;

/// `SLUICE_TEST_TIMEOUT_SCALE` (1 unless set).
fn timeout_scale() -> f64 {
    secs(1).as_secs_f64()
}

/// The latest a trickling connection may be closed after its connect: the
/// handshake deadline plus 1 s of slack (scaled), in ms.
fn close_bound_ms() -> f64 {
    (f64::from(HANDSHAKE_MS) + 1000.0) * timeout_scale()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Opens sessions as an allowed client (this process, root) until the
/// attacker reports `done`; returns how long each connect + one look-up
/// took. Every one must succeed.
fn allowed_sessions_during(socket: &Path, attacker: &mut ClientProc) -> Vec<Duration> {
    let mut took = Vec::new();
    let end = Instant::now() + secs(90);
    while attacker.poll_key("done").is_none() {
        assert!(Instant::now() < end, "attacker never finished");
        let t0 = Instant::now();
        let mut c = Client::connect(socket, "allowed").unwrap_or_else(|e| {
            panic!(
                "allowed client refused during the attack: {e} ({})",
                sluice_client::last_error_message()
            )
        });
        let m = lookup(&mut c, "echo_small");
        took.push(t0.elapsed());
        assert!(m.input_bytes > 0);
        drop(c);
        std::thread::sleep(Duration::from_millis(20));
    }
    took
}

fn summary(took: &[Duration]) -> (usize, f64, f64) {
    let mut ms: Vec<f64> = took.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let max = ms.last().copied().unwrap_or(f64::NAN);
    let p50 = ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN);
    (ms.len(), p50, max)
}

#[test]
fn unauthorised_trickle_is_closed_at_accept_while_allowed_clients_get_in() {
    let _w = sluice_tests::watchdog(
        "unauthorised_trickle_is_closed_at_accept_while_allowed_clients_get_in",
        180,
    );
    if !is_root() {
        sluice_tests::skipped(
            "unauthorised_trickle_is_closed_at_accept_while_allowed_clients_get_in",
            "playing user nobody (setuid) needs root",
        );
        return;
    }
    let dir = TestDir::new("ctl-unauth");
    // The daemon creates run/ itself: mode 0750, group = socket_group.
    let socket = dir.join("run/sluiced.sock");
    let daemon = DaemonProc::spawn(DaemonOpts {
        socket: Some(socket.clone()),
        control: ControlOpts {
            nofile_limit: Some(1024),
            // nobody's primary group may open the socket file, so the
            // connections reach the daemon; [access] does not allow uid or
            // gid 65534 (the daemon runs as root: only root is allowed).
            socket_group: Some(NOBODY.to_string()),
            handshake_timeout_ms: Some(HANDSHAKE_MS),
            ..ControlOpts::default()
        },
        ..DaemonOpts::default()
    });
    let sock_meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(sock_meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(sock_meta.gid(), NOBODY);
    let dir_meta = std::fs::metadata(socket.parent().unwrap()).unwrap();
    assert_eq!(dir_meta.permissions().mode() & 0o777, 0o750);
    assert_eq!(dir_meta.gid(), NOBODY);
    assert_eq!(daemon.status().control.nofile_limit, Some(1024));

    let mut attacker = spawn_trickle(
        &socket,
        &TrickleOpts {
            count: 1100,
            interval_ms: 3000,
            // Keep re-opening what the daemon closes for 6 s more.
            hold_ms: 6000,
            as_user: Some((NOBODY, NOBODY)),
            groups: Vec::new(),
        },
        &dir,
    );
    assert_eq!(attacker.wait_key("euid", secs(30)), NOBODY.to_string());
    let took = allowed_sessions_during(&socket, &mut attacker);
    let r = attacker.finish(secs(60));
    let st = daemon.status();
    let (n, p50, max) = summary(&took);
    println!(
        "unauthorised trickle: {} connections opened, {} closed, close after connect p50 {} ms \
         max {} ms; refused codes {}; allowed sessions during the attack: {n}, connect+lookup \
         p50 {p50:.1} ms max {max:.1} ms; daemon control counters {:?}",
        r.u64("opened"),
        r.u64("closed"),
        r.get("p50_close_ms").unwrap_or("?"),
        r.get("max_close_ms").unwrap_or("?"),
        r.get("refused_codes").unwrap_or("?"),
        st.control
    );
    assert_eq!(r.u64("connect_errors"), 0, "{r:?}");
    assert!(r.u64("opened") >= 1100, "{r:?}");
    assert_eq!(r.u64("still_open"), 0, "{r:?}");
    assert_eq!(r.u64("closed"), r.u64("opened"), "{r:?}");
    let max_close: f64 = r.get("max_close_ms").unwrap().parse().unwrap();
    let bound = close_bound_ms();
    assert!(
        max_close <= bound,
        "a hostile connection stayed {max_close} ms, past the handshake deadline + slack \
         ({bound} ms)"
    );
    // Every one was told why, and counted as not allowed.
    assert_eq!(
        r.get("refused_codes"),
        Some(format!("{}:{}", refused::NOT_ALLOWED, r.u64("closed")).as_str()),
        "{r:?}"
    );
    assert!(
        st.control.not_allowed >= r.u64("opened"),
        "{:?}",
        st.control
    );
    // They never held the daemon's descriptors or a handshake slot.
    assert_eq!(st.control.fd_exhausted, 0, "{:?}", st.control);
    assert_eq!(st.control.handshake_timeouts, 0, "{:?}", st.control);
    assert!(n > 0, "no allowed session was tried during the attack");
    // An allowed client was never held up until a deadline.
    assert!(
        max < f64::from(HANDSHAKE_MS) * timeout_scale(),
        "an allowed session took {max} ms"
    );
}

/// A daemon whose socket (in `dir/run/`) user nobody's primary group may
/// open, with `control` for the rest: the tests below judge what `[access]`
/// and the handshake table do with nobody's connections, not the file mode.
fn daemon_open_to_nobody(dir: &TestDir, control: ControlOpts) -> (DaemonProc, PathBuf) {
    let socket = dir.join("run/sluiced.sock");
    let daemon = DaemonProc::spawn(DaemonOpts {
        socket: Some(socket.clone()),
        control: ControlOpts {
            socket_group: Some(NOBODY.to_string()),
            handshake_timeout_ms: Some(HANDSHAKE_MS),
            ..control
        },
        ..DaemonOpts::default()
    });
    (daemon, socket)
}

/// `count` connections that never finish a hello, as `as_user` with
/// supplementary `groups`, not re-opened when closed.
fn silent(count: usize, as_user: Option<(u32, u32)>, groups: Vec<u32>) -> TrickleOpts {
    TrickleOpts {
        count,
        interval_ms: 3000,
        hold_ms: 0,
        as_user,
        groups,
    }
}

/// `[access] allowed_gids` counts a peer's supplementary groups
/// (`SO_PEERGROUPS`), not only the primary gid `SO_PEERCRED` gives: the
/// usual way to let a user in is to add them to a group.
#[test]
fn a_listed_supplementary_group_lets_a_peer_in() {
    let _w = sluice_tests::watchdog("a_listed_supplementary_group_lets_a_peer_in", 120);
    if !is_root() {
        sluice_tests::skipped(
            "a_listed_supplementary_group_lets_a_peer_in",
            "playing user nobody with chosen groups needs root",
        );
        return;
    }
    const GROUP: u32 = 4242;
    let dir = TestDir::new("ctl-groups");
    // [access] lists only GROUP.
    let (_daemon, socket) = daemon_open_to_nobody(
        &dir,
        ControlOpts {
            allowed_gids: vec![GROUP],
            ..ControlOpts::default()
        },
    );
    let one = |groups: Vec<u32>| {
        spawn_trickle(&socket, &silent(1, Some((NOBODY, NOBODY)), groups), &dir).finish(secs(60))
    };
    let not_allowed = format!("{}:", refused::NOT_ALLOWED);
    let without = one(Vec::new());
    assert_eq!(without.u64("connect_errors"), 0, "{without:?}");
    assert_eq!(
        without.get("refused_codes"),
        Some(format!("{not_allowed}1").as_str()),
        "{without:?}"
    );
    let with = one(vec![77, GROUP]);
    assert_eq!(with.u64("connect_errors"), 0, "{with:?}");
    // Let in: the daemon waited for a handshake (which never came) instead
    // of refusing at accept.
    assert_eq!(with.u64("closed"), 1, "{with:?}");
    assert!(
        !with
            .get("refused_codes")
            .unwrap_or("")
            .contains(&not_allowed),
        "{with:?}"
    );
}

/// With the handshake table full, room is made by closing the oldest
/// handshake of the uid holding the most: a user flooding the table with
/// connections it never finishes evicts its own, and another user's slow
/// handshake waits out its own deadline.
#[test]
fn a_handshake_flood_evicts_its_own_user_s_handshakes() {
    let _w = sluice_tests::watchdog("a_handshake_flood_evicts_its_own_user_s_handshakes", 120);
    if !is_root() {
        sluice_tests::skipped(
            "a_handshake_flood_evicts_its_own_user_s_handshakes",
            "playing user nobody needs root",
        );
        return;
    }
    let dir = TestDir::new("ctl-hs-uid");
    let (daemon, socket) = daemon_open_to_nobody(
        &dir,
        ControlOpts {
            allowed_gids: vec![NOBODY],
            max_handshakes: Some(32),
            ..ControlOpts::default()
        },
    );
    // Root's one slow handshake first, so it is the oldest in the table.
    let mut slow = spawn_trickle(&socket, &silent(1, None, Vec::new()), &dir);
    slow.wait_key("euid", secs(30));
    std::thread::sleep(Duration::from_millis(300));
    let flood = spawn_trickle(
        &socket,
        &silent(200, Some((NOBODY, NOBODY)), Vec::new()),
        &dir,
    );
    let flood = flood.finish(secs(60));
    let slow = slow.finish(secs(60));
    let st = daemon.status();
    println!(
        "handshake flood: nobody {} opened, {} closed; root's slow handshake closed after {} ms; \
         daemon control counters {:?}",
        flood.u64("opened"),
        flood.u64("closed"),
        slow.get("max_close_ms").unwrap_or("?"),
        st.control
    );
    assert_eq!(flood.u64("connect_errors"), 0, "{flood:?}");
    assert!(
        st.control.handshakes_evicted >= 200 - 32,
        "{:?}",
        st.control
    );
    // Root's connection ran to its own deadline (an eviction would have
    // closed it as the flood arrived, within a few hundred ms).
    let root_ms: f64 = slow.get("max_close_ms").unwrap().parse().unwrap();
    assert!(
        root_ms >= f64::from(HANDSHAKE_MS) * 0.75,
        "root's handshake closed after {root_ms} ms: evicted by another user's flood"
    );
}

#[test]
fn allowed_trickle_at_the_fd_limit_is_shed_within_the_deadline() {
    let _w = sluice_tests::watchdog(
        "allowed_trickle_at_the_fd_limit_is_shed_within_the_deadline",
        180,
    );
    if !is_root() {
        sluice_tests::skipped(
            "allowed_trickle_at_the_fd_limit_is_shed_within_the_deadline",
            "setting the daemon's RLIMIT_NOFILE needs root",
        );
        return;
    }
    let dir = TestDir::new("ctl-allowed");
    let daemon = DaemonProc::spawn(DaemonOpts {
        control: ControlOpts {
            nofile_limit: Some(1024),
            handshake_timeout_ms: Some(HANDSHAKE_MS),
            // No cap below the fd limit: the descriptors run out first.
            max_handshakes: Some(4096),
            ..ControlOpts::default()
        },
        ..DaemonOpts::default()
    });
    let socket = daemon.socket().to_owned();
    let mut attacker = spawn_trickle(
        &socket,
        &TrickleOpts {
            count: 1100,
            interval_ms: 3000,
            hold_ms: 4000,
            as_user: None,
            groups: Vec::new(),
        },
        &dir,
    );
    let took = allowed_sessions_during(&socket, &mut attacker);
    let r = attacker.finish(secs(60));
    let st = daemon.status();
    let (n, p50, max) = summary(&took);
    println!(
        "allowed trickle: {} connections opened, {} closed, close after connect p50 {} ms max \
         {} ms; allowed sessions during the attack: {n}, connect+lookup p50 {p50:.1} ms max \
         {max:.1} ms; daemon control counters {:?}",
        r.u64("opened"),
        r.u64("closed"),
        r.get("p50_close_ms").unwrap_or("?"),
        r.get("max_close_ms").unwrap_or("?"),
        st.control
    );
    assert_eq!(r.u64("still_open"), 0, "{r:?}");
    assert_eq!(r.u64("closed"), r.u64("opened"), "{r:?}");
    let max_close: f64 = r.get("max_close_ms").unwrap().parse().unwrap();
    let bound = close_bound_ms();
    assert!(
        max_close <= bound,
        "a trickling connection stayed {max_close} ms ({bound} ms allowed)"
    );
    // The descriptor limit was reached and handled by shedding handshakes.
    assert!(st.control.fd_exhausted > 0, "{:?}", st.control);
    assert!(
        st.control.handshake_timeouts + st.control.handshakes_evicted >= r.u64("opened"),
        "{:?}",
        st.control
    );
    assert!(n > 0, "no allowed session was tried during the attack");
    // Nothing is left but the status query's own connection.
    assert!(st.control.handshaking <= 1, "{:?}", st.control);
    assert!(st.control.open_connections <= 1, "{:?}", st.control);
}

#[test]
fn status_json_is_valid_with_4096_connected_clients() {
    let _w = sluice_tests::watchdog("status_json_is_valid_with_4096_connected_clients", 300);
    const N: usize = 4096;
    // This process holds 3 descriptors per session, the daemon 4.
    let want = 4 * N as u64 + 512;
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let ours = rustix::process::Rlimit {
        current: Some(want),
        maximum: Some(want.max(lim.maximum.unwrap_or(want))),
    };
    if rustix::process::setrlimit(rustix::process::Resource::Nofile, ours).is_err() {
        sluice_tests::skipped(
            "status_json_is_valid_with_4096_connected_clients",
            &format!("cannot raise RLIMIT_NOFILE to {want} (needs root or a higher hard limit)"),
        );
        return;
    }
    let daemon = DaemonProc::spawn(DaemonOpts {
        max_clients: N,
        sq_entries: 2,
        cq_entries: 2,
        arena_bytes: 4096,
        control: ControlOpts {
            nofile_limit: Some(want),
            ..ControlOpts::default()
        },
        ..DaemonOpts::default()
    });
    let socket = daemon.socket().to_owned();
    // A long name (JSON-escaped control characters) makes entries large.
    let name = "\u{1}".repeat(shm_proto::control::MAX_NAME);
    let mut clients = Vec::with_capacity(N);
    for i in 0..N {
        clients.push(Client::connect(&socket, &name).unwrap_or_else(|e| {
            panic!(
                "session {i} of {N}: {e} ({})",
                sluice_client::last_error_message()
            )
        }));
    }
    // One more is refused: max_clients holds.
    assert_eq!(
        Client::connect(&socket, "one-too-many").unwrap_err(),
        sluice_client::Error::Refused(refused::TOO_MANY_CLIENTS)
    );

    // The first page alone (what an old `sluice` or `sluice_client::query_status`
    // reads) is valid JSON, and says there is more.
    let first = sluice_client::query_status(&socket).expect("first page");
    assert!(first.len() <= shm_proto::control::STATUS_PAGE_BUDGET);
    let page: serde_json::Value = serde_json::from_str(&first).expect("first page is JSON");
    assert_eq!(page["clients_total"], N as u64);
    assert!(page["next_client_id"].is_u64(), "first page names the next");
    // The client library walks the pages too: every client exactly once.
    let mut walked: Vec<u64> = Vec::new();
    let mut page = page;
    loop {
        walked.extend(
            page["clients"]
                .as_array()
                .expect("clients")
                .iter()
                .map(|c| c["id"].as_u64().expect("id")),
        );
        let Some(next) = page["next_client_id"].as_u64() else {
            break;
        };
        let json = sluice_client::query_status_page(&socket, next as u32).expect("next page");
        page = serde_json::from_str(&json).expect("page is JSON");
    }
    walked.sort_unstable();
    walked.dedup();
    assert_eq!(walked.len(), N, "pages walked with query_status_page");

    // Every page, merged.
    let all = sluice_cli::status::query_all(&socket).expect("status");
    assert_eq!(all.clients.len(), N);
    assert_eq!(all.clients_total, N as u64);
    let mut ids: Vec<u32> = all.clients.iter().map(|c| c.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), N, "a client listed twice");
    let mine: Vec<u32> = {
        let mut v: Vec<u32> = clients.iter().map(Client::client_id).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(ids, mine);

    // The `sluice` binary, when built: `sluice status --json` is one
    // valid document with every client.
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().and_then(Path::parent).unwrap();
    let sluice = target.join("sluice");
    if sluice.exists() {
        let out = std::process::Command::new(&sluice)
            .args(["status", "--json", "--socket"])
            .arg(&socket)
            .output()
            .expect("run sluice status");
        assert!(out.status.success(), "{out:?}");
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("sluice status --json is valid JSON");
        assert_eq!(doc["clients"].as_array().map(Vec::len), Some(N));
        println!(
            "sluice status --json with {N} clients: {} bytes of valid JSON",
            out.stdout.len()
        );
        let out = std::process::Command::new(&sluice)
            .args(["status", "--socket"])
            .arg(&socket)
            .output()
            .expect("run sluice status");
        assert!(out.status.success(), "{out:?}");
    } else {
        eprintln!(
            "note: {} not built; `cargo build -p sluice-cli` to check the binary too",
            sluice.display()
        );
    }
    drop(clients);
}

/// Reads one frame (length prefix + body) from a blocking socket.
fn read_frame(s: &mut UnixStream) -> Vec<u8> {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix).expect("frame length");
    let len = Msg::body_len(prefix).expect("frame length in range");
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("frame body");
    body
}

#[test]
fn a_lookup_with_a_very_long_name_is_answered_not_found() {
    let _w = sluice_tests::watchdog("a_lookup_with_a_very_long_name_is_answered_not_found", 60);
    let daemon = DaemonProc::spawn(DaemonOpts::default());
    let mut s = UnixStream::connect(daemon.socket()).unwrap();
    s.set_read_timeout(Some(secs(30))).unwrap();
    s.write_all(&hello_frame(
        shm_proto::MAGIC,
        shm_proto::PROTOCOL_VERSION,
        shm_proto::LAYOUT_HASH,
        "long-names",
    ))
    .unwrap();
    // The Welcome (its fds are dropped by a plain read).
    let body = read_frame(&mut s);
    assert!(matches!(Msg::decode(&body), Ok(Msg::Welcome { .. })));
    for len in [575, 600, 4096, usize::from(u16::MAX)] {
        let name = "x".repeat(len);
        let mut buf = vec![0u8; len + 64];
        let n = Msg::LookupModel { name: &name }.encode(&mut buf).unwrap();
        s.write_all(&buf[..n]).unwrap();
        let body = read_frame(&mut s);
        assert_eq!(
            Msg::decode(&body),
            Ok(Msg::ModelNotFound { name: &name }),
            "a {len}-byte name"
        );
    }
    // The session goes on.
    s.write_all(&frame(&Msg::LookupModel { name: "echo_small" }))
        .unwrap();
    let body = read_frame(&mut s);
    assert!(
        matches!(
            Msg::decode(&body),
            Ok(Msg::ModelInfo {
                name: "echo_small",
                ..
            })
        ),
        "{:?}",
        Msg::decode(&body)
    );
}

/// Opens sessions until the daemon refuses one; returns them and the
/// refusal.
fn fill_sessions(socket: &Path) -> (Vec<Client>, (sluice_client::Error, String)) {
    let mut sessions = Vec::new();
    loop {
        assert!(
            sessions.len() < 64,
            "the descriptor limit held 64 sessions?"
        );
        match Client::connect(socket, "fill") {
            Ok(c) => sessions.push(c),
            Err(e) => {
                let why = sluice_client::last_error_message();
                // The daemon closes the refused connection just after its
                // reply: let it, before anyone counts its descriptors.
                std::thread::sleep(Duration::from_millis(300));
                return (sessions, (e, why));
            }
        }
    }
}

/// How many of the descriptor numbers below `limit` process `pid` has
/// open (the kernel hands out the lowest free number, and fails with EMFILE
/// when none below the limit is free).
fn open_fds_below(pid: u32, limit: u64) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
                .filter(|&fd| fd < limit)
                .count() as u64
        })
        .unwrap_or(0)
}

fn limited_daemon(nofile: u64) -> DaemonProc {
    DaemonProc::spawn(DaemonOpts {
        control: ControlOpts {
            nofile_limit: Some(nofile),
            ..ControlOpts::default()
        },
        ..DaemonOpts::default()
    })
}

#[test]
fn out_of_descriptors_sheds_connections_without_spinning() {
    let _w = sluice_tests::watchdog("out_of_descriptors_sheds_connections_without_spinning", 120);
    if !is_root() {
        sluice_tests::skipped(
            "out_of_descriptors_sheds_connections_without_spinning",
            "reading the daemon's /proc/PID/fd and setting its limit needs root",
        );
        return;
    }
    // Sessions take 4 descriptors each, so with a limit of 96 a few may be
    // left over, and those the daemon uses (and gives back) to refuse a
    // session. Measure the leftover, then start a daemon whose limit its
    // sessions fill exactly: then accept itself fails with EMFILE, and
    // with no unfinished handshake to close, the reserve descriptor is
    // what lets it answer.
    let probe = limited_daemon(96);
    let (sessions, refusal) = fill_sessions(probe.socket());
    assert_eq!(
        refusal.0,
        sluice_client::Error::Refused(refused::INTERNAL),
        "{refusal:?}"
    );
    let spare = 96 - open_fds_below(probe.pid(), 96);
    drop(sessions);
    drop(probe);
    let limit = 96 - spare;
    let daemon = limited_daemon(limit);
    let socket = daemon.socket().to_owned();
    let (mut sessions, refusal) = fill_sessions(&socket);
    println!(
        "RLIMIT_NOFILE {limit}: out of descriptors after {} sessions ({} fds open): {refusal:?}",
        sessions.len(),
        open_fds_below(daemon.pid(), limit)
    );
    assert_eq!(
        open_fds_below(daemon.pid(), limit),
        limit,
        "the sessions fill the limit"
    );
    assert_eq!(
        refusal.0,
        sluice_client::Error::Refused(refused::INTERNAL),
        "{refusal:?}"
    );
    assert!(refusal.1.contains("out of file descriptors"), "{refusal:?}");
    // Keep knocking while out of descriptors: each attempt is answered,
    // none hangs, and the daemon does not spin on accept's EMFILE (a spin
    // would count thousands of failures).
    const ATTEMPTS: u64 = 20;
    let mut refused_internal = 0;
    for _ in 0..ATTEMPTS {
        match Client::connect(&socket, "knock") {
            Ok(c) => panic!(
                "a session opened with no descriptors left ({})",
                c.client_id()
            ),
            Err(sluice_client::Error::Refused(code)) => {
                assert_eq!(code, refused::INTERNAL);
                refused_internal += 1;
            }
            Err(_) => {} // closed before our hello was written
        }
    }
    // Give descriptors back; the daemon answers again and serves again.
    drop(sessions.pop());
    let mut st = None;
    assert!(
        sluice_tests::wait_for(
            || {
                st = daemon.try_status().ok();
                st.is_some()
            },
            secs(30)
        ),
        "no status after a session was closed"
    );
    let st = st.unwrap();
    println!(
        "{ATTEMPTS} attempts while out of descriptors: {refused_internal} refused with INTERNAL; \
         daemon control counters {:?}",
        st.control
    );
    assert!(st.control.shed >= ATTEMPTS, "{:?}", st.control);
    // One accept failure per shed connection, each followed by a pause:
    // bounded by the attempts made (and the first refusal), not by time.
    assert!(
        st.control.fd_exhausted <= ATTEMPTS + 2,
        "accept failed {} times for {} attempts: spinning? {:?}",
        st.control.fd_exhausted,
        ATTEMPTS + 1,
        st.control
    );
    drop(sessions);
    let mut c = sluice_tests::connect(&socket, "after");
    let _ = lookup(&mut c, "echo_small");
}
