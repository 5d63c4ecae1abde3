//! # sluice-rl
//!
//! Reinforcement-learning agents for sluice's learned planners (InSS).
