//! Shape inference: each operator's output types and shapes from its
//! inputs' types, shapes and (for shape-like inputs) values.
//!
//! The CPU executor computes its outputs' shapes with these same functions,
//! so what inference says at load is what a run produces.

use crate::error::{ShapeError, bail};
use crate::op::{AutoPad, Op, Window};
use crate::tensor::numel;
use crate::{DType, Tensor};

/// What is known of one input of a node.
#[derive(Debug, Clone, Copy)]
pub struct Info<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: &'a [usize],
    /// The values, when they are known (constants, or every value at run time).
    pub value: Option<&'a Tensor>,
}

/// Output type and shape.
pub type OutInfo = (DType, Vec<usize>);

/// `axis` (maybe negative) as an index into `rank` axes.
pub fn norm_axis(axis: i64, rank: usize) -> Result<usize, ShapeError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        bail!(
            "axis {axis} is out of range for rank {rank} (valid: {} to {})",
            -r,
            r - 1
        );
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// Multidirectional (numpy) broadcasting of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, ShapeError> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => bail!("shapes {a:?} and {b:?} do not broadcast (axis {i}: {da} vs {db})"),
        };
    }
    Ok(out)
}

fn input<'a>(ins: &[Option<Info<'a>>], i: usize, what: &str) -> Result<Info<'a>, ShapeError> {
    match ins.get(i).copied().flatten() {
        Some(x) => Ok(x),
        None => bail!("input {i} ({what}) is required"),
    }
}

fn opt<'a>(ins: &[Option<Info<'a>>], i: usize) -> Option<Info<'a>> {
    ins.get(i).copied().flatten()
}

fn float(x: Info<'_>, what: &str) -> Result<(), ShapeError> {
    if !x.dtype.is_float() {
        bail!(
            "{what} must be a floating tensor (f32, f16, bf16), got {}",
            x.dtype
        );
    }
    Ok(())
}

/// The values of a shape-like input (shape, axes, pads, starts …), which
/// must be known at load.
pub fn values(x: Info<'_>, what: &str) -> Result<Vec<i64>, ShapeError> {
    match x.value {
        Some(t) => {
            if t.dtype().is_float() {
                bail!("{what} must be an integer tensor, got {}", t.dtype());
            }
            Ok(t.to_i64_vec())
        }
        None => bail!(
            "{what} must be known when the model loads (a constant, or computed from shapes only); it depends on input values here"
        ),
    }
}

fn float_values(x: Info<'_>, what: &str) -> Result<Vec<f32>, ShapeError> {
    match x.value {
        Some(t) => Ok(t.to_f32_vec()),
        None => bail!(
            "{what} must be known when the model loads (a constant); it depends on input values here"
        ),
    }
}

/// A window resolved against an input: per spatial axis the kernel,
/// stride, dilation, padding at the start and the end, and output size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Kernel sizes.
    pub kernel: Vec<usize>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
    /// Padding at the start.
    pub pad_begin: Vec<usize>,
    /// Padding at the end.
    pub pad_end: Vec<usize>,
    /// Output sizes.
    pub out: Vec<usize>,
}

/// Resolves `window` for the spatial sizes `input` (kernel from the window,
/// or `kernel` when the window has none).
pub fn resolve_window(
    window: &Window,
    input: &[usize],
    kernel: &[usize],
) -> Result<Resolved, ShapeError> {
    let n = input.len();
    let kernel = window.kernel.clone().unwrap_or_else(|| kernel.to_vec());
    let per = |v: &[usize], name: &str, default: usize| -> Result<Vec<usize>, ShapeError> {
        match v.len() {
            0 => Ok(vec![default; n]),
            l if l == n => Ok(v.to_vec()),
            l => bail!("{name} has {l} values for {n} spatial axes"),
        }
    };
    if kernel.len() != n {
        bail!(
            "kernel_shape has {} values for {n} spatial axes",
            kernel.len()
        );
    }
    let strides = per(&window.strides, "strides", 1)?;
    let dilations = per(&window.dilations, "dilations", 1)?;
    const MAX_WINDOW: usize = 1 << 31;
    if kernel
        .iter()
        .chain(&strides)
        .chain(&dilations)
        .chain(&window.pads)
        .any(|&v| v > MAX_WINDOW)
    {
        bail!(
            "kernel {kernel:?}, strides {strides:?}, dilations {dilations:?} and pads {:?} must each be at most 2^31",
            window.pads
        );
    }
    if kernel.contains(&0) || strides.contains(&0) || dilations.contains(&0) {
        bail!(
            "kernel {kernel:?}, strides {strides:?} and dilations {dilations:?} must be positive"
        );
    }
    let pads = match window.pads.len() {
        0 => vec![0; 2 * n],
        l if l == 2 * n => window.pads.clone(),
        l => bail!("pads has {l} values for {n} spatial axes (needs {})", 2 * n),
    };
    let mut r = Resolved {
        kernel: kernel.clone(),
        strides: strides.clone(),
        dilations: dilations.clone(),
        pad_begin: vec![0; n],
        pad_end: vec![0; n],
        out: vec![0; n],
    };
    for i in 0..n {
        let dk = (kernel[i] - 1)
            .checked_mul(dilations[i])
            .and_then(|x| x.checked_add(1))
            .ok_or_else(|| ShapeError::new("kernel extent overflows"))?;
        let (pb, pe, out) = match window.auto_pad {
            AutoPad::NotSet => {
                let (pb, pe) = (pads[i], pads[n + i]);
                let span = input[i].saturating_add(pb).saturating_add(pe);
                if span < dk {
                    bail!(
                        "spatial axis {i}: input {} padded by {pb}+{pe} is smaller than the kernel extent {dk}",
                        input[i]
                    );
                }
                let num = span - dk;
                let mut out = if window.ceil_mode {
                    num.div_ceil(strides[i]) + 1
                } else {
                    num / strides[i] + 1
                };
                // The last window must start inside the input or its start padding.
                if window.ceil_mode && (out - 1) * strides[i] >= input[i] + pb {
                    out -= 1;
                }
                (pb, pe, out)
            }
            AutoPad::Valid => {
                if input[i] < dk {
                    bail!(
                        "spatial axis {i}: input {} is smaller than the kernel extent {dk}",
                        input[i]
                    );
                }
                (0, 0, (input[i] - dk) / strides[i] + 1)
            }
            AutoPad::SameUpper | AutoPad::SameLower => {
                let out = input[i].div_ceil(strides[i]);
                let total = ((out.max(1) - 1) * strides[i] + dk).saturating_sub(input[i]);
                let small = total / 2;
                if window.auto_pad == AutoPad::SameUpper {
                    (small, total - small, out)
                } else {
                    (total - small, small, out)
                }
            }
        };
        r.pad_begin[i] = pb;
        r.pad_end[i] = pe;
        r.out[i] = out;
    }
    Ok(r)
}

/// The shape `Reshape` makes of `input` with the target `spec`.
pub fn reshape_target(
    input: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, ShapeError> {
    let total = numel(input).ok_or_else(|| ShapeError::new("input shape overflows"))?;
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            -1 => {
                if infer.replace(i).is_some() {
                    bail!("shape {spec:?} has more than one -1");
                }
                out.push(1);
            }
            0 if !allowzero => match input.get(i) {
                Some(&d) => out.push(d),
                None => bail!(
                    "shape {spec:?}: 0 at axis {i} copies an input axis the input ({input:?}) does not have"
                ),
            },
            s if s < 0 => bail!("shape {spec:?} has the invalid value {s}"),
            s => out.push(
                usize::try_from(s)
                    .map_err(|_| ShapeError::new(format!("shape value {s} too large")))?,
            ),
        }
    }
    let known = numel(&out).ok_or_else(|| ShapeError::new(format!("shape {spec:?} overflows")))?;
    if let Some(i) = infer {
        if known == 0 || total % known != 0 {
            bail!("cannot reshape {input:?} ({total} elements) to {spec:?}");
        }
        out[i] = total / known;
    } else if known != total {
        bail!("cannot reshape {input:?} ({total} elements) to {spec:?} ({known} elements)");
    }
    Ok(out)
}

/// One sliced axis: first index, step and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceAxis {
    /// First index taken.
    pub start: i64,
    /// Step (non-zero).
    pub step: i64,
    /// Elements taken.
    pub len: usize,
}

/// `Slice`'s per-axis ranges (every axis of `shape`).
pub fn slice_axes(
    shape: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<SliceAxis>, ShapeError> {
    let mut out: Vec<SliceAxis> = shape
        .iter()
        .map(|&d| SliceAxis {
            start: 0,
            step: 1,
            len: d,
        })
        .collect();
    if starts.len() != ends.len() {
        bail!("starts has {} values, ends {}", starts.len(), ends.len());
    }
    let default_axes: Vec<i64> = (0..starts.len() as i64).collect();
    let axes = axes.unwrap_or(&default_axes);
    if axes.len() != starts.len() || steps.is_some_and(|s| s.len() != starts.len()) {
        bail!("starts, ends, axes and steps must have one value per sliced axis");
    }
    let mut seen = vec![false; shape.len()];
    for (j, &ax) in axes.iter().enumerate() {
        let a = norm_axis(ax, shape.len())?;
        if std::mem::replace(&mut seen[a], true) {
            bail!("axis {a} is sliced twice");
        }
        let d = shape[a] as i128;
        let step = i128::from(steps.map_or(1, |s| s[j]));
        if step == 0 {
            bail!("a slice stride of 0 on axis {a}; strides must be non-zero");
        }
        let fix = |v: i64| -> i128 {
            let v = i128::from(v);
            if v < 0 { v + d } else { v }
        };
        let (mut s, mut e) = (fix(starts[j]), fix(ends[j]));
        if step > 0 {
            s = s.clamp(0, d);
            e = e.clamp(0, d);
        } else {
            s = s.clamp(0, (d - 1).max(0));
            e = e.clamp(-1, d - 1);
        }
        let len = if step > 0 {
            (e - s + step - 1).div_euclid(step)
        } else {
            (s - e + (-step) - 1).div_euclid(-step)
        };
        let len = if d == 0 { 0 } else { len.max(0) };
        out[a] = SliceAxis {
            start: s as i64,
            step: step as i64,
            len: len as usize,
        };
    }
    Ok(out)
}

/// The normalised, sorted axes of a `Squeeze`/`Unsqueeze`/`ReduceMean` list.
pub fn axes_list(axes: &[i64], rank: usize) -> Result<Vec<usize>, ShapeError> {
    let mut v = axes
        .iter()
        .map(|&a| norm_axis(a, rank))
        .collect::<Result<Vec<_>, _>>()?;
    v.sort_unstable();
    if v.windows(2).any(|w| w[0] == w[1]) {
        bail!("axes {axes:?} repeat an axis");
    }
    Ok(v)
}

/// Output sizes of `Resize` and the per-axis scale used by its coordinate
/// transformation; `scales` / `sizes` give values for `axes` (every axis
/// when `None`).
pub fn resize_target(
    shape: &[usize],
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
    axes: Option<&[i64]>,
    aspect: crate::op::Aspect,
) -> Result<(Vec<usize>, Vec<f32>), ShapeError> {
    let r = shape.len();
    let axes: Vec<usize> = match axes {
        Some(a) => axes_list(a, r).map(|_| {
            a.iter()
                .map(|&x| norm_axis(x, r))
                .collect::<Result<Vec<_>, _>>()
        })??,
        None => (0..r).collect(),
    };
    let mut out = shape.to_vec();
    let mut sc = vec![1.0f32; r];
    match (
        scales.filter(|s| !s.is_empty()),
        sizes.filter(|s| !s.is_empty()),
    ) {
        (Some(_), Some(_)) => bail!("Resize takes scales or sizes, not both"),
        (None, None) => bail!("Resize needs scales or sizes"),
        (Some(given), None) => {
            if given.len() != axes.len() {
                bail!("scales has {} values for {} axes", given.len(), axes.len());
            }
            for (&a, &s) in axes.iter().zip(given) {
                if !(s > 0.0 && s.is_finite()) {
                    bail!("scale {s} must be positive and finite");
                }
                let o = (shape[a] as f64 * f64::from(s)).floor();
                if o > (1u64 << 40) as f64 {
                    bail!("scale {s} makes axis {a} (length {}) too large", shape[a]);
                }
                out[a] = o as usize;
                sc[a] = s;
            }
        }
        (None, Some(given)) => {
            if given.len() != axes.len() {
                bail!("sizes has {} values for {} axes", given.len(), axes.len());
            }
            if given.iter().any(|&s| s <= 0) {
                bail!("sizes {given:?} must be positive");
            }
            let ratio = |a: usize, s: i64| {
                if shape[a] == 0 {
                    1.0
                } else {
                    s as f64 / shape[a] as f64
                }
            };
            let common = match aspect {
                crate::op::Aspect::Stretch => None,
                crate::op::Aspect::NotLarger => axes
                    .iter()
                    .zip(given)
                    .map(|(&a, &s)| ratio(a, s))
                    .reduce(f64::min),
                crate::op::Aspect::NotSmaller => axes
                    .iter()
                    .zip(given)
                    .map(|(&a, &s)| ratio(a, s))
                    .reduce(f64::max),
            };
            for (&a, &s) in axes.iter().zip(given) {
                match common {
                    None => {
                        out[a] = s as usize;
                        sc[a] = ratio(a, s) as f32;
                    }
                    Some(k) => {
                        out[a] = (k * shape[a] as f64).round() as usize;
                        sc[a] = k as f32;
                    }
                }
            }
        }
    }
    Ok((out, sc))
}

/// Output sizes of `Split` along an axis of length `dim` into `n` parts.
pub fn split_sizes(dim: usize, split: Option<&[i64]>, n: usize) -> Result<Vec<usize>, ShapeError> {
    match split {
        Some(s) => {
            if s.len() != n {
                bail!("split has {} sizes for {n} outputs", s.len());
            }
            if s.iter().any(|&x| x < 0)
                || s.iter().map(|&x| i128::from(x)).sum::<i128>() != dim as i128
            {
                bail!("split sizes {s:?} must be non-negative and add up to the axis length {dim}");
            }
            Ok(s.iter().map(|&x| x as usize).collect())
        }
        None => {
            if n == 0 {
                bail!("Split has no outputs");
            }
            let chunk = dim.div_ceil(n);
            let mut v = vec![chunk; n];
            let last = dim.checked_sub(chunk * (n - 1));
            match last {
                Some(l) => v[n - 1] = l,
                None => bail!("axis of length {dim} cannot be split into {n} parts"),
            }
            Ok(v)
        }
    }
}

/// Output types and shapes of `op` for inputs `ins`, with `n_out` outputs.
pub fn infer(op: &Op, ins: &[Option<Info<'_>>], n_out: usize) -> Result<Vec<OutInfo>, ShapeError> {
    let x0 = || input(ins, 0, "X");
    let same = |x: Info<'_>| Ok(vec![(x.dtype, x.shape.to_vec())]);
    match op {
        Op::Conv { window, group, .. } => {
            let x = x0()?;
            let w = input(ins, 1, "W")?;
            float(x, "X")?;
            float(w, "W")?;
            if !(3..=4).contains(&x.shape.len()) {
                bail!(
                    "input has shape {:?}; sluice runs 1-D and 2-D convolutions (rank 3 or 4)",
                    x.shape
                );
            }
            if w.shape.len() != x.shape.len() {
                bail!(
                    "weight shape {:?} does not match input rank {}",
                    w.shape,
                    x.shape.len()
                );
            }
            let (c, m) = (x.shape[1], w.shape[0]);
            if *group == 0 || m % group != 0 || w.shape[1].checked_mul(*group) != Some(c) {
                bail!(
                    "input has {c} channels, the weight {:?} expects {} x group {group}; the output channels {m} must divide by the group",
                    w.shape,
                    w.shape[1]
                );
            }
            if let Some(b) = opt(ins, 2)
                && b.shape != [m]
            {
                bail!("bias has shape {:?}, expected [{m}]", b.shape);
            }
            let r = resolve_window(window, &x.shape[2..], &w.shape[2..])?;
            if r.kernel != w.shape[2..] {
                bail!(
                    "kernel_shape {:?} differs from the weight's {:?}",
                    r.kernel,
                    &w.shape[2..]
                );
            }
            let mut out = vec![x.shape[0], m];
            out.extend(r.out);
            Ok(vec![(x.dtype, out)])
        }
        Op::BatchNorm { .. } => {
            let x = x0()?;
            float(x, "X")?;
            if x.shape.len() < 2 {
                bail!("input of rank {} has no channel axis", x.shape.len());
            }
            for (i, name) in [(1, "scale"), (2, "B"), (3, "mean"), (4, "var")] {
                let p = input(ins, i, name)?;
                if p.shape != [x.shape[1]] {
                    bail!("{name} has shape {:?}, expected [{}]", p.shape, x.shape[1]);
                }
            }
            same(x)
        }
        Op::Unary(u) => {
            let x = x0()?;
            if !matches!(
                u,
                crate::Unary::Neg | crate::Unary::Abs | crate::Unary::Relu
            ) {
                float(x, "X")?;
            }
            same(x)
        }
        Op::Clip | Op::Identity => same(x0()?),
        Op::Binary(b, _) => {
            let (a, c) = (x0()?, input(ins, 1, "B")?);
            if *b != crate::BinOp::Pow && a.dtype.is_float() != c.dtype.is_float() {
                bail!(
                    "operands are {} and {}; both must have one type",
                    a.dtype,
                    c.dtype
                );
            }
            Ok(vec![(a.dtype, broadcast(a.shape, c.shape)?)])
        }
        Op::Sum => {
            let a = x0()?;
            let mut s = a.shape.to_vec();
            for i in 1..ins.len() {
                s = broadcast(&s, input(ins, i, "X")?.shape)?;
            }
            Ok(vec![(a.dtype, s)])
        }
        Op::Where => {
            let (c, a, b) = (x0()?, input(ins, 1, "X")?, input(ins, 2, "Y")?);
            if c.dtype != DType::Bool {
                bail!("condition must be bool, got {}", c.dtype);
            }
            if a.dtype != b.dtype {
                bail!(
                    "X is {} and Y {}; they must have one type",
                    a.dtype,
                    b.dtype
                );
            }
            Ok(vec![(
                a.dtype,
                broadcast(&broadcast(c.shape, a.shape)?, b.shape)?,
            )])
        }
        Op::Softmax { axis, .. } => {
            let x = x0()?;
            float(x, "X")?;
            norm_axis(*axis, x.shape.len().max(1))?;
            same(x)
        }
        Op::Pool { window, .. } => {
            let x = x0()?;
            float(x, "X")?;
            if !(3..=4).contains(&x.shape.len()) {
                bail!(
                    "input has shape {:?}; sluice pools over 1 or 2 spatial axes",
                    x.shape
                );
            }
            if window.kernel.is_none() {
                bail!("kernel_shape is required");
            }
            let r = resolve_window(window, &x.shape[2..], &[])?;
            let mut out = x.shape[..2].to_vec();
            out.extend(r.out);
            Ok(vec![(x.dtype, out)])
        }
        Op::GlobalAveragePool => {
            let x = x0()?;
            float(x, "X")?;
            if x.shape.len() < 3 {
                bail!("input has shape {:?}; expected [N, C, spatial...]", x.shape);
            }
            let mut out = x.shape[..2].to_vec();
            out.extend(std::iter::repeat_n(1, x.shape.len() - 2));
            Ok(vec![(x.dtype, out)])
        }
        Op::Lrn { size, .. } => {
            let x = x0()?;
            float(x, "X")?;
            if x.shape.len() < 3 || *size == 0 {
                bail!(
                    "input has shape {:?} (needs [N, C, ...]) and size {size} (needs > 0)",
                    x.shape
                );
            }
            same(x)
        }
        Op::Gemm {
            trans_a, trans_b, ..
        } => {
            let (a, b) = (x0()?, input(ins, 1, "B")?);
            float(a, "A")?;
            float(b, "B")?;
            if a.shape.len() != 2 || b.shape.len() != 2 {
                bail!("A {:?} and B {:?} must be matrices", a.shape, b.shape);
            }
            let (m, k) = if *trans_a {
                (a.shape[1], a.shape[0])
            } else {
                (a.shape[0], a.shape[1])
            };
            let (k2, n) = if *trans_b {
                (b.shape[1], b.shape[0])
            } else {
                (b.shape[0], b.shape[1])
            };
            if k != k2 {
                bail!(
                    "A {:?} and B {:?} have inner dimensions {k} and {k2}",
                    a.shape,
                    b.shape
                );
            }
            if let Some(c) = opt(ins, 2) {
                let bc = broadcast(c.shape, &[m, n])?;
                if bc != [m, n] {
                    bail!("C {:?} does not broadcast to [{m}, {n}]", c.shape);
                }
            }
            Ok(vec![(a.dtype, vec![m, n])])
        }
        Op::MatMul => {
            let (a, b) = (x0()?, input(ins, 1, "B")?);
            float(a, "A")?;
            float(b, "B")?;
            Ok(vec![(a.dtype, matmul_shape(a.shape, b.shape)?)])
        }
        Op::Flatten { axis } => {
            let x = x0()?;
            let r = x.shape.len() as i64;
            if *axis < -r || *axis > r {
                bail!("axis {axis} out of range for rank {r}");
            }
            let a = if *axis < 0 { axis + r } else { *axis } as usize;
            let outer: usize = x.shape[..a].iter().product();
            let inner: usize = x.shape[a..].iter().product();
            Ok(vec![(x.dtype, vec![outer, inner])])
        }
        Op::Reshape { allowzero } => {
            let x = x0()?;
            let spec = values(input(ins, 1, "shape")?, "shape")?;
            Ok(vec![(x.dtype, reshape_target(x.shape, &spec, *allowzero)?)])
        }
        Op::Transpose { perm } => {
            let x = x0()?;
            let p = perm_of(perm.as_deref(), x.shape.len())?;
            Ok(vec![(x.dtype, p.iter().map(|&i| x.shape[i]).collect())])
        }
        Op::Concat { axis } => {
            let a = x0()?;
            let ax = norm_axis(*axis, a.shape.len())?;
            let mut out = a.shape.to_vec();
            out[ax] = 0;
            for i in 0..ins.len() {
                let t = input(ins, i, "X")?;
                if t.dtype != a.dtype || t.shape.len() != a.shape.len() {
                    bail!(
                        "input {i} is {} {:?}, input 0 is {} {:?}",
                        t.dtype,
                        t.shape,
                        a.dtype,
                        a.shape
                    );
                }
                for (d, (&x, &y)) in t.shape.iter().zip(a.shape).enumerate() {
                    if d != ax && x != y {
                        bail!(
                            "input {i} has shape {:?}, input 0 {:?}: only axis {ax} may differ",
                            t.shape,
                            a.shape
                        );
                    }
                }
                out[ax] += t.shape[ax];
            }
            Ok(vec![(a.dtype, out)])
        }
        Op::Split { axis } => {
            let x = x0()?;
            let ax = norm_axis(*axis, x.shape.len())?;
            let split = opt(ins, 1).map(|s| values(s, "split")).transpose()?;
            let sizes = split_sizes(x.shape[ax], split.as_deref(), n_out)?;
            Ok(sizes
                .into_iter()
                .map(|s| {
                    let mut sh = x.shape.to_vec();
                    sh[ax] = s;
                    (x.dtype, sh)
                })
                .collect())
        }
        Op::Slice => {
            let x = x0()?;
            let starts = values(input(ins, 1, "starts")?, "starts")?;
            let ends = values(input(ins, 2, "ends")?, "ends")?;
            let axes = opt(ins, 3).map(|a| values(a, "axes")).transpose()?;
            let steps = opt(ins, 4).map(|a| values(a, "steps")).transpose()?;
            let s = slice_axes(x.shape, &starts, &ends, axes.as_deref(), steps.as_deref())?;
            Ok(vec![(x.dtype, s.iter().map(|a| a.len).collect())])
        }
        Op::Squeeze => {
            let x = x0()?;
            let out = match opt(ins, 1) {
                Some(a) => {
                    let axes = axes_list(&values(a, "axes")?, x.shape.len())?;
                    for &a in &axes {
                        if x.shape[a] != 1 {
                            bail!(
                                "cannot squeeze axis {a} of shape {:?}: its length is not 1",
                                x.shape
                            );
                        }
                    }
                    x.shape
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !axes.contains(i))
                        .map(|(_, &d)| d)
                        .collect()
                }
                None => x.shape.iter().copied().filter(|&d| d != 1).collect(),
            };
            Ok(vec![(x.dtype, out)])
        }
        Op::Unsqueeze => {
            let x = x0()?;
            let raw = values(input(ins, 1, "axes")?, "axes")?;
            let r = x.shape.len() + raw.len();
            let axes = axes_list(&raw, r)?;
            let mut src = x.shape.iter();
            let out = (0..r)
                .map(|i| {
                    if axes.contains(&i) {
                        1
                    } else {
                        *src.next().unwrap_or(&1)
                    }
                })
                .collect();
            Ok(vec![(x.dtype, out)])
        }
        Op::Expand => {
            let x = x0()?;
            let s = values(input(ins, 1, "shape")?, "shape")?;
            let s = s
                .iter()
                .map(|&v| {
                    usize::try_from(v)
                        .map_err(|_| ShapeError::new(format!("shape value {v} is negative")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(vec![(x.dtype, broadcast(x.shape, &s)?)])
        }
        Op::Gather { axis } => {
            let (x, idx) = (x0()?, input(ins, 1, "indices")?);
            if idx.dtype.is_float() || idx.dtype == DType::Bool {
                bail!("indices must be i32 or i64, got {}", idx.dtype);
            }
            let ax = norm_axis(*axis, x.shape.len())?;
            if let Some(v) = idx.value {
                let d = x.shape[ax] as i64;
                if let Some(&bad) = v.to_i64_vec().iter().find(|&&i| i < -d || i >= d) {
                    bail!("index {bad} is out of range for axis {ax} of length {d}");
                }
            }
            let mut out = x.shape[..ax].to_vec();
            out.extend_from_slice(idx.shape);
            out.extend_from_slice(&x.shape[ax + 1..]);
            Ok(vec![(x.dtype, out)])
        }
        Op::Pad { mode } => {
            let x = x0()?;
            let pads = values(input(ins, 1, "pads")?, "pads")?;
            let axes = opt(ins, 3).map(|a| values(a, "axes")).transpose()?;
            let (pb, pe) = pad_amounts(x.shape.len(), &pads, axes.as_deref())?;
            let mut out = Vec::with_capacity(x.shape.len());
            if let Some(p) = pads.iter().find(|p| p.unsigned_abs() > 1 << 40) {
                bail!("pad {p} is beyond 2^40");
            }
            for (i, &d) in x.shape.iter().enumerate() {
                let o = d as i64 + pb[i] + pe[i];
                if o < 0 {
                    bail!("pads {pads:?} make axis {i} (length {d}) negative");
                }
                if *mode == crate::PadMode::Reflect
                    && (pb[i] >= d as i64 || pe[i] >= d as i64)
                    && (pb[i] > 0 || pe[i] > 0)
                {
                    bail!(
                        "reflect padding of {}+{} needs an axis longer than that; axis {i} has {d}",
                        pb[i],
                        pe[i]
                    );
                }
                if *mode == crate::PadMode::Edge && d == 0 && o > 0 {
                    bail!("edge padding of an empty axis {i}");
                }
                out.push(o as usize);
            }
            Ok(vec![(x.dtype, out)])
        }
        Op::Resize { axes, aspect, .. } => {
            let x = x0()?;
            float(x, "X")?;
            let scales = opt(ins, 2).map(|s| float_values(s, "scales")).transpose()?;
            let sizes = opt(ins, 3).map(|s| values(s, "sizes")).transpose()?;
            let (out, _) = resize_target(
                x.shape,
                scales.as_deref(),
                sizes.as_deref(),
                axes.as_deref(),
                *aspect,
            )?;
            Ok(vec![(x.dtype, out)])
        }
        Op::LayerNorm { axis, .. } => {
            let x = x0()?;
            float(x, "X")?;
            let ax = norm_axis(*axis, x.shape.len())?;
            let norm = &x.shape[ax..];
            for (i, name) in [(1, "scale"), (2, "B")] {
                if let Some(p) = opt(ins, i)
                    && broadcast(p.shape, norm)? != norm
                {
                    bail!(
                        "{name} {:?} does not broadcast to the normalised shape {norm:?}",
                        p.shape
                    );
                }
            }
            input(ins, 1, "scale")?;
            same(x)
        }
        Op::ReduceMean {
            keepdims,
            noop_with_empty_axes,
        } => {
            let x = x0()?;
            float(x, "X")?;
            let axes = reduce_axes(
                x.shape.len(),
                opt(ins, 1).map(|a| values(a, "axes")).transpose()?,
                *noop_with_empty_axes,
            )?;
            let out = x
                .shape
                .iter()
                .enumerate()
                .filter_map(|(i, &d)| match (axes.contains(&i), keepdims) {
                    (true, true) => Some(1),
                    (true, false) => None,
                    (false, _) => Some(d),
                })
                .collect();
            Ok(vec![(x.dtype, out)])
        }
        Op::Cast { to } => Ok(vec![(*to, x0()?.shape.to_vec())]),
        Op::Shape { start, end } => {
            let x = x0()?;
            let (s, e) = shape_range(x.shape.len(), *start, *end);
            Ok(vec![(DType::I64, vec![e.saturating_sub(s)])])
        }
        Op::ConstantOfShape { value } => {
            let s = values(x0()?, "shape")?;
            let s = s
                .iter()
                .map(|&v| {
                    usize::try_from(v)
                        .map_err(|_| ShapeError::new(format!("shape value {v} is negative")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(vec![(value.dtype(), s)])
        }
    }
}

/// The axes `ReduceMean` reduces.
pub fn reduce_axes(
    rank: usize,
    axes: Option<Vec<i64>>,
    noop_with_empty_axes: bool,
) -> Result<Vec<usize>, ShapeError> {
    match axes {
        Some(a) if !a.is_empty() => axes_list(&a, rank),
        _ if noop_with_empty_axes => Ok(vec![]),
        _ => Ok((0..rank).collect()),
    }
}

/// `Shape`'s clamped axis range.
pub fn shape_range(rank: usize, start: i64, end: Option<i64>) -> (usize, usize) {
    let r = rank as i64;
    let fix = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    (fix(start), fix(end.unwrap_or(r)))
}

/// `Pad`'s amounts at the start and end of every axis.
pub fn pad_amounts(
    rank: usize,
    pads: &[i64],
    axes: Option<&[i64]>,
) -> Result<(Vec<i64>, Vec<i64>), ShapeError> {
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&x| norm_axis(x, rank))
            .collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        bail!(
            "pads has {} values for {} axes (needs {})",
            pads.len(),
            axes.len(),
            2 * axes.len()
        );
    }
    let (mut pb, mut pe) = (vec![0; rank], vec![0; rank]);
    for (j, &a) in axes.iter().enumerate() {
        pb[a] = pads[j];
        pe[a] = pads[axes.len() + j];
    }
    Ok((pb, pe))
}

/// A transpose's permutation.
pub fn perm_of(perm: Option<&[usize]>, rank: usize) -> Result<Vec<usize>, ShapeError> {
    match perm {
        None => Ok((0..rank).rev().collect()),
        Some(p) => {
            let mut seen = vec![false; rank];
            if p.len() != rank
                || p.iter()
                    .any(|&i| i >= rank || std::mem::replace(&mut seen[i], true))
            {
                bail!("perm {p:?} is not a permutation of {rank} axes");
            }
            Ok(p.to_vec())
        }
    }
}

/// numpy `matmul`'s output shape.
pub fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, ShapeError> {
    if a.is_empty() || b.is_empty() {
        bail!("MatMul of a scalar ({a:?} x {b:?})");
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        bail!("A {a:?} and B {b:?} have inner dimensions {k} and {k2}");
    }
    let mut out = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2])?;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Window;

    fn win(k: &[usize], s: &[usize], p: &[usize], auto: AutoPad, ceil: bool) -> Window {
        Window {
            kernel: Some(k.to_vec()),
            strides: s.to_vec(),
            pads: p.to_vec(),
            dilations: vec![],
            auto_pad: auto,
            ceil_mode: ceil,
        }
    }

    #[test]
    fn windows_follow_onnx() {
        let r = resolve_window(
            &win(&[3, 3], &[2, 2], &[1, 1, 1, 1], AutoPad::NotSet, false),
            &[224, 224],
            &[],
        )
        .unwrap();
        assert_eq!(r.out, vec![112, 112]);
        let r =
            resolve_window(&win(&[3], &[2], &[], AutoPad::SameUpper, false), &[5], &[]).unwrap();
        assert_eq!((r.out[0], r.pad_begin[0], r.pad_end[0]), (3, 1, 1));
        let r =
            resolve_window(&win(&[2], &[2], &[], AutoPad::SameLower, false), &[5], &[]).unwrap();
        assert_eq!((r.out[0], r.pad_begin[0], r.pad_end[0]), (3, 1, 0));
        // ceil_mode: 112 -> 3x3 s2 gives 56 (floor 55).
        let r = resolve_window(&win(&[3], &[2], &[], AutoPad::NotSet, true), &[112], &[]).unwrap();
        assert_eq!(r.out[0], 56);
        assert!(resolve_window(&win(&[5], &[1], &[], AutoPad::Valid, false), &[3], &[]).is_err());
    }

    #[test]
    fn reshape_and_slice() {
        assert_eq!(
            reshape_target(&[2, 3, 4], &[0, -1], false).unwrap(),
            vec![2, 12]
        );
        assert!(reshape_target(&[2, 3, 4], &[-1, -1], false).is_err());
        assert!(reshape_target(&[2, 3, 4], &[5, -1], false).is_err());
        let s = slice_axes(&[10], &[-3], &[i64::MAX], None, None).unwrap();
        assert_eq!((s[0].start, s[0].len), (7, 3));
        let s = slice_axes(&[10], &[-1], &[i64::MIN], None, Some(&[-1])).unwrap();
        assert_eq!((s[0].start, s[0].step, s[0].len), (9, -1, 10));
        let s = slice_axes(&[10], &[1], &[8], None, Some(&[3])).unwrap();
        assert_eq!(s[0].len, 3);
    }

    #[test]
    fn huge_parameters_are_errors_not_overflows() {
        // Found by the onnx_import fuzz target: pads near i64::MAX overflowed.
        let x = Tensor::f32(vec![2, 3], vec![0.0; 6]).unwrap();
        let pads = Tensor::i64_vec(vec![i64::MAX, 0, i64::MAX, 0]);
        fn info(t: &Tensor) -> Option<Info<'_>> {
            Some(Info {
                dtype: t.dtype(),
                shape: t.shape(),
                value: Some(t),
            })
        }
        let e = infer(
            &Op::Pad {
                mode: crate::PadMode::Constant,
            },
            &[info(&x), info(&pads)],
            1,
        )
        .unwrap_err();
        assert!(e.0.contains("2^40"), "{e}");
        assert!(split_sizes(4, Some(&[i64::MAX, i64::MAX, 2]), 3).is_err());
        let w = win(&[3], &[1], &[usize::MAX, 0], AutoPad::NotSet, false);
        assert!(
            resolve_window(&w, &[8], &[])
                .unwrap_err()
                .0
                .contains("2^31")
        );
    }

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast(&[2, 3, 4], &[4]).unwrap(), vec![2, 3, 4]);
        assert_eq!(broadcast(&[3, 1], &[1, 5]).unwrap(), vec![3, 5]);
        assert!(broadcast(&[2, 3], &[4, 5]).is_err());
        assert_eq!(
            matmul_shape(&[2, 1, 3, 4], &[5, 4, 6]).unwrap(),
            vec![2, 5, 3, 6]
        );
        assert_eq!(matmul_shape(&[4], &[4, 6]).unwrap(), vec![6]);
    }
}
