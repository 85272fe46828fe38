"""Processing-mismatch mutants in the logits contract, each mirroring a filed bug.

Every mutant has the signature of :func:`specaudit.verifiers.logits.verify_reference`::

    verify(draft[B,K], draft_logits[B,K,V], target_logits[B,K+1,V], num_draft[B], params, rng)

and runs the correct chain rule (:func:`specaudit.verifiers.reference.verify`) on a ``q`` or ``p`` that
was processed wrongly: the verification's view of one processed quantity diverges from the
law the drafts were sampled from (q) or the processed target (p). Run one with
``specaudit run specaudit.verifiers.zoo.logits:NAME --contract logits -s tag:sampling``.

The serving mutants (registered with :func:`_serving`, ``diverges`` None: no single processed
quantity of :mod:`specaudit.laws.processing` describes them) break per-row processing of a
batch (``params.rows``: :mod:`specaudit.contract.logits`); run them on ``-s tag:serving``.

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

from specaudit.chains.processing import SamplingParams, process, process_rows
from specaudit.contract.logits import LogitsParams, RowParams, history_counts, processed
from specaudit.verifiers import reference
from specaudit.verifiers.logits import in_order, verify_reference_logprobs
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


@zoo.register("distribution", "SGLang PR #36173 (speculative verifier: top-k, renormalise, top-p, min-p ignored; the "
              "sampler cuts top-p on the unfiltered law and applies min-p)", contract="logits")
def sglang_speculative_order(draft, draft_logits, target_logits, num_draft, params, rng):
    """Process the target top-k -> renormalise -> top-p without min-p (SGLang's verifier before PR #36173)."""
    num_draft = np.asarray(num_draft, dtype=np.int64)
    q, _ = processed(params, draft, num_draft, draft_logits, target_logits)
    old = in_order(params, "hf")
    old = LogitsParams(old.target.replace(min_p=0.0), old.draft,
                       None if old.rows is None else tuple(RowParams(r.target.replace(min_p=0.0), r.draft, r.output)
                                                           for r in old.rows))
    _, p = processed(old, draft, num_draft, draft_logits, target_logits)
    return reference.verify(draft, q, p, num_draft, rng)


def _serving(mirrors: str) -> Callable[[Verifier], Verifier]:
    """Register a per-row (serving) mutant of the logits contract."""
    return zoo.register("distribution", mirrors, contract="logits")


def _rows(params: LogitsParams, batch: int) -> tuple[RowParams, ...]:
    return params.row_params(batch)


@_serving("vLLM #18902 (penalties under speculative decoding applied without the draft tokens in the history)")
def penalties_without_drafts(draft, draft_logits, target_logits, num_draft, params, rng):
    """Penalise the target at every position with the history before draft 0 (drafts 0..j-1 left out)."""
    num_draft = np.asarray(num_draft, dtype=np.int64)
    rows = _rows(params, len(num_draft))
    q, _ = processed(params, draft, num_draft, draft_logits, target_logits)
    counts = history_counts(params, draft, num_draft, target_logits.shape[-1], drafts=False)
    p = process_rows(target_logits, [r.target for r in rows], counts)
    return reference.verify(draft, q, p, num_draft, rng)


@_serving("structured output: the allowed-token mask applied to the target logits but not to the draft's")
def mask_target_only(draft, draft_logits, target_logits, num_draft, params, rng):
    """Verify with q processed without the allowed-token mask, though the drafts came from the masked q."""
    num_draft = np.asarray(num_draft, dtype=np.int64)
    rows = _rows(params, len(num_draft))
    _, p = processed(params, draft, num_draft, draft_logits, target_logits)
    q = process_rows(draft_logits, [r.draft.replace(allowed_tokens=None) for r in rows])
    return reference.verify(draft, q, p, num_draft, rng)


@_serving("logit bias applied to the draft logits only (the target verified without the request's bias)")
def bias_draft_only(draft, draft_logits, target_logits, num_draft, params, rng):
    """Verify against the target processed without the request's logit bias (the drafter keeps it)."""
    num_draft = np.asarray(num_draft, dtype=np.int64)
    rows = _rows(params, len(num_draft))
    q, _ = processed(params, draft, num_draft, draft_logits, target_logits)
    unbiased = LogitsParams(params.target.replace(logit_bias=()), params.draft,
                            tuple(RowParams(r.target.replace(logit_bias=()), r.draft, r.output) for r in rows))
    _, p = processed(unbiased, draft, num_draft, draft_logits, target_logits)
    return reference.verify(draft, q, p, num_draft, rng)


@_serving("batch-wide sampling parameters: one scalar temperature / top-k / top-p for a mixed batch (row 0's)")
def batch_params_row0(draft, draft_logits, target_logits, num_draft, params, rng):
    """Process every row with row 0's parameters (each row keeps its own history)."""
    num_draft = np.asarray(num_draft, dtype=np.int64)
    rows = _rows(params, len(num_draft))
    if rows:
        first = rows[0]
        params = LogitsParams(first.target, first.draft, tuple(RowParams(first.target, first.draft, r.output) for r in rows))
    q, p = processed(params, draft, num_draft, draft_logits, target_logits)
    return reference.verify(draft, q, p, num_draft, rng)


@_serving("mixed greedy / random batches: temperature-0 rows taken down the random path (sampled at temperature 1)")
def greedy_rows_sampled(draft, draft_logits, target_logits, num_draft, params, rng):
    """Verify temperature-0 rows against softmax(target logits), sampled, instead of the argmax."""
    num_draft = np.asarray(num_draft, dtype=np.int64)

    def sampled(sp: SamplingParams) -> SamplingParams:
        return sp.replace(temperature=1.0) if sp.greedy else sp

    rows = _rows(params, len(num_draft))
    given = LogitsParams(sampled(params.target), params.draft,
                         None if params.rows is None else tuple(RowParams(sampled(r.target), r.draft, r.output) for r in rows))
    q, p = processed(given, draft, num_draft, draft_logits, target_logits)
    return reference.verify(draft, q, p, num_draft, rng)


@zoo.register("boundary", "vLLM PR #30846 (logits processed in place: the raw logprobs returned were the processed ones)",
              contract="logits")
def logprobs_processed_as_raw(draft, draft_logits, target_logits, num_draft, params, rng):
    """Declare raw logprobs (logprobs_mode raw_logprobs) but return the processed target law's."""
    return verify_reference_logprobs(draft, draft_logits, target_logits, num_draft, params, rng)


logprobs_processed_as_raw.logprobs_mode = "raw_logprobs"  # type: ignore[attr-defined]


#: The logits mutants of the one zoo registry, by name, in definition order.
MUTANTS: dict[str, Mutant] = zoo.family("logits")

