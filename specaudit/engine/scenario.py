"""Scenario: the one place a scenario becomes a ScenarioResult, simulated or probed.

A run hands :func:`run_scenarios` its :class:`Task` list (verifier, scenario, seed, samples).
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

import dataclasses
import os
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import numpy as np

from specaudit.checks import bad_rows, evaluate, logprobs, probes, seeded, tree_probes
from specaudit.checks.statistical import Measured, has_joint_law
from specaudit.contract.guard import guarded
from specaudit.contract.logits import logprobs_of
from specaudit.engine.bench import Bench, Tally
from specaudit.engine.device import tensor_path
from specaudit.engine.executors import Progress, Unit, measure_units, shard_blocks
from specaudit.engine.settings import MAX_SAMPLES, RunSettings
from specaudit.errors import ScenarioError, UsageError
from specaudit.laws.chain import joint_probabilities
from specaudit.results import CheckResult, ErrorInfo, ScenarioResult, TVBound
from specaudit.scenarios.loading import LoadedScenario
from specaudit.scenarios.schema import Scenario, to_data
from specaudit.simulate.blocks import block_sizes
from specaudit.stats import certificate, sequential

__all__ = [
    "Judge", "Judged", "Judging", "Task", "base_result", "certify_cap", "check_certifiable", "least_bound", "measure", "memory_limit", "preflight", "run_scenarios",
    "scenario_seed", "tv_bound", "unique_names",
]


class Task(NamedTuple):
    """One scenario of a run to measure and check."""

    verify: Callable[..., Any]  # the target, bound to this scenario (adapters)
    loaded: LoadedScenario
    seed: int
    samples: int | None = None  # overrides the scenario's
    place: int = -1  # the scenario's index in the run: its calls are tagged with it on a supervisor's board


def memory_limit() -> int | None:
    """Return this machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _gib(n: float) -> str:
    """Return ``n`` bytes in GiB, readable whatever the size."""
    gib = n / (1 << 30)
    return f"{gib:,.1f}" if gib < 1e6 else f"{gib:.2g}"


def preflight(loaded: LoadedScenario, limit: int | None = None) -> None:
    """Raise ScenarioError when the scenario's tables and exact laws cannot fit in ``limit`` bytes.

    Checked before anything is allocated, so that ``validate`` refuses what ``run`` would die of
    (a MemoryError or the OOM killer, minutes in). ``limit``: this machine's memory by default.
    """
    limit = memory_limit() if limit is None else limit
    spec = loaded.spec
    needs = spec.memory_needs()
    total = sum(n for n, _ in needs)
    if limit is None or total <= limit:
        return
    kinds = sorted({spec.target.kind, spec.draft.kind})
    fits = 2
    lo, hi = 2, spec.vocab  # the largest vocabulary these chain kinds fit in (needs grow with V)
    while lo <= hi:
        mid = (lo + hi) // 2
        if sum(n for n, _ in spec.memory_needs(mid)) <= limit:
            fits, lo = mid, mid + 1
        else:
            hi = mid - 1
    raise ScenarioError(
        f"{loaded.path}:{loaded.key_line('vocab')}: vocab: needs {_gib(total)} GiB for {'/'.join(kinds)} chains at "
        f"V = {spec.vocab:,} ({'; '.join(f'{what}: {_gib(n)} GiB' for n, what in needs)}); "
        f"this machine has {_gib(limit)} GiB: use `kind: zipf` "
        f"for target and draft (rows made on demand, no tables), or vocab <= {fits:,} with these kinds"
    )


def unique_names(loaded: Sequence[LoadedScenario]) -> list[LoadedScenario]:
    """Return the scenarios with repeats of one scenario dropped; raise ScenarioError on two scenarios of one name.

    Results, seeds, baselines and ``specaudit merge`` key scenarios by name: two different
    scenarios called alike would be reported as one. The same scenario named twice (a name and a
    tag that includes it) runs once.
    """
    out: list[LoadedScenario] = []
    first: dict[str, LoadedScenario] = {}
    for item in loaded:
        seen = first.get(item.name)
        if seen is None:
            first[item.name] = item
            out.append(item)
        elif seen.spec != item.spec or seen.path != item.path:
            raise ScenarioError(
                f"{item.path}:{item.key_line('name')}: name: scenario name {item.name!r} is already used in this run by "
                f"{seen.path}:{seen.key_line('name')}; names key the results: rename one (e.g. name: {item.name}-2)"
            )
    return out


def certify_cap(spec: Scenario, eps: float, alpha: float) -> int | None:
    """Return the sample cap of ``--certify-tv eps`` on ``spec``: 4x the sequences a lossless verifier is expected to need.

    The expected bound at n (:func:`specaudit.stats.certificate.samples_to_certify`) is computed from
    the exact joint law; None when no n up to the schema's bound on ``samples`` is expected to do.
    """
    target, _ = spec.chains()
    planned = certificate.samples_to_certify(joint_probabilities(target, spec.length), eps, alpha)
    if planned is None or certificate.CAP_FACTOR * planned > MAX_SAMPLES:
        return None
    return certificate.CAP_FACTOR * planned


def tv_bound(measured: Measured, settings: RunSettings, weight: float = 1.0) -> TVBound | None:
    """Return the upper confidence bound on TV of a scenario's joint counts (None: no joint law, or no sequence).

    ``weight``: this look's share of alpha when the scenario is looked at several times
    (:mod:`specaudit.stats.certificate`: the bounds of every look hold together at 1 - alpha).
    """
    if measured.joint is None or measured.joint.counts.sum() == 0:
        return None
    return certificate.tv_upper_bound(measured.joint.counts, measured.joint_probs, settings.alpha, weight,
                                      settings.certify_tv)


def check_certifiable(loaded: Sequence[LoadedScenario], settings: RunSettings) -> None:
    """Raise UsageError unless a ``--certify-tv`` run has a scenario to certify and every one can reach EPS.

    Scenarios without an enumerated joint law (``mode: exact`` or ``greedy``, per-prefix ones) run
    as they would without ``--certify-tv`` and get no certificate; a run with none to certify is
    refused. With ``--samples`` as the cap, EPS must be reachable at the cap: the bound is at least
    its Hoeffding slack, even when the sample matches the target exactly.
    """
    eps = settings.certify_tv
    if eps is None or not loaded:  # nothing to run: the run says so (exit 5)
        return
    joint = [item for item in loaded if has_joint_law(item.spec)]
    if not joint:
        item = loaded[0]
        spec = item.spec
        why = (f"mode {spec.mode!r}: no sampled law" if spec.mode != "sample" else
               f"{spec.joint_cells:,} possible sequences (vocab ** length) are too many to count; it is checked "
               "per prefix and by PIT, which certify no TV")
        which = (f"scenario {item.name} ({item.path}) has no joint law to bound ({why})" if len(loaded) == 1 else
                 f"none of the {len(loaded)} scenarios has a joint law to bound (e.g. {item.name}: {why})")
        raise UsageError(f"--certify-tv {eps:g}: {which}; certify scenarios with an enumerated joint law, e.g. -s markov-v4")
    if settings.samples is not None:  # the cap is the user's: the same least bound for every scenario
        floor = least_bound(settings.samples, settings.alpha)
        if floor > eps:
            raise UsageError(f"--certify-tv {eps:g} --samples {settings.samples:,}: scenario {joint[0].name}'s bound at "
                             f"{settings.samples:,} sequences is at least {floor:.4g} (its Hoeffding slack, even for a "
                             f"sample that matches the target exactly); allowed: EPS >= {floor:.4g}, or a larger cap "
                             "(--samples)")
        return
    for item in joint:
        if certify_cap(item.spec, eps, settings.alpha) is None:
            raise UsageError(f"--certify-tv {eps:g}: scenario {item.name} would need more than {MAX_SAMPLES:,} "
                             "sequences even from a lossless verifier; ask for a larger EPS")


def least_bound(samples: int, alpha: float) -> float:
    """Return the smallest TV bound a ``--certify-tv`` run capped at ``samples`` can reach (its last look's slack)."""
    weight = sequential.spending(len(sequential.look_schedule(len(block_sizes(samples)))))[-1]
    return certificate.hoeffding_slack(samples, alpha * weight)


def scenario_seed(run_seed: int | None, loaded: LoadedScenario) -> int:
    """Return the simulation seed, derived from the run seed (else the scenario's own) and its content.

    The content hash is mixed in either way, so scenarios never share the verifier's uniforms,
    even when every scenario file keeps the default ``seed: 0``.
    """
    base = loaded.spec.seed if run_seed is None else run_seed
    mixed = np.random.SeedSequence([base, int(loaded.spec.content_hash(), 16)])
    return int(mixed.generate_state(1, dtype=np.uint32)[0])


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
        done = done.joined(_logprobs(task, spec, settings))
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


def _logprobs(task: Task, spec: Scenario, settings: RunSettings) -> probes.ExactOutcome:
    """Run the ``logprobs`` check where the verifier declares a logprobs output (nothing otherwise)."""
    declared = logprobs_of(task.verify)
    if declared is None:
        return probes.ExactOutcome(())
    mode, verify = declared
    return logprobs.run_logprobs(guarded(verify, settings.timeout, task.place), mode, spec, task.seed, settings.contract)


class Judged(NamedTuple):
    """What a look decided: the scenario's check results, its TV bound, and whether it stops here."""

    results: tuple[CheckResult, ...]
    bound: TVBound | None
    stop: bool
    looks: tuple[int, ...]  # sequences at every look so far (early stop)
    tokens_per_step: float | None  # the exact expected tokens/step (None: lazy chains, no exact law)


#: ``judge(unit, measured, looks, final)``: decide look ``len(looks so far)`` of one of ``looks`` of a unit.
Judging = Callable[[int, Measured, int, bool], Judged]


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


def run_scenarios(
    tasks: Sequence[Task],
    settings: RunSettings,
    *,
    stop_level: float | None = None,
    progress: Progress | None = None,
    on_result: Callable[[ScenarioResult], None] | None = None,
    judge: Judging | None = None,
    on_start: Callable[[int], None] | None = None,
    doubt: Callable[[list[int]], None] | None = None,
) -> list[ScenarioResult]:
    """Measure and check ``tasks``; return their results in task order.

    ``stop_level``: early stop, a gating sequential p-value at or below it ends a scenario
    (:meth:`RunSettings.stop_level`). ``on_result`` gets each result in task order as soon as it
    and all before it are done. ``judge`` decides each look (default: a :class:`Judge` here; a
    supervised child passes one that asks its supervisor). ``on_start(t)`` is called once per task, before
    the verifier is first called for it: with ``--jobs N`` the blocks of several tasks are in flight
    at once (the next task's start while the last blocks and the probes of one run), and ``doubt(tasks)`` hears
    of the tasks a worker died beside, before each is charged with its death. A verifier crash, hang or contract
    breach makes its scenario an ERROR result; the other scenarios go on.
    """
    slots: list[ScenarioResult | None] = [None] * len(tasks)
    released = 0

    def release() -> None:
        nonlocal released
        while released < len(slots) and (ready := slots[released]) is not None:
            if on_result is not None:
                on_result(ready)
            released += 1

    units: list[Unit] = []
    where: list[int] = []  # task index of each unit
    specs: list[Scenario] = []
    verifies: list[Callable[..., Any]] = []  # each unit's guarded verifier, for its contract probes
    for t, task in enumerate(tasks):
        spec = task.loaded.spec
        if task.samples is not None:
            spec = dataclasses.replace(spec, samples=task.samples)
        elif settings.certify_tv is not None and has_joint_law(spec):  # sample until certified, up to the cap
            cap = certify_cap(spec, settings.certify_tv, settings.alpha)
            spec = dataclasses.replace(spec, samples=cap if cap is not None else MAX_SAMPLES)
        if settings.batch is not None:  # --batch: rows per verifier call (a slow verifier inside --timeout)
            spec = dataclasses.replace(spec, batch=settings.batch)
        if spec.mode == "exact":  # exact probes, no simulation (specaudit.checks.probes)
            if on_start is not None:
                on_start(t)
            slots[t] = _probe(task, spec, settings)
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
    release()

    judge = judge if judge is not None else Judge(settings, stop_level)
    latest: dict[int, Judged] = {}
    eval_seconds = [0.0] * len(units)

    def look(i: int, tally: Tally, final: bool) -> bool:
        t0 = time.perf_counter()
        judged = judge(i, units[i].bench.measured(tally, settings.method), len(units[i].looks), final)
        latest[i] = judged
        eval_seconds[i] += time.perf_counter() - t0
        return judged.stop

    def started(i: int) -> None:
        if on_start is not None:
            on_start(where[i])

    def doubted(hit: list[int]) -> None:
        if doubt is not None:
            doubt([where[i] for i in hit])

    for i, outcome in measure_units(units, look, jobs=settings.jobs, backend=settings.backend,
                                    address=settings.address, timeout=settings.timeout, progress=progress,
                                    started=started, doubt=doubted):
        t = where[i]
        task, spec, tally = tasks[t], specs[i], outcome.tally
        probe = probes.ExactOutcome(())
        if outcome.error is None or outcome.error.kind != "timeout":  # after a hang, probing would hang again
            t0 = time.perf_counter()
            run_probes = tree_probes.run_tree_probes if spec.algorithm == "tree" else probes.run_scenario_probes
            probe = run_probes(verifies[i], spec, task.seed, settings.gate_efficiency, settings.contract)
            if seeded.applies(spec) and probe.error is None:  # tag seeded: per-request generators
                probe = probe.joined(seeded.run_seeded(verifies[i], spec, task.seed, settings.gate_efficiency,
                                                       settings.contract))
            if probe.error is None:
                probe = probe.joined(_logprobs(task, spec, settings))
            eval_seconds[i] += time.perf_counter() - t0 - probe.verifier_seconds
        result = dataclasses.replace(
            base_result(task.loaded, spec, task.seed),
            seconds=tally.seconds + eval_seconds[i] + probe.verifier_seconds,
            verifier_seconds=tally.rounds.verifier_seconds + probe.verifier_seconds,
            calls=tally.rounds.calls + probe.calls,
            checks=probe.checks,
        )
        info: dict[str, Any] = reference_info(spec)
        if (on := units[i].bench.device) is not None:  # simulated on the verifier's device (specaudit.engine.device)
            info["device"] = on.device
            if on.budget is not None:  # what its batch was sized from (a forked or Ray worker's is not seen here)
                info["device_budget"] = on.budget
        if tally.rounds.calls:  # every round of a sequence is one row of one call
            info["rows_per_call"] = round(float(tally.rounds.moments[0]) / tally.rounds.calls, 1)
        if outcome.error is not None:
            result = dataclasses.replace(result, error=outcome.error)
        elif probe.error is not None:  # a probe call hung
            result = dataclasses.replace(result, error=ErrorInfo.from_exception(probe.error))
        elif i in latest:
            judged = latest[i]
            result = dataclasses.replace(result, checks=judged.results + probe.checks, tv_bound=judged.bound)
            if judged.tokens_per_step is not None:
                info["tokens_per_step_exact"] = judged.tokens_per_step
        if stop_level is not None and outcome.error is None and i in latest:
            info["early_stop"] = {"looks": list(latest[i].looks), "stopped": outcome.stopped, "sequences": tally.sequences,
                                  "planned": spec.samples, "level": stop_level}
        if settings.shard is not None:  # what `specaudit merge` needs: the scenario and its additive tallies
            info["shard"] = {"index": settings.shard[0], "count": settings.shard[1], "blocks": units[i].blocks,
                             "planned": spec.samples}
            info["scenario"] = to_data(spec, exclude_none=True)
            info["tally"] = tally.to_dict()
            result = dataclasses.replace(result, samples=tally.sequences)
        slots[t] = dataclasses.replace(result, info=info)
        release()
    return [s for s in slots if s is not None]
