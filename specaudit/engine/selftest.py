"""Test the tester: calibration of every check under the null, and the zoo's negative controls.

``selftest`` answers three questions and returns data (the CLI renders it):

1. Is each check's p-value law right in the tail? (the law stage; the power against
   miscalibration.) Every gating check's counts are drawn from the exact null without the
   verifier (`specaudit.engine.null_draws`: joint law and accept-length in Pearson and G,
   tokens/step, per-prefix nodes and their Holm combination, both PIT histograms and their
   Bonferroni, early stop's spending, the suspect re-run rule), ``draws`` per (scenario, check),
   and judged by :func:`judge_tails`: at every level of :data:`LEVELS` the count of p-values at or
   below it against Binomial(n, t) (too many) and Binomial(n, floor t / SLACK) (too few), per
   scenario and pooled per check, Bonferroni at :data:`LAW_LEVEL`. The per-prefix/PIT checks are
   covered on :data:`LAW_COVERAGE` when the suite has none. Measured power against
   miscalibrated readers (2x tail inflation, a df too few, 2x conservative): ``benchmarks/selftest_power.py``.
2. Is the verifier path wired to those checks? The reference verifier is run over R seeds (each a
   whole run of the suite at ``samples`` sequences per scenario, re-runs and power off). For each
   (scenario, check) a Kolmogorov-Smirnov test of its R raw p-values, Holm-adjusted over the checks
   (must be > :data:`KS_LEVEL`); checks whose p-value never varies are listed as degenerate and left
   out. False alarms are judged check by check: a check's count of raw p-values <= alpha is
   Binomial(R, alpha) under the null and must not exceed its upper point at 0.5% / T (Bonferroni
   over the T checks); the pooled count is reported only (the checks of one run share sequences).
   The number of runs failing at family-wise alpha must not exceed the 99.5% point of
   Binomial(R, alpha). The first seed's suite is also run as 2 shards and merged: the merged
   p-values must equal the unsharded ones (``specaudit merge``'s promise).
3. Negative controls. Every zoo mutant is run once on the suite. A ``distribution`` mutant must
   fail every scenario where the joint-law check's predicted power against it (``specaudit.analysis.power``,
   at the run's N and Bonferroni level) is at least :data:`SHOULD_CATCH` (one without a power
   model, ``reused_uniforms``, must fail at least one scenario); a ``lossless-control`` must never
   fail a distribution check and must fail an efficiency check somewhere; ``boundary`` mutants are
   reported only (the adversarial-uniform checks catch them).

It exits 1 when miscalibrated (any of 1 or 2) or when a mutant that should be caught is missed. Its
own false-failure rate is at most about LAW_LEVEL + KS_LEVEL + 0.5% + 0.5% + (number of expected
detections) x (1 - SHOULD_CATCH).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from specaudit.checks.statistical import has_joint_law, wants_joint
from specaudit.engine import null_draws
from specaudit.engine.merge import merge_documents
from specaudit.engine.null_draws import NullRow, Reader, exact_reader
from specaudit.engine.run import execute
from specaudit.engine.settings import DEFAULT_ALPHA, RunSettings
from specaudit.engine.tasks import ScenarioLike, resolve_scenarios
from specaudit.errors import ExitCode, NothingToRun, UsageError
from specaudit.results import Category, RunResult, Status
from specaudit.results.document import to_document
from specaudit.scenarios.catalogue import shipped
from specaudit.scenarios.schema import Scenario
from specaudit.stats.gof import holm
from specaudit.verifiers import reference
from specaudit.verifiers.zoo import chain as zoo

__all__ = ["CheckCalibration", "MutantOutcome", "SelftestResult", "TailTest", "judge_tails", "selftest"]

#: Sequences per scenario and seed: small enough that 200 seeds of the suite run in minutes,
#: large enough that every group expects >= 5 (cells are merged by expected count anyway).
DEFAULT_SAMPLES = 20_000
#: Verifier-path runs: they check the wiring; the power against miscalibration is the law stage's.
DEFAULT_SEEDS = 20
#: Allowed seeds: a KS test of fewer p-values says little (the CLI's --seeds states the same range).
MIN_SEEDS, MAX_SEEDS = 10, 10**6
#: Allowed law-stage draws: 0 (skip it) or MIN_DRAWS .. MAX_DRAWS (fewer cannot judge the tail).
MIN_DRAWS, MAX_DRAWS = 1_000, 10**7
#: Allowed sequences per scenario and run (fewer leave the groups empty).
MIN_SAMPLES = 100
#: Exact-null draws per (scenario, check) of the law stage (x4 for the re-run rule, read at alpha alone).
DEFAULT_DRAWS = 5_000
#: Levels at which the law stage counts p-values: the run reads alpha / m (~3e-5) to the suspect level (0.1).
LEVELS = (0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 5e-4, 2e-4, 1e-4)
#: A level is judged on a row when the row expects at least this many p-values below it.
MIN_HITS = 10
#: A check is too conservative when it rejects significantly less than floor / SLACK of the level
#: (2x conservative is flagged; discreteness and Holm's slack, up to ~25% measured, are not).
SLACK = 2**0.5
#: The law stage's false-alarm rate: Bonferroni over all its one-sided binomial tests.
LAW_LEVEL = 0.01
#: The per-prefix and PIT checks are covered on this scenario (at LAW_COVERAGE_SAMPLES) when the
#: suite has none: the default suite's joint laws are small enough to enumerate.
LAW_COVERAGE = "zipf-v32k"
LAW_COVERAGE_SAMPLES = 5_000
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
class TailTest:
    """How often one row of exact-null p-values fell at or below one level, and the two binomial tails."""

    scenario: str  # "(pooled)" for a check pooled over scenarios
    check: str
    level: float
    draws: int
    hits: int
    #: P(Binomial(draws, ceiling x level) >= hits): small when the check rejects too often (None: not judged).
    high: float | None
    #: P(Binomial(draws, floor x level / SLACK) <= hits): small when too rarely (None: not judged).
    low: float | None
    flagged: bool = False

    @property
    def ratio(self) -> float:
        """Return the rejection rate over the level."""
        return self.hits / self.draws / self.level

    def tails(self) -> list[float]:
        """Return the binomial tails judged (upper, lower)."""
        return [p for p in (self.high, self.low) if p is not None]


def _tail_tests(scenario: str, row: NullRow, pvalues: np.ndarray) -> list[TailTest]:
    n = int(pvalues.size)
    levels = row.levels or tuple(t for t in LEVELS if n * t >= MIN_HITS)
    out = []
    for t in levels:
        judge_low = row.floor is not None and t >= row.floor_from
        if t > row.read_below and not judge_low:
            continue
        hits = int((pvalues <= t).sum())
        high = float(sps.binom.sf(hits - 1, n, min(1.0, row.ceiling * t))) if t <= row.read_below else None
        low = float(sps.binom.cdf(hits, n, row.floor * t / SLACK)) if judge_low and row.floor is not None else None
        out.append(TailTest(scenario, row.check, t, n, hits, high, low))
    return out


def judge_tails(rows: Sequence[NullRow], level: float = LAW_LEVEL) -> tuple[TailTest, ...]:
    """Judge exact-null p-values: every row, and every check pooled over scenarios, at every level.

    Parameters
    ----------
    rows : sequence of NullRow
        Null p-values per (scenario, check), independent draws (`null_draws.null_rows`).
    level : float
        The family-wise false-alarm rate of the judgement.

    Returns
    -------
    tuple of TailTest
        One per (row or pooled check, level); ``flagged`` where a binomial tail is at or below
        ``level / T``, T the number of tails computed (Bonferroni).

    Notes
    -----
    At level t a valid p-value falls at or below t with probability at most ``ceiling t``, so
    the count of n independent draws is stochastically at most Binomial(n, ceiling t): the upper
    tail is an exact test of "rejects too often" (too many small p-values: tail inflation, a df
    too few). A check that spends its level (``floor`` set) rejects at least ``floor t``; the lower
    tail at ``floor t / SLACK`` flags one that rejects too rarely (p-values piled up away from 0:
    a conservative tester) while discreteness and Holm's slack (rates down to ~0.75 t) pass.
    Counting at a ladder of levels is a Berk-Jones-type scan of the lower tail, sensitive where
    a KS statistic is not.
    """
    tests: list[TailTest] = []
    by_check: dict[str, list[NullRow]] = {}
    for row in rows:
        tests += _tail_tests(row.scenario, row, row.pvalues)
        by_check.setdefault(row.check, []).append(row)
    for same in by_check.values():
        if len(same) > 1:
            tests += _tail_tests("(pooled)", same[0], np.concatenate([r.pvalues for r in same]))
    cut = level / max(_count_tails(tests), 1)
    return tuple(dataclasses.replace(t, flagged=min(t.tails()) <= cut) for t in tests)


def _count_tails(tests: Sequence[TailTest]) -> int:
    return sum(len(t.tails()) for t in tests)


def law_scenarios(loaded: Sequence[Scenario], coverage: bool = True) -> list[Scenario]:
    """Return the scenarios of the law stage: the suite at its own N, plus per-prefix/PIT coverage."""
    specs = [s for s in loaded if s.mode != "exact"]
    if coverage and all(wants_joint(s) for s in specs):
        extra = {s.spec.name: s.spec for s in shipped()}[LAW_COVERAGE]
        specs.append(dataclasses.replace(extra, samples=LAW_COVERAGE_SAMPLES))
    return specs


def sequential_scenario(specs: Sequence[Scenario]) -> list[str]:
    """Return the one scenario that gets the early-stop and re-run rows (markov-v4 when there)."""
    joint = [s.name for s in specs if has_joint_law(s)]
    return ["markov-v4"] if "markov-v4" in joint else joint[:1]


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
    #: The law stage: exact-null p-values judged in the tail (row by row and pooled per check).
    tails: tuple[TailTest, ...] = ()
    draws: int = 0  # exact-null draws per (scenario, check)
    law_seconds: float = 0.0
    #: Checks whose merged shard run gave other p-values than the unsharded run (must be none).
    shard_mismatches: tuple[str, ...] = ()

    @property
    def calibrated(self) -> bool:
        """Return True when p-values look uniform, false alarms are where alpha puts them and no tail is off."""
        return (
            self.ks_pvalue > KS_LEVEL
            and all(c.degenerate or c.false_alarms <= self.check_limit for c in self.checks)
            and self.runs_failed <= self.runs_limit
            and not any(t.flagged for t in self.tails)
            and not self.shard_mismatches
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
) -> tuple[dict[tuple[str, str], list[float]], int, RunResult | None]:
    """Run the reference over the seeds; return raw p-values per (scenario, check), failed runs and the first run."""
    pvalues: dict[tuple[str, str], list[float]] = {}
    failed = 0
    first: RunResult | None = None
    for seed in range(seeds):
        result = _run(reference.verify, scenarios, seed, settings, power=False)
        first = first or result
        failed += result.exit_code() == ExitCode.CHECKS_FAILED
        for s in result.scenarios:
            for c in s.checks:
                if c.pvalue is not None and c.gate:
                    pvalues.setdefault((s.name, c.name), []).append(float(c.pvalue))
        if progress is not None:
            progress("calibration", seed + 1, seeds)
    return pvalues, failed, first


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


def _shard_mismatches(target: Callable[..., Any], scenarios: Sequence[ScenarioLike], settings: RunSettings,
                      whole: RunResult, shards: int = 2) -> list[str]:
    """Run the suite as ``shards`` shards with ``whole``'s seed, merge them, and list every p-value that differs.

    ``specaudit merge`` promises the unsharded run's counts and p-values (additive tallies), so the
    merged p-values must equal ``whole``'s to rounding: a check of the merge path, exact, one seed.
    """
    docs = [to_document(execute(target, scenarios, dataclasses.replace(settings, seed=whole.seed, power=False,
                                                                       shard=(i, shards))))
            for i in range(shards)]
    merged = merge_documents(docs)
    out = []
    for a, b in zip(whole.scenarios, merged.scenarios):
        mine = {c.name: c.pvalue for c in b.checks}
        for c in a.checks:
            p = mine.get(c.name)
            if c.pvalue is None and p is None:
                continue
            if c.pvalue is None or p is None or not np.isclose(c.pvalue, p, rtol=1e-9, atol=1e-12):
                out.append(f"{a.name} / {c.name}: p = {c.pvalue} unsharded, {p} merged from {shards} shards")
    return out


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
    draws: int = DEFAULT_DRAWS,
    reader: Reader = exact_reader,
    law_seed: int = 0,
) -> SelftestResult:
    """Check that the checks are calibrated under the null and that the zoo is caught.

    Parameters
    ----------
    scenarios : sequence of str, optional
        Scenario names, tags or paths (default: the default suite).
    seeds : int
        R, the number of seeded null runs of the reference verifier (``MIN_SEEDS`` .. ``MAX_SEEDS``).
    samples : int
        Sequences per scenario in every run (calibration and mutants).
    alpha : float
        Family-wise level of each run; also the level at which false alarms are counted.
    mutants : bool
        Also run the zoo.
    progress : callable, optional
        ``progress(stage, done, total)`` after every run.
    draws : int
        Exact-null draws per (scenario, check) of the law stage (0: skip it; else ``MIN_DRAWS`` ..
        ``MAX_DRAWS``).
    reader : Reader
        How the law stage reads a statistic into a p-value: the library's (`null_draws.exact_reader`);
        tests and ``benchmarks/selftest_power.py`` put deliberately miscalibrated ones here.
    law_seed : int
        Seed of the law stage's draws.

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
    if not MIN_SEEDS <= seeds <= MAX_SEEDS:
        raise UsageError(f"seeds = {seeds}; allowed: an integer {MIN_SEEDS:,} .. {MAX_SEEDS:,} "
                         "(a KS test of fewer p-values says little)")
    if draws and not MIN_DRAWS <= draws <= MAX_DRAWS:
        raise UsageError(f"draws = {draws}; allowed: 0 (no law stage) or an integer {MIN_DRAWS:,} .. {MAX_DRAWS:,}")
    if samples < MIN_SAMPLES:
        raise UsageError(f"samples = {samples}; allowed: an integer >= {MIN_SAMPLES:,}")
    # every run of the self-test: re-runs and diagnosis off (validates alpha)
    settings = RunSettings(alpha=alpha, samples=samples, suspect_level=0.0, diagnose=False)
    loaded = resolve_scenarios(scenarios)
    if not loaded:
        raise NothingToRun("selftest: no scenario matched; `specaudit list` shows the names and tags")
    t0 = time.perf_counter()
    pvalues, runs_failed, first = _calibrate(loaded, seeds, settings, progress)
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
    mismatches = _shard_mismatches(reference.verify, loaded, settings, first) if first is not None else []
    problems += [f"shard merge: {m}" for m in mismatches]
    if progress is not None:
        progress("shard merge", 1, 1)
    t_law = time.perf_counter()
    tails: tuple[TailTest, ...] = ()
    if draws:
        specs = law_scenarios([item.spec for item in loaded])
        drawn = null_draws.null_rows(specs, draws, reader=reader, rng=np.random.default_rng(law_seed), alpha=alpha,
                                     sequential=sequential_scenario(specs))
        tails = judge_tails(drawn)
        problems += [f"re-run rule: {m}" for m in null_draws.rerun_rule_mismatches(alpha)]
        count = _count_tails(tails)
        for t in tails:
            if t.flagged:
                side = "too many" if t.high is not None and t.high <= LAW_LEVEL / count else "too few"
                problems.append(
                    f"miscalibrated (exact-null draws): {t.scenario} / {t.check}: {side} p-values <= {t.level:g}: "
                    f"{t.hits} of {t.draws} (x{t.ratio:.2f} the level; binomial tail {min(t.tails()):.2g} <= "
                    f"{LAW_LEVEL:g} / {count} tests)")
        if progress is not None:
            progress("exact-null draws", 1, 1)
    law_seconds = time.perf_counter() - t_law
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
        tails=tails,
        draws=draws,
        law_seconds=law_seconds,
        shard_mismatches=tuple(mismatches),
    )
