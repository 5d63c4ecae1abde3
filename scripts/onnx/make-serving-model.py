#!/usr/bin/env python3
"""Writes a small two-input, two-output ONNX model in two versions (same
tensors, different seeded weights) for the serving check, with one batch of
inputs and each version's outputs computed by onnxruntime (the oracle).

  OUT/v1/typed.onnx, OUT/v2/typed.onnx   the two versions
  OUT/typed.toml                         the repository's settings (max_batch)
  OUT/image.bin, OUT/offset.bin          inputs, raw little-endian f32, batch BATCH
  OUT/v1/logits.bin ... OUT/v2/probs.bin each version's outputs, raw f32

Usage: make-serving-model.py --out DIR [--batch N]
"""
import argparse
import pathlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def model(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(4).astype(np.float32) * 0.1
    fc = rng.standard_normal((10, 4)).astype(np.float32) * 0.5
    fcb = rng.standard_normal(10).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["image", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["gemm"], transB=1),
        helper.make_node("Add", ["gemm", "offset"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "typed",
        [
            helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 8, 8]),
            helper.make_tensor_value_info("offset", TensorProto.FLOAT, ["N", 10]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10]),
        ],
        [numpy_helper.from_array(a, n) for a, n in [(w, "w"), (b, "b"), (fc, "fc"), (fcb, "fcb")]],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    inputs = {
        "image": rng.standard_normal((a.batch, 3, 8, 8)).astype(np.float32),
        "offset": rng.standard_normal((a.batch, 10)).astype(np.float32),
    }
    a.out.mkdir(parents=True, exist_ok=True)
    for name, x in inputs.items():
        (a.out / f"{name}.bin").write_bytes(x.astype("<f4").tobytes())
    (a.out / "typed.toml").write_text("max_batch = 4\n")
    for version, seed in [("v1", 1), ("v2", 2)]:
        d = a.out / version
        d.mkdir(exist_ok=True)
        m = model(seed)
        onnx.save(m, d / "typed.onnx")
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for name, y in zip(["logits", "probs"], sess.run(["logits", "probs"], inputs)):
            (d / f"{name}.bin").write_bytes(y.astype("<f4").tobytes())
    print(f"make-serving-model: typed.onnx v1 and v2, batch {a.batch}, in {a.out}")


if __name__ == "__main__":
    main()
