"""Calling a verifier safely: its exceptions become VerifierCrash with the user's frames, a call
past ``--timeout`` becomes VerifierTimeout (SIGALRM, re-fired if swallowed).

Every call the harness makes into user code (chain, logits and tree contracts alike) goes through
`guarded`, so a crash or a hang in a verifier is reported as the verifier's fault, with the user's
own traceback frames and where a timed-out call was stopped, and never as an internal error.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.signal without the enum wrapping of signal.py (~10 us a call)
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar, cast

from specaudit.errors import ContractError, VerifierCrash, VerifierTimeout

#: A verifier of any contract (chain, logits, tree): `guarded` returns the same kind of callable.
_Call = TypeVar("_Call", bound=Callable[..., Any])

#: Files of specaudit's own harness, left out of the user's traceback.
HARNESS = (
    "specaudit/contract/guard.py",
    "specaudit/simulate/chain.py",
    "specaudit/engine/run.py",
    "specaudit/engine/scenario.py",
    "specaudit/checks/probes.py",
)


def _user_frames(exc: BaseException) -> str:
    """Format ``exc`` keeping only frames outside specaudit's harness (the user's code)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith(HARNESS)]
    return "".join(traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)).rstrip()


#: Default per-call limit of ``specaudit run --timeout``, seconds.
DEFAULT_TIMEOUT = 60.0


def _can_alarm() -> bool:
    """Return True when SIGALRM can interrupt a call here (POSIX, main thread)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _stopped_at(where: str) -> str:
    """Return 'file:line in func' of the innermost user frame in a formatted traceback, or ''."""
    found = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', where)
    return f" at {found[-1][0]}:{found[-1][1]} in {found[-1][2]}" if found else ""


def guarded(verify: _Call, timeout: float | None = None) -> _Call:
    """Wrap ``verify`` so that anything it raises becomes a VerifierCrash carrying the user's frames.

    With ``timeout`` (seconds, > 0) a call that runs longer is stopped with VerifierTimeout: a
    SIGALRM timer (``setitimer``) raises inside the verifier, re-firing every second in case the
    verifier swallows the exception; a call that swallowed it and returned late still times out.
    Limitations: the timer works only in the main thread of a POSIX process (elsewhere calls run
    unguarded by time, with no error), and a call stuck inside C code that never returns to the
    interpreter (a blocking kernel sync, a long C loop) is stopped only when it next does;
    ``time.sleep`` and Python loops stop at once.
    """

    def crash(exc: Exception) -> VerifierCrash | ContractError:
        if isinstance(exc, ContractError):  # an adapter found a layout breach (specaudit.adapters)
            return exc
        return VerifierCrash(f"the verifier raised {type(exc).__name__}: {exc}", _user_frames(exc))

    if timeout is None or timeout <= 0:

        def call(*args: Any) -> Any:  # any contract's arguments (specaudit.contract.logits, .tree)
            try:
                return verify(*args)
            except Exception as exc:  # the user's code may raise anything
                raise crash(exc) from exc

        return cast(_Call, call)

    alarm = int(signal.SIGALRM)

    def late(where: str = "") -> VerifierTimeout:
        return VerifierTimeout(
            f"the verifier call did not return within {timeout:g} s (--timeout {timeout:g}); "
            f"it was stopped{_stopped_at(where)}",
            where,
        )

    def timed(*args: Any) -> Any:
        if not _can_alarm():
            return call_plain(*args)
        armed = [True]
        fired = [False]

        def on_alarm(signum: int, frame: Any) -> None:
            if armed[0]:
                fired[0] = True
                raise VerifierTimeout("timeout")

        previous = _signal.signal(alarm, on_alarm)
        outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, timeout, 1.0)
        t0 = time.monotonic()
        try:
            try:
                result = verify(*args)
            finally:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except VerifierTimeout as exc:
            raise late(_user_frames(exc)) from None
        except Exception as exc:  # the user's code may raise anything
            if fired[0]:  # the verifier caught our timeout and raised something else
                raise late(_user_frames(exc)) from None
            raise crash(exc) from exc
        finally:
            _signal.signal(alarm, previous)
            if outer_delay > 0:  # someone else's timer (e.g. pytest-timeout): put it back
                signal.setitimer(signal.ITIMER_REAL, max(outer_delay - (time.monotonic() - t0), 1e-3), outer_interval)
        if fired[0]:  # it swallowed the timeout and returned late
            raise late()
        return result

    def call_plain(*args: Any) -> Any:
        try:
            return verify(*args)
        except Exception as exc:  # the user's code may raise anything
            raise crash(exc) from exc

    return cast(_Call, timed)
