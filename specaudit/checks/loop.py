"""The loop checks: a loop target's outputs keep the contract, and every request's output follows its exact law.

A ``mode: loop`` scenario runs its trace through the target ``samples`` times, each run with a
fresh generator (:mod:`specaudit.contract.loop`). Two checks:

- ``loop-contract`` (exact): every run returns each request's tokens, ids in the vocabulary, no
  token after a stop token, at most ``max_tokens``, and a request the client does not end ends at
  a stop or at its budget. The first breach fails it, naming the run and the request.
- ``loop-law`` (statistical, gating): per request the client does not end, the counts of its
  outputs over the runs against the exact law (:func:`specaudit.laws.loop.request_law`; Pearson
  X^2 with cells merged by expected count, :func:`specaudit.stats.gof.goodness_of_fit`); the
  check's p-value is the smallest request's times the number of requests (Bonferroni), settled
  with the run's Holm family. An output of probability 0 fails it outright. The finding names the
  worst request and where its outputs first depart from the law: the shortest prefix whose next
  token's law departs (a conditional X^2 at level 1e-3), its step in the request, and the
  expected vs the emitted law there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.checks.probes import ExactOutcome, result_of
from specaudit.contract.loop import Models, Trace, process, validate_outputs
from specaudit.errors import ContractError, VerifierCrash, VerifierTimeout
from specaudit.laws.loop import law_table
from specaudit.results import Category, CheckResult, Status
from specaudit.stats import gof

__all__ = ["CONTRACT", "LAW", "run_loop"]

CONTRACT, LAW = "loop-contract", "loop-law"
#: The level of the per-prefix test that locates the first divergence of a failed request.
PREFIX_LEVEL = 1e-3
#: Fewest outputs through a prefix for it to be tested.
PREFIX_MIN = 50


def run_loop(loop: Callable[..., Any], trace: Trace, models: Models, samples: int, seed: int) -> ExactOutcome:
    """Run ``trace`` through ``loop`` (already guarded) ``samples`` times; return the two checks' results."""
    laws = law_table(trace, [r for r in trace.requests if r.finish is None], models)
    counts = {rid: np.zeros(len(probs), dtype=np.int64) for rid, (_, probs) in laws.items()}
    impossible: dict[int, list[tuple[int, ...]]] = {rid: [] for rid in laws}
    seen: dict[int, dict[tuple[int, ...], int]] = {rid: {} for rid in laws}
    t0 = time.perf_counter()
    runs = 0
    for i in range(samples):
        try:
            result = loop(trace, models, np.random.default_rng([seed, i]))
        except VerifierTimeout as exc:
            return ExactOutcome((), exc, runs + 1, time.perf_counter() - t0)
        except VerifierCrash as exc:
            check = CheckResult(CONTRACT, Category.CONTRACT, Status.ERROR, f"run {i}: the loop crashed: {exc}",
                                data={"error": str(exc), "run": i})
            return ExactOutcome((check,), None, runs + 1, time.perf_counter() - t0)
        runs += 1
        try:
            outputs = validate_outputs(result, trace)
        except ContractError as exc:
            broke = result_of(CONTRACT, Category.CONTRACT, False, f"run {i}: {exc}", run=i, clause=exc.clause)
            return ExactOutcome((broke,), None, runs, time.perf_counter() - t0, {"runs": runs})
        for rid, (index, _) in laws.items():
            out = tuple(outputs[rid])
            j = index.get(out)
            if j is None:
                impossible[rid].append(out)
            else:
                counts[rid][j] += 1
            seen[rid][out] = seen[rid].get(out, 0) + 1
    seconds = time.perf_counter() - t0
    ok = result_of(CONTRACT, Category.CONTRACT, True,
                   f"{runs:,} runs of {len(trace.requests)} requests: every output kept the contract (ids in [0, "
                   f"{trace.vocab}), nothing after a stop token, at most max_tokens, ended at a stop or the budget)",
                   runs=runs)
    return ExactOutcome((ok, _law(trace, models, laws, counts, impossible, seen)), None, runs, seconds, {"runs": runs})


def _law(trace: Trace, models: Models, laws: dict[int, tuple[dict[tuple[int, ...], int], np.ndarray]],
         counts: dict[int, np.ndarray], impossible: dict[int, list[tuple[int, ...]]],
         seen: dict[int, dict[tuple[int, ...], int]]) -> CheckResult:
    """Return the ``loop-law`` check over every request the client does not end."""
    if not laws:
        return CheckResult(LAW, Category.DISTRIBUTION, Status.SKIPPED, "not applicable: the client ends every request "
                           "of the trace (finish), so no output has a law to test", data={"reason": "every request finished"})
    per: list[dict[str, Any]] = []
    for rid, (_, probs) in laws.items():
        fit = gof.goodness_of_fit(counts[rid], probs)
        per.append({"request": rid, "n": fit.n + len(impossible[rid]), "cells": fit.cells, "groups": fit.groups,
                    "statistic": fit.statistic, "df": fit.df, "pvalue": fit.pvalue, "tv": fit.tv, "tv_null": fit.tv_null,
                    "impossible": len(impossible[rid])})
    worst = min(per, key=lambda d: (d["impossible"] == 0, d["pvalue"]))
    pvalue = min(1.0, len(per) * float(worst["pvalue"]))
    request = next(r for r in trace.requests if r.id == worst["request"])
    where = first_divergence(trace, models, request, seen[request.id])
    summary = (f"{len(per)} requests, {worst['n']:,} outputs each: worst request {request.id} (prompt "
               f"{list(request.prompt)}): X^2 = {worst['statistic']:.1f} on {worst['df']} df, TV = {worst['tv']:.4f} "
               f"(null ~{worst['tv_null']:.4f})")
    if where is not None:
        summary += (f"; first divergence at its token {where['position'] + 1}, after {where['prefix']} "
                    f"({where['n']} outputs): expected {where['expected']}, emitted {where['observed']}")
    data = {"requests": per, "worst": request.id, "first_divergence": where}
    if worst["impossible"]:
        example = impossible[request.id][0]
        return CheckResult(LAW, Category.DISTRIBUTION, Status.FAILED,
                           f"request {request.id} emitted {worst['impossible']} output(s) of probability 0 under its law "
                           f"(first: {list(example)}); " + summary, statistic=float("inf"), pvalue=0.0,
                           df=int(worst["df"]), data=data)
    return CheckResult(LAW, Category.DISTRIBUTION, Status.PENDING, summary, statistic=float(worst["statistic"]),
                       pvalue=pvalue, df=int(worst["df"]), data=data)


def first_divergence(trace: Trace, models: Models, request: Any,
                     seen: dict[tuple[int, ...], int]) -> dict[str, Any] | None:
    """Return the shortest prefix of ``request``'s outputs whose next token's law departs from the target's, or None."""
    stops = set(trace.stop_tokens)
    by_length: dict[int, dict[tuple[int, ...], np.ndarray]] = {}
    for out, n in seen.items():
        for j in range(len(out)):
            prefix = out[:j]
            if any(t in stops for t in prefix):
                break
            row = by_length.setdefault(j, {}).setdefault(prefix, np.zeros(trace.vocab, dtype=np.int64))
            row[out[j]] += n
    for j in sorted(by_length):
        tested = sorted(by_length[j].items(), key=lambda kv: -int(kv[1].sum()))
        for prefix, row in tested:
            n = int(row.sum())
            if n < PREFIX_MIN:
                continue
            history = list(request.prompt) + list(prefix)
            law = process(models.target([history])[0], trace, history, generated=len(prefix),
                          min_tokens=request.min_tokens)
            fit = gof.goodness_of_fit(row, law)
            if fit.pvalue < PREFIX_LEVEL:
                return {"position": j, "prefix": list(prefix), "n": n,
                        "expected": [round(float(x), 3) for x in law], "observed": [round(float(x) / n, 3) for x in row]}
    return None
