"""Draft-vocabulary remap mutants (the draft-vocab contract), each mirroring a filed bug.

Every mutant has the signature of :func:`specaudit.verifiers.vocab.verify`::

    verify(draft[B,K] target ids, q_draft[B,K,Vd], p[B,K+1,V], num_draft[B], d2t[Vd], rng)

and runs the correct chain rule on a ``q`` remapped wrongly. Run one with
``specaudit run specaudit.verifiers.zoo.vocab:NAME --contract draft-vocab -s tag:draft-vocab``.
"""

from __future__ import annotations

import numpy as np

from specaudit.verifiers import reference
from specaudit.verifiers.zoo import mutant as zoo
from specaudit.verifiers.zoo.mutant import Mutant

__all__ = ["MUTANTS"]


@zoo.register("distribution", "rtp-llm PR #1295/#1311 (q left in draft-vocabulary space and indexed with target ids: "
              "q(x) = 0 past the draft vocabulary, every such draft accepted)", contract="draft-vocab")
def skipped_remap(draft, q_draft, p, num_draft, d2t, rng):
    """Read q_draft as if draft ids were target ids (no remap): q(x) = q_draft[x], 0 for x >= Vd."""
    q = np.zeros((*q_draft.shape[:-1], p.shape[-1]), dtype=np.float64)
    q[..., : q_draft.shape[-1]] = q_draft
    return reference.verify(draft, q, p, num_draft, rng)


@zoo.register("distribution", "draft-vocabulary map applied in the wrong direction (d2t used as a target-to-draft "
              "table: a gather instead of a scatter)", contract="draft-vocab")
def inverted_remap(draft, q_draft, p, num_draft, d2t, rng):
    """Remap with d2t read target -> draft: q(t) = q_draft[d2t[t]] for t < Vd with d2t[t] < Vd, else 0."""
    vd = q_draft.shape[-1]
    d2t = np.asarray(d2t, dtype=np.int64)
    q = np.zeros((*q_draft.shape[:-1], p.shape[-1]), dtype=np.float64)
    rows = np.flatnonzero(d2t < vd)
    q[..., rows] = q_draft[..., d2t[rows]]
    return reference.verify(draft, q, p, num_draft, rng)


#: The draft-vocabulary mutants of the one zoo registry, by name, in definition order.
MUTANTS: dict[str, Mutant] = zoo.family("draft-vocab")
