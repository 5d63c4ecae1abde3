//! Multi-layer perceptrons on candle, initialised from this crate's seeded
//! [`Rng`], with Polyak (soft) and hard copies between two nets of one shape.
//!
//! The shape follows InSS Table 2: input → hidden layers with ReLU → linear
//! output; the paper uses two hidden layers of 256 ([`DEFAULT_HIDDEN`]).
//!
//! Weights are drawn from U(−1/√fan_in, 1/√fan_in), and so are the biases,
//! which is PyTorch's default `nn.Linear` initialisation. They are drawn layer
//! by layer, weight (row-major, `[out, in]`) before bias, so one seed always
//! gives the same network. candle's own initialisers are not used: its CPU
//! random generator cannot be seeded.
//!
//! Every parameter lives in a candle-nn [`VarMap`] under
//! `<prefix>.l<i>.weight` and `<prefix>.l<i>.bias`, `i` counting layers from
//! 0; an agent keeps all its networks in one map, which is what a checkpoint
//! saves.

use candle_core::{D, DType, Device, Result, Tensor, Var};
use candle_nn::{Linear, Module, VarMap};

use crate::rng::{Draws, Rng};

/// The hidden layers of InSS Table 2: two layers of 256 units.
pub const DEFAULT_HIDDEN: [usize; 2] = [256, 256];

/// The logit given to masked entries before the softmax; `exp` of it (less
/// any realistic maximum) is exactly 0 in `f32`.
pub(crate) const MASKED_LOGIT: f64 = -1e9;

#[derive(Debug)]
struct Layer {
    weight: Var,
    bias: Var,
    linear: Linear,
}

/// A fully connected network: `input → hidden[0] → … → output`, ReLU after
/// every hidden layer and no activation on the output.
#[derive(Debug)]
pub struct Mlp {
    layers: Vec<Layer>,
    input: usize,
    output: usize,
}

impl Mlp {
    /// Builds the network, registering its parameters in `map` under
    /// `prefix`, and draws its initial weights from `rng`.
    ///
    /// Fails if a parameter of that name is already in `map` or a dimension
    /// is zero.
    pub fn new(
        map: &VarMap,
        prefix: &str,
        input: usize,
        hidden: &[usize],
        output: usize,
        rng: &mut Rng,
    ) -> Result<Self> {
        let mut dims = Vec::with_capacity(hidden.len() + 2);
        dims.push(input);
        dims.extend_from_slice(hidden);
        dims.push(output);
        if let Some(pos) = dims.iter().position(|&d| d == 0) {
            candle_core::bail!("layer width {pos} of network {prefix} is 0 (widths {dims:?})");
        }
        let mut layers = Vec::with_capacity(dims.len() - 1);
        for (i, pair) in dims.windows(2).enumerate() {
            let (fan_in, fan_out) = (pair[0], pair[1]);
            let bound = 1.0 / (fan_in as f64).sqrt();
            let w: Vec<f32> = (0..fan_in * fan_out)
                .map(|_| rng.uniform(-bound, bound) as f32)
                .collect();
            let b: Vec<f32> = (0..fan_out)
                .map(|_| rng.uniform(-bound, bound) as f32)
                .collect();
            let weight = Var::from_tensor(&Tensor::from_vec(w, (fan_out, fan_in), &Device::Cpu)?)?;
            let bias = Var::from_tensor(&Tensor::from_vec(b, fan_out, &Device::Cpu)?)?;
            insert(map, &format!("{prefix}.l{i}.weight"), &weight)?;
            insert(map, &format!("{prefix}.l{i}.bias"), &bias)?;
            let linear = Linear::new(weight.as_tensor().clone(), Some(bias.as_tensor().clone()));
            layers.push(Layer {
                weight,
                bias,
                linear,
            });
        }
        Ok(Self {
            layers,
            input,
            output,
        })
    }

    /// The input width.
    pub fn input_dim(&self) -> usize {
        self.input
    }

    /// The output width.
    pub fn output_dim(&self) -> usize {
        self.output
    }

    /// Runs the network on a `[batch, input]` tensor, giving `[batch, output]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.linear.forward(&h)?;
            if i != last {
                h = h.relu()?;
            }
        }
        Ok(h)
    }

    /// The parameters, layer by layer, weight before bias (for optimisers).
    pub fn vars(&self) -> Vec<Var> {
        self.layers
            .iter()
            .flat_map(|l| [l.weight.clone(), l.bias.clone()])
            .collect()
    }

    /// Polyak update: every parameter θ̂ of `self` becomes κ·θ + (1 − κ)·θ̂,
    /// θ being `src`'s. Fails if the two nets differ in shape.
    pub fn soft_update_from(&self, src: &Mlp, kappa: f64) -> Result<()> {
        self.check_same_shape(src)?;
        for (dst, src) in self.vars().iter().zip(src.vars()) {
            let mixed = (src.as_tensor().affine(kappa, 0.0)?
                + dst.as_tensor().affine(1.0 - kappa, 0.0)?)?;
            dst.set(&mixed)?;
        }
        Ok(())
    }

    /// Hard copy: `self`'s parameters become equal to `src`'s. Fails if the
    /// two nets differ in shape.
    pub fn copy_from(&self, src: &Mlp) -> Result<()> {
        self.check_same_shape(src)?;
        for (dst, src) in self.vars().iter().zip(src.vars()) {
            dst.set(src.as_tensor())?;
        }
        Ok(())
    }

    fn check_same_shape(&self, other: &Mlp) -> Result<()> {
        let shapes =
            |m: &Mlp| -> Vec<Vec<usize>> { m.vars().iter().map(|v| v.dims().to_vec()).collect() };
        let (a, b) = (shapes(self), shapes(other));
        if a != b {
            candle_core::bail!("networks differ in shape: {a:?} vs {b:?}");
        }
        Ok(())
    }
}

/// Adam as candle-nn provides it: [`candle_nn::AdamW`] with `weight_decay = 0`
/// (its decoupled decay term then vanishes, leaving Adam), betas 0.9 and
/// 0.999 and eps 1e-8 (candle-nn's `ParamsAdamW` defaults, PyTorch's too),
/// with bias correction.
pub(crate) fn adam(vars: Vec<Var>, lr: f64) -> Result<candle_nn::AdamW> {
    use candle_nn::Optimizer;
    let params = candle_nn::ParamsAdamW {
        lr,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    candle_nn::AdamW::new(vars, params)
}

/// Adds `var` to `map` under `name`, refusing to replace one.
fn insert(map: &VarMap, name: &str, var: &Var) -> Result<()> {
    let mut data = map
        .data()
        .lock()
        .map_err(|_| candle_core::Error::Msg("the VarMap's lock is poisoned".into()))?;
    if data.contains_key(name) {
        candle_core::bail!("parameter {name} is already in the VarMap");
    }
    data.insert(name.to_string(), var.clone());
    Ok(())
}

/// Log-probabilities of a softmax over the last dimension of `[batch, n]`
/// logits. Where `mask` (`[batch, n]`, 1.0 allowed, 0.0 masked) is 0 the logit
/// is replaced by [`MASKED_LOGIT`] before normalising, so the probability
/// (`exp` of the result) is exactly 0 there and the allowed entries are
/// renormalised among themselves; the log-probability there is about −1e9,
/// finite, so `π·log π` is exactly 0 and gradients stay finite. The maximum
/// subtracted for stability is detached (the result does not depend on it).
pub(crate) fn masked_log_softmax(logits: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    let z = match mask {
        // m·1e9 − 1e9: exactly 0 where allowed, −1e9 where masked.
        Some(m) => ((logits * m)? + m.affine(-MASKED_LOGIT, MASKED_LOGIT)?)?,
        None => logits.clone(),
    };
    let max = z.max_keepdim(D::Minus1)?.detach();
    let shifted = z.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    shifted.broadcast_sub(&lse)
}

/// FNV-1a (64-bit) over every parameter of `map` in name order: the name's
/// bytes, each dimension as a little-endian `u64`, then the values as
/// little-endian `f32`. Equal digests mean bitwise-equal weights (up to hash
/// collisions).
pub(crate) fn digest_varmap(map: &VarMap) -> Result<u64> {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    };
    let data = map
        .data()
        .lock()
        .map_err(|_| candle_core::Error::Msg("the VarMap's lock is poisoned".into()))?;
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for name in names {
        let t = data[name].as_tensor();
        feed(name.as_bytes());
        for &d in t.dims() {
            feed(&(d as u64).to_le_bytes());
        }
        let values = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        for v in values {
            feed(&v.to_le_bytes());
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SeedableRng;

    #[test]
    fn init_follows_pytorch_bounds_and_seed() {
        let map = VarMap::new();
        let mut rng = Rng::seed_from_u64(5);
        let net = Mlp::new(&map, "n", 16, &[8], 3, &mut rng).expect("builds");
        let vars = net.vars();
        assert_eq!(vars.len(), 4);
        assert_eq!(vars[0].dims(), &[8, 16]);
        assert_eq!(vars[3].dims(), &[3]);
        let w0 = vars[0]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!(w0.iter().all(|w| w.abs() <= 0.25)); // 1/sqrt(16)
        assert!(w0.iter().any(|w| w.abs() > 0.2)); // not all tiny
        let w1 = vars[2]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let b1 = 1.0 / 8f32.sqrt();
        assert!(w1.iter().all(|w| w.abs() <= b1));

        let map2 = VarMap::new();
        let _ = Mlp::new(&map2, "n", 16, &[8], 3, &mut Rng::seed_from_u64(5)).expect("builds");
        assert_eq!(digest_varmap(&map).unwrap(), digest_varmap(&map2).unwrap());
        let map3 = VarMap::new();
        let _ = Mlp::new(&map3, "n", 16, &[8], 3, &mut Rng::seed_from_u64(6)).expect("builds");
        assert_ne!(digest_varmap(&map).unwrap(), digest_varmap(&map3).unwrap());
    }

    #[test]
    fn duplicate_names_and_zero_widths_are_refused() {
        let map = VarMap::new();
        let mut rng = Rng::seed_from_u64(1);
        Mlp::new(&map, "a", 2, &[4], 1, &mut rng).expect("builds");
        assert!(Mlp::new(&map, "a", 2, &[4], 1, &mut rng).is_err());
        assert!(Mlp::new(&map, "b", 2, &[0], 1, &mut rng).is_err());
    }

    #[test]
    fn forward_soft_update_and_copy() {
        let map = VarMap::new();
        let mut rng = Rng::seed_from_u64(2);
        let a = Mlp::new(&map, "a", 3, &[5, 5], 2, &mut rng).expect("builds");
        let b = Mlp::new(&map, "b", 3, &[5, 5], 2, &mut rng).expect("builds");
        let x = Tensor::from_vec(
            vec![0.1f32, -0.2, 0.3, 1.0, 0.0, -1.0],
            (2, 3),
            &Device::Cpu,
        )
        .unwrap();
        assert_eq!(a.forward(&x).unwrap().dims(), &[2, 2]);

        let wa = a.vars()[0]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let wb = b.vars()[0]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        b.soft_update_from(&a, 0.25).expect("same shape");
        let wb2 = b.vars()[0]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for i in 0..wa.len() {
            let want = 0.25 * wa[i] + 0.75 * wb[i];
            assert!((wb2[i] - want).abs() < 1e-6);
        }
        b.copy_from(&a).expect("same shape");
        let ya = a
            .forward(&x)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let yb = b
            .forward(&x)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(ya, yb);

        let c = Mlp::new(&map, "c", 3, &[4], 2, &mut rng).expect("builds");
        assert!(c.copy_from(&a).is_err());
        assert!(c.soft_update_from(&a, 0.5).is_err());
    }

    #[test]
    fn masked_softmax_gives_exact_zeros() {
        let logits =
            Tensor::from_vec(vec![1.0f32, 5.0, 2.0, 0.0, 0.0, 0.0], (2, 3), &Device::Cpu).unwrap();
        let mask =
            Tensor::from_vec(vec![1.0f32, 0.0, 1.0, 0.0, 0.0, 1.0], (2, 3), &Device::Cpu).unwrap();
        let lp = masked_log_softmax(&logits, Some(&mask)).unwrap();
        let p = lp.exp().unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(p[0][1], 0.0);
        assert_eq!(p[1][0], 0.0);
        assert_eq!(p[1][1], 0.0);
        assert!((p[1][2] - 1.0).abs() < 1e-6);
        let e = std::f32::consts::E;
        assert!((p[0][0] - 1.0 / (1.0 + e)).abs() < 1e-6);
        assert!(
            lp.to_vec2::<f32>()
                .unwrap()
                .iter()
                .flatten()
                .all(|v| v.is_finite())
        );
    }
}
