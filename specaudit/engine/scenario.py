"""Scenario: the one place a scenario becomes a ScenarioResult, simulated or probed.

A run hands :func:`run_scenarios` its :class:`~specaudit.engine.tasks.Task` list (verifier, scenario, seed,
samples), and reads back what it yields: results in task order, and the looks to decide where the
caller judges them (a supervised child asks its supervisor); nothing here calls back up.
An exact-mode scenario is probed in this process (:mod:`specaudit.checks.probes`: corners,
determinism, adversarial uniforms; no simulation). Every simulated chain scenario also runs the
contract probes with its own chains (:func:`specaudit.checks.probes.run_scenario_probes`:
determinism, inputs, padding, adversarial uniforms, the corners it reaches; a tree scenario the tree
probes of :mod:`specaudit.checks.tree_probes`), in this process once
its blocks are measured (not after a hang); their pass/fail results join the scenario's checks. Every other scenario becomes a
:class:`specaudit.engine.executors.Unit` of blocks (:mod:`specaudit.engine.bench`); the blocks run
on the run's executor (jobs, Ray) and each scenario is checked on its merged tally, at every look
with early stop or ``--certify-tv`` (:mod:`specaudit.stats.sequential`; a certificate also
stops a scenario at the first look whose TV bound reaches EPS, :mod:`specaudit.stats.certificate`),
else once at the end; every joint-law scenario gets its TV bound (:func:`tv_bound`); a shard keeps its
additive tallies for ``specaudit merge``. :func:`measure` runs one scenario's blocks in order
here and returns the raw measurements, for callers that want numbers rather than verdicts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Generator, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from specaudit.checks import bad_rows, evaluate, logprobs, probes, seeded, stops, tree_probes
from specaudit.checks import loop as loop_checks
from specaudit.checks.statistical import Measured
from specaudit.contract.guard import guarded
from specaudit.contract.logits import logprobs_of
from specaudit.contract.stops import stops_of
from specaudit.engine.bench import Bench
from specaudit.engine.device import tensor_path
from specaudit.engine.executors import Doubted, Look, Outcome, Progress, Started, Unit, measure_units, shard_blocks
from specaudit.engine.settings import RunSettings
from specaudit.engine.tasks import Task, measured_spec
from specaudit.results import CheckResult, ErrorInfo, ScenarioResult, TVBound
from specaudit.scenarios.loading import LoadedScenario
from specaudit.scenarios.schema import Scenario, to_data
from specaudit.stats import certificate, sequential

__all__ = ["Decide", "Event", "Judge", "Judged", "Result", "base_result", "measure", "results", "run_scenarios", "tv_bound"]


def tv_bound(measured: Measured, settings: RunSettings, weight: float = 1.0) -> TVBound | None:
    """Return the upper confidence bound on TV of a scenario's joint counts (None: no joint law, or no sequence).

    ``weight``: this look's share of alpha when the scenario is looked at several times
    (:mod:`specaudit.stats.certificate`: the bounds of every look hold together at 1 - alpha).
    """
    if measured.joint is None or measured.joint.counts.sum() == 0:
        return None
    return certificate.tv_upper_bound(measured.joint.counts, measured.joint_probs, settings.alpha, weight,
                                      settings.certify_tv)


def measure(
    verify: Callable[..., Any],
    spec: Scenario,
    seed: int,
    method: str = "pearson",
    progress: Progress | None = None,
    contract: str = "probs",
    max_memory: int | None = None,
) -> Measured:
    """Simulate one scenario through ``verify`` (in ``contract``) and return the measurements.

    The scenario's blocks (``specaudit.engine.bench``) run in order in this process; ``run(jobs=...)``
    spreads the same blocks over processes with identical results.
    """
    bench = Bench(verify, spec, contract, max_memory)
    return bench.measured(bench.measure(seed, progress=progress), method)


def base_result(loaded: LoadedScenario, spec: Scenario, seed: int) -> ScenarioResult:
    """Return the scenario's result before anything is measured."""
    return ScenarioResult(
        name=spec.name, path=loaded.path, line=loaded.line, content_hash=spec.content_hash(),
        description=spec.description.strip(), seed=seed, samples=spec.samples,
    )


def reference_info(spec: Scenario) -> dict[str, Any]:
    """Return ``{"reference": NAME}``, the sampling convention of the reference, for a scenario of raw logits."""
    return {"reference": spec.reference} if spec.processed else {}


def _probe(task: Task, spec: Scenario, settings: RunSettings) -> ScenarioResult:
    """Run the exact probes of an exact-mode scenario; a crash or hang becomes the result's error."""
    t0 = time.perf_counter()
    run = bad_rows.run_bad_rows if bad_rows.applies(spec) else probes.run_exact  # tag bad-rows: NaN / inf / zero rows
    verify = guarded(task.verify, settings.timeout, task.place)
    done = run(verify, spec, task.seed, settings.gate_efficiency, settings.contract)
    if seeded.applies(spec) and done.error is None:  # tag seeded: per-request generators
        done = done.joined(seeded.run_seeded(verify, spec, task.seed, settings.gate_efficiency, settings.contract))
    if done.error is None:
        done = done.joined(_declared(task, spec, settings))
    result = dataclasses.replace(
        base_result(task.loaded, spec, task.seed),
        checks=done.checks,
        error=None if done.error is None else ErrorInfo.from_exception(done.error),
        seconds=time.perf_counter() - t0,
        verifier_seconds=done.verifier_seconds,
        calls=done.calls,
        info={**reference_info(spec), **done.info},
    )
    if settings.shard is not None:  # every shard probes it whole; the merge re-settles it
        scenario = to_data(spec, exclude_none=True)
        result = dataclasses.replace(result, info={**result.info, "scenario": scenario})
    return result


def _looped(task: Task, spec: Scenario, settings: RunSettings) -> ScenarioResult:
    """Run a ``mode: loop`` scenario's trace through the loop target; a crash or hang becomes the result's error."""
    done = loop_checks.run_loop(guarded(task.verify, settings.timeout, task.place), spec.loop_trace(),
                                spec.loop_models(), spec.samples, task.seed)
    return dataclasses.replace(
        base_result(task.loaded, spec, task.seed),
        checks=done.checks,
        error=None if done.error is None else ErrorInfo.from_exception(done.error),
        seconds=done.verifier_seconds,
        verifier_seconds=done.verifier_seconds,
        calls=done.calls,
        info={"mode": "loop", **done.info},
    )


def _declared(task: Task, spec: Scenario, settings: RunSettings) -> probes.ExactOutcome:
    """Run the checks of what the verifier declares beyond the contract: a logprobs output, the stops contract."""
    done = probes.ExactOutcome(())
    if (declared := logprobs_of(task.verify)) is not None:
        mode, verify = declared
        done = logprobs.run_logprobs(guarded(verify, settings.timeout, task.place), mode, spec, task.seed,
                                     settings.contract)
    if done.error is None and (ending := stops_of(task.verify)) is not None:
        done = done.joined(stops.run_stops(guarded(ending, settings.timeout, task.place),
                                           guarded(task.verify, settings.timeout, task.place), spec, task.seed,
                                           settings.contract))
    elif spec.stop_tokens is not None:  # a scenario of stops, a verifier that ends no request: say so
        done = done.joined(probes.ExactOutcome((stops.not_declared(),)))
    return done


class Judged(NamedTuple):
    """What a look decided: the scenario's check results, its TV bound, and whether it stops here."""

    results: tuple[CheckResult, ...]
    bound: TVBound | None
    stop: bool
    looks: tuple[int, ...]  # sequences at every look so far (early stop)
    tokens_per_step: float | None  # the exact expected tokens/step (None: lazy chains, no exact law)


class Judge:
    """Decide the looks of a run's units: checks, sequential p-values, TV bounds, early stop.

    The p-values and exact laws of a look need nothing of the verifier's process: a supervised run
    judges in the supervisor (:mod:`specaudit.engine.supervisor`), which has imported the checks'
    scipy while its child measured, so the child never waits for that import (issue 20), and
    nothing the verifier does in its process can change a verdict's arithmetic. Units are keyed
    by the caller; the exact references of a unit (its horizon law, joint law) are computed at
    its first look and kept for the next.
    """

    def __init__(self, settings: RunSettings, stop_level: float | None):
        self.settings = settings
        self.stop_level = stop_level
        self._tracks: dict[Hashable, sequential.Track] = {}
        self._exact: dict[Hashable, dict[str, Any]] = {}

    def __call__(self, unit: Hashable, measured: Measured, looks: int, final: bool) -> Judged:
        """Return the decision of ``unit``'s next look at ``measured`` (``looks``: how many the unit has in all)."""
        settings = self.settings
        for name, value in self._exact.get(unit, {}).items():  # exact references do not change between looks
            measured.__dict__[name] = value
        results = evaluate(measured, settings.gate_efficiency)
        stop = False
        weight = 1.0  # this look's share of alpha (certificate.py: a union over the looks)
        track = self._tracks.get(unit)
        if self.stop_level is not None:
            track = self._tracks.setdefault(unit, sequential.Track(sequential.spending(looks)))
            results = track.add(measured.rounds.sequences, results)
            stop = not final and sequential.decisive(results, self.stop_level)
            weight = track.weights[len(track.looks) - 1]
        bound = tv_bound(measured, settings, weight)
        stop = stop or (not final and bound is not None and bound.certified)
        self._exact[unit] = {name: measured.__dict__[name] for name in ("horizon", "joint_probs") if name in measured.__dict__}
        exact = None if measured.scenario.lazy else measured.horizon.tokens_per_step
        return Judged(results, bound, stop, tuple(track.looks) if track is not None else (), exact)


@dataclass
class Decide:
    """A look a caller decides (:func:`run_scenarios` with no judge): set ``judged`` before resuming the generator."""

    unit: int  # the unit's index in this run_scenarios call
    measured: Measured
    looks: int  # how many looks the unit has in all
    final: bool
    judged: Judged | None = None  # the caller's answer


@dataclass(frozen=True)
class Result:
    """Task ``index``'s ScenarioResult, yielded in task order."""

    index: int
    result: ScenarioResult


#: What :func:`run_scenarios` yields: a task started, a worker's death in doubt (task indices), a look to decide
#: (no judge), a result.
Event = Started | Doubted | Decide | Result


def results(tasks: Sequence[Task], settings: RunSettings, *, stop_level: float | None = None,
            progress: Progress | None = None) -> Generator[ScenarioResult, None, None]:
    """Yield ``tasks``' results in task order, every look judged in this process (:func:`run_scenarios`)."""
    with contextlib.closing(run_scenarios(tasks, settings, stop_level=stop_level, progress=progress,
                                          judge=Judge(settings, stop_level))) as events:
        for event in events:
            if isinstance(event, Result):
                yield event.result


def run_scenarios(
    tasks: Sequence[Task],
    settings: RunSettings,
    *,
    stop_level: float | None = None,
    progress: Progress | None = None,
    judge: Judge | None = None,
) -> Generator[Event, None, None]:
    """Measure and check ``tasks``; yield what happens, results in task order.

    ``stop_level``: early stop, a gating sequential p-value at or below it ends a scenario
    (:meth:`RunSettings.stop_level`). ``judge`` decides each look here; with none, each look is
    yielded as a :class:`Decide` for the caller to answer (a supervised child asks its supervisor).
    A :class:`~specaudit.engine.executors.Started` (task index) comes once per task, before the
    verifier is first called for it: with ``--jobs N`` the blocks of several tasks are in flight
    at once (the next task's start while the last blocks and the probes of one run), and a
    :class:`~specaudit.engine.executors.Doubted` names the tasks a worker died beside, before each
    is charged with its death. A :class:`Result` comes for each task, in task order, as soon as it
    and all before it are done. A verifier crash, hang or contract breach makes its scenario an
    ERROR result; the other scenarios go on. Nothing is called back: the caller reads the events.
    """
    slots: list[ScenarioResult | None] = [None] * len(tasks)
    released = 0

    def release() -> Iterator[Event]:
        nonlocal released
        while released < len(slots) and (ready := slots[released]) is not None:
            yield Result(released, ready)
            released += 1

    units: list[Unit] = []
    where: list[int] = []  # task index of each unit
    specs: list[Scenario] = []
    verifies: list[Callable[..., Any]] = []  # each unit's guarded verifier, for its contract probes
    for t, task in enumerate(tasks):
        spec = measured_spec(task, settings)
        if spec.mode in ("exact", "loop"):  # exact probes, or a loop target's trace: no blocks
            yield Started(t)
            slots[t] = _probe(task, spec, settings) if spec.mode == "exact" else _looped(task, spec, settings)
            continue
        verify = guarded(task.verify, settings.timeout, task.place)
        verifies.append(verify)
        bench = Bench(verify, spec, settings.contract, settings.max_memory,
                      tensor_path(task.verify, spec, settings, task.place), settings.max_device_memory)
        blocks = shard_blocks(bench.blocks, settings.shard)
        looks = sequential.look_schedule(len(blocks)) if stop_level is not None else []
        units.append(Unit(bench, task.seed, blocks, looks))
        where.append(t)
        specs.append(spec)
    yield from release()

    latest: dict[int, Judged] = {}
    eval_seconds = [0.0] * len(units)
    measuring = measure_units(units, jobs=settings.jobs, backend=settings.backend, address=settings.address,
                              timeout=settings.timeout, progress=progress)
    with contextlib.closing(measuring):
        for event in measuring:
            if isinstance(event, Started):
                yield Started(where[event.index])
                continue
            if isinstance(event, Doubted):
                yield Doubted([where[i] for i in event.indices])
                continue
            if isinstance(event, Look):
                i = event.index
                t0 = time.perf_counter()
                measured = units[i].bench.measured(event.tally, settings.method)
                if judge is not None:
                    judged = judge(i, measured, len(units[i].looks), event.final)
                else:
                    asked = Decide(i, measured, len(units[i].looks), event.final)
                    yield asked
                    if asked.judged is None:
                        raise RuntimeError(f"look {len(latest)} of unit {i} was yielded and not decided")
                    judged = asked.judged
                latest[i] = judged
                event.stop = judged.stop
                eval_seconds[i] += time.perf_counter() - t0
                continue
            i, outcome = event.index, event.outcome
            slots[where[i]] = _finished(tasks[where[i]], specs[i], units[i], verifies[i], outcome, latest.get(i),
                                        eval_seconds[i], settings, stop_level)
            yield from release()


def _finished(task: Task, spec: Scenario, unit: Unit, verify: Callable[..., Any], outcome: Outcome,
              judged: Judged | None, eval_seconds: float, settings: RunSettings,
              stop_level: float | None) -> ScenarioResult:
    """Return the ScenarioResult of a measured unit: its last look's checks, its scenario probes, what it ran on."""
    tally = outcome.tally
    probe = probes.ExactOutcome(())
    if outcome.error is None or outcome.error.kind != "timeout":  # after a hang, probing would hang again
        t0 = time.perf_counter()
        run_probes = tree_probes.run_tree_probes if spec.algorithm == "tree" else probes.run_scenario_probes
        probe = run_probes(verify, spec, task.seed, settings.gate_efficiency, settings.contract)
        if seeded.applies(spec) and probe.error is None:  # tag seeded: per-request generators
            probe = probe.joined(seeded.run_seeded(verify, spec, task.seed, settings.gate_efficiency, settings.contract))
        if probe.error is None:
            probe = probe.joined(_declared(task, spec, settings))
        eval_seconds += time.perf_counter() - t0 - probe.verifier_seconds
    result = dataclasses.replace(
        base_result(task.loaded, spec, task.seed),
        seconds=tally.seconds + eval_seconds + probe.verifier_seconds,
        verifier_seconds=tally.rounds.verifier_seconds + probe.verifier_seconds,
        calls=tally.rounds.calls + probe.calls,
        checks=probe.checks,
    )
    info: dict[str, Any] = reference_info(spec)
    if (on := unit.bench.device) is not None:  # simulated on the verifier's device (specaudit.engine.device)
        info["device"] = on.device
        if on.budget is not None:  # what its batch was sized from (a forked or Ray worker's is not seen here)
            info["device_budget"] = on.budget
    if tally.rounds.calls:  # every round of a sequence is one row of one call
        info["rows_per_call"] = round(float(tally.rounds.moments[0]) / tally.rounds.calls, 1)
    if outcome.error is not None:
        result = dataclasses.replace(result, error=outcome.error)
    elif probe.error is not None:  # a probe call hung
        result = dataclasses.replace(result, error=ErrorInfo.from_exception(probe.error))
    elif judged is not None:
        result = dataclasses.replace(result, checks=judged.results + probe.checks, tv_bound=judged.bound)
        if judged.tokens_per_step is not None:
            info["tokens_per_step_exact"] = judged.tokens_per_step
    if stop_level is not None and outcome.error is None and judged is not None:
        info["early_stop"] = {"looks": list(judged.looks), "stopped": outcome.stopped, "sequences": tally.sequences,
                              "planned": spec.samples, "level": stop_level}
    if settings.shard is not None:  # what `specaudit merge` needs: the scenario and its additive tallies
        info["shard"] = {"index": settings.shard[0], "count": settings.shard[1], "blocks": unit.blocks,
                         "planned": spec.samples}
        info["scenario"] = to_data(spec, exclude_none=True)
        info["tally"] = tally.to_dict()
        result = dataclasses.replace(result, samples=tally.sequences)
    return dataclasses.replace(result, info=info)
