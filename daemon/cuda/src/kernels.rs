//! sluice's own CUDA C++ kernel library: the sources, the kernel table, the
//! launch configuration of every kernel, and (feature `cuda`) their
//! compilation to PTX with NVRTC.
//!
//! The sources live in `daemon/cuda/kernels/` and are embedded with
//! `include_str!`: `sluice.cuh` (the prologue every kernel runs first: the
//! preemption flag of REEF §4.2's lazy eviction and the kernel execution
//! index of §4.4) and one `.cu` file per kernel family. They use no system
//! or CUDA header, so NVRTC compiles them with nothing but its built-ins;
//! `sluice.cuh` is handed to NVRTC as a named header.
//!
//! Every kernel's first two parameters are `const SluiceCtl* ctl, unsigned
//! int kidx`; the launch functions below ([`gemm`], [`conv2d`], ...) compute
//! the grid, block and dynamic shared memory each kernel assumes, and refuse
//! shapes the kernel cannot take. docs/cuda-kernels.md describes the
//! protocol and each kernel.

/// Main loops poll the preemption flag every this many iterations
/// (`SLUICE_POLL_EVERY` in `sluice.cuh`; a test keeps the two equal).
pub const POLL_EVERY: u32 = 8;

/// The include name under which NVRTC gets [`HEADER`].
pub const HEADER_NAME: &str = "sluice.cuh";

/// The prologue header: `SluiceCtl`, `SLUICE_PROLOGUE`, `sluice_should_stop`,
/// and the block reductions the kernels share.
pub const HEADER: &str = include_str!("../kernels/sluice.cuh");

/// One `.cu` file of the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// File name in `daemon/cuda/kernels/`, e.g. `gemm.cu`.
    pub file: &'static str,
    /// The file's text.
    pub text: &'static str,
}

impl Source {
    /// The kernels this file defines, in table order.
    pub fn kernels(&self) -> impl Iterator<Item = Kernel> + '_ {
        Kernel::ALL.into_iter().filter(|k| k.file() == self.file)
    }
}

/// Every `.cu` file, each compiled as its own NVRTC program.
pub const SOURCES: [Source; 9] = [
    Source {
        file: "gemm.cu",
        text: include_str!("../kernels/gemm.cu"),
    },
    Source {
        file: "conv2d.cu",
        text: include_str!("../kernels/conv2d.cu"),
    },
    Source {
        file: "pool.cu",
        text: include_str!("../kernels/pool.cu"),
    },
    Source {
        file: "eltwise.cu",
        text: include_str!("../kernels/eltwise.cu"),
    },
    Source {
        file: "softmax.cu",
        text: include_str!("../kernels/softmax.cu"),
    },
    Source {
        file: "layernorm.cu",
        text: include_str!("../kernels/layernorm.cu"),
    },
    Source {
        file: "attention.cu",
        text: include_str!("../kernels/attention.cu"),
    },
    Source {
        file: "general.cu",
        text: include_str!("../kernels/general.cu"),
    },
    Source {
        file: "synthetic.cu",
        text: include_str!("../kernels/synthetic.cu"),
    },
];

/// A kernel of the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `sluice_gemm`: C = A·B (+ bias, activation), tiled.
    Gemm,
    /// `sluice_conv2d`: direct 2-D convolution, NCHW (+ bias, activation).
    Conv2d,
    /// `sluice_pool2d`: max or average pooling over a square window.
    Pool2d,
    /// `sluice_global_avgpool`: mean over each channel's plane.
    GlobalAvgpool,
    /// `sluice_eltwise`: add, add + ReLU, ReLU or GELU, element by element.
    Eltwise,
    /// `sluice_softmax`: row-wise softmax.
    Softmax,
    /// `sluice_layernorm`: row-wise layer normalisation.
    Layernorm,
    /// `sluice_attention`: scaled dot-product attention over packed QKV.
    Attention,
    /// `sluice_synthetic`: a kernel that spins for a given time per block
    /// (the benchmarks' kernels of manifest timing).
    Synthetic,
    /// `sluice_elementwise`: unary, broadcasting binary and `Where`
    /// operators over any strided layout of up to 6 axes.
    Elementwise,
    /// `sluice_gather`: every output element copied from an index of up to
    /// four sources (Transpose, Slice, Concat, Split, Pad, Resize nearest,
    /// Gather by constant indices).
    Gather,
    /// `sluice_bmm`: batched matrix products of two activations.
    Bmm,
    /// `sluice_embedding`: rows of a table picked by token ids.
    Embedding,
    /// `sluice_conv2d_ex`: direct grouped 2-D convolution, any batch,
    /// per-axis strides, dilations and padding.
    Conv2dEx,
    /// `sluice_pool2d_ex`: pooling, any window, stride, dilation, padding.
    Pool2dEx,
    /// `sluice_lrn`: local response normalisation across channels.
    Lrn,
    /// `sluice_interp`: weighted taps of one source (linear `Resize`).
    Interp,
}

impl Kernel {
    /// Every kernel, in table order.
    pub const ALL: [Kernel; 17] = [
        Kernel::Gemm,
        Kernel::Conv2d,
        Kernel::Pool2d,
        Kernel::GlobalAvgpool,
        Kernel::Eltwise,
        Kernel::Softmax,
        Kernel::Layernorm,
        Kernel::Attention,
        Kernel::Synthetic,
        Kernel::Elementwise,
        Kernel::Gather,
        Kernel::Bmm,
        Kernel::Embedding,
        Kernel::Conv2dEx,
        Kernel::Pool2dEx,
        Kernel::Lrn,
        Kernel::Interp,
    ];

    /// The `extern "C"` name, as in the PTX `.entry`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Gemm => "sluice_gemm",
            Kernel::Conv2d => "sluice_conv2d",
            Kernel::Pool2d => "sluice_pool2d",
            Kernel::GlobalAvgpool => "sluice_global_avgpool",
            Kernel::Eltwise => "sluice_eltwise",
            Kernel::Softmax => "sluice_softmax",
            Kernel::Layernorm => "sluice_layernorm",
            Kernel::Attention => "sluice_attention",
            Kernel::Synthetic => "sluice_synthetic",
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

    /// The kernel whose `extern "C"` name is `name`.
    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The source file that defines it.
    pub fn file(self) -> &'static str {
        match self {
            Kernel::Gemm => "gemm.cu",
            Kernel::Conv2d => "conv2d.cu",
            Kernel::Pool2d | Kernel::GlobalAvgpool => "pool.cu",
            Kernel::Eltwise => "eltwise.cu",
            Kernel::Softmax => "softmax.cu",
            Kernel::Layernorm => "layernorm.cu",
            Kernel::Attention => "attention.cu",
            Kernel::Synthetic => "synthetic.cu",
            Kernel::Elementwise
            | Kernel::Gather
            | Kernel::Bmm
            | Kernel::Embedding
            | Kernel::Conv2dEx
            | Kernel::Pool2dEx
            | Kernel::Lrn
            | Kernel::Interp => "general.cu",
        }
    }

    /// Threads per block (1-D blocks) of the launch functions. For every
    /// kernel but the synthetic one this is also its `__launch_bounds__`.
    pub fn block_threads(self) -> u32 {
        match self {
            Kernel::Attention => ATTENTION_ROWS_PER_BLOCK,
            Kernel::Synthetic => 128,
            _ => 256,
        }
    }

    /// The most threads a block may have: the kernel's `__launch_bounds__`
    /// (the driver refuses a larger block, `CUDA_ERROR_INVALID_VALUE`). The
    /// synthetic kernel takes up to 1024, a whole number of warps, so that it
    /// can stand in for a manifest kernel with that kernel's block size.
    pub fn max_block_threads(self) -> u32 {
        match self {
            Kernel::Synthetic => SYNTHETIC_MAX_BLOCK,
            k => k.block_threads(),
        }
    }

    /// The parameters after the prologue's `ctl, kidx`, in order.
    pub fn params(self) -> &'static str {
        match self {
            Kernel::Gemm => "A, B, bias?, C, M, N, K, act",
            Kernel::Conv2d => "x, w, bias?, y, Cin, H, W, Cout, KH, KW, stride, pad, act",
            Kernel::Pool2d => "x, y, C, H, W, k, stride, pad, mode",
            Kernel::GlobalAvgpool => "x, y, C, HW",
            Kernel::Eltwise => "a, b?, y, n, op",
            Kernel::Softmax => "x, y, rows, cols",
            Kernel::Layernorm => "x, gamma?, beta?, y, rows, cols, eps",
            Kernel::Attention => "qkv, out, T, H, D, causal",
            Kernel::Synthetic => "sink, block_ns",
            Kernel::Elementwise => "a, b?, c?, desc, y, n, op, act, p0, p1",
            Kernel::Gather => "x0?, x1?, x2?, x3?, idx, y, n, n0, n1, n2, n3, fill",
            Kernel::Bmm => "a, b, y, batch, M, N, K, sa, sb",
            Kernel::Embedding => "table, ids, y, count, dim, vocab",
            Kernel::Conv2dEx => {
                "x, w, bias?, y, N, Cin, H, W, Cout, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups, act"
            }
            Kernel::Pool2dEx => {
                "x, y, NC, H, W, OH, OW, KH, KW, sh, sw, ph, pw, peh, pew, dh, dw, mode"
            }
            Kernel::Lrn => "x, y, N, C, HW, size, alpha, beta, bias",
            Kernel::Interp => "x, idx, w, y, n, taps, src",
        }
    }

    /// The grid rule, as the launch function computes it.
    pub fn grid_rule(self) -> &'static str {
        match self {
            Kernel::Gemm => "(ceil(N/64), ceil(M/64))",
            Kernel::Conv2d => "(ceil(OH*OW/64), ceil(Cout/64))",
            Kernel::Pool2d => "ceil(C*OH*OW/256)",
            Kernel::GlobalAvgpool => "C",
            Kernel::Eltwise => "min(ceil(n/256), 65535), grid-stride",
            Kernel::Softmax | Kernel::Layernorm => "rows",
            Kernel::Attention => "(ceil(T/64), H)",
            Kernel::Synthetic => "given",
            Kernel::Elementwise
            | Kernel::Gather
            | Kernel::Bmm
            | Kernel::Embedding
            | Kernel::Conv2dEx
            | Kernel::Pool2dEx
            | Kernel::Lrn
            | Kernel::Interp => "min(ceil(total/256), 65535), grid-stride",
        }
    }

    /// Whether the main loop polls the preemption flag (every
    /// [`POLL_EVERY`] iterations for the tiled loops; every iteration for
    /// the synthetic kernel). Every kernel checks it in its prologue.
    pub fn polls(self) -> bool {
        matches!(
            self,
            Kernel::Gemm
                | Kernel::Conv2d
                | Kernel::Attention
                | Kernel::Synthetic
                | Kernel::Bmm
                | Kernel::Conv2dEx
        )
    }
}

/// The synthetic kernel's launch bound (CUDA's largest block).
pub const SYNTHETIC_MAX_BLOCK: u32 = 1024;

/// Query rows (threads) per block of `sluice_attention`.
pub const ATTENTION_ROWS_PER_BLOCK: u32 = 64;
/// The largest head size `sluice_attention` takes.
pub const ATTENTION_MAX_HEAD_DIM: usize = 128;
/// Output tile edge of the GEMM and conv2d kernels.
pub const GEMM_TILE: usize = 64;
/// The eltwise grid's cap; larger inputs are covered by the grid-stride loop.
pub const ELTWISE_MAX_BLOCKS: u32 = 65_535;

/// CUDA's limit on `gridDim.x`.
const MAX_GRID_X: u64 = i32::MAX as u64;
/// CUDA's limit on `gridDim.y` and `gridDim.z`.
const MAX_GRID_YZ: u64 = 65_535;
/// The kernels take their sizes as C `int`.
const MAX_INT: u64 = i32::MAX as u64;

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory; every kernel of the library uses only static
    /// shared memory, so this is 0.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    fn new(kernel: Kernel, grid: [u32; 3]) -> LaunchConfig {
        LaunchConfig {
            grid,
            block: [kernel.block_threads(), 1, 1],
            shared_mem_bytes: 0,
        }
    }

    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }
}

#[cfg(feature = "cuda")]
impl From<LaunchConfig> for cudarc::driver::LaunchConfig {
    fn from(c: LaunchConfig) -> Self {
        cudarc::driver::LaunchConfig {
            grid_dim: (c.grid[0], c.grid[1], c.grid[2]),
            block_dim: (c.block[0], c.block[1], c.block[2]),
            shared_mem_bytes: c.shared_mem_bytes,
        }
    }
}

/// A shape a kernel cannot be launched for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// A size outside what the kernel or CUDA's grid accepts.
    #[error(
        "{kernel}: {what} = {value} is out of range; it must be in {min}..={max} \
         (the kernel takes it as a C int, or CUDA's grid limit bounds it)"
    )]
    OutOfRange {
        /// The kernel.
        kernel: &'static str,
        /// Which size.
        what: &'static str,
        /// The value given.
        value: u64,
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// A window, stride and padding that leave no output.
    #[error(
        "{kernel}: a window of {window} with stride {stride} and padding {pad} does not fit \
         an input of {len}; the output would be empty (need {len} + 2*{pad} >= {window})"
    )]
    EmptyOutput {
        /// The kernel.
        kernel: &'static str,
        /// Input length along the window's axis.
        len: u64,
        /// Window size.
        window: u64,
        /// Stride.
        stride: u64,
        /// Padding on each side.
        pad: u64,
    },
    /// An attention head larger than the kernel's instantiation.
    #[error(
        "{kernel}: head size {d} is above the kernel's limit of {max}; \
         split the heads or add an instantiation for larger heads"
    )]
    HeadTooLarge {
        /// The kernel.
        kernel: &'static str,
        /// Head size given.
        d: u64,
        /// Largest head size the kernel takes.
        max: u64,
    },
}

fn check(
    kernel: Kernel,
    what: &'static str,
    value: usize,
    min: u64,
    max: u64,
) -> Result<u64, LaunchError> {
    let v = value as u64;
    if v < min || v > max {
        return Err(LaunchError::OutOfRange {
            kernel: kernel.name(),
            what,
            value: v,
            min,
            max,
        });
    }
    Ok(v)
}

fn blocks(n: u64, per: u64) -> u64 {
    n.div_ceil(per)
}

/// `(len + 2·pad − window) / stride + 1`, the output length of a
/// convolution or pooling window; `None` when the window does not fit.
pub fn window_out(len: usize, window: usize, stride: usize, pad: usize) -> Option<usize> {
    let padded = len.checked_add(pad.checked_mul(2)?)?;
    if stride == 0 || window == 0 || padded < window {
        return None;
    }
    Some((padded - window) / stride + 1)
}

fn out_len(
    kernel: Kernel,
    len: u64,
    window: u64,
    stride: u64,
    pad: u64,
) -> Result<u64, LaunchError> {
    // The kernel computes len + 2·pad in a C int.
    check(
        kernel,
        "padded input (len + 2*pad)",
        (len + 2 * pad) as usize,
        1,
        MAX_INT,
    )?;
    window_out(len as usize, window as usize, stride as usize, pad as usize)
        .map(|v| v as u64)
        .ok_or(LaunchError::EmptyOutput {
            kernel: kernel.name(),
            len,
            window,
            stride,
            pad,
        })
}

/// `sluice_gemm` for `C[m,n] = A[m,k]·B[k,n]`.
pub fn gemm(m: usize, n: usize, k: usize) -> Result<LaunchConfig, LaunchError> {
    let g = Kernel::Gemm;
    let m = check(g, "M", m, 1, MAX_INT)?;
    let n = check(g, "N", n, 1, MAX_INT)?;
    check(g, "K", k, 1, MAX_INT)?;
    let gx = check(
        g,
        "grid.x = ceil(N/64)",
        blocks(n, 64) as usize,
        1,
        MAX_GRID_X,
    )?;
    let gy = check(
        g,
        "grid.y = ceil(M/64)",
        blocks(m, 64) as usize,
        1,
        MAX_GRID_YZ,
    )?;
    Ok(LaunchConfig::new(g, [gx as u32, gy as u32, 1]))
}

/// The shapes of `sluice_conv2d` and `sluice_pool2d` are the CPU reference's: one
/// definition of what the kernels compute, checked against it.
pub use sluice_nn::reference::{Conv2dShape, Pool2dShape};

/// `sluice_conv2d`: implicit GEMM with M = Cout, N = OH·OW, K = Cin·KH·KW.
pub fn conv2d(s: &Conv2dShape) -> Result<LaunchConfig, LaunchError> {
    let g = Kernel::Conv2d;
    let cin = check(g, "Cin", s.cin, 1, MAX_INT)?;
    let h = check(g, "H", s.h, 1, MAX_INT)?;
    let w = check(g, "W", s.w, 1, MAX_INT)?;
    let cout = check(g, "Cout", s.cout, 1, MAX_INT)?;
    let kh = check(g, "KH", s.kh, 1, MAX_INT)?;
    let kw = check(g, "KW", s.kw, 1, MAX_INT)?;
    let stride = check(g, "stride", s.stride, 1, MAX_INT)?;
    let pad = check(g, "pad", s.pad, 0, MAX_INT / 4)?;
    let oh = out_len(g, h, kh, stride, pad)?;
    let ow = out_len(g, w, kw, stride, pad)?;
    let n = check(g, "OH*OW", (oh * ow) as usize, 1, MAX_INT)?;
    check(
        g,
        "Cin*KH*KW",
        cin.saturating_mul(kh).saturating_mul(kw) as usize,
        1,
        MAX_INT,
    )?;
    let gx = check(
        g,
        "grid.x = ceil(OH*OW/64)",
        blocks(n, 64) as usize,
        1,
        MAX_GRID_X,
    )?;
    let gy = check(
        g,
        "grid.y = ceil(Cout/64)",
        blocks(cout, 64) as usize,
        1,
        MAX_GRID_YZ,
    )?;
    Ok(LaunchConfig::new(g, [gx as u32, gy as u32, 1]))
}

/// `sluice_pool2d`: one thread per output element.
pub fn pool2d(s: &Pool2dShape) -> Result<LaunchConfig, LaunchError> {
    let g = Kernel::Pool2d;
    let c = check(g, "C", s.c, 1, MAX_INT)?;
    let h = check(g, "H", s.h, 1, MAX_INT)?;
    let w = check(g, "W", s.w, 1, MAX_INT)?;
    let k = check(g, "k", s.k, 1, MAX_INT)?;
    let stride = check(g, "stride", s.stride, 1, MAX_INT)?;
    // pad < k: every window then holds at least one input element.
    let pad = check(g, "pad", s.pad, 0, (k - 1).min(MAX_INT / 4))?;
    let oh = out_len(g, h, k, stride, pad)?;
    let ow = out_len(g, w, k, stride, pad)?;
    let total = c.saturating_mul(oh).saturating_mul(ow);
    let gx = check(
        g,
        "grid.x = ceil(C*OH*OW/256)",
        usize::try_from(blocks(total, 256)).unwrap_or(usize::MAX),
        1,
        MAX_GRID_X,
    )?;
    Ok(LaunchConfig::new(g, [gx as u32, 1, 1]))
}

/// `sluice_global_avgpool`: one block per channel.
pub fn global_avgpool(c: usize, hw: usize) -> Result<LaunchConfig, LaunchError> {
    let g = Kernel::GlobalAvgpool;
    let c = check(g, "C", c, 1, MAX_GRID_X)?;
    check(g, "HW", hw, 1, MAX_INT)?;
    Ok(LaunchConfig::new(g, [c as u32, 1, 1]))
}

/// `sluice_eltwise` over `n` elements.
pub fn eltwise(n: usize) -> Result<LaunchConfig, LaunchError> {
    let g = Kernel::Eltwise;
    let n = check(g, "n", n, 1, MAX_INT)?;
    let gx = blocks(n, 256).min(u64::from(ELTWISE_MAX_BLOCKS));
    Ok(LaunchConfig::new(g, [gx as u32, 1, 1]))
}

fn rows_kernel(g: Kernel, rows: usize, cols: usize) -> Result<LaunchConfig, LaunchError> {
    let rows = check(g, "rows", rows, 1, MAX_GRID_X)?;
    check(g, "cols", cols, 1, MAX_INT)?;
    Ok(LaunchConfig::new(g, [rows as u32, 1, 1]))
}

/// `sluice_softmax`: one block per row.
pub fn softmax(rows: usize, cols: usize) -> Result<LaunchConfig, LaunchError> {
    rows_kernel(Kernel::Softmax, rows, cols)
}

/// `sluice_layernorm`: one block per row.
pub fn layernorm(rows: usize, cols: usize) -> Result<LaunchConfig, LaunchError> {
    rows_kernel(Kernel::Layernorm, rows, cols)
}

/// `sluice_attention` for `t` tokens, `h` heads of size `d`.
pub fn attention(t: usize, h: usize, d: usize) -> Result<LaunchConfig, LaunchError> {
    let g = Kernel::Attention;
    let t = check(g, "T", t, 1, MAX_INT)?;
    let h = check(g, "H", h, 1, MAX_GRID_YZ)?;
    let d = check(g, "D", d, 1, MAX_INT)?;
    if d > ATTENTION_MAX_HEAD_DIM as u64 {
        return Err(LaunchError::HeadTooLarge {
            kernel: g.name(),
            d,
            max: ATTENTION_MAX_HEAD_DIM as u64,
        });
    }
    // The kernel forms 3·H·D (the qkv row length) in a C int.
    check(g, "3*H*D", (3 * h * d) as usize, 1, MAX_INT)?;
    let gx = blocks(t, u64::from(ATTENTION_ROWS_PER_BLOCK));
    Ok(LaunchConfig::new(g, [gx as u32, h as u32, 1]))
}

/// `sluice_synthetic` with `blocks` blocks (`sink` holds one float each).
pub fn synthetic(blocks: usize) -> Result<LaunchConfig, LaunchError> {
    let g = Kernel::Synthetic;
    let b = check(g, "blocks", blocks, 1, MAX_GRID_X)?;
    Ok(LaunchConfig::new(g, [b as u32, 1, 1]))
}

/// A CUDA virtual architecture, `compute_XY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arch(u32);

impl Arch {
    /// Parses `sm_80`, `compute_80` or `80` (two or three digits, at least
    /// 50: the oldest architecture NVRTC 12 targets).
    pub fn parse(s: &str) -> Result<Arch, KernelError> {
        let t = s.trim();
        let digits = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("compute_"))
            .unwrap_or(t);
        let bad = || KernelError::BadArch {
            given: s.to_owned(),
        };
        if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let v: u32 = digits.parse().map_err(|_| bad())?;
        if v < 50 {
            return Err(bad());
        }
        Ok(Arch(v))
    }

    /// `compute_XY`, NVRTC's `--gpu-architecture` value.
    pub fn compute(&self) -> String {
        format!("compute_{}", self.0)
    }

    /// `sm_XY`, the matching real architecture (ptxas `-arch`).
    pub fn sm(&self) -> String {
        format!("sm_{}", self.0)
    }
}

/// NVRTC options for `arch` (besides the named header).
pub fn nvrtc_options(arch: Arch) -> Vec<String> {
    vec![
        format!("--gpu-architecture={}", arch.compute()),
        "-default-device".to_owned(),
        "--std=c++17".to_owned(),
        "-lineinfo".to_owned(),
    ]
}

/// One source file compiled to PTX.
#[derive(Debug, Clone)]
pub struct CompiledModule {
    /// The source file, e.g. `gemm.cu`.
    pub file: &'static str,
    /// The virtual architecture it was compiled for, e.g. `compute_80`.
    pub arch: String,
    /// The kernels it defines (each checked to be an `.entry` of the PTX).
    pub kernels: Vec<Kernel>,
    /// The PTX text.
    pub ptx: String,
    /// NVRTC's log (warnings), empty when it had nothing to say.
    pub log: String,
}

impl CompiledModule {
    /// The file name to write the PTX to: `gemm.compute_80.ptx`.
    pub fn ptx_file_name(&self) -> String {
        let stem = self.file.strip_suffix(".cu").unwrap_or(self.file);
        format!("{stem}.{}.ptx", self.arch)
    }
}

/// Compiling the library failed.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The architecture given is not one NVRTC takes.
    #[error(
        "`{given}` is not a CUDA architecture; give sm_XY, compute_XY or XY with XY at \
         least 50, e.g. sm_80 (A100) or sm_90 (H100)"
    )]
    BadArch {
        /// What was given.
        given: String,
    },
    /// NVRTC is not installed.
    #[error(
        "libnvrtc.so.12 not found: install CUDA 12 or `pip install \
         nvidia-cuda-nvrtc-cu12==12.4.127` and put its lib dir \
         (.../site-packages/nvidia/cuda_nvrtc/lib) on LD_LIBRARY_PATH"
    )]
    NvrtcNotFound,
    /// A source file holds a NUL byte (NVRTC takes C strings).
    #[error("{file} contains a NUL byte at offset {offset}; remove it")]
    Nul {
        /// The source file.
        file: &'static str,
        /// Where the NUL is.
        offset: usize,
    },
    /// NVRTC refused to create the program.
    #[error("NVRTC could not create the program for {file}: {code}")]
    Create {
        /// The source file.
        file: &'static str,
        /// NVRTC's result code.
        code: String,
    },
    /// The source did not compile.
    #[error("NVRTC failed to compile {file} for {arch}: {code}{hint}; compile log:\n{log}")]
    Compile {
        /// The source file.
        file: &'static str,
        /// The target architecture.
        arch: String,
        /// NVRTC's result code.
        code: String,
        /// What to try, when the failure is a known one.
        hint: &'static str,
        /// NVRTC's compile log.
        log: String,
    },
    /// Reading the compiled PTX back failed.
    #[error("NVRTC compiled {file} for {arch} but {what} failed: {code}")]
    Output {
        /// The source file.
        file: &'static str,
        /// The target architecture.
        arch: String,
        /// Which read failed.
        what: &'static str,
        /// NVRTC's result code.
        code: String,
    },
    /// The PTX lacks a kernel the kernel table lists.
    #[error(
        "the PTX of {file} for {arch} has no entry `{kernel}`: the source and the kernel \
         table in daemon/cuda/src/kernels.rs disagree; fix whichever is wrong"
    )]
    MissingEntry {
        /// The source file.
        file: &'static str,
        /// The target architecture.
        arch: String,
        /// The kernel missing.
        kernel: &'static str,
    },
}

/// Whether `ptx` declares the kernel entry `name`.
pub fn ptx_has_entry(ptx: &str, name: &str) -> bool {
    ptx.lines().any(|l| {
        let l = l.trim_start();
        let rest = l
            .strip_prefix(".visible .entry ")
            .or_else(|| l.strip_prefix(".entry "));
        rest.and_then(|r| r.strip_prefix(name))
            .is_some_and(|r| r.starts_with('(') || r.trim().is_empty())
    })
}

#[cfg(feature = "cuda")]
pub use nvrtc::{compile_ptx, compile_source, nvrtc_version};

#[cfg(feature = "cuda")]
mod nvrtc {
    use std::ffi::{CString, c_char, c_int};

    use cudarc::nvrtc::sys;

    use super::{Arch, CompiledModule, HEADER, HEADER_NAME, KernelError, SOURCES, Source};

    /// Loads libnvrtc (once per process), or says how to install it.
    fn ensure_loaded() -> Result<(), KernelError> {
        // SAFETY: `is_culib_present` dlopens the candidate names of libnvrtc
        // and closes them again; loading NVIDIA's library runs no initialiser
        // that depends on our state. It touches nothing else.
        if unsafe { sys::is_culib_present() } {
            Ok(())
        } else {
            Err(KernelError::NvrtcNotFound)
        }
    }

    /// The NVRTC version `(major, minor)` the process loaded.
    pub fn nvrtc_version() -> Result<(i32, i32), KernelError> {
        ensure_loaded()?;
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: libnvrtc is present (checked above), so the symbol loads;
        // both pointers are to live locals.
        let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(KernelError::Output {
                file: "(none)",
                arch: String::new(),
                what: "nvrtcVersion",
                code: format!("{r:?}"),
            });
        }
        Ok((major, minor))
    }

    /// An NVRTC program, destroyed on drop.
    struct Program(sys::nvrtcProgram);

    impl Drop for Program {
        fn drop(&mut self) {
            // SAFETY: self.0 came from a successful nvrtcCreateProgram and is
            // destroyed only here, once.
            let _ = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        }
    }

    impl Program {
        /// Reads a buffer NVRTC sizes first: the log or the PTX.
        fn read(
            &self,
            size: unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult,
            get: unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult,
        ) -> Result<String, sys::nvrtcResult> {
            let mut n = 0usize;
            // SAFETY: self.0 is a live program; `n` is a live local.
            let r = unsafe { size(self.0, &mut n) };
            if r != sys::nvrtcResult::NVRTC_SUCCESS {
                return Err(r);
            }
            let mut buf = vec![0u8; n.max(1)];
            // SAFETY: `buf` holds the `n` bytes (NUL included) NVRTC said it
            // will write.
            let r = unsafe { get(self.0, buf.as_mut_ptr().cast::<c_char>()) };
            if r != sys::nvrtcResult::NVRTC_SUCCESS {
                return Err(r);
            }
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            buf.truncate(end);
            Ok(String::from_utf8_lossy(&buf).into_owned())
        }

        fn log(&self) -> String {
            self.read(sys::nvrtcGetProgramLogSize, sys::nvrtcGetProgramLog)
                .unwrap_or_else(|r| format!("(the log could not be read: {r:?})"))
        }
    }

    fn cstring(file: &'static str, text: &str) -> Result<CString, KernelError> {
        CString::new(text).map_err(|e| KernelError::Nul {
            file,
            offset: e.nul_position(),
        })
    }

    /// Compiles one source (with [`HEADER`] as its named header) to PTX for
    /// `arch` and checks that the kernels the table assigns to its file are
    /// entries of the PTX. The compile log names the file on failure.
    pub fn compile_source(src: &Source, arch: Arch) -> Result<CompiledModule, KernelError> {
        ensure_loaded()?;
        let text = cstring(src.file, src.text)?;
        let name = cstring(src.file, src.file)?;
        let header = cstring(HEADER_NAME, HEADER)?;
        let header_name = cstring(HEADER_NAME, HEADER_NAME)?;
        let headers = [header.as_ptr()];
        let include_names = [header_name.as_ptr()];
        let options = super::nvrtc_options(arch)
            .into_iter()
            .map(|o| cstring(src.file, &o))
            .collect::<Result<Vec<_>, _>>()?;
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();

        let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: libnvrtc is loaded (compile_ptx checked); every pointer is
        // to a NUL-terminated CString declared above, so each outlives the
        // program, which is dropped first (declared after them); the header
        // and name arrays both have the 1 entry we declare.
        let r = unsafe {
            sys::nvrtcCreateProgram(
                &mut raw,
                text.as_ptr(),
                name.as_ptr(),
                1,
                headers.as_ptr(),
                include_names.as_ptr(),
            )
        };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(KernelError::Create {
                file: src.file,
                code: format!("{r:?}"),
            });
        }
        let prog = Program(raw);
        let n_options = c_int::try_from(option_ptrs.len()).unwrap_or(c_int::MAX);
        // SAFETY: prog.0 is a live program; option_ptrs holds n_options
        // pointers to live NUL-terminated strings.
        let r = unsafe { sys::nvrtcCompileProgram(prog.0, n_options, option_ptrs.as_ptr()) };
        let log = prog.log();
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            let hint = if r == sys::nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE {
                " (libnvrtc-builtins.so of the same CUDA version must be on LD_LIBRARY_PATH \
                 beside libnvrtc.so.12)"
            } else {
                ""
            };
            return Err(KernelError::Compile {
                file: src.file,
                arch: arch.compute(),
                code: format!("{r:?}"),
                hint,
                log,
            });
        }
        let ptx = prog
            .read(sys::nvrtcGetPTXSize, sys::nvrtcGetPTX)
            .map_err(|r| KernelError::Output {
                file: src.file,
                arch: arch.compute(),
                what: "nvrtcGetPTX",
                code: format!("{r:?}"),
            })?;
        let kernels: Vec<_> = src.kernels().collect();
        for k in &kernels {
            if !super::ptx_has_entry(&ptx, k.name()) {
                return Err(KernelError::MissingEntry {
                    file: src.file,
                    arch: arch.compute(),
                    kernel: k.name(),
                });
            }
        }
        Ok(CompiledModule {
            file: src.file,
            arch: arch.compute(),
            kernels,
            ptx,
            log: log.trim().to_owned(),
        })
    }

    /// Compiles every source of the library to PTX for `arch` (`sm_80`,
    /// `compute_90`, ...), one NVRTC program per file, and checks that each
    /// file's kernels are entries of its PTX.
    pub fn compile_ptx(arch: &str) -> Result<Vec<CompiledModule>, KernelError> {
        let arch = Arch::parse(arch)?;
        ensure_loaded()?;
        SOURCES.iter().map(|s| compile_source(s, arch)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn source(file: &str) -> &'static str {
        SOURCES
            .iter()
            .find(|s| s.file == file)
            .map(|s| s.text)
            .unwrap_or_else(|| panic!("no source {file}"))
    }

    /// The value of `#define NAME value` in `text`.
    fn define(text: &str, name: &str) -> Option<String> {
        text.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some("#define") && it.next() == Some(name))
                .then(|| it.next().map(str::to_owned))
                .flatten()
        })
    }

    #[test]
    fn every_kernel_is_defined_in_its_file_with_the_abi_prologue() {
        for k in Kernel::ALL {
            let text = source(k.file());
            let sig = format!(
                "\n{}(const SluiceCtl* __restrict__ ctl, unsigned int kidx",
                k.name()
            );
            let at = text
                .find(&sig)
                .unwrap_or_else(|| panic!("{} lacks `{}`", k.file(), sig.trim()));
            let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let decl = &text[line_start..at];
            assert!(
                decl.starts_with("extern \"C\" __global__ void __launch_bounds__("),
                "{}: {decl:?}",
                k.name()
            );
            let bound = decl
                .trim_start_matches("extern \"C\" __global__ void __launch_bounds__(")
                .trim_end_matches(')');
            let bound = bound
                .parse::<u32>()
                .ok()
                .or_else(|| define(text, bound).and_then(|v| v.parse().ok()))
                .unwrap_or_else(|| panic!("{}: launch bound {bound}", k.name()));
            assert_eq!(bound, k.max_block_threads(), "{}", k.name());
            let body = &text[at..];
            let open = body.find('{').expect("body");
            assert!(
                body[open..]
                    .trim_start_matches('{')
                    .trim_start()
                    .starts_with("SLUICE_PROLOGUE(ctl, kidx);"),
                "{} does not run the prologue first",
                k.name()
            );
        }
    }

    #[test]
    fn every_entry_of_the_sources_is_in_the_table() {
        for s in SOURCES {
            for (i, _) in s.text.match_indices("extern \"C\" __global__") {
                let rest = &s.text[i..];
                let line_end = rest.find('\n').expect("newline");
                let next = &rest[line_end + 1..];
                let name = &next[..next.find('(').expect("(")];
                let k = Kernel::from_name(name)
                    .unwrap_or_else(|| panic!("{}: {name} is not in the table", s.file));
                assert_eq!(k.file(), s.file);
            }
            assert!(s.kernels().count() >= 1, "{} defines no kernel", s.file);
        }
        let files: Vec<_> = SOURCES.iter().map(|s| s.file).collect();
        for k in Kernel::ALL {
            assert!(files.contains(&k.file()), "{}", k.name());
        }
    }

    #[test]
    fn sources_need_no_system_header() {
        for (file, text) in SOURCES
            .iter()
            .map(|s| (s.file, s.text))
            .chain([(HEADER_NAME, HEADER)])
        {
            for l in text
                .lines()
                .filter(|l| l.trim_start().starts_with("#include"))
            {
                assert_eq!(l.trim(), "#include \"sluice.cuh\"", "{file}");
            }
        }
        for s in SOURCES {
            assert!(s.text.contains("#include \"sluice.cuh\""), "{}", s.file);
        }
    }

    #[test]
    fn header_matches_the_rust_constants() {
        assert_eq!(
            define(HEADER, "SLUICE_POLL_EVERY").as_deref(),
            Some(POLL_EVERY.to_string().as_str())
        );
        // The ABI's struct, field for field (16 bytes, `started` at 8).
        let flat: String = HEADER.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(
            "struct SluiceCtl { volatile unsigned int preempt; unsigned int _pad; \
             unsigned long long started; };"
        ));
        assert_eq!(
            define(source("attention.cu"), "ATT_Q").as_deref(),
            Some(ATTENTION_ROWS_PER_BLOCK.to_string().as_str())
        );
        assert_eq!(
            define(source("attention.cu"), "ATT_DMAX").as_deref(),
            Some(ATTENTION_MAX_HEAD_DIM.to_string().as_str())
        );
        for (file, m) in [("gemm.cu", "GEMM_BM"), ("conv2d.cu", "CONV_BN")] {
            assert_eq!(
                define(source(file), m).as_deref(),
                Some(GEMM_TILE.to_string().as_str())
            );
        }
    }

    /// Replays the GEMM/conv thread → output mapping of gemm.cu and
    /// conv2d.cu (row ty + 16i, column tx + 16j of the block's 64×64 tile,
    /// bounds-checked) and counts how often each output is written.
    fn tile_coverage(cfg: &LaunchConfig, m: usize, n: usize) -> Vec<u8> {
        let mut hits = vec![0u8; m * n];
        for by in 0..cfg.grid[1] as usize {
            for bx in 0..cfg.grid[0] as usize {
                for tid in 0..cfg.block[0] as usize {
                    let (tx, ty) = (tid % 16, tid / 16);
                    for i in 0..4 {
                        for j in 0..4 {
                            let row = by * 64 + ty + 16 * i;
                            let col = bx * 64 + tx + 16 * j;
                            if row < m && col < n {
                                hits[row * n + col] += 1;
                            }
                        }
                    }
                }
            }
        }
        hits
    }

    #[test]
    fn gemm_tiles_cover_every_output_once() {
        for (m, n) in [(1, 1), (64, 64), (65, 63), (3, 200), (129, 1), (128, 257)] {
            let cfg = gemm(m, n, 5).unwrap();
            assert_eq!(cfg.block, [256, 1, 1]);
            assert_eq!(cfg.shared_mem_bytes, 0);
            let hits = tile_coverage(&cfg, m, n);
            assert!(hits.iter().all(|&h| h == 1), "M={m} N={n}");
        }
    }

    #[test]
    fn conv2d_grid_follows_the_implicit_gemm() {
        // ResNet's stem: 3×224×224, 64 filters of 7×7, stride 2, pad 3.
        let s = Conv2dShape {
            cin: 3,
            h: 224,
            w: 224,
            cout: 64,
            kh: 7,
            kw: 7,
            stride: 2,
            pad: 3,
        };
        assert_eq!(s.out_hw().ok(), Some((112, 112)));
        let cfg = conv2d(&s).unwrap();
        assert_eq!(cfg.grid, [(112 * 112usize).div_ceil(64) as u32, 1, 1]);
        let small = Conv2dShape {
            cin: 2,
            h: 7,
            w: 5,
            cout: 70,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 1,
        };
        let cfg = conv2d(&small).unwrap();
        let (oh, ow) = small.out_hw().unwrap();
        assert!(tile_coverage(&cfg, 70, oh * ow).iter().all(|&h| h == 1));
    }

    #[test]
    fn conv2d_refuses_a_reduction_too_long_for_an_int() {
        let s = Conv2dShape {
            cin: 1 << 30,
            h: 1 << 30,
            w: 1 << 30,
            cout: 1,
            kh: 1 << 30,
            kw: 1 << 30,
            stride: 1,
            pad: 0,
        };
        let e = conv2d(&s).unwrap_err();
        assert!(e.to_string().contains("Cin*KH*KW"), "{e}");
    }

    #[test]
    fn conv2d_refuses_a_kernel_larger_than_the_padded_input() {
        let s = Conv2dShape {
            cin: 1,
            h: 2,
            w: 8,
            cout: 1,
            kh: 5,
            kw: 1,
            stride: 1,
            pad: 1,
        };
        let e = conv2d(&s).unwrap_err();
        assert!(
            matches!(
                e,
                LaunchError::EmptyOutput {
                    len: 2,
                    window: 5,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("sluice_conv2d"));
    }

    #[test]
    fn pool2d_has_one_thread_per_output() {
        let s = Pool2dShape {
            c: 64,
            h: 112,
            w: 112,
            k: 3,
            stride: 2,
            pad: 1,
        };
        assert_eq!(s.out_hw().ok(), Some((56, 56)));
        let cfg = pool2d(&s).unwrap();
        let total = 64 * 56 * 56u64;
        let threads = cfg.blocks() * u64::from(cfg.block[0]);
        assert!(threads >= total && threads - total < 256);
        // A window that could hold only padding is refused.
        let e = pool2d(&Pool2dShape { pad: 3, ..s }).unwrap_err();
        assert!(e.to_string().contains("pad = 3"), "{e}");
        assert!(e.to_string().contains("0..=2"), "{e}");
    }

    #[test]
    fn eltwise_grid_stride_covers_every_element_once() {
        for n in [1usize, 255, 256, 257, 1000, 65_535 * 256 + 1] {
            let cfg = eltwise(n).unwrap();
            assert!(cfg.grid[0] <= ELTWISE_MAX_BLOCKS);
            // Replay the kernel's loop: thread g handles g, g + step, ...
            let step = cfg.grid[0] as usize * cfg.block[0] as usize;
            let mut hits = vec![0u8; n];
            for g in 0..step {
                for i in (g..n).step_by(step) {
                    hits[i] += 1;
                }
            }
            assert!(hits.iter().all(|&h| h == 1), "n={n}");
            // No block is launched with nothing to do.
            assert!((cfg.grid[0] as usize - 1) * 256 < n, "n={n}");
        }
        assert_eq!(
            eltwise(65_535 * 256 + 1).unwrap().grid[0],
            ELTWISE_MAX_BLOCKS
        );
        assert!(eltwise(0).is_err());
        assert!(eltwise(i32::MAX as usize + 1).is_err());
    }

    #[test]
    fn row_kernels_take_one_block_per_row() {
        assert_eq!(softmax(12, 512).unwrap().grid, [12, 1, 1]);
        assert_eq!(layernorm(128, 768).unwrap().grid, [128, 1, 1]);
        assert_eq!(global_avgpool(2048, 49).unwrap().grid, [2048, 1, 1]);
        assert!(softmax(0, 5).is_err());
        assert!(layernorm(5, 0).is_err());
    }

    #[test]
    fn attention_grid_is_row_blocks_by_heads() {
        let cfg = attention(128, 12, 64).unwrap();
        assert_eq!(cfg.grid, [2, 12, 1]);
        assert_eq!(cfg.block, [64, 1, 1]);
        assert_eq!(attention(65, 1, 128).unwrap().grid, [2, 1, 1]);
        let e = attention(8, 2, 129).unwrap_err();
        assert_eq!(
            e,
            LaunchError::HeadTooLarge {
                kernel: "sluice_attention",
                d: 129,
                max: 128
            }
        );
        assert!(attention(8, 65_536, 64).is_err());
    }

    #[test]
    fn grid_limits_are_enforced() {
        // ceil(M/64) must fit gridDim.y.
        assert!(gemm(65_535 * 64, 1, 1).is_ok());
        let e = gemm(65_535 * 64 + 1, 1, 1).unwrap_err();
        assert!(e.to_string().contains("grid.y"), "{e}");
        assert!(synthetic(0).is_err());
        assert_eq!(synthetic(7).unwrap().grid, [7, 1, 1]);
        assert_eq!(synthetic(7).unwrap().block, [128, 1, 1]);
    }

    #[test]
    fn arch_parsing() {
        for s in ["sm_80", "compute_80", "80", " sm_80 "] {
            let a = Arch::parse(s).unwrap();
            assert_eq!(a.compute(), "compute_80");
            assert_eq!(a.sm(), "sm_80");
        }
        assert_eq!(Arch::parse("sm_90").unwrap().compute(), "compute_90");
        for s in ["", "sm_", "sm_8", "sm_35", "sm_90a", "gfx906", "1000"] {
            let e = Arch::parse(s).unwrap_err();
            assert!(e.to_string().contains("sm_80"), "{s}: {e}");
        }
        assert_eq!(
            nvrtc_options(Arch::parse("sm_90").unwrap()),
            [
                "--gpu-architecture=compute_90",
                "-default-device",
                "--std=c++17",
                "-lineinfo"
            ]
        );
    }

    #[test]
    fn ptx_entry_detection() {
        let ptx = ".version 8.4\n.target sm_80\n\n\t// .globl\tsluice_gemm\n\
                   .visible .entry sluice_gemm(\n\t.param .u64 x\n)\n";
        assert!(ptx_has_entry(ptx, "sluice_gemm"));
        assert!(!ptx_has_entry(ptx, "sluice_gem"));
        assert!(!ptx_has_entry(ptx, "sluice_conv2d"));
        let m = CompiledModule {
            file: "gemm.cu",
            arch: "compute_80".into(),
            kernels: vec![Kernel::Gemm],
            ptx: ptx.into(),
            log: String::new(),
        };
        assert_eq!(m.ptx_file_name(), "gemm.compute_80.ptx");
    }

    proptest! {
        #[test]
        fn gemm_grid_covers_any_shape_exactly_once(m in 1usize..300, n in 1usize..300) {
            let cfg = gemm(m, n, 1).unwrap();
            prop_assert!(tile_coverage(&cfg, m, n).iter().all(|&h| h == 1));
        }

        #[test]
        fn window_out_matches_the_formula(
            len in 1usize..500, k in 1usize..12, stride in 1usize..5, pad in 0usize..6
        ) {
            match window_out(len, k, stride, pad) {
                Some(o) => {
                    prop_assert!(len + 2 * pad >= k);
                    // The last window starts inside the padded input.
                    prop_assert!((o - 1) * stride + k <= len + 2 * pad);
                    prop_assert!(o * stride + k > len + 2 * pad);
                }
                None => prop_assert!(len + 2 * pad < k),
            }
        }
    }

    /// Compiles the library when libnvrtc can be loaded (as
    /// scripts/cuda/check-kernels.sh arranges); says so and checks nothing
    /// more where it cannot.
    #[cfg(feature = "cuda")]
    #[test]
    fn compile_ptx_builds_every_kernel_where_nvrtc_is_present() {
        // SAFETY: only dlopens libnvrtc's candidate names (see ensure_loaded).
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("skipped: libnvrtc.so.12 is not on the library path");
            assert!(matches!(
                compile_ptx("sm_80"),
                Err(KernelError::NvrtcNotFound)
            ));
            return;
        }
        let modules = compile_ptx("sm_80").unwrap();
        assert_eq!(modules.len(), SOURCES.len());
        let n: usize = modules.iter().map(|m| m.kernels.len()).sum();
        assert_eq!(n, Kernel::ALL.len());
        for m in &modules {
            assert!(m.ptx.contains(".target sm_80"), "{}", m.file);
        }
        // A broken source fails with its file name and NVRTC's log.
        let broken = Source {
            file: "broken.cu",
            text: "#include \"sluice.cuh\"\nextern \"C\" __global__ void f() { undeclared_x = 1; }\n",
        };
        let e = compile_source(&broken, Arch::parse("sm_90").unwrap()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, KernelError::Compile { .. }), "{msg}");
        assert!(
            msg.contains("broken.cu") && msg.contains("compute_90"),
            "{msg}"
        );
        assert!(msg.contains("undeclared_x"), "{msg}");
        // A source whose PTX lacks a table kernel is caught.
        let empty = Source {
            file: "gemm.cu",
            text: "#include \"sluice.cuh\"\n",
        };
        let e = compile_source(&empty, Arch::parse("sm_80").unwrap()).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::MissingEntry {
                    kernel: "sluice_gemm",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn compile_ptx_rejects_a_bad_arch_before_loading_nvrtc() {
        let e = compile_ptx("sm_7").unwrap_err();
        assert!(matches!(e, KernelError::BadArch { .. }), "{e}");
    }
}
