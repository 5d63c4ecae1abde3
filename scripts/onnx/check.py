#!/usr/bin/env python3
"""Run sluice on the ONNX fixtures and compare with onnxruntime's outputs.

For each entry of FIXTURES/index.json (written by make-fixtures.py) this runs

    SLUICE run MODEL --input NAME=FILE.npy [--input ...] --out TMP --device DEVICE [--batch N]

(--batch only when the entry has one) and loads TMP/<output>.npy, where
<output> is the output's name with every character outside [A-Za-z0-9._-]
replaced by '_'. A fixture passes when every output has the expected shape and

    max|got - ref| <= tolerance * max(max|ref|, 1e-30).

For each entry of HOSTILE/hostile.json (written by make-hostile.py) this runs
`SLUICE inspect FILE`. It passes when sluice exits with a non-zero status that
is neither a signal nor 101 (a Rust panic), its stderr has no "panicked", and
stderr contains every `expect` substring (case-insensitive).

One line per case; the last line is "N passed, M failed" and the exit status
is 1 when M > 0 (2 for bad arguments or unreadable index files).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def tail(text, lines=15):
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else (text or "")
    rows = text.rstrip().splitlines()
    return "\n".join("    | " + r for r in rows[-lines:]) if rows else "    | (empty)"


def die(msg):
    print(f"check: {msg}", file=sys.stderr)
    sys.exit(2)


def load_index(path, what):
    try:
        with open(path) as f:
            entries = json.load(f)
    except FileNotFoundError:
        die(f"{path} not found; write it with scripts/onnx/make-{what}.py")
    except (OSError, json.JSONDecodeError) as e:
        die(f"cannot read {path}: {e}")
    if not isinstance(entries, list):
        die(f"{path}: expected a JSON list, found {type(entries).__name__}")
    return entries


def run(cmd, timeout):
    """(returncode or None on timeout, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        return None, e.stdout or b"", e.stderr or b"", time.monotonic() - t0


def compare(got, ref):
    """(ok, max_abs_err, reason) for one output; ok is False only for a shape,
    dtype or non-finite mismatch, the bound is the caller's."""
    if got.shape != ref.shape:
        return False, float("nan"), f"shape {list(got.shape)} != expected {list(ref.shape)}"
    try:
        g = got.astype(np.float64)
    except (TypeError, ValueError):
        return False, float("nan"), f"dtype {got.dtype} is not numeric"
    r = ref.astype(np.float64)
    if g.size == 0:
        return True, 0.0, ""
    bad = ~np.isfinite(g) & np.isfinite(r)
    if bad.any():
        i = tuple(int(j) for j in np.unravel_index(np.argmax(bad), g.shape))
        return False, float("inf"), f"non-finite value {g[i]} at {list(i)} (expected {r[i]})"
    diff = np.where(np.isfinite(r) | (g != r), np.abs(g - r), 0.0)  # equal infinities agree
    return True, float(np.nan_to_num(diff, nan=np.inf).max()), ""


def check_fixture(entry, root, sluice, device, timeout):
    """(passed, line)."""
    name = entry.get("name", "?")
    try:
        model = root / entry["model"]
        inputs = entry["inputs"]
        outputs = entry["outputs"]
        tol = float(entry.get("tolerance", 1e-4))
    except (KeyError, TypeError, ValueError) as e:
        return False, f"{name}: FAIL index entry lacks or mangles {e}"
    tmp = Path(tempfile.mkdtemp(prefix="sluice-check-"))
    try:
        cmd = [str(sluice), "run", str(model)]
        for k, f in inputs.items():
            cmd += ["--input", f"{k}={root / f}"]
        cmd += ["--out", str(tmp), "--device", device]
        if entry.get("batch") is not None:
            cmd += ["--batch", str(entry["batch"])]
        rc, _, err, secs = run(cmd, timeout)
        failure = None
        worst_err, worst_bound = None, None  # of the output nearest its bound
        if rc is None:
            failure = f"timed out after {timeout}s"
        elif rc != 0:
            failure = f"exit status {rc}" if rc > 0 else f"killed by signal {-rc}"
        else:
            for k, f in outputs.items():
                ref = np.load(root / f)
                path = tmp / f"{sanitize(k)}.npy"
                if not path.exists():
                    failure = f"output {k!r}: {path.name} not written"
                    break
                try:
                    got = np.load(path)
                except (OSError, ValueError) as e:
                    failure = f"output {k!r}: cannot read {path.name}: {e}"
                    break
                ok, e, reason = compare(got, ref)
                if not ok:
                    failure = f"output {k!r}: {reason}"
                    break
                peak = float(np.abs(ref.astype(np.float64)).max()) if ref.size else 0.0
                bound = tol * max(peak, 1e-30)
                if worst_bound is None or e / bound > worst_err / worst_bound:
                    worst_err, worst_bound = e, bound
                if not e <= bound:
                    note = "" if got.dtype == ref.dtype else f" (dtype {got.dtype}, expected {ref.dtype})"
                    failure = f"output {k!r}: max abs err {e:.3g} > bound {bound:.3g}{note}"
                    break
        status = "PASS" if failure is None else f"FAIL {failure}"
        err_s = "-" if worst_err is None else f"{worst_err:.3g}"
        bound_s = "-" if worst_bound is None else f"{worst_bound:.3g}"
        line = f"{name}: max abs err {err_s}, bound {bound_s}, {secs:.2f}s, {status}"
        if failure is not None:
            line += "\n    command: " + " ".join(cmd) + "\n    stderr:\n" + tail(err)
        return failure is None, line
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_hostile(entry, root, sluice, timeout):
    name = entry.get("file", "?")
    path = root / name
    expect = [str(s) for s in entry.get("expect", [])]
    cmd = [str(sluice), "inspect", str(path)]
    rc, _, err_b, secs = run(cmd, timeout)
    err = err_b.decode("utf-8", "replace")
    failure = None
    if rc is None:
        failure = f"timed out after {timeout}s"
    elif rc == 0:
        failure = "accepted (exit status 0)"
    elif rc < 0:
        failure = f"killed by signal {-rc}"
    elif rc == 101:
        failure = "exit status 101 (panic)"
    elif "panicked" in err:
        failure = "stderr says 'panicked'"
    else:
        missing = [s for s in expect if s.lower() not in err.lower()]
        if missing:
            failure = "stderr lacks " + ", ".join(repr(s) for s in missing)
    status = "PASS" if failure is None else f"FAIL {failure}"
    line = f"hostile {name}: exit {'-' if rc is None else rc}, {secs:.2f}s, {status}"
    if failure is not None:
        line += f"\n    what: {entry.get('what', '')}\n    command: " + " ".join(cmd) + "\n    stderr:\n" + tail(err)
    return failure is None, line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--fixtures", type=Path, help="folder holding index.json (make-fixtures.py --out)")
    ap.add_argument("--hostile", type=Path, help="folder holding hostile.json (make-hostile.py --out)")
    ap.add_argument("--sluice", required=True, type=Path, help="the sluice binary")
    ap.add_argument("--device", default="cpu", help="passed to `sluice run --device` (default cpu)")
    ap.add_argument("--only", metavar="SUBSTR", help="check only the cases whose name contains SUBSTR")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds each sluice command may take (default 600)")
    args = ap.parse_args()
    if args.fixtures is None and args.hostile is None:
        ap.error("give --fixtures DIR, --hostile DIR or both")
    sluice = args.sluice
    if not sluice.is_file() or not os.access(sluice, os.X_OK):
        found = shutil.which(str(sluice))
        if found is None:
            die(f"{sluice} is not an executable file; build it with `cargo build --release` "
                f"and pass its path (e.g. target/release/sluice)")
        sluice = Path(found)
    sluice = sluice.resolve()

    passed = failed = 0
    if args.fixtures is not None:
        root = args.fixtures.resolve()
        for entry in load_index(root / "index.json", "fixtures"):
            if args.only and args.only not in str(entry.get("name", "")):
                continue
            try:
                ok, line = check_fixture(entry, root, sluice, args.device, args.timeout)
            except (OSError, ValueError) as e:  # a fixture file missing or unreadable
                ok, line = False, f"{entry.get('name', '?')}: FAIL cannot read the fixture: {e}"
            print(line, flush=True)
            passed += ok
            failed += not ok
    if args.hostile is not None:
        root = args.hostile.resolve()
        for entry in load_index(root / "hostile.json", "hostile"):
            if args.only and args.only not in str(entry.get("file", "")):
                continue
            try:
                ok, line = check_hostile(entry, root, sluice, args.timeout)
            except OSError as e:
                ok, line = False, f"hostile {entry.get('file', '?')}: FAIL cannot run sluice: {e}"
            print(line, flush=True)
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
