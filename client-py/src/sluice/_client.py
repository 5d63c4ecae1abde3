"""Client, Model, Tensor and Request: the Python face of sluice.h."""

from __future__ import annotations

import asyncio
import collections
import ctypes
import os
import sys
import threading
from ctypes import byref, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import _lib
from ._lib import Completion, ModelInfo, ModelIo, Span, Submit, TensorInfo, TypedSubmit
from .errors import Busy, Disconnected, SluiceError, TensorError, Timeout, from_code, from_status

PENDING = 1
ETIMEDOUT = -11
INPUT, OUTPUT = 0, 1
ALIGN = 64
# How long the asyncio worker waits for its oldest request before it looks
# at newly queued requests and sweeps the others (seconds).
ASYNC_SLICE_NS = 500_000

PRIORITIES = {"rt": 0, "be": 1, 0: 0, 1: 1}


def _bf16() -> np.dtype:
    try:
        import ml_dtypes  # type: ignore[import-not-found]

        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return np.dtype("<u2")  # the raw bits: numpy itself has no bfloat16


ELEM_DTYPES = {
    0: np.dtype(np.uint8),
    1: np.dtype("<f4"),
    2: np.dtype("<f2"),
    4: np.dtype("<i8"),
    5: np.dtype("<i4"),
    6: np.dtype(np.bool_),
}
ELEM_NAMES = {0: "u8", 1: "f32", 2: "f16", 3: "bf16", 4: "i64", 5: "i32", 6: "bool"}


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Tensor:
    """One input or output of a model.

    ``dims`` are the dims at batch 1; when ``batched``, dim 0 grows with the
    batch (``dims[0] * batch``) and ``shape`` shows it as ``None``.
    """

    name: str
    dtype: np.dtype
    elem: str
    batched: bool
    dims: tuple[int, ...]

    @property
    def shape(self) -> tuple[int | None, ...]:
        if self.batched:
            return (None,) + self.dims[1:]
        return self.dims

    def shape_at(self, batch: int) -> tuple[int, ...]:
        """The shape at a batch size."""
        if self.batched:
            return (self.dims[0] * batch,) + self.dims[1:]
        return self.dims

    def nbytes(self, batch: int) -> int:
        """Bytes at a batch size (as sluice_tensor_bytes)."""
        return int(np.prod(self.shape_at(batch), dtype=np.int64)) * self.dtype.itemsize

    def signature(self) -> str:
        """E.g. ``f32[N,3,8,8]`` (as the daemon's messages write it)."""
        dims = [str(d) for d in self.dims]
        if self.batched:
            dims[0] = "N" if self.dims[0] == 1 else f"{self.dims[0]}N"
        return f"{self.elem}[{','.join(dims)}]"

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.signature()}, dtype={self.dtype})"


def check_inputs(
    model: str, specs: tuple[Tensor, ...], max_batch: int, given: Mapping[str, Any]
) -> tuple[int, list[np.ndarray]]:
    """Checks the inputs against the model's tensors and returns the batch
    and the arrays in the model's order, C-contiguous (copied only when they
    were not). Raises TensorError naming the tensor, what it takes and what
    was given."""
    names = [t.name for t in specs]
    unknown = [k for k in given if k not in names]
    if unknown:
        raise TensorError(
            "UNKNOWN_INPUT",
            f"model {model!r} has no input {unknown[0]!r}; its inputs are {names}",
        )
    missing = [n for n in names if n not in given]
    if missing:
        raise TensorError(
            "MISSING_INPUT",
            f"input {missing[0]!r} of model {model!r} is missing; give every input of {names}",
        )
    batch: int | None = None
    batch_from = ""
    arrays: list[np.ndarray] = []
    for t in specs:
        a = given[t.name]
        if not isinstance(a, np.ndarray):
            a = np.asarray(a)
        if a.dtype != t.dtype:
            raise TensorError(
                "BAD_DTYPE",
                f"input {t.name!r} of model {model!r} ({t.signature()}) takes {t.dtype}; "
                f"given {a.dtype}: convert it with .astype(np.{t.dtype.name})",
            )
        want = "(" + ", ".join("N" if d is None else str(d) for d in t.shape) + ")"
        if t.batched:
            lead_ok = a.ndim == len(t.dims) and a.shape[1:] == t.dims[1:]
            if lead_ok and (a.shape[0] == 0 or a.shape[0] % t.dims[0] != 0):
                lead_ok = False
            if not lead_ok:
                raise TensorError(
                    "BAD_SHAPE",
                    f"input {t.name!r} of model {model!r} ({t.signature()}) takes shape {want} "
                    f"with N from 1 to {max_batch}; given {tuple(a.shape)}",
                )
            b = a.shape[0] // t.dims[0]
            if batch is None:
                batch, batch_from = b, t.name
            elif b != batch:
                raise TensorError(
                    "BAD_BATCH",
                    f"input {t.name!r} of model {model!r} has batch {b} (shape {tuple(a.shape)}) "
                    f"but input {batch_from!r} has batch {batch}; give every input the same batch",
                )
        elif a.shape != t.dims:
            raise TensorError(
                "BAD_SHAPE",
                f"input {t.name!r} of model {model!r} ({t.signature()}) takes shape {t.dims}; "
                f"given {tuple(a.shape)}",
            )
        arrays.append(np.ascontiguousarray(a))
    batch = batch if batch is not None else 1
    if batch > max_batch:
        raise TensorError(
            "BAD_BATCH",
            f"batch {batch} (input {batch_from!r}) is over max_batch {max_batch} of model {model!r}; "
            f"split the work into requests of at most {max_batch}",
        )
    return batch, arrays


class _Arena:
    """First-fit allocation of 64-byte-aligned blocks of the client's arena,
    one block per request in flight."""

    def __init__(self, size: int):
        self.size = size
        self.used: list[tuple[int, int]] = []  # (off, end), sorted

    def alloc(self, n: int) -> int | None:
        n = _align(max(n, 1))
        at = 0
        for i, (off, end) in enumerate(self.used):
            if off - at >= n:
                self.used.insert(i, (at, at + n))
                return at
            at = end
        if self.size - at >= n:
            self.used.append((at, at + n))
            return at
        return None

    def free(self, off: int) -> None:
        for i, (o, _) in enumerate(self.used):
            if o == off:
                del self.used[i]
                return

    def in_use(self) -> int:
        return sum(end - off for off, end in self.used)


def _priority(p: Any) -> int:
    try:
        return PRIORITIES[p.lower() if isinstance(p, str) else p]
    except (KeyError, TypeError):
        raise ValueError(f"priority {p!r} is neither 'rt' (real-time) nor 'be' (best-effort)") from None


def _deadline_ns(deadline_ms: float | None) -> int:
    if deadline_ms is None:
        return 0
    if not deadline_ms > 0:
        raise ValueError(
            f"deadline_ms {deadline_ms!r} is not a positive budget in milliseconds; use None for none"
        )
    return int(_lib.lib().sluice_now_ns() + deadline_ms * 1e6)


class Request:
    """A request in flight (from :meth:`Model.submit`); redeem it once with
    :meth:`wait` or a :meth:`poll` that returns its outputs."""

    def __init__(self, client: Client, model: Model, ticket: int, block: int, outputs):
        self.client = client
        self.model = model
        self.ticket = ticket
        self._block = block
        self._outputs = outputs  # [(Tensor, off, shape)]
        self._done = False

    def __repr__(self) -> str:
        state = "done" if self._done else "in flight"
        return f"<sluice.Request {self.ticket:#x} to {self.model.name!r}, {state}>"

    def wait(self, timeout: float | None = None) -> dict[str, np.ndarray]:
        """Blocks until the request completes (spinning briefly, then asleep
        on a futex, without the GIL) and returns its outputs by name; raises
        the daemon's refusal as a SluiceError. With a timeout (seconds),
        raises sluice.Timeout after it and the request stays in flight."""
        with self.client._lock:
            return self._wait_locked(None if timeout is None else int(timeout * 1e9))

    def poll(self) -> dict[str, np.ndarray] | None:
        """The outputs if the request has completed, else None; never blocks."""
        with self.client._lock:
            return self._poll_locked()

    # The *_locked methods run under client._lock, on the thread that reads
    # the C library's thread-local error message right after the call.
    def _check_live(self) -> c_void_p:
        if self._done:
            raise SluiceError("EBADTICKET", f"request {self.ticket:#x} was already redeemed")
        return self.client._handle()

    def _wait_locked(self, timeout_ns: int | None) -> dict[str, np.ndarray]:
        h = self._check_live()
        clib = _lib.lib()
        c = Completion()
        if timeout_ns is None:
            rc = clib.sluice_wait(h, self.ticket, byref(c))
        else:
            rc = clib.sluice_wait_timeout(h, self.ticket, max(timeout_ns, 0), byref(c))
        return self._redeem(rc, c)

    def _poll_locked(self) -> dict[str, np.ndarray] | None:
        h = self._check_live()
        c = Completion()
        rc = _lib.lib().sluice_try_poll(h, self.ticket, byref(c))
        if rc == PENDING:
            return None
        return self._redeem(rc, c)

    def _redeem(self, rc: int, c: Completion) -> dict[str, np.ndarray]:
        if rc != 0:
            err = from_code(rc, _lib.last_error())
            if rc != ETIMEDOUT:
                self._release()
            raise err
        if c.status != 0:
            err = from_status(c.status, _lib.last_error())
            self._release()
            raise err
        base = self.client._base
        out: dict[str, np.ndarray] = {}
        for t, off, shape in self._outputs:
            a = np.empty(shape, dtype=t.dtype)
            if a.nbytes:
                ctypes.memmove(a.ctypes.data, base + off, a.nbytes)
            out[t.name] = a
        self._release()
        return out

    def _release(self) -> None:
        if not self._done:
            self._done = True
            self.client._arena.free(self._block)

    def __del__(self) -> None:
        # Dropped while in flight: the client redeems it later to free its block.
        try:
            if not self._done and not self.client._closed:
                self.client._abandoned.append(self)
                self._done = True  # the client's reaper owns it now
        except Exception:
            pass


class Model:
    """A model served by the daemon (from :meth:`Client.model`)."""

    def __init__(self, client: Client, name: str):
        self.client = client
        self.name = name
        clib = _lib.lib()
        info = ModelInfo()
        io = ModelIo()
        with client._lock:
            h = client._handle()
            rc = clib.sluice_lookup_model(h, name.encode(), byref(info))
            if rc == 0:
                rc = clib.sluice_model_io(h, info.id, byref(io))
            if rc != 0:
                raise from_code(rc, _lib.last_error())
            tensors: list[list[Tensor]] = [[], []]
            for direction, n in ((INPUT, io.n_inputs), (OUTPUT, io.n_outputs)):
                for i in range(n):
                    ti = TensorInfo()
                    rc = clib.sluice_model_tensor(h, info.id, direction, i, byref(ti))
                    if rc != 0:
                        raise from_code(rc, _lib.last_error())
                    tensors[direction].append(_tensor(ti))
        self.id: int = info.id
        self.kernels: int = info.kernels
        self.standalone_ns: int = info.standalone_ns
        self.max_batch: int = io.max_batch
        self.inputs: tuple[Tensor, ...] = tuple(tensors[INPUT])
        self.outputs: tuple[Tensor, ...] = tuple(tensors[OUTPUT])

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}: {t.signature()}" for t in self.inputs)
        outs = ", ".join(f"{t.name}: {t.signature()}" for t in self.outputs)
        return f"<sluice.Model {self.name!r} id {self.id}, max_batch {self.max_batch}, ({ins}) -> ({outs})>"

    def _given(self, inputs: Any) -> Mapping[str, Any]:
        if isinstance(inputs, Mapping):
            return inputs
        if len(self.inputs) == 1:
            return {self.inputs[0].name: inputs}
        raise TypeError(
            f"model {self.name!r} has {len(self.inputs)} inputs {[t.name for t in self.inputs]}: "
            "pass a dict of arrays by input name"
        )

    def submit(self, inputs: Any, *, priority: str | int = "rt", deadline_ms: float | None = None) -> Request:
        """Checks the inputs, copies them into the client's arena and submits a
        typed request without waiting; returns the :class:`Request`.

        ``inputs``: a dict of numpy arrays by input name (or one array for a
        model of one input), the batch in dim 0 of the batched ones.
        ``priority``: ``"rt"`` (real-time) or ``"be"`` (best-effort).
        ``deadline_ms``: the budget from now after which the daemon no longer
        starts it (sluice.DeadlineMissed), or None."""
        batch, arrays = check_inputs(self.name, self.inputs, self.max_batch, self._given(inputs))
        prio, deadline = _priority(priority), _deadline_ns(deadline_ms)
        with self.client._lock:
            return self.client._submit_locked(self, batch, arrays, prio, deadline)

    def infer(
        self, inputs: Any, *, priority: str | int = "rt", deadline_ms: float | None = None
    ) -> dict[str, np.ndarray]:
        """Runs the model on the inputs and returns its outputs by name (numpy
        arrays, the batch in dim 0 of the batched ones). Blocks this thread
        (not the GIL). Arguments as :meth:`submit`."""
        return self.submit(inputs, priority=priority, deadline_ms=deadline_ms).wait()

    async def infer_async(
        self, inputs: Any, *, priority: str | int = "rt", deadline_ms: float | None = None
    ) -> dict[str, np.ndarray]:
        """:meth:`infer` for asyncio: the inputs are checked at once (errors
        raise here), then the client's worker thread submits and waits, and
        the result comes back through the event loop, which never blocks.
        Many may be in flight at once; arguments as :meth:`submit`."""
        batch, arrays = check_inputs(self.name, self.inputs, self.max_batch, self._given(inputs))
        prio, deadline = _priority(priority), _deadline_ns(deadline_ms)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.client._async_worker().put(_Job(self, batch, arrays, prio, deadline, loop, fut))
        return await fut

    def submit_raw(
        self, data: Any, *, priority: str | int = "rt", deadline_ms: float | None = None
    ) -> Request:
        """An untyped request (sluice_submit): ``data`` (bytes or an array) is
        the model's one input as raw bytes, the output comes back as
        ``{"output": uint8 array}``. For models known by a manifest; a model
        of several tensors refuses it (BAD_TENSOR_TABLE)."""
        raw = np.frombuffer(bytes(data) if not isinstance(data, np.ndarray) else data.tobytes(), np.uint8)
        prio, deadline = _priority(priority), _deadline_ns(deadline_ms)
        out_len = max(sum(t.nbytes(1) for t in self.outputs), 1)
        with self.client._lock:
            return self.client._submit_raw_locked(self, raw, out_len, prio, deadline)


def _tensor(ti: TensorInfo) -> Tensor:
    name = ti.name.decode("utf-8", "replace") if ti.name else ""
    if ti.elem == 3:
        dtype = _bf16()
    elif ti.elem in ELEM_DTYPES:
        dtype = ELEM_DTYPES[ti.elem]
    else:
        raise SluiceError("EPROTO", f"tensor {name!r} has element type {ti.elem}, unknown to this package")
    return Tensor(
        name=name,
        dtype=dtype,
        elem=ELEM_NAMES[ti.elem],
        batched=bool(ti.batched),
        dims=tuple(int(ti.dims[i]) for i in range(ti.rank)),
    )


@dataclass
class _Job:
    model: Model
    batch: int
    arrays: list[np.ndarray]
    priority: int
    deadline: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future

    def settle(self, outcome: Any) -> None:
        def apply() -> None:
            if self.future.done():
                return
            if isinstance(outcome, BaseException):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)

        try:
            self.loop.call_soon_threadsafe(apply)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits the result


class _Worker(threading.Thread):
    """The one thread per client that submits and waits for the asyncio
    requests: it waits (futex, no GIL) for its oldest request a slice at a
    time, collects every completed one with sluice_try_poll, then submits
    what was queued meanwhile."""

    def __init__(self, client: Client):
        super().__init__(name="sluice-async", daemon=True)
        self.client = client
        self.cv = threading.Condition()
        self.queued: collections.deque[_Job] = collections.deque()
        self.closing = False

    def put(self, job: _Job) -> None:
        with self.cv:
            if self.closing:
                raise Disconnected("EDISCONNECTED", "the client is closed; connect again")
            self.queued.append(job)
            self.cv.notify()

    def stop(self) -> None:
        with self.cv:
            self.closing = True
            self.cv.notify()

    def run(self) -> None:
        client = self.client
        waiting: collections.deque[_Job] = collections.deque()
        in_flight: dict[int, tuple[_Job, Request]] = {}
        while True:
            with self.cv:
                while not self.queued and not waiting and not in_flight and not self.closing:
                    self.cv.wait()
                waiting.extend(self.queued)
                self.queued.clear()
                closing = self.closing
            if closing:
                err = Disconnected("EDISCONNECTED", "the client was closed with this request in flight")
                for job in waiting:
                    job.settle(err)
                for job, _ in in_flight.values():
                    job.settle(err)
                return
            while waiting:
                job = waiting[0]
                if job.future.cancelled():
                    waiting.popleft()
                    continue
                try:
                    with client._lock:
                        req = client._submit_locked(
                            job.model, job.batch, job.arrays, job.priority, job.deadline
                        )
                except Busy as e:
                    if in_flight:
                        break  # room comes back with a completion
                    waiting.popleft()
                    job.settle(e)
                    continue
                except SluiceError as e:
                    waiting.popleft()
                    job.settle(e)
                    continue
                waiting.popleft()
                in_flight[req.ticket] = (job, req)
            if not in_flight:
                continue
            done: list[tuple[int, Any]] = []
            oldest = next(iter(in_flight))
            with client._lock:
                for ticket, (_, req) in in_flight.items():
                    try:
                        if ticket == oldest:
                            out = req._wait_locked(ASYNC_SLICE_NS)
                        else:
                            out = req._poll_locked()
                            if out is None:
                                continue
                        done.append((ticket, out))
                    except Timeout:
                        continue
                    except SluiceError as e:
                        done.append((ticket, e))
            for ticket, outcome in done:
                job, _ = in_flight.pop(ticket)
                job.settle(outcome)


class Client:
    """A session with sluiced (from :func:`connect`); a context manager.

    One client may be used from several threads (its calls take a lock) and
    from asyncio; for requests that must not wait on each other's calls,
    open one client per thread."""

    def __init__(self, socket: str | os.PathLike | None = None, name: str | None = None):
        clib = _lib.lib()
        self._closed = True
        self._lock = threading.Lock()
        self._abandoned: list[Request] = []
        self._worker: _Worker | None = None
        if name is None:
            name = f"python:{os.path.basename(sys.argv[0]) or 'python'}"
        path = os.fsencode(socket) if socket is not None else None
        h = c_void_p()
        rc = clib.sluice_connect(path, name.encode(), byref(h))
        if rc != 0:
            raise from_code(rc, _lib.last_error())
        self._h = h
        self._closed = False
        self._arena = _Arena(int(clib.sluice_arena_len(h)))
        self._base = ctypes.cast(clib.sluice_arena_ptr(h), c_void_p).value or 0
        self.id: int = int(clib.sluice_client_id(h))

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"arena {self._arena.size} bytes"
        return f"<sluice.Client {getattr(self, 'id', '?')}, {state}>"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Ends the session; requests in flight are abandoned (their awaiting
        coroutines get sluice.Disconnected). Idempotent."""
        if self._closed:
            return
        w = self._worker
        if w is not None:
            w.stop()
            if w is not threading.current_thread():
                w.join(timeout=10)
        with self._lock:
            self._closed = True
            _lib.lib().sluice_disconnect(self._h)
            self._h = c_void_p()

    def model(self, name: str) -> Model:
        """Looks a model up by name (one round trip to the daemon) and returns
        it with its tensors; raises sluice.UnknownModel if there is none."""
        return Model(self, name)

    @property
    def arena_bytes(self) -> int:
        """The size of this session's shared-memory arena."""
        return self._arena.size

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet redeemed."""
        with self._lock:
            return int(_lib.lib().sluice_in_flight(self._handle()))

    def set_spin_ns(self, ns: int | None) -> None:
        """How long a wait spins before it sleeps (ns), or None for the
        adaptive default (sluice_set_spin_ns)."""
        with self._lock:
            v = (1 << 64) - 1 if ns is None else int(ns)
            rc = _lib.lib().sluice_set_spin_ns(self._handle(), v)
            if rc != 0:
                raise from_code(rc, _lib.last_error())

    # Internals, under self._lock.
    def _handle(self) -> c_void_p:
        if self._closed:
            raise Disconnected("EDISCONNECTED", "the client is closed; sluice.connect() again")
        return self._h

    def _async_worker(self) -> _Worker:
        self._handle()
        if self._worker is None:
            self._worker = _Worker(self)
            self._worker.start()
        return self._worker

    def _reap(self) -> None:
        """Redeems requests dropped while in flight, freeing their blocks."""
        pending, self._abandoned = self._abandoned, []
        keep = []
        for req in pending:
            req._done = False
            try:
                if req._poll_locked() is None:
                    req._done = True
                    keep.append(req)
            except SluiceError:
                pass
        self._abandoned.extend(keep)

    def _alloc(self, need: int) -> int:
        if need > self._arena.size:
            raise TensorError(
                "BAD_TENSOR_LEN",
                f"the request needs {need} bytes of the arena, which holds {self._arena.size}; "
                "split it into smaller batches",
            )
        if self._abandoned:
            self._reap()
        block = self._arena.alloc(need)
        if block is None:
            raise Busy(
                "ARENA_FULL",
                f"the request needs {need} bytes of the arena and {self._arena.in_use()} of its "
                f"{self._arena.size} are held by requests in flight; wait for one and retry",
            )
        return block

    def _submit_locked(
        self, model: Model, batch: int, arrays: list[np.ndarray], prio: int, deadline: int
    ) -> Request:
        h = self._handle()
        if model.client is not self:
            raise ValueError(f"model {model.name!r} was looked up on another client")
        tensors = list(model.inputs) + list(model.outputs)
        table = _align(16 * len(tensors))
        offs, at = [], table
        for t in tensors:
            offs.append(at)
            at += _align(t.nbytes(batch))
        block = self._alloc(at)
        n_in = len(model.inputs)
        spans = (Span * max(len(tensors), 1))()
        for i, t in enumerate(tensors):
            spans[i].off = block + offs[i]
            spans[i].len = t.nbytes(batch)
        for i, a in enumerate(arrays):
            if a.nbytes:
                ctypes.memmove(self._base + spans[i].off, a.ctypes.data, a.nbytes)
        req = TypedSubmit()
        req.model_id = model.id
        req.priority = prio
        req.deadline_ns = deadline
        req.batch = batch
        req.table_off = block
        req.inputs = ctypes.cast(spans, ctypes.POINTER(Span))
        req.n_inputs = n_in
        req.outputs = ctypes.cast(
            c_void_p(ctypes.addressof(spans) + n_in * ctypes.sizeof(Span)), ctypes.POINTER(Span)
        )
        req.n_outputs = len(model.outputs)
        ticket = c_uint64()
        rc = _lib.lib().sluice_submit_typed(h, byref(req), byref(ticket))
        if rc != 0:
            self._arena.free(block)
            raise from_code(rc, _lib.last_error())
        outputs = [(t, spans[n_in + k].off, t.shape_at(batch)) for k, t in enumerate(model.outputs)]
        return Request(self, model, ticket.value, block, outputs)

    def _submit_raw_locked(
        self, model: Model, raw: np.ndarray, out_len: int, prio: int, deadline: int
    ) -> Request:
        h = self._handle()
        in_span = _align(max(raw.nbytes, 1))
        block = self._alloc(in_span + out_len)
        if raw.nbytes:
            ctypes.memmove(self._base + block, raw.ctypes.data, raw.nbytes)
        s = Submit()
        s.model_id = model.id
        s.priority = prio
        s.deadline_ns = deadline
        s.input.off, s.input.len = block, raw.nbytes
        s.output.off, s.output.len = block + in_span, out_len
        ticket = c_uint64()
        rc = _lib.lib().sluice_submit(h, byref(s), byref(ticket))
        if rc != 0:
            self._arena.free(block)
            raise from_code(rc, _lib.last_error())
        out_t = Tensor("output", np.dtype(np.uint8), "u8", False, (out_len,))
        return Request(self, model, ticket.value, block, [(out_t, block + in_span, (out_len,))])


def connect(socket: str | os.PathLike | None = None, name: str | None = None) -> Client:
    """Connects to sluiced. ``socket``: its path; None picks the daemon's
    default as the C library does ($SLUICE_SOCKET, else /run/sluice/sluiced.sock
    for root, $XDG_RUNTIME_DIR/sluice/sluiced.sock, /tmp/sluice-<uid>/sluiced.sock).
    ``name`` shows in ``sluice status``. Raises sluice.ConnectError when no
    daemon listens there or it refuses the session."""
    return Client(socket, name)
