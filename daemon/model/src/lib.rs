//! # sluice-model
//!
//! What sluice knows about a DNN model before it runs it:
//!
//! - [`manifest`] (re-exported at the top): model manifests, their kernels and
//!   memory accesses, and the [`ModelRegistry`] that gives every model an id.
//!   The shipped manifests live in `daemon/model/manifests/`.
//! - [`tensors`]: a model's named, typed inputs and outputs ([`ModelIo`]).
//! - [`idempotent`]: REEF's multi-kernel idempotent-group checker, which
//!   finds where a preempted task can restart.
//!
//! This crate depends on no other sluice crate; the device interface, the
//! policies, the builders and the service all read models through it.

pub mod idempotent;
pub mod manifest;
pub mod tensors;

pub use manifest::*;
pub use tensors::{ElemType, ModelIo, TensorSpec};
