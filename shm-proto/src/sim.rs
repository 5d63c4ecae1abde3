//! The function the embedded simulated GPU computes.
//!
//! The simulator has no real kernels, but clients must still be able to tell
//! that *their* input produced *their* output in the right place. So the
//! simulated device writes a deterministic function of `(model id, input
//! bytes)` into the output span:
//!
//! 1. `seed = FNV-1a-64(model_id as 4 LE bytes ++ input)`;
//! 2. output byte `i` is byte `i % 8` (little-endian) of
//!    `splitmix64(seed + i / 8)`.
//!
//! Both steps are streamable ([`Digest`], [`fill_output`]) so the daemon can
//! work through a large tensor in chunks without a copy of the whole input.

/// Streaming FNV-1a-64 over the model id and the input bytes.
#[derive(Debug, Clone, Copy)]
pub struct Digest(u64);

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl Digest {
    /// Starts a digest for `model_id`.
    pub fn new(model_id: u32) -> Self {
        let mut d = Self(FNV_OFFSET);
        d.update(&model_id.to_le_bytes());
        d
    }
    /// Feeds more input bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
        self.0 = h;
    }
    /// The seed for [`fill_output`].
    pub fn finish(self) -> u64 {
        self.0
    }
}

/// One step of splitmix64 (Steele, Lea, Flood 2014), used as a counter-mode
/// generator.
pub const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Writes output bytes `start .. start + out.len()` for `seed` into `out`.
pub fn fill_output(seed: u64, start: u64, out: &mut [u8]) {
    for (k, byte) in out.iter_mut().enumerate() {
        let i = start + k as u64;
        let word = splitmix64(seed.wrapping_add(i / 8));
        *byte = word.to_le_bytes()[(i % 8) as usize];
    }
}

/// Computes the whole expected output for `input` in one go (for clients
/// and tests).
pub fn expected_output(model_id: u32, input: &[u8], out: &mut [u8]) {
    let mut d = Digest::new(model_id);
    d.update(input);
    fill_output(d.finish(), 0, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_equals_whole() {
        let input: std::vec::Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut whole = [0u8; 77];
        expected_output(3, &input, &mut whole);
        let mut d = Digest::new(3);
        for c in input.chunks(13) {
            d.update(c);
        }
        let seed = d.finish();
        let mut parts = [0u8; 77];
        for (n, c) in parts.chunks_mut(10).enumerate() {
            fill_output(seed, n as u64 * 10, c);
        }
        assert_eq!(whole, parts);
    }

    #[test]
    fn depends_on_model_and_input() {
        let mut a = [0u8; 16];
        let mut b = [0u8; 16];
        expected_output(1, b"abc", &mut a);
        expected_output(2, b"abc", &mut b);
        assert_ne!(a, b);
        expected_output(1, b"abd", &mut b);
        assert_ne!(a, b);
    }
}
