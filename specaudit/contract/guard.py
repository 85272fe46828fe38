"""Calling a verifier safely: its exceptions become VerifierCrash with the user's frames, a call
past ``--timeout`` becomes VerifierTimeout (SIGALRM, re-fired if swallowed).
"""

from __future__ import annotations

from specaudit.contract.chain import Verifier
from specaudit.errors import ContractError

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
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith(HARNESS)]
    return "".join(traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)).rstrip()


#: Default per-call limit of ``specaudit run --timeout``, seconds.
DEFAULT_TIMEOUT = 60.0


def _can_alarm() -> bool:
    """Return True when SIGALRM can interrupt a call here (POSIX, main thread)."""
    import signal
    import threading

    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _stopped_at(where: str) -> str:
    """Return 'file:line in func' of the innermost user frame in a formatted traceback, or ''."""
    import re

    found = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', where)
    return f" at {found[-1][0]}:{found[-1][1]} in {found[-1][2]}" if found else ""


def guarded(verify: Verifier, timeout: float | None = None) -> Verifier:
    """Wrap ``verify`` so that anything it raises becomes a VerifierCrash carrying the user's frames.

    With ``timeout`` (seconds, > 0) a call that runs longer is stopped with VerifierTimeout: a
    SIGALRM timer (``setitimer``) raises inside the verifier, re-firing every second in case the
    verifier swallows the exception; a call that swallowed it and returned late still times out.
    Limitations: the timer works only in the main thread of a POSIX process (elsewhere calls run
    unguarded by time, with no error), and a call stuck inside C code that never returns to the
    interpreter (a blocking kernel sync, a long C loop) is stopped only when it next does;
    ``time.sleep`` and Python loops stop at once.
    """
    from specaudit.errors import VerifierCrash, VerifierTimeout

    def crash(exc: Exception) -> VerifierCrash | ContractError:
        if isinstance(exc, ContractError):  # an adapter found a layout breach (specaudit.adapters)
            return exc
        return VerifierCrash(f"the verifier raised {type(exc).__name__}: {exc}", _user_frames(exc))

    if timeout is None or timeout <= 0:

        def call(*args):  # type: ignore[no-untyped-def] - any contract's arguments (specaudit.contract.logits)
            try:
                return verify(*args)
            except Exception as exc:  # noqa: BLE001 - the user's code may raise anything
                raise crash(exc) from exc

        return call

    import _signal  # signal.signal without the enum wrapping of signal.py (~10 us a call)
    import signal
    import time

    alarm = int(signal.SIGALRM)

    def late(where: str = "") -> VerifierTimeout:
        return VerifierTimeout(
            f"the verifier call did not return within {timeout:g} s (--timeout {timeout:g}); "
            f"it was stopped{_stopped_at(where)}",
            where,
        )

    def timed(*args):  # type: ignore[no-untyped-def]
        if not _can_alarm():
            return call_plain(*args)
        armed = [True]
        fired = [False]

        def on_alarm(signum, frame):  # type: ignore[no-untyped-def]
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
        except Exception as exc:  # noqa: BLE001
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

    def call_plain(*args):  # type: ignore[no-untyped-def]
        try:
            return verify(*args)
        except Exception as exc:  # noqa: BLE001
            raise crash(exc) from exc

    return timed
