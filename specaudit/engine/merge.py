"""``specaudit merge``: combine the JSON of ``--shard i/n`` runs into the unsharded result (issue 7).

A shard runs blocks ``b = i mod n`` of every scenario (:mod:`specaudit.engine.bench`) and stores, per
scenario, the scenario itself and its additive tallies (joint counts, round statistics, greedy
matches, prefix and PIT counts) in ``info``. The merge checks that the shards belong together
and are complete, adds the tallies, and runs the checks, Holm, power and diagnosis on the sums:
the counts, p-values and verdicts are those of the unsharded run with the same seed. A merge
cannot re-run SUSPECT scenarios (it has no verifier): they stay suspect (exit 0); re-run such a
scenario unsharded with more samples to settle it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from specaudit.errors import UsageError
from specaudit.results import ErrorInfo, RunResult, ScenarioResult

#: Run settings that only describe one shard (dropped from the merged run's settings).
SHARD_SETTINGS = ("shard", "suspect_level", "power", "diagnose")


def _shard_of(doc: dict[str, Any], path: str) -> tuple[int, int]:
    shard = doc.get("settings", {}).get("shard")
    if not shard:
        raise UsageError(f"{path}: not a shard (run with --shard i/n writes one)")
    if doc.get("partial") or doc.get("interrupted"):
        raise UsageError(f"{path}: shard {shard['index']}/{shard['count']} was interrupted; run it again")
    return int(shard["index"]), int(shard["count"])


def _check_together(docs: Sequence[dict[str, Any]], paths: Sequence[str]) -> int:
    """Raise UsageError unless the documents are the n shards of one run; return n."""
    shards = [_shard_of(d, p) for d, p in zip(docs, paths)]
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
    first, p0 = docs[0], paths[0]

    def key(doc: dict[str, Any]) -> tuple:
        settings = {k: v for k, v in doc.get("settings", {}).items() if k != "shard"}
        scen = [(s["name"], s["content_hash"], s["seed"], s.get("info", {}).get("shard", {}).get("planned"))
                for s in doc["scenarios"]]
        return doc["target"], doc["alpha"], doc.get("seed"), repr(sorted(settings.items())), scen

    for doc, p in zip(docs[1:], paths[1:]):
        if key(doc) != key(first):
            raise UsageError(f"{p} and {p0} are shards of different runs (target, alpha, seed, settings or scenarios differ)")
    return n


def merge_documents(docs: Sequence[dict[str, Any]], paths: Sequence[str] | None = None) -> RunResult:
    """Return the run that the shard documents ``docs`` are the parts of, checked on the summed tallies.

    Parameters
    ----------
    docs : sequence of dict
        JSON documents written by ``specaudit run --shard i/n --json`` for every i in 0..n-1
        (any order).
    paths : sequence of str, optional
        Their file names, for messages.

    Returns
    -------
    RunResult
        Counts, p-values (Holm over the whole run) and verdicts equal to the unsharded run's.
    """
    from specaudit import __version__
    from specaudit.engine import run as runner
    from specaudit.engine.bench import Bench
    from specaudit.scenarios.schema import Scenario

    paths = list(paths or [f"<document {i}>" for i in range(len(docs))])
    if not docs:
        raise UsageError("nothing to merge: give the JSON of every shard")
    n = _check_together(docs, paths)
    docs = sorted(docs, key=lambda d: d["settings"]["shard"]["index"])
    first = docs[0]
    settings = first.get("settings", {})
    contract, method = settings.get("contract", "probs"), settings.get("method", "pearson")
    gate = settings.get("gate_efficiency", True)
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
        spec = Scenario.model_validate(info["scenario"])
        specs.append(spec)
        if "tally" not in info:  # exact-mode scenarios: probes, no blocks; every shard ran them whole
            out.append(_unsettled(runner_result_from_doc(s0)))
            continue
        extra = {"adapter": info["adapter"]} if "adapter" in info else {}
        if errors:
            err = errors[0]["error"]
            out.append(dataclasses.replace(base, samples=spec.samples, error=ErrorInfo(**err), info=extra))
            continue
        bench = Bench(lambda *a: None, spec, contract)
        tally = bench.empty()
        for p in parts:
            tally.merge(bench.tally(p["info"]["tally"]))
        if tally.blocks != list(range(bench.blocks)):
            raise UsageError(f"scenario {spec.name}: the shards hold blocks {tally.blocks}, expected 0..{bench.blocks - 1}")
        measured = bench.measured(tally, method)
        checked = runner.evaluate(measured, gate)
        if not spec.lazy:
            extra["tokens_per_step_exact"] = measured.horizon.tokens_per_step
        extra["merged"] = {"shards": n, "blocks": bench.blocks}
        out.append(dataclasses.replace(base, samples=spec.samples, checks=checked, info=extra))
    alpha = first["alpha"]
    suspect = settings.get("suspect_level")
    suspect = runner.default_suspect_level(alpha) if suspect is None else suspect
    checked_run = runner.apply_holm(out, alpha, suspect if suspect > alpha else None)
    if settings.get("power", True):
        from specaudit.analysis import power

        checked_run = power.annotate(checked_run, specs, alpha)
    if settings.get("diagnose", True):
        from specaudit.analysis import diagnose

        checked_run = diagnose.annotate(checked_run, specs)
    return RunResult(
        target=first["target"],
        alpha=alpha,
        seed=first.get("seed"),
        version=__version__,
        scenarios=tuple(checked_run),
        started=min(d.get("started", "") for d in docs),
        seconds=max(d.get("seconds", 0.0) for d in docs),
        settings={**{k: v for k, v in settings.items() if k not in SHARD_SETTINGS}, "merged_shards": n},
    )


def _unsettled(result: ScenarioResult) -> ScenarioResult:
    """Return ``result`` with its p-value checks back to PENDING, for Holm over the merged run."""
    from specaudit.results import Status

    checks = tuple(
        dataclasses.replace(c, status=Status.PENDING, adjusted_pvalue=None) if c.adjusted_pvalue is not None else c
        for c in result.checks
    )
    info = {k: v for k, v in result.info.items() if k not in ("scenario", "shard", "power", "sensitivity", "diagnosis")}
    return dataclasses.replace(result, checks=checks, info=info)


def runner_result_from_doc(s: dict[str, Any]) -> ScenarioResult:
    """Return a scenario result read back from its JSON (exact-mode scenarios, identical in every shard)."""
    from specaudit.results.document import scenario_from_dict

    return scenario_from_dict(s)
