//! An imported graph ([`sluice_graph::Static`], at any batch) lowered to a
//! [`Plan`] of the sluice CUDA kernel library, with the graph's own weights.
//!
//! What lowers, and to which kernel:
//!
//! - `Conv`, 1-D or 2-D: one group, a square kernel, one stride, one
//!   padding on every side and no dilation run on the tiled
//!   `sluice_conv2d`, one launch per image; any other (grouped, depthwise,
//!   non-square, asymmetric padding, dilated) on `sluice_conv2d_ex`. A fused
//!   ReLU or tanh-GELU is applied by the kernel, any other activation by a
//!   following `sluice_elementwise`.
//! - `Gemm` with a constant B (alpha folded into B, beta into C; a C that is
//!   one row is the kernel's bias, any other broadcastable C a following
//!   add; a transposed A moved by `sluice_gather`) and `MatMul` by a
//!   constant matrix: `sluice_gemm`. `MatMul` of two activations
//!   (attention's scores and context): `sluice_bmm`, batch axes equal or one
//!   side's all 1. A vector operand is one row (A) or one column (B).
//! - Max / average pooling: square, symmetric windows without `ceil_mode`
//!   on `sluice_pool2d`; every other window (asymmetric padding, dilation,
//!   `ceil_mode`, `count_include_pad`) on `sluice_pool2d_ex`.
//!   `GlobalAveragePool` and `ReduceMean` (its axes moved last first):
//!   `sluice_global_avgpool`. `LRN`: `sluice_lrn`.
//! - Element-wise: `Add` / two-input `Sum` of equal shapes (with a fused
//!   ReLU), `Relu` and tanh-`Gelu` on `sluice_eltwise`; every other unary
//!   function (`Sigmoid`, `Tanh`, `Erf`, `Exp`, `Sqrt`, `Clip`,
//!   `LeakyRelu`, `HardSigmoid`, `HardSwish`, `SiLU`, erf-`Gelu`, ...),
//!   broadcasting `Add` / `Sub` / `Mul` / `Div` / `Pow` / `Max` / `Min`,
//!   `Sum` of any arity, `Where` and an inference `BatchNormalization` (a
//!   per-channel multiply and add) on `sluice_elementwise`.
//! - `Softmax` over the last axis (or the 2-D view before opset 13; an inner
//!   axis is moved last and back) on `sluice_softmax`; `LayerNormalization`
//!   over the axes from `axis` on on `sluice_layernorm`.
//! - Data movement: `Transpose`, `Slice`, `Concat`, `Split`, `Pad`,
//!   `Expand`, nearest `Resize` and `Gather` by constant indices on
//!   `sluice_gather`, whose index table is the operator itself evaluated by
//!   the graph's CPU executor on a tensor of element numbers; `Gather` of a
//!   constant table by computed ids (an embedding) on `sluice_embedding`.
//!   `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, `Identity` and a `Cast`
//!   to f32 of an f32 value or of computed ids only rename memory.
//!
//! Anything else is refused with the node, its operator and the reason
//! ([`LowerError`]), so a model runs on the device entirely or not at all.
//!
//! Interface: every graph input is a slice of the plan's one input buffer,
//! in graph order; f32 inputs as they are, i64 inputs (token ids) as f32
//! whole numbers (exact up to 2^24; [`Lowered::inputs`] says which). The
//! graph's outputs (f32) are slices of the plan's output buffer, in graph
//! order ([`Lowered::outputs`]).

use std::collections::HashMap;

use sluice_graph::{BinOp, DType, Op, PoolKind, ResizeMode, Static, Tensor, Unary, ValueId};

use super::{
    Act, BuildError, Conv2dShape, EltwiseOp, GemmShape, GlobalPoolShape, Plan, PlanBuilder,
    Pool2dShape, PoolMode, Role, RowsShape, TensorRef, Weights,
};
use crate::reference::{
    BmmShape, ConvExShape, ELEM_DESC_LEN, ElemOp, ElemShape, EmbeddingShape, GATHER_SOURCES,
    GatherShape, InterpShape, LrnShape, MAX_EXACT_INDEX, PoolExShape,
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
    /// The graph's interface does not fit a plan.
    #[error("the model cannot run on the CUDA kernel library: {0}")]
    Interface(String),
    /// The plan the lowering built was refused by its own checks.
    #[error("the lowered plan is invalid")]
    Plan(#[source] Box<BuildError>),
}

/// Where one graph input or output lies in the plan's input or output
/// buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoSlice {
    /// The graph's name for it.
    pub name: String,
    /// Its type in the graph: f32, or i64 for an input carried as f32
    /// whole numbers.
    pub dtype: DType,
    /// Its shape at the graph's batch.
    pub shape: Vec<usize>,
    /// First element in the buffer.
    pub offset: usize,
    /// Elements.
    pub len: usize,
}

/// A lowered graph: the plan, its weights and where each graph input and
/// output lies.
#[derive(Debug, Clone)]
pub struct Lowered {
    /// The plan.
    pub plan: Plan,
    /// Its weights.
    pub weights: Weights,
    /// The graph's inputs, in graph order, as slices of the input buffer.
    pub inputs: Vec<IoSlice>,
    /// The graph's outputs, in graph order, as slices of the output buffer.
    pub outputs: Vec<IoSlice>,
}

fn node_err(n: &sluice_graph::Node, why: impl Into<String>) -> LowerError {
    LowerError::Node {
        node: n.name.clone(),
        op: n.op.name(),
        why: why.into(),
    }
}

fn plan_err(e: BuildError) -> LowerError {
    LowerError::Plan(Box::new(e))
}

/// A fused activation the tiled kernels apply themselves, or the unary
/// function a following `sluice_elementwise` applies.
fn split_act(a: sluice_graph::Act) -> (Act, Option<Unary>) {
    match a {
        None => (Act::None, None),
        Some(Unary::Relu) => (Act::Relu, None),
        Some(Unary::GeluTanh) => (Act::Gelu, None),
        Some(u) => (Act::None, Some(u)),
    }
}

/// Lowers `s` to a plan and its weights (see [`lower_graph`]).
pub fn lower(s: &Static, name: &str) -> Result<(Plan, Weights), LowerError> {
    lower_graph(s, name).map(|l| (l.plan, l.weights))
}

/// The lowering's state: the plan so far, each graph value's slice, and the
/// weights' data.
struct Ctx<'s> {
    s: &'s Static,
    b: PlanBuilder,
    refs: HashMap<ValueId, TensorRef>,
    data: HashMap<String, Vec<f32>>,
    weights: usize,
}

impl<'s> Ctx<'s> {
    fn shape(&self, v: ValueId) -> Vec<usize> {
        self.s.shape_of(Some(v)).to_vec()
    }

    fn weight(&mut self, name: &str, values: Vec<f32>) -> TensorRef {
        self.weights += 1;
        let key = format!("{name}#w{}", self.weights);
        let r = self.b.buffer(key.clone(), Role::Weight, values.len(), None);
        self.data.insert(key, values);
        r
    }

    /// The slice of value `v`: computed earlier, or a constant uploaded as
    /// a weight (once; i64 and bool constants as f32 numbers).
    fn operand(
        &mut self,
        n: &sluice_graph::Node,
        v: Option<ValueId>,
    ) -> Result<TensorRef, LowerError> {
        let v = v.ok_or_else(|| node_err(n, "a required input is absent"))?;
        if let Some(r) = self.refs.get(&v) {
            return Ok(*r);
        }
        let t = self.s.constant(v).ok_or_else(|| {
            node_err(
                n,
                format!(
                    "input '{}' is neither computed nor a constant",
                    self.s.name(v)
                ),
            )
        })?;
        let values = t.to_f32_vec();
        if values.is_empty() {
            return Err(node_err(
                n,
                format!("input '{}' is an empty constant", self.s.name(v)),
            ));
        }
        let name = self.s.name(v).to_owned();
        let r = self.weight(&name, values);
        self.refs.insert(v, r);
        Ok(r)
    }

    fn act(&mut self, label: &str, len: usize) -> TensorRef {
        self.b.activation(format!("{label}.y"), len)
    }

    fn push(&mut self, label: String, op: super::Op) -> Result<(), LowerError> {
        self.b.push(label, op).map_err(plan_err)
    }

    /// `sluice_elementwise` over an output of shape `out`; `operands` in
    /// the kernel's order (`a`, `b`, `c`; for `Where`: x, y, condition).
    fn elementwise(
        &mut self,
        n: &sluice_graph::Node,
        label: &str,
        out: &[usize],
        operands: &[(TensorRef, Vec<usize>)],
        op: ElemOp,
        act: Option<Unary>,
    ) -> Result<TensorRef, LowerError> {
        let shapes: Vec<&[usize]> = operands.iter().map(|(_, s)| s.as_slice()).collect();
        let desc = ElemShape::broadcast(out, &shapes).ok_or_else(|| {
            node_err(
                n,
                format!(
                    "the operands {shapes:?} do not broadcast to {out:?} within 6 axes (the kernel's descriptor)"
                ),
            )
        })?;
        if desc.iter().any(|&v| v > MAX_EXACT_INDEX) {
            return Err(node_err(
                n,
                format!(
                    "a dimension or stride of {out:?} is above 2^24, the kernel's f32 descriptor limit"
                ),
            ));
        }
        let (needs_op, needs_act) = (
            matches!(op.code().0, 2 | 5 | 19),
            act.is_some_and(|u| matches!(ElemOp::Unary(Some(u)).code().0, 2 | 5 | 19)),
        );
        if needs_op && needs_act {
            // Both take float parameters: two launches.
            let mid = self.elementwise(n, &format!("{label}.op"), out, operands, op, None)?;
            return self.elementwise(
                n,
                label,
                out,
                &[(mid, out.to_vec())],
                ElemOp::Unary(act),
                None,
            );
        }
        let nel: usize = out.iter().product();
        let d = self.weight(
            &format!("{label}.desc"),
            desc.iter().map(|&v| v as f32).collect(),
        );
        debug_assert_eq!(d.len, ELEM_DESC_LEN);
        let y = self.act(label, nel);
        // Operands in kernel order: a, b, c (Where: x, y, then the condition).
        let ops: Vec<TensorRef> = operands.iter().map(|(r, _)| *r).collect();
        let (a, b, c) = (ops[0], ops.get(1).copied(), ops.get(2).copied());
        self.push(
            label.to_owned(),
            super::Op::Elementwise {
                a,
                b,
                c,
                desc: d,
                y,
                shape: ElemShape {
                    n: nel,
                    desc,
                    op,
                    act,
                },
            },
        )?;
        Ok(y)
    }

    /// A unary function applied after a kernel, if any.
    fn then_unary(
        &mut self,
        n: &sluice_graph::Node,
        label: &str,
        x: TensorRef,
        shape: &[usize],
        u: Option<Unary>,
    ) -> Result<TensorRef, LowerError> {
        match u {
            None => Ok(x),
            Some(u) => self.elementwise(
                n,
                &format!("{label}.act"),
                shape,
                &[(x, shape.to_vec())],
                ElemOp::Unary(Some(u)),
                None,
            ),
        }
    }

    /// `x` (of shape `shape`) with its axes permuted by `perm`, by a
    /// `sluice_gather` whose table is the permutation's; its new shape.
    fn permute(
        &mut self,
        n: &sluice_graph::Node,
        label: &str,
        x: TensorRef,
        shape: &[usize],
        perm: &[usize],
    ) -> Result<(TensorRef, Vec<usize>), LowerError> {
        let r = shape.len();
        let mut st = vec![1usize; r];
        for d in (0..r.saturating_sub(1)).rev() {
            st[d] = st[d + 1] * shape[d + 1];
        }
        let os: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let total: usize = os.iter().product();
        if total > MAX_EXACT_INDEX {
            return Err(node_err(
                n,
                format!(
                    "moving the axes of {shape:?} needs an index table of {total} entries, above 2^24"
                ),
            ));
        }
        let mut idx = Vec::with_capacity(total);
        for i in 0..total {
            let (mut rem, mut off) = (i, 0usize);
            for d in (0..r).rev() {
                off += (rem % os[d]) * st[perm[d]];
                rem /= os[d];
            }
            idx.push(off as f32);
        }
        let it = self.weight(&format!("{label}.idx"), idx);
        let y = self.act(label, total);
        self.push(
            label.to_owned(),
            super::Op::Gather {
                srcs: [Some(x), None, None, None],
                idx: it,
                y,
                shape: GatherShape {
                    n: total,
                    lens: [x.len, 0, 0, 0],
                    fill: 0.0,
                },
            },
        )?;
        Ok((y, os))
    }

    /// A linear `Resize` as `sluice_interp`: the source coordinate of every
    /// output element along each axis comes from evaluating the node on a
    /// tensor holding each element's coordinate along that axis (linear
    /// interpolation of a linear function is exact), and gives the corners
    /// of the element's interpolation cell and their weights, as the CPU
    /// executor weighs them.
    fn resize_linear(
        &mut self,
        n: &sluice_graph::Node,
        label: &str,
    ) -> Result<TensorRef, LowerError> {
        let xv = n
            .inputs
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| node_err(n, "no input"))?;
        let xs = self.shape(xv);
        let out = n
            .outputs
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| node_err(n, "no output"))?;
        let os = self.shape(out);
        let src: usize = xs.iter().product();
        if src > MAX_EXACT_INDEX {
            return Err(node_err(
                n,
                format!("its input holds {src} elements, above 2^24 (the index table is f32)"),
            ));
        }
        let mut params: Vec<Option<Tensor>> = vec![None];
        for (k, v) in n.inputs.iter().enumerate().skip(1) {
            params.push(match v {
                None => None,
                Some(v) => Some(
                    self.s
                        .constant(*v)
                        .ok_or_else(|| {
                            node_err(
                                n,
                                format!("input {k} (roi, scales or sizes) must be a constant"),
                            )
                        })?
                        .clone(),
                ),
            });
        }
        let r = xs.len();
        let mut st = vec![1usize; r];
        for d in (0..r.saturating_sub(1)).rev() {
            st[d] = st[d + 1] * xs[d + 1];
        }
        let total: usize = os.iter().product();
        let mut coords: Vec<Vec<f32>> = Vec::with_capacity(r);
        for d in 0..r {
            let along: Vec<f32> = (0..src).map(|i| ((i / st[d]) % xs[d]) as f32).collect();
            params[0] = Some(Tensor::f32(xs.clone(), along).map_err(|e| node_err(n, e.0))?);
            let refs: Vec<Option<&Tensor>> = params.iter().map(Option::as_ref).collect();
            let t = sluice_graph::eval(&n.op, &refs, 1)
                .map_err(|e| node_err(n, format!("building its interpolation table: {}", e.0)))?;
            let v = t
                .first()
                .and_then(Tensor::as_f32)
                .ok_or_else(|| node_err(n, "its interpolation table is not f32"))?
                .iter()
                .map(|&c| {
                    if (c - c.round()).abs() < 1e-4 {
                        c.round()
                    } else {
                        c
                    }
                })
                .collect();
            coords.push(v);
        }
        let active: Vec<usize> = (0..r)
            .filter(|&d| coords[d].iter().any(|c| c.fract() != 0.0))
            .collect();
        if active.len() > 3 {
            return Err(node_err(
                n,
                format!(
                    "it interpolates {} axes; the lowering takes at most 3",
                    active.len()
                ),
            ));
        }
        let taps = 1usize << active.len();
        let (mut idx, mut wts) = (
            Vec::with_capacity(total * taps),
            Vec::with_capacity(total * taps),
        );
        // `coords` is indexed by axis, then element: element i across the axes.
        #[allow(clippy::needless_range_loop)]
        for i in 0..total {
            let lo = |d: usize| (coords[d][i].floor().max(0.0) as usize).min(xs[d] - 1);
            let base: usize = (0..r).map(|d| lo(d) * st[d]).sum();
            for corner in 0..taps {
                let (mut off, mut w) = (base, 1.0f32);
                for (bit, &d) in active.iter().enumerate() {
                    let l = lo(d);
                    let t = coords[d][i] - l as f32;
                    if corner >> bit & 1 == 1 {
                        off += ((l + 1).min(xs[d] - 1) - l) * st[d];
                        w *= t;
                    } else {
                        w *= 1.0 - t;
                    }
                }
                idx.push(off as f32);
                wts.push(w);
            }
        }
        let x = self.operand(n, Some(xv))?;
        let it = self.weight(&format!("{label}.idx"), idx);
        let wt = self.weight(&format!("{label}.w"), wts);
        let y = self.act(label, total);
        self.push(
            label.to_owned(),
            super::Op::Interp {
                x,
                idx: it,
                w: wt,
                y,
                shape: InterpShape {
                    n: total,
                    taps,
                    src,
                },
            },
        )?;
        Ok(y)
    }

    /// One `sluice_gather` per output of a data-movement node: the index
    /// tables come from evaluating the node on element numbers.
    fn layout(
        &mut self,
        n: &sluice_graph::Node,
        label: &str,
        data: &[usize],
    ) -> Result<(), LowerError> {
        let mut ins: Vec<Option<Tensor>> = Vec::with_capacity(n.inputs.len());
        let mut srcs: Vec<TensorRef> = Vec::new();
        let mut lens = [0usize; GATHER_SOURCES];
        let mut next = 0usize;
        let mut fill = 0.0f32;
        for (k, v) in n.inputs.iter().enumerate() {
            let Some(v) = *v else {
                ins.push(None);
                continue;
            };
            if data.contains(&k) {
                let (numbered, len) = self.numbered_source(n, v, next)?;
                if srcs.len() == GATHER_SOURCES {
                    return Err(node_err(n, "more than 4 sources (the kernel's limit)"));
                }
                lens[srcs.len()] = len;
                srcs.push(self.operand(n, Some(v))?);
                if next + len > MAX_EXACT_INDEX {
                    return Err(node_err(
                        n,
                        format!(
                            "its sources hold more than 2^24 elements ({}), the limit of the kernel's f32 index table",
                            next + len
                        ),
                    ));
                }
                next += len;
                ins.push(Some(numbered));
            } else if matches!(n.op, Op::Pad { .. }) && k == 2 {
                // The pad value: -1 marks a padded element, the kernel writes `fill`.
                if let Some(t) = self.s.constant(v) {
                    fill = t.to_f32_vec().first().copied().unwrap_or(0.0);
                } else {
                    return Err(node_err(n, "the pad value must be a constant"));
                }
                ins.push(Some(Tensor::scalar_f32(-1.0)));
            } else {
                let t = self.s.constant(v).ok_or_else(|| {
                    node_err(
                        n,
                        format!(
                            "input {k} ('{}') must be a constant: the kernel's index table is fixed at load",
                            self.s.name(v)
                        ),
                    )
                })?;
                ins.push(Some(t.clone()));
            }
        }
        if matches!(n.op, Op::Pad { .. }) && ins.len() < 3 {
            ins.resize(3, None);
            ins[2] = Some(Tensor::scalar_f32(-1.0));
        } else if matches!(n.op, Op::Pad { .. }) && ins[2].is_none() {
            ins[2] = Some(Tensor::scalar_f32(-1.0));
        }
        let refs: Vec<Option<&Tensor>> = ins.iter().map(Option::as_ref).collect();
        let outs = sluice_graph::eval(&n.op, &refs, n.outputs.len())
            .map_err(|e| node_err(n, format!("building its index table: {}", e.0)))?;
        let mut src_arr = [None; GATHER_SOURCES];
        for (k, r) in srcs.iter().enumerate() {
            src_arr[k] = Some(*r);
        }
        for (k, (v, t)) in n.outputs.iter().zip(outs).enumerate() {
            let Some(v) = *v else { continue };
            let idx = t
                .as_f32()
                .ok_or_else(|| node_err(n, "its index table is not f32"))?
                .to_vec();
            let nel = idx.len();
            let lbl = if n.outputs.len() > 1 {
                format!("{label}.{k}")
            } else {
                label.to_owned()
            };
            let it = self.weight(&format!("{lbl}.idx"), idx);
            let y = self.act(&lbl, nel);
            self.push(
                lbl,
                super::Op::Gather {
                    srcs: src_arr,
                    idx: it,
                    y,
                    shape: GatherShape { n: nel, lens, fill },
                },
            )?;
            self.refs.insert(v, y);
        }
        Ok(())
    }
}

impl Ctx<'_> {
    /// Data input `v` of `n` as a tensor of its shape holding element
    /// numbers `first..` (what an index table is evaluated on), and its
    /// element count; refused unless f32.
    fn numbered_source(
        &self,
        n: &sluice_graph::Node,
        v: ValueId,
        first: usize,
    ) -> Result<(Tensor, usize), LowerError> {
        let (dt, shape) = self
            .s
            .info(v)
            .map(|(d, s)| (d, s.to_vec()))
            .unwrap_or((DType::F32, Vec::new()));
        if dt != DType::F32 {
            return Err(node_err(
                n,
                format!(
                    "input '{}' is {dt}; the kernels move f32 data only",
                    self.s.name(v)
                ),
            ));
        }
        let len: usize = shape.iter().product();
        let iota = (first..first + len).map(|i| i as f32).collect();
        let t = Tensor::f32(shape, iota).map_err(|e| node_err(n, e.0))?;
        Ok((t, len))
    }

    /// A Concat of more inputs than the gather kernel's sources: one
    /// gather of the first four inputs (the others' elements filled), then
    /// each further gather takes the output so far and up to three more
    /// inputs, copying what is already placed and adding theirs.
    fn concat_many(
        &mut self,
        n: &sluice_graph::Node,
        label: &str,
    ) -> Result<TensorRef, LowerError> {
        // The whole index table: input j's elements numbered after the
        // inputs before it.
        let mut ins = Vec::with_capacity(n.inputs.len());
        let mut bases = Vec::with_capacity(n.inputs.len());
        let mut sources = Vec::with_capacity(n.inputs.len());
        let mut next = 0usize;
        for v in n.inputs.iter().flatten() {
            let (numbered, len) = self.numbered_source(n, *v, next)?;
            ins.push(numbered);
            bases.push((next, len));
            sources.push(self.operand(n, Some(*v))?);
            next += len;
        }
        let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
        let full = sluice_graph::eval(&n.op, &refs, 1)
            .map_err(|e| node_err(n, format!("building its index table: {}", e.0)))?
            .into_iter()
            .next()
            .and_then(|t| t.as_f32().map(<[f32]>::to_vec))
            .ok_or_else(|| node_err(n, "its index table is not f32"))?;
        let nel = full.len();
        if nel + next > MAX_EXACT_INDEX {
            return Err(node_err(
                n,
                format!(
                    "it moves more than 2^24 elements ({}), the limit of the kernel's f32 index table",
                    nel + next
                ),
            ));
        }
        let mut placed: Option<TensorRef> = None;
        let mut first = 0usize;
        let mut stage = 0usize;
        while first < sources.len() {
            let room = if placed.is_some() {
                GATHER_SOURCES - 1
            } else {
                GATHER_SOURCES
            };
            let end = (first + room).min(sources.len());
            let mut srcs = [None; GATHER_SOURCES];
            let mut lens = [0usize; GATHER_SOURCES];
            let mut slot = 0usize;
            if let Some(p) = placed {
                srcs[0] = Some(p);
                lens[0] = nel;
                slot = 1;
            }
            for j in first..end {
                srcs[slot] = Some(sources[j]);
                lens[slot] = bases[j].1;
                slot += 1;
            }
            let (lo, hi) = (bases[first].0, bases[end - 1].0 + bases[end - 1].1);
            let shift = if placed.is_some() { nel } else { 0 };
            let idx: Vec<f32> = full
                .iter()
                .enumerate()
                .map(|(i, &g)| {
                    let g = g as usize;
                    if g < lo {
                        // Placed by an earlier stage, at the same position.
                        i as f32
                    } else if g < hi {
                        (shift + g - lo) as f32
                    } else {
                        // A later stage's: filled now, replaced then.
                        -1.0
                    }
                })
                .collect();
            let last = end == sources.len();
            let lbl = if last {
                label.to_owned()
            } else {
                format!("{label}.part{stage}")
            };
            let it = self.weight(&format!("{lbl}.idx"), idx);
            let y = self.act(&lbl, nel);
            self.push(
                lbl,
                super::Op::Gather {
                    srcs,
                    idx: it,
                    y,
                    shape: GatherShape {
                        n: nel,
                        lens,
                        fill: 0.0,
                    },
                },
            )?;
            placed = Some(y);
            first = end;
            stage += 1;
        }
        placed.ok_or_else(|| node_err(n, "no input"))
    }
}

/// Lowers `s` to a plan, its weights and the layout of its inputs and
/// outputs (see the module docs).
pub fn lower_graph(s: &Static, name: &str) -> Result<Lowered, LowerError> {
    let mut cx = Ctx {
        s,
        b: PlanBuilder::new(),
        refs: HashMap::new(),
        data: HashMap::new(),
        weights: 0,
    };
    let mut inputs = Vec::new();
    let mut total = 0usize;
    for i in s.inputs() {
        if !matches!(i.dtype, DType::F32 | DType::I64) {
            return Err(LowerError::Interface(format!(
                "input '{}' is {}; the kernel plans take f32 and i64 (token ids) inputs",
                i.name, i.dtype
            )));
        }
        let shape = cx.shape(i.id);
        let len: usize = shape.iter().product();
        inputs.push(IoSlice {
            name: i.name.clone(),
            dtype: i.dtype,
            shape,
            offset: total,
            len,
        });
        total += len;
    }
    if total == 0 {
        return Err(LowerError::Interface(
            "the graph has no input elements; a plan needs an input".into(),
        ));
    }
    let input = cx.b.input(total);
    for (i, io) in s.inputs().iter().zip(&inputs) {
        cx.refs.insert(
            i.id,
            TensorRef {
                buf: input.buf,
                offset: io.offset,
                len: io.len,
            },
        );
    }
    for n in s.nodes() {
        lower_node(&mut cx, n)?;
    }
    // The outputs: one whole buffer is the output itself; otherwise each is
    // copied into its slice of one output buffer.
    let mut outputs = Vec::new();
    let mut out_total = 0usize;
    let mut out_refs = Vec::new();
    for o in s.outputs() {
        let (dt, shape) = s
            .info(o.id)
            .map(|(d, sh)| (d, sh.to_vec()))
            .unwrap_or((DType::F32, Vec::new()));
        if dt != DType::F32 {
            return Err(LowerError::Interface(format!(
                "output '{}' is {dt}; the kernels compute f32 outputs",
                o.name
            )));
        }
        let r = match cx.refs.get(&o.id) {
            Some(r) => *r,
            None => {
                let n = s.nodes().last();
                match (n, s.constant(o.id)) {
                    (Some(n), Some(_)) => cx.operand(n, Some(o.id))?,
                    _ => {
                        return Err(LowerError::Interface(format!(
                            "output '{}' is not computed by a kernel",
                            o.name
                        )));
                    }
                }
            }
        };
        let len = r.len;
        outputs.push(IoSlice {
            name: o.name.clone(),
            dtype: dt,
            shape,
            offset: out_total,
            len,
        });
        out_total += len;
        out_refs.push(r);
    }
    let whole = |r: &TensorRef| {
        r.offset == 0
            && r.len == cx.b.buffers[r.buf.0].len
            && cx.b.buffers[r.buf.0].role == Role::Activation
    };
    let out_ref = match out_refs.as_slice() {
        [r] if whole(r) => *r,
        [] => {
            return Err(LowerError::Interface("the graph has no output".into()));
        }
        _ => {
            let packed = cx.b.activation("output".into(), out_total);
            for (io, r) in outputs.iter().zip(&out_refs) {
                let desc = ElemShape::broadcast(&[io.len], &[&[io.len]]).expect("1-D");
                let d = cx.weight(
                    &format!("copy {}.desc", io.name),
                    desc.iter().map(|&v| v as f32).collect(),
                );
                cx.push(
                    format!("output:{}", io.name),
                    super::Op::Elementwise {
                        a: *r,
                        b: None,
                        c: None,
                        desc: d,
                        y: TensorRef {
                            buf: packed.buf,
                            offset: io.offset,
                            len: io.len,
                        },
                        shape: ElemShape {
                            n: io.len,
                            desc,
                            op: ElemOp::Unary(None),
                            act: None,
                        },
                    },
                )?;
            }
            packed
        }
    };
    let Ctx { b, data, .. } = cx;
    let plan = b
        .finish(name.to_owned(), format!("{name} (ONNX)"), out_ref)
        .map_err(plan_err)?;
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
    Ok(Lowered {
        plan,
        weights: Weights { bufs },
        inputs,
        outputs,
    })
}

fn konst(s: &Static, v: Option<ValueId>) -> Option<Vec<f32>> {
    v.and_then(|v| s.constant(v)).map(Tensor::to_f32_vec)
}

#[allow(clippy::too_many_lines)]
fn lower_node(cx: &mut Ctx<'_>, n: &sluice_graph::Node) -> Result<(), LowerError> {
    let s = cx.s;
    let inp = |k: usize| n.inputs.get(k).copied().flatten();
    let out = n
        .outputs
        .first()
        .copied()
        .flatten()
        .ok_or_else(|| node_err(n, "it has no output"))?;
    let oshape = cx.shape(out);
    let olen: usize = oshape.iter().product();
    let label = format!("{}:{}", n.op.name(), n.name);
    // The kernels compute in f32: integer arithmetic (truncating division,
    // wrapping) would come out wrong, so only data movement may yield a
    // non-f32 value (computed ids, carried exactly as f32 numbers).
    let moves_only = matches!(
        n.op,
        Op::Flatten { .. }
            | Op::Reshape { .. }
            | Op::Squeeze
            | Op::Unsqueeze
            | Op::Identity
            | Op::Cast { .. }
    );
    let odt = s.info(out).map(|(d, _)| d);
    if !moves_only && odt != Some(DType::F32) {
        return Err(node_err(
            n,
            format!(
                "it computes {} values; the kernels compute in f32 only",
                odt.map_or_else(|| "untyped".to_owned(), |d| d.to_string())
            ),
        ));
    }
    let y = match &n.op {
        Op::Flatten { .. } | Op::Reshape { .. } | Op::Squeeze | Op::Unsqueeze | Op::Identity => {
            cx.operand(n, inp(0))?
        }
        Op::Cast { to } => {
            let from = inp(0).and_then(|v| s.info(v)).map(|(d, _)| d);
            // Computed i64 values (token ids) already travel as f32 numbers.
            let computed = inp(0).is_some_and(|v| cx.refs.contains_key(&v));
            if *to != DType::F32
                || !(from == Some(DType::F32) || (from == Some(DType::I64) && computed))
            {
                return Err(node_err(
                    n,
                    format!(
                        "the kernels compute in f32; a Cast from {from:?} to {to} has no kernel"
                    ),
                ));
            }
            cx.operand(n, inp(0))?
        }
        Op::Conv { window, group, act } => {
            let xs = cx.shape(inp(0).ok_or_else(|| node_err(n, "no input"))?);
            let w = inp(1).ok_or_else(|| node_err(n, "no weight"))?;
            let ws = cx.shape(w);
            if !(3..=4).contains(&xs.len()) {
                return Err(node_err(
                    n,
                    format!(
                        "the kernels take 1-D and 2-D convolutions; the input has rank {}",
                        xs.len()
                    ),
                ));
            }
            let r = sluice_graph::shape::resolve_window(window, &xs[2..], &ws[2..])
                .map_err(|e| node_err(n, e.0))?;
            let two = |v: &[usize], one: usize| -> [usize; 2] {
                if v.len() == 2 {
                    [v[0], v[1]]
                } else {
                    [one, v.first().copied().unwrap_or(one)]
                }
            };
            let [h, wd] = two(&xs[2..], 1);
            let [kh, kw] = two(&r.kernel, 1);
            let [sh, sw] = two(&r.strides, 1);
            let [dh, dw] = two(&r.dilations, 1);
            let [ph, pw] = two(&r.pad_begin, 0);
            let [peh, pew] = two(&r.pad_end, 0);
            let [oh, ow] = two(&r.out, 1);
            let (fused, post) = split_act(*act);
            let wr = cx.operand(n, Some(w))?;
            let bias = match inp(2) {
                Some(bv) => Some(cx.operand(n, Some(bv))?),
                None => None,
            };
            let x = cx.operand(n, inp(0))?;
            let (batch, cin, cout) = (xs[0], xs[1], ws[0]);
            let y = cx.act(&label, olen);
            let tiled = xs.len() == 4
                && *group == 1
                && kh == kw
                && sh == sw
                && [ph, pw, peh, pew].iter().all(|&p| p == ph)
                && dh == 1
                && dw == 1;
            if tiled {
                let shape = Conv2dShape {
                    cin,
                    h,
                    w: wd,
                    cout,
                    kh,
                    kw,
                    stride: sh,
                    pad: ph,
                };
                let (xi, yi) = (cin * h * wd, cout * oh * ow);
                for img in 0..batch {
                    let lbl = if batch > 1 {
                        format!("{label}#{img}")
                    } else {
                        label.clone()
                    };
                    cx.push(
                        lbl,
                        super::Op::Conv2d {
                            x: TensorRef {
                                offset: x.offset + img * xi,
                                len: xi,
                                ..x
                            },
                            w: wr,
                            bias,
                            y: TensorRef {
                                offset: img * yi,
                                len: yi,
                                ..y
                            },
                            shape,
                            act: fused,
                        },
                    )?;
                }
            } else {
                cx.push(
                    label.clone(),
                    super::Op::Conv2dEx {
                        x,
                        w: wr,
                        bias,
                        y,
                        shape: ConvExShape {
                            n: batch,
                            cin,
                            h,
                            w: wd,
                            cout,
                            oh,
                            ow,
                            kh,
                            kw,
                            sh,
                            sw,
                            ph,
                            pw,
                            dh,
                            dw,
                            groups: *group,
                        },
                        act: fused,
                    },
                )?;
            }
            cx.then_unary(n, &label, y, &oshape, post)?
        }
        Op::Gemm {
            trans_a,
            trans_b,
            alpha,
            beta,
            act,
        } => {
            let (m, nn) = (oshape[0], oshape[1]);
            let bw = inp(1).ok_or_else(|| node_err(n, "no B"))?;
            let bs = cx.shape(bw);
            let mut bv = konst(s, Some(bw)).ok_or_else(|| {
                node_err(n, "B must be a constant (a computed B has no GEMM kernel)")
            })?;
            let k = if *trans_b { bs[1] } else { bs[0] };
            if *trans_b {
                let mut t = vec![0.0; bv.len()];
                for i in 0..nn {
                    for j in 0..k {
                        t[j * nn + i] = bv[i * k + j];
                    }
                }
                bv = t;
            }
            if *alpha != 1.0 {
                bv.iter_mut().for_each(|v| *v *= *alpha);
            }
            let br = cx.weight(&format!("{label}.B"), bv);
            let (fused, post) = split_act(*act);
            let mut bias = None;
            let mut add_after = None;
            if let Some(c) = inp(2) {
                let cs = cx.shape(c);
                match konst(s, Some(c)) {
                    Some(mut cv) if cv.len() == nn || cv.len() == 1 => {
                        cv.iter_mut().for_each(|v| *v *= *beta);
                        let row = if cv.len() == nn { cv } else { vec![cv[0]; nn] };
                        bias = Some(cx.weight(&format!("{label}.bias"), row));
                    }
                    _ => add_after = Some((c, cs)),
                }
            }
            if add_after.is_some() && (fused != Act::None || *beta != 1.0) {
                return Err(node_err(
                    n,
                    "a C that is not one row takes beta = 1 and no fused activation",
                ));
            }
            let mut a = cx.operand(n, inp(0))?;
            if *trans_a {
                let av = inp(0).ok_or_else(|| node_err(n, "no A"))?;
                let ashape = cx.shape(av);
                a = cx
                    .permute(n, &format!("{label}.A^T"), a, &ashape, &[1, 0])?
                    .0;
            }
            let c = cx.act(&label, olen);
            cx.push(
                label.clone(),
                super::Op::Gemm {
                    a,
                    b: br,
                    bias,
                    c,
                    shape: GemmShape { m, n: nn, k },
                    act: fused,
                },
            )?;
            let c = match add_after {
                Some((cv, cs)) => {
                    let cr = cx.operand(n, Some(cv))?;
                    cx.elementwise(
                        n,
                        &format!("{label}.C"),
                        &oshape,
                        &[(c, oshape.clone()), (cr, cs)],
                        ElemOp::Binary(BinOp::Add),
                        None,
                    )?
                }
                None => c,
            };
            cx.then_unary(n, &label, c, &oshape, post)?
        }
        Op::MatMul => {
            let av = inp(0).ok_or_else(|| node_err(n, "no A"))?;
            let bw = inp(1).ok_or_else(|| node_err(n, "no B"))?;
            let (mut ashape, mut bs) = (cx.shape(av), cx.shape(bw));
            // numpy: a vector A is one row, a vector B one column (dropped
            // from the output, which keeps its element order).
            if ashape.len() == 1 {
                ashape.insert(0, 1);
            }
            if bs.len() == 1 {
                bs.push(1);
            }
            let (m, k, nn) = (
                ashape[ashape.len() - 2],
                ashape[ashape.len() - 1],
                bs[bs.len() - 1],
            );
            if bs.len() == 2 && s.constant(bw).is_some() && !cx.refs.contains_key(&bw) {
                let bv = konst(s, Some(bw)).expect("constant");
                let br = cx.weight(&format!("{label}.B"), bv);
                let a = cx.operand(n, Some(av))?;
                let c = cx.act(&label, olen);
                cx.push(
                    label.clone(),
                    super::Op::Gemm {
                        a,
                        b: br,
                        bias: None,
                        c,
                        shape: GemmShape {
                            m: olen / nn,
                            n: nn,
                            k,
                        },
                        act: Act::None,
                    },
                )?;
                c
            } else {
                let lead = sluice_graph::shape::broadcast(
                    &ashape[..ashape.len() - 2],
                    &bs[..bs.len() - 2],
                )
                .map_err(|e| node_err(n, e.0))?;
                let batch: usize = lead.iter().product();
                let stride = |sh: &[usize], mat: usize| -> Option<usize> {
                    let own: usize = sh[..sh.len() - 2].iter().product();
                    let squeezed: Vec<usize> = sh[..sh.len() - 2]
                        .iter()
                        .copied()
                        .skip_while(|&d| d == 1)
                        .collect();
                    if own == 1 {
                        Some(0)
                    } else if own == batch && lead.ends_with(&squeezed) {
                        Some(mat)
                    } else {
                        None
                    }
                };
                let (Some(sa), Some(sb)) = (stride(&ashape, m * k), stride(&bs, k * nn)) else {
                    return Err(node_err(
                        n,
                        format!(
                            "the kernel broadcasts batch axes only when they are equal or all 1 (A {ashape:?}, B {bs:?})"
                        ),
                    ));
                };
                let a = cx.operand(n, Some(av))?;
                let b = cx.operand(n, Some(bw))?;
                let y = cx.act(&label, olen);
                cx.push(
                    label.clone(),
                    super::Op::Bmm {
                        a,
                        b,
                        y,
                        shape: BmmShape {
                            batch,
                            m,
                            n: nn,
                            k,
                            sa,
                            sb,
                        },
                    },
                )?;
                y
            }
        }
        Op::Pool { kind, window } => {
            let xs = cx.shape(inp(0).ok_or_else(|| node_err(n, "no input"))?);
            if !(3..=4).contains(&xs.len()) {
                return Err(node_err(
                    n,
                    format!(
                        "the kernels pool 1-D and 2-D inputs; this one has rank {}",
                        xs.len()
                    ),
                ));
            }
            let r = sluice_graph::shape::resolve_window(window, &xs[2..], &[])
                .map_err(|e| node_err(n, e.0))?;
            let two = |v: &[usize], one: usize| -> [usize; 2] {
                if v.len() == 2 {
                    [v[0], v[1]]
                } else {
                    [one, v.first().copied().unwrap_or(one)]
                }
            };
            let [h, w] = two(&xs[2..], 1);
            let [kh, kw] = two(&r.kernel, 1);
            let [sh, sw] = two(&r.strides, 1);
            let [dh, dw] = two(&r.dilations, 1);
            let [ph, pw] = two(&r.pad_begin, 0);
            let [peh, pew] = two(&r.pad_end, 0);
            let [oh, ow] = two(&r.out, 1);
            let x = cx.operand(n, inp(0))?;
            let y = cx.act(&label, olen);
            let simple = xs.len() == 4
                && !window.ceil_mode
                && kh == kw
                && sh == sw
                && [ph, pw, peh, pew].iter().all(|&p| p == ph)
                && ph < kh
                && dh == 1
                && dw == 1
                && kind != &PoolKind::Avg(true);
            if simple {
                let mode = if *kind == PoolKind::Max {
                    PoolMode::Max
                } else {
                    PoolMode::Avg
                };
                cx.push(
                    label.clone(),
                    super::Op::Pool2d {
                        x,
                        y,
                        shape: Pool2dShape {
                            c: xs[0] * xs[1],
                            h,
                            w,
                            k: kh,
                            stride: sh,
                            pad: ph,
                        },
                        mode,
                    },
                )?;
            } else {
                let mode = match kind {
                    PoolKind::Max => 0,
                    PoolKind::Avg(false) => 1,
                    PoolKind::Avg(true) => 2,
                };
                cx.push(
                    label.clone(),
                    super::Op::Pool2dEx {
                        x,
                        y,
                        shape: PoolExShape {
                            nc: xs[0] * xs[1],
                            h,
                            w,
                            oh,
                            ow,
                            kh,
                            kw,
                            sh,
                            sw,
                            ph,
                            pw,
                            peh,
                            pew,
                            dh,
                            dw,
                        },
                        mode,
                    },
                )?;
            }
            y
        }
        Op::GlobalAveragePool => {
            let xs = cx.shape(inp(0).unwrap_or(out));
            let x = cx.operand(n, inp(0))?;
            let y = cx.act(&label, olen);
            let shape = GlobalPoolShape {
                c: xs[0] * xs[1],
                hw: xs[2..].iter().product(),
            };
            cx.push(label.clone(), super::Op::GlobalAvgPool { x, y, shape })?;
            y
        }
        Op::ReduceMean {
            noop_with_empty_axes,
            ..
        } => {
            let xs = cx.shape(inp(0).unwrap_or(out));
            let axes = sluice_graph::shape::reduce_axes(
                xs.len(),
                inp(1).and_then(|v| s.constant(v)).map(Tensor::to_i64_vec),
                *noop_with_empty_axes,
            )
            .map_err(|e| node_err(n, e.0))?;
            let x = cx.operand(n, inp(0))?;
            if axes.is_empty() {
                x
            } else {
                // The reduced axes are moved last (the kept ones in order).
                let perm: Vec<usize> = (0..xs.len())
                    .filter(|d| !axes.contains(d))
                    .chain(axes.iter().copied())
                    .collect();
                let trailing = perm.iter().enumerate().all(|(i, &p)| i == p);
                let x = if trailing {
                    x
                } else {
                    cx.permute(n, &format!("{label}.in"), x, &xs, &perm)?.0
                };
                let y = cx.act(&label, olen);
                let shape = GlobalPoolShape {
                    c: olen,
                    hw: axes.iter().map(|&a| xs[a]).product(),
                };
                cx.push(label.clone(), super::Op::GlobalAvgPool { x, y, shape })?;
                y
            }
        }
        Op::Lrn {
            size,
            alpha,
            beta,
            bias,
        } => {
            let xs = cx.shape(inp(0).unwrap_or(out));
            let x = cx.operand(n, inp(0))?;
            let y = cx.act(&label, olen);
            cx.push(
                label.clone(),
                super::Op::Lrn {
                    x,
                    y,
                    shape: LrnShape {
                        n: xs[0],
                        c: xs[1],
                        hw: xs[2..].iter().product(),
                        size: *size,
                        alpha: *alpha,
                        beta: *beta,
                        bias: *bias,
                    },
                },
            )?;
            y
        }
        Op::BatchNorm { eps } => {
            let xs = cx.shape(inp(0).unwrap_or(out));
            let p: Vec<Vec<f32>> = (1..5)
                .map(|k| konst(s, inp(k)))
                .collect::<Option<_>>()
                .ok_or_else(|| node_err(n, "scale, bias, mean and variance must be constants"))?;
            let c = xs.get(1).copied().unwrap_or(1);
            if p.iter().any(|v| v.len() != c) {
                return Err(node_err(
                    n,
                    "scale, bias, mean and variance must have one value per channel",
                ));
            }
            let k: Vec<f32> = (0..c).map(|i| p[0][i] / (p[3][i] + eps).sqrt()).collect();
            let off: Vec<f32> = (0..c).map(|i| p[1][i] - p[2][i] * k[i]).collect();
            let mut cs = vec![c];
            cs.extend(std::iter::repeat_n(1, xs.len().saturating_sub(2)));
            let kr = cx.weight(&format!("{label}.scale"), k);
            let or = cx.weight(&format!("{label}.shift"), off);
            let x = cx.operand(n, inp(0))?;
            let mid = cx.elementwise(
                n,
                &format!("{label}.mul"),
                &oshape,
                &[(x, xs.clone()), (kr, cs.clone())],
                ElemOp::Binary(BinOp::Mul),
                None,
            )?;
            cx.elementwise(
                n,
                &label,
                &oshape,
                &[(mid, oshape.clone()), (or, cs)],
                ElemOp::Binary(BinOp::Add),
                None,
            )?
        }
        Op::Binary(op, act) => {
            let (a, c) = (
                inp(0).ok_or_else(|| node_err(n, "no A"))?,
                inp(1).ok_or_else(|| node_err(n, "no B"))?,
            );
            let (sa, sc) = (cx.shape(a), cx.shape(c));
            let computed = cx.refs.contains_key(&a) && cx.refs.contains_key(&c);
            if *op == BinOp::Add
                && sa == sc
                && sa == oshape
                && computed
                && matches!(act, None | Some(Unary::Relu))
            {
                let e = if act.is_some() {
                    EltwiseOp::AddRelu
                } else {
                    EltwiseOp::Add
                };
                eltwise2(cx, n, &label, olen, e, a, c)?
            } else {
                let ra = cx.operand(n, Some(a))?;
                let rc = cx.operand(n, Some(c))?;
                cx.elementwise(
                    n,
                    &label,
                    &oshape,
                    &[(ra, sa), (rc, sc)],
                    ElemOp::Binary(*op),
                    *act,
                )?
            }
        }
        Op::Sum => {
            let vs: Vec<ValueId> = n.inputs.iter().flatten().copied().collect();
            match vs.as_slice() {
                [] => return Err(node_err(n, "no inputs")),
                [v] => cx.operand(n, Some(*v))?,
                [a, c]
                    if cx.shape(*a) == oshape
                        && cx.shape(*c) == oshape
                        && cx.refs.contains_key(a)
                        && cx.refs.contains_key(c) =>
                {
                    eltwise2(cx, n, &label, olen, EltwiseOp::Add, *a, *c)?
                }
                _ => {
                    let mut acc = cx.operand(n, Some(vs[0]))?;
                    let mut acc_shape = cx.shape(vs[0]);
                    for (i, v) in vs.iter().enumerate().skip(1) {
                        let r = cx.operand(n, Some(*v))?;
                        let sh = cx.shape(*v);
                        let to = sluice_graph::shape::broadcast(&acc_shape, &sh)
                            .map_err(|e| node_err(n, e.0))?;
                        let lbl = if i + 1 == vs.len() {
                            label.clone()
                        } else {
                            format!("{label}.{i}")
                        };
                        acc = cx.elementwise(
                            n,
                            &lbl,
                            &to,
                            &[(acc, acc_shape.clone()), (r, sh)],
                            ElemOp::Binary(BinOp::Add),
                            None,
                        )?;
                        acc_shape = to;
                    }
                    acc
                }
            }
        }
        Op::Where => {
            let mut ops = Vec::new();
            for k in [1, 2, 0] {
                let v = inp(k).ok_or_else(|| node_err(n, "Where takes three inputs"))?;
                ops.push((cx.operand(n, Some(v))?, cx.shape(v)));
            }
            cx.elementwise(n, &label, &oshape, &ops, ElemOp::Where, None)?
        }
        Op::Unary(u @ (Unary::Relu | Unary::GeluTanh)) => {
            let a = cx.operand(n, inp(0))?;
            let y = cx.act(&label, olen);
            let op = if *u == Unary::Relu {
                EltwiseOp::Relu
            } else {
                EltwiseOp::Gelu
            };
            cx.push(
                label.clone(),
                super::Op::Eltwise {
                    a,
                    b: None,
                    y,
                    n: olen,
                    op,
                },
            )?;
            y
        }
        Op::Unary(u) => {
            let a = cx.operand(n, inp(0))?;
            cx.elementwise(
                n,
                &label,
                &oshape,
                &[(a, oshape.clone())],
                ElemOp::Unary(Some(*u)),
                None,
            )?
        }
        Op::Clip => {
            let bound = |k: usize, none: f32| -> Result<f32, LowerError> {
                match inp(k) {
                    None => Ok(none),
                    Some(v) => s
                        .constant(v)
                        .map(|t| t.to_f32_vec().first().copied().unwrap_or(none))
                        .ok_or_else(|| node_err(n, "Clip's bounds must be constants")),
                }
            };
            let (lo, hi) = (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?);
            let a = cx.operand(n, inp(0))?;
            cx.elementwise(
                n,
                &label,
                &oshape,
                &[(a, oshape.clone())],
                ElemOp::Unary(Some(Unary::Clip(lo, hi))),
                None,
            )?
        }
        Op::Softmax {
            axis,
            log,
            coerce_2d,
        } => {
            let r = oshape.len().max(1);
            let ax = sluice_graph::shape::norm_axis(*axis, r).map_err(|e| node_err(n, e.0))?;
            let mut x = cx.operand(n, inp(0))?;
            // An inner axis is moved last, normalised, and moved back.
            let inner = !*coerce_2d && ax + 1 != r;
            let perm: Vec<usize> = (0..r).filter(|&d| d != ax).chain([ax]).collect();
            if inner {
                x = cx.permute(n, &format!("{label}.in"), x, &oshape, &perm)?.0;
            }
            let cols: usize = if inner {
                oshape[ax]
            } else {
                oshape[ax..].iter().product()
            };
            let y = cx.act(&label, olen);
            cx.push(
                label.clone(),
                super::Op::Softmax {
                    x,
                    y,
                    shape: RowsShape {
                        rows: olen / cols.max(1),
                        cols,
                    },
                },
            )?;
            let y = if inner {
                let moved: Vec<usize> = perm.iter().map(|&p| oshape[p]).collect();
                let mut back = vec![0usize; r];
                for (i, &p) in perm.iter().enumerate() {
                    back[p] = i;
                }
                cx.permute(n, &format!("{label}.out"), y, &moved, &back)?.0
            } else {
                y
            };
            if *log {
                // LogSoftmax as the log of the softmax: exact to f32 but for
                // a logit more than ~87 below its row's maximum, whose
                // softmax underflows to 0 (its log then -inf, where ONNX
                // gives the finite x - max - log Σ).
                cx.elementwise(
                    n,
                    &format!("{label}.log"),
                    &oshape,
                    &[(y, oshape.clone())],
                    ElemOp::Unary(Some(Unary::Log)),
                    None,
                )?
            } else {
                y
            }
        }
        Op::LayerNorm { axis, eps } => {
            let r = oshape.len();
            let ax = sluice_graph::shape::norm_axis(*axis, r).map_err(|e| node_err(n, e.0))?;
            let cols: usize = oshape[ax..].iter().product();
            let expand = |v: Vec<f32>| -> Option<Vec<f32>> {
                if v.len() == cols {
                    Some(v)
                } else if v.len() == 1 {
                    Some(vec![v[0]; cols])
                } else if !v.is_empty() && cols % v.len() == 0 {
                    // A scale of the trailing axes only, repeated.
                    Some(v.iter().cycle().take(cols).copied().collect())
                } else {
                    None
                }
            };
            let gv = konst(s, inp(1)).and_then(expand).ok_or_else(|| {
                node_err(
                    n,
                    format!("the scale must be a constant of the normalised axes' {cols} elements"),
                )
            })?;
            let bv = match inp(2) {
                Some(_) => konst(s, inp(2)).and_then(expand).ok_or_else(|| {
                    node_err(
                        n,
                        format!(
                            "the bias must be a constant of the normalised axes' {cols} elements"
                        ),
                    )
                })?,
                None => vec![0.0; cols],
            };
            let gamma = cx.weight(&format!("{label}.gamma"), gv);
            let beta = cx.weight(&format!("{label}.beta"), bv);
            let x = cx.operand(n, inp(0))?;
            let y = cx.act(&label, olen);
            cx.push(
                label.clone(),
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
            )?;
            y
        }
        Op::Gather { axis } => {
            let (d, i) = (
                inp(0).ok_or_else(|| node_err(n, "no data"))?,
                inp(1).ok_or_else(|| node_err(n, "no indices"))?,
            );
            if s.constant(i).is_some() {
                cx.layout(n, &label, &[0])?;
                return Ok(());
            }
            let ds = cx.shape(d);
            let ax =
                sluice_graph::shape::norm_axis(*axis, ds.len()).map_err(|e| node_err(n, e.0))?;
            if s.constant(d).is_none() || ax != 0 {
                return Err(node_err(
                    n,
                    "computed indices take a constant table gathered along axis 0 (an embedding)",
                ));
            }
            let vocab = ds[0];
            let dim: usize = ds[1..].iter().product();
            if vocab > MAX_EXACT_INDEX {
                return Err(node_err(
                    n,
                    format!("the table has {vocab} rows, above 2^24 (ids are f32)"),
                ));
            }
            let table = cx.operand(n, Some(d))?;
            let ids = cx.operand(n, Some(i))?;
            let y = cx.act(&label, olen);
            cx.push(
                label.clone(),
                super::Op::Embedding {
                    table,
                    ids,
                    y,
                    shape: EmbeddingShape {
                        count: ids.len,
                        dim,
                        vocab,
                    },
                },
            )?;
            y
        }
        Op::Resize { mode, .. } => match mode {
            ResizeMode::Nearest(_) => {
                cx.layout(n, &label, &[0])?;
                return Ok(());
            }
            ResizeMode::Linear => cx.resize_linear(n, &label)?,
        },
        Op::Transpose { .. } | Op::Slice | Op::Split { .. } | Op::Pad { .. } | Op::Expand => {
            cx.layout(n, &label, &[0])?;
            return Ok(());
        }
        Op::Concat { .. } => {
            let k = n.inputs.iter().flatten().count();
            if k <= GATHER_SOURCES {
                cx.layout(n, &label, &(0..n.inputs.len()).collect::<Vec<_>>())?;
                return Ok(());
            }
            cx.concat_many(n, &label)?
        }
        other => return Err(node_err(n, format!("no kernel for {} yet", other.name()))),
    };
    cx.refs.insert(out, y);
    Ok(())
}

fn eltwise2(
    cx: &mut Ctx<'_>,
    n: &sluice_graph::Node,
    label: &str,
    olen: usize,
    op: EltwiseOp,
    a: ValueId,
    c: ValueId,
) -> Result<TensorRef, LowerError> {
    let ra = cx.operand(n, Some(a))?;
    let rc = cx.operand(n, Some(c))?;
    let y = cx.act(label, olen);
    cx.push(
        label.to_owned(),
        super::Op::Eltwise {
            a: ra,
            b: Some(rc),
            y,
            n: olen,
            op,
        },
    )?;
    Ok(y)
}
