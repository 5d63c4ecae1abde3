//! Softmax, layer normalisation and mean reduction.

use crate::Tensor;
use crate::error::{ShapeError, bail};
use crate::shape::norm_axis;

/// `Softmax` / `LogSoftmax` along `axis` (before opset 13: over the 2-D
/// view `[d0·…·d(axis−1), d(axis)·…]`).
pub(super) fn softmax(
    x: &Tensor,
    axis: i64,
    log: bool,
    coerce_2d: bool,
) -> Result<Vec<f32>, ShapeError> {
    let Some(v) = x.as_f32() else {
        bail!("expected a floating tensor, got {}", x.dtype())
    };
    let shape = if x.shape().is_empty() {
        &[1][..]
    } else {
        x.shape()
    };
    let ax = norm_axis(axis, shape.len())?;
    let (outer, len, inner) = if coerce_2d {
        (
            shape[..ax].iter().product::<usize>(),
            shape[ax..].iter().product::<usize>(),
            1,
        )
    } else {
        (
            shape[..ax].iter().product(),
            shape[ax],
            shape[ax + 1..].iter().product(),
        )
    };
    let mut out = vec![0.0f32; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * len + k) * inner + i;
            let max = (0..len).map(|k| v[at(k)]).fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = (0..len).map(|k| f64::from(v[at(k)] - max).exp()).sum();
            for k in 0..len {
                let e = f64::from(v[at(k)] - max);
                out[at(k)] = if log {
                    (e - sum.ln()) as f32
                } else {
                    (e.exp() / sum) as f32
                };
            }
        }
    }
    Ok(out)
}

/// `LayerNormalization` over the axes from `axis` on.
pub(super) fn layernorm(
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
    axis: usize,
    eps: f32,
) -> Result<Vec<f32>, ShapeError> {
    let Some(v) = x.as_f32() else {
        bail!("expected a floating tensor, got {}", x.dtype())
    };
    let norm = &x.shape()[axis..];
    let inner: usize = norm.iter().product();
    let sc = crate::exec::elem::broadcast_to(scale, norm);
    let bs = bias.map(|b| crate::exec::elem::broadcast_to(b, norm));
    let mut out = vec![0.0f32; v.len()];
    for (row, dst) in v.chunks(inner.max(1)).zip(out.chunks_mut(inner.max(1))) {
        let mean = row.iter().map(|&a| f64::from(a)).sum::<f64>() / inner as f64;
        let var = row
            .iter()
            .map(|&a| (f64::from(a) - mean).powi(2))
            .sum::<f64>()
            / inner as f64;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        for k in 0..row.len() {
            let y = (f64::from(row[k]) - mean) * inv * f64::from(sc[k]);
            dst[k] = (y + bs.as_ref().map_or(0.0, |b| f64::from(b[k]))) as f32;
        }
    }
    Ok(out)
}

/// `ReduceMean` over `axes` (the output's layout does not depend on keepdims).
pub(super) fn reduce_mean(v: &[f32], shape: &[usize], axes: &[usize]) -> Vec<f32> {
    let r = shape.len();
    let out_shape: Vec<usize> = (0..r)
        .map(|d| if axes.contains(&d) { 1 } else { shape[d] })
        .collect();
    let n_out: usize = out_shape.iter().product();
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let mut acc = vec![0.0f64; n_out];
    let mut ost = vec![1usize; r];
    for d in (0..r.saturating_sub(1)).rev() {
        ost[d] = ost[d + 1] * out_shape[d + 1];
    }
    let mut idx = vec![0usize; r];
    for &x in v {
        let o: usize = (0..r)
            .map(|d| {
                if axes.contains(&d) {
                    0
                } else {
                    idx[d] * ost[d]
                }
            })
            .sum();
        acc[o] += f64::from(x);
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    acc.into_iter()
        .map(|s| {
            if count == 0 {
                f32::NAN
            } else {
                (s / count as f64) as f32
            }
        })
        .collect()
}
