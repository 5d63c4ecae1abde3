//! # sluice-inss
//!
//! InSS (Han et al., "InSS: An Intelligent Scheduling Orchestrator for
//! Multi-GPU Inference with Spatio-Temporal Sharing";
//! `../shared/papers/inss-multi-gpu-spatio-temporal.txt`) on sluice:
//!
//! - [`types`]: what the latency model, the scheduler and the baselines
//!   share ([`ExecModel`], [`CoRunner`]).

pub mod latency;
pub mod types;

pub use latency::{LatencyModel, task_latency_ms};
pub use types::{CoRunner, ExecModel, sms_of_pct};
