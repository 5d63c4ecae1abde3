//! The vocabulary the latency model, the scheduler and the baselines share.

/// A model running beside another on the same GPU (its own partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoRunner {
    /// Index of its model in the [`ExecModel`].
    pub model: usize,
    /// Its batch size.
    pub batch: u32,
    /// SMs of its partition.
    pub sms: u32,
}

/// GPU execution latency of a batch, and what the planners need besides:
/// InSS §4.1's `t_inf = t_d + t_c + t_r` per model, batch, partition and
/// co-runners, on one GPU type. The latency model ([`crate::latency`])
/// predicts it; a measured table can stand behind it too.
pub trait ExecModel {
    /// SMs of one GPU (`C_k`).
    fn gpu_sms(&self) -> u32;
    /// Memory of one GPU, MB (`M_k`).
    fn gpu_mem_mb(&self) -> f64;
    /// How many models it knows.
    fn model_count(&self) -> usize;
    /// Name of model `model` (its manifest).
    fn model_name(&self, model: usize) -> &str;
    /// `t_inf` in ms: a batch of `batch` of `model` on `sms` SMs while
    /// `others` run in the other partitions of the same GPU.
    fn exec_ms(&self, model: usize, batch: u32, sms: u32, others: &[CoRunner]) -> f64;
    /// `m_i(b)`: memory of `model` served at batch `batch`, MB.
    fn mem_mb(&self, model: usize, batch: u32) -> f64;
    /// `(l, e)`: the L2 and DRAM utilisation (fractions of 1) of `model` at
    /// `batch` on `sms` SMs running alone, as InSS §4.1 predicts them from
    /// its throughput; the state features `L_{i,k}`, `E_{i,k}` of §5.1.
    fn util(&self, model: usize, batch: u32, sms: u32) -> (f64, f64);
}

/// SMs an MPS share of `pct` % gets on a GPU of `gpu_sms` SMs: rounded
/// down, at least one for a non-zero share (InSS §2.4: "rounding down the
/// allocation of actual SMs based on the percentage set by MPS").
pub fn sms_of_pct(pct: u32, gpu_sms: u32) -> u32 {
    if pct == 0 {
        return 0;
    }
    ((u64::from(pct.min(100)) * u64::from(gpu_sms) / 100) as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mps_shares_round_down() {
        assert_eq!(sms_of_pct(10, 108), 10);
        assert_eq!(sms_of_pct(50, 108), 54);
        assert_eq!(sms_of_pct(100, 108), 108);
        assert_eq!(sms_of_pct(1, 60), 1);
        assert_eq!(sms_of_pct(0, 108), 0);
    }
}
