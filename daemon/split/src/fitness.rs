//! SPLIT's Eq. 1 (expected wait) and Eq. 2 (fitness), and evaluating a cut
//! vector on an [`OperatorGraph`].
//!
//! For cuts `c_1 < … < c_{m−1}` (each in `1..M`), block `j` runs operators
//! `c_{j−1}..c_j` (with `c_0 = 0`, `c_m = M`); its time `t_j` is the sum of
//! its operator times plus the cost of the cut it ends at (the last block
//! ends at no cut). With `T` the vanilla model time, `σ` the population
//! standard deviation of the `t_j` and `overhead = (Σ t_j − T) / T`:
//!
//! ```text
//! fitness = −(exp(σ/T − 1) + exp(overhead/m − 1))          (Eq. 2)
//! wait    = ½ (σ²/t̄ + t̄) = ½ Σ t_j² / Σ t_j                 (Eq. 1)
//! ```
//!
//! Eq. 1 is the expected time a short request arriving uniformly at random
//! during the split model's run waits for the running block to end.

use serde::Serialize;

use crate::SplitError;
use crate::graph::OperatorGraph;

/// Eq. 2 from its terms.
pub fn fitness(sigma_us: f64, vanilla_us: f64, overhead: f64, blocks: usize) -> f64 {
    -((sigma_us / vanilla_us - 1.0).exp() + (overhead / blocks as f64 - 1.0).exp())
}

/// Eq. 1: `½ Σ t² / Σ t`, µs (0 for no blocks or zero time).
pub fn expected_wait_us(blocks: &[f64]) -> f64 {
    let s: f64 = blocks.iter().sum();
    if s <= 0.0 {
        return 0.0;
    }
    0.5 * blocks.iter().map(|t| t * t).sum::<f64>() / s
}

/// Population standard deviation.
pub fn std_dev(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt()
}

/// A cut vector evaluated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    /// The cuts (first kernel of blocks 2..=m), ascending.
    pub cuts: Vec<u32>,
    /// Each block's time `t_j`, µs, boundary cost included.
    pub block_time_us: Vec<f64>,
    /// Vanilla model time `T`, µs.
    pub vanilla_us: f64,
    /// `σ` of the block times, µs.
    pub sigma_us: f64,
    /// `(Σ t_j − T) / T`.
    pub overhead: f64,
    /// Eq. 2.
    pub fitness: f64,
    /// Eq. 1, µs.
    pub expected_wait_us: f64,
    /// Bytes a request suspended at each cut holds (the crossing bytes).
    pub held_bytes: Vec<u64>,
}

impl Evaluation {
    /// Number of blocks `m`.
    pub fn blocks(&self) -> usize {
        self.cuts.len() + 1
    }

    /// Time the cuts add to the model's own run, µs (`Σ t_j − T`).
    pub fn added_us(&self) -> f64 {
        self.overhead * self.vanilla_us
    }
}

impl OperatorGraph {
    /// Checks that `cuts` are ascending, unique kernel indices in `1..M`.
    pub fn check_cuts(&self, cuts: &[u32]) -> Result<(), SplitError> {
        let m = self.len();
        let ascending = cuts.windows(2).all(|w| w[0] < w[1]);
        let inside = cuts.iter().all(|&c| c >= 1 && (c as usize) < m);
        if ascending && inside {
            Ok(())
        } else {
            Err(SplitError::BadCuts {
                model: self.model.clone(),
                cuts: cuts.to_vec(),
                kernels: m,
            })
        }
    }

    /// Block times of `cuts`, µs (unchecked: cuts must pass
    /// [`check_cuts`](Self::check_cuts)).
    pub(crate) fn block_times_into(&self, cuts: &[u32], out: &mut Vec<f64>) {
        out.clear();
        let mut start = 0usize;
        for &c in cuts {
            out.push(self.span_us(start, c as usize) + self.cut_cost_us(c));
            start = c as usize;
        }
        out.push(self.span_us(start, self.len()));
    }

    /// Eq. 2 of `cuts` without allocating (unchecked, as
    /// [`block_times_into`](Self::block_times_into)).
    pub(crate) fn fitness_of(&self, cuts: &[u32]) -> f64 {
        // Welford's one-pass mean and variance over the block times.
        let (mut n, mut mean, mut m2, mut sum) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        let mut push = |t: f64| {
            n += 1.0;
            sum += t;
            let d = t - mean;
            mean += d / n;
            m2 += d * (t - mean);
        };
        let mut start = 0usize;
        for &c in cuts {
            push(self.span_us(start, c as usize) + self.cut_cost_us(c));
            start = c as usize;
        }
        push(self.span_us(start, self.len()));
        let t = self.vanilla_time_us();
        fitness((m2 / n).sqrt(), t, (sum - t) / t, cuts.len() + 1)
    }

    /// Evaluates `cuts`: block times, σ, overhead, Eq. 2, Eq. 1.
    pub fn evaluate(&self, cuts: &[u32]) -> Result<Evaluation, SplitError> {
        self.check_cuts(cuts)?;
        let mut blocks = Vec::with_capacity(cuts.len() + 1);
        self.block_times_into(cuts, &mut blocks);
        let t = self.vanilla_time_us();
        let sigma = std_dev(&blocks);
        let overhead = (blocks.iter().sum::<f64>() - t) / t;
        Ok(Evaluation {
            cuts: cuts.to_vec(),
            fitness: fitness(sigma, t, overhead, blocks.len()),
            expected_wait_us: expected_wait_us(&blocks),
            held_bytes: cuts
                .iter()
                .map(|&c| self.boundaries[c as usize - 1].crossing_bytes)
                .collect(),
            block_time_us: blocks,
            vanilla_us: t,
            sigma_us: sigma,
            overhead,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::toy_graph;

    #[test]
    fn eq1_by_hand() {
        // Blocks 1 and 3: ½ (1 + 9) / 4 = 1.25; σ = 1, t̄ = 2: ½ (1/2 + 2).
        assert!((expected_wait_us(&[1.0, 3.0]) - 1.25).abs() < 1e-12);
        assert!((0.5f64 * (1.0 / 2.0 + 2.0) - 1.25).abs() < 1e-12);
        // One block of T: T / 2.
        assert!((expected_wait_us(&[10.0]) - 5.0).abs() < 1e-12);
        assert_eq!(expected_wait_us(&[]), 0.0);
        assert!((std_dev(&[1.0, 3.0]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn eq2_by_hand() {
        // Unsplit: −2/e.
        assert!((fitness(0.0, 10.0, 0.0, 1) + 2.0 * (-1.0f64).exp()).abs() < 1e-12);
        // σ = 1, T = 10, overhead 0.2, m = 2: −(e^−0.9 + e^−0.9).
        let f = fitness(1.0, 10.0, 0.2, 2);
        assert!((f + 2.0 * (-0.9f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn evaluate_by_hand() {
        // Operators 1, 2, 3, 4 µs (launch 0), cut cost 1 µs.
        let g = toy_graph(&[1.0, 2.0, 3.0, 4.0], 1.0);
        let e = g.evaluate(&[2]).expect("valid");
        // Blocks: 1+2+1 = 4, 3+4 = 7; T = 10; σ = 1.5; overhead = 0.1.
        assert_eq!(e.block_time_us, vec![4.0, 7.0]);
        assert!((e.sigma_us - 1.5).abs() < 1e-12);
        assert!((e.overhead - 0.1).abs() < 1e-12);
        let want = -((0.15f64 - 1.0).exp() + (0.05f64 - 1.0).exp());
        assert!((e.fitness - want).abs() < 1e-12);
        assert!((g.fitness_of(&[2]) - want).abs() < 1e-12);
        assert!((e.expected_wait_us - 0.5 * 65.0 / 11.0).abs() < 1e-12);
        assert!(g.evaluate(&[0]).is_err());
        assert!(g.evaluate(&[4]).is_err());
        assert!(g.evaluate(&[2, 2]).is_err());
        assert!(g.evaluate(&[3, 1]).is_err());
    }
}
