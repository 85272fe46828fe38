"""Processing-mismatch mutants in the logits contract, each mirroring a filed bug.

Every mutant has the signature of :func:`specaudit.verifiers.logits.verify_reference`::

    verify(draft[B,K], draft_logits[B,K,V], target_logits[B,K+1,V], num_draft[B], params, rng)

and runs the correct chain rule (:func:`specaudit.verifiers.reference.verify`) on a ``q`` or ``p`` that
was processed wrongly: the verification's view of one processed quantity diverges from the
law the drafts were sampled from (q) or the processed target (p). Run one with
``specaudit run specaudit.verifiers.zoo.logits:NAME --contract logits -s tag:sampling``.

Attributes
----------
MUTANTS : dict[str, Mutant]
    The logits mutants of the one zoo registry, in definition order; ``diverges`` names the
    hypothesis of :mod:`specaudit.laws.processing` that describes the bug, so the diagnosis can
    be checked. ``LogitsMutant`` is the one :class:`~specaudit.verifiers.zoo.mutant.Mutant` type.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specaudit.chains.processing import SamplingParams, process
from specaudit.verifiers import reference
from specaudit.verifiers.zoo import mutant as zoo
from specaudit.verifiers.zoo.mutant import Mutant, Verifier

__all__ = ["MUTANTS", "LogitsMutant", "get"]

#: The one mutant type; the logits contract's entries carry ``diverges``.
LogitsMutant = Mutant


def get(name: str) -> Mutant:
    """Return the logits mutant ``name``; raise KeyError with the closest name otherwise."""
    return zoo.get(name, "logits")


def _register(mirrors: str, diverges: str) -> Callable[[Verifier], Verifier]:
    """Register a processing-mismatch mutant of the logits contract."""
    return zoo.register("distribution", mirrors, contract="logits", diverges=diverges)


@_register("HF transformers #47932 (q returned unfiltered while drafts came from top-k)", "q-unprocessed")
def unprocessed_q(draft, draft_logits, target_logits, num_draft, params, rng):
    """Verify with q = softmax(draft logits), unprocessed, though drafts came from the processed q."""
    q = process(draft_logits, SamplingParams())
    p = process(target_logits, params.target)
    return reference.verify(draft, q, p, num_draft, rng)


@_register("vLLM #42744 (min_p dropped on verified tokens)", "p-bonus-only")
def bonus_only_processing(draft, draft_logits, target_logits, num_draft, params, rng):
    """Process the target at the bonus position only; verified positions use softmax(target logits)."""
    num_draft = np.asarray(num_draft, dtype=np.int64)
    q = process(draft_logits, params.draft)
    p = process(target_logits, SamplingParams())
    rows = np.arange(len(num_draft))
    p[rows, num_draft] = process(target_logits[rows, num_draft], params.target)
    return reference.verify(draft, q, p, num_draft, rng)


@_register("vLLM #9834 (sampling params applied inconsistently to target and draft)", "q-no-temperature")
def temperature_target_only(draft, draft_logits, target_logits, num_draft, params, rng):
    """Apply the temperature to the target only: q is the draft logits processed at temperature 1."""
    q = process(draft_logits, params.draft.replace(temperature=1.0))
    p = process(target_logits, params.target)
    return reference.verify(draft, q, p, num_draft, rng)


@_register("DeepSpec #31 (low-precision drafts verified against a full-precision q)", "q-float32")
def float32_draft(draft, draft_logits, target_logits, num_draft, params, rng):
    """Process the draft logits in float32 (near-ties at the top-k boundary merge) against float64 p."""
    q = process(draft_logits, params.draft, dtype=np.float32).astype(np.float64)
    p = process(target_logits, params.target)
    return reference.verify(draft, q, p, num_draft, rng)


#: The logits mutants of the one zoo registry, by name, in definition order.
MUTANTS: dict[str, Mutant] = zoo.family("logits")
