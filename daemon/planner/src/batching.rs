//! Adaptive batching for one model alone on one partition (gpulet §2.1,
//! Nexus's batch choice).
//!
//! A partition runs in rounds of one *duty cycle* `d`: every `d` ms it
//! executes one batch of up to `b` requests of each of its models. A request
//! waits at most `d` for its batch to be collected and then `L(b, p)` for it
//! to run, so its worst-case latency is `d + L(b, p)`; a model keeps up when
//! `b` requests per `d` cover its rate; the batches fit the round when their
//! execution times sum to at most `d`.

use crate::table::LatencyTable;

/// Relative slack for floating-point comparisons of rates and times.
pub(crate) const EPS: f64 = 1e-9;

/// `a ≤ b` up to rounding.
pub(crate) fn le(a: f64, b: f64) -> bool {
    a <= b + EPS * b.abs().max(1.0)
}

/// Requests per second that a batch of `batch` every `duty_ms` serves.
pub(crate) fn capacity_rps(batch: u32, duty_ms: f64) -> f64 {
    f64::from(batch) * 1000.0 / duty_ms
}

/// The smallest of `batches` that serves `share_rps` at one batch every
/// `duty_ms` (a temporal merge's rule for each model it moves to the
/// merged, shorter duty cycle).
pub(crate) fn covering(batches: &[u32], share_rps: f64, duty_ms: f64) -> Option<u32> {
    batches
        .iter()
        .copied()
        .find(|&b| le(share_rps, capacity_rps(b, duty_ms)))
}

/// A batch size and duty cycle for one model on one partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Batching {
    /// Batch size (a listed one).
    pub batch: u32,
    /// Duty cycle, ms.
    pub duty_ms: f64,
}

/// The batching of a partition kept busy back to back: the largest listed
/// batch with `2·L(b, p) ≤ SLO`, duty cycle `L(b, p)` (one cycle to collect
/// the batch while the previous one runs, one to run it). `None` when even
/// the smallest batch misses the SLO this way, in which case the model
/// cannot be served on this partition at any rate.
pub(crate) fn saturated(table: &LatencyTable, pct: u32, slo_ms: f64) -> Option<Batching> {
    saturated_with(table.batches(), |b| table.latency_ms(b, pct), slo_ms)
}

/// [`saturated`] over the batch sizes `batches` with latencies `lat(b)`
/// (a profile's, or a profile's inflated by interference).
pub(crate) fn saturated_with(
    batches: &[u32],
    lat: impl Fn(u32) -> Option<f64>,
    slo_ms: f64,
) -> Option<Batching> {
    batches.iter().rev().find_map(|&b| {
        let l = lat(b)?;
        le(2.0 * l, slo_ms).then_some(Batching {
            batch: b,
            duty_ms: l,
        })
    })
}

/// The batching that serves `rate_rps` alone on a `pct` partition within
/// the SLO, or `None` when the partition is too small for that rate.
///
/// 1. Nexus's rule: the largest listed `b` whose collection time
///    `b / rate` plus `L(b, p)` fits the SLO and whose execution fits its
///    collection time (`L(b, p) ≤ b / rate`); duty cycle `b / rate`.
/// 2. When no batch passes 1 (a rate so low that even the smallest batch
///    takes longer than the SLO to collect, or so high that the batches
///    which collect in time cannot keep up), the duty cycle is cut to
///    `d = min(b / rate, SLO − L(b, p))` and a batch runs every `d` even if
///    not full: among the `b` with `L(b, p) ≤ d`, the one that keeps the
///    partition least busy (`L / d`), the larger on a tie.
pub(crate) fn adaptive(
    table: &LatencyTable,
    pct: u32,
    rate_rps: f64,
    slo_ms: f64,
) -> Option<Batching> {
    adaptive_with(
        table.batches(),
        |b| table.latency_ms(b, pct),
        rate_rps,
        slo_ms,
    )
}

/// [`adaptive`] over the batch sizes `batches` with latencies `lat(b)`.
pub(crate) fn adaptive_with(
    batches: &[u32],
    lat: impl Fn(u32) -> Option<f64>,
    rate_rps: f64,
    slo_ms: f64,
) -> Option<Batching> {
    let collect = |b: u32| f64::from(b) * 1000.0 / rate_rps;
    let nexus = batches.iter().rev().find_map(|&b| {
        let l = lat(b)?;
        let d = collect(b);
        (le(l, d) && le(d + l, slo_ms)).then_some(Batching {
            batch: b,
            duty_ms: d,
        })
    });
    if nexus.is_some() {
        return nexus;
    }
    let mut best: Option<(f64, Batching)> = None;
    for &b in batches.iter().rev() {
        let Some(l) = lat(b) else {
            continue;
        };
        let d = collect(b).min(slo_ms - l);
        if d > 0.0 && le(l, d) {
            let busy = l / d;
            if best.is_none_or(|(o, _)| busy < o) {
                best = Some((
                    busy,
                    Batching {
                        batch: b,
                        duty_ms: d,
                    },
                ));
            }
        }
    }
    best.map(|(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> LatencyTable {
        // L(b) on a whole GPU: 1 → 2 ms, 2 → 3, 4 → 5, 8 → 9, 16 → 17.
        LatencyTable::from_fn(vec![1, 2, 4, 8, 16], vec![100], |b, _| f64::from(b) + 1.0).unwrap()
    }

    #[test]
    fn saturated_takes_the_largest_batch_with_twice_its_latency_in_the_slo() {
        // SLO 20: 2·L(8) = 18 ≤ 20, 2·L(16) = 34 > 20 → batch 8, d = 9.
        let s = saturated(&table(), 100, 20.0).unwrap();
        assert_eq!(
            s,
            Batching {
                batch: 8,
                duty_ms: 9.0
            }
        );
        // SLO 3: even 2·L(1) = 4 > 3.
        assert_eq!(saturated(&table(), 100, 3.0), None);
    }

    #[test]
    fn adaptive_follows_nexus_then_cuts_the_duty_cycle() {
        // 500 rps, SLO 20: b = 8 collects in 16 ms, 16 + 9 = 25 > 20;
        // b = 4 collects in 8 ms, L = 5 ≤ 8 and 8 + 5 = 13 ≤ 20 → (4, 8 ms).
        let a = adaptive(&table(), 100, 500.0, 20.0).unwrap();
        assert_eq!(
            a,
            Batching {
                batch: 4,
                duty_ms: 8.0
            }
        );
        // 10 rps, SLO 20: b = 1 takes 100 ms to collect, over the SLO, so
        // rule 2: d = min(b·100, 20 − L(b)); b = 8 → d = 11, busy 9/11 = 0.82;
        // b = 4 → d = 15, busy 5/15 = 0.33; b = 2 → d = 17, 3/17 = 0.18;
        // b = 1 → d = 18, 2/18 = 0.11 → (1, 18 ms), capacity 55 rps ≥ 10.
        let a = adaptive(&table(), 100, 10.0, 20.0).unwrap();
        assert_eq!(
            a,
            Batching {
                batch: 1,
                duty_ms: 18.0
            }
        );
        // 2000 rps: the best throughput is b = 8 at 8/9 ms = 889 rps.
        assert_eq!(adaptive(&table(), 100, 2000.0, 20.0), None);
    }
}
