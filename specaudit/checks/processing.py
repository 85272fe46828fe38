"""Which processed quantity diverges? Score the observed joint counts against every hypothesis.

A chain-rule verifier is lossless only when it uses the processed ``q`` and ``p`` the drafts and
the target were defined by (notes/theory.md, "Sampling parameters"). The hypotheses of
:mod:`specaudit.laws.processing` each replace one of those quantities by a known wrong
processing, with the exact law of the emitted sequences (:func:`~specaudit.laws.processing.output_law`).
Here the observed joint counts are scored (G^2) against every distinct hypothesis
(:func:`diagnose`); the best-scoring one names the quantity that diverges, and
:func:`processing` is the (non-gating) check that reports it on every scenario with sampling
processing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from specaudit.chains.logits import LogitsChain
from specaudit.chains.serving import HistoryChain
from specaudit.checks.statistical import Measured
from specaudit.laws.processing import HYPOTHESES, Hypothesis, Quantities, output_law
from specaudit.results import Category, CheckResult, Status
from specaudit.stats import gof as stats

__all__ = ["HYPOTHESES", "Hypothesis", "Quantities", "Score", "diagnose", "output_law", "processing"]

#: A hypothesis fits when its own G^2 p-value is above this (a loose bar: it names, not tests).
FIT_LEVEL = 1e-4
#: Largest forward-pass table (prefixes x joint states x round positions) a diagnosis builds.
MAX_WORK = 5e7


@dataclass(frozen=True)
class Score:
    """How well one hypothesis explains the observed joint counts."""

    hypothesis: str
    g2: float  # deviance 2 sum O log(O / E); inf when a count falls on a cell of probability 0
    df: int
    pvalue: float


def _score(name: str, counts: np.ndarray, probs: np.ndarray) -> Score:
    total = counts.sum()
    expected = probs * total
    seen = counts > 0
    if np.any(seen & (expected <= 0)):
        return Score(name, float("inf"), 0, 0.0)
    g2 = float(2.0 * np.sum(counts[seen] * np.log(counts[seen] / expected[seen])))
    df = max(int((probs > 0).sum()) - 1, 1)
    return Score(name, g2, df, stats.chi2_sf(g2, df))


#: Quantities closer than this (max abs difference of probabilities) are one hypothesis here.
SAME = 1e-6


def diagnose(
    target: LogitsChain, draft: LogitsChain, draft_law: np.ndarray, length: int, counts: np.ndarray
) -> tuple[list[Score], dict[str, list[str]]]:
    """Score every distinct hypothesis on the joint ``counts``; return the ranking and the aliases.

    A hypothesis whose quantities coincide (within ``SAME``) with an earlier one on this
    scenario is not scored separately: it is listed as an alias of that one (e.g. "q
    unprocessed" and "q without temperature" when the drafter's only processing is a
    temperature); aliases of "as-specified" cannot be told apart from a lossless verifier.
    The ranking is by G^2, ties kept in definition order.
    """
    seen: list[tuple[str, Quantities]] = []
    aliases: dict[str, list[str]] = {}
    scores: list[Score] = []
    for h in HYPOTHESES.values():
        used = h.build(target, draft)
        same = next(
            (
                name
                for name, other in seen
                if all(
                    np.allclose(getattr(used, f), getattr(other, f), rtol=0, atol=SAME)
                    for f in ("q_verify", "p_verify", "p_bonus")
                )
            ),
            None,
        )
        if same is not None:
            aliases[same].append(h.name)
            continue
        seen.append((h.name, used))
        aliases[h.name] = []
        scores.append(_score(h.name, counts, output_law(target, draft, used, draft_law, length)))
    return sorted(scores, key=lambda s: s.g2), aliases


def processing(m: Measured) -> CheckResult | None:
    """Name the processed quantity that diverges, on scenarios with sampling processing.

    Not gating and not a test of its own (the joint-law check is): it says which single
    mis-processing best explains the joint counts, so a failure reads "q diverges: ...".
    PASSED when the specified processing fits (G^2 p-value above ``FIT_LEVEL``), FAILED
    naming the best fitting hypothesis otherwise, SUSPECT when none fits.
    """
    sc = m.scenario
    if m.joint is None or getattr(sc, "algorithm", "chain") != "chain":  # the laws here are the chain rule's
        return None
    if sc.target.kind != "logits" or sc.draft.kind not in ("logits", "same_logits_as_target"):
        return None
    if getattr(sc, "mix", None) is not None:  # a batch mix: per-class laws (the joint-law check names the class)
        return None
    target, draft = cast("tuple[LogitsChain, LogitsChain]", sc.chains())  # logits kinds: checked above
    if isinstance(target, HistoryChain):  # penalties: the hypotheses' laws below ignore the history
        return None
    if target.params.identity and draft.params.identity:
        return None
    work = sc.joint_cells * target.n_states * draft.n_states * (sc.k + 1) ** 2
    if work > MAX_WORK:
        says = f"diagnosis skipped: the forward pass needs {work:.3g} cells (> {MAX_WORK:.0e}); use smaller V, L or K"
        return CheckResult("processing", Category.DISTRIBUTION, Status.SKIPPED, says, gate=False, data={"diagnosis": says})
    ranking, aliases = diagnose(target, draft, sc.draft_law, sc.length, m.joint.counts)
    null = next(s for s in ranking if s.hypothesis == "as-specified")
    fitting = [s for s in ranking if s.pvalue > FIT_LEVEL and s.hypothesis != "as-specified"]
    best = None
    if null.pvalue > FIT_LEVEL:
        status = Status.PASSED
        says = f"{HYPOTHESES['as-specified'].says} (G^2 = {null.g2:.1f} on {null.df} df)"
    elif fitting:
        status, top = Status.FAILED, fitting[0]
        best = HYPOTHESES[top.hypothesis]
        same = aliases[top.hypothesis]
        says = best.says + (f" (here the same as: {', '.join(same)})" if same else "")
        says += f"; G^2 = {top.g2:.1f} on {top.df} df vs {null.g2:.1f} as specified"
        if len(fitting) > 1:
            says += f"; also consistent: {', '.join(s.hypothesis for s in fitting[1:])}"
    else:
        status, top = Status.SUSPECT, ranking[0]
        says = (
            f"no single listed processing mismatch fits (closest: {top.hypothesis}, G^2 = {top.g2:.1f} on "
            f"{top.df} df; as specified {null.g2:.1f})"
        )
    data = {
        "diagnosis": says,
        "quantity": best.quantity if best else None,
        "hypothesis": best.name if best else None,
        "consistent": [s.hypothesis for s in fitting],
        "aliases": {k: v for k, v in aliases.items() if v},
        "ranking": [{"hypothesis": s.hypothesis, "g2": s.g2, "df": s.df, "pvalue": s.pvalue} for s in ranking],
        "sampling": {"target": target.params.as_dict(), "draft": draft.params.as_dict()},
    }
    return CheckResult("processing", Category.DISTRIBUTION, status, says, gate=False, data=data)
