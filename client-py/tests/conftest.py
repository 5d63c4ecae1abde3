"""A live sluiced for the tests: CPU backend, a model repository holding the
two-input, two-output ONNX model of scripts/onnx/make-serving-model.py
(onnxruntime wrote its expected outputs), on a socket in a temporary folder.

The daemon binary is $SLUICED, else target/release/sluiced (then
target/debug/sluiced) of the checkout these tests sit in. Without one, or
without onnx/onnxruntime, the tests that need a daemon are skipped, unless
SLUICE_TEST_REQUIRE_DAEMON=1 (what scripts/python-client-check.sh sets),
which makes that a failure."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = "typed"


@dataclass
class Served:
    socket: str
    data: pathlib.Path
    onnx: pathlib.Path
    inputs: dict
    expected: dict


def _unavailable(why: str):
    if os.environ.get("SLUICE_TEST_REQUIRE_DAEMON") == "1":
        pytest.fail(f"{why} (SLUICE_TEST_REQUIRE_DAEMON=1)")
    pytest.skip(why)


def _sluiced() -> pathlib.Path | None:
    if os.environ.get("SLUICED"):
        return pathlib.Path(os.environ["SLUICED"])
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    target = target if target.is_absolute() else ROOT / target
    for p in (target / "release" / "sluiced", target / "debug" / "sluiced"):
        if p.is_file():
            return p
    return None


@pytest.fixture(scope="session")
def served(tmp_path_factory) -> Served:
    binary = _sluiced()
    if binary is None:
        _unavailable("no sluiced binary: cargo build --release --bin sluiced, or set SLUICED")
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        _unavailable("onnx and onnxruntime are needed for the model and its expected outputs")
    tmp = tmp_path_factory.mktemp("sluiced")
    data = tmp / "data"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/onnx/make-serving-model.py"), "--out", str(data)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    models = tmp / "models"
    models.mkdir()
    (models / "typed.onnx").write_bytes((data / "v1/typed.onnx").read_bytes())
    (models / "typed.toml").write_bytes((data / "typed.toml").read_bytes())
    config = tmp / "sluiced.toml"
    config.write_text(f'[device]\nbackend = "cpu"\ncpu_threads = 2\n\n[models]\ndir = "{models}"\n')
    sock = tmp / "sluiced.sock"
    log_path = tmp / "sluiced.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [str(binary), "--config", str(config), "--socket", str(sock)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        for _ in range(300):
            if sock.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        if not sock.exists():
            proc.kill()
            pytest.fail(f"sluiced did not listen on {sock} within 30 s; its log:\n{log_path.read_text()}")
        inputs = {
            "image": np.fromfile(data / "image.bin", "<f4").reshape(2, 3, 8, 8),
            "offset": np.fromfile(data / "offset.bin", "<f4").reshape(2, 10),
        }
        expected = {n: np.fromfile(data / f"v1/{n}.bin", "<f4").reshape(2, 10) for n in ("logits", "probs")}
        yield Served(str(sock), data, data / "v1/typed.onnx", inputs, expected)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


@pytest.fixture
def client(served):
    import sluice

    with sluice.connect(served.socket, name="pytest") as c:
        yield c


@pytest.fixture(scope="session")
def oracle(served):
    """onnxruntime on the served model file: the expected outputs of any input."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(served.onnx), providers=["CPUExecutionProvider"])

    def run(inputs: dict) -> dict:
        return dict(zip(["logits", "probs"], sess.run(["logits", "probs"], inputs)))

    return run


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    """Within 1e-4 x max|reference| element by element (the serving check's bound)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * scale + 1e-30)
