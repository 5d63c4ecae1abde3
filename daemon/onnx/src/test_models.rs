//! Small ONNX files written here with the protobuf messages of
//! [`crate::proto`], for other crates' tests (feature `test-util`): no
//! Python, no fixtures on disk.

use prost::Message;

use crate::proto::*;

fn value(name: &str, dims: &[Option<i64>]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: data_type::FLOAT,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(match d {
                                Some(v) => DimValue::DimValue(*v),
                                None => DimValue::DimParam("batch".into()),
                            }),
                        })
                        .collect(),
                }),
            }),
            ..Default::default()
        }),
    }
}

/// `y = x · w + b` (one `Gemm`) with `x: f32[N, k]` (`N` symbolic when
/// `batched`, else 1), `w: f32[k, m]` row-major, `b: f32[m]`, as the bytes
/// of an opset-13 ONNX file.
///
/// # Panics
///
/// If `w` is not `k · m` values or `b` not `m`.
pub fn gemm(k: usize, m: usize, w: &[f32], b: &[f32], batched: bool) -> Vec<u8> {
    assert_eq!(w.len(), k * m, "w must hold k·m values");
    assert_eq!(b.len(), m, "b must hold m values");
    let n = if batched { None } else { Some(1) };
    let init = |name: &str, dims: Vec<i64>, v: &[f32]| TensorProto {
        name: name.into(),
        dims,
        data_type: data_type::FLOAT,
        float_data: v.to_vec(),
        ..Default::default()
    };
    let g = GraphProto {
        node: vec![NodeProto {
            input: vec!["x".into(), "w".into(), "b".into()],
            output: vec!["y".into()],
            name: "fc".into(),
            op_type: "Gemm".into(),
            domain: String::new(),
            attribute: vec![],
        }],
        initializer: vec![
            init("w", vec![k as i64, m as i64], w),
            init("b", vec![m as i64], b),
        ],
        input: vec![value("x", &[n, Some(k as i64)])],
        output: vec![value("y", &[n, Some(m as i64)])],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec()
}

/// `x · w + b` computed directly (the reference [`gemm`]'s file must
/// match), for `x` of `n` rows of `k`.
pub fn gemm_reference(k: usize, m: usize, w: &[f32], b: &[f32], x: &[f32]) -> Vec<f32> {
    let n = x.len() / k;
    let mut y = vec![0f32; n * m];
    for r in 0..n {
        for c in 0..m {
            let mut acc = 0f64;
            for i in 0..k {
                acc += f64::from(x[r * k + i]) * f64::from(w[i * m + c]);
            }
            y[r * m + c] = (acc + f64::from(b[c])) as f32;
        }
    }
    y
}
