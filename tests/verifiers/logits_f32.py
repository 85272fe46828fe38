"""Logits-contract verifiers (``--contract logits``) that take the target law as float32 softmax of its logits.

As engines do (vLLM >= 0.16, PR #32852): the target logits are softmaxed in float32, the draft
law arrives as float32 probabilities, so at p = q the two differ by float32 rounding. The
sampling parameters are ignored (identity processing only: use them on probability scenarios).
"""

import numpy as np

from specaudit.chains.sampling import final_token
from specaudit.contract.chain import assemble


def softmax_f32(logits):
    """Return softmax(logits) computed in float32 (max-shifted), as float64."""
    x = np.asarray(logits, dtype=np.float32)
    top = np.max(np.where(np.isfinite(x), x, -np.inf), axis=-1, keepdims=True)
    e = np.exp(x - top)
    return (e / e.sum(axis=-1, keepdims=True, dtype=np.float32)).astype(np.float64)


def chain_rule(draft, q, p, num_draft, u, slack=1.0):
    """Chain speculative sampling (Leviathan et al. 2023, Alg. 1): accept iff u q(x) < slack p(x)."""
    batch, k = draft.shape
    rows = np.arange(batch)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    safe = np.where(valid, draft, 0)
    coins = u((batch, k))
    p_x = np.take_along_axis(p[:, :k], safe[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(q, safe[..., None], axis=2)[..., 0]
    n_acc = np.cumprod(valid & (coins * q_x < slack * p_x), axis=1).sum(axis=1)
    target = p[rows, n_acc]
    residual = np.maximum(target - q[rows, np.minimum(n_acc, k - 1)], 0.0) if k else None
    return assemble(draft, n_acc, final_token(target, residual, n_acc < num_draft, u((batch,))))


def _laws(draft_logits, target_logits):
    q = np.exp(np.asarray(draft_logits, dtype=np.float64)).astype(np.float32).astype(np.float64)  # draft_probs, float32
    return q, softmax_f32(target_logits)


def float32_softmax(draft, draft_logits, target_logits, num_draft, params, rng):
    """Correct up to float32 rounding: the chain rule on a float32 softmax of the target logits."""
    q, p = _laws(draft_logits, target_logits)
    return chain_rule(draft, q, p, num_draft, rng.random)


def rejects_p_equals_q(draft, draft_logits, target_logits, num_draft, params, rng):
    """Accepts with probability 0.999 p/q: at p = q it rejects one draft in a thousand, far beyond rounding."""
    q, p = _laws(draft_logits, target_logits)
    return chain_rule(draft, q, p, num_draft, rng.random, slack=0.999)
