"""Loads in the first process that imports it, raises in any later one; ends its process on vocabulary 8.

The file named by SPECAUDIT_HOSTILE_FIRST holds the pid of the first importer (tests/test_hostile.py).
"""

import os

from specaudit.verifiers.reference import verify as _reference

_FIRST = os.environ["SPECAUDIT_HOSTILE_FIRST"]
if not os.path.exists(_FIRST):
    with open(_FIRST, "w") as fh:
        fh.write(str(os.getpid()))
elif open(_FIRST).read() != str(os.getpid()):
    raise RuntimeError("this module loads once")


def verify(draft, q, p, num_draft, rng):
    if p.shape[-1] == 8:
        os._exit(7)
    return _reference(draft, q, p, num_draft, rng)
