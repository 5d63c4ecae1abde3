"""Finding and binding libsluice_client (the C ABI of client-lib/, sluice.h).

The library is looked for, first match wins:

1. ``$SLUICE_CLIENT_LIB``: a path to the library (when set, nothing else is
   tried: a wrong path is an error, not a silent fallback);
2. next to this package (``sluice/libsluice_client.so``);
3. the checkout the package was installed from, or sits in:
   ``$CARGO_TARGET_DIR`` at install time, then ``target/release`` and
   ``target/debug`` of that checkout;
4. the system's library path (``ctypes.util.find_library("sluice_client")``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import sys
from ctypes import POINTER, Structure, c_char_p, c_int, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p

from .errors import LibraryNotFound

LIB_NAME = "libsluice_client.so" if sys.platform != "darwin" else "libsluice_client.dylib"
BUILD_HINT = (
    "build it with `cargo build --release -p sluice-client` in the sluice checkout, "
    "or set SLUICE_CLIENT_LIB to the path of libsluice_client.so"
)

MAX_DIMS = 8


class ModelInfo(Structure):
    _fields_ = [
        ("id", c_uint32),
        ("kernels", c_uint32),
        ("input_bytes", c_uint64),
        ("output_bytes", c_uint64),
        ("standalone_ns", c_uint64),
    ]


class Span(Structure):
    _fields_ = [("off", c_uint64), ("len", c_uint64)]


class Submit(Structure):
    _fields_ = [
        ("model_id", c_uint32),
        ("priority", c_uint32),
        ("deadline_ns", c_uint64),
        ("input", Span),
        ("output", Span),
    ]


class Completion(Structure):
    _fields_ = [
        ("request_id", c_uint64),
        ("status", c_uint32),
        ("reserved", c_uint32),
        ("output_len", c_uint64),
        ("received_ns", c_uint64),
        ("started_ns", c_uint64),
        ("finished_ns", c_uint64),
    ]


class ModelIo(Structure):
    _fields_ = [
        ("max_batch", c_uint32),
        ("n_inputs", c_uint32),
        ("n_outputs", c_uint32),
        ("reserved", c_uint32),
    ]


class TensorInfo(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("elem", c_uint32),
        ("batched", c_uint32),
        ("rank", c_uint32),
        ("reserved", c_uint32),
        ("dims", c_uint64 * MAX_DIMS),
    ]


class TypedSubmit(Structure):
    _fields_ = [
        ("model_id", c_uint32),
        ("priority", c_uint32),
        ("deadline_ns", c_uint64),
        ("batch", c_uint32),
        ("reserved", c_uint32),
        ("table_off", c_uint64),
        ("inputs", POINTER(Span)),
        ("n_inputs", c_size_t),
        ("outputs", POINTER(Span)),
        ("n_outputs", c_size_t),
    ]


def _checkout_dirs(here: pathlib.Path) -> list[pathlib.Path]:
    """Target directories of the checkout this package came from."""
    dirs: list[pathlib.Path] = []
    roots: list[pathlib.Path] = []
    try:
        from . import _where  # written at install time by client-py/setup.py

        if _where.CARGO_TARGET_DIR:
            dirs += [pathlib.Path(_where.CARGO_TARGET_DIR) / p for p in ("release", "debug")]
        if _where.CHECKOUT:
            roots.append(pathlib.Path(_where.CHECKOUT))
    except ImportError:
        pass
    # Run from the source tree (client-py/src/sluice) or an editable install.
    source_root = here.parent.parent.parent
    if (source_root / "client-lib").is_dir():
        roots.append(source_root)
    env_target = os.environ.get("CARGO_TARGET_DIR")
    for root in roots:
        if env_target:
            t = pathlib.Path(env_target)
            t = t if t.is_absolute() else root / t
            dirs += [t / "release", t / "debug"]
        dirs += [root / "target" / "release", root / "target" / "debug"]
    unique: list[pathlib.Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def locate(
    env_value: str | None = None,
    here: pathlib.Path | None = None,
    dirs: list[pathlib.Path] | None = None,
    system: bool = True,
) -> str:
    """The path of the library to load (see the module's docs for the order);
    raises LibraryNotFound naming every place looked and the fix."""
    if env_value is not None:
        if os.path.isfile(env_value):
            return env_value
        raise LibraryNotFound(
            f"SLUICE_CLIENT_LIB={env_value} is not a file; point it at libsluice_client.so "
            f"(cargo build --release -p sluice-client writes target/release/{LIB_NAME}) or unset it"
        )
    here = here if here is not None else pathlib.Path(__file__).resolve().parent
    looked: list[str] = ["$SLUICE_CLIENT_LIB (not set)"]
    beside = here / LIB_NAME
    if beside.is_file():
        return str(beside)
    looked.append(str(beside))
    for d in dirs if dirs is not None else _checkout_dirs(here):
        p = d / LIB_NAME
        if p.is_file():
            return str(p)
        looked.append(str(p))
    if system:
        found = ctypes.util.find_library("sluice_client")
        if found:
            return found
        looked.append('the system library path (ctypes.util.find_library("sluice_client"))')
    raise LibraryNotFound(
        f"cannot find {LIB_NAME}; looked in: " + "; ".join(looked) + f". To fix: {BUILD_HINT}"
    )


_LIB: ctypes.CDLL | None = None
_PATH: str | None = None


def library_path() -> str:
    """Where the library loaded (or would load) from."""
    if _PATH is not None:
        return _PATH
    return locate(os.environ.get("SLUICE_CLIENT_LIB"))


def lib() -> ctypes.CDLL:
    """The loaded library (loaded on first use, then cached)."""
    global _LIB, _PATH
    if _LIB is not None:
        return _LIB
    path = locate(os.environ.get("SLUICE_CLIENT_LIB"))
    try:
        # CDLL releases the GIL around every call: a wait blocks only its thread.
        lib_ = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryNotFound(f"cannot load {path}: {e}. To fix: {BUILD_HINT}") from e
    _bind(lib_)
    _LIB, _PATH = lib_, path
    return lib_


def _bind(clib: ctypes.CDLL) -> None:
    client = c_void_p
    sigs = {
        "sluice_connect": (c_int, [c_char_p, c_char_p, POINTER(c_void_p)]),
        "sluice_disconnect": (None, [client]),
        "sluice_lookup_model": (c_int, [client, c_char_p, POINTER(ModelInfo)]),
        "sluice_submit": (c_int, [client, POINTER(Submit), POINTER(c_uint64)]),
        "sluice_try_poll": (c_int, [client, c_uint64, POINTER(Completion)]),
        "sluice_wait": (c_int, [client, c_uint64, POINTER(Completion)]),
        "sluice_wait_timeout": (c_int, [client, c_uint64, c_uint64, POINTER(Completion)]),
        "sluice_model_io": (c_int, [client, c_uint32, POINTER(ModelIo)]),
        "sluice_model_tensor": (c_int, [client, c_uint32, c_uint32, c_uint32, POINTER(TensorInfo)]),
        "sluice_elem_name": (c_char_p, [c_uint32]),
        "sluice_tensor_bytes": (c_uint64, [POINTER(TensorInfo), c_uint32]),
        "sluice_submit_typed": (c_int, [client, POINTER(TypedSubmit), POINTER(c_uint64)]),
        "sluice_set_spin_ns": (c_int, [client, c_uint64]),
        "sluice_arena_len": (c_uint64, [client]),
        "sluice_arena_ptr": (POINTER(c_uint8), [client]),
        "sluice_in_flight": (c_uint32, [client]),
        "sluice_client_id": (c_uint32, [client]),
        "sluice_now_ns": (c_uint64, []),
        "sluice_strerror": (c_char_p, [c_int]),
        "sluice_status_str": (c_char_p, [c_uint32]),
        "sluice_last_error_message": (c_char_p, []),
    }
    for name, (res, args) in sigs.items():
        f = getattr(clib, name)
        f.restype = res
        f.argtypes = args


def last_error() -> str:
    """This thread's detailed message of the last failed call."""
    m = lib().sluice_last_error_message()
    return m.decode("utf-8", "replace") if m else ""
