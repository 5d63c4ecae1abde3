//! # sluice-service
//!
//! `sluiced`, the privileged side of sluice, as a library (so that tests
//! and the `sluice` command's embedded daemon drive it directly) and the
//! `sluiced` binary on top.
//!
//! - [`config`]: the TOML configuration and its validation.
//! - [`startup`]: from a configuration to a running daemon: tracing, the
//!   model registry, the device backend.
//! - [`backend`]: the backends that need no GPU: the FIFO simulated device
//!   and a policy on the GPU model in real time (the CUDA one is
//!   `sluice-cuda`).
//! - [`sys`]: CPU pinning, `SCHED_FIFO`, `mlockall`, systemd notification.
//! - [`region`]: a client's sealed shared-memory region, daemon side.
//! - [`dispatch`]: the dispatcher thread (rings → backend → completions);
//!   its clients live in a slot table (`slots`).
//! - [`server`]: the control socket and the [`Daemon`] handle.
//! - [`metrics`]: what the dispatcher records for the metrics endpoint
//!   (`[metrics] listen`, served by a thread of its own in [`server`]).
//! - [`kill_capability`]: which kill mechanism the patched drivers offer.
pub mod backend;
pub mod config;
pub mod dispatch;
pub mod kill_capability;
pub mod metrics;
pub mod region;
pub mod repo;
pub mod server;
mod slots;
pub mod startup;
pub mod sys;
#[cfg(any(test, feature = "test-util"))]
pub mod test_models;

pub use server::{Daemon, LatencyStatus, MissedStatus, StartError, Status};

/// An error and every `source` below it, one per clause after a colon (a
/// source whose message already ends the text is not repeated): how the
/// daemon, the `sluice` command and the benchmarks print an error.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let clause = c.to_string();
        if !msg.ends_with(&clause) {
            msg += &format!(": {clause}");
        }
        src = c.source();
    }
    msg
}
