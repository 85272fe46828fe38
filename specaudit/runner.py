"""The engine: load -> simulate -> check -> results. Returns data; never prints.

Shaped as a pipeline of small task functions (nox ``workflow.py``), each testable alone.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specaudit import __version__, checks
from specaudit.contract import guarded
from specaudit.errors import ContractError, UsageError, VerifierCrash, VerifierTimeout
from specaudit.loading import load_target
from specaudit.results import Category, CheckResult, ErrorInfo, RunResult, ScenarioResult, Status
from specaudit.scenarios import LoadedScenario, Scenario, resolve
from specaudit.simulate import JointCounts, Plan, simulate

DEFAULT_ALPHA = 1e-3

ScenarioLike = str | LoadedScenario | Scenario
Progress = Callable[[str, int, int], None]


def resolve_target(target: str | Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    """Return (callable, label) for an import string or a callable."""
    if callable(target):
        label = f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"
        return target, label
    return load_target(target), target


def resolve_scenarios(scenarios: Sequence[ScenarioLike] | None) -> list[LoadedScenario]:
    """Return loaded scenarios from names, paths, or scenario objects (default suite for None)."""
    if scenarios is None:
        return resolve(None)
    if isinstance(scenarios, (str, LoadedScenario, Scenario)):
        scenarios = [scenarios]
    out: list[LoadedScenario] = []
    for item in scenarios:
        if isinstance(item, LoadedScenario):
            out.append(item)
        elif isinstance(item, Scenario):
            out.append(LoadedScenario(item, "<api>", 1))
        else:
            out.extend(resolve([item]))
    return out


def scenario_seed(run_seed: int | None, loaded: LoadedScenario) -> int:
    """Return the simulation seed: the scenario's own, or one derived from the run seed and its content."""
    if run_seed is None:
        return loaded.spec.seed
    mixed = np.random.SeedSequence([run_seed, int(loaded.spec.content_hash(), 16)])
    return int(mixed.generate_state(1, dtype=np.uint32)[0])


def measure(
    verify: Callable[..., Any],
    spec: Scenario,
    seed: int,
    method: str = "pearson",
    progress: Callable[[int, int], None] | None = None,
) -> checks.Measured:
    """Simulate one scenario through ``verify`` and return the measurements."""
    target, draft = spec.chains()
    harness_ss, verifier_ss = np.random.SeedSequence(seed).spawn(2)
    joint = JointCounts(spec.vocab, spec.length) if checks.wants_joint(spec) else None
    plan = Plan(spec.length, spec.samples, spec.batch, spec.draft_law)
    rounds = simulate(
        verify,
        target,
        draft,
        plan,
        np.random.default_rng(harness_ss),
        np.random.default_rng(verifier_ss),
        sinks=[joint] if joint is not None else [],
        progress=progress,
    )
    return checks.Measured(spec, target, draft, rounds, joint, method)


def evaluate(measured: checks.Measured, gate_efficiency: bool = True) -> tuple[CheckResult, ...]:
    """Run every applicable statistical check on the measurements."""
    results = []
    for check in checks.STATISTICAL_CHECKS:
        result = check(measured)
        if result is None:
            continue
        if result.category is Category.EFFICIENCY and not gate_efficiency:
            result = dataclasses.replace(result, gate=False)
        results.append(result)
    return tuple(results)


def _error_info(exc: BaseException) -> ErrorInfo:
    if isinstance(exc, ContractError):
        return ErrorInfo("contract", str(exc), exc.clause)
    if isinstance(exc, VerifierTimeout):
        return ErrorInfo("timeout", str(exc))
    if isinstance(exc, VerifierCrash):
        return ErrorInfo("crash", str(exc), traceback=exc.user_traceback)
    raise exc


def run_scenario(
    verify: Callable[..., Any],
    loaded: LoadedScenario,
    seed: int,
    samples: int | None = None,
    method: str = "pearson",
    gate_efficiency: bool = True,
    progress: Progress | None = None,
) -> ScenarioResult:
    """Measure and check one scenario; a verifier crash or contract breach becomes an ERROR result."""
    spec = loaded.spec
    if samples is not None:
        spec = spec.model_copy(update={"samples": samples})
    base = ScenarioResult(
        name=spec.name,
        path=loaded.path,
        line=loaded.line,
        content_hash=spec.content_hash(),
        description=spec.description.strip(),
        seed=seed,
        samples=spec.samples,
    )
    tick = None if progress is None else (lambda done, total: progress(spec.name, done, total))
    t0 = time.perf_counter()
    try:
        measured = measure(guarded(verify), spec, seed, method, tick)
    except (ContractError, VerifierCrash, VerifierTimeout) as exc:
        return dataclasses.replace(base, error=_error_info(exc), seconds=time.perf_counter() - t0)
    results = evaluate(measured, gate_efficiency)
    return dataclasses.replace(
        base,
        checks=results,
        seconds=time.perf_counter() - t0,
        verifier_seconds=measured.rounds.verifier_seconds,
        calls=measured.rounds.calls,
        info={"tokens_per_step_exact": measured.horizon.tokens_per_step},
    )


def apply_holm(scenarios: Sequence[ScenarioResult], alpha: float) -> tuple[ScenarioResult, ...]:
    """Adjust every statistical p-value of the run with Holm and settle PENDING verdicts."""
    from specaudit.stats import holm

    flat = [(i, j) for i, s in enumerate(scenarios) for j, c in enumerate(s.checks) if c.status is Status.PENDING]
    adjusted = holm(np.array([scenarios[i].checks[j].pvalue for i, j in flat], dtype=np.float64))
    new = [list(s.checks) for s in scenarios]
    for (i, j), adj in zip(flat, adjusted):
        c = new[i][j]
        status = Status.FAILED if adj <= alpha else Status.PASSED
        new[i][j] = dataclasses.replace(c, adjusted_pvalue=float(adj), status=status)
    return tuple(dataclasses.replace(s, checks=tuple(c)) for s, c in zip(scenarios, new))


def run(
    target: str | Callable[..., Any],
    scenarios: Sequence[ScenarioLike] | ScenarioLike | None = None,
    *,
    seed: int | None = None,
    alpha: float = DEFAULT_ALPHA,
    samples: int | None = None,
    method: str = "pearson",
    gate_efficiency: bool = True,
    on_scenario: Callable[[ScenarioResult], None] | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Audit ``target`` on ``scenarios`` and return the RunResult (no printing).

    Parameters
    ----------
    target : str or callable
        Import string (``pkg.mod:attr``, ``file.py:attr``, an alias) or a verifier callable.
    scenarios : names, paths or Scenario objects, optional
        Defaults to the shipped default suite.
    seed : int, optional
        Run seed; each scenario's seed is derived from it and the scenario's content. Without
        it every scenario uses its own ``seed``.
    alpha : float
        Family-wise error rate over every statistical check of the run (Holm).
    samples : int, optional
        Override every scenario's number of sequences.
    method : {"pearson", "g"}
        Goodness-of-fit statistic.
    gate_efficiency : bool
        Whether tokens/step and accept-length failures fail the run (they are always reported).
    on_scenario : callable, optional
        Called with each ScenarioResult as soon as it is measured (before Holm), e.g. to save
        partial results.
    progress : callable, optional
        ``progress(scenario, done, total)`` after every batch of finished sequences.
    """
    if not 0 < alpha < 1:
        raise UsageError(f"alpha = {alpha}; allowed: 0 < alpha < 1")
    if method not in ("pearson", "g"):
        raise UsageError(f"method = {method!r}; allowed: 'pearson', 'g'")
    if samples is not None and samples < 1:
        raise UsageError(f"samples = {samples}; allowed: >= 1")
    verify, label = resolve_target(target)
    loaded = resolve_scenarios(scenarios)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    done: list[ScenarioResult] = []
    interrupted = False
    try:
        for item in loaded:
            result = run_scenario(
                verify, item, scenario_seed(seed, item), samples, method, gate_efficiency, progress
            )
            done.append(result)
            if on_scenario is not None:
                on_scenario(result)
    except KeyboardInterrupt:
        interrupted = True
    return RunResult(
        target=label,
        alpha=alpha,
        seed=seed,
        version=__version__,
        scenarios=apply_holm(done, alpha),
        interrupted=interrupted,
        started=started,
        seconds=time.perf_counter() - t0,
        settings={"method": method, "gate_efficiency": gate_efficiency, "samples": samples},
    )
