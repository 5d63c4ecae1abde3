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

/// How a plan covers the randomness of arrivals: what "a batch of `b`
/// every `d` ms serves a rate `r`" means.
///
/// gpulet, Nexus and the other planners of the papers plan for the mean
/// ([`Burst::Mean`]): `r ≤ b / d`. A partition planned so is fully busy at
/// its rate, and under Poisson arrivals a round that collects more than `b`
/// requests pushes the rest into later rounds; with batches of a few
/// requests and no slack in the SLO those requests are late
/// (docs/gpulet.md, Fig. 13's reason 1). [`Burst::Poisson`] is sluice's
/// rule: over a window of the `k` rounds a request can wait and still make
/// its SLO (`k = ⌊(SLO − L) / d⌋`, at least 1), the rounds take `n = k·b`
/// requests and `N ~ Poisson(k·r·d)` arrive; the expected share of the
/// window's arrivals that do not fit, `E[(N − n)⁺] / E[N]`, must be at most
/// `ε`. With `ε = 0.01`, the 1 % violation target of gpulet's and InSS's
/// evaluations: a per-request bound, like the target. An approximate rule:
/// it ignores backlog carried in from before the window, and an overflowing
/// request is not always late (deadline batching may still take it); the
/// served simulation is its test. (A first version bounded the window's
/// overflow *probability*, `P(N > n) ≤ ε`; it is stricter than a
/// per-request target and planned 14–18 % less load at the same ~0 %
/// violations: docs/planners.md, "Burst rule".)
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Burst {
    /// Planned for the mean rate (the papers' rule).
    #[default]
    Mean,
    /// Planned so that at most this expected share, in `(0, 1)`, of the
    /// Poisson arrivals of the rounds a request can wait overflow them.
    Poisson(f64),
}

impl Burst {
    /// Whether the share, if any, lies in `(0, 1)`.
    pub fn is_valid(self) -> bool {
        match self {
            Burst::Mean => true,
            Burst::Poisson(eps) => eps > 0.0 && eps < 1.0,
        }
    }

    /// Whether a batch of `batch` every `duty_ms`, each taking `l_ms`,
    /// serves `rate_rps` of a model whose SLO is `slo_ms` under this rule.
    /// [`Burst::Mean`] is `rate ≤ batch / duty` (the SLO is checked
    /// elsewhere); [`Burst::Poisson`] needs that, `duty + l ≤ SLO` and the
    /// Poisson coverage.
    pub fn covers(self, batch: u32, rate_rps: f64, duty_ms: f64, l_ms: f64, slo_ms: f64) -> bool {
        match self {
            Burst::Mean => le(rate_rps, capacity_rps(batch, duty_ms)),
            Burst::Poisson(eps) => {
                // Never weaker than the mean (a low `q` alone would be).
                if !(duty_ms > 0.0
                    && le(duty_ms + l_ms, slo_ms)
                    && le(rate_rps, capacity_rps(batch, duty_ms)))
                {
                    return false;
                }
                if rate_rps <= 0.0 {
                    return true;
                }
                let k = ((slo_ms - l_ms) / duty_ms * (1.0 + EPS)).floor().max(1.0);
                let served = k * f64::from(batch);
                poisson_overflow_share(served, k * rate_rps * duty_ms / 1000.0) <= eps
            }
        }
    }

    /// The largest rate a batch of `batch` every `duty_ms` (each taking
    /// `l_ms`) serves under this rule, within `slo_ms`; 0 when the round
    /// misses the SLO under [`Burst::Poisson`].
    pub fn served_rps(self, batch: u32, duty_ms: f64, l_ms: f64, slo_ms: f64) -> f64 {
        let cap = capacity_rps(batch, duty_ms);
        match self {
            Burst::Mean => cap,
            Burst::Poisson(_) => {
                if !self.covers(batch, 0.0, duty_ms, l_ms, slo_ms) {
                    return 0.0;
                }
                // Coverage falls as the rate grows: bisect on [0, b / d].
                largest(0.0, cap, |r| self.covers(batch, r, duty_ms, l_ms, slo_ms))
            }
        }
    }
}

/// `E[(N − n)⁺] / E[N]` for `N ~ Poisson(mean)`: the expected share of
/// the arrivals beyond the first `n`. From `j·P(N = j) = mean·P(N = j − 1)`:
/// `E[(N − n)⁺] = mean·P(N ≥ n) − n·P(N > n)`.
pub(crate) fn poisson_overflow_share(n: f64, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    let below_n = if n >= 1.0 {
        poisson_cdf(n - 1.0, mean)
    } else {
        0.0
    };
    let over = mean * (1.0 - below_n) - n * (1.0 - poisson_cdf(n, mean));
    over.max(0.0) / mean
}

/// Bisection steps of the [`Burst::Poisson`] searches (rate and duty
/// cycle): 2⁻⁴⁰ of the bracket.
const BISECT_STEPS: u32 = 40;

/// `P(N ≤ n)` for `N ~ Poisson(mean)`, `n` a whole number ≥ 0. Exact
/// summation for means up to 500 (the terms stay in `f64`'s range), the
/// normal approximation with continuity correction above.
pub(crate) fn poisson_cdf(n: f64, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 1.0;
    }
    if mean > 500.0 {
        return normal_cdf((n + 0.5 - mean) / mean.sqrt());
    }
    let mut term = (-mean).exp();
    let mut sum = term;
    let mut j = 0.0;
    while j < n {
        j += 1.0;
        term *= mean / j;
        sum += term;
        if term < 1e-17 * sum && j > mean {
            break;
        }
    }
    sum.min(1.0)
}

/// The standard normal CDF, `Φ(x) = erfc(−x / √2) / 2`, with `erfc` from
/// Numerical Recipes' Chebyshev fit (relative error below 1.2·10⁻⁷).
fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// The smallest of `batches` that serves `share_rps` at one batch every
/// `duty_ms` under `burst`, each batch taking `lat(b)` (a temporal merge's
/// rule for each model it moves to the merged, shorter duty cycle).
pub(crate) fn covering(
    batches: &[u32],
    share_rps: f64,
    duty_ms: f64,
    burst: Burst,
    lat: impl Fn(u32) -> Option<f64>,
    slo_ms: f64,
) -> Option<u32> {
    batches.iter().copied().find(|&b| match burst {
        Burst::Mean => le(share_rps, capacity_rps(b, duty_ms)),
        Burst::Poisson(_) => lat(b).is_some_and(|l| burst.covers(b, share_rps, duty_ms, l, slo_ms)),
    })
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

/// The rate a saturated batching ([`saturated`]: back to back, `d = L`)
/// serves under `burst`: `b / L` for [`Burst::Mean`].
pub(crate) fn saturated_rps(sat: Batching, slo_ms: f64, burst: Burst) -> f64 {
    burst.served_rps(sat.batch, sat.duty_ms, sat.duty_ms, slo_ms)
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
///
/// Under [`Burst::Poisson`] neither rule's duty cycle covers bursts (a
/// batch collected in `b / rate` holds the *mean*), so each batch gets the
/// longest duty cycle `d ≤ min(b / rate, SLO − L)` whose rounds cover the
/// rate ([`Burst::covers`], which falls as `d` grows: bisection), `L ≤ d`;
/// the batch that keeps the partition least busy wins, the larger on a tie.
pub(crate) fn adaptive(
    table: &LatencyTable,
    pct: u32,
    rate_rps: f64,
    slo_ms: f64,
    burst: Burst,
) -> Option<Batching> {
    adaptive_with(
        table.batches(),
        |b| table.latency_ms(b, pct),
        rate_rps,
        slo_ms,
        burst,
    )
}

/// [`adaptive`] over the batch sizes `batches` with latencies `lat(b)`.
pub(crate) fn adaptive_with(
    batches: &[u32],
    lat: impl Fn(u32) -> Option<f64>,
    rate_rps: f64,
    slo_ms: f64,
    burst: Burst,
) -> Option<Batching> {
    let collect = |b: u32| f64::from(b) * 1000.0 / rate_rps;
    if let Burst::Poisson(_) = burst {
        return least_busy(batches, lat, |b, l| {
            let d_max = collect(b).min(slo_ms - l);
            let covers = |d: f64| burst.covers(b, rate_rps, d, l, slo_ms);
            (d_max > 0.0 && le(l, d_max) && covers(l)).then(|| largest(l, d_max, covers))
        });
    }
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
    least_busy(batches, lat, |b, l| {
        let d = collect(b).min(slo_ms - l);
        (d > 0.0 && le(l, d)).then_some(d)
    })
}

/// Among `batches` (largest first) with latencies `lat(b)`, the one whose
/// duty cycle `duty(b, L)` (`None`: unusable) keeps the partition least
/// busy (`L / d`), the larger batch on a tie.
fn least_busy(
    batches: &[u32],
    lat: impl Fn(u32) -> Option<f64>,
    duty: impl Fn(u32, f64) -> Option<f64>,
) -> Option<Batching> {
    let mut best: Option<(f64, Batching)> = None;
    for &b in batches.iter().rev() {
        let Some(l) = lat(b) else {
            continue;
        };
        let Some(d) = duty(b, l) else {
            continue;
        };
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
    best.map(|(_, b)| b)
}

/// The largest `x` in `[lo, hi]` with `holds(x)`, for a `holds` that is
/// true at `lo` and turns false once as `x` grows: `hi` itself, or
/// [`BISECT_STEPS`] bisections.
fn largest(lo: f64, hi: f64, holds: impl Fn(f64) -> bool) -> f64 {
    if holds(hi) {
        return hi;
    }
    let (mut lo, mut hi) = (lo, hi);
    for _ in 0..BISECT_STEPS {
        let mid = 0.5 * (lo + hi);
        if holds(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
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
    fn poisson_cdf_matches_hand_values_and_the_normal_tail() {
        // P(N ≤ 2 | μ = 2) = e⁻²(1 + 2 + 2) = 5e⁻².
        assert!((poisson_cdf(2.0, 2.0) - 5.0 * (-2.0f64).exp()).abs() < 1e-12);
        // P(N ≤ 0 | μ) = e^−μ; a mean of 0 is certain.
        assert!((poisson_cdf(0.0, 0.7) - (-0.7f64).exp()).abs() < 1e-12);
        assert_eq!(poisson_cdf(3.0, 0.0), 1.0);
        // Far above the mean: 1; far below: about 0.
        assert!((poisson_cdf(100.0, 5.0) - 1.0).abs() < 1e-12);
        assert!(poisson_cdf(3.0, 60.0) < 1e-20);
        // The exact sum at μ = 500 and the normal approximation just
        // above agree to 2·10⁻³ at the 99 % point (μ + 2.326·√μ ≈ 552).
        let exact = poisson_cdf(552.0, 500.0);
        let approx = poisson_cdf(552.0, 500.0 + 1e-9);
        assert!((exact - approx).abs() < 2e-3, "{exact} vs {approx}");
        assert!((exact - 0.99).abs() < 0.01, "{exact}");
    }

    #[test]
    fn the_overflow_share_matches_a_direct_sum() {
        for (n, mean) in [
            (0.0, 0.5),
            (4.0, 1.0),
            (4.0, 2.0),
            (12.0, 6.0),
            (64.0, 46.0),
        ] {
            let (n, mean): (f64, f64) = (n, mean);
            let mut term = (-mean).exp();
            let mut over = 0.0;
            for j in 0..400 {
                if j > 0 {
                    term *= mean / f64::from(j);
                }
                over += (f64::from(j) - n).max(0.0) * term;
            }
            let share = poisson_overflow_share(n, mean);
            assert!((share - over / mean).abs() < 1e-12, "{n} {mean}: {share}");
        }
        // Nothing arrives, nothing overflows; with n = 0 everything does.
        assert_eq!(poisson_overflow_share(3.0, 0.0), 0.0);
        assert!((poisson_overflow_share(0.0, 2.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_poisson_rule_covers_the_rounds_a_request_can_wait() {
        let q = Burst::Poisson(0.01);
        // Batch 4 every 10 ms at 100 rps: a mean of 1 per round, b / d = 400
        // rps. L = 5, SLO 20: k = ⌊15 / 10⌋ = 1 round; E[(N − 4)⁺] / E[N]
        // = 0.0043 for N ~ Poisson(1).
        assert!(q.covers(4, 100.0, 10.0, 5.0, 20.0));
        // At 200 rps the mean is 2: a share of 0.0376 > 0.01 overflows …
        assert!(!q.covers(4, 200.0, 10.0, 5.0, 20.0));
        // … unless the SLO lets a request wait 3 rounds: SLO 35, k = 3,
        // n = 12, Poisson(6): 0.0024.
        assert!(q.covers(4, 200.0, 10.0, 5.0, 35.0));
        // The mean rule only asks rate ≤ b / d = 400 rps.
        assert!(Burst::Mean.covers(4, 400.0, 10.0, 5.0, 20.0));
        // Never weaker than the mean, even with a large share; and a round
        // past the SLO covers nothing.
        assert!(!Burst::Poisson(0.9).covers(4, 401.0, 10.0, 5.0, 20.0));
        assert!(!q.covers(4, 1.0, 10.0, 11.0, 20.0));
        // The served rate is the largest covered one.
        let r = q.served_rps(4, 10.0, 5.0, 20.0);
        assert!(q.covers(4, r, 10.0, 5.0, 20.0) && !q.covers(4, r * 1.001, 10.0, 5.0, 20.0));
        assert!(r > 100.0 && r < 200.0, "{r}");
        assert_eq!(Burst::Mean.served_rps(4, 10.0, 5.0, 20.0), 400.0);
        assert_eq!(q.served_rps(4, 10.0, 11.0, 20.0), 0.0);
    }

    #[test]
    fn adaptive_under_the_poisson_rule_shortens_the_cycle_until_it_covers() {
        // 100 rps, SLO 20 (L(b) = b + 1): every batch gets the longest
        // covering cycle and the least busy batch wins; it covers, meets
        // the SLO and keeps up.
        let q = Burst::Poisson(0.01);
        let t = table();
        let a = adaptive(&t, 100, 100.0, 20.0, q).unwrap();
        let l = t.latency_ms(a.batch, 100).unwrap();
        assert!(q.covers(a.batch, 100.0, a.duty_ms, l, 20.0));
        assert!(a.duty_ms + l <= 20.0 + 1e-9 && l <= a.duty_ms);
        // The cycle is the longest that covers: 1 % longer does not.
        assert!(
            a.duty_ms * 1.01 + l > 20.0
                || a.duty_ms * 1.01 > f64::from(a.batch) * 10.0
                || !q.covers(a.batch, 100.0, a.duty_ms * 1.01, l, 20.0)
        );
        // No batch is less busy and still covers.
        for &b in t.batches() {
            let lb = t.latency_ms(b, 100).unwrap();
            let d = (f64::from(b) * 10.0).min(20.0 - lb);
            if d > lb && q.covers(b, 100.0, d, lb, 20.0) {
                assert!(lb / d >= l / a.duty_ms - 1e-9, "batch {b}");
            }
        }
        // At 200 rps the mean rule's plan (2 every 10 ms: Nexus's b = 2,
        // 10 + 3 ≤ 20) holds a mean of 2 per round with no round to spare
        // (k = ⌊17 / 10⌋ = 1): a share of 0.27 overflows. The Poisson rule
        // plans otherwise, and covers.
        let mean = adaptive(&t, 100, 200.0, 20.0, Burst::Mean).unwrap();
        assert_eq!((mean.batch, mean.duty_ms), (2, 10.0));
        assert!(!q.covers(2, 200.0, 10.0, 3.0, 20.0));
        let p = adaptive(&t, 100, 200.0, 20.0, q).unwrap();
        assert_ne!(p, mean);
        let lp = t.latency_ms(p.batch, 100).unwrap();
        assert!(q.covers(p.batch, 200.0, p.duty_ms, lp, 20.0));
        // At 500 rps the mean rule still plans (4 every 8 ms) but nothing
        // covers the bursts (the best: 4 every 5 ms, k = 3, Poisson(7.5)
        // over 12 requests, 0.011): capacity the Poisson rule gives up.
        assert!(adaptive(&t, 100, 500.0, 20.0, Burst::Mean).is_some());
        assert_eq!(adaptive(&t, 100, 500.0, 20.0, q), None);
    }

    #[test]
    fn adaptive_follows_nexus_then_cuts_the_duty_cycle() {
        // 500 rps, SLO 20: b = 8 collects in 16 ms, 16 + 9 = 25 > 20;
        // b = 4 collects in 8 ms, L = 5 ≤ 8 and 8 + 5 = 13 ≤ 20 → (4, 8 ms).
        let a = adaptive(&table(), 100, 500.0, 20.0, Burst::Mean).unwrap();
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
        let a = adaptive(&table(), 100, 10.0, 20.0, Burst::Mean).unwrap();
        assert_eq!(
            a,
            Batching {
                batch: 1,
                duty_ms: 18.0
            }
        );
        // 2000 rps: the best throughput is b = 8 at 8/9 ms = 889 rps.
        assert_eq!(adaptive(&table(), 100, 2000.0, 20.0, Burst::Mean), None);
    }
}
