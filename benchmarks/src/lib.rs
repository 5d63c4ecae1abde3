//! # sluice-bench
//!
//! sluice's benchmarks, paper reproductions and demo, as library code the
//! `sluice` command runs (`sluice demo`, `sluice bench <name>`, `sluice
//! train inss`). One module per `sluice bench` subcommand:
//!
//! - [`ipc`]: the request path's round trip against a Unix socket, and the
//!   cross-process floor it is compared with ([`ipc_floor`], which the
//!   benchmark's client processes also run);
//! - [`disb`], [`preempt`], [`hol`], [`paella`]: the scheduling benchmarks
//!   (REEF's DISB, REEF Fig. 19 preemption latency, Paella's head-of-line
//!   blocking, Paella's §7 evaluation) on the GPU model, and
//!   [`preempt::device`] for the preemption benchmark on a real device;
//! - [`padding`]: REEF §6.5's one-to-one padding matrix on the GPU model;
//! - [`interference`]: gpulet's interference study (§3.4, §4.4) on the GPU
//!   model's partitions;
//! - [`cluster`]: the multi-GPU planners' SLO-preserved max throughput
//!   (gpulet §5.2) on scenario files ([`cluster::scenario`]), served by a
//!   request-level simulator ([`cluster::sim`]) with latencies from the GPU
//!   model, and gpulet's Fig. 15 rate trace re-planned every period
//!   ([`cluster::trace`], `sluice bench trace`);
//! - [`gpulet`]: gpulet's planner-level figures (Fig. 5/16, 17, 6):
//!   schedulable scenarios and max schedulable rates, no serving;
//! - [`split`]: SPLIT's evaluation (ICPP'23 §5: Table 3, Fig. 6 and 7) on
//!   a Jetson-Nano-like GPU model, the splitter given by the caller;
//! - [`inss`]: InSS's experiments (§6) and the training of its agents
//!   ([`inss::cmd`]), its latency model against the GPU model
//!   ([`inss::model`]) and the bursty-trace re-planning ([`inss::trace`]);
//! - [`sim`]: what the GPU model itself costs to run, per simulated
//!   second, as clients grow;
//! - [`demo`]: a real-time client beside best-effort clients on an
//!   embedded daemon, per scheduler (`sluice demo`);
//! - [`served`]: a workload run in real time through one of the daemon's
//!   device backends (the CUDA server with the ONNX models' real layers);
//! - [`roles`]: the client processes the benchmarks and the demo start
//!   (the `sluice` binary's hidden `__client` and `__bench-client`);
//! - [`runs`]: independent runs spread over worker threads, with progress;
//! - [`plot`]: the figures the benchmarks draw (plotters, SVG);
//! - [`text_table`]: the text tables they print (comfy-table).
//!
//! Every scheduling figure here comes from the GPU model unless a module
//! says it runs on a device. This crate sits above `sluice-service` (the
//! demo and the IPC benchmark embed a daemon); no library of the workspace
//! imports it, and it never imports the CLI (`sluice-cli`).

pub mod cluster;
pub mod demo;
pub mod disb;
pub mod gpulet;
pub mod hol;
pub mod inss;
pub mod interference;
pub mod ipc;
pub mod ipc_floor;
pub mod padding;
pub mod paella;
pub mod plot;
pub mod preempt;
pub mod roles;
pub mod runs;
pub mod served;
pub mod sim;
pub mod split;
pub mod text_table;

use std::path::PathBuf;

use sluice_service::config::Config;

pub use sluice_service::error_chain;

/// A model a benchmark needs that it cannot use: the error the benchmarks
/// that look their models up in a registry and time them alone on the GPU
/// model share (each wraps it in its own error as `Model`).
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The model is not in the registry.
    #[error("model `{0}` is not in the registry; docs/models.md lists the built-in ones")]
    Missing(String),
    /// The model cannot run alone on the device profile.
    #[error("model `{model}` cannot run alone on the {device} profile")]
    Standalone {
        /// The model.
        model: String,
        /// The device profile.
        device: String,
        /// Why.
        #[source]
        source: sluice_gpu::OpError,
    },
}

/// A private temporary directory for an embedded daemon's socket.
pub fn temp_socket(tag: &str) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("sluice-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir.join("sluiced.sock"))
}

/// The configuration of an embedded (unprivileged) daemon.
pub fn embedded_config(socket: PathBuf, idle_spin_us: u32) -> Config {
    let mut c = Config::default();
    c.daemon.socket = socket;
    c.daemon.realtime_priority = 0;
    c.daemon.lock_memory = false;
    c.daemon.dispatcher_core = None;
    c.daemon.idle_spin_us = idle_spin_us;
    c
}
