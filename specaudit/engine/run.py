"""Run: bind -> measure every scenario -> finish (Holm, re-runs, power, diagnosis). Returns data; never prints.

Shaped as a pipeline of small task functions over one frozen settings object (nox
``workflow.execute``), each testable alone. :func:`run` is the public face (``specaudit.run``):
its keyword arguments become a :class:`~specaudit.engine.settings.RunSettings`, validated once,
and :func:`execute` runs the pipeline. :func:`finish` is the end of every run and of every
``specaudit merge`` (:mod:`specaudit.engine.merge`): Holm over the whole run, re-runs of the
SUSPECT scenarios where a verifier is at hand, the power and diagnosis annotations, and the
RunResult.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from specaudit import __version__, adapters, engines
from specaudit.checks.statistical import has_joint_law
from specaudit.contract import logits, tree
from specaudit.contract.guard import catch_interrupts
from specaudit.contract.targets import import_string, load_target
from specaudit.engine.executors import Progress
from specaudit.engine.scenario import results
from specaudit.engine.settings import DEFAULT_ALPHA, RunSettings, default_suspect_level
from specaudit.engine.tasks import ScenarioLike, Task, certify_cap, resolve_scenarios, scenario_seed
from specaudit.errors import TargetLoadError
from specaudit.results import Category, CheckResult, RunResult, ScenarioResult, Status
from specaudit.scenarios.loading import LoadedScenario
from specaudit.scenarios.schema import Scenario
from specaudit.stats.gof import holm

__all__ = [
    "DEFAULT_ALPHA",
    "RERUN_FACTOR",
    "RunSettings",
    "apply_holm",
    "bind",
    "capped",
    "bind_target",
    "default_suspect_level",
    "environment",
    "execute",
    "finish",
    "measure_all",
    "rerun_seed",
    "rerun_suspects",
    "resolve_target",
]
#: ``remeasure(index, seed, samples)``: scenario ``index`` of the run measured again.
Remeasure = Callable[[int, int, int], ScenarioResult]


def resolve_target(target: str | Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    """Return (callable, label) for an import string or a callable."""
    if callable(target):
        label = f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"
        return target, label
    return load_target(target), target


def apply_holm(
    scenarios: Sequence[ScenarioResult], alpha: float, suspect_level: float | None = None
) -> tuple[ScenarioResult, ...]:
    """Adjust every statistical p-value of the run with Holm and settle PENDING verdicts.

    The family is every PENDING gating check plus every one adjusted before (so a re-run, put in place
    of its first result, is adjusted over the same family); non-gating checks form a family of their
    own. Only PENDING checks are settled:
    FAILED at adjusted p <= alpha, SUSPECT at adjusted p <= ``suspect_level``, else PASSED.
    """
    flat = [
        (i, j)
        for i, s in enumerate(scenarios)
        for j, c in enumerate(s.checks)
        if c.status is Status.PENDING or c.adjusted_pvalue is not None
    ]
    pvalues = np.array([scenarios[i].checks[j].pvalue for i, j in flat], dtype=np.float64)
    gates = np.array([scenarios[i].checks[j].gate for i, j in flat], dtype=bool)
    adjusted = np.empty(len(flat))
    for family in (gates, ~gates):  # checks reported only are their own family: never shrink a gate's level
        adjusted[family] = holm(pvalues[family])
    new = [list(s.checks) for s in scenarios]
    for (i, j), adj in zip(flat, adjusted):
        c = new[i][j]
        if c.status is not Status.PENDING:
            continue
        if adj <= alpha:
            status = Status.FAILED
        elif suspect_level is not None and adj <= suspect_level:
            status = Status.SUSPECT
        else:
            status = Status.PASSED
        new[i][j] = dataclasses.replace(c, adjusted_pvalue=float(adj), status=status)
    return tuple(dataclasses.replace(s, checks=tuple(more_efficient_passes(c))) for s, c in zip(scenarios, new))


#: What an efficiency check that a lossless verifier beat says in place of its failure, by the joint law's verdict.
MORE_EFFICIENT = {
    Status.PASSED: "more efficient than the scheme's rule, and the joint law passed: lossless, and better than the bound",
    Status.SUSPECT: "more efficient than the scheme's rule; the joint law is suspect, and this check takes its verdict",
}


def _more_efficient(check: CheckResult) -> bool:
    """Return True when an efficiency check's statistic departs in the verifier's favour (more tokens a step)."""
    data = check.data or {}
    if check.name == "tokens-per-step" and "estimate" in data and "exact" in data:
        return float(data["estimate"]) > float(data["exact"])
    if check.name == "accept-length" and "observed_first" in data and "expected_first" in data:
        seen, want = np.asarray(data["observed_first"], float), np.asarray(data["expected_first"], float)
        counts = np.arange(len(seen))
        return bool(seen.sum() > 0 and want.sum() > 0
                    and counts @ seen / seen.sum() > counts @ want / want.sum())
    return False


def more_efficient_passes(checks: Sequence[CheckResult]) -> list[CheckResult]:
    """Return ``checks`` with each efficiency check that departed in the verifier's favour given the joint law's verdict.

    Tokens/step and accept length are one-sided: the closed form is the scheme's rule (SpecInfer's,
    the chain's), and a verifier that accepts more (one that merges equal-token siblings, block
    verification on a chain scenario) has lost nothing unless the same scenario's joint law says so:
    the joint law judges loss, and a departure in the verifier's favour takes its verdict (PASSED,
    or SUSPECT, which the re-run decides). Less efficient than the bound, or any departure with the
    joint law failed, errored or not run, stays as settled. Idempotent: a check given a verdict keeps it.
    """
    joint = next((c for c in checks if c.name == "joint-law"), None)
    if joint is None or joint.status not in MORE_EFFICIENT:
        return list(checks)
    return [dataclasses.replace(c, status=joint.status, summary=f"{c.summary}; {MORE_EFFICIENT[joint.status]}",
                                data={**(c.data or {}), "more_efficient": True})
            if (c.category is Category.EFFICIENCY and c.status in (Status.FAILED, Status.SUSPECT)
                and not (c.data or {}).get("more_efficient") and _more_efficient(c))
            else c for c in checks]


#: A re-run of a SUSPECT scenario uses this many times the samples (TestU01/dieharder style).
RERUN_FACTOR = 4


def rerun_seed(seed: int) -> int:
    """Return the fresh seed of a scenario's re-run, derived from its first seed."""
    return int(np.random.SeedSequence([seed, RERUN_FACTOR]).generate_state(1, dtype=np.uint32)[0])


def rerun_suspects(
    results: Sequence[ScenarioResult],
    remeasure: Remeasure,
    alpha: float,
    suspect_level: float,
) -> tuple[ScenarioResult, ...]:
    """Re-run every SUSPECT scenario on a fresh seed with RERUN_FACTOR x the samples.

    ``remeasure(index, seed, samples)`` measures scenario ``index`` again. The re-run's p-values
    replace the first ones in the Holm family and decide the scenario (``ScenarioResult.rerun``; an exact
    probe the first look failed or errored stays failed); the first result is kept as it was. The family-wise error rate stays below
    ``alpha (1 + P(suspect))``: the second look spends alpha only after a first suspect.
    """
    suspects = [
        i for i, s in enumerate(results)
        if s.error is None and any(c.gate and c.status is Status.SUSPECT and c.adjusted_pvalue is not None for c in s.checks)
    ]
    if not suspects:
        return tuple(results)
    family = list(results)
    for i in suspects:
        family[i] = remeasure(i, rerun_seed(results[i].seed), RERUN_FACTOR * results[i].samples)
    settled = apply_holm(family, alpha, suspect_level)
    out = list(results)
    for i in suspects:
        out[i] = dataclasses.replace(results[i], rerun=settled[i])
    return tuple(out)


def capped(remeasure: Remeasure, specs: Sequence[Scenario], settings: RunSettings) -> Remeasure:
    """Return ``remeasure`` keeping a ``--certify-tv`` run's sample cap (``--samples``, else the planned cap).

    A suspect's re-run asks for RERUN_FACTOR x the first run's sequences; a certificate never
    rests on more sequences than the cap the user set.
    """
    if settings.certify_tv is None:
        return remeasure
    eps = settings.certify_tv

    def again(i: int, fresh_seed: int, n: int) -> ScenarioResult:
        if has_joint_law(specs[i]):
            n = min(n, settings.samples or certify_cap(specs[i], eps, settings.alpha) or n)
        return remeasure(i, fresh_seed, n)

    return again


def execute(
    target: str | Callable[..., Any],
    scenarios: Sequence[ScenarioLike] | ScenarioLike | None,
    settings: RunSettings,
    *,
    progress: Progress | None = None,
    on_scenario: Callable[[ScenarioResult], None] | None = None,
) -> RunResult:
    """Audit ``target`` on ``scenarios`` with ``settings`` (the pipeline behind :func:`run` and the CLI)."""
    label, loaded, binding = bind(target, scenarios, settings)
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    tasks = [Task(verify, item, scenario_seed(settings.seed, item), settings.samples)
             for item, verify in zip(loaded, binding.verifiers)]
    stop_level = settings.stop_level(len(loaded))

    def remeasure(i: int, fresh_seed: int, n: int) -> ScenarioResult:
        (again,) = results([tasks[i]._replace(seed=fresh_seed, samples=n)], settings, stop_level=stop_level)
        return again

    with catch_interrupts():  # a KeyboardInterrupt is the user's only after a real SIGINT
        done, interrupted = measure_all(tasks, binding.choices, settings, stop_level, progress, on_scenario)
        return finish(
            label, done, [item.spec for item in loaded], settings,
            started=started, elapsed=lambda: time.perf_counter() - t0, interrupted=interrupted, remeasure=remeasure,
            adapter=None if binding.main_choice is None else binding.main_choice.label(),
        )


def bind(target: str | Callable[..., Any], scenarios: Sequence[ScenarioLike] | ScenarioLike | None,
         settings: RunSettings) -> tuple[str, list[LoadedScenario], adapters.Binding]:
    """Load the target and the scenarios and bind the target to each scenario (adapters)."""
    loaded = resolve_scenarios(scenarios if scenarios is not None else adapters.preset_scenarios(target), settings)
    label, binding = bind_target(target, loaded, settings)
    return label, loaded, binding


def bind_target(target: str | Callable[..., Any], loaded: Sequence[LoadedScenario],
                settings: RunSettings) -> tuple[str, adapters.Binding]:
    """Load the target and bind it to each loaded scenario (adapters); check its signature against them."""
    raw, label = resolve_target(target)
    binding = adapters.bind(target, raw, [item.spec for item in loaded], settings.adapter, settings.adapter_options)
    verify = binding.main
    if tree.contract_of(verify) == "chain":  # a tree verifier takes six arguments of its own
        logits.check_arity(verify, settings.contract)
    tree.check_compatible(verify, label, list(loaded), settings.contract)
    return label, binding


def measure_all(tasks: Sequence[Task], choices: Sequence[adapters.AdapterChoice | None], settings: RunSettings,
                stop_level: float | None, progress: Progress | None,
                on_scenario: Callable[[ScenarioResult], None] | None) -> tuple[list[ScenarioResult], bool]:
    """Measure and check every scenario; return the results so far and whether the run was interrupted.

    ``on_scenario`` (the reporter's observer) gets each result as it comes, in task order.
    """
    done: list[ScenarioResult] = []
    measured = results(tasks, settings, stop_level=stop_level, progress=progress)
    try:
        with contextlib.closing(measured):  # an interrupt in the observer ends the workers now, not at collection
            for result, choice in zip(measured, choices):
                if choice is not None:  # say how the target was driven
                    result = dataclasses.replace(result, info={**result.info, "adapter": choice.label()})
                done.append(result)
                if on_scenario is not None:
                    on_scenario(result)
    except KeyboardInterrupt:
        return done, True
    return done, False


def finish(
    target: str,
    results: Sequence[ScenarioResult],
    specs: Sequence[Scenario],
    settings: RunSettings,
    *,
    started: str,
    elapsed: Callable[[], float],
    interrupted: bool = False,
    remeasure: Remeasure | None = None,
    adapter: str | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> RunResult:
    """Settle a run's measured scenarios and return its RunResult: the end of every run and merge.

    Holm over the whole run (SUSPECT between alpha and the suspect level); the SUSPECT scenarios
    re-run when ``remeasure`` can measure them again (`rerun_suspects`; a merge cannot); the
    power and diagnosis annotations the settings ask for. An interrupt in any step keeps what is
    settled so far and marks the run interrupted; an interrupted run skips the later steps.
    ``elapsed()`` gives the run's seconds at the end; ``adapter`` says how the target was
    driven and ``recorded`` adds to the recorded settings.
    """
    # after the measuring: a supervised run imports these while its child measures (supervisor._AFTER_CHILD)
    from specaudit.analysis.diagnose import annotate as annotate_diagnosis
    from specaudit.analysis.power import annotate as annotate_power

    alpha, suspect = settings.alpha, settings.holm_suspect
    checked = apply_holm(results, alpha, suspect)
    if remeasure is not None and suspect is not None and not interrupted:
        again = capped(remeasure, specs, settings)
        checked, interrupted = _interruptible(lambda: rerun_suspects(checked, again, alpha, suspect), checked)
    if settings.power and not interrupted:
        checked, interrupted = _interruptible(lambda: annotate_power(checked, specs, alpha), checked)
    if settings.diagnose and not interrupted:
        checked, interrupted = _interruptible(lambda: annotate_diagnosis(checked, specs), checked)
    return RunResult(
        target=target,
        alpha=alpha,
        seed=settings.seed,
        version=__version__,
        scenarios=checked,
        interrupted=interrupted,
        started=started,
        seconds=elapsed(),
        settings={**settings.record(adapter), **(recorded or {})},
        environment=environment(target),
    )


def environment(target: str | None = None) -> dict[str, str]:
    """Return where this process runs (python, numpy, platform) and the engine ``target`` audited, if one.

    The engine and its version (``engine``, ``engine_version``, ``engine_source``): the release of an
    ``ENGINE@VERSION`` target, or the installed release an import string into an engine's package
    reaches (:func:`specaudit.engines.describe`).
    """
    env = {"python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform()}
    if target is not None:
        module = import_string(target).rpartition(":")[0] or None
        try:
            env.update(engines.describe(target, module))
        except TargetLoadError:  # a release that loaded for the run and cannot be read back now: say so
            env["engine"] = f"{target} (its release could not be read back for the record)"
    return env


def _interruptible(
    step: Callable[[], tuple[ScenarioResult, ...]], before: tuple[ScenarioResult, ...]
) -> tuple[tuple[ScenarioResult, ...], bool]:
    """Return ``(step(), False)``, or ``(before, True)`` when the step is interrupted."""
    try:
        return step(), False
    except KeyboardInterrupt:
        return before, True
