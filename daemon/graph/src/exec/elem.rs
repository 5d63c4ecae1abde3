//! Element-wise operators with numpy broadcasting.

use crate::error::ShapeError;
use crate::op::{Act, BinOp, Unary, apply_act};
use crate::{Data, Tensor};

/// Strides of a tensor of shape `src` read as the broadcast shape `out`
/// (0 along broadcast axes).
pub(super) fn bcast_strides(src: &[usize], out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let mut strides = vec![0; r];
    let mut acc = 1;
    for i in (0..src.len()).rev() {
        let o = i + r - src.len();
        strides[o] = if src[i] == 1 { 0 } else { acc };
        acc *= src[i];
    }
    strides
}

/// Calls `f(out_index, [offset in each input])` for every element of
/// `out`, in order, for inputs of shapes `srcs` broadcast to it.
fn for_each_bcast<const K: usize>(
    out: &[usize],
    srcs: [&[usize]; K],
    mut f: impl FnMut(usize, [usize; K]),
) {
    let n: usize = out.iter().product();
    if n == 0 {
        return;
    }
    let strides: Vec<Vec<usize>> = srcs.iter().map(|s| bcast_strides(s, out)).collect();
    let r = out.len();
    if r == 0 {
        f(0, [0; K]);
        return;
    }
    let inner = out[r - 1];
    let inner_st: [usize; K] = std::array::from_fn(|k| strides[k][r - 1]);
    let mut idx = vec![0usize; r];
    let mut base = [0usize; K];
    let mut o = 0;
    loop {
        for i in 0..inner {
            f(o + i, std::array::from_fn(|k| base[k] + i * inner_st[k]));
        }
        o += inner;
        if o >= n {
            break;
        }
        // Advance the outer multi-index (axes r-2 .. 0).
        let mut d = r - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            for k in 0..K {
                base[k] += strides[k][d];
            }
            if idx[d] < out[d] {
                break;
            }
            for k in 0..K {
                base[k] -= strides[k][d] * out[d];
            }
            idx[d] = 0;
        }
    }
}

/// `t`'s values broadcast to `shape`, as floats.
pub(super) fn broadcast_to(t: &Tensor, shape: &[usize]) -> Vec<f32> {
    let v = t.to_f32_vec();
    let mut out = vec![0.0; shape.iter().product()];
    for_each_bcast(shape, [t.shape()], |o, [i]| out[o] = v[i]);
    out
}

/// Broadcasts any tensor's values to `shape`.
pub(super) fn expand_data(t: &Tensor, shape: &[usize]) -> Data {
    let n = shape.iter().product();
    match t.data() {
        Data::F32(v) => {
            let mut out = vec![0.0; n];
            for_each_bcast(shape, [t.shape()], |o, [i]| out[o] = v[i]);
            Data::F32(out)
        }
        Data::I64(v) => {
            let mut out = vec![0; n];
            for_each_bcast(shape, [t.shape()], |o, [i]| out[o] = v[i]);
            Data::I64(out)
        }
    }
}

/// Integer forms of the unary operators that have one.
pub(super) fn unary_i64(u: Unary, a: i64) -> i64 {
    match u {
        Unary::Neg => a.wrapping_neg(),
        Unary::Abs => a.wrapping_abs(),
        Unary::Relu => a.max(0),
        _ => a,
    }
}

/// A broadcasting binary operator, then the fused activation.
pub(super) fn binary(op: BinOp, act: Act, a: &Tensor, b: &Tensor, out: &[usize]) -> Data {
    let n: usize = out.iter().product();
    match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => {
            let mut r = vec![0.0f32; n];
            if a.shape() == out && b.shape() == out {
                for i in 0..n {
                    r[i] = apply_act(act, op.apply_f32(x[i], y[i]));
                }
            } else {
                for_each_bcast(out, [a.shape(), b.shape()], |o, [i, j]| {
                    r[o] = apply_act(act, op.apply_f32(x[i], y[j]))
                });
            }
            Data::F32(r)
        }
        (Data::F32(x), Data::I64(y)) => {
            let mut r = vec![0.0f32; n];
            for_each_bcast(out, [a.shape(), b.shape()], |o, [i, j]| {
                r[o] = apply_act(act, op.apply_f32(x[i], y[j] as f32))
            });
            Data::F32(r)
        }
        (Data::I64(x), Data::I64(y)) => {
            let mut r = vec![0i64; n];
            let act_i = |v: i64| act.map_or(v, |u| unary_i64(u, v));
            for_each_bcast(out, [a.shape(), b.shape()], |o, [i, j]| {
                r[o] = act_i(op.apply_i64(x[i], y[j]))
            });
            Data::I64(r)
        }
        (Data::I64(x), Data::F32(y)) => {
            let mut r = vec![0i64; n];
            for_each_bcast(out, [a.shape(), b.shape()], |o, [i, j]| {
                r[o] = op.apply_f32(x[i] as f32, y[j]) as i64
            });
            Data::I64(r)
        }
    }
}

/// `Where(cond, x, y)`.
pub(super) fn where_(c: &Tensor, x: &Tensor, y: &Tensor, out: &[usize]) -> Data {
    let n: usize = out.iter().product();
    let cv = c.to_i64_vec();
    match (x.data(), y.data()) {
        (Data::F32(xv), Data::F32(yv)) => {
            let mut r = vec![0.0; n];
            for_each_bcast(out, [c.shape(), x.shape(), y.shape()], |o, [i, j, k]| {
                r[o] = if cv[i] != 0 { xv[j] } else { yv[k] }
            });
            Data::F32(r)
        }
        _ => {
            let (xv, yv) = (x.to_i64_vec(), y.to_i64_vec());
            let mut r = vec![0; n];
            for_each_bcast(out, [c.shape(), x.shape(), y.shape()], |o, [i, j, k]| {
                r[o] = if cv[i] != 0 { xv[j] } else { yv[k] }
            });
            Data::I64(r)
        }
    }
}

/// `Clip(x, min?, max?)`.
pub(super) fn clip(
    x: &Tensor,
    lo: Option<&Tensor>,
    hi: Option<&Tensor>,
) -> Result<Tensor, ShapeError> {
    let first = |t: Option<&Tensor>| t.filter(|t| !t.is_empty()).map(|t| t.to_f32_vec()[0]);
    let (l, h) = (first(lo), first(hi));
    let data = match x.data() {
        Data::F32(v) => {
            let (l, h) = (l.unwrap_or(f32::NEG_INFINITY), h.unwrap_or(f32::INFINITY));
            Data::F32(v.iter().map(|&a| a.max(l).min(h)).collect())
        }
        Data::I64(v) => {
            let (l, h) = (
                l.map_or(i64::MIN, |x| x as i64),
                h.map_or(i64::MAX, |x| x as i64),
            );
            Data::I64(v.iter().map(|&a| a.max(l).min(h)).collect())
        }
    };
    Tensor::new(x.dtype(), x.shape().to_vec(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_walk_matches_naive() {
        let a = Tensor::f32(vec![2, 3, 4], (0..24).map(|x| x as f32).collect()).unwrap();
        let b = Tensor::f32(vec![3, 1], vec![100.0, 200.0, 300.0]).unwrap();
        let Data::F32(r) = binary(BinOp::Add, None, &a, &b, &[2, 3, 4]) else {
            panic!()
        };
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    let idx = (i * 3 + j) * 4 + k;
                    assert_eq!(r[idx], idx as f32 + 100.0 * (j + 1) as f32);
                }
            }
        }
        let s = Tensor::scalar_f32(2.0);
        let Data::F32(r) = binary(BinOp::Mul, None, &s, &a, &[2, 3, 4]) else {
            panic!()
        };
        assert_eq!(r[23], 46.0);
    }
}
