//! The control path: connect, handshake, receive the region, map it.
//! Runs once per session, so it may allocate and block.

use std::io::{IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use shm_proto::control::{self, FRAME_HEADER, MAX_FRAME, Msg};

use crate::Error;

/// Sends one message on the control socket.
pub(crate) fn send(sock: &mut UnixStream, msg: &Msg<'_>) -> Result<(), Error> {
    let mut buf = [0u8; 512];
    let n = msg.encode(&mut buf).map_err(|_| Error::Protocol)?;
    sock.write_all(&buf[..n]).map_err(io_err)
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
            .map_err(|e| Error::Io(e.raw_os_error()))?
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
    let mut sock = UnixStream::connect(path).map_err(|e| {
        crate::set_last_error(format!(
            "cannot connect to sluiced at {}: {e}; is the daemon running \
             (sluiced --config FILE, or systemctl start sluiced)?",
            path.display()
        ));
        Error::DaemonUnreachable
    })?;
    let name = truncate_utf8(name, control::MAX_NAME);
    send(
        &mut sock,
        &Msg::Hello {
            magic: shm_proto::MAGIC,
            version: shm_proto::PROTOCOL_VERSION,
            layout_hash: shm_proto::LAYOUT_HASH,
            pid: std::process::id(),
            name,
        },
    )?;
    let mut body = Vec::new();
    let mut fds = Vec::new();
    recv(&mut sock, &mut body, &mut fds)?;
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
