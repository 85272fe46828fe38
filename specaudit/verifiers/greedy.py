"""The reference greedy verifier: the temperature-0 serving contract, written from the rule.

At temperature 0 a lossless verifier accepts a draft iff it equals the argmax of the target and
emits that argmax at the first mismatch and as the bonus, so every sequence equals greedy
decoding of the target (notes/theory.md, "Greedy"); :mod:`specaudit.checks.greedy` checks that
exactly on scenarios with ``mode: greedy``. This is the correct verifier those scenarios are
calibrated on; it lives with the other correct verifiers (alias ``reference-greedy``).
"""

from __future__ import annotations

import numpy as np

from specaudit.contract.chain import assemble, chain_inputs

__all__ = ["verify"]


@chain_inputs
def verify(
    draft: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_draft: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify at temperature 0: accept while the draft is the argmax of p (ties to the first index).

    The reference greedy verifier (``specaudit.verifiers.greedy:verify``): the token at the first
    mismatch, or the bonus at ``p[b, num_draft[b]]``, is that argmax. ``q`` and ``rng`` are not
    used; padding past ``num_draft`` is never read.
    """
    batch, k = draft.shape
    top = np.argmax(p, axis=2)  # [B, K+1]; padding columns are computed but never used
    valid = np.arange(k)[None, :] < num_draft[:, None]
    n_acc = np.cumprod(valid & (draft == top[:, :k]), axis=1).sum(axis=1)
    return assemble(draft, n_acc, top[np.arange(batch), n_acc])
