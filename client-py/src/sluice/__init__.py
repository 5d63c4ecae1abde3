"""Python client of sluiced, over libsluice_client (the C library, by ctypes).

    import numpy as np, sluice
    with sluice.connect() as client:
        model = client.model("typed")
        out = model.infer({"image": np.zeros((2, 3, 8, 8), np.float32),
                           "offset": np.zeros((2, 10), np.float32)})

docs/python.md in the sluice repository has the whole API.
"""

from ._client import Client, Model, Request, Tensor, check_inputs, connect
from ._lib import library_path
from .errors import (
    Busy,
    ConnectError,
    DeadlineMissed,
    Disconnected,
    LibraryNotFound,
    RequestFailed,
    SluiceError,
    TensorError,
    Timeout,
    UnknownModel,
)

RT = "rt"
BE = "be"

__version__ = "0.1.0"

__all__ = [
    "BE",
    "RT",
    "Busy",
    "Client",
    "ConnectError",
    "DeadlineMissed",
    "Disconnected",
    "LibraryNotFound",
    "Model",
    "Request",
    "RequestFailed",
    "SluiceError",
    "Tensor",
    "TensorError",
    "Timeout",
    "UnknownModel",
    "check_inputs",
    "connect",
    "library_path",
]
