"""The canonical verifier contract and the validation of what a verifier returns.

::

    verify(draft[B,K] int64, q[B,K,V] float64, p[B,K+1,V] float64, num_draft[B] int64,
           rng: np.random.Generator) -> (out[B,K+1] int64 padded with -1, n_out[B] int64)

Row ``b`` has ``num_draft[b] <= K`` valid drafts; ``p[b, num_draft[b]]`` is its bonus position;
everything past it is padding the verifier must not read. ``n_out = accepted + 1``.

Each clause has a stable id, used in messages, reports and JUnit names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from specaudit.errors import ContractError

#: Clause id -> what the verifier must do.
CLAUSES: dict[str, str] = {
    "return": "return a pair (out, n_out)",
    "shape": "out has shape (B, K+1) and n_out has shape (B,)",
    "dtype": "out and n_out hold integers (not floats, NaN or inf)",
    "n_out-range": "1 <= n_out[b] <= num_draft[b] + 1",
    "vocab-range": "every emitted id out[b, :n_out[b]] lies in [0, V)",
    "padding": "out[b, n_out[b]:] is -1",
    "prefix": "the first n_out[b] - 1 emitted tokens are the accepted drafts draft[b, :n_out[b]-1]",
    "layout": "the target's outputs follow its own layout (shape, dtype, counters; checked by its adapter)",
}


class Verifier(Protocol):
    """A callable in the canonical contract."""

    def __call__(
        self,
        draft: np.ndarray,
        q: np.ndarray,
        p: np.ndarray,
        num_draft: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, np.ndarray]: ...


def chain_inputs(verify: Callable[..., tuple[np.ndarray, np.ndarray]]) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """Decorate a chain verifier: ``draft`` and ``num_draft`` (int64) arrive as arrays, an empty batch is answered.

    The bundled verifiers (reference, greedy, block, the mutant zoo) share this prologue; an
    empty batch returns ``(out[0, K+1], n_out[0])`` without calling ``verify`` or drawing from
    ``rng``. Keyword switches (the mutants') pass through.
    """

    @functools.wraps(verify)
    def wrapped(draft: Any, q: Any, p: Any, num_draft: Any, rng: Any, **switches: Any) -> tuple[np.ndarray, np.ndarray]:
        draft = np.asarray(draft)
        num_draft = np.asarray(num_draft, dtype=np.int64)
        if draft.shape[0] == 0:
            return np.full((0, draft.shape[1] + 1), -1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return verify(draft, q, p, num_draft, rng, **switches)

    return wrapped


def assemble(
    draft: np.ndarray, n_acc: np.ndarray, token: np.ndarray, emit: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Lay out ``(out, n_out)``: the first ``n_acc`` drafts, then ``token`` (where ``emit``), then -1."""
    batch, k = draft.shape
    rows = np.arange(batch)
    emit = np.ones(batch, dtype=bool) if emit is None else emit
    out = np.full((batch, k + 1), -1, dtype=np.int64)
    out[:, :k] = np.where(np.arange(k)[None, :] < n_acc[:, None], draft, -1)
    out[rows[emit], n_acc[emit]] = token[emit]
    return out, n_acc + emit


def as_int64(clause: str, rule: str, **arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Return ``arrays`` as int64; raise ContractError ``clause`` (``rule``: its text) naming the first holding no integers."""
    for name, arr in arrays.items():
        if not np.issubdtype(arr.dtype, np.integer):
            bad = "" if arr.dtype.kind != "f" or np.all(np.isfinite(arr)) else " (holding NaN/inf)"
            raise ContractError(clause, f"{rule}: {name} has dtype {arr.dtype}{bad}")
    return tuple(arr.astype(np.int64, copy=False) for arr in arrays.values())


def _first_bad_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))[0])


def validate_output(
    result: Any, draft: np.ndarray, num_draft: np.ndarray, vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """Check a verifier's return value against the contract; return ``(out, n_out)`` as int64.

    Raises ContractError naming the first clause broken and the first offending row.
    """
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ContractError("return", f"{CLAUSES['return']}; got {type(result).__name__}")
    out, n_out = (np.asarray(x) for x in result)
    batch, k = draft.shape
    if out.shape != (batch, k + 1) or n_out.shape != (batch,):
        raise ContractError(
            "shape", f"{CLAUSES['shape']}: expected ({batch}, {k + 1}) and ({batch},), got {out.shape} and {n_out.shape}"
        )
    out, n_out = as_int64("dtype", CLAUSES["dtype"], out=out, n_out=n_out)
    bad = (n_out < 1) | (n_out > num_draft + 1)
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        raise ContractError(
            "n_out-range", f"{CLAUSES['n_out-range']}: row {b} has n_out = {n_out[b]}, num_draft = {num_draft[b]}"
        )
    emitted = np.arange(k + 1)[None, :] < n_out[:, None]
    bad = emitted & ((out < 0) | (out >= vocab))
    if bad.any():
        b = _first_bad_row(bad)
        raise ContractError("vocab-range", f"{CLAUSES['vocab-range']} (V = {vocab}): row {b} emitted {out[b, : n_out[b]].tolist()}")
    bad = ~emitted & (out != -1)
    if bad.any():
        b = _first_bad_row(bad)
        raise ContractError("padding", f"{CLAUSES['padding']}: row {b} is {out[b].tolist()} with n_out = {n_out[b]}")
    bad = (np.arange(k)[None, :] < (n_out - 1)[:, None]) & (out[:, :k] != draft)
    if bad.any():
        b = _first_bad_row(bad)
        raise ContractError(
            "prefix", f"{CLAUSES['prefix']}: row {b} emitted {out[b, : n_out[b]].tolist()} for drafts {draft[b].tolist()}"
        )
    return out, n_out


def _user_frames(exc: BaseException) -> str:
    """Format ``exc`` keeping only frames outside specaudit's harness (the user's code)."""
    import traceback

    harness = ("specaudit/contract.py", "specaudit/simulate.py", "specaudit/runner.py", "specaudit/exact_checks.py")
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith(harness)]
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

        def call(*args):  # type: ignore[no-untyped-def] - any contract's arguments (specaudit.logits)
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
