//! Operators that move values: transpose, concat, split, slice, gather,
//! pad, expand and resize.

use crate::error::{ShapeError, bail};
use crate::op::{CoordMode, NearestMode, PadMode, ResizeMode};
use crate::shape::SliceAxis;
use crate::{Data, Tensor};

/// Applies `f` to the values of either variant, giving data of the same variant.
macro_rules! per_variant {
    ($data:expr, |$v:ident| $body:expr) => {
        match $data {
            Data::F32($v) => Data::F32($body),
            Data::I64($v) => Data::I64($body),
        }
    };
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Calls `f(out_index, src_offset)` for every output element when output
/// axis `d` at index `i` reads source offset `maps[d][i]` (offsets add up).
fn gather_by_maps(out: &[usize], maps: &[Vec<usize>], mut f: impl FnMut(usize, usize)) {
    let n: usize = out.iter().product();
    if n == 0 {
        return;
    }
    let r = out.len();
    if r == 0 {
        f(0, 0);
        return;
    }
    let mut idx = vec![0usize; r];
    for o in 0..n {
        let off: usize = (0..r).map(|d| maps[d][idx[d]]).sum();
        f(o, off);
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn by_maps<T: Copy + Default>(src: &[T], out: &[usize], maps: &[Vec<usize>]) -> Vec<T> {
    let mut r = vec![T::default(); out.iter().product()];
    gather_by_maps(out, maps, |o, i| r[o] = src[i]);
    r
}

/// `Transpose` by `perm`.
pub(super) fn transpose(x: &Tensor, perm: &[usize]) -> Data {
    let st = strides(x.shape());
    let out: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let maps: Vec<Vec<usize>> = perm
        .iter()
        .map(|&p| (0..x.shape()[p]).map(|i| i * st[p]).collect())
        .collect();
    per_variant!(x.data(), |v| by_maps(v, &out, &maps))
}

/// `Concat` along `axis`.
pub(super) fn concat(ts: &[&Tensor], axis: usize) -> Data {
    let shape = ts[0].shape();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    macro_rules! cat {
        ($get:ident) => {{
            let mut out = Vec::new();
            for o in 0..outer {
                for t in ts {
                    let chunk = t.shape()[axis] * inner;
                    out.extend_from_slice(&t.$get().unwrap_or(&[])[o * chunk..(o + 1) * chunk]);
                }
            }
            out
        }};
    }
    if ts[0].dtype().is_float() {
        Data::F32(cat!(as_f32))
    } else {
        Data::I64(cat!(as_i64))
    }
}

/// `Split` along `axis` into parts of `sizes`.
pub(super) fn split(x: &Tensor, axis: usize, sizes: &[usize]) -> Result<Vec<Tensor>, ShapeError> {
    let shape = x.shape();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let full = shape[axis] * inner;
    let mut start = 0;
    let mut outs = Vec::with_capacity(sizes.len());
    for &s in sizes {
        let mut sh = shape.to_vec();
        sh[axis] = s;
        let (a, len) = (start * inner, s * inner);
        let data = per_variant!(x.data(), |v| (0..outer)
            .flat_map(|o| v[o * full + a..o * full + a + len].iter().copied())
            .collect());
        outs.push(Tensor::new(x.dtype(), sh, data)?);
        start += s;
    }
    Ok(outs)
}

/// `Slice` with resolved per-axis ranges.
pub(super) fn slice(x: &Tensor, axes: &[SliceAxis]) -> Data {
    let st = strides(x.shape());
    let out: Vec<usize> = axes.iter().map(|a| a.len).collect();
    let maps: Vec<Vec<usize>> = axes
        .iter()
        .enumerate()
        .map(|(d, a)| {
            (0..a.len)
                .map(|i| (a.start + i as i64 * a.step) as usize * st[d])
                .collect()
        })
        .collect();
    per_variant!(x.data(), |v| by_maps(v, &out, &maps))
}

/// `Expand` to `shape`.
pub(super) fn expand(x: &Tensor, shape: &[usize]) -> Data {
    crate::exec::elem::expand_data(x, shape)
}

/// `Gather` along `axis`.
pub(super) fn gather(x: &Tensor, idx: &Tensor, axis: usize) -> Result<Data, ShapeError> {
    let shape = x.shape();
    let d = shape[axis] as i64;
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut ix = Vec::with_capacity(idx.len());
    for i in idx.to_i64_vec() {
        if i < -d || i >= d {
            bail!("index {i} is out of range for axis {axis} of length {d}");
        }
        ix.push(if i < 0 { i + d } else { i } as usize);
    }
    Ok(per_variant!(x.data(), |v| {
        let mut out = Vec::with_capacity(outer * ix.len() * inner);
        for o in 0..outer {
            for &i in &ix {
                let s = (o * shape[axis] + i) * inner;
                out.extend_from_slice(&v[s..s + inner]);
            }
        }
        out
    }))
}

/// `Pad` with `pb` at the start of each axis to the output shape `out`.
pub(super) fn pad(
    x: &Tensor,
    pb: &[i64],
    out: &[usize],
    mode: PadMode,
    value: Option<&Tensor>,
) -> Data {
    let shape = x.shape();
    let st = strides(shape);
    // Per axis: source index for each output index, or None for the constant.
    let maps: Vec<Vec<Option<usize>>> = (0..shape.len())
        .map(|d| {
            let n = shape[d] as i64;
            (0..out[d] as i64)
                .map(|o| {
                    let i = o - pb[d];
                    let src = match mode {
                        _ if (0..n).contains(&i) => Some(i),
                        PadMode::Constant => None,
                        PadMode::Edge => Some(i.clamp(0, n - 1)),
                        PadMode::Reflect => {
                            let period = 2 * (n - 1);
                            if period == 0 {
                                Some(0)
                            } else {
                                let m = i.rem_euclid(period);
                                Some(if m < n { m } else { period - m })
                            }
                        }
                    };
                    src.map(|s| s as usize * st[d])
                })
                .collect()
        })
        .collect();
    let total: usize = out.iter().product();
    let r = out.len();
    macro_rules! fill {
        ($v:expr, $fillv:expr) => {{
            let v = $v;
            let mut res = vec![$fillv; total];
            let mut idx = vec![0usize; r];
            for slot in res.iter_mut() {
                let mut off = 0;
                let mut inside = true;
                for d in 0..r {
                    match maps[d][idx[d]] {
                        Some(s) => off += s,
                        None => inside = false,
                    }
                }
                if inside {
                    *slot = v[off];
                }
                for d in (0..r).rev() {
                    idx[d] += 1;
                    if idx[d] < out[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
            res
        }};
    }
    match x.data() {
        Data::F32(v) => Data::F32(fill!(v, value.map_or(0.0, |t| t.to_f32_vec()[0]))),
        Data::I64(v) => Data::I64(fill!(v, value.map_or(0, |t| t.to_i64_vec()[0]))),
    }
}

/// The input coordinate an output coordinate maps to.
fn source_coord(coord: CoordMode, o: usize, scale: f32, in_len: usize, out_len: usize) -> f64 {
    let (o, s) = (o as f64, f64::from(scale));
    match coord {
        CoordMode::HalfPixel => (o + 0.5) / s - 0.5,
        CoordMode::PytorchHalfPixel => {
            if out_len > 1 {
                (o + 0.5) / s - 0.5
            } else {
                0.0
            }
        }
        CoordMode::AlignCorners => {
            if out_len == 1 {
                0.0
            } else {
                o * (in_len as f64 - 1.0) / (out_len as f64 - 1.0)
            }
        }
        CoordMode::Asymmetric => o / s,
    }
}

/// `Resize` (nearest or linear) of every axis.
pub(super) fn resize(
    x: &[f32],
    shape: &[usize],
    out: &[usize],
    scales: &[f32],
    mode: ResizeMode,
    coord: CoordMode,
) -> Vec<f32> {
    let st = strides(shape);
    let r = shape.len();
    // Per axis and output index: (low offset, high offset, weight of high).
    let taps: Vec<Vec<(usize, usize, f32)>> = (0..r)
        .map(|d| {
            let n = shape[d];
            (0..out[d])
                .map(|o| {
                    if n == 0 {
                        return (0, 0, 0.0);
                    }
                    let c = source_coord(coord, o, scales[d], n, out[d]);
                    match mode {
                        ResizeMode::Nearest(nm) => {
                            let i = match nm {
                                NearestMode::RoundPreferFloor => {
                                    if c.fract() == 0.5 {
                                        c.floor()
                                    } else {
                                        c.round()
                                    }
                                }
                                NearestMode::RoundPreferCeil => c.round(),
                                NearestMode::Floor => c.floor(),
                                NearestMode::Ceil => c.ceil(),
                            };
                            let i = (i.max(0.0) as usize).min(n - 1);
                            (i * st[d], i * st[d], 0.0)
                        }
                        ResizeMode::Linear => {
                            let c = c.clamp(0.0, (n - 1) as f64);
                            let lo = c.floor() as usize;
                            let hi = (lo + 1).min(n - 1);
                            (lo * st[d], hi * st[d], (c - lo as f64) as f32)
                        }
                    }
                })
                .collect()
        })
        .collect();
    let active: Vec<usize> = (0..r)
        .filter(|&d| taps[d].iter().any(|t| t.2 != 0.0))
        .collect();
    let total: usize = out.iter().product();
    let mut res = vec![0.0f32; total];
    let mut idx = vec![0usize; r];
    for slot in res.iter_mut() {
        let base: usize = (0..r).map(|d| taps[d][idx[d]].0).sum();
        let mut acc = 0.0f32;
        for corner in 0..(1usize << active.len()) {
            let (mut off, mut w) = (base, 1.0f32);
            for (bit, &d) in active.iter().enumerate() {
                let (lo, hi, t) = taps[d][idx[d]];
                if corner >> bit & 1 == 1 {
                    off = off - lo + hi;
                    w *= t;
                } else {
                    w *= 1.0 - t;
                }
            }
            if w != 0.0 {
                acc += w * x[off];
            }
        }
        *slot = acc;
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    res
}
