//! The TD3 actor's output head, shared by the agent and its checkpoints.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The actor's output activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Head {
    /// A sigmoid on every output: each in `[0, 1]` independently.
    Sigmoid,
    /// A softmax over the first `softmax` outputs, so they sum to 1 (InSS's
    /// resource shares), and a sigmoid on the remaining ones (batch sizes).
    SoftmaxThenSigmoid {
        /// How many leading outputs the softmax covers (1 ≤ softmax ≤
        /// action_dim).
        softmax: usize,
    },
}

impl Head {
    /// The width of the softmax part (0 for [`Head::Sigmoid`]).
    pub fn softmax_len(self) -> usize {
        match self {
            Head::Sigmoid => 0,
            Head::SoftmaxThenSigmoid { softmax } => softmax,
        }
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Head::Sigmoid => write!(f, "sigmoid"),
            Head::SoftmaxThenSigmoid { softmax } => write!(f, "softmax({softmax}) then sigmoid"),
        }
    }
}
