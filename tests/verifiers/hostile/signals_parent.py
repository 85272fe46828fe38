"""A verifier that signals its parent (the run's supervisor) at one of its calls; the reference otherwise.

``SPECAUDIT_SIGNAL`` is ``NAME@CALL``: send signal NAME (SIGTERM, SIGINT) to ``os.getppid()`` at
call number CALL (1 the first; 0 every call). ``SPECAUDIT_SLEEP`` seconds are slept in every call
(a run that lasts). The process making the calls writes its pid to ``SPECAUDIT_HOSTILE_PIDS``,
so a test can check that none is left behind.
"""

import os
import signal
import time

from specaudit.verifiers.reference import verify as _reference

_name, _, _at = os.environ.get("SPECAUDIT_SIGNAL", "SIGTERM@-1").partition("@")
_SIGNAL, _AT = getattr(signal, _name), int(_at)
_SLEEP = float(os.environ.get("SPECAUDIT_SLEEP", "0"))
_calls = 0


def verify(draft, q, p, num_draft, rng):
    global _calls
    _calls += 1
    if _calls == 1 and os.environ.get("SPECAUDIT_HOSTILE_PIDS"):
        with open(os.environ["SPECAUDIT_HOSTILE_PIDS"], "a") as fh:
            fh.write(f"{os.getpid()}\n")
    if _calls == _AT or _AT == 0:
        os.kill(os.getppid(), _SIGNAL)
    time.sleep(_SLEEP)
    return _reference(draft, q, p, num_draft, rng)
