"""Sequential early stop: looks at block boundaries with alpha spending.

A scenario of B blocks is looked at after 1, 2, 4, ... blocks (doubling, PractRand style) and
after all B (:func:`look_schedule`). Look ``j`` of ``J + 1`` gets the weight ``w_j``: the final
look 1/2 plus what the geometric series leaves, the look before it 1/4, the one before 1/8, ...
(:func:`spending`), so sum w_j = 1 and a correct verifier, which runs to N, keeps half of alpha
at its last look. At each look every check is computed on the blocks so far, and each check
reports the *sequential p-value*

    p_seq = min(1, min over looks j so far of p_j / w_j).

Why family-wise alpha still holds
---------------------------------
1. p_seq is a valid p-value whatever the dependence between looks: by the union bound,
   P(p_seq <= t) <= sum_j P(p_j <= w_j t) <= sum_j w_j t = t (Bonferroni over looks; each p_j is
   valid for the data of look j). Stopping early only drops looks from the minimum, so the
   p_seq at the stopping time is at least the full one: still valid (conservative).
2. The run applies Holm to every check's p_seq, as without early stop. Holm controls the
   family-wise error rate for valid p-values under arbitrary dependence.
3. A scenario stops when a gating check's p_seq <= alpha / M, M an upper bound of the run's
   family size (scenarios x registered statistical checks). Holm rejects every p-value at or
   below alpha / m (m <= M) whatever the others are, so the stop is decisive: the verdict it
   anticipates is the one the final Holm gives. A failing exact check (greedy equality) stops
   at once. Stopping therefore changes how many samples a broken verifier costs, never the
   error rate; a correct verifier (no check that small, except with probability <= alpha) runs
   to N.

The price: the last look is at level alpha/2 instead of alpha (the samples a given effect
needs grow like log(M/alpha), so by a few percent), and the power figures
(``specaudit.analysis.power``) describe the fixed-N design. Hence early stop is opt-in (``--early-stop``): it speeds up *failing*
runs, which is what a developer iterating on a broken verifier wants, and changes nothing a
passing CI run needs.

The same looks and weights carry the TV certificate (``--certify-tv EPS``,
:mod:`specaudit.stats.certificate`): look ``j`` reports the TV bound at alpha ``w_j``, so by the
same union bound the bounds of all looks hold together at 1 - alpha, and a scenario also stops at
the first look whose bound is at most EPS (:func:`specaudit.engine.scenario.run_scenarios`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from specaudit.results import CheckResult, Status


def look_schedule(blocks: int) -> list[int]:
    """Return the block counts at which to look: 1, 2, 4, ... below ``blocks``, then ``blocks``."""
    out, b = [], 1
    while b < blocks:
        out.append(b)
        b *= 2
    return out + [blocks]


def spending(looks: int) -> list[float]:
    """Return the alpha weights of ``looks`` looks: ..., 1/8, 1/4 for the interim looks, the rest (>= 1/2) for the last."""
    interim = [2.0 ** -(looks - j) for j in range(looks - 1)]
    return interim + [1.0 - sum(interim)]


def stop_level(alpha: float, family: int) -> float:
    """Return the p_seq at or below which a check is rejected by Holm whatever else the run finds."""
    return alpha / max(family, 1)


@dataclasses.dataclass
class Track:
    """The looks so far of one scenario's checks (raw p-values per look, by check name)."""

    weights: list[float]
    looks: list[int] = dataclasses.field(default_factory=list)  # sequences at each look taken
    pvalues: dict[str, list[float | None]] = dataclasses.field(default_factory=dict)

    def add(self, sequences: int, results: Sequence[CheckResult]) -> tuple[CheckResult, ...]:
        """Record look ``len(self.looks)`` and return the results with sequential p-values."""
        j = len(self.looks)
        self.looks.append(sequences)
        out = []
        for r in results:
            history = self.pvalues.setdefault(r.name, [None] * j)
            history.append(r.pvalue)
            if r.pvalue is None:
                out.append(r)
                continue
            seq = min(1.0, min(p / self.weights[i] for i, p in enumerate(history) if p is not None))
            data = {**r.data, "sequential": {"looks": list(self.looks), "pvalues": list(history),
                                               "weights": self.weights[: j + 1], "pvalue": seq, "raw_pvalue": r.pvalue}}
            out.append(dataclasses.replace(r, pvalue=seq, data=data))
        for history in self.pvalues.values():  # a check absent at this look
            if len(history) <= j:
                history.append(None)
        return tuple(out)


def decisive(results: Sequence[CheckResult], level: float) -> bool:
    """Return True when a gating check has failed for sure: an exact failure, or p_seq <= ``level``."""
    for r in results:
        if not r.gate:
            continue
        if r.pvalue is None and r.status is Status.FAILED:
            return True
        if r.pvalue is not None and r.status is Status.PENDING and r.pvalue <= level:
            return True
    return False
