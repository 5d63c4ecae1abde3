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

use crate::config::Config;

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

/// Percentiles of a latency sample, in the unit recorded.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Minimum.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Maximum.
    pub max: u64,
}

impl Summary {
    /// Summarises a histogram.
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            mean: h.mean(),
            min: h.min(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// The value at quantile `q` of sorted `v` (nearest rank; 0 for none).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// A histogram for nanosecond latencies from 1 ns to 100 s, 3 significant
/// digits.
pub fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .unwrap_or_else(|_| hdrhistogram::Histogram::new(3).expect("3 sigfig is valid"))
}
