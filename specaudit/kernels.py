"""Compiled hot path of the simulator for tabular chains (optional extra ``fast``: numba).

The simulator's numpy code (:class:`specaudit.simulate._Joint`) costs a handful of whole-array
passes per verify call; these loops do the same work in one pass per step, row by row. They
take the same uniforms and garbage draws from the same generator calls and apply the same
float64 arithmetic, so the sequences, counts and statistics are identical with and without
numba (tests/test_kernels.py compares them). Without numba, or with ``SPECAUDIT_NO_JIT=1``,
:func:`load` returns None and the numpy code runs.

Compiled code is cached next to this file (``cache=True``; numba's user-wide cache when this
folder is read-only, in memory when neither is writable); the first run after an install pays
the compile time once (a few seconds), later runs load it.
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace
from typing import Any

import numpy as np


def begin(c, u, n_paths, threshold, alias, paths, path_states, p_blocks, q_blocks, nd, gp, gq, gx, garbage,
          p_table, q_table, dx, drafts, at, p, q):  # pragma: no cover - compiled
    """Draw a round's drafts and write the verifier's inputs, row by row.

    Drafts: K per row by whole m-token paths (Walker alias): ``c`` [n] is each row's joint
    state, ``u`` [blocks, n] the uniforms (as ``rng.random(n)`` per block). ``at[r, i]`` gets
    the state before position i, ``at[r, K]`` the state at the bonus position; the drafts go
    to ``dx[:, :K]`` and to the verifier's own copy ``drafts``.
    Payloads: ``p`` [n, K+1, V] and ``q`` [n, K, V], from the whole-path tables ``p_blocks``
    [S*P, (K+1) V] and ``q_blocks`` when given (one path per row, nothing padded), else from
    the per-state tables at the states. Past ``nd[r]`` (p position i > nd, q position and
    draft i >= nd) a row takes garbage row ``garbage + g[r, i]`` and the draft a random id
    ``gx[r, i]``; ``gp`` of size 0 means no row is padded.
    """
    n, k1, v = p.shape
    k = k1 - 1
    m = paths.shape[1]
    blocks = u.shape[0]
    if p_blocks.size > 0:  # m = K: copy whole rows
        p2, q2 = p.reshape(n, k1 * v), q.reshape(n, k * v)
        wp, wq = k1 * v, k * v
        for r in range(n):
            s = c[r]
            scaled = u[0, r] * n_paths
            j = np.int64(scaled)
            f = np.uint64(s * n_paths + j)
            keep = np.int64(scaled - j < threshold[f])  # branch-free: the outcome is a coin flip
            path = keep * j + (1 - keep) * alias[f]
            f = np.uint64(s * n_paths + path)
            path = np.uint64(path)
            for i in range(k):
                x = paths[path, i]
                dx[r, i] = x
                drafts[r, i] = x
            for i in range(k1):
                at[r, i] = path_states[f, i]
            for i in range(wp):
                p2[r, i] = p_blocks[f, i]
            for i in range(wq):
                q2[r, i] = q_blocks[f, i]
        return
    padded = gp.size > 0
    for r in range(n):
        s = c[r]
        at[r, 0] = s
        i0 = 0
        for b in range(blocks):
            scaled = u[b, r] * n_paths
            j = np.int64(scaled)
            f = s * n_paths + j
            keep = np.int64(scaled - j < threshold[f])
            path = keep * j + (1 - keep) * alias[f]
            f = s * n_paths + path
            for i in range(min(m, k - i0)):
                dx[r, i0 + i] = paths[path, i]
                at[r, i0 + i + 1] = path_states[f, i + 1]
            i0 += m
            s = path_states[f, m]
        for i in range(k1):
            s = at[r, i]
            if padded and i > nd[r]:
                s = garbage + gp[r, i]
            for x in range(v):
                p[r, i, x] = p_table[s, x]
        for i in range(k):
            s = at[r, i]
            if padded and i >= nd[r]:
                s = garbage + gq[r, i]
                dx[r, i] = gx[r, i]
            drafts[r, i] = dx[r, i]
            for x in range(v):
                q[r, i, x] = q_table[s, x]


def end(out, n_out, drafts_ext, nd, vocab, at, nxt, states, pos, rounds, tokens, buf, length,
        accept_all, accept_first, moments, cells, weights, done, finished, start, budget):  # pragma: no cover - compiled
    """Check a verifier's output and book it; return ``(finished rows, live rows)``, or (-1, n).

    Every row must hold the drafts before column n_out-1, a token < V at it and -1 after, with
    1 <= n_out <= nd + 1 (``drafts_ext``: the drafts and a -1 column). At the first row that
    does not, (-1, n) is returned with the rows before it booked: the output breaks the
    contract, and the caller's full check (:func:`specaudit.contract.validate_output`) says how.
    Booking: accept histograms, tokens appended to ``buf``, joint states advanced. Rows that
    reach ``length`` tokens are listed in ``done`` and copied to ``finished``; their round and
    token totals go to ``moments`` (sums of R, T, R^2, T^2, R T) and, when ``cells`` is not
    empty, their sequence's cell ``sum_t x_t weights[t]`` is counted in it. The first
    ``budget`` finished rows restart at joint state ``start`` (continuous batching); when fewer
    sequences are left to start, the other rows are dropped and the live rows compacted in front.
    """
    n, k1 = out.shape
    count = 0
    for r in range(n):
        acc = n_out[r] - 1
        if acc < 0 or acc > nd[r]:
            return -1, n
        last = out[r, acc]
        wrong = last < 0 or last >= vocab
        here = pos[r]
        for i in range(k1):  # branch-free check; the row is copied whatever (junk past n_out is overwritten next round)
            x = out[r, i]
            want = drafts_ext[r, i] if i < acc else -1
            want = last if i == acc else want
            wrong |= x != want
            buf[r, np.uint64(here) + np.uint64(i)] = x  # unsigned: no negative-index wraparound
        if wrong:
            return -1, n
        accept_all[acc] += 1
        accept_first[acc] += here == 0
        states[r] = nxt[at[r, acc] * vocab + last]
        here += n_out[r]
        pos[r] = here
        rounds[r] += 1
        tokens[r] += n_out[r]
        done[count] = r  # branch-free compaction of the finished rows
        count += here >= length
    m0 = m1 = m2 = m3 = m4 = 0.0
    count_cells = cells.size > 0
    for j in range(count):
        r = done[j]
        code = 0
        for i in range(length):
            x = buf[r, i]
            finished[j, i] = x
            code += x * weights[i]
        if count_cells:
            cells[code] += 1
        rr, tt = np.float64(rounds[r]), np.float64(tokens[r])
        m0 += rr
        m1 += tt
        m2 += rr * rr
        m3 += tt * tt
        m4 += rr * tt
    moments[0] += m0
    moments[1] += m1
    moments[2] += m2
    moments[3] += m3
    moments[4] += m4
    refill = min(count, budget)
    for j in range(refill):
        r = done[j]
        states[r] = start
        pos[r] = 0
        rounds[r] = 0
        tokens[r] = 0
    if refill == count:
        return count, n
    live = 0  # drain: keep the unfinished rows, in order
    j = refill
    for r in range(n):
        if j < count and done[j] == r:
            j += 1
            continue
        if live != r:
            states[live] = states[r]
            pos[live] = pos[r]
            rounds[live] = rounds[r]
            tokens[live] = tokens[r]
            for i in range(buf.shape[1]):
                buf[live, i] = buf[r, i]
        live += 1
    return count, live


@functools.cache
def load() -> SimpleNamespace | None:
    """Return the compiled kernels, or None without numba or with ``SPECAUDIT_NO_JIT=1``."""
    if os.environ.get("SPECAUDIT_NO_JIT", "") not in ("", "0"):
        return None
    try:
        import numba
    except ImportError:
        return None
    try:
        return _compile(numba, cache=True)
    except RuntimeError:  # no writable cache location (read-only install, no home): compile in memory
        return _compile(numba, cache=False)


def _compile(numba: Any, cache: bool) -> SimpleNamespace:
    jit = numba.njit(cache=cache, nogil=True, boundscheck=False)
    return SimpleNamespace(**{f.__name__: jit(f) for f in (begin, end)})
