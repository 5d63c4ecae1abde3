//! # sluice-inss
//!
//! InSS (Han et al., "InSS: An Intelligent Scheduling Orchestrator for
//! Multi-GPU Inference with Spatio-Temporal Sharing";
//! `../shared/papers/inss-multi-gpu-spatio-temporal.txt`) on sluice:
//!
//! - [`types`]: what the latency model, the scheduler and the baselines
//!   share ([`ExecModel`], [`CoRunner`]);
//! - [`workload`]: instances, and a [`Decision`] of GPU, share and batch
//!   per instance, with InSS's fragment measure;
//! - [`env`]: the MDP (§3.3, §5) the agents are trained in, on the latency
//!   model, with Eq. 3 and Eq. 2;
//! - [`features`]: the agents' observations and actions (§5.1, §5.2);
//! - [`latency`]: the interference-aware latency model (§4): PCIe lines,
//!   locally weighted regression of the compute time, utilisation lines,
//!   interference coefficients, Eq. 3;
//! - [`ts`]: the two-stage scheduler (§5, Algorithm 1): training,
//!   deciding, checkpoints;
//! - [`baselines`]: GSLICE and iGniter as InSS describes them, and
//!   gpulet's inputs;
//! - [`planner`]: trained agents as a `sluice_planner::Planner`, for the
//!   daemon's `cluster.planner = "inss"`;
//! - [`resize`]: sluice's local stage for the agents' placement (beyond
//!   the paper): shares and batches re-sized on the latency model.

pub mod baselines;
pub mod env;
pub mod features;
pub mod latency;
pub mod planner;
pub mod resize;
#[cfg(test)]
mod testutil;
pub mod ts;
pub mod types;
pub mod workload;

pub use env::{Env, EnvConfig, StepOutcome};
pub use latency::{LatencyModel, task_latency_ms};
pub use types::{CoRunner, ExecModel, sms_of_pct};
pub use workload::{Decision, Instance, Slot};
