//! The unit tests' stand-in for a latency model.

use crate::types::{CoRunner, ExecModel};

/// A GPU of 100 SMs whose model `m` runs a batch of `b` on `sms` SMs in
/// `(batch_ms + b × k[m]) × 100 / sms` ms, `per_corunner` slower per
/// co-runner.
#[derive(Debug, Clone, PartialEq)]
pub struct Toy {
    /// Model names.
    pub names: Vec<&'static str>,
    /// Per model: ms per request on the whole GPU.
    pub k: Vec<f64>,
    /// Fixed ms per batch on the whole GPU, every model (0: batching
    /// gains nothing).
    pub batch_ms: f64,
    /// Slowdown per co-runner (0.1: 10 %).
    pub per_corunner: f64,
    /// `m(b) = mem_mb + mem_per_batch_mb × b`.
    pub mem_mb: f64,
    /// See `mem_mb`.
    pub mem_per_batch_mb: f64,
    /// One GPU's memory.
    pub gpu_mem_mb: f64,
    /// Per model: DRAM utilisation.
    pub dram: Vec<f64>,
}

impl Toy {
    /// One model `toy`, 1 ms per request on the whole GPU, no
    /// interference, memory that never binds.
    pub fn one() -> Self {
        Self {
            names: vec!["toy"],
            k: vec![1.0],
            batch_ms: 0.0,
            per_corunner: 0.0,
            mem_mb: 1.0,
            mem_per_batch_mb: 0.0,
            gpu_mem_mb: 1e6,
            dram: vec![0.0],
        }
    }
}

impl ExecModel for Toy {
    fn gpu_sms(&self) -> u32 {
        100
    }
    fn gpu_mem_mb(&self) -> f64 {
        self.gpu_mem_mb
    }
    fn model_count(&self) -> usize {
        self.names.len()
    }
    fn model_name(&self, m: usize) -> &str {
        self.names[m]
    }
    fn exec_ms(&self, m: usize, b: u32, sms: u32, o: &[CoRunner]) -> f64 {
        (self.batch_ms + f64::from(b) * self.k[m]) * 100.0 / f64::from(sms.max(1))
            * (1.0 + self.per_corunner * o.len() as f64)
    }
    fn mem_mb(&self, _: usize, b: u32) -> f64 {
        self.mem_mb + self.mem_per_batch_mb * f64::from(b)
    }
    fn util(&self, m: usize, _: u32, _: u32) -> (f64, f64) {
        (0.0, self.dram[m])
    }
}
