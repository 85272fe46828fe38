"""Drive a verifier the way an engine does: draft, verify, append, repeat, until L tokens.

Rows of a batch are independent sequences; a finished row is refilled with the next sequence
(continuous batching), so every verify call but the last few sees a full batch. The hot path is
vectorised across rows; the only Python loop runs over the K draft positions.

Speed (issue 7): a tabular chain is turned once into lookup tables (payload rows extended with
the padding garbage, Walker alias tables for O(1) sampling, a flat next-state table), so one
verify call costs a handful of small numpy operations plus one gather each for ``p`` and ``q``.
With the C extension built (:mod:`specaudit.simulate.kernels`) the same work runs as two compiled
loops, with the same random draws and the same results.
Lazy chains (no tables, e.g. :mod:`specaudit.chains.lazy`) are asked for rows on demand.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from specaudit.simulate import kernels
from specaudit.chains.tabular import TabularChain
from specaudit.contract.chain import validate_output

#: Padding distributions are drawn from this many random laws with every entry > 0, so a
#: verifier that reads past num_draft sees plausible, non-zero garbage (never zeros).
GARBAGE_POOL = 64
#: Default bound on the simulator's working memory (``--max-memory``), bytes.
DEFAULT_MAX_MEMORY = 2 << 30
#: Chains whose table holds at most this many entries get alias and payload tables.
TABLE_ENTRIES = 1 << 24
#: Joint drafting tables hold at most this many (state, path) entries; drafts are sampled in
#: blocks of m tokens with states * V**m within it (alias tables are built in Python, once).
PATH_ENTRIES = 1 << 14
#: Whole-block payload tables (p and q of every (state, K-path)) hold at most this many entries.
BLOCK_ENTRIES = 1 << 21
#: Lazy chains generate payload rows in slices of this many rows (bounds their temporaries).
LAZY_ROWS = 256
#: Working-set bytes per payload entry: p and q, plus the verifier's own temporaries.
_BYTES_PER_ENTRY = 8 * 3


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

    def merge(self, other: "JointCounts") -> None:
        """Add another shard's counts (same V and L)."""
        self.counts += other.counts

    def to_dict(self) -> dict[str, Any]:
        """Return the counts as JSON-able data."""
        nz = np.flatnonzero(self.counts)
        return {"cells": int(self.counts.size), "index": nz.tolist(), "count": self.counts[nz].tolist()}

    def load(self, data: dict[str, Any]) -> None:
        """Add counts written by :meth:`to_dict`."""
        if int(data["cells"]) != self.counts.size:
            raise ValueError(f"joint counts have {data['cells']} cells, expected {self.counts.size}")
        np.add.at(self.counts, np.asarray(data["index"], dtype=np.int64), np.asarray(data["count"], dtype=np.int64))


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

    def merge(self, other: "RoundStats") -> None:
        """Add another shard's tallies (same K)."""
        if other.k != self.k:
            raise ValueError(f"cannot merge round stats with k = {other.k} into k = {self.k}")
        self.accept_first += other.accept_first
        self.accept_all += other.accept_all
        self.sequences += other.sequences
        self.moments += other.moments
        self.calls += other.calls
        self.verifier_seconds += other.verifier_seconds

    def to_dict(self) -> dict[str, Any]:
        """Return the tallies as JSON-able data (moments as exact float repr)."""
        return {
            "k": self.k,
            "accept_first": self.accept_first.tolist(),
            "accept_all": self.accept_all.tolist(),
            "sequences": self.sequences,
            "moments": [float(x) for x in self.moments],
            "calls": self.calls,
            "verifier_seconds": self.verifier_seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RoundStats":
        """Rebuild tallies written by :meth:`to_dict`."""
        out = cls(int(data["k"]))
        out.accept_first[:] = data["accept_first"]
        out.accept_all[:] = data["accept_all"]
        out.sequences = int(data["sequences"])
        out.moments[:] = data["moments"]
        out.calls = int(data["calls"])
        out.verifier_seconds = float(data["verifier_seconds"])
        return out


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


def alias_tables(dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return Walker alias tables ``(threshold, alias)`` [S*V] for the rows of ``dist`` [S, V].

    Token ``j`` of row ``s`` is kept when the fractional uniform is below ``threshold[s*V+j]``,
    else replaced by ``alias[s*V+j]`` (Vose 1991). A token of probability 0 gets threshold 0 and
    an alias of positive mass, so it is never drawn, whatever rounding leaves over.
    """
    s_count, v = dist.shape
    thr = np.zeros((s_count, v))
    ali = np.zeros((s_count, v), dtype=np.int64)
    for s in range(s_count):
        row = dist[s] / dist[s].sum()
        scaled = (row * v).tolist()
        small = [j for j in range(v) if scaled[j] < 1.0]
        large = [j for j in range(v) if scaled[j] >= 1.0]
        t, a = thr[s], ali[s]
        while small and large:
            j, g = small.pop(), large[-1]
            t[j], a[j] = scaled[j], g
            scaled[g] -= 1.0 - scaled[j]
            if scaled[g] < 1.0:
                small.append(large.pop())
        for j in large + small:  # rounding leftovers: full columns
            t[j], a[j] = 1.0, j
        zero = row <= 0
        if zero.any():  # never let rounding give a zero-mass token a column of its own
            t[zero] = 0.0
            bad = zero & (row[a] <= 0)
            a[bad] = int(np.argmax(row))
    return thr.ravel(), ali.ravel()


class _Joint:
    """Tabular target and drafter as one chain on the reachable (target, drafter) state pairs.

    Drafting samples ``m`` tokens at once from the law of whole m-token paths (Walker alias,
    one uniform per row and block), so K drafts cost ceil(K/m) gathers instead of K sampling
    steps. Payload tables are indexed by the joint state and extended with the padding garbage.
    """

    def __init__(self, target: Any, draft: Any, k: int, pool: np.ndarray):
        t = _joint_tables(target, draft, k)
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


def _tabular(chain: Any) -> bool:
    dist = getattr(chain, "dist", None)
    return isinstance(dist, np.ndarray) and isinstance(getattr(chain, "nxt", None), np.ndarray) and dist.size <= TABLE_ENTRIES


def _reachable_pairs(target: Any, draft: Any) -> np.ndarray:
    """Return the (target, drafter) state pairs reachable from the start pair, [S, 2]."""
    seen = {(int(target.start), int(draft.start))}
    frontier = np.array(sorted(seen), dtype=np.int64)
    while frontier.size:
        nt = target.nxt[frontier[:, 0]].ravel()
        ndr = draft.nxt[frontier[:, 1]].ravel()
        new = {(int(a), int(b)) for a, b in zip(nt, ndr)} - seen
        seen |= new
        frontier = np.array(sorted(new), dtype=np.int64).reshape(-1, 2)
    return np.array(sorted(seen), dtype=np.int64)


@functools.lru_cache(maxsize=16)
def _joint_tables(target: Any, draft: Any, k: int) -> dict[str, Any]:
    """Build (once per chain pair) the joint-state tables that :class:`_Joint` reads."""
    vocab = int(target.vocab)
    pairs = _reachable_pairs(target, draft)
    n_states = len(pairs)
    code = {(int(a), int(b)): i for i, (a, b) in enumerate(pairs)}
    nxt_pairs = np.stack([target.nxt[pairs[:, 0]], draft.nxt[pairs[:, 1]]], axis=-1)  # [S, V, 2]
    nxt = np.array([code[(int(a), int(b))] for a, b in nxt_pairs.reshape(-1, 2)], dtype=np.int64)
    q = np.asarray(draft.probs(pairs[:, 1]), dtype=np.float64)  # [S, V]
    m = 1
    while m < k and n_states * vocab ** (m + 1) <= PATH_ENTRIES:
        m += 1
    n_paths = vocab**m
    paths = np.stack(np.unravel_index(np.arange(n_paths), (vocab,) * m), axis=1).astype(np.int64)  # [P, m]
    # walk every path from every state: probability and the states along the way
    law = np.ones((n_states, n_paths))
    states = np.empty((n_states, n_paths, m + 1), dtype=np.int64)
    states[:, :, 0] = np.arange(n_states)[:, None]
    for i in range(m):
        cur = states[:, :, i]
        x = paths[None, :, i]
        law *= q[cur, x]
        states[:, :, i + 1] = nxt[cur * vocab + x]
    threshold, alias = alias_tables(law)
    path_states = states.reshape(n_states * n_paths, m + 1)
    p_payload, q_payload = np.asarray(target.payload(pairs[:, 0])), np.asarray(draft.payload(pairs[:, 1]))
    whole = m == k and path_states.shape[0] * (2 * k + 1) * vocab <= BLOCK_ENTRIES  # garbage rows are never on a path
    return {
        "m": m,
        "vocab": vocab,
        "paths": paths,
        "n_paths": n_paths,
        "threshold": threshold,
        "alias": alias,
        "path_states": path_states,
        "nxt": nxt,
        "start": code[(int(target.start), int(draft.start))],
        "n_states": n_states,
        "p_payload": p_payload,
        "q_payload": q_payload,
        "p_blocks": p_payload[path_states] if whole else None,
        "q_blocks": q_payload[path_states[:, :k]] if whole else None,
    }


def warm(target: Any, draft: Any, k: int) -> None:
    """Build the joint tables of a tabular chain pair and load the compiled kernels now.

    Called before forking workers, which then share both instead of each building its own.
    """
    if _tabular(target) and _tabular(draft):
        _joint_tables(target, draft, k)
        kernels.load()


def rows_within(max_memory: int, vocab: int, k: int) -> int:
    """Return how many batch rows fit the working-set budget ``max_memory`` (at least 1)."""
    return max(1, int(max_memory) // (_BYTES_PER_ENTRY * vocab * (2 * k + 1)))


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
    pool = _garbage_pool(vocab, rng)
    pair = (_Joint if _tabular(target) and _tabular(draft) else _Pair)(target, draft, k, pool)
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
            u = rng.random((pair.blocks, n))
            if ragged:
                gp, gq = rng.integers(GARBAGE_POOL, size=(n, k + 1)), rng.integers(GARBAGE_POOL, size=(n, k))
                gx = rng.integers(vocab, size=(n, k))
            else:
                gp = gq = gx = no_pad
            d_ids = d_buf[:n]
            blocks = pair.flat_blocks if gp is no_pad else (no_block, no_block)
            kern.begin(states[0][:n], u, pair.n_paths, pair.threshold, pair.alias, pair.paths, pair.path_states,
                       *blocks, nd, gp, gq, gx, pair.garbage, pair.p_table, pair.q_table, dx, d_ids, at[0], p, q)
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
            count, n = _booked(kern, result, dx, nd, vocab, at[0], pair.nxt, states[0], pos, rounds, tokens, buf,
                               length, stats.accept_all, stats.accept_first, stats.moments, cells, weights, done_buf,
                               fin_buf, pair.start, budget)
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
