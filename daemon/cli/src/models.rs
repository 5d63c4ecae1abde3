//! `sluice models`: list, load, unload or re-scan the models of a running
//! daemon's repository (`[models] dir`), over its control socket.
//!
//! Each command is one connection: a `ModelsCommand` frame out, one
//! `ModelsReply` back (`shm_proto::control`). A load imports the ONNX file
//! on the daemon's repository thread, so the reply may take as long as the
//! import.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use shm_proto::control::{MAX_FRAME, Msg, models_op};
use sluice_service::repo::ReloadReport;

/// What to ask of the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// What is served, with versions.
    List,
    /// Load or reload `NAME`.
    Load(String),
    /// Unload `NAME`.
    Unload(String),
    /// Re-scan the directory (as SIGHUP).
    Rescan,
}

/// Why the command could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    /// No daemon answers at the socket.
    #[error(
        "cannot connect to sluiced at {path}: is it running, and may this user open its \
         socket (mode 0660, group access.socket_group)?"
    )]
    Connect {
        /// The socket.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The connection failed mid-way.
    #[error("models command to sluiced failed")]
    Io(#[from] std::io::Error),
    /// The name does not fit a frame.
    #[error("model name of {0} bytes is too long; model names are at most 31 bytes")]
    NameTooLong(usize),
    /// Something other than a models reply came back.
    #[error(
        "sluiced sent something other than a models reply: {0}; is it an older sluiced without \
         model reloading?"
    )]
    Protocol(String),
    /// The reply is not the document this `sluice` knows.
    #[error("unexpected models document")]
    Json(#[from] serde_json::Error),
}

/// Sends `op` and returns whether the daemon carried it out, with its
/// report (what changed, the errors, what is served now).
pub fn command(socket: &Path, op: &Op) -> Result<(bool, ReloadReport), ModelsError> {
    let (code, name) = match op {
        Op::List => (models_op::LIST, ""),
        Op::Load(n) => (models_op::LOAD, n.as_str()),
        Op::Unload(n) => (models_op::UNLOAD, n.as_str()),
        Op::Rescan => (models_op::RESCAN, ""),
    };
    if name.len() > 256 {
        return Err(ModelsError::NameTooLong(name.len()));
    }
    let mut sock = UnixStream::connect(socket).map_err(|source| ModelsError::Connect {
        path: socket.display().to_string(),
        source,
    })?;
    // A load imports a file: allow it minutes, not forever.
    sock.set_read_timeout(Some(Duration::from_secs(600)))?;
    let mut buf = [0u8; 512];
    let n = Msg::ModelsCommand { op: code, name }
        .encode(&mut buf)
        .map_err(|e| ModelsError::Protocol(format!("cannot encode a request ({e:?})")))?;
    sock.write_all(&buf[..n])?;
    let mut prefix = [0u8; 4];
    sock.read_exact(&mut prefix)?;
    let len = Msg::body_len(prefix).map_err(|e| ModelsError::Protocol(e.to_string()))?;
    debug_assert!(len <= MAX_FRAME);
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body)?;
    match Msg::decode(&body) {
        Ok(Msg::ModelsReply { ok, json }) => Ok((ok == 1, serde_json::from_str(json)?)),
        Ok(Msg::Refused { code, message }) => Err(ModelsError::Protocol(format!(
            "refused (code {code}): {message}"
        ))),
        Ok(other) => Err(ModelsError::Protocol(format!("{other:?}"))),
        Err(e) => Err(ModelsError::Protocol(e.to_string())),
    }
}

/// The report as text: what changed, the errors, then one line per model.
pub fn table(r: &ReloadReport) -> String {
    let mut out = String::new();
    for (what, names) in [
        ("loaded", &r.loaded),
        ("reloaded", &r.reloaded),
        ("unloaded", &r.unloaded),
    ] {
        if !names.is_empty() {
            out.push_str(&format!("{what}: {}\n", names.join(", ")));
        }
    }
    for e in &r.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    out.push_str(&format!(
        "{:<4} {:<24} {:>7} {:>9}  {:<40} source\n",
        "id", "model", "version", "max_batch", "inputs -> outputs"
    ));
    for m in &r.models {
        out.push_str(&format!(
            "{:<4} {:<24} {:>7} {:>9}  {:<40} {}\n",
            m.id,
            m.name,
            m.version,
            m.max_batch,
            format!("{} -> {}", m.inputs.join(", "), m.outputs.join(", ")),
            m.source
        ));
    }
    if r.models_omitted > 0 {
        out.push_str(&format!(
            "... and {} more (the daemon's reply holds the first {} by name)\n",
            r.models_omitted,
            r.models.len()
        ));
    }
    out
}
