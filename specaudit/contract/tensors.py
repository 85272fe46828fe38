"""The tensor contract: a canonical verifier that can also be called with torch tensors on its device.

The canonical contract (:mod:`specaudit.contract.chain`) hands a verifier numpy arrays; an adapter
for a torch verifier (``--adapter torch``) converts them and copies them to the verifier's device on
every call. A verifier that marks itself with :func:`mark` also offers a :class:`TensorCall`::

    call(draft[B,K] int64, q[B,K,V], p[B,K+1,V], num_draft[B] int64, rng) -> (out[B,K+1], n_out[B])

with every argument but ``rng`` a torch tensor already on ``device`` (``q``/``p`` in ``dtype``),
``rng`` the run's numpy Generator (as in the canonical contract), and ``out``/``n_out`` int64
tensors on the same device. The device path of the simulator (:mod:`specaudit.simulate.device`)
makes its inputs there and tallies its outputs there, so nothing of size V crosses the bus. The
output must satisfy every clause of the canonical contract; anything else is checked on the host
by :func:`specaudit.contract.chain.validate_output`, which names the broken clause.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["TENSORS", "TensorCall", "mark", "tensor_call"]

#: Attribute of a canonical verifier holding its :class:`TensorCall` (kept by ``contract.guard.guarded``).
TENSORS = "__specaudit_tensors__"


@dataclass(frozen=True)
class TensorCall:
    """How to call a verifier with tensors on its device.

    Attributes
    ----------
    call : callable
        ``call(draft, q, p, num_draft, rng) -> (out, n_out)`` on tensors (module docstring).
    device : str
        The torch device the tensors must be on (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
    dtype : str
        The floating dtype of ``q`` and ``p`` (a torch dtype name, e.g. ``"float32"``).
    """

    call: Callable[..., Any]
    device: str
    dtype: str


def mark(verify: Callable[..., Any], call: Callable[..., Any], device: str, dtype: str) -> Callable[..., Any]:
    """Attach the tensor form ``call`` (on ``device``, in ``dtype``) to the canonical ``verify``; return it."""
    setattr(verify, TENSORS, TensorCall(call, str(device), str(dtype)))
    return verify


def tensor_call(verify: Callable[..., Any]) -> TensorCall | None:
    """Return the :class:`TensorCall` of ``verify`` (or of a wrapper that kept its attributes), else None."""
    found = getattr(verify, TENSORS, None)
    return found if isinstance(found, TensorCall) else None
