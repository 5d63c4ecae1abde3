//! What a model takes and gives: named, typed tensors with the batch
//! dimension marked ([`ModelIo`]).
//!
//! A model built from a graph (an ONNX file) declares its real inputs and
//! outputs; a model known only by its manifest takes one untyped byte
//! tensor each way ([`ModelIo::untyped`]), at batch 1.

/// Element type of a tensor on the wire. The `u32` codes are part of the
/// protocol (`shm_proto`), so they never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ElemType {
    /// Untyped bytes.
    U8 = 0,
    /// IEEE 754 binary32.
    F32 = 1,
    /// IEEE 754 binary16.
    F16 = 2,
    /// bfloat16.
    BF16 = 3,
    /// Signed 64-bit integer.
    I64 = 4,
    /// Signed 32-bit integer.
    I32 = 5,
    /// One byte, 0 or 1.
    Bool = 6,
}

impl ElemType {
    /// Every element type, in code order.
    pub const ALL: [ElemType; 7] = [
        Self::U8,
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::I64,
        Self::I32,
        Self::Bool,
    ];

    /// Decodes a wire code; `None` for an unknown one.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as u32 == code)
    }

    /// The wire code.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Self::U8 | Self::Bool => 1,
            Self::F16 | Self::BF16 => 2,
            Self::F32 | Self::I32 => 4,
            Self::I64 => 8,
        }
    }

    /// Short name: `"f32"`, `"i64"`, ...
    pub fn name(self) -> &'static str {
        match self {
            Self::U8 => "u8",
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::I64 => "i64",
            Self::I32 => "i32",
            Self::Bool => "bool",
        }
    }
}

impl std::fmt::Display for ElemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One input or output of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// The graph's name for it.
    pub name: String,
    /// Element type.
    pub elem: ElemType,
    /// Dimensions at batch 1; when [`TensorSpec::batched`], `dims[0]` is
    /// the batch dimension and holds 1.
    pub dims: Vec<u64>,
    /// Whether the first dimension is the batch (it grows with a
    /// request's batch size); otherwise the tensor's size is fixed.
    pub batched: bool,
}

impl TensorSpec {
    /// Elements at batch size `batch`; `None` on overflow.
    pub fn elements(&self, batch: u32) -> Option<u64> {
        let per = self.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        if self.batched {
            per.checked_mul(u64::from(batch))
        } else {
            Some(per)
        }
    }

    /// Bytes at batch size `batch`; `None` on overflow.
    pub fn bytes(&self, batch: u32) -> Option<u64> {
        self.elements(batch)?.checked_mul(self.elem.size())
    }

    /// The shape as text with the batch dimension written `N`, e.g.
    /// `f32[N,3,224,224]`.
    pub fn describe(&self) -> String {
        let dims: Vec<String> = self
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| {
                if i == 0 && self.batched {
                    "N".to_owned()
                } else {
                    d.to_string()
                }
            })
            .collect();
        format!("{}[{}]", self.elem, dims.join(","))
    }
}

/// A model's inputs and outputs, in the graph's order, and the largest
/// batch a request may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelIo {
    /// Inputs, in order.
    pub inputs: Vec<TensorSpec>,
    /// Outputs, in order.
    pub outputs: Vec<TensorSpec>,
    /// Largest batch size a request may carry (at least 1).
    pub max_batch: u32,
}

impl ModelIo {
    /// One untyped input of `input_bytes` bytes called `input` and one
    /// untyped output of `output_bytes` called `output`, batch 1: what a
    /// model known only by its manifest takes.
    pub fn untyped(input_bytes: u64, output_bytes: u64) -> Self {
        let one = |name: &str, bytes: u64| TensorSpec {
            name: name.to_owned(),
            elem: ElemType::U8,
            dims: vec![bytes],
            batched: false,
        };
        Self {
            inputs: vec![one("input", input_bytes)],
            outputs: vec![one("output", output_bytes)],
            max_batch: 1,
        }
    }

    /// Whether this is [`ModelIo::untyped`]'s shape: one `u8` tensor each
    /// way, batch 1.
    pub fn is_untyped(&self) -> bool {
        self.max_batch == 1
            && self.inputs.len() == 1
            && self.outputs.len() == 1
            && self.inputs[0].elem == ElemType::U8
            && self.outputs[0].elem == ElemType::U8
    }

    /// Total input bytes at `batch`; `None` on overflow.
    pub fn input_bytes(&self, batch: u32) -> Option<u64> {
        self.inputs
            .iter()
            .try_fold(0u64, |a, t| a.checked_add(t.bytes(batch)?))
    }

    /// Total output bytes at `batch`; `None` on overflow.
    pub fn output_bytes(&self, batch: u32) -> Option<u64> {
        self.outputs
            .iter()
            .try_fold(0u64, |a, t| a.checked_add(t.bytes(batch)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for t in ElemType::ALL {
            assert_eq!(ElemType::from_code(t.code()), Some(t));
        }
        assert_eq!(ElemType::from_code(7), None);
        assert_eq!(ElemType::from_code(u32::MAX), None);
    }

    #[test]
    fn sizes_scale_with_the_batch_only_when_batched() {
        let img = TensorSpec {
            name: "x".into(),
            elem: ElemType::F32,
            dims: vec![1, 3, 4, 4],
            batched: true,
        };
        assert_eq!(img.bytes(1), Some(192));
        assert_eq!(img.bytes(8), Some(1536));
        assert_eq!(img.describe(), "f32[N,3,4,4]");
        let fixed = TensorSpec {
            batched: false,
            ..img.clone()
        };
        assert_eq!(fixed.bytes(8), Some(192));
        assert_eq!(fixed.describe(), "f32[1,3,4,4]");
        let huge = TensorSpec {
            dims: vec![1, u64::MAX, 2],
            ..img
        };
        assert_eq!(huge.bytes(1), None);
    }

    #[test]
    fn untyped_io_is_one_byte_tensor_each_way() {
        let io = ModelIo::untyped(100, 10);
        assert!(io.is_untyped());
        assert_eq!(io.input_bytes(1), Some(100));
        assert_eq!(io.output_bytes(1), Some(10));
    }
}
