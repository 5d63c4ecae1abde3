"""Achieved-throughput parameters of the MI50 estimate, from REEF's measured kernels.

scripts/gen-models.py estimates the kernel times of the models the REEF
artifact has no data for (YOLOv3, BERT-base, GPT-2) with one roofline rule on
the AMD Radeon Instinct MI50 (docs/models.md, "Estimated models"):

    kernel_time_us = max(FLOOR, flops / P[class], bytes / B[class])

Every parameter is what the REEF authors' TVM build *achieved* on the MI50
for kernels of the same kind, measured in the artifact (../shared/data/reef,
SJTU-IPADS/reef resource/, Apache-2.0): a sum of the kernels' useful work over
the sum of their measured times, each time less the launch/timing floor F
that scripts/import-reef.py removes (the smallest total_latency of the
artifact). No parameter is fitted to a model total, in particular not to
REEF Table 1's, which the estimates are compared with afterwards.

`derive(data)` returns the parameters with, for each, the kernels it comes
from; `scripts/gen-models.py` stores them in mi50-roofline.json beside this
file, so that the generator (and CI's `--check`) run without the data.
"""

import json
import os
import re

# The artifact's models (file stems), as scripts/import-reef.py imports them.
STEMS = ["resnet152", "vgg", "bert", "resnet", "resnet18", "densenet", "inception", "mobilenet", "alexnet"]
# Bytes per element of each storage type (TVM stores uint1 in one byte).
ELEM_BYTES = {"float32": 4, "int64": 8, "byte": 1, "uint1": 1}
# ResNet-18 at 224x224 (resnet18.json): the activation tensors' element
# counts give the stage, hence the output pixels (channels double as the side
# halves; the stem's 64x112x112 output is the only one at 112). The storage
# buffers of this model are exactly these tensors (checked below).
RESNET18_OUT_PIXELS = {802816: 112 * 112, 200704: 56 * 56, 100352: 28 * 28, 50176: 14 * 14, 25088: 7 * 7}
# MobileNet (v1, 224x224; mobilenet.json): its 13 depthwise 3x3
# convolutions in launch order as (channels, output side, stride). The
# storage buffers are pooled, so the sides come from the architecture; the
# weights (9 x channels each) are checked against it below.
MOBILENET_DEPTHWISE = [(32, 112, 1), (64, 56, 2), (128, 56, 1), (128, 28, 2), (256, 28, 1), (256, 14, 2)] + \
    [(512, 14, 1)] * 5 + [(512, 7, 2), (1024, 7, 1)]
# Kernels of the 205-kernel BERT (bert.json) that read or write the attention
# scores/probabilities [heads, T, T] and no other large tensor, with the
# number of score-sized tensors each moves (the signature's reads and writes):
# softmax max (reads scores), exp (reads scores, writes exp), sum (reads
# exp), normalize (reads exp, writes probabilities), the attention mask
# (reads scores, writes masked scores), the reshape before P.V (copies).
BERT_SCORE_KERNELS = {
    "fused_nn_softmax_1_kernel0": 1,
    "fused_nn_softmax_1_kernel1": 2,
    "fused_nn_softmax_1_kernel2": 1,
    "fused_nn_softmax_1_kernel3": 2,
    "fused_reshape_cast_broadcast_to_like_where_kernel0": 2,
    "fused_reshape_5_kernel0": 2,
}
# A kernel counts toward the floor if its buffers total at most this many bytes
# and it has at least two blocks (a one-block kernel serialises its work).
FLOOR_MAX_BYTES = 65536


def load(data, stem):
    """The three JSON files of model `stem` in the REEF data folder `data`."""
    out = []
    for suffix in (".json", ".profile.json", ".signature.json"):
        with open(os.path.join(data, stem + suffix), encoding="utf-8") as f:
            out.append(json.load(f))
    return out


def _size(model, arg):
    s = model["storage"][arg]
    return s["size"] * ELEM_BYTES[s["stype"]]


def derive(data):
    """The estimate's parameters from the REEF files in `data` (a dict, stable order)."""
    models = {stem: load(data, stem) for stem in STEMS}
    floor_f = min(k["total_latency"] for _, p, _ in models.values() for k in p["kernel_latency"].values())

    def t(stem, name):  # measured time less F, us
        return models[stem][1]["kernel_latency"][name]["total_latency"] - floor_f

    # --- per-kernel floor: the median of the smallest multi-block kernels ----
    small = []
    for stem, (m, _, _) in models.items():
        for k in m["kernels"]:
            lp = k["launch_params"]
            blocks = lp[0] * lp[1] * lp[2]
            if blocks >= 2 and sum(_size(m, a) for a in set(k["args"])) <= FLOOR_MAX_BYTES:
                small.append(t(stem, k["name"]))
    small.sort()
    floor_us = small[len(small) // 2]

    # --- BERT (bert.json): dense layers and attention batch matmuls ----------
    m, _, sig = models["bert"]
    tokens = m["storage"][0]["size"]  # input0: the token ids
    hidden = m["storage"][m["kernels"][1]["args"][sig[m["kernels"][1]["name"]]["writes"][0]]]["size"] // tokens
    scores = max(s["size"] for s in m["storage"] if s["name"] == "null")
    heads = scores // (tokens * tokens)
    assert heads * tokens * tokens == scores and hidden % heads == 0, (tokens, hidden, scores)
    # A dense layer of this build is [T, hidden] x [hidden, hidden] (every
    # weight holds hidden^2 floats, FFN included); an attention batch matmul is
    # heads x [T, hidden/heads] x [hidden/heads, T] or its P.V counterpart:
    # 2 T hidden^2 and 2 T^2 hidden FLOPs, equal here since T = hidden.
    bmm = [k["name"] for k in m["kernels"] if "batch_matmul" in k["name"]]
    weights = {m["storage"][a]["size"] for k in m["kernels"] if "batch_matmul" in k["name"]
               for a in k["args"] if re.fullmatch(r"p\d+", m["storage"][a]["name"])}
    assert weights == {hidden * hidden}, weights
    assert tokens == hidden, (tokens, hidden)
    gemm_flops = 2 * tokens * hidden * hidden * len(bmm)
    gemm_us = sum(t("bert", n) for n in bmm)
    score_bytes = 4 * scores
    mem_bytes = mem_us = 0
    for k in m["kernels"]:
        if k["name"] in BERT_SCORE_KERNELS:
            mem_bytes += BERT_SCORE_KERNELS[k["name"]] * score_bytes
            mem_us += t("bert", k["name"])

    # --- ResNet-18 (resnet18.json): convolutions ---------------------------
    m, _, sig = models["resnet18"]
    layers = []  # TVM's winograd conv is three kernels (transform, batched GEMM, inverse)
    for k in m["kernels"]:
        n = k["name"]
        if "conv2d" not in n:
            continue
        base = re.sub(r"_kernel\d+$", "", n)
        weights = [a for a in k["args"] if re.fullmatch(r"p\d+", m["storage"][a]["name"])]
        out = [k["args"][p] for p in sig[n]["writes"]]
        if layers and layers[-1]["base"] == base and not n.endswith("_kernel0"):
            layers[-1]["us"] += t("resnet18", n)
            layers[-1]["weights"] += weights
            layers[-1]["out"] = out
        else:
            layers.append({"base": base, "us": t("resnet18", n), "weights": weights, "out": out})
    wino = [0, 0, 0]
    direct = [0, 0, 0]
    pointwise = [0, 0, 0]
    for layer in layers:
        w = max(m["storage"][a]["size"] for a in layer["weights"])
        out = m["storage"][layer["out"][0]]["size"]
        pixels = RESNET18_OUT_PIXELS[out]
        cout = out // pixels
        if "winograd" in layer["base"]:
            # weights pre-transformed to 4x4 or 6x6 tiles of a 3x3 cin = cout conv
            assert w in (16 * cout * cout, 36 * cout * cout), (layer["base"], w, cout)
            acc, flops = wino, 2 * cout * cout * 9 * pixels
        else:
            acc, flops = direct, 2 * w * pixels
            if w == cout * cout:  # 1x1, cin = cout: the stride-1 shortcut of stage 1
                acc = pointwise
        acc[0] += flops
        acc[1] += layer["us"]
        acc[2] += 1
    assert wino[2] == 13 and direct[2] == 7 and pointwise[2] == 1, (wino, direct, pointwise)

    # --- matrix-vector (batch-1 dense) layers of every model -----------------
    gemv_bytes = gemv_us = 0
    gemv_n = 0
    for stem, (m, _, _) in models.items():
        for k in m["kernels"]:
            if "dense" not in k["name"]:
                continue
            w = max(_size(m, a) for a in k["args"] if m["storage"][a]["name"] not in ("null", "output", "temp_arg"))
            if w < 1 << 20:  # a parameter buffer that small is not the weight matrix
                continue
            gemv_bytes += w
            gemv_us += t(stem, k["name"])
            gemv_n += 1

    # --- MobileNet (mobilenet.json): depthwise convolutions -----------------
    # Depthwise layers do ~4.5 FLOPs per byte (3x3), below the MI50's ridge
    # point, so their class is a bandwidth: input, output and weights, fp32.
    # The pointwise (1x1) layers between them are a cross-check of P GEMM.
    m, _, _ = models["mobilenet"]
    convs = [k for k in m["kernels"] if "conv2d" in k["name"]]
    dw_bytes = dw_us = 0
    pw_flops = pw_us = 0
    dws = pws = 0
    for k in convs:
        w = m["storage"][k["args"][1]]["size"]  # TVM order: data, weight, out, bias
        if dws < len(MOBILENET_DEPTHWISE) and w == 9 * MOBILENET_DEPTHWISE[dws][0]:
            c, side, stride = MOBILENET_DEPTHWISE[dws]
            dw_bytes += 4 * (c * side * side * (stride * stride + 1) + w)
            dw_us += t("mobilenet", k["name"])
            dws += 1
        elif dws >= 1 and w % MOBILENET_DEPTHWISE[dws - 1][0] == 0:
            # the 1x1 after depthwise layer dws - 1: its input is that layer's output
            c, side, _ = MOBILENET_DEPTHWISE[dws - 1]
            pw_flops += 2 * w * side * side
            pw_us += t("mobilenet", k["name"])
            pws += 1
    assert dws == 13 and pws == 13, (dws, pws)

    def rate(x, us):
        return round(x / us) * 10**6  # per us to per s, so to 1e6 per second

    return {
        "launch_floor_F_us": floor_f,
        "floor_us": floor_us,
        "floor_source": f"median (total_latency - F) of the {len(small)} kernels of all nine models with >= 2 blocks "
                        f"and <= {FLOOR_MAX_BYTES} B of buffers",
        "gemm_flops_per_s": rate(gemm_flops, gemm_us),
        "gemm_source": f"bert.json: its {len(bmm)} batch_matmul kernels (dense layers [{tokens},{hidden}]x[{hidden},"
                       f"{hidden}] and {heads}-head attention products, {2 * tokens * hidden * hidden} FLOPs each), "
                       f"{gemm_flops} FLOPs in {gemm_us} us",
        "conv3x3_flops_per_s": rate(wino[0], wino[1]),
        "conv3x3_source": f"resnet18.json: its {wino[2]} stride-1 3x3 convolutions (TVM winograd, 3 kernels each), "
                          f"direct-convolution FLOPs {wino[0]} in {wino[1]} us",
        "conv_direct_flops_per_s": rate(direct[0], direct[1]),
        "conv_direct_source": f"resnet18.json: its {direct[2]} direct convolutions other than the stride-1 1x1 "
                              f"(7x7 stem, stride-2 3x3 and 1x1), {direct[0]} FLOPs in {direct[1]} us",
        "conv1x1_check_flops_per_s": rate(pointwise[0], pointwise[1]),
        "conv1x1_check_source": f"resnet18.json: its one stride-1 1x1 convolution, {pointwise[0]} FLOPs in "
                                f"{pointwise[1]} us (a cross-check of estimating 1x1 convolutions as GEMMs; not used)",
        "mem_bytes_per_s": rate(mem_bytes, mem_us),
        "mem_source": f"bert.json: the {sum(1 for k in models['bert'][0]['kernels'] if k['name'] in BERT_SCORE_KERNELS)} "
                      f"softmax, mask and reshape kernels over the [{heads},{tokens},{tokens}] attention scores, "
                      f"{mem_bytes} B in {mem_us} us",
        "depthwise_bytes_per_s": rate(dw_bytes, dw_us),
        "depthwise_source": f"mobilenet.json: its {dws} depthwise 3x3 convolutions (strides 1 and 2, 112x112 to "
                            f"7x7), input, output and weight bytes {dw_bytes} in {dw_us} us",
        "pointwise_check_flops_per_s": rate(pw_flops, pw_us),
        "pointwise_check_source": f"mobilenet.json: its {pws} pointwise (1x1 stride-1) convolutions, {pw_flops} FLOPs in "
                                  f"{pw_us} us (a cross-check of estimating 1x1 convolutions as GEMMs; not used)",
        "gemv_bytes_per_s": rate(gemv_bytes, gemv_us),
        "gemv_source": f"the {gemv_n} batch-1 dense kernels of all nine models with a weight matrix >= 1 MiB, "
                       f"weight bytes {gemv_bytes} in {gemv_us} us",
    }
