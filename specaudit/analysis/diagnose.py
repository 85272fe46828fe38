"""Diagnosis: which zoo mutant does a failure look like?

A failing scenario leaves a deviation pattern: the standardised residuals of its measured
features (the joint law of whole sequences, the first round's accepted-count law) against
their exact laws. Each mutant of :mod:`specaudit.verifiers.zoo.chain` has an expected pattern on the same
scenario, ``n (m - p) / sqrt(n p)`` where ``m`` is the mutant's law of the feature. The
diagnosis ranks mutants by the cosine similarity of the two patterns and names the best one
when it is close enough ("looks like: resampling from p after a rejection"): at or above
:data:`MIN_SIMILARITY` (0.8; weaker matches, 0.6-0.8, fit too loosely to name, and the report
says that no known mutant matches). A lossless control (kind ``lossless-control``: right law,
fewer tokens per step) is never offered for a failure of a distribution check: it cannot
produce one. Only failures of statistical checks are diagnosed; an exact probe's failure
(determinism, inputs, adversarial uniforms) names its own cause.

The mutants' laws come from a *law provider*: a function ``(scenario, mutant_name) ->
{feature: probabilities}``. :func:`~specaudit.analysis.mutant_laws.default_provider` simulates
the mutant through :func:`specaudit.simulate.chain.simulate` (every feature at once) and, where
:func:`~specaudit.analysis.mutant_laws.mutant_joint_law` has an exact joint law, takes it from
there instead (:mod:`specaudit.analysis.mutant_laws`, shared with power and planning).

Diagnosis works from the check results alone (their stored observed/expected counts), so it
is a pure function of the results plus the scenario; the runner stores it in
``ScenarioResult.info["diagnosis"]`` and reporters only render it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specaudit.analysis.mutant_laws import (
    DIAGNOSIS_SAMPLES,
    LawProvider,
    Laws,
    default_provider,
    simulated_provider,
)
from specaudit.results import Category, ScenarioResult, Status
from specaudit.scenarios.schema import Scenario
from specaudit.stats import gof as stats
from specaudit.verifiers.zoo import chain as chain_zoo

__all__ = [
    "FEATURES",
    "MIN_SIMILARITY",
    "DIAGNOSIS_SAMPLES",
    "Diagnosis",
    "LawProvider",
    "Laws",
    "Match",
    "annotate",
    "default_provider",
    "diagnose",
    "pattern_similarity",
    "simulated_provider",
]

#: Features a diagnosis compares: check name -> (observed-count key, expected-count key) in its data.
FEATURES: dict[str, tuple[str, str]] = {
    "joint-law": ("observed", "expected"),
    "accept-length": ("observed_first", "expected_first"),
}
#: A failure "looks like" a mutant when the cosine similarity of the patterns reaches this; below it
#: the report says that no known mutant matches (0.6-0.8 matches were named as if they fit).
MIN_SIMILARITY = 0.8
#: A simulated mutant whose own deviation from the exact law has a p-value above this is
#: indistinguishable from a lossless verifier on the scenario and is not a candidate.
SIGNIFICANCE = 1e-6
#: Mutant kinds that can explain a failure with ordinary uniforms (boundary mutants cannot).
KINDS = ("distribution", "lossless-control")


@dataclass(frozen=True)
class Match:
    """How well one mutant's expected deviation pattern matches the observed one."""

    mutant: str
    description: str
    mirrors: str
    similarity: float  # cosine of the observed and expected standardised residual vectors


@dataclass(frozen=True)
class Diagnosis:
    """The ranked candidates for one failure; ``best`` is set when the top one is close enough."""

    best: Match | None
    candidates: tuple[Match, ...]
    features: tuple[str, ...]  # the checks whose data were compared
    excluded: tuple[str, ...] = ()  # mutants indistinguishable from lossless on this scenario

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form stored in ``ScenarioResult.info["diagnosis"]``."""
        return {
            "best": None if self.best is None else asdict(self.best),
            "candidates": [asdict(m) for m in self.candidates],
            "features": list(self.features),
            "excluded": list(self.excluded),
            "min_similarity": MIN_SIMILARITY,
        }


def _observed(result: ScenarioResult) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Return feature -> (observed counts, expected counts) from the stored check data."""
    out = {}
    for name, (obs_key, exp_key) in FEATURES.items():
        check = result.check(name)
        if check is None or obs_key not in check.data or exp_key not in check.data:
            continue  # e.g. a joint law too large to store cell by cell
        obs = np.asarray(check.data[obs_key], dtype=np.float64)
        exp = np.asarray(check.data[exp_key], dtype=np.float64)
        if obs.shape == exp.shape and obs.sum() > 0:
            out[name] = (obs, exp)
    return out


def _scale(expected: np.ndarray) -> np.ndarray:
    # sqrt(n p), floored at 1 so cells of probability 0 (where any count is a failure) stay finite
    return np.sqrt(np.maximum(expected, 1.0))


def pattern_similarity(
    observed: Mapping[str, tuple[np.ndarray, np.ndarray]], laws: Laws
) -> float | None:
    """Return the cosine similarity of the observed and the mutant's expected residual patterns.

    Parameters
    ----------
    observed : mapping
        Feature -> (observed counts, expected counts under the exact law).
    laws : mapping
        Feature -> the mutant's probabilities over the same cells.

    Returns
    -------
    float or None
        ``r . e / (|r| |e|)`` with ``r = (o - n p) / s`` and ``e = n (m - p) / s``,
        ``s = sqrt(max(n p, 1))``, concatenated over the features both sides have; None when
        the mutant's pattern is zero (it does not deviate on these features).

    Notes
    -----
    Both vectors are in units of null standard deviations, so features of different sizes
    weigh by how far they deviate, not by their number of cells.
    """
    r_parts, e_parts = [], []
    for name, (obs, exp) in observed.items():
        law = laws.get(name)
        if law is None or np.shape(law) != obs.shape:
            continue
        n = obs.sum()
        s = _scale(exp)
        r_parts.append((obs - exp) / s)
        e_parts.append((n * np.asarray(law, dtype=np.float64) - exp) / s)
    if not r_parts:
        return None
    r, e = np.concatenate(r_parts), np.concatenate(e_parts)
    nr, ne = np.linalg.norm(r), np.linalg.norm(e)
    if nr == 0 or ne == 0:
        return None
    return float(r @ e / (nr * ne))


def _significant(observed: Mapping[str, tuple[np.ndarray, np.ndarray]], laws: Laws, samples: int | None) -> bool:
    """Return True when a simulated mutant law deviates from the exact law beyond its noise."""
    if samples is None:
        return True
    stat, df = 0.0, 0
    for name, (obs, exp) in observed.items():
        law = laws.get(name)
        if law is None or np.shape(law) != obs.shape:
            continue
        p = exp / exp.sum()
        pos = p > 0
        if np.any(np.asarray(law)[~pos] > 0):
            return True  # mass on impossible cells: a deviation however few samples
        stat += float(samples * np.sum((np.asarray(law)[pos] - p[pos]) ** 2 / p[pos]))
        df += int(pos.sum()) - 1
    return df > 0 and stats.chi2_sf(stat, df) < SIGNIFICANCE


def diagnose(
    spec: Scenario,
    result: ScenarioResult,
    provider: LawProvider | None = None,
    candidates: Sequence[str] | None = None,
) -> Diagnosis | None:
    """Rank zoo mutants by how well their expected deviation matches a failed scenario's.

    Parameters
    ----------
    spec : Scenario
        The scenario as it was run (with any ``samples`` override).
    result : ScenarioResult
        Its result; only the stored check data are read.
    provider : callable, optional
        ``(spec, mutant) -> {feature: probabilities}``; default :func:`default_provider`.
    candidates : sequence of str, optional
        Mutant names to consider; default every mutant whose kind is in ``KINDS``.

    Returns
    -------
    Diagnosis or None
        None when the scenario did not fail a check or stored no comparable feature.

    Notes
    -----
    Cosine similarity ranks the direction of the deviation, not its size, so a mutant with a
    milder or stronger version of the same bug (lenience 0.5 vs 0.8) still matches. Two
    mutants whose patterns coincide on a scenario cannot be told apart there; both are listed.
    """
    failed = [c for c in result.checks if c.status is Status.FAILED and c.statistical]
    if not failed:
        return None
    observed = _observed(result)
    if "joint-law" not in observed:
        # only scenarios small enough to store their joint law (<= checks.STORE_CELLS cells) are
        # diagnosed: simulating every mutant on a large-vocabulary scenario would cost minutes
        return None
    provider = provider or default_provider()
    names = list(candidates) if candidates is not None else [m.name for m in chain_zoo.MUTANTS.values() if m.kind in KINDS]
    if any(c.category is Category.DISTRIBUTION for c in failed):  # a lossless control keeps the law
        names = [n for n in names if chain_zoo.get(n).kind != "lossless-control"]
    noise = getattr(provider, "samples", None)
    matches, excluded = [], []
    for name in names:
        try:
            laws = provider(spec, name)
        except Exception:  # noqa: BLE001 - a mutant that cannot run on this scenario is no candidate
            laws = None
        if not laws:
            continue
        if not _significant(observed, laws, noise):
            excluded.append(name)
            continue
        sim = pattern_similarity(observed, laws)
        if sim is None:
            excluded.append(name)
            continue
        m = chain_zoo.get(name)
        matches.append(Match(name, m.description, m.mirrors, round(sim, 4)))
    matches.sort(key=lambda m: -m.similarity)
    best = matches[0] if matches and matches[0].similarity >= MIN_SIMILARITY else None
    return Diagnosis(best, tuple(matches[:5]), tuple(observed), tuple(excluded))


def annotate(
    results: Sequence[ScenarioResult],
    specs: Sequence[Scenario],
    provider: LawProvider | None = None,
) -> tuple[ScenarioResult, ...]:
    """Return the results with ``info["diagnosis"]`` set on every scenario that failed a check."""
    out = []
    for result, spec in zip(results, specs):
        found = diagnose(spec, result, provider)
        if found is not None:
            result = dataclasses.replace(result, info={**result.info, "diagnosis": found.to_dict()})
        out.append(result)
    return (*out, *results[len(out):])
