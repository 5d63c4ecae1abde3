//! Tensors: an element type, a shape and the values.

use crate::DType;
use crate::error::ShapeError;

/// The values of a tensor, row-major.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// Values of a floating type, rounded to its precision.
    F32(Vec<f32>),
    /// Values of an integer type or `Bool` (0 or 1).
    I64(Vec<i64>),
}

impl Data {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::I64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A dense tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Data,
}

/// Number of elements of a shape, or `None` when it overflows `usize`.
pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Tensor {
    /// A tensor from its parts. The data's variant must match the type (floats
    /// in [`Data::F32`], the rest in [`Data::I64`]) and its length the shape.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Data) -> Result<Tensor, ShapeError> {
        let n =
            numel(&shape).ok_or_else(|| ShapeError::new(format!("shape {shape:?} overflows")))?;
        let variant_ok = matches!(
            (&data, dtype.is_float()),
            (Data::F32(_), true) | (Data::I64(_), false)
        );
        if !variant_ok {
            return Err(ShapeError::new(format!(
                "{dtype} values stored in the wrong variant"
            )));
        }
        if data.len() != n {
            return Err(ShapeError::new(format!(
                "shape {shape:?} needs {n} elements, the data has {}",
                data.len()
            )));
        }
        let mut t = Tensor { dtype, shape, data };
        t.normalise();
        Ok(t)
    }

    /// An `f32` tensor.
    pub fn f32(shape: Vec<usize>, values: Vec<f32>) -> Result<Tensor, ShapeError> {
        Tensor::new(DType::F32, shape, Data::F32(values))
    }

    /// An `i64` tensor.
    pub fn i64(shape: Vec<usize>, values: Vec<i64>) -> Result<Tensor, ShapeError> {
        Tensor::new(DType::I64, shape, Data::I64(values))
    }

    /// A one-dimensional `i64` tensor.
    pub fn i64_vec(values: Vec<i64>) -> Tensor {
        let n = values.len();
        Tensor {
            dtype: DType::I64,
            shape: vec![n],
            data: Data::I64(values),
        }
    }

    /// A scalar `f32` tensor (shape `[]`).
    pub fn scalar_f32(x: f32) -> Tensor {
        Tensor {
            dtype: DType::F32,
            shape: vec![],
            data: Data::F32(vec![x]),
        }
    }

    /// A tensor of `n` zeros of type `dtype` and shape `shape`.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Result<Tensor, ShapeError> {
        let n =
            numel(&shape).ok_or_else(|| ShapeError::new(format!("shape {shape:?} overflows")))?;
        let data = if dtype.is_float() {
            Data::F32(vec![0.0; n])
        } else {
            Data::I64(vec![0; n])
        };
        Ok(Tensor { dtype, shape, data })
    }

    /// Rounds floats to the type's precision and integers to its range.
    fn normalise(&mut self) {
        match (&mut self.data, self.dtype) {
            (Data::F32(v), DType::F16 | DType::BF16) => {
                let dt = self.dtype;
                v.iter_mut().for_each(|x| *x = dt.round(*x));
            }
            (Data::I64(v), DType::I32) => v.iter_mut().for_each(|x| *x = i64::from(*x as i32)),
            (Data::I64(v), DType::Bool) => v.iter_mut().for_each(|x| *x = i64::from(*x != 0)),
            _ => {}
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The values.
    pub fn data(&self) -> &Data {
        &self.data
    }

    /// Bytes the tensor takes at its element type.
    pub fn bytes(&self) -> usize {
        self.len() * self.dtype.size()
    }

    /// The values as floats, or `None` for an integer tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            Data::I64(_) => None,
        }
    }

    /// The values as integers, or `None` for a floating tensor.
    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.data {
            Data::I64(v) => Some(v),
            Data::F32(_) => None,
        }
    }

    /// The values as integers, converting floats (for shape-like inputs).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        match &self.data {
            Data::I64(v) => v.clone(),
            Data::F32(v) => v.iter().map(|&x| x as i64).collect(),
        }
    }

    /// The values as floats, converting integers.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            Data::F32(v) => v.clone(),
            Data::I64(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }

    /// The same values with another shape of as many elements.
    pub fn reshaped(mut self, shape: Vec<usize>) -> Result<Tensor, ShapeError> {
        if numel(&shape) != Some(self.len()) {
            return Err(ShapeError::new(format!(
                "cannot view {} elements as {shape:?}",
                self.len()
            )));
        }
        self.shape = shape;
        Ok(self)
    }

    /// The values converted to another element type (ONNX `Cast`: floats to
    /// integers truncate toward zero, saturating; anything to `Bool` is
    /// `x != 0`).
    pub fn cast(&self, to: DType) -> Tensor {
        let data = match (&self.data, to.is_float()) {
            (Data::F32(v), true) => Data::F32(v.clone()),
            (Data::I64(v), true) => Data::F32(v.iter().map(|&x| x as f32).collect()),
            (Data::F32(v), false) => Data::I64(
                v.iter()
                    .map(|&x| {
                        if to == DType::Bool {
                            i64::from(x != 0.0)
                        } else {
                            x as i64
                        }
                    })
                    .collect(),
            ),
            (Data::I64(v), false) => Data::I64(v.clone()),
        };
        let mut t = Tensor {
            dtype: to,
            shape: self.shape.clone(),
            data,
        };
        t.normalise();
        t
    }

    /// Splits the tensor into its parts.
    pub fn into_parts(self) -> (DType, Vec<usize>, Data) {
        (self.dtype, self.shape, self.data)
    }
}
