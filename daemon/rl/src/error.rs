//! Errors, one enum per operation: building an agent or buffer, acting,
//! pushing a transition, sampling, updating, saving and loading.

use std::path::PathBuf;

/// Building an agent or a replay buffer failed: a dimension or
/// hyperparameter is out of range.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A dimension that must be positive is zero.
    #[error("{what} is 0; it must be at least 1")]
    ZeroDim {
        /// Which dimension (`state_dim`, `n_actions`, ...).
        what: &'static str,
    },
    /// A hidden layer has no units.
    #[error("hidden layer {index} has width 0; give every hidden layer at least one unit")]
    ZeroHidden {
        /// The layer's index in `hidden`.
        index: usize,
    },
    /// A hyperparameter is outside its range.
    #[error("{name} = {value} is out of range; it must be {expected}")]
    Hyper {
        /// The field's name.
        name: &'static str,
        /// The value given.
        value: f64,
        /// The allowed range, in words.
        expected: &'static str,
    },
    /// TD3's softmax head is wider than the action.
    #[error(
        "head softmax = {softmax} is out of range for action_dim = {action_dim}; \
         it must be between 1 and action_dim"
    )]
    Head {
        /// The softmax width given.
        softmax: usize,
        /// The action dimension.
        action_dim: usize,
    },
    /// candle failed while creating the parameters.
    #[error("creating the network parameters failed")]
    Candle(#[source] candle_core::Error),
}

/// Choosing an action (or a policy's probabilities) failed.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// The state has the wrong length.
    #[error("state has {got} entries but the agent was built for state_dim = {expected}")]
    StateLen {
        /// The agent's state dimension.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A state entry is NaN or infinite.
    #[error("state[{index}] = {value} is not finite; normalise the state before acting")]
    NonFiniteState {
        /// The entry's index.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// The mask has the wrong length.
    #[error("mask has {got} entries but the agent expects {expected}")]
    MaskLen {
        /// The expected length (actions for SAC-Discrete, softmax outputs for TD3).
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A mask was given to a TD3 agent whose head has no softmax part.
    #[error(
        "a mask was given but the actor's head is Sigmoid, which has no shares to mask; pass None"
    )]
    MaskWithoutSoftmax,
    /// Every action (or share) is masked.
    #[error("all {len} entries of the mask are false; at least one action must be allowed")]
    AllMasked {
        /// The mask's length.
        len: usize,
    },
    /// The network produced NaN or infinity (training diverged).
    #[error("the actor's output is not finite (training diverged?); reload a checkpoint")]
    NonFiniteOutput,
    /// A tensor operation failed.
    #[error("a tensor operation failed while acting")]
    Candle(#[source] candle_core::Error),
}

/// Pushing a transition into a replay buffer failed; the buffer is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// `state` or `next_state` has the wrong length.
    #[error("{field} has {got} entries but the buffer holds states of {expected}")]
    StateLen {
        /// `state` or `next_state`.
        field: &'static str,
        /// The buffer's state dimension.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A value is NaN or infinite.
    #[error("{field}[{index}] = {value} is not finite; every stored value must be finite")]
    NonFinite {
        /// `state`, `next_state`, `action` or `reward`.
        field: &'static str,
        /// The entry's index (0 for the reward).
        index: usize,
        /// The value.
        value: f32,
    },
    /// A discrete action was pushed into a continuous buffer, or the reverse.
    #[error("the action is {got} but the buffer holds {expected} actions")]
    ActionKind {
        /// The buffer's action kind.
        expected: &'static str,
        /// The action's kind.
        got: &'static str,
    },
    /// A discrete action index is out of range.
    #[error("action index {index} is out of range for {n} actions; it must be below {n}")]
    ActionIndex {
        /// The index given.
        index: usize,
        /// The number of actions.
        n: usize,
    },
    /// A continuous action has the wrong length.
    #[error("action has {got} entries but the buffer holds actions of {expected}")]
    ActionLen {
        /// The buffer's action dimension.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A mask has the wrong length.
    #[error("{field} has {got} entries but the buffer holds masks of {expected}")]
    MaskLen {
        /// `mask` or `next_mask`.
        field: &'static str,
        /// The buffer's mask length.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A mask was given to a buffer built without masks.
    #[error(
        "{field} was given but the buffer was built with mask_len = None; build it with a mask length"
    )]
    MaskUnexpected {
        /// `mask` or `next_mask`.
        field: &'static str,
    },
    /// The state's mask allows nothing.
    #[error("mask allows no action in the state; an agent cannot act there, so do not store it")]
    StateAllMasked,
    /// The next state's mask allows nothing, but the transition is not terminal.
    #[error(
        "next_mask allows no action but done is false; mark the transition done (no action can follow)"
    )]
    NextAllMaskedNotDone,
}

/// Sampling a mini-batch failed.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// The buffer holds no transitions.
    #[error("the replay buffer is empty; push transitions before sampling")]
    Empty,
    /// A batch of size 0 was asked for.
    #[error("batch size is 0; ask for at least one transition")]
    ZeroBatch,
    /// Building the batch tensors failed.
    #[error("stacking the batch into tensors failed")]
    Candle(#[source] candle_core::Error),
}

/// An update step failed. When the loss is not finite the step is skipped,
/// so the weights are unchanged.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// A batch tensor has the wrong shape.
    #[error("batch {what} has shape {got:?} but the agent expects {expected:?}")]
    Shape {
        /// Which tensor.
        what: &'static str,
        /// The expected shape.
        expected: Vec<usize>,
        /// The shape given.
        got: Vec<usize>,
    },
    /// The batch has masks but the agent takes none.
    #[error(
        "batch {what} are present but the agent's actor takes no mask; build the buffer with mask_len = None"
    )]
    UnexpectedMasks {
        /// `masks` or `next_masks`.
        what: &'static str,
    },
    /// A batch tensor is not `f32`.
    #[error("batch {what} has dtype {got}; the agents train on f32")]
    DType {
        /// Which tensor.
        what: &'static str,
        /// The dtype given.
        got: String,
    },
    /// A loss is NaN or infinite; the step was not applied.
    #[error(
        "the {which} loss is {value}; the step was skipped (lower the learning rate or scale the rewards)"
    )]
    NonFiniteLoss {
        /// `critic`, `actor` or `temperature`.
        which: &'static str,
        /// The loss value.
        value: f32,
    },
    /// A tensor operation failed.
    #[error("a tensor operation failed during the update")]
    Candle(#[source] candle_core::Error),
}

/// Saving a checkpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// A file or directory could not be written.
    #[error("cannot write {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Serialising the sidecar failed.
    #[error("cannot serialise the checkpoint sidecar")]
    Json(#[source] serde_json::Error),
    /// Writing the weights failed.
    #[error("cannot write the weights to {path}")]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: candle_core::Error,
    },
}

/// Loading a checkpoint failed; nothing was loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read.
    #[error("cannot read {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The sidecar is not valid JSON for this format.
    #[error(
        "{path} is not a valid sluice-rl sidecar (corrupt or from another tool); save the agent again"
    )]
    Json {
        /// The sidecar's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The sidecar's format string is not one this build reads.
    #[error(
        "{path} has format {found:?} but this build reads {expected:?}; save the agent again with this build"
    )]
    Format {
        /// The sidecar's path.
        path: PathBuf,
        /// The format string found.
        found: String,
        /// The format string this build reads.
        expected: &'static str,
    },
    /// The checkpoint holds another kind of agent.
    #[error("{path} holds a {found:?} agent but a {expected:?} agent was asked for")]
    Kind {
        /// The sidecar's path.
        path: PathBuf,
        /// The kind found.
        found: String,
        /// The kind asked for.
        expected: &'static str,
    },
    /// A dimension differs from what the caller expects.
    #[error(
        "{path} has {what} = {found} but the caller expects {what} = {expected}; \
         load a checkpoint trained for this layout or train a new agent"
    )]
    Dim {
        /// The sidecar's path.
        path: PathBuf,
        /// `state_dim` or `action_dim`.
        what: &'static str,
        /// The value in the checkpoint.
        found: usize,
        /// The value the caller expects.
        expected: usize,
    },
    /// TD3's output head differs from what the caller expects.
    #[error("{path} has head {found} but the caller expects head {expected}")]
    Head {
        /// The sidecar's path.
        path: PathBuf,
        /// The head in the checkpoint.
        found: String,
        /// The head the caller expects.
        expected: String,
    },
    /// The sidecar's configuration is invalid.
    #[error("{path} describes an agent that cannot be built")]
    Config {
        /// The sidecar's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: BuildError,
    },
    /// A field of the sidecar has a bad value.
    #[error("{path}: field {field} = {value:?} is invalid ({why})")]
    Field {
        /// The sidecar's path.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The weights file cannot be read as safetensors.
    #[error("cannot read the weights {path} as safetensors (corrupt or truncated?)")]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: candle_core::Error,
    },
    /// A tensor the agent needs is missing from the weights file.
    #[error("{path} lacks tensor {name:?}; the file does not belong to this sidecar")]
    MissingTensor {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
    },
    /// The weights file has a tensor the agent does not.
    #[error("{path} has an unexpected tensor {name:?}; the file does not belong to this sidecar")]
    ExtraTensor {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
    },
    /// A tensor has the wrong shape or dtype.
    #[error("{path}: tensor {name:?} is {found} but the agent needs {expected}")]
    TensorShape {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// Shape and dtype found.
        found: String,
        /// Shape and dtype needed.
        expected: String,
    },
    /// The loaded weights' digest differs from the one the sidecar recorded.
    #[error(
        "weights digest {found:#018x} differs from {expected:#018x} recorded in the sidecar; \
         the weights file was changed or belongs to another save"
    )]
    Digest {
        /// The digest recorded at save time.
        expected: u64,
        /// The digest of the loaded weights.
        found: u64,
    },
    /// A tensor operation failed.
    #[error("a tensor operation failed while loading")]
    Candle(#[source] candle_core::Error),
}
