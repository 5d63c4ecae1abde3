#!/usr/bin/env python3
"""Write sluice's estimated and test model manifests (daemon/model/manifests/*.json).

For the models the REEF artifact has no data for (YOLOv3, BERT-base, GPT-2;
VGG-16, MnasNet 1.0, EfficientNet-B0 of gpulet Table 3 and InSS Section 6.1)
and the test models null and echo_small; the measured ones (ResNet-152,
VGG-19 and seven more) are written by scripts/import-reef.py from the REEF
authors' MI50 profiles. docs/models.md, "Estimated models", is the long form.

* Layer shapes: real. YOLOv3 at 416x416 (Darknet-53 and the three YOLO
  heads, 75 convolutions), BERT-base and GPT-2 small on a 128-token sequence
  (12 layers, hidden 768, 12 heads, FFN 3072; GPT-2 one forward pass with the
  LM head on the last token), the shapes of daemon/nn's builders; VGG-16,
  MnasNet and EfficientNet-B0 at 224x224 as torchvision defines them. One kernel
  per layer operation as listed below (an unfused TVM-like decomposition: a
  GEMM, its bias add and activation are separate kernels); no kernel is added
  to reach REEF Table 1's counts, which the lists do not match (see
  docs/models.md).
* Kernel times: ESTIMATED by one roofline rule on the AMD Radeon Instinct
  MI50, from each kernel's FLOPs and bytes:
      kernel_time_us = max(FLOOR, flops / P[class], bytes / B[class])
  whose parameters are what REEF's TVM build achieved on the MI50 for
  measured kernels of the same kind (scripts/manifestgen/calibrate.py,
  stored in scripts/manifestgen/mi50-roofline.json). Never rescaled to, or
  fitted on, REEF Table 1's totals; they are printed beside them.
* Estimated, not measured: launch configuration (one per kernel kind,
  KIND_LAUNCH), registers, shared memory; block_time_us from a simplified
  GCN occupancy model of the 60-CU MI50 (`blocks_per_cu`), so that
  kernel_time_us = block_time_us * rounds; mem_intensity by the rule of the
  measured manifests (bytes over kernel time at 1024 GB/s, capped at 1).
* Deterministic, made up for the restore path: 7% of the in-place
  element-wise kernels are non-idempotent (`*_inplace_N`), evenly spaced.
  Device-memory `reads`/`writes` over a made-up buffer layout (`accesses`)
  and `group_start` (REEF Section 4.4) by scripts/manifestgen/groups.py.

No randomness: rerunning rewrites every file byte for byte. `--check`
verifies the committed files (and, where the REEF data is found, the stored
roofline parameters) are current (for CI).
"""

import argparse
import json
import math
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
from manifestgen.calibrate import derive  # noqa: E402
from manifestgen.groups import align, minimal_groups  # noqa: E402
from manifestgen.output import render, write_or_check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
DEFAULT_DATA = os.path.join("..", "shared", "data", "reef")  # relative to the repo root
ROOFLINE = os.path.join(HERE, "manifestgen", "mi50-roofline.json")
REGENERATE = "python3 scripts/gen-models.py"

# --- AMD Radeon Instinct MI50 (gfx906), simplified GCN occupancy model -----
MI50_CUS = 60
WAVE_SIZE = 64
SIMDS_PER_CU = 4
MAX_WAVES_PER_SIMD = 10  # 40 waves (and at most 40 workgroups) per CU
VGPRS_PER_SIMD_LANE = 256
LDS_BYTES_PER_CU = 65536
# MI50 peak HBM2 bandwidth, bytes/s (AMD datasheet), for mem_intensity only.
MI50_BW = 1024e9


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
# kind -> (block, regs per thread, LDS bytes, outputs per thread): one launch
# configuration per kind, ESTIMATED, near what REEF's TVM build launches for
# kernels of that kind on the MI50 (resnet18.json convolutions: 448 threads,
# 12-18 KB LDS; bert.json dense/batch_matmul: 200-256 threads, 5-11 KB;
# injective kernels: 256 threads, no LDS; mean/variance: 32x32, 4 KB).
KIND_LAUNCH = {
    "conv": ((16, 16, 1), 64, 16384, 8),
    "gemm": ((16, 16, 1), 64, 8192, 4),
    "bmm": ((16, 16, 1), 48, 4096, 8),
    "ewise": ((256, 1, 1), 16, 0, 4),
    "reduce": ((32, 32, 1), 32, 4096, 1),
    "pool": ((256, 1, 1), 24, 0, 2),
    # depthwise convolutions: mobilenet.json's launch 392-784 threads with
    # 4-13 KB of LDS
    "dwconv": ((16, 16, 1), 32, 8192, 2),
    "gather": ((256, 1, 1), 16, 0, 4),
}

# Roofline class of each kernel -> (throughput key, "flops" or "bytes") in
# mi50-roofline.json. Every kernel is also bounded by its bytes at the
# element-wise bandwidth and by the floor.
CLASSES = {
    "conv3x3": ("conv3x3_flops_per_s", "flops"),       # 3x3 stride-1 convolution (TVM: winograd)
    "conv_direct": ("conv_direct_flops_per_s", "flops"),  # strided convolutions
    "gemm": ("gemm_flops_per_s", "flops"),             # dense M > 1, batch matmul, 1x1 stride-1 conv
    "gemv": ("gemv_bytes_per_s", "bytes"),             # dense M = 1 (weight-streaming)
    "mem": ("mem_bytes_per_s", "bytes"),               # element-wise, reductions, gathers
    "depthwise": ("depthwise_bytes_per_s", "bytes"),   # depthwise convolutions (any k, stride)
}

# Element-wise ops that TVM may emit in place; a few are marked
# non-idempotent (see NON_IDEMPOTENT_FRACTION).
IN_PLACE_OPS = {"add", "add_relu", "bias_add", "bias_add_relu", "bias_residual_add", "leaky_relu", "multiply", "divide", "relu"}
NON_IDEMPOTENT_FRACTION = 0.07


class Layer:
    """One kernel before timing: op name, kind, roofline class, cost and output size.

    `flops` and `nbytes` come from the layer's shape: nbytes counts every
    tensor the kernel reads and the one it writes once, fp32.
    """

    def __init__(self, op, kind, out_elems, flops=0, nbytes=None, cout=None, batch=1, work=None, wbytes=0, cls="mem", inputs=1):
        self.op = op
        self.kind = kind
        self.cls = cls
        self.out_elems = max(1, int(out_elems))
        self.flops = flops
        # default traffic: `inputs` output-sized tensors read, the output written, fp32
        self.nbytes = nbytes if nbytes is not None else 4 * (inputs + 1) * self.out_elems
        self.cout = cout
        self.batch = batch
        # independent work items if not out_elems / outputs-per-thread
        # (split-K matrix-vector products)
        self.work = work
        # weight bytes (synthetic memory layout only, see `accesses`)
        self.wbytes = wbytes


def conv(h, w, cin, cout, k, op="conv2d", stride=1):
    """A k x k convolution with an h x w output (input stride x larger)."""
    out = h * w * cout
    flops = 2 * out * cin * k * k
    nbytes = 4 * (stride * h * stride * w * cin + out + cin * cout * k * k)
    if stride == 1 and k == 3:
        cls = "conv3x3"
    elif stride == 1 and k == 1:
        cls = "gemm"  # a GEMM over the pixels: [h*w, cin] x [cin, cout]
    else:
        cls = "conv_direct"
    return Layer(op, "conv", out, flops, nbytes, cout=cout, wbytes=4 * cin * cout * k * k, cls=cls)


def dwconv(hw, c, k, stride=1, op=None):
    """A k x k depthwise convolution over c channels with an hw x hw output."""
    out = hw * hw * c
    nbytes = 4 * (stride * hw * stride * hw * c + out + c * k * k)
    return Layer(op or f"depthwise_conv2d_{k}x{k}{'_s2' if stride > 1 else ''}_bn_relu", "dwconv", out,
                 2 * out * k * k, nbytes, cout=c, wbytes=4 * c * k * k, cls="depthwise")


def max_pool(hw, c):
    """2x2 stride-2 max pooling to an hw x hw output (reads 4 inputs per output)."""
    return Layer("max_pool2d", "pool", hw * hw * c, nbytes=4 * 5 * hw * hw * c)


def global_avg_pool(hw, c, op="global_avg_pool2d"):
    return reduce(op, c, hw * hw * c)


def dense(m, k, n, op="dense"):
    if m == 1:  # matrix-vector: one thread per output and 1024-wide K slice
        return Layer(op, "gemm", n, 2 * k * n, 4 * (k + k * n + n), work=n * math.ceil(k / 1024), wbytes=4 * k * n, cls="gemv")
    return Layer(op, "gemm", m * n, 2 * m * k * n, 4 * (m * k + k * n + m * n), cout=n, wbytes=4 * k * n, cls="gemm")


def ewise(op, elems, inputs=1):
    return Layer(op, "ewise", elems, inputs=inputs)


def reduce(op, out_elems, in_elems):
    return Layer(op, "reduce", out_elems, nbytes=4 * (in_elems + out_elems))


def yolov3():
    """YOLOv3 at 416x416: Darknet-53 (52 convolutions, 23 residual adds), the
    three detection heads (23 convolutions), upsampling and routes."""
    ls = [ewise("layout_transform", 3 * 416 * 416), ewise("divide", 3 * 416 * 416)]
    skips = {}

    def c(hw, cin, cout, k, stride=1):
        ls.append(conv(hw, hw, cin, cout, k, f"conv2d_{k}x{k}{'_s2' if stride > 1 else ''}_bn_leaky", stride))

    c(416, 3, 32, 3)
    cin, hw = 32, 416
    for cout, n in [(64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)]:
        hw //= 2
        c(hw, cin, cout, 3, stride=2)
        for _ in range(n):
            c(hw, cout, cout // 2, 1)
            c(hw, cout // 2, cout, 3)
            ls.append(ewise("add", hw * hw * cout, inputs=2))
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
            ls.append(Layer("upsample_nearest", "ewise", 4 * hw * hw * (ch // 2), nbytes=4 * 5 * hw * hw * (ch // 2)))
            ls.append(ewise("concatenate", 4 * hw * hw * (ch // 2 + skips[2 * hw])))
            cin = ch // 2 + skips[2 * hw]
    ls.append(ewise("concatenate_boxes", boxes * 85))
    ls.append(reduce("argmax_boxes", boxes * 6, boxes * 85))
    return ls


def transformer_layer(s, d, ff, heads, causal):
    """One BERT (post-LN) or GPT-2 (pre-LN, causal) layer as unfused kernels."""
    dh = d // heads
    ls = []
    if causal:  # GPT-2: pre-LN, fused c_attn
        ls += [reduce("layer_norm_mean_var", 2 * s, s * d), ewise("layer_norm_normalize", s * d)]
        ls += [dense(s, d, 3 * d, "dense_c_attn"), ewise("bias_add", 3 * s * d)]
        ls += [ewise("split_transpose_q", s * d), ewise("split_transpose_k", s * d), ewise("split_transpose_v", s * d)]
    else:  # BERT: separate q, k, v projections
        for x in "qkv":
            ls += [dense(s, d, d, f"dense_{x}"), ewise("bias_add", s * d)]
        ls += [ewise("transpose_q", s * d), ewise("transpose_k", s * d), ewise("transpose_v", s * d)]
    ls.append(Layer("batch_matmul_qk", "bmm", heads * s * s, 2 * heads * s * s * dh, 4 * (2 * s * d + heads * s * s), cout=s, batch=heads, cls="gemm"))
    ls.append(ewise("divide", heads * s * s))
    ls.append(ewise("where_causal_mask" if causal else "add_attention_mask", heads * s * s))
    ls += [reduce("softmax_max", heads * s, heads * s * s), reduce("softmax_exp_sum", heads * s, heads * s * s), ewise("softmax_normalize", heads * s * s)]
    ls.append(Layer("batch_matmul_av", "bmm", s * d, 2 * heads * s * s * dh, 4 * (heads * s * s + 2 * s * d), cout=dh, batch=heads, cls="gemm"))
    ls.append(ewise("transpose_merge_heads", s * d))
    ls += [dense(s, d, d, "dense_attn_out"), ewise("bias_residual_add", s * d, inputs=2)]
    # BERT: post-LN after attention; GPT-2: pre-LN before the FFN (same place)
    ls += [reduce("layer_norm_mean_var", 2 * s, s * d), ewise("layer_norm_normalize", s * d)]
    ls.append(dense(s, d, ff, "dense_ffn_in"))
    if causal:  # gelu_new: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
        ls += [ewise("bias_add", s * ff), ewise("power", s * ff), ewise("multiply", s * ff, inputs=2), ewise("tanh", s * ff), ewise("gelu_combine", s * ff, inputs=2)]
    else:
        ls += [ewise("bias_add", s * ff), ewise("erf", s * ff), ewise("gelu_combine", s * ff, inputs=2)]
    ls += [dense(s, ff, d, "dense_ffn_out"), ewise("bias_residual_add", s * d, inputs=2)]
    if not causal:
        ls += [reduce("layer_norm_mean_var", 2 * s, s * d), ewise("layer_norm_normalize", s * d)]
    return ls


def bert_base():
    """BERT-base: embeddings, 12 post-LN layers, hidden 768, 128 tokens."""
    s, d = 128, 768
    ls = [Layer("take_word_embedding", "gather", s * d), Layer("take_position_embedding", "gather", s * d), Layer("take_token_type_embedding", "gather", s * d), ewise("add3", s * d, inputs=3)]
    ls += [reduce("layer_norm_mean_var", 2 * s, s * d), ewise("layer_norm_normalize", s * d)]
    for _ in range(12):
        ls += transformer_layer(s, d, 3072, 12, causal=False)
    ls.append(ewise("cast_fp16", s * d))
    return ls


def gpt2():
    """GPT-2 small: embeddings, 12 pre-LN causal layers, final LN, LM head on the last token."""
    s, d = 128, 768
    ls = [Layer("take_token_embedding", "gather", s * d), Layer("take_position_embedding", "gather", s * d), ewise("add", s * d, inputs=2)]
    for _ in range(12):
        ls += transformer_layer(s, d, 3072, 12, causal=True)
    ls += [reduce("layer_norm_mean_var", 2 * s, s * d), ewise("layer_norm_normalize", s * d)]
    ls += [ewise("take_last_token", d), dense(1, d, 50257, "dense_lm_head"), ewise("cast_fp16", 50257)]
    return ls


def vgg16():
    """VGG-16 (torchvision `vgg16`, configuration D) at 224x224: 13 3x3
    convolutions with bias and ReLU fused, 5 max pools, 3 dense layers."""
    ls = []
    cin, hw = 3, 224
    for stage in [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]:
        for cout in stage:
            ls.append(conv(hw, hw, cin, cout, 3, "conv2d_3x3_bias_relu"))
            cin = cout
        hw //= 2
        ls.append(max_pool(hw, cin))
    # the adaptive 7x7 average pool is the identity at 224x224
    ls += [dense(1, 512 * 7 * 7, 4096, "dense_bias_relu"), dense(1, 4096, 4096, "dense_bias_relu"),
           dense(1, 4096, 1000, "dense_bias")]
    return ls


def mnasnet():
    """MnasNet-B1 1.0 (torchvision `mnasnet1_0`) at 224x224: batch norm and
    ReLU fused into each convolution, inverted-residual stacks without
    squeeze-and-excitation, residual adds as kernels."""
    ls = [conv(112, 112, 3, 32, 3, "conv2d_3x3_s2_bn_relu", stride=2),
          dwconv(112, 32, 3), conv(112, 112, 32, 16, 1, "conv2d_1x1_bn")]
    cin, hw = 16, 112
    # (out channels, kernel, first stride, expansion, repeats)
    for cout, k, stride, exp, n in [(24, 3, 2, 3, 3), (40, 5, 2, 3, 3), (80, 5, 2, 6, 3), (96, 3, 1, 6, 2),
                                    (192, 5, 2, 6, 4), (320, 3, 1, 6, 1)]:
        for i in range(n):
            s = stride if i == 0 else 1
            mid = cin * exp
            ls.append(conv(hw, hw, cin, mid, 1, "conv2d_1x1_bn_relu"))
            hw //= s
            ls.append(dwconv(hw, mid, k, s))
            ls.append(conv(hw, hw, mid, cout, 1, "conv2d_1x1_bn"))
            if s == 1 and cin == cout:
                ls.append(ewise("add", hw * hw * cout, inputs=2))
            cin = cout
    ls += [conv(hw, hw, cin, 1280, 1, "conv2d_1x1_bn_relu"), global_avg_pool(hw, 1280),
           dense(1, 1280, 1000, "dense_bias")]
    return ls


def efficientnet_b0():
    """EfficientNet-B0 (torchvision `efficientnet_b0`) at 224x224: batch norm
    and SiLU fused into each convolution; MBConv blocks with
    squeeze-and-excitation (global pool, two matrix-vector layers with SiLU
    and sigmoid fused, channel scaling) and residual adds as kernels."""
    ls = [conv(112, 112, 3, 32, 3, "conv2d_3x3_s2_bn_silu", stride=2)]
    cin, hw = 32, 112
    # (expansion, kernel, first stride, out channels, repeats)
    for exp, k, stride, cout, n in [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                                    (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]:
        for i in range(n):
            s = stride if i == 0 else 1
            mid = cin * exp
            if exp != 1:
                ls.append(conv(hw, hw, cin, mid, 1, "conv2d_1x1_bn_silu"))
            hw //= s
            ls.append(dwconv(hw, mid, k, s, f"depthwise_conv2d_{k}x{k}{'_s2' if s > 1 else ''}_bn_silu"))
            sq = max(1, cin // 4)
            ls += [global_avg_pool(hw, mid, "se_global_avg_pool2d"), dense(1, mid, sq, "se_conv2d_1x1_bias_silu"),
                   dense(1, sq, mid, "se_conv2d_1x1_bias_sigmoid"),
                   Layer("multiply", "ewise", hw * hw * mid, nbytes=4 * (2 * hw * hw * mid + mid))]
            ls.append(conv(hw, hw, mid, cout, 1, "conv2d_1x1_bn"))
            if s == 1 and cin == cout:
                ls.append(ewise("add", hw * hw * cout, inputs=2))
            cin = cout
    ls += [conv(hw, hw, cin, 1280, 1, "conv2d_1x1_bn_silu"), global_avg_pool(hw, 1280),
           dense(1, 1280, 1000, "dense_bias")]
    return ls


IMAGENET_TENSORS = "input 3x224x224 fp32 image (602112 B); output 1000 fp32 logits (4000 B)"

def mobilenet_v1():
    """MobileNet v1 at 224x224, the measured mobilenet.json's architecture:
    for the cross-check printed by main() only (no manifest is written)."""
    ls = [conv(112, 112, 3, 32, 3, "conv2d_3x3_s2_bn_relu", stride=2)]
    cin, hw = 32, 112
    for cout, s in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]:
        hw //= s
        ls += [dwconv(hw, cin, 3, s), conv(hw, hw, cin, cout, 1, "conv2d_1x1_bn_relu")]
        cin = cout
    return ls + [global_avg_pool(hw, 1024), dense(1, 1024, 1000, "dense_bias")]


# name -> (display name, builder, REEF Table 1 kernels, Table 1 ms, input bytes, output bytes, tensor description)
MODELS = {
    "yolov3": ("YOLOv3", yolov3, 144, 10.0, 3 * 416 * 416, 10647 * 6 * 2,
               "input 3x416x416 uint8 image (519168 B); output 10647 boxes x (x, y, w, h, score, class) fp16 (127764 B)"),
    "bert_base": ("BERT-base", bert_base, 393, 8.1, 128 * 4, 128 * 768 * 2,
                  "input 128 int32 token ids (512 B); output 128x768 fp16 last hidden state (196608 B)"),
    "gpt2": ("GPT-2", gpt2, 440, 13.2, 128 * 4, 50257 * 2,
             "input 128 int32 token ids (512 B), one forward pass (prefill); output 50257 fp16 next-token logits (100514 B)"),
    # gpulet (ATC'22) Table 3 and InSS Section 6.1 models the artifact lacks; not in REEF Table 1
    "vgg16": ("VGG-16", vgg16, None, None, 4 * 3 * 224 * 224, 4 * 1000, IMAGENET_TENSORS),
    "mnasnet": ("MnasNet 1.0", mnasnet, None, None, 4 * 3 * 224 * 224, 4 * 1000, IMAGENET_TENSORS),
    "efficientnet_b0": ("EfficientNet-B0", efficientnet_b0, None, None, 4 * 3 * 224 * 224, 4 * 1000,
                        IMAGENET_TENSORS),
}

PROVENANCE = (
    "estimated, not measured (the REEF artifact has no data for this model): {n} kernels, one per "
    "operation of the real layer shapes ({shapes}), not REEF TOCS'25 Table 1's TVM count of {t_n}. "
    "kernel_time_us = max(floor, FLOPs / P, bytes / B) on the AMD Radeon Instinct MI50 "
    "(scripts/gen-models.py), each parameter what REEF's TVM build achieved on the MI50 for measured "
    "kernels of that kind (../shared/data/reef, SJTU-IPADS/reef resource/, Apache-2.0; launch/timing floor "
    "F = {F} us removed as in the measured manifests; scripts/manifestgen/mi50-roofline.json): "
    "floor {floor} us; 3x3 stride-1 convolutions {conv3x3} TFLOP/s (resnet18.json's winograd layers); "
    "strided convolutions {conv_direct} TFLOP/s (resnet18.json's direct ones); dense, batch matmul "
    "and 1x1 convolutions {gemm} TFLOP/s (bert.json's batch_matmul kernels); matrix-vector {gemv} GB/s "
    "(batch-1 dense kernels of the artifact); element-wise, reductions and all bytes {mem} GB/s "
    "(bert.json's softmax/mask kernels). Kernel times sum to {total:g} us; Table 1 gives {t_ms} ms "
    "(not fitted or rescaled to it; docs/models.md explains the difference). Estimated too: launch "
    "configuration per kernel kind, registers, shared memory, block_time_us (simplified MI50 occupancy "
    "model), mem_intensity (bytes over kernel time at 1024 GB/s, capped at 1). Made up: device-memory "
    "layout and {ni} in-place element-wise kernels marked non-idempotent (to exercise the restore path; "
    "Table 1 reports every TVM kernel idempotent). Tensor sizes: {tensors}."
)

# The models of gpulet (ATC'22) Table 3 and InSS Section 6.1 that the REEF
# artifact lacks: the same rule, plus depthwise convolutions at the bandwidth
# REEF's MobileNet achieved; REEF Table 1 has no entry for them.
PROVENANCE_CNN = (
    "estimated, not measured (the REEF artifact has no data for this model): {n} kernels, one per "
    "operation of the real layer shapes ({shapes}). "
    "kernel_time_us = max(floor, FLOPs / P, bytes / B) on the AMD Radeon Instinct MI50 "
    "(scripts/gen-models.py), each parameter what REEF's TVM build achieved on the MI50 for measured "
    "kernels of that kind (../shared/data/reef, SJTU-IPADS/reef resource/, Apache-2.0; launch/timing floor "
    "F = {F} us removed as in the measured manifests; scripts/manifestgen/mi50-roofline.json): "
    "floor {floor} us; 3x3 stride-1 convolutions {conv3x3} TFLOP/s (resnet18.json's winograd layers); "
    "strided and other direct convolutions {conv_direct} TFLOP/s (resnet18.json's direct ones); 1x1 "
    "stride-1 convolutions {gemm} TFLOP/s (bert.json's batch_matmul kernels; mobilenet.json's 1x1 "
    "convolutions achieved {pointwise} TFLOP/s, so these may be estimated too fast); depthwise "
    "convolutions {depthwise} GB/s (mobilenet.json's depthwise 3x3 layers); matrix-vector {gemv} GB/s "
    "(batch-1 dense kernels of the artifact); element-wise, pooling, reductions and all bytes {mem} GB/s "
    "(bert.json's softmax/mask kernels). Kernel times sum to {total:g} us; not in REEF Table 1, nothing "
    "fitted to any total. Estimated too: launch configuration per kernel kind, registers, shared memory, "
    "block_time_us (simplified MI50 occupancy model), mem_intensity (bytes over kernel time at 1024 GB/s, "
    "capped at 1). Made up: device-memory layout and {ni} in-place element-wise kernels marked "
    "non-idempotent (to exercise the restore path). Tensor sizes: {tensors}."
)

SHAPES = {
    "yolov3": "YOLOv3 416x416: 75 convolutions with BN and leaky ReLU fused, 23 residual adds, 3 YOLO heads",
    "bert_base": "BERT-base: 12 layers, 128 tokens, hidden 768, 12 heads, FFN 3072",
    "gpt2": "GPT-2 small: 12 layers, 128 tokens, hidden 768, 12 heads, FFN 3072, LM head 768x50257 on the last token",
    "vgg16": "torchvision vgg16 at 224x224: 13 3x3 convolutions with bias and ReLU fused, 5 max pools, "
             "dense 25088-4096-4096-1000, 30.9 GFLOP",
    "mnasnet": "torchvision mnasnet1_0 at 224x224: 52 convolutions (17 depthwise 3x3/5x5) with batch norm and "
               "ReLU fused, 10 residual adds, global pool, dense 1280-1000, 0.63 GFLOP",
    "efficientnet_b0": "torchvision efficientnet_b0 at 224x224: 49 convolutions (16 depthwise 3x3/5x5) with batch "
                       "norm and SiLU fused, 16 squeeze-and-excitation blocks (pool, two matrix-vector layers, "
                       "scale), 9 residual adds, global pool, dense 1280-1000, 0.79 GFLOP",
}


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


def estimate_us(l, roof):
    """The kernel's estimated MI50 time in us: max(floor, flops / P, bytes / B)."""
    key, unit = CLASSES[l.cls]
    t = max(roof["floor_us"] * 1e-6, l.nbytes / roof["mem_bytes_per_s"])
    t = max(t, (l.flops if unit == "flops" else l.nbytes) / roof[key])
    return t * 1e6


def launch(l):
    block, regs, shared, per_thread = KIND_LAUNCH[l.kind]
    threads = block[0] * block[1] * block[2]
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
    return grid, list(block), regs, shared


def evenly(items, k):
    """k of `items`, evenly spaced (the middle of each of k equal slices)."""
    return [items[(2 * j + 1) * len(items) // (2 * k)] for j in range(k)]


def build(name, roof):
    display, builder, t_n, t_ms, in_bytes, out_bytes, tensors = MODELS[name]
    layers = builder()
    n = len(layers)
    cus = [round(estimate_us(l, roof) * 100) for l in layers]  # 0.01 us units
    in_place = [i for i, l in enumerate(layers) if l.op in IN_PLACE_OPS]
    n_non_idem = min(len(in_place), round(NON_IDEMPOTENT_FRACTION * n))
    non_idem = set(evenly(in_place, n_non_idem))
    acc = accesses(layers, non_idem, in_bytes)
    groups = minimal_groups(acc)
    kernels = []
    for i, (l, c) in enumerate(zip(layers, cus)):
        grid, block, regs, shared = launch(l)
        op = l.op + ("_inplace" if i in non_idem else "")
        kt = c / 100
        bt = round(kt / rounds(grid, block, regs, shared), 3)
        kernels.append({
            "name": f"{op}_{i}", "grid": grid, "block": block,
            "regs_per_thread": regs, "shared_mem_bytes": shared,
            "kernel_time_us": kt, "block_time_us": bt, "idempotent": i not in non_idem,
            "mem_intensity": round(min(1.0, l.nbytes / (kt * 1e-6 * MI50_BW)), 4),
            "reads": acc[i][0], "writes": acc[i][1], "group_start": groups[i],
        })
        assert (groups[i] == i) == (i not in non_idem), (name, i, groups[i])
    total = sum(cus) / 100
    tflops = {k: f"{roof[k] / 1e12:.2f}" for k in ("conv3x3_flops_per_s", "conv_direct_flops_per_s", "gemm_flops_per_s")}
    provenance = (PROVENANCE if t_n else PROVENANCE_CNN).format(
        n=n, shapes=SHAPES[name], t_n=t_n, t_ms=t_ms, F=roof["launch_floor_F_us"], floor=roof["floor_us"],
        conv3x3=tflops["conv3x3_flops_per_s"], conv_direct=tflops["conv_direct_flops_per_s"],
        gemm=tflops["gemm_flops_per_s"], gemv=round(roof["gemv_bytes_per_s"] / 1e9),
        mem=round(roof["mem_bytes_per_s"] / 1e9), total=total, ni=n_non_idem, tensors=tensors,
        pointwise=f"{roof.get('pointwise_check_flops_per_s', 0) / 1e12:.2f}",
        depthwise=round(roof.get("depthwise_bytes_per_s", 0) / 1e9))
    by_class = {}
    for l, c in zip(layers, cus):
        cl = "floor" if c == round(roof["floor_us"] * 100) else l.cls
        k, t = by_class.get(cl, (0, 0))
        by_class[cl] = (k + 1, t + c / 100)
    summary = dict(name=name, kernels=n, total_us=total, table1=(t_n, t_ms), non_idempotent=n_non_idem,
                   flops=sum(l.flops for l in layers), by_class=by_class)
    return {
        "name": name, "display_name": display, "provenance": provenance,
        "input_bytes": in_bytes, "output_bytes": out_bytes,
        "total_time_us": total, "kernels": kernels,
    }, summary


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


def roofline(data, check):
    """The roofline parameters: derived from the REEF data when it is found
    (and then written, or with `check` compared, to ROOFLINE), else the
    committed ROOFLINE. Returns (parameters, stale: bool)."""
    found = data and os.path.isfile(os.path.join(data, "vgg.profile.json"))
    text = None
    if found:
        text = json.dumps(derive(data), indent=1) + "\n"
        print(f"roofline parameters derived from {data}")
    try:
        with open(ROOFLINE, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    if text is None:
        if current is None:
            print(f"gen-models: no REEF data at {data} and no {ROOFLINE}; pass --data DIR", file=sys.stderr)
            sys.exit(2)
        print(f"REEF data not found ({data}): using the committed {os.path.relpath(ROOFLINE, REPO)}")
        return json.loads(current), False
    stale = current != text
    if check and stale:
        print(f"stale: {os.path.relpath(ROOFLINE, REPO)} (run {REGENERATE})", file=sys.stderr)
    elif stale:
        with open(ROOFLINE, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        print(f"wrote {os.path.relpath(ROOFLINE, REPO)}")
    return json.loads(text), stale and check


def main():
    ap = argparse.ArgumentParser(
        description="Write sluice's estimated model manifests (daemon/model/manifests/"
                    f"{{{','.join([*MODELS, *special_models()])}}}.json): the real layer shapes of "
                    f"{', '.join(MODELS)}, kernel times by a roofline on the MI50 whose parameters are "
                    "achieved throughputs of REEF's measured MI50 kernels (docs/models.md). Rerunning "
                    "rewrites the files byte for byte. The measured models come from scripts/import-reef.py.")
    ap.add_argument("--data", default=None,
                    help=f"directory of the REEF files (default: {DEFAULT_DATA} relative to the repository "
                         f"root); without it the committed scripts/manifestgen/mi50-roofline.json is used")
    ap.add_argument("--out", default=os.path.join(REPO, "daemon", "model", "manifests"),
                    help="output directory (default: daemon/model/manifests)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if any file in --out (or the stored roofline parameters, "
                         "when the REEF data is found) differs from what would be generated")
    args = ap.parse_args()
    data = args.data or os.path.normpath(os.path.join(REPO, DEFAULT_DATA))
    roof, stale = roofline(data, args.check)
    files = {}
    for name in MODELS:
        manifest, s = build(name, roof)
        files[name] = render(manifest)
        t_n, t_ms = s["table1"]
        classes = ", ".join(f"{c} {k}/{t:.0f} us" for c, (k, t) in sorted(s["by_class"].items()))
        t1 = (f" (Table 1: {t_n})", f" (Table 1: {t_ms * 1000:g})") if t_n else ("", "")
        print(f"{name:>15}: {s['kernels']:3} kernels{t1[0]}, estimate {s['total_us']:.0f} us{t1[1]}, "
              f"{s['flops'] / 1e9:.1f} GFLOP; non-idempotent {s['non_idempotent']}; "
              f"by class (kernels/time): {classes}")
    # Cross-check of the rule on a model that is measured (its depthwise
    # bandwidth comes from this same model, so the check is partly circular).
    v1 = mobilenet_v1()
    by = {}
    for l in v1:
        k, t = by.get(l.cls, (0, 0))
        by[l.cls] = (k + 1, t + estimate_us(l, roof))
    print(f"cross-check: MobileNet v1 ({len(v1)} layers) by this rule {sum(t for _, t in by.values()):.0f} us against "
          f"the measured mobilenet.json's 888 us (F removed); by class: "
          + ", ".join(f"{c} {k}/{t:.0f} us" for c, (k, t) in sorted(by.items())))
    for name, m in special_models().items():
        files[name] = render(m)
    return write_or_check(files, args.out, args.check, REGENERATE) or int(stale)


if __name__ == "__main__":
    sys.exit(main())
