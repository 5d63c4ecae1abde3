//! Least squares: a line `y = α·x + β` (InSS §4.1's PCIe and utilisation
//! terms) and two non-negative coefficients without intercept (its
//! interference coefficients `α_cache`, `α_dram`).

use serde::{Deserialize, Serialize};

use super::error::FitError;

/// A fitted line `y = slope·x + intercept`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// `α`.
    pub slope: f64,
    /// `β`.
    pub intercept: f64,
}

impl Line {
    /// The zero line (`y = 0` everywhere).
    pub const ZERO: Line = Line {
        slope: 0.0,
        intercept: 0.0,
    };

    /// `slope·x + intercept`.
    pub fn at(&self, x: f64) -> f64 {
        self.slope * x + self.intercept
    }

    /// Ordinary least squares over `(x, y)` points: the line minimising
    /// `Σ (y − α·x − β)²`. `what` names the data in errors.
    ///
    /// Needs at least two points, every value finite, and at least two
    /// distinct `x` (otherwise the slope is not determined).
    pub fn fit(what: &'static str, points: &[(f64, f64)]) -> Result<Line, FitError> {
        check_finite(what, points.iter().flat_map(|&(x, y)| [x, y]))?;
        if points.len() < 2 {
            return Err(FitError::TooFew {
                what,
                got: points.len(),
                need: 2,
            });
        }
        let n = points.len() as f64;
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let lo = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let hi = points.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
        // x spread below 1e-12 of its magnitude is no spread.
        if hi - lo <= 1e-12 * hi.abs().max(lo.abs()) {
            return Err(FitError::NoSpread {
                what,
                x: points[0].0,
                n: points.len(),
            });
        }
        let slope = sxy / sxx;
        Ok(Line {
            slope,
            intercept: my - slope * mx,
        })
    }
}

/// `Err(NotFinite)` for the first non-finite value.
pub(crate) fn check_finite(
    what: &'static str,
    values: impl IntoIterator<Item = f64>,
) -> Result<(), FitError> {
    for (index, value) in values.into_iter().enumerate() {
        if !value.is_finite() {
            return Err(FitError::NotFinite { what, index, value });
        }
    }
    Ok(())
}

/// How one interference coefficient came out of its fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CoefStatus {
    /// The least-squares value, non-negative as it came.
    Fitted,
    /// Least squares wanted it negative (co-running made the model
    /// faster, or the other term explains more); held at 0 and the other
    /// coefficient refitted alone.
    ClampedAtZero,
    /// Its regressor is 0 in every observation (e.g. the device reports
    /// no L2 utilisation), or is proportional to the other one, so the
    /// data cannot determine it; set to 0.
    Degenerate,
    /// No co-run observation was given; set to 0.
    NoObservations,
}

/// One interference coefficient and how it was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Coef {
    /// The value (at least 0).
    pub value: f64,
    /// How it came out.
    pub status: CoefStatus,
}

impl Coef {
    /// 0 with the given status.
    pub const fn zero(status: CoefStatus) -> Coef {
        Coef { value: 0.0, status }
    }
}

/// Least squares for `y ≈ a·x0 + c·x1` with `a, c ≥ 0` and no intercept
/// (InSS §4.1: `t_c/o_r − 1 = α_cache·Σl + α_dram·Σe`), by enumerating the
/// active sets of the two-variable non-negative least-squares problem
/// (both free; only one; none) and keeping the feasible one with the
/// smallest residual. A regressor that is 0 in every row, or proportional
/// to the other one, makes its coefficient [`CoefStatus::Degenerate`].
///
/// Returns the two coefficients and the root-mean-square residual.
pub fn nonneg_2(
    what: &'static str,
    x: &[[f64; 2]],
    y: &[f64],
) -> Result<([Coef; 2], f64), FitError> {
    check_finite(what, x.iter().flat_map(|r| *r).chain(y.iter().copied()))?;
    if x.len() != y.len() {
        return Err(FitError::Mismatch {
            what,
            x: x.len(),
            y: y.len(),
        });
    }
    if x.is_empty() {
        return Ok((
            [
                Coef::zero(CoefStatus::NoObservations),
                Coef::zero(CoefStatus::NoObservations),
            ],
            0.0,
        ));
    }
    let s = |i: usize, j: usize| x.iter().map(|r| r[i] * r[j]).sum::<f64>();
    let sy = |i: usize| x.iter().zip(y).map(|(r, &v)| r[i] * v).sum::<f64>();
    let (a00, a11, a01) = (s(0, 0), s(1, 1), s(0, 1));
    let (b0, b1) = (sy(0), sy(1));
    let rms = |c: [f64; 2]| {
        (x.iter()
            .zip(y)
            .map(|(r, &v)| (v - c[0] * r[0] - c[1] * r[1]).powi(2))
            .sum::<f64>()
            / x.len() as f64)
            .sqrt()
    };
    let zero0 = a00 <= 0.0;
    let zero1 = a11 <= 0.0;
    // Cauchy–Schwarz: a01² ≤ a00·a11, equality when proportional.
    let det = a00 * a11 - a01 * a01;
    let collinear = !zero0 && !zero1 && det <= 1e-12 * a00 * a11;
    // One coefficient alone, clamped at 0.
    let single = |i: usize| -> (f64, CoefStatus) {
        let (aii, bi) = if i == 0 { (a00, b0) } else { (a11, b1) };
        let v = bi / aii;
        if v >= 0.0 {
            (v, CoefStatus::Fitted)
        } else {
            (0.0, CoefStatus::ClampedAtZero)
        }
    };
    let out = match (zero0, zero1) {
        (true, true) => [
            Coef::zero(CoefStatus::Degenerate),
            Coef::zero(CoefStatus::Degenerate),
        ],
        (true, false) => {
            let (v, st) = single(1);
            [
                Coef::zero(CoefStatus::Degenerate),
                Coef {
                    value: v,
                    status: st,
                },
            ]
        }
        (false, true) => {
            let (v, st) = single(0);
            [
                Coef {
                    value: v,
                    status: st,
                },
                Coef::zero(CoefStatus::Degenerate),
            ]
        }
        (false, false) if collinear => {
            // Only the sum along the common direction is determined: give
            // it to whichever regressor alone fits better.
            let (v0, s0) = single(0);
            let (v1, s1) = single(1);
            if rms([v0, 0.0]) <= rms([0.0, v1]) {
                [
                    Coef {
                        value: v0,
                        status: s0,
                    },
                    Coef::zero(CoefStatus::Degenerate),
                ]
            } else {
                [
                    Coef::zero(CoefStatus::Degenerate),
                    Coef {
                        value: v1,
                        status: s1,
                    },
                ]
            }
        }
        (false, false) => {
            let c0 = (b0 * a11 - b1 * a01) / det;
            let c1 = (b1 * a00 - b0 * a01) / det;
            if c0 >= 0.0 && c1 >= 0.0 {
                [
                    Coef {
                        value: c0,
                        status: CoefStatus::Fitted,
                    },
                    Coef {
                        value: c1,
                        status: CoefStatus::Fitted,
                    },
                ]
            } else {
                // The minimum lies on a face of the feasible quadrant: try
                // each axis (and the origin, which `single` covers by
                // clamping) and keep the smallest residual.
                let (v0, s0) = single(0);
                let (v1, s1) = single(1);
                if rms([v0, 0.0]) <= rms([0.0, v1]) {
                    [
                        Coef {
                            value: v0,
                            status: s0,
                        },
                        Coef::zero(CoefStatus::ClampedAtZero),
                    ]
                } else {
                    [
                        Coef::zero(CoefStatus::ClampedAtZero),
                        Coef {
                            value: v1,
                            status: s1,
                        },
                    ]
                }
            }
        }
    };
    let r = rms([out[0].value, out[1].value]);
    Ok((out, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_through_exact_points_is_recovered() {
        // y = 0.25 x + 1.5 at x = 1, 4, 16, 32 (hand-worked: 1.75, 2.5, 5.5, 9.5).
        let pts = [(1.0, 1.75), (4.0, 2.5), (16.0, 5.5), (32.0, 9.5)];
        let l = Line::fit("test", &pts).unwrap();
        assert!((l.slope - 0.25).abs() < 1e-12, "{l:?}");
        assert!((l.intercept - 1.5).abs() < 1e-12, "{l:?}");
        assert!((l.at(8.0) - 3.5).abs() < 1e-12);
    }

    #[test]
    fn a_line_through_noisy_points_is_the_least_squares_one() {
        // x = 0, 1, 2; y = 0, 2, 1: mean x 1, mean y 1, Sxx 2, Sxy 1,
        // slope 1/2, intercept 1/2.
        let l = Line::fit("test", &[(0.0, 0.0), (1.0, 2.0), (2.0, 1.0)]).unwrap();
        assert!((l.slope - 0.5).abs() < 1e-12 && (l.intercept - 0.5).abs() < 1e-12);
    }

    #[test]
    fn all_zero_data_fits_the_zero_line() {
        let l = Line::fit("test", &[(1.0, 0.0), (4.0, 0.0), (16.0, 0.0)]).unwrap();
        assert_eq!(l, Line::ZERO);
    }

    #[test]
    fn a_line_needs_two_points_and_two_distinct_x() {
        assert!(matches!(
            Line::fit("upload", &[]),
            Err(FitError::TooFew { got: 0, .. })
        ));
        assert!(matches!(
            Line::fit("upload", &[(1.0, 2.0)]),
            Err(FitError::TooFew { got: 1, .. })
        ));
        let e = Line::fit("upload", &[(4.0, 1.0), (4.0, 2.0)]).unwrap_err();
        assert!(matches!(e, FitError::NoSpread { n: 2, .. }), "{e:?}");
        assert!(e.to_string().contains("upload"), "{e}");
        let e = Line::fit("upload", &[(4.0, f64::NAN), (8.0, 2.0)]).unwrap_err();
        assert!(matches!(e, FitError::NotFinite { index: 1, .. }), "{e:?}");
    }

    #[test]
    fn nonneg_fit_recovers_exact_positive_coefficients() {
        // y = 0.2 x0 + 0.5 x1.
        let x = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.5]];
        let y: Vec<f64> = x.iter().map(|r| 0.2 * r[0] + 0.5 * r[1]).collect();
        let (c, rms) = nonneg_2("test", &x, &y).unwrap();
        assert!((c[0].value - 0.2).abs() < 1e-12, "{c:?}");
        assert!((c[1].value - 0.5).abs() < 1e-12, "{c:?}");
        assert_eq!(c[0].status, CoefStatus::Fitted);
        assert!(rms < 1e-12);
    }

    #[test]
    fn nonneg_fit_clamps_a_negative_coefficient_and_refits_the_other() {
        // y = −0.3 x0 + 0.4 x1 unconstrained; with x0 ⟂ x1 the constrained
        // optimum is (0, 0.4).
        let x = [[1.0, 0.0], [0.0, 1.0], [0.0, 2.0]];
        let y: Vec<f64> = x.iter().map(|r| -0.3 * r[0] + 0.4 * r[1]).collect();
        let (c, _) = nonneg_2("test", &x, &y).unwrap();
        assert_eq!(c[0], Coef::zero(CoefStatus::ClampedAtZero));
        assert!((c[1].value - 0.4).abs() < 1e-12, "{c:?}");
    }

    #[test]
    fn nonneg_fit_says_degenerate_for_an_all_zero_regressor() {
        // No L2 utilisation anywhere: α_cache is not determined.
        let x = [[0.0, 0.1], [0.0, 0.3], [0.0, 0.2]];
        let y = [0.01, 0.03, 0.02];
        let (c, _) = nonneg_2("test", &x, &y).unwrap();
        assert_eq!(c[0], Coef::zero(CoefStatus::Degenerate));
        assert!((c[1].value - 0.1).abs() < 1e-12, "{c:?}");
        let (c, rms) = nonneg_2("test", &[[0.0, 0.0]], &[0.0]).unwrap();
        assert_eq!(c[0].status, CoefStatus::Degenerate);
        assert_eq!(c[1].status, CoefStatus::Degenerate);
        assert_eq!(rms, 0.0);
        let (c, _) = nonneg_2("test", &[], &[]).unwrap();
        assert_eq!(c[0].status, CoefStatus::NoObservations);
    }

    #[test]
    fn nonneg_fit_of_proportional_regressors_keeps_one() {
        let x = [[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]];
        let y = [0.2, 0.4, 0.6];
        let (c, rms) = nonneg_2("test", &x, &y).unwrap();
        assert!(
            c.iter().any(|k| k.status == CoefStatus::Degenerate),
            "{c:?}"
        );
        assert!(rms < 1e-12, "{rms}");
    }

    #[test]
    fn nonneg_fit_refuses_mismatched_lengths() {
        assert!(matches!(
            nonneg_2("test", &[[1.0, 0.0]], &[]),
            Err(FitError::Mismatch { x: 1, y: 0, .. })
        ));
    }
}
