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

    #[test]
    fn what_the_kernels_cannot_run_is_refused_by_node() {
        let mut b = GraphBuilder::new(Limits::default());
        let x = b
            .input("x", DType::F32, vec![Dim::Fixed(1), Dim::Fixed(4)])
            .unwrap();
        b.node("tr", Op::Transpose { perm: None }, vec![Some(x)], &["y"])
            .unwrap();
        b.output("y");
        let s = b.build().unwrap().specialize(1).unwrap();
        let e = lower(&s, "t").unwrap_err().to_string();
        assert!(e.contains("'tr'") && e.contains("Transpose"), "{e}");
        let s2 = residual_cnn().specialize(2).unwrap();
        assert!(
            lower(&s2, "b2")
                .unwrap_err()
                .to_string()
                .contains("batch 1")
        );
    }
}
