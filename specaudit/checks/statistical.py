"""The statistical checks of the chain rule's laws, and ``Measured``, what every check reads.

A check is a function ``(measured: Measured) -> CheckResult | None`` (None: does not apply),
registered in the one check registry (:data:`specaudit.checks.CHECKS`) and run by
:func:`specaudit.checks.evaluate`. This module holds the three checks that compare a
simulation with the exact finite-horizon laws (joint law, tokens per step, accepted-count law)
and :class:`Measured`, the measurements plus their exact references; the other checks
(greedy, processing, per-prefix, PIT) live beside it and import :class:`Measured` from here.
Its p-values are raw; the engine applies Holm over the run and turns PENDING into a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from specaudit import laws
from specaudit.chains.tabular import TabularChain
from specaudit.laws import chain as exact
from specaudit.laws import rounds
from specaudit.laws.tree_block import block_expected_accepted
from specaudit.results import Category, CheckResult, Status
from specaudit.scenarios.schema import MAX_JOINT_CELLS, Scenario
from specaudit.simulate.tallies import GreedyMatch, JointCounts, RoundStats
from specaudit.stats import gof as stats

#: How many most-deviating cells a joint-law result keeps for reports.
TOP_CELLS = 8
#: Joint laws with at most this many cells are stored whole in the result (for plots).
STORE_CELLS = 4096


@dataclass(frozen=True, eq=False)
class Measured:
    """What one scenario's simulation produced, with its exact references (computed lazily)."""

    scenario: Scenario
    target: TabularChain
    draft: TabularChain
    rounds: RoundStats
    joint: JointCounts | None
    method: str = "pearson"
    greedy: GreedyMatch | None = None  # greedy mode: sequences compared with greedy decoding
    extra: Mapping[str, Any] = field(default_factory=dict)  # more sinks by name: "prefix", "pit" (large V / L)

    @cached_property
    def horizon(self) -> exact.HorizonLaw:
        """Return the exact finite-horizon round law of the scenario's algorithm (chain, block, tree)."""
        return laws.horizon(self.scenario, self.target, self.draft)

    @cached_property
    def joint_probs(self) -> np.ndarray:
        """Return the target's exact law of whole sequences (``vocab ** length`` cells; joint scenarios only)."""
        return exact.joint_probabilities(self.target, self.scenario.length)


#: Appended to the summary of a count check with one possible group: no p-value, no place in Holm's family.
NOTHING_TO_TEST = "; one possible outcome group: nothing to test beyond impossible outcomes (none seen)"


def constant(fit: stats.GoodnessOfFit) -> bool:
    """Return True when a fit's p-value is 1 whatever was observed (0 df, no impossible outcome).

    Such a check passes without a p-value, so it stays out of the run's Holm family: counting it
    would make m larger and every other check's level smaller for nothing.
    """
    return fit.df == 0 and not fit.impossible


def _fit_result(name: str, category: Category, fit: stats.GoodnessOfFit, summary: str, data: dict) -> CheckResult:
    """Return a goodness-of-fit check's result: PENDING with its p-value, or PASSED when it is constant."""
    if constant(fit):
        return CheckResult(name, category, Status.PASSED, summary + NOTHING_TO_TEST, data=data)
    return CheckResult(name, category, Status.PENDING, summary, fit.statistic, fit.pvalue, fit.df, data=data)


def _cell_label(index: int, vocab: int, length: int, classes: int = 1) -> list[int]:
    """Return a cell's tokens (a batch mix: its request class, then the tokens)."""
    shape = (vocab,) * length if classes == 1 else (classes, *(vocab,) * length)
    return [int(x) for x in np.unravel_index(index, shape)]


def _deviations(observed: np.ndarray, expected: np.ndarray, vocab: int, length: int, classes: int = 1) -> list[dict]:
    """Return the cells with the largest standardised residuals (obs - exp) / sqrt(exp)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        resid = np.where(expected > 0, (observed - expected) / np.sqrt(expected), np.where(observed > 0, np.inf, 0.0))
    top = np.argsort(-np.abs(resid), kind="stable")[:TOP_CELLS]
    return [
        {
            "cell": _cell_label(int(i), vocab, length, classes),
            "observed": int(observed[i]),
            "expected": float(expected[i]),
            "residual": float(resid[i]),
        }
        for i in top
        if observed[i] or expected[i]
    ]


def joint_law(m: Measured) -> CheckResult | None:
    """Test the law of whole generated sequences against the target's joint law."""
    if m.joint is None:
        return None
    sc = m.scenario
    probs = m.joint_probs
    fit = stats.goodness_of_fit(m.joint.counts, probs, method=m.method)
    expected = probs * fit.n
    data = {
        "method": fit.method,
        "n": fit.n,
        "cells": fit.cells,
        "groups": fit.groups,
        "impossible": fit.impossible,
        "tv": fit.tv,
        "tv_null": fit.tv_null,
        "effect_size": fit.effect_size(),
        "top_cells": _deviations(m.joint.counts, expected, sc.vocab, sc.length, probs.size // sc.vocab**sc.length),
    }
    per_class = _per_class(m, probs)
    if per_class:  # a batch mix: (class, sequence) cells; the distance of each class's law, for the report
        data["classes"] = per_class
    if probs.size <= STORE_CELLS:
        data["observed"] = m.joint.counts.tolist()
        data["expected"] = expected.tolist()
    name = "X^2" if fit.method == "pearson" else "G^2"
    summary = f"{name} = {fit.statistic:.1f} on {fit.df} df, TV = {fit.tv:.4f} (null ~{fit.tv_null:.4f})"
    if per_class:
        summary += "; per class TV " + ", ".join(f"{c['name']} {c['tv']:.4f}" for c in per_class)
    if fit.impossible:
        summary = f"{fit.impossible} sequences of target probability 0 were emitted; " + summary
    return _fit_result("joint-law", Category.DISTRIBUTION, fit, summary, data)


def _per_class(m: Measured, probs: np.ndarray) -> list[dict]:
    """Return each request class's name, sequence count and TV distance to its own law (a batch mix only)."""
    names = getattr(m.target, "names", None)
    if names is None or m.joint is None:
        return []
    counts = m.joint.counts.reshape(len(names), -1)
    law = probs.reshape(len(names), -1)
    out = []
    for name, c, p in zip(names, counts, law):
        n = int(c.sum())
        tv = 0.5 * float(np.abs(c / n - p / p.sum()).sum()) if n else 0.0
        out.append({"name": name, "n": n, "tv": tv})
    return out


def tokens_per_step(m: Measured) -> CheckResult | None:
    """Compare mean tokens per verify call with its exact finite-horizon value."""
    if not hasattr(m.target, "dist"):
        return None  # lazy chains: no finite state space to run the exact recursion on
    exact_tps = m.horizon.tokens_per_step
    r0, t0, point = rounds.rounds_tokens_law(m.scenario, m.target, m.draft)
    test = stats.ratio_test(m.rounds.moments, m.rounds.sequences, exact_tps, (r0, t0, point))
    lo, hi = test.ci()
    data = {
        "estimate": test.estimate,
        "exact": exact_tps,
        "stderr": test.stderr,
        "ci999": [lo, hi],
        "expected_rounds": m.horizon.expected_rounds,
    }
    alpha = exact.acceptance_rate(m.target.dist[0], m.draft.dist[0]) if m.target.n_states == m.draft.n_states == 1 else None
    if alpha is not None:
        data["alpha"] = alpha
    summary = f"{test.estimate:.4f} tokens/step vs exact {exact_tps:.4f} (99.9% CI {lo:.4f}..{hi:.4f}, z = {test.statistic:+.2f})"
    law = m.scenario.draft_law
    algorithm = getattr(m.scenario, "algorithm", "chain")
    if alpha is not None and law[-1] == 1.0 and algorithm == "chain":
        k = len(law) - 1
        data["closed_form"] = exact.closed_form_tokens_per_step(alpha, k)
        summary += f"; closed form (1 - a^{k + 1}) / (1 - a) = {data['closed_form']:.3f} at a = {alpha:.3f}"
    elif alpha is not None and law[-1] == 1.0 and algorithm == "block":
        k = len(law) - 1  # Sun et al. 2403.10444: E[tau] = sum E[P_i]
        data["closed_form"] = 1.0 + block_expected_accepted(m.target.dist[0], m.draft.dist[0], k)
        data["chain_closed_form"] = exact.closed_form_tokens_per_step(alpha, k)
        summary += f"; block closed form 1 + E[tau] = {data['closed_form']:.4f} (chain: {data['chain_closed_form']:.4f})"
    if point.size == 1:  # one possible (rounds, tokens): an exact check, no p-value, out of Holm's family
        r, t = float(r0[0]), float(t0[0])
        want = m.rounds.sequences * np.array([r, t, r * r, t * t, r * t])
        same = bool(np.allclose(np.asarray(m.rounds.moments, dtype=np.float64), want, rtol=1e-12, atol=0.0))
        status = Status.PASSED if same else Status.FAILED
        return CheckResult("tokens-per-step", Category.EFFICIENCY, status,
                           summary + "; the exact law has one possible (rounds, tokens): "
                           + ("every sequence matched it" if same else "some sequence did not"), data=data)
    return CheckResult(
        "tokens-per-step", Category.EFFICIENCY, Status.PENDING, summary, test.statistic, test.pvalue, data=data
    )


def accept_length(m: Measured) -> CheckResult | None:
    """Test the first round's accepted-count law (i.i.d. across sequences) against the exact law."""
    if not hasattr(m.target, "dist"):
        return None  # lazy chains: the exact law would sum over V**K draft paths
    law = laws.first_round_accept_law(m.scenario, m.target, m.draft)
    fit = stats.goodness_of_fit(m.rounds.accept_first, law, method=m.method)
    total = m.rounds.accept_all.sum()
    data = {
        "observed_first": m.rounds.accept_first.tolist(),
        "expected_first": (law * fit.n).tolist(),
        "observed_all": (m.rounds.accept_all / max(total, 1)).tolist(),
        "expected_all": m.horizon.accept_law.tolist(),
        "tv": fit.tv,
    }
    name = "X^2" if fit.method == "pearson" else "G^2"
    summary = f"first-round accepted counts: {name} = {fit.statistic:.1f} on {fit.df} df, TV = {fit.tv:.4f}"
    if fit.impossible:
        summary = f"{fit.impossible} rounds accepted a count of probability 0; " + summary
    return _fit_result("accept-length", Category.EFFICIENCY, fit, summary, data)


def wants_joint(scenario: Scenario) -> bool:
    """Return True when the joint law is small enough to enumerate (else per-prefix and PIT run)."""
    return scenario.joint_cells <= MAX_JOINT_CELLS and not getattr(scenario, "lazy", False)


def has_joint_law(scenario: Scenario) -> bool:
    """Return True when a run counts the scenario's whole sequences against its exact joint law (a sampled scenario)."""
    return scenario.mode == "sample" and wants_joint(scenario)
