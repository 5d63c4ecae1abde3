#!/usr/bin/env python3
"""Derive the GPU model's occupancy curve from REEF's measured MI50 kernels.

The curve says how much longer a wave of blocks takes when more threads share
the CU: `wave_ratio` at `thread_fraction` x is the median, over every REEF MI50
kernel, of latency[j] / latency[0] (REEF's per-occupancy wave times: j + 1
blocks of the kernel side by side on one CU, against one block), binned by the
CU thread fraction x = (j + 1) * threads_per_block / 2560 that the j + 1 blocks
occupy. The model (daemon/gpusim, docs/gpu-model.md) uses it for kernels
without their own measured `wave_us`.

Inputs: ../shared/data/reef/M.profile.json (latencies, µs) and M.json (launch
parameters: the block size) for every model M there; see that folder's README.

Method, step by step:
1. F, the launch and timing floor, is the smallest `total_latency` in the data
   (a kernel alone with the whole GPU, overhead included). Every latency has F
   subtracted and is clamped at 0: the data README says every figure includes
   that overhead.
2. Kernels with fewer than 2 entries, or whose single-block time minus F is
   under MIN_BASE_US, are skipped: their ratio is launch noise over a 2 µs
   timer step.
3. Threads per block are rounded up to whole 64-wide wavefronts (gfx906), as the
   model's occupancy does; points with x > 1 cannot occur on a CU and are
   skipped.
4. Points are binned by x in BIN-wide bins; each bin with at least MIN_POINTS
   points gives (median x, median ratio). A cumulative maximum makes the curve
   non-decreasing (more threads on a CU never make a wave shorter), and (0, 1)
   is prepended (no co-resident threads: the single block's own time).

Usage:
  scripts/derive-occupancy-curve.py            # print the curve and the TOML lines
  scripts/derive-occupancy-curve.py --write    # rewrite [occupancy] in the profiles
  scripts/derive-occupancy-curve.py --check    # fail if the profiles differ
"""

import glob
import json
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get(
    "REEF_DATA", os.path.join(os.path.dirname(ROOT), "shared", "data", "reef")
)
PROFILES = [
    os.path.join(ROOT, "daemon", "gpu", "profiles", f"{n}.toml")
    for n in ("mi50", "gv100", "h100")
]
CU_THREADS = 2560  # MI50: 4 SIMDs x 10 wavefronts x 64 lanes
WAVE = 64
MIN_BASE_US = 4.0
BIN = 0.1
MIN_POINTS = 5


def points():
    """(x, ratio) for every usable entry, and the floor F."""
    profiles = sorted(glob.glob(os.path.join(DATA, "*.profile.json")))
    if not profiles:
        sys.exit(f"no *.profile.json under {DATA}; set REEF_DATA to the REEF data folder")
    lat = {}
    for p in profiles:
        model = os.path.basename(p)[: -len(".profile.json")]
        for name, k in json.load(open(p))["kernel_latency"].items():
            lat[(model, name)] = k
    floor = min(k["total_latency"] for k in lat.values())
    threads = {}
    for p in profiles:
        model = os.path.basename(p)[: -len(".profile.json")]
        for k in json.load(open(os.path.join(DATA, model + ".json")))["kernels"]:
            bx, by, bz = k["launch_params"][3:6]
            threads.setdefault((model, k["name"]), bx * by * bz)
    out = []
    for key, k in sorted(lat.items()):
        seq = k["latency"]
        if len(seq) < 2 or key not in threads:
            continue
        base = seq[0] - floor
        if base < MIN_BASE_US:
            continue
        tpb = -(-threads[key] // WAVE) * WAVE
        for j, v in enumerate(seq):
            x = (j + 1) * tpb / CU_THREADS
            if x > 1.0:
                break
            out.append((x, max(v - floor, 0.0) / base))
    return out, floor


def curve():
    pts, floor = points()
    bins = {}
    for x, r in pts:
        b = min(int((x - 1e-9) / BIN), int(1 / BIN) - 1)
        bins.setdefault(b, []).append((x, r))
    xs, rs = [0.0], [1.0]
    for b in sorted(bins):
        v = bins[b]
        if len(v) < MIN_POINTS:
            continue
        xs.append(round(statistics.median(x for x, _ in v), 3))
        rs.append(round(max(rs[-1], statistics.median(r for _, r in v)), 3))
    return xs, rs, floor, len(pts)


def toml_lines(xs, rs):
    fx = ", ".join(f"{x:.3f}" for x in xs)
    fr = ", ".join(f"{r:.3f}" for r in rs)
    return f"thread_fraction = [{fx}]\nwave_ratio = [{fr}]\n"


def current(path):
    text = open(path).read()
    got = {}
    for key in ("thread_fraction", "wave_ratio"):
        m = re.search(rf"^{key} = \[([^\]]*)\]", text, re.M)
        got[key] = None if m is None else [float(v) for v in m.group(1).split(",")]
    return text, got


def main():
    xs, rs, floor, n = curve()
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "--check":
        bad = False
        for p in PROFILES:
            _, got = current(p)
            if got["thread_fraction"] != xs or got["wave_ratio"] != rs:
                print(f"{p}: [occupancy] differs from the derivation; run {sys.argv[0]} --write")
                bad = True
        sys.exit(1 if bad else 0)
    if mode == "--write":
        for p in PROFILES:
            text, got = current(p)
            if got["thread_fraction"] is None:
                sys.exit(f"{p}: no thread_fraction line to replace; add the [occupancy] section")
            text = re.sub(r"^thread_fraction = \[[^\]]*\]\nwave_ratio = \[[^\]]*\]\n",
                          toml_lines(xs, rs), text, flags=re.M)
            open(p, "w").write(text)
        return
    print(f"floor F = {floor} us (smallest total_latency); {n} points")
    for x, r in zip(xs, rs):
        print(f"  x = {x:.3f}  ratio = {r:.3f}")
    print(toml_lines(xs, rs), end="")


if __name__ == "__main__":
    main()
