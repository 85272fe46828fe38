"""Diagnosis: which zoo mutant does a failure look like?

A failing scenario leaves a deviation pattern: the standardised residuals of its measured
features (the joint law of whole sequences, the first round's accepted-count law) against
their exact laws. Each mutant of :mod:`specaudit.verifiers.zoo.chain` has an expected pattern on the same
scenario, ``n (m - p) / sqrt(n p)`` where ``m`` is the mutant's law of the feature. The
diagnosis ranks mutants by the cosine similarity of the two patterns and names the best one
when it is close enough ("looks like: resampling from p after a rejection").

The mutants' laws come from a *law provider*: a function ``(scenario, mutant_name) ->
{feature: probabilities}``. :func:`default_provider` simulates the mutant through
:func:`specaudit.simulate.chain.simulate` (every feature at once) and, where ``specaudit.analysis.power``
offers an exact ``mutant_joint_law``, takes the joint law from there instead.

Diagnosis works from the check results alone (their stored observed/expected counts), so it
is a pure function of the results plus the scenario; the runner stores it in
``ScenarioResult.info["diagnosis"]`` and reporters only render it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specaudit.stats import gof as stats
from specaudit.results import ScenarioResult, Status
from specaudit.scenarios.schema import Scenario

__all__ = [
    "FEATURES",
    "MIN_SIMILARITY",
    "Diagnosis",
    "Match",
    "default_provider",
    "diagnose",
    "simulated_provider",
]

#: Features a diagnosis compares: check name -> (observed-count key, expected-count key) in its data.
FEATURES: dict[str, tuple[str, str]] = {
    "joint-law": ("observed", "expected"),
    "accept-length": ("observed_first", "expected_first"),
}
#: A failure "looks like" a mutant when the cosine similarity of the patterns reaches this.
MIN_SIMILARITY = 0.6
#: Sequences simulated per mutant by the default provider.
DIAGNOSIS_SAMPLES = 50_000
#: A simulated mutant whose own deviation from the exact law has a p-value above this is
#: indistinguishable from a lossless verifier on the scenario and is not a candidate.
SIGNIFICANCE = 1e-6
#: Mutant kinds that can explain a failure with ordinary uniforms (boundary mutants cannot).
KINDS = ("distribution", "lossless-control")

Laws = Mapping[str, np.ndarray]
LawProvider = Callable[[Scenario, str], "Laws | None"]


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


@functools.lru_cache(maxsize=256)
def _simulate_laws(spec_json: str, mutant: str, samples: int, seed: int) -> dict[str, np.ndarray]:
    """Return a mutant's simulated feature laws (cached: a scenario x mutant is simulated once)."""
    from specaudit.checks import statistical as checks
    from specaudit.verifiers.zoo import chain as mutants
    from specaudit.simulate.chain import JointCounts, Plan, simulate

    spec = Scenario.model_validate_json(spec_json)
    target, draft = spec.chains()
    joint = JointCounts(spec.vocab, spec.length) if checks.wants_joint(spec) else None
    harness_ss, verifier_ss = np.random.SeedSequence([seed, samples]).spawn(2)
    rounds = simulate(
        mutants.get(mutant).func,
        target,
        draft,
        Plan(spec.length, samples, spec.batch, spec.draft_law),
        np.random.default_rng(harness_ss),
        np.random.default_rng(verifier_ss),
        sinks=[joint] if joint is not None else [],
    )
    laws = {"accept-length": rounds.accept_first / max(rounds.accept_first.sum(), 1)}
    if joint is not None:
        laws["joint-law"] = joint.counts / max(joint.counts.sum(), 1)
    return laws


def simulated_provider(samples: int = DIAGNOSIS_SAMPLES, seed: int = 0) -> LawProvider:
    """Return a provider that simulates each mutant for ``samples`` sequences."""

    def provide(spec: Scenario, mutant: str) -> Laws | None:
        key = spec.model_copy(update={"samples": 1, "seed": 0}).model_dump_json(by_alias=True)
        return _simulate_laws(key, mutant, samples, seed)

    provide.samples = samples  # type: ignore[attr-defined]  # the noise level, for the significance filter
    return provide


def default_provider(samples: int = DIAGNOSIS_SAMPLES, seed: int = 0) -> LawProvider:
    """Return the simulated provider, with exact joint laws from ``specaudit.analysis.power`` where it has them."""
    simulated = simulated_provider(samples, seed)
    try:
        from specaudit.analysis.power import mutant_joint_law  # issue 3; optional
    except ImportError:
        return simulated

    def provide(spec: Scenario, mutant: str) -> Laws | None:
        laws = dict(simulated(spec, mutant) or {})
        try:
            exact = mutant_joint_law(spec, mutant)
        except Exception:  # noqa: BLE001 - no exact law for this mutant/scenario: keep the simulated one
            exact = None
        if exact is not None and "joint-law" in laws and np.shape(exact) == np.shape(laws["joint-law"]):
            laws["joint-law"] = np.asarray(exact, dtype=np.float64)
        return laws

    provide.samples = samples  # type: ignore[attr-defined]
    return provide


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
    if not any(c.status is Status.FAILED for c in result.checks):
        return None
    observed = _observed(result)
    if "joint-law" not in observed:
        # only scenarios small enough to store their joint law (<= checks.STORE_CELLS cells) are
        # diagnosed: simulating every mutant on a large-vocabulary scenario would cost minutes
        return None
    from specaudit.verifiers.zoo import chain as mutants

    provider = provider or default_provider()
    names = list(candidates) if candidates is not None else [m.name for m in mutants.MUTANTS.values() if m.kind in KINDS]
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
        m = mutants.get(name)
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
    import dataclasses

    out = []
    for result, spec in zip(results, specs):
        found = diagnose(spec, result, provider)
        if found is not None:
            result = dataclasses.replace(result, info={**result.info, "diagnosis": found.to_dict()})
        out.append(result)
    return (*out, *results[len(out):])
