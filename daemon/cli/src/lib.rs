//! # sluice-cli
//!
//! The `sluice` command's subcommands as library code:
//!
//! - [`demo`]: a real-time client beside best-effort clients on an embedded
//!   daemon, per scheduler;
//! - [`bench_ipc`]: the request path's round trip against a Unix socket;
//! - [`disb`], [`bench_preempt`], [`bench_hol`], [`bench_paella`]: the
//!   scheduling benchmarks (REEF's DISB, REEF Fig. 19 preemption latency,
//!   Paella's head-of-line blocking, Paella's §7 evaluation) on the GPU
//!   model, and [`bench_preempt_device`] for the preemption benchmark on a
//!   real device;
//! - [`bench_padding`]: REEF §6.5's one-to-one padding matrix on the GPU
//!   model;
//! - [`bench_interference`]: gpulet's interference study (§3.4, §4.4) on
//!   the GPU model's partitions;
//! - [`bench_cluster`]: the multi-GPU planners' SLO-preserved max
//!   throughput (gpulet §5.2) on scenario files
//!   ([`bench_cluster_scenario`]), served by a request-level simulator
//!   ([`bench_cluster_sim`]) with latencies from the GPU model;
//! - [`bench_gpulet`]: gpulet's planner-level figures (Fig. 5/16, 17, 6):
//!   schedulable scenarios and max schedulable rates, no serving;
//! - [`bench_split`]: SPLIT's evaluation (ICPP'23 §5: Table 3, Fig. 6
//!   and 7) on a Jetson-Nano-like GPU model, the splitter given by the
//!   caller;
//! - [`bench_sim`]: what the GPU model itself costs to run, per simulated
//!   second, as clients grow;
//! - [`cuda_models`]: `sluice check|profile --device cuda` (the models' real
//!   layers against the CPU reference; measured manifests);
//! - [`profile_sim`]: `sluice profile --device <profile>`, a model's
//!   latency per batch and partition size on the GPU model;
//! - [`split_cmd`]: `sluice split MODEL`, SPLIT's evenly sized blocks
//!   (the GA and the exhaustive optimum of `sluice-split`);
//! - [`roles`]: the client processes the benchmarks and the demo start;
//! - [`status`]: `sluice status`, every page of the daemon's status;
//! - [`svg`]: the plots the benchmarks draw.
//!
//! A library of the workspace never imports this crate; the service
//! (`sluice-service`) is below it.

pub mod bench_cluster;
pub mod bench_cluster_scenario;
pub mod bench_cluster_sim;
pub mod bench_cluster_trace;
pub mod bench_gpulet;
pub mod bench_hol;
pub mod bench_inss;
pub mod bench_inss_cmd;
pub mod bench_inss_trace;
pub mod bench_interference;
pub mod bench_ipc;
pub mod bench_padding;
pub mod bench_paella;
pub mod bench_preempt;
pub mod bench_preempt_device;
pub mod bench_sim;
pub mod bench_split;
pub mod cuda_models;
pub mod demo;
pub mod disb;
pub mod gpulet_data;
pub mod inss_model;
pub mod ipc_floor;
pub mod model_cmd;
pub mod profile_sim;
pub mod roles;
pub mod runs;
pub mod split_cmd;
pub mod status;
pub mod svg;

use std::path::PathBuf;

use sluice_service::config::Config;

/// An error and every `source` below it, one per clause (a source whose
/// message already ends the text is not repeated).
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
