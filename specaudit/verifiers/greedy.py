"""The reference greedy verifier: the temperature-0 serving contract, written from the rule.

At temperature 0 a lossless verifier accepts a draft iff it equals the argmax of the target and
emits that argmax at the first mismatch and as the bonus, so every sequence equals greedy
decoding of the target (notes/theory.md, "Greedy"); :mod:`specaudit.checks.greedy` checks that
exactly on scenarios with ``mode: greedy``. This is the correct verifier those scenarios are
calibrated on; it lives with the other correct verifiers (alias ``reference-greedy``).
"""

from __future__ import annotations

import numpy as np

from specaudit.contract.chain import assemble, chain_inputs, row_generators
from specaudit.verifiers.reference import raise_bad_p

__all__ = ["verify"]


@row_generators  # draws nothing: per-request seeds change nothing
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
    used (so a bad q row changes nothing); padding past ``num_draft`` is never read. Raises
    ValueError naming the rows when a p row it reads holds NaN / +inf or no positive mass (the bad-row
    rule, read off the argmax's value: a -inf entry beside positive ones leaves the argmax alone).
    """
    batch, k = draft.shape
    top = np.argmax(p, axis=2)  # [B, K+1]; padding columns are computed but never used
    # The bad-row rule (specaudit.checks.bad_rows) on the argmax's value, no second pass over p: argmax
    # stops at a NaN and at +inf, and a row with no positive mass has a top value <= 0.
    cols = np.arange(k + 1)[None, :]
    best = p[np.arange(batch)[:, None], cols, top]
    bad_p = (cols <= num_draft[:, None]) & ~((best > 0) & (best < np.inf))  # NaN compares false
    if bad_p.any():
        raise_bad_p(bad_p, p)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    n_acc = np.cumprod(valid & (draft == top[:, :k]), axis=1).sum(axis=1)
    return assemble(draft, n_acc, top[np.arange(batch), n_acc])
