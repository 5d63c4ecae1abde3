//! Tensors from `TensorProto`s: inline data of every encoding, and external
//! data files confined to the model's own folder.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use sluice_graph::{DType, Data, Tensor, numel};

use crate::proto::{TensorProto, data_type};

/// Largest tensor rank sluice reads.
pub const MAX_RANK: usize = 32;

/// The sluice type of an ONNX element type, or an error naming it.
pub fn dtype_of(t: i32) -> Result<DType, String> {
    Ok(match t {
        data_type::FLOAT | data_type::DOUBLE => DType::F32,
        data_type::FLOAT16 => DType::F16,
        data_type::BFLOAT16 => DType::BF16,
        data_type::INT64 => DType::I64,
        data_type::INT32 => DType::I32,
        data_type::BOOL => DType::Bool,
        other => {
            return Err(format!(
                "element type {} is not supported (sluice takes FLOAT, FLOAT16, BFLOAT16, DOUBLE as float, INT64, INT32, BOOL)",
                data_type::name(other)
            ));
        }
    })
}

/// Bytes per element of an ONNX type as stored in `raw_data`.
fn raw_width(t: i32) -> usize {
    match t {
        data_type::DOUBLE | data_type::INT64 => 8,
        data_type::FLOAT | data_type::INT32 => 4,
        data_type::FLOAT16 | data_type::BFLOAT16 => 2,
        _ => 1,
    }
}

/// A tensor's dimensions, checked.
pub fn dims_of(dims: &[i64]) -> Result<Vec<usize>, String> {
    if dims.len() > MAX_RANK {
        return Err(format!(
            "has rank {}, above the {MAX_RANK} sluice takes",
            dims.len()
        ));
    }
    dims.iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| format!("has the negative dimension {d} in {dims:?}"))
        })
        .collect()
}

/// Decodes a `TensorProto`; external data is read from below `dir` only.
/// Errors do not name the tensor (the caller does).
pub fn read_tensor(tp: &TensorProto, dir: &Path) -> Result<Tensor, String> {
    let dtype = dtype_of(tp.data_type)?;
    let shape = dims_of(&tp.dims)?;
    let n = numel(&shape)
        .ok_or_else(|| format!("has dimensions {:?} whose element count overflows", tp.dims))?;
    let width = raw_width(tp.data_type);
    let external = if tp.data_location == 1 {
        Some(read_external(tp, dir, n, width)?)
    } else {
        None
    };
    let bytes: Option<&[u8]> = external.as_deref().or(if tp.raw_data.is_empty() {
        None
    } else {
        Some(&tp.raw_data)
    });
    let data = match bytes {
        Some(b) => {
            let want = n as u128 * width as u128;
            if b.len() as u128 != want {
                return Err(format!(
                    "claims {n} elements of {} ({want} bytes) for dimensions {:?} but holds {} bytes",
                    data_type::name(tp.data_type),
                    tp.dims,
                    b.len()
                ));
            }
            decode_raw(tp.data_type, b)
        }
        None => typed(tp, n)?,
    };
    Tensor::new(dtype, shape, data).map_err(|e| e.0)
}

fn decode_raw(t: i32, b: &[u8]) -> Data {
    match t {
        data_type::FLOAT => Data::F32(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        data_type::DOUBLE => Data::F32(
            b.chunks_exact(8)
                .map(|c| {
                    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                })
                .collect(),
        ),
        data_type::FLOAT16 => Data::F32(
            b.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        data_type::BFLOAT16 => Data::F32(
            b.chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        data_type::INT64 => Data::I64(
            b.chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
        data_type::INT32 => Data::I64(
            b.chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        _ => Data::I64(b.iter().map(|&x| i64::from(x != 0)).collect()),
    }
}

fn typed(tp: &TensorProto, n: usize) -> Result<Data, String> {
    let count = |len: usize, field: &str| -> Result<(), String> {
        if len == n {
            Ok(())
        } else {
            Err(format!(
                "claims {n} elements for dimensions {:?} but its {field} holds {len}",
                tp.dims
            ))
        }
    };
    Ok(match tp.data_type {
        data_type::FLOAT => {
            count(tp.float_data.len(), "float_data")?;
            Data::F32(tp.float_data.clone())
        }
        data_type::DOUBLE => {
            count(tp.double_data.len(), "double_data")?;
            Data::F32(tp.double_data.iter().map(|&x| x as f32).collect())
        }
        data_type::FLOAT16 | data_type::BFLOAT16 => {
            count(tp.int32_data.len(), "int32_data")?;
            let bf = tp.data_type == data_type::BFLOAT16;
            Data::F32(
                tp.int32_data
                    .iter()
                    .map(|&x| {
                        let bits = x as u16;
                        if bf {
                            half::bf16::from_bits(bits).to_f32()
                        } else {
                            half::f16::from_bits(bits).to_f32()
                        }
                    })
                    .collect(),
            )
        }
        data_type::INT64 => {
            count(tp.int64_data.len(), "int64_data")?;
            Data::I64(tp.int64_data.clone())
        }
        _ => {
            count(tp.int32_data.len(), "int32_data")?;
            Data::I64(tp.int32_data.iter().map(|&x| i64::from(x)).collect())
        }
    })
}

/// Resolves an external-data location against the model's folder: relative,
/// no `..`, and after following symbolic links still inside the folder.
pub fn confine(dir: &Path, location: &str) -> Result<PathBuf, String> {
    if location.is_empty() {
        return Err("has external data with an empty location".into());
    }
    let rel = Path::new(location);
    if rel.is_absolute() {
        return Err(format!(
            "has external data at the absolute path '{location}'; it must be a path relative to the model's folder"
        ));
    }
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "has external data at '{location}', which leaves the model's folder ('..'); it must stay inside it"
        ));
    }
    let root = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve the model's folder {}: {e}", dir.display()))?;
    let full = root.join(rel);
    let real = full.canonicalize().map_err(|e| {
        format!(
            "has external data '{location}' that cannot be opened ({}): {e}",
            full.display()
        )
    })?;
    if !real.starts_with(&root) {
        return Err(format!(
            "has external data '{location}' that resolves through a symbolic link to {}, outside the model's folder {}",
            real.display(),
            root.display()
        ));
    }
    if !real.is_file() {
        return Err(format!(
            "has external data '{location}' that is not a regular file"
        ));
    }
    Ok(real)
}

fn read_external(tp: &TensorProto, dir: &Path, n: usize, width: usize) -> Result<Vec<u8>, String> {
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for kv in &tp.external_data {
        match kv.key.as_str() {
            "location" => location = Some(kv.value.as_str()),
            "offset" => {
                offset = kv.value.parse().map_err(|_| {
                    format!("has the external-data offset '{}', not a number", kv.value)
                })?
            }
            "length" => {
                length = Some(kv.value.parse::<u64>().map_err(|_| {
                    format!("has the external-data length '{}', not a number", kv.value)
                })?)
            }
            _ => {}
        }
    }
    let location = location.ok_or("has external data without a location")?;
    let path = confine(dir, location)?;
    let want = (n as u64)
        .checked_mul(width as u64)
        .ok_or("has an element count that overflows")?;
    let len = length.unwrap_or(want);
    if len != want {
        return Err(format!(
            "has external data of {len} bytes in '{location}' for {n} elements ({want} bytes)"
        ));
    }
    let mut f = File::open(&path)
        .map_err(|e| format!("cannot open its external data {}: {e}", path.display()))?;
    let size = f
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
        .len();
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(format!(
            "has external data at offset {offset}, length {len} in '{location}', past the file's end ({size} bytes)"
        ));
    }
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("cannot seek in {}: {e}", path.display()))?;
    let mut buf = vec![0u8; len as usize];
    f.read_exact(&mut buf)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(buf)
}
