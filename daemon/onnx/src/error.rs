//! Import errors: each names the file and what in it is wrong.

use std::path::PathBuf;

/// A model file sluice cannot load.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file cannot be read.
    #[error("{}: cannot read the model: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than a protobuf message may be.
    #[error("{}: the file is {bytes} bytes; an ONNX file is at most 2 GiB (store large weights as external data)", path.display())]
    TooBig {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// The bytes are not an ONNX model.
    #[error("{}: not a valid ONNX model (protobuf decoding failed: {msg}); is the file complete and an .onnx model?", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        msg: String,
    },
    /// Something in the model is wrong; the message names it.
    #[error("{}: {msg}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the node, tensor or value.
        msg: String,
    },
    /// The model uses operators sluice does not run.
    #[error("{}: {} operator(s) sluice does not support (opset {opset}): {}; sluice runs: {}", path.display(), ops.len(), list(ops), crate::SUPPORTED_OPS.join(", "))]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// The model's default-domain opset.
        opset: i64,
        /// Each unsupported use: (operator with its domain, node name).
        ops: Vec<(String, String)>,
    },
}

fn list(ops: &[(String, String)]) -> String {
    let mut parts: Vec<String> = ops
        .iter()
        .take(10)
        .map(|(op, node)| format!("'{op}' (node '{node}')"))
        .collect();
    if ops.len() > 10 {
        parts.push(format!("and {} more", ops.len() - 10));
    }
    parts.join(", ")
}
