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

from specaudit import __version__, checks
from specaudit.contract import DEFAULT_TIMEOUT, guarded
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
    contract: str = "probs",
    max_memory: int | None = None,
) -> checks.Measured:
    """Simulate one scenario through ``verify`` (in ``contract``) and return the measurements."""
    from specaudit import logits

    if getattr(spec, "algorithm", "chain") == "tree":  # draft trees, tree contract (issue 9)
        from specaudit.simulate_tree import measure_tree

        return measure_tree(verify, spec, seed, method, progress)

    verify, target, draft = logits.prepare(verify, contract, *spec.chains())
    harness_ss, verifier_ss = np.random.SeedSequence(seed).spawn(2)
    greedy = checks.GreedyMatch(target, spec.length) if spec.mode == "greedy" else None
    joint = JointCounts(spec.vocab, spec.length) if checks.wants_joint(spec) and greedy is None else None
    extra = {}
    if joint is None and greedy is None:  # too large to enumerate: chain-rule and PIT tests (issue 7)
        from specaudit.pit import PitCounts
        from specaudit.prefix import PrefixCounts

        pit_rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
        extra = {"prefix": PrefixCounts(spec.length), "pit": PitCounts(target, spec.length, pit_rng)}
    plan = Plan(spec.length, spec.samples, spec.batch, spec.draft_law)
    rounds = simulate(
        verify,
        target,
        draft,
        plan,
        np.random.default_rng(harness_ss),
        np.random.default_rng(verifier_ss),
        sinks=[sink for sink in (joint, greedy, *extra.values()) if sink is not None],
        progress=progress,
        **({} if max_memory is None else {"max_memory": max_memory}),
    )
    if greedy is not None:  # temperature 0: the argmax chain is the exact reference (specaudit.greedy)
        from specaudit.chains import one_hot_of

        target = one_hot_of(target)
    return checks.Measured(spec, target, draft, rounds, joint, method, greedy=greedy, extra=extra)


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
    if spec.mode == "exact":  # exact probes instead of a simulation (specaudit.exact_checks)
        from specaudit import exact_checks

        done = exact_checks.run_exact(guarded(verify, timeout), spec, seed, gate_efficiency, contract)
        return dataclasses.replace(
            base,
            checks=done.checks,
            error=None if done.error is None else _error_info(done.error),
            seconds=time.perf_counter() - t0,
            verifier_seconds=done.verifier_seconds,
            calls=done.calls,
            info=done.info,
        )
    try:
        measured = measure(guarded(verify, timeout), spec, seed, method, tick, contract, max_memory)
    except (ContractError, VerifierCrash, VerifierTimeout) as exc:
        return dataclasses.replace(base, error=_error_info(exc), seconds=time.perf_counter() - t0)
    results = evaluate(measured, gate_efficiency)
    return dataclasses.replace(
        base,
        checks=results,
        seconds=time.perf_counter() - t0,
        verifier_seconds=measured.rounds.verifier_seconds,
        calls=measured.rounds.calls,
        info={} if spec.lazy else {"tokens_per_step_exact": measured.horizon.tokens_per_step},
    )


def apply_holm(
    scenarios: Sequence[ScenarioResult], alpha: float, suspect_level: float | None = None
) -> tuple[ScenarioResult, ...]:
    """Adjust every statistical p-value of the run with Holm and settle PENDING verdicts.

    The family is every PENDING check plus every check adjusted before (so a re-run, put in place
    of its first result, is adjusted over the same family); only PENDING checks are settled:
    FAILED at adjusted p <= alpha, SUSPECT at adjusted p <= ``suspect_level``, else PASSED.
    """
    from specaudit.stats import holm

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
        deviation matches (``specaudit.diagnose``) and store it in ``info["diagnosis"]``.
    contract : {"probs", "logits"}
        How ``target`` is called: the canonical contract on processed probabilities, or the
        logits contract (raw logits plus sampling parameters, ``specaudit.logits``).
    timeout : float or None
        Seconds one verifier call may take before it is stopped and its scenario is an ERROR
        (``specaudit.contract.guarded``: main thread of a POSIX process only); None or 0: no limit.
    jobs : int
        Scenarios run in this many forked processes; results are identical to ``jobs=1``.
    max_memory : int, optional
        Bytes the simulator's batch may use (p and q plus the verifier's temporaries);
        default ``specaudit.simulate.DEFAULT_MAX_MEMORY`` (2 GiB).
    suspect_level : float, optional
        A check with alpha < Holm-adjusted p <= this is SUSPECT and its scenario is re-run on a
        fresh seed with 4x the samples (`rerun_suspects`); default 100 x alpha (at most 0.5);
        ``suspect_level <= alpha`` disables re-runs.
    power : bool
        Add each scenario's detectable TV and its power against every zoo mutant
        (``specaudit.power``) to ``info["sensitivity"]`` and ``info["power"]``.
    """
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
    raw, label = resolve_target(target)
    from specaudit import adapters, logits, tree

    loaded = resolve_scenarios(scenarios if scenarios is not None else adapters.preset_scenarios(target))
    binding = adapters.bind(target, raw, [item.spec for item in loaded], adapter, adapter_options)
    verify = binding.main
    if tree.contract_of(verify) == "chain":  # a tree verifier takes six arguments of its own
        logits.check_arity(verify, contract)
    tree.check_compatible(verify, label, loaded, contract)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    done: list[ScenarioResult] = []
    interrupted = False
    try:
        from specaudit.parallel import map_ordered

        tasks = list(zip(loaded, binding.verifiers, binding.choices))

        def one(i: int) -> ScenarioResult:
            item, verify, _ = tasks[i]
            return run_scenario(
                verify, item, scenario_seed(seed, item), samples, method, gate_efficiency,
                progress if jobs == 1 else None, contract, timeout, max_memory,
            )

        for (item, verify, choice), result in zip(tasks, map_ordered(one, len(tasks), jobs)):
            if choice is not None:  # say how the target was driven
                result = dataclasses.replace(result, info={**result.info, "adapter": choice.label()})
            done.append(result)
            if on_scenario is not None:
                on_scenario(result)
    except KeyboardInterrupt:
        interrupted = True
    suspect = default_suspect_level(alpha) if suspect_level is None else suspect_level
    checked = apply_holm(done, alpha, suspect if suspect > alpha else None)
    if suspect > alpha and not interrupted:

        def remeasure(i: int, fresh_seed: int, n: int) -> ScenarioResult:
            item, verify, _ = tasks[i]
            return run_scenario(
                verify, item, fresh_seed, n, method, gate_efficiency, None, contract, timeout, max_memory
            )

        try:
            checked = rerun_suspects(checked, remeasure, alpha, suspect)
        except KeyboardInterrupt:  # the first results are kept
            interrupted = True
    if power and not interrupted:
        from specaudit import power as _power

        try:
            checked = _power.annotate(checked, [item.spec for item in loaded], alpha)
        except KeyboardInterrupt:
            interrupted = True
    if diagnose and not interrupted:
        from specaudit import diagnose as _diagnose

        try:
            checked = _diagnose.annotate(checked, [item.spec for item in loaded])
        except KeyboardInterrupt:  # the measurements are kept; only the diagnosis is lost
            interrupted = True
    return RunResult(
        target=label,
        alpha=alpha,
        seed=seed,
        version=__version__,
        scenarios=checked,
        interrupted=interrupted,
        started=started,
        seconds=time.perf_counter() - t0,
        settings={"method": method, "gate_efficiency": gate_efficiency, "samples": samples, "contract": contract,
                  "timeout": timeout,
                  **({} if binding.main_choice is None else {"adapter": binding.main_choice.label()})},
    )
