"""The reference verifier: chain speculative sampling written from the rule.

Leviathan et al. 2023, Alg. 1; Chen et al. 2023. Vectorised over the batch, no per-row loop.
"""

from __future__ import annotations

import numpy as np

from specaudit.chains.sampling import final_token
from specaudit.contract.chain import assemble, chain_inputs


@chain_inputs
def verify(
    draft: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_draft: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify a batch of ragged draft chains; return ``(out[B, K+1], n_out[B])``.

    Row ``b`` has ``num_draft[b]`` valid drafts. Draft ``x`` at position ``i`` is accepted when
    ``u * q[b, i, x] < p[b, i, x]`` (probability min(1, p/q), never for p(x) = 0, no division).
    At the first rejection the token is drawn from norm(max(0, p - q)); if every valid draft is
    accepted, a bonus token is drawn from ``p[b, num_draft[b]]``. ``out`` is padded with -1 and
    ``n_out = accepted + 1``. Everything past ``num_draft[b]`` is padding and is never read.
    """
    batch: int
    batch, k = draft.shape
    rows = np.arange(batch)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    safe = np.where(valid, draft, 0)  # padding ids may be garbage: never index with them
    u = rng.random((batch, k))
    p_x = np.take_along_axis(p[:, :k], safe[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(q, safe[..., None], axis=2)[..., 0]
    accepted = valid & (u * q_x < p_x)
    n_acc = np.cumprod(accepted, axis=1).sum(axis=1)  # run length before the first rejection
    rejected = n_acc < num_draft

    target = p[rows, n_acc]  # bonus position num_draft when nothing was rejected
    residual = np.maximum(target - q[rows, np.minimum(n_acc, k - 1)], 0.0) if k else None
    token = final_token(target, residual, rejected, rng.random(batch))
    return assemble(draft, n_acc, token)
