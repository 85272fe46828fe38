"""The reference verifier of the logits contract: process both sides, then the chain rule.

:func:`verify_reference` is to the logits contract (:mod:`specaudit.contract.logits`) what
:func:`specaudit.verifiers.reference.verify` is to the canonical one: the correct verifier that
the processing-mismatch mutants of :mod:`specaudit.verifiers.zoo.logits` differ from in one
place. It lives with the other correct verifiers; the contract module only says what a logits
verifier must do. Run it with ``specaudit run reference-logits --contract logits``. It processes in the order the
parameters carry (``SamplingParams.convention``: the run's reference), so it passes under every
convention. An engine's verifier has its order built in: :func:`engine_order` is such a correct
verifier for one engine (``verify_hf_order``, ``verify_vllm_order``, ``verify_sglang_order``); it
passes only where the run's reference is that engine's sampler (SGLang PR #36173).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from specaudit.chains.processing import CONVENTIONS, SamplingParams, process
from specaudit.contract.chain import row_generators
from specaudit.contract.logits import LogitsParams, processed
from specaudit.verifiers import reference
from specaudit.verifiers.reference import where_bad

__all__ = ["emitted_logprobs", "engine_order", "in_order", "verify_hf_order", "verify_reference", "verify_reference_logprobs",
           "verify_reference_raw_logprobs", "verify_sglang_order", "verify_vllm_order"]


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


def in_order(params: LogitsParams, convention: str) -> LogitsParams:
    """Return ``params`` with every row's target and drafter processing in the order of ``convention``."""
    rows = None if params.rows is None else tuple(
        replace(r, target=r.target.replace(convention=convention), draft=r.draft.replace(convention=convention))
        for r in params.rows)
    return LogitsParams(params.target.replace(convention=convention), params.draft.replace(convention=convention), rows)


def engine_order(convention: str) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """Return the correct logits verifier of one engine: its filter order built in, whatever the run's reference."""
    order = CONVENTIONS.get(convention)

    def verify(draft, draft_logits, target_logits, num_draft, params, rng):
        return verify_reference(draft, draft_logits, target_logits, num_draft, in_order(params, convention), rng)

    verify.__doc__ = f"Verify with both sides processed in {convention}'s order ({order.order}; {order.source})."
    verify.__name__ = verify.__qualname__ = f"verify_{convention}_order"
    return verify


verify_hf_order = engine_order("hf")
verify_vllm_order = engine_order("vllm")
verify_sglang_order = engine_order("sglang")


def emitted_logprobs(out: np.ndarray, n_out: np.ndarray, law: np.ndarray) -> np.ndarray:
    """Return ``log law[b, j, out[b, j]]`` at every emitted position, NaN past ``n_out`` (the logprobs output)."""
    emitted = np.arange(out.shape[1])[None, :] < n_out[:, None]
    with np.errstate(divide="ignore"):
        picked = np.log(np.take_along_axis(law, np.where(emitted, out, 0)[..., None], axis=2)[..., 0])
    return np.where(emitted, picked, np.nan)


def verify_reference_logprobs(draft, draft_logits, target_logits, num_draft, params, rng):
    """:func:`verify_reference`, also returning the processed target law's logprob of every emitted token."""
    out, n_out = verify_reference(draft, draft_logits, target_logits, num_draft, params, rng)
    _, p = processed(params, draft, np.asarray(num_draft), draft_logits, target_logits)
    return out, n_out, emitted_logprobs(out, n_out, p)


verify_reference_logprobs.logprobs_mode = "processed_logprobs"  # type: ignore[attr-defined]


def verify_reference_raw_logprobs(draft, draft_logits, target_logits, num_draft, params, rng):
    """:func:`verify_reference`, also returning the raw logits' logprob (log_softmax) of every emitted token."""
    out, n_out = verify_reference(draft, draft_logits, target_logits, num_draft, params, rng)
    return out, n_out, emitted_logprobs(out, n_out, process(target_logits, SamplingParams()))


verify_reference_raw_logprobs.logprobs_mode = "raw_logprobs"  # type: ignore[attr-defined]
