"""Exact laws of the kernel mutants: zoo bugs that only change the per-position kernels.

Kernel mutants (``resample_from_p``, ``lenient``, ``accept_all``, ``unclamped_residual``) change only
what one draft position accepts (``a(x)``) and what a rejection emits (``e(y)``). :data:`KERNELS`
writes each as ``kernel(p, q) -> (a, e)``, mirroring the switches of
:mod:`specaudit.verifiers.zoo.chain` (a test checks each against simulation), and :func:`chain_law`
computes the law of whole sequences of a chain verifier with such a kernel exactly, by a forward
pass over (prefix, joint chain state, drafts left in the round). Pure float64 on tabular chains;
which mutant gets which law (exact, lossless, simulated) is decided in
:mod:`specaudit.analysis.mutant_laws`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specaudit.chains.tabular import TabularChain

__all__ = ["KERNELS", "Kernel", "chain_law"]

Kernel = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Return norm(max(p - q, 0)) per row, p where it is all zero (as the reference does)."""
    z = np.maximum(p - q, 0.0)
    tot = z.sum(axis=1, keepdims=True)
    return np.where(tot > 0, z / np.where(tot > 0, tot, 1.0), p)


def _signed_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Return the law of specaudit.verifiers.zoo.chain._sample_signed on the unclamped p - q (index clamped to V - 1)."""
    # idx(u) = #{j : cum_j <= u Z}: with t = sort(cum / Z) clipped to [0, 1], idx = m on
    # [t_(m), t_(m+1)), so P(m) is the gap between consecutive clipped thresholds.
    v = p.shape[1]
    w = p - q
    z = np.maximum(w, 0.0).sum(axis=1, keepdims=True)
    t = np.clip(np.sort(np.cumsum(w, axis=1) / np.where(z > 0, z, 1.0), axis=1), 0.0, 1.0)
    edges = np.concatenate([np.zeros((p.shape[0], 1)), t, np.ones((p.shape[0], 1))], axis=1)
    law = np.diff(edges, axis=1)  # m = 0..V
    law[:, v - 1] += law[:, v]
    return np.where(z > 0, law[:, :v], p)


#: Per-position kernels (a(x): draft x proposed and accepted; e(y): law of the token emitted on a
#: rejection), mirroring the switches of ``specaudit.verifiers.zoo.chain._chain``; a test checks each against simulation.
KERNELS: dict[str, Kernel] = {
    "reference": lambda p, q: (np.minimum(p, q), _residual(p, q)),
    "resample_from_p": lambda p, q: (np.minimum(p, q), p),
    # u (l q) < p with l = 0.5: accepted with min(1, 2 p / q), so a = min(q, 2 p)
    "lenient": lambda p, q: (np.minimum(q, 2.0 * p), _residual(p, q)),
    # u = 0: 0 < p accepts every draft of positive target probability
    "accept_all": lambda p, q: (np.where(p > 0, q, 0.0), _residual(p, q)),
    "unclamped_residual": lambda p, q: (np.minimum(p, q), _signed_law(p, q)),
}


def _joint_rows(target: TabularChain, draft: TabularChain) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Return p, q and next state on the joint state ``s_T * S_D + s_D``, and the start state."""
    s_d = draft.n_states
    p = np.repeat(target.dist, s_d, axis=0)
    q = np.tile(draft.dist, (target.n_states, 1))
    nxt = np.repeat(target.nxt, s_d, axis=0) * s_d + np.tile(draft.nxt, (target.n_states, 1))
    return p, q, nxt, target.start * s_d + draft.start


def chain_law(
    target: TabularChain,
    draft: TabularChain,
    draft_law: np.ndarray,
    length: int,
    kernel: Kernel,
) -> np.ndarray:
    """Return the exact law of L-token sequences of a chain verifier with per-position ``kernel``.

    Parameters
    ----------
    target, draft : TabularChain
        Target (p) and drafter (q) chains over the same vocabulary.
    draft_law : array_like
        Weights of the number of drafts j = 0..K per round.
    length : int
        Tokens per sequence L.
    kernel : callable
        ``kernel(p, q) -> (a, e)`` on rows [S, V]: ``a(x)`` = P(draft x proposed and accepted),
        ``e(y)`` = law of the token emitted after a rejection (rows sum to 1).

    Returns
    -------
    ndarray
        Shape ``[V**L]``, indexed like :func:`specaudit.laws.chain.joint_probabilities`.

    Notes
    -----
    Forward pass over (emitted prefix, joint state, drafts left in the round): with r >= 1 drafts
    left, x is emitted with ``a(x)`` and the round goes on; otherwise y with ``(1 - sum a) e(y)``
    and a new round starts (r ~ draft_law); with r = 0 the bonus y ~ p ends the round. With the
    reference kernel this is the target law (Leviathan et al. 2023, Thm. 1); a test checks it.
    Memory ``O(V**L S (K+1))``.
    """
    p, q, nxt, start = _joint_rows(target, draft)
    a, e = kernel(p, q)
    s_count, v = p.shape
    law = np.asarray(draft_law, dtype=np.float64)
    r = law.size
    reject = np.clip(1.0 - a.sum(axis=1), 0.0, 1.0)[:, None] * e
    mass = np.zeros((1, s_count, r))
    mass[0, start] = law
    for _ in range(length):
        prefixes = mass.shape[0]
        cell_state = ((np.arange(prefixes)[:, None, None] * v + np.arange(v)[None, None, :]) * s_count + nxt[None]).ravel()
        end = mass[:, :, 1:].sum(axis=2)[..., None] * reject[None] + mass[:, :, :1] * p[None]  # [P, S, V]
        size = prefixes * v * s_count
        new = np.bincount(cell_state, weights=end.ravel(), minlength=size)[:, None] * law[None, :]
        if r > 1:
            cont = mass[:, :, 1:, None] * a[None, :, None, :]  # [P, S, R-1, V]: r -> r - 1
            idx = (cell_state.reshape(prefixes, s_count, 1, v) * r + np.arange(r - 1)[None, None, :, None]).ravel()
            new = new.ravel() + np.bincount(idx, weights=cont.ravel(), minlength=size * r)
        mass = new.reshape(prefixes * v, s_count, r)
    return mass.sum(axis=(1, 2))
