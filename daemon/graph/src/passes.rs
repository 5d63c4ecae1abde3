//! Load-time rewrites, each keeping the graph's results:
//!
//! 1. constant folding of every node whose inputs are all constants (the
//!    batch-dependent shape sub-graphs fold later, per batch, in
//!    [`crate::Static`]);
//! 2. `Identity` (and inference-mode `Dropout`) removed;
//! 3. `BatchNormalization` folded into the `Conv` or `Gemm` before it;
//! 4. `Mul(x, Sigmoid(x))` becomes one SiLU;
//! 5. an activation after `Conv`, `Gemm` or `Add` fused into it;
//! 6. nodes and constants nothing reads removed.

use std::sync::Arc;

use crate::error::GraphError;
use crate::graph::{Graph, ValueId};
use crate::op::{BinOp, Op, Unary};
use crate::shape::{Info, infer};
use crate::tensor::numel;
use crate::{DType, Tensor};

impl crate::GraphBuilder {
    /// Checks and orders the graph ([`crate::GraphBuilder::finish`]), then
    /// applies every load-time pass.
    pub fn build(self) -> Result<Graph, GraphError> {
        let mut g = self.finish()?;
        run_all(&mut g)?;
        Ok(g)
    }
}

/// Applies every pass in order.
pub(crate) fn run_all(g: &mut Graph) -> Result<(), GraphError> {
    fold_constants(g)?;
    remove_identities(g);
    fold_batchnorm(g);
    form_silu(g);
    fuse_activations(g);
    remove_dead(g);
    Ok(())
}

/// Readers of each value: (node index, input position).
fn readers(g: &Graph) -> Vec<Vec<(usize, usize)>> {
    let mut r = vec![Vec::new(); g.names.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for (p, v) in n.inputs.iter().enumerate() {
            if let Some(v) = v {
                r[v.0].push((i, p));
            }
        }
    }
    r
}

fn is_output(g: &Graph, v: ValueId) -> bool {
    g.outputs.iter().any(|o| o.id == v)
}

/// Checks a node's outputs against the limits before it is evaluated.
pub(crate) fn check_sizes(
    limits: &crate::Limits,
    n: &crate::Node,
    names: &[String],
    outs: &[(DType, Vec<usize>)],
) -> Result<(), GraphError> {
    for (k, (dt, shape)) in outs.iter().enumerate() {
        let bytes = numel(shape).map_or(u128::MAX, |e| e as u128 * dt.size() as u128);
        if bytes > u128::from(limits.max_tensor_bytes) {
            let tensor = n
                .outputs
                .get(k)
                .copied()
                .flatten()
                .map_or_else(|| format!("output {k}"), |v| names[v.0].clone());
            return Err(GraphError::TooLarge {
                node: n.name.clone(),
                op: n.op.name(),
                tensor,
                bytes,
                limit: limits.max_tensor_bytes,
            });
        }
    }
    Ok(())
}

fn node_err(g: &Graph, i: usize, e: crate::ShapeError) -> GraphError {
    GraphError::Node {
        node: g.nodes[i].name.clone(),
        op: g.nodes[i].op.name(),
        msg: e.0,
    }
}

fn fold_constants(g: &mut Graph) -> Result<(), GraphError> {
    let mut keep = Vec::with_capacity(g.nodes.len());
    let mut total: u64 = g.consts.iter().flatten().map(|t| t.bytes() as u64).sum();
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let all_const = n.inputs.iter().flatten().all(|v| g.consts[v.0].is_some());
        if !all_const || n.outputs.iter().flatten().count() == 0 {
            keep.push(true);
            continue;
        }
        let ins: Vec<Option<&Tensor>> = n
            .inputs
            .iter()
            .map(|v| v.and_then(|v| g.consts[v.0].as_deref()))
            .collect();
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
        let outs = infer(&n.op, &infos, n.outputs.len()).map_err(|e| node_err(g, i, e))?;
        check_sizes(&g.limits, n, &g.names, &outs)?;
        let add: u64 = outs
            .iter()
            .map(|(d, s)| (numel(s).unwrap_or(0) * d.size()) as u64)
            .sum();
        total += add;
        if total > g.limits.max_const_bytes {
            return Err(GraphError::TooLarge {
                node: n.name.clone(),
                op: n.op.name(),
                tensor: "folded constants".into(),
                bytes: u128::from(total),
                limit: g.limits.max_const_bytes,
            });
        }
        let vals =
            crate::exec::eval(&n.op, &ins, n.outputs.len()).map_err(|e| node_err(g, i, e))?;
        let outs_ids = n.outputs.clone();
        for (v, t) in outs_ids.into_iter().zip(vals) {
            if let Some(v) = v {
                g.consts[v.0] = Some(Arc::new(t));
            }
        }
        keep.push(false);
    }
    let mut it = keep.into_iter();
    g.nodes.retain(|_| it.next().unwrap_or(true));
    Ok(())
}

fn remove_identities(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        let n = &g.nodes[i];
        let (Op::Identity, Some(Some(src)), Some(Some(dst))) =
            (&n.op, n.inputs.first(), n.outputs.first())
        else {
            i += 1;
            continue;
        };
        let (src, dst) = (*src, *dst);
        if is_output(g, dst) {
            i += 1;
            continue;
        }
        for m in &mut g.nodes {
            for v in m.inputs.iter_mut().flatten() {
                if *v == dst {
                    *v = src;
                }
            }
        }
        g.nodes.remove(i);
    }
}

/// The single reader of `v` when it has exactly one and is not a graph output.
fn sole_reader(g: &Graph, readers: &[Vec<(usize, usize)>], v: ValueId) -> Option<usize> {
    match readers[v.0].as_slice() {
        [(r, _)] if !is_output(g, v) => Some(*r),
        _ => None,
    }
}

fn const_f32(g: &Graph, v: Option<ValueId>) -> Option<Vec<f32>> {
    v.and_then(|v| g.consts[v.0].as_ref())
        .and_then(|t| t.as_f32().map(<[f32]>::to_vec))
}

fn fold_batchnorm(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        let rd = readers(g);
        let Op::BatchNorm { eps } = g.nodes[i].op else {
            i += 1;
            continue;
        };
        let bn = g.nodes[i].clone();
        let Some(Some(x)) = bn.inputs.first().copied() else {
            i += 1;
            continue;
        };
        let producer = g.nodes.iter().position(|n| n.outputs.contains(&Some(x)));
        let params: Option<Vec<Vec<f32>>> = (1..5)
            .map(|k| const_f32(g, bn.inputs.get(k).copied().flatten()))
            .collect();
        let (Some(p), Some(params)) = (producer, params) else {
            i += 1;
            continue;
        };
        if sole_reader(g, &rd, x) != Some(i) {
            i += 1;
            continue;
        }
        let c = params[0].len();
        if params.iter().any(|p| p.len() != c) {
            i += 1;
            continue;
        }
        let k: Vec<f32> = (0..c)
            .map(|j| params[0][j] / (params[3][j] + eps).sqrt())
            .collect();
        let shift: Vec<f32> = (0..c).map(|j| params[1][j] - params[2][j] * k[j]).collect();
        let folded = match &g.nodes[p].op {
            Op::Conv { act: None, .. } => fold_into_conv(g, p, &k, &shift),
            Op::Gemm { act: None, .. } => fold_into_gemm(g, p, &k, &shift),
            _ => false,
        };
        if folded {
            let out = bn.outputs[0];
            g.nodes[p].outputs[0] = out;
            g.nodes.remove(i);
        } else {
            i += 1;
        }
    }
}

fn fold_into_conv(g: &mut Graph, p: usize, k: &[f32], shift: &[f32]) -> bool {
    let n = &g.nodes[p];
    let Some(Some(wid)) = n.inputs.get(1).copied() else {
        return false;
    };
    let Some(w) = g.consts[wid.0].clone() else {
        return false;
    };
    let Some(wv) = w.as_f32() else { return false };
    let Some(&m) = w.shape().first() else {
        return false;
    };
    if m != k.len() || wv.is_empty() {
        return false;
    }
    let bias = match n.inputs.get(2).copied().flatten() {
        Some(b) => match const_f32(g, Some(b)) {
            Some(b) if b.len() == m => b,
            _ => return false,
        },
        None => vec![0.0; m],
    };
    let per = wv.len() / m;
    let nw: Vec<f32> = wv
        .iter()
        .enumerate()
        .map(|(i, &x)| x * k[i / per])
        .collect();
    let nb: Vec<f32> = (0..m).map(|j| bias[j] * k[j] + shift[j]).collect();
    let (Ok(wt), Ok(bt)) = (
        Tensor::new(w.dtype(), w.shape().to_vec(), crate::Data::F32(nw)),
        Tensor::f32(vec![m], nb),
    ) else {
        return false;
    };
    let w_new = push_const(g, &format!("{}::w_bn", g.nodes[p].name), wt);
    let b_new = push_const(g, &format!("{}::b_bn", g.nodes[p].name), bt);
    let n = &mut g.nodes[p];
    n.inputs.resize(3, None);
    n.inputs[1] = Some(w_new);
    n.inputs[2] = Some(b_new);
    true
}

fn fold_into_gemm(g: &mut Graph, p: usize, k: &[f32], shift: &[f32]) -> bool {
    let Op::Gemm {
        trans_b,
        alpha,
        beta,
        ..
    } = g.nodes[p].op
    else {
        return false;
    };
    let n = &g.nodes[p];
    let Some(Some(bid)) = n.inputs.get(1).copied() else {
        return false;
    };
    let Some(b) = g.consts[bid.0].clone() else {
        return false;
    };
    let Some(bv) = b.as_f32() else { return false };
    let &[rows, cols] = b.shape() else {
        return false;
    };
    let nout = if trans_b { rows } else { cols };
    if nout != k.len() {
        return false;
    }
    let c = match n.inputs.get(2).copied().flatten() {
        Some(cid) => match g.consts[cid.0].as_deref() {
            Some(t) if t.len() == nout && t.shape().iter().rev().skip(1).all(|&d| d == 1) => {
                t.to_f32_vec()
            }
            Some(t) if t.len() == 1 => vec![t.to_f32_vec()[0]; nout],
            _ => return false,
        },
        None => vec![0.0; nout],
    };
    let nb: Vec<f32> = bv
        .iter()
        .enumerate()
        .map(|(i, &x)| x * k[if trans_b { i / cols } else { i % cols }])
        .collect();
    let nc: Vec<f32> = (0..nout).map(|j| k[j] * beta * c[j] + shift[j]).collect();
    let (Ok(bt), Ok(ct)) = (
        Tensor::new(b.dtype(), b.shape().to_vec(), crate::Data::F32(nb)),
        Tensor::f32(vec![nout], nc),
    ) else {
        return false;
    };
    let b_new = push_const(g, &format!("{}::b_bn", g.nodes[p].name), bt);
    let c_new = push_const(g, &format!("{}::c_bn", g.nodes[p].name), ct);
    let n = &mut g.nodes[p];
    n.inputs.resize(3, None);
    n.inputs[1] = Some(b_new);
    n.inputs[2] = Some(c_new);
    n.op = Op::Gemm {
        trans_a: matches!(n.op, Op::Gemm { trans_a: true, .. }),
        trans_b,
        alpha,
        beta: 1.0,
        act: None,
    };
    true
}

fn push_const(g: &mut Graph, name: &str, t: Tensor) -> ValueId {
    let id = ValueId(g.names.len());
    g.names.push(name.to_owned());
    g.consts.push(Some(Arc::new(t)));
    id
}

fn form_silu(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        let rd = readers(g);
        let n = &g.nodes[i];
        let (Op::Unary(Unary::Sigmoid), Some(Some(x)), Some(Some(s))) =
            (&n.op, n.inputs.first(), n.outputs.first())
        else {
            i += 1;
            continue;
        };
        let (x, s) = (*x, *s);
        let Some(m) = sole_reader(g, &rd, s) else {
            i += 1;
            continue;
        };
        let mn = &g.nodes[m];
        let pair = (
            mn.inputs.first().copied().flatten(),
            mn.inputs.get(1).copied().flatten(),
        );
        if mn.op == Op::Binary(BinOp::Mul, None)
            && (pair == (Some(x), Some(s)) || pair == (Some(s), Some(x)))
        {
            let out = mn.outputs.clone();
            let name = mn.name.clone();
            g.nodes[i] = crate::Node {
                name,
                op: Op::Unary(Unary::Silu),
                inputs: vec![Some(x)],
                outputs: out,
            };
            g.nodes.remove(m);
        } else {
            i += 1;
        }
    }
}

/// The activation a node applies, if it is one that fuses.
fn as_activation(g: &Graph, n: &crate::Node) -> Option<Unary> {
    match &n.op {
        Op::Unary(
            u @ (Unary::Relu
            | Unary::LeakyRelu(_)
            | Unary::Sigmoid
            | Unary::Tanh
            | Unary::HardSigmoid(..)
            | Unary::HardSwish
            | Unary::Silu
            | Unary::Gelu
            | Unary::GeluTanh),
        ) => Some(*u),
        Op::Clip => {
            let bound = |k: usize, default: f32| match n.inputs.get(k).copied().flatten() {
                None => Some(default),
                Some(v) => g.consts[v.0]
                    .as_ref()
                    .filter(|t| t.len() == 1)
                    .map(|t| t.to_f32_vec()[0]),
            };
            Some(Unary::Clip(
                bound(1, f32::NEG_INFINITY)?,
                bound(2, f32::INFINITY)?,
            ))
        }
        _ => None,
    }
}

fn fuse_activations(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        let rd = readers(g);
        let fusable = matches!(
            g.nodes[i].op,
            Op::Conv { act: None, .. } | Op::Gemm { act: None, .. } | Op::Binary(BinOp::Add, None)
        );
        let out = g.nodes[i].outputs.first().copied().flatten();
        let (true, Some(out)) = (fusable, out) else {
            i += 1;
            continue;
        };
        let Some(r) = sole_reader(g, &rd, out) else {
            i += 1;
            continue;
        };
        let Some(act) = as_activation(g, &g.nodes[r]) else {
            i += 1;
            continue;
        };
        let new_out = g.nodes[r].outputs[0];
        match &mut g.nodes[i].op {
            Op::Conv { act: a, .. } | Op::Gemm { act: a, .. } | Op::Binary(_, a) => *a = Some(act),
            _ => {}
        }
        g.nodes[i].outputs[0] = new_out;
        g.nodes.remove(r);
        if r < i {
            i -= 1;
        }
    }
}

fn remove_dead(g: &mut Graph) {
    loop {
        let rd = readers(g);
        let before = g.nodes.len();
        let outs: Vec<ValueId> = g.outputs.iter().map(|o| o.id).collect();
        g.nodes.retain(|n| {
            n.outputs
                .iter()
                .flatten()
                .any(|v| !rd[v.0].is_empty() || outs.contains(v))
        });
        if g.nodes.len() == before {
            break;
        }
    }
    let rd = readers(g);
    for (v, c) in g.consts.iter_mut().enumerate() {
        if c.is_some() && rd[v].is_empty() && !g.outputs.iter().any(|o| o.id.0 == v) {
            *c = None;
        }
    }
}
