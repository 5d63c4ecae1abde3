//! Element types.

use std::fmt;

/// The element type of a tensor.
///
/// Floating types are held as `f32` in memory ([`crate::Data::F32`]) with
/// their values rounded to the type's precision; integer types and `Bool`
/// as `i64` ([`crate::Data::I64`]), `Bool` as 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit signed integer.
    I64,
    /// 32-bit signed integer.
    I32,
    /// Boolean.
    Bool,
}

impl DType {
    /// Whether the type is held as `f32` values.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes of one element in a file or on a device.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// The lower-case name used in messages and metadata (`f32`, `i64`, …).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::Bool => "bool",
        }
    }

    /// Rounds an `f32` to this type's precision (floating types only; the
    /// others return `x` unchanged).
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F16 => half::f16::from_f32(x).to_f32(),
            DType::BF16 => half::bf16::from_f32(x).to_f32(),
            _ => x,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
