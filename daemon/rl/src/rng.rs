//! The agents' generator: sluice-rng's xoshiro256** ([`Rng`]), so that
//! every draw this crate makes (initial weights, exploration, replay
//! sampling, target-policy noise) follows from one `u64` seed.
//!
//! candle's CPU device cannot be seeded (`Device::set_seed` fails on CPU), so
//! this crate never asks candle for random numbers.

pub use sluice_rng::{Draws, RngCore, SeedableRng, fork, xoshiro_from_state, xoshiro_state};

/// xoshiro256** seeded through SplitMix64 (`Rng::seed_from_u64`).
pub type Rng = sluice_rng::Xoshiro256StarStar;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::seed_from_u64(42);
        let mut b = Rng::seed_from_u64(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(
            Rng::seed_from_u64(1).next_u64(),
            Rng::seed_from_u64(2).next_u64()
        );
    }

    #[test]
    fn normal_has_unit_moments() {
        let mut r = Rng::seed_from_u64(3);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
    }
}
