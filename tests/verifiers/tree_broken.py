"""Tree verifiers for the tree probes' controls: a per-row loop written from SpecInfer Alg. 2, and broken copies.

``loop`` is a second, independent reference (one Python loop per row, no vectorisation); each
broken verifier differs from it in one place, and each is the negative control of one tree probe
(tests/checks/test_tree_probes.py, tests/checks/test_controls.py).
"""

import numpy as np

from specaudit.adapters.randomness import routed
from specaudit.chains.sampling import sample_rows
from specaudit.contract.tree import tree_contract


def _loop(tokens, parent, q, p, num_nodes, rng, *, final="residual", swapped=False, max_depth=None,
          bonus_last=False, leq=False):
    """SpecInfer Alg. 2 row by row; keyword switches are the bugs."""
    batch, n = tokens.shape
    path = np.full((batch, n), -1, dtype=np.int64)
    out = np.zeros(batch, dtype=np.int64)
    u = rng.random((batch, n))
    u_final = rng.random(batch)
    for b in range(batch):
        cur, depth, rejected = -1, 0, False
        base = p[b, 0] / p[b, 0].sum()
        law = base
        for j in range(int(num_nodes[b])):
            if parent[b, j] != cur:
                continue
            if max_depth is not None and depth >= max_depth:
                break
            c = tokens[b, j]
            ok = u[b, j] <= law[c] / q[b, j, c] if leq else u[b, j] * q[b, j, c] < law[c]
            if ok:
                path[b, depth] = j
                depth, cur, rejected = depth + 1, j, False
                base = law = p[b, 1 + j] / p[b, 1 + j].sum()
            else:
                rejected = True
                res = np.maximum(q[b, j] - law if swapped else law - q[b, j], 0.0)
                if res.sum() > 0:
                    law = res / res.sum()
        if bonus_last and not rejected:
            law = p[b, -1]  # bug: the bonus law is read from the last row, padding included
        if final == "from_p" and rejected:
            law = base  # bug: the replacement is drawn from the node's p, not the residual
        out[b] = sample_rows(law[None, :], u_final[b : b + 1])[0]
    return path[:, : max(int((path >= 0).sum(axis=1).max(initial=0)), 0)], out


@tree_contract
def loop(tokens, parent, q, p, num_nodes, rng):
    """Correct: SpecInfer Alg. 2 one row at a time."""
    return _loop(tokens, parent, q, p, num_nodes, rng)


@tree_contract
def final_from_p(tokens, parent, q, p, num_nodes, rng):
    """Draw the replacement after rejected children from the node's p, not from the residual."""
    return _loop(tokens, parent, q, p, num_nodes, rng, final="from_p")


@tree_contract
def swapped_residual(tokens, parent, q, p, num_nodes, rng):
    """Residual norm(max(q - p, 0)) instead of norm(max(p - q, 0))."""
    return _loop(tokens, parent, q, p, num_nodes, rng, swapped=True)


@tree_contract
def one_level(tokens, parent, q, p, num_nodes, rng):
    """Accept at most one child (the root's): never descend further (lossless, fewer tokens per step)."""
    return _loop(tokens, parent, q, p, num_nodes, rng, max_depth=1)


@tree_contract
def bonus_from_last(tokens, parent, q, p, num_nodes, rng):
    """Draw the final token from p[b, -1] where no child was rejected: reads padding past num_nodes."""
    return _loop(tokens, parent, q, p, num_nodes, rng, bonus_last=True)


@tree_contract
def ignores_seed(tokens, parent, q, p, num_nodes, rng):
    """Restart a fixed seed on every call."""
    return _loop(tokens, parent, q, p, num_nodes, np.random.default_rng(0))


@tree_contract
def numpy_global(tokens, parent, q, p, num_nodes, rng):
    """Draw from numpy's legacy global RNG instead of rng."""
    return _loop(tokens, parent, q, p, num_nodes, np.random)


@tree_contract
def mutates_p(tokens, parent, q, p, num_nodes, rng):
    """Renormalise p in place (writes into its input)."""
    p /= p.sum(axis=-1, keepdims=True) * (1 + 1e-9)
    return _loop(tokens, parent, q, p, num_nodes, rng)


@tree_contract
def final_eq_vocab(tokens, parent, q, p, num_nodes, rng):
    """Return final = V on the first row (an unclamped id)."""
    path, final = _loop(tokens, parent, q, p, num_nodes, rng)
    if final.size:
        final[0] = p.shape[-1]
    return path, final


@tree_contract
def leq_seeds_own(tokens, parent, q, p, num_nodes, rng):
    """`u <= p/q` on a generator seeded from rng: the run's uniforms never reach the sibling tests."""
    own = np.random.default_rng(int(rng.integers(2**62)))
    return _loop(tokens, parent, q, p, num_nodes, own, leq=True)


@tree_contract
def leq_numpy_routed(tokens, parent, q, p, num_nodes, rng):
    """`u <= p/q` drawing from numpy's global RNG, wrapped in routed(rng): the scripted uniforms reach it."""
    with routed(rng):
        return _loop(tokens, parent, q, p, num_nodes, np.random, leq=True)
