"""The reference verifier of the logits contract: process both sides, then the chain rule.

:func:`verify_reference` is to the logits contract (:mod:`specaudit.contract.logits`) what
:func:`specaudit.verifiers.reference.verify` is to the canonical one: the correct verifier that
the processing-mismatch mutants of :mod:`specaudit.verifiers.zoo.logits` differ from in one
place. It lives with the other correct verifiers; the contract module only says what a logits
verifier must do. Run it with ``specaudit run reference-logits --contract logits``.
"""

from __future__ import annotations

import numpy as np

from specaudit.contract.chain import row_generators
from specaudit.contract.logits import LogitsParams, processed
from specaudit.verifiers import reference
from specaudit.verifiers.reference import where_bad

__all__ = ["verify_reference"]


@row_generators  # rng goes to the chain reference as it came
def verify_reference(
    draft: np.ndarray,
    draft_logits: np.ndarray,
    target_logits: np.ndarray,
    num_draft: np.ndarray,
    params: LogitsParams,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify a batch in the logits contract: process both sides, then the chain rule.

    ``q = process(draft_logits, params.draft)`` is the law the drafts were sampled from and
    ``p = process(target_logits, params.target)`` the processed target, at every position
    including the bonus; on serving scenarios each row is processed with its own ``params.rows``
    entry and history (output plus drafts ``0..j-1`` at position ``j``:
    :func:`specaudit.contract.logits.processed`). The chain rule (Leviathan et al. 2023, Alg. 1) does the rest. With
    target temperature 0, ``p`` is one-hot: a draft is accepted iff it is the target's argmax,
    which is emitted at the first mismatch and as the bonus (greedy decoding).
    """
    # The bad-row rule (specaudit.checks.bad_rows) on logits: a row with a NaN or +inf entry, or no finite
    # entry (all -inf: no mass), is bad. A bad target row read raises naming the row; a bad draft row read
    # is not trusted (its q becomes NaN: the chain reference rejects the draft there and draws from p);
    # rows past num_draft are never read, so a bad one is processed as a stand-in and never used.
    num_draft = np.asarray(num_draft, dtype=np.int64)
    k = draft_logits.shape[1]
    with np.errstate(invalid="ignore"):
        bad_t, bad_d = ~np.isfinite(target_logits.max(axis=-1)), ~np.isfinite(draft_logits.max(axis=-1))
    read_t = np.arange(k + 1)[None, :] <= num_draft[:, None]
    read_d = np.arange(k)[None, :] < num_draft[:, None]
    if (bad_t & read_t).any():
        raise ValueError(f"bad target logits rows (NaN, +inf or all -inf): {where_bad(bad_t & read_t, target_logits, 'target_logits')}; "
                         "a verifier has no law to draw these rows' tokens from")
    if bad_t.any():  # padding only: a stand-in row, never read
        target_logits = np.where(bad_t[..., None], 0.0, target_logits)
    if bad_d.any():
        draft_logits = np.where(bad_d[..., None], 0.0, draft_logits)
    q, p = processed(params, draft, num_draft, draft_logits, target_logits)  # per row on serving scenarios
    if (bad_d & read_d).any():
        q[bad_d & read_d] = np.nan  # not trusted: the draft there is rejected and the token drawn from p
    return reference.verify(draft, q, p, num_draft, rng)
