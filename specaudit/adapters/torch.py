"""The canonical contract on torch tensors: ``--adapter torch``.

The target is called as ``verify(draft, q, p, num_draft, generator)`` with torch tensors on
``device`` (``draft``/``num_draft`` int64, ``q``/``p`` in ``dtype``) and a ``torch.Generator``
on that device seeded from the harness rng on every call (so a run is reproducible from its
seed); it returns ``(out, n_out)`` as tensors (or arrays), which are checked like any verifier's.
The verifier built here also offers the tensor contract (:mod:`specaudit.contract.tensors`): with
``--device`` (or ``device=cuda``) a run makes q and p on that device and calls the target without
any host copy (:mod:`specaudit.simulate.device`).
The call runs under :func:`specaudit.adapters.randomness.routed`: torch's global generator, numpy's
legacy global RNG and Python's ``random`` are seeded from the run's rng too, and under a scripted rng
every such draw is scripted instead (a draw from the explicit generator is then named as a bypass,
:func:`specaudit.adapters.randomness.watched`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.adapters import DEVICE, DTYPE, Adapter
from specaudit.adapters.randomness import routed, watched
from specaudit.contract import tensors
from specaudit.errors import UsageError

#: Attribute of a canonical verifier whose target takes p as logits and softmaxes them itself in float32
#: (vLLM >= 0.16): p reaches its acceptance step rounded, and the probes judge p = q within that rounding.
LOGITS_INPUT = "__specaudit_logits_input__"


def mark_logits_input(verify: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``verify`` as handing its target ``log p`` (softmaxed inside, in float32); return it."""
    setattr(verify, LOGITS_INPUT, True)
    return verify


def takes_logits(verify: Callable[..., Any]) -> bool:
    """Return True when ``verify`` (or a wrapper that kept its attributes) is marked by :func:`mark_logits_input`."""
    return bool(getattr(verify, LOGITS_INPUT, False))


def torch_dtype(name: str) -> Any:
    """Return the torch dtype called ``name`` (float64, float32, float16, bfloat16)."""
    import torch

    return getattr(torch, name)


def check_device(device: str) -> None:
    """Raise UsageError when ``device`` is not usable by the installed torch."""
    import torch

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"device {device!r}: torch {torch.__version__} sees no CUDA device; use --device cpu")


def to_torch(array: np.ndarray, device: str, dtype: Any = None) -> Any:
    """Return ``array`` as a tensor on ``device`` (shares memory on the CPU when no cast is needed)."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(array))
    return t.to(device=device, dtype=dtype) if dtype is not None or device != "cpu" else t


def to_numpy(x: Any) -> Any:
    """Return a tensor as a numpy array on the host; anything else unchanged (the contract checks it)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        return x.detach().cpu().numpy()
    return x


def build(target: Callable[..., Any], device: str = "cpu", dtype: str = "float64") -> Callable[..., Any]:
    """Return the canonical verifier that calls the torch-contract ``target``."""
    import torch

    check_device(device)
    fdt = torch_dtype(dtype)

    def on_device(draft: Any, q: Any, p: Any, num_draft: Any, rng: Any) -> Any:
        """Call ``target`` on tensors already on ``device`` (the tensor contract); return what it returns."""
        with torch.inference_mode(), routed(rng, device) as seed:
            generator = torch.Generator(device=device)
            generator.manual_seed(seed)
            with watched(rng, generator):  # scripted: a draw from it bypassed the script (compiled code)
                return target(draft, q, p, num_draft, generator)

    def verify(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, rng: Any) -> Any:
        result = on_device(to_torch(draft, device), to_torch(q, device, fdt), to_torch(p, device, fdt),
                           to_torch(num_draft, device), rng)
        if isinstance(result, (tuple, list)) and len(result) == 2:
            return to_numpy(result[0]), to_numpy(result[1])
        return result

    # the device path (specaudit.simulate.device) makes q and p on `device` and calls on_device directly
    return tensors.mark(verify, on_device, device, dtype)


ADAPTER = Adapter(
    "torch",
    "canonical contract on torch tensors, with a torch.Generator seeded from the run seed",
    build,
    options=(DEVICE, DTYPE),
    requires=("torch",),
    extra="torch",
)
