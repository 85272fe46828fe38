"""A verifier that, like a CUDA one, cannot run in a forked copy of the process that made its device context.

CUDA refuses a forked child of a process that initialised it ("Cannot re-initialize CUDA in
forked subprocess"). Here the "context" is the pid that :func:`make_context` recorded: a fork
inherits the record and the verifier raises; a process that imported this module afresh (spawn,
forkserver) makes its own. :func:`fake_cuda` also makes ``torch.cuda.is_initialized()`` true in
the calling process (CPU torch: no device is touched). Imported by name (``tests/helpers`` is on pytest's path), so
a child started afresh imports it too.
"""

from __future__ import annotations

import os
from typing import Any

from specaudit.verifiers.reference import verify as _reference

#: The process that made the device context (None: not made yet).
CONTEXT_PID: int | None = None


def make_context() -> None:
    """Make the device context in this process."""
    global CONTEXT_PID
    CONTEXT_PID = os.getpid()


def verify(draft: Any, q: Any, p: Any, num_draft: Any, rng: Any) -> Any:
    """The reference verifier, in a process that made its own context (raises in a fork of one that did)."""
    if CONTEXT_PID is not None and CONTEXT_PID != os.getpid():
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess (the device context was made in "
                           f"process {CONTEXT_PID}, this is {os.getpid()})")
    if CONTEXT_PID is None:
        make_context()
    return _reference(draft, q, p, num_draft, rng)


def fake_cuda() -> None:
    """Make ``torch.cuda.is_initialized()`` true in this process (CPU torch: no device is touched)."""
    import torch

    torch.cuda.is_initialized = lambda: True
