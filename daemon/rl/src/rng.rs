//! A small seeded random number generator, so that every draw this crate makes
//! (initial weights, exploration, replay sampling, target-policy noise) follows
//! from one `u64` seed.
//!
//! candle's CPU device cannot be seeded (`Device::set_seed` fails on CPU), so
//! this crate never asks candle for random numbers.
//!
//! The generator is xoshiro256** (Blackman and Vigna, "Scrambled linear
//! pseudorandom number generators", ACM TOMS 2021), with its 256-bit state
//! filled from the seed by SplitMix64 (Steele, Lea and Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA 2014), as the xoshiro authors
//! recommend. Normal draws use the Box-Muller transform (one of the pair is
//! used, so the state stays four words and a checkpoint can store it).
//!
//! Uniform integers and floats are bitwise reproducible everywhere; normal
//! draws call `ln`, `sqrt` and `cos` from the platform's libm, so they are
//! bitwise reproducible on one platform and build, and may differ in the last
//! bit across platforms.

/// One step of SplitMix64: advances `state` and returns the next output.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A xoshiro256** generator seeded through SplitMix64.
///
/// Cloning copies the state: the clone then yields the same sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// Seeds the generator from one `u64`: four SplitMix64 outputs fill the
    /// state (they are never all zero, as SplitMix64's output function is a
    /// bijection of four distinct counter values).
    pub fn seed_from_u64(seed: u64) -> Self {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Self { s }
    }

    /// Restores a generator from [`Rng::state`]. Returns `None` for the
    /// all-zero state, which xoshiro cannot leave.
    pub fn from_state(s: [u64; 4]) -> Option<Self> {
        if s == [0; 4] { None } else { Some(Self { s }) }
    }

    /// The generator's state, for checkpoints; [`Rng::from_state`] restores it.
    pub fn state(&self) -> [u64; 4] {
        self.s
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform float in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform float in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// A uniform integer in `0..n`, without modulo bias (Lemire's
    /// multiply-and-reject). Returns 0 when `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        let n = n as u64;
        // Reject the low products that would make some values more likely.
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as usize;
            }
        }
    }

    /// A standard normal draw (mean 0, variance 1), by Box-Muller.
    pub fn normal(&mut self) -> f64 {
        // u1 in (0, 1] keeps ln finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A new generator seeded from this one's next output, for handing an
    /// independent stream to a component (the agents use one for weights and
    /// fork one for their updates).
    pub fn fork(&mut self) -> Rng {
        Rng::seed_from_u64(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_reference_values() {
        // First outputs of the reference splitmix64.c for seed 0.
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(&mut s), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(splitmix64(&mut s), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn same_seed_same_stream_and_state_round_trips() {
        let mut a = Rng::seed_from_u64(42);
        let mut b = Rng::seed_from_u64(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let saved = a.state();
        let x = a.next_u64();
        let mut c = Rng::from_state(saved).expect("non-zero state");
        assert_eq!(c.next_u64(), x);
        assert!(Rng::from_state([0; 4]).is_none());
        assert_ne!(
            Rng::seed_from_u64(1).next_u64(),
            Rng::seed_from_u64(2).next_u64()
        );
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = Rng::seed_from_u64(7);
        let mut seen = [0usize; 5];
        for _ in 0..5000 {
            let v = r.below(5);
            seen[v] += 1;
        }
        for (v, &count) in seen.iter().enumerate() {
            assert!(
                (800..1200).contains(&count),
                "value {v} drawn {count} times"
            );
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
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
        assert!(xs.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn uniform_floats_stay_in_range() {
        let mut r = Rng::seed_from_u64(9);
        for _ in 0..10_000 {
            let u = r.next_f64();
            assert!((0.0..1.0).contains(&u));
            let v = r.uniform(-0.5, 0.25);
            assert!((-0.5..0.25).contains(&v));
        }
    }
}
