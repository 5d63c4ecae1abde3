//! # sluice-cli
//!
//! The `sluice` command's subcommands as library code: the demo, the IPC
//! benchmark, the scheduling benchmarks on the simulated GPU (DISB,
//! preemption), and the client roles they run as separate processes.

pub mod bench_hol;
pub mod bench_ipc;
pub mod bench_preempt;
pub mod bench_preempt_device;
pub mod cuda_models;
pub mod demo;
pub mod disb;
pub mod roles;
pub mod svg;

use std::path::PathBuf;

use sluice_service::config::Config;

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
