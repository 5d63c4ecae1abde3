//! # sluice-stats
//!
//! Latency statistics shared by the scheduling driver (`sluice-sched`) and
//! the benchmarks of the `sluice` command: an HDR histogram for nanosecond
//! latencies, its percentile [`Summary`], and a nearest-rank [`quantile`]
//! over a sorted sample.

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
