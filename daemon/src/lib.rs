//! # sluice-daemon
//!
//! The privileged side of sluice as a library, so that tests and benchmarks
//! drive it directly, and the `sluiced` / `sluice` binaries on top.
//!
//! - [`config`]: the TOML configuration and its validation.
//! - [`model`]: model manifests and the registry.
//! - [`device`]: the `Device` trait and the embedded simulated GPU.
//! - [`sys`]: CPU pinning, `SCHED_FIFO`, `mlockall`, systemd notification.
pub mod config;
pub mod device;
pub mod model;
pub mod sys;
