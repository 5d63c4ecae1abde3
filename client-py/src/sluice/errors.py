"""The errors of the sluice client.

Every error is a :class:`SluiceError` carrying

- ``name``: the C return code (``"EUNREACHABLE"``, ``"EBADTENSOR"``, ...), the
  daemon's completion status (``"BAD_TENSOR_LEN"``, ``"DEADLINE_MISSED"``, ...)
  or, for a check this package makes before anything is sent, what was wrong
  (``"BAD_DTYPE"``, ``"BAD_SHAPE"``, ``"BAD_BATCH"``, ``"MISSING_INPUT"``,
  ``"UNKNOWN_INPUT"``);
- ``code``: the C return code (negative int) or ``None``;
- ``status``: the completion status (``SLUICE_STATUS_*``) or ``None``;
- ``detail``: the explanation, naming the tensor, the value expected and the
  value given (for the daemon's refusals, the library's rendering of the
  daemon's detail words).
"""

from __future__ import annotations

CODE_NAMES = {
    -1: "EUNREACHABLE",
    -2: "EREFUSED",
    -3: "EPROTO",
    -4: "EIO",
    -5: "EDISCONNECTED",
    -6: "ERINGFULL",
    -7: "ETOOMANY",
    -8: "EBADTICKET",
    -9: "ENOMODEL",
    -10: "EBADSPAN",
    -11: "ETIMEDOUT",
    -12: "EINVAL",
    -13: "EBADTENSOR",
    -14: "EFAILED",
}

STATUS_NAMES = {
    0: "OK",
    1: "UNKNOWN_MODEL",
    2: "BAD_INPUT_SPAN",
    3: "BAD_OUTPUT_SPAN",
    4: "BAD_INPUT_LEN",
    5: "OUTPUT_TOO_SMALL",
    6: "BAD_PRIORITY",
    7: "BAD_FLAGS",
    8: "DEADLINE_MISSED",
    9: "DEVICE_ERROR",
    10: "SHUTTING_DOWN",
    11: "BAD_BATCH",
    12: "BAD_TENSOR_TABLE",
    13: "BAD_TENSOR_LEN",
    14: "MODEL_UNLOADED",
}


class SluiceError(Exception):
    """Something the sluice client or daemon refused; see the module docs."""

    def __init__(self, name: str, detail: str, code: int | None = None, status: int | None = None):
        super().__init__(f"{name}: {detail}" if detail else name)
        self.name = name
        self.detail = detail
        self.code = code
        self.status = status


class LibraryNotFound(SluiceError, OSError):
    """libsluice_client could not be found or loaded; the message lists where
    it was looked for and how to build it."""

    def __init__(self, detail: str):
        super().__init__("LIBRARY_NOT_FOUND", detail)


class ConnectError(SluiceError):
    """No daemon on the socket (EUNREACHABLE), or it refused the session (EREFUSED)."""


class Disconnected(SluiceError):
    """The daemon went away or dropped this client: connect again."""


class UnknownModel(SluiceError, LookupError):
    """The daemon has no model of that name (or it was unloaded: look it up again)."""


class TensorError(SluiceError, ValueError):
    """The request does not fit the model: a tensor's dtype, shape or length, the
    batch, the tensor table. Raised before sending when this package or the C
    library sees it, or after the daemon refused the request."""


class DeadlineMissed(SluiceError):
    """The request's deadline passed before the device could start it; it did not run."""


class Timeout(SluiceError, TimeoutError):
    """A wait ran out; the request stays in flight and can be waited for again."""


class Busy(SluiceError):
    """No room for the request now (submission ring, completion ring or arena
    full); wait for a request in flight to complete and retry."""


class RequestFailed(SluiceError):
    """The daemon completed the request with an error status not covered above
    (device error, shutting down, ...)."""


_BY_CODE = {
    "EUNREACHABLE": ConnectError,
    "EREFUSED": ConnectError,
    "EDISCONNECTED": Disconnected,
    "ENOMODEL": UnknownModel,
    "EBADTENSOR": TensorError,
    "EBADSPAN": TensorError,
    "ETIMEDOUT": Timeout,
    "ERINGFULL": Busy,
    "ETOOMANY": Busy,
}

_BY_STATUS = {
    "UNKNOWN_MODEL": UnknownModel,
    "MODEL_UNLOADED": UnknownModel,
    "BAD_INPUT_SPAN": TensorError,
    "BAD_OUTPUT_SPAN": TensorError,
    "BAD_INPUT_LEN": TensorError,
    "OUTPUT_TOO_SMALL": TensorError,
    "BAD_BATCH": TensorError,
    "BAD_TENSOR_TABLE": TensorError,
    "BAD_TENSOR_LEN": TensorError,
    "DEADLINE_MISSED": DeadlineMissed,
}


def from_code(code: int, detail: str) -> SluiceError:
    """The error for a failed C call's return code."""
    name = CODE_NAMES.get(code, f"E{code}")
    return _BY_CODE.get(name, SluiceError)(name, detail, code=code)


def from_status(status: int, detail: str) -> SluiceError:
    """The error for a completion whose status is not OK."""
    name = STATUS_NAMES.get(status, f"STATUS_{status}")
    return _BY_STATUS.get(name, RequestFailed)(name, detail, status=status)
