//! The CPU reference executor: every operator on plain row-major tensors.
//!
//! It is the correctness oracle the other backends are checked against,
//! and what constant folding evaluates. Floating operators compute in f32
//! (reductions accumulate in f64) and round results to the output's type.

mod dense;
mod elem;
mod layout;
mod norm;

use crate::error::{ShapeError, bail};
use crate::op::Op;
use crate::shape::{Info, infer};
use crate::{Data, Tensor};

/// Evaluates one operator on known inputs, giving `n_out` outputs.
pub fn eval(op: &Op, ins: &[Option<&Tensor>], n_out: usize) -> Result<Vec<Tensor>, ShapeError> {
    let infos: Vec<Option<Info<'_>>> = ins
        .iter()
        .map(|t| {
            t.map(|t| Info {
                dtype: t.dtype(),
                shape: t.shape(),
                value: Some(t),
            })
        })
        .collect();
    let outs = infer(op, &infos, n_out)?;
    if outs.is_empty() {
        bail!("the node has no outputs");
    }
    let x = |i: usize| -> Result<&Tensor, ShapeError> {
        match ins.get(i).copied().flatten() {
            Some(t) => Ok(t),
            None => bail!("input {i} is required"),
        }
    };
    let o = &outs[0];
    let one = |data: Data| -> Result<Vec<Tensor>, ShapeError> {
        Ok(vec![Tensor::new(o.0, o.1.clone(), data)?])
    };
    let f32s = |t: &Tensor| -> Result<Vec<f32>, ShapeError> {
        match t.as_f32() {
            Some(v) => Ok(v.to_vec()),
            None => bail!("expected a floating tensor, got {}", t.dtype()),
        }
    };
    match op {
        Op::Conv { window, group, act } => one(Data::F32(dense::conv(
            x(0)?,
            x(1)?,
            ins.get(2).copied().flatten(),
            window,
            *group,
            *act,
            &o.1,
        )?)),
        Op::BatchNorm { eps } => one(Data::F32(dense::batchnorm(
            x(0)?,
            [x(1)?, x(2)?, x(3)?, x(4)?],
            *eps,
        ))),
        Op::Unary(u) => match x(0)?.data() {
            Data::F32(v) => one(Data::F32(v.iter().map(|&a| u.apply(a)).collect())),
            Data::I64(v) => one(Data::I64(
                v.iter().map(|&a| elem::unary_i64(*u, a)).collect(),
            )),
        },
        Op::Clip => elem::clip(
            x(0)?,
            ins.get(1).copied().flatten(),
            ins.get(2).copied().flatten(),
        )
        .map(|t| vec![t]),
        Op::Binary(b, act) => one(elem::binary(*b, *act, x(0)?, x(1)?, &o.1)),
        Op::Sum => {
            let mut acc = x(0)?.clone();
            for i in 1..ins.len() {
                let next = x(i)?;
                let shape = crate::shape::broadcast(acc.shape(), next.shape())?;
                let data = elem::binary(crate::BinOp::Add, None, &acc, next, &shape);
                acc = Tensor::new(o.0, shape, data)?;
            }
            Ok(vec![acc])
        }
        Op::Where => one(elem::where_(x(0)?, x(1)?, x(2)?, &o.1)),
        Op::Softmax {
            axis,
            log,
            coerce_2d,
        } => one(Data::F32(norm::softmax(x(0)?, *axis, *log, *coerce_2d)?)),
        Op::Pool { kind, window } => one(Data::F32(dense::pool(x(0)?, *kind, window, &o.1)?)),
        Op::GlobalAveragePool => one(Data::F32(dense::global_avgpool(x(0)?))),
        Op::Lrn {
            size,
            alpha,
            beta,
            bias,
        } => one(Data::F32(dense::lrn(x(0)?, *size, *alpha, *beta, *bias))),
        Op::Gemm {
            trans_a,
            trans_b,
            alpha,
            beta,
            act,
        } => one(Data::F32(dense::gemm_op(
            x(0)?,
            x(1)?,
            ins.get(2).copied().flatten(),
            (*trans_a, *trans_b),
            (*alpha, *beta),
            *act,
            &o.1,
        )?)),
        Op::MatMul => one(Data::F32(dense::matmul(x(0)?, x(1)?, &o.1)?)),
        Op::Flatten { .. } | Op::Reshape { .. } | Op::Squeeze | Op::Unsqueeze | Op::Identity => {
            Ok(vec![x(0)?.clone().reshaped(o.1.clone())?])
        }
        Op::Transpose { perm } => {
            let p = crate::shape::perm_of(perm.as_deref(), x(0)?.shape().len())?;
            one(layout::transpose(x(0)?, &p))
        }
        Op::Concat { axis } => {
            let ts = (0..ins.len()).map(x).collect::<Result<Vec<_>, _>>()?;
            let ax = crate::shape::norm_axis(*axis, ts[0].shape().len())?;
            one(layout::concat(&ts, ax))
        }
        Op::Split { axis } => {
            let t = x(0)?;
            let ax = crate::shape::norm_axis(*axis, t.shape().len())?;
            let sizes: Vec<usize> = outs.iter().map(|(_, s)| s[ax]).collect();
            layout::split(t, ax, &sizes)
        }
        Op::Slice => {
            let t = x(0)?;
            let v = |i: usize| ins.get(i).copied().flatten().map(Tensor::to_i64_vec);
            let axes = v(3);
            let steps = v(4);
            let s = crate::shape::slice_axes(
                t.shape(),
                &x(1)?.to_i64_vec(),
                &x(2)?.to_i64_vec(),
                axes.as_deref(),
                steps.as_deref(),
            )?;
            one(layout::slice(t, &s))
        }
        Op::Expand => one(layout::expand(x(0)?, &o.1)),
        Op::Gather { axis } => {
            let t = x(0)?;
            let ax = crate::shape::norm_axis(*axis, t.shape().len())?;
            one(layout::gather(t, x(1)?, ax)?)
        }
        Op::Pad { mode } => {
            let t = x(0)?;
            let axes = ins.get(3).copied().flatten().map(Tensor::to_i64_vec);
            let (pb, _) =
                crate::shape::pad_amounts(t.shape().len(), &x(1)?.to_i64_vec(), axes.as_deref())?;
            let value = ins.get(2).copied().flatten().filter(|v| !v.is_empty());
            one(layout::pad(t, &pb, &o.1, *mode, value))
        }
        Op::Resize {
            mode,
            coord,
            axes,
            aspect,
        } => {
            let t = x(0)?;
            let scales = ins.get(2).copied().flatten().map(Tensor::to_f32_vec);
            let sizes = ins.get(3).copied().flatten().map(Tensor::to_i64_vec);
            let (_, sc) = crate::shape::resize_target(
                t.shape(),
                scales.as_deref(),
                sizes.as_deref(),
                axes.as_deref(),
                *aspect,
            )?;
            one(Data::F32(layout::resize(
                &f32s(t)?,
                t.shape(),
                &o.1,
                &sc,
                *mode,
                *coord,
            )))
        }
        Op::LayerNorm { axis, eps } => {
            let t = x(0)?;
            let ax = crate::shape::norm_axis(*axis, t.shape().len())?;
            one(Data::F32(norm::layernorm(
                t,
                x(1)?,
                ins.get(2).copied().flatten(),
                ax,
                *eps,
            )?))
        }
        Op::ReduceMean {
            noop_with_empty_axes,
            ..
        } => {
            let t = x(0)?;
            let axes = crate::shape::reduce_axes(
                t.shape().len(),
                ins.get(1).copied().flatten().map(Tensor::to_i64_vec),
                *noop_with_empty_axes,
            )?;
            one(Data::F32(norm::reduce_mean(&f32s(t)?, t.shape(), &axes)))
        }
        Op::Cast { to } => Ok(vec![x(0)?.cast(*to)]),
        Op::Shape { start, end } => {
            let t = x(0)?;
            let (s, e) = crate::shape::shape_range(t.shape().len(), *start, *end);
            let dims = t.shape()[s..e.max(s)].iter().map(|&d| d as i64).collect();
            Ok(vec![Tensor::i64_vec(dims)])
        }
        Op::ConstantOfShape { value } => {
            let n = o.1.iter().product::<usize>();
            let data = match value.data() {
                Data::F32(v) => Data::F32(vec![v.first().copied().unwrap_or(0.0); n]),
                Data::I64(v) => Data::I64(vec![v.first().copied().unwrap_or(0); n]),
            };
            one(data)
        }
    }
}
