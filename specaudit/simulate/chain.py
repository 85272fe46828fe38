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
from specaudit.contract.logits import Rows
from specaudit.simulate import kernels
from specaudit.simulate.tables import (
    GARBAGE_POOL,
    alias_tables,
    garbage_pool,
    joint_tables,
    lazy,
    rows_within,
    tabular,
    warm,
)
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
        self.starts = t["starts"]  # the start state of every request class (a batch mix: chains.serving)
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
    """Target and drafter asked for rows on demand (lazy chains, or tables too large to hold).

    Payload rows are written into the caller's buffers in place. A padding slot (a row past
    ``num_draft``) gets a garbage row only when it does not hold one already: slot ``r`` of the
    current call layout keeps its garbage while it stays padding, as an engine's reused buffer
    keeps whatever it held (``held`` marks those slots; a new layout starts with none).
    """

    def __init__(self, target: Any, draft: Any, k: int, pool: np.ndarray):
        self.target, self.drafter, self.k = target, draft, k
        # the pool in each payload form, converted once (not per call)
        self.pools = (target.payload_of(pool), draft.payload_of(pool))
        self.p_dtype, self.q_dtype = self.pools[0].dtype, self.pools[1].dtype
        self.layout = -1  # call width the held marks refer to
        self.held = [np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)]

    def new_states(self, n: int) -> list[np.ndarray]:
        return [self.target.start_states(n), self.drafter.start_states(n)]

    def reset(self, states: list[np.ndarray], idx: np.ndarray) -> None:
        states[0][idx] = self.target.start_states(idx.size)
        states[1][idx] = self.drafter.start_states(idx.size)

    def draft(self, states: list[np.ndarray], n: int, rng: np.random.Generator, dx: np.ndarray, at: list[np.ndarray]) -> None:
        """Draw ``dx.shape[1] - 1`` drafts per row into ``dx``; the states at every position into ``at``."""
        k = dx.shape[1] - 1
        s_t, s_d = states[0][:n], states[1][:n]
        u = rng.random((k, n))
        for i in range(k):
            at[0][:, i], at[1][:, i] = s_t, s_d
            x = self.drafter.sample(s_d, u[i])
            dx[:, i] = x
            s_t, s_d = self.target.advance(s_t, x), self.drafter.advance(s_d, x)
        at[0][:, k], at[1][:, k] = s_t, s_d

    def _fill(self, chain: Any, out: np.ndarray, states: np.ndarray, pad, held: np.ndarray, pool: np.ndarray, rng) -> None:
        """Write the valid payload rows, and garbage into padding slots that hold none yet."""
        flat = out.reshape(-1, out.shape[-1])
        valid = np.arange(flat.shape[0]) if pad is None else np.flatnonzero(~pad.ravel())
        todo = states.ravel()[valid]
        into = getattr(chain, "payload_into", None)
        if into is not None:  # rows written in place: no temporaries
            into(todo, flat, valid)
        else:  # generated in slices so temporaries stay within LAZY_ROWS rows
            for lo in range(0, valid.size, LAZY_ROWS):
                flat[valid[lo : lo + LAZY_ROWS]] = chain.payload(todo[lo : lo + LAZY_ROWS])
        held[valid] = False
        if pad is not None:
            need = np.flatnonzero(pad.ravel() & ~held[: flat.shape[0]])
            for r, g in zip(need.tolist(), rng.integers(GARBAGE_POOL, size=need.size).tolist()):
                flat[r] = pool[g]
            held[need] = True

    def fill(self, p: np.ndarray, q: np.ndarray, at: list[np.ndarray], pad_p, pad_q, rng) -> None:
        if p.shape[1] != self.layout or self.held[0].size < p.shape[0] * p.shape[1]:  # slots moved: nothing held
            self.layout = p.shape[1]
            self.held = [np.zeros(p.shape[0] * p.shape[1], dtype=bool), np.zeros(q.shape[0] * q.shape[1], dtype=bool)]
        self._fill(self.target, p, at[0], pad_p, self.held[0], self.pools[0], rng)
        self._fill(self.drafter, q, at[1][:, : q.shape[1]], pad_q, self.held[1], self.pools[1], rng)

    def advance(self, states: list[np.ndarray], n: int, at: list[np.ndarray], acc: np.ndarray, last: np.ndarray) -> None:
        rows = np.arange(n)
        states[0][:n] = self.target.advance(at[0][rows, acc], last)
        states[1][:n] = self.drafter.advance(at[1][rows, acc], last)


class _Requests:
    """The request class of every batch slot, and what a per-row verifier is handed each call (serving scenarios).

    A batch mix (:class:`specaudit.chains.serving.MixedChain`) draws each new request's class
    from the harness generator and starts it in that class's start state; its finished sequences
    reach the sinks with the class as a leading column. A verifier bound per row
    (``wants_rows``: :func:`specaudit.contract.logits.bind`) gets :class:`Rows` as a sixth
    argument: every row's class and history. Other scenarios draw nothing more (same streams).
    """

    def __init__(self, target: Any, pair: Any, width: int, verify: Callable):
        weights = getattr(target, "weights", None)
        self.cdf = None if weights is None else np.cumsum(weights)[:-1]
        self.starts: np.ndarray = getattr(pair, "starts", np.zeros(1, dtype=np.int64))
        self.klass = np.zeros(width, dtype=np.int64)
        self.per_row = bool(getattr(verify, "wants_rows", False))

    @property
    def serving(self) -> bool:
        """Return True when rows have classes or the verifier wants them (the numpy path only)."""
        return self.cdf is not None or self.per_row

    def start(self, states: list[np.ndarray], idx: np.ndarray, rng: np.random.Generator) -> None:
        """Draw the class of the requests starting in slots ``idx`` and set their start states."""
        if self.cdf is not None and idx.size:
            self.klass[idx] = np.searchsorted(self.cdf, rng.random(idx.size), side="right")
            states[0][idx] = self.starts[self.klass[idx]]

    def rows(self, n: int, buf: np.ndarray, pos: np.ndarray) -> tuple[Rows, ...]:
        """Return the extra argument of a per-row verifier's call (none for others)."""
        return (Rows(self.klass[:n].copy(), buf[:n], pos[:n].copy()),) if self.per_row else ()

    def tagged(self, finished: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Return finished sequences, with their class as a leading column in a batch mix."""
        return finished if self.cdf is None else np.column_stack((self.klass[done], finished))


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

    Lazy chains (no tables, hence no exact round law to keep: :func:`specaudit.simulate.tables.lazy`)
    are driven the way an engine drives a large vocabulary: a row drafts at most the tokens its
    sequence still needs (``min(num_draft, L - 1 - position)``), a call is as wide as its longest
    draft (K' = max num_draft; vLLM's ``max_spec_len``), and the rows live in buffers reused
    across calls, with padding slots that already hold garbage left as they are (:class:`_Pair`).
    The output law is the same; the batch is sized for K' = min(K, L - 1).
    """
    vocab, k, length = target.vocab, len(plan.draft_law) - 1, plan.length
    stats = RoundStats(k)
    pool = garbage_pool(vocab, rng)
    pair = (_Joint if tabular(target) and tabular(draft) else _Pair)(target, draft, k, pool)
    law = np.asarray(plan.draft_law, dtype=np.float64)
    fixed = int(np.argmax(law)) if np.count_nonzero(law) == 1 else None
    law_cdf = np.cumsum(law)[:-1]
    lean = lazy(target) or lazy(draft)  # capped drafts, calls as wide as their longest draft
    kmax = min(k, length - 1) if lean else k  # the widest call
    p_dtype = pair.p_table.dtype if isinstance(pair, _Joint) else pair.p_dtype
    q_dtype = pair.q_table.dtype if isinstance(pair, _Joint) else pair.q_dtype
    itemsize = max(p_dtype.itemsize, q_dtype.itemsize)
    width = max(1, min(plan.batch, plan.samples, rows_within(max_memory, vocab, kmax, itemsize)))
    col = np.arange(k + 1)
    ragged = fixed is None or fixed < k or lean

    # per-slot state of the batch; slots are compacted when the last sequences drain
    states = pair.new_states(width)
    requests = _Requests(target, pair, width, verify)
    requests.start(states, np.arange(width), rng)
    pos = np.zeros(width, dtype=np.int64)
    rounds = np.zeros(width, dtype=np.int64)
    tokens = np.zeros(width, dtype=np.int64)
    buf = np.zeros((width, length + k + 1), dtype=np.int64)  # slack: a whole out row fits
    # flat buffers, viewed per call as contiguous [n, K'+1, V] and [n, K', V] (K' = k unless lean)
    p_flat = np.empty(width * (kmax + 1) * vocab, dtype=p_dtype)
    q_flat = np.empty(width * kmax * vocab, dtype=q_dtype)
    at_buf = [np.empty((width, kmax + 1), dtype=s.dtype) for s in states]
    d_flat = np.full(width * (kmax + 1), -1, dtype=np.int64)  # drafts, then a -1 column
    started = width
    n = width
    row_stride = buf.shape[1]
    bins = 2 * (k + 1)
    kern = kernels.load() if isinstance(pair, _Joint) and not requests.serving else None
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
    kc = k
    while n:
        if fixed is not None:
            nd = nd_fixed[:n]
        else:
            nd = np.searchsorted(law_cdf, rng.random(n), side="right").astype(np.int64)
        if lean:  # draft no more than the sequence still needs; the call is as wide as its longest draft
            nd = np.minimum(nd, length - 1 - pos[:n])
            kc = int(nd.max())
            col = np.arange(kc + 1)

        # drafts along the drafter's chain; states at every draft position and the bonus.
        # States past num_draft keep advancing: their payload is replaced by garbage anyway.
        at = [a[:n, : kc + 1] for a in at_buf]
        dx = d_flat[: n * (kc + 1)].reshape(n, kc + 1)
        dx[:, kc] = -1
        p = p_flat[: n * (kc + 1) * vocab].reshape(n, kc + 1, vocab)
        q = q_flat[: n * kc * vocab].reshape(n, kc, vocab)
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
            dx[:, :kc] = np.where(pad_q, rng.integers(vocab, size=pad_q.shape), dx[:, :kc])
        else:
            pair.draft(states, n, rng, dx, at)
            pair.fill(p, q, at, None, None, rng)
        if kern is None:
            d_ids = dx[:, :kc].copy()  # the verifier may write to its inputs

        t0 = time.perf_counter()
        result = verify(d_ids, q, p, nd.copy(), verifier_rng, *requests.rows(n, buf, pos))
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
                sink.observe(requests.tagged(finished, done))
            refill = done[: max(0, plan.samples - started)]
            if refill.size:
                pair.reset(states, refill)
                requests.start(states, refill, rng)
                pos[refill] = rounds[refill] = tokens[refill] = 0
                started += refill.size
            if refill.size < done.size:  # drain: keep the unfinished slots, compacted in front
                keep = np.ones(n, dtype=bool)
                keep[done[refill.size :]] = False
                live = np.flatnonzero(keep)
                m = live.size
                for arr in (*states, pos, rounds, tokens, buf, requests.klass):
                    arr[:m] = arr[live]
                n = m
            if progress is not None:
                progress(stats.sequences, plan.samples)
    return stats
