"""Drive a verifier the way an engine does: draft, verify, append, repeat, until L tokens.

Rows of a batch are independent sequences; a finished row is refilled with the next sequence
(continuous batching), so every verify call but the last few sees a full batch. The hot path is
vectorised across rows; the only Python loops run over the K draft positions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specaudit.chains import TabularChain
from specaudit.contract import validate_output

#: Padding distributions are drawn from this many random laws with every entry > 0, so a
#: verifier that reads past num_draft sees plausible, non-zero garbage (never zeros).
GARBAGE_POOL = 64


class Sink(Protocol):
    """Receives every finished sequence; accumulates what a check needs."""

    def observe(self, sequences: np.ndarray) -> None:
        """Take a block of finished sequences [n, L]."""


class JointCounts:
    """Counts of whole sequences, cell index = sum_t x_t V**(L-1-t)."""

    def __init__(self, vocab: int, length: int):
        self.weights = vocab ** np.arange(length - 1, -1, -1, dtype=np.int64)
        self.counts = np.zeros(vocab**length, dtype=np.int64)

    def observe(self, sequences: np.ndarray) -> None:
        """Add the sequences' cells to the counts."""
        self.counts += np.bincount(sequences @ self.weights, minlength=self.counts.size)


@dataclass
class RoundStats:
    """Additive per-round and per-sequence tallies (mergeable across shards)."""

    k: int
    accept_first: np.ndarray = field(init=False)  # accepted-count histogram, first round only
    accept_all: np.ndarray = field(init=False)  # accepted-count histogram, every round
    sequences: int = 0
    # sums over sequences of R (rounds), T (uncut tokens), R^2, T^2, R*T: the ratio's delta method
    moments: np.ndarray = field(default_factory=lambda: np.zeros(5))
    calls: int = 0
    verifier_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.accept_first = np.zeros(self.k + 1, dtype=np.int64)
        self.accept_all = np.zeros(self.k + 1, dtype=np.int64)

    def finish(self, rounds: np.ndarray, tokens: np.ndarray) -> None:
        """Record finished sequences' round and token totals."""
        r, t = rounds.astype(np.float64), tokens.astype(np.float64)
        self.sequences += r.size
        self.moments += (r.sum(), t.sum(), (r * r).sum(), (t * t).sum(), (r * t).sum())


@dataclass(frozen=True)
class Plan:
    """How many sequences to generate and how."""

    length: int
    samples: int
    batch: int
    draft_law: np.ndarray


def _garbage_pool(vocab: int, rng: np.random.Generator) -> np.ndarray:
    pool = rng.dirichlet(np.ones(vocab), size=GARBAGE_POOL) + 1e-3
    return pool / pool.sum(axis=1, keepdims=True)


def simulate(
    verify: Callable,
    target: TabularChain,
    draft: TabularChain,
    plan: Plan,
    rng: np.random.Generator,
    verifier_rng: np.random.Generator,
    sinks: Sequence[Sink] = (),
    progress: Callable[[int, int], None] | None = None,
) -> RoundStats:
    """Generate ``plan.samples`` sequences of ``plan.length`` tokens through ``verify``.

    ``rng`` drives drafts, draft counts and padding; ``verifier_rng`` is handed to the verifier.
    Finished sequences go to every sink. Raises ContractError on the first malformed output.
    """
    vocab, k, length = target.vocab, len(plan.draft_law) - 1, plan.length
    stats = RoundStats(k)
    pool = _garbage_pool(vocab, rng)
    law_cdf = np.cumsum(plan.draft_law)
    law_cdf[-1] = np.inf
    width = min(plan.batch, plan.samples)

    # per-slot state of the batch
    active = np.zeros(width, dtype=bool)
    pos = np.zeros(width, dtype=np.int64)
    st = np.zeros(width, dtype=np.int64)
    sd = np.zeros(width, dtype=np.int64)
    rounds = np.zeros(width, dtype=np.int64)
    tokens = np.zeros(width, dtype=np.int64)
    buf = np.zeros((width, length), dtype=np.int64)
    started = 0
    kpos = np.arange(k)
    opos = np.arange(k + 1)

    while True:
        idle = np.flatnonzero(~active)[: plan.samples - started]
        if idle.size:
            active[idle] = True
            pos[idle] = rounds[idle] = tokens[idle] = 0
            st[idle], sd[idle] = target.start, draft.start
            started += idle.size
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        n = rows.size
        nd = (law_cdf[None, :] <= rng.random(n)[:, None]).sum(axis=1)

        # --- drafts along the drafter's chain; p at every draft position and the bonus
        d_ids = np.empty((n, k), dtype=np.int64)
        q = np.empty((n, k, vocab))
        p = np.empty((n, k + 1, vocab))
        st_at = np.empty((n, k + 1), dtype=np.int64)
        sd_at = np.empty((n, k + 1), dtype=np.int64)
        s_t, s_d = st[rows], sd[rows]
        u = rng.random((n, k))
        for i in range(k + 1):
            st_at[:, i], sd_at[:, i] = s_t, s_d
            p[:, i] = target.payload(s_t)
            if i == k:
                break
            q[:, i] = draft.payload(s_d)
            x = draft.sample(s_d, u[:, i])
            d_ids[:, i] = x
            live = i < nd
            s_t = np.where(live, target.advance(s_t, x), s_t)
            s_d = np.where(live, draft.advance(s_d, x), s_d)
        pad = kpos[None, :] >= nd[:, None]
        count = int(pad.sum())
        if count:
            d_ids[pad] = rng.integers(vocab, size=count)
            q[pad] = draft.payload_of(pool[rng.integers(GARBAGE_POOL, size=count)])
            pad_p = opos[None, :] > nd[:, None]
            p[pad_p] = target.payload_of(pool[rng.integers(GARBAGE_POOL, size=int(pad_p.sum()))])

        t0 = time.perf_counter()
        result = verify(d_ids, q, p, nd, verifier_rng)
        stats.verifier_seconds += time.perf_counter() - t0
        stats.calls += 1
        out, n_out = validate_output(result, d_ids, nd, vocab)

        # --- bookkeeping: accept lengths, append emitted tokens, advance the context
        acc = n_out - 1
        first = rounds[rows] == 0
        stats.accept_all += np.bincount(acc, minlength=k + 1)
        stats.accept_first += np.bincount(acc[first], minlength=k + 1)
        cols = pos[rows][:, None] + opos[None, :]
        keep = (opos[None, :] < n_out[:, None]) & (cols < length)
        buf[np.broadcast_to(rows[:, None], keep.shape)[keep], cols[keep]] = out[keep]
        last_tok = out[np.arange(n), acc]
        st[rows] = target.advance(st_at[np.arange(n), acc], last_tok)
        sd[rows] = draft.advance(sd_at[np.arange(n), acc], last_tok)
        pos[rows] += n_out
        rounds[rows] += 1
        tokens[rows] += n_out

        done = rows[pos[rows] >= length]
        if done.size:
            finished = buf[done]
            for sink in sinks:
                sink.observe(finished)
            stats.finish(rounds[done], tokens[done])
            active[done] = False
            if progress is not None:
                progress(stats.sequences, plan.samples)
    return stats
