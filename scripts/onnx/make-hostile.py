#!/usr/bin/env python3
"""Write malformed and hostile ONNX files for sluice's importer.

Each file is a way a model can be broken by accident or on purpose: bytes that
are not a model, tensors whose sizes lie, external data that points outside
the model's folder, operators and opsets sluice does not know, graphs that do
not type-check. `sluice inspect FILE` must refuse every one with a clear error
and without panicking; `scripts/onnx/check.py --hostile DIR` checks that.

DIR/hostile.json lists them: [{"file", "what", "expect", "onnxruntime"}, ...].
"file" is relative to DIR (files that need a folder of their own, for external
data, get one); "expect" are case-insensitive substrings any clear error about
it must contain (the key facts: operator, node, tensor, path, number);
"onnxruntime" says what onnxruntime's InferenceSession (and, when the session
loads, one run on zero inputs) made of the file, and "what" says so when
onnxruntime accepts it.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover
    sys.exit(f"make-hostile: {e}; install it with `pip install onnx onnxruntime numpy`")

OPSET = 17
IR = 8


def model(nodes, inputs, outputs, inits=(), opset=OPSET, name="hostile"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(g, producer_name="sluice-make-hostile",
                             opset_imports=[helper.make_opsetid("", opset)], ir_version=IR)


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def conv_model():
    """A small valid Conv + Relu model (about 1.2 kB)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.uniform(-1, 1, (8, 4, 3, 3)).astype(np.float32), "conv.weight")
    b = numpy_helper.from_array(rng.uniform(-1, 1, (8,)).astype(np.float32), "conv.bias")
    return model([helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="conv", pads=[1] * 4),
                  helper.make_node("Relu", ["c"], ["y"], name="relu")],
                 [vi("x", [1, 4, 8, 8])], [vi("y", [1, 8, 8, 8])], [w, b])


def weight_model(tensor, shape=None):
    """x + tensor, where tensor is an initializer of the given (broken) kind and x
    (of shape [1] unless given) broadcasts against it."""
    x_shape = shape or [1]
    y_shape = shape or [int(d) for d in tensor.dims]
    return model([helper.make_node("Add", ["x", tensor.name], ["y"], name="add")],
                 [vi("x", x_shape)], [vi("y", y_shape)], [tensor])


def external_tensor(name, location, offset=None, length=None, dims=(4,)):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", location), ("offset", offset), ("length", length)]:
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, payload):
    """A length-delimited protobuf field."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def nested_graph_bytes(depth):
    """ModelProto bytes whose graph holds an If node whose then_branch holds an If
    node whose ... `depth` levels deep, encoded by hand (no recursion limit)."""
    # GraphProto: node=1, name=2; NodeProto: input=1, output=2, name=3, op_type=4,
    # attribute=5; AttributeProto: name=1, type=20 (GRAPH=5), g=6.
    inner = field(2, b"leaf")
    for level in range(depth):
        attr = field(1, b"then_branch") + varint(20 << 3) + varint(5) + field(6, inner)
        nodeb = (field(1, b"cond") + field(2, f"out{level}".encode()) + field(3, f"if{level}".encode())
                 + field(4, b"If") + field(5, attr))
        inner = field(1, nodeb) + field(2, f"g{level}".encode())
    opset = field(1, b"") + varint(2 << 3) + varint(OPSET)
    return varint(1 << 3) + varint(IR) + field(7, inner) + field(8, opset)


def cases():
    """(file, what, expect, builder) where builder(path) writes the file."""
    out = []

    def add(file, what, expect, fn):
        out.append((file, what, expect, fn))

    def save(m):
        return lambda p: p.write_bytes(m.SerializeToString())

    valid = conv_model().SerializeToString()
    add("truncated.onnx", f"a valid Conv model ({len(valid)} bytes) cut to its first half",
        ["truncated.onnx"], lambda p: p.write_bytes(valid[: len(valid) // 2]))
    add("garbage.onnx", "4 kB of random bytes", ["garbage.onnx"],
        lambda p: p.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes()))
    add("empty-file.onnx", "a file of zero bytes", ["empty-file.onnx"], lambda p: p.write_bytes(b""))
    t = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "some_tensor")
    add("tensor-as-model.onnx", "a valid TensorProto serialized where a ModelProto belongs",
        ["tensor-as-model.onnx"], lambda p: p.write_bytes(t.SerializeToString()))
    m = onnx.ModelProto()
    m.ir_version = IR
    m.opset_import.extend([helper.make_opsetid("", OPSET)])
    add("no-graph.onnx", "a ModelProto with an IR version and opset but no graph", ["graph"], save(m))
    add("empty-graph.onnx", "a graph with no nodes, inputs or outputs", ["output"],
        save(model([], [], [])))

    t = TensorProto()
    t.name, t.data_type = "huge_weight", TensorProto.FLOAT
    t.dims.extend([1 << 20, 1 << 20])  # 4 TiB of float32
    t.raw_data = bytes(16)
    add("huge-dims.onnx", "initializer huge_weight: dims [1048576, 1048576] FLOAT (4 TiB) with 16 bytes of raw_data",
        ["huge_weight"], save(weight_model(t)))
    t = TensorProto()
    t.name, t.data_type = "overflow_weight", TensorProto.FLOAT
    t.dims.extend([1 << 62, 1 << 62, 16])  # element count overflows 64 bits
    t.raw_data = bytes(16)
    add("overflow-dims.onnx", "initializer overflow_weight: dims [2^62, 2^62, 16], element count overflows 64 bits",
        ["overflow_weight"], save(weight_model(t)))
    t = TensorProto()
    t.name, t.data_type = "short_weight", TensorProto.FLOAT
    t.dims.extend([4, 4])
    t.raw_data = bytes(60)
    add("raw-data-mismatch.onnx", "initializer short_weight: dims [4, 4] FLOAT (64 bytes) with 60 bytes of raw_data",
        ["short_weight"], save(weight_model(t, [4, 4])))
    t = TensorProto()
    t.name, t.data_type = "few_floats", TensorProto.FLOAT
    t.dims.extend([4, 4])
    t.float_data.extend([1.0, 2.0, 3.0])
    add("float-data-mismatch.onnx", "initializer few_floats: dims [4, 4] with 3 values in float_data",
        ["few_floats"], save(weight_model(t, [4, 4])))
    t = TensorProto()
    t.name, t.data_type = "neg_weight", TensorProto.FLOAT
    t.dims.extend([-1, 4])
    t.raw_data = bytes(16)
    add("negative-dim.onnx", "initializer neg_weight with dims [-1, 4]", ["neg_weight", "-1"],
        save(weight_model(t, [1, 4])))
    t = helper.make_tensor("names", TensorProto.STRING, [2], [b"cat", b"dog"])
    add("string-initializer.onnx", "initializer names of STRING dtype consumed by Identity", ["names", "string"],
        save(model([helper.make_node("Identity", ["names"], ["y"], name="ident")], [],
                   [vi("y", [2], TensorProto.STRING)], [t])))

    # External data
    def ext_case(folder, location, what, expect, setup=None, offset=None, length=None, tensor="ext_weight"):
        t = external_tensor(tensor, location, offset, length)

        def build(p):
            p.parent.mkdir(parents=True, exist_ok=True)
            if setup:
                setup(p.parent)
            p.write_bytes(weight_model(t).SerializeToString())
        add(f"{folder}/model.onnx", what, expect, build)

    ext_case("external-dotdot", "../../etc/shadow",
             "initializer ext_weight in external data at location ../../etc/shadow", ["../../etc/shadow"])
    ext_case("external-absolute", "/etc/shadow",
             "initializer ext_weight in external data at the absolute location /etc/shadow", ["/etc/shadow"])

    def symlink(d):
        link = d / "weights.bin"
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink("/etc/passwd", link)
    ext_case("external-symlink", "weights.bin",
             "initializer ext_weight in weights.bin, a symlink in the model folder to /etc/passwd",
             ["weights.bin"], setup=symlink, offset=0, length=16)
    ext_case("external-past-end", "weights.bin",
             "initializer past_end in weights.bin (64 bytes) at offset 32 length 64, past the file's end",
             ["weights.bin", "past_end"], setup=lambda d: (d / "weights.bin").write_bytes(bytes(64)),
             offset=32, length=64, tensor="past_end")
    ext_case("external-missing", "missing.bin",
             "initializer ext_weight in external data file missing.bin, which does not exist", ["missing.bin"])

    # Operators and opsets
    x4 = [vi("x", [1, 4])]
    boxes = [vi("boxes", [1, 10, 4]), vi("scores", [1, 1, 10])]
    add("unsupported-op.onnx", "node nms_1 is a NonMaxSuppression (not in sluice's operator set)",
        ["NonMaxSuppression", "nms_1"],
        save(model([helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"], name="nms_1")],
                   boxes, [vi("sel", [None, 3], TensorProto.INT64)])))
    m = model([helper.make_node("FancyOp", ["x"], ["y"], name="fancy_1", domain="com.example")], x4, [vi("y", [1, 4])])
    m.opset_import.extend([helper.make_opsetid("com.example", 1)])
    add("custom-domain.onnx", "node fancy_1 is FancyOp in the custom domain com.example",
        ["FancyOp", "com.example"], save(m))
    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    add("opset-8.onnx", "default-domain opset 8 (too old)", ["opset", "8"],
        save(model(relu, x4, [vi("y", [1, 4])], opset=8)))
    add("opset-99.onnx", "default-domain opset 99 (from the future)", ["opset", "99"],
        save(model(relu, x4, [vi("y", [1, 4])], opset=99)))

    # Graph structure
    add("cycle.onnx", "nodes relu_a and relu_b each consume the other's output", ["cycle"],
        save(model([helper.make_node("Add", ["x", "t2"], ["t1"], name="relu_a"),
                    helper.make_node("Relu", ["t1"], ["t2"], name="relu_b")], x4, [vi("t2", [1, 4])])))
    add("undefined-tensor.onnx", "node reader reads ghost_tensor, which nothing defines", ["ghost_tensor"],
        save(model([helper.make_node("Add", ["x", "ghost_tensor"], ["y"], name="reader")], x4, [vi("y", [1, 4])])))
    add("undefined-output.onnx", "the graph output missing_out is produced by no node", ["missing_out"],
        save(model(relu, x4, [vi("y", [1, 4]), vi("missing_out", [1, 4])])))
    add("duplicate-output.onnx", "nodes first and second both write dup_out", ["dup_out"],
        save(model([helper.make_node("Relu", ["x"], ["dup_out"], name="first"),
                    helper.make_node("Sigmoid", ["x"], ["dup_out"], name="second")], x4, [vi("dup_out", [1, 4])])))
    add("missing-input-count.onnx", "node lonely_conv is a Conv with only its data input", ["lonely_conv"],
        save(model([helper.make_node("Conv", ["x"], ["y"], name="lonely_conv")],
                   [vi("x", [1, 3, 4, 4])], [vi("y", [1, 3, 4, 4])])))

    # Shape errors
    add("add-shape-mismatch.onnx", "node bad_add adds shapes [2, 3] and [4, 5]", ["bad_add"],
        save(model([helper.make_node("Add", ["a", "b"], ["y"], name="bad_add")],
                   [vi("a", [2, 3]), vi("b", [4, 5])], [vi("y", [2, 3])])))
    w = numpy_helper.from_array(np.zeros((4, 5, 3, 3), np.float32), "conv_w")
    add("conv-channel-mismatch.onnx", "node bad_conv: input has 3 channels, weight [4, 5, 3, 3] expects 5",
        ["bad_conv"], save(model([helper.make_node("Conv", ["x", "conv_w"], ["y"], name="bad_conv")],
                                 [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 6, 6])], [w])))
    add("matmul-mismatch.onnx", "node bad_matmul multiplies [2, 3] by [4, 5]", ["bad_matmul"],
        save(model([helper.make_node("MatMul", ["a", "b"], ["y"], name="bad_matmul")],
                   [vi("a", [2, 3]), vi("b", [4, 5])], [vi("y", [2, 5])])))
    s = numpy_helper.from_array(np.array([-1, -1], np.int64), "two_minus_one")
    add("reshape-two-minus-one.onnx", "node bad_reshape reshapes [2, 6] to [-1, -1]", ["bad_reshape"],
        save(model([helper.make_node("Reshape", ["x", "two_minus_one"], ["y"], name="bad_reshape")],
                   [vi("x", [2, 6])], [vi("y", [None, None])], [s])))
    s = numpy_helper.from_array(np.array([5, 7], np.int64), "wrong_count")
    add("reshape-count-mismatch.onnx", "node bad_reshape2 reshapes [2, 6] (12 elements) to [5, 7]",
        ["bad_reshape2"], save(model([helper.make_node("Reshape", ["x", "wrong_count"], ["y"], name="bad_reshape2")],
                                     [vi("x", [2, 6])], [vi("y", [5, 7])], [s])))
    d = numpy_helper.from_array(np.zeros((5, 3), np.float32), "table")
    i = numpy_helper.from_array(np.array([1, 7], np.int64), "idx")
    add("gather-out-of-range.onnx", "node bad_gather gathers constant index 7 from a table of 5 rows",
        ["bad_gather", "7"],
        save(model([helper.make_node("Gather", ["table", "idx"], ["g"], name="bad_gather", axis=0),
                    helper.make_node("Add", ["g", "x"], ["y"], name="add")],
                   [vi("x", [2, 3])], [vi("y", [2, 3])], [d, i])))
    add("concat-axis-out-of-range.onnx", "node bad_concat concatenates rank-2 tensors on axis 5",
        ["bad_concat", "5"],
        save(model([helper.make_node("Concat", ["a", "b"], ["y"], name="bad_concat", axis=5)],
                   [vi("a", [2, 3]), vi("b", [2, 3])], [vi("y", [4, 3])])))
    add("deep-subgraph.onnx", "an If node whose then_branch holds an If node whose ... 200 levels deep "
        "(no crash, any error)", [], lambda p: p.write_bytes(nested_graph_bytes(200)))
    return out


ORT_PROBE = textwrap.dedent("""
    import sys, numpy as np, onnxruntime as ort
    try:
        o = ort.SessionOptions(); o.log_severity_level = 4
        s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
    except Exception as e:
        print("rejects it: " + " ".join(str(e).split())[:240]); sys.exit(0)
    feeds = {}
    for i in s.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        dt = {"tensor(float)": np.float32, "tensor(int64)": np.int64}.get(i.type, np.float32)
        feeds[i.name] = np.zeros(shape, dt)
    try:
        s.run(None, feeds)
        print("accepts it and runs it")
    except Exception as e:
        print("accepts it; the run fails: " + " ".join(str(e).split())[:200])
""")


def probe_ort(path):
    try:
        p = subprocess.run([sys.executable, "-c", ORT_PROBE, str(path)], capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired:
        return "hangs (no answer in 120 s)"
    if p.returncode != 0:
        if p.returncode < 0:
            return f"crashes (signal {-p.returncode})"
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        return f"probe failed (exit {p.returncode}): {last[:200]}"
    return p.stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--out", required=True, type=Path, help="output folder (created if missing)")
    ap.add_argument("--no-ort", action="store_true", help="do not ask onnxruntime about each file")
    args = ap.parse_args()
    out = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        sys.exit(f"make-hostile: cannot create {out}: {e}")
    entries = []
    for file, what, expect, build in cases():
        path = out / file
        path.parent.mkdir(parents=True, exist_ok=True)
        build(path)
        entry = {"file": file, "what": what, "expect": expect}
        if not args.no_ort:
            verdict = probe_ort(path)
            entry["onnxruntime"] = verdict
            if not verdict.startswith("rejects"):
                entry["what"] = f"{what} (onnxruntime {verdict.split(':')[0]})"
        entries.append(entry)
        print(f"{file}: {entry.get('onnxruntime', 'written')}", flush=True)
    with open(out / "hostile.json", "w") as f:
        json.dump(entries, f, indent=1)
        f.write("\n")
    size = sum(p.lstat().st_size for p in out.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"{len(entries)} hostile files in {out} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
