"""Count host <-> device transfers of torch tensors: what the device path promises not to do.

:func:`count_transfers` patches, for the duration of a ``with`` block, every way a tensor's data
crosses between numpy (the host) and torch or between torch devices: ``torch.from_numpy``,
``torch.as_tensor`` / ``torch.tensor`` of an array or of a tensor on another device,
``Tensor.numpy``, ``Tensor.cpu`` and ``Tensor.cuda`` off their device, ``Tensor.to`` another
device, ``Tensor.tolist``. On a CPU-only machine a "transfer" is therefore a conversion between
numpy and torch (the host path's ``to_torch`` of ``p`` and ``q``; on a GPU the same call is the copy
over the bus), which is how tests/simulate/test_device.py and ``benchmarks/device.py`` check the
device path on CPU torch. Data moved by torch internally (the size of ``nonzero``, ``bool(t)`` of
a one-element tensor) is a scalar sync, not counted.

A transfer is *p/q-shaped* when it carries floating data ``[..., K or K+1, V]`` (3-D, last
dimension the vocabulary): the payload of a verify call. :meth:`Transfers.payload` counts them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["Transfer", "Transfers", "count_transfers"]

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Transfer:
    """One crossing: how (``what``), the shape and whether the data is floating."""

    what: str
    shape: tuple[int, ...]
    floating: bool


@dataclass
class Transfers:
    """The crossings seen inside one :func:`count_transfers` block."""

    seen: list[Transfer] = field(default_factory=list)

    def payload(self, vocab: int) -> int:
        """Return how many crossings were p/q-shaped (3-D floating, last dimension ``vocab``)."""
        return sum(1 for t in self.seen if t.floating and len(t.shape) == 3 and t.shape[-1] == vocab)

    def __len__(self) -> int:
        return len(self.seen)


def _floating(dtype: Any) -> bool:
    if isinstance(dtype, torch.dtype):
        return dtype.is_floating_point
    return bool(np.issubdtype(np.dtype(dtype), np.floating))


@contextlib.contextmanager
def count_transfers() -> Iterator[Transfers]:
    """Record every host <-> device crossing of tensor data inside the block (module docstring)."""
    found = Transfers()
    T = torch.Tensor
    originals = {
        "from_numpy": torch.from_numpy, "as_tensor": torch.as_tensor, "tensor": torch.tensor,
        "numpy": T.numpy, "cpu": T.cpu, "cuda": T.cuda, "to": T.to, "tolist": T.tolist,
    }

    def note(what: str, data: Any) -> None:
        found.seen.append(Transfer(what, tuple(data.shape), _floating(data.dtype)))

    def from_numpy(a: Any) -> Any:
        note("from_numpy", a)
        return originals["from_numpy"](a)

    def as_tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
        out = originals["as_tensor"](data, *args, **kwargs)
        if isinstance(data, np.ndarray) or (isinstance(data, torch.Tensor) and data.device != out.device):
            note("as_tensor", data)
        return out

    def tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, np.ndarray):
            note("tensor", data)
        return originals["tensor"](data, *args, **kwargs)

    def numpy(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        note("numpy", self)
        return originals["numpy"](self, *args, **kwargs)

    def cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if self.device.type != "cpu":
            note("cpu", self)
        return originals["cpu"](self, *args, **kwargs)

    def cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        note("cuda", self)
        return originals["cuda"](self, *args, **kwargs)

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = originals["to"](self, *args, **kwargs)
        if out.device != self.device:
            note("to", self)
        return out

    def tolist(self: torch.Tensor) -> Any:
        note("tolist", self)
        return originals["tolist"](self)

    with _LOCK:
        torch.from_numpy, torch.as_tensor, torch.tensor = from_numpy, as_tensor, tensor
        T.numpy, T.cpu, T.cuda, T.to, T.tolist = numpy, cpu, cuda, to, tolist
        try:
            yield found
        finally:
            torch.from_numpy, torch.as_tensor, torch.tensor = (
                originals["from_numpy"], originals["as_tensor"], originals["tensor"])
            T.numpy, T.cpu, T.cuda, T.to, T.tolist = (
                originals["numpy"], originals["cpu"], originals["cuda"], originals["to"], originals["tolist"])
