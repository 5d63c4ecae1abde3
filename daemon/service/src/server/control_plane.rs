//! The control plane's event loop: one thread, one epoll instance, every
//! socket non-blocking. The admission rules are in the parent module's
//! docs; this module is their mechanics.
//!
//! Each connection reads exactly one frame at a time (its 4-byte length,
//! then that many bytes), so a connection's buffer never holds more than
//! one frame: at most [`MAX_HANDSHAKE_FRAME`] before its first message is
//! done, [`MAX_FRAME`] in a session. A reply that does not go out at once
//! is kept, and the connection is not read again until it has gone
//! (epoll interest switches from `IN` to `OUT`), so a peer that never
//! reads costs one reply's memory.
//!
//! Unfinished handshakes sit in a queue in accept order; since all share
//! one timeout, the queue is also deadline order, and the front gives the
//! epoll timeout. Entries of connections that finished or closed are
//! skipped when they reach the front (and the queue is compacted when
//! they pile up).

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rustix::event::{EventfdFlags, epoll, eventfd};
use rustix::io::Errno;
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags};
use shm_proto::control::{
    MAX_FRAME, MAX_HANDSHAKE_FRAME, Msg, TensorMeta, Tensors, models_op, refused,
};
use shm_proto::region::DaemonRings;

use super::{ClientInfo, Shared};
use crate::dispatch::{ClientStats, Command, NewClient};
use crate::region::Region;

/// epoll token of the listening socket.
const LISTENER: u64 = 0;
/// epoll token of the eventfd [`crate::Daemon::shutdown`] writes.
const WAKE: u64 = 1;
/// First connection token; tokens are never reused.
const FIRST_CONN: u64 = 2;
/// How long accepting pauses after running out of descriptors.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Most connections accepted per wake-up, so reads are not starved.
const ACCEPTS_PER_WAKE: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Accepted; its first message has not been handled yet.
    Handshake,
    /// Welcomed as client `id`.
    Session(u32),
    /// Sent a `ModelsCommand`; waits for the repository's answer, then
    /// closes.
    Models,
}

#[derive(Debug)]
struct Conn {
    sock: UnixStream,
    uid: u32,
    gid: u32,
    pid: i32,
    phase: Phase,
    /// The frame being read: length prefix, then body.
    frame: Vec<u8>,
    /// Bytes of `frame` read so far.
    got: usize,
    /// The body length, once the prefix is in.
    body_len: Option<usize>,
    /// Reply bytes not yet written, from `out_pos`.
    out: Vec<u8>,
    out_pos: usize,
    /// Close once `out` is written (one-shot status replies, refusals).
    close_after_flush: bool,
    /// epoll interest is `OUT` (flushing) rather than `IN`.
    want_out: bool,
}

/// At most one log line a second for a kind of event that a hostile peer
/// can repeat at will; the lines say how many were left out.
#[derive(Debug, Default)]
struct LogLimiter {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    /// `Some(suppressed since the last line)` when a line may be logged now.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

fn suppressed_note(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more like it in the last second not logged)")
    }
}

/// The control plane: listener, connections, handshake deadlines.
#[derive(Debug)]
pub(super) struct ControlPlane {
    listener: UnixListener,
    listener_armed: bool,
    shared: Arc<Shared>,
    wake: Arc<OwnedFd>,
    epoll: OwnedFd,
    conns: HashMap<u64, Conn>,
    next_token: u64,
    /// Unfinished handshakes: (token, deadline), in accept order.
    deadlines: VecDeque<(u64, Instant)>,
    handshaking: usize,
    /// Unfinished handshakes per peer uid (entries with 0 removed).
    handshaking_by_uid: HashMap<u32, usize>,
    reserve: Option<OwnedFd>,
    accept_paused_until: Option<Instant>,
    timeout: Duration,
    max_handshakes: usize,
    daemon_uid: u32,
    not_allowed_log: LogLimiter,
    fd_log: LogLimiter,
    refused_log: LogLimiter,
    /// Outcomes of repository commands: (connection token, ok, JSON).
    repo_replies: std::sync::mpsc::Receiver<(u64, bool, String)>,
}

fn reserve_fd() -> Option<OwnedFd> {
    eventfd(0, EventfdFlags::CLOEXEC).ok()
}

/// `msg` as a whole frame, however long (`None` only past [`MAX_FRAME`]).
fn encode(msg: &Msg<'_>) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 512];
    match msg.encode(&mut buf) {
        Ok(n) => {
            buf.truncate(n);
            Some(buf)
        }
        Err(e) => {
            buf.resize(e.needed, 0);
            let n = msg.encode(&mut buf).ok()?;
            buf.truncate(n);
            Some(buf)
        }
    }
}

/// Sends `msg` without waiting; whatever does not fit is dropped (for
/// peers that are closed right after).
fn send_now(sock: &impl AsFd, msg: &Msg<'_>) {
    if let Some(bytes) = encode(msg) {
        let _ = rustix::net::send(sock, &bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
    }
}

impl ControlPlane {
    pub(super) fn new(
        listener: UnixListener,
        shared: Arc<Shared>,
        wake: Arc<OwnedFd>,
        repo_replies: std::sync::mpsc::Receiver<(u64, bool, String)>,
    ) -> std::io::Result<Self> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &ep,
            &listener,
            epoll::EventData::new_u64(LISTENER),
            epoll::EventFlags::IN,
        )?;
        epoll::add(
            &ep,
            &*wake,
            epoll::EventData::new_u64(WAKE),
            epoll::EventFlags::IN,
        )?;
        let d = &shared.config.daemon;
        let timeout = Duration::from_millis(u64::from(d.handshake_timeout_ms));
        let max_handshakes = d.max_handshakes.max(1);
        Ok(Self {
            listener,
            listener_armed: true,
            wake,
            epoll: ep,
            conns: HashMap::new(),
            next_token: FIRST_CONN,
            deadlines: VecDeque::new(),
            handshaking: 0,
            handshaking_by_uid: HashMap::new(),
            reserve: reserve_fd(),
            accept_paused_until: None,
            timeout,
            max_handshakes,
            daemon_uid: rustix::process::geteuid().as_raw(),
            not_allowed_log: LogLimiter::default(),
            fd_log: LogLimiter::default(),
            refused_log: LogLimiter::default(),
            repo_replies,
            shared,
        })
    }

    /// Runs until the daemon shuts down; then closes every connection.
    pub(super) fn run(mut self) {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        let mut ready: Vec<(u64, epoll::EventFlags)> = Vec::with_capacity(256);
        while !self.shared.shutdown.load(Ordering::SeqCst) {
            let timeout = self.next_timeout(Instant::now());
            events.clear();
            match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                timeout.as_ref(),
            ) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => {
                    tracing::error!("control plane: epoll_wait failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            ready.clear();
            ready.extend(events.iter().map(|e| (e.data.u64(), e.flags)));
            let mut accept = false;
            for &(token, flags) in &ready {
                match token {
                    LISTENER => accept = true,
                    WAKE => {
                        let mut b = [0u8; 8];
                        let _ = rustix::io::read(&*self.wake, &mut b);
                        self.post_repo_replies();
                    }
                    t => self.on_event(t, flags),
                }
            }
            if self.shared.shutdown.load(Ordering::SeqCst) {
                break;
            }
            let now = Instant::now();
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
                self.arm_listener(true);
                accept = true;
            }
            if accept && self.accept_paused_until.is_none() {
                self.accept_all();
            }
            self.expire(Instant::now());
            self.publish_gauges();
        }
        // Dropping the connections closes them; the dispatcher, shutting
        // down too, reclaims every session.
        self.conns.clear();
        self.handshaking = 0;
        self.handshaking_by_uid.clear();
        self.publish_gauges();
    }

    fn publish_gauges(&self) {
        let c = &self.shared.control_counters;
        c.open.store(self.conns.len() as u64, Ordering::Relaxed);
        c.handshaking
            .store(self.handshaking as u64, Ordering::Relaxed);
    }

    /// The epoll timeout: until the oldest handshake's deadline or the end
    /// of an accept pause, whichever comes first; none if neither.
    fn next_timeout(&self, now: Instant) -> Option<rustix::time::Timespec> {
        let deadline = self.deadlines.front().map(|&(_, d)| d);
        let until = match (deadline, self.accept_paused_until) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        };
        // Round up to the next millisecond so we wake after, not before.
        let wait = until.saturating_duration_since(now) + Duration::from_millis(1);
        Some(rustix::time::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        })
    }

    fn arm_listener(&mut self, on: bool) {
        if on == self.listener_armed {
            return;
        }
        let r = if on {
            epoll::add(
                &self.epoll,
                &self.listener,
                epoll::EventData::new_u64(LISTENER),
                epoll::EventFlags::IN,
            )
        } else {
            epoll::delete(&self.epoll, &self.listener)
        };
        match r {
            Ok(()) => self.listener_armed = on,
            Err(e) => tracing::error!("control plane: cannot (un)watch the listener: {e}"),
        }
    }

    fn is_handshaking(&self, token: u64) -> bool {
        self.conns
            .get(&token)
            .is_some_and(|c| c.phase == Phase::Handshake)
    }

    /// Closes handshakes past their deadline.
    fn expire(&mut self, now: Instant) {
        while let Some(&(token, deadline)) = self.deadlines.front() {
            if !self.is_handshaking(token) {
                self.deadlines.pop_front();
                continue;
            }
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            self.shared
                .control_counters
                .handshake_timeouts
                .fetch_add(1, Ordering::Relaxed);
            self.close(token);
        }
        if self.deadlines.len() > 2 * self.handshaking + 1024 {
            let conns = &self.conns;
            self.deadlines
                .retain(|(t, _)| conns.get(t).is_some_and(|c| c.phase == Phase::Handshake));
        }
    }

    /// A handshake of `uid` ended (closed, or became a session).
    fn handshake_done(&mut self, uid: u32) {
        self.handshaking -= 1;
        if let Some(n) = self.handshaking_by_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.handshaking_by_uid.remove(&uid);
            }
        }
    }

    /// Makes room for a handshake: closes the oldest unfinished handshake
    /// of the uid holding the most (the lowest uid on a tie), so one local
    /// user opening connections it never finishes evicts its own, not
    /// another user's; false if there is none.
    fn evict_oldest_handshake(&mut self) -> bool {
        let Some(uid) = self
            .handshaking_by_uid
            .iter()
            .max_by_key(|&(&uid, &n)| (n, std::cmp::Reverse(uid)))
            .map(|(&uid, _)| uid)
        else {
            return false;
        };
        let conns = &self.conns;
        let Some(pos) = self.deadlines.iter().position(|(t, _)| {
            conns
                .get(t)
                .is_some_and(|c| c.phase == Phase::Handshake && c.uid == uid)
        }) else {
            return false;
        };
        let (token, _) = self.deadlines.remove(pos).expect("found above");
        self.shared
            .control_counters
            .handshakes_evicted
            .fetch_add(1, Ordering::Relaxed);
        self.close(token);
        true
    }

    fn accept_all(&mut self) {
        for _ in 0..ACCEPTS_PER_WAKE {
            match rustix::net::accept_with(
                &self.listener,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) => self.admit(fd),
                Err(Errno::AGAIN) => return,
                Err(Errno::INTR | Errno::CONNABORTED) => continue,
                Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)) => {
                    if !self.accept_at_fd_limit(e) {
                        return;
                    }
                }
                Err(e) => {
                    tracing::error!("control plane: accept failed: {e}; pausing accepts");
                    self.pause_accept();
                    return;
                }
            }
        }
    }

    /// accept failed with `e` for want of descriptors (which it reports
    /// whether or not a connection is waiting). Accepts on the reserve
    /// descriptor to see: nothing waiting, nothing to do; a connection
    /// waiting, it takes the place of the oldest unfinished handshake, or,
    /// with none, is refused and closed, and accepting pauses. Returns
    /// whether to go on accepting.
    fn accept_at_fd_limit(&mut self, e: Errno) -> bool {
        drop(self.reserve.take());
        let waiting =
            rustix::net::accept_with(&self.listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC);
        let fd = match waiting {
            Ok(fd) => fd,
            Err(Errno::AGAIN) => {
                self.reserve = reserve_fd();
                return false;
            }
            Err(_) => {
                // Not even the reserve helped (there was none): wait.
                self.reserve = reserve_fd();
                self.pause_accept();
                return false;
            }
        };
        self.shared
            .control_counters
            .fd_exhausted
            .fetch_add(1, Ordering::Relaxed);
        // An unfinished handshake is the cheapest thing to give up: its
        // peer has had its chance to say hello.
        if self.evict_oldest_handshake() {
            self.reserve = reserve_fd();
            self.admit(fd);
            return true;
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let limit = limit.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        let msg = format!(
            "sluiced is out of file descriptors ({e}; RLIMIT_NOFILE = {limit}, {} sessions \
             open); retry later, or raise LimitNOFILE= in the daemon's unit",
            self.conns.len() - self.handshaking
        );
        self.shared
            .control_counters
            .shed
            .fetch_add(1, Ordering::Relaxed);
        self.shared.counters.refused.fetch_add(1, Ordering::Relaxed);
        send_now(
            &fd,
            &Msg::Refused {
                code: refused::INTERNAL,
                message: &msg,
            },
        );
        drop(fd);
        self.reserve = reserve_fd();
        self.pause_accept();
        if let Some(n) = self.fd_log.allow(Instant::now()) {
            tracing::warn!(
                "{msg}: refused a connection and paused accepting for {ACCEPT_PAUSE:?}{}",
                suppressed_note(n)
            );
        }
        false
    }

    fn pause_accept(&mut self) {
        self.accept_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
        self.arm_listener(false);
    }

    /// A freshly accepted connection: authenticate, then track it.
    fn admit(&mut self, fd: OwnedFd) {
        let Ok(cred) = rustix::net::sockopt::socket_peercred(&fd) else {
            return;
        };
        let (uid, gid, pid) = (
            cred.uid.as_raw(),
            cred.gid.as_raw(),
            cred.pid.as_raw_nonzero().get(),
        );
        let access = &self.shared.config.access;
        // Supplementary groups matter only where [access] lists groups;
        // a peer whose groups cannot be read is judged on the rest.
        let groups = if access.allowed_gids.is_empty() {
            Vec::new()
        } else {
            crate::sys::peer_groups(fd.as_fd()).unwrap_or_default()
        };
        if !access.allows(uid, gid, &groups, self.daemon_uid) {
            let c = &self.shared.control_counters;
            c.not_allowed.fetch_add(1, Ordering::Relaxed);
            self.shared.counters.refused.fetch_add(1, Ordering::Relaxed);
            let msg = format!(
                "uid {uid} (gid {gid}, groups {groups:?}) is not allowed to use this daemon; add \
                 it to access.allowed_uids (or one of its groups to access.allowed_gids) in the \
                 daemon's config"
            );
            if let Some(n) = self.not_allowed_log.allow(Instant::now()) {
                tracing::warn!(
                    pid,
                    "closed a connection at accept: {msg}{}",
                    suppressed_note(n)
                );
            }
            send_now(
                &fd,
                &Msg::Refused {
                    code: refused::NOT_ALLOWED,
                    message: &msg,
                },
            );
            return;
        }
        if self.handshaking >= self.max_handshakes {
            self.evict_oldest_handshake();
        }
        let token = self.next_token;
        self.next_token += 1;
        if let Err(e) = epoll::add(
            &self.epoll,
            &fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
        ) {
            tracing::error!("control plane: cannot watch a connection: {e}");
            return;
        }
        self.conns.insert(
            token,
            Conn {
                sock: UnixStream::from(fd),
                uid,
                gid,
                pid,
                phase: Phase::Handshake,
                frame: Vec::new(),
                got: 0,
                body_len: None,
                out: Vec::new(),
                out_pos: 0,
                close_after_flush: false,
                want_out: false,
            },
        );
        self.handshaking += 1;
        *self.handshaking_by_uid.entry(uid).or_default() += 1;
        self.deadlines
            .push_back((token, Instant::now() + self.timeout));
        // A client writes its hello right after connecting: it is usually
        // here already.
        self.on_readable(token);
    }

    fn on_event(&mut self, token: u64, flags: epoll::EventFlags) {
        use epoll::EventFlags as F;
        let Some(c) = self.conns.get(&token) else {
            return;
        };
        if c.want_out {
            if flags.intersects(F::OUT | F::HUP | F::ERR) {
                self.flush(token);
            }
        } else if flags.intersects(F::IN | F::RDHUP | F::HUP | F::ERR) {
            self.on_readable(token);
        }
    }

    /// Reads frames until the socket has no more, a reply is waiting to go
    /// out, or the connection closes.
    fn on_readable(&mut self, token: u64) {
        loop {
            let Some(c) = self.conns.get_mut(&token) else {
                return;
            };
            if c.want_out || c.close_after_flush {
                return;
            }
            let target = 4 + c.body_len.unwrap_or(0);
            // Grow with the bytes that actually arrive, not with what the
            // length prefix claims.
            let upto = target.min(c.got + 16 * 1024);
            if c.frame.len() < upto {
                c.frame.resize(upto, 0);
            }
            match (&c.sock).read(&mut c.frame[c.got..upto]) {
                Ok(0) => {
                    self.close(token);
                    return;
                }
                Ok(n) => c.got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close(token);
                    return;
                }
            }
            if c.got < target {
                continue;
            }
            if c.body_len.is_none() {
                let prefix = [c.frame[0], c.frame[1], c.frame[2], c.frame[3]];
                let (limit, what) = match c.phase {
                    Phase::Handshake => (MAX_HANDSHAKE_FRAME, "a first message"),
                    Phase::Session(_) | Phase::Models => (MAX_FRAME, "a message"),
                };
                match Msg::body_len(prefix) {
                    Ok(len) if len <= limit => c.body_len = Some(len),
                    Ok(len) => {
                        let msg = format!(
                            "malformed first message: {what} of {len} bytes exceeds the \
                             {limit}-byte limit"
                        );
                        self.reject(token, &msg);
                        return;
                    }
                    Err(e) => {
                        let msg = format!("malformed first message: {e}");
                        self.reject(token, &msg);
                        return;
                    }
                }
                continue;
            }
            let frame = std::mem::take(&mut c.frame);
            c.got = 0;
            c.body_len = None;
            let phase = c.phase;
            match phase {
                Phase::Handshake => self.on_first_message(token, &frame[4..]),
                Phase::Session(id) => self.on_session_message(token, id, &frame[4..]),
                // Nothing more is read from a one-shot command.
                Phase::Models => self.close(token),
            }
            if let Some(c) = self.conns.get_mut(&token)
                && c.frame.capacity() == 0
                && frame.capacity() <= 4096
            {
                // Keep a small buffer for the next frame.
                let mut frame = frame;
                frame.clear();
                c.frame = frame;
            }
        }
    }

    /// A bad frame: a handshake is refused with `BAD_MESSAGE`; a session
    /// just ends.
    fn reject(&mut self, token: u64, msg: &str) {
        match self.conns.get(&token).map(|c| c.phase) {
            Some(Phase::Handshake) => self.refuse(token, refused::BAD_MESSAGE, msg),
            Some(Phase::Session(id)) => {
                tracing::warn!(client = id, "{msg}; closing the session");
                self.close(token);
            }
            Some(Phase::Models) => self.close(token),
            None => {}
        }
    }

    /// Sends `Refused` and closes (once it has gone out).
    fn refuse(&mut self, token: u64, code: u32, message: &str) {
        self.shared.counters.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(n) = self.refused_log.allow(Instant::now()) {
            tracing::warn!(code, "refused a client: {message}{}", suppressed_note(n));
        }
        self.queue(token, &Msg::Refused { code, message }, true);
    }

    /// Queues `msg` on the connection and writes what it can now.
    fn queue(&mut self, token: u64, msg: &Msg<'_>, close_after: bool) {
        let Some(bytes) = encode(msg) else {
            tracing::error!("control plane: a reply does not fit in a frame; closing");
            self.close(token);
            return;
        };
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        c.out.extend_from_slice(&bytes);
        c.close_after_flush |= close_after;
        self.flush(token);
    }

    /// Writes pending output; closes on error, or when done and asked to.
    fn flush(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        while c.out_pos < c.out.len() {
            match rustix::net::send(
                &c.sock,
                &c.out[c.out_pos..],
                SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
            ) {
                Ok(n) => c.out_pos += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    if !c.want_out {
                        c.want_out = true;
                        let _ = epoll::modify(
                            &self.epoll,
                            &c.sock,
                            epoll::EventData::new_u64(token),
                            epoll::EventFlags::OUT,
                        );
                    }
                    return;
                }
                Err(_) => {
                    self.close(token);
                    return;
                }
            }
        }
        c.out.clear();
        c.out_pos = 0;
        if c.close_after_flush {
            self.close(token);
            return;
        }
        if c.want_out {
            c.want_out = false;
            let _ = epoll::modify(
                &self.epoll,
                &c.sock,
                epoll::EventData::new_u64(token),
                epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
            );
        }
    }

    /// Forgets a connection and closes its socket; a session's client is
    /// removed from the dispatcher.
    fn close(&mut self, token: u64) {
        let Some(c) = self.conns.remove(&token) else {
            return;
        };
        let _ = epoll::delete(&self.epoll, &c.sock);
        match c.phase {
            Phase::Handshake => self.handshake_done(c.uid),
            Phase::Session(id) => self.shared.send(Command::Remove(id)),
            Phase::Models => {}
        }
    }

    fn on_first_message(&mut self, token: u64, body: &[u8]) {
        let name = match Msg::decode(body) {
            Ok(Msg::StatusRequest) => {
                let json = self.shared.status_page(0);
                self.queue(token, &Msg::StatusReply { json: &json }, true);
                return;
            }
            Ok(Msg::StatusPage { from_id }) => {
                let json = self.shared.status_page(from_id);
                self.queue(token, &Msg::StatusReply { json: &json }, true);
                return;
            }
            Ok(Msg::ModelsCommand { op, name }) => {
                let name = name.to_owned();
                self.models_command(token, op, name);
                return;
            }
            Ok(Msg::Hello {
                magic,
                version,
                layout_hash,
                name,
                ..
            }) => {
                if magic != shm_proto::MAGIC {
                    let msg = format!(
                        "hello carries magic {magic:#018x}, not sluice's {:#018x}; \
                         is this a sluice client library?",
                        shm_proto::MAGIC
                    );
                    self.refuse(token, refused::BAD_MESSAGE, &msg);
                    return;
                }
                if version != shm_proto::PROTOCOL_VERSION {
                    let msg = format!(
                        "client speaks sluice protocol v{version}, this daemon speaks v{}; \
                         rebuild the client against the daemon's version of sluice-client",
                        shm_proto::PROTOCOL_VERSION
                    );
                    self.refuse(token, refused::VERSION_MISMATCH, &msg);
                    return;
                }
                if layout_hash != shm_proto::LAYOUT_HASH {
                    let msg = format!(
                        "client's shared-memory layout hash {layout_hash:#x} differs from the \
                         daemon's {:#x} (same protocol version, different build); rebuild both \
                         from the same sluice release",
                        shm_proto::LAYOUT_HASH
                    );
                    self.refuse(token, refused::LAYOUT_MISMATCH, &msg);
                    return;
                }
                name.to_owned()
            }
            decoded => {
                let why = match decoded {
                    Err(e) => e.to_string(),
                    Ok(_) => {
                        "the first message must be a sluice Hello or a status query".to_owned()
                    }
                };
                match Msg::peek_hello_version(body) {
                    Some((magic, v))
                        if magic == shm_proto::MAGIC && v != shm_proto::PROTOCOL_VERSION =>
                    {
                        let msg = format!(
                            "cannot decode a hello of protocol v{v} ({why}); this daemon speaks \
                             v{}; rebuild the client against the daemon's version of \
                             sluice-client",
                            shm_proto::PROTOCOL_VERSION
                        );
                        self.refuse(token, refused::VERSION_MISMATCH, &msg);
                    }
                    _ => self.refuse(
                        token,
                        refused::BAD_MESSAGE,
                        &format!("malformed first message: {why}"),
                    ),
                }
                return;
            }
        };
        self.welcome(token, name);
    }

    /// `sluice models`: a list is answered from the snapshot in force; a
    /// load, unload or re-scan (only from root or the daemon's own user)
    /// goes to the repository's thread, and the connection waits for its
    /// answer (no handshake deadline: an import may take a while).
    fn models_command(&mut self, token: u64, op: u32, name: String) {
        let Some(c) = self.conns.get(&token) else {
            return;
        };
        let uid = c.uid;
        let reply_now = |plane: &mut Self, ok: bool, errors: Vec<String>| {
            let report = crate::repo::ReloadReport {
                errors,
                models: plane.shared.models.current().list(),
                ..Default::default()
            };
            let json = report.to_json_within(shm_proto::control::STATUS_PAGE_BUDGET);
            plane.queue(
                token,
                &Msg::ModelsReply {
                    ok: u32::from(ok),
                    json: &json,
                },
                true,
            );
        };
        let known = [
            models_op::LIST,
            models_op::LOAD,
            models_op::UNLOAD,
            models_op::RESCAN,
        ];
        if !known.contains(&op) {
            let msg = format!("unknown models operation {op}; this daemon knows 0 to 3");
            return reply_now(self, false, vec![msg]);
        }
        if op == models_op::LIST {
            return reply_now(self, true, Vec::new());
        }
        if uid != 0 && uid != self.daemon_uid {
            let msg = format!(
                "uid {uid} may not change the models; run `sluice models` as root or as the                  daemon's user (uid {})",
                self.daemon_uid
            );
            return reply_now(self, false, vec![msg]);
        }
        if (op == models_op::LOAD || op == models_op::UNLOAD) && name.is_empty() {
            return reply_now(self, false, vec!["name the model".to_owned()]);
        }
        if let crate::repo::Reload::Refused(why) = self.shared.models.reload() {
            let why = why.clone();
            return reply_now(self, false, vec![why]);
        }
        if let Some(c) = self.conns.get_mut(&token) {
            c.phase = Phase::Models;
        }
        self.handshake_done(uid);
        if !self.shared.repo_command(op, name, Some(token)) {
            reply_now(
                self,
                false,
                vec!["the model repository's thread has stopped".to_owned()],
            );
        }
    }

    /// Sends the repository's answers to the connections waiting for them.
    fn post_repo_replies(&mut self) {
        while let Ok((token, ok, json)) = self.repo_replies.try_recv() {
            let msg = Msg::ModelsReply {
                ok: u32::from(ok),
                json: &json,
            };
            self.queue(token, &msg, true);
        }
    }

    /// Admits a client that sent a good `Hello`: its place under
    /// `clients.max_clients` first, then its region, eventfd and counters.
    fn welcome(&mut self, token: u64, name: String) {
        let Some(c) = self.conns.get(&token) else {
            return;
        };
        let (uid, gid, pid) = (c.uid, c.gid, c.pid);
        let shared = self.shared.clone();
        // Reserve the place under the lock, before anything is allocated
        // for the client.
        let max = shared.config.clients.max_clients;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let reserved = match shared.clients.lock() {
            Ok(mut v) if v.len() < max => {
                v.push(ClientInfo {
                    id,
                    name: name.clone(),
                    pid,
                    uid,
                    connected: Instant::now(),
                    stats: Arc::new(ClientStats::default()),
                });
                true
            }
            _ => false,
        };
        if !reserved {
            let msg = format!(
                "daemon already serves clients.max_clients = {max} clients; raise it or retry \
                 later"
            );
            self.refuse(token, refused::TOO_MANY_CLIENTS, &msg);
            return;
        }
        let stats = shared
            .clients
            .lock()
            .ok()
            .and_then(|v| v.iter().find(|c| c.id == id).map(|c| c.stats.clone()))
            .unwrap_or_default();
        // From here on, every failure must give the place back. The
        // connection counts as a session now, so that making room below
        // cannot pick it.
        if let Some(c) = self.conns.get_mut(&token) {
            c.phase = Phase::Session(id);
            let uid = c.uid;
            self.handshake_done(uid);
        }
        // The dispatcher's copy of the socket (it shuts the session down
        // when it drops the client).
        let dup = |me: &Self| me.conns.get(&token).map(|c| c.sock.try_clone());
        let mut sock_clone = dup(self);
        if matches!(sock_clone, Some(Err(_))) && self.handshaking > 0 {
            self.evict_oldest_handshake();
            sock_clone = dup(self);
        }
        let sock_clone = match sock_clone {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                shared.unregister(id);
                let msg = format!(
                    "sluiced cannot open a session: {e}; if it is out of file descriptors, \
                     raise LimitNOFILE= in the daemon's unit"
                );
                self.refuse(token, refused::INTERNAL, &msg);
                return;
            }
            None => {
                shared.unregister(id);
                return;
            }
        };
        let geometry = shm_proto::Geometry {
            sq_entries: shared.config.clients.sq_entries,
            cq_entries: shared.config.clients.cq_entries,
            arena_size: shared.config.clients.arena_bytes,
        };
        let setup = || {
            Region::create(id, geometry)
                .map_err(|e| e.to_string())
                .and_then(|r| DaemonRings::new(r, &geometry).map_err(|e| e.to_string()))
                .and_then(|r| {
                    eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
                        .map(|e| (r, e))
                        .map_err(|e| format!("eventfd: {e}"))
                })
        };
        let mut made = setup();
        if made.is_err() && self.handshaking > 0 {
            // Out of descriptors, most likely, with unfinished handshakes
            // holding them: a client that has said hello goes first.
            for _ in 1..super::FDS_PER_CLIENT {
                self.evict_oldest_handshake();
            }
            made = setup();
        }
        let (rings, wake) = match made {
            Ok(x) => x,
            Err(e) => {
                shared.unregister(id);
                self.refuse(token, refused::INTERNAL, &e);
                return;
            }
        };
        let welcome = Msg::Welcome {
            version: shm_proto::PROTOCOL_VERSION,
            client_id: id,
            sq_entries: geometry.sq_entries,
            cq_entries: geometry.cq_entries,
            arena_size: geometry.arena_size,
            region_size: geometry.region_size(),
        };
        let Some(c) = self.conns.get_mut(&token) else {
            shared.unregister(id);
            return;
        };
        let mut frame = [0u8; 128];
        let Ok(n) = welcome.encode(&mut frame) else {
            shared.unregister(id);
            self.close(token);
            return;
        };
        let fds = [rings.mapping().fd().as_fd(), wake.as_fd()];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        anc.push(SendAncillaryMessage::ScmRights(&fds));
        let sent = rustix::net::sendmsg(
            &c.sock,
            &[std::io::IoSlice::new(&frame[..n])],
            &mut anc,
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        );
        match sent {
            Ok(k) if k <= n => c.out.extend_from_slice(&frame[k..n]),
            _ => {
                shared.unregister(id);
                self.close(token);
                return;
            }
        }
        tracing::info!(client = id, pid, uid, gid, name = %name, "client connected");
        shared.send(Command::Add(NewClient {
            id,
            rings,
            wake,
            sock: sock_clone,
            stats,
        }));
        self.flush(token);
    }

    fn on_session_message(&mut self, token: u64, id: u32, body: &[u8]) {
        let shared = self.shared.clone();
        match Msg::decode(body) {
            Ok(Msg::LookupModel { name }) => {
                let served = shared.models.current();
                let found = served.registry.lookup(name);
                let metas = found.map(|(_, m)| (tensor_metas(m, true), tensor_metas(m, false)));
                let reply = match (found, &metas) {
                    (Some((mid, m)), Some((Ok(inputs), Ok(outputs)))) => Msg::ModelInfo {
                        id: mid,
                        input_bytes: untyped_bytes(m, true),
                        output_bytes: untyped_bytes(m, false),
                        standalone_ns: m.total_time_ns,
                        kernels: m.manifest.kernels.len() as u32,
                        name: m.name(),
                        max_batch: m.io.max_batch,
                        inputs: Tensors::List(inputs),
                        outputs: Tensors::List(outputs),
                    },
                    (Some(_), Some((Err(why), _) | (_, Err(why)))) => {
                        tracing::error!(
                            client = id,
                            model = name,
                            "model cannot be described on the wire: {why}; answering not found"
                        );
                        Msg::ModelNotFound { name }
                    }
                    _ => Msg::ModelNotFound { name },
                };
                self.queue(token, &reply, false);
            }
            Ok(Msg::StatusRequest) => {
                let json = shared.status_page(0);
                self.queue(token, &Msg::StatusReply { json: &json }, false);
            }
            Ok(Msg::StatusPage { from_id }) => {
                let json = shared.status_page(from_id);
                self.queue(token, &Msg::StatusReply { json: &json }, false);
            }
            _ => {
                tracing::warn!(
                    client = id,
                    "unexpected control message; closing the session"
                );
                self.close(token);
            }
        }
    }
}

/// What an untyped request to `m` carries (`input`) or gets: a model known
/// by its manifest, its manifest's sizes; a typed one, its tensors' total
/// at batch 1.
fn untyped_bytes(m: &sluice_model::Model, input: bool) -> u64 {
    match (m.io.is_untyped(), input) {
        (true, true) => m.input_bytes,
        (true, false) => m.output_bytes,
        (false, true) => m.io.input_bytes(1).unwrap_or(u64::MAX),
        (false, false) => m.io.output_bytes(1).unwrap_or(u64::MAX),
    }
}

/// `m`'s inputs (or outputs) as `ModelInfo` carries them, or which one
/// exceeds the protocol's bounds.
fn tensor_metas(m: &sluice_model::Model, inputs: bool) -> Result<Vec<TensorMeta<'_>>, String> {
    let specs = if inputs { &m.io.inputs } else { &m.io.outputs };
    if specs.len() > shm_proto::tensor::MAX_TENSORS {
        return Err(format!(
            "{} {} over the protocol's {}",
            specs.len(),
            if inputs { "inputs" } else { "outputs" },
            shm_proto::tensor::MAX_TENSORS
        ));
    }
    specs
        .iter()
        .map(|t| {
            TensorMeta::new(&t.name, t.elem.code(), t.batched, &t.dims).ok_or_else(|| {
                format!(
                    "tensor {:?} ({}) has a name over {} bytes or over {} dims",
                    t.name,
                    t.describe(),
                    shm_proto::tensor::MAX_TENSOR_NAME,
                    shm_proto::tensor::MAX_DIMS
                )
            })
        })
        .collect()
}
