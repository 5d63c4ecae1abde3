//! Import tests on models built here with prost: good ones run and give
//! hand-checked values; hostile ones give errors that name the problem.

use std::path::{Path, PathBuf};

use prost::Message;
use sluice_graph::{DType, Tensor};
use sluice_onnx::proto::*;
use sluice_onnx::{ImportError, Options, from_bytes, load};

fn vi(name: &str, elem: i32, dims: &[Option<i64>]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: elem,
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

fn node(
    op: &str,
    name: &str,
    ins: &[&str],
    outs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        attribute: attrs,
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attr_type::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn f32_init(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        float_data: v.to_vec(),
        ..Default::default()
    }
}

fn model(opset: i64, g: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(g),
        ..Default::default()
    }
}

/// y = Relu(x · W + b) with x: [N, 2], W: [2, 3]; the Gemm and Relu fuse.
fn tiny(opset: i64) -> ModelProto {
    model(
        opset,
        GraphProto {
            node: vec![
                node("Gemm", "fc", &["x", "W", "b"], &["h"], vec![]),
                node("Relu", "act", &["h"], &["y"], vec![]),
            ],
            initializer: vec![
                f32_init("W", &[2, 3], &[1.0, -1.0, 0.5, 2.0, 1.0, -0.5]),
                f32_init("b", &[3], &[0.0, 0.5, -10.0]),
            ],
            input: vec![vi("x", data_type::FLOAT, &[None, Some(2)])],
            output: vec![vi("y", data_type::FLOAT, &[None, Some(3)])],
            ..Default::default()
        },
    )
}

fn import(m: &ModelProto) -> Result<sluice_onnx::Model, ImportError> {
    from_bytes(
        &m.encode_to_vec(),
        Path::new("test.onnx"),
        Path::new("."),
        &Options::default(),
    )
}

fn err(m: &ModelProto) -> String {
    match import(m) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_tiny_model_runs_at_any_batch() {
    let m = import(&tiny(13)).unwrap();
    assert!(m.graph.has_batch());
    let s = m.graph.specialize(2).unwrap();
    assert_eq!(s.nodes().len(), 1, "Gemm and Relu fuse into one kernel");
    let x = Tensor::f32(vec![2, 2], vec![1.0, 2.0, -1.0, 0.0]).unwrap();
    let out = s.run(&[("x", &x)]).unwrap();
    // Row 0: [1+4, -1+2+0.5, 0.5-1-10] -> relu -> [5, 1.5, 0]; row 1: [-1, 1+0.5, -0.5-10] -> [0, 1.5, 0].
    assert_eq!(out[0].1.as_f32().unwrap(), &[5.0, 1.5, 0.0, 0.0, 1.5, 0.0]);
    let e = s
        .run(&[("x", &Tensor::f32(vec![3, 2], vec![0.0; 6]).unwrap())])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'x'") && e.contains("[N, 2]") && e.contains("batch 2"),
        "{e}"
    );
    let e = s.run(&[("z", &x)]).unwrap_err().to_string();
    assert!(e.contains("no input 'z'"), "{e}");
}

#[test]
fn shape_subgraphs_fold_per_batch() {
    // y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): [N, 2, 3] -> [N, 6].
    let one = |name: &str, v: i64| TensorProto {
        name: name.into(),
        dims: vec![1],
        data_type: data_type::INT64,
        int64_data: vec![v],
        ..Default::default()
    };
    let zero = TensorProto {
        name: "zero".into(),
        dims: vec![],
        data_type: data_type::INT64,
        int64_data: vec![0],
        ..Default::default()
    };
    let g = GraphProto {
        node: vec![
            node("Shape", "shape", &["x"], &["s"], vec![]),
            node("Gather", "n", &["s", "zero"], &["n"], vec![]),
            node("Unsqueeze", "un", &["n", "axes0"], &["n1"], vec![]),
            node(
                "Concat",
                "cat",
                &["n1", "minus1"],
                &["spec"],
                vec![AttributeProto {
                    name: "axis".into(),
                    r#type: attr_type::INT,
                    i: 0,
                    ..Default::default()
                }],
            ),
            node("Reshape", "rs", &["x", "spec"], &["y"], vec![]),
        ],
        initializer: vec![zero, one("axes0", 0), one("minus1", -1)],
        input: vec![vi("x", data_type::FLOAT, &[None, Some(2), Some(3)])],
        output: vec![vi("y", data_type::FLOAT, &[None, Some(6)])],
        ..Default::default()
    };
    let m = import(&model(13, g)).unwrap();
    for b in [1, 4] {
        let s = m.graph.specialize(b).unwrap();
        assert_eq!(s.nodes().len(), 1, "only the Reshape runs");
        let out = s.outputs()[0].id;
        assert_eq!(s.info(out).unwrap(), (DType::F32, &[b, 6][..]));
    }
}

#[test]
fn unsupported_operators_are_named_with_node_opset_and_file() {
    let mut m = tiny(13);
    let g = m.graph.as_mut().unwrap();
    g.node.push(node(
        "NonMaxSuppression",
        "nms_head",
        &["y"],
        &["z"],
        vec![],
    ));
    g.node.push(NodeProto {
        domain: "com.example".into(),
        ..node("FancyOp", "fancy", &["y"], &["q"], vec![])
    });
    let e = err(&m);
    for want in [
        "test.onnx",
        "NonMaxSuppression",
        "nms_head",
        "opset 13",
        "com.example::FancyOp",
        "fancy",
    ] {
        assert!(e.contains(want), "{want} missing from: {e}");
    }
}

#[test]
fn opsets_outside_9_to_21_are_refused() {
    for v in [8, 22, 99] {
        let e = err(&tiny(v));
        assert!(
            e.contains(&format!("opset {v}")) && e.contains("9 to 21"),
            "{e}"
        );
    }
}

#[test]
fn malformed_bytes_are_decode_errors() {
    let bytes = tiny(13).encode_to_vec();
    for cut in [bytes.len() / 2, 7, 1] {
        let r = from_bytes(
            &bytes[..cut],
            Path::new("t.onnx"),
            Path::new("."),
            &Options::default(),
        );
        assert!(
            matches!(
                r,
                Err(ImportError::Decode { .. }) | Err(ImportError::Invalid { .. })
            ),
            "cut at {cut}: {r:?}"
        );
    }
    let junk: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert!(
        from_bytes(
            &junk,
            Path::new("j.onnx"),
            Path::new("."),
            &Options::default()
        )
        .is_err()
    );
    let e = err(&ModelProto {
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        ..Default::default()
    });
    assert!(e.contains("no graph"), "{e}");
}

#[test]
fn lying_tensors_are_refused_by_name() {
    let mut m = tiny(13);
    m.graph.as_mut().unwrap().initializer[0] = TensorProto {
        name: "W".into(),
        dims: vec![1 << 20, 1 << 20, 1 << 20],
        data_type: data_type::FLOAT,
        raw_data: vec![0; 16],
        ..Default::default()
    };
    let e = err(&m);
    assert!(e.contains("'W'") && e.contains("holds 16 bytes"), "{e}");
    m.graph.as_mut().unwrap().initializer[0] = TensorProto {
        name: "W".into(),
        dims: vec![2, -3],
        data_type: data_type::FLOAT,
        ..Default::default()
    };
    assert!(err(&m).contains("negative dimension -3"));
    m.graph.as_mut().unwrap().initializer[0] = TensorProto {
        name: "W".into(),
        dims: vec![2],
        data_type: data_type::STRING,
        ..Default::default()
    };
    assert!(err(&m).contains("STRING"));
}

#[test]
fn graph_structure_errors_name_the_node_or_tensor() {
    let mut m = tiny(13);
    m.graph.as_mut().unwrap().node[0].input[0] = "ghost".into();
    let e = err(&m);
    assert!(e.contains("'fc'") && e.contains("'ghost'"), "{e}");

    let mut m = tiny(13);
    let g = m.graph.as_mut().unwrap();
    g.node = vec![
        node("Relu", "a", &["q"], &["p"], vec![]),
        node("Relu", "b", &["p"], &["q"], vec![]),
    ];
    g.output = vec![vi("p", data_type::FLOAT, &[None, Some(3)])];
    assert!(err(&m).contains("cycle"), "{}", err(&m));

    let mut m = tiny(13);
    m.graph
        .as_mut()
        .unwrap()
        .node
        .push(node("Relu", "again", &["h"], &["y"], vec![]));
    assert!(err(&m).contains("'y' is written twice"));

    // Gemm of [N, 2] by a [5, 3] weight: the inner dimensions differ.
    let mut m = tiny(13);
    m.graph.as_mut().unwrap().initializer[0] = f32_init("W", &[5, 3], &[0.0; 15]);
    let e = err(&m);
    assert!(e.contains("'fc'") && e.contains("inner dimensions"), "{e}");
}

#[test]
fn reshape_with_two_minus_ones_is_refused() {
    let g = GraphProto {
        node: vec![node("Reshape", "rs", &["x", "spec"], &["y"], vec![])],
        initializer: vec![TensorProto {
            name: "spec".into(),
            dims: vec![2],
            data_type: data_type::INT64,
            int64_data: vec![-1, -1],
            ..Default::default()
        }],
        input: vec![vi("x", data_type::FLOAT, &[Some(2), Some(3)])],
        output: vec![vi("y", data_type::FLOAT, &[])],
        ..Default::default()
    };
    let e = err(&model(13, g));
    assert!(e.contains("'rs'") && e.contains("more than one -1"), "{e}");
}

#[test]
fn a_computed_tensor_beyond_the_limit_is_refused_before_allocation() {
    let g = GraphProto {
        node: vec![node("ConstantOfShape", "huge", &["shape"], &["y"], vec![])],
        initializer: vec![TensorProto {
            name: "shape".into(),
            dims: vec![3],
            data_type: data_type::INT64,
            int64_data: vec![1 << 20, 1 << 20, 1 << 20],
            ..Default::default()
        }],
        output: vec![vi("y", data_type::FLOAT, &[])],
        ..Default::default()
    };
    let e = err(&model(13, g));
    assert!(e.contains("'huge'") && e.contains("over the limit"), "{e}");
}

#[test]
fn old_opsets_attributes_become_inputs() {
    // Slice-9 (attributes) and Unsqueeze-11 (attribute axes).
    let g = GraphProto {
        node: vec![
            node(
                "Slice",
                "sl",
                &["x"],
                &["s"],
                vec![ints("starts", &[1]), ints("ends", &[3]), ints("axes", &[1])],
            ),
            node("Unsqueeze", "un", &["s"], &["y"], vec![ints("axes", &[0])]),
        ],
        input: vec![vi("x", data_type::FLOAT, &[Some(2), Some(4)])],
        output: vec![vi("y", data_type::FLOAT, &[])],
        ..Default::default()
    };
    let m = import(&model(9, g)).unwrap();
    let s = m.graph.specialize(1).unwrap();
    let x = Tensor::f32(vec![2, 4], (0..8).map(|v| v as f32).collect()).unwrap();
    let out = s.run(&[("x", &x)]).unwrap();
    assert_eq!(out[0].1.shape(), &[1, 2, 2]);
    assert_eq!(out[0].1.as_f32().unwrap(), &[1.0, 2.0, 5.0, 6.0]);
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-onnx-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn with_external(location: &str, offset: u64, length: Option<u64>) -> ModelProto {
    let mut m = tiny(13);
    let mut kv = vec![
        StringStringEntryProto {
            key: "location".into(),
            value: location.into(),
        },
        StringStringEntryProto {
            key: "offset".into(),
            value: offset.to_string(),
        },
    ];
    if let Some(l) = length {
        kv.push(StringStringEntryProto {
            key: "length".into(),
            value: l.to_string(),
        });
    }
    m.graph.as_mut().unwrap().initializer[0] = TensorProto {
        name: "W".into(),
        dims: vec![2, 3],
        data_type: data_type::FLOAT,
        data_location: 1,
        external_data: kv,
        ..Default::default()
    };
    m
}

#[test]
fn external_data_loads_from_the_models_folder_only() {
    let d = scratch("ext");
    let w: Vec<u8> = [1.0f32, -1.0, 0.5, 2.0, 1.0, -0.5]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let mut file = vec![0u8; 8];
    file.extend_from_slice(&w);
    std::fs::write(d.join("w.bin"), &file).unwrap();
    std::fs::write(
        d.join("good.onnx"),
        with_external("w.bin", 8, Some(24)).encode_to_vec(),
    )
    .unwrap();
    let m = load(&d.join("good.onnx"), &Options::default()).unwrap();
    let s = m.graph.specialize(1).unwrap();
    let out = s
        .run(&[("x", &Tensor::f32(vec![1, 2], vec![1.0, 2.0]).unwrap())])
        .unwrap();
    assert_eq!(out[0].1.as_f32().unwrap(), &[5.0, 1.5, 0.0]);

    let outside = scratch("outside");
    std::fs::write(outside.join("secret.bin"), &file).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.bin"), d.join("link.bin")).unwrap();
    for (loc, off, len, want) in [
        ("../../etc/shadow", 0, None, "leaves the model's folder"),
        ("/etc/shadow", 0, None, "absolute path"),
        ("link.bin", 0, Some(24), "symbolic link"),
        ("w.bin", 16, Some(24), "past the file's end"),
        ("missing.bin", 0, None, "cannot be opened"),
        ("w.bin", 0, Some(4), "4 bytes in 'w.bin' for 6 elements"),
    ] {
        std::fs::write(
            d.join("bad.onnx"),
            with_external(loc, off, len).encode_to_vec(),
        )
        .unwrap();
        let e = load(&d.join("bad.onnx"), &Options::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want) && e.contains("'W'"), "{loc}: {e}");
    }
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn symbolic_inner_dimensions_are_refused_with_the_fix() {
    let mut m = tiny(13);
    m.graph.as_mut().unwrap().input[0] = vi("x", data_type::FLOAT, &[Some(1), None]);
    let e = err(&m);
    assert!(
        e.contains("'x' dimension 1 is symbolic") && e.contains("fixed size"),
        "{e}"
    );
}
