"""The signals that stop a run (SIGINT, SIGTERM): raised as KeyboardInterrupt, or held back for a moment.

Light on purpose (the standard library only): the CLI installs :func:`stop_signals` before it
imports the engine, so a Ctrl-C or a SIGTERM at any moment of a run, its first imports included,
ends it as interrupted (exit 2, the JSON written) rather than by Python's default handlers.

Python runs a signal's handler in the main thread at the next bytecode, wherever that is. Two places
must not get a KeyboardInterrupt, so there the stop is kept pending and raised as soon as it may be:

- an import, the import system's own code (``<frozen importlib._bootstrap>``) or the module code it
  runs: raised between its taking the global import lock and the ``try`` that gives it back, it left
  the lock held, and the next import of another thread (the supervisor's warm-import thread) waited
  on it for ever; raised in its weak-reference callback, or in the ``abc.register`` a Cython module's
  init calls (numpy.random's), it was dropped there, and the run ended 0;
- a :func:`held` section, whichever thread the kernel gave the signal to (a thread started by a C
  library does not block it): the C handler of any thread makes the main thread run this one.

A stop that was raised where Python drops it (a ``__del__``, a weak-reference callback:
``sys.unraisablehook``) is delivered again, so no stop is lost.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["STOPS", "held", "stop", "stop_signals"]

#: The signals that stop a run.
STOPS = (signal.SIGINT, signal.SIGTERM)

#: How long a stop kept pending in the import system waits before it is delivered again.
_AGAIN_S = 0.01


class _State:
    """What the handler needs between signals: held sections open, the stop kept pending."""

    holding = 0
    pending: int | None = None


def _in_import(frame: FrameType | None) -> bool:
    """Return True when ``frame`` (the one a signal interrupted) or a caller of it is the import system's code."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _deliver_again(signum: int) -> None:
    """Send ``signum`` to the main thread in a moment, if it is still pending then (a thread that blocks the stops)."""
    main = threading.main_thread().ident

    def again() -> None:
        if _State.pending is not None and main is not None:
            signal.pthread_kill(main, signum)

    timer = threading.Timer(_AGAIN_S, again)
    timer.daemon = True
    timer.name = "specaudit-stop-again"
    timer.start()


def stop(signum: int, frame: Any) -> None:
    """Handle a stop signal: raise KeyboardInterrupt (as Python's SIGINT handler does, for SIGTERM too).

    Inside a :func:`held` section the stop is kept for its end; inside an import it is delivered
    again every moment until the import is over.
    """
    if _State.holding:
        _State.pending = signum
        return
    if _in_import(frame):
        _State.pending = signum
        _deliver_again(signum)
        return
    _State.pending = None
    raise KeyboardInterrupt


def _unraisable(previous: Any) -> Any:
    """Return a ``sys.unraisablehook`` that delivers again a stop Python dropped, then reports as ``previous``."""

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is stop:
            _State.pending = int(signal.SIGINT)
            _deliver_again(signal.SIGINT)
            return
        previous(unraisable)

    return hook


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Make SIGINT and SIGTERM raise KeyboardInterrupt here (the run stops, keeping what is finished).

    Main thread only (elsewhere the signals keep their handlers). A stop Python drops (raised in a
    ``__del__`` or a weak-reference callback) is delivered again.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, stop) for s in STOPS}
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(hook)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = hook
        _State.pending = None


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for the block, then let them in (a stop that came raises at its end).

    The supervisor forks and ends its children inside it: a stop that raised between the fork and
    the ``try`` that ends the child (the verifier signalled its parent at its first call, a Ctrl-C
    0.3 s into a run) left that child alive, and the exit waited for it in ``waitpid``. Blocked in
    this thread (``signal.pthread_sigmask``), so a thread or child started inside begins with them
    blocked (a forked child must let them in itself), and kept by the handler whichever thread got it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    _State.holding += 1
    try:
        yield
    finally:
        _State.holding -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a stop kept by the kernel runs the handler here
        if not _State.holding and _State.pending is not None and signal.getsignal(_State.pending) is stop:
            _State.pending = None
            raise KeyboardInterrupt
