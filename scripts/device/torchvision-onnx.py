#!/usr/bin/env python3
"""On the lent GPU machine (torch, torchvision, onnx and numpy in its Python):
exports torchvision's resnet50, mobilenet_v2 and vgg16 with seeded random
weights to ONNX, runs each through `sluice run --device cuda` (which also
prints its largest error against sluice's CPU executor), and compares sluice's
output with torch's own (fp32, on the CPU, so no TF32 in the reference).

Prints one line per model: `MODEL: max |sluice - torch| / max |torch| = E`;
exits 1 when a model fails or E > 1e-4.

Usage: torchvision-onnx.py --sluice PATH --out DIR [--models a,b,c]
"""
import argparse
import pathlib
import subprocess
import sys

import numpy as np
import torch
import torchvision


def export(name: str, out: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, np.ndarray]:
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = model(x).numpy()
    path = out / f"{name}.onnx"
    kwargs = dict(input_names=["input"], output_names=["output"], opset_version=17,
                  dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    try:
        torch.onnx.export(model, (x,), str(path), dynamo=False, **kwargs)
    except TypeError:  # a torch without the dynamo switch
        torch.onnx.export(model, (x,), str(path), **kwargs)
    inp = out / f"{name}.input.npy"
    np.save(inp, x.numpy())
    return path, inp, y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,vgg16")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}", flush=True)
    bad = 0
    for name in a.models.split(","):
        try:
            path, inp, want = export(name, a.out)
        except Exception as e:  # noqa: BLE001 - report and go on to the next model
            print(f"{name}: export failed: {e}", flush=True)
            bad += 1
            continue
        res = a.out / name
        run = subprocess.run([a.sluice, "run", str(path), "--input", f"input={inp}", "--out", str(res),
                              "--device", "cuda"], capture_output=True, text=True)
        sys.stdout.write(run.stdout)
        sys.stderr.write(run.stderr)
        if run.returncode != 0:
            print(f"{name}: sluice run failed with status {run.returncode}", flush=True)
            bad += 1
            continue
        got = np.load(res / "output.npy")
        err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        ok = got.shape == want.shape and err <= 1e-4
        bad += not ok
        print(f"{name}: max |sluice - torch| / max |torch| = {err:.3g} ({'ok' if ok else 'FAILED'})", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
