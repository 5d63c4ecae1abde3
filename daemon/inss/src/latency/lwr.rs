//! Locally weighted regression (LWR, "loess"; Cleveland & Devlin 1988,
//! *Locally Weighted Regression: An Approach to Regression Analysis by
//! Local Fitting*, JASA 83(403)): InSS §4.1's `o_r = LWR(b, ρ·C)`, the
//! compute time of a batch running alone as a function of the batch size
//! and the SMs of the partition.
//!
//! Exactly what is computed, for a query `x` (two features):
//!
//! 1. **Features.** [`LwrFeatures::BatchSms`] uses `(b, SMs)` as the paper
//!    writes it; [`LwrFeatures::BatchInvSms`] uses `(b, 1/SMs)` (a variant:
//!    the work of a batch spread over the SMs makes time grow like
//!    `1/SMs`, so a local plane in `1/SMs` bends the right way);
//!    [`LwrFeatures::LogBatchLogSms`] uses `(ln b, ln SMs)` and regresses
//!    `ln y`, predicting `exp` of the local fit (a variant: a time that
//!    scales like a power of the batch and of the SMs, `k·b^α·SMs^−β`, is a
//!    plane there); [`LwrFeatures::LogBatchLogSmsOverWaves`] is the same
//!    regression of `y` divided by the model's wave-count estimate, which
//!    its caller does (a sluice variant: the estimate carries the steps of
//!    whole rounds of blocks, the regression the smooth rest).
//! 2. **Distance.** Each feature is divided by its range (max − min) over
//!    the fitting points, so both span `[0, 1]`; the distance is Euclidean
//!    in these scaled features. (Cleveland & Devlin scale by a spread
//!    estimate; on InSS's 4 × 4 grid the range is the natural one.)
//! 3. **Neighbourhood.** With `n` points and span `f ≤ 1`, `q = ⌊f·n⌋`
//!    neighbours; the bandwidth `h` is the distance to the `q`-th nearest
//!    point. For `f > 1`, `h = f^{1/2} ×` the largest distance (their rule
//!    for `p = 2` features). At least [`MIN_NEIGHBOURS`] neighbours.
//! 4. **Weights.** Tricube, `w = (1 − (d/h)³)³` for `d < h`, else 0.
//! 5. **Local fit.** Weighted least squares of `y` on `[1, x₁ − q₁,
//!    x₂ − q₂]` (local linear, degree 1); the prediction is the intercept.
//!    Should the weighted design be singular (neighbours on one line), the
//!    weighted mean of `y` instead; with every weight 0, the nearest
//!    point's `y`.
//!
//! **Span.** [`Span::Fixed`] takes a given span ([`DEFAULT_SPAN`] = 0.75,
//! the default of R's `loess`; InSS does not give its span).
//! [`Span::LeaveOneOut`] picks it by leave-one-out cross-validation over the
//! fitting points only: every candidate of [`loo_candidates`] is scored by
//! the mean of `|ŷ₋ᵢ − yᵢ| / yᵢ` (each point predicted from the others, the
//! feature scaling of step 2 kept from all points), and the lowest score
//! wins, a tie going to the larger span.

use serde::{Deserialize, Serialize};

use super::error::FitError;

/// The span used when none is chosen: R `loess`'s default.
pub const DEFAULT_SPAN: f64 = 0.75;
/// Fewest neighbours a local plane in two features needs: three unknowns,
/// and the `q`-th neighbour has weight 0.
pub const MIN_NEIGHBOURS: usize = 4;
/// Spans above 1 that leave-one-out also tries (beyond `q/n` for every
/// admissible `q`).
pub const LOO_WIDE_SPANS: [f64; 3] = [1.5, 2.0, 4.0];

/// The two features of the regression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LwrFeatures {
    /// `(b, SMs)`: InSS §4.1 as written (`LWR(b, ρ·C)`).
    BatchSms,
    /// `(b, 1/SMs)`: a variant.
    BatchInvSms,
    /// `(ln b, ln SMs)`, response `ln y`: a variant.
    LogBatchLogSms,
    /// `(ln b, ln SMs)`, response `ln y`, where `y` is the compute time
    /// over the model's wave-count estimate (`super::WaveTable`): a
    /// sluice variant. The regression is the same as
    /// [`LwrFeatures::LogBatchLogSms`]'s; [`super::LatencyModel`] divides
    /// before fitting and multiplies after predicting.
    LogBatchLogSmsOverWaves,
}

impl LwrFeatures {
    /// The feature vector of a configuration.
    pub fn of(self, batch: f64, sms: f64) -> [f64; 2] {
        match self {
            LwrFeatures::BatchSms => [batch, sms],
            LwrFeatures::BatchInvSms => [batch, 1.0 / sms],
            LwrFeatures::LogBatchLogSms | LwrFeatures::LogBatchLogSmsOverWaves => {
                [batch.ln(), sms.ln()]
            }
        }
    }

    /// The response the local planes are fitted to: `y`, or `ln y` for
    /// [`LwrFeatures::LogBatchLogSms`].
    pub fn response(self, y: f64) -> f64 {
        match self {
            LwrFeatures::LogBatchLogSms | LwrFeatures::LogBatchLogSmsOverWaves => y.ln(),
            _ => y,
        }
    }

    /// The inverse of [`LwrFeatures::response`].
    pub fn unresponse(self, z: f64) -> f64 {
        match self {
            LwrFeatures::LogBatchLogSms | LwrFeatures::LogBatchLogSmsOverWaves => z.exp(),
            _ => z,
        }
    }
}

/// How the span is set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Span {
    /// This span.
    Fixed(f64),
    /// Leave-one-out cross-validation over the fitting points.
    LeaveOneOut,
}

/// Features and span of a regression.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LwrConfig {
    /// The features.
    pub features: LwrFeatures,
    /// The span rule.
    pub span: Span,
}

impl LwrConfig {
    /// InSS §4.1 as written: features `(b, SMs)`, span [`DEFAULT_SPAN`].
    pub const FAITHFUL: LwrConfig = LwrConfig {
        features: LwrFeatures::BatchSms,
        span: Span::Fixed(DEFAULT_SPAN),
    };
    /// A variant: features `(b, 1/SMs)`, span by leave-one-out.
    pub const INV_SMS_LOO: LwrConfig = LwrConfig {
        features: LwrFeatures::BatchInvSms,
        span: Span::LeaveOneOut,
    };
    /// A variant: features `(ln b, ln SMs)`, response `ln y`, span by
    /// leave-one-out.
    pub const LOG_LOG_LOO: LwrConfig = LwrConfig {
        features: LwrFeatures::LogBatchLogSms,
        span: Span::LeaveOneOut,
    };
    /// A sluice variant: [`LwrFeatures::LogBatchLogSmsOverWaves`], span by
    /// leave-one-out.
    pub const WAVES_LOG_LOG_LOO: LwrConfig = LwrConfig {
        features: LwrFeatures::LogBatchLogSmsOverWaves,
        span: Span::LeaveOneOut,
    };
}

/// A fitted regression over `(batch, SMs) → y` points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lwr {
    features: LwrFeatures,
    span: f64,
    /// Feature vectors of the points.
    x: Vec<[f64; 2]>,
    /// Responses, as fitted ([`LwrFeatures::response`]).
    z: Vec<f64>,
    /// Range of each feature over the points.
    scale: [f64; 2],
    /// Leave-one-out mean relative error at `span`, percent.
    loo_error_pct: f64,
}

/// Spans leave-one-out tries for `n` points: `q/n` for every `q` from
/// [`MIN_NEIGHBOURS`]` + 1` to `n` (so that `n − 1` points still give at
/// least [`MIN_NEIGHBOURS`] neighbours), then [`LOO_WIDE_SPANS`].
pub fn loo_candidates(n: usize) -> Vec<f64> {
    (MIN_NEIGHBOURS + 1..=n)
        .map(|q| q as f64 / n as f64)
        .chain(LOO_WIDE_SPANS)
        .collect()
}

impl Lwr {
    /// Fits over `(batch, sms, y)` points (`y > 0`: times).
    pub fn fit(points: &[(u32, u32, f64)], cfg: &LwrConfig) -> Result<Lwr, FitError> {
        let what = "LWR points";
        for (index, &(batch, sms, ms)) in points.iter().enumerate() {
            if batch == 0 || sms == 0 {
                return Err(FitError::BadConfig { index, batch, sms });
            }
            if !ms.is_finite() {
                return Err(FitError::NotFinite {
                    what,
                    index,
                    value: ms,
                });
            }
            if ms <= 0.0 {
                return Err(FitError::NonPositive {
                    index,
                    batch,
                    sms,
                    ms,
                });
            }
        }
        let n = points.len();
        if n < MIN_NEIGHBOURS {
            return Err(FitError::TooFew {
                what,
                got: n,
                need: MIN_NEIGHBOURS,
            });
        }
        let x: Vec<[f64; 2]> = points
            .iter()
            .map(|&(b, s, _)| cfg.features.of(f64::from(b), f64::from(s)))
            .collect();
        let z: Vec<f64> = points.iter().map(|p| cfg.features.response(p.2)).collect();
        let mut scale = [0.0; 2];
        for (k, sc) in scale.iter_mut().enumerate() {
            let lo = x.iter().map(|v| v[k]).fold(f64::INFINITY, f64::min);
            let hi = x.iter().map(|v| v[k]).fold(f64::NEG_INFINITY, f64::max);
            *sc = hi - lo;
        }
        if scale.iter().any(|&s| s <= 0.0) || !spans_plane(&x, scale) {
            return Err(FitError::Collinear { n });
        }
        let span = match cfg.span {
            Span::Fixed(f) => {
                check_span(f, n)?;
                f
            }
            Span::LeaveOneOut => {
                let mut best = (f64::INFINITY, 0.0);
                for f in loo_candidates(n) {
                    let e = loo_error(cfg.features, &x, &z, scale, f);
                    // Ties (within rounding) go to the larger span.
                    if e <= best.0 * (1.0 + 1e-12) || best.0.is_infinite() {
                        best = (e, f);
                    }
                }
                best.1
            }
        };
        let loo_error_pct = loo_error(cfg.features, &x, &z, scale, span) * 100.0;
        Ok(Lwr {
            features: cfg.features,
            span,
            x,
            z,
            scale,
            loo_error_pct,
        })
    }

    /// The local-linear prediction at `(batch, sms)` (no floor: far outside
    /// the points it can go anywhere, even below 0).
    pub fn predict(&self, batch: f64, sms: f64) -> f64 {
        let q = self.features.of(batch, sms);
        self.features.unresponse(local_linear(
            &self.x, &self.z, self.scale, self.span, q, None,
        ))
    }

    /// The features.
    pub fn features(&self) -> LwrFeatures {
        self.features
    }

    /// The span in use (given, or chosen by leave-one-out).
    pub fn span(&self) -> f64 {
        self.span
    }

    /// Leave-one-out mean relative error at the span in use, percent: how
    /// well each profile point is predicted from the others.
    pub fn loo_error_pct(&self) -> f64 {
        self.loo_error_pct
    }

    /// The smallest response among the points.
    pub fn min_y(&self) -> f64 {
        let z = self.z.iter().copied().fold(f64::INFINITY, f64::min);
        self.features.unresponse(z)
    }
}

/// Whether the points, scaled, are not all on one line.
fn spans_plane(x: &[[f64; 2]], scale: [f64; 2]) -> bool {
    let n = x.len() as f64;
    let m = [
        x.iter().map(|v| v[0] / scale[0]).sum::<f64>() / n,
        x.iter().map(|v| v[1] / scale[1]).sum::<f64>() / n,
    ];
    let (mut s00, mut s11, mut s01) = (0.0, 0.0, 0.0);
    for v in x {
        let a = v[0] / scale[0] - m[0];
        let b = v[1] / scale[1] - m[1];
        s00 += a * a;
        s11 += b * b;
        s01 += a * b;
    }
    s00 * s11 - s01 * s01 > 1e-12 * s00 * s11
}

/// `Ok` when span `f` keeps enough of `n` points.
fn check_span(f: f64, n: usize) -> Result<(), FitError> {
    if !(f.is_finite() && f > 0.0) {
        return Err(FitError::BadSpan { span: f });
    }
    let q = neighbours(f, n);
    if q < MIN_NEIGHBOURS {
        return Err(FitError::SpanTooSmall {
            span: f,
            q,
            n,
            need: MIN_NEIGHBOURS,
        });
    }
    Ok(())
}

/// `q = ⌊f·n⌋`, at most `n`.
fn neighbours(f: f64, n: usize) -> usize {
    ((f * n as f64 + 1e-9).floor() as usize).min(n)
}

/// Mean relative leave-one-out error at span `f` (a fraction), on the
/// original scale of the response; infinite when `f` keeps too few of the
/// `n − 1` remaining points.
fn loo_error(features: LwrFeatures, x: &[[f64; 2]], z: &[f64], scale: [f64; 2], f: f64) -> f64 {
    let n = x.len();
    let q = if f <= 1.0 {
        neighbours(f, n - 1)
    } else {
        n - 1
    };
    if q < MIN_NEIGHBOURS {
        return f64::INFINITY;
    }
    let mut sum = 0.0;
    for i in 0..n {
        let p = features.unresponse(local_linear(x, z, scale, f, x[i], Some(i)));
        let y = features.unresponse(z[i]);
        sum += (p - y).abs() / y;
    }
    sum / n as f64
}

/// Tricube weight of a scaled distance `u = d/h`.
fn tricube(u: f64) -> f64 {
    if u < 1.0 {
        let t = 1.0 - u * u * u;
        t * t * t
    } else {
        0.0
    }
}

/// The local linear fit at `q` over the points but `skip`.
fn local_linear(
    x: &[[f64; 2]],
    y: &[f64],
    scale: [f64; 2],
    f: f64,
    q: [f64; 2],
    skip: Option<usize>,
) -> f64 {
    // (distance, dx0, dx1, y) of every point used.
    let mut pts: Vec<(f64, f64, f64, f64)> = x
        .iter()
        .zip(y)
        .enumerate()
        .filter(|&(i, _)| Some(i) != skip)
        .map(|(_, (v, &yv))| {
            let d0 = (v[0] - q[0]) / scale[0];
            let d1 = (v[1] - q[1]) / scale[1];
            ((d0 * d0 + d1 * d1).sqrt(), d0, d1, yv)
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = pts.len();
    let h = if f <= 1.0 {
        pts[neighbours(f, n).clamp(1, n) - 1].0
    } else {
        pts[n - 1].0 * f.sqrt()
    };
    if h <= 0.0 {
        // The query coincides with the neighbourhood: their mean.
        let same: Vec<f64> = pts.iter().filter(|p| p.0 <= 0.0).map(|p| p.3).collect();
        return same.iter().sum::<f64>() / same.len() as f64;
    }
    // Normal equations of the weighted fit on [1, d0, d1].
    let mut a = [[0.0f64; 4]; 3];
    let mut wsum = 0.0;
    let mut wy = 0.0;
    for &(d, d0, d1, yv) in &pts {
        let w = tricube(d / h);
        if w == 0.0 {
            continue;
        }
        let r = [1.0, d0, d1];
        for i in 0..3 {
            for j in 0..3 {
                a[i][j] += w * r[i] * r[j];
            }
            a[i][3] += w * r[i] * yv;
        }
        wsum += w;
        wy += w * yv;
    }
    if wsum == 0.0 {
        return pts[0].3;
    }
    solve3(a).map(|c| c[0]).unwrap_or(wy / wsum)
}

/// Gauss–Jordan with partial pivoting on an augmented 3 × 4 system; `None`
/// when singular (a pivot below 1e-10 of the largest diagonal entry).
fn solve3(mut a: [[f64; 4]; 3]) -> Option<[f64; 3]> {
    let tol = 1e-10
        * a.iter()
            .enumerate()
            .map(|(i, r)| r[i].abs())
            .fold(0.0, f64::max);
    for col in 0..3 {
        let p = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        a.swap(col, p);
        if a[col][col].abs() <= tol {
            return None;
        }
        let d = a[col][col];
        for v in a[col].iter_mut() {
            *v /= d;
        }
        for r in 0..3 {
            if r != col {
                let f = a[r][col];
                let row = a[col];
                for (v, pv) in a[r].iter_mut().zip(row) {
                    *v -= f * pv;
                }
            }
        }
    }
    Some([a[0][3], a[1][3], a[2][3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCHES: [u32; 4] = [1, 4, 16, 32];
    const SMS: [u32; 4] = [10, 27, 54, 108];

    fn grid(f: impl Fn(f64, f64) -> f64) -> Vec<(u32, u32, f64)> {
        let mut v = Vec::new();
        for b in BATCHES {
            for s in SMS {
                v.push((b, s, f(f64::from(b), f64::from(s))));
            }
        }
        v
    }

    #[test]
    fn a_plane_is_reproduced_exactly_anywhere() {
        // Local linear fits reproduce a linear function whatever the
        // weights: y = 2b + 0.1·SMs + 3 at (8, 21) is 16 + 2.1 + 3 = 21.1.
        let pts = grid(|b, s| 2.0 * b + 0.1 * s + 3.0);
        let m = Lwr::fit(&pts, &LwrConfig::FAITHFUL).unwrap();
        assert!((m.predict(8.0, 21.0) - 21.1).abs() < 1e-9);
        assert!((m.predict(1.0, 10.0) - 6.0).abs() < 1e-9);
        // Outside the grid too (extrapolation of a plane is the plane).
        assert!((m.predict(64.0, 5.0) - 131.5).abs() < 1e-9);
        assert!(m.loo_error_pct() < 1e-9);
        // In (b, 1/SMs): y = b + 50/SMs; at (8, 20) that is 8 + 2.5.
        let pts = grid(|b, s| b + 50.0 / s);
        let m = Lwr::fit(
            &pts,
            &LwrConfig {
                features: LwrFeatures::BatchInvSms,
                span: Span::Fixed(0.75),
            },
        )
        .unwrap();
        assert!((m.predict(8.0, 20.0) - 10.5).abs() < 1e-9);
        // In (ln b, ln SMs) with ln y: y = 3·b^0.9·SMs^−0.8 is a plane;
        // at (8, 20): 3 · 8^0.9 / 20^0.8.
        let pts = grid(|b, s| 3.0 * b.powf(0.9) * s.powf(-0.8));
        let m = Lwr::fit(
            &pts,
            &LwrConfig {
                features: LwrFeatures::LogBatchLogSms,
                span: Span::Fixed(0.75),
            },
        )
        .unwrap();
        let want = 3.0 * 8f64.powf(0.9) / 20f64.powf(0.8);
        assert!((m.predict(8.0, 20.0) - want).abs() < 1e-9 * want);
        assert!((m.min_y() - 3.0 * 108f64.powf(-0.8)).abs() < 1e-12);
    }

    #[test]
    fn a_smooth_surface_is_interpolated_closely_and_better_than_one_plane() {
        // y = 1 + (b/8)² + (SMs/50)² on a fine grid (16 × 15 points),
        // checked between the grid points: a small span (12 neighbours)
        // stays within 2 % (the bias of a local plane on a curved surface),
        // one global plane (span 4: every point weighted almost alike) is
        // off by up to 25 %.
        let f = |b: f64, s: f64| 1.0 + (b / 8.0).powi(2) + (s / 50.0).powi(2);
        let mut pts = Vec::new();
        for b in (1..=32).step_by(2) {
            for s in (10..=108).step_by(7) {
                pts.push((b, s, f(f64::from(b), f64::from(s))));
            }
        }
        let local = Lwr::fit(
            &pts,
            &LwrConfig {
                features: LwrFeatures::BatchSms,
                span: Span::Fixed(0.05),
            },
        )
        .unwrap();
        let global = Lwr::fit(
            &pts,
            &LwrConfig {
                features: LwrFeatures::BatchSms,
                span: Span::Fixed(4.0),
            },
        )
        .unwrap();
        let (mut worst_local, mut worst_global) = (0.0f64, 0.0f64);
        for (b, s) in [(6.0, 20.0), (12.0, 40.0), (20.0, 70.0), (28.0, 100.0)] {
            let want = f(b, s);
            worst_local = worst_local.max((local.predict(b, s) - want).abs() / want);
            worst_global = worst_global.max((global.predict(b, s) - want).abs() / want);
        }
        assert!(worst_local < 0.02, "local {worst_local}");
        assert!(worst_global > 5.0 * worst_local, "global {worst_global}");
    }

    #[test]
    fn leave_one_out_prefers_the_features_that_fit_the_shape() {
        // Time of a batch spread over the SMs: y = 0.2 + b/SMs. A local
        // plane in (b, 1/SMs) is much closer than one in (b, SMs).
        let pts = grid(|b, s| 0.2 + b / s);
        let inv = Lwr::fit(&pts, &LwrConfig::INV_SMS_LOO).unwrap();
        let lin = Lwr::fit(
            &pts,
            &LwrConfig {
                features: LwrFeatures::BatchSms,
                span: Span::LeaveOneOut,
            },
        )
        .unwrap();
        assert!(loo_candidates(16).contains(&inv.span()));
        assert!(
            inv.loo_error_pct() < lin.loo_error_pct(),
            "{} vs {}",
            inv.loo_error_pct(),
            lin.loo_error_pct()
        );
        // The chosen span is the best candidate.
        let x: Vec<[f64; 2]> = pts
            .iter()
            .map(|&(b, s, _)| LwrFeatures::BatchInvSms.of(f64::from(b), f64::from(s)))
            .collect();
        let y: Vec<f64> = pts.iter().map(|p| p.2).collect();
        for f in loo_candidates(16) {
            let e = loo_error(LwrFeatures::BatchInvSms, &x, &y, inv.scale, f);
            assert!(e * 100.0 >= inv.loo_error_pct() - 1e-9);
        }
    }

    #[test]
    fn bad_inputs_are_refused_with_the_value() {
        let good = grid(|b, s| b + s);
        assert!(matches!(
            Lwr::fit(&good[..3], &LwrConfig::FAITHFUL),
            Err(FitError::TooFew { got: 3, .. })
        ));
        // One batch only: the points lie on a line.
        let one_batch: Vec<_> = good.iter().copied().filter(|p| p.0 == 4).collect();
        assert!(matches!(
            Lwr::fit(&one_batch, &LwrConfig::FAITHFUL),
            Err(FitError::Collinear { n: 4 })
        ));
        // Points on a diagonal line are collinear too.
        let diag = [(1, 10, 1.0), (2, 20, 2.0), (3, 30, 3.0), (4, 40, 4.0)];
        assert!(matches!(
            Lwr::fit(&diag, &LwrConfig::FAITHFUL),
            Err(FitError::Collinear { .. })
        ));
        let mut bad = good.clone();
        bad[5].2 = 0.0;
        let e = Lwr::fit(&bad, &LwrConfig::FAITHFUL).unwrap_err();
        assert!(matches!(e, FitError::NonPositive { index: 5, .. }), "{e:?}");
        let mut bad = good.clone();
        bad[2].1 = 0;
        assert!(matches!(
            Lwr::fit(&bad, &LwrConfig::FAITHFUL),
            Err(FitError::BadConfig {
                index: 2,
                sms: 0,
                ..
            })
        ));
        let e = Lwr::fit(
            &good,
            &LwrConfig {
                features: LwrFeatures::BatchSms,
                span: Span::Fixed(0.2),
            },
        )
        .unwrap_err();
        assert!(
            matches!(e, FitError::SpanTooSmall { q: 3, n: 16, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("0.2"), "{e}");
        assert!(matches!(
            Lwr::fit(
                &good,
                &LwrConfig {
                    features: LwrFeatures::BatchSms,
                    span: Span::Fixed(f64::NAN),
                }
            ),
            Err(FitError::BadSpan { .. })
        ));
    }

    #[test]
    fn tricube_weights_fall_to_zero_at_the_bandwidth() {
        assert_eq!(tricube(0.0), 1.0);
        // (1 − 0.125)³ = 0.669921875.
        assert!((tricube(0.5) - 0.669_921_875).abs() < 1e-15);
        assert_eq!(tricube(1.0), 0.0);
        assert_eq!(tricube(2.0), 0.0);
    }
}
