"""The reference verifier of the logits contract: process both sides, then the chain rule.

:func:`verify_reference` is to the logits contract (:mod:`specaudit.contract.logits`) what
:func:`specaudit.verifiers.reference.verify` is to the canonical one: the correct verifier that
the processing-mismatch mutants of :mod:`specaudit.verifiers.zoo.logits` differ from in one
place. It lives with the other correct verifiers; the contract module only says what a logits
verifier must do. Run it with ``specaudit run reference-logits --contract logits``.
"""

from __future__ import annotations

import numpy as np

from specaudit.chains.processing import process
from specaudit.contract.logits import LogitsParams
from specaudit.verifiers import reference

__all__ = ["verify_reference"]


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
    including the bonus; the chain rule (Leviathan et al. 2023, Alg. 1) does the rest. With
    target temperature 0, ``p`` is one-hot: a draft is accepted iff it is the target's argmax,
    which is emitted at the first mismatch and as the bonus (greedy decoding).
    """
    q = process(draft_logits, params.draft)
    p = process(target_logits, params.target)
    return reference.verify(draft, q, p, num_draft, rng)
