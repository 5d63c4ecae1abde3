//! The control path: connect, handshake, receive the region, map it.
//! Runs once per session, so it may allocate and block.

use std::io::{IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags};
use shm_proto::control::{self, FRAME_HEADER, MAX_FRAME, Msg};

use crate::Error;

/// Sends one message on the control socket.
///
/// With `MSG_NOSIGNAL`: a daemon that has closed the socket makes the send
/// fail with `EPIPE` ([`Error::Disconnected`]) instead of raising
/// `SIGPIPE`, whose default action would kill a C program linking this
/// library.
pub(crate) fn send(sock: &mut UnixStream, msg: &Msg<'_>) -> Result<(), Error> {
    let mut buf = [0u8; 512];
    let n = msg.encode(&mut buf).map_err(|_| Error::Protocol)?;
    let mut rest = &buf[..n];
    while !rest.is_empty() {
        match rustix::net::send(sock.as_fd(), rest, SendFlags::NOSIGNAL) {
            Ok(0) => return Err(Error::Disconnected),
            Ok(k) => rest = &rest[k..],
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::PIPE | rustix::io::Errno::CONNRESET) => {
                return Err(Error::Disconnected);
            }
            Err(e) => return Err(Error::Io(e.raw_os_error())),
        }
    }
    Ok(())
}

/// Reads one frame body into `body` (resized), collecting any fds that ride
/// along with its first bytes.
pub(crate) fn recv(
    sock: &mut UnixStream,
    body: &mut Vec<u8>,
    fds: &mut Vec<OwnedFd>,
) -> Result<(), Error> {
    let mut prefix = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let got = {
        let mut iov = [IoSliceMut::new(&mut prefix)];
        rustix::net::recvmsg(sock.as_fd(), &mut iov, &mut anc, RecvFlags::CMSG_CLOEXEC)
            .map_err(|e| match e {
                rustix::io::Errno::CONNRESET => Error::Disconnected,
                e => Error::Io(e.raw_os_error()),
            })?
            .bytes
    };
    for msg in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = msg {
            fds.extend(received);
        }
    }
    if got == 0 {
        return Err(Error::Disconnected);
    }
    sock.read_exact(&mut prefix[got..]).map_err(io_err)?;
    let len = Msg::body_len(prefix).map_err(|_| Error::Protocol)?;
    debug_assert!((FRAME_HEADER - 4..=MAX_FRAME).contains(&len));
    body.clear();
    body.resize(len, 0);
    sock.read_exact(body).map_err(io_err)
}

fn io_err(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::ConnectionReset => Error::Disconnected,
        _ => Error::Io(e.raw_os_error().unwrap_or(0)),
    }
}

/// Sends the first message of a connection and reads the daemon's answer.
///
/// The daemon may refuse at accept, before reading a byte (a peer not
/// allowed, no descriptor left), and close at once: the message then finds
/// the socket closed, but the refusal is already waiting to be read and
/// says why. So a send that fails because the peer is gone is followed by
/// the read all the same; the failed send is reported only when nothing
/// came.
pub(crate) fn first_exchange(
    sock: &mut UnixStream,
    msg: &Msg<'_>,
    body: &mut Vec<u8>,
    fds: &mut Vec<OwnedFd>,
) -> Result<(), Error> {
    let sent = send(sock, msg);
    if let Err(e) = sent
        && e != Error::Disconnected
    {
        return Err(e);
    }
    recv(sock, body, fds).map_err(|e| sent.err().unwrap_or(e))
}

/// What the handshake hands back.
pub(crate) struct Session {
    pub sock: UnixStream,
    pub region: OwnedFd,
    pub wake: OwnedFd,
    pub client_id: u32,
    pub geometry: shm_proto::Geometry,
    pub region_size: u64,
}

/// Connects to `path` and performs the versioned handshake.
pub(crate) fn handshake(path: &Path, name: &str) -> Result<Session, Error> {
    let sock = UnixStream::connect(path).map_err(|e| {
        crate::set_last_error(format!(
            "cannot connect to sluiced at {}: {e}; is the daemon running \
             (sluiced --config FILE, or systemctl start sluiced)?",
            path.display()
        ));
        Error::DaemonUnreachable
    })?;
    handshake_on(sock, name)
}

/// The versioned handshake on a connected socket.
fn handshake_on(mut sock: UnixStream, name: &str) -> Result<Session, Error> {
    let name = truncate_utf8(name, control::MAX_NAME);
    let mut body = Vec::new();
    let mut fds = Vec::new();
    first_exchange(
        &mut sock,
        &Msg::Hello {
            magic: shm_proto::MAGIC,
            version: shm_proto::PROTOCOL_VERSION,
            layout_hash: shm_proto::LAYOUT_HASH,
            pid: std::process::id(),
            name,
        },
        &mut body,
        &mut fds,
    )?;
    match Msg::decode(&body).map_err(|_| Error::Protocol)? {
        Msg::Welcome {
            version,
            client_id,
            sq_entries,
            cq_entries,
            arena_size,
            region_size,
        } => {
            if version != shm_proto::PROTOCOL_VERSION || fds.len() != 2 {
                crate::set_last_error(format!(
                    "daemon answered with protocol v{version} and {} fds; expected v{} and 2",
                    fds.len(),
                    shm_proto::PROTOCOL_VERSION
                ));
                return Err(Error::Protocol);
            }
            let geometry = shm_proto::Geometry {
                sq_entries,
                cq_entries,
                arena_size,
            };
            if geometry.validate().is_err() || geometry.region_size() != region_size {
                crate::set_last_error(format!("daemon sent an invalid geometry {geometry:?}"));
                return Err(Error::Protocol);
            }
            let wake = fds.pop().ok_or(Error::Protocol)?;
            let region = fds.pop().ok_or(Error::Protocol)?;
            Ok(Session {
                sock,
                region,
                wake,
                client_id,
                geometry,
                region_size,
            })
        }
        Msg::Refused { code, message } => {
            crate::set_last_error(format!("sluiced refused the connection: {message}"));
            Err(Error::Refused(code))
        }
        _ => Err(Error::Protocol),
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A daemon that refuses at accept writes its refusal and closes
    /// before the client's hello: the hello fails with `EPIPE` (and no
    /// `SIGPIPE`), and the client still reports the refusal, not a
    /// disconnection.
    #[test]
    fn a_refusal_sent_before_the_hello_is_read_after_the_failed_send() {
        let (client, mut daemon) = UnixStream::pair().unwrap();
        let mut buf = [0u8; 512];
        let n = Msg::Refused {
            code: control::refused::INTERNAL,
            message: "out of file descriptors",
        }
        .encode(&mut buf)
        .unwrap();
        daemon.write_all(&buf[..n]).unwrap();
        drop(daemon);
        let Err(e) = handshake_on(client, "t") else {
            panic!("a refused handshake succeeded");
        };
        assert_eq!(e, Error::Refused(control::refused::INTERNAL));
    }

    /// A C program has `SIGPIPE` at its default action (terminate); the
    /// Rust runtime ignores it, so the test restores the default first. A
    /// hello to a socket the daemon has closed must fail, not kill the
    /// process (nextest runs each test in a process of its own). `send`
    /// passes `MSG_NOSIGNAL`, as std's `UnixStream` writes also do on
    /// Linux; a plain `write(2)` here would end the test with `SIGPIPE`.
    #[test]
    fn a_hello_to_a_closed_socket_raises_no_sigpipe() {
        // SAFETY: `signal` with a valid signal number and `SIG_DFL`; this
        // test's process runs no other test, and the old disposition is
        // put back before it returns.
        let old = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let (client, daemon) = UnixStream::pair().unwrap();
        drop(daemon);
        let mut c = client;
        let r = send(&mut c, &Msg::StatusRequest);
        // SAFETY: as above, restoring what `signal` returned.
        unsafe { libc::signal(libc::SIGPIPE, old) };
        assert_eq!(r, Err(Error::Disconnected));
    }

    /// Closed without a word: the client says it was disconnected.
    #[test]
    fn a_daemon_gone_before_the_hello_is_a_disconnection() {
        let (client, daemon) = UnixStream::pair().unwrap();
        drop(daemon);
        let Err(e) = handshake_on(client, "t") else {
            panic!("a handshake with a closed socket succeeded");
        };
        assert_eq!(e, Error::Disconnected);
    }
}
