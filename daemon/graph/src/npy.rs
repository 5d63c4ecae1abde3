//! Reading and writing `.npy` files (NumPy's format, version 1.0–3.0) for
//! tensors of the types sluice runs.

use std::io::{Read, Write};

use crate::{DType, Data, Tensor};

/// A `.npy` file that cannot be read as a tensor.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// Reading or writing failed.
    #[error("I/O error")]
    Io(#[from] std::io::Error),
    /// The file is not a `.npy` file sluice takes.
    #[error("{0}")]
    Format(String),
}

fn fmt_err(msg: impl Into<String>) -> NpyError {
    NpyError::Format(msg.into())
}

/// The header's value for a key (`'descr': '<f4'` gives `'<f4'`).
fn header_field<'a>(h: &'a str, key: &str) -> Option<&'a str> {
    let at = h.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = h[at..].trim_start().strip_prefix(':')?.trim_start();
    if rest.starts_with('(') {
        Some(&rest[..=rest.find(')')?])
    } else {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

/// Reads a tensor from a `.npy` byte stream. `limit` bounds the data size in
/// bytes (the caller passes the file's size, so nothing larger than the file
/// is allocated).
pub fn read(mut r: impl Read, limit: u64) -> Result<Tensor, NpyError> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic[..6] != b"\x93NUMPY" {
        return Err(fmt_err("not a .npy file (no \\x93NUMPY magic)"));
    }
    let hlen = match magic[6] {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)?;
            u64::from(u16::from_le_bytes(b))
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b)?;
            u64::from(u32::from_le_bytes(b))
        }
        v => {
            return Err(fmt_err(format!(
                ".npy version {v} is not supported (1, 2 or 3)"
            )));
        }
    };
    if hlen > 1 << 20 || hlen > limit {
        return Err(fmt_err(format!(".npy header of {hlen} bytes is too long")));
    }
    let mut h = vec![0u8; hlen as usize];
    r.read_exact(&mut h)?;
    let h = String::from_utf8_lossy(&h).into_owned();
    let descr = header_field(&h, "descr")
        .ok_or_else(|| fmt_err("header has no 'descr'"))?
        .trim_matches(|c| c == '\'' || c == '"');
    if header_field(&h, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(fmt_err(
            "Fortran-ordered arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    let shape_s = header_field(&h, "shape").ok_or_else(|| fmt_err("header has no 'shape'"))?;
    let mut shape = Vec::new();
    for part in shape_s.trim_matches(|c| c == '(' || c == ')').split(',') {
        let p = part.trim();
        if !p.is_empty() {
            shape.push(
                p.parse::<usize>()
                    .map_err(|_| fmt_err(format!("bad shape {shape_s}")))?,
            );
        }
    }
    let (dtype, width) = match descr {
        "<f4" => (DType::F32, 4),
        "<f2" => (DType::F16, 2),
        "<f8" => (DType::F32, 8),
        "<i8" => (DType::I64, 8),
        "<i4" => (DType::I32, 4),
        "|b1" => (DType::Bool, 1),
        d => {
            return Err(fmt_err(format!(
                "element type {d} is not supported (<f4, <f2, <f8, <i8, <i4, |b1)"
            )));
        }
    };
    let n = crate::tensor::numel(&shape).ok_or_else(|| fmt_err("shape overflows"))?;
    let bytes = (n as u64)
        .checked_mul(width)
        .filter(|&b| b <= limit)
        .ok_or_else(|| {
            fmt_err(format!(
                "shape {shape:?} needs more bytes than the file holds"
            ))
        })?;
    let mut raw = vec![0u8; bytes as usize];
    r.read_exact(&mut raw).map_err(|_| {
        fmt_err(format!(
            "the file ends before the {bytes} bytes of data shape {shape:?} needs"
        ))
    })?;
    let data = match descr {
        "<f4" => Data::F32(
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        "<f2" => Data::F32(
            raw.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        "<f8" => Data::F32(
            raw.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
        ),
        "<i8" => Data::I64(
            raw.chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        "<i4" => Data::I64(
            raw.chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        _ => Data::I64(raw.iter().map(|&b| i64::from(b != 0)).collect()),
    };
    Tensor::new(dtype, shape, data).map_err(|e| fmt_err(e.0))
}

/// Writes a tensor as a version-1.0 `.npy` file at its element type.
pub fn write(mut w: impl Write, t: &Tensor) -> Result<(), NpyError> {
    let descr = match t.dtype() {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::BF16 => "<f4",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::Bool => "|b1",
    };
    let dims: Vec<String> = t.shape().iter().map(usize::to_string).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    let hl =
        u16::try_from(header.len()).map_err(|_| fmt_err("shape too long for a .npy header"))?;
    w.write_all(&hl.to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    let mut out = Vec::with_capacity(t.bytes());
    match (t.data(), t.dtype()) {
        (Data::F32(v), DType::F16) => v
            .iter()
            .for_each(|&x| out.extend_from_slice(&half::f16::from_f32(x).to_le_bytes())),
        (Data::F32(v), _) => v
            .iter()
            .for_each(|&x| out.extend_from_slice(&x.to_le_bytes())),
        (Data::I64(v), DType::I32) => v
            .iter()
            .for_each(|&x| out.extend_from_slice(&(x as i32).to_le_bytes())),
        (Data::I64(v), DType::Bool) => v.iter().for_each(|&x| out.push(u8::from(x != 0))),
        (Data::I64(v), _) => v
            .iter()
            .for_each(|&x| out.extend_from_slice(&x.to_le_bytes())),
    }
    w.write_all(&out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_type() {
        for t in [
            Tensor::f32(vec![2, 3], vec![1.0, -2.5, 3.0, 0.0, 1e-3, 7.0]).unwrap(),
            Tensor::i64(vec![4], vec![1, -2, 1 << 40, 0]).unwrap(),
            Tensor::new(DType::F16, vec![2], Data::F32(vec![0.5, 1.0])).unwrap(),
            Tensor::new(DType::I32, vec![1, 1], Data::I64(vec![-7])).unwrap(),
            Tensor::new(DType::Bool, vec![3], Data::I64(vec![1, 0, 1])).unwrap(),
            Tensor::scalar_f32(4.0),
        ] {
            let mut buf = Vec::new();
            write(&mut buf, &t).unwrap();
            assert_eq!(buf.len() % 64, (t.bytes()) % 64, "header pads to 64");
            let back = read(&buf[..], buf.len() as u64).unwrap();
            assert_eq!(back, t);
        }
    }

    #[test]
    fn refuses_lies() {
        let t = Tensor::f32(vec![4], vec![1.0; 4]).unwrap();
        let mut buf = Vec::new();
        write(&mut buf, &t).unwrap();
        buf.truncate(buf.len() - 1);
        assert!(read(&buf[..], buf.len() as u64).is_err());
        let header =
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000), }\n";
        let mut fake = b"\x93NUMPY\x01\x00".to_vec();
        fake.extend_from_slice(&(header.len() as u16).to_le_bytes());
        fake.extend_from_slice(header);
        let e = read(&fake[..], fake.len() as u64).unwrap_err();
        assert!(
            e.to_string().contains("more bytes than the file holds"),
            "{e}"
        );
    }
}
