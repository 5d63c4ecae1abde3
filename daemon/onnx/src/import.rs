//! ONNX nodes to sluice operators, opset by opset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sluice_graph::{
    Aspect, AutoPad, BinOp, CoordMode, Dim, Graph, GraphBuilder, Limits, NearestMode, Op, PadMode,
    PoolKind, ResizeMode, Tensor, Unary, ValueId, Window,
};

use crate::error::ImportError;
use crate::proto::{AttributeProto, GraphProto, ModelProto, NodeProto, attr_type};
use crate::tensor::{dtype_of, read_tensor};

/// Oldest default-domain opset sluice reads.
pub const MIN_OPSET: i64 = 9;
/// Newest default-domain opset sluice reads.
pub const MAX_OPSET: i64 = 21;

/// The ONNX operators sluice runs (default domain).
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Ceil",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "Div",
    "Dropout",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Floor",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LRN",
    "LayerNormalization",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "MaxPool",
    "Min",
    "Mul",
    "Neg",
    "Pad",
    "Pow",
    "Reciprocal",
    "ReduceMean",
    "Relu",
    "Reshape",
    "Resize",
    "Shape",
    "Sigmoid",
    "Slice",
    "Softmax",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
];

/// How a model is loaded.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Bounds on tensor sizes.
    pub limits: Limits,
}

/// A loaded model.
#[derive(Debug, Clone)]
pub struct Model {
    /// The file it came from.
    pub path: PathBuf,
    /// The graph.
    pub graph: Graph,
    /// The default-domain opset.
    pub opset: i64,
    /// The IR version.
    pub ir_version: i64,
    /// The producer named in the file (e.g. `pytorch 2.5`).
    pub producer: String,
    /// How many nodes of each operator the file has.
    pub op_counts: BTreeMap<String, usize>,
}

/// Reads and imports an ONNX file. External data is read only from the
/// file's own folder.
pub fn load(path: &Path, opts: &Options) -> Result<Model, ImportError> {
    let meta = std::fs::metadata(path).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })?;
    if meta.len() > i32::MAX as u64 {
        return Err(ImportError::TooBig {
            path: path.to_owned(),
            bytes: meta.len(),
        });
    }
    let bytes = std::fs::read(path).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })?;
    let dir = path.parent().map_or_else(
        || PathBuf::from("."),
        |p| {
            if p.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                p.to_owned()
            }
        },
    );
    from_bytes(&bytes, path, &dir, opts)
}

/// Imports a model from its bytes; `path` names it in errors and `dir` is
/// the folder its external data must lie in.
pub fn from_bytes(
    bytes: &[u8],
    path: &Path,
    dir: &Path,
    opts: &Options,
) -> Result<Model, ImportError> {
    let invalid = |msg: String| ImportError::Invalid {
        path: path.to_owned(),
        msg,
    };
    let m: ModelProto = crate::proto::decode_model(bytes).map_err(|e| ImportError::Decode {
        path: path.to_owned(),
        msg: e.to_string(),
    })?;
    let opset = default_opset(&m).map_err(&invalid)?;
    let g = m
        .graph
        .as_ref()
        .ok_or_else(|| invalid("the model has no graph; is this an ONNX model file?".into()))?;
    if g.output.is_empty() {
        return Err(invalid("the graph has no outputs".into()));
    }
    let mut unsupported = Vec::new();
    let mut op_counts = BTreeMap::new();
    for (i, n) in g.node.iter().enumerate() {
        *op_counts.entry(n.op_type.clone()).or_insert(0) += 1;
        let custom = !(n.domain.is_empty() || n.domain == "ai.onnx");
        if custom || !SUPPORTED_OPS.contains(&n.op_type.as_str()) {
            let op = if custom {
                format!("{}::{}", n.domain, n.op_type)
            } else {
                n.op_type.clone()
            };
            unsupported.push((op, node_name(n, i)));
        }
    }
    if !unsupported.is_empty() {
        return Err(ImportError::Unsupported {
            path: path.to_owned(),
            opset,
            ops: unsupported,
        });
    }
    let graph = build(g, opset, dir, opts).map_err(&invalid)?;
    // Every shape is checked at load: at batch 1, where every model runs.
    graph.specialize(1).map_err(|e| invalid(e.to_string()))?;
    Ok(Model {
        path: path.to_owned(),
        graph,
        opset,
        ir_version: m.ir_version,
        producer: format!("{} {}", m.producer_name, m.producer_version)
            .trim()
            .to_owned(),
        op_counts,
    })
}

fn default_opset(m: &ModelProto) -> Result<i64, String> {
    let v = m
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .ok_or("the model imports no default-domain (ai.onnx) opset")?;
    if !(MIN_OPSET..=MAX_OPSET).contains(&v) {
        return Err(format!(
            "the model uses opset {v}; sluice reads opsets {MIN_OPSET} to {MAX_OPSET} (convert it with onnx.version_converter)"
        ));
    }
    Ok(v)
}

fn node_name(n: &NodeProto, i: usize) -> String {
    if n.name.is_empty() {
        format!("{}#{i}", n.op_type)
    } else {
        n.name.clone()
    }
}

fn build(g: &GraphProto, opset: i64, dir: &Path, opts: &Options) -> Result<Graph, String> {
    let mut b = GraphBuilder::new(opts.limits);
    let ge = |e: sluice_graph::GraphError| e.to_string();
    if let Some(s) = g.sparse_initializer.first() {
        return Err(format!(
            "the graph has sparse initializers (the first with dims {:?}); sluice reads dense tensors only",
            s.dims
        ));
    }
    for init in &g.initializer {
        if init.name.is_empty() {
            return Err("an initializer has no name".into());
        }
        let t = read_tensor(init, dir).map_err(|e| format!("initializer '{}' {e}", init.name))?;
        b.constant_value(&init.name, t).map_err(ge)?;
    }
    let mut batch_name: Option<String> = None;
    for inp in &g.input {
        if b.constant(&inp.name).is_some() {
            continue; // IR < 4 lists initializers among the inputs.
        }
        let what = format!("graph input '{}'", inp.name);
        let ty = inp
            .r#type
            .as_ref()
            .ok_or_else(|| format!("{what} has no type"))?;
        let tt = ty.tensor_type.as_ref().ok_or_else(|| {
            format!("{what} is not a tensor (sequences, maps and optionals are not supported)")
        })?;
        let dtype = dtype_of(tt.elem_type).map_err(|e| format!("{what}: {e}"))?;
        let shape = tt.shape.as_ref().ok_or_else(|| {
            format!("{what} has no shape; sluice needs every input's rank and sizes")
        })?;
        let mut dims = Vec::with_capacity(shape.dim.len());
        for (k, d) in shape.dim.iter().enumerate() {
            use crate::proto::DimValue;
            let dim = match &d.value {
                Some(DimValue::DimValue(v)) if *v >= 0 => Dim::Fixed(*v as usize),
                Some(DimValue::DimValue(v)) => {
                    return Err(format!("{what} has the negative dimension {v}"));
                }
                other if k == 0 => {
                    let sym = match other {
                        Some(DimValue::DimParam(p)) => p.clone(),
                        _ => "?".to_owned(),
                    };
                    if let Some(prev) = &batch_name
                        && *prev != sym
                        && sym != "?"
                        && prev != "?"
                    {
                        return Err(format!(
                            "{what} has the symbolic first dimension '{sym}' but another input's is '{prev}'; sluice takes one batch dimension shared by all inputs"
                        ));
                    }
                    batch_name = Some(sym);
                    Dim::Batch
                }
                other => {
                    let sym = match other {
                        Some(DimValue::DimParam(p)) => format!("'{p}'"),
                        _ => "unknown".into(),
                    };
                    return Err(format!(
                        "{what} dimension {k} is symbolic ({sym}); sluice takes one symbolic dimension, the first (the batch): export the model with a fixed size there"
                    ));
                }
            };
            dims.push(dim);
        }
        b.input(&inp.name, dtype, dims).map_err(ge)?;
    }
    for (i, n) in g.node.iter().enumerate() {
        let name = node_name(n, i);
        convert(n, &name, opset, dir, &mut b)
            .map_err(|e| format!("node '{name}' ({}, opset {opset}): {e}", n.op_type))?;
    }
    for o in &g.output {
        if o.name.is_empty() {
            return Err("a graph output has no name".into());
        }
        b.output(&o.name);
    }
    b.build().map_err(ge)
}

/// A node's attributes by name.
struct Attrs<'a>(&'a [AttributeProto]);

impl<'a> Attrs<'a> {
    fn get(&self, name: &str, ty: i32) -> Result<Option<&'a AttributeProto>, String> {
        let Some(a) = self.0.iter().find(|a| a.name == name) else {
            return Ok(None);
        };
        if !a.ref_attr_name.is_empty() {
            return Err(format!(
                "attribute '{name}' refers to a function attribute, valid only inside functions"
            ));
        }
        if a.r#type != 0 && a.r#type != ty {
            return Err(format!(
                "attribute '{name}' has type {}, expected {ty}",
                a.r#type
            ));
        }
        Ok(Some(a))
    }
    fn i(&self, name: &str) -> Result<Option<i64>, String> {
        Ok(self.get(name, attr_type::INT)?.map(|a| a.i))
    }
    fn i_or(&self, name: &str, d: i64) -> Result<i64, String> {
        Ok(self.i(name)?.unwrap_or(d))
    }
    fn f_or(&self, name: &str, d: f32) -> Result<f32, String> {
        Ok(self.get(name, attr_type::FLOAT)?.map_or(d, |a| a.f))
    }
    fn f(&self, name: &str) -> Result<Option<f32>, String> {
        Ok(self.get(name, attr_type::FLOAT)?.map(|a| a.f))
    }
    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        Ok(self.get(name, attr_type::INTS)?.map(|a| a.ints.clone()))
    }
    fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, String> {
        Ok(self.get(name, attr_type::FLOATS)?.map(|a| a.floats.clone()))
    }
    fn s(&self, name: &str) -> Result<Option<String>, String> {
        Ok(self
            .get(name, attr_type::STRING)?
            .map(|a| String::from_utf8_lossy(&a.s).into_owned()))
    }
    fn t(&self, name: &str) -> Result<Option<&'a crate::proto::TensorProto>, String> {
        Ok(self
            .get(name, attr_type::TENSOR)?
            .and_then(|a| a.t.as_ref()))
    }
    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|a| a.name == name)
    }
}

fn usizes(v: Vec<i64>, what: &str) -> Result<Vec<usize>, String> {
    v.iter()
        .map(|&x| usize::try_from(x).map_err(|_| format!("{what} has the negative value {x}")))
        .collect()
}

fn auto_pad(a: &Attrs<'_>) -> Result<AutoPad, String> {
    Ok(match a.s("auto_pad")?.as_deref() {
        None | Some("NOTSET") | Some("") => AutoPad::NotSet,
        Some("SAME_UPPER") => AutoPad::SameUpper,
        Some("SAME_LOWER") => AutoPad::SameLower,
        Some("VALID") => AutoPad::Valid,
        Some(o) => {
            return Err(format!(
                "auto_pad '{o}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID"
            ));
        }
    })
}

fn window(a: &Attrs<'_>, kernel_required: bool) -> Result<Window, String> {
    let kernel = a
        .ints("kernel_shape")?
        .map(|k| usizes(k, "kernel_shape"))
        .transpose()?;
    if kernel_required && kernel.is_none() {
        return Err("kernel_shape is required".into());
    }
    if a.i_or("storage_order", 0)? != 0 {
        return Err("storage_order 1 (column-major indices) is not supported".into());
    }
    Ok(Window {
        kernel,
        strides: usizes(a.ints("strides")?.unwrap_or_default(), "strides")?,
        pads: usizes(a.ints("pads")?.unwrap_or_default(), "pads")?,
        dilations: usizes(a.ints("dilations")?.unwrap_or_default(), "dilations")?,
        auto_pad: auto_pad(a)?,
        ceil_mode: a.i_or("ceil_mode", 0)? != 0,
    })
}

fn convert(
    n: &NodeProto,
    name: &str,
    opset: i64,
    dir: &Path,
    b: &mut GraphBuilder,
) -> Result<(), String> {
    let a = Attrs(&n.attribute);
    let mut ins: Vec<Option<ValueId>> = n
        .input
        .iter()
        .map(|s| if s.is_empty() { None } else { Some(b.value(s)) })
        .collect();
    let mut outs: Vec<&str> = n.output.iter().map(String::as_str).collect();
    // Outputs sluice does not produce (MaxPool's Indices, Dropout's mask,
    // BatchNormalization's running statistics, LayerNormalization's mean and
    // inverse deviation): a node that reads one fails as reading an
    // undefined tensor, naming it.
    if matches!(
        n.op_type.as_str(),
        "MaxPool" | "Dropout" | "BatchNormalization" | "LayerNormalization"
    ) {
        outs.truncate(1);
    }
    let need = |ins: &[Option<ValueId>], k: usize| -> Result<(), String> {
        if ins.iter().flatten().count() < k || ins.first().copied().flatten().is_none() {
            return Err(format!(
                "needs at least {k} input(s), has {}",
                n.input.len()
            ));
        }
        Ok(())
    };
    if outs.is_empty() || outs[0].is_empty() {
        return Err("has no output".into());
    }
    // Turns a list attribute of older opsets into the constant input later opsets take.
    let const_input = |b: &mut GraphBuilder,
                       ins: &mut Vec<Option<ValueId>>,
                       pos: usize,
                       t: Option<Tensor>|
     -> Result<(), String> {
        if ins.len() <= pos {
            ins.resize(pos + 1, None);
        }
        if let Some(t) = t {
            ins[pos] = Some(b.anonymous_constant(name, t).map_err(|e| e.to_string())?);
        }
        Ok(())
    };
    let unary = |u: Unary| Op::Unary(u);
    let op = match n.op_type.as_str() {
        "Conv" => {
            need(&ins, 2)?;
            Op::Conv {
                window: window(&a, false)?,
                group: usize::try_from(a.i_or("group", 1)?).map_err(|_| "group is negative")?,
                act: None,
            }
        }
        "BatchNormalization" => {
            need(&ins, 5)?;
            if a.i_or("training_mode", 0)? != 0 {
                return Err("training_mode 1 is not supported (inference only)".into());
            }
            Op::BatchNorm {
                eps: a.f_or("epsilon", 1e-5)?,
            }
        }
        "Relu" => unary(Unary::Relu),
        "LeakyRelu" => unary(Unary::LeakyRelu(a.f_or("alpha", 0.01)?)),
        "Sigmoid" => unary(Unary::Sigmoid),
        "Tanh" => unary(Unary::Tanh),
        "HardSigmoid" => unary(Unary::HardSigmoid(
            a.f_or("alpha", 0.2)?,
            a.f_or("beta", 0.5)?,
        )),
        "HardSwish" => unary(Unary::HardSwish),
        "Erf" => unary(Unary::Erf),
        "Gelu" => match a.s("approximate")?.as_deref() {
            None | Some("none") => unary(Unary::Gelu),
            Some("tanh") => unary(Unary::GeluTanh),
            Some(o) => return Err(format!("approximate '{o}' is not 'none' or 'tanh'")),
        },
        "Sqrt" => unary(Unary::Sqrt),
        "Neg" => unary(Unary::Neg),
        "Exp" => unary(Unary::Exp),
        "Log" => unary(Unary::Log),
        "Abs" => unary(Unary::Abs),
        "Reciprocal" => unary(Unary::Reciprocal),
        "Floor" => unary(Unary::Floor),
        "Ceil" => unary(Unary::Ceil),
        "Clip" => {
            if opset < 11 {
                let lo = a.f("min")?.map(Tensor::scalar_f32);
                let hi = a.f("max")?.map(Tensor::scalar_f32);
                const_input(b, &mut ins, 1, lo)?;
                const_input(b, &mut ins, 2, hi)?;
            }
            Op::Clip
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" => {
            let op = match n.op_type.as_str() {
                "Add" => BinOp::Add,
                "Sub" => BinOp::Sub,
                "Mul" => BinOp::Mul,
                "Div" => BinOp::Div,
                "Pow" => BinOp::Pow,
                "Max" => BinOp::Max,
                _ => BinOp::Min,
            };
            if matches!(op, BinOp::Max | BinOp::Min) && ins.len() != 2 {
                return Err(format!(
                    "{} of {} inputs is not supported (two only)",
                    n.op_type,
                    ins.len()
                ));
            }
            need(&ins, 2)?;
            Op::Binary(op, None)
        }
        "Sum" => {
            need(&ins, 1)?;
            Op::Sum
        }
        "Softmax" | "LogSoftmax" => Op::Softmax {
            axis: a.i_or("axis", if opset < 13 { 1 } else { -1 })?,
            log: n.op_type == "LogSoftmax",
            coerce_2d: opset < 13,
        },
        "MaxPool" => Op::Pool {
            kind: PoolKind::Max,
            window: window(&a, true)?,
        },
        "AveragePool" => Op::Pool {
            kind: PoolKind::Avg(a.i_or("count_include_pad", 0)? != 0),
            window: window(&a, true)?,
        },
        "GlobalAveragePool" => Op::GlobalAveragePool,
        "LRN" => Op::Lrn {
            size: usize::try_from(a.i("size")?.ok_or("size is required")?)
                .map_err(|_| "size is negative")?,
            alpha: a.f_or("alpha", 1e-4)?,
            beta: a.f_or("beta", 0.75)?,
            bias: a.f_or("bias", 1.0)?,
        },
        "Gemm" => {
            need(&ins, 2)?;
            Op::Gemm {
                trans_a: a.i_or("transA", 0)? != 0,
                trans_b: a.i_or("transB", 0)? != 0,
                alpha: a.f_or("alpha", 1.0)?,
                beta: a.f_or("beta", 1.0)?,
                act: None,
            }
        }
        "MatMul" => {
            need(&ins, 2)?;
            Op::MatMul
        }
        "Flatten" => Op::Flatten {
            axis: a.i_or("axis", 1)?,
        },
        "Reshape" => {
            need(&ins, 2)?;
            Op::Reshape {
                allowzero: a.i_or("allowzero", 0)? != 0,
            }
        }
        "Transpose" => Op::Transpose {
            perm: a.ints("perm")?.map(|p| usizes(p, "perm")).transpose()?,
        },
        "Concat" => Op::Concat {
            axis: a.i("axis")?.ok_or("axis is required")?,
        },
        "Split" => {
            if opset < 13 {
                let s = a.ints("split")?.map(Tensor::i64_vec);
                const_input(b, &mut ins, 1, s)?;
            }
            if let Some(k) = a.i("num_outputs")?
                && k as usize != outs.len()
            {
                return Err(format!(
                    "num_outputs is {k} but the node has {} outputs",
                    outs.len()
                ));
            }
            Op::Split {
                axis: a.i_or("axis", 0)?,
            }
        }
        "Slice" => {
            if opset < 10 {
                let starts = a.ints("starts")?.ok_or("starts is required")?;
                let ends = a.ints("ends")?.ok_or("ends is required")?;
                const_input(b, &mut ins, 1, Some(Tensor::i64_vec(starts)))?;
                const_input(b, &mut ins, 2, Some(Tensor::i64_vec(ends)))?;
                const_input(b, &mut ins, 3, a.ints("axes")?.map(Tensor::i64_vec))?;
            }
            need(&ins, 3)?;
            Op::Slice
        }
        "Squeeze" | "Unsqueeze" => {
            if opset < 13 {
                let axes = a.ints("axes")?;
                if n.op_type == "Unsqueeze" && axes.is_none() {
                    return Err("axes is required".into());
                }
                const_input(b, &mut ins, 1, axes.map(Tensor::i64_vec))?;
            }
            if n.op_type == "Squeeze" {
                Op::Squeeze
            } else {
                Op::Unsqueeze
            }
        }
        "Expand" => {
            need(&ins, 2)?;
            Op::Expand
        }
        "Gather" => {
            need(&ins, 2)?;
            Op::Gather {
                axis: a.i_or("axis", 0)?,
            }
        }
        "Pad" => {
            let mode = match a.s("mode")?.as_deref() {
                None | Some("constant") => PadMode::Constant,
                Some("reflect") => PadMode::Reflect,
                Some("edge") => PadMode::Edge,
                Some(o) => return Err(format!("mode '{o}' is not constant, reflect or edge")),
            };
            if opset < 11 {
                let pads = a.ints("pads")?.ok_or("pads is required")?;
                const_input(b, &mut ins, 1, Some(Tensor::i64_vec(pads)))?;
                const_input(
                    b,
                    &mut ins,
                    2,
                    Some(Tensor::scalar_f32(a.f_or("value", 0.0)?)),
                )?;
            }
            need(&ins, 2)?;
            Op::Pad { mode }
        }
        "Resize" => {
            let mode = match a.s("mode")?.as_deref() {
                None | Some("nearest") => {
                    ResizeMode::Nearest(match a.s("nearest_mode")?.as_deref() {
                        _ if opset < 11 => NearestMode::Floor,
                        None | Some("round_prefer_floor") => NearestMode::RoundPreferFloor,
                        Some("round_prefer_ceil") => NearestMode::RoundPreferCeil,
                        Some("floor") => NearestMode::Floor,
                        Some("ceil") => NearestMode::Ceil,
                        Some(o) => return Err(format!("nearest_mode '{o}' is not supported")),
                    })
                }
                Some("linear") => ResizeMode::Linear,
                Some(o) => {
                    return Err(format!(
                        "mode '{o}' is not supported (nearest and linear are)"
                    ));
                }
            };
            let coord = match a.s("coordinate_transformation_mode")?.as_deref() {
                _ if opset < 11 => CoordMode::Asymmetric,
                None | Some("half_pixel") => CoordMode::HalfPixel,
                Some("pytorch_half_pixel") => CoordMode::PytorchHalfPixel,
                Some("align_corners") => CoordMode::AlignCorners,
                Some("asymmetric") => CoordMode::Asymmetric,
                Some(o) => {
                    return Err(format!(
                        "coordinate_transformation_mode '{o}' is not supported (half_pixel, pytorch_half_pixel, align_corners, asymmetric are)"
                    ));
                }
            };
            for (attr, default) in [("antialias", 0), ("exclude_outside", 0)] {
                if a.i_or(attr, default)? != default {
                    return Err(format!("{attr} is not supported"));
                }
            }
            let aspect = match a.s("keep_aspect_ratio_policy")?.as_deref() {
                None | Some("stretch") => Aspect::Stretch,
                Some("not_larger") => Aspect::NotLarger,
                Some("not_smaller") => Aspect::NotSmaller,
                Some(o) => {
                    return Err(format!(
                        "keep_aspect_ratio_policy '{o}' is not stretch, not_larger or not_smaller"
                    ));
                }
            };
            let axes = a.ints("axes")?;
            if opset < 11 {
                // Resize-10: (X, scales).
                let scales = ins.get(1).copied().flatten();
                ins = vec![ins.first().copied().flatten(), None, scales];
            }
            Op::Resize {
                mode,
                coord,
                axes,
                aspect,
            }
        }
        "LayerNormalization" => {
            need(&ins, 2)?;
            Op::LayerNorm {
                axis: a.i_or("axis", -1)?,
                eps: a.f_or("epsilon", 1e-5)?,
            }
        }
        "ReduceMean" => {
            if opset < 18 {
                const_input(b, &mut ins, 1, a.ints("axes")?.map(Tensor::i64_vec))?;
            }
            Op::ReduceMean {
                keepdims: a.i_or("keepdims", 1)? != 0,
                noop_with_empty_axes: a.i_or("noop_with_empty_axes", 0)? != 0,
            }
        }
        "Where" => {
            need(&ins, 3)?;
            Op::Where
        }
        "Cast" => Op::Cast {
            to: dtype_of(
                i32::try_from(a.i("to")?.ok_or("to is required")?)
                    .map_err(|_| "to is out of range")?,
            )?,
        },
        "Shape" => Op::Shape {
            start: a.i_or("start", 0)?,
            end: a.i("end")?,
        },
        "ConstantOfShape" => {
            let value = match a.t("value")? {
                Some(tp) => {
                    let t = read_tensor(tp, dir).map_err(|e| format!("its value {e}"))?;
                    if t.len() != 1 {
                        return Err(format!("value must hold one element, holds {}", t.len()));
                    }
                    t
                }
                None => Tensor::scalar_f32(0.0),
            };
            Op::ConstantOfShape { value }
        }
        "Constant" => {
            let t = constant_value(&a, dir)?;
            return b
                .constant_value(outs[0], t)
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
        "Identity" => Op::Identity,
        "Dropout" => {
            if let Some(Some(tm)) = ins.get(2)
                && b.constant_of(*tm)
                    .is_none_or(|t| t.to_i64_vec().first().copied().unwrap_or(0) != 0)
            {
                return Err("training_mode must be a constant false".into());
            }
            ins.truncate(1);
            Op::Identity
        }
        other => return Err(format!("operator '{other}' is not supported")),
    };
    b.node(name, op, ins, &outs).map_err(|e| e.to_string())
}

fn constant_value(a: &Attrs<'_>, dir: &Path) -> Result<Tensor, String> {
    if let Some(tp) = a.t("value")? {
        return read_tensor(tp, dir).map_err(|e| format!("its value {e}"));
    }
    if let Some(f) = a.f("value_float")? {
        return Ok(Tensor::scalar_f32(f));
    }
    if let Some(v) = a.floats("value_floats")? {
        let n = v.len();
        return Tensor::f32(vec![n], v).map_err(|e| e.0);
    }
    if let Some(i) = a.i("value_int")? {
        return Tensor::i64(vec![], vec![i]).map_err(|e| e.0);
    }
    if let Some(v) = a.ints("value_ints")? {
        return Ok(Tensor::i64_vec(v));
    }
    if a.has("sparse_value") || a.has("value_string") || a.has("value_strings") {
        return Err("sparse and string constants are not supported".into());
    }
    Err("has no value".into())
}
