"""The reference verifier of the draft-vocab contract: map q to the target's ids, then the chain rule.

``verify(draft, q_draft[B,K,Vd], p[B,K+1,V], num_draft, d2t[Vd], rng)``
(:mod:`specaudit.contract.logits`, ``draft-vocab``): ``draft`` holds target ids, ``q_draft`` the
drafter's law over its own ids and ``d2t[i]`` the target id of draft id ``i``. The remap scatters
``q_draft`` into target space (``q[d2t] = q_draft``, 0 elsewhere), so the acceptance test reads
``q`` at the draft id the token came from. Run it with
``specaudit run reference-draft-vocab --contract draft-vocab -s tag:draft-vocab``.
"""

from __future__ import annotations

import numpy as np

from specaudit.verifiers import reference

__all__ = ["to_target", "verify"]


def to_target(q_draft: np.ndarray, d2t: np.ndarray, vocab: int) -> np.ndarray:
    """Return ``q_draft`` [..., Vd] in target space [..., vocab]: ``q[..., d2t[i]] = q_draft[..., i]``, 0 elsewhere."""
    q = np.zeros((*q_draft.shape[:-1], vocab), dtype=np.float64)
    q[..., np.asarray(d2t, dtype=np.int64)] = q_draft
    return q


def verify(
    draft: np.ndarray, q_draft: np.ndarray, p: np.ndarray, num_draft: np.ndarray, d2t: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify a batch whose q is in draft space: remap it through ``d2t``, then the chain rule (Leviathan et al. 2023)."""
    return reference.verify(draft, to_target(q_draft, d2t, p.shape[-1]), p, num_draft, rng)
