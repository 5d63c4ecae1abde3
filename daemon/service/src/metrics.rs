//! What the dispatcher records for the metrics endpoint: per model and
//! priority class, fixed-bucket histograms of latency, queue wait and batch
//! size, and completions by status; daemon-wide, refusals by status.
//!
//! The dispatcher is the only writer. Every update is a relaxed load and
//! store of an `AtomicU64` (as [`crate::dispatch`]'s counters are): no
//! lock, no allocation, no system call, and no locked read-modify-write.
//! A bucket is found by a binary search over a constant table. The
//! endpoint's thread ([`crate::server`]'s `metrics` module) reads them at
//! scrape time and hands copies to `prometheus-client`'s encoder; it never
//! touches the dispatcher.
//!
//! Why not `prometheus-client`'s own `Histogram`: its `observe` takes a
//! lock (a `RwLock` around the buckets), which the dispatcher must not.
//!
//! A model's block ([`ModelMetrics`]) is allocated when the model first
//! appears in the registry the dispatcher serves (at start-up, or the
//! first pass after a reload), not on the request path. A name keeps its
//! model id across versions, so a model's counters go on across reloads.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use shm_proto::{Priority, status};
use sluice_model::ModelRegistry;

/// Adds `n` to a counter that only the dispatcher thread writes: a relaxed
/// load and store, not a locked read-modify-write.
#[inline(always)]
fn add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// Upper bounds of the latency and queue-wait buckets, ns: 1, 2.5 and 5
/// per decade from 1 µs to 10 s (then `+Inf`).
pub const LATENCY_BOUNDS_NS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Upper bounds of the batch-size buckets: powers of two to 1024 (a
/// model's `max_batch` is at most that; then `+Inf`).
pub const BATCH_BOUNDS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Buckets of a latency histogram, `+Inf` included.
pub const LATENCY_SLOTS: usize = LATENCY_BOUNDS_NS.len() + 1;
/// Buckets of a batch histogram, `+Inf` included.
pub const BATCH_SLOTS: usize = BATCH_BOUNDS.len() + 1;

/// The label value of each status code, indexed by code; codes past the
/// table count as [`OTHER_STATUS`].
pub const STATUS_NAMES: [&str; 15] = [
    "ok",
    "unknown_model",
    "bad_input_span",
    "bad_output_span",
    "bad_input_len",
    "output_too_small",
    "bad_priority",
    "bad_flags",
    "deadline_missed",
    "device_error",
    "shutting_down",
    "bad_batch",
    "bad_tensor_table",
    "bad_tensor_len",
    "model_unloaded",
];
/// The label value of a status code the table does not name.
pub const OTHER_STATUS: &str = "other";
/// Status counters per block: one per named code, one for the rest.
pub const STATUS_SLOTS: usize = STATUS_NAMES.len() + 1;

/// The counter slot of status `code`.
#[inline(always)]
fn status_slot(code: u32) -> usize {
    (code as usize).min(STATUS_NAMES.len())
}

/// The label value of status slot `slot`.
pub fn status_name(slot: usize) -> &'static str {
    STATUS_NAMES.get(slot).copied().unwrap_or(OTHER_STATUS)
}

/// A histogram of fixed buckets (`SLOTS - 1` bounds, then `+Inf`), each
/// bucket's own count (not cumulative), and the sum of what was observed.
#[derive(Debug)]
pub struct Histogram<const SLOTS: usize> {
    counts: [AtomicU64; SLOTS],
    sum: AtomicU64,
}

impl<const SLOTS: usize> Default for Histogram<SLOTS> {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
        }
    }
}

/// A histogram's counts as read at one time, in the recorded unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawHistogram<const SLOTS: usize> {
    /// Observations per bucket (not cumulative), `+Inf` last.
    pub counts: [u64; SLOTS],
    /// Sum of the observations.
    pub sum: u64,
}

/// A histogram as read at one time: `(upper bound, count)` per bucket, not
/// cumulative, the last bound `f64::INFINITY` for `+Inf` (as
/// `prometheus-client`'s encoder takes them), the sum and the count.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound in the exposed unit, observations in the bucket)`.
    pub buckets: Vec<(f64, u64)>,
    /// Sum of the observations, in the exposed unit.
    pub sum: f64,
    /// Observations (the buckets' total).
    pub count: u64,
}

impl<const SLOTS: usize> Histogram<SLOTS> {
    /// Records `v` against `bounds` (`SLOTS - 1` ascending upper bounds).
    /// Dispatcher thread only.
    #[inline(always)]
    pub fn observe(&self, bounds: &[u64], v: u64) {
        debug_assert_eq!(bounds.len() + 1, SLOTS);
        let i = bounds.partition_point(|&b| b < v);
        if let Some(c) = self.counts.get(i) {
            add(c, 1);
        }
        add(&self.sum, v);
    }

    /// The counts and sum now, unscaled (relaxed loads: `sluice status`
    /// reads them as the endpoint does).
    pub fn raw(&self) -> RawHistogram<SLOTS> {
        RawHistogram {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }

    /// The histogram now, bounds and sum divided by `per_unit` (1e9 for ns
    /// to seconds: a division, so `2_500` ns is exactly the `f64` nearest
    /// 2.5e-6). The count is the buckets' total, so the two always
    /// agree; the sum is read separately and may lag by the observation
    /// the dispatcher is making.
    pub fn snapshot(&self, bounds: &[u64], per_unit: f64) -> HistogramSnapshot {
        let mut count = 0;
        let buckets = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let n = c.load(Ordering::Relaxed);
                count += n;
                let upper = bounds
                    .get(i)
                    .map_or(f64::INFINITY, |&b| b as f64 / per_unit);
                (upper, n)
            })
            .collect();
        HistogramSnapshot {
            buckets,
            sum: self.sum.load(Ordering::Relaxed) as f64 / per_unit,
            count,
        }
    }
}

/// One model's figures in one priority class.
#[derive(Debug, Default)]
pub struct ClassMetrics {
    /// Received (taken off the ring) to finished on the device, ns, of the
    /// requests the device completed OK.
    pub latency: Histogram<LATENCY_SLOTS>,
    /// Received to started on the device, ns, of the same requests.
    pub queue_wait: Histogram<LATENCY_SLOTS>,
    /// Batch of each request handed to the device (an untyped request is
    /// batch 1).
    pub batch: Histogram<BATCH_SLOTS>,
    /// Completions the device posted, by status slot ([`status_name`]).
    pub completed: [AtomicU64; STATUS_SLOTS],
}

impl ClassMetrics {
    /// Completions with status `code`.
    pub fn completed(&self, code: u32) -> u64 {
        self.completed[status_slot(code)].load(Ordering::Relaxed)
    }
}

/// One model's figures, by priority class.
#[derive(Debug, Default)]
pub struct ModelMetrics {
    /// `[real-time, best-effort]`.
    pub class: [ClassMetrics; 2],
}

impl ModelMetrics {
    /// The figures of class `p`.
    #[inline(always)]
    pub fn of(&self, p: Priority) -> &ClassMetrics {
        &self.class[p as usize]
    }
}

/// Everything the dispatcher records for the endpoint.
#[derive(Debug, Default)]
pub struct RequestMetrics {
    /// By model id; empty until the model is first served.
    models: Box<[OnceLock<Box<ModelMetrics>>]>,
    /// Requests refused before reaching the device (validation), by
    /// status slot.
    pub refused: [AtomicU64; STATUS_SLOTS],
}

impl RequestMetrics {
    /// Room for model ids `0..models`, no block allocated yet.
    pub fn for_models(models: usize) -> Self {
        Self {
            models: (0..models).map(|_| OnceLock::new()).collect(),
            ..Self::default()
        }
    }

    /// Allocates the block of every model of `registry` that has none
    /// (at start-up and after a reload: not on the request path).
    pub fn ensure(&self, registry: &ModelRegistry) {
        for (id, _) in registry.iter() {
            if let Some(slot) = self.models.get(id as usize) {
                slot.get_or_init(Box::default);
            }
        }
    }

    /// The block of model `id`, if it has one.
    #[inline(always)]
    pub fn model(&self, id: u32) -> Option<&ModelMetrics> {
        self.models.get(id as usize)?.get().map(|b| &**b)
    }

    /// A request of `model` in class `p`, at `batch`, handed to the device.
    #[inline(always)]
    pub fn submitted(&self, model: u32, p: Priority, batch: u32) {
        if let Some(m) = self.model(model) {
            m.of(p).batch.observe(&BATCH_BOUNDS, u64::from(batch));
        }
    }

    /// A request refused with `code` before it reached the device.
    #[inline(always)]
    pub fn refused(&self, code: u32) {
        add(&self.refused[status_slot(code)], 1);
    }

    /// A completion from the device: its status, and for an OK one its
    /// latency and queue wait from the completion's timestamps.
    #[inline(always)]
    pub fn finished(
        &self,
        model: u32,
        p: Priority,
        code: u32,
        received_ns: u64,
        started_ns: u64,
        finished_ns: u64,
    ) {
        let Some(m) = self.model(model) else {
            return;
        };
        let c = m.of(p);
        add(&c.completed[status_slot(code)], 1);
        if code == status::OK {
            c.latency
                .observe(&LATENCY_BOUNDS_NS, finished_ns.saturating_sub(received_ns));
            c.queue_wait
                .observe(&LATENCY_BOUNDS_NS, started_ns.saturating_sub(received_ns));
        }
    }

    /// Refusals with status `code`.
    pub fn refused_count(&self, code: u32) -> u64 {
        self.refused[status_slot(code)].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_cover_every_code() {
        assert_eq!(STATUS_NAMES.len() as u32, status::MODEL_UNLOADED + 1);
        assert_eq!(status_name(status::OK as usize), "ok");
        assert_eq!(
            status_name(status::DEADLINE_MISSED as usize),
            "deadline_missed"
        );
        assert_eq!(
            status_name(status::MODEL_UNLOADED as usize),
            "model_unloaded"
        );
        assert_eq!(status_name(status_slot(9999)), OTHER_STATUS);
    }

    #[test]
    fn a_value_on_a_bound_goes_in_that_bucket_and_large_ones_in_inf() {
        let h = Histogram::<LATENCY_SLOTS>::default();
        for v in [
            0,
            1_000,
            1_001,
            10_000_000_000,
            10_000_000_001,
            u64::MAX / 2,
        ] {
            h.observe(&LATENCY_BOUNDS_NS, v);
        }
        let s = h.snapshot(&LATENCY_BOUNDS_NS, 1e9);
        assert_eq!(s.count, 6);
        assert_eq!(s.buckets.len(), LATENCY_SLOTS);
        assert_eq!(s.buckets[0], (1e-6, 2), "0 and 1 µs");
        assert_eq!(s.buckets[1].1, 1, "1.001 µs");
        assert_eq!(s.buckets[LATENCY_SLOTS - 2].1, 1, "10 s");
        assert_eq!(s.buckets[LATENCY_SLOTS - 1], (f64::INFINITY, 2), "+Inf");
        let b = Histogram::<BATCH_SLOTS>::default();
        b.observe(&BATCH_BOUNDS, 3);
        b.observe(&BATCH_BOUNDS, 4);
        let s = b.snapshot(&BATCH_BOUNDS, 1.0);
        assert_eq!(s.buckets[2], (4.0, 2));
        assert_eq!(s.sum, 7.0);
    }

    #[test]
    fn only_served_models_record_and_ok_completions_time() {
        let reg = ModelRegistry::builtin();
        let (id, _) = reg.lookup("echo_small").unwrap();
        let m = RequestMetrics::for_models(reg.id_bound());
        // No block yet: nothing recorded, nothing panics.
        m.finished(id, Priority::RealTime, status::OK, 0, 10, 20);
        assert!(m.model(id).is_none());
        m.ensure(&reg);
        m.submitted(id, Priority::RealTime, 1);
        m.finished(id, Priority::RealTime, status::OK, 100, 2_100, 5_100);
        m.finished(id, Priority::RealTime, status::DEADLINE_MISSED, 100, 0, 200);
        m.finished(id, Priority::BestEffort, 77, 0, 0, 0);
        m.refused(status::BAD_FLAGS);
        let c = m.model(id).unwrap().of(Priority::RealTime);
        assert_eq!(c.completed(status::OK), 1);
        assert_eq!(c.completed(status::DEADLINE_MISSED), 1);
        let lat = c.latency.snapshot(&LATENCY_BOUNDS_NS, 1.0);
        assert_eq!((lat.count, lat.sum), (1, 5_000.0));
        let wait = c.queue_wait.snapshot(&LATENCY_BOUNDS_NS, 1.0);
        assert_eq!((wait.count, wait.sum), (1, 2_000.0));
        let be = m.model(id).unwrap().of(Priority::BestEffort);
        assert_eq!(be.completed[STATUS_SLOTS - 1].load(Ordering::Relaxed), 1);
        assert_eq!(m.refused_count(status::BAD_FLAGS), 1);
        // An id past the table is ignored.
        m.finished(u32::MAX, Priority::RealTime, status::OK, 0, 0, 0);
    }
}
