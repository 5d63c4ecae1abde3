//! An imported graph ([`sluice_graph::Static`] at batch 1) lowered to a
//! [`Plan`] of the sluice CUDA kernel library, with the graph's own weights.
//!
//! What the kernel library runs today, and so what lowers: 2-D `Conv`
//! (one group, square kernel, one stride and one padding on every side, no
//! dilation) with bias and a ReLU or tanh-GELU; `Gemm` (A not transposed,
//! alpha and beta 1, a constant B, which is transposed here when the node
//! says `transB`, and a constant bias row) and `MatMul` of a matrix by a
//! constant matrix; square `MaxPool` / `AveragePool` (padding not counted,
//! no `ceil_mode`); `GlobalAveragePool`; `Add` / two-input `Sum` of equal
//! shapes (with a fused ReLU); `Relu` and tanh-`Gelu`; `Softmax` over the
//! last axis (or the 2-D view before opset 13); `LayerNormalization` over
//! the last axis; and the operators that only rename memory (`Reshape`,
//! `Flatten`, `Squeeze`, `Unsqueeze`, `Identity`). Anything else is refused
//! with the node and the reason ([`LowerError`]), so a model runs on the
//! device entirely or not at all. One graph input and one graph output,
//! both f32.

use std::collections::HashMap;

use sluice_graph::{BinOp, Op, PoolKind, Static, Unary, ValueId};

use super::{
    Act, BuildError, Conv2dShape, EltwiseOp, GemmShape, GlobalPoolShape, Plan, PlanBuilder,
    Pool2dShape, PoolMode, Role, RowsShape, TensorRef, Weights,
};

/// A graph the kernel library cannot run (yet).
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// A node has no kernel of the library.
    #[error("node '{node}' ({op}) has no kernel in the sluice CUDA library: {why}")]
    Node {
        /// The node.
        node: String,
        /// Its operator.
        op: &'static str,
        /// What does not fit.
        why: String,
    },
    /// The graph's interface does not fit a plan (one f32 input, one output).
    #[error("the model cannot run on the CUDA kernel library: {0}")]
    Interface(String),
    /// The plan the lowering built was refused by its own checks.
    #[error("the lowered plan is invalid")]
    Plan(#[source] Box<BuildError>),
}

fn node_err(n: &sluice_graph::Node, why: impl Into<String>) -> LowerError {
    LowerError::Node {
        node: n.name.clone(),
        op: n.op.name(),
        why: why.into(),
    }
}

fn act_of(n: &sluice_graph::Node, a: sluice_graph::Act) -> Result<Act, LowerError> {
    match a {
        None => Ok(Act::None),
        Some(Unary::Relu) => Ok(Act::Relu),
        Some(Unary::GeluTanh) => Ok(Act::Gelu),
        Some(u) => Err(node_err(
            n,
            format!(
                "the fused activation {} is not one the kernels apply (ReLU, tanh-GELU)",
                u.name()
            ),
        )),
    }
}

/// Lowers `s` (which must be at batch 1) to a plan and its weights.
pub fn lower(s: &Static, name: &str) -> Result<(Plan, Weights), LowerError> {
    if s.batch() != 1 {
        return Err(LowerError::Interface(format!(
            "the kernels take batch 1; this graph is at batch {}",
            s.batch()
        )));
    }
    let [input] = s.inputs() else {
        return Err(LowerError::Interface(format!(
            "it has {} inputs; the kernel plans take one",
            s.inputs().len()
        )));
    };
    let [output] = s.outputs() else {
        return Err(LowerError::Interface(format!(
            "it has {} outputs; the kernel plans give one",
            s.outputs().len()
        )));
    };
    if input.dtype != sluice_graph::DType::F32 {
        return Err(LowerError::Interface(format!(
            "input '{}' is {}; the kernels take f32",
            input.name, input.dtype
        )));
    }
    let shape_of =
        |v: ValueId| -> Vec<usize> { s.info(v).map(|(_, sh)| sh.to_vec()).unwrap_or_default() };
    let len_of = |v: ValueId| -> usize { shape_of(v).iter().product() };
    let mut b = PlanBuilder::new();
    let mut refs: HashMap<ValueId, TensorRef> = HashMap::new();
    let mut data: HashMap<String, Vec<f32>> = HashMap::new();
    refs.insert(input.id, b.input(len_of(input.id)));
    // A constant as a weight buffer (once per value).
    let weight = |b: &mut PlanBuilder,
                  refs: &mut HashMap<ValueId, TensorRef>,
                  data: &mut HashMap<String, Vec<f32>>,
                  v: ValueId,
                  values: Vec<f32>,
                  tag: &str|
     -> TensorRef {
        let key = format!("{}{tag}#{}", s.name(v), v.index());
        if tag.is_empty()
            && let Some(r) = refs.get(&v)
        {
            return *r;
        }
        let r = b.buffer(key.clone(), Role::Weight, values.len(), None);
        data.insert(key, values);
        if tag.is_empty() {
            refs.insert(v, r);
        }
        r
    };
    let konst = |v: Option<ValueId>| {
        v.and_then(|v| s.constant(v))
            .and_then(|t| t.as_f32().map(<[f32]>::to_vec))
    };
    for n in s.nodes() {
        let inp = |k: usize| n.inputs.get(k).copied().flatten();
        let out = n
            .outputs
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| node_err(n, "it has no output"))?;
        let oshape = shape_of(out);
        let olen: usize = oshape.iter().product();
        // The activation (or kernel input) of a value computed earlier.
        let get = |refs: &HashMap<ValueId, TensorRef>,
                   v: Option<ValueId>|
         -> Result<TensorRef, LowerError> {
            let v = v.ok_or_else(|| node_err(n, "a required input is absent"))?;
            refs.get(&v).copied().ok_or_else(|| {
                node_err(
                    n,
                    format!(
                        "input '{}' is a constant the kernel takes as data, not a weight",
                        s.name(v)
                    ),
                )
            })
        };
        let label = format!("{}:{}", n.op.name(), n.name);
        let y = match &n.op {
            Op::Flatten { .. }
            | Op::Reshape { .. }
            | Op::Squeeze
            | Op::Unsqueeze
            | Op::Identity => {
                let x = get(&refs, inp(0))?;
                refs.insert(out, x);
                continue;
            }
            Op::Conv { window, group, act } => {
                let xs = shape_of(inp(0).unwrap_or(out));
                let w = inp(1).ok_or_else(|| node_err(n, "no weight"))?;
                let ws = shape_of(w);
                let r = sluice_graph::shape::resolve_window(window, &xs[2..], &ws[2..])
                    .map_err(|e| node_err(n, e.0))?;
                let uniform = |v: &[usize]| v.windows(2).all(|p| p[0] == p[1]);
                let pads: Vec<usize> = r.pad_begin.iter().chain(&r.pad_end).copied().collect();
                if xs.len() != 4
                    || *group != 1
                    || !uniform(&r.kernel)
                    || !uniform(&r.strides)
                    || !uniform(&pads)
                    || r.dilations.iter().any(|&d| d != 1)
                {
                    return Err(node_err(
                        n,
                        format!(
                            "the kernel takes 2-D, one group, a square kernel, one stride, one padding and no dilation (here rank {}, group {group}, kernel {:?}, strides {:?}, pads {pads:?}, dilations {:?})",
                            xs.len(),
                            r.kernel,
                            r.strides,
                            r.dilations
                        ),
                    ));
                }
                let wv =
                    konst(Some(w)).ok_or_else(|| node_err(n, "the weight must be a constant"))?;
                let wr = weight(&mut b, &mut refs, &mut data, w, wv, "");
                let bias = match inp(2) {
                    Some(bv) => Some(weight(
                        &mut b,
                        &mut refs,
                        &mut data,
                        bv,
                        konst(Some(bv))
                            .ok_or_else(|| node_err(n, "the bias must be a constant"))?,
                        "",
                    )),
                    None => None,
                };
                let shape = Conv2dShape {
                    cin: xs[1],
                    h: xs[2],
                    w: xs[3],
                    cout: ws[0],
                    kh: r.kernel[0],
                    kw: r.kernel[0],
                    stride: r.strides[0],
                    pad: pads[0],
                };
                let x = get(&refs, inp(0))?;
                let y = b.activation(format!("{label}.y"), olen);
                b.push(
                    label,
                    super::Op::Conv2d {
                        x,
                        w: wr,
                        bias,
                        y,
                        shape,
                        act: act_of(n, *act)?,
                    },
                )
                .map_err(|e| LowerError::Plan(Box::new(e)))?;
                y
            }
            Op::Gemm {
                trans_a,
                trans_b,
                alpha,
                beta,
                act,
            } => {
                if *trans_a || *alpha != 1.0 || (inp(2).is_some() && *beta != 1.0) {
                    return Err(node_err(
                        n,
                        "the kernel takes A untransposed and alpha = beta = 1",
                    ));
                }
                let (m, nn) = (oshape[0], oshape[1]);
                let bw = inp(1).ok_or_else(|| node_err(n, "no B"))?;
                let bs = shape_of(bw);
                let mut bv = konst(Some(bw)).ok_or_else(|| node_err(n, "B must be a constant"))?;
                let k = if *trans_b { bs[1] } else { bs[0] };
                let tag = if *trans_b {
                    let mut t = vec![0.0; bv.len()];
                    for i in 0..nn {
                        for j in 0..k {
                            t[j * nn + i] = bv[i * k + j];
                        }
                    }
                    bv = t;
                    "^T"
                } else {
                    ""
                };
                let br = weight(&mut b, &mut refs, &mut data, bw, bv, tag);
                let bias = match inp(2) {
                    Some(c) => {
                        let cv =
                            konst(Some(c)).ok_or_else(|| node_err(n, "C must be a constant"))?;
                        let row = if cv.len() == nn {
                            cv
                        } else if cv.len() == 1 {
                            vec![cv[0]; nn]
                        } else {
                            return Err(node_err(n, "C must be one row of N values (a bias)"));
                        };
                        Some(weight(&mut b, &mut refs, &mut data, c, row, "row"))
                    }
                    None => None,
                };
                let a = get(&refs, inp(0))?;
                let c = b.activation(format!("{label}.y"), olen);
                b.push(
                    label,
                    super::Op::Gemm {
                        a,
                        b: br,
                        bias,
                        c,
                        shape: GemmShape { m, n: nn, k },
                        act: act_of(n, *act)?,
                    },
                )
                .map_err(|e| LowerError::Plan(Box::new(e)))?;
                c
            }
            Op::MatMul => {
                let (ashape, bw) = (
                    shape_of(inp(0).unwrap_or(out)),
                    inp(1).ok_or_else(|| node_err(n, "no B"))?,
                );
                let bs = shape_of(bw);
                if bs.len() != 2 || ashape.len() < 2 {
                    return Err(node_err(
                        n,
                        format!("the kernel multiplies by a constant matrix; B has shape {bs:?}"),
                    ));
                }
                let bv = konst(Some(bw)).ok_or_else(|| node_err(n, "B must be a constant"))?;
                let k = bs[0];
                let m = olen / bs[1];
                let br = weight(&mut b, &mut refs, &mut data, bw, bv, "");
                let a = get(&refs, inp(0))?;
                let c = b.activation(format!("{label}.y"), olen);
                b.push(
                    label,
                    super::Op::Gemm {
                        a,
                        b: br,
                        bias: None,
                        c,
                        shape: GemmShape { m, n: bs[1], k },
                        act: Act::None,
                    },
                )
                .map_err(|e| LowerError::Plan(Box::new(e)))?;
                c
            }
            Op::Pool { kind, window } => {
                let xs = shape_of(inp(0).unwrap_or(out));
                let r = sluice_graph::shape::resolve_window(window, &xs[2..], &[])
                    .map_err(|e| node_err(n, e.0))?;
                let pads: Vec<usize> = r.pad_begin.iter().chain(&r.pad_end).copied().collect();
                let uniform = |v: &[usize]| v.windows(2).all(|p| p[0] == p[1]);
                let mode = match kind {
                    PoolKind::Max => PoolMode::Max,
                    PoolKind::Avg(false) => PoolMode::Avg,
                    PoolKind::Avg(true) => {
                        return Err(node_err(
                            n,
                            "the kernel does not count padding (count_include_pad = 0 only)",
                        ));
                    }
                };
                if xs.len() != 4
                    || window.ceil_mode
                    || !uniform(&r.kernel)
                    || !uniform(&r.strides)
                    || !uniform(&pads)
                    || r.dilations.iter().any(|&d| d != 1)
                {
                    return Err(node_err(
                        n,
                        "the kernel takes a square 2-D window, one stride, one padding, no dilation and no ceil_mode",
                    ));
                }
                let shape = Pool2dShape {
                    c: xs[0] * xs[1],
                    h: xs[2],
                    w: xs[3],
                    k: r.kernel[0],
                    stride: r.strides[0],
                    pad: pads[0],
                };
                let x = get(&refs, inp(0))?;
                let y = b.activation(format!("{label}.y"), olen);
                b.push(label, super::Op::Pool2d { x, y, shape, mode })
                    .map_err(|e| LowerError::Plan(Box::new(e)))?;
                y
            }
            Op::GlobalAveragePool => {
                let xs = shape_of(inp(0).unwrap_or(out));
                let x = get(&refs, inp(0))?;
                let y = b.activation(format!("{label}.y"), olen);
                let shape = GlobalPoolShape {
                    c: xs[0] * xs[1],
                    hw: xs[2..].iter().product(),
                };
                b.push(label, super::Op::GlobalAvgPool { x, y, shape })
                    .map_err(|e| LowerError::Plan(Box::new(e)))?;
                y
            }
            Op::Binary(BinOp::Add, act) => {
                let op = match act {
                    None => EltwiseOp::Add,
                    Some(Unary::Relu) => EltwiseOp::AddRelu,
                    Some(u) => {
                        return Err(node_err(
                            n,
                            format!(
                                "the fused activation {} is not one the kernel applies",
                                u.name()
                            ),
                        ));
                    }
                };
                eltwise2(&mut b, &refs, n, &label, olen, op, s)?
            }
            Op::Sum if n.inputs.len() == 2 => {
                eltwise2(&mut b, &refs, n, &label, olen, EltwiseOp::Add, s)?
            }
            Op::Unary(u @ (Unary::Relu | Unary::GeluTanh)) => {
                let a = get(&refs, inp(0))?;
                let y = b.activation(format!("{label}.y"), olen);
                let op = if *u == Unary::Relu {
                    EltwiseOp::Relu
                } else {
                    EltwiseOp::Gelu
                };
                b.push(
                    label,
                    super::Op::Eltwise {
                        a,
                        b: None,
                        y,
                        n: olen,
                        op,
                    },
                )
                .map_err(|e| LowerError::Plan(Box::new(e)))?;
                y
            }
            Op::Softmax {
                axis,
                log: false,
                coerce_2d,
            } => {
                let r = oshape.len().max(1);
                let ax = sluice_graph::shape::norm_axis(*axis, r).map_err(|e| node_err(n, e.0))?;
                if !*coerce_2d && ax + 1 != r {
                    return Err(node_err(n, "the kernel normalises the last axis only"));
                }
                let cols: usize = oshape[ax..].iter().product();
                let x = get(&refs, inp(0))?;
                let y = b.activation(format!("{label}.y"), olen);
                b.push(
                    label,
                    super::Op::Softmax {
                        x,
                        y,
                        shape: RowsShape {
                            rows: olen / cols.max(1),
                            cols,
                        },
                    },
                )
                .map_err(|e| LowerError::Plan(Box::new(e)))?;
                y
            }
            Op::LayerNorm { axis, eps } => {
                let r = oshape.len();
                let ax = sluice_graph::shape::norm_axis(*axis, r).map_err(|e| node_err(n, e.0))?;
                let cols = oshape[r - 1];
                if ax + 1 != r {
                    return Err(node_err(n, "the kernel normalises the last axis only"));
                }
                let g = inp(1).ok_or_else(|| node_err(n, "no scale"))?;
                let gv = konst(Some(g)).filter(|v| v.len() == cols).ok_or_else(|| {
                    node_err(n, "the scale must be a constant of the last axis' length")
                })?;
                let gamma = weight(&mut b, &mut refs, &mut data, g, gv, "");
                let beta = match inp(2) {
                    Some(bv) => {
                        let v = konst(Some(bv)).filter(|v| v.len() == cols).ok_or_else(|| {
                            node_err(n, "the bias must be a constant of the last axis' length")
                        })?;
                        weight(&mut b, &mut refs, &mut data, bv, v, "")
                    }
                    None => weight(
                        &mut b,
                        &mut refs,
                        &mut data,
                        g,
                        vec![0.0; cols],
                        "zero-beta",
                    ),
                };
                let x = get(&refs, inp(0))?;
                let y = b.activation(format!("{label}.y"), olen);
                b.push(
                    label,
                    super::Op::Layernorm {
                        x,
                        gamma,
                        beta,
                        y,
                        shape: RowsShape {
                            rows: olen / cols.max(1),
                            cols,
                        },
                        eps: *eps,
                    },
                )
                .map_err(|e| LowerError::Plan(Box::new(e)))?;
                y
            }
            other => return Err(node_err(n, format!("no kernel for {} yet", other.name()))),
        };
        refs.insert(out, y);
    }
    let out_ref = refs.get(&output.id).copied().ok_or_else(|| {
        LowerError::Interface(format!(
            "output '{}' is not computed by a kernel",
            output.name
        ))
    })?;
    if out_ref.buf == refs[&input.id].buf {
        return Err(LowerError::Interface(format!(
            "output '{}' is the input itself",
            output.name
        )));
    }
    let plan = b
        .finish(name.to_owned(), format!("{name} (ONNX)"), out_ref)
        .map_err(|e| LowerError::Plan(Box::new(e)))?;
    let bufs = plan
        .buffers
        .iter()
        .map(|buf| {
            if buf.role == Role::Weight {
                data.get(&buf.name).cloned().unwrap_or_default()
            } else {
                Vec::new()
            }
        })
        .collect();
    Ok((plan, Weights { bufs }))
}

fn eltwise2(
    b: &mut PlanBuilder,
    refs: &HashMap<ValueId, TensorRef>,
    n: &sluice_graph::Node,
    label: &str,
    olen: usize,
    op: EltwiseOp,
    s: &Static,
) -> Result<TensorRef, LowerError> {
    let shape_of = |v: ValueId| s.shape_of(Some(v)).to_vec();
    let (Some(a), Some(c)) = (
        n.inputs.first().copied().flatten(),
        n.inputs.get(1).copied().flatten(),
    ) else {
        return Err(node_err(n, "two inputs are needed"));
    };
    if shape_of(a) != shape_of(c) {
        return Err(node_err(
            n,
            format!(
                "the kernel adds equal shapes; here {:?} and {:?} (broadcasting)",
                shape_of(a),
                shape_of(c)
            ),
        ));
    }
    let get = |v: ValueId| {
        refs.get(&v).copied().ok_or_else(|| {
            node_err(
                n,
                format!(
                    "input '{}' is a constant; the kernel adds computed tensors",
                    s.name(v)
                ),
            )
        })
    };
    let (ra, rc) = (get(a)?, get(c)?);
    let y = b.activation(format!("{label}.y"), olen);
    b.push(
        label.to_owned(),
        super::Op::Eltwise {
            a: ra,
            b: Some(rc),
            y,
            n: olen,
            op,
        },
    )
    .map_err(|e| LowerError::Plan(Box::new(e)))?;
    Ok(y)
}
