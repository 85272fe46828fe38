"""Processing-mismatch mutants in the logits contract, each mirroring a filed bug.

Every mutant has the signature of :func:`specaudit.contract.logits.verify_reference`::

    verify(draft[B,K], draft_logits[B,K,V], target_logits[B,K+1,V], num_draft[B], params, rng)

and runs the correct chain rule (:func:`specaudit.verifiers.reference.verify`) on a ``q`` or ``p`` that
was processed wrongly: the verification's view of one processed quantity diverges from the
law the drafts were sampled from (q) or the processed target (p). Run one with
``specaudit run specaudit.verifiers.zoo.logits:NAME --contract logits -s tag:sampling``.

Attributes
----------
MUTANTS : dict[str, LogitsMutant]
    Registry in definition order; ``diverges`` names the hypothesis of
    :mod:`specaudit.checks.processing` that describes the bug, so the diagnosis can be checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specaudit.verifiers import reference
from specaudit.errors import closest
from specaudit.chains.processing import SamplingParams, process

__all__ = ["MUTANTS", "LogitsMutant", "get"]

Verifier = Callable[..., tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class LogitsMutant:
    """A logits verifier with one processing mismatch, and what it mirrors."""

    name: str
    func: Verifier
    description: str
    mirrors: str
    diverges: str  # a hypothesis name of specaudit.checks.processing.HYPOTHESES

    def __call__(self, draft, draft_logits, target_logits, num_draft, params, rng):
        """Run the mutant on one batch."""
        return self.func(draft, draft_logits, target_logits, num_draft, params, rng)


MUTANTS: dict[str, LogitsMutant] = {}


def get(name: str) -> LogitsMutant:
    """Return the registered mutant ``name``; raise KeyError with the closest name otherwise."""
    try:
        return MUTANTS[name]
    except KeyError:
        raise KeyError(f"unknown logits mutant {name!r}{closest(name, MUTANTS)}; known: {', '.join(MUTANTS)}") from None


def _register(mirrors: str, diverges: str) -> Callable[[Verifier], Verifier]:
    def wrap(func: Verifier) -> Verifier:
        entry = LogitsMutant(func.__name__, func, (func.__doc__ or "").strip(), mirrors, diverges)
        MUTANTS[entry.name] = entry
        func.mutant = entry  # type: ignore[attr-defined]
        return func

    return wrap


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
