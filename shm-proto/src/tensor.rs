//! Typed tensors on the wire: element-type codes, the tensor table a typed
//! request points at, the bounds a peer must respect, and the detail a
//! refusal carries.
//!
//! # A typed request
//!
//! A [`crate::Request`] with [`FLAG_TENSOR_TABLE`] set in `flags` carries a
//! batch size in `batch` (1 up to the model's `max_batch`) and locates a
//! *tensor table* in the arena with `input_off`/`input_len`; its
//! `output_off` and `output_len` are 0. The table is
//! `(inputs + outputs) × 16` bytes: one entry per model input, then one per
//! model output, in the model's order (as `ModelInfo` lists them), each
//!
//! ```text
//! u64 LE  off   offset of the tensor in the arena
//! u64 LE  len   its length in bytes: exactly the tensor's size at `batch`
//! ```
//!
//! The table needs no alignment. The daemon copies it out of the arena once
//! and validates the copy: the count matches the model, every span lies in
//! the arena, every length is the tensor's size at the batch (elements of
//! the dims, with dim 0 times the batch when the tensor is batched, times
//! the element size), and no output overlaps another output or an input
//! (inputs may overlap each other: the daemon only reads them).
//!
//! # An untyped request
//!
//! Without the flag a request is the single-tensor request of protocol 2:
//! one input span, one output span, batch 1 (`batch` is 0 or 1). A model
//! known only by its manifest (one `u8` tensor each way) takes it exactly as
//! before: `input_len` equal to the input's size, `output_len` at least the
//! output's. A typed model takes it only when it has one input and one
//! output, at batch 1, with both lengths exactly the tensors' sizes;
//! a model with more tensors refuses it with
//! [`crate::status::BAD_TENSOR_TABLE`] ([`TABLE_REQUIRED`]).
//!
//! # The detail of a refusal
//!
//! [`crate::Completion::detail`] holds two packed [`Detail`] words on a
//! refusal: `detail[0]` names what was wrong and what was expected,
//! `detail[1]` what the request gave (or, for an overlap, the other tensor).
//! Each word is
//!
//! ```text
//! bits  0..48  value (saturated at VALUE_MAX)
//! bits 48..56  tensor index (in its direction), or a TABLE_* reason
//! bits 56..64  role: ROLE_NONE, ROLE_INPUT, ROLE_OUTPUT, ROLE_BATCH, ROLE_TABLE
//! ```
//!
//! | status | `detail[0]` | `detail[1]` |
//! |---|---|---|
//! | `BAD_BATCH` | `ROLE_BATCH`, value = the model's `max_batch` | `ROLE_BATCH`, value = the batch given |
//! | `BAD_TENSOR_LEN` | tensor, value = its size at the batch | same tensor, value = the length given |
//! | `BAD_INPUT_SPAN`, `BAD_OUTPUT_SPAN` (typed) | tensor, value = the arena's size | same tensor, value = the span's end (`off + len`) |
//! | `BAD_TENSOR_TABLE`, [`TABLE_LEN`] | `ROLE_TABLE`, value = the table bytes the model needs | `ROLE_TABLE`, value = `input_len` given |
//! | `BAD_TENSOR_TABLE`, [`TABLE_OUTSIDE`] | `ROLE_TABLE`, value = the arena's size | `ROLE_TABLE`, value = the table's end |
//! | `BAD_TENSOR_TABLE`, [`TABLE_OUTPUT_FIELDS`] | `ROLE_TABLE`, value = 0 | `ROLE_TABLE`, value = `output_len` given |
//! | `BAD_TENSOR_TABLE`, [`TABLE_REQUIRED`] | `ROLE_TABLE`, value = the model's inputs | `ROLE_TABLE`, value = the model's outputs |
//! | `BAD_TENSOR_TABLE`, overlap | output, value = its offset | the tensor it overlaps, value = that one's offset |
//!
//! Every other refusal leaves `detail` zero.

/// `Request::flags`: `input_off`/`input_len` locate a tensor table.
pub const FLAG_TENSOR_TABLE: u16 = 1;
/// Every flag bit defined; any other bit is refused with `BAD_FLAGS`.
pub const KNOWN_FLAGS: u16 = FLAG_TENSOR_TABLE;

/// Bytes of one tensor-table entry (`off`, `len`).
pub const TABLE_ENTRY_BYTES: usize = 16;
/// Most inputs, and most outputs, a model may declare on the wire.
pub const MAX_TENSORS: usize = 64;
/// Most dimensions of one tensor.
pub const MAX_DIMS: usize = 8;
/// Longest tensor name, in bytes of UTF-8.
pub const MAX_TENSOR_NAME: usize = 128;
/// Largest tensor table: [`MAX_TENSORS`] inputs and outputs.
pub const MAX_TABLE_BYTES: usize = 2 * MAX_TENSORS * TABLE_ENTRY_BYTES;

/// Element type code: untyped bytes.
pub const ELEM_U8: u32 = 0;
/// Element type code: IEEE 754 binary32.
pub const ELEM_F32: u32 = 1;
/// Element type code: IEEE 754 binary16.
pub const ELEM_F16: u32 = 2;
/// Element type code: bfloat16.
pub const ELEM_BF16: u32 = 3;
/// Element type code: signed 64-bit integer.
pub const ELEM_I64: u32 = 4;
/// Element type code: signed 32-bit integer.
pub const ELEM_I32: u32 = 5;
/// Element type code: one byte, 0 or 1.
pub const ELEM_BOOL: u32 = 6;

/// Bytes per element of a type code; `None` for an unknown code.
pub const fn elem_size(code: u32) -> Option<u64> {
    match code {
        ELEM_U8 | ELEM_BOOL => Some(1),
        ELEM_F16 | ELEM_BF16 => Some(2),
        ELEM_F32 | ELEM_I32 => Some(4),
        ELEM_I64 => Some(8),
        _ => None,
    }
}

/// Short name of a type code (`"f32"`, `"i64"`, ...); `None` when unknown.
pub const fn elem_name(code: u32) -> Option<&'static str> {
    match code {
        ELEM_U8 => Some("u8"),
        ELEM_F32 => Some("f32"),
        ELEM_F16 => Some("f16"),
        ELEM_BF16 => Some("bf16"),
        ELEM_I64 => Some("i64"),
        ELEM_I32 => Some("i32"),
        ELEM_BOOL => Some("bool"),
        _ => None,
    }
}

/// Bytes of a tensor of `elem` with `dims` (at batch 1) at batch `batch`:
/// the product of the dims, with dim 0 multiplied by `batch` when
/// `batched`, times the element size. `None` on overflow or an unknown
/// element code.
pub fn tensor_bytes(elem: u32, dims: &[u64], batched: bool, batch: u32) -> Option<u64> {
    let per = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let n = if batched {
        per.checked_mul(u64::from(batch))?
    } else {
        per
    };
    n.checked_mul(elem_size(elem)?)
}

/// Writes table entry `(off, len)` into `out` (16 bytes).
pub fn write_entry(out: &mut [u8; TABLE_ENTRY_BYTES], off: u64, len: u64) {
    out[..8].copy_from_slice(&off.to_le_bytes());
    out[8..].copy_from_slice(&len.to_le_bytes());
}

/// Reads table entry `i` of `table` as `(off, len)`; `None` past its end.
pub fn read_entry(table: &[u8], i: usize) -> Option<(u64, u64)> {
    let start = i.checked_mul(TABLE_ENTRY_BYTES)?;
    let e = table.get(start..start.checked_add(TABLE_ENTRY_BYTES)?)?;
    let mut off = [0u8; 8];
    let mut len = [0u8; 8];
    off.copy_from_slice(&e[..8]);
    len.copy_from_slice(&e[8..]);
    Some((u64::from_le_bytes(off), u64::from_le_bytes(len)))
}

/// [`Detail::role`]: nothing named.
pub const ROLE_NONE: u8 = 0;
/// [`Detail::role`]: an input tensor; [`Detail::index`] is its index.
pub const ROLE_INPUT: u8 = 1;
/// [`Detail::role`]: an output tensor; [`Detail::index`] is its index.
pub const ROLE_OUTPUT: u8 = 2;
/// [`Detail::role`]: the batch size.
pub const ROLE_BATCH: u8 = 3;
/// [`Detail::role`]: the tensor table; [`Detail::index`] is a `TABLE_*`
/// reason.
pub const ROLE_TABLE: u8 = 4;

/// Table reason: its length is not 16 bytes per model tensor.
pub const TABLE_LEN: u8 = 0;
/// Table reason: the table lies outside the arena.
pub const TABLE_OUTSIDE: u8 = 1;
/// Table reason: `output_off` or `output_len` is not 0 in a typed request.
pub const TABLE_OUTPUT_FIELDS: u8 = 2;
/// Table reason: an untyped request to a model with more than one input or
/// output; it needs a typed request.
pub const TABLE_REQUIRED: u8 = 3;

/// Largest value a [`Detail`] word holds; larger values are saturated to it.
pub const VALUE_MAX: u64 = (1 << 48) - 1;

/// One word of [`crate::Completion::detail`] (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Detail {
    /// `ROLE_*`.
    pub role: u8,
    /// Tensor index, or a `TABLE_*` reason.
    pub index: u8,
    /// The value (bytes, a batch, a count), at most [`VALUE_MAX`].
    pub value: u64,
}

impl Detail {
    /// A detail word; `value` saturates at [`VALUE_MAX`].
    pub const fn new(role: u8, index: u8, value: u64) -> Self {
        Self {
            role,
            index,
            value: if value > VALUE_MAX { VALUE_MAX } else { value },
        }
    }
    /// The packed word.
    pub const fn pack(self) -> u64 {
        let v = if self.value > VALUE_MAX {
            VALUE_MAX
        } else {
            self.value
        };
        ((self.role as u64) << 56) | ((self.index as u64) << 48) | v
    }
    /// Unpacks a word (any bit pattern is some detail).
    pub const fn unpack(word: u64) -> Self {
        Self {
            role: (word >> 56) as u8,
            index: (word >> 48) as u8,
            value: word & VALUE_MAX,
        }
    }
    /// Whether the value was saturated (the true value is this or more).
    pub const fn saturated(self) -> bool {
        self.value == VALUE_MAX
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn detail_packs_and_saturates() {
        let d = Detail::new(ROLE_OUTPUT, 3, 1024);
        assert_eq!(d.pack(), (2u64 << 56) | (3u64 << 48) | 1024);
        assert_eq!(Detail::unpack(d.pack()), d);
        let big = Detail::new(ROLE_INPUT, 0, u64::MAX);
        assert!(big.saturated());
        assert_eq!(Detail::unpack(big.pack()).value, VALUE_MAX);
        assert_eq!(Detail::unpack(0), Detail::default());
    }

    #[test]
    fn table_entries_round_trip() {
        let mut t = [0u8; 32];
        let mut e = [0u8; TABLE_ENTRY_BYTES];
        write_entry(&mut e, 64, 512);
        t[16..].copy_from_slice(&e);
        assert_eq!(read_entry(&t, 1), Some((64, 512)));
        assert_eq!(read_entry(&t, 0), Some((0, 0)));
        assert_eq!(read_entry(&t, 2), None);
        assert_eq!(read_entry(&t, usize::MAX), None);
    }

    #[test]
    fn sizes_follow_the_batch_only_when_batched() {
        assert_eq!(tensor_bytes(ELEM_I64, &[1, 128], true, 1), Some(1024));
        assert_eq!(tensor_bytes(ELEM_I64, &[1, 128], true, 4), Some(4096));
        assert_eq!(tensor_bytes(ELEM_F32, &[2, 3], false, 8), Some(24));
        assert_eq!(tensor_bytes(ELEM_F32, &[u64::MAX, 2], false, 1), None);
        assert_eq!(tensor_bytes(99, &[1], false, 1), None);
        for code in 0..7 {
            assert!(elem_size(code).is_some() && elem_name(code).is_some());
        }
        assert_eq!(elem_size(7), None);
    }
}
