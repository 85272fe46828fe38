"""``specaudit merge``: combine the JSON of ``--shard i/n`` runs into the unsharded result.

A shard runs blocks ``b = i mod n`` of every scenario (:mod:`specaudit.engine.bench`) and stores, per
scenario, the scenario itself and its additive tallies (joint counts, round statistics, greedy
matches, prefix and PIT counts) in ``info``. The merge checks that the shards belong together
and are complete (their settings read back through :class:`~specaudit.engine.settings.RunSettings`),
adds the tallies, runs the checks on the sums and ends like a run (:func:`specaudit.engine.run.finish`:
Holm, power, diagnosis): the counts, p-values and verdicts are those of the unsharded run with
the same seed. The merge is the gate of a sharded run (a shard's own verdicts are provisional):
a SUSPECT scenario is re-run as ``specaudit run`` would (fresh seed, 4x the samples, supervised)
when the merge is given the verifier (``specaudit merge --rerun TARGET``); without it a SUSPECT
stays suspect and the merge exits 1, "suspect: re-run with more samples" (a merge
must never pass what the unsharded run would have looked at twice).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from specaudit.checks import evaluate
from specaudit.engine.bench import Bench
from specaudit.engine.run import finish
from specaudit.engine.scenario import tv_bound
from specaudit.engine.settings import RunSettings, adapter_of
from specaudit.engine.supervisor import supervised_remeasure
from specaudit.errors import ResultsFileError, SpecauditError, UsageError
from specaudit.results import CheckResult, ErrorInfo, RunResult, ScenarioResult, Status
from specaudit.results.document import scenario_from_dict
from specaudit.scenarios.loading import LoadedScenario
from specaudit.scenarios.schema import Scenario, validate


def _shard_of(doc: dict[str, Any], path: str) -> tuple[tuple[int, int], RunSettings]:
    """Return the shard ``(i, n)`` and the settings of a shard's document; raise UsageError for anything else."""
    settings = RunSettings.from_record(doc)
    if settings.shard is None:
        raise UsageError(f"{path}: not a shard (run with --shard i/n writes one)")
    if doc.get("partial") or doc.get("interrupted"):
        raise UsageError(f"{path}: shard {settings.shard[0]}/{settings.shard[1]} was interrupted; run it again")
    return settings.shard, settings


def _check_together(docs: Sequence[dict[str, Any]], paths: Sequence[str]) -> list[tuple[tuple[int, int], RunSettings]]:
    """Raise UsageError unless the documents are the n shards of one run; return their shards and settings."""
    found = [_shard_of(d, p) for d, p in zip(docs, paths)]
    shards = [shard for shard, _ in found]
    counts = {n for _, n in shards}
    if len(counts) != 1:
        raise UsageError("shards of different splits: " + ", ".join(f"{p} is {i}/{n}" for (i, n), p in zip(shards, paths)))
    n = counts.pop()
    seen: dict[int, str] = {}
    for (i, _), p in zip(shards, paths):
        if i in seen:
            raise UsageError(f"shard {i}/{n} given twice: {seen[i]} and {p}")
        seen[i] = p
    missing = [i for i in range(n) if i not in seen]
    if missing:
        need = ", ".join(f"{i}/{n}" for i in missing)
        raise UsageError(f"missing shard(s) {need}: run `specaudit run ... --shard {missing[0]}/{n}` and merge its JSON too")

    def key(doc: dict[str, Any], settings: RunSettings) -> tuple:
        scen = [(s["name"], s["content_hash"], s["seed"], s.get("info", {}).get("shard", {}).get("planned"))
                for s in doc["scenarios"]]
        return doc["target"], dataclasses.replace(settings, shard=None), adapter_of(doc), scen

    first = key(docs[0], found[0][1])
    for doc, (_, s), p in zip(docs[1:], found[1:], paths[1:]):
        if key(doc, s) != first:
            raise UsageError(f"{p} and {paths[0]} are shards of different runs (target, alpha, seed, settings or scenarios differ)")
    return found


def merge_documents(docs: Sequence[dict[str, Any]], paths: Sequence[str] | None = None,
                    rerun: str | None = None, announce: Callable[[str, int, float], None] | None = None) -> RunResult:
    """Return the run that the shard documents ``docs`` are the parts of, checked on the summed tallies.

    Parameters
    ----------
    docs : sequence of dict
        JSON documents written by ``specaudit run --shard i/n --json`` for every i in 0..n-1
        (any order).
    paths : sequence of str, optional
        Their file names, for messages.
    rerun : str, optional
        The verifier (a TARGET, as ``specaudit run`` takes it) with which SUSPECT scenarios are
        re-run on a fresh seed with 4x the samples (supervised child processes). Without it they
        stay SUSPECT.
    announce : callable, optional
        ``announce(scenario, samples, seconds)`` before each re-run: what it will cost, estimated
        from the shards' time on that scenario (``ProgressReporter.rerun`` in the CLI).

    Returns
    -------
    RunResult
        Counts, p-values (Holm over the whole run) and verdicts equal to the unsharded run's.
    """
    paths = list(paths or [f"<document {i}>" for i in range(len(docs))])
    if not docs:
        raise UsageError("nothing to merge: give the JSON of every shard")
    try:
        first, n, settings, out, specs = _combined(docs, paths)
        seconds = max(float(d.get("seconds", 0.0)) for d in docs)
    except SpecauditError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        # every value read here is a shard file's: one a specaudit run never writes (a hand-edited tally, a
        # scenario that no longer validates) is the file's fault, named as such (exit 4), never exit 3
        what = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise ResultsFileError(f"{', '.join(paths)}: the shards cannot be merged: a value no specaudit run writes "
                               f"({type(exc).__name__}{': ' + what if what else ''})") from None
    remeasure: Callable[[int, int, int], ScenarioResult] | None = None
    if rerun is not None:  # the verifier at hand: SUSPECT scenarios are re-run as `specaudit run` would
        loaded = [LoadedScenario(spec, o.path, o.line) for spec, o in zip(specs, out)]
        measure_again = supervised_remeasure(rerun, loaded, settings)

        def remeasure(i: int, fresh_seed: int, samples: int) -> ScenarioResult:
            if announce is not None:
                announce(out[i].name, samples, out[i].seconds * samples / max(out[i].samples, 1))
            return measure_again(i, fresh_seed, samples)

    return finish(
        first["target"], out, specs, settings,
        started=min(d.get("started", "") for d in docs), elapsed=lambda: seconds, remeasure=remeasure,
        adapter=adapter_of(first), recorded={"merged_shards": n, **({"rerun": rerun} if rerun else {})},
    )


def _combined(docs: Sequence[dict[str, Any]], paths: Sequence[str]) -> tuple[dict[str, Any], int, RunSettings,
                                                                            list[ScenarioResult], list[Scenario]]:
    """Return (the first shard, the shard count, the run's settings, the merged results, their scenarios)."""
    found = _check_together(docs, paths)
    order = sorted(range(len(docs)), key=lambda k: found[k][0])
    docs = [docs[k] for k in order]
    first = docs[0]
    n = len(docs)
    settings = dataclasses.replace(found[order[0]][1], shard=None)  # the merged run is the unsharded run
    out: list[ScenarioResult] = []
    specs = []
    for j, s0 in enumerate(first["scenarios"]):
        parts = [d["scenarios"][j] for d in docs]
        errors = [p for p in parts if p.get("error")]
        base = ScenarioResult(
            name=s0["name"], path=s0["path"], line=s0["line"], content_hash=s0["content_hash"],
            description=s0["description"], seed=s0["seed"], samples=s0["samples"],
            seconds=sum(p.get("seconds", 0.0) for p in parts),
            verifier_seconds=sum(p.get("verifier_seconds", 0.0) for p in parts),
            calls=sum(p.get("calls", 0) for p in parts),
        )
        info = s0.get("info", {})
        if "scenario" not in info:
            raise UsageError(f"{paths[0]}: scenario {s0['name']} carries no shard data; was it written by this specaudit?")
        spec = validate(info["scenario"])
        specs.append(spec)
        probes = _probes(parts)  # every shard ran the probes whole: the worst of their findings
        if "tally" not in info:  # exact-mode scenarios: probes, no blocks
            out.append(dataclasses.replace(_unsettled(scenario_from_dict(s0)), checks=probes))
            continue
        extra = {"adapter": info["adapter"]} if "adapter" in info else {}
        if errors:
            err = errors[0]["error"]
            out.append(dataclasses.replace(base, samples=spec.samples, error=ErrorInfo(**err), info=extra))
            continue
        bench = Bench(lambda *a: None, spec, settings.contract)
        tally = bench.empty()
        for p in parts:
            tally.merge(bench.tally(p["info"]["tally"]))
        if tally.blocks != list(range(bench.blocks)):
            raise UsageError(f"scenario {spec.name}: the shards hold blocks {tally.blocks}, expected 0..{bench.blocks - 1}")
        measured = bench.measured(tally, settings.method)
        checked = evaluate(measured, settings.gate_efficiency)
        # the probes in the run's order, with the checks of the summed tallies in their places
        simulated = {c.name: c for c in checked}
        checked = (*(simulated.pop(c.name, c) for c in probes), *simulated.values())
        if not spec.lazy:
            extra["tokens_per_step_exact"] = measured.horizon.tokens_per_step
        extra["merged"] = {"shards": n, "blocks": bench.blocks}
        out.append(dataclasses.replace(base, samples=spec.samples, checks=checked, info=extra,
                                       tv_bound=tv_bound(measured, settings)))
    return first, n, settings, out, specs


def unsettled_suspects(result: RunResult) -> list[str]:
    """Return the SUSPECT scenarios of a merged run that were not re-run: the merge must not pass them."""
    return [s.name for s in result.scenarios if s.status is Status.SUSPECT and s.rerun is None]


def _probes(parts: list[dict[str, Any]]) -> tuple[CheckResult, ...]:
    """Return shard 0's checks, each replaced by its most severe version in any shard (then the smallest p-value).

    The probes ran whole in every shard with the same seed and calls, so a deterministic verifier
    gives them equal; one that is not (it raised on one shard's probe call, say) must not have
    the merge keep shard 0's clean copy and pass.
    """
    versions = [_unsettled(scenario_from_dict(p)).checks for p in parts]
    out = []
    for c in versions[0]:
        same = [v for checks in versions for v in checks if v.name == c.name]
        out.append(max(same, key=lambda v: (v.status.severity, -(1.0 if v.pvalue is None else v.pvalue))))
    return tuple(out)


def _unsettled(result: ScenarioResult) -> ScenarioResult:
    """Return ``result`` with its p-value checks back to PENDING, for Holm over the merged run."""
    checks = tuple(
        dataclasses.replace(c, status=Status.PENDING, adjusted_pvalue=None) if c.adjusted_pvalue is not None else c
        for c in result.checks
    )
    info = {k: v for k, v in result.info.items() if k not in ("scenario", "shard", "power", "sensitivity", "diagnosis")}
    return dataclasses.replace(result, checks=checks, info=info)
