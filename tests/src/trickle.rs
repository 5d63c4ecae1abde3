//! The `trickle` role: a slow-loris attacker on the control socket.
//!
//! It opens `count` connections, writes one byte on each at once and one
//! more every `interval_ms` after, and never finishes a frame. It watches
//! every connection (poll) and notes, per connection, how long after its
//! connect the daemon closed it and whether a `Refused` frame came first.
//! With `hold_ms`, it keeps the attack up that long after the first round:
//! every connection the daemon closes is opened again (those are timed
//! too). With `as_uid`/`as_gid` (and `as_groups`, its supplementary
//! groups) it first drops root for that user (after
//! raising its own `RLIMIT_NOFILE`, which needs root), so it plays a local
//! user the daemon's `[access]` does not allow.
//!
//! Reports: `euid`, `first_round_closed` (when every connection of the first
//! round has been closed), then at the end `opened`, `closed`,
//! `still_open`, `connect_errors`, `first_connect_error`,
//! `max_close_ms`, `p50_close_ms`, `refused_codes` (code:count,...).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shm_proto::control::Msg;

use super::{Args, ClientProc, Report, TestDir, report, spawn_reader, spawn_role};

/// What a `trickle` process does.
#[derive(Debug, Clone)]
pub struct TrickleOpts {
    /// Connections in the first round.
    pub count: usize,
    /// Pause between one-byte writes on each connection.
    pub interval_ms: u64,
    /// After the first round is closed, keep re-opening closed
    /// connections for this long.
    pub hold_ms: u64,
    /// Drop root for this uid/gid before connecting (`None`: stay).
    pub as_user: Option<(u32, u32)>,
    /// With `as_user`: the supplementary groups to keep (default none).
    pub groups: Vec<u32>,
}

/// Starts a `trickle` process against `socket`.
pub fn spawn_trickle(socket: &Path, opts: &TrickleOpts, dir: &TestDir) -> ClientProc {
    let name = "trickle".to_owned();
    let log = dir.join("trickle.log");
    let mut args = vec![
        ("socket", socket.display().to_string()),
        ("count", opts.count.to_string()),
        ("interval_ms", opts.interval_ms.to_string()),
        ("hold_ms", opts.hold_ms.to_string()),
    ];
    if let Some((uid, gid)) = opts.as_user {
        args.push(("as_uid", uid.to_string()));
        args.push(("as_gid", gid.to_string()));
        if !opts.groups.is_empty() {
            let g: Vec<String> = opts.groups.iter().map(u32::to_string).collect();
            args.push(("as_groups", g.join(",")));
        }
    }
    let mut child = spawn_role("trickle", &args, &log);
    let pid = child.id();
    let rx = spawn_reader(child.stdout.take().expect("piped stdout"));
    ClientProc {
        child,
        pid,
        name,
        rx,
        seen: Report::default(),
        log,
        exit: None,
    }
}

struct Conn {
    sock: UnixStream,
    opened: Instant,
    last_write: Instant,
    got: Vec<u8>,
}

fn drop_privileges(uid: u32, gid: u32, groups: &[u32]) -> Result<(), String> {
    // SAFETY: plain syscalls on ids; `groups` is a live slice of gid_t
    // whose length is passed; glibc applies them to every thread.
    let rc = unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
            -1
        } else if libc::setgid(gid) != 0 {
            -2
        } else if libc::setuid(uid) != 0 {
            -3
        } else {
            0
        }
    };
    if rc != 0 {
        return Err(format!(
            "dropping to uid {uid} gid {gid} failed at step {rc}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn refused_code(bytes: &[u8]) -> Option<u32> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    match Msg::decode(bytes.get(4..4 + len)?) {
        Ok(Msg::Refused { code, .. }) => Some(code),
        _ => None,
    }
}

pub(crate) fn role(a: &Args) -> i32 {
    let socket = PathBuf::from(a.req("socket"));
    let count: usize = a.num("count", 1100);
    let interval = Duration::from_millis(a.num("interval_ms", 3000));
    let hold = Duration::from_millis(a.num("hold_ms", 0));
    let want = (count as u64) * 2 + 256;
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if lim.current.is_some_and(|c| c < want) {
        let raised = rustix::process::Rlimit {
            current: Some(want),
            maximum: Some(want.max(lim.maximum.unwrap_or(want))),
        };
        if let Err(e) = rustix::process::setrlimit(rustix::process::Resource::Nofile, raised) {
            report(
                "problem",
                format!("cannot raise RLIMIT_NOFILE to {want}: {e}"),
            );
            return 1;
        }
    }
    if let Some(uid) = a.get("as_uid") {
        let uid: u32 = uid.parse().expect("as_uid");
        let gid: u32 = a.num("as_gid", uid);
        let groups: Vec<u32> = a
            .get("as_groups")
            .map(|g| {
                g.split(',')
                    .map(|v| v.parse().expect("as_groups"))
                    .collect()
            })
            .unwrap_or_default();
        if let Err(e) = drop_privileges(uid, gid, &groups) {
            report("problem", e);
            return 1;
        }
    }
    report("euid", rustix::process::geteuid().as_raw());

    let mut conns: Vec<Conn> = Vec::with_capacity(count);
    let mut close_ms: Vec<f64> = Vec::new();
    let mut codes: BTreeMap<u32, u64> = BTreeMap::new();
    let mut opened = 0u64;
    let mut connect_errors = 0u64;
    let mut first_error = String::new();
    let mut connect_one = |conns: &mut Vec<Conn>| match UnixStream::connect(&socket) {
        Ok(mut sock) => {
            let _ = sock.write_all(&[0xff]);
            let _ = sock.set_nonblocking(true);
            let now = Instant::now();
            conns.push(Conn {
                sock,
                opened: now,
                last_write: now,
                got: Vec::new(),
            });
            true
        }
        Err(e) => {
            if first_error.is_empty() {
                first_error = e.to_string();
            }
            false
        }
    };
    for _ in 0..count {
        if connect_one(&mut conns) {
            opened += 1;
        } else {
            connect_errors += 1;
        }
    }
    let mut first_round_done = false;
    let mut hold_until: Option<Instant> = None;
    let watchdog = Instant::now() + Duration::from_secs(120);
    let mut buf = [0u8; 4096];
    loop {
        let mut pfds: Vec<libc::pollfd> = conns
            .iter()
            .map(|c| libc::pollfd {
                fd: c.sock.as_raw_fd(),
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            })
            .collect();
        // SAFETY: `pfds` is a valid array of pollfd of the length passed.
        let _ = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 20) };
        let now = Instant::now();
        let mut closed = vec![false; conns.len()];
        for (i, p) in pfds.iter().enumerate() {
            if p.revents == 0 {
                continue;
            }
            let c = &mut conns[i];
            loop {
                match c.sock.read(&mut buf) {
                    Ok(0) => {
                        closed[i] = true;
                        break;
                    }
                    Ok(n) => c.got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        closed[i] = true;
                        break;
                    }
                }
            }
        }
        // Trickle: one more byte on each connection still open.
        for (i, c) in conns.iter_mut().enumerate() {
            if !closed[i] && now.duration_since(c.last_write) >= interval {
                c.last_write = now;
                if c.sock.write(&[0xff]).is_err() {
                    closed[i] = true;
                }
            }
        }
        let mut reopen = 0;
        let mut i = 0;
        conns.retain(|c| {
            let gone = closed[i];
            i += 1;
            if gone {
                close_ms.push(now.duration_since(c.opened).as_secs_f64() * 1e3);
                if let Some(code) = refused_code(&c.got) {
                    *codes.entry(code).or_default() += 1;
                }
                reopen += 1;
            }
            !gone
        });
        if !first_round_done && close_ms.len() as u64 >= opened {
            first_round_done = true;
            report("first_round_closed", 1);
            hold_until = Some(now + hold);
        }
        if let Some(t) = hold_until {
            // After the hold, open nothing more and wait for the daemon to
            // close what is left.
            if now >= t {
                if conns.is_empty() {
                    break;
                }
            } else {
                for _ in 0..reopen {
                    if connect_one(&mut conns) {
                        opened += 1;
                    } else {
                        connect_errors += 1;
                    }
                }
            }
        }
        if now >= watchdog {
            break;
        }
    }
    close_ms.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        close_ms
            .get(((close_ms.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    report("opened", opened);
    report("closed", close_ms.len());
    report("still_open", conns.len());
    report("connect_errors", connect_errors);
    report("first_connect_error", &first_error);
    report("max_close_ms", format!("{:.1}", pct(1.0)));
    report("p50_close_ms", format!("{:.1}", pct(0.5)));
    let codes: Vec<String> = codes.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    report("refused_codes", codes.join(","));
    report("done", 1);
    0
}

impl ClientProc {
    /// The value of `key` if the process has reported it by now (does not
    /// wait).
    pub fn poll_key(&mut self, key: &str) -> Option<String> {
        while let Ok((k, v)) = self.rx.try_recv() {
            self.seen.0.insert(k, v);
        }
        self.seen.get(key).map(str::to_owned)
    }
}
