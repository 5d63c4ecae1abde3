//! ONNX import: the one door through which a user's model enters sluice.
//!
//! [`load`] reads an `.onnx` file (opsets 9 to 21; weights inline or as
//! external data in the model's own folder; f32, f16, bf16, i64, i32 and
//! bool tensors), checks it, and returns a [`Model`] holding a
//! [`sluice_graph::Graph`]. Every operator sluice does not run is refused
//! at load, naming the operator, the node, the opset and the file
//! ([`ImportError::Unsupported`]).
//!
//! A model file is hostile input: a truncated or garbled file, a tensor
//! that claims more elements than it holds, a cycle, mismatched shapes, or
//! an external-data path that leaves the model's folder (`..`, an absolute
//! path, a symbolic link out) each give an [`ImportError`] that names the
//! problem; nothing is allocated beyond what the files hold (and what
//! [`sluice_graph::Limits`] allows computed tensors), and no file outside
//! the model's folder is read.

mod error;
mod import;
pub mod proto;
pub mod summary;
mod tensor;
#[cfg(feature = "test-util")]
pub mod test_models;

pub use error::ImportError;
pub use import::{MAX_OPSET, MIN_OPSET, Model, Options, SUPPORTED_OPS, from_bytes, load};
pub use tensor::confine;
