"""Stops and length caps: a verifier that also ends requests, on a stop token or at the request's budget.

An engine does not hand every token a verification accepts to the request: a stop token (EOS, or
one of the request's ``stop_token_ids``) ends it, and so does its ``max_tokens``. With several
tokens accepted in one step that is where bugs live: an EOS accepted in the middle of a block and
followed by more tokens because the stop check saw only the block's last token (transformers
#47912, fixed by PR #47931), the length cap checked before the stops so that an in-budget stop is
reported as a length finish and the tokens after it leak (SGLang #31599, fixed by #31569), every
accepted token committed past the budget (ohdearquant/lattice #242). A verifier that owns this
step declares ``verify.stops = True`` and takes one more argument::

    verify(draft, q, p, num_draft, rng, stops: Stops) -> (out, n_out, finished[B] int64)

``stops.tokens[B, S]`` holds each row's stop token ids (``-1`` pads a row with fewer),
``stops.remaining[B] >= 1`` how many tokens the request may still emit. The output is what the
request keeps: the verification's tokens cut after the first stop token among them (kept: the
stop token is the request's last token) and at ``remaining``, padded with ``-1`` as ever;
``finished[b]`` says why row ``b`` ended: :data:`RUNNING` (it goes on), :data:`STOPPED` (its
last token is a stop token) or :data:`LENGTH` (it reached its budget without a stop). A stop token
on the budget's last token is a stop in :func:`apply_stops`: each token is checked for a stop
before the length, as vLLM's ``check_stop`` does (``vllm/v1/core/sched/utils.py``); an engine
that checks the budget first calls it a length finish, and the ``stops`` check accepts either
there (the tokens kept are the same).

Every other check calls such a verifier through :func:`split_stops`: no stop tokens and a budget
no call reaches, so it is the canonical contract's ``(out, n_out)``; the ``stops`` check
(:mod:`specaudit.checks.stops`) calls it with stops (:func:`stops_of`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from specaudit.contract.chain import as_int64, returned_arrays
from specaudit.errors import ContractError, UsageError

__all__ = [
    "FINISHED", "LENGTH", "RUNNING", "STOPPED", "UNBOUNDED", "Stops", "apply_stops", "declares_stops", "split_stops",
    "stops_of", "validate_finished",
]

#: ``finished`` codes: the row goes on, its last token is a stop token, it reached its budget without a stop.
RUNNING, STOPPED, LENGTH = 0, 1, 2
#: The names of the codes, for messages and reports.
FINISHED = {RUNNING: "running", STOPPED: "stop", LENGTH: "length"}
#: The budget of a call that no verification reaches (the split form's).
UNBOUNDED = 1 << 40
_STOPS = "_specaudit_stops"


class Stops(NamedTuple):
    """The stop tokens and remaining budgets of a batch's requests."""

    tokens: np.ndarray  # [B, S] int64 stop token ids per row, -1 padded
    remaining: np.ndarray  # [B] int64 >= 1: tokens the request may still emit

    @classmethod
    def unbounded(cls, batch: int) -> Stops:
        """Return no stop tokens and a budget no call reaches, for ``batch`` rows."""
        return cls(np.full((batch, 0), -1, dtype=np.int64), np.full(batch, UNBOUNDED, dtype=np.int64))


def apply_stops(out: np.ndarray, n_out: np.ndarray, stops: Stops) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(out, n_out, finished)``: a verification's tokens as each request keeps them (the rule above)."""
    out = np.array(out, dtype=np.int64)
    n_out = np.array(n_out, dtype=np.int64)
    finished = np.full(len(n_out), RUNNING, dtype=np.int64)
    stop_sets = [set(int(t) for t in row if t >= 0) for row in stops.tokens]
    for b in range(len(n_out)):
        keep = int(n_out[b])
        for j in range(keep):  # token by token: a stop first, then the budget
            if int(out[b, j]) in stop_sets[b]:
                keep, finished[b] = j + 1, STOPPED
                break
            if j + 1 >= stops.remaining[b]:
                keep, finished[b] = j + 1, LENGTH
                break
        out[b, keep:] = -1
        n_out[b] = keep
    return out, n_out, finished


def validate_finished(result: Any, batch: int) -> tuple[Any, np.ndarray]:
    """Return ``((out, n_out), finished)`` from a stops verifier's return; raise ContractError on a wrong shape.

    ``out`` and ``n_out`` are checked by the canonical contract's own clauses afterwards.
    """
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise ContractError("return", "a verifier declaring stops returns (out, n_out, finished); got "
                            + (f"a {len(result)}-tuple" if isinstance(result, (tuple, list)) else type(result).__name__))
    (finished,) = returned_arrays("shape", f"finished must have shape ({batch},)", finished=result[2])
    if finished.shape != (batch,):
        raise ContractError("shape", f"finished must have shape ({batch},), got {finished.shape}")
    as_int64("dtype", "finished must be an integer array", finished=finished)
    bad = ~np.isin(finished, list(FINISHED))  # on the values as returned: a wrapped uint64 is not -1
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        raise ContractError("finished", f"finished[{b}] = {finished[b]}: not one of "
                            + ", ".join(f"{code} ({name})" for code, name in FINISHED.items()))
    return (result[0], result[1]), finished.astype(np.int64)


def declares_stops(verify: Callable[..., Any]) -> bool:
    """Return True when ``verify`` declares the stops contract (``verify.stops = True``).

    Raises UsageError (exit 4) naming the attribute for a value that is not a bool.
    """
    declared = getattr(verify, "stops", False)
    if not isinstance(declared, bool):
        name = getattr(verify, "__qualname__", type(verify).__name__)
        raise UsageError(f"{name}.stops = {declared!r}: not a bool; True declares the stops contract "
                         "(verify(..., rng, stops) -> (out, n_out, finished)), False or no attribute the canonical one")
    return declared


#: The stops contract's positional arguments.
ARGUMENTS = ("draft", "q", "p", "num_draft", "rng", "stops")


def split_stops(verify: Callable[..., Any]) -> Callable[..., Any]:
    """Return ``verify`` when it declares no stops; else the canonical ``(out, n_out)`` form of it.

    The form calls ``verify`` with no stop tokens and a budget no call reaches, and keeps
    ``verify`` for the ``stops`` check (:func:`stops_of`) and its signature. A return that is not a
    triple goes through as it came (the output checks name what is wrong with it).
    """
    if not declares_stops(verify):
        return verify

    @functools.wraps(verify)
    def call(*args: Any) -> Any:
        draft = np.asarray(args[0])
        result = verify(*args, Stops.unbounded(draft.shape[0]))
        if isinstance(result, (tuple, list)) and len(result) == 3:
            return result[0], result[1]
        return result

    try:
        sig = inspect.signature(verify)
    except (TypeError, ValueError):  # builtins, C extensions: the call itself decides
        sig = None
    if sig is not None and not any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
        positional = [p for p in sig.parameters.values()
                      if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is inspect.Parameter.empty]
        if len(required) > len(ARGUMENTS):
            raise UsageError(f"TARGET takes {len(required)} arguments {tuple(p.name for p in required)}; the stops "
                             f"contract (verify.stops = True) passes {len(ARGUMENTS)} ({', '.join(ARGUMENTS)})")
        # the canonical form's signature: the contract's five arguments and the keyword-only ones, not ``stops``
        rest = [p for p in sig.parameters.values() if p not in positional]
        call.__signature__ = sig.replace(parameters=positional[:len(ARGUMENTS) - 1] + rest)  # type: ignore[attr-defined]
    setattr(call, _STOPS, verify)
    return call


def stops_of(verify: Callable[..., Any]) -> Callable[..., Any] | None:
    """Return the verifier taking stops behind a :func:`split_stops` callable, or None."""
    return getattr(verify, _STOPS, None)
