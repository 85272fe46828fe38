"""Compiled hot path of the simulator for tabular chains (C extension ``specaudit.simulate._kernels``).

The simulator's numpy code (:class:`specaudit.simulate.chain._Joint`) costs a handful of whole-array
passes per verify call; two C loops (``_kernels.c``) do the same work in one pass per
row:

- ``begin`` draws each row's K drafts by Walker alias over whole m-token paths and writes the
  drafts, the joint states and the verifier's ``p`` and ``q`` (whole-path rows when m = K and no
  row is padded, per-state rows with the padding garbage otherwise);
- ``end`` checks the verifier's output against the contract in one pass, appends the tokens,
  advances the joint states, counts accept lengths, round and token moments and the whole-
  sequence histogram, and refills or compacts finished rows.

They take the same uniforms and garbage draws from the same generator calls and apply the same
float64 arithmetic, so sequences, counts and statistics are identical with and without them
(tests/simulate/test_kernels.py compares them). The extension is built by ``pip install`` when a C
compiler is there (it is optional: without one the install goes on and the numpy code runs);
``SPECAUDIT_NO_KERNELS=1`` also selects the numpy code. After editing ``_kernels.c``, run
``pip install -e .`` again to rebuild it.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

#: Set to 1 to run the numpy simulator even when the extension is built.
SWITCH = "SPECAUDIT_NO_KERNELS"


@functools.cache
def load() -> ModuleType | None:
    """Return the compiled kernels (``begin``, ``end``), or None when not built or switched off."""
    if os.environ.get(SWITCH, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("specaudit.simulate._kernels")
    except ImportError:
        return None
