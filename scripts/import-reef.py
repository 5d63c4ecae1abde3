#!/usr/bin/env python3
"""Import the REEF artifact's measured MI50 kernel profiles as sluice manifests.

Reads, for each model M of the artifact, ../shared/data/reef/{M.json,
M.profile.json, M.signature.json} (SJTU-IPADS/reef, folder resource/, Apache
License 2.0; kernel lists from the REEF authors' TVM builds, latencies
measured by them on an AMD Radeon Instinct MI50; see the data's README) and
writes daemon/model/manifests/<name>.json. docs/models.md explains every
rule below; in short:

* Taken from the data: the kernels in launch order (names repeat across
  launches), grid and block (launch_params), static shared memory, and each
  kernel's read and written buffers (args into storage, with the signature's
  read/write parameter positions).
* Launch floor F: every measured figure includes 12-16 us of launch and
  timing overhead. F is ONE number for the whole artifact, the smallest
  total_latency of any kernel of any model (computed, printed), and it is
  treated as launch overhead, not CU time (the GPU model charges its own
  launch cost from the device profile):
      kernel_time_us = max(total_latency - F, MIN_US)
      wave_us[j]     = max(latency[j] - F, MIN_US)
      block_time_us  = wave_us[0]      (one block alone on its CU)
  with MIN_US = 1.0 (the data's resolution is 2 us; the model needs
  positive times). A block time above its kernel time is cut to the kernel
  time and counted (manifest validation requires block <= kernel).
* Memory: storage buffers laid out contiguously from offset 0 in storage
  order, each size x element bytes, 256-byte aligned; a kernel's reads and
  writes are its buffers' byte ranges, which give `idempotent` and
  `group_start` (REEF Section 4.4, scripts/manifestgen/groups.py).
* Estimated, not measured: regs_per_thread (the largest of REGS_CHOICES that
  lets len(latency) blocks -- the largest occupancy REEF measured -- share a
  CU of daemon/gpu/profiles/mi50.toml) and mem_intensity (bytes of the
  buffers read and written, each once, over kernel_time_us at MI50_BW, capped
  at 1: an upper bound).

The output is deterministic: rerunning rewrites every file byte for byte.
`--check` verifies that the committed files are current (for CI).
"""

import argparse
import json
import os
import sys
import tomllib

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
from manifestgen.calibrate import load  # noqa: E402
from manifestgen.groups import align, minimal_groups  # noqa: E402
from manifestgen.output import render, write_or_check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
DEFAULT_DATA = os.path.join("..", "shared", "data", "reef")  # relative to the repo root
DEFAULT_OUT = os.path.join("daemon", "model", "manifests")
PROFILE = os.path.join("daemon", "gpu", "profiles", "mi50.toml")
REGENERATE = "python3 scripts/import-reef.py"

# Smallest time a kernel or wave may have after the floor is removed, us.
MIN_US = 1.0
# MI50 peak HBM2 bandwidth, bytes/s (AMD Radeon Instinct MI50 datasheet: 1024 GB/s).
MI50_BW = 1024e9
# Standard register counts per thread, largest first (gfx906 allows up to 256 VGPRs).
REGS_CHOICES = [128, 96, 64, 48, 32, 24, 16]
# Bytes per element of each storage type; TVM stores uint1 (bool) in one byte.
ELEM_BYTES = {"float32": 4, "int64": 8, "byte": 1, "uint1": 1}

# artifact file -> (manifest name, display name, REEF TOCS'25 Table 1 (kernels, ms, label) or None)
MODELS = {
    "resnet152": ("resnet152", "ResNet-152", (207, 9.1, "ResNet-152")),
    "vgg": ("vgg19", "VGG-19", (71, 3.7, "VGG-19")),
    "bert": ("bert205", "BERT, 205-kernel TVM build (not Table 1's 393)", (393, 8.1, "BERT-base")),
    "resnet": ("resnet50", "ResNet-50-class (REEF artifact, 330 kernels)", None),
    "resnet18": ("resnet18", "ResNet-18", None),
    "densenet": ("densenet", "DenseNet (REEF artifact, 207 kernels)", None),
    "inception": ("inception", "Inception (GoogLeNet family, 299×299)", None),
    "mobilenet": ("mobilenet", "MobileNet", None),
    "alexnet": ("alexnet", "AlexNet", None),
}


def launch_floor(data):
    """F: the smallest total_latency of any kernel in the whole artifact, us."""
    return min(k["total_latency"] for stem in MODELS for k in load(data, stem)[1]["kernel_latency"].values())


class Occupancy:
    """Blocks per CU on a device profile, the rule of daemon/gpu/src/occupancy.rs."""

    def __init__(self, path):
        with open(path, "rb") as f:
            p = tomllib.load(f)
        self.name = p["name"]
        cu = p["cu"]
        self.wave = cu["wave_size"]
        self.max_threads = cu["max_threads"]
        self.max_blocks = cu["max_blocks"]
        self.lds = cu["shared_mem_bytes"]
        self.banks = cu["register_banks"]
        self.bank_regs = cu["max_registers"] // cu["register_banks"]

    def waves(self, threads):
        return -(-threads // self.wave)

    def without_regs(self, threads, shared):
        """Blocks that fit by threads (whole waves), shared memory and block slots."""
        n = min(self.max_blocks, self.max_threads // (self.waves(threads) * self.wave))
        return min(n, self.lds // shared) if shared else n

    def by_regs(self, threads, regs):
        """Blocks that fit by registers: each wave's regs x wave_size from one bank."""
        return self.banks * (self.bank_regs // (regs * self.wave)) // self.waves(threads)

    def regs_for(self, threads, shared, measured):
        """(regs, limited): the largest REGS_CHOICES entry that lets
        min(measured, other limits) blocks fit, and whether the other limits
        alone allow fewer than `measured` blocks."""
        other = self.without_regs(threads, shared)
        target = min(measured, other)
        regs = next(r for r in REGS_CHOICES if self.by_regs(threads, r) >= target)
        return regs, other < measured


def layout(storage):
    """Per storage buffer: its [start, end) bytes, contiguous from 0, 256-byte aligned."""
    ranges, off = [], 0
    for s in storage:
        size = s["size"] * ELEM_BYTES[s["stype"]]
        assert size > 0, s
        ranges.append([off, off + size])
        off = align(off + size)
    return ranges


def own_write_reads(model, sig):
    """{kernel name: parameter positions} whose reads are of the kernel's own writes.

    A parameter a kernel both reads and writes, whose buffer no earlier kernel
    wrote at the kernel's first launch, would be read uninitialized unless
    the kernel writes it before reading it (e.g. BERT's softmax kernel0
    initializes T_softmax_maxelem, then folds the row maximum into it). The
    model's output being deterministic, the kernel writes first, so its
    reads of that parameter are not inputs: dropped from `reads` at every
    launch of the kernel (same code). Without this no idempotent group
    would exist and the daemon would refuse the manifest.
    """
    written, own, seen = set(), {}, set()
    for k in model["kernels"]:
        kn, args, s = k["name"], k["args"], sig[k["name"]]
        if kn not in seen:
            seen.add(kn)
            ps = [p for p in s["reads"] if p in s["writes"] and args[p] not in written]
            if ps:
                own[kn] = set(ps)
        written.update(args[p] for p in s["writes"])
    return own


def us(x):
    """A time in us as written: whole data us stay integral floats."""
    return float(x)


def build(data, stem, floor, occ):
    name, display, table1 = MODELS[stem]
    model, profile, sig = load(data, stem)
    lat = profile["kernel_latency"]
    bufs = layout(model["storage"])
    counts = {"at_min": 0, "waves_at_min": 0, "block_cut": 0, "intensity_capped": 0, "occupancy_over": 0}
    own = own_write_reads(model, sig)
    counts["own_write_reads"] = sum(k["name"] in own for k in model["kernels"])
    kernels, acc, raw_sum = [], [], 0
    for k in model["kernels"]:
        kn, args, s = k["name"], k["args"], sig[k["name"]]
        assert len(args) == len(s["params"]), (stem, kn)
        m = lat[kn]
        raw_sum += m["total_latency"]
        kt = max(m["total_latency"] - floor, MIN_US)
        counts["at_min"] += kt == MIN_US
        waves = [max(x - floor, MIN_US) for x in m["latency"]]
        counts["waves_at_min"] += waves.count(MIN_US)
        bt = waves[0]
        if bt > kt:
            bt = kt
            counts["block_cut"] += 1
        reads = sorted({args[p] for p in s["reads"] if p not in own.get(kn, ())})
        writes = sorted({args[p] for p in s["writes"]})
        moved = sum(bufs[i][1] - bufs[i][0] for i in sorted(set(reads) | set(writes)))
        intensity = moved / (kt * 1e-6 * MI50_BW)
        if intensity > 1.0:
            intensity = 1.0
            counts["intensity_capped"] += 1
        grid, block = k["launch_params"][0:3], k["launch_params"][3:6]
        threads = block[0] * block[1] * block[2]
        shared = model["shared_memory"].get(kn, 0)
        regs, over = occ.regs_for(threads, shared, len(m["latency"]))
        counts["occupancy_over"] += over
        acc.append(([bufs[i] for i in reads], [bufs[i] for i in writes]))
        kernels.append({
            "name": kn, "grid": grid, "block": block,
            "regs_per_thread": regs, "shared_mem_bytes": shared,
            "kernel_time_us": us(kt), "block_time_us": us(bt), "idempotent": None,
            "wave_us": [us(w) for w in waves], "mem_intensity": round(intensity, 4),
            "reads": [list(r) for r in acc[-1][0]], "writes": [list(r) for r in acc[-1][1]],
        })
    groups = minimal_groups(acc)
    for i, (kern, g) in enumerate(zip(kernels, groups)):
        kern["idempotent"] = g == i
        kern["group_start"] = g
    non_idem = [k["name"] for k in kernels if not k["idempotent"]]
    total = sum(k["kernel_time_us"] for k in kernels)
    storage = model["storage"]
    last_writes = {model["kernels"][-1]["args"][p] for p in sig[model["kernels"][-1]["name"]]["writes"]}
    assert len(last_writes) == 1, (stem, last_writes)
    out_buf = storage[last_writes.pop()]
    in_bytes = bufs[0][1] - bufs[0][0]
    out_bytes = ELEM_BYTES[out_buf["stype"]] * out_buf["size"]
    n = len(kernels)
    if table1:
        t_n, t_ms, t_label = table1
        t1 = (f"REEF TOCS'25 Table 1 gives {t_label} {t_n} kernels and {t_ms} ms, a different run"
              + (" and build" if t_n != n else "") + "; not rescaled to it")
    else:
        t1 = "not in REEF TOCS'25 Table 1"
    provenance = (
        f"measured by the REEF authors on an AMD Radeon Instinct MI50 (60 CUs), TVM build: "
        f"{stem}.json, {stem}.profile.json and {stem}.signature.json of the SJTU-IPADS/reef artifact "
        f"(resource/, Apache-2.0; ../shared/data/reef), imported by scripts/import-reef.py. "
        f"From the data: {n} kernels in launch order, grid/block, shared memory, and each kernel's read "
        f"and written buffers (storage laid out in order, 256-byte aligned), hence idempotent and "
        f"group_start ({len(non_idem)} non-idempotent; {counts['own_write_reads']} launches of kernels that "
        f"read a buffer only after writing it, which no earlier kernel wrote, get that read dropped). Times: the launch/timing floor F = {floor:g} us "
        f"(the smallest total_latency in the whole artifact) is removed as launch overhead: "
        f"kernel_time_us = max(total_latency - F, {MIN_US:g}), wave_us[j] = max(latency[j] - F, {MIN_US:g}), "
        f"block_time_us = wave_us[0]; clamped: kernel times raised to {MIN_US:g} us: {counts['at_min']}, "
        f"wave times raised to {MIN_US:g} us: {counts['waves_at_min']}, block times cut to their kernel time: "
        f"{counts['block_cut']}. "
        f"Kernel times sum to {total:g} us ({raw_sum} us as measured, kernels timed one at a time); "
        f"the data's model_latency (whole model end to end) is {profile['model_latency']} us; {t1}. "
        f"Estimated, not measured: regs_per_thread (largest of {'/'.join(map(str, REGS_CHOICES))} that lets "
        f"len(latency) blocks share a CU of the {occ.name} profile; kernels measured at more blocks per CU "
        f"than its thread/LDS/slot limits allow: {counts['occupancy_over']}) and mem_intensity (an upper "
        f"bound: bytes of the buffers read and written, each once, over kernel_time_us at 1024 GB/s; "
        f"capped at 1: {counts['intensity_capped']}). Input: storage[0] `{storage[0]['name']}`, "
        f"{storage[0]['size']} {storage[0]['stype']} ({in_bytes} B); output: the last kernel's written "
        f"buffer `{out_buf['name']}`, {out_buf['size']} {out_buf['stype']} ({out_bytes} B)."
    )
    manifest = {
        "name": name, "display_name": display, "provenance": provenance,
        "input_bytes": in_bytes, "output_bytes": out_bytes,
        "total_time_us": us(total), "kernels": kernels,
    }
    summary = dict(name=name, kernels=n, sum_us=total, raw_sum_us=raw_sum,
                   model_latency_us=profile["model_latency"], table1=table1,
                   non_idempotent=len(non_idem), in_bytes=in_bytes, out_bytes=out_bytes, **counts)
    return manifest, summary


def main():
    ap = argparse.ArgumentParser(
        description="Write sluice's measured model manifests (daemon/model/manifests/"
                    f"{{{','.join(v[0] for v in MODELS.values())}}}.json) from the REEF artifact's MI50 "
                    "kernel profiles (SJTU-IPADS/reef resource/, Apache-2.0). Removes one launch floor F "
                    "(the smallest total_latency in the data), estimates registers and memory intensity; "
                    "see docs/models.md. Rerunning rewrites the files byte for byte.")
    ap.add_argument("--data", default=None,
                    help=f"directory of the REEF files M.json, M.profile.json, M.signature.json "
                         f"(default: {DEFAULT_DATA} relative to the repository root)")
    ap.add_argument("--out", default=None, help=f"output directory (default: {DEFAULT_OUT})")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 naming every file in --out that differs from what would be written")
    args = ap.parse_args()
    data = args.data or os.path.normpath(os.path.join(REPO, DEFAULT_DATA))
    out = args.out or os.path.join(REPO, DEFAULT_OUT)
    missing = [f"{stem}{sfx}" for stem in MODELS for sfx in (".json", ".profile.json", ".signature.json")
               if not os.path.isfile(os.path.join(data, stem + sfx))]
    if missing:
        print(f"import-reef: REEF data directory {data} is missing or incomplete (no {missing[0]}"
              f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}); it holds the REEF "
              f"artifact files (see docs/models.md); pass its path with --data DIR", file=sys.stderr)
        return 2
    occ = Occupancy(os.path.join(REPO, PROFILE))
    floor = launch_floor(data)
    print(f"launch floor F = {floor:g} us (smallest total_latency in {data})")
    files = {}
    for stem in MODELS:
        manifest, s = build(data, stem, floor, occ)
        files[manifest["name"]] = render(manifest)
        t1 = f"{s['table1'][1] * 1000:g}" if s["table1"] else "-"
        print(f"{s['name']:>10}: {s['kernels']:3} kernels, sum {s['sum_us']:g} us (measured {s['raw_sum_us']}), "
              f"model_latency {s['model_latency_us']}, Table 1 {t1}; non-idempotent {s['non_idempotent']}; "
              f"clamps: {s['at_min']} kernel/{s['waves_at_min']} wave at {MIN_US:g} us, "
              f"{s['block_cut']} block cut, {s['intensity_capped']} intensity capped, "
              f"{s['occupancy_over']} over occupancy limit, {s['own_write_reads']} own-write reads dropped")
    return write_or_check(files, out, args.check, REGENERATE)


if __name__ == "__main__":
    sys.exit(main())
