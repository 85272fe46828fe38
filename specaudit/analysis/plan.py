"""Planning: the sample size a goal needs, or what a sample size can detect (``specaudit plan``).

:func:`plan` answers three questions on one scenario's joint-law check, each optional: what TV
it detects at N samples, how many samples it needs to detect a given TV in every direction, and
how many it needs to catch a given zoo mutant. TV answers use the noncentral chi-square worst
case (:mod:`specaudit.stats.power`); mutant answers use the mutant's law from
:mod:`specaudit.analysis.mutant_laws`. The answers come back as one :class:`PlanAnswer` (named so
as not to be confused with the simulator's :class:`specaudit.simulate.chain.Plan`), which the
CLI renders with :mod:`specaudit.reports.sensitivity`.

A batch mix's joint law is over (class, sequence) cells, the target's and the mutant's alike
(:func:`specaudit.analysis.mutant_laws.joint_cells`). :func:`refusal` says why a scenario has
nothing to plan (mode exact or greedy, a lazy chain, too many cells), :func:`check_mutant` why a
zoo mutant is not plannable (only the chain zoo, in the probs contract, has joint laws here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specaudit.analysis.mutant_laws import LAW_SAMPLES, PLANNED_ZOOS, cached_detectable_tv, mutant_entry, mutant_law
from specaudit.errors import UsageError
from specaudit.laws import chain as exact
from specaudit.scenarios.schema import MAX_JOINT_CELLS, Scenario
from specaudit.stats import gof as stats
from specaudit.stats.power import (
    TARGET_POWER,
    check_level,
    power_against,
    samples_for_law,
    samples_for_tv,
    simulated_power,
)
from specaudit.verifiers import zoo

__all__ = ["PlanAnswer", "check_mutant", "plan", "refusal"]

#: Why a mode other than sample has nothing to plan (what it runs instead).
_MODES = {
    "exact": "mode: exact runs exact probes only (corners, contract clauses, adversarial uniforms): "
             "no sample size to plan",
    "greedy": "mode: greedy checks every sequence for equality with greedy decoding (one mismatch fails), "
              "not a joint law: no sample size to plan",
}
#: What each zoo other than the chain zoo is, for the refusal of ``--mutant``.
_ZOOS = {
    "seeded": "a seeded mutant (lossless; only the seeded-rows probe of per-request generators sees it)",
    "logits": "a logits mutant (the logits contract; its law depends on the processing, not a chain kernel)",
    "tree": "a tree/block mutant (tree and block algorithms, not the chain rule)",
    "stops": "a stop mutant (lossless tokens; only the exact stops check sees which tokens a request keeps)",
    "loop": "a loop mutant (the loop contract: its law is a whole trace's, not a chain kernel's)",
}


def refusal(spec: Scenario) -> str | None:
    """Return why ``spec`` has no joint-law check to plan for (every reason that applies), or None."""
    reasons = []
    if spec.mode != "sample":
        reasons.append(_MODES[spec.mode])
    if spec.lazy:
        reasons.append("its chains are lazy (kind zipf: rows generated on demand), so the joint law is not "
                       "enumerated; a run checks the per-prefix and PIT laws instead")
    elif spec.joint_cells > MAX_JOINT_CELLS:
        reasons.append(f"V**L = {spec.vocab:,}**{spec.length} = {spec.joint_cells:,} cells > {MAX_JOINT_CELLS:,}, "
                       "too many to enumerate (lower vocab or length); a run checks the per-prefix and PIT laws instead")
    if not reasons:
        return None
    return (f"scenario {spec.name}: no joint-law check to plan for: " + "; and ".join(reasons)
            + "; allowed: a mode: sample scenario with tabular chains and V**L <= "
            + f"{MAX_JOINT_CELLS:,} cells")


def check_mutant(name: str) -> None:
    """Raise UsageError unless ``name`` is a chain-zoo mutant (the ones with a joint law to plan against)."""
    try:
        entry = zoo.get(name)
    except KeyError:
        entry = None
    if entry is not None and entry.zoo not in PLANNED_ZOOS:
        raise UsageError(
            f"--mutant: {name} is {_ZOOS.get(entry.zoo, f'a {entry.zoo} mutant')}: plan answers for chain "
            f"mutants on probs-contract scenarios and draft-vocabulary mutants; allowed: "
            f"{', '.join([*zoo.chain.MUTANTS, *zoo.vocab.MUTANTS])}"
        )
    mutant_entry(name)  # unknown: the chain zoo's message, with the closest name


@dataclass(frozen=True)
class PlanAnswer:
    """Answers of ``specaudit plan`` for one scenario (fields not asked for are None)."""

    scenario: str
    cells: int  # cells of positive target probability
    alpha: float  # per-test level (family alpha / tests)
    power: float
    samples: int | None = None  # the sample size asked about
    groups: int | None = None  # merged groups at ``samples``
    detectable_tv: float | None = None  # at ``samples``
    tv: float | None = None  # the TV asked about
    samples_for_tv: int | None = None
    mutant: str | None = None
    mutant_law: str | None = None  # how its law was obtained
    mutant_tv: float | None = None  # mutant vs target over the cells
    samples_for_mutant: int | None = None  # by multinomial simulation of the check (exact up to MC error)
    samples_for_mutant_ncx2: int | None = None  # by the noncentral chi-square (local approximation)
    mutant_power: float | None = None  # at ``samples``, simulated
    mutant_power_ncx2: float | None = None  # at ``samples``, noncentral chi-square


def plan(
    spec: Scenario,
    *,
    alpha: float,
    power: float = TARGET_POWER,
    tests: int = 1,
    samples: int | None = None,
    tv: float | None = None,
    mutant: str | None = None,
    law_samples: int = LAW_SAMPLES,
) -> PlanAnswer:
    """Return the sample size a goal needs, or what a sample size can detect, on one scenario.

    Parameters
    ----------
    spec : Scenario
        A mode: sample scenario with an enumerable joint law (else UsageError, :func:`refusal`);
        a batch mix plans over its (class, sequence) cells.
    alpha : float
        Family-wise level; the test runs at ``alpha / tests`` (Bonferroni, a lower bound for
        Holm over ``tests`` checks; a run of the default suite has about 3 per scenario).
    power : float
        Wanted power.
    tests : int
        Number of statistical checks alpha is split over.
    samples : int, optional
        Report the detectable TV (and the mutant's power) at this size. With no question at all
        the scenario's own ``samples`` is used.
    tv : float, optional
        Report the samples needed to detect this TV in every direction.
    mutant : str, optional
        Report the samples needed to catch this chain-zoo mutant (:func:`check_mutant`).
    law_samples : int
        Simulation size for a mutant law that is not exact.

    Returns
    -------
    PlanAnswer

    Notes
    -----
    TV answers use the noncentral chi-square worst case (:mod:`specaudit.stats.power`). Mutant answers are
    given both ways: by the noncentral chi-square and by :func:`simulated_power`, which
    replicates the check on Multinomial(N, mutant law) counts and is exact for i.i.d.
    sequences; mutants are large effects caught at small N, where the local approximation
    is off by up to ~15 points, so ``samples_for_mutant`` is the simulated answer.
    """
    check_level(alpha, power)
    if tests < 1:
        raise UsageError(f"tests = {tests}; allowed: >= 1")
    if samples is not None and samples < 1:
        raise UsageError(f"samples = {samples}; allowed: >= 1")
    if mutant is not None:
        check_mutant(mutant)
    why = refusal(spec)
    if why is not None:
        raise UsageError(why)
    level = alpha / tests
    target, _ = spec.chains()
    probs = exact.joint_probabilities(target, spec.length)
    if samples is None and tv is None and mutant is None:
        samples = spec.samples
    out = PlanAnswer(spec.name, int((probs > 0).sum()), level, power)
    if samples is not None:
        groups = int(stats.merge_groups(probs * samples).max()) + 1
        out = replace(out, samples=int(samples), groups=groups, detectable_tv=cached_detectable_tv(probs, samples, level, power))
    if tv is not None:
        out = replace(out, tv=tv, samples_for_tv=samples_for_tv(probs, tv, level, power))
    if mutant is not None:
        law = mutant_law(spec, mutant, law_samples)
        if law.probs is None:
            raise UsageError(f"mutant {mutant}: no law to plan with on {spec.name} ({law.note})")
        out = replace(
            out,
            mutant=mutant,
            mutant_law=law.method if law.samples is None else f"{law.method} ({law.samples:,} sequences)",
            mutant_tv=0.5 * float(np.abs(law.probs - probs).sum()),
            samples_for_mutant=samples_for_law(law.probs, probs, level, power, law_samples=law.samples, method="simulate"),
            samples_for_mutant_ncx2=samples_for_law(law.probs, probs, level, power, law_samples=law.samples),
        )
        if samples is not None:
            out = replace(
                out,
                mutant_power=simulated_power(law.probs, probs, samples, level, law_samples=law.samples),
                mutant_power_ncx2=power_against(law.probs, probs, samples, level, law_samples=law.samples).power,
            )
    return out
