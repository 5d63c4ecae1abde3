//! Model builders: real layer shapes to kernel plans and model manifests.
//!
//! [`build`] turns one of the DISB models (`vgg19`, `resnet152`,
//! `bert_base`, `gpt2`) into a [`BuiltModel`]:
//!
//! - a [`Plan`]: device buffers (f32 element counts, 256-byte-aligned
//!   offsets in one arena, roles input / output / weight / activation) and
//!   steps in launch order, each a kernel of the sluice CUDA kernel library
//!   (`daemon/cuda/kernels/`) named and called as its ABI table says, with typed
//!   arguments ([`Op::args`], in ABI order) that reference
//!   buffer slices, and the grid / block / dynamic shared memory the ABI's
//!   launch rules give;
//! - weights from a seed ([`BuiltModel::weights`]), scaled so activations
//!   stay of order one through every layer;
//! - a CPU run ([`run_cpu`]) that executes the plan with [`super::ops`];
//! - a manifest ([`BuiltModel::manifest`], [`BuiltModel::manifest_json`])
//!   the daemon's loader accepts, with each kernel's launch configuration,
//!   its reads/writes byte ranges and idempotent groups, a per-kernel
//!   register **estimate** and kernel/block times **estimated** by a
//!   roofline against H100 SXM5 peaks ([`estimate`]).
//!
//! Every activation buffer is written by the one step that produces it (no
//! reuse) and no step writes a buffer it reads (the ABI's rule), so every
//! kernel is idempotent alone and each manifest kernel's `group_start` is
//! its own index.
//!
//! `docs/nn-models.md` describes the shapes, the estimates and what is left.

use std::fmt::Write as _;

mod lower;
pub use lower::{IoSlice, LowerError, Lowered, lower, lower_graph};

use super::reference::{
    self, Act, AttentionShape, BmmShape, Conv2dShape, ConvExShape, ElemOp, ElemShape, EltwiseOp,
    EmbeddingShape, GATHER_SOURCES, GatherShape, GemmShape, GlobalPoolShape, InterpShape, LrnShape,
    Pool2dShape, PoolExShape, PoolMode, RowsShape, ShapeError,
};
use sluice_gpu::occupancy::{Footprint, blocks_per_cu};
use sluice_gpu::profile::DeviceProfile;
use sluice_model::idempotent::{self, ByteRange, KernelAccess, RangeSet};
use sluice_model::{KernelMemory, Manifest, Model, ModelError, ModelRegistry};
use sluice_rng::{Draws, SeedableRng, SplitMix64};

/// The models [`build`] knows.
pub const MODEL_NAMES: [&str; 4] = ["vgg19", "resnet152", "bert_base", "gpt2"];

/// Alignment of every buffer in the arena, in bytes.
pub const BUFFER_ALIGN: u64 = 256;

// ---- roofline constants (estimates, not measurements) ----

/// H100 SXM5 peak FP32 (non-tensor-core) throughput in FLOP/s: 132 SMs ×
/// 128 FP32 lanes × 2 (FMA) × 1.98 GHz boost, NVIDIA's "67 TFLOPS" datasheet
/// figure. Not in `daemon/gpu/profiles/h100.toml` (which has no throughput
/// figures); a datasheet peak, not a measurement.
pub const H100_FP32_FLOPS: f64 = 66.9e12;
/// H100 SXM5 HBM3 peak bandwidth in bytes/s (NVIDIA datasheet: 3.35 TB/s);
/// a datasheet peak, not a measurement.
pub const H100_HBM_BYTES_PER_S: f64 = 3.35e12;
/// FP32 lanes per H100 SM (NVIDIA H100 whitepaper). A grid with fewer
/// threads than `SMs × lanes` is credited that share of the peaks.
pub const H100_FP32_LANES_PER_SM: u64 = 128;
/// Floor on an estimated kernel time in µs: an estimate of the start-to-end
/// time of a kernel that does almost nothing (launch latency excluded).
pub const MIN_KERNEL_US: f64 = 2.0;

/// Side of the output tile of `sluice_gemm` / `sluice_conv2d` blocks.
const TILE: usize = 64;
/// Largest grid y / z dimension CUDA allows.
const MAX_GRID_YZ: u64 = 65_535;
/// Largest grid x dimension CUDA allows.
const MAX_GRID_X: u64 = (1 << 31) - 1;

// ---- kernels of the ABI ----

/// A kernel of the sluice kernel library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `sluice_gemm`.
    Gemm,
    /// `sluice_conv2d`.
    Conv2d,
    /// `sluice_pool2d`.
    Pool2d,
    /// `sluice_global_avgpool`.
    GlobalAvgPool,
    /// `sluice_eltwise`.
    Eltwise,
    /// `sluice_softmax`.
    Softmax,
    /// `sluice_layernorm`.
    Layernorm,
    /// `sluice_attention`.
    Attention,
    /// `sluice_elementwise`.
    Elementwise,
    /// `sluice_gather`.
    Gather,
    /// `sluice_bmm`.
    Bmm,
    /// `sluice_embedding`.
    Embedding,
    /// `sluice_conv2d_ex`.
    Conv2dEx,
    /// `sluice_pool2d_ex`.
    Pool2dEx,
    /// `sluice_lrn`.
    Lrn,
    /// `sluice_interp`.
    Interp,
}

impl Kernel {
    /// The `extern "C"` name in the kernel library.
    pub const fn abi_name(self) -> &'static str {
        match self {
            Kernel::Gemm => "sluice_gemm",
            Kernel::Conv2d => "sluice_conv2d",
            Kernel::Pool2d => "sluice_pool2d",
            Kernel::GlobalAvgPool => "sluice_global_avgpool",
            Kernel::Eltwise => "sluice_eltwise",
            Kernel::Softmax => "sluice_softmax",
            Kernel::Layernorm => "sluice_layernorm",
            Kernel::Attention => "sluice_attention",
            Kernel::Elementwise => "sluice_elementwise",
            Kernel::Gather => "sluice_gather",
            Kernel::Bmm => "sluice_bmm",
            Kernel::Embedding => "sluice_embedding",
            Kernel::Conv2dEx => "sluice_conv2d_ex",
            Kernel::Pool2dEx => "sluice_pool2d_ex",
            Kernel::Lrn => "sluice_lrn",
            Kernel::Interp => "sluice_interp",
        }
    }

    /// Threads per block (ABI table; blocks are one-dimensional).
    pub const fn block_threads(self) -> u32 {
        match self {
            Kernel::Attention => 64,
            _ => 256,
        }
    }

    /// Static shared memory per block in bytes, an **estimate** to be
    /// replaced by `ptxas -v` figures. `sluice_gemm` and `sluice_conv2d`:
    /// 2·64·16 floats = 8 KiB (ABI table). The ABI gives no figure for the
    /// others; these follow the work-in-progress sources in
    /// `daemon/cuda/kernels/`: attention stages 64 queries (128·65 floats) and
    /// two 8×128 K/V tiles, 41472 B; softmax, layernorm and global average
    /// pooling reduce through 32 floats (128 B); pooling and element-wise
    /// use none. The few bytes of preemption-flag words are left out.
    pub const fn static_smem_bytes(self) -> u32 {
        match self {
            Kernel::Gemm | Kernel::Conv2d => 2 * 64 * 16 * 4,
            Kernel::Attention => (128 * 65 + 2 * 8 * 128) * 4,
            Kernel::Softmax | Kernel::Layernorm | Kernel::GlobalAvgPool => 32 * 4,
            Kernel::Pool2d | Kernel::Eltwise => 0,
            Kernel::Elementwise
            | Kernel::Gather
            | Kernel::Bmm
            | Kernel::Embedding
            | Kernel::Conv2dEx
            | Kernel::Pool2dEx
            | Kernel::Lrn
            | Kernel::Interp => 0,
        }
    }

    /// Registers per thread: an **estimate**, to be replaced by `ptxas -v`
    /// figures. GEMM/conv: 16 accumulators (4×4 outputs) plus A/B fragments
    /// and addressing, 64. Attention: a query row and an output row of up to
    /// 128 floats per thread cannot all stay in registers; 128 (the rest
    /// spills). Pooling 24, element-wise 16, softmax and layernorm 32.
    pub const fn regs_per_thread_estimate(self) -> u32 {
        match self {
            Kernel::Gemm | Kernel::Conv2d => 64,
            Kernel::Attention => 128,
            Kernel::Pool2d | Kernel::GlobalAvgPool => 24,
            Kernel::Eltwise => 16,
            Kernel::Softmax | Kernel::Layernorm => 32,
            Kernel::Elementwise | Kernel::Gather | Kernel::Embedding | Kernel::Interp => 24,
            Kernel::Bmm | Kernel::Conv2dEx | Kernel::Pool2dEx | Kernel::Lrn => 32,
        }
    }
}

// ---- the plan ----

/// Index of a buffer in [`Plan::buffers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(usize);

impl BufId {
    /// The index in [`Plan::buffers`].
    pub const fn index(self) -> usize {
        self.0
    }
}

/// What a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The model's input; uploaded before the first kernel, never written.
    Input,
    /// The model's output; written by a step, downloaded after the last.
    Output,
    /// Parameters; uploaded once, never written by a kernel.
    Weight,
    /// An intermediate tensor.
    Activation,
}

/// How a weight buffer is initialised: uniform in
/// `[center − half_width, center + half_width]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Init {
    /// Mean of the distribution.
    pub center: f32,
    /// Half the width of its support.
    pub half_width: f32,
}

/// A device buffer of f32 elements.
#[derive(Debug, Clone, PartialEq)]
pub struct Buffer {
    /// Name, e.g. `conv1_1.w`.
    pub name: String,
    /// What it holds.
    pub role: Role,
    /// Length in f32 elements.
    pub len: usize,
    /// Offset of its first byte in the plan's arena ([`BUFFER_ALIGN`]-aligned).
    pub offset: u64,
    /// Initialisation of a weight buffer (`None` for the other roles).
    pub init: Option<Init>,
}

impl Buffer {
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.len as u64 * 4
    }
}

/// A contiguous slice of a buffer, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorRef {
    /// The buffer.
    pub buf: BufId,
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

/// One kernel launch's operation with its typed arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `sluice_gemm`: `c = act(a·b + bias)`.
    Gemm {
        /// `A[M,K]`.
        a: TensorRef,
        /// `B[K,N]`.
        b: TensorRef,
        /// `bias[N]`, nullable.
        bias: Option<TensorRef>,
        /// `C[M,N]`.
        c: TensorRef,
        /// M, N, K.
        shape: GemmShape,
        /// Activation.
        act: Act,
    },
    /// `sluice_conv2d`.
    Conv2d {
        /// `x[Cin,H,W]`.
        x: TensorRef,
        /// `w[Cout,Cin,KH,KW]`.
        w: TensorRef,
        /// `bias[Cout]`, nullable.
        bias: Option<TensorRef>,
        /// `y[Cout,OH,OW]`.
        y: TensorRef,
        /// Shape and stride/padding.
        shape: Conv2dShape,
        /// Activation.
        act: Act,
    },
    /// `sluice_pool2d`.
    Pool2d {
        /// `x[C,H,W]`.
        x: TensorRef,
        /// `y[C,OH,OW]`.
        y: TensorRef,
        /// Shape, window, stride, padding.
        shape: Pool2dShape,
        /// Max or average.
        mode: PoolMode,
    },
    /// `sluice_global_avgpool`.
    GlobalAvgPool {
        /// `x[C,HW]`.
        x: TensorRef,
        /// `y[C]`.
        y: TensorRef,
        /// C, HW.
        shape: GlobalPoolShape,
    },
    /// `sluice_eltwise`.
    Eltwise {
        /// First operand.
        a: TensorRef,
        /// Second operand, nullable (ops 2 and 3 take none).
        b: Option<TensorRef>,
        /// Result.
        y: TensorRef,
        /// Elements.
        n: usize,
        /// Operation.
        op: EltwiseOp,
    },
    /// `sluice_softmax`.
    Softmax {
        /// Input rows.
        x: TensorRef,
        /// Output rows.
        y: TensorRef,
        /// rows, cols.
        shape: RowsShape,
    },
    /// `sluice_layernorm`.
    Layernorm {
        /// Input rows.
        x: TensorRef,
        /// `gamma[cols]`.
        gamma: TensorRef,
        /// `beta[cols]`.
        beta: TensorRef,
        /// Output rows.
        y: TensorRef,
        /// rows, cols.
        shape: RowsShape,
        /// Added to the variance.
        eps: f32,
    },
    /// `sluice_attention`.
    Attention {
        /// `qkv[T, 3·H·D]`.
        qkv: TensorRef,
        /// `out[T, H·D]`.
        out: TensorRef,
        /// T, H, D, causal.
        shape: AttentionShape,
    },
    /// `sluice_elementwise`.
    Elementwise {
        /// First operand.
        a: TensorRef,
        /// Second operand (binary operators, `Where`'s `x`... see [`ElemOp`]).
        b: Option<TensorRef>,
        /// Third operand (`Where`'s condition).
        c: Option<TensorRef>,
        /// The broadcast descriptor, a weight holding `shape.desc`.
        desc: TensorRef,
        /// Result.
        y: TensorRef,
        /// Elements, descriptor, operation.
        shape: ElemShape,
    },
    /// `sluice_gather`.
    Gather {
        /// The sources, laid end to end.
        srcs: [Option<TensorRef>; GATHER_SOURCES],
        /// One source index per output element (a weight).
        idx: TensorRef,
        /// Result.
        y: TensorRef,
        /// Elements, source lengths, fill.
        shape: GatherShape,
    },
    /// `sluice_bmm`.
    Bmm {
        /// The left matrices.
        a: TensorRef,
        /// The right matrices.
        b: TensorRef,
        /// The products.
        y: TensorRef,
        /// Batch, M, N, K and batch strides.
        shape: BmmShape,
    },
    /// `sluice_embedding`.
    Embedding {
        /// `table[vocab, dim]`.
        table: TensorRef,
        /// Token ids (f32 whole numbers).
        ids: TensorRef,
        /// `y[count, dim]`.
        y: TensorRef,
        /// count, dim, vocab.
        shape: EmbeddingShape,
    },
    /// `sluice_conv2d_ex`.
    Conv2dEx {
        /// `x[N,Cin,H,W]`.
        x: TensorRef,
        /// `w[Cout,Cin/groups,KH,KW]`.
        w: TensorRef,
        /// `bias[Cout]`, nullable.
        bias: Option<TensorRef>,
        /// `y[N,Cout,OH,OW]`.
        y: TensorRef,
        /// The shape.
        shape: ConvExShape,
        /// Activation.
        act: Act,
    },
    /// `sluice_pool2d_ex`.
    Pool2dEx {
        /// `x[NC,H,W]`.
        x: TensorRef,
        /// `y[NC,OH,OW]`.
        y: TensorRef,
        /// The shape.
        shape: PoolExShape,
        /// 0 max, 1 mean without padding, 2 mean counting padding.
        mode: i32,
    },
    /// `sluice_lrn`.
    Lrn {
        /// `x[N,C,HW]`.
        x: TensorRef,
        /// `y[N,C,HW]`.
        y: TensorRef,
        /// The shape and constants.
        shape: LrnShape,
    },
    /// `sluice_interp`.
    Interp {
        /// The source.
        x: TensorRef,
        /// `T` source indices per output element (a weight).
        idx: TensorRef,
        /// Their weights (a weight).
        w: TensorRef,
        /// Result.
        y: TensorRef,
        /// n, taps, source length.
        shape: InterpShape,
    },
}

/// One kernel argument after the prologue (`ctl`, `kidx`), in ABI order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// A device pointer to this slice.
    Tensor(TensorRef),
    /// A null pointer (absent optional tensor).
    Null,
    /// A C `int`.
    Int(i32),
    /// A C `float`.
    Float(f32),
}

/// An integer kernel argument does not fit a C `int`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("argument {arg} = {value} does not fit a C int (at most 2^31 - 1); use a smaller shape")]
pub struct ArgError {
    /// The argument's name in the ABI table, e.g. `"N"`.
    pub arg: &'static str,
    /// Its value.
    pub value: usize,
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Grid in blocks (x, y, z).
    pub grid: [u32; 3],
    /// Block in threads (x, y, z).
    pub block: [u32; 3],
    /// Dynamic shared memory per block in bytes (0 for every ABI kernel).
    pub dynamic_smem_bytes: u32,
}

impl Launch {
    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }

    /// Threads per block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| u64::from(b)).product()
    }
}

fn ceil_div(a: usize, b: usize) -> u64 {
    a.div_ceil(b) as u64
}

impl Op {
    /// The kernel this operation launches.
    pub fn kernel(&self) -> Kernel {
        match self {
            Op::Gemm { .. } => Kernel::Gemm,
            Op::Conv2d { .. } => Kernel::Conv2d,
            Op::Pool2d { .. } => Kernel::Pool2d,
            Op::GlobalAvgPool { .. } => Kernel::GlobalAvgPool,
            Op::Eltwise { .. } => Kernel::Eltwise,
            Op::Softmax { .. } => Kernel::Softmax,
            Op::Layernorm { .. } => Kernel::Layernorm,
            Op::Attention { .. } => Kernel::Attention,
            Op::Elementwise { .. } => Kernel::Elementwise,
            Op::Gather { .. } => Kernel::Gather,
            Op::Bmm { .. } => Kernel::Bmm,
            Op::Embedding { .. } => Kernel::Embedding,
            Op::Conv2dEx { .. } => Kernel::Conv2dEx,
            Op::Pool2dEx { .. } => Kernel::Pool2dEx,
            Op::Lrn { .. } => Kernel::Lrn,
            Op::Interp { .. } => Kernel::Interp,
        }
    }

    /// The slices the kernel reads (optional operands included when given).
    pub fn reads(&self) -> Vec<TensorRef> {
        match self {
            Op::Gemm { a, b, bias, .. } => {
                [Some(*a), Some(*b), *bias].into_iter().flatten().collect()
            }
            Op::Conv2d { x, w, bias, .. } => {
                [Some(*x), Some(*w), *bias].into_iter().flatten().collect()
            }
            Op::Eltwise { a, b, .. } => [Some(*a), *b].into_iter().flatten().collect(),
            Op::Layernorm { x, gamma, beta, .. } => vec![*x, *gamma, *beta],
            Op::Pool2d { x, .. } | Op::GlobalAvgPool { x, .. } | Op::Softmax { x, .. } => vec![*x],
            Op::Attention { qkv, .. } => vec![*qkv],
            Op::Elementwise { a, b, c, desc, .. } => [Some(*a), *b, *c, Some(*desc)]
                .into_iter()
                .flatten()
                .collect(),
            Op::Gather { srcs, idx, .. } => srcs.iter().flatten().copied().chain([*idx]).collect(),
            Op::Bmm { a, b, .. } => vec![*a, *b],
            Op::Embedding { table, ids, .. } => vec![*table, *ids],
            Op::Conv2dEx { x, w, bias, .. } => {
                [Some(*x), Some(*w), *bias].into_iter().flatten().collect()
            }
            Op::Pool2dEx { x, .. } | Op::Lrn { x, .. } => vec![*x],
            Op::Interp { x, idx, w, .. } => vec![*x, *idx, *w],
        }
    }

    /// The slice the kernel writes, every element of it on every run.
    pub fn write(&self) -> TensorRef {
        match self {
            Op::Gemm { c, .. } => *c,
            Op::Conv2d { y, .. }
            | Op::Pool2d { y, .. }
            | Op::GlobalAvgPool { y, .. }
            | Op::Eltwise { y, .. }
            | Op::Softmax { y, .. }
            | Op::Layernorm { y, .. }
            | Op::Elementwise { y, .. }
            | Op::Gather { y, .. }
            | Op::Bmm { y, .. }
            | Op::Embedding { y, .. }
            | Op::Conv2dEx { y, .. }
            | Op::Pool2dEx { y, .. }
            | Op::Lrn { y, .. }
            | Op::Interp { y, .. } => *y,
            Op::Attention { out, .. } => *out,
        }
    }

    /// Checks the slice lengths against the shape ([`ops`]' own checks).
    pub fn check(&self) -> Result<(), ShapeError> {
        let len = |r: &TensorRef| r.len;
        match self {
            Op::Gemm {
                a,
                b,
                bias,
                c,
                shape,
                ..
            } => shape.check(a.len, b.len, bias.as_ref().map(len), c.len),
            Op::Conv2d {
                x,
                w,
                bias,
                y,
                shape,
                ..
            } => shape.check(x.len, w.len, bias.as_ref().map(len), y.len),
            Op::Pool2d { x, y, shape, .. } => shape.check(x.len, y.len),
            Op::GlobalAvgPool { x, y, shape } => shape.check(x.len, y.len),
            Op::Eltwise { a, b, y, n, op } => op.check(*n, a.len, b.as_ref().map(len), y.len),
            Op::Softmax { x, y, shape } => shape.check_softmax(x.len, y.len),
            Op::Layernorm {
                x,
                gamma,
                beta,
                y,
                shape,
                ..
            } => shape.check_layernorm(x.len, gamma.len, beta.len, y.len),
            Op::Attention { qkv, out, shape } => shape.check(qkv.len, out.len),
            Op::Elementwise {
                a,
                b,
                c,
                desc,
                y,
                shape,
            } => shape.check(
                desc.len,
                a.len,
                b.as_ref().map(len),
                c.as_ref().map(len),
                y.len,
            ),
            Op::Gather {
                srcs,
                idx,
                y,
                shape,
                ..
            } => shape.check(srcs.map(|s| s.as_ref().map(len)), idx.len, y.len),
            Op::Bmm { a, b, y, shape } => shape.check(a.len, b.len, y.len),
            Op::Embedding {
                table,
                ids,
                y,
                shape,
            } => shape.check(table.len, ids.len, y.len),
            Op::Conv2dEx {
                x,
                w,
                bias,
                y,
                shape,
                ..
            } => shape.check(x.len, w.len, bias.as_ref().map(len), y.len),
            Op::Pool2dEx { x, y, shape, .. } => shape.check(x.len, y.len),
            Op::Lrn { x, y, shape } => shape.check(x.len, y.len),
            Op::Interp {
                x,
                idx,
                w,
                y,
                shape,
            } => shape.check(x.len, idx.len, w.len, y.len),
        }
    }

    /// The kernel arguments after the prologue, in the ABI's order; fails
    /// when an integer does not fit a C `int` (naming it).
    pub fn args(&self) -> Result<Vec<Arg>, ArgError> {
        fn int(arg: &'static str, value: usize) -> Result<Arg, ArgError> {
            i32::try_from(value)
                .map(Arg::Int)
                .map_err(|_| ArgError { arg, value })
        }
        let t = |r: &TensorRef| Arg::Tensor(*r);
        let opt = |r: &Option<TensorRef>| r.as_ref().map_or(Arg::Null, t);
        let code = |c: i32| Arg::Int(c);
        Ok(match self {
            Op::Gemm {
                a,
                b,
                bias,
                c,
                shape: s,
                act,
            } => vec![
                t(a),
                t(b),
                opt(bias),
                t(c),
                int("M", s.m)?,
                int("N", s.n)?,
                int("K", s.k)?,
                code(act.code()),
            ],
            Op::Conv2d {
                x,
                w,
                bias,
                y,
                shape: s,
                act,
            } => vec![
                t(x),
                t(w),
                opt(bias),
                t(y),
                int("Cin", s.cin)?,
                int("H", s.h)?,
                int("W", s.w)?,
                int("Cout", s.cout)?,
                int("KH", s.kh)?,
                int("KW", s.kw)?,
                int("stride", s.stride)?,
                int("pad", s.pad)?,
                code(act.code()),
            ],
            Op::Pool2d {
                x,
                y,
                shape: s,
                mode,
            } => vec![
                t(x),
                t(y),
                int("C", s.c)?,
                int("H", s.h)?,
                int("W", s.w)?,
                int("k", s.k)?,
                int("stride", s.stride)?,
                int("pad", s.pad)?,
                code(mode.code()),
            ],
            Op::GlobalAvgPool { x, y, shape: s } => {
                vec![t(x), t(y), int("C", s.c)?, int("HW", s.hw)?]
            }
            Op::Eltwise { a, b, y, n, op } => {
                vec![t(a), opt(b), t(y), int("n", *n)?, code(op.code())]
            }
            Op::Softmax { x, y, shape: s } => {
                vec![t(x), t(y), int("rows", s.rows)?, int("cols", s.cols)?]
            }
            Op::Layernorm {
                x,
                gamma,
                beta,
                y,
                shape: s,
                eps,
            } => vec![
                t(x),
                t(gamma),
                t(beta),
                t(y),
                int("rows", s.rows)?,
                int("cols", s.cols)?,
                Arg::Float(*eps),
            ],
            Op::Attention { qkv, out, shape: s } => vec![
                t(qkv),
                t(out),
                int("T", s.t)?,
                int("H", s.h)?,
                int("D", s.d)?,
                code(i32::from(s.causal)),
            ],
            Op::Elementwise {
                a,
                b,
                c,
                desc,
                y,
                shape: s,
            } => {
                let (op, act, p0, p1) = elem_codes(s);
                vec![
                    t(a),
                    opt(b),
                    opt(c),
                    t(desc),
                    t(y),
                    int("n", s.n)?,
                    code(op),
                    code(act),
                    Arg::Float(p0),
                    Arg::Float(p1),
                ]
            }
            Op::Gather {
                srcs,
                idx,
                y,
                shape: s,
            } => vec![
                opt(&srcs[0]),
                opt(&srcs[1]),
                opt(&srcs[2]),
                opt(&srcs[3]),
                t(idx),
                t(y),
                int("n", s.n)?,
                int("n0", s.lens[0])?,
                int("n1", s.lens[1])?,
                int("n2", s.lens[2])?,
                int("n3", s.lens[3])?,
                Arg::Float(s.fill),
            ],
            Op::Bmm { a, b, y, shape: s } => vec![
                t(a),
                t(b),
                t(y),
                int("batch", s.batch)?,
                int("M", s.m)?,
                int("N", s.n)?,
                int("K", s.k)?,
                int("sa", s.sa)?,
                int("sb", s.sb)?,
            ],
            Op::Embedding {
                table,
                ids,
                y,
                shape: s,
            } => vec![
                t(table),
                t(ids),
                t(y),
                int("count", s.count)?,
                int("dim", s.dim)?,
                int("vocab", s.vocab)?,
            ],
            Op::Conv2dEx {
                x,
                w,
                bias,
                y,
                shape: s,
                act,
            } => vec![
                t(x),
                t(w),
                opt(bias),
                t(y),
                int("N", s.n)?,
                int("Cin", s.cin)?,
                int("H", s.h)?,
                int("W", s.w)?,
                int("Cout", s.cout)?,
                int("OH", s.oh)?,
                int("OW", s.ow)?,
                int("KH", s.kh)?,
                int("KW", s.kw)?,
                int("sh", s.sh)?,
                int("sw", s.sw)?,
                int("ph", s.ph)?,
                int("pw", s.pw)?,
                int("dh", s.dh)?,
                int("dw", s.dw)?,
                int("groups", s.groups)?,
                code(act.code()),
            ],
            Op::Pool2dEx {
                x,
                y,
                shape: s,
                mode,
            } => vec![
                t(x),
                t(y),
                int("NC", s.nc)?,
                int("H", s.h)?,
                int("W", s.w)?,
                int("OH", s.oh)?,
                int("OW", s.ow)?,
                int("KH", s.kh)?,
                int("KW", s.kw)?,
                int("sh", s.sh)?,
                int("sw", s.sw)?,
                int("ph", s.ph)?,
                int("pw", s.pw)?,
                int("peh", s.peh)?,
                int("pew", s.pew)?,
                int("dh", s.dh)?,
                int("dw", s.dw)?,
                code(*mode),
            ],
            Op::Lrn { x, y, shape: s } => vec![
                t(x),
                t(y),
                int("N", s.n)?,
                int("C", s.c)?,
                int("HW", s.hw)?,
                int("size", s.size)?,
                Arg::Float(s.alpha),
                Arg::Float(s.beta),
                Arg::Float(s.bias),
            ],
            Op::Interp {
                x,
                idx,
                w,
                y,
                shape: s,
            } => vec![
                t(x),
                t(idx),
                t(w),
                t(y),
                int("n", s.n)?,
                int("taps", s.taps)?,
                int("src", s.src)?,
            ],
        })
    }

    /// Grid, block and dynamic shared memory from the ABI's launch rules,
    /// unchecked against CUDA's limits (see [`Plan::validate`]).
    fn launch_dims(&self) -> Result<[u64; 3], ShapeError> {
        Ok(match self {
            Op::Gemm { shape, .. } => [ceil_div(shape.n, TILE), ceil_div(shape.m, TILE), 1],
            Op::Conv2d { shape, .. } => {
                let (oh, ow) = shape.out_hw()?;
                [ceil_div(oh * ow, TILE), ceil_div(shape.cout, TILE), 1]
            }
            Op::Pool2d { shape, .. } => {
                let (oh, ow) = shape.out_hw()?;
                [ceil_div(shape.c * oh * ow, 256), 1, 1]
            }
            Op::GlobalAvgPool { shape, .. } => [shape.c as u64, 1, 1],
            Op::Eltwise { n, .. } => [ceil_div(*n, 256).min(65_535), 1, 1],
            Op::Softmax { shape, .. } | Op::Layernorm { shape, .. } => [shape.rows as u64, 1, 1],
            Op::Attention { shape, .. } => [ceil_div(shape.t, 64), shape.h as u64, 1],
            Op::Elementwise { y, .. }
            | Op::Gather { y, .. }
            | Op::Bmm { y, .. }
            | Op::Embedding { y, .. }
            | Op::Conv2dEx { y, .. }
            | Op::Pool2dEx { y, .. }
            | Op::Lrn { y, .. }
            | Op::Interp { y, .. } => [ceil_div(y.len, 256).clamp(1, 65_535), 1, 1],
        })
    }

    /// Floating-point operations the kernel executes. GEMM and convolution
    /// count whole 64×64 output tiles (`2·K` per output, padded tiles
    /// included: the tiled kernels compute them); the rest count useful
    /// work (attention: `4·D` per query-key pair it visits).
    pub fn flops(&self) -> f64 {
        let tiles = |m: usize, n: usize| {
            (m.div_ceil(TILE) * TILE) as f64 * (n.div_ceil(TILE) * TILE) as f64
        };
        match self {
            Op::Gemm { shape: s, .. } => 2.0 * tiles(s.m, s.n) * s.k as f64,
            Op::Conv2d { shape: s, .. } => match s.implicit_gemm() {
                Ok(g) => 2.0 * tiles(g.m, g.n) * g.k as f64,
                Err(_) => 0.0,
            },
            Op::Pool2d { shape: s, y, .. } => (y.len * s.k * s.k) as f64,
            Op::GlobalAvgPool { x, .. } => x.len as f64,
            Op::Eltwise { n, .. } => *n as f64,
            Op::Softmax { x, .. } => 5.0 * x.len as f64,
            Op::Layernorm { x, .. } => 8.0 * x.len as f64,
            Op::Attention { shape: s, .. } => {
                let t = s.t as f64;
                let pairs = if s.causal { t * (t + 1.0) / 2.0 } else { t * t };
                4.0 * pairs * (s.h * s.d) as f64
            }
            Op::Elementwise { y, .. } => y.len as f64,
            Op::Gather { .. } | Op::Embedding { .. } => 0.0,
            Op::Bmm { shape: s, .. } => 2.0 * (s.batch * s.m * s.n * s.k) as f64,
            Op::Conv2dEx { shape: s, y, .. } => {
                2.0 * y.len as f64 * (s.cin / s.groups.max(1) * s.kh * s.kw) as f64
            }
            Op::Pool2dEx { shape: s, y, .. } => (y.len * s.kh * s.kw) as f64,
            Op::Lrn { shape: s, y, .. } => (y.len * (2 * s.size + 4)) as f64,
            Op::Interp { shape: s, .. } => (2 * s.n * s.taps) as f64,
        }
    }

    /// Bytes the kernel must move at least: every slice it reads once plus
    /// the slice it writes.
    pub fn bytes(&self) -> f64 {
        let read: usize = self.reads().iter().map(|r| r.len).sum();
        (read + self.write().len) as f64 * 4.0
    }
}

/// The `op`, `act`, `p0`, `p1` arguments of `sluice_elementwise`: the
/// operation's code, the activation's code (0: none), and the float
/// parameters of whichever of the two takes them (a plan never has both).
pub fn elem_codes(s: &ElemShape) -> (i32, i32, f32, f32) {
    let (op, p0, p1) = s.op.code();
    let (act, a0, a1) = ElemOp::Unary(s.act).code();
    if matches!(op, 2 | 5 | 19) {
        (op, act, p0, p1)
    } else {
        (op, act, a0, a1)
    }
}

/// One kernel launch of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Layer label, e.g. `conv1_1` or `layer3.12.conv2`.
    pub label: String,
    /// The operation and its arguments.
    pub op: Op,
    /// The launch configuration from the ABI's rules.
    pub launch: Launch,
}

impl Step {
    /// The kernel's name in manifests and traces: `<abi name>:<label>`.
    pub fn kernel_name(&self) -> String {
        format!("{}:{}", self.op.kernel().abi_name(), self.label)
    }
}

/// A model as kernel launches over device buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    name: String,
    display_name: String,
    buffers: Vec<Buffer>,
    steps: Vec<Step>,
    input: BufId,
    output: BufId,
    arena_bytes: u64,
}

impl Plan {
    /// Manifest name, e.g. `vgg19` or `vgg19_small`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Human-readable name.
    pub fn display_name(&self) -> &str {
        &self.display_name
    }

    /// Every buffer; a [`BufId`] indexes this.
    pub fn buffers(&self) -> &[Buffer] {
        &self.buffers
    }

    /// The buffer `id`.
    pub fn buffer(&self, id: BufId) -> &Buffer {
        &self.buffers[id.0]
    }

    /// The steps in launch order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The input buffer.
    pub fn input(&self) -> BufId {
        self.input
    }

    /// The output buffer.
    pub fn output(&self) -> BufId {
        self.output
    }

    /// Bytes from the arena's start to the end of its last buffer.
    pub fn arena_bytes(&self) -> u64 {
        self.arena_bytes
    }

    /// Number of parameters: elements of all weight buffers.
    pub fn param_count(&self) -> usize {
        self.buffers
            .iter()
            .filter(|b| b.role == Role::Weight)
            .map(|b| b.len)
            .sum()
    }

    /// The arena bytes of `r`.
    pub fn byte_range(&self, r: &TensorRef) -> ByteRange {
        let start = self.buffer(r.buf).offset + r.offset as u64 * 4;
        ByteRange::new(start, start + r.len as u64 * 4)
    }

    /// Checks the plan: every step's slices lie in their buffers and match
    /// its shape; no step writes the input, a weight, or a buffer it reads;
    /// every activation slice is written before it is read; the output is
    /// written; integer arguments fit a C `int`; launch configurations match
    /// the ABI's rules and CUDA's limits; buffers are aligned and disjoint.
    pub fn validate(&self) -> Result<(), PlanError> {
        let mut end = 0u64;
        for b in &self.buffers {
            if b.offset % BUFFER_ALIGN != 0 || b.offset < end {
                return Err(PlanError::Layout {
                    buffer: b.name.clone(),
                    offset: b.offset,
                });
            }
            end = b.offset + b.bytes();
        }
        // Elements of each buffer written so far.
        let mut written: Vec<RangeSet> = vec![RangeSet::new(); self.buffers.len()];
        for (index, step) in self.steps.iter().enumerate() {
            let at = || (index, step.label.clone());
            step.op.check().map_err(|source| {
                let (step, label) = at();
                PlanError::Shape {
                    step,
                    label,
                    source,
                }
            })?;
            let w = step.op.write();
            let reads = step.op.reads();
            for r in reads.iter().chain([&w]) {
                let buf = self.buffers.get(r.buf.0).ok_or_else(|| {
                    let (step, label) = at();
                    PlanError::NoBuffer {
                        step,
                        label,
                        buf: r.buf.0,
                    }
                })?;
                if r.offset.checked_add(r.len).is_none_or(|e| e > buf.len) {
                    let (step, label) = at();
                    return Err(PlanError::OutOfBounds {
                        step,
                        label,
                        buffer: buf.name.clone(),
                        offset: r.offset,
                        len: r.len,
                        buffer_len: buf.len,
                    });
                }
            }
            let wbuf = &self.buffers[w.buf.0];
            if matches!(wbuf.role, Role::Input | Role::Weight) {
                let (step, label) = at();
                return Err(PlanError::WritesReadOnly {
                    step,
                    label,
                    buffer: wbuf.name.clone(),
                    role: wbuf.role,
                });
            }
            for r in &reads {
                let buf = &self.buffers[r.buf.0];
                if r.buf == w.buf {
                    let (step, label) = at();
                    return Err(PlanError::ReadsOwnOutput {
                        step,
                        label,
                        buffer: buf.name.clone(),
                    });
                }
                let elems = ByteRange::new(r.offset as u64, (r.offset + r.len) as u64);
                let unwritten = [elems]
                    .iter()
                    .collect::<RangeSet>()
                    .difference(&written[r.buf.0]);
                if matches!(buf.role, Role::Activation | Role::Output) && !unwritten.is_empty() {
                    let (step, label) = at();
                    return Err(PlanError::ReadBeforeWrite {
                        step,
                        label,
                        buffer: buf.name.clone(),
                        elements: unwritten.ranges()[0],
                    });
                }
            }
            let elems = ByteRange::new(w.offset as u64, (w.offset + w.len) as u64);
            written[w.buf.0] = written[w.buf.0].union(&[elems].iter().collect());
            step.op.args().map_err(|ArgError { arg, value }| {
                let (step, label) = at();
                PlanError::IntArg {
                    step,
                    label,
                    arg,
                    value,
                }
            })?;
            let dims = step.op.launch_dims().map_err(|source| {
                let (step, label) = at();
                PlanError::Shape {
                    step,
                    label,
                    source,
                }
            })?;
            let want = Launch {
                grid: dims.map(|d| u32::try_from(d).unwrap_or(u32::MAX)),
                block: [step.op.kernel().block_threads(), 1, 1],
                dynamic_smem_bytes: 0,
            };
            let over = dims[0] > MAX_GRID_X || dims[1] > MAX_GRID_YZ || dims[2] > MAX_GRID_YZ;
            if over || step.launch != want {
                let (step, label) = at();
                return Err(PlanError::Launch {
                    step,
                    label,
                    grid: dims,
                });
            }
        }
        if written[self.output.0].byte_len() != self.buffers[self.output.0].len as u64 {
            return Err(PlanError::OutputNotWritten {
                buffer: self.buffers[self.output.0].name.clone(),
            });
        }
        Ok(())
    }
}

/// A plan breaks a rule of [`Plan::validate`]; a builder bug.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A step's slices do not match its shape.
    #[error("step {step} (`{label}`) has inconsistent shapes")]
    Shape {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// The mismatch.
        #[source]
        source: ShapeError,
    },
    /// A step references a buffer the plan does not have.
    #[error("step {step} (`{label}`) references buffer {buf}, which does not exist")]
    NoBuffer {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// The bad index.
        buf: usize,
    },
    /// A slice runs past the end of its buffer.
    #[error(
        "step {step} (`{label}`): slice of `{buffer}` at element {offset}, length {len}, runs \
         past its {buffer_len} elements; allocate a larger buffer or fix the slice"
    )]
    OutOfBounds {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// Buffer name.
        buffer: String,
        /// First element of the slice.
        offset: usize,
        /// Its length.
        len: usize,
        /// The buffer's length.
        buffer_len: usize,
    },
    /// A step writes the input or a weight buffer.
    #[error("step {step} (`{label}`) writes `{buffer}`, a {role:?} buffer that kernels only read")]
    WritesReadOnly {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// Buffer name.
        buffer: String,
        /// Its role.
        role: Role,
    },
    /// A step reads the buffer it writes (the ABI forbids it: kernels must
    /// be idempotent).
    #[error(
        "step {step} (`{label}`) reads `{buffer}`, which it also writes; write a separate buffer \
         (the kernel ABI keeps every kernel idempotent)"
    )]
    ReadsOwnOutput {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// Buffer name.
        buffer: String,
    },
    /// A step reads activation elements no earlier step wrote.
    #[error(
        "step {step} (`{label}`) reads elements {elements} of `{buffer}` before any step writes them"
    )]
    ReadBeforeWrite {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// Buffer name.
        buffer: String,
        /// The first unwritten element range.
        elements: ByteRange,
    },
    /// An integer argument does not fit a C `int`.
    #[error("step {step} (`{label}`): argument {arg} = {value} does not fit a C int")]
    IntArg {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// Argument name.
        arg: &'static str,
        /// Its value.
        value: usize,
    },
    /// A launch configuration differs from the ABI's rules or exceeds
    /// CUDA's grid limits.
    #[error(
        "step {step} (`{label}`): launch configuration does not follow the kernel ABI or CUDA's \
         limits (ABI grid {grid:?}; x <= 2^31-1, y and z <= 65535)"
    )]
    Launch {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// The grid the ABI's rules give.
        grid: [u64; 3],
    },
    /// No step writes (all of) the output buffer.
    #[error("no step writes all of the output buffer `{buffer}`")]
    OutputNotWritten {
        /// Buffer name.
        buffer: String,
    },
    /// Buffers overlap or are misaligned.
    #[error(
        "buffer `{buffer}` at offset {offset} overlaps the previous one or is not 256-byte aligned"
    )]
    Layout {
        /// Buffer name.
        buffer: String,
        /// Its offset.
        offset: u64,
    },
}

/// Builds a [`Plan`] layer by layer.
#[derive(Debug)]
struct PlanBuilder {
    buffers: Vec<Buffer>,
    steps: Vec<Step>,
    input: Option<BufId>,
}

impl PlanBuilder {
    fn new() -> Self {
        Self {
            buffers: Vec::new(),
            steps: Vec::new(),
            input: None,
        }
    }

    fn buffer(&mut self, name: String, role: Role, len: usize, init: Option<Init>) -> TensorRef {
        let buf = BufId(self.buffers.len());
        self.buffers.push(Buffer {
            name,
            role,
            len,
            offset: 0,
            init,
        });
        TensorRef {
            buf,
            offset: 0,
            len,
        }
    }

    fn input(&mut self, len: usize) -> TensorRef {
        let t = self.buffer("input".into(), Role::Input, len, None);
        self.input = Some(t.buf);
        t
    }

    /// A weight of `len` elements, uniform in `center ± half_width`.
    fn weight(&mut self, name: String, len: usize, center: f32, half_width: f32) -> TensorRef {
        self.buffer(name, Role::Weight, len, Some(Init { center, half_width }))
    }

    /// A matrix or filter bank with `fan_in` inputs per output, scaled so
    /// that the output's second moment is `gain` times the input's
    /// (variance-preserving initialisation: gain 2 before a ReLU).
    fn scaled_weight(&mut self, name: String, len: usize, fan_in: usize, gain: f32) -> TensorRef {
        let half_width = (3.0 * gain / fan_in as f32).sqrt();
        self.weight(name, len, 0.0, half_width)
    }

    fn bias(&mut self, name: String, len: usize) -> TensorRef {
        self.weight(name, len, 0.0, BIAS_HALF_WIDTH)
    }

    fn activation(&mut self, name: String, len: usize) -> TensorRef {
        self.buffer(name, Role::Activation, len, None)
    }

    fn push(&mut self, label: String, op: Op) -> Result<(), BuildError> {
        let dims = op.launch_dims().map_err(|source| PlanError::Shape {
            step: self.steps.len(),
            label: label.clone(),
            source,
        })?;
        let launch = Launch {
            grid: dims.map(|d| u32::try_from(d).unwrap_or(u32::MAX)),
            block: [op.kernel().block_threads(), 1, 1],
            dynamic_smem_bytes: 0,
        };
        self.steps.push(Step { label, op, launch });
        Ok(())
    }

    /// A `k×k` convolution of `x[Cin,H,W]` to `Cout` channels with a
    /// (folded batch-norm) bias; returns `(y, OH, OW)`.
    fn conv(
        &mut self,
        label: &str,
        x: TensorRef,
        (cin, h, w): (usize, usize, usize),
        (cout, k, stride, pad): (usize, usize, usize, usize),
        Out { act, gain }: Out,
    ) -> Result<(TensorRef, usize, usize), BuildError> {
        let shape = Conv2dShape {
            cin,
            h,
            w,
            cout,
            kh: k,
            kw: k,
            stride,
            pad,
        };
        let (oh, ow) = shape.out_hw().map_err(|source| PlanError::Shape {
            step: self.steps.len(),
            label: label.to_owned(),
            source,
        })?;
        let wt = self.scaled_weight(format!("{label}.w"), cout * cin * k * k, cin * k * k, gain);
        let bias = self.bias(format!("{label}.b"), cout);
        let y = self.activation(format!("{label}.y"), cout * oh * ow);
        let op = Op::Conv2d {
            x,
            w: wt,
            bias: Some(bias),
            y,
            shape,
            act,
        };
        self.push(label.to_owned(), op)?;
        Ok((y, oh, ow))
    }

    /// `y[M,N] = act(x[M,K]·W[K,N] + b)` with fresh weights (and a bias
    /// when `bias`).
    fn linear(
        &mut self,
        label: &str,
        x: TensorRef,
        (m, k, n): (usize, usize, usize),
        bias: bool,
        Out { act, gain }: Out,
    ) -> Result<TensorRef, BuildError> {
        let b = self.scaled_weight(format!("{label}.w"), k * n, k, gain);
        let bias = bias.then(|| self.bias(format!("{label}.b"), n));
        let c = self.activation(format!("{label}.y"), m * n);
        let op = Op::Gemm {
            a: x,
            b,
            bias,
            c,
            shape: GemmShape { m, n, k },
            act,
        };
        self.push(label.to_owned(), op)?;
        Ok(c)
    }

    fn eltwise(
        &mut self,
        label: &str,
        a: TensorRef,
        b: Option<TensorRef>,
        op: EltwiseOp,
    ) -> Result<TensorRef, BuildError> {
        let y = self.activation(format!("{label}.y"), a.len);
        let n = a.len;
        self.push(label.to_owned(), Op::Eltwise { a, b, y, n, op })?;
        Ok(y)
    }

    fn layernorm(
        &mut self,
        label: &str,
        x: TensorRef,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<TensorRef, BuildError> {
        let gamma = self.weight(format!("{label}.gamma"), cols, 1.0, LN_GAMMA_HALF_WIDTH);
        let beta = self.weight(format!("{label}.beta"), cols, 0.0, BIAS_HALF_WIDTH);
        let y = self.activation(format!("{label}.y"), rows * cols);
        let op = Op::Layernorm {
            x,
            gamma,
            beta,
            y,
            shape: RowsShape { rows, cols },
            eps,
        };
        self.push(label.to_owned(), op)?;
        Ok(y)
    }

    /// Lays the buffers out (input, then weights, then activations, each
    /// in creation order), marks `output` and validates.
    fn finish(
        mut self,
        name: String,
        display_name: String,
        output: TensorRef,
    ) -> Result<Plan, BuildError> {
        self.buffers[output.buf.0].role = Role::Output;
        let mut offset = 0u64;
        for pass in [Role::Input, Role::Weight, Role::Activation] {
            for b in &mut self.buffers {
                let role = if b.role == Role::Output {
                    Role::Activation
                } else {
                    b.role
                };
                if role == pass {
                    b.offset = offset;
                    offset = (offset + b.bytes()).next_multiple_of(BUFFER_ALIGN);
                }
            }
        }
        // Sort by offset so the buffer list reads like the arena; remap ids.
        let mut order: Vec<usize> = (0..self.buffers.len()).collect();
        order.sort_by_key(|&i| self.buffers[i].offset);
        let mut new_id = vec![0; order.len()];
        for (new, &old) in order.iter().enumerate() {
            new_id[old] = new;
        }
        let remap = |r: &mut TensorRef| r.buf = BufId(new_id[r.buf.0]);
        for s in &mut self.steps {
            match &mut s.op {
                Op::Gemm { a, b, bias, c, .. } => {
                    [a, b, c].into_iter().for_each(remap);
                    bias.iter_mut().for_each(remap);
                }
                Op::Conv2d { x, w, bias, y, .. } => {
                    [x, w, y].into_iter().for_each(remap);
                    bias.iter_mut().for_each(remap);
                }
                Op::Eltwise { a, b, y, .. } => {
                    [a, y].into_iter().for_each(remap);
                    b.iter_mut().for_each(remap);
                }
                Op::Layernorm {
                    x, gamma, beta, y, ..
                } => {
                    [x, gamma, beta, y].into_iter().for_each(remap);
                }
                Op::Pool2d { x, y, .. }
                | Op::GlobalAvgPool { x, y, .. }
                | Op::Softmax { x, y, .. } => [x, y].into_iter().for_each(remap),
                Op::Attention { qkv, out, .. } => [qkv, out].into_iter().for_each(remap),
                Op::Elementwise {
                    a, b, c, desc, y, ..
                } => {
                    [a, desc, y].into_iter().for_each(remap);
                    b.iter_mut().chain(c.iter_mut()).for_each(remap);
                }
                Op::Gather { srcs, idx, y, .. } => {
                    [idx, y].into_iter().for_each(remap);
                    srcs.iter_mut().flatten().for_each(remap);
                }
                Op::Bmm { a, b, y, .. } => [a, b, y].into_iter().for_each(remap),
                Op::Embedding { table, ids, y, .. } => {
                    [table, ids, y].into_iter().for_each(remap);
                }
                Op::Conv2dEx { x, w, bias, y, .. } => {
                    [x, w, y].into_iter().for_each(remap);
                    bias.iter_mut().for_each(remap);
                }
                Op::Pool2dEx { x, y, .. } | Op::Lrn { x, y, .. } => {
                    [x, y].into_iter().for_each(remap);
                }
                Op::Interp { x, idx, w, y, .. } => [x, idx, w, y].into_iter().for_each(remap),
            }
        }
        let mut old: Vec<Option<Buffer>> = self.buffers.into_iter().map(Some).collect();
        let buffers: Vec<Buffer> = order
            .iter()
            .map(|&i| old[i].take().expect("each once"))
            .collect();
        let arena_bytes = buffers.last().map_or(0, |b| b.offset + b.bytes());
        let input = self.input.expect("every builder declares an input");
        let plan = Plan {
            name,
            display_name,
            buffers,
            steps: self.steps,
            input: BufId(new_id[input.0]),
            output: BufId(new_id[output.buf.0]),
            arena_bytes,
        };
        plan.validate()?;
        Ok(plan)
    }
}

// ---- initialisation scales ----

/// Half width of every bias and layer-norm beta (uniform, centred on 0).
const BIAS_HALF_WIDTH: f32 = 0.02;
/// Half width of layer-norm gamma around 1.
const LN_GAMMA_HALF_WIDTH: f32 = 0.1;
/// A layer's activation and the gain its weights are initialised for.
#[derive(Debug, Clone, Copy)]
struct Out {
    act: Act,
    gain: f32,
}

/// Followed by a ReLU: gain 2 (He initialisation).
const RELU: Out = Out {
    act: Act::Relu,
    gain: 2.0,
};
/// Followed by a GELU: treated like a ReLU.
const GELU: Out = Out {
    act: Act::Gelu,
    gain: 2.0,
};
/// No activation: gain 1.
const LINEAR: Out = Out {
    act: Act::None,
    gain: 1.0,
};

/// No activation, weights scaled by `gain`.
const fn linear_gain(gain: f32) -> Out {
    Out {
        act: Act::None,
        gain,
    }
}

// ---- the models ----

/// How large a model to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    /// The real architecture and input size.
    #[default]
    Full,
    /// Same layer structure (same kernel count), shrunk spatial size,
    /// channels, hidden size, tokens and classes so a CPU run in a debug
    /// build takes milliseconds. See `docs/nn-models.md` for the sizes.
    Small,
}

/// Options of [`build`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BuildOptions {
    /// Full or small.
    pub scale: Scale,
}

/// [`build`] failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// No builder has this name.
    #[error("no model builder named `{name}`; use one of vgg19, resnet152, bert_base, gpt2")]
    UnknownModel {
        /// The name asked for.
        name: String,
    },
    /// The builder produced an invalid plan (a bug in the builder).
    #[error("the builder produced an invalid plan")]
    Plan(#[from] PlanError),
}

/// A model ready to run: its plan and how it was built.
#[derive(Debug, Clone)]
pub struct BuiltModel {
    plan: Plan,
    options: BuildOptions,
    /// What the shapes are, for the manifest's provenance.
    shapes: String,
}

/// [`build`] at [`Scale::Small`].
pub fn build_small(name: &str) -> Result<BuiltModel, BuildError> {
    build(
        name,
        &BuildOptions {
            scale: Scale::Small,
        },
    )
}

/// Builds the model `name` (one of [`MODEL_NAMES`]).
pub fn build(name: &str, options: &BuildOptions) -> Result<BuiltModel, BuildError> {
    let small = options.scale == Scale::Small;
    let (plan, shapes) = match name {
        "vgg19" => vgg19(small)?,
        "resnet152" => resnet152(small)?,
        "bert_base" => transformer(&TransformerCfg::bert(small))?,
        "gpt2" => transformer(&TransformerCfg::gpt2(small))?,
        _ => {
            return Err(BuildError::UnknownModel {
                name: name.to_owned(),
            });
        }
    };
    Ok(BuiltModel {
        plan,
        options: *options,
        shapes,
    })
}

fn model_name(base: &str, small: bool) -> String {
    if small {
        format!("{base}_small")
    } else {
        base.to_owned()
    }
}

/// VGG-19 (configuration E): 16 3×3 convolutions with ReLU, 5 max pools,
/// 3 fully connected layers.
fn vgg19(small: bool) -> Result<(Plan, String), BuildError> {
    let (size, div, hidden, classes) = if small {
        (32, 16, 256, 10)
    } else {
        (224, 1, 4096, 1000)
    };
    let stages: [(usize, usize); 5] = [(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)];
    let mut p = PlanBuilder::new();
    let mut x = p.input(3 * size * size);
    let (mut c, mut h, mut w) = (3, size, size);
    for (si, &(width, convs)) in stages.iter().enumerate() {
        let width = width / div;
        for ci in 0..convs {
            let label = format!("conv{}_{}", si + 1, ci + 1);
            let (y, oh, ow) = p.conv(&label, x, (c, h, w), (width, 3, 1, 1), RELU)?;
            (x, c, h, w) = (y, width, oh, ow);
        }
        let shape = Pool2dShape {
            c,
            h,
            w,
            k: 2,
            stride: 2,
            pad: 0,
        };
        let (oh, ow) = (h / 2, w / 2);
        let label = format!("pool{}", si + 1);
        let y = p.activation(format!("{label}.y"), c * oh * ow);
        p.push(
            label,
            Op::Pool2d {
                x,
                y,
                shape,
                mode: PoolMode::Max,
            },
        )?;
        (x, h, w) = (y, oh, ow);
    }
    let flat = c * h * w;
    let f6 = p.linear("fc6", x, (1, flat, hidden), true, RELU)?;
    let f7 = p.linear("fc7", f6, (1, hidden, hidden), true, RELU)?;
    let f8 = p.linear("fc8", f7, (1, hidden, classes), true, LINEAR)?;
    let shapes = format!(
        "VGG-19: input 3x{size}x{size} f32, 16 conv3x3 (channels {}..{}) with ReLU, 5 maxpool 2x2, \
         FC {flat}->{hidden}->{hidden}->{classes}; output {classes} f32 logits",
        64 / div,
        512 / div
    );
    let display = if small { "VGG-19 (small)" } else { "VGG-19" };
    Ok((
        p.finish(model_name("vgg19", small), display.into(), f8)?,
        shapes,
    ))
}

/// ResNet-152 (v1.5: stride on the 3×3 convolution), batch norm folded
/// into the convolutions' biases.
fn resnet152(small: bool) -> Result<(Plan, String), BuildError> {
    let (size, div, classes) = if small { (32, 16, 10) } else { (224, 1, 1000) };
    let blocks = [3usize, 8, 36, 3];
    // Residual branches end with a convolution of gain 1/(number of
    // blocks), so the residual stream's second moment grows at most about
    // e-fold over the network instead of doubling per block.
    let branch_gain = 1.0 / blocks.iter().sum::<usize>() as f32;
    let mut p = PlanBuilder::new();
    let x = p.input(3 * size * size);
    let stem = 64 / div;
    let (y, h, w) = p.conv("conv1", x, (3, size, size), (stem, 7, 2, 3), RELU)?;
    let pool = Pool2dShape {
        c: stem,
        h,
        w,
        k: 3,
        stride: 2,
        pad: 1,
    };
    let (h, w) = pool.out_hw().map_err(|source| PlanError::Shape {
        step: 1,
        label: "pool1".into(),
        source,
    })?;
    let mut x = p.activation("pool1.y".into(), stem * h * w);
    p.push(
        "pool1".into(),
        Op::Pool2d {
            x: y,
            y: x,
            shape: pool,
            mode: PoolMode::Max,
        },
    )?;
    let (mut c, mut h, mut w) = (stem, h, w);
    for (si, &n) in blocks.iter().enumerate() {
        let width = (64 << si) / div;
        let out = 4 * width;
        for bi in 0..n {
            let stride = if si > 0 && bi == 0 { 2 } else { 1 };
            let l = format!("layer{}.{bi}", si + 1);
            let (a, _, _) = p.conv(&format!("{l}.conv1"), x, (c, h, w), (width, 1, 1, 0), RELU)?;
            let (b, oh, ow) = p.conv(
                &format!("{l}.conv2"),
                a,
                (width, h, w),
                (width, 3, stride, 1),
                RELU,
            )?;
            let (r, _, _) = p.conv(
                &format!("{l}.conv3"),
                b,
                (width, oh, ow),
                (out, 1, 1, 0),
                linear_gain(branch_gain),
            )?;
            let shortcut = if bi == 0 {
                let label = format!("{l}.downsample");
                p.conv(&label, x, (c, h, w), (out, 1, stride, 0), LINEAR)?.0
            } else {
                x
            };
            x = p.eltwise(
                &format!("{l}.add_relu"),
                r,
                Some(shortcut),
                EltwiseOp::AddRelu,
            )?;
            (c, h, w) = (out, oh, ow);
        }
    }
    let gap = p.activation("avgpool.y".into(), c);
    let shape = GlobalPoolShape { c, hw: h * w };
    p.push("avgpool".into(), Op::GlobalAvgPool { x, y: gap, shape })?;
    let fc = p.linear("fc", gap, (1, c, classes), true, LINEAR)?;
    let shapes = format!(
        "ResNet-152 v1.5: input 3x{size}x{size} f32, conv7x7/2 ({stem} ch) + maxpool 3x3/2, \
         bottleneck blocks [3, 8, 36, 3] (1x1, 3x3, 1x1; widths {}..{}, outputs x4), stride-2 \
         downsample, residual add+ReLU via sluice_eltwise, batch norm folded into conv biases, \
         global avgpool, FC {c}->{classes}; output {classes} f32 logits",
        64 / div,
        512 / div
    );
    let display = if small {
        "ResNet-152 (small)"
    } else {
        "ResNet-152"
    };
    Ok((
        p.finish(model_name("resnet152", small), display.into(), fc)?,
        shapes,
    ))
}

/// A BERT or GPT-2 style transformer stack.
#[derive(Debug, Clone)]
struct TransformerCfg {
    base: &'static str,
    display: &'static str,
    small: bool,
    tokens: usize,
    hidden: usize,
    heads: usize,
    layers: usize,
    ffn: usize,
    eps: f32,
    /// GPT-2: pre-LN, causal, final LN and LM head over `vocab`.
    gpt: Option<usize>,
}

impl TransformerCfg {
    fn bert(small: bool) -> Self {
        let (tokens, hidden, heads, ffn) = if small {
            (8, 32, 4, 128)
        } else {
            (128, 768, 12, 3072)
        };
        Self {
            base: "bert_base",
            display: "BERT-base encoder",
            small,
            tokens,
            hidden,
            heads,
            layers: 12,
            ffn,
            eps: 1e-12,
            gpt: None,
        }
    }

    fn gpt2(small: bool) -> Self {
        let vocab = if small { 512 } else { 50_257 };
        Self {
            base: "gpt2",
            display: "GPT-2 small",
            eps: 1e-5,
            gpt: Some(vocab),
            ..Self::bert(small)
        }
    }
}

/// BERT-base (post-LN, bidirectional) or GPT-2 (pre-LN, causal, final LN
/// and LM head on the last token). The input is the embedded sequence
/// `[T, hidden]` (token + position (+ segment) embeddings are looked up on
/// the host: the kernel library has no gather kernel).
fn transformer(cfg: &TransformerCfg) -> Result<(Plan, String), BuildError> {
    let (t, hd, f) = (cfg.tokens, cfg.hidden, cfg.ffn);
    let d = hd / cfg.heads;
    let causal = cfg.gpt.is_some();
    // GPT-2 scales the residual projections by 1/sqrt(2·layers) so the
    // pre-LN residual stream does not grow with depth; BERT's post-LN
    // renormalises after every add.
    let out_gain = if causal {
        1.0 / (2 * cfg.layers) as f32
    } else {
        1.0
    };
    let mut p = PlanBuilder::new();
    let mut x = p.input(t * hd);
    for l in 0..cfg.layers {
        let n = |s: &str| format!("layer{l}.{s}");
        let attn_in = if causal {
            p.layernorm(&n("ln1"), x, t, hd, cfg.eps)?
        } else {
            x
        };
        let qkv = p.linear(&n("qkv"), attn_in, (t, hd, 3 * hd), true, LINEAR)?;
        let a = p.activation(n("attn.y"), t * hd);
        let shape = AttentionShape {
            t,
            h: cfg.heads,
            d,
            causal,
        };
        p.push(n("attn"), Op::Attention { qkv, out: a, shape })?;
        let o = p.linear(&n("proj"), a, (t, hd, hd), true, linear_gain(out_gain))?;
        let r1 = p.eltwise(&n("add1"), o, Some(x), EltwiseOp::Add)?;
        let ffn_in = if causal {
            p.layernorm(&n("ln2"), r1, t, hd, cfg.eps)?
        } else {
            p.layernorm(&n("ln1"), r1, t, hd, cfg.eps)?
        };
        let h1 = p.linear(&n("ffn1"), ffn_in, (t, hd, f), true, GELU)?;
        let h2 = p.linear(&n("ffn2"), h1, (t, f, hd), true, linear_gain(out_gain))?;
        // Pre-LN adds to the residual stream, post-LN to the normalised input.
        let skip = if causal { r1 } else { ffn_in };
        let r2 = p.eltwise(&n("add2"), h2, Some(skip), EltwiseOp::Add)?;
        x = if causal {
            r2
        } else {
            p.layernorm(&n("ln2"), r2, t, hd, cfg.eps)?
        };
    }
    let (out, tail) = match cfg.gpt {
        Some(vocab) => {
            let lf = p.layernorm("ln_f", x, t, hd, cfg.eps)?;
            // Logits of the last token only (next-token prediction).
            let last = TensorRef {
                offset: (t - 1) * hd,
                len: hd,
                ..lf
            };
            let logits = p.linear("lm_head", last, (1, hd, vocab), false, LINEAR)?;
            (
                logits,
                format!(
                    "final LN, LM head {hd}->{vocab} (no bias) on the last token; output {vocab} f32 logits"
                ),
            )
        }
        None => (
            x,
            format!("output the last layer's hidden states [{t}, {hd}] f32 (no pooler)"),
        ),
    };
    let shapes = format!(
        "{}: input the embedded sequence [{t}, {hd}] f32 (embeddings looked up on the host), \
         {} layers, {} heads of {d}, FFN {f} with GELU (tanh), {}, LN eps {}; {tail}",
        cfg.display,
        cfg.layers,
        cfg.heads,
        if causal {
            "pre-LN, causal attention"
        } else {
            "post-LN, bidirectional attention"
        },
        cfg.eps,
    );
    let display = if cfg.small {
        format!("{} (small)", cfg.display)
    } else {
        cfg.display.to_owned()
    };
    Ok((
        p.finish(model_name(cfg.base, cfg.small), display, out)?,
        shapes,
    ))
}

// ---- weights ----

/// The weight buffers of a plan, generated from a seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    /// Indexed by [`BufId`]; empty for buffers that are not weights.
    bufs: Vec<Vec<f32>>,
}

impl Weights {
    /// Generates every weight buffer of `plan` from `seed`: buffer `i` from
    /// its own SplitMix64 stream (seeded by `seed` and `i`), uniform in its
    /// [`Init`] range.
    pub fn generate(plan: &Plan, seed: u64) -> Self {
        let bufs = plan
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| match (b.role, b.init) {
                (Role::Weight, Some(init)) => {
                    let mut rng = SplitMix64::seed_from_u64(
                        seed ^ (i as u64).wrapping_mul(0xd134_2543_de82_ef95),
                    );
                    (0..b.len)
                        .map(|_| init.center + init.half_width * rng.signed_f32())
                        .collect()
                }
                _ => Vec::new(),
            })
            .collect();
        Self { bufs }
    }

    /// The contents of weight buffer `id` (empty for other buffers).
    pub fn get(&self, id: BufId) -> &[f32] {
        self.bufs.get(id.0).map_or(&[], Vec::as_slice)
    }
}

// ---- CPU execution ----

/// [`run_cpu`] or [`CpuExec`] failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    /// The input has the wrong length.
    #[error(
        "input has {got} elements but model `{model}` takes {expected}; pass a tensor of that size"
    )]
    Input {
        /// Model name.
        model: String,
        /// Elements the plan's input buffer holds.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// A weight buffer has the wrong length (weights of another plan).
    #[error(
        "weight `{buffer}` has {got} elements but the plan needs {expected}; generate the weights \
         from this plan (Weights::generate)"
    )]
    Weights {
        /// Buffer name.
        buffer: String,
        /// Elements the plan declares.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// No such step.
    #[error("step {step} does not exist; the plan has {steps} steps")]
    NoStep {
        /// Step asked for.
        step: usize,
        /// Steps in the plan.
        steps: usize,
    },
    /// An operator refused its shapes (the plan was not validated).
    #[error("step {step} (`{label}`) failed")]
    Shape {
        /// Step index.
        step: usize,
        /// Step label.
        label: String,
        /// The operator's error.
        #[source]
        source: ShapeError,
    },
}

/// A CPU execution of a plan, one step at a time. Every activation starts
/// as NaN, so a step that reads something no step wrote poisons the output.
#[derive(Debug)]
pub struct CpuExec<'a> {
    plan: &'a Plan,
    weights: &'a Weights,
    /// Indexed by [`BufId`]; weight buffers stay empty (read from `weights`).
    mem: Vec<Vec<f32>>,
}

impl<'a> CpuExec<'a> {
    /// Loads `input` and checks the weights against the plan.
    pub fn new(plan: &'a Plan, weights: &'a Weights, input: &[f32]) -> Result<Self, RunError> {
        let inp = plan.buffer(plan.input);
        if input.len() != inp.len {
            return Err(RunError::Input {
                model: plan.name.clone(),
                expected: inp.len,
                got: input.len(),
            });
        }
        let mut mem = Vec::with_capacity(plan.buffers.len());
        for (i, b) in plan.buffers.iter().enumerate() {
            match b.role {
                Role::Weight => {
                    let got = weights.get(BufId(i)).len();
                    if got != b.len {
                        return Err(RunError::Weights {
                            buffer: b.name.clone(),
                            expected: b.len,
                            got,
                        });
                    }
                    mem.push(Vec::new());
                }
                Role::Input => mem.push(input.to_vec()),
                Role::Activation | Role::Output => mem.push(vec![f32::NAN; b.len]),
            }
        }
        Ok(Self { plan, weights, mem })
    }

    fn slice(&self, r: &TensorRef) -> &[f32] {
        let whole = match self.plan.buffers[r.buf.0].role {
            Role::Weight => self.weights.get(r.buf),
            _ => &self.mem[r.buf.0],
        };
        &whole[r.offset..r.offset + r.len]
    }

    /// Runs step `index` with [`ops`].
    pub fn step(&mut self, index: usize) -> Result<(), RunError> {
        let step = self.plan.steps.get(index).ok_or(RunError::NoStep {
            step: index,
            steps: self.plan.steps.len(),
        })?;
        let w = step.op.write();
        // The plan never reads the buffer a step writes, so the written
        // buffer can be taken out while the reads borrow the rest.
        let mut out_buf = std::mem::take(&mut self.mem[w.buf.0]);
        let out = &mut out_buf[w.offset..w.offset + w.len];
        let s = |r: &TensorRef| self.slice(r);
        let res = match &step.op {
            Op::Gemm {
                a,
                b,
                bias,
                shape,
                act,
                ..
            } => reference::gemm(shape, s(a), s(b), bias.as_ref().map(s), out, *act),
            Op::Conv2d {
                x,
                w,
                bias,
                shape,
                act,
                ..
            } => reference::conv2d(shape, s(x), s(w), bias.as_ref().map(s), out, *act),
            Op::Pool2d { x, shape, mode, .. } => reference::pool2d(shape, s(x), out, *mode),
            Op::GlobalAvgPool { x, shape, .. } => reference::global_avgpool(shape, s(x), out),
            Op::Eltwise { a, b, n, op, .. } => {
                reference::eltwise(*op, *n, s(a), b.as_ref().map(s), out)
            }
            Op::Softmax { x, shape, .. } => reference::softmax(shape, s(x), out),
            Op::Layernorm {
                x,
                gamma,
                beta,
                shape,
                eps,
                ..
            } => reference::layernorm(shape, s(x), s(gamma), s(beta), out, *eps),
            Op::Attention { qkv, shape, .. } => reference::attention(shape, s(qkv), out),
            Op::Elementwise {
                a,
                b,
                c,
                desc,
                shape,
                ..
            } => {
                let d = reference::elem_desc_from(s(desc));
                let sh = ElemShape {
                    desc: d,
                    ..shape.clone()
                };
                reference::elementwise(&sh, s(a), b.as_ref().map(s), c.as_ref().map(s), out)
            }
            Op::Gather {
                srcs, idx, shape, ..
            } => reference::gather(shape, srcs.map(|r| r.as_ref().map(s)), s(idx), out),
            Op::Bmm { a, b, shape, .. } => reference::bmm(shape, s(a), s(b), out),
            Op::Embedding {
                table, ids, shape, ..
            } => reference::embedding(shape, s(table), s(ids), out),
            Op::Conv2dEx {
                x,
                w,
                bias,
                shape,
                act,
                ..
            } => reference::conv2d_ex(shape, s(x), s(w), bias.as_ref().map(s), out, *act),
            Op::Pool2dEx { x, shape, mode, .. } => reference::pool2d_ex(shape, s(x), out, *mode),
            Op::Lrn { x, shape, .. } => reference::lrn(shape, s(x), out),
            Op::Interp {
                x, idx, w, shape, ..
            } => reference::interp(shape, s(x), s(idx), s(w), out),
        };
        self.mem[w.buf.0] = out_buf;
        res.map_err(|source| RunError::Shape {
            step: index,
            label: step.label.clone(),
            source,
        })
    }

    /// The current contents of buffer `id`.
    pub fn buffer(&self, id: BufId) -> &[f32] {
        match self.plan.buffers[id.0].role {
            Role::Weight => self.weights.get(id),
            _ => &self.mem[id.0],
        }
    }

    /// The output buffer.
    pub fn output(&self) -> &[f32] {
        &self.mem[self.plan.output.0]
    }
}

/// Runs the whole plan on the CPU and returns the output.
pub fn run_cpu(plan: &Plan, weights: &Weights, input: &[f32]) -> Result<Vec<f32>, RunError> {
    let mut exec = CpuExec::new(plan, weights, input)?;
    for i in 0..plan.steps.len() {
        exec.step(i)?;
    }
    let out = plan.output.0;
    Ok(std::mem::take(&mut exec.mem[out]))
}

// ---- estimates and the manifest ----

/// A step's roofline estimate on the H100 profile (all figures estimates).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// [`Op::flops`].
    pub flops: f64,
    /// [`Op::bytes`].
    pub bytes: f64,
    /// Share of the device's peaks the grid can use:
    /// `min(1, threads / (SMs × 128 FP32 lanes))`.
    pub share: f64,
    /// `max(flops / (peak FLOP/s · share), bytes / (peak bandwidth ·
    /// share), MIN_KERNEL_US)`, in µs.
    pub kernel_time_us: f64,
    /// Blocks resident per SM by the occupancy model.
    pub blocks_per_sm: u32,
    /// `ceil(blocks / (SMs × blocks_per_sm))`.
    pub rounds: u64,
    /// `kernel_time_us / rounds`.
    pub block_time_us: f64,
}

/// A step cannot be estimated: its block does not fit an SM.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "step {step} (`{label}`): a block of {threads} threads with {regs} registers per thread and \
     {smem} bytes of shared memory does not fit one SM of the {profile} profile"
)]
pub struct NoFit {
    /// Step index.
    pub step: usize,
    /// Step label.
    pub label: String,
    /// Threads per block.
    pub threads: u64,
    /// Registers per thread (estimate).
    pub regs: u32,
    /// Shared memory per block.
    pub smem: u32,
    /// Profile name.
    pub profile: String,
}

/// Roofline estimate of step `index` of `plan` on `profile` (SM count and
/// per-SM limits from the profile, peaks from [`H100_FP32_FLOPS`] and
/// [`H100_HBM_BYTES_PER_S`]).
///
/// # Panics
///
/// If `index` is not a step of `plan`.
pub fn estimate(plan: &Plan, index: usize, profile: &DeviceProfile) -> Result<Estimate, NoFit> {
    let step = &plan.steps[index];
    let kernel = step.op.kernel();
    let threads = step.launch.threads_per_block();
    let regs = kernel.regs_per_thread_estimate();
    let smem = kernel.static_smem_bytes() + step.launch.dynamic_smem_bytes;
    let fp = Footprint::new(profile, threads as u32, regs, smem);
    let (per_sm, _) = blocks_per_cu(profile, &fp);
    if per_sm == 0 {
        return Err(NoFit {
            step: index,
            label: step.label.clone(),
            threads,
            regs,
            smem,
            profile: profile.name.clone(),
        });
    }
    let sms = u64::from(profile.compute_units);
    let blocks = step.launch.blocks();
    let lanes = sms * H100_FP32_LANES_PER_SM;
    let share = ((blocks * threads) as f64 / lanes as f64).min(1.0);
    let (flops, bytes) = (step.op.flops(), step.op.bytes());
    let seconds = (flops / (H100_FP32_FLOPS * share)).max(bytes / (H100_HBM_BYTES_PER_S * share));
    let kernel_time_us = (seconds * 1e6).max(MIN_KERNEL_US);
    let rounds = blocks.div_ceil(sms * u64::from(per_sm));
    Ok(Estimate {
        flops,
        bytes,
        share,
        kernel_time_us,
        blocks_per_sm: per_sm,
        rounds,
        block_time_us: kernel_time_us / rounds as f64,
    })
}

/// Exporting a manifest failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A step cannot be estimated.
    #[error("cannot estimate the kernel times")]
    NoFit(#[from] NoFit),
    /// The manifest idempotent groups cannot be computed (a kernel has none).
    #[error("the plan's accesses give a kernel without an idempotent group")]
    Groups(#[source] idempotent::NoIdempotentGroup),
    /// The daemon's loader refused the manifest (a bug here).
    #[error("the daemon's model loader refused the generated manifest")]
    Load(#[source] ModelError),
}

/// Rounds µs to whole ns.
fn round_ns(us: f64) -> f64 {
    (us * 1000.0).round() / 1000.0
}

impl BuiltModel {
    /// A plan made elsewhere (an imported graph lowered by [`lower_graph`])
    /// as a built model, so that it has a manifest; `provenance` says where
    /// its shapes come from.
    pub fn from_plan(plan: Plan, scale: Scale, provenance: String) -> BuiltModel {
        BuiltModel {
            plan,
            options: BuildOptions { scale },
            shapes: provenance,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The options it was built with.
    pub fn options(&self) -> BuildOptions {
        self.options
    }

    /// Weights from `seed` ([`Weights::generate`]). A full model's weights
    /// take its parameter count × 4 bytes (VGG-19: 575 MB).
    pub fn weights(&self, seed: u64) -> Weights {
        Weights::generate(&self.plan, seed)
    }

    /// An input uniform in [-1, 1) from `seed` (an image normalised to
    /// about unit scale, or an embedded token sequence).
    pub fn random_input(&self, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::seed_from_u64(seed);
        (0..self.plan.buffer(self.plan.input).len)
            .map(|_| rng.signed_f32())
            .collect()
    }

    /// The manifest as JSON in the format of `docs/models.md`, one kernel
    /// per line, with kernel times estimated on [`DeviceProfile::h100`].
    pub fn manifest_json(&self) -> Result<String, ExportError> {
        let plan = &self.plan;
        let profile = DeviceProfile::h100();
        let accesses: Vec<KernelAccess> = plan
            .steps
            .iter()
            .map(|s| KernelAccess {
                reads: s.op.reads().iter().map(|r| plan.byte_range(r)).collect(),
                writes: vec![plan.byte_range(&s.op.write())],
            })
            .collect();
        let groups = idempotent::minimal_groups(&accesses).map_err(ExportError::Groups)?;
        let mut total_ns = 0u64;
        let mut lines = Vec::with_capacity(plan.steps.len());
        for (i, step) in plan.steps.iter().enumerate() {
            let e = estimate(plan, i, &profile)?;
            let kernel_us = round_ns(e.kernel_time_us);
            total_ns += (kernel_us * 1000.0).round() as u64;
            let kernel = step.op.kernel();
            let ranges = |rs: &[ByteRange]| {
                let v: Vec<String> = rs
                    .iter()
                    .map(|r| format!("[{}, {}]", r.start, r.end))
                    .collect();
                v.join(", ")
            };
            let mut line = String::new();
            let _ = write!(
                line,
                "  {{\"name\": {}, \"grid\": {:?}, \"block\": {:?}, \"regs_per_thread\": {}, \
                 \"shared_mem_bytes\": {}, \"kernel_time_us\": {}, \"block_time_us\": {}, \
                 \"idempotent\": {}, \"reads\": [{}], \"writes\": [{}], \"group_start\": {}}}",
                serde_json::Value::from(step.kernel_name()),
                step.launch.grid,
                step.launch.block,
                kernel.regs_per_thread_estimate(),
                kernel.static_smem_bytes() + step.launch.dynamic_smem_bytes,
                kernel_us,
                round_ns(e.block_time_us).min(kernel_us),
                groups[i] == i,
                ranges(&accesses[i].reads),
                ranges(&accesses[i].writes),
                groups[i],
            );
            lines.push(line);
        }
        let provenance = format!(
            "generated by sluice_nn::builders ({:?} scale) from real layer shapes: {}. \
             Kernels of the sluice CUDA kernel library; grid/block/shared memory from its ABI \
             launch rules; reads/writes from the plan's buffers (f32, 256-byte aligned: input, \
             weights, activations, no reuse). ESTIMATES, NOT MEASURED: regs_per_thread is a \
             per-kernel estimate (to be replaced by ptxas -v); kernel_time_us is a roofline \
             estimate max(FLOPs / ({} TFLOP/s FP32 x share), bytes / ({} TB/s HBM3 x share), \
             {} us) with H100 SXM5 datasheet peaks and share = min(1, threads / (SMs x 128 \
             lanes)); block_time_us = kernel_time_us / rounds from the h100 profile's \
             occupancy; see docs/nn-models.md. Input: {} bytes f32; output: {} bytes f32.",
            self.options.scale,
            self.shapes,
            H100_FP32_FLOPS / 1e12,
            H100_HBM_BYTES_PER_S / 1e12,
            MIN_KERNEL_US,
            plan.buffer(plan.input).bytes(),
            plan.buffer(plan.output).bytes(),
        );
        let s = |v: &str| serde_json::Value::from(v).to_string();
        Ok(format!(
            "{{\n \"name\": {},\n \"display_name\": {},\n \"provenance\": {},\n \"input_bytes\": {},\n \
             \"output_bytes\": {},\n \"total_time_us\": {},\n \"kernels\": [\n{}\n ]\n}}\n",
            s(&plan.name),
            s(&plan.display_name),
            s(&provenance),
            plan.buffer(plan.input).bytes(),
            plan.buffer(plan.output).bytes(),
            total_ns as f64 / 1000.0,
            lines.join(",\n"),
        ))
    }

    /// The manifest loaded through the daemon's own loader
    /// ([`Manifest::parse_with_memory`] and [`ModelRegistry::from_parts`]),
    /// so it has passed every manifest and idempotent-group check. Its id is
    /// 0 (a registry of one).
    pub fn manifest(&self) -> Result<Model, ExportError> {
        let json = self.manifest_json()?;
        let file = format!("nn:{}", self.plan.name);
        let (manifest, memory): (Manifest, Vec<KernelMemory>) =
            Manifest::parse_with_memory(&file, &json).map_err(ExportError::Load)?;
        let reg =
            ModelRegistry::from_parts([(file, manifest, memory)]).map_err(ExportError::Load)?;
        Ok(reg.get(0).expect("a registry of one model").clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(name: &str, scale: Scale) -> BuiltModel {
        build(name, &BuildOptions { scale }).unwrap_or_else(|e| panic!("{name}: {e:?}"))
    }

    fn count(plan: &Plan, k: Kernel) -> usize {
        plan.steps().iter().filter(|s| s.op.kernel() == k).count()
    }

    #[test]
    fn full_models_have_the_known_layer_counts() {
        // (model, conv, pool, gemm, eltwise, attention, layernorm, gap, total)
        let want = [
            ("vgg19", [16, 5, 3, 0, 0, 0, 0], 24),
            // 1 stem + 50 blocks x 3 + 4 downsample = 155 conv; 50 residual joins.
            ("resnet152", [155, 1, 1, 50, 0, 0, 1], 208),
            // Per layer: qkv, proj, ffn1, ffn2 gemms; 2 adds; attention; 2 LN.
            ("bert_base", [0, 0, 48, 24, 12, 24, 0], 108),
            // Plus final LN and LM head.
            ("gpt2", [0, 0, 49, 24, 12, 25, 0], 110),
        ];
        let kinds = [
            Kernel::Conv2d,
            Kernel::Pool2d,
            Kernel::Gemm,
            Kernel::Eltwise,
            Kernel::Attention,
            Kernel::Layernorm,
            Kernel::GlobalAvgPool,
        ];
        for (name, counts, total) in want {
            for scale in [Scale::Full, Scale::Small] {
                let m = built(name, scale);
                let got = kinds.map(|k| count(m.plan(), k));
                assert_eq!(got, counts, "{name} {scale:?}");
                assert_eq!(m.plan().steps().len(), total, "{name} {scale:?}");
                assert_eq!(count(m.plan(), Kernel::Softmax), 0);
            }
        }
    }

    #[test]
    fn parameter_counts_match_the_architectures() {
        // VGG-19: torchvision's vgg19 has 143,667,240 parameters.
        // ResNet-152: torchvision's 60,192,808 counts batch norm as gamma and
        // beta per channel (75,712 channels); folded into a conv bias it is
        // one per channel: 60,192,808 - 75,712.
        // BERT-base encoder without embeddings and pooler: 12 layers x
        // 7,087,872 (QKV 768x2304+2304, proj 768x768+768, FFN 768x3072+3072
        // and 3072x768+768, two LNs of 2x768).
        // GPT-2 small: 124,439,808 with the tied token embedding counted
        // once; here the LM head holds it (768x50257, no bias) and the
        // position table (1024x768 = 786,432) stays on the host.
        let want = [
            ("vgg19", 143_667_240),
            ("resnet152", 60_192_808 - 75_712),
            ("bert_base", 12 * 7_087_872),
            ("gpt2", 124_439_808 - 786_432),
        ];
        for (name, params) in want {
            assert_eq!(
                built(name, Scale::Full).plan().param_count(),
                params,
                "{name}"
            );
        }
        assert_eq!(12 * 7_087_872, 85_054_464);
    }

    #[test]
    fn unknown_model_is_refused_with_the_names() {
        let e = build("alexnet", &BuildOptions::default()).unwrap_err();
        assert_eq!(
            e,
            BuildError::UnknownModel {
                name: "alexnet".into()
            }
        );
        let msg = e.to_string();
        for n in MODEL_NAMES {
            assert!(msg.contains(n), "{msg}");
        }
    }

    /// Every step's slices lie inside their buffers, match the op's shape,
    /// and every buffer lies inside the arena without overlap; checked here
    /// without `Plan::validate`.
    #[test]
    fn every_step_fits_its_buffers() {
        for name in MODEL_NAMES {
            for scale in [Scale::Full, Scale::Small] {
                let m = built(name, scale);
                let plan = m.plan();
                let mut prev_end = 0;
                for b in plan.buffers() {
                    assert!(
                        b.offset >= prev_end && b.offset % 256 == 0,
                        "{name} {}",
                        b.name
                    );
                    prev_end = b.offset + b.bytes();
                    assert_eq!(b.init.is_some(), b.role == Role::Weight, "{}", b.name);
                }
                assert_eq!(prev_end, plan.arena_bytes());
                assert_eq!(plan.buffer(plan.input()).role, Role::Input);
                assert_eq!(plan.buffer(plan.output()).role, Role::Output);
                for (i, s) in plan.steps().iter().enumerate() {
                    s.op.check()
                        .unwrap_or_else(|e| panic!("{name} step {i}: {e}"));
                    for r in s.op.reads().iter().chain([&s.op.write()]) {
                        let b = plan.buffer(r.buf);
                        assert!(r.offset + r.len <= b.len, "{name} step {i} {}", b.name);
                        let br = plan.byte_range(r);
                        assert!(br.start >= b.offset && br.end <= b.offset + b.bytes());
                    }
                    assert!(!s.op.reads().iter().any(|r| r.buf == s.op.write().buf));
                    // Argument lists follow the ABI table.
                    let kinds: String =
                        s.op.args()
                            .unwrap()
                            .iter()
                            .map(|a| match a {
                                Arg::Tensor(_) => 'T',
                                Arg::Null => 'n',
                                Arg::Int(_) => 'i',
                                Arg::Float(_) => 'f',
                            })
                            .collect();
                    let want = match s.op.kernel() {
                        Kernel::Gemm => ["TTTTiiii", "TTnTiiii"].as_slice(),
                        Kernel::Conv2d => &["TTTTiiiiiiiii"],
                        Kernel::Pool2d => &["TTiiiiiii"],
                        Kernel::GlobalAvgPool => &["TTii"],
                        Kernel::Eltwise => &["TTTii", "TnTii"],
                        Kernel::Softmax => &["TTii"],
                        Kernel::Layernorm => &["TTTTiif"],
                        Kernel::Attention => &["TTiiii"],
                        k => panic!("{name} step {i}: the builders do not launch {k:?}"),
                    };
                    assert!(want.contains(&kinds.as_str()), "{name} step {i}: {kinds}");
                }
                plan.validate().unwrap();
            }
        }
    }

    #[test]
    fn launch_configurations_follow_the_abi() {
        let find = |m: &BuiltModel, label: &str| -> Step {
            m.plan()
                .steps()
                .iter()
                .find(|s| s.label == label)
                .unwrap()
                .clone()
        };
        let vgg = built("vgg19", Scale::Full);
        // conv1_1: N = 224·224 = 50176 → 784 tiles; M = 64 → 1.
        let s = find(&vgg, "conv1_1");
        assert_eq!((s.launch.grid, s.launch.block), ([784, 1, 1], [256, 1, 1]));
        // conv5_4: 14·14 = 196 → 4; 512 → 8.
        assert_eq!(find(&vgg, "conv5_4").launch.grid, [4, 8, 1]);
        // pool1: 64·112·112 = 802816 outputs / 256.
        assert_eq!(find(&vgg, "pool1").launch.grid, [3136, 1, 1]);
        // fc6: N = 4096 → 64, M = 1 → 1.
        assert_eq!(find(&vgg, "fc6").launch.grid, [64, 1, 1]);
        let bert = built("bert_base", Scale::Full);
        let s = find(&bert, "layer0.attn");
        assert_eq!((s.launch.grid, s.launch.block), ([2, 12, 1], [64, 1, 1]));
        // QKV: N = 2304 → 36, M = 128 → 2.
        assert_eq!(find(&bert, "layer0.qkv").launch.grid, [36, 2, 1]);
        // add: n = 128·768 = 98304 → 384 blocks; LN: one block per row.
        assert_eq!(find(&bert, "layer0.add1").launch.grid, [384, 1, 1]);
        assert_eq!(find(&bert, "layer0.ln1").launch.grid, [128, 1, 1]);
        let rn = built("resnet152", Scale::Full);
        assert_eq!(find(&rn, "avgpool").launch.grid, [2048, 1, 1]);
        // Stem: 112·112 = 12544 → 196 tiles.
        assert_eq!(find(&rn, "conv1").launch.grid, [196, 1, 1]);
        // GPT-2 LM head on one token: N = 50257 → 786.
        assert_eq!(
            find(&built("gpt2", Scale::Full), "lm_head").launch.grid,
            [786, 1, 1]
        );
        for name in MODEL_NAMES {
            for s in built(name, Scale::Full).plan().steps() {
                assert_eq!(s.launch.dynamic_smem_bytes, 0);
            }
        }
    }

    #[test]
    fn full_manifests_load_through_the_daemon_loader() {
        for name in MODEL_NAMES {
            let m = built(name, Scale::Full);
            let plan = m.plan();
            let model = m.manifest().unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let man = &model.manifest;
            assert_eq!(man.name, name);
            assert_eq!(man.kernels.len(), plan.steps().len());
            assert_eq!(model.memory.len(), plan.steps().len());
            assert_eq!(man.input_bytes, plan.buffer(plan.input()).bytes());
            assert_eq!(man.output_bytes, plan.buffer(plan.output()).bytes());
            assert!(man.provenance.contains("ESTIMATES, NOT MEASURED"));
            for (i, (k, s)) in man.kernels.iter().zip(plan.steps()).enumerate() {
                assert_eq!(k.grid, s.launch.grid);
                assert_eq!(k.block, s.launch.block);
                assert!(k.name.starts_with(s.op.kernel().abi_name()), "{}", k.name);
                // No kernel writes what it reads: every group is the kernel.
                assert!(k.idempotent);
                assert_eq!(model.group_start(i), i);
                assert!(k.kernel_time_us >= MIN_KERNEL_US && k.block_time_us <= k.kernel_time_us);
                let mem = &model.memory[i];
                assert_eq!(mem.writes, [plan.byte_range(&s.op.write())]);
                assert_eq!(mem.reads.len(), s.op.reads().len());
                assert!(
                    mem.reads
                        .iter()
                        .chain(&mem.writes)
                        .all(|r| r.end <= plan.arena_bytes())
                );
            }
            let sum: f64 = man.kernels.iter().map(|k| k.kernel_time_us).sum();
            assert!((sum - man.total_time_us).abs() < 1e-3, "{name}");
        }
        // The JSON loads as a file too, without the builder.
        let json = built("gpt2", Scale::Small).manifest_json().unwrap();
        let (m, mem) = Manifest::parse_with_memory("gpt2_small.json", &json).unwrap();
        assert_eq!(
            (m.name.as_str(), m.kernels.len(), mem.len()),
            ("gpt2_small", 110, 110)
        );
    }

    #[test]
    fn roofline_estimates_follow_the_formula() {
        let h100 = DeviceProfile::h100();
        // A compute-bound GEMM: VGG fc7 is memory-bound (M = 1), a BERT FFN
        // GEMM with M = 128 rows is compute-bound on padded tiles.
        let bert = built("bert_base", Scale::Full);
        let plan = bert.plan();
        let i = plan
            .steps()
            .iter()
            .position(|s| s.label == "layer0.ffn1")
            .unwrap();
        let e = estimate(plan, i, &h100).unwrap();
        // 2 · 128 · 3072 · 768 flops; grid 48 x 2 blocks of 256 threads =
        // 24576 threads ≥ 132·128 = 16896 lanes, so share 1.
        assert_eq!(e.flops, 2.0 * 128.0 * 3072.0 * 768.0);
        assert_eq!(e.share, 1.0);
        let bytes = 4.0 * (128.0 * 768.0 + 768.0 * 3072.0 + 3072.0 + 128.0 * 3072.0);
        assert_eq!(e.bytes, bytes);
        let want = (e.flops / H100_FP32_FLOPS).max(bytes / H100_HBM_BYTES_PER_S) * 1e6;
        assert!((e.kernel_time_us - want.max(MIN_KERNEL_US)).abs() < 1e-9);
        // 96 blocks, 4 per SM (regs 64·256 = 16384 of 65536): one round.
        assert_eq!((e.blocks_per_sm, e.rounds), (4, 1));
        assert_eq!(e.block_time_us, e.kernel_time_us);

        // fc6 of VGG: M = 1 pads to a 64-row tile; 64 blocks of 256
        // threads share 16384/16896 of the device.
        let vgg = built("vgg19", Scale::Full);
        let i = vgg
            .plan()
            .steps()
            .iter()
            .position(|s| s.label == "fc6")
            .unwrap();
        let e = estimate(vgg.plan(), i, &h100).unwrap();
        assert_eq!(e.flops, 2.0 * 64.0 * 4096.0 * 25088.0);
        let share = 16384.0 / 16896.0;
        assert_eq!(e.share, share);
        let mem_us = e.bytes / (H100_HBM_BYTES_PER_S * share) * 1e6;
        let cpu_us = e.flops / (H100_FP32_FLOPS * share) * 1e6;
        // Padding M = 1 to a 64-row tile makes the tiled kernel compute
        // bound: 13.2 GFLOP against a 411 MB weight read.
        assert!(cpu_us > mem_us, "{cpu_us} vs {mem_us}");
        assert!((e.kernel_time_us - cpu_us).abs() < 1e-9);
        assert!(e.bytes > 4.0 * 25088.0 * 4096.0);

        // Tiny kernels get the floor; a many-round kernel splits its time.
        let small = built("bert_base", Scale::Small);
        let e = estimate(small.plan(), 0, &h100).unwrap();
        assert_eq!(e.kernel_time_us, MIN_KERNEL_US);
        let i = vgg
            .plan()
            .steps()
            .iter()
            .position(|s| s.label == "pool1")
            .unwrap();
        let e = estimate(vgg.plan(), i, &h100).unwrap();
        // 3136 blocks of 256 threads, 8 per SM (threads 2048/256).
        assert_eq!((e.blocks_per_sm, e.rounds), (8, 3));
        assert!((e.block_time_us * 3.0 - e.kernel_time_us).abs() < 1e-9);
    }

    /// The largest |value| in any activation of a run, and the output.
    fn run_small(name: &str, input_seed: u64) -> (f32, Vec<f32>) {
        let m = built(name, Scale::Small);
        let plan = m.plan();
        let w = m.weights(7);
        let input = m.random_input(input_seed);
        let mut exec = CpuExec::new(plan, &w, &input).unwrap();
        let mut max = 0f32;
        for i in 0..plan.steps().len() {
            exec.step(i).unwrap();
            let out = exec.buffer(plan.steps()[i].op.write().buf);
            assert!(
                out.iter().all(|v| v.is_finite()),
                "{name} step {i} ({})",
                plan.steps()[i].label
            );
            max = out.iter().fold(max, |m, v| m.max(v.abs()));
        }
        (max, exec.output().to_vec())
    }

    #[test]
    fn small_models_run_on_cpu_with_finite_bounded_output() {
        for name in MODEL_NAMES {
            let (max, out) = run_small(name, 1);
            assert!(out.iter().all(|v| v.is_finite()), "{name}");
            // Initialisation keeps every activation of order one.
            assert!(
                max < 100.0 && max > 0.01,
                "{name}: largest activation {max}"
            );
            let spread = out.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(spread > 1e-3, "{name}: output all but zero");
            // The output depends on the input.
            let (_, other) = run_small(name, 2);
            assert_ne!(out, other, "{name}");
            // Same seeds, same output.
            assert_eq!(run_small(name, 1).1, out, "{name}");
        }
    }

    /// A run where every step first finds garbage in its output (a killed
    /// earlier attempt wrote part of it) and is restarted from its
    /// manifest group start, equals an uninterrupted run bit for bit.
    #[test]
    fn restarted_step_by_step_run_equals_whole_run() {
        for name in MODEL_NAMES {
            let m = built(name, Scale::Small);
            let plan = m.plan();
            let w = m.weights(3);
            let input = m.random_input(4);
            let whole = run_cpu(plan, &w, &input).unwrap();
            let model = m.manifest().unwrap();
            let mut exec = CpuExec::new(plan, &w, &input).unwrap();
            for i in 0..plan.steps().len() {
                let out = plan.steps()[i].op.write();
                for (j, v) in exec.mem[out.buf.0][out.offset..out.offset + out.len]
                    .iter_mut()
                    .enumerate()
                {
                    *v = if j % 2 == 0 { 1e30 } else { f32::NAN };
                }
                for k in model.group_start(i)..=i {
                    exec.step(k).unwrap();
                }
                // And once more: re-running a finished kernel changes nothing.
                let before = exec.buffer(out.buf).to_vec();
                exec.step(i).unwrap();
                assert_eq!(exec.buffer(out.buf), before.as_slice(), "{name} step {i}");
            }
            assert_eq!(exec.output(), whole.as_slice(), "{name}");
        }
    }

    #[test]
    fn run_errors_name_the_bad_value() {
        let m = built("vgg19", Scale::Small);
        let w = m.weights(1);
        let e = run_cpu(m.plan(), &w, &[0.0; 5]).unwrap_err();
        assert_eq!(
            e,
            RunError::Input {
                model: "vgg19_small".into(),
                expected: 3 * 32 * 32,
                got: 5
            }
        );
        let other = built("bert_base", Scale::Small).weights(1);
        let e = run_cpu(m.plan(), &other, &m.random_input(0)).unwrap_err();
        assert!(matches!(e, RunError::Weights { .. }), "{e:?}");
        let mut exec = CpuExec::new(m.plan(), &w, &m.random_input(0)).unwrap();
        assert_eq!(
            exec.step(24).unwrap_err(),
            RunError::NoStep {
                step: 24,
                steps: 24
            }
        );
    }

    #[test]
    fn weights_follow_their_init_and_seed() {
        let m = built("resnet152", Scale::Small);
        let (a, b) = (m.weights(1), m.weights(1));
        assert_eq!(a, b);
        assert_ne!(a, m.weights(2));
        for (i, buf) in m.plan().buffers().iter().enumerate() {
            let v = a.get(BufId(i));
            match buf.init {
                Some(init) => {
                    assert_eq!(v.len(), buf.len);
                    let lo = init.center - init.half_width;
                    let hi = init.center + init.half_width;
                    assert!(v.iter().all(|&x| (lo..=hi).contains(&x)), "{}", buf.name);
                }
                None => assert!(v.is_empty()),
            }
        }
    }

    /// A two-step plan by hand for the validation tests.
    fn tiny(f: impl FnOnce(&mut PlanBuilder, TensorRef) -> TensorRef) -> Result<Plan, BuildError> {
        let mut p = PlanBuilder::new();
        let x = p.input(4);
        let out = f(&mut p, x);
        p.finish("t".into(), "t".into(), out)
    }

    #[test]
    fn validation_refuses_broken_plans() {
        // Fine: relu into a fresh buffer.
        tiny(|p, x| p.eltwise("r", x, None, EltwiseOp::Relu).unwrap()).unwrap();
        // In place: reads its own output.
        let e = tiny(|p, x| {
            let y = p.eltwise("r", x, None, EltwiseOp::Relu).unwrap();
            p.push(
                "inplace".into(),
                Op::Eltwise {
                    a: y,
                    b: None,
                    y,
                    n: 4,
                    op: EltwiseOp::Relu,
                },
            )
            .unwrap();
            y
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                BuildError::Plan(PlanError::ReadsOwnOutput { step: 1, .. })
            ),
            "{e:?}"
        );
        // Reads an activation no step wrote.
        let e = tiny(|p, _| {
            let a = p.activation("a".into(), 4);
            p.eltwise("r", a, None, EltwiseOp::Relu).unwrap()
        })
        .unwrap_err();
        assert!(
            matches!(e, BuildError::Plan(PlanError::ReadBeforeWrite { .. })),
            "{e:?}"
        );
        // A slice past the end of its buffer.
        let e = tiny(|p, x| {
            let y = p.activation("y".into(), 4);
            let a = TensorRef { offset: 2, ..x };
            p.push(
                "oob".into(),
                Op::Eltwise {
                    a,
                    b: None,
                    y,
                    n: 4,
                    op: EltwiseOp::Relu,
                },
            )
            .unwrap();
            y
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                BuildError::Plan(PlanError::OutOfBounds { offset: 2, .. })
            ),
            "{e:?}"
        );
        // Writes the input.
        let e = tiny(|p, x| {
            let y = p.eltwise("r", x, None, EltwiseOp::Relu).unwrap();
            p.push(
                "w".into(),
                Op::Eltwise {
                    a: y,
                    b: None,
                    y: x,
                    n: 4,
                    op: EltwiseOp::Relu,
                },
            )
            .unwrap();
            y
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                BuildError::Plan(PlanError::WritesReadOnly {
                    role: Role::Input,
                    ..
                })
            ),
            "{e:?}"
        );
        // The output is never written.
        let e = tiny(|p, x| {
            p.eltwise("r", x, None, EltwiseOp::Relu).unwrap();
            p.activation("never".into(), 4)
        })
        .unwrap_err();
        assert!(
            matches!(e, BuildError::Plan(PlanError::OutputNotWritten { .. })),
            "{e:?}"
        );
        // A shape mismatch is reported with the step.
        let e = tiny(|p, x| {
            let y = p.activation("y".into(), 3);
            p.push(
                "bad".into(),
                Op::Eltwise {
                    a: x,
                    b: None,
                    y,
                    n: 4,
                    op: EltwiseOp::Relu,
                },
            )
            .unwrap();
            y
        })
        .unwrap_err();
        let BuildError::Plan(PlanError::Shape {
            step: 0, source, ..
        }) = e
        else {
            panic!("{e:?}")
        };
        assert!(matches!(
            source,
            ShapeError::Len {
                tensor: "y",
                expected: 4,
                got: 3,
                ..
            }
        ));
    }

    #[test]
    fn int_arguments_must_fit_a_c_int() {
        let big = 1usize << 31;
        let t = |len| TensorRef {
            buf: BufId(0),
            offset: 0,
            len,
        };
        let op = Op::Eltwise {
            a: t(big),
            b: None,
            y: t(big),
            n: big,
            op: EltwiseOp::Relu,
        };
        assert_eq!(
            op.args().unwrap_err(),
            ArgError {
                arg: "n",
                value: big
            }
        );
        assert!(
            op.args()
                .unwrap_err()
                .to_string()
                .contains("n = 2147483648")
        );
    }
}
