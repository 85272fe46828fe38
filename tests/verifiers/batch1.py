"""Batch-1 verifiers in the per-row layout (draft[n], q[n, V], p[n + 1, V]) -> emitted ids."""

import random

import numpy as np


def _sample(law, u):
    cum = np.cumsum(law)
    idx = int((cum <= u * cum[-1]).sum())
    return min(idx, int(np.flatnonzero(law > 0)[-1]))


def _verify(draft, q, p, coin, leq=False):
    out = []
    for i, x in enumerate(draft.tolist()):
        u = coin()
        if (u * q[i, x] <= p[i, x]) if leq else (u * q[i, x] < p[i, x]):
            out.append(x)
            continue
        residual = np.maximum(p[i] - q[i], 0.0)
        out.append(_sample(residual if residual.sum() > 0 else p[i], coin()))
        return out
    out.append(_sample(p[len(draft)], coin()))
    return out


def with_rng(draft, q, p, rng):
    """Correct, drawing from the rng it is handed."""
    return _verify(draft, q, p, rng.random)


def python_random(draft, q, p):
    """Correct, drawing Python's random.random() (the per-row adapter routes it)."""
    return _verify(draft, q, p, random.random)


def python_random_leq(draft, q, p):
    """`u <= p/q` on Python's random: accepts a p = 0 draft at u = 0."""
    return _verify(draft, q, p, random.random, leq=True)


def torch_style(draft, q, p):
    """Correct, on torch tensors with torch.rand / torch.multinomial (the global torch generator)."""
    import torch

    out = []
    for i in range(draft.shape[0]):
        x = int(draft[i])
        if torch.rand(1, dtype=torch.float64).item() * q[i, x] < p[i, x]:
            out.append(x)
            continue
        residual = torch.clamp(p[i] - q[i], min=0.0)
        out.append(int(torch.multinomial(residual if residual.sum() > 0 else p[i], 1).item()))
        return torch.tensor(out)
    out.append(int(torch.multinomial(p[draft.shape[0]], 1).item()))
    return torch.tensor(out)
