//! The function the embedded simulated GPU computes.
//!
//! The simulator has no real kernels, but clients must still be able to tell
//! that *their* input produced *their* output in the right place. So the
//! simulated device writes a deterministic function of `(model id, input
//! bytes)` into the output span. Exactly (all arithmetic modulo 2⁶⁴):
//!
//! 1. `seed` = FNV-1a-64 over the 4 bytes of `model_id` in little-endian
//!    order, then every input byte: start from `h = 0xcbf29ce484222325`;
//!    for each byte `b`, `h = (h ^ b) * 0x100000001b3`.
//! 2. Output byte `i` (for `i = 0, 1, …`) is byte `i % 8` of the `u64`
//!    `splitmix64(seed + i / 8)` in little-endian order (byte 0 = bits 0–7),
//!    where [`splitmix64`] is the standard finaliser with increment
//!    `0x9e3779b97f4a7c15` and multipliers `0xbf58476d1ce4e5b9`,
//!    `0x94d049bb133111eb` (shifts 30, 27, 31).
//!
//! Edge cases: an empty input hashes only the 4 model-id bytes; an output
//! length that is not a multiple of 8 uses the first bytes of the last word;
//! a shorter output is a prefix of a longer one (the length is not hashed).
//! The daemon writes exactly the model's `output_bytes` at the start of the
//! output span (more room in the span is left untouched) and reports that
//! length in the completion.
//!
//! Known answer (the unit test `known_answer` checks it; docs/c-api.md
//! quotes it): model 7, input `b"abc"`, 12 output bytes: `seed =
//! 0x19cdef7527e410e6`, `splitmix64(seed) = 0x3487bf1e23c08a3a`,
//! `splitmix64(seed + 1) = 0xbd7cc30c4b4d5803`, output
//! `3a 8a c0 23 1e bf 87 34 03 58 4d 4b`.
//!
//! Both steps are streamable ([`Digest`], [`fill_output`]) so the daemon can
//! work through a large tensor in chunks without a copy of the whole input.
//!
//! # Typed requests
//!
//! A typed request ([`crate::tensor`]) has several inputs and outputs and a
//! batch size. Output `k` (0-based, in the model's order) gets the same
//! counter-mode bytes as above from its own seed:
//!
//! `seed_k` = FNV-1a-64 (as for the untyped seed) over the 4 bytes of `model_id`, the
//! 4 bytes of `batch` (`u32` LE), every byte of input 0, then input 1, ...
//! (the inputs concatenated in the model's order), then the 4 bytes of `k`
//! (`u32` LE).
//!
//! Each output span is filled whole (its length is exactly the output's
//! size at the batch), from byte 0 of the counter stream. Outputs therefore
//! differ from each other, from the same inputs at another batch, and from
//! the untyped function; a client that mixes up two outputs sees it.
//! [`expected_typed_output`] computes one output; an untyped request keeps
//! the function above. Known answer (unit test `typed_known_answer`): model
//! 7, batch 2, inputs `b"ab"` and `b"c"`, output 1 of 8 bytes: `seed_1 =
//! 0xbd4d31d844e9afb1`.

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

/// One step of splitmix64 (Steele, Lea, Flood 2014): the word function of
/// the output ([`fill_output`]), part of the wire protocol. Random numbers
/// elsewhere in sluice come from the `sluice-rng` crate.
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

/// The seed of output `index` of a typed request (see the module docs).
pub fn typed_seed(model_id: u32, batch: u32, inputs: &[&[u8]], index: u32) -> u64 {
    let mut d = typed_digest(model_id, batch);
    for i in inputs {
        d.update(i);
    }
    typed_finish(d, index)
}

/// Starts the digest of a typed request's inputs: the model id and the
/// batch; feed the inputs in order with [`Digest::update`], then take each
/// output's seed with [`typed_finish`].
pub fn typed_digest(model_id: u32, batch: u32) -> Digest {
    let mut d = Digest::new(model_id);
    d.update(&batch.to_le_bytes());
    d
}

/// The seed of output `index` from the digest of every input.
pub fn typed_finish(mut inputs_digest: Digest, index: u32) -> u64 {
    inputs_digest.update(&index.to_le_bytes());
    inputs_digest.finish()
}

/// Computes output `index` of a typed request whole, into `out` (its
/// length is the output's size at `batch`).
pub fn expected_typed_output(
    model_id: u32,
    batch: u32,
    inputs: &[&[u8]],
    index: u32,
    out: &mut [u8],
) {
    fill_output(typed_seed(model_id, batch, inputs, index), 0, out);
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

    /// The vectors docs/c-api.md and the C reference
    /// (client-lib/examples/expected_output.c) quote.
    #[test]
    fn known_answer() {
        let mut d = Digest::new(7);
        d.update(b"abc");
        let seed = d.finish();
        assert_eq!(seed, 0x19cd_ef75_27e4_10e6);
        assert_eq!(splitmix64(seed), 0x3487_bf1e_23c0_8a3a);
        assert_eq!(splitmix64(seed + 1), 0xbd7c_c30c_4b4d_5803);
        let mut out = [0u8; 12];
        expected_output(7, b"abc", &mut out);
        assert_eq!(
            out,
            [
                0x3a, 0x8a, 0xc0, 0x23, 0x1e, 0xbf, 0x87, 0x34, 0x03, 0x58, 0x4d, 0x4b
            ]
        );
        // Empty input: only the model id is hashed.
        assert_eq!(Digest::new(0).finish(), 0x4d25_767f_9dce_13f5);
        let mut out = [0u8; 8];
        expected_output(0, b"", &mut out);
        assert_eq!(out, 0x6683_21fe_5c9f_6e52u64.to_le_bytes());
        // Length 5: a prefix of the first word; and of any longer output.
        let mut short = [0u8; 5];
        expected_output(7, b"", &mut short);
        assert_eq!(short, [0x75, 0x23, 0x81, 0xc6, 0xf1]);
        let mut long = [0u8; 16];
        expected_output(7, b"", &mut long);
        assert_eq!(long[..5], short);
        // Zero output bytes: nothing written, nothing to panic about.
        expected_output(7, b"abc", &mut []);
    }

    #[test]
    fn typed_known_answer() {
        let seed = typed_seed(7, 2, &[b"ab", b"c"], 1);
        // The definition spelled out: FNV-1a over the bytes in order.
        let mut d = Digest::new(7);
        d.update(&[2, 0, 0, 0, b'a', b'b', b'c', 1, 0, 0, 0]);
        assert_eq!(seed, d.finish());
        assert_eq!(seed, 0xbd4d_31d8_44e9_afb1);
        let mut out = [0u8; 8];
        expected_typed_output(7, 2, &[b"ab", b"c"], 1, &mut out);
        assert_eq!(out, splitmix64(seed).to_le_bytes());
        // Outputs differ by index and by batch, and from the untyped function.
        assert_ne!(seed, typed_seed(7, 2, &[b"ab", b"c"], 0));
        assert_ne!(seed, typed_seed(7, 1, &[b"ab", b"c"], 1));
        let mut untyped = [0u8; 8];
        expected_output(7, b"abc", &mut untyped);
        assert_ne!(out, untyped);
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
