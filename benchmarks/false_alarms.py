"""False-alarm rates of the checks and probes on a panel of lossless verifiers.

Every member of :data:`specaudit.verifiers.lossless.PANEL` (the references, the block verifier,
SpecInfer with equal-token siblings merged, EAGLE-2's prefix-grouping rule with ``r < p/q``,
the chain rule in float32) is run through every shipped scenario of its contract at ``--seeds``
seeds, one ``specaudit.run`` per (member, scenario, seed) with the default checks and probes:
the rate a user who runs that one scenario sees (a suite run shares Holm's family and is no
stricter). A lossless verifier should fail nothing; every failure printed is a false alarm
(or a lossless variant that is more efficient than the closed form, counted as a failure by
the efficiency checks as they stand).

Scenarios per member: tree members on ``algorithm: tree``; chain members on ``algorithm:
chain`` scenarios of mode sample or exact (greedy-mode scenarios test temperature 0 decoding,
``reference-greedy``'s contract); the block verifier also on ``algorithm: block`` (a chain
verifier is rightly less efficient than block verification there, so it is not run on them).
The ``large`` scenarios (V >= 32k, tens of seconds each) only with ``--large``.

``--samples`` (default 20,000) replaces each scenario's sequence count: the statistical checks
keep their level at any N (their false-alarm rate is alpha whatever N), the exact probes do not
depend on it, and 20,000 keeps a tree scenario near 1 s. A check left SUSPECT is re-run by the
engine on a fresh seed with 4x the samples, as in a real run; only FAILED and ERROR count.

    python benchmarks/false_alarms.py [--seeds 30] [--samples 20000] [--jobs 2] [--json out.json]
                                      [--variant NAME ...] [--scenario NAME ...] [--large] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import specaudit
from specaudit.scenarios.catalogue import shipped
from specaudit.verifiers.lossless import PANEL, Member

#: Scenarios of the quick smoke run (each member keeps those of its contract), and its seeds.
QUICK_SCENARIOS = ("tree-iid-v4", "tree-ragged-wr-v4", "corners", "markov-v4", "block-toy")
QUICK_SEEDS = 3
#: Statuses that count as a failure (a SUSPECT check is re-run by the engine; PASSED and SKIPPED are fine).
FAILING = ("failed", "error")


def scenarios_for(member: Member, *, large: bool = False, only: Sequence[str] = ()) -> list[str]:
    """Return the shipped scenario names ``member`` is run on (its algorithms; no greedy mode; ``large`` on request)."""
    names = []
    for s in shipped():
        spec = s.spec
        if spec.algorithm not in member.algorithms or spec.mode == "greedy":
            continue
        if "large" in spec.tags and not large:
            continue
        if only and s.name not in only:
            continue
        names.append(s.name)
    return names


def run_one(task: tuple[str, str, str, int, int]) -> dict[str, Any]:
    """Run one member on one scenario at one seed; return its checks' statuses and messages."""
    variant, target, scenario, seed, samples = task
    t0 = time.perf_counter()
    result = specaudit.run(target, [scenario], seed=seed, samples=samples, supervised=False, power=False,
                           diagnose=False)
    (sc,) = result.scenarios
    # the verdict the run gives: a re-run (after a SUSPECT first look) decides the p-value checks, as
    # ScenarioResult.status does; an exact finding of the first look stands
    again = {c.name: c for c in sc.rerun.checks} if sc.rerun is not None else {}
    decided = [again.get(c.name, c) if c.pvalue is not None else c for c in sc.checks]
    checks = [{"check": c.name, "status": c.status.value, "summary": c.summary} for c in decided]
    if sc.error is not None:
        checks.append({"check": "(scenario error)", "status": "error", "summary": sc.error.message})
    return {"variant": variant, "scenario": scenario, "seed": seed, "seconds": time.perf_counter() - t0,
            "checks": checks}


def tasks(variants: Iterable[str], seeds: Sequence[int], samples: int, *, large: bool,
          only: Sequence[str]) -> list[tuple[str, str, str, int, int]]:
    """Return every (variant, target, scenario, seed, samples) to run, variant by variant."""
    out = []
    for name in variants:
        member = PANEL.get(name)
        for scenario in scenarios_for(member, large=large, only=only):
            out.extend((name, member.target, scenario, seed, samples) for seed in seeds)
    return out


def tabulate(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fold runs into ``{"table": {variant: {check: [failures, runs]}}, "failures": [...]}``."""
    table: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    failures = []
    for run in runs:
        for c in run["checks"]:
            cell = table[run["variant"]][c["check"]]
            cell[1] += 1
            if c["status"] in FAILING:
                cell[0] += 1
                failures.append({"variant": run["variant"], "scenario": run["scenario"], "seed": run["seed"],
                                 "check": c["check"], "status": c["status"], "message": c["summary"]})
    return {"table": {v: dict(checks) for v, checks in table.items()}, "failures": failures}


def render(folded: dict[str, Any]) -> str:
    """Return the variant x check table (failures / runs) and the failures by scenario, as text."""
    lines = ["variant x check: failures / runs (a run: one scenario at one seed)", ""]
    for variant, checks in folded["table"].items():
        failed = sum(f for f, _ in checks.values())
        lines.append(f"{variant}  ({failed} failures)")
        for check, (f, n) in checks.items():
            mark = "  <--" if f else ""
            lines.append(f"    {check:28s} {f:4d} / {n:<5d}{mark}")
    by_scenario: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for f in folded["failures"]:
        by_scenario[(f["variant"], f["scenario"], f["check"])].append(f)
    lines += ["", f"failures by scenario ({len(folded['failures'])} in all)"]
    if not by_scenario:
        lines.append("    none")
    for (variant, scenario, check), found in by_scenario.items():
        seeds = ", ".join(str(f["seed"]) for f in found)
        lines.append(f"  {variant} / {scenario} / {check}: {len(found)} (seeds {seeds})")
        lines.append(f"      seed {found[0]['seed']}: {found[0]['message']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the panel, print the table; return 0 when nothing failed, 1 when something did."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30, help="seeds 1..N per member and scenario (default 30)")
    parser.add_argument("--samples", type=int, default=20_000, help="sequences per scenario run (default 20,000)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in this many processes (default 1)")
    parser.add_argument("--variant", action="append", default=[], help=f"panel members (default all: {', '.join(PANEL)})")
    parser.add_argument("--scenario", action="append", default=[], help="only these shipped scenarios")
    parser.add_argument("--large", action="store_true", help="include the large-vocabulary scenarios")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SEEDS} seeds on {', '.join(QUICK_SCENARIOS)}")
    parser.add_argument("--json", help="write the table and the failures to this file")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.samples < 1 or args.jobs < 1:
        parser.error("--seeds, --samples and --jobs must be >= 1")
    variants = args.variant or PANEL.names()
    for name in variants:
        if name not in PANEL:
            parser.error(PANEL.unknown(name))
    seeds = list(range(1, (QUICK_SEEDS if args.quick else args.seeds) + 1))
    only = args.scenario or (QUICK_SCENARIOS if args.quick else ())
    todo = tasks(variants, seeds, args.samples, large=args.large, only=only)
    if not todo:
        parser.error("nothing to run: no shipped scenario of the chosen variants' contracts matches")
    t0 = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            runs = pool.map(run_one, todo, chunksize=1)
    else:
        runs = [run_one(t) for t in todo]
    wall = time.perf_counter() - t0
    folded = tabulate(runs)
    print(render(folded))
    print(f"\n{len(runs)} runs, seeds 1..{seeds[-1]}, --samples {args.samples}, --jobs {args.jobs}: {wall:.0f} s wall")
    if args.json:
        folded.update(seeds=len(seeds), samples=args.samples, seconds=wall,
                      scenarios={v: scenarios_for(PANEL.get(v), large=args.large, only=only) for v in variants})
        with open(args.json, "w") as fh:
            json.dump(folded, fh, indent=1)
    return 1 if folded["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
