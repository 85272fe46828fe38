"""The engine: load -> simulate -> check -> results. Returns data; never prints.

Shaped as a pipeline of small task functions (nox ``workflow.py``), each testable alone.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from specaudit import __version__

from specaudit.checks import statistical as checks
from specaudit.contract.guard import DEFAULT_TIMEOUT, guarded
from specaudit.errors import ContractError, UsageError, VerifierCrash, VerifierTimeout
from specaudit.contract.targets import load_target
from specaudit.results import Category, CheckResult, ErrorInfo, RunResult, ScenarioResult, Status
from specaudit.scenarios.schema import LoadedScenario, Scenario, resolve

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
    contract: str = "probs",
    max_memory: int | None = None,
) -> checks.Measured:
    """Simulate one scenario through ``verify`` (in ``contract``) and return the measurements.

    The scenario's blocks (``specaudit.engine.bench``) run in order in this process; ``run(jobs=...)``
    spreads the same blocks over processes with identical results.
    """
    from specaudit.engine.bench import Bench

    bench = Bench(verify, spec, contract, max_memory)
    return bench.measured(bench.measure(seed, progress=progress), method)


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
        return ErrorInfo("timeout", str(exc), traceback=exc.user_traceback)
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
    contract: str = "probs",
    timeout: float | None = DEFAULT_TIMEOUT,
    max_memory: int | None = None,
) -> ScenarioResult:
    """Measure and check one scenario; a verifier crash, hang or contract breach becomes an ERROR result."""
    spec = loaded.spec
    if samples is not None:
        spec = spec.model_copy(update={"samples": samples})
    from specaudit.engine.scenario import Options, base_result, run_scenarios  # blocks, in this process (specaudit.engine.bench)

    t0 = time.perf_counter()
    if spec.mode == "exact":  # exact probes instead of a simulation (specaudit.checks.probes)
        from specaudit.checks import probes as exact_checks

        done = exact_checks.run_exact(guarded(verify, timeout), spec, seed, gate_efficiency, contract)
        return dataclasses.replace(
            base_result(loaded, spec, seed),
            checks=done.checks,
            error=None if done.error is None else _error_info(done.error),
            seconds=time.perf_counter() - t0,
            verifier_seconds=done.verifier_seconds,
            calls=done.calls,
            info=done.info,
        )
    options = Options(method, gate_efficiency, contract, timeout, max_memory)
    return run_scenarios([(verify, loaded, seed, samples)], options, progress)[0]


def apply_holm(
    scenarios: Sequence[ScenarioResult], alpha: float, suspect_level: float | None = None
) -> tuple[ScenarioResult, ...]:
    """Adjust every statistical p-value of the run with Holm and settle PENDING verdicts.

    The family is every PENDING check plus every check adjusted before (so a re-run, put in place
    of its first result, is adjusted over the same family); only PENDING checks are settled:
    FAILED at adjusted p <= alpha, SUSPECT at adjusted p <= ``suspect_level``, else PASSED.
    """
    from specaudit.stats.gof import holm

    flat = [
        (i, j)
        for i, s in enumerate(scenarios)
        for j, c in enumerate(s.checks)
        if c.status is Status.PENDING or c.adjusted_pvalue is not None
    ]
    adjusted = holm(np.array([scenarios[i].checks[j].pvalue for i, j in flat], dtype=np.float64))
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
    return tuple(dataclasses.replace(s, checks=tuple(c)) for s, c in zip(scenarios, new))


#: A re-run of a SUSPECT scenario uses this many times the samples (TestU01/dieharder style).
RERUN_FACTOR = 4


def default_suspect_level(alpha: float) -> float:
    """Return the default suspect level: 100 x alpha, at most 0.5."""
    return min(100.0 * alpha, 0.5)


def rerun_seed(seed: int) -> int:
    """Return the fresh seed of a scenario's re-run, derived from its first seed."""
    return int(np.random.SeedSequence([seed, RERUN_FACTOR]).generate_state(1, dtype=np.uint32)[0])


def rerun_suspects(
    results: Sequence[ScenarioResult],
    remeasure: Callable[[int, int, int], ScenarioResult],
    alpha: float,
    suspect_level: float,
) -> tuple[ScenarioResult, ...]:
    """Re-run every SUSPECT scenario on a fresh seed with RERUN_FACTOR x the samples.

    ``remeasure(index, seed, samples)`` measures scenario ``index`` again. The re-run's p-values
    replace the first ones in the Holm family and decide the scenario (``ScenarioResult.rerun``);
    the first result is kept as it was. The family-wise error rate stays below
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
    diagnose: bool = True,
    contract: str = "probs",
    timeout: float | None = DEFAULT_TIMEOUT,
    adapter: str | None = None,
    adapter_options: Mapping[str, Any] | None = None,
    jobs: int = 1,
    max_memory: int | None = None,
    suspect_level: float | None = None,
    power: bool = True,
    early_stop: bool = False,
    shard: tuple[int, int] | str | None = None,
    backend: str = "local",
    address: str | None = None,
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
    adapter : str, optional
        Adapter that drives ``target`` in its own layout (``specaudit.adapters``: torch, hf,
        vllm, flashinfer, an entry point or ``pkg.mod:attr``); overrides a scenario's ``adapter:``.
        A target alias such as ``hf-transformers`` brings its own.
    adapter_options : mapping, optional
        The adapter's options (``--adapter-arg key=value``, ``--device``, ``--dtype``).
    diagnose : bool
        For every scenario that fails a check, rank the zoo mutants by how well their expected
        deviation matches (``specaudit.analysis.diagnose``) and store it in ``info["diagnosis"]``.
    contract : {"probs", "logits"}
        How ``target`` is called: the canonical contract on processed probabilities, or the
        logits contract (raw logits plus sampling parameters, ``specaudit.contract.logits``).
    timeout : float or None
        Seconds one verifier call may take before it is stopped and its scenario is an ERROR
        (``specaudit.contract.chain.guarded``: main thread of a POSIX process only); None or 0: no limit.
    jobs : int
        Blocks of every scenario (``specaudit.engine.bench``) run in this many forked processes;
        results are identical to ``jobs=1``.
    max_memory : int, optional
        Bytes the simulator's batch may use (p and q plus the verifier's temporaries);
        default ``specaudit.simulate.chain.DEFAULT_MAX_MEMORY`` (2 GiB).
    suspect_level : float, optional
        A check with alpha < Holm-adjusted p <= this is SUSPECT and its scenario is re-run on a
        fresh seed with 4x the samples (`rerun_suspects`); default 100 x alpha (at most 0.5);
        ``suspect_level <= alpha`` disables re-runs.
    power : bool
        Add each scenario's detectable TV and its power against every zoo mutant
        (``specaudit.analysis.power``) to ``info["sensitivity"]`` and ``info["power"]``.
    early_stop : bool
        Look at every scenario after 1, 2, 4, ... blocks and stop it once a check has failed
        for sure (``specaudit.stats.sequential``: alpha spending, family-wise alpha holds); p-values
        become sequential p-values. Off by default: the last look keeps only alpha/2.
    shard : (i, n) or "i/n", optional
        Run only blocks ``b = i mod n`` of every scenario and keep their additive tallies in
        each result's ``info`` for ``specaudit merge`` (no suspect re-runs: the merge decides).
    backend : {"local", "ray"}
        Where blocks run: this machine (``jobs`` processes) or Ray tasks (``specaudit.engine.executors``).
    address : str, optional
        The Ray cluster to join (``ray.init(address=...)``); default: a local instance.
    """
    _check_arguments(alpha, suspect_level, method, samples, timeout)
    label, loaded, binding = _bind(target, scenarios, contract, adapter, adapter_options)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    shard = _parse_shard(shard, early_stop)
    tasks = list(zip(loaded, binding.verifiers, binding.choices))
    options = _options(method, gate_efficiency, contract, timeout, max_memory, jobs, backend, address,
                       _stop_level(alpha, loaded) if early_stop else None, shard)
    done, interrupted = _measure_all(tasks, seed, samples, options, progress, on_scenario)
    suspect = _suspect_level(alpha, suspect_level, shard)
    checked = apply_holm(done, alpha, suspect if suspect > alpha else None)
    if suspect > alpha and not interrupted:
        checked, interrupted = _rerun(checked, tasks, options, alpha, suspect)
    specs = [item.spec for item in loaded]
    if power and not interrupted:
        checked, interrupted = _annotate_power(checked, specs, alpha)
    if diagnose and not interrupted:
        checked, interrupted = _annotate_diagnosis(checked, specs)
    return RunResult(
        target=label,
        alpha=alpha,
        seed=seed,
        version=__version__,
        scenarios=checked,
        interrupted=interrupted,
        started=started,
        seconds=time.perf_counter() - t0,
        settings=_settings(method, gate_efficiency, samples, contract, timeout, early_stop, shard, suspect_level,
                           power, diagnose, binding),
    )


def _check_arguments(alpha: float, suspect_level: float | None, method: str, samples: int | None,
                     timeout: float | None) -> None:
    """Raise UsageError for an argument of `run` out of its range."""
    if not 0 < alpha < 1:
        raise UsageError(f"alpha = {alpha}; allowed: 0 < alpha < 1")
    if suspect_level is not None and not 0 <= suspect_level < 1:
        raise UsageError(f"suspect_level = {suspect_level}; allowed: 0 <= suspect_level < 1 (<= alpha: no re-runs)")
    if method not in ("pearson", "g"):
        raise UsageError(f"method = {method!r}; allowed: 'pearson', 'g'")
    if samples is not None and samples < 1:
        raise UsageError(f"samples = {samples}; allowed: >= 1")
    if timeout is not None and not timeout >= 0:
        raise UsageError(f"timeout = {timeout}; allowed: seconds >= 0 (0 or None: no limit)")


def _bind(target: str | Callable[..., Any], scenarios: Sequence[ScenarioLike] | ScenarioLike | None, contract: str,
          adapter: str | None, adapter_options: Mapping[str, Any] | None) -> tuple[str, list[LoadedScenario], Any]:
    """Load the target and the scenarios and bind the target to each scenario (adapters)."""
    raw, label = resolve_target(target)
    from specaudit import adapters
    from specaudit.contract import logits
    from specaudit.contract import tree

    loaded = resolve_scenarios(scenarios if scenarios is not None else adapters.preset_scenarios(target))
    binding = adapters.bind(target, raw, [item.spec for item in loaded], adapter, adapter_options)
    verify = binding.main
    if tree.contract_of(verify) == "chain":  # a tree verifier takes six arguments of its own
        logits.check_arity(verify, contract)
    tree.check_compatible(verify, label, loaded, contract)
    return label, loaded, binding


def _parse_shard(shard: tuple[int, int] | str | None, early_stop: bool) -> tuple[int, int] | None:
    """Return the shard as ``(i, n)``; raise UsageError when combined with early stop."""
    from specaudit.engine.executors import parse_shard

    if isinstance(shard, str):
        shard = parse_shard(shard)
    if shard is not None and early_stop:
        raise UsageError("early stop needs every block in order; it cannot be combined with --shard")
    return shard


def _stop_level(alpha: float, loaded: Sequence[LoadedScenario]) -> float:
    """Return the early-stop level alpha / M, M bounding the run's Holm family (`specaudit.stats.sequential`)."""
    from specaudit.stats import sequential

    # every scenario, exact-mode ones included (their probes add p-values to the family), holds
    # at most one p-value per registered check: Holm rejects any p <= alpha / M
    return sequential.stop_level(alpha, len(loaded) * len(checks.STATISTICAL_CHECKS))


def _options(method: str, gate_efficiency: bool, contract: str, timeout: float | None, max_memory: int | None,
             jobs: int, backend: str, address: str | None, stop_level: float | None,
             shard: tuple[int, int] | None) -> Any:
    """Return the blockrun options of the run."""
    from specaudit.engine import scenario as blockrun

    return blockrun.Options(method, gate_efficiency, contract, timeout, max_memory, jobs, backend, address,
                            stop_level=stop_level, shard=shard)


def _measure_all(tasks: Sequence[tuple[LoadedScenario, Any, Any]], seed: int | None, samples: int | None, options: Any,
                 progress: Progress | None,
                 on_scenario: Callable[[ScenarioResult], None] | None) -> tuple[list[ScenarioResult], bool]:
    """Measure and check every scenario; return the results so far and whether the run was interrupted."""
    from specaudit.engine import scenario as blockrun

    done: list[ScenarioResult] = []

    def record(result: ScenarioResult) -> None:
        choice = tasks[len(done)][2]
        if choice is not None:  # say how the target was driven
            result = dataclasses.replace(result, info={**result.info, "adapter": choice.label()})
        done.append(result)
        if on_scenario is not None:
            on_scenario(result)

    try:
        blockrun.run_scenarios([(verify, item, scenario_seed(seed, item), samples) for item, verify, _ in tasks],
                               options, progress, record)
    except KeyboardInterrupt:
        return done, True
    return done, False


def _suspect_level(alpha: float, suspect_level: float | None, shard: tuple[int, int] | None) -> float:
    """Return the run's suspect level (0 in a shard: `specaudit merge` re-checks the sums)."""
    if shard is not None:  # a shard's verdicts are provisional
        return 0.0
    return default_suspect_level(alpha) if suspect_level is None else suspect_level


def _rerun(checked: tuple[ScenarioResult, ...], tasks: Sequence[tuple[LoadedScenario, Any, Any]], options: Any,
           alpha: float, suspect: float) -> tuple[tuple[ScenarioResult, ...], bool]:
    """Re-run the SUSPECT scenarios (`rerun_suspects`); an interrupt keeps the first results."""
    from specaudit.engine import scenario as blockrun

    def remeasure(i: int, fresh_seed: int, n: int) -> ScenarioResult:
        item, verify, _ = tasks[i]
        return blockrun.run_scenarios([(verify, item, fresh_seed, n)], options)[0]

    try:
        return rerun_suspects(checked, remeasure, alpha, suspect), False
    except KeyboardInterrupt:
        return checked, True


def _annotate_power(checked: tuple[ScenarioResult, ...], specs: Sequence[Scenario],
                    alpha: float) -> tuple[tuple[ScenarioResult, ...], bool]:
    """Add each scenario's sensitivity and power (`specaudit.analysis.power`); an interrupt keeps the results."""
    from specaudit.analysis import power

    try:
        return power.annotate(checked, specs, alpha), False
    except KeyboardInterrupt:
        return checked, True


def _annotate_diagnosis(checked: tuple[ScenarioResult, ...],
                        specs: Sequence[Scenario]) -> tuple[tuple[ScenarioResult, ...], bool]:
    """Rank the zoo mutants for every failing scenario (`specaudit.analysis.diagnose`); an interrupt loses only that."""
    from specaudit.analysis import diagnose

    try:
        return diagnose.annotate(checked, specs), False
    except KeyboardInterrupt:
        return checked, True


def _settings(method: str, gate_efficiency: bool, samples: int | None, contract: str, timeout: float | None,
              early_stop: bool, shard: tuple[int, int] | None, suspect_level: float | None, power: bool,
              diagnose: bool, binding: Any) -> dict[str, Any]:
    """Return the run settings recorded in the RunResult (and compared by `specaudit merge`)."""
    return {"method": method, "gate_efficiency": gate_efficiency, "samples": samples, "contract": contract,
            "timeout": timeout,
            **({} if not early_stop else {"early_stop": True}),
            **({} if shard is None else {"shard": {"index": shard[0], "count": shard[1]},
                                         "suspect_level": suspect_level, "power": power, "diagnose": diagnose}),
            **({} if binding.main_choice is None else {"adapter": binding.main_choice.label()})}
