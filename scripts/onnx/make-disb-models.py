#!/usr/bin/env python3
"""Write the DISB benchmark models as ONNX files with seeded random weights.

The models are those of daemon/nn/src/builders.rs (VGG-19, ResNet-152,
BERT-base, GPT-2) plus YOLOv3 at 416x416 (daemon/model/manifests/yolov3.json),
with the builders' layer shapes: the same channels, kernel sizes, strides,
paddings, hidden sizes, heads, sequence length and vocabulary. They are built
node by node with onnx.helper at opset 17 from standard operators only, so an
ONNX runtime needs nothing of sluice's to run them. Where the builders take a
shortcut the file spells out the standard form:

* ResNet-152 and YOLOv3 have a BatchNormalization after every convolution
  (the builders fold batch norm into the convolution's bias);
* the transformers take int64 input_ids [batch, seq] and look the token and
  position embeddings up with Gather (the builders take the embedded
  sequence); BERT normalises the sum with an embedding LayerNormalization, as
  BERT does; GPT-2's LM head is the token embedding, tied (Gemm transB=1);
* attention is MatMul, Reshape and Transpose into heads, MatMul, scale by
  1/sqrt(head size), a constant causal mask added for GPT-2, Softmax, MatMul,
  Transpose and Reshape back (the builders use one fused attention kernel);
* GELU is the tanh approximation the builders compute (reference.rs
  gelu_tanh), 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written with
  Pow, Mul, Add and Tanh (opset 17 has no Gelu operator).

Weights are uniform +-sqrt(3 gain / fan_in) (gain 2 before a ReLU, GELU or
leaky ReLU, 1 before nothing, smaller at the end of residual branches as in
the builders), biases +-0.02, layer-norm gamma 1+-0.1 and beta +-0.02,
batch-norm scale 1+-0.1, bias and mean +-0.02, variance 1+-0.1, so activations
stay of order one through every layer. Each model draws from its own
numpy.random.default_rng([seed, crc32(name)]); the same seed writes the same
files.

--small writes reduced models of the same topology (every layer kept, so the
node count is the full model's) for tests: images 64x64, every channel count
and hidden size divided by 8, 10 classes, sequence 16, vocabulary 512 and 64
positions. The models go to DIR/models/ (a model directory the daemon, `sluice
demo --backend cuda --models` and `sluice bench disb --device cuda --models`
serve as it is); DIR/index.json (the format of make-fixtures.py, read by
check.py) lists each model at batch 1, and at batch 2 when the batch dimension is
symbolic, with seeded inputs and onnxruntime's outputs.
"""

import argparse
import json
import math
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
    sys.exit(f"make-disb-models: {e}; install them with `pip install onnx onnxruntime numpy`")

OPSET = 17
IR_VERSION = 8  # the IR version of the onnx release that introduced opset 17
TOLERANCE = 1e-4
BIAS_HALF_WIDTH = 0.02
NORM_SCALE_HALF_WIDTH = 0.1
MODELS = ["vgg19", "resnet152", "bert_base", "gpt2", "yolov3"]


def sanitize(name):
    """File-name form of a tensor name: anything outside [A-Za-z0-9._-] becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def rng_for(seed, name):
    """A generator of its own for each model, so one model's draws do not depend
    on which others are made."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


class Graph:
    """Collects nodes and initializers; every helper returns its output's name."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.inits = []
        self.params = 0  # trainable parameters (batch-norm statistics excluded)
        self.consts = {}

    # ---- initializers ----

    def init(self, name, arr, param=True):
        self.inits.append(numpy_helper.from_array(arr, name))
        if param:
            self.params += arr.size
        return name

    def uniform(self, name, shape, center, half_width):
        a = center + self.rng.uniform(-half_width, half_width, size=shape)
        return self.init(name, a.astype(np.float32))

    def scaled(self, name, shape, fan_in, gain):
        """A weight whose output has `gain` times its input's second moment."""
        return self.uniform(name, shape, 0.0, math.sqrt(3.0 * gain / fan_in))

    def bias(self, name, n):
        return self.uniform(name, (n,), 0.0, BIAS_HALF_WIDTH)

    def const(self, arr):
        """A shared non-parameter constant (shapes, scalars, masks)."""
        arr = np.asarray(arr)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self.consts:
            name = f"const.{len(self.consts)}"
            self.init(name, arr, param=False)
            self.consts[key] = name
        return self.consts[key]

    def i64(self, *v):
        return self.const(np.array(v, dtype=np.int64))

    def f32(self, v):
        return self.const(np.array(v, dtype=np.float32))

    # ---- nodes ----

    def node(self, op, ins, name, outs=1, **attrs):
        names = [name] if outs == 1 else [f"{name}.{i}" for i in range(outs)]
        self.nodes.append(helper.make_node(op, ins, names, name=name, **attrs))
        return names[0] if outs == 1 else names

    def conv(self, x, name, cin, cout, k, stride=1, pad=None, gain=2.0, bias=True):
        pad = k // 2 if pad is None else pad
        w = self.scaled(f"{name}.weight", (cout, cin, k, k), cin * k * k, gain)
        ins = [x, w] + ([self.bias(f"{name}.bias", cout)] if bias else [])
        return self.node("Conv", ins, name, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4)

    def batchnorm(self, x, name, c):
        r = self.rng
        scale = self.init(f"{name}.scale", (1 + r.uniform(-NORM_SCALE_HALF_WIDTH, NORM_SCALE_HALF_WIDTH, c)).astype(np.float32))
        b = self.init(f"{name}.bias", r.uniform(-BIAS_HALF_WIDTH, BIAS_HALF_WIDTH, c).astype(np.float32))
        mean = self.init(f"{name}.mean", r.uniform(-BIAS_HALF_WIDTH, BIAS_HALF_WIDTH, c).astype(np.float32), param=False)
        var = self.init(f"{name}.var", (1 + r.uniform(-NORM_SCALE_HALF_WIDTH, NORM_SCALE_HALF_WIDTH, c)).astype(np.float32), param=False)
        return self.node("BatchNormalization", [x, scale, b, mean, var], name, epsilon=1e-5)

    def layernorm(self, x, name, n, eps):
        g = self.uniform(f"{name}.weight", (n,), 1.0, NORM_SCALE_HALF_WIDTH)
        b = self.uniform(f"{name}.bias", (n,), 0.0, BIAS_HALF_WIDTH)
        return self.node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=eps)

    def linear(self, x, name, k, n, gain, bias=True):
        """x[..., k] @ W[k, n] (+ b): MatMul and Add."""
        w = self.scaled(f"{name}.weight", (k, n), k, gain)
        y = self.node("MatMul", [x, w], f"{name}/MatMul")
        if bias:
            y = self.node("Add", [y, self.bias(f"{name}.bias", n)], f"{name}/Add")
        return y

    def gemm(self, x, name, k, n, gain):
        """x[B, k] @ W[k, n] + b as one Gemm."""
        w = self.scaled(f"{name}.weight", (k, n), k, gain)
        return self.node("Gemm", [x, w, self.bias(f"{name}.bias", n)], name)

    def gelu_tanh(self, x, name):
        c = math.sqrt(2.0 / math.pi)
        x3 = self.node("Pow", [x, self.f32(3.0)], f"{name}/Pow")
        t = self.node("Mul", [x3, self.f32(0.044715)], f"{name}/Mul_cube")
        t = self.node("Add", [x, t], f"{name}/Add_inner")
        t = self.node("Mul", [t, self.f32(c)], f"{name}/Mul_c")
        t = self.node("Tanh", [t], f"{name}/Tanh")
        t = self.node("Add", [t, self.f32(1.0)], f"{name}/Add_one")
        t = self.node("Mul", [x, t], f"{name}/Mul_x")
        return self.node("Mul", [t, self.f32(0.5)], f"{name}/Mul_half")

    def model(self, name, inputs, outputs, doc):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="sluice make-disb-models.py", doc_string=doc)
        m.ir_version = IR_VERSION
        onnx.checker.check_model(m)
        return m


def batch_dim(args):
    return "batch" if args.batch_dim == "symbolic" else 1


# ---------------------------------------------------------------------------
# CNNs


def vgg19(rng, small, args):
    size, div, hidden, classes = (64, 8, 512, 10) if small else (224, 1, 4096, 1000)
    g = Graph(rng)
    x, c, h = "input", 3, size
    for si, (width, convs) in enumerate([(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)]):
        width //= div
        for ci in range(convs):
            name = f"conv{si + 1}_{ci + 1}"
            x = g.conv(x, name, c, width, 3, gain=2.0)
            x = g.node("Relu", [x], f"{name}/Relu")
            c = width
        x = g.node("MaxPool", [x], f"pool{si + 1}", kernel_shape=[2, 2], strides=[2, 2])
        h //= 2
    x = g.node("Flatten", [x], "flatten", axis=1)
    flat = c * h * h
    x = g.node("Relu", [g.gemm(x, "fc6", flat, hidden, 2.0)], "fc6/Relu")
    x = g.node("Relu", [g.gemm(x, "fc7", hidden, hidden, 2.0)], "fc7/Relu")
    x = g.gemm(x, "fc8", hidden, classes, 1.0)
    g.node("Identity", [x], "logits")
    b = batch_dim(args)
    doc = (f"VGG-19: 16 conv3x3 pad 1 + ReLU (channels {64 // div}..{512 // div}), 5 MaxPool 2x2/2, "
           f"Gemm {flat}->{hidden}->{hidden}->{classes}")
    m = g.model("vgg19", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [b, 3, size, size])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, classes])], doc)
    return m, g.params, {"input": ("image", [3, size, size])}


def resnet152(rng, small, args):
    size, div, classes = (64, 8, 10) if small else (224, 1, 1000)
    blocks = [3, 8, 36, 3]
    branch_gain = 1.0 / sum(blocks)
    g = Graph(rng)
    stem = 64 // div

    def conv_bn(x, name, cin, cout, k, stride, gain):
        y = g.conv(x, name, cin, cout, k, stride=stride, gain=gain, bias=False)
        return g.batchnorm(y, f"{name}/bn", cout)

    x = conv_bn("input", "conv1", 3, stem, 7, 2, 2.0)
    x = g.node("Relu", [x], "conv1/Relu")
    x = g.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = stem
    for si, n in enumerate(blocks):
        width = (64 << si) // div
        out = 4 * width
        for bi in range(n):
            stride = 2 if si > 0 and bi == 0 else 1
            p = f"layer{si + 1}.{bi}"
            a = g.node("Relu", [conv_bn(x, f"{p}.conv1", c, width, 1, 1, 2.0)], f"{p}.conv1/Relu")
            a = g.node("Relu", [conv_bn(a, f"{p}.conv2", width, width, 3, stride, 2.0)], f"{p}.conv2/Relu")
            r = conv_bn(a, f"{p}.conv3", width, out, 1, 1, branch_gain)
            short = conv_bn(x, f"{p}.downsample", c, out, 1, stride, 1.0) if bi == 0 else x
            x = g.node("Add", [r, short], f"{p}/Add")
            x = g.node("Relu", [x], f"{p}/Relu")
            c = out
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = g.node("Flatten", [x], "flatten", axis=1)
    x = g.gemm(x, "fc", c, classes, 1.0)
    g.node("Identity", [x], "logits")
    b = batch_dim(args)
    doc = (f"ResNet-152 v1.5: conv7x7/2 ({stem}) + BN + ReLU, MaxPool 3x3/2 pad 1, bottlenecks "
           f"[3, 8, 36, 3] (widths {64 // div}..{512 // div}, outputs x4, stride on the 3x3), "
           f"1x1 downsample in each stage's first block, Add + ReLU, GlobalAveragePool, Gemm {c}->{classes}")
    m = g.model("resnet152", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [b, 3, size, size])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, classes])], doc)
    return m, g.params, {"input": ("image", [3, size, size])}


def yolov3(rng, small, args):
    size, div, classes = (64, 8, 10) if small else (416, 1, 80)
    head = 3 * (5 + classes)
    g = Graph(rng)
    # Residual branches end with a convolution scaled by 1/(number of residual
    # blocks), as the builders' ResNet does, so that the 23 residual sums grow
    # the stream at most about e-fold instead of 2^23.
    branch_gain = 2.0 / 23
    count = [0]

    def cbl(x, cin, cout, k, stride=1, gain=2.0):
        """Convolution (no bias) + BatchNormalization + LeakyRelu(0.1), Darknet's unit."""
        name = f"conv{count[0]}"
        count[0] += 1
        y = g.conv(x, name, cin, cout, k, stride=stride, gain=gain, bias=False)
        y = g.batchnorm(y, f"{name}/bn", cout)
        return g.node("LeakyRelu", [y], f"{name}/LeakyRelu", alpha=0.1)

    ch = lambda n: n // div  # noqa: E731
    # Darknet-53: 52 convolutions, 23 residual blocks.
    x = cbl("input", 3, ch(32), 3)
    routes = []
    c = ch(32)
    for si, n in enumerate([1, 2, 8, 8, 4]):
        out = ch(64 << si)
        x = cbl(x, c, out, 3, stride=2)
        for bi in range(n):
            a = cbl(x, out, out // 2, 1)
            a = cbl(a, out // 2, out, 3, gain=branch_gain)
            x = g.node("Add", [x, a], f"stage{si + 1}.{bi}/Add")
        c = out
        routes.append(x)
    outputs = []

    def detect(x, cin, width, name):
        """Five alternating 1x1/3x3 units, the branch for the next scale, and the head."""
        for i in range(5):  # 1x1 to width, 3x3 to 2 width, alternating
            c_in = cin if i == 0 else (2 * width if i % 2 == 0 else width)
            x = cbl(x, c_in, width, 1) if i % 2 == 0 else cbl(x, c_in, 2 * width, 3)
        branch = x
        y = cbl(x, width, 2 * width, 3)
        y = g.conv(y, f"{name}.conv", 2 * width, head, 1, gain=1.0, bias=True)
        outputs.append(g.node("Identity", [y], name))
        return branch

    def up(x, cin, cout, name):
        y = cbl(x, cin, cout, 1)
        # Resize nearest x2 (roi empty, scales [1, 1, 2, 2]), as PyTorch exports nn.Upsample.
        return g.node("Resize", [y, "", g.f32([1.0, 1.0, 2.0, 2.0])], name, mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    stride = lambda s: f"out_stride{s}"  # noqa: E731
    b1 = detect(routes[4], ch(1024), ch(512), stride(32))
    u = up(b1, ch(512), ch(256), "upsample1")
    x = g.node("Concat", [u, routes[3]], "route1", axis=1)
    b2 = detect(x, ch(256) + ch(512), ch(256), stride(16))
    u = up(b2, ch(256), ch(128), "upsample2")
    x = g.node("Concat", [u, routes[2]], "route2", axis=1)
    detect(x, ch(128) + ch(256), ch(128), stride(8))
    b = batch_dim(args)
    outs = [helper.make_tensor_value_info(stride(s), TensorProto.FLOAT, [b, head, size // s, size // s])
            for s in (32, 16, 8)]
    doc = (f"YOLOv3 {size}x{size}: Darknet-53 (52 conv+BN+LeakyReLU(0.1), 23 residual Adds), three "
           f"detection scales (strides 32, 16, 8), Resize nearest x2 + Concat routes, 1x1 heads of "
           f"{head} = 3 x (5 + {classes}) channels; raw head maps, no box decoding or NMS")
    m = g.model("yolov3", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [b, 3, size, size])],
                outs, doc)
    assert count[0] + 3 == 75, count[0]
    return m, g.params, {"input": ("image", [3, size, size])}


# ---------------------------------------------------------------------------
# Transformers


def transformer(rng, small, args, gpt):
    if small:
        seq, hidden, heads, ffn, vocab, positions = 16, 96, 12, 384, 512, 64
    else:
        seq, hidden, heads, ffn = 128, 768, 12, 3072
        vocab, positions = (50257, 1024) if gpt else (30522, 512)
    layers = 12
    eps = 1e-5 if gpt else 1e-12
    d = hidden // heads
    # GPT-2 scales the residual projections by 1/(2 layers) (a second-moment
    # gain) so the pre-LN residual stream does not grow with depth.
    out_gain = 1.0 / (2 * layers) if gpt else 1.0
    g = Graph(rng)
    emb_bound = math.sqrt(3.0 / hidden)  # unit-norm rows; GPT-2's doubles as its LM head
    wte = g.uniform("wte", (vocab, hidden), 0.0, emb_bound)
    wpe = g.uniform("wpe", (positions, hidden), 0.0, emb_bound)
    tok = g.node("Gather", [wte, "input_ids"], "embed/Gather_token", axis=0)
    pos = g.node("Gather", [wpe, g.i64(*range(seq))], "embed/Gather_position", axis=0)
    x = g.node("Add", [tok, pos], "embed/Add")
    if not gpt:
        x = g.layernorm(x, "embed/ln", hidden, eps)
    mask = np.triu(np.full((seq, seq), -1e9, dtype=np.float32), k=1)
    for li in range(layers):
        p = f"layer{li}"
        a_in = g.layernorm(x, f"{p}.ln1", hidden, eps) if gpt else x
        qkv = g.linear(a_in, f"{p}.qkv", hidden, 3 * hidden, 1.0)
        qkv = g.node("Reshape", [qkv, g.i64(-1, seq, 3, heads, d)], f"{p}.attn/Reshape_heads")
        qkv = g.node("Transpose", [qkv], f"{p}.attn/Transpose_heads", perm=[2, 0, 3, 1, 4])
        q = g.node("Gather", [qkv, g.const(np.array(0, dtype=np.int64))], f"{p}.attn/q", axis=0)
        k = g.node("Gather", [qkv, g.const(np.array(1, dtype=np.int64))], f"{p}.attn/k", axis=0)
        v = g.node("Gather", [qkv, g.const(np.array(2, dtype=np.int64))], f"{p}.attn/v", axis=0)
        kt = g.node("Transpose", [k], f"{p}.attn/Transpose_k", perm=[0, 1, 3, 2])
        s = g.node("MatMul", [q, kt], f"{p}.attn/MatMul_qk")
        s = g.node("Mul", [s, g.f32(1.0 / math.sqrt(d))], f"{p}.attn/scale")
        if gpt:
            s = g.node("Add", [s, g.const(mask)], f"{p}.attn/causal_mask")
        s = g.node("Softmax", [s], f"{p}.attn/Softmax", axis=-1)
        o = g.node("MatMul", [s, v], f"{p}.attn/MatMul_v")
        o = g.node("Transpose", [o], f"{p}.attn/Transpose_back", perm=[0, 2, 1, 3])
        o = g.node("Reshape", [o, g.i64(-1, seq, hidden)], f"{p}.attn/Reshape_back")
        o = g.linear(o, f"{p}.proj", hidden, hidden, out_gain)
        r1 = g.node("Add", [o, x], f"{p}/Add_attn")
        f_in = g.layernorm(r1, f"{p}.ln2" if gpt else f"{p}.ln1", hidden, eps)
        h = g.linear(f_in, f"{p}.ffn1", hidden, ffn, 2.0)
        h = g.gelu_tanh(h, f"{p}.ffn1/gelu")
        h = g.linear(h, f"{p}.ffn2", ffn, hidden, out_gain)
        # Pre-LN adds to the residual stream, post-LN to the normalised input.
        r2 = g.node("Add", [h, r1 if gpt else f_in], f"{p}/Add_ffn")
        x = r2 if gpt else g.layernorm(r2, f"{p}.ln2", hidden, eps)
    b = batch_dim(args)
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b, seq])
    if gpt:
        x = g.layernorm(x, "ln_f", hidden, eps)
        last = g.node("Gather", [x, g.const(np.array(seq - 1, dtype=np.int64))], "last_token", axis=1)
        g.node("Gemm", [last, wte], "logits", transB=1)
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, vocab])
        doc = (f"GPT-2 small prefill: seq {seq}, hidden {hidden}, {heads} heads of {d}, {layers} pre-LN "
               f"layers (eps {eps}), causal, FFN {ffn} GELU (tanh), final LN, tied LM head "
               f"{hidden}->{vocab} on the last token")
        name = "gpt2"
    else:
        g.node("Identity", [x], "last_hidden_state")
        out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [b, seq, hidden])
        doc = (f"BERT-base encoder: seq {seq}, hidden {hidden}, {heads} heads of {d}, {layers} post-LN "
               f"layers (eps {eps}), bidirectional, FFN {ffn} GELU (tanh), token + position embeddings "
               f"({vocab}, {positions}) + LN; output the last hidden states (no pooler)")
        name = "bert_base"
    m = g.model(name, [ids], [out], doc)
    return m, g.params, {"input_ids": ("ids", [seq], vocab)}


BUILDERS = {
    "vgg19": vgg19,
    "resnet152": resnet152,
    "bert_base": lambda r, s, a: transformer(r, s, a, gpt=False),
    "gpt2": lambda r, s, a: transformer(r, s, a, gpt=True),
    "yolov3": yolov3,
}


# ---------------------------------------------------------------------------
# Inputs, onnxruntime and the index


def make_feeds(rng, spec, batch):
    feeds = {}
    for name, s in spec.items():
        if s[0] == "image":
            feeds[name] = rng.uniform(-1, 1, size=[batch] + s[1]).astype(np.float32)
        else:
            feeds[name] = rng.integers(0, s[2], size=[batch] + s[1], dtype=np.int64)
    return feeds


def session(model_bytes_or_path):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model_bytes_or_path, opts, providers=["CPUExecutionProvider"])


def run_ort(path, feeds):
    sess = session(str(path))
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def activation_range(model, feeds):
    """(smallest rms, its tensor, largest rms, its tensor) over every float node
    output, the masked attention scores (which hold -1e9 by design) left out."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    names = [o for n in probe.graph.node for o in n.output
             if o not in have and not o.endswith("causal_mask")]
    for o in names:
        probe.graph.output.append(onnx.ValueInfoProto(name=o))
    sess = session(probe.SerializeToString())
    got = sess.run(names, feeds)
    rms = [(float(np.sqrt(np.mean(np.square(v, dtype=np.float64)))), n)
           for n, v in zip(names, got) if v.dtype == np.float32 and v.size > 1]
    lo, hi = min(rms), max(rms)
    return lo[0], lo[1], hi[0], hi[1]


def describe(outputs):
    parts = []
    for k, v in outputs.items():
        f = v.astype(np.float64)
        parts.append(f"{k}{list(v.shape)} mean={f.mean():.3g} std={f.std():.3g} max|.|={np.abs(f).max():.3g}")
    return "; ".join(parts)


def check_outputs(name, outputs):
    for k, v in outputs.items():
        f = v.astype(np.float64)
        if not np.all(np.isfinite(f)):
            raise SystemExit(f"make-disb-models: {name}: output {k!r} has non-finite values")
        if f.size > 1 and f.std() < 1e-3 * max(np.abs(f).max(), 1e-30):
            raise SystemExit(f"make-disb-models: {name}: output {k!r} is all but constant")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--out", required=True, type=Path, help="folder to write the models and index.json into")
    ap.add_argument("--seed", type=int, default=1, help="seed of the weights and inputs (default 1)")
    ap.add_argument("--small", action="store_true", help="reduced models of the same topology, for tests")
    ap.add_argument("--batch-dim", choices=["symbolic", "1"], default="symbolic",
                    help="the inputs' first dimension: dim_param 'batch' (default) or fixed 1")
    ap.add_argument("--only", metavar="NAME", action="append", choices=MODELS,
                    help="make only this model (repeatable); default all of " + ", ".join(MODELS))
    ap.add_argument("--stats", action="store_true",
                    help="also print the smallest and largest RMS of any intermediate tensor "
                         "(one more onnxruntime run that keeps every activation; always on with --small)")
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_small" if args.small else ""
    batches = [1, 2] if args.batch_dim == "symbolic" else [1]
    entries = []
    t_all = time.time()
    for base in args.only or MODELS:
        t0 = time.time()
        name = base + suffix
        rng = rng_for(args.seed, name)
        model, params, spec = BUILDERS[base](rng, args.small, args)
        model.graph.name = name
        rel = f"models/{name}.onnx"
        (out / "models").mkdir(parents=True, exist_ok=True)
        onnx.save_model(model, str(out / rel))
        size = (out / rel).stat().st_size
        t_build = time.time() - t0
        data_rng = rng_for(args.seed, name + ".inputs")
        report = []
        for batch in batches:
            case = f"{name}-b{batch}"
            feeds = make_feeds(data_rng, spec, batch)
            t1 = time.time()
            outs = run_ort(out / rel, feeds)
            t_ort = time.time() - t1
            check_outputs(case, outs)
            data = Path("data") / case
            (out / data).mkdir(parents=True, exist_ok=True)
            ins, refs = {}, {}
            for k, v in feeds.items():
                ins[k] = str(data / f"in-{sanitize(k)}.npy")
                np.save(out / ins[k], v)
            for k, v in outs.items():
                refs[k] = str(data / f"out-{sanitize(k)}.npy")
                np.save(out / refs[k], v)
            entries.append({"name": case, "model": rel, "inputs": ins, "outputs": refs,
                            "batch": batch if args.batch_dim == "symbolic" else None,
                            "tolerance": TOLERANCE})
            report.append(f"b{batch} onnxruntime {t_ort:.1f}s: {describe(outs)}")
        if args.small or args.stats:
            lo, lo_n, hi, hi_n = activation_range(model, make_feeds(rng_for(args.seed, name + ".stats"), spec, 1))
            report.append(f"activation rms {lo:.3g} ({lo_n}) .. {hi:.3g} ({hi_n})")
        print(f"{name}: {len(model.graph.node)} nodes, {params / 1e6:.3f}M parameters, "
              f"{size / 2**20:.1f} MiB, built and saved in {t_build:.1f}s; " + "; ".join(report)
              + f"; {time.time() - t0:.1f}s", flush=True)
    with open(out / "index.json", "w") as f:
        json.dump(entries, f, indent=1)
    print(f"{len(entries)} fixtures in {out / 'index.json'}, {time.time() - t_all:.1f}s", flush=True)


if __name__ == "__main__":
    main()
