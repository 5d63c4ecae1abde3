#!/usr/bin/env python3
"""Generate sluice's synthetic model manifests (daemon/model/manifests/*.json).

Only for the models the REEF artifact has no data for (YOLOv3, BERT-base with
Table 1's 393 kernels, GPT-2) and the test models null and echo_small; the
measured ones (ResNet-152, VGG-19 and seven more) are written by
scripts/import-reef.py from the REEF authors' MI50 profiles.

What is real and what is made up (see docs/models.md for the long form):

* Real, from REEF (TOCS 2025) Table 1: the number of kernels TVM generates for
  each of YOLOv3, BERT-base and GPT-2, and each model's total GPU time on an
  AMD Radeon Instinct MI50.  From its Section 6 setup:
  BERT and GPT-2 take a 128-token sequence and GPT-2 runs one forward pass.
* Synthetic, generated here from a fixed seed: everything per kernel -- the
  names, the split of the total time over the kernels, grid and block
  dimensions, registers, shared memory, block times and idempotency.  The
  layer structure follows each architecture (convolutions, GEMMs,
  element-wise ops) and kernel times are weighted by a rough FLOP/byte cost,
  but no number below the model total was measured.
* Synthetic and deterministic (no random numbers, so the fields above are
  unchanged by it): each kernel's device-memory `reads`/`writes` byte ranges
  over a made-up buffer layout (see `accesses`), and `group_start`, the start
  of its minimal idempotent group (REEF Section 4.4), computed by a port of
  daemon/model/src/idempotent.rs (scripts/manifestgen/groups.py) that the
  Rust test model::tests::group_starts_are_current cross-checks.

block_time_us follows a simplified GCN occupancy model of the 60-CU MI50
(see `blocks_per_cu`):  kernel_time_us = block_time_us * rounds, where
rounds = ceil(blocks / (60 * blocks_per_cu)).

The output is deterministic: rerunning rewrites every file byte for byte.
`--check` verifies that the committed files are current (for CI).
"""

import argparse
import math
import os
import random
import sys

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
from manifestgen.groups import align, minimal_groups  # noqa: E402
from manifestgen.output import render, write_or_check  # noqa: E402

SEED = 1

# --- AMD Radeon Instinct MI50 (gfx906), simplified GCN occupancy model -----
MI50_CUS = 60
WAVE_SIZE = 64
SIMDS_PER_CU = 4
MAX_WAVES_PER_SIMD = 10  # 40 waves (and at most 40 workgroups) per CU
VGPRS_PER_SIMD_LANE = 256
LDS_BYTES_PER_CU = 65536


def blocks_per_cu(threads, regs, shared):
    """Workgroups of one kernel that fit on one CU at a time.

    min over three limits: wavefront slots (40 per CU), vector registers
    (each SIMD holds floor(256 / regs) waves, at most 10, 4 SIMDs per CU,
    pooled over the CU) and LDS (64 KiB per CU).
    """
    waves = -(-threads // WAVE_SIZE)
    by_slots = (SIMDS_PER_CU * MAX_WAVES_PER_SIMD) // waves
    by_regs = (SIMDS_PER_CU * min(MAX_WAVES_PER_SIMD, VGPRS_PER_SIMD_LANE // regs)) // waves
    by_lds = LDS_BYTES_PER_CU // shared if shared else by_slots
    n = min(by_slots, by_regs, by_lds)
    assert n >= 1, (threads, regs, shared)
    return n


def rounds(grid, block, regs, shared):
    """How many times the GPU must be filled to run every block."""
    blocks = grid[0] * grid[1] * grid[2]
    threads = block[0] * block[1] * block[2]
    capacity = MI50_CUS * blocks_per_cu(threads, regs, shared)
    return -(-blocks // capacity)


# --- kernel kinds -----------------------------------------------------------
# Relative cost model (only ratios matter; the model total rescales it):
# time = flops / FLOPS + bytes / BANDWIDTH + FLOOR, times log-normal noise.
FLOPS = {"conv": 6e12, "gemm": 5e12, "bmm": 3e12}
BANDWIDTH = 6e11
FLOOR_S = 3e-6

# kind -> (block shapes, regs choices, shared-memory choices, outputs/thread)
KINDS = {
    "conv": ([(8, 8, 4), (16, 16, 1), (64, 1, 1), (128, 1, 1)], [48, 64, 80, 96, 128], [8192, 12288, 16384, 24576, 32768], 8),
    "gemm": ([(16, 16, 1), (8, 8, 1), (64, 1, 1)], [48, 64, 96], [4096, 8192, 16384], 4),
    "bmm": ([(16, 16, 1), (8, 8, 1)], [40, 48, 64], [4096, 8192], 8),
    "ewise": ([(256, 1, 1), (128, 1, 1), (1024, 1, 1), (64, 1, 1)], [16, 20, 24, 32], [0], 4),
    "reduce": ([(64, 1, 1), (128, 1, 1), (256, 1, 1)], [24, 32, 40], [256, 512, 1024, 2048], 1),
    "pool": ([(256, 1, 1), (128, 1, 1)], [20, 24, 32], [0], 2),
    "gather": ([(256, 1, 1), (64, 1, 1)], [16, 24], [0], 4),
}

# Element-wise ops that TVM may emit in place; a few are marked
# non-idempotent (see NON_IDEMPOTENT_FRACTION).
IN_PLACE_OPS = {"add", "add_relu", "bias_add", "bias_add_relu", "bias_residual_add", "leaky_relu", "multiply", "divide", "relu"}
NON_IDEMPOTENT_FRACTION = 0.07


class Layer:
    """One kernel before timing: op name, kind, cost and output size."""

    def __init__(self, op, kind, out_elems, flops=0, nbytes=None, cout=None, batch=1, work=None, wbytes=0):
        self.op = op
        self.kind = kind
        self.out_elems = max(1, int(out_elems))
        self.flops = flops
        # default traffic: read and write the output-sized tensor in fp32
        self.nbytes = nbytes if nbytes is not None else 8 * self.out_elems
        self.cout = cout
        self.batch = batch
        # independent work items if not out_elems / outputs-per-thread
        # (split-K matrix-vector products)
        self.work = work
        # weight bytes (synthetic memory layout only, see `accesses`)
        self.wbytes = wbytes


def conv(h, w, cin, cout, k, op="conv2d"):
    out = h * w * cout
    flops = 2 * out * cin * k * k
    nbytes = 4 * (h * w * cin + out + cin * cout * k * k)
    return Layer(op, "conv", out, flops, nbytes, cout=cout, wbytes=4 * cin * cout * k * k)


def dense(m, k, n, op="dense"):
    if m == 1:  # matrix-vector: one thread per output and 1024-wide K slice
        return Layer(op, "gemm", n, 2 * k * n, 4 * (k + k * n + n), work=n * math.ceil(k / 1024), wbytes=4 * k * n)
    return Layer(op, "gemm", m * n, 2 * m * k * n, 4 * (m * k + k * n + m * n), cout=n, wbytes=4 * k * n)


def ewise(op, elems):
    return Layer(op, "ewise", elems)


def yolov3():
    ls = [ewise("layout_transform", 3 * 416 * 416), ewise("divide", 3 * 416 * 416)]
    skips = {}

    def c(hw, cin, cout, k):
        ls.append(conv(hw, hw, cin, cout, k, f"conv2d_{k}x{k}_bn_leaky"))

    c(416, 3, 32, 3)
    cin, hw = 32, 416
    for cout, n in [(64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)]:
        hw //= 2
        c(hw, cin, cout, 3)
        for _ in range(n):
            c(hw, cout, cout // 2, 1)
            c(hw, cout // 2, cout, 3)
            ls.append(ewise("add", hw * hw * cout))
        cin = cout
        skips[hw] = cout
    boxes = 0
    for i, (hw, ch) in enumerate([(13, 512), (26, 256), (52, 128)]):
        for _ in range(2):
            c(hw, cin, ch, 1)
            c(hw, ch, 2 * ch, 3)
            cin = 2 * ch
        c(hw, cin, ch, 1)
        c(hw, ch, 2 * ch, 3)
        ls.append(conv(hw, hw, 2 * ch, 255, 1, "conv2d_1x1_bias"))
        ls.append(ewise("yolo_decode_sigmoid_exp", hw * hw * 255))
        boxes += hw * hw * 3
        if i < 2:
            c(hw, ch, ch // 2, 1)
            ls.append(ewise("upsample_nearest", 4 * hw * hw * (ch // 2)))
            ls.append(ewise("concatenate", 4 * hw * hw * (ch // 2 + skips[2 * hw])))
            cin = ch // 2 + skips[2 * hw]
    ls.append(ewise("concatenate_boxes", boxes * 85))
    ls.append(Layer("argmax_boxes", "reduce", boxes * 6, nbytes=4 * boxes * 85))
    return ls, ["pad", "layout_transform", "copy"]


def transformer_layer(s, d, ff, heads, causal):
    dh = d // heads
    ls = []
    if causal:  # GPT-2: pre-LN, fused c_attn
        ls += [Layer("layer_norm_mean_var", "reduce", 2 * s, nbytes=4 * s * d), ewise("layer_norm_normalize", s * d)]
        ls += [dense(s, d, 3 * d, "dense_c_attn"), ewise("bias_add", 3 * s * d)]
        ls += [ewise("split_transpose_q", s * d), ewise("split_transpose_k", s * d), ewise("split_transpose_v", s * d)]
    else:  # BERT: separate q, k, v projections
        for x in "qkv":
            ls += [dense(s, d, d, f"dense_{x}"), ewise("bias_add", s * d)]
        ls += [ewise("transpose_q", s * d), ewise("transpose_k", s * d), ewise("transpose_v", s * d)]
    ls.append(Layer("batch_matmul_qk", "bmm", heads * s * s, 2 * heads * s * s * dh, 4 * (2 * s * d + heads * s * s), cout=s, batch=heads))
    ls.append(ewise("divide", heads * s * s))
    ls.append(ewise("where_causal_mask" if causal else "add_attention_mask", heads * s * s))
    ls += [Layer("softmax_max", "reduce", heads * s, nbytes=4 * heads * s * s), Layer("softmax_exp_sum", "reduce", heads * s, nbytes=4 * heads * s * s), ewise("softmax_normalize", heads * s * s)]
    ls.append(Layer("batch_matmul_av", "bmm", s * d, 2 * heads * s * s * dh, 4 * (heads * s * s + 2 * s * d), cout=dh, batch=heads))
    ls.append(ewise("transpose_merge_heads", s * d))
    ls += [dense(s, d, d, "dense_attn_out"), ewise("bias_residual_add", s * d)]
    # BERT: post-LN after attention; GPT-2: pre-LN before the FFN (same place)
    ls += [Layer("layer_norm_mean_var", "reduce", 2 * s, nbytes=4 * s * d), ewise("layer_norm_normalize", s * d)]
    ls.append(dense(s, d, ff, "dense_ffn_in"))
    if causal:  # gelu_new: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
        ls += [ewise("bias_add", s * ff), ewise("power", s * ff), ewise("multiply", s * ff), ewise("tanh", s * ff), ewise("gelu_combine", s * ff)]
    else:
        ls += [ewise("bias_add", s * ff), ewise("erf", s * ff), ewise("gelu_combine", s * ff)]
    ls += [dense(s, ff, d, "dense_ffn_out"), ewise("bias_residual_add", s * d)]
    if not causal:
        ls += [Layer("layer_norm_mean_var", "reduce", 2 * s, nbytes=4 * s * d), ewise("layer_norm_normalize", s * d)]
    return ls


def bert_base():
    s, d = 128, 768
    ls = [Layer("take_word_embedding", "gather", s * d), Layer("take_position_embedding", "gather", s * d), Layer("take_token_type_embedding", "gather", s * d), ewise("add3", s * d)]
    ls += [Layer("layer_norm_mean_var", "reduce", 2 * s, nbytes=4 * s * d), ewise("layer_norm_normalize", s * d)]
    for _ in range(12):
        ls += transformer_layer(s, d, 3072, 12, causal=False)
    ls.append(ewise("cast_fp16", s * d))
    return ls, ["reshape_copy", "layout_transform", "expand_dims", "cast"]


def gpt2():
    s, d = 128, 768
    ls = [Layer("take_token_embedding", "gather", s * d), Layer("take_position_embedding", "gather", s * d), ewise("add", s * d)]
    for _ in range(12):
        ls += transformer_layer(s, d, 3072, 12, causal=True)
    ls += [Layer("layer_norm_mean_var", "reduce", 2 * s, nbytes=4 * s * d), ewise("layer_norm_normalize", s * d)]
    ls += [ewise("take_last_token", d), dense(1, d, 50257, "dense_lm_head"), ewise("cast_fp16", 50257)]
    return ls, ["reshape_copy", "transpose", "cast", "layout_transform", "strided_slice"]


# name -> (display name, builder, kernels, total ms, input bytes, output bytes, tensor description)
MODELS = {
    "yolov3": ("YOLOv3", yolov3, 144, 10.0, 3 * 416 * 416, 10647 * 6 * 2,
               "input 3x416x416 uint8 image (519168 B); output 10647 boxes x (x, y, w, h, score, class) fp16 (127764 B)"),
    "bert_base": ("BERT-base", bert_base, 393, 8.1, 128 * 4, 128 * 768 * 2,
                  "input 128 int32 token ids (512 B); output 128x768 fp16 last hidden state (196608 B)"),
    "gpt2": ("GPT-2", gpt2, 440, 13.2, 128 * 4, 50257 * 2,
             "input 128 int32 token ids (512 B), one forward pass (prefill); output 50257 fp16 next-token logits (100514 B)"),
}

PROVENANCE = (
    "synthetic: kernel count ({n}) and total time ({ms} ms) from REEF TOCS'25 Table 1 "
    "(TVM, AMD Radeon Instinct MI50); per-kernel split, names, launch configuration, "
    "register/shared-memory use, block times and idempotency generated by "
    "scripts/gen-models.py, seed {seed}; not measured. Table 1 reports every TVM kernel "
    "idempotent; {ni} in-place element-wise kernels are marked non-idempotent here only "
    "to exercise the restore path. Tensor sizes: {tensors}."
)


# --- synthetic memory accesses (REEF §4.4 idempotent groups) ----------------
# Deterministic, no random numbers: the layout follows from the layer list and
# the non-idempotent set, so adding it changed no other field of the files.
# Ops whose kernel also reads an earlier activation (a residual/skip input):
# the output of the kernel SKIP_BACK launches before the current producer.
SKIP_OPS = {"add", "add_relu", "bias_residual_add"}
SKIP_BACK = 3
# Ops that write the shared workspace instead of a new activation; the next
# kernel reads the workspace as well as the current activation.
WORKSPACE_OPS = {"layer_norm_mean_var"}


def weight_bytes(l):
    """Bytes of parameters a layer reads (synthetic)."""
    if l.wbytes:
        return l.wbytes
    if l.kind == "gather":  # the embedding rows it may touch
        return 4 * l.out_elems
    if "bias" in l.op:
        return 4 * min(l.out_elems, 4096)
    if l.op == "layer_norm_normalize":  # gamma and beta
        return 8 * min(l.out_elems, 4096)
    return 0


def accesses(layers, in_place, in_bytes):
    """Per kernel (reads, writes) as lists of [start, end) byte ranges.

    Layout: the input tensor at 0, then every layer's weights in launch
    order, then one activation buffer per kernel that produces one (no
    reuse), then one workspace sized for its largest user.  A kernel reads
    the current activation (the input tensor for the first), its weights,
    a skip activation (SKIP_OPS) and the workspace if the kernel before it
    wrote it; it writes a new activation, or the workspace (WORKSPACE_OPS),
    or -- for the in-place kernels in `in_place` -- the activation it reads.
    """
    off = align(max(in_bytes, 1))
    weights = []
    for l in layers:
        w = weight_bytes(l)
        weights.append([off, off + w] if w else None)
        off = align(off + w)
    acts = []  # activation buffer written by each kernel (None: not a new one)
    for i, l in enumerate(layers):
        if i in in_place or l.op in WORKSPACE_OPS:
            acts.append(None)
        else:
            acts.append([off, off + 4 * l.out_elems])
            off = align(off + 4 * l.out_elems)
    ws_size = max([4 * l.out_elems for l in layers if l.op in WORKSPACE_OPS] or [0])
    ws = [off, off + ws_size]
    cur = [0, max(in_bytes, 1)]  # the current activation
    produced = []  # activation buffers in the order they were produced
    ws_pending = False
    out = []
    for i, l in enumerate(layers):
        reads = [cur]
        if weights[i]:
            reads.append(weights[i])
        if ws_pending:
            reads.append(ws)
        if l.op in SKIP_OPS and len(produced) > SKIP_BACK:
            reads.append(produced[-1 - SKIP_BACK])
        if i in in_place:
            writes = [cur]
            ws_pending = False
        elif l.op in WORKSPACE_OPS:
            writes = [[ws[0], ws[0] + 4 * l.out_elems]]
            ws_pending = True
        else:
            writes = [acts[i]]
            cur = acts[i]
            produced.append(cur)
            ws_pending = False
        out.append((reads, writes))
    return out


def split_total(rng, layers, total_cus):
    """Kernel times in units of 0.01 us, summing exactly to total_cus."""
    weights = []
    for l in layers:
        t = l.nbytes / BANDWIDTH + FLOOR_S
        if l.kind in FLOPS:
            t += l.flops / FLOPS[l.kind]
        weights.append(t * rng.lognormvariate(0.0, 0.12))
    scale = total_cus / sum(weights)
    cus = [max(100, round(w * scale)) for w in weights[:-1]]
    last = total_cus - sum(cus)  # the fix-up: absorbs all rounding
    assert last >= 100, f"last kernel would get {last / 100} us"
    return cus + [last]


def launch(rng, l):
    blocks_shapes, regs_choices, shared_choices, per_thread = KINDS[l.kind]
    block = list(rng.choice(blocks_shapes))
    threads = block[0] * block[1] * block[2]
    regs = rng.choice(regs_choices)
    shared = rng.choice(shared_choices)
    if l.work is not None:
        blocks = max(1, math.ceil(l.work / threads))
    else:
        blocks = max(1, math.ceil(l.out_elems / (threads * per_thread)))
    if l.batch > 1:
        per = max(1, math.ceil(blocks / l.batch))
        gy = max(1, min(per, math.ceil((l.cout or 1) / 64)))
        grid = [math.ceil(per / gy), gy, l.batch]
    elif l.cout:
        gy = max(1, min(blocks, math.ceil(l.cout / 64)))
        grid = [math.ceil(blocks / gy), gy, 1]
    else:
        grid = [blocks, 1, 1]
    return grid, block, regs, shared


def build(name):
    display, builder, n, ms, in_bytes, out_bytes, tensors = MODELS[name]
    # One generator per model, seeded from SEED and the name, so that editing
    # one model never changes another.
    rng = random.Random(f"{SEED}:{name}")
    layers, aux = builder()
    assert len(layers) <= n, f"{name}: structure has {len(layers)} kernels, more than {n}"
    while len(layers) < n:  # TVM's extra copies/layout changes, spread out
        pos = rng.randrange(1, len(layers))
        ref = layers[pos - 1]
        layers.insert(pos, ewise(rng.choice(aux), ref.out_elems))
    total_cus = round(ms * 1000 * 100)
    times = split_total(rng, layers, total_cus)
    in_place = [i for i, l in enumerate(layers) if l.op in IN_PLACE_OPS]
    n_non_idem = min(len(in_place), round(NON_IDEMPOTENT_FRACTION * n))
    non_idem = set(rng.sample(in_place, n_non_idem))
    acc = accesses(layers, non_idem, in_bytes)
    groups = minimal_groups(acc)
    kernels = []
    for i, (l, cus) in enumerate(zip(layers, times)):
        grid, block, regs, shared = launch(rng, l)
        op = l.op + ("_inplace" if i in non_idem else "")
        kt = cus / 100
        bt = round(kt / rounds(grid, block, regs, shared), 3)
        kernels.append({
            "name": f"{op}_{i}", "grid": grid, "block": block,
            "regs_per_thread": regs, "shared_mem_bytes": shared,
            "kernel_time_us": kt, "block_time_us": bt, "idempotent": i not in non_idem,
            "reads": acc[i][0], "writes": acc[i][1], "group_start": groups[i],
        })
        assert (groups[i] == i) == (i not in non_idem), (name, i, groups[i])
    assert len(kernels) == n
    assert sum(round(k["kernel_time_us"] * 100) for k in kernels) == total_cus
    return {
        "name": name, "display_name": display,
        "provenance": PROVENANCE.format(n=n, ms=ms, seed=SEED, ni=n_non_idem, tensors=tensors),
        "input_bytes": in_bytes, "output_bytes": out_bytes,
        "total_time_us": total_cus / 100, "kernels": kernels,
    }


def special_models():
    null = {
        "name": "null", "display_name": "Null (no kernels)",
        "provenance": "synthetic: zero kernels, no input, no output; completes as soon as it starts. "
                      "Used by IPC benchmarks to measure the pure request/completion round trip.",
        "input_bytes": 0, "output_bytes": 0, "total_time_us": 0.0, "kernels": [],
    }
    echo = {
        "name": "echo_small", "display_name": "Echo (1 kernel, 50 us)",
        "provenance": "synthetic: one 50 us kernel, 64-byte input and output; for fast tests.",
        "input_bytes": 64, "output_bytes": 64, "total_time_us": 50.0,
        "kernels": [{
            "name": "echo_0", "grid": [1, 1, 1], "block": [64, 1, 1],
            "regs_per_thread": 16, "shared_mem_bytes": 0,
            "kernel_time_us": 50.0, "block_time_us": 50.0, "idempotent": True,
            "reads": [[0, 64]], "writes": [[256, 320]], "group_start": 0,
        }],
    }
    return {"null": null, "echo_small": echo}


def all_models():
    models = {name: build(name) for name in MODELS}
    models.update(special_models())
    return {name: render(m) for name, m in models.items()}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "daemon", "model", "manifests")
    ap = argparse.ArgumentParser(
        description="Generate sluice's synthetic model manifests (daemon/model/manifests/"
                    f"{{{','.join([*MODELS, *special_models()])}}}.json) from REEF TOCS'25 "
                    "Table 1 (kernel counts, MI50 totals) plus synthetic per-kernel detail "
                    f"(seed {SEED}). Rerunning rewrites the files byte for byte. The measured "
                    "models come from scripts/import-reef.py.")
    ap.add_argument("--out", default=default_out, help="output directory (default: daemon/model/manifests)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if any file in --out differs from what would be generated")
    args = ap.parse_args()
    return write_or_check(all_models(), args.out, args.check, "python3 scripts/gen-models.py")

if __name__ == "__main__":
    sys.exit(main())
