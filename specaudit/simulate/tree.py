"""Drive a tree verifier the way an engine does: draft a tree, verify, append the path, repeat.

The tree twin of :mod:`specaudit.simulate.chain`: rows of a batch are independent sequences, refilled
when they finish (continuous batching), and finished sequences go to the same sinks
(:class:`~specaudit.simulate.tallies.JointCounts`); per-round tallies are the same
:class:`~specaudit.simulate.tallies.RoundStats` with K = the tree depth. Trees are built level by level on
a full grid of slots (vectorised across rows and slots), then compacted per row into topological
(breadth-first) order, so ragged rows get their own shapes. The only Python loops run over depth
levels and siblings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specaudit.chains.sampling import sample_rows
from specaudit.chains.tabular import TabularChain
from specaudit.contract.tree import validate_tree_output
from specaudit.simulate.tables import GARBAGE_POOL, garbage_pool
from specaudit.simulate.tallies import RoundStats, Sink

CHILD_KINDS = ("iid", "without_replacement", "topk")


@dataclass(frozen=True)
class TreePlan:
    """How many sequences to generate, and the shape of the draft trees."""

    length: int
    samples: int
    batch: int
    widths: tuple[int, ...]  # children per node at depth 0..D-1
    children: str = "iid"  # "iid" | "without_replacement" | "topk"
    ragged: bool = False  # each node keeps a uniform number 0..width of its children

    @property
    def depth(self) -> int:
        """Return the tree depth D (the most drafts a round can accept)."""
        return len(self.widths)

    @property
    def max_nodes(self) -> int:
        """Return N, the node count of the full tree."""
        return int(sum(np.prod(self.widths[: d + 1]) for d in range(self.depth)))


@dataclass
class _Trees:
    """One batch of compacted draft trees plus the chain states at every node."""

    tokens: np.ndarray  # [n, N]
    parent: np.ndarray  # [n, N]
    q: np.ndarray  # [n, N, V]
    p: np.ndarray  # [n, N+1, V]
    num_nodes: np.ndarray  # [n]
    st: np.ndarray  # [n, N] target state after each node's token
    sd: np.ndarray  # [n, N] draft state after each node's token


def _children(
    draft: TabularChain, sd: np.ndarray, count: np.ndarray, width: int, kind: str, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw up to ``width`` children at draft states ``sd`` [m]; return tokens, q_j, valid [m, width(, V)]."""
    m, vocab = sd.size, draft.vocab
    law = draft.probs(sd)
    tokens = np.zeros((m, width), dtype=np.int64)
    q_j = np.zeros((m, width, vocab))
    valid = np.arange(width)[None, :] < count[:, None]
    if kind == "iid":
        for i in range(width):
            tokens[:, i] = sample_rows(law, rng.random(m))
        q_j[:] = law[:, None, :]
    elif kind == "without_replacement":
        remaining = law.copy()
        for i in range(width):
            mass = remaining.sum(axis=1)
            alive = mass > 0  # support exhausted: no more children
            valid[:, i] &= alive
            safe = np.where(alive[:, None], remaining, 1.0)
            tokens[:, i] = sample_rows(safe, rng.random(m))
            q_j[:, i] = np.where(alive[:, None], remaining / np.where(alive, mass, 1.0)[:, None], 0.0)
            remaining[np.arange(m), tokens[:, i]] = 0.0  # once out of mass, a row stays out
    elif kind == "topk":
        order = np.argsort(-law, axis=1, kind="stable")[:, :width]  # ties to the first index
        tokens[:] = order
        q_j[np.arange(m)[:, None], np.arange(width)[None, :], order] = 1.0  # one-hot q_j
    else:
        raise ValueError(f"children = {kind!r}; allowed: {', '.join(CHILD_KINDS)}")
    return tokens, q_j, valid


def draft_trees(
    target: TabularChain,
    draft: TabularChain,
    st: np.ndarray,
    sd: np.ndarray,
    plan: TreePlan,
    rng: np.random.Generator,
    pool: np.ndarray,
) -> _Trees:
    """Draft one tree per row from target/draft states ``st``, ``sd`` and lay it out in the contract."""
    n, vocab, big_n = st.size, target.vocab, plan.max_nodes
    # Full grid, level by level: slot g of level d+1 is child g % w of slot g // w of level d.
    lv_tok, lv_q, lv_valid, lv_st, lv_sd, lv_par = [], [], [], [], [], []
    par_st, par_sd, par_valid = st[:, None], sd[:, None], np.ones((n, 1), dtype=bool)
    for w in plan.widths:
        g = par_st.shape[1]
        if plan.ragged:
            count = rng.integers(0, w + 1, size=n * g)
        else:
            count = np.full(n * g, w)
        tok, q_j, valid = _children(draft, par_sd.ravel(), count, w, plan.children, rng)
        tok = tok.reshape(n, g * w)
        valid = valid.reshape(n, g * w) & np.repeat(par_valid, w, axis=1)
        c_st = target.advance(np.repeat(par_st, w, axis=1).ravel(), tok.ravel()).reshape(n, g * w)
        c_sd = draft.advance(np.repeat(par_sd, w, axis=1).ravel(), tok.ravel()).reshape(n, g * w)
        lv_tok.append(tok)
        lv_q.append(q_j.reshape(n, g * w, vocab))
        lv_valid.append(valid)
        lv_st.append(c_st)
        lv_sd.append(c_sd)
        lv_par.append(np.repeat(np.arange(g), w))  # parent slot within the previous level
        par_st, par_sd, par_valid = c_st, c_sd, valid

    # Compact each row into breadth-first order: node id = rank of the slot among valid slots.
    valid = np.concatenate(lv_valid, axis=1)  # [n, N] in level order
    ids = np.cumsum(valid, axis=1) - 1
    offsets = np.cumsum([0] + [v.shape[1] for v in lv_valid])
    par_slot = np.concatenate([np.full(lv_par[0].size, -1)] + [lv_par[d] + offsets[d - 1] for d in range(1, len(lv_par))])
    rows = np.arange(n)[:, None]
    parent_id = np.where(par_slot[None, :] >= 0, ids[rows, np.maximum(par_slot, 0)[None, :]], -1)
    num_nodes = valid.sum(axis=1)

    tokens = rng.integers(vocab, size=(n, big_n))  # padding: garbage ids
    # Padding parents are plausible ids in [-1, j): a verifier that ignores num_nodes sees a tree.
    parent = np.floor(rng.random((n, big_n)) * (np.arange(big_n) + 1)[None, :]).astype(np.int64) - 1
    q = pool[rng.integers(GARBAGE_POOL, size=(n, big_n))]
    p = pool[rng.integers(GARBAGE_POOL, size=(n, big_n + 1))]
    st_node = np.zeros((n, big_n), dtype=np.int64)
    sd_node = np.zeros((n, big_n), dtype=np.int64)
    r, slot = np.nonzero(valid)
    dest = ids[r, slot]
    tokens[r, dest] = np.concatenate(lv_tok, axis=1)[r, slot]
    parent[r, dest] = parent_id[r, slot]
    q[r, dest] = np.concatenate(lv_q, axis=1)[r, slot]
    st_node[r, dest] = np.concatenate(lv_st, axis=1)[r, slot]
    sd_node[r, dest] = np.concatenate(lv_sd, axis=1)[r, slot]
    p[:, 0] = target.probs(st)
    p[r, 1 + dest] = target.probs(st_node[r, dest])
    return _Trees(tokens, parent, q, p, num_nodes, st_node, sd_node)


def simulate_tree(
    verify: Callable,
    target: TabularChain,
    draft: TabularChain,
    plan: TreePlan,
    rng: np.random.Generator,
    verifier_rng: np.random.Generator,
    sinks: Sequence[Sink] = (),
    progress: Callable[[int, int], None] | None = None,
) -> RoundStats:
    """Generate ``plan.samples`` sequences of ``plan.length`` tokens through the tree verifier ``verify``.

    ``rng`` drives the trees and padding; ``verifier_rng`` is handed to the verifier. Finished
    sequences go to every sink. Raises ContractError on the first malformed output.
    """
    vocab, depth, length = target.vocab, plan.depth, plan.length
    stats = RoundStats(depth)
    pool = garbage_pool(vocab, rng)
    width = min(plan.batch, plan.samples)
    active = np.zeros(width, dtype=bool)
    pos = np.zeros(width, dtype=np.int64)
    st = np.zeros(width, dtype=np.int64)
    sd = np.zeros(width, dtype=np.int64)
    rounds = np.zeros(width, dtype=np.int64)
    tokens = np.zeros(width, dtype=np.int64)
    buf = np.zeros((width, length), dtype=np.int64)
    started = 0
    opos = np.arange(depth + 1)

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
        trees = draft_trees(target, draft, st[rows], sd[rows], plan, rng, pool)

        t0 = time.perf_counter()
        result = verify(trees.tokens, trees.parent, trees.q, trees.p, trees.num_nodes, verifier_rng)
        stats.verifier_seconds += time.perf_counter() - t0
        stats.calls += 1
        path, acc, final = validate_tree_output(result, trees.parent, trees.num_nodes, vocab)

        # --- emitted tokens: the path's tokens, then the final token
        ar = np.arange(n)
        emitted = np.full((n, depth + 1), -1, dtype=np.int64)
        if path.shape[1]:
            on = path >= 0
            emitted[:, : path.shape[1]] = np.where(on, trees.tokens[ar[:, None], np.where(on, path, 0)], -1)
        emitted[ar, acc] = final
        n_out = acc + 1
        first = rounds[rows] == 0
        stats.accept_all += np.bincount(acc, minlength=depth + 1)
        stats.accept_first += np.bincount(acc[first], minlength=depth + 1)
        cols = pos[rows][:, None] + opos[None, :]
        keep = (opos[None, :] < n_out[:, None]) & (cols < length)
        buf[np.broadcast_to(rows[:, None], keep.shape)[keep], cols[keep]] = emitted[keep]
        # --- the context after the round: the last accepted node's state, then the final token
        last = path[ar, np.maximum(acc - 1, 0)] if path.shape[1] else np.zeros(n, dtype=np.int64)
        s_t = np.where(acc > 0, trees.st[ar, np.maximum(last, 0)], st[rows])
        s_d = np.where(acc > 0, trees.sd[ar, np.maximum(last, 0)], sd[rows])
        st[rows] = target.advance(s_t, final)
        sd[rows] = draft.advance(s_d, final)
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
