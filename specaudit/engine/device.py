"""Device: which scenarios of a run are simulated on the verifier's torch device, and with what call.

A verifier whose adapter offers the tensor contract (:mod:`specaudit.contract.tensors`; the
``torch`` adapter does) can be driven without host copies: the simulator's device path
(:mod:`specaudit.simulate.device`) makes p, q and the drafts on the verifier's device and tallies
the outputs there. :func:`tensor_path` decides, per scenario, whether a run takes that path:

- ``--device cpu|cuda[:N]`` (``RunSettings.device``) asks for it; a verifier with a tensor form then
  runs on it (the torch adapter puts its tensors on the same device: ``--device`` is also its
  ``device`` option); a verifier without one (FlashInfer, per-row, vLLM adapters) gets its inputs
  on that device from the host, as before;
- without ``--device``, a tensor form on a GPU (``--adapter-arg device=cuda``) takes the device path:
  driving a CUDA verifier through the host is what the path exists to avoid; on the CPU the host
  path stays the default (its random stream is the documented one).

Everything else about the run is unchanged: the same blocks, seeds, supervision, guard (the
tensor call is guarded like the canonical one), checks, probes (through the canonical call, on the
host: small batches) and reports. Torch is imported only when a scenario takes the path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from specaudit.contract.guard import guarded
from specaudit.contract.tensors import TensorCall, tensor_call
from specaudit.engine.settings import RunSettings
from specaudit.errors import UsageError

__all__ = ["cuda_initialised", "device_run", "tensor_path"]


def cuda_initialised() -> bool:
    """Return True when this process has initialised CUDA (torch's state; torch is never imported just to ask).

    A CUDA context does not survive a fork: a forked copy of this process that touches CUDA fails
    ("Cannot re-initialize CUDA in forked subprocess"), so its children start by spawn or forkserver.
    """
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without CUDA support, or half imported: no context here
        return False


def device_run(settings: RunSettings) -> bool:
    """Return True when the run asks for a CUDA device (``--device cuda``, or the adapter's ``device`` option)."""
    named = [settings.device, (settings.adapter_options or {}).get("device")]
    return any(isinstance(d, str) and d.startswith("cuda") for d in named)


def _same(a: str, b: str) -> bool:
    """Return True when two device names name one device ('cuda' is 'cuda:0')."""
    return a.replace("cuda:0", "cuda") == b.replace("cuda:0", "cuda")


def tensor_path(verify: Callable[..., Any], spec: Any, settings: RunSettings, tag: int = -1) -> TensorCall | None:
    """Return the guarded tensor call a scenario is simulated with on the device, or None for the host path.

    ``tag``: the scenario's index in the run, written beside each call's start (:func:`guarded`).

    Raises UsageError when the device path is asked for a run it cannot serve (a CUDA device with
    ``--jobs`` > 1, a verifier whose tensors are on another device than ``--device``). Tree
    scenarios and the logits contract never get here: the tensor form takes the five arguments of
    the probs contract on chain scenarios, and binding refuses anything else.
    """
    call = tensor_call(verify)
    wanted = settings.device
    if getattr(spec, "mix", None) is not None:  # each request draws its class on the host (chains.serving)
        if wanted is not None:
            raise UsageError(
                f"--device {wanted}: scenario {spec.name!r} is a batch mix, which has no device form (each request "
                "draws its sampling class on the host); leave out --device to simulate it on the host"
            )
        return None
    if call is None:
        if wanted is not None and "device" not in (settings.adapter_options or {}):
            raise UsageError(
                f"device = {wanted!r}: the device path calls the verifier with torch tensors, and this target has no "
                "tensor form; drive a torch verifier with adapter 'torch' (--adapter torch), or leave out the device"
            )
        return None  # the device was the adapter's option: inputs are made on the host and copied there
    if wanted is None and call.device == "cpu":
        return None
    if wanted is not None and not _same(wanted, call.device):
        raise UsageError(f"device = {wanted!r}, but the adapter puts the verifier's tensors on {call.device!r}; "
                         "give one device (--device sets the torch adapter's device too)")
    where = f"scenario {spec.name!r}: --device {wanted or call.device}"
    if call.device.startswith("cuda") and settings.jobs > 1:
        raise UsageError(f"{where} runs its blocks in one process (a CUDA context does not survive a fork); "
                         "use --jobs 1")
    return TensorCall(guarded(call.call, settings.timeout, tag), call.device, call.dtype)
