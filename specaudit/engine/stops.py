"""The signals that stop a run (SIGINT, SIGTERM): raised as KeyboardInterrupt, or held back for a moment.

Light on purpose (the standard library only): the CLI installs :func:`stop_signals` before it
imports the engine, so a Ctrl-C or a SIGTERM at any moment of a run, its first imports included,
ends it as interrupted (exit 2, the JSON written) rather than by Python's default handlers.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["STOPS", "held", "stop", "stop_signals"]

#: The signals that stop a run.
STOPS = (signal.SIGINT, signal.SIGTERM)


def stop(signum: int, frame: Any) -> None:
    """Handle a stop signal: raise KeyboardInterrupt (as Python's SIGINT handler does, for SIGTERM too)."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Make SIGINT and SIGTERM raise KeyboardInterrupt here (the run stops, keeping what is finished).

    Main thread only (elsewhere the signals keep their handlers).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, stop) for s in STOPS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back (blocked, kept pending) for the block, then let them in.

    The supervisor forks and ends its children inside it: a stop that raised between the fork and
    the ``try`` that ends the child (the verifier signalled its parent at its first call, a Ctrl-C
    0.3 s into a run) left that child alive, and the exit waited for it in ``waitpid``. A child
    forked inside starts with them blocked and must let them in itself (``signal.pthread_sigmask``).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
