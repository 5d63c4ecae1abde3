//! A graph specialised to one batch size: every shape known, the
//! batch-dependent shape sub-graphs folded, and a run on the CPU.

use std::sync::Arc;

use crate::error::GraphError;
use crate::graph::{Dim, Graph, Input, Node, Output, ValueId, fmt_dims};
use crate::shape::{Info, infer};
use crate::{DType, Tensor};

/// A [`Graph`] at one batch size.
#[derive(Debug, Clone)]
pub struct Static {
    batch: usize,
    names: Vec<String>,
    consts: Vec<Option<Arc<Tensor>>>,
    info: Vec<Option<(DType, Vec<usize>)>>,
    nodes: Vec<Node>,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
    /// For each node, the values whose last reader it is.
    frees: Vec<Vec<ValueId>>,
}

impl Graph {
    /// The largest batch a graph without a batch dimension takes is 1.
    /// With one, any batch from 1 on, as far as [`crate::Limits`] allow.
    ///
    /// Infers every shape at batch `batch`, folds what became constant
    /// (`Shape` of a known shape and everything computed from it), and
    /// checks every node's inputs.
    pub fn specialize(&self, batch: usize) -> Result<Static, GraphError> {
        if batch == 0 || (!self.has_batch() && batch != 1) {
            let why = if batch == 0 {
                "the batch must be at least 1".to_owned()
            } else {
                "the model's inputs have no batch dimension (their first dimension is fixed), so it takes batch 1 only; export it with a symbolic first dimension to batch".to_owned()
            };
            return Err(GraphError::Batch { batch, why });
        }
        let mut consts = self.consts.clone();
        let mut info: Vec<Option<(DType, Vec<usize>)>> = vec![None; self.names.len()];
        for (v, c) in consts.iter().enumerate() {
            if let Some(t) = c {
                info[v] = Some((t.dtype(), t.shape().to_vec()));
            }
        }
        for i in &self.inputs {
            let shape: Vec<usize> = i
                .shape
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Batch => batch,
                })
                .collect();
            let bytes =
                crate::numel(&shape).map_or(u128::MAX, |n| n as u128 * i.dtype.size() as u128);
            if bytes > u128::from(self.limits.max_tensor_bytes) {
                return Err(GraphError::TooLarge {
                    node: format!("input {}", i.name),
                    op: "input",
                    tensor: i.name.clone(),
                    bytes,
                    limit: self.limits.max_tensor_bytes,
                });
            }
            info[i.id.0] = Some((i.dtype, shape));
        }
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (k, n) in self.nodes.iter().enumerate() {
            let err = |msg: String| GraphError::Node {
                node: n.name.clone(),
                op: n.op.name(),
                msg,
            };
            let mut infos: Vec<Option<Info<'_>>> = Vec::with_capacity(n.inputs.len());
            for v in &n.inputs {
                infos.push(match v {
                    None => None,
                    Some(v) => match &info[v.0] {
                        Some((dt, sh)) => Some(Info {
                            dtype: *dt,
                            shape: sh,
                            value: consts[v.0].as_deref(),
                        }),
                        None => {
                            return Err(err(format!(
                                "input '{}' has no known shape",
                                self.names[v.0]
                            )));
                        }
                    },
                });
            }
            let outs = infer(&n.op, &infos, n.outputs.len()).map_err(|e| err(e.0))?;
            crate::passes::check_sizes(&self.limits, n, &self.names, &outs)?;
            let foldable = matches!(n.op, crate::Op::Shape { .. })
                || n.inputs.iter().flatten().all(|v| consts[v.0].is_some());
            if foldable {
                let ins: Vec<Option<&Tensor>> = n
                    .inputs
                    .iter()
                    .map(|v| v.and_then(|v| consts[v.0].as_deref()))
                    .collect();
                let vals = if let crate::Op::Shape { start, end } = n.op {
                    let shape = infos[0].map(|i| i.shape.to_vec()).unwrap_or_default();
                    let (s, e) = crate::shape::shape_range(shape.len(), start, end);
                    vec![Tensor::i64_vec(
                        shape[s..e.max(s)].iter().map(|&d| d as i64).collect(),
                    )]
                } else {
                    crate::exec::eval(&n.op, &ins, n.outputs.len()).map_err(|e| err(e.0))?
                };
                for (v, t) in n.outputs.iter().zip(vals) {
                    if let Some(v) = v {
                        info[v.0] = Some((t.dtype(), t.shape().to_vec()));
                        consts[v.0] = Some(Arc::new(t));
                    }
                }
            } else {
                for (v, o) in n.outputs.iter().zip(outs) {
                    if let Some(v) = v {
                        info[v.0] = Some(o);
                    }
                }
                nodes.push(k);
            }
        }
        // Only what the outputs need runs.
        let mut needed = vec![false; self.names.len()];
        for o in &self.outputs {
            needed[o.id.0] = true;
        }
        let mut run = Vec::new();
        for &k in nodes.iter().rev() {
            let n = &self.nodes[k];
            if n.outputs.iter().flatten().any(|v| needed[v.0]) {
                for v in n.inputs.iter().flatten() {
                    needed[v.0] = true;
                }
                run.push(n.clone());
            }
        }
        run.reverse();
        let mut last = vec![usize::MAX; self.names.len()];
        for (k, n) in run.iter().enumerate() {
            for v in n.inputs.iter().flatten() {
                last[v.0] = k;
            }
        }
        let mut frees = vec![Vec::new(); run.len()];
        for (v, &k) in last.iter().enumerate() {
            if k != usize::MAX && consts[v].is_none() && !self.outputs.iter().any(|o| o.id.0 == v) {
                frees[k].push(ValueId(v));
            }
        }
        for (v, c) in consts.iter_mut().enumerate() {
            if !needed[v] {
                *c = None;
            }
        }
        Ok(Static {
            batch,
            names: self.names.clone(),
            consts,
            info,
            nodes: run,
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            frees,
        })
    }
}

impl Static {
    /// The batch size.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The nodes a run executes, in order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// A tensor's name.
    pub fn name(&self, id: ValueId) -> &str {
        &self.names[id.0]
    }

    /// A tensor's type and shape.
    pub fn info(&self, id: ValueId) -> Option<(DType, &[usize])> {
        self.info[id.0].as_ref().map(|(d, s)| (*d, s.as_slice()))
    }

    /// The shape of a node's input or output slot (empty when absent).
    pub fn shape_of(&self, v: Option<ValueId>) -> &[usize] {
        v.and_then(|v| self.info[v.0].as_ref())
            .map_or(&[], |(_, sh)| sh.as_slice())
    }

    /// `(rows, cols, inner)` of the matrix product a node computes, for the
    /// GEMM-like operators (`Conv` as its im2col product per image and
    /// group: output channels × output positions × the weight's fan-in).
    pub fn gemm_dims(&self, n: &Node) -> Option<(u64, u64, u64)> {
        let out: u64 = self
            .shape_of(n.outputs.first().copied().flatten())
            .iter()
            .product::<usize>() as u64;
        let input = |k: usize| self.shape_of(n.inputs.get(k).copied().flatten());
        match &n.op {
            crate::Op::Conv { .. } => {
                let w = input(1);
                let m = w.first().copied().unwrap_or(1) as u64;
                let k = w.iter().skip(1).product::<usize>() as u64;
                Some((m, out / m.max(1), k))
            }
            crate::Op::Gemm { trans_a, .. } => {
                let (a, o) = (
                    input(0),
                    self.shape_of(n.outputs.first().copied().flatten()),
                );
                let k = if *trans_a { a.first() } else { a.get(1) }
                    .copied()
                    .unwrap_or(1) as u64;
                Some((
                    o.first().copied().unwrap_or(1) as u64,
                    o.get(1).copied().unwrap_or(1) as u64,
                    k,
                ))
            }
            crate::Op::MatMul => {
                let k = input(0).last().copied().unwrap_or(1) as u64;
                let cols = self
                    .shape_of(n.outputs.first().copied().flatten())
                    .last()
                    .copied()
                    .unwrap_or(1) as u64;
                Some((out / cols.max(1), cols, k))
            }
            _ => None,
        }
    }

    /// Estimated floating-point operations of a node: two per multiply-add
    /// of a GEMM-like operator, one per output element otherwise.
    pub fn node_flops(&self, n: &Node) -> u64 {
        match self.gemm_dims(n) {
            Some((m, c, k)) => 2 * m * c * k,
            None => self
                .shape_of(n.outputs.first().copied().flatten())
                .iter()
                .product::<usize>() as u64,
        }
    }

    /// [`Static::node_flops`] of every node.
    pub fn flops(&self) -> u64 {
        self.nodes.iter().map(|n| self.node_flops(n)).sum()
    }

    /// A constant's value.
    pub fn constant(&self, id: ValueId) -> Option<&Tensor> {
        self.consts[id.0].as_deref()
    }

    /// The graph's inputs.
    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    /// The graph's outputs.
    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }

    /// Runs the graph on the CPU. `inputs` are by name, each with the type
    /// and shape the model declares at this batch; outputs come back in the
    /// graph's order.
    pub fn run(&self, inputs: &[(&str, &Tensor)]) -> Result<Vec<(String, Tensor)>, GraphError> {
        let names = || {
            self.inputs
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (n, _) in inputs {
            if !self.inputs.iter().any(|i| i.name == *n) {
                return Err(GraphError::UnknownInput {
                    name: (*n).to_owned(),
                    expected: names(),
                });
            }
        }
        let mut vals: Vec<Option<Arc<Tensor>>> = self.consts.clone();
        for i in &self.inputs {
            let Some((_, t)) = inputs.iter().find(|(n, _)| *n == i.name) else {
                return Err(GraphError::MissingInput {
                    name: i.name.clone(),
                    expected: names(),
                });
            };
            if t.dtype() != i.dtype {
                return Err(GraphError::InputType {
                    name: i.name.clone(),
                    expected: i.dtype,
                    got: t.dtype(),
                });
            }
            let want = &self.info[i.id.0]
                .as_ref()
                .map(|x| x.1.clone())
                .unwrap_or_default();
            if t.shape() != want.as_slice() {
                let expected = format!("{} (batch {})", fmt_dims(&i.shape), self.batch);
                return Err(GraphError::InputShape {
                    name: i.name.clone(),
                    expected,
                    got: t.shape().to_vec(),
                });
            }
            vals[i.id.0] = Some(Arc::new((*t).clone()));
        }
        for (k, n) in self.nodes.iter().enumerate() {
            let ins: Vec<Option<&Tensor>> = n
                .inputs
                .iter()
                .map(|v| v.and_then(|v| vals[v.0].as_deref()))
                .collect();
            let outs =
                crate::exec::eval(&n.op, &ins, n.outputs.len()).map_err(|e| GraphError::Node {
                    node: n.name.clone(),
                    op: n.op.name(),
                    msg: e.0,
                })?;
            for (v, t) in n.outputs.iter().zip(outs) {
                if let Some(v) = v {
                    vals[v.0] = Some(Arc::new(t));
                }
            }
            for v in &self.frees[k] {
                vals[v.0] = None;
            }
        }
        let mut res = Vec::with_capacity(self.outputs.len());
        for o in &self.outputs {
            let Some(t) = vals[o.id.0].as_deref().cloned() else {
                return Err(GraphError::MissingOutput(o.name.clone()));
            };
            res.push((o.name.clone(), t));
        }
        Ok(res)
    }
}
