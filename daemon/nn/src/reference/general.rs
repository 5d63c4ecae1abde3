//! The general kernels an imported graph lowers to, besides the tiled ones:
//! the semantics of `sluice_elementwise`, `sluice_gather`, `sluice_bmm`,
//! `sluice_embedding`, `sluice_conv2d_ex`, `sluice_pool2d_ex` and
//! `sluice_lrn` (batch `N` ≥ 1, NCHW). Integer tables a kernel reads from
//! device memory (broadcast strides, source indices, token ids) are f32
//! buffers holding whole numbers, exact up to [`MAX_EXACT_INDEX`].

use sluice_graph::{BinOp, Unary};

use super::{ShapeError, expect_len, nonzero};

/// Largest whole number every f32 holds exactly (2^24): the bound on an
/// index, stride or token id the general kernels read from a table.
pub const MAX_EXACT_INDEX: usize = 1 << 24;

/// Axes of the broadcast descriptor of `sluice_elementwise`.
pub const ELEM_RANK: usize = 6;

/// Floats in the broadcast descriptor: the output's dims, then the element
/// strides of `a`, `b` and `c` (0 along a broadcast axis), each
/// [`ELEM_RANK`] long, leading axes padded with dim 1.
pub const ELEM_DESC_LEN: usize = 4 * ELEM_RANK;

/// An operation of `sluice_elementwise`, by its `op` / `act` code.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ElemOp {
    /// A function of `a` (codes 0..=19; 0 is the identity).
    Unary(Option<Unary>),
    /// A broadcasting binary operator on `a`, `b` (codes 32..=38).
    Binary(BinOp),
    /// `c ? a : b`, `c` a 0/1 mask (code 48).
    Where,
}

impl ElemOp {
    /// The code the kernel takes, and the two float parameters it reads
    /// (`p0`, `p1`: LeakyRelu's alpha, HardSigmoid's alpha and beta, Clip's
    /// bounds).
    pub fn code(self) -> (i32, f32, f32) {
        match self {
            ElemOp::Unary(None) => (0, 0.0, 0.0),
            ElemOp::Unary(Some(u)) => match u {
                Unary::Relu => (1, 0.0, 0.0),
                Unary::LeakyRelu(a) => (2, a, 0.0),
                Unary::Sigmoid => (3, 0.0, 0.0),
                Unary::Tanh => (4, 0.0, 0.0),
                Unary::HardSigmoid(a, b) => (5, a, b),
                Unary::HardSwish => (6, 0.0, 0.0),
                Unary::Silu => (7, 0.0, 0.0),
                Unary::Erf => (8, 0.0, 0.0),
                Unary::Gelu => (9, 0.0, 0.0),
                Unary::GeluTanh => (10, 0.0, 0.0),
                Unary::Sqrt => (11, 0.0, 0.0),
                Unary::Neg => (12, 0.0, 0.0),
                Unary::Exp => (13, 0.0, 0.0),
                Unary::Log => (14, 0.0, 0.0),
                Unary::Abs => (15, 0.0, 0.0),
                Unary::Reciprocal => (16, 0.0, 0.0),
                Unary::Floor => (17, 0.0, 0.0),
                Unary::Ceil => (18, 0.0, 0.0),
                Unary::Clip(lo, hi) => (19, lo, hi),
            },
            ElemOp::Binary(b) => (
                match b {
                    BinOp::Add => 32,
                    BinOp::Sub => 33,
                    BinOp::Mul => 34,
                    BinOp::Div => 35,
                    BinOp::Pow => 36,
                    BinOp::Max => 37,
                    BinOp::Min => 38,
                },
                0.0,
                0.0,
            ),
            ElemOp::Where => (48, 0.0, 0.0),
        }
    }

    /// The operation of `code` with parameters `p0`, `p1`; `None` for a
    /// code the kernel does not know.
    pub fn from_code(code: i32, p0: f32, p1: f32) -> Option<ElemOp> {
        Some(match code {
            0 => ElemOp::Unary(None),
            1 => ElemOp::Unary(Some(Unary::Relu)),
            2 => ElemOp::Unary(Some(Unary::LeakyRelu(p0))),
            3 => ElemOp::Unary(Some(Unary::Sigmoid)),
            4 => ElemOp::Unary(Some(Unary::Tanh)),
            5 => ElemOp::Unary(Some(Unary::HardSigmoid(p0, p1))),
            6 => ElemOp::Unary(Some(Unary::HardSwish)),
            7 => ElemOp::Unary(Some(Unary::Silu)),
            8 => ElemOp::Unary(Some(Unary::Erf)),
            9 => ElemOp::Unary(Some(Unary::Gelu)),
            10 => ElemOp::Unary(Some(Unary::GeluTanh)),
            11 => ElemOp::Unary(Some(Unary::Sqrt)),
            12 => ElemOp::Unary(Some(Unary::Neg)),
            13 => ElemOp::Unary(Some(Unary::Exp)),
            14 => ElemOp::Unary(Some(Unary::Log)),
            15 => ElemOp::Unary(Some(Unary::Abs)),
            16 => ElemOp::Unary(Some(Unary::Reciprocal)),
            17 => ElemOp::Unary(Some(Unary::Floor)),
            18 => ElemOp::Unary(Some(Unary::Ceil)),
            19 => ElemOp::Unary(Some(Unary::Clip(p0, p1))),
            32 => ElemOp::Binary(BinOp::Add),
            33 => ElemOp::Binary(BinOp::Sub),
            34 => ElemOp::Binary(BinOp::Mul),
            35 => ElemOp::Binary(BinOp::Div),
            36 => ElemOp::Binary(BinOp::Pow),
            37 => ElemOp::Binary(BinOp::Max),
            38 => ElemOp::Binary(BinOp::Min),
            48 => ElemOp::Where,
            _ => return None,
        })
    }

    /// Operands it reads: 1 (`a`), 2 (`a`, `b`) or 3 (`a`, `b`, `c`).
    pub fn operands(self) -> usize {
        match self {
            ElemOp::Unary(_) => 1,
            ElemOp::Binary(_) => 2,
            ElemOp::Where => 3,
        }
    }
}

/// `sluice_elementwise`: `y[i] = act(op(a[ia], b[ib], c[ic]))` over the
/// output's `n` elements, each operand's element found through the
/// broadcast descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct ElemShape {
    /// Output elements.
    pub n: usize,
    /// The descriptor (see [`ELEM_DESC_LEN`]).
    pub desc: [usize; ELEM_DESC_LEN],
    /// The operation.
    pub op: ElemOp,
    /// A unary activation applied after it (`ElemOp::Unary`; `None` for none).
    pub act: Option<Unary>,
}

impl ElemShape {
    /// The descriptor of an output of shape `out` whose operands have
    /// shapes `ins` (numpy broadcasting; at most [`ELEM_RANK`] axes).
    pub fn broadcast(out: &[usize], ins: &[&[usize]]) -> Option<[usize; ELEM_DESC_LEN]> {
        if out.len() > ELEM_RANK || ins.len() > 3 {
            return None;
        }
        let mut d = [0usize; ELEM_DESC_LEN];
        let pad = ELEM_RANK - out.len();
        for r in 0..ELEM_RANK {
            d[r] = if r < pad { 1 } else { out[r - pad] };
        }
        for (k, s) in ins.iter().enumerate() {
            if s.len() > out.len() {
                return None;
            }
            let off = ELEM_RANK - s.len();
            let mut stride = 1usize;
            for r in (0..ELEM_RANK).rev() {
                if r < off {
                    continue;
                }
                let dim = s[r - off];
                if dim == d[r] && dim != 1 {
                    d[ELEM_RANK * (k + 1) + r] = stride;
                } else if dim != 1 {
                    return None;
                }
                stride *= dim;
            }
        }
        Some(d)
    }

    fn span(&self, k: usize) -> usize {
        (0..ELEM_RANK)
            .map(|r| (self.desc[r].saturating_sub(1)) * self.desc[ELEM_RANK * (k + 1) + r])
            .sum::<usize>()
            + 1
    }

    /// Checks the operands against the descriptor: `y` holds `n`, each
    /// operand at least the elements its strides reach.
    pub fn check(
        &self,
        desc: usize,
        a: usize,
        b: Option<usize>,
        c: Option<usize>,
        y: usize,
    ) -> Result<(), ShapeError> {
        let op = "elementwise";
        let d = || format!("{:?}", &self.desc[..ELEM_RANK]);
        nonzero(op, &d, &[("n", self.n)])?;
        expect_len(op, "desc", d(), ELEM_DESC_LEN, desc)?;
        expect_len(op, "y", d(), self.n, y)?;
        let dims: usize = self.desc[..ELEM_RANK].iter().product();
        expect_len(op, "y (dims)", d(), dims, self.n)?;
        let need = self.op.operands();
        for (k, (name, len)) in [("a", Some(a)), ("b", b), ("c", c)].into_iter().enumerate() {
            match (k < need, len) {
                (true, Some(l)) if l < self.span(k) => {
                    return Err(ShapeError::Len {
                        op,
                        tensor: name,
                        shape: d(),
                        expected: self.span(k),
                        got: l,
                    });
                }
                (true, None) => {
                    return Err(ShapeError::Operand {
                        op,
                        tensor: name,
                        problem: "is missing; the operation reads it",
                    });
                }
                (false, Some(_)) => {
                    return Err(ShapeError::Operand {
                        op,
                        tensor: name,
                        problem: "is given, but the operation does not read it; pass null",
                    });
                }
                _ => {}
            }
        }
        if self.desc.iter().any(|&v| v > MAX_EXACT_INDEX) {
            return Err(ShapeError::BadParam {
                op,
                param: "desc",
                value: *self.desc.iter().max().unwrap_or(&0),
                shape: d(),
                rule: "dims and strides must be at most 2^24 (the descriptor is f32)",
            });
        }
        Ok(())
    }
}

/// The descriptor as the kernel reads it: `desc` floats to whole numbers.
pub fn elem_desc_from(desc: &[f32]) -> [usize; ELEM_DESC_LEN] {
    let mut d = [0; ELEM_DESC_LEN];
    for (o, &v) in d.iter_mut().zip(desc) {
        *o = v as usize;
    }
    d
}

/// `sluice_elementwise` (see [`ElemShape`]).
pub fn elementwise(
    s: &ElemShape,
    a: &[f32],
    b: Option<&[f32]>,
    c: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), ShapeError> {
    s.check(
        ELEM_DESC_LEN,
        a.len(),
        b.map(<[f32]>::len),
        c.map(<[f32]>::len),
        y.len(),
    )?;
    let d = &s.desc;
    let act = |v: f32| s.act.map_or(v, |u| u.apply(v));
    let (b, c) = (b.unwrap_or(&[]), c.unwrap_or(&[]));
    for (i, out) in y.iter_mut().enumerate() {
        let (mut rem, mut ia, mut ib, mut ic) = (i, 0, 0, 0);
        for r in (0..ELEM_RANK).rev() {
            let q = rem % d[r];
            rem /= d[r];
            ia += q * d[ELEM_RANK + r];
            ib += q * d[2 * ELEM_RANK + r];
            ic += q * d[3 * ELEM_RANK + r];
        }
        let v = match s.op {
            ElemOp::Unary(u) => u.map_or(a[ia], |u| u.apply(a[ia])),
            ElemOp::Binary(op) => op.apply_f32(a[ia], b[ib]),
            ElemOp::Where => {
                if c[ic] != 0.0 {
                    a[ia]
                } else {
                    b[ib]
                }
            }
        };
        *out = act(v);
    }
    Ok(())
}

/// Sources of `sluice_gather`.
pub const GATHER_SOURCES: usize = 4;

/// `sluice_gather`: `y[i] = src(idx[i])`, where index `j` of the sources
/// laid end to end (`x0`, then `x1`, ...) picks one element, and a negative
/// index writes `fill`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatherShape {
    /// Output elements.
    pub n: usize,
    /// Elements of each source (0 for an absent one).
    pub lens: [usize; GATHER_SOURCES],
    /// What a negative index writes (Pad's constant).
    pub fill: f32,
}

impl GatherShape {
    /// Checks the lengths.
    pub fn check(
        &self,
        srcs: [Option<usize>; GATHER_SOURCES],
        idx: usize,
        y: usize,
    ) -> Result<(), ShapeError> {
        let op = "gather";
        let d = || format!("[n={}, sources={:?}]", self.n, self.lens);
        nonzero(op, &d, &[("n", self.n)])?;
        expect_len(op, "idx", d(), self.n, idx)?;
        expect_len(op, "y", d(), self.n, y)?;
        const NAMES: [&str; GATHER_SOURCES] = ["x0", "x1", "x2", "x3"];
        for (k, src) in srcs.iter().enumerate() {
            expect_len(op, NAMES[k], d(), self.lens[k], src.unwrap_or(0))?;
        }
        let total: usize = self.lens.iter().sum();
        if total > MAX_EXACT_INDEX {
            return Err(ShapeError::BadParam {
                op,
                param: "source elements",
                value: total,
                shape: d(),
                rule: "the sources may hold at most 2^24 elements (the index table is f32)",
            });
        }
        Ok(())
    }
}

/// `sluice_gather` (see [`GatherShape`]). An index past the sources writes
/// NaN (a lowering bug made visible).
pub fn gather(
    s: &GatherShape,
    srcs: [Option<&[f32]>; GATHER_SOURCES],
    idx: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    s.check(srcs.map(|x| x.map(<[f32]>::len)), idx.len(), y.len())?;
    for (out, &j) in y.iter_mut().zip(idx) {
        *out = if j < 0.0 {
            s.fill
        } else {
            let mut j = j as usize;
            let mut v = f32::NAN;
            for (k, src) in srcs.iter().enumerate() {
                if j < s.lens[k] {
                    v = src.map_or(f32::NAN, |x| x[j]);
                    break;
                }
                j -= s.lens[k];
            }
            v
        };
    }
    Ok(())
}

/// `sluice_interp`: `y[i] = Σ_t w[i·T + t] · x[idx[i·T + t]]` over `T`
/// taps (linear `Resize`: the corners of the interpolation cell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpShape {
    /// Output elements.
    pub n: usize,
    /// Taps per output element.
    pub taps: usize,
    /// Elements of `x`.
    pub src: usize,
}

impl InterpShape {
    /// Checks the lengths.
    pub fn check(&self, x: usize, idx: usize, w: usize, y: usize) -> Result<(), ShapeError> {
        let op = "interp";
        let d = || format!("{self:?}");
        nonzero(
            op,
            &d,
            &[("n", self.n), ("taps", self.taps), ("src", self.src)],
        )?;
        expect_len(op, "x", d(), self.src, x)?;
        expect_len(op, "idx", d(), self.n * self.taps, idx)?;
        expect_len(op, "w", d(), self.n * self.taps, w)?;
        expect_len(op, "y", d(), self.n, y)?;
        if self.src > MAX_EXACT_INDEX {
            return Err(ShapeError::BadParam {
                op,
                param: "src",
                value: self.src,
                shape: d(),
                rule: "the source may hold at most 2^24 elements (the index table is f32)",
            });
        }
        Ok(())
    }
}

/// `sluice_interp` (see [`InterpShape`]): taps of weight 0 are skipped; an
/// index outside `x` writes NaN.
pub fn interp(
    s: &InterpShape,
    x: &[f32],
    idx: &[f32],
    w: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    s.check(x.len(), idx.len(), w.len(), y.len())?;
    for (i, out) in y.iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for t in i * s.taps..(i + 1) * s.taps {
            if w[t] != 0.0 {
                let j = idx[t];
                acc += w[t]
                    * if j >= 0.0 && (j as usize) < s.src {
                        x[j as usize]
                    } else {
                        f32::NAN
                    };
            }
        }
        *out = acc;
    }
    Ok(())
}

/// `sluice_bmm`: `y[t] = a[t]·b[t]` for `batch` products of `M×K` by
/// `K×N`; `a[t]` starts at `t·sa`, `b[t]` at `t·sb` (0: one matrix for
/// every product), `y[t]` at `t·M·N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BmmShape {
    /// Products.
    pub batch: usize,
    /// Rows of each `a` and `y`.
    pub m: usize,
    /// Columns of each `b` and `y`.
    pub n: usize,
    /// The reduced axis.
    pub k: usize,
    /// Elements between consecutive `a` matrices.
    pub sa: usize,
    /// Elements between consecutive `b` matrices.
    pub sb: usize,
}

impl BmmShape {
    /// Checks the lengths.
    pub fn check(&self, a: usize, b: usize, y: usize) -> Result<(), ShapeError> {
        let op = "bmm";
        let d = || format!("{self:?}");
        nonzero(
            op,
            &d,
            &[
                ("batch", self.batch),
                ("M", self.m),
                ("N", self.n),
                ("K", self.k),
            ],
        )?;
        expect_len(
            op,
            "a",
            d(),
            (self.batch - 1) * self.sa + self.m * self.k,
            a,
        )?;
        expect_len(
            op,
            "b",
            d(),
            (self.batch - 1) * self.sb + self.k * self.n,
            b,
        )?;
        expect_len(op, "y", d(), self.batch * self.m * self.n, y)
    }
}

/// `sluice_bmm` (see [`BmmShape`]); sums in f64.
pub fn bmm(s: &BmmShape, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), ShapeError> {
    s.check(a.len(), b.len(), y.len())?;
    for t in 0..s.batch {
        let (a, b) = (&a[t * s.sa..], &b[t * s.sb..]);
        let y = &mut y[t * s.m * s.n..(t + 1) * s.m * s.n];
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = 0.0f64;
                for k in 0..s.k {
                    acc += f64::from(a[i * s.k + k]) * f64::from(b[k * s.n + j]);
                }
                y[i * s.n + j] = acc as f32;
            }
        }
    }
    Ok(())
}

/// `sluice_embedding`: row `ids[t]` of `table[vocab, dim]` for each of the
/// `count` ids (f32 whole numbers; a negative id counts from the end, as
/// ONNX `Gather` does). An id outside `-vocab..vocab` writes NaN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingShape {
    /// Ids.
    pub count: usize,
    /// Row length.
    pub dim: usize,
    /// Rows of the table.
    pub vocab: usize,
}

impl EmbeddingShape {
    /// Checks the lengths.
    pub fn check(&self, table: usize, ids: usize, y: usize) -> Result<(), ShapeError> {
        let op = "embedding";
        let d = || format!("{self:?}");
        nonzero(
            op,
            &d,
            &[
                ("count", self.count),
                ("dim", self.dim),
                ("vocab", self.vocab),
            ],
        )?;
        expect_len(op, "table", d(), self.vocab * self.dim, table)?;
        expect_len(op, "ids", d(), self.count, ids)?;
        expect_len(op, "y", d(), self.count * self.dim, y)
    }
}

/// `sluice_embedding` (see [`EmbeddingShape`]).
pub fn embedding(
    s: &EmbeddingShape,
    table: &[f32],
    ids: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    s.check(table.len(), ids.len(), y.len())?;
    for (t, &id) in ids.iter().enumerate() {
        let row = &mut y[t * s.dim..(t + 1) * s.dim];
        let v = s.vocab as f32;
        let id = if id < 0.0 { id + v } else { id };
        if id >= 0.0 && id < v {
            let r = id as usize;
            row.copy_from_slice(&table[r * s.dim..(r + 1) * s.dim]);
        } else {
            row.fill(f32::NAN);
        }
    }
    Ok(())
}

/// `sluice_conv2d_ex`: a direct 2-D convolution of `x[N,Cin,H,W]` with
/// `w[Cout,Cin/groups,KH,KW]` to `y[N,Cout,OH,OW]`, per-axis strides,
/// dilations and leading pads (the trailing pads only set `OH`, `OW`),
/// grouped, then the bias and the activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvExShape {
    /// Images.
    pub n: usize,
    /// Input channels.
    pub cin: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub cout: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Filter height.
    pub kh: usize,
    /// Filter width.
    pub kw: usize,
    /// Vertical stride.
    pub sh: usize,
    /// Horizontal stride.
    pub sw: usize,
    /// Zero rows before the input.
    pub ph: usize,
    /// Zero columns before the input.
    pub pw: usize,
    /// Vertical dilation.
    pub dh: usize,
    /// Horizontal dilation.
    pub dw: usize,
    /// Groups (dividing `cin` and `cout`).
    pub groups: usize,
}

impl ConvExShape {
    /// Checks the lengths and that the groups divide the channels.
    pub fn check(
        &self,
        x: usize,
        w: usize,
        bias: Option<usize>,
        y: usize,
    ) -> Result<(), ShapeError> {
        let op = "conv2d_ex";
        let d = || format!("{self:?}");
        nonzero(
            op,
            &d,
            &[
                ("N", self.n),
                ("Cin", self.cin),
                ("H", self.h),
                ("W", self.w),
                ("Cout", self.cout),
                ("OH", self.oh),
                ("OW", self.ow),
                ("KH", self.kh),
                ("KW", self.kw),
                ("sh", self.sh),
                ("sw", self.sw),
                ("dh", self.dh),
                ("dw", self.dw),
                ("groups", self.groups),
            ],
        )?;
        if self.cin % self.groups != 0 || self.cout % self.groups != 0 {
            return Err(ShapeError::BadParam {
                op,
                param: "groups",
                value: self.groups,
                shape: d(),
                rule: "groups must divide Cin and Cout",
            });
        }
        expect_len(op, "x", d(), self.n * self.cin * self.h * self.w, x)?;
        expect_len(
            op,
            "w",
            d(),
            self.cout * (self.cin / self.groups) * self.kh * self.kw,
            w,
        )?;
        if let Some(b) = bias {
            expect_len(op, "bias", d(), self.cout, b)?;
        }
        expect_len(op, "y", d(), self.n * self.cout * self.oh * self.ow, y)
    }
}

/// `sluice_conv2d_ex` (see [`ConvExShape`]); sums in f64.
pub fn conv2d_ex(
    s: &ConvExShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    act: super::Act,
) -> Result<(), ShapeError> {
    s.check(x.len(), w.len(), bias.map(<[f32]>::len), y.len())?;
    let cg = s.cin / s.groups;
    let og = s.cout / s.groups;
    for img in 0..s.n {
        for co in 0..s.cout {
            let g = co / og;
            let b = bias.map_or(0.0, |b| b[co]);
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    let mut acc = 0.0f64;
                    for ci in 0..cg {
                        let xc = &x[((img * s.cin) + g * cg + ci) * s.h * s.w..];
                        let wc = &w[(co * cg + ci) * s.kh * s.kw..];
                        for ky in 0..s.kh {
                            let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                            if iy < 0 || iy >= s.h as isize {
                                continue;
                            }
                            for kx in 0..s.kw {
                                let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                                if ix < 0 || ix >= s.w as isize {
                                    continue;
                                }
                                acc += f64::from(xc[iy as usize * s.w + ix as usize])
                                    * f64::from(wc[ky * s.kw + kx]);
                            }
                        }
                    }
                    y[((img * s.cout + co) * s.oh + oy) * s.ow + ox] = act.apply(acc as f32 + b);
                }
            }
        }
    }
    Ok(())
}

/// `sluice_pool2d_ex`: max or average pooling of `x[NC,H,W]` to
/// `y[NC,OH,OW]` with per-axis window, stride, dilation and leading pads;
/// `peh`, `pew` are the trailing pads (counted by mode 2 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolExShape {
    /// Planes (`N·C`).
    pub nc: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Window height.
    pub kh: usize,
    /// Window width.
    pub kw: usize,
    /// Vertical stride.
    pub sh: usize,
    /// Horizontal stride.
    pub sw: usize,
    /// Rows of padding before.
    pub ph: usize,
    /// Columns of padding before.
    pub pw: usize,
    /// Rows of padding after.
    pub peh: usize,
    /// Columns of padding after.
    pub pew: usize,
    /// Vertical dilation.
    pub dh: usize,
    /// Horizontal dilation.
    pub dw: usize,
}

impl PoolExShape {
    /// Checks the lengths.
    pub fn check(&self, x: usize, y: usize) -> Result<(), ShapeError> {
        let op = "pool2d_ex";
        let d = || format!("{self:?}");
        nonzero(
            op,
            &d,
            &[
                ("NC", self.nc),
                ("H", self.h),
                ("W", self.w),
                ("OH", self.oh),
                ("OW", self.ow),
                ("KH", self.kh),
                ("KW", self.kw),
                ("sh", self.sh),
                ("sw", self.sw),
                ("dh", self.dh),
                ("dw", self.dw),
            ],
        )?;
        expect_len(op, "x", d(), self.nc * self.h * self.w, x)?;
        expect_len(op, "y", d(), self.nc * self.oh * self.ow, y)
    }
}

/// `sluice_pool2d_ex`: mode 0 max, 1 mean of the in-image elements, 2 mean
/// counting the declared padding (not what lies beyond it). A window with
/// nothing to count yields 0 (max: -inf).
pub fn pool2d_ex(s: &PoolExShape, x: &[f32], y: &mut [f32], mode: i32) -> Result<(), ShapeError> {
    s.check(x.len(), y.len())?;
    for p in 0..s.nc {
        let src = &x[p * s.h * s.w..(p + 1) * s.h * s.w];
        for oy in 0..s.oh {
            for ox in 0..s.ow {
                let (mut best, mut sum, mut cnt, mut padded) =
                    (f32::NEG_INFINITY, 0.0f64, 0usize, 0usize);
                for ky in 0..s.kh {
                    let iy = (oy * s.sh + ky * s.dh) as isize - s.ph as isize;
                    for kx in 0..s.kw {
                        let ix = (ox * s.sw + kx * s.dw) as isize - s.pw as isize;
                        if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
                            if iy < (s.h + s.peh) as isize && ix < (s.w + s.pew) as isize {
                                padded += 1;
                            }
                            continue;
                        }
                        let v = src[iy as usize * s.w + ix as usize];
                        best = best.max(v);
                        sum += f64::from(v);
                        cnt += 1;
                    }
                }
                let d = if mode == 2 { cnt + padded } else { cnt };
                y[(p * s.oh + oy) * s.ow + ox] = match mode {
                    0 => best,
                    1 | 2 if d == 0 => 0.0,
                    1 | 2 => (sum / d as f64) as f32,
                    _ => f32::NAN,
                };
            }
        }
    }
    Ok(())
}

/// `sluice_lrn`: local response normalisation across the `c` channels of
/// `x[N,C,HW]`: `y = x / (bias + alpha/size · Σ x²)^beta` over the
/// channels `c − ⌊(size−1)/2⌋ ..= c + ⌈(size−1)/2⌉`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrnShape {
    /// Images.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Elements per channel plane.
    pub hw: usize,
    /// Window of channels.
    pub size: usize,
    /// Scale.
    pub alpha: f32,
    /// Exponent.
    pub beta: f32,
    /// Offset.
    pub bias: f32,
}

impl LrnShape {
    /// Checks the lengths.
    pub fn check(&self, x: usize, y: usize) -> Result<(), ShapeError> {
        let op = "lrn";
        let d = || format!("{self:?}");
        nonzero(
            op,
            &d,
            &[
                ("N", self.n),
                ("C", self.c),
                ("HW", self.hw),
                ("size", self.size),
            ],
        )?;
        expect_len(op, "x", d(), self.n * self.c * self.hw, x)?;
        expect_len(op, "y", d(), self.n * self.c * self.hw, y)
    }
}

/// `sluice_lrn` (see [`LrnShape`]); sums in f64.
pub fn lrn(s: &LrnShape, x: &[f32], y: &mut [f32]) -> Result<(), ShapeError> {
    s.check(x.len(), y.len())?;
    let lo = (s.size - 1) / 2;
    let hi = (s.size - 1).div_ceil(2);
    for img in 0..s.n {
        for ch in 0..s.c {
            let (c0, c1) = (ch.saturating_sub(lo), (ch + hi).min(s.c - 1));
            for i in 0..s.hw {
                let mut sq = 0.0f64;
                for k in c0..=c1 {
                    let v = f64::from(x[(img * s.c + k) * s.hw + i]);
                    sq += v * v;
                }
                let at = (img * s.c + ch) * s.hw + i;
                let d = (f64::from(s.bias) + f64::from(s.alpha) / s.size as f64 * sq)
                    .powf(f64::from(s.beta));
                y[at] = (f64::from(x[at]) / d) as f32;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_descriptor_strides_follow_numpy() {
        let d = ElemShape::broadcast(&[2, 3, 4], &[&[2, 3, 4], &[3, 1], &[]]).unwrap();
        assert_eq!(&d[..6], &[1, 1, 1, 2, 3, 4]);
        assert_eq!(&d[6..12], &[0, 0, 0, 12, 4, 1]);
        assert_eq!(&d[12..18], &[0, 0, 0, 0, 1, 0]);
        assert_eq!(&d[18..24], &[0; 6]);
        assert!(ElemShape::broadcast(&[2, 3], &[&[2, 4]]).is_none());
        let s = ElemShape {
            n: 24,
            desc: d,
            op: ElemOp::Binary(BinOp::Sub),
            act: Some(Unary::Relu),
        };
        let a: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let b = [1.0, 5.0, 30.0];
        let mut y = vec![0.0; 24];
        elementwise(&s, &a, Some(&b), None, &mut y).unwrap();
        // a[1,2,3] = 23, b[2] = 30: relu(23 - 30) = 0; a[0,1,0] = 4, b[1] = 5 -> 0; a[1,0,3] = 15 - 1.
        assert_eq!((y[23], y[4], y[15]), (0.0, 0.0, 14.0));
        // A short operand is refused.
        assert!(elementwise(&s, &a, Some(&b[..2]), None, &mut y).is_err());
    }

    #[test]
    fn codes_round_trip() {
        for code in (0..=19).chain(32..=38).chain([48]) {
            let op = ElemOp::from_code(code, 0.25, 0.5).unwrap();
            assert_eq!(op.code().0, code);
        }
        assert_eq!(ElemOp::from_code(20, 0.0, 0.0), None);
    }

    #[test]
    fn gather_reads_the_sources_end_to_end_and_fills_negatives() {
        let s = GatherShape {
            n: 4,
            lens: [2, 3, 0, 0],
            fill: 9.0,
        };
        let mut y = [0.0; 4];
        gather(
            &s,
            [Some(&[1.0, 2.0]), Some(&[3.0, 4.0, 5.0]), None, None],
            &[4.0, -1.0, 0.0, 2.0],
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [5.0, 9.0, 1.0, 3.0]);
    }

    #[test]
    fn grouped_conv_and_pool_ex_match_hand_values() {
        // Depthwise 1x1 conv: y[c] = w[c]·x[c] + b[c].
        let s = ConvExShape {
            n: 1,
            cin: 2,
            h: 1,
            w: 2,
            cout: 2,
            oh: 1,
            ow: 2,
            kh: 1,
            kw: 1,
            sh: 1,
            sw: 1,
            ph: 0,
            pw: 0,
            dh: 1,
            dw: 1,
            groups: 2,
        };
        let mut y = [0.0; 4];
        conv2d_ex(
            &s,
            &[1.0, 2.0, 3.0, 4.0],
            &[10.0, 100.0],
            Some(&[0.5, 0.0]),
            &mut y,
            super::super::Act::None,
        )
        .unwrap();
        assert_eq!(y, [10.5, 20.5, 300.0, 400.0]);
        let p = PoolExShape {
            nc: 1,
            h: 2,
            w: 2,
            oh: 2,
            ow: 2,
            kh: 2,
            kw: 2,
            sh: 1,
            sw: 1,
            ph: 0,
            pw: 0,
            peh: 1,
            pew: 1,
            dh: 1,
            dw: 1,
        };
        let mut y = [0.0; 4];
        pool2d_ex(&p, &[1.0, 2.0, 3.0, 4.0], &mut y, 2).unwrap();
        assert_eq!(y, [2.5, 1.5, 1.75, 1.0]);
        pool2d_ex(&p, &[1.0, 2.0, 3.0, 4.0], &mut y, 1).unwrap();
        assert_eq!(y, [2.5, 3.0, 3.5, 4.0]);
    }
}
