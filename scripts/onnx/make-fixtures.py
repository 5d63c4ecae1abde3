#!/usr/bin/env python3
"""Write ONNX models, their inputs and onnxruntime's outputs for sluice's importer.

The fixtures are what `scripts/onnx/check.py` runs `sluice run` on; every
expected output comes from onnxruntime (CPU execution provider), an oracle
nobody here wrote. Everything is generated, nothing is downloaded:

* light/: the nine "light" CNNs shipped inside the onnx package
  (backend/test/data/light: AlexNet, VGG-19, ResNet-50, Inception v1 and v2,
  DenseNet-121, SqueezeNet, ShuffleNet, ZFNet-512). As shipped, every weight
  is the output of a ConstantOfShape node filled with 0.02, which makes the
  outputs degenerate. Each weight becomes a seeded random initializer of the
  same shape and dtype (Conv/Gemm weights uniform +-sqrt(6/fan_in), biases
  +-0.1, BatchNormalization scale U(0.5,1.5), or U(0.1,0.3) where it ends a
  residual branch so that ResNet's sums stay of order one, bias and mean
  U(-0.2,0.2), var U(0.5,1.5)); the ConstantOfShape nodes and unused
  initializers are removed
  and graph.input keeps only the data input (IR version raised from 3 to 4,
  which allows that; opset 9 kept). The layer feeding the final Softmax is
  rescaled so that its logits have a standard deviation of 2, so the softmax
  is neither one-hot nor uniform and the comparison means something
  (DenseNet-121, which ends at its logits, is left as drawn).
  "squeezenet-ir3-inputs" keeps IR 3 and lists every initializer among the
  graph inputs as old exporters did. Dropout nodes are kept.
* models/: a 2-layer transformer encoder (opset 17, symbolic batch,
  LayerNormalization, Erf GELU, a Shape/Gather/Concat sub-graph feeding the
  head Reshapes), run at batch 1 and 3, plus the same model with its weights
  in ONNX external data (models/encoder-external/); a small detector-style
  graph (opset 13 and 11: Conv, SiLU, MaxPool, Resize, Split, Slice, Concat,
  two heads) run at batch 1 and 2.
* ops/: one tiny model per operator variant (ops/<op>-<variant>.onnx).

index.json lists each fixture: name, model, inputs and outputs (.npy files,
keyed by tensor name), batch (the value of the symbolic batch dimension, or
null) and tolerance (relative to max|reference|). All paths are relative to
the output folder. The same seed writes the same files; rerunning into an
existing folder overwrites them.
"""

import argparse
import json
import math
import os
import re
import sys
import time
import zlib
from pathlib import Path

import numpy as np

try:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover
    sys.exit(f"make-fixtures: {e}; install them with `pip install onnx onnxruntime numpy`")

TOLERANCE = 1e-4
LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
LIGHT_MODELS = [
    ("alexnet", "light_bvlc_alexnet.onnx"),
    ("vgg19", "light_vgg19.onnx"),
    ("resnet50", "light_resnet50.onnx"),
    ("inception_v1", "light_inception_v1.onnx"),
    ("inception_v2", "light_inception_v2.onnx"),
    ("densenet121", "light_densenet121.onnx"),
    ("squeezenet", "light_squeezenet.onnx"),
    ("shufflenet", "light_shufflenet.onnx"),
    ("zfnet512", "light_zfnet512.onnx"),
]
LARGE_LIGHT_MODELS = {"alexnet", "vgg19", "zfnet512"}


def sanitize(name):
    """File-name form of a tensor name: anything outside [A-Za-z0-9._-] becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def rng_for(seed, name):
    """A generator of its own for each fixture, so that one fixture's draws do not
    depend on which others are made."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


class Writer:
    """Saves models and data under the output folder and collects index entries."""

    def __init__(self, out, seed, only):
        self.out = out
        self.seed = seed
        self.only = only
        self.entries = []
        self.refused = []

    def wanted(self, name):
        return self.only is None or self.only in name

    def save_model(self, model, rel, external=None):
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if external is None:
            onnx.save_model(model, str(path))
        else:
            stale = path.parent / external
            if stale.exists():
                stale.unlink()  # onnx appends to an existing data file
            onnx.save_model(model, str(path), save_as_external_data=True,
                            all_tensors_to_one_file=True, location=external,
                            size_threshold=0)
        return rel

    def run_ort(self, model_rel, feeds):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        model = model_rel if isinstance(model_rel, bytes) else str(self.out / model_rel)
        sess = ort.InferenceSession(model, opts,
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds)))

    def add(self, name, model_rel, feeds, outputs, batch=None, tolerance=TOLERANCE):
        """Writes feeds and outputs as .npy and appends the index entry."""
        data = Path("data") / sanitize(name)
        (self.out / data).mkdir(parents=True, exist_ok=True)
        ins, outs = {}, {}
        for k, v in feeds.items():
            rel = data / f"in-{sanitize(k)}.npy"
            np.save(self.out / rel, v)
            ins[k] = str(rel)
        for k, v in outputs.items():
            rel = data / f"out-{sanitize(k)}.npy"
            np.save(self.out / rel, v)
            outs[k] = str(rel)
        self.entries.append({"name": name, "model": str(model_rel), "inputs": ins,
                             "outputs": outs, "batch": batch, "tolerance": tolerance})


def describe(outputs):
    parts = []
    for k, v in outputs.items():
        f = v.astype(np.float64)
        parts.append(f"{k}{list(v.shape)} {v.dtype} mean={f.mean():.3g} std={f.std():.3g} "
                     f"max|.|={np.abs(f).max():.3g}")
    return "; ".join(parts)


def check_not_degenerate(name, outputs):
    """Raises when an output would make the comparison meaningless."""
    for k, v in outputs.items():
        f = v.astype(np.float64)
        if not np.all(np.isfinite(f)):
            raise SystemExit(f"make-fixtures: {name}: output {k!r} has non-finite values")
        if f.size > 1 and np.all(f == f.flat[0]):
            raise SystemExit(f"make-fixtures: {name}: output {k!r} is constant ({f.flat[0]})")


# ---------------------------------------------------------------------------
# The nine light models


def weight_roles(graph):
    """Maps each float weight (ConstantOfShape output or float initializer) to
    (role, fan_in) from the node that consumes it."""
    consumers = {}
    for n in graph.node:
        for i, x in enumerate(n.input):
            consumers.setdefault(x, []).append((n, i))
    roles = {}

    def role_of(name, shape):
        for n, i in consumers.get(name, []):
            op = n.op_type
            if op == "Reshape" and i == 0:
                return role_of(n.output[0], shape)
            if op == "Unsqueeze":
                return role_of(n.output[0], shape)
            if op == "Conv":
                return ("conv_w", int(np.prod(shape[1:]))) if i == 1 else ("bias", 0)
            if op == "Gemm":
                if i == 1:
                    trans_b = any(a.name == "transB" and a.i for a in n.attribute)
                    fan = int(np.prod(shape[1:])) if trans_b else int(shape[0])
                    return ("gemm_w", fan)
                return ("bias", 0)
            if op == "BatchNormalization":
                role = ["", "bn_scale", "bn_bias", "bn_mean", "bn_var"][i]
                if role == "bn_scale" and any(c.op_type == "Sum" for c, _ in consumers.get(n.output[0], [])):
                    role = "bn_scale_residual"  # the end of a residual branch
                return (role, 0)
            if op == "Mul":
                return ("bn_scale", 0)
            if op == "Add":
                return ("bn_bias", 0)
        return (None, 0)

    return role_of


def random_weight(rng, role, fan_in, shape):
    u = lambda lo, hi: rng.uniform(lo, hi, size=shape).astype(np.float32)
    if role in ("conv_w", "gemm_w"):
        b = math.sqrt(6.0 / fan_in)  # sqrt(3/fan_in) x sqrt(2) for the ReLU that follows
        return u(-b, b)
    if role == "bias":
        return u(-0.1, 0.1)
    if role == "bn_scale":
        return u(0.5, 1.5)
    if role == "bn_scale_residual":
        # Small, so that the sum of 16 residual blocks does not grow without bound.
        return u(0.1, 0.3)
    if role in ("bn_bias", "bn_mean"):
        return u(-0.2, 0.2)
    if role == "bn_var":
        return u(0.5, 1.5)
    raise ValueError(role)


def randomize_light(model, rng):
    """Replaces the ConstantOfShape weights and float initializers with random ones."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    role_of = weight_roles(g)
    new_inits = []
    weights = {}  # name -> array, in graph order
    keep_nodes = []
    shape_tensors = set()
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[n.input[0]])]
            value = next(a.t for a in n.attribute if a.name == "value")
            assert value.data_type == TensorProto.FLOAT, n
            role, fan = role_of(n.output[0], shape)
            if role is None:
                raise SystemExit(f"make-fixtures: no role for weight {n.output[0]!r}")
            weights[n.output[0]] = random_weight(rng, role, fan, shape)
            shape_tensors.add(n.input[0])
        else:
            keep_nodes.append(n)
    used = {x for n in keep_nodes for x in n.input}
    for t in g.initializer:
        if t.name in shape_tensors or t.name not in used:
            continue
        if t.data_type == TensorProto.FLOAT:
            shape = list(t.dims)
            role, fan = role_of(t.name, shape)
            if role is None:
                raise SystemExit(f"make-fixtures: no role for initializer {t.name!r}")
            weights[t.name] = random_weight(rng, role, fan, shape)
        else:
            new_inits.append(t)
    del g.node[:]
    g.node.extend(keep_nodes)
    init_list = [numpy_helper.from_array(a, k) for k, a in weights.items()] + new_inits
    del g.initializer[:]
    g.initializer.extend(init_list)
    return weights


def logit_layer(graph):
    """The Conv or Gemm whose (positively homogeneous) output feeds the final Softmax."""
    producers = {o: n for n in graph.node for o in n.output}
    soft = [n for n in graph.node if n.op_type == "Softmax"]
    if not soft:
        return None, None
    n = producers[soft[-1].input[0]]
    path = []
    while n.op_type not in ("Conv", "Gemm"):
        if n.op_type not in ("Relu", "GlobalAveragePool", "AveragePool", "Reshape",
                             "Flatten", "Dropout"):
            raise SystemExit(f"make-fixtures: unexpected {n.op_type} before Softmax")
        path.append(n)
        n = producers[n.input[0]]
    return n, soft[-1].input[0]


def light_models(w, skip_large=False, ir3_variant=True):
    for short, fname in LIGHT_MODELS:
        if skip_large and short in LARGE_LIGHT_MODELS:
            continue
        names = [short] + (["squeezenet-ir3-inputs"] if short == "squeezenet" and ir3_variant else [])
        if not any(w.wanted(n) for n in names):
            continue
        t0 = time.time()
        src = LIGHT_DIR / fname
        if not src.exists():
            raise SystemExit(f"make-fixtures: {src} not found; the onnx package ships it "
                             f"since 1.5 (found onnx {onnx.__version__})")
        rng = rng_for(w.seed, short)
        model = onnx.load(str(src))
        init_names = {t.name for t in model.graph.initializer}
        weights = randomize_light(model, rng)
        g = model.graph
        data_inputs = [i for i in g.input if i.name not in init_names and i.name not in weights]
        if len(data_inputs) != 1:
            raise SystemExit(f"make-fixtures: {short}: expected one data input, "
                             f"found {[i.name for i in data_inputs]}")
        inp = data_inputs[0]
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        x = rng.uniform(-1, 1, size=shape).astype(np.float32)
        feeds = {inp.name: x}
        del g.input[:]
        g.input.extend(data_inputs)
        model.ir_version = 4

        # Rescale the logit layer so the logits have std 2.
        layer, logits = logit_layer(g)
        rel = Path("light") / f"{short}.onnx"
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        if logits is None:  # densenet121 ends with its logits
            logits = g.output[0].name
        else:
            probe.graph.output.append(helper.make_tensor_value_info(logits, TensorProto.FLOAT, None))
        got = w.run_ort(probe.SerializeToString(), feeds)
        s = float(np.std(got[logits]))
        if not np.isfinite(s) or s == 0:
            raise SystemExit(f"make-fixtures: {short}: logits std {s}")
        factor = 2.0 / s if layer is not None else 1.0
        by_name = {t.name: t for t in g.initializer}
        for x_name in (layer.input[1:] if layer is not None else []):
            if x_name in by_name:
                t = by_name[x_name]
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor), t.name))
            else:  # reached through a Reshape (inception_v1)
                prod = next(n for n in g.node if x_name in n.output)
                t = by_name[prod.input[0]]
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor), t.name))
        onnx.checker.check_model(model)
        if w.wanted(short):
            w.save_model(model, rel)
            outs = w.run_ort(rel, feeds)
            if layer is not None:
                check_softmax(short, outs)
            else:
                check_not_degenerate(short, outs)
            w.add(short, rel, feeds, outs)
            size = (w.out / rel).stat().st_size
            print(f"light/{short}: {len(g.node)} nodes, {sum(a.size for a in weights.values())/1e6:.1f}M "
                  f"weights, {size/2**20:.0f} MiB, logits std before rescale {s:.3g}; "
                  f"{describe(outs)}; {time.time()-t0:.1f}s", flush=True)
        if short == "squeezenet" and w.wanted("squeezenet-ir3-inputs"):
            old = onnx.ModelProto()
            old.CopyFrom(model)
            old.ir_version = 3
            for t in old.graph.initializer:
                old.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            onnx.checker.check_model(old)
            rel3 = Path("light") / "squeezenet-ir3-inputs.onnx"
            w.save_model(old, rel3)
            outs = w.run_ort(rel3, feeds)
            check_softmax("squeezenet-ir3-inputs", outs)
            w.add("squeezenet-ir3-inputs", rel3, feeds, outs)
            print(f"light/squeezenet-ir3-inputs: {len(old.graph.input)} graph inputs; "
                  f"{describe(outs)}", flush=True)


def check_softmax(name, outs):
    check_not_degenerate(name, outs)
    for k, v in outs.items():
        top = float(v.max())
        rel_std = float(v.std() / max(v.mean(), 1e-30))
        if top > 0.99 or rel_std < 0.1:
            raise SystemExit(f"make-fixtures: {name}: softmax {k!r} is degenerate "
                             f"(max {top:.3g}, std/mean {rel_std:.3g})")


# ---------------------------------------------------------------------------
# Building small graphs


def ir_for_opset(opset):
    """The lowest IR version whose onnx release introduced `opset`."""
    for row in helper.VERSION_TABLE:
        ir, ai_onnx = row[1], row[2]
        if ai_onnx >= opset:
            return max(ir, 4)
    raise ValueError(opset)


def value(rng, spec):
    """An array from a spec: an ndarray as is, a shape tuple (uniform in [-1, 1),
    float32) or a callable taking the generator."""
    if isinstance(spec, np.ndarray):
        return spec
    if callable(spec):
        return spec(rng)
    return rng.uniform(-1, 1, size=spec).astype(np.float32)


def tensor(name, arr):
    if isinstance(arr, TensorProto):
        arr.name = name
        return arr
    return numpy_helper.from_array(arr, name)


def uniform(lo, hi, shape, dtype=np.float32):
    return lambda rng: rng.uniform(lo, hi, size=shape).astype(dtype)


def ints(lo, hi, shape):
    return lambda rng: rng.integers(lo, hi, size=shape).astype(np.int64)


def node(op, ins, outs, name=None, **attrs):
    return helper.make_node(op, ins, outs, name=name or f"{op.lower()}_{outs[0]}", **attrs)


def build_model(name, opset, nodes, inputs, inits, outputs, input_shapes=None,
                extra_opsets=()):
    """A ModelProto; inputs and inits are name -> array, outputs a list of names.
    input_shapes overrides the declared shape of an input (symbolic dims)."""
    g_inputs = []
    for k, a in inputs.items():
        shape = (input_shapes or {}).get(k, list(a.shape))
        g_inputs.append(helper.make_tensor_value_info(
            k, helper.np_dtype_to_tensor_dtype(a.dtype), shape))
    g_outputs = []
    for k in outputs:
        vi = onnx.ValueInfoProto()
        vi.name = k
        g_outputs.append(vi)
    graph = helper.make_graph(nodes, name.replace("/", "_"), g_inputs, g_outputs,
                              [tensor(k, a) for k, a in inits.items()])
    model = helper.make_model(graph, producer_name="sluice-make-fixtures",
                              opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                              ir_version=ir_for_opset(opset))
    inferred = onnx.shape_inference.infer_shapes(model)
    for o, io in zip(model.graph.output, inferred.graph.output):
        o.CopyFrom(io)
    return model


def set_output_shapes(model, outs, symbolic=None):
    """Declares the outputs with the shapes onnxruntime produced; symbolic maps
    a dimension index to its dim_param (the batch)."""
    for o in model.graph.output:
        a = outs[o.name]
        dims = [d for d in a.shape]
        if symbolic:
            dims = [symbolic.get(i, d) for i, d in enumerate(dims)]
        o.CopyFrom(helper.make_tensor_value_info(
            o.name, helper.np_dtype_to_tensor_dtype(a.dtype), dims))


class Ops:
    """One tiny model per operator variant, under ops/."""

    def __init__(self, w):
        self.w = w
        self.count = 0

    def __call__(self, name, opset, nodes, inputs=None, inits=None, outputs=None,
                 tolerance=TOLERANCE, constant_output=False):
        w = self.w
        if not w.wanted(name):
            return
        rng = rng_for(w.seed, name)
        feeds = {k: value(rng, v) for k, v in (inputs or {}).items()}
        init = {k: (v if isinstance(v, TensorProto) else value(rng, v))
                for k, v in (inits or {}).items()}  # a callable may return a TensorProto
        outputs = outputs or list(nodes[-1].output)
        rel = Path("ops") / f"{name}.onnx"
        try:
            model = build_model(name, opset, nodes, feeds, init, outputs)
            onnx.checker.check_model(model, full_check=True)
            outs = w.run_ort(model.SerializeToString(), feeds)
        except Exception as e:  # onnx or onnxruntime refuses the variant
            msg = str(e).strip().splitlines()[0][:300]
            w.refused.append((name, msg))
            print(f"ops/{name}: refused, not written: {msg}", flush=True)
            return
        if not constant_output:
            check_not_degenerate(name, outs)
        set_output_shapes(model, outs)
        w.save_model(model, rel)
        w.add(name, rel, feeds, outs, tolerance=tolerance)
        self.count += 1


# ---------------------------------------------------------------------------
# Transformer encoder


def encoder_model(rng, layers=2, vocab=100, seq=16, hidden=64, heads=4, ffn=128):
    d = hidden // heads
    nodes, inits = [], {}

    def W(name, shape, bound):
        inits[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
        return name

    def lin(x, name, fan_in, fan_out):
        w_ = W(f"{name}.weight", (fan_in, fan_out), math.sqrt(3.0 / fan_in))
        b_ = W(f"{name}.bias", (fan_out,), 0.1)
        nodes.append(node("MatMul", [x, w_], [f"{name}.mm"], name=f"{name}/MatMul"))
        nodes.append(node("Add", [f"{name}.mm", b_], [f"{name}.out"], name=f"{name}/Add"))
        return f"{name}.out"

    def layernorm(x, name):
        inits[f"{name}.weight"] = rng.uniform(0.5, 1.5, size=(hidden,)).astype(np.float32)
        inits[f"{name}.bias"] = rng.uniform(-0.2, 0.2, size=(hidden,)).astype(np.float32)
        nodes.append(node("LayerNormalization", [x, f"{name}.weight", f"{name}.bias"],
                          [f"{name}.out"], name=f"{name}/LayerNormalization",
                          axis=-1, epsilon=1e-5))
        return f"{name}.out"

    inits["embed.tokens"] = rng.uniform(-1, 1, size=(vocab, hidden)).astype(np.float32)
    inits["embed.positions"] = rng.uniform(-1, 1, size=(seq, hidden)).astype(np.float32)
    # Shape constants are Constant nodes, not initializers, so they stay inside the
    # model file when the weights go to external data (onnxruntime's shape
    # inference does not read external data).
    for k, v in [("c.seq", [seq]), ("c.heads", [heads]), ("c.head_dim", [d]), ("c.hidden", [hidden]),
                 ("c.zero", 0), ("c.axes0", [0])]:
        nodes.append(node("Constant", [], [k], name=f"const/{k}",
                          value=numpy_helper.from_array(np.array(v, np.int64))))
    inits["c.scale"] = np.array(math.sqrt(d), np.float32)
    inits["c.sqrt2"] = np.array(math.sqrt(2.0), np.float32)
    inits["c.half"] = np.array(0.5, np.float32)
    inits["c.one"] = np.array(1.0, np.float32)
    nodes.append(node("Gather", ["embed.tokens", "input_ids"], ["embed.tok"], name="embed/Gather", axis=0))
    nodes.append(node("Add", ["embed.tok", "embed.positions"], ["embed.out"], name="embed/Add"))
    x = "embed.out"
    for l in range(layers):
        p = f"layer{l}"
        h = layernorm(x, f"{p}.ln1")
        # The head shape [batch, seq, heads, head_dim] from the runtime batch.
        nodes += [
            node("Shape", [h], [f"{p}.shape"], name=f"{p}/Shape"),
            node("Gather", [f"{p}.shape", "c.zero"], [f"{p}.batch"], name=f"{p}/Gather_batch", axis=0),
            node("Unsqueeze", [f"{p}.batch", "c.axes0"], [f"{p}.batch1"], name=f"{p}/Unsqueeze_batch"),
            node("Concat", [f"{p}.batch1", "c.seq", "c.heads", "c.head_dim"], [f"{p}.heads_shape"],
                 name=f"{p}/Concat_heads_shape", axis=0),
            node("Concat", [f"{p}.batch1", "c.seq", "c.hidden"], [f"{p}.merge_shape"],
                 name=f"{p}/Concat_merge_shape", axis=0),
        ]
        qkv = {}
        for t in "qkv":
            y = lin(h, f"{p}.attn.{t}", hidden, hidden)
            nodes.append(node("Reshape", [y, f"{p}.heads_shape"], [f"{p}.{t}.heads"], name=f"{p}/Reshape_{t}"))
            perm = [0, 2, 3, 1] if t == "k" else [0, 2, 1, 3]
            nodes.append(node("Transpose", [f"{p}.{t}.heads"], [f"{p}.{t}.t"], name=f"{p}/Transpose_{t}", perm=perm))
            qkv[t] = f"{p}.{t}.t"
        nodes += [
            node("MatMul", [qkv["q"], qkv["k"]], [f"{p}.scores"], name=f"{p}/MatMul_scores"),
            node("Div", [f"{p}.scores", "c.scale"], [f"{p}.scaled"], name=f"{p}/Div_scale"),
            node("Softmax", [f"{p}.scaled"], [f"{p}.probs"], name=f"{p}/Softmax", axis=-1),
            node("MatMul", [f"{p}.probs", qkv["v"]], [f"{p}.ctx"], name=f"{p}/MatMul_ctx"),
            node("Transpose", [f"{p}.ctx"], [f"{p}.ctx.t"], name=f"{p}/Transpose_ctx", perm=[0, 2, 1, 3]),
            node("Reshape", [f"{p}.ctx.t", f"{p}.merge_shape"], [f"{p}.ctx.merged"], name=f"{p}/Reshape_merge"),
        ]
        a = lin(f"{p}.ctx.merged", f"{p}.attn.out", hidden, hidden)
        nodes.append(node("Add", [x, a], [f"{p}.res1"], name=f"{p}/Add_residual1"))
        h2 = layernorm(f"{p}.res1", f"{p}.ln2")
        f1 = lin(h2, f"{p}.ffn.up", hidden, ffn)
        nodes += [  # GELU: x * 0.5 * (1 + erf(x / sqrt(2)))
            node("Div", [f1, "c.sqrt2"], [f"{p}.gelu.div"], name=f"{p}/gelu/Div"),
            node("Erf", [f"{p}.gelu.div"], [f"{p}.gelu.erf"], name=f"{p}/gelu/Erf"),
            node("Add", [f"{p}.gelu.erf", "c.one"], [f"{p}.gelu.add"], name=f"{p}/gelu/Add"),
            node("Mul", [f1, f"{p}.gelu.add"], [f"{p}.gelu.mul"], name=f"{p}/gelu/Mul"),
            node("Mul", [f"{p}.gelu.mul", "c.half"], [f"{p}.gelu.out"], name=f"{p}/gelu/Mul_half"),
        ]
        f2 = lin(f"{p}.gelu.out", f"{p}.ffn.down", ffn, hidden)
        nodes.append(node("Add", [f"{p}.res1", f2], [f"{p}.out"], name=f"{p}/Add_residual2"))
        x = f"{p}.out"
    inits["final_ln.weight"] = rng.uniform(0.5, 1.5, size=(hidden,)).astype(np.float32)
    inits["final_ln.bias"] = rng.uniform(-0.2, 0.2, size=(hidden,)).astype(np.float32)
    nodes.append(node("LayerNormalization", [x, "final_ln.weight", "final_ln.bias"], ["hidden"],
                      name="final_ln/LayerNormalization", axis=-1, epsilon=1e-5))
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", seq, hidden])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, producer_name="sluice-make-fixtures",
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def encoder(w):
    names = ["encoder-b1", "encoder-b3", "encoder-external-b2"]
    if not any(w.wanted(n) for n in names):
        return
    rng = rng_for(w.seed, "encoder")
    model = encoder_model(rng)
    rel = w.save_model(model, Path("models") / "encoder.onnx")
    for name, batch in [("encoder-b1", 1), ("encoder-b3", 3)]:
        if w.wanted(name):
            feeds = {"input_ids": rng_for(w.seed, name).integers(0, 100, size=(batch, 16)).astype(np.int64)}
            outs = w.run_ort(rel, feeds)
            check_not_degenerate(name, outs)
            w.add(name, rel, feeds, outs, batch=batch)
            print(f"models/encoder ({name}): {len(model.graph.node)} nodes; {describe(outs)}", flush=True)
    name = "encoder-external-b2"
    if w.wanted(name):
        ext = Path("models") / "encoder-external" / "encoder.onnx"
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        w.save_model(copy, ext, external="encoder.weights")
        feeds = {"input_ids": rng_for(w.seed, name).integers(0, 100, size=(2, 16)).astype(np.int64)}
        outs = w.run_ort(ext, feeds)
        w.add(name, ext, feeds, outs, batch=2)
        size = (w.out / ext.parent / "encoder.weights").stat().st_size
        print(f"models/encoder-external: encoder.weights {size} bytes; {describe(outs)}", flush=True)


# ---------------------------------------------------------------------------
# Detector-style graph


def detector_model(rng, opset):
    nodes, inits = [], {}

    def conv(x, name, cin, cout, k, stride=1, pad=0):
        b = math.sqrt(6.0 / (cin * k * k))
        inits[f"{name}.weight"] = rng.uniform(-b, b, size=(cout, cin, k, k)).astype(np.float32)
        inits[f"{name}.bias"] = rng.uniform(-0.1, 0.1, size=(cout,)).astype(np.float32)
        nodes.append(node("Conv", [x, f"{name}.weight", f"{name}.bias"], [f"{name}.out"],
                          name=f"{name}/Conv", kernel_shape=[k, k], strides=[stride, stride],
                          pads=[pad] * 4))
        return f"{name}.out"

    def silu(x, name):
        nodes.append(node("Sigmoid", [x], [f"{name}.sig"], name=f"{name}/Sigmoid"))
        nodes.append(node("Mul", [x, f"{name}.sig"], [f"{name}.out"], name=f"{name}/Mul"))
        return f"{name}.out"

    empty = np.zeros((0,), np.float32)
    s1 = silu(conv("images", "stem", 3, 16, 3, stride=2, pad=1), "stem.act")       # [B,16,16,16]
    s2 = silu(conv(s1, "c2", 16, 32, 3, pad=1), "c2.act")                         # [B,32,16,16]
    nodes.append(node("MaxPool", [s2], ["pool.out"], name="pool/MaxPool",
                      kernel_shape=[2, 2], strides=[2, 2]))                        # [B,32,8,8]
    inits["up.scales"] = np.array([1, 1, 2, 2], np.float32)
    inits["c.roi"] = empty
    up_in = ["pool.out", "c.roi" if opset < 13 else "", "up.scales"]
    nodes.append(node("Resize", up_in, ["up.out"], name="up/Resize", mode="nearest"))  # [B,32,16,16]
    nodes.append(node("Concat", ["up.out", s1], ["cat1.out"], name="cat1/Concat", axis=1))  # [B,48,16,16]
    c3 = conv("cat1.out", "c3", 48, 32, 3, pad=1)
    if opset >= 13:
        inits["split.sizes"] = np.array([16, 16], np.int64)
        nodes.append(node("Split", [c3, "split.sizes"], ["split.a", "split.b"], name="split/Split", axis=1))
    else:
        nodes.append(node("Split", [c3], ["split.a", "split.b"], name="split/Split", axis=1, split=[16, 16]))
    # Resize "a" to 24x24 by sizes, the batch taken from the runtime shape.
    inits["c.starts0"] = np.array([0], np.int64)
    inits["c.ends2"] = np.array([2], np.int64)
    inits["c.hw24"] = np.array([24, 24], np.int64)
    nodes += [
        node("Shape", ["split.a"], ["a.shape"], name="resize_sizes/Shape"),
        node("Slice", ["a.shape", "c.starts0", "c.ends2"], ["a.nc"], name="resize_sizes/Slice"),
        node("Concat", ["a.nc", "c.hw24"], ["a.sizes"], name="resize_sizes/Concat", axis=0),
    ]
    ctm = "half_pixel" if opset >= 13 else "align_corners"
    nodes.append(node("Resize", ["split.a", "c.roi" if opset < 13 else "", "c.roi" if opset < 13 else "", "a.sizes"],
                      ["a.up"], name="a/Resize", mode="linear", coordinate_transformation_mode=ctm))
    inits["crop.starts"] = np.array([4, 4], np.int64)
    inits["crop.ends"] = np.array([20, 20], np.int64)
    inits["crop.axes"] = np.array([2, 3], np.int64)
    nodes.append(node("Slice", ["a.up", "crop.starts", "crop.ends", "crop.axes"], ["a.crop"], name="a/Slice"))
    nodes.append(node("Concat", ["split.b", "a.crop"], ["cat2.out"], name="cat2/Concat", axis=1))  # [B,32,16,16]
    outputs = []
    for head, src, cin in [("head16", "cat2.out", 32), ("head8", "pool.out", 32)]:
        h = conv(src, f"{head}.conv", cin, 12, 1)
        inits[f"{head}.shape"] = np.array([0, -1, 6], np.int64)
        nodes += [
            node("Transpose", [h], [f"{head}.t"], name=f"{head}/Transpose", perm=[0, 2, 3, 1]),
            node("Reshape", [f"{head}.t", f"{head}.shape"], [f"{head}.r"], name=f"{head}/Reshape"),
            node("Sigmoid", [f"{head}.r"], [f"{head}.out"], name=f"{head}/Sigmoid"),
        ]
        outputs.append(f"{head}.out")
    inputs = {"images": np.zeros((1, 3, 32, 32), np.float32)}
    model = build_model(f"detector-opset{opset}", opset, nodes, inputs, inits, outputs,
                        input_shapes={"images": ["batch", 3, 32, 32]})
    onnx.checker.check_model(model, full_check=True)
    return model


def detector(w):
    for opset in (13, 11):
        names = [f"detector-opset{opset}-b{b}" for b in (1, 2)]
        if not any(w.wanted(n) for n in names):
            continue
        rng = rng_for(w.seed, f"detector-opset{opset}")
        model = detector_model(rng, opset)
        rel = Path("models") / f"detector-opset{opset}.onnx"
        outs = w.run_ort(model.SerializeToString(), {"images": np.zeros((2, 3, 32, 32), np.float32)})
        set_output_shapes(model, outs, symbolic={0: "batch"})
        w.save_model(model, rel)
        for name, batch in zip(names, (1, 2)):
            if not w.wanted(name):
                continue
            feeds = {"images": rng_for(w.seed, name).uniform(-1, 1, size=(batch, 3, 32, 32)).astype(np.float32)}
            outs = w.run_ort(rel, feeds)
            check_not_degenerate(name, outs)
            w.add(name, rel, feeds, outs, batch=batch)
            print(f"models/detector-opset{opset} ({name}): {len(model.graph.node)} nodes; "
                  f"{describe(outs)}", flush=True)


# ---------------------------------------------------------------------------
# Operator coverage

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def i64(*v):
    return np.array(v, np.int64)


def f32(*v):
    return np.array(v, np.float32)


def bf16_tensor(name, arr, raw):
    """A BFLOAT16 initializer holding arr truncated to bfloat16 (raw_data or int32_data)."""
    bits = (np.ascontiguousarray(arr, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if raw:
        return helper.make_tensor(name, TensorProto.BFLOAT16, arr.shape, bits.tobytes(), raw=True)
    t = helper.make_tensor(name, TensorProto.BFLOAT16, arr.shape, [0.0] * arr.size)
    del t.int32_data[:]
    t.int32_data.extend(int(b) for b in bits.ravel())
    return t


def op_fixtures(op):
    N = node
    X = {"x": (1, 3, 8, 8)}

    # Conv
    op("conv-basic", 11, [N("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3])], X,
       {"w": (4, 3, 3, 3), "b": (4,)})
    op("conv-nobias", 11, [N("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], X,
       {"w": (4, 3, 3, 3)})
    op("conv-grouped", 11, [N("Conv", ["x", "w", "b"], ["y"], group=2, pads=[1, 1, 1, 1])],
       {"x": (1, 4, 7, 7)}, {"w": (6, 2, 3, 3), "b": (6,)})
    op("conv-depthwise", 11, [N("Conv", ["x", "w", "b"], ["y"], group=4, pads=[1, 1, 1, 1])],
       {"x": (2, 4, 7, 7)}, {"w": (4, 1, 3, 3), "b": (4,)})
    op("conv-strides", 11, [N("Conv", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
       {"x": (1, 3, 9, 9)}, {"w": (4, 3, 3, 3), "b": (4,)})
    op("conv-pads-asymmetric", 11, [N("Conv", ["x", "w", "b"], ["y"], strides=[2, 1], pads=[0, 1, 2, 1])],
       {"x": (1, 3, 8, 7)}, {"w": (4, 3, 3, 2), "b": (4,)})
    for mode in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        op(f"conv-autopad-{mode.lower().replace('_', '-')}", 11,
           [N("Conv", ["x", "w", "b"], ["y"], auto_pad=mode, strides=[2, 2])],
           {"x": (1, 3, 7, 7)}, {"w": (4, 3, 4, 4), "b": (4,)})
    op("conv-dilations", 11, [N("Conv", ["x", "w", "b"], ["y"], dilations=[2, 2], pads=[2, 1, 2, 1])],
       {"x": (1, 3, 9, 9)}, {"w": (4, 3, 3, 3), "b": (4,)})
    op("conv-1d", 11, [N("Conv", ["x", "w", "b"], ["y"], strides=[2], pads=[1, 1])],
       {"x": (2, 3, 11)}, {"w": (5, 3, 3), "b": (5,)})

    # BatchNormalization
    bn = {"s": uniform(0.5, 1.5, (4,)), "bb": uniform(-0.2, 0.2, (4,)),
          "m": uniform(-0.2, 0.2, (4,)), "v": uniform(0.5, 1.5, (4,))}
    op("batchnorm-opset9", 9, [N("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"], epsilon=1e-3)],
       {"x": (2, 4, 5, 5)}, bn)
    op("batchnorm-opset15", 15, [N("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"])],
       {"x": (2, 4, 5, 5)}, bn)
    op("batchnorm-after-conv", 11, [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                                    N("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"])],
       X, {"w": (4, 3, 3, 3), "b": (4,), **bn})
    op("batchnorm-after-conv-nobias", 11, [N("Conv", ["x", "w"], ["c"]),
                                           N("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"]),
                                           N("Relu", ["y"], ["z"])],
       X, {"w": (4, 3, 3, 3), **bn})
    op("batchnorm-after-gemm", 11, [N("Gemm", ["x", "w", "b"], ["g"], transB=1),
                                    N("BatchNormalization", ["g", "s", "bb", "m", "v"], ["y"])],
       {"x": (3, 6)}, {"w": (4, 6), "b": (4,), **bn})

    # Element-wise activations
    op("relu-opset14", 14, [N("Relu", ["x"], ["y"])], X)
    op("leakyrelu-alpha", 16, [N("LeakyRelu", ["x"], ["y"], alpha=0.2)], X)
    op("sigmoid-basic", 13, [N("Sigmoid", ["x"], ["y"])], {"x": uniform(-6, 6, (2, 3, 4))})
    op("tanh-basic", 13, [N("Tanh", ["x"], ["y"])], {"x": uniform(-3, 3, (2, 3, 4))})
    op("hardsigmoid-alpha-beta", 9, [N("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4)],
       {"x": uniform(-3, 3, (2, 3, 4))})
    op("hardswish-opset14", 14, [N("HardSwish", ["x"], ["y"])], {"x": uniform(-4, 4, (2, 3, 4))})
    op("erf-basic", 13, [N("Erf", ["x"], ["y"])], {"x": uniform(-3, 3, (2, 3, 4))})
    op("gelu-none", 20, [N("Gelu", ["x"], ["y"])], {"x": uniform(-3, 3, (2, 3, 4))})
    op("gelu-tanh", 20, [N("Gelu", ["x"], ["y"], approximate="tanh")], {"x": uniform(-3, 3, (2, 3, 4))})
    op("sqrt-basic", 13, [N("Sqrt", ["x"], ["y"])], {"x": uniform(0.01, 4, (2, 3, 4))})

    # Clip
    c = {"x": uniform(-2, 2, (2, 3, 4))}
    op("clip-opset9-attributes", 9, [N("Clip", ["x"], ["y"], min=-0.5, max=0.8)], c)
    op("clip-opset9-default-max", 9, [N("Clip", ["x"], ["y"], min=-0.5)], c)
    op("clip-opset11-inputs", 11, [N("Clip", ["x", "lo", "hi"], ["y"])], c,
       {"lo": np.array(-0.5, np.float32), "hi": np.array(0.8, np.float32)})
    op("clip-opset13-min-only", 13, [N("Clip", ["x", "lo"], ["y"])], c, {"lo": np.array(-0.5, np.float32)})
    op("clip-opset13-max-only", 13, [N("Clip", ["x", "", "hi"], ["y"])], c, {"hi": np.array(0.8, np.float32)})
    op("clip-opset13-no-bounds", 13, [N("Clip", ["x"], ["y"])], c)

    # Softmax / LogSoftmax: axis=1 of a rank-3 tensor differs between opset 11 and 13.
    s3 = {"x": uniform(-3, 3, (2, 3, 4))}
    for o in ("Softmax", "LogSoftmax"):
        lo = o.lower()
        op(f"{lo}-opset11-axis1", 11, [N(o, ["x"], ["y"], axis=1)], s3)
        op(f"{lo}-opset11-default", 11, [N(o, ["x"], ["y"])], s3)
        op(f"{lo}-opset13-axis1", 13, [N(o, ["x"], ["y"], axis=1)], s3)
        op(f"{lo}-opset13-default", 13, [N(o, ["x"], ["y"])], s3)
        op(f"{lo}-opset13-axis-neg2", 13, [N(o, ["x"], ["y"], axis=-2)], s3)

    # Broadcasting binary operators
    shapes = {"4": (4,), "3x1": (3, 1), "scalar": (), "1x3x1": (1, 3, 1), "same": (2, 3, 4)}
    for o in ("Add", "Sub", "Mul", "Div", "Pow"):
        for tag, shp in shapes.items():
            if o == "Pow":
                a, b = uniform(0.5, 2, (2, 3, 4)), uniform(-2, 2, shp)
            elif o == "Div":
                a, b = (2, 3, 4), (lambda s: lambda r: (r.uniform(0.5, 2, s) * r.choice([-1, 1], s)).astype(np.float32))(shp)
            else:
                a, b = (2, 3, 4), shp
            op(f"{o.lower()}-broadcast-{tag}", 14 if o != "Pow" else 15, [N(o, ["a", "b"], ["y"])],
               {"a": a}, {"b": b})
    op("add-broadcast-both", 14, [N("Add", ["a", "b"], ["y"])], {"a": (2, 1, 4), "b": (3, 1)})
    op("mul-input-first-broadcast", 14, [N("Mul", ["b", "a"], ["y"])], {"a": (2, 3, 4)}, {"b": (3, 1)})
    op("sum-3-broadcast", 13, [N("Sum", ["a", "b", "c"], ["y"])], {"a": (2, 3, 4)}, {"b": (3, 4), "c": (1, 4)})
    op("sum-1-input", 13, [N("Sum", ["a"], ["y"])], {"a": (2, 3)})

    # Pooling
    P = {"x": (1, 2, 8, 8)}
    op("maxpool-pads-strides", 12, [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], P)
    op("maxpool-ceil", 12, [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)], P)
    op("maxpool-dilations", 12, [N("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])], P)
    op("maxpool-opset9", 9, [N("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], P)
    op("maxpool-negative-input-padded", 12, [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
       {"x": uniform(-2, -1, (1, 2, 5, 5))})
    for cip in (0, 1):
        op(f"averagepool-pads-count-include-pad{cip}", 11,
           [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
              count_include_pad=cip)], P)
    op("averagepool-ceil", 11, [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
       {"x": (1, 2, 8, 8)})
    op("averagepool-ceil-pads", 11, [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                       pads=[1, 1, 1, 1], ceil_mode=1)], {"x": (1, 2, 8, 8)})
    op("globalaveragepool-basic", 9, [N("GlobalAveragePool", ["x"], ["y"])], {"x": (2, 3, 5, 4)})
    op("lrn-size3", 13, [N("LRN", ["x"], ["y"], size=3, alpha=0.5, beta=0.75, bias=1.0)], {"x": (1, 6, 4, 4)})
    op("lrn-size5-default", 13, [N("LRN", ["x"], ["y"], size=5)], {"x": uniform(-30, 30, (1, 7, 3, 3))})

    # Gemm and MatMul
    op("gemm-plain", 13, [N("Gemm", ["a", "b"], ["y"])], {"a": (3, 5)}, {"b": (5, 4)})
    op("gemm-transA", 13, [N("Gemm", ["a", "b", "c"], ["y"], transA=1)], {"a": (5, 3)}, {"b": (5, 4), "c": (4,)})
    op("gemm-transB", 13, [N("Gemm", ["a", "b", "c"], ["y"], transB=1)], {"a": (3, 5)}, {"b": (4, 5), "c": (3, 4)})
    op("gemm-transA-transB-alpha-beta", 13, [N("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
       {"a": (5, 3)}, {"b": (4, 5), "c": (3, 4)})
    op("gemm-bias-1xN", 13, [N("Gemm", ["a", "b", "c"], ["y"], beta=0.5)], {"a": (3, 5)}, {"b": (5, 4), "c": (1, 4)})
    op("gemm-bias-Mx1", 13, [N("Gemm", ["a", "b", "c"], ["y"])], {"a": (3, 5)}, {"b": (5, 4), "c": (3, 1)})
    op("gemm-bias-scalar", 13, [N("Gemm", ["a", "b", "c"], ["y"])], {"a": (3, 5)}, {"b": (5, 4), "c": (1,)})
    op("gemm-opset9", 9, [N("Gemm", ["a", "b", "c"], ["y"], transB=1)], {"a": (3, 5)}, {"b": (4, 5), "c": (4,)})
    op("matmul-2d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": (3, 5)}, {"b": (5, 4)})
    op("matmul-3d-2d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": (2, 3, 5)}, {"b": (5, 4)})
    op("matmul-2d-3d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": (3, 5)}, {"b": (2, 5, 4)})
    op("matmul-4d-broadcast", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": (2, 1, 3, 5)}, {"b": (1, 3, 5, 4)})
    op("matmul-1d-2d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": (5,)}, {"b": (5, 4)})
    op("matmul-3d-1d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": (2, 3, 5)}, {"b": (5,)})
    op("matmul-1d-1d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": (5,)}, {"b": (5,)})

    # Shape manipulation
    R = {"x": (2, 3, 4, 5)}
    for axis in (0, 1, 2, -1):
        op(f"flatten-axis{axis}".replace("-1", "neg1"), 13, [N("Flatten", ["x"], ["y"], axis=axis)], R)
    op("flatten-opset9-default", 9, [N("Flatten", ["x"], ["y"])], R)
    op("reshape-zero-and-minus-one", 14, [N("Reshape", ["x", "s"], ["y"])], R, {"s": i64(0, -1, 5)})
    op("reshape-minus-one-first", 14, [N("Reshape", ["x", "s"], ["y"])], R, {"s": i64(-1, 4)})
    op("reshape-zero-middle", 14, [N("Reshape", ["x", "s"], ["y"])], R, {"s": i64(2, 0, 2, 10)})
    op("reshape-opset5", 9, [N("Reshape", ["x", "s"], ["y"])], R, {"s": i64(6, 20)})
    op("transpose-default", 13, [N("Transpose", ["x"], ["y"])], R)
    op("transpose-perm", 13, [N("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], R)
    op("transpose-perm-3d", 13, [N("Transpose", ["x"], ["y"], perm=[1, 0, 2])], {"x": (2, 3, 4)})
    op("concat-axis-neg1", 13, [N("Concat", ["a", "b", "c"], ["y"], axis=-1)],
       {"a": (2, 3, 4)}, {"b": (2, 3, 1), "c": (2, 3, 2)})
    op("concat-axis-neg3", 13, [N("Concat", ["a", "b"], ["y"], axis=-3)], {"a": (2, 3, 4)}, {"b": (1, 3, 4)})
    # More inputs than the CUDA gather kernel's four sources: lowered as a chain of gathers.
    op("concat-5-inputs-axis-neg1", 13, [N("Concat", ["a", "b", "c", "d", "e"], ["y"], axis=-1)],
       {"a": (2, 3, 1), "b": (2, 3, 2), "c": (2, 3, 1), "d": (2, 3, 3), "e": (2, 3, 1)})
    op("concat-9-inputs-axis1", 13,
       [N("Concat", ["a", "b", "c", "d", "e", "f", "g", "h", "i"], ["y"], axis=1)],
       {"a": (2, 3, 4), "b": (2, 1, 4)},
       {"c": (2, 2, 4), "d": (2, 1, 4), "e": (2, 3, 4), "f": (2, 1, 4), "g": (2, 2, 4),
        "h": (2, 1, 4), "i": (2, 2, 4)})
    op("concat-axis1-opset11", 11, [N("Concat", ["a", "b"], ["y"], axis=1)], {"a": (2, 3, 4)}, {"b": (2, 2, 4)})
    op("split-opset11-attribute", 11, [N("Split", ["x"], ["y0", "y1"], axis=1, split=[1, 2])], {"x": (2, 3, 4)})
    op("split-opset11-equal", 11, [N("Split", ["x"], ["y0", "y1"], axis=-1)], {"x": (2, 3, 4)})
    op("split-opset13-input", 13, [N("Split", ["x", "s"], ["y0", "y1", "y2"], axis=2)], {"x": (2, 3, 6)},
       {"s": i64(1, 2, 3)})
    op("split-opset13-equal", 13, [N("Split", ["x"], ["y0", "y1", "y2"], axis=2)], {"x": (2, 3, 6)})
    op("split-opset18-num-outputs", 18, [N("Split", ["x"], ["y0", "y1", "y2"], axis=2, num_outputs=3)],
       {"x": (2, 3, 8)})
    op("slice-opset9-attributes", 9, [N("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, 2], axes=[0, 2])],
       {"x": (4, 3, 5)})
    op("slice-opset9-no-axes-clamped", 9, [N("Slice", ["x"], ["y"], starts=[-3, 1], ends=[100, -1])],
       {"x": (4, 5)})
    op("slice-opset13-negative-starts", 13, [N("Slice", ["x", "st", "en", "ax"], ["y"])], {"x": (4, 3, 6)},
       {"st": i64(-3, -2), "en": i64(-1, 1000), "ax": i64(0, -1)})
    op("slice-opset13-step2", 13, [N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": (4, 3, 7)},
       {"st": i64(0, 1), "en": i64(7, 4), "ax": i64(2, 0), "sp": i64(2, 2)})
    op("slice-opset13-reverse", 13, [N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": (4, 3, 5)},
       {"st": i64(-1), "en": i64(INT64_MIN), "ax": i64(2), "sp": i64(-1)})
    op("slice-opset13-reverse-partial", 13, [N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": (4, 3, 7)},
       {"st": i64(5), "en": i64(0), "ax": i64(-1), "sp": i64(-2)})
    op("slice-opset13-axes-omitted", 13, [N("Slice", ["x", "st", "en"], ["y"])], {"x": (4, 3, 5)},
       {"st": i64(1, 0, 2), "en": i64(3, 2, INT64_MAX)})
    op("slice-opset13-ends-int64-max", 13, [N("Slice", ["x", "st", "en", "ax"], ["y"])], {"x": (4, 3, 5)},
       {"st": i64(2), "en": i64(INT64_MAX), "ax": i64(1)})
    op("squeeze-opset11-attribute", 11, [N("Squeeze", ["x"], ["y"], axes=[1, -1])], {"x": (2, 1, 3, 1)})
    op("squeeze-opset11-all", 11, [N("Squeeze", ["x"], ["y"])], {"x": (1, 2, 1, 3, 1)})
    op("squeeze-opset13-input", 13, [N("Squeeze", ["x", "a"], ["y"])], {"x": (2, 1, 3, 1)}, {"a": i64(-3)})
    op("unsqueeze-opset11-attribute", 11, [N("Unsqueeze", ["x"], ["y"], axes=[0, -1])], {"x": (2, 3)})
    op("unsqueeze-opset13-input", 13, [N("Unsqueeze", ["x", "a"], ["y"])], {"x": (2, 3)}, {"a": i64(1, -1)})
    op("unsqueeze-opset13-unsorted", 13, [N("Unsqueeze", ["x", "a"], ["y"])], {"x": (2, 3)}, {"a": i64(3, 0)})
    op("expand-broadcast", 13, [N("Expand", ["x", "s"], ["y"])], {"x": (3, 1)}, {"s": i64(2, 3, 4)})
    op("expand-smaller-shape", 13, [N("Expand", ["x", "s"], ["y"])], {"x": (2, 1, 4)}, {"s": i64(3, 1)})
    op("gather-axis0", 13, [N("Gather", ["x", "i"], ["y"], axis=0)], {"x": (5, 3)}, {"i": i64(0, 4, 2, 2)})
    op("gather-axis0-negative-2d", 13, [N("Gather", ["x", "i"], ["y"], axis=0)], {"x": (5, 3)},
       {"i": np.array([[0, -1], [-5, 3]], np.int64)})
    op("gather-axis1-negative", 13, [N("Gather", ["x", "i"], ["y"], axis=1)], {"x": (2, 5, 3)}, {"i": i64(-1, 0, -2)})
    op("gather-scalar-index", 13, [N("Gather", ["x", "i"], ["y"], axis=1)], {"x": (2, 5, 3)},
       {"i": np.array(-2, np.int64)})
    op("gather-indices-input", 13, [N("Gather", ["x", "i"], ["y"], axis=0)],
       {"x": (6, 4), "i": ints(0, 6, (2, 3))})
    op("gather-int32-indices", 13, [N("Gather", ["x", "i"], ["y"], axis=0)], {"x": (6, 4)},
       {"i": np.array([5, 0, 3], np.int32)})
    op("pad-opset11-constant", 11, [N("Pad", ["x", "p", "v"], ["y"], mode="constant")], {"x": (1, 2, 3, 4)},
       {"p": i64(0, 0, 1, 2, 0, 0, 2, 1), "v": np.array(0.5, np.float32)})
    op("pad-opset13-constant-default-value", 13, [N("Pad", ["x", "p"], ["y"])], {"x": (1, 2, 3, 4)},
       {"p": i64(0, 1, 1, 2, 0, 0, 2, 1)})
    op("pad-opset13-reflect", 13, [N("Pad", ["x", "p"], ["y"], mode="reflect")], {"x": (1, 2, 4, 5)},
       {"p": i64(0, 0, 2, 1, 0, 0, 1, 3)})
    op("pad-opset13-edge", 13, [N("Pad", ["x", "p"], ["y"], mode="edge")], {"x": (1, 2, 4, 5)},
       {"p": i64(0, 0, 2, 1, 0, 0, 1, 3)})
    op("pad-opset13-negative", 13, [N("Pad", ["x", "p"], ["y"])], {"x": (1, 2, 5, 6)},
       {"p": i64(0, 0, -1, 2, 0, 0, 1, -2)})
    op("pad-opset18-axes", 18, [N("Pad", ["x", "p", "v", "a"], ["y"])], {"x": (1, 2, 3, 4)},
       {"p": i64(1, 2, 0, 1), "v": np.array(-1.0, np.float32), "a": i64(2, -1)})
    op("pad-opset9-attribute", 9, [N("Pad", ["x"], ["y"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.25)],
       {"x": (1, 2, 3, 4)})

    # Resize
    Z = {"x": (1, 2, 4, 5)}
    empty = np.zeros((0,), np.float32)
    up15 = f32(1, 1, 1.5, 1.7)
    for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        for ctm in ("asymmetric", "half_pixel"):
            op(f"resize-opset13-nearest-{nm.replace('_', '-')}-{ctm.replace('_', '-')}", 13,
               [N("Resize", ["x", "", "sc"], ["y"], mode="nearest", nearest_mode=nm,
                  coordinate_transformation_mode=ctm)], Z, {"sc": up15})
    op("resize-opset13-nearest-scales2", 13, [N("Resize", ["x", "", "sc"], ["y"], mode="nearest")], Z,
       {"sc": f32(1, 1, 2, 2)})
    op("resize-opset13-nearest-sizes-down", 13,
       [N("Resize", ["x", "", "", "sz"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
          nearest_mode="floor")], {"x": (1, 2, 8, 9)}, {"sz": i64(1, 2, 3, 4)})
    for ctm in ("half_pixel", "align_corners", "pytorch_half_pixel", "asymmetric"):
        op(f"resize-opset13-linear-{ctm.replace('_', '-')}-scales", 13,
           [N("Resize", ["x", "", "sc"], ["y"], mode="linear", coordinate_transformation_mode=ctm)], Z,
           {"sc": up15})
        op(f"resize-opset13-linear-{ctm.replace('_', '-')}-sizes", 13,
           [N("Resize", ["x", "", "", "sz"], ["y"], mode="linear", coordinate_transformation_mode=ctm)], Z,
           {"sz": i64(1, 2, 7, 3)})
    op("resize-opset13-linear-downscale", 13,
       [N("Resize", ["x", "", "sc"], ["y"], mode="linear")], {"x": (1, 2, 8, 8)}, {"sc": f32(1, 1, 0.5, 0.5)})
    op("resize-opset13-linear-pytorch-half-pixel-to-1", 13,
       [N("Resize", ["x", "", "", "sz"], ["y"], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")],
       Z, {"sz": i64(1, 2, 1, 3)})
    op("resize-opset11-nearest-roi-scales", 11,
       [N("Resize", ["x", "roi", "sc"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
          nearest_mode="floor")], Z, {"roi": empty, "sc": f32(1, 1, 2, 3)})
    op("resize-opset11-linear-align-corners-sizes", 11,
       [N("Resize", ["x", "roi", "sc", "sz"], ["y"], mode="linear", coordinate_transformation_mode="align_corners")],
       Z, {"roi": empty, "sc": empty, "sz": i64(1, 2, 7, 9)})
    op("resize-opset11-linear-half-pixel-scales", 11,
       [N("Resize", ["x", "roi", "sc"], ["y"], mode="linear", coordinate_transformation_mode="half_pixel")],
       Z, {"roi": empty, "sc": f32(1, 1, 2, 2)})
    op("resize-opset10-upsample-nearest", 10, [N("Resize", ["x", "sc"], ["y"], mode="nearest")], Z,
       {"sc": f32(1, 1, 2, 2)})
    op("resize-opset18-linear-sizes-axes", 18,
       [N("Resize", ["x", "", "", "sz"], ["y"], mode="linear", axes=[2, 3])], Z, {"sz": i64(7, 3)})
    op("resize-opset18-nearest-scales", 18,
       [N("Resize", ["x", "", "sc"], ["y"], mode="nearest")], Z, {"sc": f32(1, 1, 2, 2)})
    op("resize-opset18-linear-not-larger", 18,
       [N("Resize", ["x", "", "", "sz"], ["y"], mode="linear", keep_aspect_ratio_policy="not_larger")],
       Z, {"sz": i64(1, 2, 8, 8)})

    # Normalization and reductions
    op("layernorm-axis-neg1", 17, [N("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)], {"x": (2, 3, 8)},
       {"g": uniform(0.5, 1.5, (8,)), "b": uniform(-0.2, 0.2, (8,))})
    op("layernorm-axis-neg2", 17, [N("LayerNormalization", ["x", "g", "b"], ["y"], axis=-2, epsilon=1e-3)],
       {"x": (2, 3, 8)}, {"g": uniform(0.5, 1.5, (3, 8)), "b": uniform(-0.2, 0.2, (3, 8))})
    op("layernorm-no-bias", 17, [N("LayerNormalization", ["x", "g"], ["y"])], {"x": (4, 6)},
       {"g": uniform(0.5, 1.5, (6,))})
    op("reducemean-opset13-keepdims1", 13, [N("ReduceMean", ["x"], ["y"], axes=[1, -1], keepdims=1)], {"x": (2, 3, 4)})
    op("reducemean-opset13-keepdims0", 13, [N("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)], {"x": (2, 3, 4)})
    op("reducemean-opset13-all", 13, [N("ReduceMean", ["x"], ["y"])], {"x": (2, 3, 4)})
    op("reducemean-opset18-axes-input", 18, [N("ReduceMean", ["x", "a"], ["y"], keepdims=0)], {"x": (2, 3, 4)},
       {"a": i64(0, 2)})
    op("reducemean-opset18-no-axes", 18, [N("ReduceMean", ["x"], ["y"])], {"x": (2, 3, 4)})

    # Where, Cast, constants
    op("where-broadcast", 16, [N("Where", ["c", "x", "z"], ["y"])], {"x": (2, 3, 4)},
       {"c": np.array([[True], [False], [True]]), "z": np.array(-7.0, np.float32)})
    op("where-bool-input", 16, [N("Where", ["c", "x", "z"], ["y"])],
       {"c": lambda r: r.random((2, 3, 4)) < 0.5, "x": (2, 3, 4)}, {"z": (3, 1)})
    op("cast-float-to-int64", 13, [N("Cast", ["x"], ["y"], to=TensorProto.INT64)], {"x": uniform(-9, 9, (2, 3, 4))})
    op("cast-int64-to-float", 13, [N("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], {"x": ints(-1000, 1000, (3, 4))})
    op("cast-float-float16-float", 13, [N("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
                                        N("Cast", ["h"], ["y"], to=TensorProto.FLOAT)], {"x": uniform(-70, 70, (3, 4))})
    op("cast-float-bfloat16-float", 13, [N("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
                                         N("Cast", ["h"], ["y"], to=TensorProto.FLOAT)], {"x": uniform(-70, 70, (3, 4))})
    op("cast-float-to-float16-output", 13, [N("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], {"x": (3, 4)})
    op("cast-float-to-bool", 13, [N("Cast", ["x"], ["b"], to=TensorProto.BOOL),
                                  N("Cast", ["b"], ["y"], to=TensorProto.FLOAT)],
       {"x": lambda r: (r.integers(-1, 2, (3, 4)) * 0.5).astype(np.float32)})
    op("constant-value-tensor", 13, [N("Constant", [], ["k"], value=numpy_helper.from_array(f32(1, 2, 3, 4))),
                                     N("Add", ["x", "k"], ["y"])], {"x": (3, 4)})
    op("constant-value-float", 13, [N("Constant", [], ["k"], value_float=2.5), N("Mul", ["x", "k"], ["y"])],
       {"x": (3, 4)})
    op("constant-value-ints", 13, [N("Constant", [], ["s"], value_ints=[4, 3]), N("Reshape", ["x", "s"], ["y"])],
       {"x": (3, 4)})
    op("constant-value-int", 13, [N("Constant", [], ["i"], value_int=2),
                                  N("Gather", ["x", "i"], ["y"], axis=1)], {"x": (3, 4)})
    op("constant-value-floats", 13, [N("Constant", [], ["k"], value_floats=[0.5, -1.0, 2.0, 4.0]),
                                     N("Mul", ["x", "k"], ["y"])], {"x": (3, 4)})
    op("shape-opset13", 13, [N("Shape", ["x"], ["y"])], {"x": (2, 3, 4, 5)})
    op("shape-opset15-start-end", 15, [N("Shape", ["x"], ["y"], start=1, end=-1)], {"x": (2, 3, 4, 5)})
    op("shape-opset15-start-negative", 15, [N("Shape", ["x"], ["y"], start=-2)], {"x": (2, 3, 4, 5)})
    op("shape-into-reshape", 15, [N("Shape", ["x"], ["s"], start=0, end=1), N("Concat", ["s", "m"], ["t"], axis=0),
                                  N("Reshape", ["x", "t"], ["y"])], {"x": (2, 3, 4)}, {"m": i64(-1)})
    op("constantofshape-initializer", 13, [N("ConstantOfShape", ["s"], ["k"], value=numpy_helper.from_array(f32(1.5))),
                                           N("Add", ["x", "k"], ["y"])], {"x": (2, 3)}, {"s": i64(2, 3)})
    op("constantofshape-from-shape", 13, [N("Shape", ["x"], ["s"]), N("ConstantOfShape", ["s"], ["k"]),
                                          N("Sub", ["x", "k"], ["y"])], {"x": (2, 3)})
    op("constantofshape-int64", 13, [N("ConstantOfShape", ["s"], ["y"],
                                       value=numpy_helper.from_array(i64(3)))], {}, {"s": i64(2, 2)},
       constant_output=True)
    op("identity-chain", 13, [N("Identity", ["x"], ["i"]), N("Relu", ["i"], ["y"])], {"x": (2, 3)})
    op("identity-output", 13, [N("Identity", ["x"], ["y"])], {"x": (2, 3)})
    op("dropout-opset9", 9, [N("Dropout", ["x"], ["d"], ratio=0.3), N("Relu", ["d"], ["y"])], {"x": (2, 3)})
    op("dropout-opset12-ratio-input", 12, [N("Dropout", ["x", "r"], ["d"]), N("Relu", ["d"], ["y"])], {"x": (2, 3)},
       {"r": np.array(0.5, np.float32)})
    op("dropout-opset13-mask-unused", 13, [N("Dropout", ["x", "r"], ["d", "mask"]), N("Relu", ["d"], ["y"])],
       {"x": (2, 3)}, {"r": np.array(0.1, np.float32)}, outputs=["y"])

    # Initializers of other dtypes, consumed through Cast
    op("initializer-float16", 13, [N("Cast", ["w"], ["wf"], to=TensorProto.FLOAT), N("Add", ["x", "wf"], ["y"])],
       {"x": (3, 4)}, {"w": uniform(-4, 4, (3, 4), np.float16)})
    op("initializer-bfloat16-raw", 13, [N("Cast", ["w"], ["wf"], to=TensorProto.FLOAT), N("Add", ["x", "wf"], ["y"])],
       {"x": (3, 4)}, {"w": lambda r: bf16_tensor("w", r.uniform(-4, 4, (3, 4)).astype(np.float32), True)})
    op("initializer-bfloat16-int32-data", 13, [N("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
                                               N("Add", ["x", "wf"], ["y"])],
       {"x": (3, 4)}, {"w": lambda r: bf16_tensor("w", r.uniform(-4, 4, (3, 4)).astype(np.float32), False)})
    op("initializer-int32", 13, [N("Cast", ["w"], ["wf"], to=TensorProto.FLOAT), N("Mul", ["x", "wf"], ["y"])],
       {"x": (3, 4)}, {"w": lambda r: r.integers(-50, 50, (3, 4)).astype(np.int32)})
    op("initializer-float-data-field", 13, [N("Add", ["x", "w"], ["y"])], {"x": (2, 3)},
       {"w": helper.make_tensor("w", TensorProto.FLOAT, [2, 3], [0.5, -1.5, 2.0, 3.25, -0.125, 7.0])})
    op("initializer-int64-data-field", 13, [N("Reshape", ["x", "s"], ["y"])], {"x": (2, 3)},
       {"s": helper.make_tensor("s", TensorProto.INT64, [2], [3, 2])})
    op("initializer-float16-int32-data", 13, [N("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
                                              N("Add", ["x", "wf"], ["y"])],
       {"x": (2, 2)}, {"w": helper.make_tensor("w", TensorProto.FLOAT16, [2, 2], np.array([0.5, -2, 1024, 0.1], np.float16))})


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--out", required=True, type=Path, help="output folder (created if missing)")
    ap.add_argument("--seed", type=int, default=7, help="seed of every random draw (default 7)")
    ap.add_argument("--only", metavar="SUBSTR",
                    help="make only the fixtures whose name contains SUBSTR "
                         "(index.json then lists only those)")
    ap.add_argument("--no-large", action="store_true",
                    help="skip the light models with over 50M weights (alexnet, vgg19, "
                         "zfnet512: about 1.1 GiB of the total)")
    args = ap.parse_args()
    out = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        sys.exit(f"make-fixtures: cannot create {out}: {e}")
    w = Writer(out, args.seed, args.only)
    t0 = time.time()
    light_models(w, skip_large=args.no_large)
    encoder(w)
    detector(w)
    op_fixtures(Ops(w))
    write_index(w)
    for name, msg in w.refused:
        print(f"refused by onnx/onnxruntime, not written: {name}: {msg}")
    print(f"{len(w.entries)} fixtures in {out} ({total_size(out)/2**20:.0f} MiB), "
          f"{time.time()-t0:.0f}s")


def total_size(folder):
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def write_index(w):
    with open(w.out / "index.json", "w") as f:
        json.dump(w.entries, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
