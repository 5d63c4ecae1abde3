//! Arrival rate over a sliding window: a ring of per-bucket counts.

/// Buckets per window.
const BUCKETS: usize = 20;

/// Requests per second over the last window, updated in O(1) per arrival.
#[derive(Debug, Clone)]
pub(super) struct RateMonitor {
    bucket_ns: u64,
    counts: [u32; BUCKETS],
    /// Absolute index (`t / bucket_ns`) of the newest bucket.
    newest: u64,
    total: u64,
    /// When monitoring began; before one window has passed the rate is
    /// over the time since then.
    since: u64,
}

impl RateMonitor {
    pub(super) fn new(window_ns: u64, now: u64) -> Self {
        let bucket_ns = (window_ns / BUCKETS as u64).max(1);
        Self {
            bucket_ns,
            counts: [0; BUCKETS],
            newest: now / bucket_ns,
            total: 0,
            since: now,
        }
    }

    fn roll(&mut self, now: u64) {
        let b = now / self.bucket_ns;
        if b <= self.newest {
            return;
        }
        let gap = (b - self.newest).min(BUCKETS as u64);
        for i in 1..=gap {
            let slot = ((self.newest + i) % BUCKETS as u64) as usize;
            self.total -= u64::from(self.counts[slot]);
            self.counts[slot] = 0;
        }
        self.newest = b;
    }

    /// Counts one arrival at `now`.
    pub(super) fn record(&mut self, now: u64) {
        self.roll(now);
        let slot = (self.newest % BUCKETS as u64) as usize;
        self.counts[slot] = self.counts[slot].saturating_add(1);
        self.total += 1;
    }

    /// Arrivals per second over the window ending at `now`.
    pub(super) fn rate(&mut self, now: u64) -> f64 {
        self.roll(now);
        let window = self.bucket_ns * BUCKETS as u64;
        // The newest bucket is partly elapsed: count the full buckets
        // behind it plus the elapsed part of it.
        let elapsed_in_newest = now - self.newest * self.bucket_ns;
        let span = (window - self.bucket_ns + elapsed_in_newest)
            .min(now.saturating_sub(self.since))
            .max(self.bucket_ns);
        self.total as f64 * 1e9 / span as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_steady_rate_is_measured_and_forgotten_after_the_window() {
        let mut m = RateMonitor::new(1000 * MS, 0);
        // 200 requests/s for 3 s.
        for i in 0..600u64 {
            m.record(i * 5 * MS);
        }
        let r = m.rate(3000 * MS);
        assert!((r - 200.0).abs() < 12.0, "{r}");
        // A second later with nothing arriving, nothing is left.
        assert_eq!(m.rate(4100 * MS), 0.0);
    }

    #[test]
    fn a_young_monitor_rates_over_the_time_it_has_seen() {
        let mut m = RateMonitor::new(1000 * MS, 0);
        for i in 0..10u64 {
            m.record(i * 10 * MS);
        }
        // 10 requests in 100 ms: 100 requests/s, not 10.
        let r = m.rate(100 * MS);
        assert!((r - 100.0).abs() < 1.0, "{r}");
    }
}
