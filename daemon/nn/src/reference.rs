//! CPU reference operators.
//!
//! Plain f32 implementations of every operator of the sluice CUDA kernel
//! library, with exactly the semantics of its ABI table (`sluice_gemm`,
//! `sluice_conv2d`, `sluice_pool2d`, `sluice_global_avgpool`,
//! `sluice_eltwise`, `sluice_softmax`, `sluice_layernorm`,
//! `sluice_attention`): they are the ground truth the GPU kernels' results
//! are checked against, and what [`super::builders::run_cpu`] executes.
//!
//! Layouts: every tensor is contiguous, row-major, batch 1; images are
//! `[C, H, W]` (NCHW without N). Sums are accumulated in f64, so these are
//! at least as accurate as any f32 GPU kernel; compare with a tolerance.
//!
//! Every operator writes every element of its output and never reads it, so
//! running one twice over a half-written output gives the same result (the
//! kernels' idempotence, which the builders' tests check on whole models).
//!
//! Each operator takes a shape struct (`GemmShape`, `Conv2dShape`, …) whose
//! `check` method validates tensor lengths against the shape; the builders
//! call the same `check` when they validate a plan, so a plan that passes
//! validation never fails here with a [`ShapeError`].

mod general;
pub use general::*;

/// Largest head dimension `sluice_attention` supports (one query row per
/// thread, kept in registers).
pub const ATTENTION_MAX_HEAD_DIM: usize = 128;

/// `sqrt(2 / pi)`, for the tanh approximation of GELU.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// Activation applied by `sluice_gemm` and `sluice_conv2d` after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Identity (`act = 0`).
    None,
    /// `max(x, 0)` (`act = 1`).
    Relu,
    /// GELU, tanh approximation (`act = 2`), see [`gelu_tanh`].
    Gelu,
}

impl Act {
    /// The `act` argument the kernels take.
    pub const fn code(self) -> i32 {
        match self {
            Act::None => 0,
            Act::Relu => 1,
            Act::Gelu => 2,
        }
    }

    /// Applies the activation to one value.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Act::None => x,
            Act::Relu => relu(x),
            Act::Gelu => gelu_tanh(x),
        }
    }
}

/// `max(x, 0)`.
pub fn relu(x: f32) -> f32 {
    x.max(0.0)
}

/// GELU, tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// A tensor's length does not match its shape, a dimension is 0, or a
/// parameter is out of range. Every variant names the operator and the
/// offending shape or value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A tensor has the wrong number of elements.
    #[error(
        "{op}: tensor `{tensor}` has {got} elements, but shape {shape} needs {expected}; \
         pass a tensor of that shape (or fix the shape arguments)"
    )]
    Len {
        /// Operator name, e.g. `"gemm"`.
        op: &'static str,
        /// Tensor (kernel argument) name, e.g. `"A"`.
        tensor: &'static str,
        /// The shape the tensor should have, e.g. `"[M=2, K=3]"`.
        shape: String,
        /// Elements that shape needs.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// A dimension is 0 (the kernels' grids would be empty).
    #[error("{op}: dimension {dim} is 0 in shape {shape}; every dimension must be at least 1")]
    ZeroDim {
        /// Operator name.
        op: &'static str,
        /// The zero dimension, e.g. `"K"`.
        dim: &'static str,
        /// The whole shape.
        shape: String,
    },
    /// A parameter breaks a rule of the operator.
    #[error("{op}: {param} is {value} in shape {shape}; {rule}")]
    BadParam {
        /// Operator name.
        op: &'static str,
        /// The parameter, e.g. `"stride"`.
        param: &'static str,
        /// Its value.
        value: usize,
        /// The whole shape.
        shape: String,
        /// The rule and the fix.
        rule: &'static str,
    },
    /// An optional operand is missing, or given where the operation takes none.
    #[error("{op}: tensor `{tensor}` {problem}")]
    Operand {
        /// Operator name.
        op: &'static str,
        /// The operand.
        tensor: &'static str,
        /// What is wrong and the fix.
        problem: &'static str,
    },
    /// The element count of a shape overflows `usize`.
    #[error("{op}: shape {shape} has more elements than fit in usize; use a smaller shape")]
    Overflow {
        /// Operator name.
        op: &'static str,
        /// The shape.
        shape: String,
    },
}

/// Product of `dims`, or [`ShapeError::Overflow`].
fn product(
    op: &'static str,
    shape: &dyn Fn() -> String,
    dims: &[usize],
) -> Result<usize, ShapeError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| ShapeError::Overflow { op, shape: shape() })
}

/// [`ShapeError::ZeroDim`] for the first zero dimension of `dims`.
fn nonzero(
    op: &'static str,
    shape: &dyn Fn() -> String,
    dims: &[(&'static str, usize)],
) -> Result<(), ShapeError> {
    match dims.iter().find(|(_, v)| *v == 0) {
        Some(&(dim, _)) => Err(ShapeError::ZeroDim {
            op,
            dim,
            shape: shape(),
        }),
        None => Ok(()),
    }
}

/// [`ShapeError::Len`] unless `got == expected`.
fn expect_len(
    op: &'static str,
    tensor: &'static str,
    shape: String,
    expected: usize,
    got: usize,
) -> Result<(), ShapeError> {
    if got == expected {
        Ok(())
    } else {
        Err(ShapeError::Len {
            op,
            tensor,
            shape,
            expected,
            got,
        })
    }
}

/// Output size of a strided window: `(size + 2·pad − window) / stride + 1`.
/// `None` when the window is larger than the padded input.
fn window_out(size: usize, window: usize, stride: usize, pad: usize) -> Option<usize> {
    let padded = size.checked_add(pad.checked_mul(2)?)?;
    let span = padded.checked_sub(window)?;
    Some(span / stride + 1)
}

// ---- sluice_gemm ----

/// Shape of `sluice_gemm`: `C[M,N] = act(A[M,K]·B[K,N] + bias[N])`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
}

impl GemmShape {
    const OP: &'static str = "gemm";

    fn desc(&self) -> String {
        format!("[M={}, N={}, K={}]", self.m, self.n, self.k)
    }

    /// Checks the tensor lengths: A `M·K`, B `K·N`, bias (if any) `N`, C `M·N`.
    pub fn check(
        &self,
        a: usize,
        b: usize,
        bias: Option<usize>,
        c: usize,
    ) -> Result<(), ShapeError> {
        let (op, d) = (Self::OP, || self.desc());
        nonzero(op, &d, &[("M", self.m), ("N", self.n), ("K", self.k)])?;
        let (m, n, k) = (self.m, self.n, self.k);
        expect_len(
            op,
            "A",
            format!("[M={m}, K={k}]"),
            product(op, &d, &[m, k])?,
            a,
        )?;
        expect_len(
            op,
            "B",
            format!("[K={k}, N={n}]"),
            product(op, &d, &[k, n])?,
            b,
        )?;
        if let Some(bias) = bias {
            expect_len(op, "bias", format!("[N={n}]"), n, bias)?;
        }
        expect_len(
            op,
            "C",
            format!("[M={m}, N={n}]"),
            product(op, &d, &[m, n])?,
            c,
        )
    }
}

/// `C = act(A·B + bias)`, the semantics of `sluice_gemm`.
pub fn gemm(
    s: &GemmShape,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    c: &mut [f32],
    act: Act,
) -> Result<(), ShapeError> {
    s.check(a.len(), b.len(), bias.map(<[f32]>::len), c.len())?;
    let (n, k) = (s.n, s.k);
    let mut acc = vec![0f64; n];
    for (a_row, c_row) in a.chunks_exact(k).zip(c.chunks_exact_mut(n)) {
        acc.fill(0.0);
        for (&av, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
            let av = f64::from(av);
            for (s, &bv) in acc.iter_mut().zip(b_row) {
                *s += av * f64::from(bv);
            }
        }
        for (j, (out, &s)) in c_row.iter_mut().zip(&acc).enumerate() {
            let bias = bias.map_or(0.0, |bias| bias[j]);
            *out = act.apply(s as f32 + bias);
        }
    }
    Ok(())
}

// ---- sluice_conv2d ----

/// Shape of `sluice_conv2d`: `x[Cin,H,W]`, `w[Cout,Cin,KH,KW]`,
/// `bias[Cout]`, `y[Cout,OH,OW]` with `OH = (H + 2·pad − KH) / stride + 1`
/// (likewise OW), zero padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dShape {
    /// Input channels.
    pub cin: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub cout: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride (both directions).
    pub stride: usize,
    /// Zero padding on every side.
    pub pad: usize,
}

impl Conv2dShape {
    const OP: &'static str = "conv2d";

    fn desc(&self) -> String {
        format!(
            "[Cin={}, H={}, W={}, Cout={}, KH={}, KW={}, stride={}, pad={}]",
            self.cin, self.h, self.w, self.cout, self.kh, self.kw, self.stride, self.pad
        )
    }

    /// `(OH, OW)`, or an error when a dimension is 0, the stride is 0 or the
    /// kernel is larger than the padded input.
    pub fn out_hw(&self) -> Result<(usize, usize), ShapeError> {
        let (op, d) = (Self::OP, || self.desc());
        nonzero(
            op,
            &d,
            &[
                ("Cin", self.cin),
                ("H", self.h),
                ("W", self.w),
                ("Cout", self.cout),
                ("KH", self.kh),
                ("KW", self.kw),
            ],
        )?;
        if self.stride == 0 {
            return Err(ShapeError::BadParam {
                op,
                param: "stride",
                value: 0,
                shape: d(),
                rule: "the stride must be at least 1",
            });
        }
        let bad = |param, value| ShapeError::BadParam {
            op,
            param,
            value,
            shape: d(),
            rule: "the kernel must fit in the padded input (KH <= H + 2*pad, KW <= W + 2*pad); \
                   pad more or use a smaller kernel",
        };
        let oh =
            window_out(self.h, self.kh, self.stride, self.pad).ok_or_else(|| bad("KH", self.kh))?;
        let ow =
            window_out(self.w, self.kw, self.stride, self.pad).ok_or_else(|| bad("KW", self.kw))?;
        Ok((oh, ow))
    }

    /// Checks the tensor lengths: x `Cin·H·W`, w `Cout·Cin·KH·KW`, bias (if
    /// any) `Cout`, y `Cout·OH·OW`.
    pub fn check(
        &self,
        x: usize,
        w: usize,
        bias: Option<usize>,
        y: usize,
    ) -> Result<(), ShapeError> {
        let (oh, ow) = self.out_hw()?;
        let (op, d) = (Self::OP, || self.desc());
        let s = self;
        expect_len(
            op,
            "x",
            format!("[Cin={}, H={}, W={}]", s.cin, s.h, s.w),
            product(op, &d, &[s.cin, s.h, s.w])?,
            x,
        )?;
        expect_len(
            op,
            "w",
            format!("[Cout={}, Cin={}, KH={}, KW={}]", s.cout, s.cin, s.kh, s.kw),
            product(op, &d, &[s.cout, s.cin, s.kh, s.kw])?,
            w,
        )?;
        if let Some(bias) = bias {
            expect_len(op, "bias", format!("[Cout={}]", s.cout), s.cout, bias)?;
        }
        expect_len(
            op,
            "y",
            format!("[Cout={}, OH={oh}, OW={ow}]", s.cout),
            product(op, &d, &[s.cout, oh, ow])?,
            y,
        )
    }

    /// The implicit-GEMM view the kernel uses: `M = Cout`, `N = OH·OW`,
    /// `K = Cin·KH·KW`.
    pub fn implicit_gemm(&self) -> Result<GemmShape, ShapeError> {
        let (oh, ow) = self.out_hw()?;
        let d = || self.desc();
        Ok(GemmShape {
            m: self.cout,
            n: product(Self::OP, &d, &[oh, ow])?,
            k: product(Self::OP, &d, &[self.cin, self.kh, self.kw])?,
        })
    }
}

/// 2-D convolution (cross-correlation, as in every DNN framework) with zero
/// padding, bias and activation: the semantics of `sluice_conv2d`.
pub fn conv2d(
    s: &Conv2dShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    act: Act,
) -> Result<(), ShapeError> {
    s.check(x.len(), w.len(), bias.map(<[f32]>::len), y.len())?;
    let (oh, ow) = s.out_hw()?;
    let plane = s.h * s.w;
    let taps = s.kh * s.kw;
    let mut acc = vec![0f64; oh * ow];
    for (co, y_plane) in y.chunks_exact_mut(oh * ow).enumerate() {
        acc.fill(0.0);
        for ci in 0..s.cin {
            let x_plane = &x[ci * plane..(ci + 1) * plane];
            let w_taps = &w[(co * s.cin + ci) * taps..][..taps];
            for ky in 0..s.kh {
                for kx in 0..s.kw {
                    let wv = f64::from(w_taps[ky * s.kw + kx]);
                    for oy in 0..oh {
                        // Input row oy·stride + ky − pad, skipped in the padding.
                        let Some(iy) = (oy * s.stride + ky).checked_sub(s.pad) else {
                            continue;
                        };
                        if iy >= s.h {
                            continue;
                        }
                        let x_row = &x_plane[iy * s.w..(iy + 1) * s.w];
                        let acc_row = &mut acc[oy * ow..(oy + 1) * ow];
                        for (ox, a) in acc_row.iter_mut().enumerate() {
                            let Some(ix) = (ox * s.stride + kx).checked_sub(s.pad) else {
                                continue;
                            };
                            if let Some(&xv) = x_row.get(ix) {
                                *a += wv * f64::from(xv);
                            }
                        }
                    }
                }
            }
        }
        let b = bias.map_or(0.0, |bias| bias[co]);
        for (out, &a) in y_plane.iter_mut().zip(&acc) {
            *out = act.apply(a as f32 + b);
        }
    }
    Ok(())
}

// ---- sluice_pool2d ----

/// Pooling mode of `sluice_pool2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// Maximum over the window (`mode = 0`); padding never wins.
    Max,
    /// Mean over the window's in-bounds elements (`mode = 1`): the count
    /// excludes padding.
    Avg,
}

impl PoolMode {
    /// The `mode` argument the kernel takes.
    pub const fn code(self) -> i32 {
        match self {
            PoolMode::Max => 0,
            PoolMode::Avg => 1,
        }
    }
}

/// Shape of `sluice_pool2d`: `x[C,H,W]` to `y[C,OH,OW]`, square `k×k`
/// window, `OH = (H + 2·pad − k) / stride + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2dShape {
    /// Channels.
    pub c: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Window side.
    pub k: usize,
    /// Stride.
    pub stride: usize,
    /// Padding on every side; less than `k`, so every window holds at
    /// least one input element.
    pub pad: usize,
}

impl Pool2dShape {
    const OP: &'static str = "pool2d";

    fn desc(&self) -> String {
        format!(
            "[C={}, H={}, W={}, k={}, stride={}, pad={}]",
            self.c, self.h, self.w, self.k, self.stride, self.pad
        )
    }

    /// `(OH, OW)`, or an error for a zero dimension or stride, `pad >= k`, or
    /// a window larger than the padded input.
    pub fn out_hw(&self) -> Result<(usize, usize), ShapeError> {
        let (op, d) = (Self::OP, || self.desc());
        nonzero(
            op,
            &d,
            &[
                ("C", self.c),
                ("H", self.h),
                ("W", self.w),
                ("k", self.k),
                ("stride", self.stride),
            ],
        )?;
        if self.pad >= self.k {
            return Err(ShapeError::BadParam {
                op,
                param: "pad",
                value: self.pad,
                shape: d(),
                rule: "pad must be less than k, or a window could hold only padding",
            });
        }
        let bad = |param, value| ShapeError::BadParam {
            op,
            param,
            value,
            shape: d(),
            rule: "the window must fit in the padded input (k <= H + 2*pad and k <= W + 2*pad)",
        };
        let oh =
            window_out(self.h, self.k, self.stride, self.pad).ok_or_else(|| bad("H", self.h))?;
        let ow =
            window_out(self.w, self.k, self.stride, self.pad).ok_or_else(|| bad("W", self.w))?;
        Ok((oh, ow))
    }

    /// Checks the tensor lengths: x `C·H·W`, y `C·OH·OW`.
    pub fn check(&self, x: usize, y: usize) -> Result<(), ShapeError> {
        let (oh, ow) = self.out_hw()?;
        let (op, d) = (Self::OP, || self.desc());
        let s = self;
        expect_len(
            op,
            "x",
            format!("[C={}, H={}, W={}]", s.c, s.h, s.w),
            product(op, &d, &[s.c, s.h, s.w])?,
            x,
        )?;
        expect_len(
            op,
            "y",
            format!("[C={}, OH={oh}, OW={ow}]", s.c),
            product(op, &d, &[s.c, oh, ow])?,
            y,
        )
    }
}

/// Max or average pooling: the semantics of `sluice_pool2d`.
pub fn pool2d(s: &Pool2dShape, x: &[f32], y: &mut [f32], mode: PoolMode) -> Result<(), ShapeError> {
    s.check(x.len(), y.len())?;
    let (oh, ow) = s.out_hw()?;
    // In-bounds input rows (or columns) of output index `o`.
    let span = |o: usize, size: usize| {
        let lo = (o * s.stride).saturating_sub(s.pad);
        let hi = (o * s.stride + s.k - s.pad).min(size);
        lo..hi
    };
    for (x_plane, y_plane) in x.chunks_exact(s.h * s.w).zip(y.chunks_exact_mut(oh * ow)) {
        for oy in 0..oh {
            for ox in 0..ow {
                let (mut max, mut sum, mut count) = (f32::NEG_INFINITY, 0f64, 0u32);
                for iy in span(oy, s.h) {
                    for ix in span(ox, s.w) {
                        let v = x_plane[iy * s.w + ix];
                        max = max.max(v);
                        sum += f64::from(v);
                        count += 1;
                    }
                }
                y_plane[oy * ow + ox] = match mode {
                    PoolMode::Max => max,
                    PoolMode::Avg => (sum / f64::from(count)) as f32,
                };
            }
        }
    }
    Ok(())
}

// ---- sluice_global_avgpool ----

/// Shape of `sluice_global_avgpool`: `x[C, HW]` to `y[C]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalPoolShape {
    /// Channels.
    pub c: usize,
    /// Elements per channel (H·W).
    pub hw: usize,
}

impl GlobalPoolShape {
    const OP: &'static str = "global_avgpool";

    /// Checks the tensor lengths: x `C·HW`, y `C`.
    pub fn check(&self, x: usize, y: usize) -> Result<(), ShapeError> {
        let (op, d) = (Self::OP, || format!("[C={}, HW={}]", self.c, self.hw));
        nonzero(op, &d, &[("C", self.c), ("HW", self.hw)])?;
        expect_len(op, "x", d(), product(op, &d, &[self.c, self.hw])?, x)?;
        expect_len(op, "y", format!("[C={}]", self.c), self.c, y)
    }
}

/// `y[c] = mean(x[c, :])`: the semantics of `sluice_global_avgpool`.
pub fn global_avgpool(s: &GlobalPoolShape, x: &[f32], y: &mut [f32]) -> Result<(), ShapeError> {
    s.check(x.len(), y.len())?;
    for (row, out) in x.chunks_exact(s.hw).zip(y.iter_mut()) {
        let sum: f64 = row.iter().map(|&v| f64::from(v)).sum();
        *out = (sum / s.hw as f64) as f32;
    }
    Ok(())
}

// ---- sluice_eltwise ----

/// Operation of `sluice_eltwise`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EltwiseOp {
    /// `y = a + b` (`op = 0`).
    Add,
    /// `y = relu(a + b)` (`op = 1`), the ResNet residual join.
    AddRelu,
    /// `y = relu(a)` (`op = 2`).
    Relu,
    /// `y = gelu(a)`, tanh approximation (`op = 3`).
    Gelu,
}

impl EltwiseOp {
    /// The `op` argument the kernel takes.
    pub const fn code(self) -> i32 {
        match self {
            EltwiseOp::Add => 0,
            EltwiseOp::AddRelu => 1,
            EltwiseOp::Relu => 2,
            EltwiseOp::Gelu => 3,
        }
    }

    /// Whether the operation reads the second operand `b`.
    pub const fn takes_b(self) -> bool {
        matches!(self, EltwiseOp::Add | EltwiseOp::AddRelu)
    }

    /// Checks the tensor lengths for `n` elements: a, b (exactly when
    /// [`Self::takes_b`]) and y all `n`.
    pub fn check(self, n: usize, a: usize, b: Option<usize>, y: usize) -> Result<(), ShapeError> {
        let op = "eltwise";
        let d = || format!("[n={n}]");
        nonzero(op, &d, &[("n", n)])?;
        expect_len(op, "a", d(), n, a)?;
        match (self.takes_b(), b) {
            (true, Some(b)) => expect_len(op, "b", d(), n, b)?,
            (true, None) => {
                return Err(ShapeError::Operand {
                    op,
                    tensor: "b",
                    problem: "is missing; ops 0 (add) and 1 (add+relu) need a second operand",
                });
            }
            (false, Some(_)) => {
                return Err(ShapeError::Operand {
                    op,
                    tensor: "b",
                    problem: "is given, but ops 2 (relu) and 3 (gelu) take one operand; pass null",
                });
            }
            (false, None) => {}
        }
        expect_len(op, "y", d(), n, y)
    }
}

/// Element-wise operation over `n` elements: the semantics of
/// `sluice_eltwise`.
pub fn eltwise(
    op: EltwiseOp,
    n: usize,
    a: &[f32],
    b: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), ShapeError> {
    op.check(n, a.len(), b.map(<[f32]>::len), y.len())?;
    match (op, b) {
        (EltwiseOp::Add, Some(b)) => {
            for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
                *y = a + b;
            }
        }
        (EltwiseOp::AddRelu, Some(b)) => {
            for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
                *y = relu(a + b);
            }
        }
        (EltwiseOp::Relu, _) => {
            for (y, &a) in y.iter_mut().zip(a) {
                *y = relu(a);
            }
        }
        (EltwiseOp::Gelu, _) => {
            for (y, &a) in y.iter_mut().zip(a) {
                *y = gelu_tanh(a);
            }
        }
        // `check` rules out a missing `b` for the binary ops.
        (EltwiseOp::Add | EltwiseOp::AddRelu, None) => unreachable!("checked above"),
    }
    Ok(())
}

// ---- sluice_softmax and sluice_layernorm ----

/// Shape of the row-wise operators `sluice_softmax` and `sluice_layernorm`:
/// `rows` rows of `cols` contiguous elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsShape {
    /// Number of rows.
    pub rows: usize,
    /// Elements per row.
    pub cols: usize,
}

impl RowsShape {
    fn desc(&self) -> String {
        format!("[rows={}, cols={}]", self.rows, self.cols)
    }

    /// Checks `x` and `y` (`rows·cols` each) for operator `op`.
    fn check_xy(&self, op: &'static str, x: usize, y: usize) -> Result<(), ShapeError> {
        let d = || self.desc();
        nonzero(op, &d, &[("rows", self.rows), ("cols", self.cols)])?;
        let len = product(op, &d, &[self.rows, self.cols])?;
        expect_len(op, "x", d(), len, x)?;
        expect_len(op, "y", d(), len, y)
    }

    /// Checks softmax's tensors: x and y `rows·cols`.
    pub fn check_softmax(&self, x: usize, y: usize) -> Result<(), ShapeError> {
        self.check_xy("softmax", x, y)
    }

    /// Checks layernorm's tensors: x and y `rows·cols`, gamma and beta `cols`.
    pub fn check_layernorm(
        &self,
        x: usize,
        gamma: usize,
        beta: usize,
        y: usize,
    ) -> Result<(), ShapeError> {
        let op = "layernorm";
        self.check_xy(op, x, y)?;
        expect_len(
            op,
            "gamma",
            format!("[cols={}]", self.cols),
            self.cols,
            gamma,
        )?;
        expect_len(op, "beta", format!("[cols={}]", self.cols), self.cols, beta)
    }
}

/// Row-wise softmax, max-subtracted: the semantics of `sluice_softmax`.
pub fn softmax(s: &RowsShape, x: &[f32], y: &mut [f32]) -> Result<(), ShapeError> {
    s.check_softmax(x.len(), y.len())?;
    for (xr, yr) in x.chunks_exact(s.cols).zip(y.chunks_exact_mut(s.cols)) {
        let max = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f64;
        for (o, &v) in yr.iter_mut().zip(xr) {
            *o = (v - max).exp();
            sum += f64::from(*o);
        }
        for o in yr.iter_mut() {
            *o = (f64::from(*o) / sum) as f32;
        }
    }
    Ok(())
}

/// Row-wise layer normalisation, `y = (x − mean) / sqrt(var + eps) · gamma
/// + beta` with the biased variance (divided by `cols`): the semantics of
/// `sluice_layernorm`.
pub fn layernorm(
    s: &RowsShape,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    y: &mut [f32],
    eps: f32,
) -> Result<(), ShapeError> {
    s.check_layernorm(x.len(), gamma.len(), beta.len(), y.len())?;
    let cols = s.cols as f64;
    for (xr, yr) in x.chunks_exact(s.cols).zip(y.chunks_exact_mut(s.cols)) {
        let mean = xr.iter().map(|&v| f64::from(v)).sum::<f64>() / cols;
        let var = xr
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / cols;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        for (((o, &v), &g), &b) in yr.iter_mut().zip(xr).zip(gamma).zip(beta) {
            *o = ((f64::from(v) - mean) * inv) as f32 * g + b;
        }
    }
    Ok(())
}

// ---- sluice_attention ----

/// Shape of `sluice_attention`: `qkv[T, 3·H·D]` (per token: q of every
/// head, then k of every head, then v of every head, head `h` at offset
/// `h·D` in each) to `out[T, H·D]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// Tokens.
    pub t: usize,
    /// Heads.
    pub h: usize,
    /// Head dimension, at most [`ATTENTION_MAX_HEAD_DIM`].
    pub d: usize,
    /// Whether token `i` attends only to tokens `0..=i`.
    pub causal: bool,
}

impl AttentionShape {
    const OP: &'static str = "attention";

    fn desc(&self) -> String {
        format!(
            "[T={}, H={}, D={}, causal={}]",
            self.t, self.h, self.d, self.causal
        )
    }

    /// Checks the tensor lengths: qkv `T·3·H·D`, out `T·H·D`.
    pub fn check(&self, qkv: usize, out: usize) -> Result<(), ShapeError> {
        let (op, d) = (Self::OP, || self.desc());
        nonzero(op, &d, &[("T", self.t), ("H", self.h), ("D", self.d)])?;
        if self.d > ATTENTION_MAX_HEAD_DIM {
            return Err(ShapeError::BadParam {
                op,
                param: "D",
                value: self.d,
                shape: d(),
                rule: "the head dimension must be at most 128 (sluice_attention keeps a query \
                       row per thread); use more heads",
            });
        }
        let (t, h, dd) = (self.t, self.h, self.d);
        expect_len(
            op,
            "qkv",
            format!("[T={t}, 3*H*D={}]", 3 * h * dd),
            product(op, &d, &[t, 3, h, dd])?,
            qkv,
        )?;
        expect_len(
            op,
            "out",
            format!("[T={t}, H*D={}]", h * dd),
            product(op, &d, &[t, h, dd])?,
            out,
        )
    }
}

/// Multi-head scaled dot-product attention, `softmax(q·kᵀ/√D)·v` per head,
/// optionally causal: the semantics of `sluice_attention`.
pub fn attention(s: &AttentionShape, qkv: &[f32], out: &mut [f32]) -> Result<(), ShapeError> {
    s.check(qkv.len(), out.len())?;
    let (t, hd, d) = (s.t, s.h * s.d, s.d);
    let row = 3 * hd;
    let scale = 1.0 / (d as f64).sqrt();
    let mut scores = vec![0f64; t];
    let mut acc = vec![0f64; d];
    for head in 0..s.h {
        let (q_off, k_off, v_off) = (head * d, hd + head * d, 2 * hd + head * d);
        for i in 0..t {
            let q = &qkv[i * row + q_off..][..d];
            let keys = if s.causal { i + 1 } else { t };
            let mut max = f64::NEG_INFINITY;
            for (j, sc) in scores[..keys].iter_mut().enumerate() {
                let k = &qkv[j * row + k_off..][..d];
                let dot: f64 = q
                    .iter()
                    .zip(k)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                *sc = dot * scale;
                max = max.max(*sc);
            }
            let mut sum = 0.0;
            for sc in &mut scores[..keys] {
                *sc = (*sc - max).exp();
                sum += *sc;
            }
            acc.fill(0.0);
            for (j, &p) in scores[..keys].iter().enumerate() {
                let v = &qkv[j * row + v_off..][..d];
                for (a, &vv) in acc.iter_mut().zip(v) {
                    *a += p * f64::from(vv);
                }
            }
            for (o, &a) in out[i * hd + head * d..][..d].iter_mut().zip(&acc) {
                *o = (a / sum) as f32;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Deterministic values in [-1, 1) (SplitMix64).
    fn rand_vec(seed: u64, n: usize) -> Vec<f32> {
        use sluice_rng::{Draws, SeedableRng};
        let mut rng = sluice_rng::SplitMix64::seed_from_u64(seed);
        (0..n).map(|_| rng.signed_f32()).collect()
    }

    fn assert_close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len());
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "[{i}]: got {g}, want {w}"
            );
        }
    }

    #[test]
    fn activations_match_hand_values() {
        assert_eq!(relu(-2.0), 0.0);
        assert_eq!(relu(3.5), 3.5);
        assert_eq!(gelu_tanh(0.0), 0.0);
        // 0.5·(1 + tanh(0.7978846·1.044715)) = 0.841192; odd part: x − gelu(x).
        assert!(
            (gelu_tanh(1.0) - 0.841_192).abs() < 1e-6,
            "{}",
            gelu_tanh(1.0)
        );
        assert!(
            (gelu_tanh(-1.0) + 0.158_808).abs() < 1e-6,
            "{}",
            gelu_tanh(-1.0)
        );
        assert!((gelu_tanh(10.0) - 10.0).abs() < 1e-5);
        assert_eq!([Act::None, Act::Relu, Act::Gelu].map(Act::code), [0, 1, 2]);
        assert_eq!(PoolMode::Avg.code(), 1);
    }

    #[test]
    fn gemm_hand_case() {
        // [[1,2],[3,4]] · [[5,6,7],[8,9,10]] = [[21,24,27],[47,54,61]].
        let s = GemmShape { m: 2, n: 3, k: 2 };
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        let mut c = [0.0; 6];
        gemm(&s, &a, &b, None, &mut c, Act::None).unwrap();
        assert_eq!(c, [21.0, 24.0, 27.0, 47.0, 54.0, 61.0]);
        let bias = [1.0, -30.0, 0.0];
        gemm(&s, &a, &b, Some(&bias), &mut c, Act::None).unwrap();
        assert_eq!(c, [22.0, -6.0, 27.0, 48.0, 24.0, 61.0]);
        gemm(&s, &a, &b, Some(&bias), &mut c, Act::Relu).unwrap();
        assert_eq!(c, [22.0, 0.0, 27.0, 48.0, 24.0, 61.0]);
        // 1x1x1 with GELU.
        let mut c1 = [0.0];
        let one = GemmShape { m: 1, n: 1, k: 1 };
        gemm(&one, &[2.0], &[0.5], None, &mut c1, Act::Gelu).unwrap();
        assert!((c1[0] - 0.841_192).abs() < 1e-6);
    }

    #[test]
    fn shape_errors_name_the_tensor_and_shape() {
        let s = GemmShape { m: 2, n: 3, k: 4 };
        let e = gemm(&s, &[0.0; 8], &[0.0; 11], None, &mut [0.0; 6], Act::None).unwrap_err();
        assert_eq!(
            e,
            ShapeError::Len {
                op: "gemm",
                tensor: "B",
                shape: "[K=4, N=3]".into(),
                expected: 12,
                got: 11
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("`B`") && msg.contains("[K=4, N=3]") && msg.contains("11"),
            "{msg}"
        );
        let e = GemmShape { m: 0, n: 1, k: 1 }
            .check(0, 1, None, 0)
            .unwrap_err();
        assert!(matches!(e, ShapeError::ZeroDim { dim: "M", .. }), "{e:?}");
        let e = gemm(
            &s,
            &[0.0; 8],
            &[0.0; 12],
            Some(&[0.0; 2]),
            &mut [0.0; 6],
            Act::None,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                ShapeError::Len {
                    tensor: "bias",
                    expected: 3,
                    ..
                }
            ),
            "{e:?}"
        );

        let conv = Conv2dShape {
            cin: 1,
            h: 2,
            w: 2,
            cout: 1,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 0,
        };
        let e = conv.out_hw().unwrap_err();
        assert!(
            matches!(e, ShapeError::BadParam { param: "KH", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("KH=3"), "{e}");
        let e = Conv2dShape {
            stride: 0,
            pad: 1,
            ..conv
        }
        .out_hw()
        .unwrap_err();
        assert!(
            matches!(
                e,
                ShapeError::BadParam {
                    param: "stride",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = Conv2dShape { pad: 1, ..conv }
            .check(4, 9, None, 5)
            .unwrap_err();
        assert!(e.to_string().contains("[Cout=1, OH=2, OW=2]"), "{e}");

        let pool = Pool2dShape {
            c: 1,
            h: 4,
            w: 4,
            k: 2,
            stride: 2,
            pad: 2,
        };
        let e = pool.out_hw().unwrap_err();
        assert!(
            matches!(
                e,
                ShapeError::BadParam {
                    param: "pad",
                    value: 2,
                    ..
                }
            ),
            "{e:?}"
        );

        let e = EltwiseOp::Add.check(4, 4, None, 4).unwrap_err();
        assert!(
            matches!(e, ShapeError::Operand { tensor: "b", .. }),
            "{e:?}"
        );
        let e = EltwiseOp::Gelu.check(4, 4, Some(4), 4).unwrap_err();
        assert!(
            matches!(e, ShapeError::Operand { tensor: "b", .. }),
            "{e:?}"
        );

        let e = AttentionShape {
            t: 1,
            h: 1,
            d: 129,
            causal: false,
        }
        .check(387, 129)
        .unwrap_err();
        assert!(
            matches!(
                e,
                ShapeError::BadParam {
                    param: "D",
                    value: 129,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = RowsShape { rows: 2, cols: 3 }
            .check_layernorm(6, 3, 2, 6)
            .unwrap_err();
        assert!(matches!(e, ShapeError::Len { tensor: "beta", .. }), "{e:?}");
        let e = GemmShape {
            m: usize::MAX,
            n: 2,
            k: 2,
        }
        .check(0, 4, None, 0)
        .unwrap_err();
        assert!(matches!(e, ShapeError::Overflow { .. }), "{e:?}");
    }

    #[test]
    fn conv2d_hand_cases() {
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        // 2x2 ones kernel over 1..9 (3x3): window sums.
        let s = Conv2dShape {
            cin: 1,
            h: 3,
            w: 3,
            cout: 1,
            kh: 2,
            kw: 2,
            stride: 1,
            pad: 0,
        };
        let mut y = [0.0; 4];
        conv2d(&s, &x, &[1.0; 4], None, &mut y, Act::None).unwrap();
        assert_eq!(y, [12.0, 16.0, 24.0, 28.0]);
        // 3x3 ones kernel, pad 1, stride 2: the four corner windows.
        let s = Conv2dShape {
            kh: 3,
            kw: 3,
            stride: 2,
            pad: 1,
            ..s
        };
        conv2d(&s, &x, &[1.0; 9], None, &mut y, Act::None).unwrap();
        assert_eq!(y, [12.0, 16.0, 24.0, 28.0]);
        // Two input channels (second = -x), two output channels, 1x1 kernel,
        // bias and ReLU: co0 = x − 2x + 1, co1 = 3x − 0 − 10.
        let mut x2 = x.clone();
        x2.extend(x.iter().map(|v| -v));
        let s = Conv2dShape {
            cin: 2,
            cout: 2,
            kh: 1,
            kw: 1,
            stride: 1,
            pad: 0,
            ..s
        };
        let mut y = [0.0; 18];
        conv2d(
            &s,
            &x2,
            &[1.0, 2.0, 3.0, 0.0],
            Some(&[1.0, -10.0]),
            &mut y,
            Act::Relu,
        )
        .unwrap();
        let want: Vec<f32> = x
            .iter()
            .map(|v| relu(1.0 - v))
            .chain(x.iter().map(|v| relu(3.0 * v - 10.0)))
            .collect();
        assert_eq!(y.to_vec(), want);
    }

    #[test]
    fn pool2d_hand_cases() {
        let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
        let s = Pool2dShape {
            c: 1,
            h: 4,
            w: 4,
            k: 2,
            stride: 2,
            pad: 0,
        };
        let mut y = [0.0; 4];
        pool2d(&s, &x, &mut y, PoolMode::Max).unwrap();
        assert_eq!(y, [6.0, 8.0, 14.0, 16.0]);
        pool2d(&s, &x, &mut y, PoolMode::Avg).unwrap();
        assert_eq!(y, [3.5, 5.5, 11.5, 13.5]);
        // 3x3 window, pad 1, stride 2 over 1..9: each window holds 4 real
        // elements; the average divides by 4, not 9.
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let s = Pool2dShape {
            c: 1,
            h: 3,
            w: 3,
            k: 3,
            stride: 2,
            pad: 1,
        };
        pool2d(&s, &x, &mut y, PoolMode::Avg).unwrap();
        assert_eq!(y, [3.0, 4.0, 6.0, 7.0]);
        // Max with padding: padding never wins, even over negative values.
        let neg: Vec<f32> = x.iter().map(|v| -v).collect();
        pool2d(&s, &neg, &mut y, PoolMode::Max).unwrap();
        assert_eq!(y, [-1.0, -2.0, -4.0, -5.0]);
        // Two channels pool independently.
        let s = Pool2dShape {
            c: 2,
            h: 2,
            w: 2,
            k: 2,
            stride: 2,
            pad: 0,
        };
        let mut y = [0.0; 2];
        pool2d(
            &s,
            &[1.0, 5.0, 2.0, 3.0, -1.0, -2.0, -3.0, -4.0],
            &mut y,
            PoolMode::Max,
        )
        .unwrap();
        assert_eq!(y, [5.0, -1.0]);
    }

    #[test]
    fn global_avgpool_and_eltwise_hand_cases() {
        let mut y = [0.0; 2];
        global_avgpool(
            &GlobalPoolShape { c: 2, hw: 3 },
            &[1.0, 2.0, 6.0, -3.0, 0.0, 0.0],
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [3.0, -1.0]);

        let a = [1.0, -2.0, 0.5];
        let b = [1.0, 1.0, -1.0];
        let mut y = [9.0; 3];
        eltwise(EltwiseOp::Add, 3, &a, Some(&b), &mut y).unwrap();
        assert_eq!(y, [2.0, -1.0, -0.5]);
        eltwise(EltwiseOp::AddRelu, 3, &a, Some(&b), &mut y).unwrap();
        assert_eq!(y, [2.0, 0.0, 0.0]);
        eltwise(EltwiseOp::Relu, 3, &a, None, &mut y).unwrap();
        assert_eq!(y, [1.0, 0.0, 0.5]);
        eltwise(EltwiseOp::Gelu, 3, &a, None, &mut y).unwrap();
        assert_eq!(y, a.map(gelu_tanh));
        let codes = [
            EltwiseOp::Add,
            EltwiseOp::AddRelu,
            EltwiseOp::Relu,
            EltwiseOp::Gelu,
        ]
        .map(EltwiseOp::code);
        assert_eq!(codes, [0, 1, 2, 3]);
    }

    #[test]
    fn softmax_hand_cases() {
        let s = RowsShape { rows: 3, cols: 2 };
        let x = [0.0, 3f32.ln(), 5.0, 5.0, 1000.0, 1000.0];
        let mut y = [0.0; 6];
        softmax(&s, &x, &mut y).unwrap();
        // Without max subtraction the last row would be inf/inf = NaN.
        assert_close(&y, &[0.25, 0.75, 0.5, 0.5, 0.5, 0.5], 1e-6);
    }

    #[test]
    fn layernorm_hand_case() {
        // [1,2,3]: mean 2, biased variance 2/3, so (x − 2)/sqrt(2/3) =
        // [-1.2247449, 0, 1.2247449]; then gamma [1,2,1], beta [0,0,1].
        let s = RowsShape { rows: 1, cols: 3 };
        let mut y = [0.0; 3];
        layernorm(
            &s,
            &[1.0, 2.0, 3.0],
            &[1.0, 2.0, 1.0],
            &[0.0, 0.0, 1.0],
            &mut y,
            0.0,
        )
        .unwrap();
        assert_close(&y, &[-1.224_744_9, 0.0, 2.224_744_9], 1e-6);
        // eps enters under the square root: var 0 gives (x − mean)/sqrt(eps) = 0.
        layernorm(&s, &[4.0; 3], &[1.0; 3], &[0.5; 3], &mut y, 1e-5).unwrap();
        assert_eq!(y, [0.5; 3]);
    }

    #[test]
    fn attention_hand_case() {
        // T=2, H=1, D=1: per token [q, k, v].
        // q0 = 0 (equal scores), k0 = 0, v0 = 2; q1 = 1, k1 = ln 3, v1 = 6.
        let qkv = [0.0, 0.0, 2.0, 1.0, 3f32.ln(), 6.0];
        let mut out = [0.0; 2];
        let s = AttentionShape {
            t: 2,
            h: 1,
            d: 1,
            causal: false,
        };
        attention(&s, &qkv, &mut out).unwrap();
        // Row 0: (2 + 6)/2; row 1: scores [0, ln 3] → [0.25, 0.75].
        assert_close(&out, &[4.0, 0.25 * 2.0 + 0.75 * 6.0], 1e-6);
        attention(&AttentionShape { causal: true, ..s }, &qkv, &mut out).unwrap();
        assert_close(&out, &[2.0, 5.0], 1e-6);
        // Two heads, D=1, scaled by 1/sqrt(D)=1: head 1 sees its own k/v.
        // Token layout: q0 q1 | k0 k1 | v0 v1.
        let qkv = [
            0.0,
            1.0,
            0.0,
            0.0,
            1.0,
            10.0,
            0.0,
            0.0,
            0.0,
            3f32.ln(),
            3.0,
            20.0,
        ];
        let mut out = [0.0; 4];
        attention(
            &AttentionShape {
                t: 2,
                h: 2,
                d: 1,
                causal: false,
            },
            &qkv,
            &mut out,
        )
        .unwrap();
        // Head 0: q=0 both rows → mean of v = 2. Head 1: token 0 has q=1,
        // scores [0, ln 3] → 0.25·10 + 0.75·20 = 17.5; token 1 has q=0 → 15.
        assert_close(&out, &[2.0, 17.5, 2.0, 15.0], 1e-6);
    }

    /// im2col + gemm: an independent route to the convolution.
    fn conv_by_im2col(s: &Conv2dShape, x: &[f32], w: &[f32], bias: &[f32], act: Act) -> Vec<f32> {
        let (oh, ow) = s.out_hw().unwrap();
        let g = s.implicit_gemm().unwrap();
        // cols[K, N]: row (ci, ky, kx), column (oy, ox).
        let mut cols = vec![0.0f32; g.k * g.n];
        for ci in 0..s.cin {
            for ky in 0..s.kh {
                for kx in 0..s.kw {
                    let r = (ci * s.kh + ky) * s.kw + kx;
                    for oy in 0..oh {
                        for ox in 0..ow {
                            let iy = (oy * s.stride + ky) as isize - s.pad as isize;
                            let ix = (ox * s.stride + kx) as isize - s.pad as isize;
                            let inside =
                                (0..s.h as isize).contains(&iy) && (0..s.w as isize).contains(&ix);
                            if inside {
                                cols[r * g.n + oy * ow + ox] =
                                    x[(ci * s.h + iy as usize) * s.w + ix as usize];
                            }
                        }
                    }
                }
            }
        }
        // y[Cout, N] = w[Cout, K] · cols[K, N] + bias per row: fold the
        // bias in as an extra K row of ones.
        let mut w_ext = Vec::with_capacity(g.m * (g.k + 1));
        for (co, row) in w.chunks_exact(g.k).enumerate() {
            w_ext.extend_from_slice(row);
            w_ext.push(bias[co]);
        }
        cols.extend(std::iter::repeat_n(1.0, g.n));
        let mut y = vec![0.0; g.m * g.n];
        let ext = GemmShape { k: g.k + 1, ..g };
        gemm(&ext, &w_ext, &cols, None, &mut y, act).unwrap();
        y
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn conv2d_equals_im2col_gemm(
            cin in 1usize..4, cout in 1usize..4, h in 1usize..9, w in 1usize..9,
            kh in 1usize..4, kw in 1usize..4, stride in 1usize..4, pad in 0usize..3,
            relu_act in any::<bool>(), seed in any::<u64>(),
        ) {
            let s = Conv2dShape { cin, h, w, cout, kh, kw, stride, pad };
            prop_assume!(s.out_hw().is_ok());
            let (oh, ow) = s.out_hw().unwrap();
            let x = rand_vec(seed, cin * h * w);
            let wt = rand_vec(seed ^ 1, cout * cin * kh * kw);
            let bias = rand_vec(seed ^ 2, cout);
            let act = if relu_act { Act::Relu } else { Act::None };
            let mut y = vec![f32::NAN; cout * oh * ow];
            conv2d(&s, &x, &wt, Some(&bias), &mut y, act).unwrap();
            let want = conv_by_im2col(&s, &x, &wt, &bias, act);
            for (i, (&g, &e)) in y.iter().zip(&want).enumerate() {
                prop_assert!((g - e).abs() <= 1e-5 * (1.0 + e.abs()), "[{}] {} vs {}", i, g, e);
            }
        }

        #[test]
        fn softmax_rows_sum_to_one(rows in 1usize..5, cols in 1usize..40, seed in any::<u64>(), mag in 0.1f32..80.0) {
            let x: Vec<f32> = rand_vec(seed, rows * cols).iter().map(|v| v * mag).collect();
            let mut y = vec![f32::NAN; rows * cols];
            softmax(&RowsShape { rows, cols }, &x, &mut y).unwrap();
            for (xr, yr) in x.chunks(cols).zip(y.chunks(cols)) {
                let sum: f32 = yr.iter().sum();
                prop_assert!((sum - 1.0).abs() < 1e-5, "sum {}", sum);
                prop_assert!(yr.iter().all(|&p| (0.0..=1.0).contains(&p)));
                // The largest input gets the largest probability.
                let arg = |r: &[f32]| r.iter().enumerate().fold(0, |b, (i, &v)| if v > r[b] { i } else { b });
                prop_assert_eq!(yr[arg(xr)], yr[arg(yr)]);
            }
        }

        #[test]
        fn layernorm_output_has_zero_mean_unit_variance(
            rows in 1usize..4, cols in 2usize..64, seed in any::<u64>(), shift in -50f32..50.0, mag in 0.5f32..20.0,
        ) {
            let x: Vec<f32> = rand_vec(seed, rows * cols).iter().map(|v| v * mag + shift).collect();
            // Skip the (improbable) rows with no spread, where eps dominates.
            let mut y = vec![f32::NAN; rows * cols];
            let s = RowsShape { rows, cols };
            layernorm(&s, &x, &vec![1.0; cols], &vec![0.0; cols], &mut y, 1e-5).unwrap();
            for (xr, yr) in x.chunks(cols).zip(y.chunks(cols)) {
                let spread = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max)
                    - xr.iter().copied().fold(f32::INFINITY, f32::min);
                prop_assume!(spread > 0.1);
                let n = cols as f64;
                let mean = yr.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
                let var = yr.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
                prop_assert!(mean.abs() < 1e-4, "mean {}", mean);
                prop_assert!((var - 1.0).abs() < 1e-2, "var {}", var);
            }
        }

        #[test]
        fn attention_with_one_token_returns_v(h in 1usize..4, d in 1usize..17, seed in any::<u64>(), causal in any::<bool>()) {
            let qkv: Vec<f32> = rand_vec(seed, 3 * h * d).iter().map(|v| v * 5.0).collect();
            let mut out = vec![f32::NAN; h * d];
            attention(&AttentionShape { t: 1, h, d, causal }, &qkv, &mut out).unwrap();
            prop_assert_eq!(&out[..], &qkv[2 * h * d..]);
        }

        #[test]
        fn causal_attention_first_row_is_first_v(
            t in 2usize..9, h in 1usize..4, d in 1usize..17, seed in any::<u64>(),
        ) {
            let hd = h * d;
            let mut qkv: Vec<f32> = rand_vec(seed, t * 3 * hd).iter().map(|v| v * 5.0).collect();
            // Later tokens: small q and k (so no token takes all the
            // weight) and v_j = v_0 + j, so any weight on them shows.
            for j in 0..t {
                let row = &mut qkv[j * 3 * hd..(j + 1) * 3 * hd];
                row[..2 * hd].iter_mut().for_each(|v| *v *= 0.04);
            }
            for j in 1..t {
                for e in 0..hd {
                    qkv[j * 3 * hd + 2 * hd + e] = qkv[2 * hd + e] + j as f32;
                }
            }
            let s = AttentionShape { t, h, d, causal: true };
            let mut out = vec![f32::NAN; t * h * d];
            attention(&s, &qkv, &mut out).unwrap();
            prop_assert_eq!(&out[..h * d], &qkv[2 * h * d..3 * h * d]);
            // Non-causal: row 0 also weighs the later tokens' larger v.
            let mut full = vec![f32::NAN; t * h * d];
            attention(&AttentionShape { causal: false, ..s }, &qkv, &mut full).unwrap();
            let gap = full[..h * d].iter().zip(&qkv[2 * h * d..]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            prop_assert!(gap > 0.1, "non-causal row 0 is close to v0 (gap {})", gap);
            // The last causal row sees every token, like the non-causal one.
            let last = (t - 1) * h * d;
            for (a, b) in out[last..].iter().zip(&full[last..]) {
                prop_assert!((a - b).abs() < 1e-5);
            }
        }
    }
}
