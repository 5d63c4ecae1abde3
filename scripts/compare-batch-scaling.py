#!/usr/bin/env python3
"""Compare the GPU model's batch scaling with the gpulet authors' measurements.

For each model that both ../shared/data/reef (our measured manifests) and
data/gpulet/<gpu>/UTIL.CSV (Nsight, RTX 2080 Ti and 3080, measured by the
gpulet authors; data/gpulet/README.md) have, print L(b)/L(1) on the whole simulated device
(`sluice profile --device DEVICE MODEL --partitions 100 --json`) beside the
measured growth of the average kernel duration, avg_duration(b)/avg_duration(1).
For a fixed kernel list the ratio of average kernel durations is the ratio of
summed kernel time, which is what L(b) is on the model apart from launch gaps.

Then, for the measured models, the component evidence behind the model's
figure, from ../shared/data/reef alone (no GPU model): the same "batch b is b
times the blocks" rule applied to each kernel's measured per-occupancy wave
times (REEF's latency[j] less the 12 us floor F; a kernel of G blocks at
batch b has G*b/60 blocks per CU: within its measured occupancy o one wave of
that many, beyond it ceil(G*b/(60*o)) waves of o), the share of batch-1 time
in kernels that already occupy all 60 CUs, and the share in kernels whose CUs
gain less than 1.5x throughput from going to the measured occupancy
(wave[n1-1]/n1 over wave[o-1]/o, n1 the blocks per CU at batch 1).

VGG-16 and MnasNet (estimated manifests, no wave times; docs/models.md) are
held out: nothing was tuned on them.

Usage: scripts/compare-batch-scaling.py [--sluice ./target/release/sluice]
       [--device mi50] [--data data/gpulet] [--reef ../shared/data/reef]
"""
import argparse
import csv
import json
import os
import subprocess
import sys

PAIRS = [  # ours (REEF artifact) -> gpulet's name; see docs/planners.md
    ("resnet50", "resnet50"),
    ("densenet", "densenet161"),
    ("mobilenet", "mobilenet_v2"),
    ("inception", "googlenet"),
    ("bert205", "bert"),
    ("vgg16", "vgg16"),  # estimated manifest
    ("mnasnet", "mnasnet1_0"),  # estimated manifest
]
REEF_STEMS = {"resnet50": "resnet", "densenet": "densenet", "mobilenet": "mobilenet",
              "inception": "inception", "bert205": "bert"}
REEF_F_US = 12  # the launch/timing floor scripts/import-reef.py removes
MI50_CUS = 60


def wave_rule(reef, stem, b):
    """Per-kernel batch-b time sum (us) from REEF's wave times alone, and the
    batch-1 shares (all CUs busy, little throughput gain from more blocks)."""
    import math
    with open(os.path.join(reef, stem + ".json")) as f:
        m = json.load(f)
    with open(os.path.join(reef, stem + ".profile.json")) as f:
        lat = json.load(f)["kernel_latency"]

    def t_at(g, w, b):
        o, per = len(w), g * b / MI50_CUS
        if per <= o:
            return w[max(1, math.ceil(per)) - 1]
        return math.ceil(per / o) * w[o - 1]

    s1 = sb = full = flat = 0
    for k in m["kernels"]:
        lp = k["launch_params"]
        g = lp[0] * lp[1] * lp[2]
        w = [max(x - REEF_F_US, 1) for x in lat[k["name"]]["latency"]]
        t1 = t_at(g, w, 1)
        s1 += t1
        sb += t_at(g, w, b)
        o = len(w)
        n1 = min(o, math.ceil(g / MI50_CUS))
        if g >= MI50_CUS:
            full += t1
        if (w[n1 - 1] / n1) / (w[o - 1] / o) < 1.5:
            flat += t1
    return sb / s1, full / s1, flat / s1
BATCHES = [1, 2, 4, 8, 16, 32]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sluice", default="./target/release/sluice")
    ap.add_argument("--device", default="mi50")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--data", default=os.path.join(here, "..", "data", "gpulet"))
    ap.add_argument("--reef", default=os.path.join(here, "..", "..", "shared", "data", "reef"))
    a = ap.parse_args()
    if not os.path.isdir(a.data):
        sys.exit(f"no gpulet data at {a.data}; pass --data DIR (the folder with 2080ti/ and 3080/)")
    ours = {}
    for m, _ in PAIRS:
        out = subprocess.run(
            [a.sluice, "profile", "--device", a.device, m, "--partitions", "100",
             "--batches", ",".join(map(str, BATCHES)), "--json"],
            check=True, capture_output=True, text=True).stdout
        rep = json.loads(out)
        lat = {r["batch"]: r["latency_ms"] for r in rep["rows"]}
        ours[m] = (lat, rep["batch_scaled_kernels"], rep["kernels"])
    print(f"| model (ours / gpulet) | scaled kernels | GPU | " +
          " | ".join(f"b={b}: model / measured" for b in BATCHES[1:]) + " |")
    print("|---|---|---|" + "---|" * (len(BATCHES) - 1))
    for gpu in ("2080ti", "3080"):
        util = {}
        with open(os.path.join(a.data, gpu, "UTIL.CSV")) as f:
            for row in list(csv.reader(f))[1:]:
                util.setdefault(row[0], {})[int(row[1])] = float(row[2])
        for m, g in PAIRS:
            lat, sc, n = ours[m]
            u = util[g]
            cells = [f"{lat[b] / lat[1]:.2f} / {u[b] / u[1]:.2f}" for b in BATCHES[1:]]
            print(f"| {m} / {g} | {sc}/{n} | {gpu} | " + " | ".join(cells) + " |")
    if not os.path.isdir(a.reef):
        print(f"(no REEF data at {a.reef}: component table skipped; pass --reef DIR)")
        return
    print()
    print("| model | GPU model L(32)/L(1) | REEF wave times alone, b=32 / b=1 | batch-1 time on all 60 CUs | "
          "batch-1 time in kernels with < 1.5x CU throughput gain left |")
    print("|---|---|---|---|---|")
    for m, stem in REEF_STEMS.items():
        lat = ours[m][0]
        r, full, flat = wave_rule(a.reef, stem, 32)
        print(f"| {m} | {lat[32] / lat[1]:.2f} | {r:.2f} | {100 * full:.0f} % | {100 * flat:.0f} % |")


if __name__ == "__main__":
    main()
