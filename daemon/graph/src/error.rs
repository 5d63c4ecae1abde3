//! Errors of the graph, its shape inference and the CPU executor.

use crate::DType;

/// A shape or value that an operator cannot take, without the node's name
/// (the caller adds it: see [`GraphError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(pub String);

impl ShapeError {
    /// An error with this message.
    pub fn new(msg: impl Into<String>) -> ShapeError {
        ShapeError(msg.into())
    }
}

/// Shorthand for a [`ShapeError`] with a formatted message.
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::error::ShapeError::new(format!($($arg)*))) };
}
pub(crate) use bail;

/// An error about a graph, naming the node or tensor it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// A node cannot take its inputs.
    #[error("node '{node}' ({op}): {msg}")]
    Node {
        /// The node's name.
        node: String,
        /// Its operator.
        op: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// Nodes depend on each other in a cycle.
    #[error("the graph has a cycle through node(s) {0}: a model must be acyclic")]
    Cycle(String),
    /// A node reads a tensor that nothing produces.
    #[error(
        "node '{node}' reads tensor '{tensor}', which no node, initializer or graph input provides"
    )]
    Undefined {
        /// The reader.
        node: String,
        /// The missing tensor.
        tensor: String,
    },
    /// Two producers write one tensor.
    #[error(
        "tensor '{0}' is written twice (by two nodes, or a node and an initializer/input); each tensor must have one producer"
    )]
    TwoWriters(String),
    /// A graph output has no producer.
    #[error("graph output '{0}' is not produced by any node, initializer or input")]
    MissingOutput(String),
    /// A graph input was not given to a run.
    #[error("input '{name}' was not given; the model's inputs are: {expected}")]
    MissingInput {
        /// The input.
        name: String,
        /// All inputs, comma-separated.
        expected: String,
    },
    /// An input was given that the model does not have.
    #[error("the model has no input '{name}'; its inputs are: {expected}")]
    UnknownInput {
        /// The given name.
        name: String,
        /// All inputs, comma-separated.
        expected: String,
    },
    /// A given input has the wrong element type.
    #[error("input '{name}' must be {expected}, got {got}")]
    InputType {
        /// The input.
        name: String,
        /// The type the model declares.
        expected: DType,
        /// The type given.
        got: DType,
    },
    /// A given input has the wrong shape.
    #[error("input '{name}' must have shape {expected}, got {got:?}")]
    InputShape {
        /// The input.
        name: String,
        /// The declared shape, with the batch dimension as `N`.
        expected: String,
        /// The shape given.
        got: Vec<usize>,
    },
    /// The batch size is not one the model takes.
    #[error("batch {batch} is not possible: {why}")]
    Batch {
        /// The batch asked for.
        batch: usize,
        /// Why not.
        why: String,
    },
    /// A tensor would exceed the size limit.
    #[error(
        "node '{node}' ({op}) would make a tensor '{tensor}' of {bytes} bytes, over the limit of {limit} bytes (Limits::max_tensor_bytes); the model or its batch is too large"
    )]
    TooLarge {
        /// The node.
        node: String,
        /// Its operator.
        op: &'static str,
        /// The tensor.
        tensor: String,
        /// Its size.
        bytes: u128,
        /// The limit.
        limit: u64,
    },
}
