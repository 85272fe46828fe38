"""Shrink a failing exact call while it still fails: one row, the fewest drafts, the smallest vocabulary, short decimals.

A greedy delta-debugging pass (Zeller and Hildebrandt 2002, "Simplifying and isolating
failure-inducing input"; hypothesis' shrinker works the same way on its choice sequence): each
step proposes a smaller call, replays the target on it through the same random source the probe
fed (:func:`specaudit.checks.replay.replay`: a fresh source in the recorded state), and keeps it
only when the same rule is still broken. Steps, in order:

1. rows: each failing row alone (the first that fails by itself);
2. drafts: K and ``num_draft`` cut to the smallest pair that fails (p keeps positions 0..K);
3. vocabulary: a token removed from every row (its mass renormalised over the rest; ids above it
   renumbered down) while one can be;
4. probabilities: every row rounded to the fewest decimals (1 to 6) that keep the failure, zeros
   kept, positive entries kept positive, the row's largest entry taking up the rounding so that
   its decimals sum to 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specaudit.checks.replay import Call, admissible, replay

__all__ = ["Shrunk", "shrink"]

#: Decimals tried when rounding the probabilities (the fewest that keeps the failure wins).
DECIMALS = (1, 2, 3, 4, 6)


@dataclass(frozen=True)
class Shrunk:
    """A shrunk call and what it shrank from: (rows, drafts K, vocabulary V) before and after, replays made."""

    call: Call
    before: tuple[int, int, int]
    after: tuple[int, int, int]
    decimals: int | None  # the decimals the probabilities were rounded to (None: left as recorded)
    replays: int


def shrink(verify: Callable[..., Any], call: Call, budget: int = 400) -> Shrunk:
    """Return ``call`` shrunk while ``verify`` still breaks its rule (at most ``budget`` replays).

    Raises ValueError when ``call`` does not fail to begin with (the target no longer shows it).
    """
    replays = 0

    def fails(candidate: Call) -> Call | None:
        nonlocal replays
        if replays >= budget or not admissible(candidate):
            return None  # out of replays, or a call too degenerate to show its rule reliably
        replays += 1
        found = replay(verify, candidate)
        return None if found is None else candidate.judged(found)

    current = fails(call.with_inputs(call.draft, call.q, call.p, call.num_draft))
    if current is None:
        raise ValueError(f"the recorded call does not fail on this target (rule: {call.rule})")
    before = call.origin or call.shape
    current = _rows(current, fails)
    current = _drafts(current, fails)
    current = _vocab(current, fails)
    current, decimals = _decimals(current, fails)
    return Shrunk(current, before, current.shape, decimals, replays)


def _rows(call: Call, fails: Callable[[Call], Call | None]) -> Call:
    """Keep one row: the first that fails by itself."""
    if call.shape[0] <= 1:
        return call
    for b in range(call.shape[0]):
        found = fails(call.rows(b))
        if found is not None:
            return found
    return call


def _cut(call: Call, nd: np.ndarray, k: int) -> Call:
    """Return ``call`` with ``num_draft`` = ``nd`` and K = ``k`` (p keeps positions 0..k)."""
    return call.with_inputs(call.draft[:, :k], call.q[:, :k], call.p[:, : k + 1], np.minimum(nd, k))


def _drafts(call: Call, fails: Callable[[Call], Call | None]) -> Call:
    """Cut K and num_draft to the smallest pair that fails (K first: the fewest slots, then the fewest drafts)."""
    top = int(call.num_draft.max(initial=0))
    for k in range(0, call.shape[1] + 1):
        for nd in range(0, min(k, top) + 1):
            if k == call.shape[1] and nd == top:
                return call
            found = fails(_cut(call, np.minimum(call.num_draft, nd), k))
            if found is not None:
                return found
    return call


def _without(call: Call, token: int) -> Call | None:
    """Return ``call`` with ``token`` removed from the vocabulary, or None when that cannot be done."""
    k = call.shape[1]
    valid = np.arange(k)[None, :] < call.num_draft[:, None]
    if np.any(valid & (call.draft == token)):
        return None  # a draft is that token
    keep = np.arange(call.shape[2]) != token
    q, p = call.q[..., keep], call.p[..., keep]
    if q.shape[-1] < 1:
        return None
    sums_q, sums_p = q.sum(axis=-1, keepdims=True), p.sum(axis=-1, keepdims=True)
    if np.any(sums_p <= 0) or np.any(sums_q <= 0):
        return None  # a row would have no mass left
    draft = np.where(call.draft > token, call.draft - 1, call.draft)
    draft = np.where(valid, draft, np.minimum(draft, q.shape[-1] - 1))  # padding ids stay inside the vocabulary
    return call.with_inputs(draft, q / sums_q, p / sums_p, call.num_draft)


def _vocab(call: Call, fails: Callable[[Call], Call | None]) -> Call:
    """Remove tokens one by one, highest id first, while the call still fails."""
    changed = True
    while changed and call.shape[2] > 1:
        changed = False
        for token in range(call.shape[2] - 1, -1, -1):
            candidate = _without(call, token)
            found = fails(candidate) if candidate is not None else None
            if found is not None:
                call, changed = found, True
                break
    return call


def _rounded(rows: np.ndarray, decimals: int) -> np.ndarray:
    """Round each law to ``decimals`` decimals, zeros kept and positives kept positive, summing to 1 in decimals."""
    flat = rows.reshape(-1, rows.shape[-1])
    step = 10.0**-decimals
    out = np.where(flat > 0, np.maximum(np.round(flat, decimals), step), 0.0)
    top = np.argmax(out, axis=1)
    rest = out.sum(axis=1) - out[np.arange(len(out)), top]
    out[np.arange(len(out)), top] = np.round(1.0 - rest, decimals)
    return out.reshape(rows.shape)


def _decimals(call: Call, fails: Callable[[Call], Call | None]) -> tuple[Call, int | None]:
    """Round q and p to the fewest decimals that keep the failure (rows that would lose their top entry are kept)."""
    for d in DECIMALS:
        q, p = _rounded(call.q, d), _rounded(call.p, d)
        if np.any(q < 0) or np.any(p < 0) or np.any(q.max(axis=-1) <= 0) or np.any(p.max(axis=-1) <= 0):
            continue
        found = fails(call.with_inputs(call.draft, q, p, call.num_draft))
        if found is not None:
            return found, d
    return call, None
