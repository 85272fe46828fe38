"""Drive a verifier the way an engine does: draft, verify, append, repeat, until L tokens.

Rows of a batch are independent sequences; a finished row is refilled with the next sequence
(continuous batching), so every verify call but the last few sees a full batch. The hot path is
vectorised across rows; the only Python loop runs over the K draft positions.

Speed (the fast tabular simulator): a tabular chain is turned once into lookup tables
(:mod:`specaudit.simulate.tables`: payload rows extended with the padding garbage, Walker alias
tables for O(1) sampling, a flat next-state table), so one verify call costs a handful of small
numpy operations plus one gather each for ``p`` and ``q``. With the C extension built
(:mod:`specaudit.simulate.kernels`) the same work runs as two compiled loops, with the same random
draws and the same results. Lazy chains (no tables, e.g. :mod:`specaudit.chains.lazy`) are asked
for rows on demand. Finished sequences go to sinks (:mod:`specaudit.simulate.tallies`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from specaudit.chains.tabular import TabularChain
from specaudit.contract.chain import validate_output
from specaudit.simulate import kernels
from specaudit.simulate.tables import GARBAGE_POOL, alias_tables, garbage_pool, joint_tables, rows_within, tabular, warm
from specaudit.simulate.tallies import JointCounts, RoundStats, Sink

__all__ = [
    "DEFAULT_MAX_MEMORY",
    "JointCounts",
    "Plan",
    "RoundStats",
    "Sink",
    "alias_tables",
    "rows_within",
    "simulate",
    "warm",
]

#: Default bound on the simulator's working memory (``--max-memory``), bytes.
DEFAULT_MAX_MEMORY = 2 << 30
#: Lazy chains generate payload rows in slices of this many rows (bounds their temporaries).
LAZY_ROWS = 256


@dataclass(frozen=True)
class Plan:
    """How many sequences to generate and how."""

    length: int
    samples: int
    batch: int
    draft_law: np.ndarray


class _Joint:
    """Tabular target and drafter as one chain on the reachable (target, drafter) state pairs.

    Drafting samples ``m`` tokens at once from the law of whole m-token paths (Walker alias,
    one uniform per row and block), so K drafts cost ceil(K/m) gathers instead of K sampling
    steps. Payload tables are indexed by the joint state and extended with the padding garbage.
    """

    def __init__(self, target: Any, draft: Any, k: int, pool: np.ndarray):
        t = joint_tables(target, draft, k)
        self.m, self.vocab, self.k = t["m"], t["vocab"], k
        self.blocks = -(-k // self.m) if k else 0  # alias draws per row and call
        self.paths, self.n_paths = t["paths"], t["n_paths"]
        self.threshold, self.alias = t["threshold"], t["alias"]
        self.path_states = t["path_states"]  # [S*P, m+1]: state before each token, then after
        self.nxt = t["nxt"]
        self.start = t["start"]
        n_states = t["n_states"]
        self.p_table = np.concatenate([t["p_payload"], target.payload_of(pool)])
        self.q_table = np.concatenate([t["q_payload"], draft.payload_of(pool)])
        self.garbage = n_states
        # whole-path payloads (built once per chain pair): p and q of every (state, path) in one row each
        self.p_blocks, self.q_blocks = t["p_blocks"], t["q_blocks"]
        n_rows = t["path_states"].shape[0]
        self.flat_blocks = (  # the same as [S*P, row] matrices, for specaudit.simulate.kernels
            (self.p_blocks.reshape(n_rows, -1), self.q_blocks.reshape(n_rows, -1))
            if self.p_blocks is not None else (np.empty((0, 0)), np.empty((0, 0)))
        )

    def new_states(self, n: int) -> list[np.ndarray]:
        return [np.full(n, self.start, dtype=np.int64)]

    def reset(self, states: list[np.ndarray], idx: np.ndarray) -> None:
        states[0][idx] = self.start

    def draft(self, states: list[np.ndarray], n: int, rng: np.random.Generator, dx: np.ndarray, at: list[np.ndarray]) -> None:
        """Draw K drafts per row into ``dx[:, :K]``; the joint state at every position into ``at``.

        With one block (m = K) the states are only looked up when needed (``_flat`` keeps the
        (state, path) index): p and q then come from whole-block tables in one gather each.
        """
        c, k, m, at0 = states[0][:n], self.k, self.m, at[0]
        self._flat = None
        if k == 0:
            at0[:, 0] = c
            return
        for b0 in range(0, k, m):
            scaled = rng.random(n) * self.n_paths  # < P for u < 1 (see alias sampling note)
            j = scaled.astype(np.int64)
            flat = c * self.n_paths + j
            path = np.where(scaled - j < self.threshold[flat], j, self.alias[flat])
            width = min(m, k - b0)
            dx[:, b0 : b0 + width] = self.paths[path, :width]
            flat = c * self.n_paths + path
            if m == k:
                self._flat = flat
                return
            block = self.path_states[flat]
            if b0 == 0:
                at0[:, 0] = c
            at0[:, b0 + 1 : b0 + width + 1] = block[:, 1 : width + 1]
            c = block[:, m]

    def _states_at(self, at: list[np.ndarray]) -> np.ndarray:
        if self._flat is not None:
            return self.path_states[self._flat]
        return at[0]

    def fill(self, p: np.ndarray, q: np.ndarray, at: list[np.ndarray], pad_p, pad_q, rng) -> None:
        """Gather p and q; padding positions index the garbage rows instead."""
        if pad_p is None and self._flat is not None and self.p_blocks is not None:
            np.take(self.p_blocks, self._flat, axis=0, out=p)
            np.take(self.q_blocks, self._flat, axis=0, out=q)
            return
        idx = self._states_at(at)
        if pad_p is None:
            np.take(self.p_table, idx, axis=0, out=p)
            np.take(self.q_table, idx[:, : self.k], axis=0, out=q)
            return
        np.take(self.p_table, np.where(pad_p, self.garbage + rng.integers(GARBAGE_POOL, size=pad_p.shape), idx), axis=0, out=p)
        qi = idx[:, : self.k]
        np.take(self.q_table, np.where(pad_q, self.garbage + rng.integers(GARBAGE_POOL, size=pad_q.shape), qi), axis=0, out=q)

    def advance(self, states: list[np.ndarray], n: int, at: list[np.ndarray], acc: np.ndarray, last: np.ndarray) -> None:
        if self._flat is not None:
            before = self.path_states.ravel()[self._flat * (self.m + 1) + acc]
        else:
            before = at[0][np.arange(n), acc]
        states[0][:n] = self.nxt[before * self.vocab + last]


class _Pair:
    """Target and drafter asked for rows on demand (lazy chains, or tables too large to hold)."""

    def __init__(self, target: Any, draft: Any, k: int, pool: np.ndarray):
        self.target, self.drafter, self.k, self.pool = target, draft, k, pool

    def new_states(self, n: int) -> list[np.ndarray]:
        return [self.target.start_states(n), self.drafter.start_states(n)]

    def reset(self, states: list[np.ndarray], idx: np.ndarray) -> None:
        states[0][idx] = self.target.start_states(idx.size)
        states[1][idx] = self.drafter.start_states(idx.size)

    def draft(self, states: list[np.ndarray], n: int, rng: np.random.Generator, dx: np.ndarray, at: list[np.ndarray]) -> None:
        s_t, s_d = states[0][:n], states[1][:n]
        u = rng.random((self.k, n))
        for i in range(self.k):
            at[0][:, i], at[1][:, i] = s_t, s_d
            x = self.drafter.sample(s_d, u[i])
            dx[:, i] = x
            s_t, s_d = self.target.advance(s_t, x), self.drafter.advance(s_d, x)
        at[0][:, self.k], at[1][:, self.k] = s_t, s_d

    def _fill(self, chain: Any, out: np.ndarray, states: np.ndarray, pad, rng) -> None:
        """Write payload rows; generated in slices so temporaries stay within LAZY_ROWS rows."""
        flat = out.reshape(-1, out.shape[-1])
        into = getattr(chain, "payload_into", None)
        if into is not None:  # rows written in place, padding rows too (overwritten below): no temporaries
            into(states.ravel(), flat)
            if pad is not None and pad.any():
                flat[np.flatnonzero(pad.ravel())] = chain.payload_of(self.pool[rng.integers(GARBAGE_POOL, size=int(pad.sum()))])
            return
        where = np.arange(states.size) if pad is None else np.flatnonzero(~pad.ravel())
        todo = states.ravel()[where]
        for lo in range(0, where.size, LAZY_ROWS):
            flat[where[lo : lo + LAZY_ROWS]] = chain.payload(todo[lo : lo + LAZY_ROWS])
        if pad is not None and pad.any():
            flat[np.flatnonzero(pad.ravel())] = chain.payload_of(self.pool[rng.integers(GARBAGE_POOL, size=int(pad.sum()))])

    def fill(self, p: np.ndarray, q: np.ndarray, at: list[np.ndarray], pad_p, pad_q, rng) -> None:
        self._fill(self.target, p, at[0], pad_p, rng)
        self._fill(self.drafter, q, at[1][:, : self.k], pad_q, rng)

    def advance(self, states: list[np.ndarray], n: int, at: list[np.ndarray], acc: np.ndarray, last: np.ndarray) -> None:
        rows = np.arange(n)
        states[0][:n] = self.target.advance(at[0][rows, acc], last)
        states[1][:n] = self.drafter.advance(at[1][rows, acc], last)


def _validate(result: Any, drafts_ext: np.ndarray, nd: np.ndarray, vocab: int, col: np.ndarray):
    """Return ``(out, n_out, last)`` after a cheap contract check; defer to the full one on doubt.

    ``drafts_ext`` is the drafts with a -1 column appended. A well-formed output equals the
    drafts before column n_out-1, the emitted token at it, and -1 after: one comparison.
    """
    if isinstance(result, tuple) and len(result) == 2:
        out, n_out = result
        n = nd.size
        if (
            type(out) is np.ndarray
            and type(n_out) is np.ndarray
            and out.dtype == np.int64
            and n_out.dtype == np.int64
            and out.shape == drafts_ext.shape
            and n_out.shape == (n,)
        ):
            acc = n_out - 1
            if not (acc.view(np.uint64) > nd.view(np.uint64)).any():  # 1 <= n_out <= nd + 1
                rows = np.arange(n)
                last = out[rows, acc]
                if not (last.view(np.uint64) >= vocab).any():
                    want = np.where(col < acc[:, None], drafts_ext, -1)
                    want[rows, acc] = last
                    if np.array_equal(out, want):
                        return out, n_out, last
    out, n_out = validate_output(result, drafts_ext[:, :-1], nd, vocab)
    return out, n_out, out[np.arange(nd.size), n_out - 1]


def _booked(kern: Any, result: Any, drafts_ext: np.ndarray, nd: np.ndarray, vocab: int, *book: Any) -> tuple[int, int]:
    """Check ``result`` and book it with the compiled kernel; return ``(finished rows, live rows)``.

    Outputs that are not int64 arrays of the contract's shapes go through the full contract
    check first (it coerces, e.g. int32 ids, or names the broken clause). One the kernel refuses
    breaks the contract: the full check names the clause.
    """
    out = n_out = None
    if isinstance(result, tuple) and len(result) == 2:
        out, n_out = result
    if not (
        type(out) is np.ndarray
        and type(n_out) is np.ndarray
        and out.dtype == np.int64
        and n_out.dtype == np.int64
        and out.shape == drafts_ext.shape
        and n_out.shape == nd.shape
    ):
        out, n_out = validate_output(result, drafts_ext[:, :-1], nd, vocab)
    # C-contiguous for the kernel (no copy when they are already)
    count, live = kern.end(np.ascontiguousarray(out), np.ascontiguousarray(n_out), drafts_ext, nd, vocab, *book)
    if count < 0:
        validate_output(result, drafts_ext[:, :-1], nd, vocab)  # raises ContractError naming the clause
        raise AssertionError("the contract check passed an output the compiled check refuses")
    return count, live


def simulate(
    verify: Callable,
    target: TabularChain,
    draft: TabularChain,
    plan: Plan,
    rng: np.random.Generator,
    verifier_rng: np.random.Generator,
    sinks: Sequence[Sink] = (),
    progress: Callable[[int, int], None] | None = None,
    *,
    max_memory: int = DEFAULT_MAX_MEMORY,
) -> RoundStats:
    """Generate ``plan.samples`` sequences of ``plan.length`` tokens through ``verify``.

    ``rng`` drives drafts, draft counts and padding; ``verifier_rng`` is handed to the verifier.
    Finished sequences go to every sink. Raises ContractError on the first malformed output.
    The batch holds at most ``plan.batch`` rows and at most what ``max_memory`` bytes allow
    (p and q cost (2K+1) V floats per row).
    """
    vocab, k, length = target.vocab, len(plan.draft_law) - 1, plan.length
    stats = RoundStats(k)
    pool = garbage_pool(vocab, rng)
    pair = (_Joint if tabular(target) and tabular(draft) else _Pair)(target, draft, k, pool)
    law = np.asarray(plan.draft_law, dtype=np.float64)
    fixed = int(np.argmax(law)) if np.count_nonzero(law) == 1 else None
    law_cdf = np.cumsum(law)[:-1]
    width = max(1, min(plan.batch, plan.samples, rows_within(max_memory, vocab, k)))
    col = np.arange(k + 1)
    ragged = fixed is None or fixed < k

    # per-slot state of the batch; slots are compacted when the last sequences drain
    states = pair.new_states(width)
    pos = np.zeros(width, dtype=np.int64)
    rounds = np.zeros(width, dtype=np.int64)
    tokens = np.zeros(width, dtype=np.int64)
    buf = np.zeros((width, length + k + 1), dtype=np.int64)  # slack: a whole out row fits
    p_buf = np.empty((width, k + 1, vocab), dtype=getattr(pair, "p_table", np.empty(0)).dtype)
    q_buf = np.empty((width, k, vocab), dtype=getattr(pair, "q_table", np.empty(0)).dtype)
    at_buf = [np.empty((width, k + 1), dtype=s.dtype) for s in states]
    d_ext = np.full((width, k + 1), -1, dtype=np.int64)
    started = width
    n = width
    row_stride = buf.shape[1]
    bins = 2 * (k + 1)
    kern = kernels.load() if isinstance(pair, _Joint) else None
    tab = cast(_Joint, pair)  # the compiled loops (kern set) read the joint tables
    observers = list(sinks)
    if kern is not None:
        # one whole-sequence histogram is counted by the compiled loop itself
        joint = next((s for s in observers if type(s) is JointCounts), None)
        cells, weights = (joint.counts, joint.weights) if joint is not None else (np.empty(0, np.int64), np.zeros(length, np.int64))
        if joint is not None:
            observers.remove(joint)
        done_buf = np.empty(width, dtype=np.int64)
        fin_buf = np.empty((width, length), dtype=np.int64)
        d_buf = np.empty((width, k), dtype=np.int64)  # the verifier's copy of the drafts
        no_pad = np.empty((0, 0), dtype=np.int64)
        no_block = np.empty((0, 0))

    nd_fixed = np.full(width, fixed if fixed is not None else 0, dtype=np.int64)
    while n:
        if fixed is not None:
            nd = nd_fixed[:n]
        else:
            nd = np.searchsorted(law_cdf, rng.random(n), side="right").astype(np.int64)

        # drafts along the drafter's chain; states at every draft position and the bonus.
        # States past num_draft keep advancing: their payload is replaced by garbage anyway.
        at = [a[:n] for a in at_buf]
        dx = d_ext[:n]
        p, q = p_buf[:n], q_buf[:n]
        if kern is not None:  # the same draws as the numpy code below, in compiled loops
            u = rng.random((tab.blocks, n))
            if ragged:
                gp, gq = rng.integers(GARBAGE_POOL, size=(n, k + 1)), rng.integers(GARBAGE_POOL, size=(n, k))
                gx = rng.integers(vocab, size=(n, k))
            else:
                gp = gq = gx = no_pad
            d_ids = d_buf[:n]
            blocks = tab.flat_blocks if gp is no_pad else (no_block, no_block)
            kern.begin(states[0][:n], u, tab.n_paths, tab.threshold, tab.alias, tab.paths, tab.path_states,
                       *blocks, nd, gp, gq, gx, tab.garbage, tab.p_table, tab.q_table, dx, d_ids, at[0], p, q)
        elif ragged:
            pair.draft(states, n, rng, dx, at)
            pad_p = col[None, :] > nd[:, None]
            pad_q = pad_p[:, 1:] if k else pad_p[:, :0]  # position i >= nd  <=>  i + 1 > nd
            pair.fill(p, q, at, pad_p, pad_q, rng)
            dx[:, :k] = np.where(pad_q, rng.integers(vocab, size=pad_q.shape), dx[:, :k])
        else:
            pair.draft(states, n, rng, dx, at)
            pair.fill(p, q, at, None, None, rng)
        if kern is None:
            d_ids = dx[:, :k].copy()  # the verifier may write to its inputs

        t0 = time.perf_counter()
        result = verify(d_ids, q, p, nd.copy(), verifier_rng)
        stats.verifier_seconds += time.perf_counter() - t0
        stats.calls += 1
        if kern is not None:
            budget = max(0, plan.samples - started)
            count, n = _booked(kern, result, dx, nd, vocab, at[0], tab.nxt, states[0], pos, rounds, tokens, buf,
                               length, stats.accept_all, stats.accept_first, stats.moments, cells, weights, done_buf,
                               fin_buf, tab.start, budget)
            stats.sequences += count
            started += min(count, budget)
            if count:
                for sink in observers:
                    sink.observe(fin_buf[:count])
                if progress is not None:
                    progress(stats.sequences, plan.samples)
            continue
        out, n_out, last = _validate(result, dx, nd, vocab, col)
        # bookkeeping: accept lengths, append emitted tokens, advance the context
        acc = n_out - 1
        p0 = pos[:n]
        hist = np.bincount(acc + (k + 1) * (p0 == 0), minlength=bins)
        stats.accept_all += hist[: k + 1] + hist[k + 1 :]
        stats.accept_first += hist[k + 1 :]
        here = np.arange(n) * row_stride + p0
        np.put(buf, here[:, None] + col, out)  # junk past n_out is overwritten next round
        pair.advance(states, n, at, acc, last)
        p0 += n_out
        rounds[:n] += 1
        tokens[:n] += n_out
        done = np.flatnonzero(p0 >= length)
        finished = buf[done, :length]
        stats.finish(rounds[done], tokens[done])
        if done.size:
            for sink in observers:
                sink.observe(finished)
            refill = done[: max(0, plan.samples - started)]
            if refill.size:
                pair.reset(states, refill)
                pos[refill] = rounds[refill] = tokens[refill] = 0
                started += refill.size
            if refill.size < done.size:  # drain: keep the unfinished slots, compacted in front
                keep = np.ones(n, dtype=bool)
                keep[done[refill.size :]] = False
                live = np.flatnonzero(keep)
                m = live.size
                for arr in (*states, pos, rounds, tokens, buf):
                    arr[:m] = arr[live]
                n = m
            if progress is not None:
                progress(stats.sequences, plan.samples)
    return stats
