"""Test the tester: calibration of every check under the null, and the zoo's negative controls.

``selftest`` answers two questions and returns data (the CLI renders it):

1. Calibration. The reference verifier is run over R seeds (each a whole run of the suite at
   ``samples`` sequences per scenario, re-runs and power off). Under the null every check's raw
   p-value is U(0, 1): for each (scenario, check) a Kolmogorov-Smirnov test of its R p-values,
   Holm-adjusted over the checks (the headline "KS p" is the smallest adjusted one; a second-level
   test in the TestU01 / dieharder sense). Checks whose p-value never varies (no randomness to
   test, e.g. 0 degrees of freedom) are listed as degenerate and left out. False alarms are
   judged check by check: a check's R p-values come from R independent runs, so its count of raw
   p-values <= alpha is Binomial(R, alpha) under the null and must not exceed its upper point at
   0.5% / T (Bonferroni over the T checks). The count pooled over all R x T p-values is reported
   with the central 99% interval of Binomial(R T, alpha), but does not gate: the checks of one
   run are not independent (tokens/step and accept-length read the same accept counts), so one
   unlucky run moves two or three of them at once and the pooled count is over-dispersed. The
   number of runs that fail at family-wise alpha must not exceed the 99.5% point of
   Binomial(R, alpha) (Holm only bounds it from above).
2. Negative controls. Every zoo mutant is run once on the suite. A ``distribution`` mutant must
   fail every scenario where the joint-law check's predicted power against it (``specaudit.analysis.power``,
   at the run's N and Bonferroni level) is at least :data:`SHOULD_CATCH` (one without a power
   model, ``reused_uniforms``, must fail at least one scenario); a ``lossless-control`` must never fail a distribution check and must fail an
   efficiency check somewhere; ``boundary`` mutants are reported only (the adversarial-uniform
   checks catch them).

The self-test is miscalibrated when the KS p <= :data:`KS_LEVEL`, a check's false alarms exceed
its limit or too many null runs fail; it exits 1 when miscalibrated or when a mutant that should
be caught is missed. Its own false-failure rate is at most about KS_LEVEL + 0.5% + 0.5% +
(number of expected detections) x (1 - SHOULD_CATCH).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from specaudit.engine.run import ScenarioLike, execute, resolve_scenarios
from specaudit.engine.settings import DEFAULT_ALPHA, RunSettings
from specaudit.errors import ExitCode, NothingToRun, UsageError
from specaudit.results import Category, RunResult, Status
from specaudit.stats.gof import holm
from specaudit.verifiers import reference
from specaudit.verifiers.zoo import chain as zoo

__all__ = ["CheckCalibration", "MutantOutcome", "SelftestResult", "selftest"]

#: Sequences per scenario and seed: small enough that 200 seeds of the suite run in minutes,
#: large enough that every group expects >= 5 (cells are merged by expected count anyway).
DEFAULT_SAMPLES = 20_000
DEFAULT_SEEDS = 100
#: Calibration fails when the smallest Holm-adjusted KS p-value is at or below this.
KS_LEVEL = 0.01
#: Interval level of the false-alarm counts.
INTERVAL = 0.99
#: A distribution mutant "should be caught" on a scenario when the predicted power reaches this.
SHOULD_CATCH = 0.999
#: Mutant runs use seeds from here on (the calibration uses 0..R-1).
MUTANT_SEED = 1_000_000

#: ``progress(stage, done, total)`` runs (the engine's one progress shape).
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class CheckCalibration:
    """The null p-values of one (scenario, check) over the seeds and their uniformity test."""

    scenario: str
    check: str
    pvalues: tuple[float, ...]
    false_alarms: int  # raw p <= alpha
    degenerate: bool  # the p-value never varies: nothing to test
    ks_statistic: float | None = None
    ks_pvalue: float | None = None
    adjusted_ks_pvalue: float | None = None  # Holm over the non-degenerate checks


@dataclass(frozen=True)
class MutantOutcome:
    """What one mutant did on one scenario, and whether that is what the tool promises."""

    mutant: str
    kind: str
    scenario: str
    status: str  # scenario verdict
    distribution_failed: bool
    efficiency_failed: bool
    predicted_power: float | None  # joint-law power at the run's N and level (None: not modelled)
    expected: str  # "detect", "pass distribution", or "" (no promise)
    ok: bool


@dataclass(frozen=True)
class SelftestResult:
    """Everything the self-test measured and decided."""

    seeds: int
    samples: int
    alpha: float
    checks: tuple[CheckCalibration, ...]
    ks_pvalue: float  # smallest Holm-adjusted per-check KS p-value
    pooled_ks_pvalue: float  # KS of all tested p-values pooled (reported, not gating)
    tests: int  # tested p-values (R x non-degenerate checks)
    false_alarms: int
    interval: tuple[int, int]  # central INTERVAL range of Binomial(tests, alpha) (the pooled count: reported only)
    runs_failed: int  # calibration runs that failed at family-wise alpha
    runs_limit: int  # upper INTERVAL-quantile of Binomial(seeds, alpha)
    check_limit: int = 0  # the most false alarms one check may have: Binomial(seeds, alpha), Bonferroni over checks
    mutants: tuple[MutantOutcome, ...] = ()
    problems: tuple[str, ...] = ()  # one line per miss or miscalibration
    seconds: float = 0.0
    calibration_seconds: float = 0.0
    mutant_seconds: float = 0.0

    @property
    def calibrated(self) -> bool:
        """Return True when p-values look uniform and false alarms are where alpha puts them."""
        return (
            self.ks_pvalue > KS_LEVEL
            and all(c.degenerate or c.false_alarms <= self.check_limit for c in self.checks)
            and self.runs_failed <= self.runs_limit
        )

    @property
    def mutants_ok(self) -> bool:
        """Return True when no mutant that should be caught was missed."""
        return all(m.ok for m in self.mutants) and not any(p.startswith("mutant") for p in self.problems)

    def exit_code(self) -> ExitCode:
        """Return 0 when calibrated and every promised detection happened, else 1."""
        return ExitCode.OK if self.calibrated and self.mutants_ok else ExitCode.CHECKS_FAILED


def _run(target: Callable[..., Any], scenarios: Sequence[ScenarioLike], seed: int, settings: RunSettings,
         power: bool) -> RunResult:
    return execute(target, scenarios, dataclasses.replace(settings, seed=seed, power=power))


def _calibrate(
    scenarios: Sequence[ScenarioLike], seeds: int, settings: RunSettings, progress: Progress | None
) -> tuple[dict[tuple[str, str], list[float]], int]:
    """Run the reference over the seeds; return raw p-values per (scenario, check) and failed runs."""
    pvalues: dict[tuple[str, str], list[float]] = {}
    failed = 0
    for seed in range(seeds):
        result = _run(reference.verify, scenarios, seed, settings, power=False)
        failed += result.exit_code() == ExitCode.CHECKS_FAILED
        for s in result.scenarios:
            for c in s.checks:
                if c.pvalue is not None and c.gate:
                    pvalues.setdefault((s.name, c.name), []).append(float(c.pvalue))
        if progress is not None:
            progress("calibration", seed + 1, seeds)
    return pvalues, failed


def _ks(row: CheckCalibration) -> float:
    """Return a calibrated check's Holm-adjusted KS p-value (1 for a degenerate one, which has none)."""
    return 1.0 if row.adjusted_ks_pvalue is None else row.adjusted_ks_pvalue


def _uniformity(pvalues: dict[tuple[str, str], list[float]], seeds: int, alpha: float) -> tuple[CheckCalibration, ...]:
    rows = []
    for (scenario, check), ps in pvalues.items():
        arr = np.asarray(ps)
        degenerate = len(ps) < seeds or bool(np.ptp(arr) == 0) or bool(np.isnan(arr).any())
        alarms = int((arr <= alpha).sum())
        if degenerate:
            rows.append(CheckCalibration(scenario, check, tuple(ps), alarms, True))
            continue
        ks = sps.kstest(arr, "uniform")
        rows.append(CheckCalibration(scenario, check, tuple(ps), alarms, False, float(ks.statistic), float(ks.pvalue)))
    tested = [i for i, r in enumerate(rows) if not r.degenerate]
    adjusted = holm(np.array([rows[i].ks_pvalue for i in tested], dtype=np.float64))
    for i, adj in zip(tested, adjusted):
        r = rows[i]
        rows[i] = CheckCalibration(r.scenario, r.check, r.pvalues, r.false_alarms, False, r.ks_statistic, r.ks_pvalue, float(adj))
    return tuple(rows)


def _mutant_outcomes(result: RunResult, entry: zoo.Mutant) -> list[MutantOutcome]:
    out = []
    for s in result.scenarios:
        dist = any(c.gate and c.category is Category.DISTRIBUTION and c.status is Status.FAILED for c in s.checks)
        eff = any(c.category is Category.EFFICIENCY and c.status is Status.FAILED for c in s.checks)
        predicted = ((s.info.get("power") or {}).get(entry.name) or {}).get("power")
        detected = s.status in (Status.FAILED, Status.ERROR)
        if entry.kind == "distribution" and predicted is not None and predicted >= SHOULD_CATCH:
            expected, ok = "detect", detected
        elif entry.kind == "lossless-control":
            expected, ok = "pass distribution", not dist and s.error is None
        else:
            expected, ok = "", True
        out.append(MutantOutcome(entry.name, entry.kind, s.name, s.status.value, dist, eff, predicted, expected, ok))
    return out


def _zoo_problems(outcomes: Sequence[MutantOutcome]) -> list[str]:
    problems = []
    for o in outcomes:
        if o.ok:
            continue
        if o.expected == "detect":
            problems.append(f"mutant {o.mutant} missed on {o.scenario} (predicted power {o.predicted_power:.4f})")
        else:
            problems.append(f"mutant {o.mutant} (lossless control) failed a distribution check on {o.scenario}")
    for name, entry in zoo.MUTANTS.items():
        mine = [o for o in outcomes if o.mutant == name]
        if not mine:
            continue
        unmodelled = all(o.predicted_power is None for o in mine)  # e.g. reused_uniforms: no promise per scenario
        if entry.kind == "distribution" and unmodelled and not any(o.status in ("failed", "error") for o in mine):
            problems.append(f"mutant {name} passed every scenario (a distribution bug must fail the suite)")
        if entry.kind == "lossless-control" and not any(o.efficiency_failed for o in mine):
            problems.append(f"mutant {name} (lossless control) failed no efficiency check")
    return problems


def selftest(
    scenarios: Sequence[str] | None = None,
    *,
    seeds: int = DEFAULT_SEEDS,
    samples: int = DEFAULT_SAMPLES,
    alpha: float = DEFAULT_ALPHA,
    mutants: bool = True,
    progress: Progress | None = None,
) -> SelftestResult:
    """Check that the checks are calibrated under the null and that the zoo is caught.

    Parameters
    ----------
    scenarios : sequence of str, optional
        Scenario names, tags or paths (default: the default suite).
    seeds : int
        R, the number of seeded null runs of the reference verifier (>= 10).
    samples : int
        Sequences per scenario in every run (calibration and mutants).
    alpha : float
        Family-wise level of each run; also the level at which false alarms are counted.
    mutants : bool
        Also run the zoo.
    progress : callable, optional
        ``progress(stage, done, total)`` after every run.

    Returns
    -------
    SelftestResult
        ``exit_code()`` is 0 when calibrated and no promised detection was missed.

    Notes
    -----
    Pooling p-values across checks is reported but does not gate: checks of one run share the
    simulated sequences. Per-check KS with Holm keeps the second-level test at its level.

    References
    ----------
    .. [1] L'Ecuyer, P. and Simard, R. (2007). TestU01. ACM TOMS 33(4), sec. 3 (two-level tests).
    """
    if seeds < 10:
        raise UsageError(f"seeds = {seeds}; allowed: >= 10 (a KS test of fewer p-values says little)")
    if samples < 100:
        raise UsageError(f"samples = {samples}; allowed: >= 100")
    # every run of the self-test: re-runs and diagnosis off (validates alpha)
    settings = RunSettings(alpha=alpha, samples=samples, suspect_level=0.0, diagnose=False)
    loaded = resolve_scenarios(scenarios)
    if not loaded:
        raise NothingToRun("selftest: no scenario matched; `specaudit list` shows the names and tags")
    t0 = time.perf_counter()
    pvalues, runs_failed = _calibrate(loaded, seeds, settings, progress)
    rows = _uniformity(pvalues, seeds, alpha)
    t_cal = time.perf_counter() - t0
    tested = [r for r in rows if not r.degenerate]
    pooled = np.concatenate([r.pvalues for r in tested]) if tested else np.zeros(0)
    ks = min((_ks(r) for r in tested), default=1.0)
    pooled_ks = float(sps.kstest(pooled, "uniform").pvalue) if pooled.size else 1.0
    tests = int(pooled.size)
    alarms = sum(r.false_alarms for r in tested)
    tail = (1 - INTERVAL) / 2
    interval = (int(sps.binom.ppf(tail, tests, alpha)), int(sps.binom.ppf(1 - tail, tests, alpha)))
    runs_limit = int(sps.binom.ppf(1 - tail, seeds, alpha))
    check_limit = int(sps.binom.ppf(1 - tail / max(len(tested), 1), seeds, alpha))
    problems = []
    if ks <= KS_LEVEL:
        worst = min(tested, key=_ks)
        problems.append(f"miscalibrated: {worst.scenario} / {worst.check} p-values are not uniform (KS p {_ks(worst):.3g}, Holm)")
    for r in tested:
        if r.false_alarms > check_limit:
            problems.append(f"miscalibrated: {r.scenario} / {r.check}: {r.false_alarms} of {seeds} p-values <= alpha; at "
                            f"most {check_limit} expected (Binomial({seeds}, {alpha:g}), upper {tail:.1%} / {len(tested)} "
                            f"checks)")
    if runs_failed > runs_limit:
        problems.append(f"miscalibrated: {runs_failed} of {seeds} null runs failed; at most {runs_limit} expected at alpha {alpha:g}")
    outcomes: list[MutantOutcome] = []
    t1 = time.perf_counter()
    if mutants:
        names = list(zoo.MUTANTS)
        for i, name in enumerate(names):
            result = _run(zoo.MUTANTS[name].func, loaded, MUTANT_SEED + i, settings, power=True)
            outcomes.extend(_mutant_outcomes(result, zoo.MUTANTS[name]))
            if progress is not None:
                progress("mutants", i + 1, len(names))
        problems.extend(_zoo_problems(outcomes))
    return SelftestResult(
        seeds=seeds,
        samples=samples,
        alpha=alpha,
        checks=rows,
        ks_pvalue=float(ks),
        pooled_ks_pvalue=pooled_ks,
        tests=tests,
        false_alarms=int(alarms),
        interval=interval,
        runs_failed=int(runs_failed),
        runs_limit=runs_limit,
        check_limit=check_limit,
        mutants=tuple(outcomes),
        problems=tuple(problems),
        seconds=time.perf_counter() - t0,
        calibration_seconds=t_cal,
        mutant_seconds=time.perf_counter() - t1,
    )
