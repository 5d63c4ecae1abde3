//! An imported model's inference on a device: the graph lowered to the
//! kernel library ([`sluice_nn::builders::lower`]), loaded with its own
//! weights, run once through a virtual queue, read back and freed. What
//! `sluice run --device cuda` does, and, on the fake driver, how the
//! lowering is tested against the graph's CPU executor.

use sluice_graph::{DType, Static, Tensor};
use sluice_nn::builders::{LowerError, lower, lower_graph};
use sluice_nn::reference::MAX_EXACT_INDEX;

use crate::driver::CuDriver;
use crate::plan_exec::{DeviceModel, InferError, KernelLibrary, LoadError, LoadOptions};
use crate::queue::VirtualQueue;

/// An imported model could not run on the device.
#[derive(Debug, thiserror::Error)]
pub enum GraphRunError {
    /// The graph does not lower to the kernel library.
    #[error("the graph does not lower to the CUDA kernel library")]
    Lower(#[source] LowerError),
    /// Loading its weights failed.
    #[error("loading the model onto the device failed")]
    Load(#[source] Box<LoadError>),
    /// The inference failed.
    #[error("the inference on the device failed")]
    Infer(#[source] Box<InferError>),
    /// Freeing its memory failed.
    #[error("freeing the model's device memory failed")]
    Free(#[source] crate::driver::DriverError),
    /// The inputs given do not match the graph's.
    #[error("input '{name}': {why}")]
    Input {
        /// The graph input.
        name: String,
        /// What is wrong and the fix.
        why: String,
    },
}

/// Lowers `s` (any batch), loads it through `q` (idle), runs it on
/// `inputs` (by graph input name: f32 tensors, and i64 token ids, which
/// travel as f32 whole numbers and so must lie within ±2^24) and returns
/// every graph output, in graph order, as an f32 tensor of its shape.
pub fn infer_graph_tensors(
    drv: &mut dyn CuDriver,
    q: &mut VirtualQueue,
    lib: &KernelLibrary,
    s: &Static,
    name: &str,
    inputs: &[(&str, &Tensor)],
    opts: &LoadOptions,
) -> Result<Vec<(String, Tensor)>, GraphRunError> {
    let low = lower_graph(s, name).map_err(GraphRunError::Lower)?;
    let mut packed = vec![0.0f32; low.plan.buffer(low.plan.input()).len];
    for io in &low.inputs {
        let bad = |why: String| GraphRunError::Input {
            name: io.name.clone(),
            why,
        };
        let t = inputs
            .iter()
            .find(|(n, _)| *n == io.name)
            .map(|(_, t)| *t)
            .ok_or_else(|| bad("not given; pass a tensor for every graph input".into()))?;
        if t.shape() != io.shape.as_slice() {
            return Err(bad(format!(
                "has shape {:?}; the graph takes {:?} at batch {}",
                t.shape(),
                io.shape,
                s.batch()
            )));
        }
        let dst = &mut packed[io.offset..io.offset + io.len];
        match (io.dtype, t.as_f32()) {
            (DType::F32, Some(v)) => dst.copy_from_slice(v),
            (DType::I64, None) if t.dtype() == DType::I64 => {
                for (d, &v) in dst.iter_mut().zip(&t.to_i64_vec()) {
                    if v.unsigned_abs() > MAX_EXACT_INDEX as u64 {
                        return Err(bad(format!(
                            "holds {v}; ids travel to the device as f32 and must lie within -2^24..=2^24"
                        )));
                    }
                    *d = v as f32;
                }
            }
            _ => {
                return Err(bad(format!(
                    "is {}; the graph takes {}",
                    t.dtype(),
                    io.dtype
                )));
            }
        }
    }
    let mut dm = DeviceModel::load(drv, q, &low.plan, &low.weights, lib, opts)
        .map_err(|e| GraphRunError::Load(Box::new(e)))?;
    let out = dm
        .infer(drv, q, &packed)
        .map_err(|e| GraphRunError::Infer(Box::new(e)));
    dm.free(drv).map_err(GraphRunError::Free)?;
    let out = out?;
    low.outputs
        .iter()
        .map(|io| {
            Tensor::f32(
                io.shape.clone(),
                out[io.offset..io.offset + io.len].to_vec(),
            )
            .map(|t| (io.name.clone(), t))
            .map_err(|e| GraphRunError::Input {
                name: io.name.clone(),
                why: format!("the output does not fit its shape: {}", e.0),
            })
        })
        .collect()
}

/// Lowers `s`, loads it through `q` (idle), runs `input` (the graph's
/// inputs packed in graph order, f32, row-major) and returns the graph's
/// outputs packed in graph order ([`infer_graph_tensors`] packs and
/// unpacks by name).
pub fn infer_graph(
    drv: &mut dyn CuDriver,
    q: &mut VirtualQueue,
    lib: &KernelLibrary,
    s: &Static,
    name: &str,
    input: &[f32],
    opts: &LoadOptions,
) -> Result<Vec<f32>, GraphRunError> {
    let (plan, weights) = lower(s, name).map_err(GraphRunError::Lower)?;
    let mut dm = DeviceModel::load(drv, q, &plan, &weights, lib, opts)
        .map_err(|e| GraphRunError::Load(Box::new(e)))?;
    let out = dm
        .infer(drv, q, input)
        .map_err(|e| GraphRunError::Infer(Box::new(e)));
    dm.free(drv).map_err(GraphRunError::Free)?;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan_exec::fake_abi::{self, FakeTimes};
    use sluice_graph::{
        AutoPad, BinOp, DType, Dim, Graph, GraphBuilder, Limits, Op, PoolKind, Tensor, Unary,
        Window,
    };

    fn rand(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(seed.wrapping_mul(40_503))
                    >> 8) as f32
                    / (1u32 << 24) as f32
                    * 2.0
                    - 1.0
            })
            .map(|x| x * scale)
            .collect()
    }

    fn win(k: usize, s: usize, p: usize) -> Window {
        Window {
            kernel: Some(vec![k, k]),
            strides: vec![s, s],
            pads: vec![p; 4],
            dilations: vec![],
            auto_pad: AutoPad::NotSet,
            ceil_mode: false,
        }
    }

    /// x[N,3,16,16] -> conv3x3+relu -> conv3x3 -> add(skip)+relu -> maxpool 2 -> GAP -> flatten -> gemm(transB) -> softmax.
    fn residual_cnn() -> Graph {
        let mut b = GraphBuilder::new(Limits::default());
        let x = b
            .input(
                "x",
                DType::F32,
                vec![Dim::Batch, Dim::Fixed(3), Dim::Fixed(16), Dim::Fixed(16)],
            )
            .unwrap();
        let c = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>, seed: u32, scale: f32| {
            let n = shape.iter().product();
            b.constant_value(name, Tensor::f32(shape, rand(n, seed, scale)).unwrap())
                .unwrap()
        };
        let w1 = c(&mut b, "w1", vec![8, 3, 3, 3], 1, 0.5);
        let b1 = c(&mut b, "b1", vec![8], 2, 0.1);
        let w0 = c(&mut b, "w0", vec![8, 3, 1, 1], 3, 0.5);
        let w2 = c(&mut b, "w2", vec![8, 8, 3, 3], 4, 0.2);
        let fw = c(&mut b, "fw", vec![5, 8], 5, 0.5);
        let fb = c(&mut b, "fb", vec![5], 6, 0.1);
        let conv = |w: Window| Op::Conv {
            window: w,
            group: 1,
            act: None,
        };
        let h1 = b
            .op(
                "c1",
                conv(win(3, 1, 1)),
                vec![Some(x), Some(w1), Some(b1)],
                "h1",
            )
            .unwrap();
        let a1 = b
            .op("r1", Op::Unary(Unary::Relu), vec![Some(h1)], "a1")
            .unwrap();
        let sk = b
            .op("skip", conv(win(1, 1, 0)), vec![Some(x), Some(w0)], "s")
            .unwrap();
        let h2 = b
            .op("c2", conv(win(3, 1, 1)), vec![Some(a1), Some(w2)], "h2")
            .unwrap();
        let r = b
            .op(
                "add",
                Op::Binary(BinOp::Add, None),
                vec![Some(h2), Some(sk)],
                "r",
            )
            .unwrap();
        let a2 = b
            .op("r2", Op::Unary(Unary::Relu), vec![Some(r)], "a2")
            .unwrap();
        let p = b
            .op(
                "pool",
                Op::Pool {
                    kind: PoolKind::Max,
                    window: win(2, 2, 0),
                },
                vec![Some(a2)],
                "p",
            )
            .unwrap();
        let g = b
            .op("gap", Op::GlobalAveragePool, vec![Some(p)], "g")
            .unwrap();
        let f = b
            .op("flat", Op::Flatten { axis: 1 }, vec![Some(g)], "f")
            .unwrap();
        let l = b
            .op(
                "fc",
                Op::Gemm {
                    trans_a: false,
                    trans_b: true,
                    alpha: 1.0,
                    beta: 1.0,
                    act: None,
                },
                vec![Some(f), Some(fw), Some(fb)],
                "l",
            )
            .unwrap();
        b.node(
            "sm",
            Op::Softmax {
                axis: -1,
                log: false,
                coerce_2d: false,
            },
            vec![Some(l)],
            &["y"],
        )
        .unwrap();
        b.output("y");
        b.build().unwrap()
    }

    #[test]
    fn a_lowered_graph_matches_the_cpu_executor_on_the_fake_driver() {
        let s = residual_cnn().specialize(1).unwrap();
        let xin = rand(3 * 16 * 16, 9, 1.0);
        let x = Tensor::f32(vec![1, 3, 16, 16], xin.clone()).unwrap();
        let want = s.run(&[("x", &x)]).unwrap().remove(0).1;
        let (mut d, mut q, lib) = fake_abi::rig(FakeTimes::default());
        let got = infer_graph(
            &mut d,
            &mut q,
            &lib,
            &s,
            "cnn",
            &xin,
            &LoadOptions::default(),
        )
        .unwrap();
        let want = want.as_f32().unwrap();
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err <= 1e-4 * scale,
            "max error {err} against max |ref| {scale}"
        );
        // The device really ran the kernels: the softmax sums to one and is not uniform.
        assert!(
            (got.iter().sum::<f32>() - 1.0).abs() < 1e-4
                && got.iter().any(|&v| (v - 0.2).abs() > 1e-3)
        );
    }

    /// Runs `s` on the fake driver and on the CPU executor; the largest
    /// error of any output relative to that output's largest magnitude.
    fn fake_vs_cpu(s: &Static, inputs: &[(&str, &Tensor)]) -> f32 {
        let want = s.run(inputs).unwrap();
        let (mut d, mut q, lib) = fake_abi::rig(FakeTimes::default());
        let got = infer_graph_tensors(
            &mut d,
            &mut q,
            &lib,
            s,
            "g",
            inputs,
            &LoadOptions::default(),
        )
        .unwrap();
        assert_eq!(got.len(), want.len());
        let mut worst = 0f32;
        for ((wn, w), (gn, g)) in want.iter().zip(&got) {
            assert_eq!((wn, w.shape()), (gn, g.shape()));
            let (w, g) = (w.as_f32().unwrap(), g.as_f32().unwrap());
            let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(
                scale > 0.0,
                "output {wn} is all zero: the test checks nothing"
            );
            let err = g.iter().zip(w).fold(0f32, |m, (a, b)| {
                if a.is_finite() {
                    m.max((a - b).abs())
                } else {
                    f32::INFINITY
                }
            });
            worst = worst.max(err / scale);
        }
        worst
    }

    #[test]
    fn a_batch_of_two_runs_each_image_through_the_tiled_kernels() {
        let s = residual_cnn().specialize(2).unwrap();
        let x = Tensor::f32(vec![2, 3, 16, 16], rand(2 * 3 * 16 * 16, 7, 1.0)).unwrap();
        let (plan, _) = lower(&s, "b2").unwrap();
        let convs = plan
            .steps()
            .iter()
            .filter(|st| st.op.kernel() == sluice_nn::builders::Kernel::Conv2d)
            .count();
        assert_eq!(convs, 6, "three convolutions, one launch per image");
        let rel = fake_vs_cpu(&s, &[("x", &x)]);
        assert!(rel <= 1e-4, "relative error {rel}");
    }

    /// One graph through every general kernel: token ids (i64) to an
    /// embedding, a product of two activations; an image through a grouped,
    /// non-square, strided, asymmetrically padded convolution with a
    /// LeakyReLU, LRN, a broadcast multiply, a sigmoid, an average pool
    /// counting padding, a linear resize, a concat, a pad, a slice, a
    /// transpose and a split into two outputs.
    #[test]
    fn every_general_kernel_matches_the_cpu_executor() {
        let mut b = GraphBuilder::new(Limits::default());
        let ids = b
            .input("ids", DType::I64, vec![Dim::Batch, Dim::Fixed(4)])
            .unwrap();
        let x = b
            .input(
                "x",
                DType::F32,
                vec![Dim::Batch, Dim::Fixed(4), Dim::Fixed(7), Dim::Fixed(6)],
            )
            .unwrap();
        let c = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>, seed: u32| {
            let n = shape.iter().product();
            b.constant_value(name, Tensor::f32(shape, rand(n, seed, 0.8)).unwrap())
                .unwrap()
        };
        let i64c = |b: &mut GraphBuilder, name: &str, v: Vec<i64>| {
            let n = v.len();
            b.constant_value(name, Tensor::i64(vec![n], v).unwrap())
                .unwrap()
        };
        let table = c(&mut b, "table", vec![10, 6], 1);
        let e = b
            .op(
                "emb",
                Op::Gather { axis: 0 },
                vec![Some(table), Some(ids)],
                "e",
            )
            .unwrap();
        let et = b
            .op(
                "et",
                Op::Transpose {
                    perm: Some(vec![0, 2, 1]),
                },
                vec![Some(e)],
                "et",
            )
            .unwrap();
        let _q = b
            .op("scores", Op::MatMul, vec![Some(e), Some(et)], "scores")
            .unwrap();
        let w = c(&mut b, "w", vec![6, 2, 3, 2], 2);
        let bias = c(&mut b, "bias", vec![6], 3);
        let conv = b
            .op(
                "conv",
                Op::Conv {
                    window: Window {
                        kernel: Some(vec![3, 2]),
                        strides: vec![2, 1],
                        pads: vec![1, 0, 0, 1],
                        dilations: vec![1, 2],
                        auto_pad: AutoPad::NotSet,
                        ceil_mode: false,
                    },
                    group: 2,
                    act: Some(Unary::LeakyRelu(0.1)),
                },
                vec![Some(x), Some(w), Some(bias)],
                "conv",
            )
            .unwrap();
        let l = b
            .op(
                "lrn",
                Op::Lrn {
                    size: 3,
                    alpha: 0.5,
                    beta: 0.75,
                    bias: 1.0,
                },
                vec![Some(conv)],
                "l",
            )
            .unwrap();
        let k = c(&mut b, "k", vec![6, 1, 1], 4);
        let m = b
            .op(
                "mul",
                Op::Binary(BinOp::Mul, Some(Unary::Sigmoid)),
                vec![Some(l), Some(k)],
                "m",
            )
            .unwrap();
        let p = b
            .op(
                "pool",
                Op::Pool {
                    kind: PoolKind::Avg(true),
                    window: Window {
                        kernel: Some(vec![2, 2]),
                        strides: vec![1, 2],
                        pads: vec![0, 1, 1, 0],
                        dilations: vec![],
                        auto_pad: AutoPad::NotSet,
                        ceil_mode: true,
                    },
                },
                vec![Some(m)],
                "p",
            )
            .unwrap();
        let scales = b
            .constant_value(
                "scales",
                Tensor::f32(vec![4], vec![1.0, 1.0, 2.0, 1.5]).unwrap(),
            )
            .unwrap();
        let r = b
            .op(
                "resize",
                Op::Resize {
                    mode: sluice_graph::ResizeMode::Linear,
                    coord: sluice_graph::CoordMode::HalfPixel,
                    axes: None,
                    aspect: sluice_graph::Aspect::Stretch,
                },
                vec![Some(p), None, Some(scales)],
                "r",
            )
            .unwrap();
        let rt = b
            .op("tanh", Op::Unary(Unary::Tanh), vec![Some(r)], "rt")
            .unwrap();
        b.node(
            "cat",
            Op::Concat { axis: 1 },
            vec![Some(r), Some(rt), Some(r)],
            &["cat"],
        )
        .unwrap();
        let pads = i64c(&mut b, "pads", vec![0, 0, 1, 0, 0, 0, 0, 2]);
        let pv = b.constant_value("pv", Tensor::scalar_f32(0.25)).unwrap();
        let pd = b
            .op(
                "pad",
                Op::Pad {
                    mode: sluice_graph::PadMode::Constant,
                },
                vec![Some(r), Some(pads), Some(pv)],
                "pd",
            )
            .unwrap();
        let (st, en, ax, sp) = (
            i64c(&mut b, "st", vec![1, 0]),
            i64c(&mut b, "en", vec![100, 5]),
            i64c(&mut b, "ax", vec![2, 3]),
            i64c(&mut b, "sp", vec![2, 1]),
        );
        let sl = b
            .op(
                "slice",
                Op::Slice,
                vec![Some(pd), Some(st), Some(en), Some(ax), Some(sp)],
                "sl",
            )
            .unwrap();
        let tr = b
            .op(
                "tr",
                Op::Transpose {
                    perm: Some(vec![0, 2, 3, 1]),
                },
                vec![Some(sl)],
                "tr",
            )
            .unwrap();
        let split = i64c(&mut b, "split", vec![2, 4]);
        b.node(
            "split",
            Op::Split { axis: 3 },
            vec![Some(tr), Some(split)],
            &["s1", "s2"],
        )
        .unwrap();
        for o in ["scores", "cat", "s1", "s2"] {
            b.output(o);
        }
        let g = b.build().unwrap();
        for batch in [1, 2] {
            let s = g.specialize(batch).unwrap();
            let low = sluice_nn::builders::lower_graph(&s, "g").unwrap();
            let kernels: std::collections::HashSet<_> =
                low.plan.steps().iter().map(|st| st.op.kernel()).collect();
            use sluice_nn::builders::Kernel as K;
            for k in [
                K::Embedding,
                K::Bmm,
                K::Conv2dEx,
                K::Lrn,
                K::Elementwise,
                K::Pool2dEx,
                K::Interp,
                K::Gather,
            ] {
                assert!(kernels.contains(&k), "{k:?} is not in the plan");
            }
            let idv: Vec<i64> = (0..4 * batch as i64)
                .map(|i| (i * 7 + 3) % 10 - 2)
                .collect();
            let ids = Tensor::i64(vec![batch, 4], idv).unwrap();
            let x = Tensor::f32(vec![batch, 4, 7, 6], rand(batch * 4 * 7 * 6, 5, 1.0)).unwrap();
            let rel = fake_vs_cpu(&s, &[("ids", &ids), ("x", &x)]);
            assert!(rel <= 1e-4, "batch {batch}: relative error {rel}");
        }
    }

    #[test]
    fn what_the_kernels_cannot_run_is_refused_by_node() {
        let mut b = GraphBuilder::new(Limits::default());
        let x = b
            .input("x", DType::F32, vec![Dim::Fixed(1), Dim::Fixed(4)])
            .unwrap();
        // A Cast to f16 would need a rounding kernel the library lacks.
        let h = b
            .op("to_f16", Op::Cast { to: DType::F16 }, vec![Some(x)], "h")
            .unwrap();
        b.node("back", Op::Cast { to: DType::F32 }, vec![Some(h)], &["y"])
            .unwrap();
        b.output("y");
        let s = b.build().unwrap().specialize(1).unwrap();
        let e = lower(&s, "t").unwrap_err().to_string();
        assert!(e.contains("'to_f16'") && e.contains("Cast"), "{e}");
        // Integer arithmetic on computed ids (here a truncating division)
        // would be f32 arithmetic on the device: refused.
        let mut b = GraphBuilder::new(Limits::default());
        let ids = b
            .input("ids", DType::I64, vec![Dim::Fixed(1), Dim::Fixed(2)])
            .unwrap();
        let two = b
            .constant_value("two", Tensor::i64(vec![1], vec![2]).unwrap())
            .unwrap();
        let half = b
            .op(
                "half",
                Op::Binary(BinOp::Div, None),
                vec![Some(ids), Some(two)],
                "h",
            )
            .unwrap();
        let t = b
            .constant_value("t", Tensor::f32(vec![3, 2], rand(6, 1, 1.0)).unwrap())
            .unwrap();
        b.node(
            "emb",
            Op::Gather { axis: 0 },
            vec![Some(t), Some(half)],
            &["y"],
        )
        .unwrap();
        b.output("y");
        let s = b.build().unwrap().specialize(1).unwrap();
        let e = lower(&s, "div").unwrap_err().to_string();
        assert!(e.contains("'half'") && e.contains("i64"), "{e}");
        // Ids the f32 transport cannot carry exactly are refused by name.
        let mut b = GraphBuilder::new(Limits::default());
        let ids = b
            .input("ids", DType::I64, vec![Dim::Fixed(1), Dim::Fixed(2)])
            .unwrap();
        let t = b
            .constant_value("t", Tensor::f32(vec![3, 2], rand(6, 1, 1.0)).unwrap())
            .unwrap();
        b.node(
            "emb",
            Op::Gather { axis: 0 },
            vec![Some(t), Some(ids)],
            &["y"],
        )
        .unwrap();
        b.output("y");
        let s = b.build().unwrap().specialize(1).unwrap();
        let big = Tensor::i64(vec![1, 2], vec![0, 1 << 30]).unwrap();
        let (mut d, mut q, lib) = fake_abi::rig(FakeTimes::default());
        let e = infer_graph_tensors(
            &mut d,
            &mut q,
            &lib,
            &s,
            "ids",
            &[("ids", &big)],
            &LoadOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("'ids'") && e.contains("1073741824"), "{e}");
    }
}
