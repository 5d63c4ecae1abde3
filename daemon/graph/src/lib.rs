//! The one model graph every sluice backend reads.
//!
//! A user's model enters through the ONNX importer (`sluice-onnx`) and
//! becomes a [`Graph`]: typed tensors ([`Tensor`], [`DType`]), operators
//! in one canonical form ([`Op`]), inputs whose first dimension may be the
//! batch ([`Dim::Batch`]), and nodes in topological order. At load the graph
//! is checked and rewritten ([`passes`]: constant folding, batch-norm
//! folding, activation fusion); [`Graph::specialize`] fixes a batch size,
//! infers every shape and folds the batch-dependent shape arithmetic; the
//! result, [`Static`], runs on the CPU ([`Static::run`]), the correctness
//! oracle of the other backends.
//!
//! Layout: row-major (NCHW for images), as ONNX.

mod dtype;
mod error;
mod exec;
mod graph;
pub mod npy;
pub mod op;
pub mod passes;
pub mod shape;
mod specialize;
mod tensor;

pub use dtype::DType;
pub use error::{GraphError, ShapeError};
pub use exec::eval;
pub use graph::{Dim, Graph, GraphBuilder, Input, Limits, Node, Output, ValueId, fmt_dims};
pub use op::{
    Act, Aspect, AutoPad, BinOp, CoordMode, NearestMode, Op, PadMode, PoolKind, ResizeMode, Unary,
    Window,
};
pub use specialize::Static;
pub use tensor::{Data, Tensor, numel};
