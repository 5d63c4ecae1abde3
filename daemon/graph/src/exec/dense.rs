//! Convolution, pooling, GEMM and the per-channel operators.

use crate::Tensor;
use crate::error::{ShapeError, bail};
use crate::op::{Act, PoolKind, Window, apply_act};
use crate::shape::resolve_window;

/// Below this many multiply-adds a GEMM runs on the calling thread.
const PARALLEL_MIN_MACS: usize = 1 << 21;

/// A strided matrix view: element `(r, c)` at `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl Mat<'_> {
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// `c[m×n] (row-major, contiguous) = alpha · a[m×k] · b[k×n] (+ c when accumulate)`.
pub(super) fn sgemm(
    [m, n, k]: [usize; 3],
    a: Mat<'_>,
    b: Mat<'_>,
    c: &mut [f32],
    alpha: f32,
    accumulate: bool,
) {
    assert!(
        a.fits(m, k) && b.fits(k, n) && c.len() >= m * n,
        "gemm operands too small for {m}x{n}x{k}"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].fill(0.0);
        }
        return;
    }
    let par = if m.saturating_mul(n).saturating_mul(k) >= PARALLEL_MIN_MACS {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: `fits` checked above that every element the strides address
    // lies inside `a` and `b`, and `c` holds `m·n` contiguous elements
    // (row stride n, column stride 1). `c` is a unique borrow, so it aliases
    // neither input. gemm reads `dst` only when `read_dst` is true.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            par,
        );
    }
}

fn f32s(t: &Tensor) -> Result<&[f32], ShapeError> {
    match t.as_f32() {
        Some(v) => Ok(v),
        None => bail!("expected a floating tensor, got {}", t.dtype()),
    }
}

/// Spatial axes as two: 1-D windows run as 2-D with a height of 1.
fn as_2d(v: &[usize], one: usize) -> [usize; 2] {
    if v.len() == 1 {
        [one, v[0]]
    } else {
        [v[0], v[1]]
    }
}

/// `Conv` by im2col and GEMM, per image and group, with bias and activation.
pub(super) fn conv(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    window: &Window,
    group: usize,
    act: Act,
    out_shape: &[usize],
) -> Result<Vec<f32>, ShapeError> {
    let (xs, ws) = (x.shape(), w.shape());
    let r = resolve_window(window, &xs[2..], &ws[2..])?;
    let (n, c) = (xs[0], xs[1]);
    let [h, wd] = as_2d(&xs[2..], 1);
    let [kh, kw] = as_2d(&r.kernel, 1);
    let [sh, sw] = as_2d(&r.strides, 1);
    let [dh, dw] = as_2d(&r.dilations, 1);
    let [ph, pw] = as_2d(&r.pad_begin, 0);
    let [oh, ow] = as_2d(&r.out, 1);
    let m = ws[0];
    let (cg, mg) = (c / group, m / group);
    let kk = cg * kh * kw;
    let (xv, wv) = (f32s(x)?, f32s(w)?);
    let bias = b.map(f32s).transpose()?;
    let plane = oh * ow;
    let mut out = vec![0.0f32; out_shape.iter().product()];
    let pointwise =
        kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && oh == h && ow == wd;
    // im2col over at most IM2COL_FLOATS elements at a time: output positions
    // in chunks, so the workspace stays bounded whatever the shapes.
    let chunk = (IM2COL_FLOATS / kk.max(1)).clamp(1, plane.max(1));
    let mut col = if pointwise {
        Vec::new()
    } else {
        vec![0.0f32; kk * chunk]
    };
    let mut tmp = if pointwise || chunk == plane {
        Vec::new()
    } else {
        vec![0.0f32; mg * chunk]
    };
    for img in 0..n {
        for g in 0..group {
            let xin = &xv[(img * c + g * cg) * h * wd..(img * c + (g + 1) * cg) * h * wd];
            let wg = &wv[g * mg * kk..(g + 1) * mg * kk];
            let dst = &mut out[(img * m + g * mg) * plane..(img * m + (g + 1) * mg) * plane];
            if pointwise {
                sgemm(
                    [mg, plane, kk],
                    Mat {
                        data: wg,
                        rs: kk,
                        cs: 1,
                    },
                    Mat {
                        data: xin,
                        rs: plane,
                        cs: 1,
                    },
                    dst,
                    1.0,
                    false,
                );
            } else {
                let mut p0 = 0;
                while p0 < plane {
                    let np = chunk.min(plane - p0);
                    let cols = &mut col[..kk * np];
                    im2col(
                        xin,
                        cg,
                        [h, wd],
                        [kh, kw],
                        [sh, sw],
                        [dh, dw],
                        [ph, pw],
                        ow,
                        p0..p0 + np,
                        cols,
                    );
                    let whole = np == plane;
                    let target: &mut [f32] = if whole {
                        &mut *dst
                    } else {
                        &mut tmp[..mg * np]
                    };
                    sgemm(
                        [mg, np, kk],
                        Mat {
                            data: wg,
                            rs: kk,
                            cs: 1,
                        },
                        Mat {
                            data: cols,
                            rs: np,
                            cs: 1,
                        },
                        target,
                        1.0,
                        false,
                    );
                    if !whole {
                        for r in 0..mg {
                            dst[r * plane + p0..r * plane + p0 + np]
                                .copy_from_slice(&tmp[r * np..(r + 1) * np]);
                        }
                    }
                    p0 += np;
                }
            }
            for (j, row) in dst.chunks_mut(plane.max(1)).enumerate() {
                let bj = bias.map_or(0.0, |bv| bv[g * mg + j]);
                row.iter_mut().for_each(|v| *v = apply_act(act, *v + bj));
            }
        }
    }
    Ok(out)
}

/// Elements of the im2col workspace of one convolution chunk (16 MiB).
const IM2COL_FLOATS: usize = 1 << 22;

/// The im2col columns of output positions `ps` (row-major over the
/// `ow`-wide output plane) into `col[kk, ps.len()]`.
#[allow(clippy::too_many_arguments)]
fn im2col(
    x: &[f32],
    c: usize,
    [h, w]: [usize; 2],
    [kh, kw]: [usize; 2],
    [sh, sw]: [usize; 2],
    [dh, dw]: [usize; 2],
    [ph, pw]: [usize; 2],
    ow: usize,
    ps: std::ops::Range<usize>,
    col: &mut [f32],
) {
    let np = ps.len();
    for ci in 0..c {
        for ki in 0..kh {
            for kj in 0..kw {
                let row = &mut col[((ci * kh + ki) * kw + kj) * np..][..np];
                for (d, p) in row.iter_mut().zip(ps.clone()) {
                    let (oy, ox) = (p / ow, p % ow);
                    let iy = (oy * sh + ki * dh) as i128 - ph as i128;
                    let ix = (ox * sw + kj * dw) as i128 - pw as i128;
                    *d = if iy < 0 || ix < 0 || iy >= h as i128 || ix >= w as i128 {
                        0.0
                    } else {
                        x[(ci * h + iy as usize) * w + ix as usize]
                    };
                }
            }
        }
    }
}

/// `BatchNormalization` in inference form.
pub(super) fn batchnorm(x: &Tensor, p: [&Tensor; 4], eps: f32) -> Vec<f32> {
    let xs = x.shape();
    let c = xs[1];
    let inner: usize = xs[2..].iter().product();
    let pv: Vec<Vec<f32>> = p.iter().map(|t| t.to_f32_vec()).collect();
    let xv = x.to_f32_vec();
    let mut out = xv;
    for (i, chunk) in out.chunks_mut(inner.max(1)).enumerate() {
        let ch = i % c;
        let k = pv[0][ch] / (pv[3][ch] + eps).sqrt();
        let off = pv[1][ch] - pv[2][ch] * k;
        chunk.iter_mut().for_each(|v| *v = *v * k + off);
    }
    out
}

/// `MaxPool` / `AveragePool`.
pub(super) fn pool(
    x: &Tensor,
    kind: PoolKind,
    window: &Window,
    out_shape: &[usize],
) -> Result<Vec<f32>, ShapeError> {
    let xs = x.shape();
    let r = resolve_window(window, &xs[2..], &[])?;
    let [h, w] = as_2d(&xs[2..], 1);
    let [kh, kw] = as_2d(&r.kernel, 1);
    let [sh, sw] = as_2d(&r.strides, 1);
    let [dh, dw] = as_2d(&r.dilations, 1);
    let [ph, pw] = as_2d(&r.pad_begin, 0);
    let [peh, pew] = as_2d(&r.pad_end, 0);
    let [oh, ow] = as_2d(&r.out, 1);
    let xv = f32s(x)?;
    let planes = xs[0] * xs[1];
    let mut out = vec![0.0f32; out_shape.iter().product()];
    for p in 0..planes {
        let src = &xv[p * h * w..(p + 1) * h * w];
        let dst = &mut out[p * oh * ow..(p + 1) * oh * ow];
        for oy in 0..oh {
            for ox in 0..ow {
                let (mut best, mut sum, mut cnt, mut padded) =
                    (f32::NEG_INFINITY, 0.0f64, 0usize, 0usize);
                for ki in 0..kh {
                    let iy = (oy * sh + ki * dh) as i128 - ph as i128;
                    for kj in 0..kw {
                        let ix = (ox * sw + kj * dw) as i128 - pw as i128;
                        if iy < 0 || ix < 0 || iy >= h as i128 || ix >= w as i128 {
                            // Inside the declared padding counts for count_include_pad;
                            // beyond it (ceil_mode's extra window) never does.
                            if iy < (h + peh) as i128 && ix < (w + pew) as i128 {
                                padded += 1;
                            }
                            continue;
                        }
                        let v = src[iy as usize * w + ix as usize];
                        best = best.max(v);
                        sum += f64::from(v);
                        cnt += 1;
                    }
                }
                dst[oy * ow + ox] = match kind {
                    PoolKind::Max => best,
                    PoolKind::Avg(include) => {
                        let d = if include { cnt + padded } else { cnt };
                        if d == 0 { 0.0 } else { (sum / d as f64) as f32 }
                    }
                };
            }
        }
    }
    Ok(out)
}

/// `GlobalAveragePool`.
pub(super) fn global_avgpool(x: &Tensor) -> Vec<f32> {
    let xs = x.shape();
    let inner: usize = xs[2..].iter().product();
    let xv = x.to_f32_vec();
    xv.chunks(inner.max(1))
        .map(|c| (c.iter().map(|&v| f64::from(v)).sum::<f64>() / inner.max(1) as f64) as f32)
        .collect()
}

/// `LRN` across channels.
pub(super) fn lrn(x: &Tensor, size: usize, alpha: f32, beta: f32, bias: f32) -> Vec<f32> {
    let xs = x.shape();
    let (n, c) = (xs[0], xs[1]);
    let inner: usize = xs[2..].iter().product();
    let xv = x.to_f32_vec();
    let mut out = vec![0.0f32; xv.len()];
    let lo = (size - 1) / 2;
    let hi = (size - 1).div_ceil(2);
    for img in 0..n {
        for ch in 0..c {
            let (c0, c1) = (ch.saturating_sub(lo), ch.saturating_add(hi).min(c - 1));
            for i in 0..inner {
                let mut sq = 0.0f64;
                for k in c0..=c1 {
                    let v = f64::from(xv[(img * c + k) * inner + i]);
                    sq += v * v;
                }
                let idx = (img * c + ch) * inner + i;
                let d =
                    (f64::from(bias) + f64::from(alpha) / size as f64 * sq).powf(f64::from(beta));
                out[idx] = (f64::from(xv[idx]) / d) as f32;
            }
        }
    }
    out
}

/// `Gemm`.
pub(super) fn gemm_op(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    (ta, tb): (bool, bool),
    (alpha, beta): (f32, f32),
    act: Act,
    out_shape: &[usize],
) -> Result<Vec<f32>, ShapeError> {
    let (m, n) = (out_shape[0], out_shape[1]);
    let k = if ta { a.shape()[0] } else { a.shape()[1] };
    let (av, bv) = (f32s(a)?, f32s(b)?);
    let am = if ta {
        Mat {
            data: av,
            rs: 1,
            cs: m,
        }
    } else {
        Mat {
            data: av,
            rs: k,
            cs: 1,
        }
    };
    let bm = if tb {
        Mat {
            data: bv,
            rs: 1,
            cs: k,
        }
    } else {
        Mat {
            data: bv,
            rs: n,
            cs: 1,
        }
    };
    let mut out = match c {
        Some(ct) if beta != 0.0 => {
            let cv = crate::exec::elem::broadcast_to(ct, &[m, n]);
            cv.into_iter().map(|v| v * beta).collect()
        }
        _ => vec![0.0f32; m * n],
    };
    let acc = c.is_some() && beta != 0.0;
    sgemm([m, n, k], am, bm, &mut out, alpha, acc);
    if act.is_some() {
        out.iter_mut().for_each(|v| *v = apply_act(act, *v));
    }
    Ok(out)
}

/// numpy `matmul`, batched with broadcasting.
pub(super) fn matmul(a: &Tensor, b: &Tensor, out_shape: &[usize]) -> Result<Vec<f32>, ShapeError> {
    let (av, bv) = (f32s(a)?, f32s(b)?);
    let a2: Vec<usize> = if a.shape().len() == 1 {
        vec![1, a.shape()[0]]
    } else {
        a.shape().to_vec()
    };
    let b2: Vec<usize> = if b.shape().len() == 1 {
        vec![b.shape()[0], 1]
    } else {
        b.shape().to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let n = b2[b2.len() - 1];
    let batch = crate::shape::broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2])?;
    let nb: usize = batch.iter().product();
    let mut out = vec![0.0f32; out_shape.iter().product()];
    let a_idx = batch_offsets(&a2[..a2.len() - 2], &batch);
    let b_idx = batch_offsets(&b2[..b2.len() - 2], &batch);
    for i in 0..nb {
        let asl = &av[a_idx[i] * m * k..][..m * k];
        let bsl = &bv[b_idx[i] * k * n..][..k * n];
        sgemm(
            [m, n, k],
            Mat {
                data: asl,
                rs: k,
                cs: 1,
            },
            Mat {
                data: bsl,
                rs: n,
                cs: 1,
            },
            &mut out[i * m * n..(i + 1) * m * n],
            1.0,
            false,
        );
    }
    Ok(out)
}

/// For each index of the broadcast batch shape `out`, the matrix index in
/// an operand of batch shape `src`.
fn batch_offsets(src: &[usize], out: &[usize]) -> Vec<usize> {
    let n: usize = out.iter().product();
    let strides = crate::exec::elem::bcast_strides(src, out);
    (0..n)
        .map(|mut i| {
            let mut off = 0;
            for d in (0..out.len()).rev() {
                off += (i % out[d]) * strides[d];
                i /= out[d];
            }
            off
        })
        .collect()
}
