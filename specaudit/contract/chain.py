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
