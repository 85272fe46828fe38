"""The ``logprobs`` check: the log-probabilities a logits verifier returns are those of the law it declares.

A verifier of the logits contract that declares ``verify.logprobs_mode`` (vLLM's names:
``processed_logprobs`` or ``raw_logprobs``; :mod:`specaudit.contract.logits`) returns, with
``(out, n_out)``, ``logprobs[B,K+1]``: at every emitted position ``j`` of row ``b``, the
log-probability of ``out[b, j]`` under the processed target law at ``j`` (processed), or under
``softmax`` of the raw target logits (raw). The check makes one call on raw logits with
processing that moves every law (a temperature that is not 1, top-k; the scenario's own target
and drafter parameters where it has them), drafts sampled from the processed drafter, and
compares each emitted position's logprob to both laws: within :data:`TOLERANCE` of the declared
one passes; matching the other names the bug (vLLM PR #30846: logits processed in place, so the
"raw" logprobs were the processed ones). Exact: nothing is random but the call's own draws.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.chains.logits import params_of
from specaudit.chains.processing import SamplingParams, process
from specaudit.checks.probes import ExactOutcome, result_of, skipped
from specaudit.contract.chain import returned_arrays, validate_output
from specaudit.contract.logits import LogitsParams
from specaudit.errors import ContractError, VerifierCrash, VerifierTimeout
from specaudit.results import Category, CheckResult, Status

__all__ = ["NAME", "TOLERANCE", "run_logprobs"]

NAME = "logprobs"
#: Largest |got - expected| of a logprob (float32 log-softmax rounds to ~1e-6; a wrong law is off by ~0.1).
TOLERANCE = 1e-3
#: Rows of the one call, and the most vocabulary it carries.
ROWS, MAX_VOCAB = 16, 1024
#: Temperature used where the scenario's target has no processing (with top-k at V/2): every law moves.
MOVING_TEMPERATURE = 0.7


def _params(spec: Any, vocab: int) -> LogitsParams:
    """Return the scenario's target and drafter parameters, or processing that moves every law."""
    target, drafter = (params_of(c) for c in spec.chains())
    if target.identity:
        target = SamplingParams(temperature=MOVING_TEMPERATURE, top_k=max(2, vocab // 2))
    return LogitsParams(target, drafter)


def _inputs(spec: Any, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, LogitsParams]:
    """Return one call's draft, draft logits, target logits, num_draft and parameters."""
    rng = np.random.default_rng([seed, 0x10C9])
    vocab, k = min(spec.vocab, MAX_VOCAB), max(spec.k, 1)
    params = _params(spec, vocab)
    target_logits = rng.normal(0.0, 2.0, (ROWS, k + 1, vocab))
    draft_logits = target_logits[:, :k] + rng.normal(0.0, 1.0, (ROWS, k, vocab))
    q = process(draft_logits, params.draft)
    cdf = np.cumsum(q, axis=-1)
    draft = np.minimum((cdf < rng.random((ROWS, k, 1)) * cdf[..., -1:]).sum(axis=-1), vocab - 1).astype(np.int64)
    num_draft = np.where(np.arange(ROWS) % 4 == 0, k, rng.integers(0, k + 1, ROWS)).astype(np.int64)
    return draft, draft_logits, target_logits, num_draft, params


def _log_law(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(process(logits, params))


def run_logprobs(verify: Callable[..., Any], mode: str, spec: Any, seed: int, contract: str) -> ExactOutcome:
    """Check ``verify``'s logprobs (``mode``: "processed" or "raw") on one call; ``verify`` is already guarded."""
    if contract != "logits":
        return ExactOutcome((skipped(NAME, Category.CONTRACT, f"the logprobs check speaks the logits contract (--contract logits), not {contract!r}"),))
    if getattr(spec, "algorithm", "chain") != "chain":
        return ExactOutcome((skipped(NAME, Category.CONTRACT, f"algorithm {spec.algorithm!r}: the logprobs check drives the chain contract"),))
    draft, draft_logits, target_logits, num_draft, params = _inputs(spec, seed)
    declared = _log_law(target_logits, params.target) if mode == "processed" else _log_law(target_logits, SamplingParams())
    other = _log_law(target_logits, SamplingParams()) if mode == "processed" else _log_law(target_logits, params.target)
    t0 = time.perf_counter()
    try:
        result = verify(draft, draft_logits.copy(), target_logits.copy(), num_draft.copy(), params, np.random.default_rng(seed))
    except VerifierTimeout as exc:
        return ExactOutcome((), exc, 1, time.perf_counter() - t0)
    except VerifierCrash as exc:
        check = CheckResult(NAME, Category.CONTRACT, Status.ERROR, f"the verifier crashed: {exc}", data={"error": str(exc)})
        return ExactOutcome((check,), None, 1, time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    return ExactOutcome((_judge(result, mode, draft, num_draft, declared, other),), None, 1, seconds, {"rows": ROWS})


def _judge(result: Any, mode: str, draft: np.ndarray, num_draft: np.ndarray, declared: np.ndarray,
           other: np.ndarray) -> CheckResult:
    """Return the check's result for one call's ``result`` (the declared and the other law's log-probabilities)."""
    says = f"logprobs_mode {mode!r}"
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        given = f"a {len(result)}-tuple" if isinstance(result, (tuple, list)) else type(result).__name__
        return result_of(NAME, Category.CONTRACT, False, f"{says}: expected (out, n_out, logprobs), got {given}")
    try:
        out, n_out = validate_output(result[:2], draft, num_draft, declared.shape[-1])
    except ContractError as exc:
        return result_of(NAME, Category.CONTRACT, False, f"{says}: {exc}")
    try:
        (logprobs,) = returned_arrays("logprobs", "logprobs must be float [B, K+1]", logprobs=result[2])
    except ContractError as exc:
        return result_of(NAME, Category.CONTRACT, False, f"{says}: {exc}")
    rows, width = out.shape
    if logprobs.shape != (rows, width) or logprobs.dtype.kind != "f":
        return result_of(NAME, Category.CONTRACT, False,
                         f"{says}: logprobs must be float [B, K+1] = {[rows, width]}, got {logprobs.dtype} {list(logprobs.shape)}")
    emitted = np.arange(width)[None, :] < n_out[:, None]
    b, j = np.nonzero(emitted)
    token = out[b, j]
    want, alt, got = declared[b, j, token], other[b, j, token], logprobs[b, j]
    with np.errstate(invalid="ignore"):
        error = np.where((got == want) & np.isinf(want), 0.0, np.abs(got - want))
    off = ~(error <= TOLERANCE)  # NaN (a padding value at an emitted position) is off
    positions = int(emitted.sum())
    data: dict[str, Any] = {"mode": mode, "positions": positions, "tolerance": TOLERANCE}
    if not off.any():
        worst = float(error.max()) if error.size else 0.0
        return result_of(NAME, Category.CONTRACT, True,
                         f"{says}: the {positions} emitted tokens' logprobs are the {mode} target law's "
                         f"(largest error {worst:.2g})", **data, largest_error=worst)
    i = int(np.argmax(off))
    with np.errstate(invalid="ignore"):
        matches_other = bool(np.all((got[off] == alt[off]) | (np.abs(got[off] - alt[off]) <= TOLERANCE)))
    named = "the raw law's (processing ignored)" if mode == "processed" else "the processed law's (vLLM PR #30846: logits processed in place)"
    why = f"they are {named}" if matches_other else "they match neither the processed nor the raw target law"
    summary = (f"{says}: {int(off.sum())} of {positions} emitted tokens' logprobs are off; row {int(b[i])} position "
               f"{int(j[i])} token {int(token[i])}: expected {want[i]:.6g} ({mode}), got {got[i]:.6g}: {why}")
    return result_of(NAME, Category.CONTRACT, False, summary, **data, wrong=int(off.sum()), matches_other=matches_other)
