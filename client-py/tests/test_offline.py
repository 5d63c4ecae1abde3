"""Tests that need no daemon: the library search and its message, the input
checks against a model's tensors, the arena's allocator, and connecting to
a socket nobody listens on."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import sluice
from sluice import _lib
from sluice._client import _Arena

IMAGE = sluice.Tensor("image", np.dtype("<f4"), "f32", True, (1, 3, 8, 8))
OFFSET = sluice.Tensor("offset", np.dtype("<f4"), "f32", True, (1, 10))
MASK = sluice.Tensor("mask", np.dtype(np.uint8), "u8", False, (4,))


def check(given, specs=(IMAGE, OFFSET), max_batch=4):
    return sluice.check_inputs("typed", specs, max_batch, given)


def test_library_not_found_names_every_place_and_the_fix(tmp_path):
    dirs = [tmp_path / "target/release", tmp_path / "target/debug"]
    with pytest.raises(sluice.LibraryNotFound) as e:
        _lib.locate(None, here=tmp_path / "pkg", dirs=dirs, system=False)
    msg = str(e.value)
    assert "$SLUICE_CLIENT_LIB (not set)" in msg
    assert str(tmp_path / "pkg" / _lib.LIB_NAME) in msg
    for d in dirs:
        assert str(d / _lib.LIB_NAME) in msg
    assert "cargo build --release -p sluice-client" in msg
    assert e.value.name == "LIBRARY_NOT_FOUND"
    assert isinstance(e.value, OSError)


def test_library_found_in_a_target_dir(tmp_path):
    d = tmp_path / "target/debug"
    d.mkdir(parents=True)
    (d / _lib.LIB_NAME).write_bytes(b"")
    got = _lib.locate(None, here=tmp_path / "pkg", dirs=[tmp_path / "target/release", d], system=False)
    assert got == str(d / _lib.LIB_NAME)


def test_library_env_var_that_is_wrong_is_an_error_not_a_fallback(tmp_path):
    bad = tmp_path / "nope.so"
    env = dict(os.environ, SLUICE_CLIENT_LIB=str(bad))
    r = subprocess.run(
        [sys.executable, "-c", "import sluice; sluice.connect('/nonexistent.sock')"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    assert f"SLUICE_CLIENT_LIB={bad} is not a file" in r.stderr
    assert "cargo build --release -p sluice-client" in r.stderr


def test_import_needs_no_library():
    env = dict(os.environ, SLUICE_CLIENT_LIB="/nonexistent/libsluice_client.so")
    r = subprocess.run(
        [sys.executable, "-c", "import sluice; print(sluice.RT)"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "rt"


def test_connect_without_a_daemon_names_the_socket(tmp_path):
    sock = tmp_path / "nobody.sock"
    with pytest.raises(sluice.ConnectError) as e:
        sluice.connect(sock)
    assert e.value.name == "EUNREACHABLE"
    assert e.value.code == -1
    assert str(sock) in e.value.detail


def test_inputs_in_order_and_the_batch():
    img = np.zeros((3, 3, 8, 8), np.float32)
    off = np.zeros((3, 10), np.float32)
    batch, arrays = check({"offset": off, "image": img})
    assert batch == 3
    assert arrays[0] is img and arrays[1] is off  # contiguous already: not copied


def test_non_contiguous_input_is_made_contiguous():
    img = np.zeros((2, 3, 8, 16), np.float32)[..., ::2]
    _, arrays = check({"image": img, "offset": np.zeros((2, 10), np.float32)})
    assert arrays[0].flags.c_contiguous and np.array_equal(arrays[0], img)


def test_wrong_dtype_names_tensor_expected_and_given():
    with pytest.raises(sluice.TensorError) as e:
        check({"image": np.zeros((2, 3, 8, 8)), "offset": np.zeros((2, 10), np.float32)})
    assert e.value.name == "BAD_DTYPE"
    assert "input 'image' of model 'typed' (f32[N,3,8,8]) takes float32; given float64" in str(e.value)
    assert isinstance(e.value, ValueError)


def test_big_endian_is_refused():
    with pytest.raises(sluice.TensorError, match="given >f4"):
        check({"image": np.zeros((2, 3, 8, 8), ">f4"), "offset": np.zeros((2, 10), np.float32)})


def test_wrong_shape_names_tensor_expected_and_given():
    with pytest.raises(sluice.TensorError) as e:
        check({"image": np.zeros((2, 3, 9, 9), np.float32), "offset": np.zeros((2, 10), np.float32)})
    assert e.value.name == "BAD_SHAPE"
    assert "takes shape (N, 3, 8, 8) with N from 1 to 4; given (2, 3, 9, 9)" in str(e.value)


def test_empty_batch_is_refused():
    with pytest.raises(sluice.TensorError, match=r"given \(0, 3, 8, 8\)"):
        check({"image": np.zeros((0, 3, 8, 8), np.float32), "offset": np.zeros((0, 10), np.float32)})


def test_batches_that_differ_are_refused():
    with pytest.raises(sluice.TensorError) as e:
        check({"image": np.zeros((2, 3, 8, 8), np.float32), "offset": np.zeros((3, 10), np.float32)})
    assert e.value.name == "BAD_BATCH"
    assert "input 'offset' of model 'typed' has batch 3" in str(e.value)
    assert "input 'image' has batch 2" in str(e.value)


def test_batch_over_max_batch():
    with pytest.raises(sluice.TensorError) as e:
        check({"image": np.zeros((5, 3, 8, 8), np.float32), "offset": np.zeros((5, 10), np.float32)})
    assert e.value.name == "BAD_BATCH"
    assert "batch 5 (input 'image') is over max_batch 4 of model 'typed'" in str(e.value)


def test_missing_and_unknown_inputs():
    with pytest.raises(sluice.TensorError) as e:
        check({"image": np.zeros((2, 3, 8, 8), np.float32)})
    assert e.value.name == "MISSING_INPUT" and "'offset'" in str(e.value)
    with pytest.raises(sluice.TensorError) as e:
        check({"image": np.zeros((2, 3, 8, 8), np.float32), "offst": 0})
    assert e.value.name == "UNKNOWN_INPUT"
    assert "no input 'offst'; its inputs are ['image', 'offset']" in str(e.value)


def test_unbatched_tensor_takes_its_exact_shape():
    batch, _ = check({"mask": np.zeros(4, np.uint8)}, specs=(MASK,))
    assert batch == 1
    with pytest.raises(sluice.TensorError, match=r"takes shape \(4,\); given \(1, 4\)"):
        check({"mask": np.zeros((1, 4), np.uint8)}, specs=(MASK,))


def test_tensor_shapes_and_signature():
    assert IMAGE.shape == (None, 3, 8, 8)
    assert IMAGE.shape_at(4) == (4, 3, 8, 8)
    assert IMAGE.nbytes(2) == 2 * 3 * 8 * 8 * 4
    assert IMAGE.signature() == "f32[N,3,8,8]"
    assert MASK.shape == (4,) and MASK.nbytes(7) == 4


def test_arena_first_fit_reuses_freed_blocks():
    a = _Arena(1024)
    x, y, z = a.alloc(100), a.alloc(64), a.alloc(1)
    assert (x, y, z) == (0, 128, 192)
    assert a.alloc(1024) is None
    a.free(y)
    assert a.alloc(60) == 128  # the freed hole
    a.free(x)
    assert a.alloc(200) == 256  # the hole at 0 is too small
    assert a.in_use() == 64 + 64 + 256
    assert a.alloc(1024 - 512 + 1) is None


def test_priority_and_deadline_arguments_are_checked():
    from sluice._client import _deadline_ns, _priority

    assert _priority("RT") == 0 and _priority("be") == 1 and _priority(1) == 1
    with pytest.raises(ValueError, match="priority 'urgent' is neither"):
        _priority("urgent")
    with pytest.raises(ValueError, match="deadline_ms -1 is not a positive budget"):
        _deadline_ns(-1)


def test_error_classes_by_code_and_status():
    from sluice.errors import from_code, from_status

    assert isinstance(from_code(-9, "x"), sluice.UnknownModel)
    assert isinstance(from_code(-13, "x"), sluice.TensorError)
    assert isinstance(from_code(-11, "x"), sluice.Timeout)
    e = from_status(13, 'input "ids" ...')
    assert isinstance(e, sluice.TensorError) and e.name == "BAD_TENSOR_LEN" and e.status == 13
    assert isinstance(from_status(8, ""), sluice.DeadlineMissed)
    assert isinstance(from_status(9, ""), sluice.RequestFailed)
    assert str(from_status(11, "batch 9 is outside")) == "BAD_BATCH: batch 9 is outside"
