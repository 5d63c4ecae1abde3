//! # sluice-daemon
//!
//! The privileged side of sluice as a library, so that tests and benchmarks
//! drive it directly, and the `sluiced` / `sluice` binaries on top.
//!
//! - [`config`]: the TOML configuration and its validation.
//! - [`model`]: model manifests and the registry.
//! - [`device`]: the `Device` trait and the embedded simulated GPU.
//! - [`sys`]: CPU pinning, `SCHED_FIFO`, `mlockall`, systemd notification.
//! - [`region`]: a client's sealed shared-memory region, daemon side.
//! - [`dispatch`]: the dispatcher thread (rings → device → completions).
//! - [`server`]: the control socket and the [`Daemon`] handle.
//! - [`gpu`]: discrete-event GPU execution model with REEF's preemption
//!   mechanisms (step 2 groundwork; not yet driving the daemon).
//! - [`idempotent`]: REEF's multi-kernel idempotent-group checker.
pub mod config;
pub mod device;
pub mod dispatch;
pub mod gpu;
pub mod idempotent;
pub mod killcap;
pub mod model;
pub mod nn;
pub mod region;
pub mod runtime;
pub mod sched;
pub mod server;
pub mod sys;
pub mod tools;

pub use server::{Daemon, StartError, Status};
