"""Lookup tables the simulators read: built once per chain pair, shared by every block.

A tabular chain pair is turned once into tables (Walker alias tables for O(1) sampling of whole
m-token draft paths, payload rows of the reachable (target, drafter) state pairs, a flat
next-state table), so one verify call costs a handful of small numpy operations plus one gather
each for ``p`` and ``q`` (:class:`specaudit.simulate.chain._Joint`). :func:`warm` builds them
before workers fork, so forked workers share them. The padding garbage (the rows a verifier sees
past ``num_draft``) comes from one pool, :func:`garbage_pool`, used by the chain and the tree
simulators alike. :func:`rows_within` bounds a batch by the working-set budget.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from specaudit.simulate import kernels

__all__ = [
    "BLOCK_ENTRIES",
    "GARBAGE_POOL",
    "PATH_ENTRIES",
    "TABLE_ENTRIES",
    "alias_tables",
    "garbage_pool",
    "joint_tables",
    "lazy",
    "rows_within",
    "tabular",
    "warm",
]

#: Padding distributions are drawn from this many random laws with every entry > 0, so a
#: verifier that reads past num_draft sees plausible, non-zero garbage (never zeros).
GARBAGE_POOL = 64
#: Chains whose table holds at most this many entries get alias and payload tables.
TABLE_ENTRIES = 1 << 24
#: Joint drafting tables hold at most this many (state, path) entries; drafts are sampled in
#: blocks of m tokens with states * V**m within it (alias tables are built in Python, once).
PATH_ENTRIES = 1 << 14
#: Whole-block payload tables (p and q of every (state, K-path)) hold at most this many entries.
BLOCK_ENTRIES = 1 << 21
#: Working-set bytes per payload entry, in payload items: p and q, plus the verifier's own temporaries.
_ITEMS_PER_ENTRY = 3
#: One call's p and q stay within this many bytes whatever ``--max-memory`` allows: at large V a wider call
#: gains nothing per byte, and its buffers are that many more fresh pages to fault before the first call
#: (0.5 to 5 GB/s at first touch on the 2-core VM, against 10 GB/s for a copy: benchmarks/scale.py); engines'
#: batches at V = 128k are tens of rows. Below V ~ 500 (K = 8, float64) the scenario's ``batch`` binds first.
CALL_BYTES = 256 << 20


def garbage_pool(vocab: int, rng: np.random.Generator) -> np.ndarray:
    """Return GARBAGE_POOL random laws over ``vocab`` tokens with every entry > 0 (padding rows)."""
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


def lazy(chain: Any) -> bool:
    """Return True for a chain generated on demand (no state tables, e.g. :mod:`specaudit.chains.lazy`).

    Such a chain has no finite state space, so no check reads an exact round law of it
    (``Scenario.lazy``: per-prefix and PIT checks only) and the simulator may drive it the way
    an engine does (capped drafts; :func:`specaudit.simulate.chain.simulate`).
    """
    return not isinstance(getattr(chain, "nxt", None), np.ndarray)


def tabular(chain: Any) -> bool:
    """Return True when ``chain`` has tables (dist and nxt arrays) small enough to hold."""
    dist = getattr(chain, "dist", None)
    return isinstance(dist, np.ndarray) and isinstance(getattr(chain, "nxt", None), np.ndarray) and dist.size <= TABLE_ENTRIES


def _reachable_pairs(target: Any, draft: Any) -> np.ndarray:
    """Return the (target, drafter) state pairs reachable from the start pairs, [S, 2]."""
    seen = set(_start_pairs(target, draft))
    frontier = np.array(sorted(seen), dtype=np.int64)
    while frontier.size:
        nt = target.nxt[frontier[:, 0]].ravel()
        ndr = draft.nxt[frontier[:, 1]].ravel()
        new = {(int(a), int(b)) for a, b in zip(nt, ndr)} - seen
        seen |= new
        frontier = np.array(sorted(new), dtype=np.int64).reshape(-1, 2)
    return np.array(sorted(seen), dtype=np.int64)


def _start_pairs(target: Any, draft: Any) -> list[tuple[int, int]]:
    """Return the (target, drafter) start pair of every request class (one, unless a batch mix)."""
    t_starts = getattr(target, "starts", [target.start])  # a batch mix: one start per class (chains.serving)
    d_starts = getattr(draft, "starts", [draft.start])
    return [(int(a), int(b)) for a, b in zip(t_starts, d_starts)]


@functools.lru_cache(maxsize=16)
def joint_tables(target: Any, draft: Any, k: int) -> dict[str, Any]:
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
        "starts": np.array([code[pair] for pair in _start_pairs(target, draft)], dtype=np.int64),
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
    if tabular(target) and tabular(draft):
        joint_tables(target, draft, k)
        kernels.load()


def rows_within(max_memory: int, vocab: int, k: int, itemsize: int = 8, per_call: int | None = CALL_BYTES) -> int:
    """Return how many batch rows of K = ``k`` fit the working-set budget ``max_memory`` and ``per_call`` (at least 1).

    A row holds (2k + 1) V payload entries of ``itemsize`` bytes (float64: 8, float32: 4).
    ``per_call`` (:data:`CALL_BYTES`) bounds the payload of one call in host memory (fresh pages
    to fault); None on a device, whose memory is allocated once and reused.
    """
    row = itemsize * vocab * (2 * k + 1)
    return max(1, min(int(max_memory) // (_ITEMS_PER_ENTRY * row), (per_call or 1 << 62) // row))
