#!/usr/bin/env python3
"""Compare the GPU model's batch scaling with the gpulet authors' measurements.

For each model that both ../shared/data/reef (our measured manifests) and
../shared/data/gpulet/<gpu>/UTIL.CSV (Nsight, RTX 2080 Ti and 3080, measured by
the gpulet authors) have, print L(b)/L(1) on the whole simulated device
(`sluice profile --device DEVICE MODEL --partitions 100 --json`) beside the
measured growth of the average kernel duration, avg_duration(b)/avg_duration(1).
For a fixed kernel list the ratio of average kernel durations is the ratio of
summed kernel time, which is what L(b) is on the model apart from launch gaps.

Usage: scripts/compare-batch-scaling.py [--sluice ./target/release/sluice]
       [--device mi50] [--data ../shared/data/gpulet]
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
]
BATCHES = [1, 2, 4, 8, 16, 32]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sluice", default="./target/release/sluice")
    ap.add_argument("--device", default="mi50")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--data", default=os.path.join(here, "..", "..", "shared", "data", "gpulet"))
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


if __name__ == "__main__":
    main()
