//! Operators and their attributes.
//!
//! Each operator has one canonical form, that of the newest ONNX opset the
//! importer takes: parameters that later opsets moved from attributes to
//! inputs (`Slice`'s starts and ends, `Squeeze`'s axes, `Pad`'s pads, `Clip`'s
//! bounds, `Split`'s sizes, `ReduceMean`'s axes) are inputs here, and the
//! importer turns an older file's attributes into constant inputs. Input
//! positions are ONNX's; an absent optional input is `None` in
//! [`crate::Node::inputs`].

use crate::Tensor;

/// An element-wise function of one value, also used as an activation fused
/// into the operator before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unary {
    /// `max(x, 0)`.
    Relu,
    /// `x` for `x >= 0`, else `alpha · x`.
    LeakyRelu(f32),
    /// `min(max(x, lo), hi)`.
    Clip(f32, f32),
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `max(0, min(1, alpha · x + beta))`.
    HardSigmoid(f32, f32),
    /// `x · max(0, min(1, x / 6 + 1/2))`.
    HardSwish,
    /// `x · sigmoid(x)` (formed by fusing `Mul(x, Sigmoid(x))`).
    Silu,
    /// The error function.
    Erf,
    /// `x · Φ(x)`, exact.
    Gelu,
    /// GELU, tanh approximation.
    GeluTanh,
    /// Square root.
    Sqrt,
    /// `-x`.
    Neg,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// `|x|`.
    Abs,
    /// `1 / x`.
    Reciprocal,
    /// Round toward −∞.
    Floor,
    /// Round toward +∞.
    Ceil,
}

/// An activation fused into `Conv`, `Gemm` or an element-wise `Add`.
pub type Act = Option<Unary>;

/// A broadcasting binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `a + b`.
    Add,
    /// `a − b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `a / b` (integers: truncating).
    Div,
    /// `a^b`.
    Pow,
    /// `max(a, b)`.
    Max,
    /// `min(a, b)`.
    Min,
}

/// How `Conv` and the pools pad when the file says `auto_pad`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoPad {
    /// Explicit `pads` (or none).
    NotSet,
    /// Output size `ceil(in / stride)`, extra padding at the end.
    SameUpper,
    /// Output size `ceil(in / stride)`, extra padding at the start.
    SameLower,
    /// No padding.
    Valid,
}

/// Spatial attributes shared by `Conv` and the pools, for 1-D or 2-D
/// windows (the only ones sluice runs).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Window size per spatial axis; for `Conv`, `None` takes the weight's.
    pub kernel: Option<Vec<usize>>,
    /// Strides (default 1).
    pub strides: Vec<usize>,
    /// Padding at the start of each axis, then at the end (default 0).
    pub pads: Vec<usize>,
    /// Dilations (default 1).
    pub dilations: Vec<usize>,
    /// `auto_pad`.
    pub auto_pad: AutoPad,
    /// Pools: output size rounds up instead of down.
    pub ceil_mode: bool,
}

/// Max or average pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    /// `MaxPool`.
    Max,
    /// `AveragePool`; the flag is `count_include_pad`.
    Avg(bool),
}

/// `Resize`'s interpolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeMode {
    /// Nearest neighbour, with its rounding.
    Nearest(NearestMode),
    /// (Bi)linear.
    Linear,
}

/// How `Resize`'s nearest mode rounds a source coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearestMode {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    /// Floor.
    Floor,
    /// Ceiling.
    Ceil,
}

/// How `Resize` maps an output coordinate to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordMode {
    /// `(x + 0.5) / scale − 0.5`.
    HalfPixel,
    /// Half-pixel, but 0 for an output axis of length 1.
    PytorchHalfPixel,
    /// `x · (in − 1) / (out − 1)`.
    AlignCorners,
    /// `x / scale`.
    Asymmetric,
}

/// `Resize`'s `keep_aspect_ratio_policy` for `sizes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aspect {
    /// Each axis to its size.
    Stretch,
    /// One scale, the smallest of the axes': no axis beyond its size.
    NotLarger,
    /// One scale, the largest: no axis below its size.
    NotSmaller,
}

/// `Pad`'s mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// Fill with the constant.
    Constant,
    /// Mirror without repeating the edge.
    Reflect,
    /// Repeat the edge.
    Edge,
}

/// An operator with its attributes.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `Conv(X, W, B?)` with a fused activation.
    Conv {
        /// Window attributes.
        window: Window,
        /// Groups.
        group: usize,
        /// Fused activation.
        act: Act,
    },
    /// `BatchNormalization(X, scale, B, mean, var)`, inference form.
    BatchNorm {
        /// Added to the variance.
        eps: f32,
    },
    /// An element-wise function.
    Unary(Unary),
    /// `Clip(X, min?, max?)`.
    Clip,
    /// A broadcasting binary operator with a fused activation.
    Binary(BinOp, Act),
    /// `Sum(X1, X2, …)`, broadcasting.
    Sum,
    /// `Softmax` or `LogSoftmax`.
    Softmax {
        /// The axis (may be negative).
        axis: i64,
        /// `LogSoftmax`.
        log: bool,
        /// Before opset 13: the input is viewed as 2-D at `axis`.
        coerce_2d: bool,
    },
    /// `MaxPool` / `AveragePool`.
    Pool {
        /// Which pool.
        kind: PoolKind,
        /// Window attributes (the kernel is always given).
        window: Window,
    },
    /// `GlobalAveragePool`.
    GlobalAveragePool,
    /// `LRN` across channels.
    Lrn {
        /// Window size.
        size: usize,
        /// Scale.
        alpha: f32,
        /// Exponent.
        beta: f32,
        /// Offset.
        bias: f32,
    },
    /// `Gemm(A, B, C?)`: `alpha · A' · B' + beta · C`, with a fused activation.
    Gemm {
        /// Transpose A.
        trans_a: bool,
        /// Transpose B.
        trans_b: bool,
        /// Scale of the product.
        alpha: f32,
        /// Scale of C.
        beta: f32,
        /// Fused activation.
        act: Act,
    },
    /// `MatMul(A, B)`, numpy semantics.
    MatMul,
    /// `Flatten(X)` at `axis`.
    Flatten {
        /// Axis (may be negative).
        axis: i64,
    },
    /// `Reshape(X, shape)`.
    Reshape {
        /// A 0 in `shape` is a 0, not "copy the input's".
        allowzero: bool,
    },
    /// `Transpose(X)`.
    Transpose {
        /// The permutation; `None` reverses the axes.
        perm: Option<Vec<usize>>,
    },
    /// `Concat(X1, X2, …)`.
    Concat {
        /// Axis (may be negative).
        axis: i64,
    },
    /// `Split(X, split?)` into the node's outputs.
    Split {
        /// Axis (may be negative).
        axis: i64,
    },
    /// `Slice(X, starts, ends, axes?, steps?)`.
    Slice,
    /// `Squeeze(X, axes?)`.
    Squeeze,
    /// `Unsqueeze(X, axes)`.
    Unsqueeze,
    /// `Expand(X, shape)`.
    Expand,
    /// `Gather(X, indices)`.
    Gather {
        /// Axis (may be negative).
        axis: i64,
    },
    /// `Pad(X, pads, value?, axes?)`.
    Pad {
        /// Mode.
        mode: PadMode,
    },
    /// `Resize(X, roi?, scales?, sizes?)`.
    Resize {
        /// Interpolation.
        mode: ResizeMode,
        /// Coordinate transformation.
        coord: CoordMode,
        /// The axes `scales` / `sizes` give values for (`None`: every axis).
        axes: Option<Vec<i64>>,
        /// How `sizes` keeps the aspect ratio.
        aspect: Aspect,
    },
    /// `LayerNormalization(X, scale, B?)` over the axes from `axis` on.
    LayerNorm {
        /// First normalised axis (may be negative).
        axis: i64,
        /// Added to the variance.
        eps: f32,
    },
    /// `ReduceMean(X, axes?)`.
    ReduceMean {
        /// Keep reduced axes as 1.
        keepdims: bool,
        /// No axes means the identity rather than all axes.
        noop_with_empty_axes: bool,
    },
    /// `Where(cond, X, Y)`.
    Where,
    /// `Cast(X)`.
    Cast {
        /// Target type.
        to: crate::DType,
    },
    /// `Shape(X)`, axes `start..end`.
    Shape {
        /// First axis (may be negative).
        start: i64,
        /// End axis (may be negative); `None` is the rank.
        end: Option<i64>,
    },
    /// `ConstantOfShape(shape)` filled with one value.
    ConstantOfShape {
        /// A one-element tensor: the value and its type.
        value: Tensor,
    },
    /// `Identity(X)` (and `Dropout` in inference).
    Identity,
}

impl Op {
    /// The ONNX operator this is (fused forms by their head operator).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Conv { .. } => "Conv",
            Op::BatchNorm { .. } => "BatchNormalization",
            Op::Unary(u) => u.name(),
            Op::Clip => "Clip",
            Op::Binary(b, _) => b.name(),
            Op::Sum => "Sum",
            Op::Softmax { log: false, .. } => "Softmax",
            Op::Softmax { log: true, .. } => "LogSoftmax",
            Op::Pool {
                kind: PoolKind::Max,
                ..
            } => "MaxPool",
            Op::Pool {
                kind: PoolKind::Avg(_),
                ..
            } => "AveragePool",
            Op::GlobalAveragePool => "GlobalAveragePool",
            Op::Lrn { .. } => "LRN",
            Op::Gemm { .. } => "Gemm",
            Op::MatMul => "MatMul",
            Op::Flatten { .. } => "Flatten",
            Op::Reshape { .. } => "Reshape",
            Op::Transpose { .. } => "Transpose",
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Slice => "Slice",
            Op::Squeeze => "Squeeze",
            Op::Unsqueeze => "Unsqueeze",
            Op::Expand => "Expand",
            Op::Gather { .. } => "Gather",
            Op::Pad { .. } => "Pad",
            Op::Resize { .. } => "Resize",
            Op::LayerNorm { .. } => "LayerNormalization",
            Op::ReduceMean { .. } => "ReduceMean",
            Op::Where => "Where",
            Op::Cast { .. } => "Cast",
            Op::Shape { .. } => "Shape",
            Op::ConstantOfShape { .. } => "ConstantOfShape",
            Op::Identity => "Identity",
        }
    }

    /// The activation fused into this operator, if any.
    pub fn fused_act(&self) -> Act {
        match self {
            Op::Conv { act, .. } | Op::Gemm { act, .. } | Op::Binary(_, act) => *act,
            _ => None,
        }
    }
}

impl Unary {
    /// The ONNX operator name.
    pub fn name(self) -> &'static str {
        match self {
            Unary::Relu => "Relu",
            Unary::LeakyRelu(_) => "LeakyRelu",
            Unary::Clip(..) => "Clip",
            Unary::Sigmoid => "Sigmoid",
            Unary::Tanh => "Tanh",
            Unary::HardSigmoid(..) => "HardSigmoid",
            Unary::HardSwish => "HardSwish",
            Unary::Silu => "SiLU",
            Unary::Erf => "Erf",
            Unary::Gelu | Unary::GeluTanh => "Gelu",
            Unary::Sqrt => "Sqrt",
            Unary::Neg => "Neg",
            Unary::Exp => "Exp",
            Unary::Log => "Log",
            Unary::Abs => "Abs",
            Unary::Reciprocal => "Reciprocal",
            Unary::Floor => "Floor",
            Unary::Ceil => "Ceil",
        }
    }

    /// Applies the function to one value.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Unary::Relu => x.max(0.0),
            Unary::LeakyRelu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Unary::Clip(lo, hi) => x.max(lo).min(hi),
            Unary::Sigmoid => sigmoid(x),
            Unary::Tanh => x.tanh(),
            Unary::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Unary::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            Unary::Silu => x * sigmoid(x),
            Unary::Erf => erf(x),
            Unary::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
            Unary::GeluTanh => {
                const K: f32 = 0.797_884_6; // sqrt(2 / pi)
                0.5 * x * (1.0 + (K * (x + 0.044_715 * x * x * x)).tanh())
            }
            Unary::Sqrt => x.sqrt(),
            Unary::Neg => -x,
            Unary::Exp => x.exp(),
            Unary::Log => x.ln(),
            Unary::Abs => x.abs(),
            Unary::Reciprocal => 1.0 / x,
            Unary::Floor => x.floor(),
            Unary::Ceil => x.ceil(),
        }
    }
}

/// Applies a fused activation.
pub fn apply_act(act: Act, x: f32) -> f32 {
    match act {
        None => x,
        Some(u) => u.apply(x),
    }
}

fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The error function, in f64 (W. J. Cody's rational approximations as in
/// most libms are not in std; this uses the Abramowitz–Stegun 7.1.26 form
/// refined by one Newton step on `erf`, accurate to about 1e-7 absolute,
/// below f32's resolution near 1).
pub fn erf(x: f32) -> f32 {
    erf_f64(f64::from(x)) as f32
}

fn erf_f64(x: f64) -> f64 {
    // Series for small |x|, continued-fraction-free complementary form for
    // large |x|: both converge fast in f64.
    let ax = x.abs();
    let r = if ax < 2.5 {
        // Maclaurin series: erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)).
        let mut term = ax;
        let mut sum = ax;
        let x2 = ax * ax;
        let mut n = 0.0f64;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
            if n > 200.0 {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else if ax < 6.0 {
        // erfc(x) = exp(-x^2)/(x sqrt(pi)) * continued fraction (Lentz).
        let x2 = ax * ax;
        let mut f = ax;
        let mut c = ax;
        let mut d = 0.0f64;
        for k in 1..200 {
            let a = f64::from(k) / 2.0;
            d = ax + a * d;
            d = if d == 0.0 { 1e-300 } else { 1.0 / d };
            c = ax + a / c;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        1.0 - (-x2).exp() / (f * std::f64::consts::PI.sqrt())
    } else {
        1.0
    };
    if x < 0.0 { -r } else { r }
}

impl BinOp {
    /// The ONNX operator name.
    pub fn name(self) -> &'static str {
        match self {
            BinOp::Add => "Add",
            BinOp::Sub => "Sub",
            BinOp::Mul => "Mul",
            BinOp::Div => "Div",
            BinOp::Pow => "Pow",
            BinOp::Max => "Max",
            BinOp::Min => "Min",
        }
    }

    /// Applies the operator to floats.
    pub fn apply_f32(self, a: f32, b: f32) -> f32 {
        match self {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            BinOp::Div => a / b,
            BinOp::Pow => a.powf(b),
            BinOp::Max => a.max(b),
            BinOp::Min => a.min(b),
        }
    }

    /// Applies the operator to integers (wrapping; division by zero gives 0).
    pub fn apply_i64(self, a: i64, b: i64) -> i64 {
        match self {
            BinOp::Add => a.wrapping_add(b),
            BinOp::Sub => a.wrapping_sub(b),
            BinOp::Mul => a.wrapping_mul(b),
            BinOp::Div => a.checked_div(b).unwrap_or(0),
            BinOp::Pow => u32::try_from(b).map_or(0, |e| a.wrapping_pow(e)),
            BinOp::Max => a.max(b),
            BinOp::Min => a.min(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // Reference values of erf (Abramowitz & Stegun, Table 7.1).
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (2.0, 0.995_322_3),
            (3.0, 0.999_977_9),
        ] {
            assert!(
                (erf(x) - want).abs() < 1e-6,
                "erf({x}) = {} want {want}",
                erf(x)
            );
            assert!((erf(-x) + want).abs() < 1e-6);
        }
    }

    #[test]
    fn activations() {
        assert_eq!(Unary::Relu.apply(-1.0), 0.0);
        assert_eq!(Unary::LeakyRelu(0.1).apply(-2.0), -0.2);
        assert_eq!(Unary::HardSwish.apply(6.0), 6.0);
        assert!((Unary::Gelu.apply(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((Unary::Sigmoid.apply(-100.0)).abs() < 1e-30);
    }
}
