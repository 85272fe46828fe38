"""Power per scenario: what a run's joint-law check could have caught, reported with every run.

:func:`scenario_power` evaluates one scenario's joint-law check at the run's sample size: the
smallest TV it detects in every direction (:func:`specaudit.stats.power.detectable_tv`) and its
power against each zoo mutant (:func:`specaudit.stats.power.power_against` on the mutant's law
from :mod:`specaudit.analysis.mutant_laws`). :func:`annotate` stores the figures in every
result's ``info["power"]`` and ``info["sensitivity"]``, and flags a scenario whose power against
the seed's common bug (:data:`COMMON_BUG`) is below the target power.

Levels
------
In a run, Holm adjusts every statistical p-value over the m checks of the run; a check whose raw
p-value is at most ``alpha / m`` is always rejected by Holm, so powers reported in a run are at the
Bonferroni level ``alpha / m``: a lower bound on the joint-law check's power within the run, and
the joint-law check alone (the efficiency checks can only add detections).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from specaudit.analysis.mutant_laws import LAW_SAMPLES, MutantLaw, cached_detectable_tv, is_chain, mutant_law
from specaudit.laws import chain as exact
from specaudit.scenarios.schema import Scenario
from specaudit.stats import gof as stats
from specaudit.stats.power import TARGET_POWER, power_against
from specaudit.verifiers.zoo import chain as chain_zoo

__all__ = [
    "COMMON_BUG",
    "SAME_LAW_LEVEL",
    "MutantPower",
    "ScenarioPower",
    "annotate",
    "family_size",
    "scenario_power",
]

#: The seed's common bug: a scenario with less power than TARGET_POWER against it is flagged.
COMMON_BUG = "resample_from_p"
#: A simulated mutant law is taken as the target's when its own X^2 p-value exceeds this.
SAME_LAW_LEVEL = 1e-3


@dataclass(frozen=True)
class MutantPower:
    """Power of one scenario's joint-law check against one zoo mutant."""

    name: str
    kind: str
    power: float | None  # None: not modelled (see note)
    noncentrality: float | None
    tv: float | None  # mutant vs target over the merged groups
    law: str  # how the mutant's law was obtained (MutantLaw.method)
    note: str = ""
    # The mutant's law is the target's on this scenario: exact TV 0, or a simulated law whose
    # counts fit the target's law (X^2 p-value > SAME_LAW_LEVEL): no sample size can help.
    same_law: bool = False


@dataclass(frozen=True)
class ScenarioPower:
    """What one scenario's joint-law check could detect at the run's sample size."""

    samples: int
    alpha: float  # per-test level (alpha / tests)
    family_alpha: float
    tests: int
    target_power: float
    cells: int
    groups: int
    detectable_tv: float
    mutants: tuple[MutantPower, ...] = ()
    flag: str | None = None  # why the scenario is flagged (low power against COMMON_BUG)
    law_samples: int = LAW_SAMPLES
    seconds: float = 0.0

    def mutant(self, name: str) -> MutantPower | None:
        """Return the entry of mutant ``name``, if any."""
        return next((m for m in self.mutants if m.name == name), None)

    def to_info(self) -> dict[str, Any]:
        """Return ScenarioResult.info entries: ``power`` (per mutant) and ``sensitivity``."""
        def flat(obj: Any) -> dict[str, Any]:  # fields are numbers and strings: no deep copy needed
            return {f.name: getattr(obj, f.name) for f in fields(obj)}

        head = flat(self)
        head.pop("mutants")
        return {"power": {m.name: flat(m) for m in self.mutants}, "sensitivity": head}

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> ScenarioPower | None:
        """Rebuild from ScenarioResult.info (e.g. read back from JSON); None when absent."""
        head = info.get("sensitivity")
        if not head:
            return None
        per = info.get("power") or {}
        return cls(**head, mutants=tuple(MutantPower(**m) for m in per.values()))


def scenario_power(
    spec: Scenario,
    n: int,
    alpha: float,
    *,
    family_alpha: float | None = None,
    tests: int = 1,
    target_power: float = TARGET_POWER,
    mutants: Sequence[str] | None = None,
    law_samples: int = LAW_SAMPLES,
) -> ScenarioPower:
    """Return the joint-law check's detectable TV and its power against zoo mutants at ``n``.

    Parameters
    ----------
    spec : Scenario
        The scenario (its joint law must be enumerable).
    n : int
        Sample size of the check.
    alpha : float
        Per-test level (in a run: the family alpha / number of statistical checks).
    family_alpha : float, optional
        The run's alpha, recorded for reports (defaults to ``alpha * tests``).
    tests : int
        Number of statistical checks ``alpha`` was split over.
    target_power : float
        Power at which the detectable TV is stated and below which COMMON_BUG is flagged.
    mutants : sequence of str, optional
        Mutants to evaluate (default: the whole zoo; none for non-chain scenarios).
    law_samples : int
        Simulation size for mutants without an exact law.

    Returns
    -------
    ScenarioPower
        ``flag`` is set when the power against COMMON_BUG is below ``target_power``.
    """
    t0 = time.perf_counter()
    target, _ = spec.chains()
    probs = exact.joint_probabilities(target, spec.length)
    groups = int(stats.merge_groups(probs * n).max()) + 1
    names = list(chain_zoo.MUTANTS) if mutants is None else list(mutants)
    if not is_chain(spec):
        names = []
    rows = []
    for name in names:
        law = mutant_law(spec, name, law_samples)
        if law.probs is None:
            rows.append(MutantPower(name, law.kind, None, None, None, law.method, law.note))
            continue
        res = power_against(law.probs, probs, n, alpha, law_samples=law.samples)
        rows.append(MutantPower(name, law.kind, res.power, res.noncentrality, res.tv, law.method, law.note, _same_law(law, probs)))
    sp = ScenarioPower(
        samples=int(n),
        alpha=alpha,
        family_alpha=alpha * tests if family_alpha is None else family_alpha,
        tests=tests,
        target_power=target_power,
        cells=int((probs > 0).sum()),
        groups=groups,
        detectable_tv=cached_detectable_tv(probs, n, alpha, target_power),
        mutants=tuple(rows),
        law_samples=law_samples,
    )
    return replace(sp, flag=_flag(sp, spec.name), seconds=time.perf_counter() - t0)


def _same_law(law: MutantLaw, probs: np.ndarray) -> bool:
    """Return True when the mutant's law is the target's (exactly, or within simulation noise)."""
    assert law.probs is not None, "only laws with probabilities are compared"
    if law.samples is None:
        return 0.5 * float(np.abs(law.probs - probs).sum()) <= 1e-12
    counts = np.rint(law.probs * law.samples).astype(np.int64)
    return stats.goodness_of_fit(counts, probs).pvalue > SAME_LAW_LEVEL


def _flag(sp: ScenarioPower, scenario: str) -> str | None:
    """Say why a scenario is flagged: its power against the seed's common bug is below target."""
    bug = sp.mutant(COMMON_BUG)
    if bug is None or bug.power is None or bug.power >= sp.target_power:
        return None
    if bug.same_law:
        return f"blind to {COMMON_BUG}: it leaves this scenario's law unchanged, no sample size helps"
    return (
        f"underpowered: power {bug.power:.3f} < {sp.target_power:g} against {COMMON_BUG} at N = {sp.samples:,}; "
        f"`specaudit plan -s {scenario} --mutant {COMMON_BUG}` gives the N needed"
    )


def family_size(results: Sequence[Any]) -> int:
    """Return the number of statistical checks Holm adjusted over in ``results``."""
    return sum(c.adjusted_pvalue is not None for s in results for c in s.checks)


def annotate(
    results: Sequence[Any],
    specs: Sequence[Scenario],
    alpha: float,
    *,
    law_samples: int = LAW_SAMPLES,
    target_power: float = TARGET_POWER,
) -> tuple[Any, ...]:
    """Return ``results`` (ScenarioResults) with ``info["power"]`` and ``info["sensitivity"]`` added.

    Scenarios that errored or have no joint-law check are returned unchanged. The level is the
    Bonferroni ``alpha / m`` over the m checks of the run (a lower bound for Holm). A re-run
    (``result.rerun``) gets its own figures at its own sample size.
    """
    tests = max(family_size(results), 1)
    out = []
    for result, spec in zip(results, specs):
        out.append(_annotate_one(result, spec, alpha, tests, law_samples, target_power))
    return tuple(out) + tuple(results[len(out):])


def _annotate_one(result: Any, spec: Scenario, alpha: float, tests: int, law_samples: int, target_power: float) -> Any:
    """Return one result with its power figures (and its re-run's), or unchanged without a joint-law check."""
    joint = result.check("joint-law") if result.error is None else None
    if joint is None or not joint.data.get("n"):
        return result
    if getattr(spec, "mix", None) is not None:  # a batch mix: the mutant laws are one chain's, its cells (class, sequence)
        return result
    n = int(joint.data["n"])
    sp = scenario_power(
        spec, n, alpha / tests, family_alpha=alpha, tests=tests, target_power=target_power, law_samples=law_samples
    )
    new = replace(result, info={**result.info, **sp.to_info()})
    rerun = getattr(result, "rerun", None)
    if rerun is not None:
        new = replace(new, rerun=_annotate_one(rerun, spec, alpha, tests, law_samples, target_power))
    return new
