"""Calling a verifier safely: anything it raises becomes VerifierCrash with the user's frames, a call
past ``--timeout`` becomes VerifierTimeout (SIGALRM, re-fired if swallowed).

Every call the harness makes into user code (chain, logits and tree contracts alike) goes through
`guarded`, so a crash or a hang in a verifier is reported as the verifier's fault, with the user's
own traceback frames and where a timed-out call was stopped, and never as an internal error.
Whatever the verifier raises is its own fault, BaseException included: ``sys.exit(0)`` (SystemExit),
GeneratorExit, and a KeyboardInterrupt it raises itself; only a real SIGINT (the flag
:func:`user_interrupted`, set by the handler :func:`catch_interrupts` installs) goes through as the
user's Ctrl-C.

What Python cannot catch (``os._exit``, a segfault, a loop that swallows every exception past
the timeout) is contained one level up, by the supervisor (:mod:`specaudit.engine.supervisor`):
:func:`watch` gives a process a slot of a shared-memory clock, in which every timed call writes
its start time (0.0 when it returns), so the supervisor can kill a call that outlives
``timeout + grace`` without a message per call.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.signal without the enum wrapping of signal.py (~10 us a call)
import contextlib
import multiprocessing as mp
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import numpy as np

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
    "specaudit/checks/tree_probes.py",
)


#: Seconds past ``--timeout`` after which a call that swallowed its timeout is ended with its process.
GRACE = 2.0

#: Set by the SIGINT handler of :func:`catch_interrupts`: a KeyboardInterrupt is the user's only then.
_SIGINT = [False]

#: ``(pid, stamps, slot, board)`` of :func:`watch`: where this process's timed calls write their start time.
_WATCH: list[Any] = [0, None, 0, None]


class Board:
    """Shared memory a supervisor reads without messages: per slot, the start of the running call, its pid and its scenario.

    Slot 0 is the supervised process itself; forked block workers (``--jobs N``) claim slots
    1.. (:func:`claim`). A stamp is ``time.monotonic()`` at the start of a timed call, minus the
    time its last call ended while none runs, 0.0 before the first; ``monotonic`` is one
    system-wide clock on Linux, so the parent can read it. ``scenarios[slot]`` is the ``tag`` of
    the last call's :func:`guarded` wrapper (the run's index of its scenario; -1 untagged): with
    several scenarios in flight it tells which one a call past the timeout belongs to.
    """

    def __init__(self, slots: int):
        ctx = mp.get_context("fork")
        self.stamps: Any = ctx.Array("d", slots, lock=False)
        self.pids: Any = ctx.Array("i", slots, lock=False)
        self.scenarios: Any = ctx.Array("i", [-1] * slots, lock=False)
        self.next: Any = ctx.Value("i", 1)

    def __getstate__(self) -> dict[str, Any]:
        """Return the shared arrays, for a supervised child started by spawn or forkserver (multiprocessing passes them on).

        The slot counter is left out: only the workers the child forks claim slots, so the child
        makes its own (a lock of a fork context cannot travel to a spawned process).
        """
        return {"stamps": self.stamps, "pids": self.pids, "scenarios": self.scenarios}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Take the shared arrays in the child and make its own slot counter."""
        self.__dict__.update(state)
        self.next = mp.get_context("fork").Value("i", 1)

    def reset(self) -> None:
        """Free the worker slots (a new pool of workers will claim them)."""
        with self.next.get_lock():
            self.next.value = 1
        for slot in range(1, len(self.stamps)):
            self.stamps[slot] = 0.0
            self.pids[slot] = 0
            self.scenarios[slot] = -1


def board() -> Board | None:
    """Return the board this process writes to, if it is watched."""
    return cast("Board | None", _WATCH[3])


def _watched() -> tuple[int, Any, int, Any]:
    """Return ``(pid, stamps, slot, scenarios)`` of this process's clock slot (stamps None when unwatched).

    A function, not the global itself, in the wrapper of `guarded`: the wrapper is pickled by
    value (``--backend ray`` ships it), and a module function travels by reference where the
    shared-memory board cannot travel at all.
    """
    return _WATCH[0], _WATCH[1], _WATCH[2], None if _WATCH[3] is None else _WATCH[3].scenarios


def claim() -> None:
    """In a forked worker: take the next free slot of the inherited board (or stop watching if none is free)."""
    shared = board()
    if shared is None:
        return
    with shared.next.get_lock():
        slot = shared.next.value
        shared.next.value += 1
    watch(shared if slot < len(shared.stamps) else None, slot)


#: How a timeout message says to give a slow (not hung) verifier room (issue 16: an interpreted kernel).
SLOW_HINT = "if it is slow rather than stuck, raise the limit with --timeout S (0: no limit) or pass fewer rows per call with --batch N"


def overdue(timeout: float, seconds: float) -> str:
    """Return what a call that outlived ``timeout + GRACE`` and was killed with its process did."""
    return (f"the verifier call did not return within {timeout:g} s (--timeout {timeout:g}) and did not stop when "
            f"told to (it swallows the timeout); its process was killed after {seconds:.1f} s; {SLOW_HINT}")


@contextlib.contextmanager
def watchdog(timeout: float | None, on_overdue: Callable[[str, str], None]) -> Iterator[None]:
    """End this process when a timed call outlives ``timeout + GRACE``, where no supervisor watches it.

    For processes the supervisor does not own (``--backend ray`` workers): a thread reads this
    process's own clock slot; past the limit it calls ``on_overdue(message, stack)`` (``stack``:
    where the main thread is stuck) and ends the process with ``os._exit`` (what the verifier
    cannot catch). With no timeout it only runs the body.
    """
    if not timeout or timeout <= 0 or _WATCH[1] is not None or not _can_alarm():
        yield
        return
    shared = Board(1)
    watch(shared)
    done = threading.Event()
    main = threading.main_thread().ident

    def look() -> None:
        while not done.wait(0.1):
            start = shared.stamps[0]
            if start > 0 and time.monotonic() - start > timeout + GRACE:
                frame = sys._current_frames().get(main or 0)
                stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
                try:
                    on_overdue(overdue(timeout, time.monotonic() - start), stack)
                finally:
                    os._exit(70)

    thread = threading.Thread(target=look, name="specaudit-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        watch(None)


def user_interrupted() -> bool:
    """Return True when a real SIGINT arrived (a KeyboardInterrupt without one is the verifier's)."""
    return _SIGINT[0]


@contextlib.contextmanager
def catch_interrupts() -> Iterator[None]:
    """Install a SIGINT handler that marks the interrupt as the user's, then raises KeyboardInterrupt.

    Main thread only (elsewhere a no-op): it lets `guarded` tell the user's Ctrl-C from a
    KeyboardInterrupt the verifier raises itself.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        _SIGINT[0] = True
        raise KeyboardInterrupt

    _SIGINT[0] = False
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def watch(shared: Board | None, slot: int = 0) -> None:
    """Make this process's timed calls write their start time to ``shared.stamps[slot]`` (0.0 when done).

    ``None`` stops watching. A copy of the process made by the verifier (``os.fork`` inside a
    call) is told apart by its pid and leaves quietly when the call returns.
    """
    if shared is None:
        _WATCH[:] = [0, None, 0, None]
        return
    _WATCH[:] = [os.getpid(), shared.stamps, slot, shared]
    shared.stamps[slot] = 0.0
    shared.pids[slot] = os.getpid()


def describe_exit(exc: BaseException) -> str:
    """Return what a BaseException that is not an Exception says the verifier did."""
    if isinstance(exc, SystemExit):
        code = exc.code
        return f"the verifier called sys.exit({'' if code is None else repr(code)})"
    if isinstance(exc, KeyboardInterrupt):
        return "the verifier raised KeyboardInterrupt itself (no Ctrl-C was pressed)"
    return raised(exc)


def raised(exc: BaseException) -> str:
    """Return 'the verifier raised ValueError: its message' (no ': ' after an empty one).

    The message is the exception's ``str``, which is the verifier's code too: one that raises is named, not followed.
    """
    try:
        text = str(exc)
    except BaseException as inner:  # noqa: BLE001 - its __str__ may raise anything
        text = f"(its __str__ raised {type(inner).__name__})"
    return f"the verifier raised {type(exc).__name__}" + (f": {text}" if text else "")


def _user_frames(exc: BaseException) -> str:
    """Format ``exc`` keeping only frames outside specaudit's harness (the user's code)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith(HARNESS)]
    return "".join(traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)).rstrip()


def _markers(verify: Any) -> dict[str, Any]:
    """Return the ``__specaudit*`` attributes an adapter set on ``verify`` (e.g. adapters.torch.LOGITS_INPUT), kept by guarded."""
    return {k: v for k, v in getattr(verify, "__dict__", {}).items() if k.startswith("__specaudit")}


#: Default per-call limit of ``specaudit run --timeout``, seconds.
DEFAULT_TIMEOUT = 60.0


def _can_alarm() -> bool:
    """Return True when SIGALRM can interrupt a call here (POSIX, main thread)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _stopped_at(where: str) -> str:
    """Return 'file:line in func' of the innermost user frame in a formatted traceback, or ''."""
    found = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', where)
    return f" at {found[-1][0]}:{found[-1][1]} in {found[-1][2]}" if found else ""


def _is_tensor(value: Any) -> bool:
    """Return True for a torch tensor (left as it is: the device path reads its own, on its device)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


#: Item types whose reading runs no user code (the validators convert them): builtins and numpy scalars.
_PLAIN = (list, tuple, int, float, complex, bool, str, bytes, type(None), np.ndarray, np.generic)


def _read_item(value: Any) -> Any:
    """Return ``value`` as an ndarray when it is an object of another type (reading it runs its own code:
    ``__array__``, ``__len__``, ``__getitem__``); builtins, ndarrays and torch tensors as they are."""
    if isinstance(value, _PLAIN) or _is_tensor(value):
        return value
    return np.asarray(value)


def read_return(result: Any) -> Any:
    """Return a verifier's return value with every piece of user code that reading it runs already run.

    A tuple, list or dict (of any subclass) becomes a plain one, so its ``__iter__``/``__len__`` run
    here; an item of any other type than a builtin, an ndarray or a torch tensor becomes an ndarray. Called
    inside the guarded call, so what that code raises, how long it takes and ``sys.exit`` in it are
    the verifier's, under ``--timeout``, and nothing of it runs in the checks.
    """
    try:
        if isinstance(result, dict):
            return {key: _read_item(value) for key, value in dict(result).items()}
        if isinstance(result, tuple):
            return tuple(_read_item(value) for value in tuple(result))
        if isinstance(result, list):
            return [_read_item(value) for value in list(result)]
        return result
    except VerifierTimeout:
        raise
    except BaseException as exc:  # the return value's own code may raise anything, sys.exit included
        if isinstance(exc, KeyboardInterrupt) and _SIGINT[0]:  # the user's Ctrl-C
            raise
        what = describe_exit(exc) if not isinstance(exc, Exception) else raised(exc)
        raise VerifierCrash(f"reading the verifier's return value ({type(result).__name__}): "
                            f"{what.replace('the verifier ', 'its code ', 1)}", _user_frames(exc)) from exc


def guarded(verify: _Call, timeout: float | None = None, tag: int = -1) -> _Call:
    """Wrap ``verify`` so that anything it raises becomes a VerifierCrash carrying the user's frames.

    With ``timeout`` (seconds, > 0) a call that runs longer is stopped with VerifierTimeout: a
    SIGALRM timer (``setitimer``) raises inside the verifier, re-firing every second in case the
    verifier swallows the exception; a call that swallowed it and returned late still times out.
    Limitations: the timer works only in the main thread of a POSIX process (elsewhere calls run
    unguarded by time, with no error), and a call stuck inside C code that never returns to the
    interpreter (a blocking kernel sync, a long C loop) is stopped only when it next does;
    ``time.sleep`` and Python loops stop at once. A watched process writes ``tag`` beside each
    timed call's start time (:class:`Board`).
    """

    def crash(exc: BaseException) -> VerifierCrash | ContractError:
        if isinstance(exc, (ContractError, VerifierCrash)):  # an adapter's layout breach; an unreadable return
            return exc
        if isinstance(exc, KeyboardInterrupt) and _SIGINT[0]:  # the user's Ctrl-C: not the verifier's fault
            raise exc
        if not isinstance(exc, Exception):  # sys.exit(), GeneratorExit, its own KeyboardInterrupt
            return VerifierCrash(describe_exit(exc), _user_frames(exc))
        return VerifierCrash(raised(exc), _user_frames(exc))

    if timeout is None or timeout <= 0:

        def call(*args: Any) -> Any:  # any contract's arguments (specaudit.contract.logits, .tree)
            try:
                return read_return(verify(*args))
            except BaseException as exc:  # the user's code may raise anything, sys.exit included
                raise crash(exc) from exc

        call.__dict__.update(_markers(verify))
        return cast(_Call, call)

    alarm = int(signal.SIGALRM)

    def late(where: str = "") -> VerifierTimeout:
        return VerifierTimeout(
            f"the verifier call did not return within {timeout:g} s (--timeout {timeout:g}); "
            f"it was stopped{_stopped_at(where)}; {SLOW_HINT}",
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
        pid, stamps, slot, scenarios = _watched()
        if stamps is not None:
            scenarios[slot] = tag  # first: a call past the timeout is charged to its own scenario
            stamps[slot] = t0  # the supervisor kills a call older than timeout + grace
        try:
            try:
                result = read_return(verify(*args))
            finally:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                if stamps is not None:
                    if os.getpid() != pid:  # a copy the verifier forked: it must not run the harness
                        os._exit(0)
                    stamps[slot] = -time.monotonic()  # idle since: the supervisor watches the harness between calls
        except VerifierTimeout as exc:
            raise late(_user_frames(exc)) from None
        except BaseException as exc:  # the user's code may raise anything, sys.exit included
            if fired[0] and not isinstance(exc, KeyboardInterrupt):  # it caught our timeout and raised something else
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
            return read_return(verify(*args))
        except BaseException as exc:  # the user's code may raise anything, sys.exit included
            raise crash(exc) from exc

    timed.__dict__.update(_markers(verify))
    return cast(_Call, timed)
