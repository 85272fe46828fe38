"""Verifiers that draw from somewhere other than the rng they are given, and wrappers.

Each is the chain rule (Leviathan et al. 2023, Alg. 1) written over a ``coin(shape)`` uniform
source; only where the uniforms come from differs. ``leq=True`` accepts when ``u <= p/q`` (as
``u q <= p``), which accepts a draft of p = 0 at u = 0 (sglang #35771).
"""

import random

import numpy as np

from specaudit.adapters.randomness import routed
from specaudit.chains.sampling import final_token
from specaudit.contract.chain import assemble


def chain_rule(draft, q, p, num_draft, coin, leq=False, falloff=False):
    """Chain speculative sampling with uniforms from ``coin(shape)``; ``falloff``: the final token by an
    inverse CDF at a float32 uniform clamped to V - 1 instead of the last token of positive mass."""
    batch, k = draft.shape
    rows = np.arange(batch)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    safe = np.where(valid, draft, 0)
    u = np.asarray(coin((batch, k)), dtype=np.float64).reshape(batch, k)
    p_x = np.take_along_axis(p[:, :k], safe[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(q, safe[..., None], axis=2)[..., 0]
    accepted = valid & ((u * q_x <= p_x) if leq else (u * q_x < p_x))
    n_acc = np.cumprod(accepted, axis=1).sum(axis=1)
    rejected = n_acc < num_draft
    target = p[rows, n_acc]
    residual = np.maximum(target - q[rows, np.minimum(n_acc, k - 1)], 0.0) if k else None
    u_final = np.asarray(coin((batch,)), dtype=np.float64).reshape(batch)
    if falloff:
        weights = np.where(rejected[:, None], residual, target) if k else target
        cum = np.cumsum(weights, axis=-1)
        u32 = u_final.astype(np.float32).astype(np.float64)  # 1 - 2**-53 rounds to 1.0f
        token = np.minimum((cum <= (u32 * cum[:, -1])[:, None]).sum(axis=-1), p.shape[-1] - 1)
        return assemble(draft, n_acc, token)
    token = final_token(target, residual, rejected, u_final)
    return assemble(draft, n_acc, token)


def _python_coin(shape):
    return np.array([random.random() for _ in range(int(np.prod(shape)))]).reshape(shape)


def _numpy_global_coin(shape):
    return np.random.random(shape)  # looked up at call time: routed() can reach it


def _torch_coin(shape):
    import torch

    return torch.rand(*shape, dtype=torch.float64).numpy()


# ---- the four that must fail `-s markov-v4` -----------------------------------------


def numpy_global(draft, q, p, num_draft, rng):
    """Draws its uniforms from numpy's legacy global RNG (np.random.random), never from rng."""
    return chain_rule(draft, q, p, num_draft, _numpy_global_coin)


def writes_p(draft, q, p, num_draft, rng):
    """Correct output, then zeroes the target rows it read in place (vllm-ascend PR #2881)."""
    out, n_out = chain_rule(draft, q, p, num_draft, rng.random)
    p[np.arange(p.shape[0]), n_out - 1] = 0.0
    return out, n_out


def fixed_seed_per_call(draft, q, p, num_draft, rng):
    """Restarts a hard-coded seed on every call: the same output whatever the run's seed."""
    return chain_rule(draft, q, p, num_draft, np.random.default_rng(1234).random)


_OWN = np.random.default_rng(99)


def module_generator(draft, q, p, num_draft, rng):
    """Keeps its own module-level generator: the same seed gives different outputs."""
    return chain_rule(draft, q, p, num_draft, _OWN.random)


def argmax_only(draft, q, p, num_draft, rng):
    """Not sampling at all: accepts a draft iff it is the argmax, emits the argmax (a greedy verifier)."""
    batch, k = draft.shape
    top = np.argmax(p, axis=2)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    n_acc = np.cumprod(valid & (draft == top[:, :k]), axis=1).sum(axis=1)
    return assemble(draft, n_acc, top[np.arange(batch), n_acc])


def cdf_falloff(draft, q, p, num_draft, rng):
    """Clamps its float32 inverse CDF to V - 1: at u -> 1 a token of p = 0 past the support comes out."""
    return chain_rule(draft, q, p, num_draft, rng.random, falloff=True)


def leq_ratio(draft, q, p, num_draft, rng):
    """Accepts when u <= p/q: a draft of p = 0 is accepted at u = 0 (sglang #35771)."""
    return chain_rule(draft, q, p, num_draft, rng.random, leq=True)


def crashes_on_empty(draft, q, p, num_draft, rng):
    """Correct, except that it cannot take an empty batch (one probe crashes, the others run)."""
    if draft.shape[0] == 0:
        raise ValueError("empty batch")
    return chain_rule(draft, q, p, num_draft, rng.random)


def numpy_global_routed(draft, q, p, num_draft, rng):
    """The numpy-global verifier behind the one-line wrapper: correct and reproducible."""
    with routed(rng):
        return numpy_global(draft, q, p, num_draft, rng)


# ---- wrappers over a `u <= p/q` verifier on a framework RNG --------------------------


def python_leq(draft, q, p, num_draft, rng):
    """A `u <= p/q` verifier drawing Python's random.random() coins (no rng)."""
    return chain_rule(draft, q, p, num_draft, _python_coin, leq=True)


def seeds_python(draft, q, p, num_draft, rng):
    """The canonical wrapper that seeds Python's random from the run's rng (one rng.integers draw)."""
    random.seed(int(rng.integers(2**62)))
    return python_leq(draft, q, p, num_draft, rng)


def routes_python(draft, q, p, num_draft, rng):
    """The one-line wrapper with the routing helper."""
    with routed(rng):
        return python_leq(draft, q, p, num_draft, rng)


def torch_leq(draft, q, p, num_draft, rng):
    """A `u <= p/q` verifier drawing torch.rand coins (no rng)."""
    return chain_rule(draft, q, p, num_draft, _torch_coin, leq=True)


def seeds_torch(draft, q, p, num_draft, rng):
    """The canonical wrapper that seeds torch from the run's rng."""
    import torch

    torch.manual_seed(int(rng.integers(2**62)))
    return torch_leq(draft, q, p, num_draft, rng)


def routes_torch(draft, q, p, num_draft, rng):
    """The one-line wrapper with the routing helper."""
    import torch  # noqa: F401  (routed() routes torch once it is imported)

    with routed(rng):
        return torch_leq(draft, q, p, num_draft, rng)


def routes_torch_correct(draft, q, p, num_draft, rng):
    """A correct (`u < p/q`) torch verifier behind the routing helper: the positive control."""
    import torch  # noqa: F401

    with routed(rng):
        return chain_rule(draft, q, p, num_draft, _torch_coin)
