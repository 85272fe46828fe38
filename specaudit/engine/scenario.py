"""Measure and check many scenarios block by block: jobs, shards, early stop (issue 7).

The runner's one path from scenarios to ScenarioResults: each simulated scenario becomes a
:class:`specaudit.engine.executors.Unit` of blocks (:mod:`specaudit.engine.bench`), the blocks run on the
chosen executor, and each scenario is checked on its merged tally, at every look with early
stop (:mod:`specaudit.stats.sequential`), else once at the end. Exact-mode scenarios (probes, no
simulation) are run in this process.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specaudit.contract.guard import guarded
from specaudit.results import ScenarioResult
from specaudit.scenarios.schema import LoadedScenario


@dataclass(frozen=True)
class Options:
    """How the scenarios of one run are measured and checked."""

    method: str = "pearson"
    gate_efficiency: bool = True
    contract: str = "probs"
    timeout: float | None = None
    max_memory: int | None = None
    jobs: int = 1
    backend: str = "local"
    address: str | None = None
    stop_level: float | None = None  # early stop: a gating p_seq at or below this ends the scenario
    shard: tuple[int, int] | None = None  # (i, n): run blocks b = i mod n and keep the tallies


def base_result(loaded: LoadedScenario, spec: Any, seed: int) -> ScenarioResult:
    """Return the scenario's result before anything is measured."""
    return ScenarioResult(
        name=spec.name, path=loaded.path, line=loaded.line, content_hash=spec.content_hash(),
        description=spec.description.strip(), seed=seed, samples=spec.samples,
    )


def run_scenarios(
    tasks: Sequence[tuple[Callable[..., Any], LoadedScenario, int, int | None]],
    options: Options,
    progress: Callable[[str, int, int], None] | None = None,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    """Measure and check ``(verify, scenario, seed, samples)`` tasks; return results in task order.

    ``on_result`` gets each result in task order as soon as it and all before it are done.
    """
    from specaudit.engine import run as runner
    from specaudit.stats import sequential
    from specaudit.engine.bench import Bench
    from specaudit.engine.executors import Unit, measure_units, shard_blocks

    slots: list[ScenarioResult | None] = [None] * len(tasks)
    released = 0

    def release() -> None:
        nonlocal released
        while released < len(slots) and slots[released] is not None:
            if on_result is not None:
                on_result(slots[released])
            released += 1

    units: list[Unit] = []
    where: list[int] = []  # task index of each unit
    specs: list[Any] = []
    for t, (verify, loaded, seed, samples) in enumerate(tasks):
        spec = loaded.spec if samples is None else loaded.spec.model_copy(update={"samples": samples})
        if spec.mode == "exact":  # exact probes, no simulation (specaudit.checks.probes)
            slots[t] = runner.run_scenario(verify, loaded, seed, samples, options.method, options.gate_efficiency,
                                           None, options.contract, options.timeout, options.max_memory)
            if options.shard is not None:  # every shard probes it whole; the merge re-settles it
                slots[t] = dataclasses.replace(slots[t], info={**slots[t].info, "scenario": spec.model_dump(mode="json", by_alias=True, exclude_none=True)})
            continue
        bench = Bench(guarded(verify, options.timeout), spec, options.contract, options.max_memory)
        blocks = shard_blocks(bench.blocks, options.shard)
        looks = sequential.look_schedule(len(blocks)) if options.stop_level is not None else []
        units.append(Unit(bench, seed, blocks, looks))
        where.append(t)
        specs.append(spec)
    release()

    latest: dict[int, tuple[Any, tuple]] = {}
    tracks = {i: sequential.Track(sequential.spending(len(u.looks))) for i, u in enumerate(units)}
    eval_seconds = [0.0] * len(units)

    def look(i: int, tally: Any, final: bool) -> bool:
        t0 = time.perf_counter()
        bench = units[i].bench
        measured = bench.measured(tally, options.method)
        if i in latest and "horizon" in latest[i][0].__dict__:  # exact references do not change between looks
            measured.__dict__["horizon"] = latest[i][0].__dict__["horizon"]
        results = runner.evaluate(measured, options.gate_efficiency)
        stop = False
        if options.stop_level is not None:
            results = tracks[i].add(tally.sequences, results)
            stop = not final and sequential.decisive(results, options.stop_level)
        latest[i] = (measured, results)
        eval_seconds[i] += time.perf_counter() - t0
        return stop

    def tick(i: int, done: int) -> None:
        if progress is not None:
            planned = sum(units[i].bench.sizes[b] for b in units[i].blocks)
            progress(specs[i].name, done, planned)

    for i, outcome in measure_units(units, look, jobs=options.jobs, backend=options.backend, address=options.address,
                                    progress=tick if progress is not None else None):
        t = where[i]
        _, loaded, seed, _ = tasks[t]
        spec, tally = specs[i], outcome.tally
        result = dataclasses.replace(
            base_result(loaded, spec, seed),
            seconds=tally.seconds + eval_seconds[i],
            verifier_seconds=tally.rounds.verifier_seconds,
            calls=tally.rounds.calls,
        )
        info: dict[str, Any] = {}
        if outcome.error is not None:
            result = dataclasses.replace(result, error=outcome.error)
        elif i in latest:
            measured, checked = latest[i]
            result = dataclasses.replace(result, checks=checked)
            if not spec.lazy:
                info["tokens_per_step_exact"] = measured.horizon.tokens_per_step
        if options.stop_level is not None and outcome.error is None and i in latest:
            track = tracks[i]
            info["early_stop"] = {"looks": list(track.looks), "stopped": outcome.stopped, "sequences": tally.sequences,
                                  "planned": spec.samples, "level": options.stop_level}
        if options.shard is not None:  # what `specaudit merge` needs: the scenario and its additive tallies
            info["shard"] = {"index": options.shard[0], "count": options.shard[1], "blocks": units[i].blocks,
                             "planned": spec.samples}
            info["scenario"] = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
            info["tally"] = tally.to_dict()
            result = dataclasses.replace(result, samples=tally.sequences)
        slots[t] = dataclasses.replace(result, info=info)
        release()
    return [s for s in slots if s is not None]
