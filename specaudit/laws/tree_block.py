"""Exact round laws of tree and block verification on finite-state chains.

Any verification rule is described, for the exact references, by its step kernels
``M_m[s, s']``: the probability that a round started in joint state ``s`` emits ``m`` tokens
(``m - 1`` accepted drafts) and leaves the context in ``s'``. :func:`specaudit.laws.chain.horizon_from_steps`
turns them into the finite-horizon tokens/step and accept-length law. Chain kernels come from
:mod:`specaudit.laws.chain`; this module adds

* :func:`tree_step_kernels` -- SpecInfer Alg. 2 over a draft tree whose node at depth d has
  ``width[d]`` children (all, or a uniform number 0..width[d] when ragged), drawn i.i.d., without
  replacement, or as the deterministic top-k of the drafter's law;
* :func:`block_step_kernels` -- block verification (Sun et al. 2403.10444), by enumerating the
  draft block.

The dispatch on a scenario's ``algorithm`` lives in :mod:`specaudit.laws`.

Joint states are ``s_T * S_D + s_D`` as in :func:`specaudit.laws.chain.round_kernels`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from specaudit.chains.tabular import TabularChain
from specaudit.errors import UsageError

__all__ = [
    "block_expected_accepted",
    "block_step_kernels",
    "tree_step_kernels",
]

#: Enumerations (states x sequences x vocabulary) larger than this are refused.
MAX_ENUMERATION = 1 << 25
CHILD_KINDS = ("iid", "without_replacement", "topk")


def _joint(target: TabularChain, draft: TabularChain) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Return p, q, next-state tables [S, V] on the joint state space, and the start state."""
    if target.vocab != draft.vocab:
        raise UsageError(
            f"draft: vocabulary {draft.vocab} differs from the target's {target.vocab}; allowed: the same vocabulary"
        )
    s_d = draft.n_states
    p = np.repeat(target.dist, s_d, axis=0)
    q = np.tile(draft.dist, (target.n_states, 1))
    nxt = np.repeat(target.nxt, s_d, axis=0) * s_d + np.tile(draft.nxt, (target.n_states, 1))
    return p, q, nxt, target.start * s_d + draft.start


def _route(weight: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """Return W[s, s'] = sum_{x: nxt[s, x] = s'} weight[s, x]."""
    n = nxt.shape[0]
    cell = (np.arange(n)[:, None] * n + nxt).ravel()
    return np.bincount(cell, weights=weight.ravel(), minlength=n * n).reshape(n, n)


def _normalise(rows: np.ndarray, fallback: np.ndarray | float) -> np.ndarray:
    """Normalise rows over the last axis; rows with no mass become ``fallback``."""
    total = rows.sum(axis=-1, keepdims=True)
    return np.where(total > 0, rows / np.where(total > 0, total, 1.0), fallback)


def _accept_prob(res_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    """Return P(u q < p) for u ~ U[0, 1): min(1, p/q), 1 when q = 0 < p, 0 when p = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q_x > 0, res_x / np.where(q_x > 0, q_x, 1.0), np.where(res_x > 0, 1.0, 0.0))
    return np.minimum(ratio, 1.0)


def _check_size(entries: int, what: str) -> None:
    if entries > MAX_ENUMERATION:
        raise UsageError(
            f"{what}: the exact reference enumerates {entries:,} entries (more than {MAX_ENUMERATION:,}); "
            "allowed: a smaller vocabulary, fewer drafts or a narrower tree"
        )


def _siblings(
    p_s: np.ndarray, q_s: np.ndarray, nxt: np.ndarray, width: int, kind: str, count_law: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return (W_acc[S, S], W_fin[S, S]) for one node's children under SpecInfer Alg. 2.

    ``W_acc[s, s']``: probability that some child is accepted and the context moves to s' (the
    child's state); ``W_fin[s, s']``: no child accepted, the replacement drawn from the residual
    moves the context to s'. ``count_law[c]`` is the law of the number of children c = 0..width.
    """
    n_states, vocab = p_s.shape
    if kind != "topk":  # top-k siblings are deterministic: one sequence per state
        _check_size(n_states * vocab ** (width + 1), f"tree width {width}")
    order = np.argsort(-q_s, axis=1, kind="stable")  # top-k order, ties to the first index
    at_least = count_law[::-1].cumsum()[::-1]  # P(c >= i)
    # Partial sibling sequences [S, P]: probability of the drawn prefix with all rejected, the
    # residual [S, P, V], and the tokens used so far (sampling without replacement).
    mass = np.ones((n_states, 1))
    res = p_s[:, None, :].copy()
    used = np.zeros((n_states, 1, vocab), dtype=bool)
    acc = np.zeros((n_states, vocab))
    fin = np.zeros((n_states, vocab))
    for i in range(width + 1):
        if kind == "without_replacement":
            remaining = np.where(used, 0.0, q_s[:, None, :])
            exhausted = remaining.sum(axis=2) <= 0
        else:
            exhausted = np.zeros(mass.shape, dtype=bool)
        # Stop after i children: the replacement is drawn from the residual. A row out of
        # tokens to draw without replacement stops here whatever its child count.
        stop = np.where(exhausted, at_least[i], count_law[i])
        fin += np.einsum("sp,spv->sv", mass * stop, res)
        if i == width:
            break
        mass = np.where(exhausted, 0.0, mass)
        if kind == "iid":
            q_i = np.broadcast_to(q_s[:, None, :], res.shape)
            branch = q_i
        elif kind == "without_replacement":
            q_i = _normalise(remaining, 0.0)
            branch = q_i
        else:
            q_i = np.broadcast_to(np.eye(vocab)[order[:, i]][:, None, :], res.shape)  # one-hot q_j
            branch = q_i
        # Child token x: drawn with prob branch[x], accepted with prob a(x) against the residual.
        a = _accept_prob(res, q_i)
        hit = mass[:, :, None] * branch * a * at_least[i + 1]
        acc += hit.sum(axis=1)
        # Rejected: continue with p <- norm(max(p - q_i, 0)), one partial per token x.
        rest = _normalise(np.maximum(res - q_i, 0.0), res)  # [S, P, V]
        new_mass = (mass[:, :, None] * branch * (1.0 - a)).reshape(n_states, -1)
        res = np.repeat(rest, vocab, axis=1)
        used = np.repeat(used, vocab, axis=1)
        used[:, np.arange(used.shape[1]), np.tile(np.arange(vocab), used.shape[1] // vocab)] = True
        mass = new_mass
        keep = mass.any(axis=0)  # drop branches impossible in every state
        mass, res, used = mass[:, keep], res[:, keep], used[:, keep]
    return _route(acc, nxt), _route(fin, nxt)


def tree_step_kernels(
    target: TabularChain,
    draft: TabularChain,
    width: Sequence[int],
    children: str = "iid",
    ragged: bool = False,
) -> tuple[np.ndarray, int]:
    """Return the step kernels of one tree-verification round and the joint start state.

    Parameters
    ----------
    target, draft : TabularChain
        Target chain (p) and draft chain (q) over the same vocabulary.
    width : sequence of int
        ``width[d]`` children per node at depth d (the root is depth 0); the depth is ``len(width)``.
    children : {"iid", "without_replacement", "topk"}
        How a node's children are drawn from the drafter's law q at that node: i.i.d.; without
        replacement (fewer children when q's support runs out); the deterministic top-k (ties to
        the first index).
    ragged : bool
        Each node keeps a uniform number 0..width[d] of children instead of width[d].

    Returns
    -------
    steps : numpy.ndarray
        ``[D + 1, S, S]``; ``steps[m - 1]`` is M_m (m tokens emitted).
    start : int
        The joint start state.

    Notes
    -----
    Recursion from the leaves: ``T_D = [P]`` (a leaf emits its bonus) and
    ``T_d[1] = W_fin``, ``T_d[m] = W_acc T_{d+1}[m - 1]`` for m >= 2, where ``W_acc``/``W_fin`` sum
    over every sibling sequence the draft can produce at a node, testing the children in order
    against the residual as SpecInfer Alg. 2 does. Exponential in the width (``V**width``
    sibling sequences per state), linear in the depth.

    References
    ----------
    Miao et al. 2023 (SpecInfer), arXiv 2305.09781, Alg. 2; Jeon et al. 2024, arXiv 2402.14160
    (without replacement); notes/theory.md, "Multi-candidate / tree".
    """
    if children not in CHILD_KINDS:
        raise UsageError(f"children: received {children!r}, allowed: {', '.join(CHILD_KINDS)}")
    p_s, q_s, nxt, start = _joint(target, draft)
    levels = [int(w) for w in width]
    if any(w < 0 for w in levels):
        raise UsageError(f"width: received {levels}, allowed: integers >= 0")
    bonus = _route(p_s, nxt)
    below = bonus[None]  # T_D
    for w in reversed(levels):
        law = np.full(w + 1, 1.0 / (w + 1)) if ragged else np.eye(w + 1)[w]
        w_acc, w_fin = _siblings(p_s, q_s, nxt, w, children, law)
        level = np.empty((below.shape[0] + 1,) + bonus.shape)
        level[0] = w_fin
        level[1:] = np.einsum("st,mtu->msu", w_acc, below)
        below = level
    return below, start


def block_step_kernels(
    target: TabularChain, draft: TabularChain, draft_law: np.ndarray
) -> tuple[np.ndarray, int]:
    """Return the step kernels of one block-verification round and the joint start state.

    Parameters
    ----------
    target, draft : TabularChain
        Target chain (p) and draft chain (q) over the same vocabulary.
    draft_law : array_like
        Weights of the block length j = 0..K; non-negative, summing to 1.

    Returns
    -------
    steps : numpy.ndarray
        ``[K + 1, S, S]``; ``steps[m - 1]`` is M_m (tau = m - 1 drafts kept).
    start : int
        The joint start state.

    Notes
    -----
    Enumerates every draft block x_1..x_j ~ q: with the running weights P_i and the success
    probabilities h_i (see :mod:`specaudit.verifiers.block`) fixed by the block, tau is the last success, so
    ``P(tau = i | x) = h_i prod_{l > i} (1 - h_l)`` with ``h_0 = 1``; the round then emits
    ``Y ~ norm(max(P_i p_{i+1} - q_{i+1}, 0))`` (``p_{j+1}`` when i = j). Cost
    ``O(S V^(K+1) K)``; refused beyond ``MAX_ENUMERATION``.

    References
    ----------
    Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh, "Block Verification Accelerates
    Speculative Decoding", arXiv 2403.10444, Alg. 2 and Thm. 2.
    """
    law = np.asarray(draft_law, dtype=np.float64)
    if law.ndim != 1 or law.size == 0 or (law < 0).any() or abs(law.sum() - 1.0) > 1e-9:
        raise UsageError(f"draft_law: received {law!r}, allowed: K+1 non-negative weights summing to 1")
    p_s, q_s, nxt, start = _joint(target, draft)
    n_states, vocab = p_s.shape
    k = law.size - 1
    steps = np.zeros((k + 1, n_states, n_states))
    for j in np.flatnonzero(law > 0):
        _check_size(n_states * vocab ** (int(j) + 1), f"block of {j} drafts")
        states = [np.arange(n_states)[:, None]]  # joint state after x_1..x_i, [S, V^i]
        prob = np.ones((n_states, 1))
        weight = [np.ones((n_states, 1))]  # P_i
        for _ in range(j):
            prev = np.repeat(states[-1], vocab, axis=1)
            x = np.tile(np.arange(vocab), states[-1].shape[1])[None, :]
            q_x, p_x = q_s[prev, x], p_s[prev, x]
            prob = np.repeat(prob, vocab, axis=1) * q_x
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(q_x > 0, p_x / np.where(q_x > 0, q_x, 1.0), np.where(p_x > 0, np.inf, 0.0))
            weight = [np.repeat(w, vocab, axis=1) for w in weight]
            weight.append(np.minimum(1.0, weight[-1] * ratio))
            states = [np.repeat(s, vocab, axis=1) for s in states]
            states.append(nxt[prev, x])
        # h_i for i = 1..j (h_0 = 1: tau = 0 when no position succeeds).
        h = [np.ones_like(prob)]
        for i in range(1, j + 1):
            if i == j:
                h.append(weight[i])
            else:
                z = np.maximum(weight[i][..., None] * p_s[states[i]] - q_s[states[i]], 0.0).sum(axis=2)
                denom = z + 1.0 - weight[i]
                h.append(np.where(denom > 0, z / np.where(denom > 0, denom, 1.0), 1.0))
        after = np.ones_like(prob)  # prod_{l > i} (1 - h_l)
        for i in range(j, -1, -1):
            p_tau = prob * h[i] * after
            after = after * (1.0 - h[i])
            p_next = p_s[states[i]]
            if i == j:
                emit = p_next
            else:
                emit = _normalise(np.maximum(weight[i][..., None] * p_next - q_s[states[i]], 0.0), p_next)
            # emit y from the state after x_1..x_i; route (s, state_i, y) -> nxt[state_i, y]
            contrib = p_tau[..., None] * emit  # [S, n, V]
            ends = nxt[states[i]]  # [S, n, V]
            cell = (np.arange(n_states)[:, None, None] * n_states + ends).ravel()
            steps[i] += law[j] * np.bincount(cell, weights=contrib.ravel(), minlength=n_states**2).reshape(
                n_states, n_states
            )
    return steps, start


def block_expected_accepted(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """Return E[tau], the expected drafts kept by block verification, for context-free p and q.

    Parameters
    ----------
    p, q : array_like
        Target and draft laws over the same vocabulary, the same at every position.
    k : int
        Block length K >= 0.

    Returns
    -------
    float
        ``sum_{i=1..K} E_{x_1..x_i ~ q}[P_i]`` with ``P_i = min(1, P_{i-1} p(x_i) / q(x_i))``.

    Notes
    -----
    Computed by direct enumeration of the ``V**K`` blocks, independently of
    :func:`block_step_kernels`. The toy case p = (1/3, 2/3), q = (2/3, 1/3), K = 2 gives 11/9
    (chain verification: alpha + alpha^2 = 10/9).

    References
    ----------
    Sun et al. 2024, arXiv 2403.10444, Thm. 2 and Sec. 3 (toy example).
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    total = 0.0
    for i in range(1, k + 1):
        for block in itertools.product(range(p.size), repeat=i):
            prob, weight = 1.0, 1.0
            for x in block:
                prob *= q[x]
                if prob == 0.0:
                    break
                weight = min(1.0, weight * p[x] / q[x])
            total += prob * weight  # E[P_i] over the blocks x_1..x_i
    return total
