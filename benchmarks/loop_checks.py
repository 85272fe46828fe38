"""False-alarm rate and power of the loop checks on a mode: loop scenario (default loop-v4), and their cost.

The reference loop over ``--seeds`` seeds: how often its loop-law p-value falls at or below 0.05,
0.01 and 0.001 (a correct check: about those rates, no more; the check is Bonferroni over the
requests, so somewhat less). Each loop mutant over ``--mutant-seeds`` seeds: how often it fails
at the family-wise level 0.001 (a lone scenario's Holm level), and its median p-value. The cost:
seconds per run of the trace (the reference loop, this process). Prints the table; ``--json``
writes it.

    python benchmarks/loop_checks.py --seeds 200 --mutant-seeds 20 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specaudit.checks.loop import run_loop
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve
from specaudit.verifiers import loop as reference_loop
from specaudit.verifiers.zoo import loop as loop_zoo

ALPHA = 1e-3
_SCENARIO = "loop-v4"
_SAMPLES: int | None = None


def one(job: tuple[str, int]) -> tuple[str, int, float, bool, float]:
    """Return (loop, seed, p-value, failed outright, seconds) of one audit of the scenario's trace."""
    name, seed = job
    spec = resolve([_SCENARIO])[0].spec
    loop = reference_loop.verify if name == "reference" else loop_zoo.MUTANTS[name].func
    t0 = time.perf_counter()
    done = run_loop(loop, spec.loop_trace(), spec.loop_models(), _SAMPLES or spec.samples, 1000 + seed)
    law = done.checks[-1]
    return name, seed, float(law.pvalue if law.pvalue is not None else 1.0), law.status is Status.FAILED, \
        time.perf_counter() - t0


def main() -> int:
    global _SCENARIO, _SAMPLES
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", default="loop-v4")
    parser.add_argument("--samples", type=int, default=None, help="runs of the trace per audit (default: the scenario's)")
    parser.add_argument("--seeds", type=int, default=100, help="audits of the reference loop")
    parser.add_argument("--mutant-seeds", type=int, default=10, help="audits of each loop mutant")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    _SCENARIO, _SAMPLES = args.scenario, args.samples
    jobs = [("reference", s) for s in range(args.seeds)]
    jobs += [(name, s) for name in loop_zoo.MUTANTS for s in range(args.mutant_seeds)]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            rows = pool.map(one, jobs, chunksize=1)
    else:
        rows = [one(j) for j in jobs]
    wall = time.perf_counter() - t0
    spec = resolve([_SCENARIO])[0].spec
    n = _SAMPLES or spec.samples
    ref = [r for r in rows if r[0] == "reference"]
    table: dict[str, object] = {"scenario": _SCENARIO, "samples": n, "seeds": args.seeds,
                                "mutant_seeds": args.mutant_seeds, "seconds": wall}
    rates = {str(level): sum(p <= level or failed for _, _, p, failed, _ in ref) / len(ref) for level in (0.05, 0.01, 0.001)}
    per_run = statistics.median(s for *_, s in ref) / n
    table["reference"] = {"false_alarm_rate": rates, "seconds_per_run": per_run}
    print(f"{_SCENARIO}: {n:,} runs of the trace per audit; {wall:.0f} s wall, --jobs {args.jobs}")
    print(f"reference loop, {len(ref)} seeds: p <= 0.05 in {rates['0.05']:.3f}, <= 0.01 in {rates['0.01']:.3f}, "
          f"<= 0.001 in {rates['0.001']:.3f}; {per_run * 1e3:.2f} ms per run of the trace")
    mutants = {}
    for name in loop_zoo.MUTANTS:
        mine = [r for r in rows if r[0] == name]
        caught = sum(failed or p <= ALPHA for _, _, p, failed, _ in mine)
        median = statistics.median(p for _, _, p, _, _ in mine)
        mutants[name] = {"power": caught / len(mine), "median_p": median}
        print(f"  {name:26s} fails at alpha {ALPHA:g} in {caught}/{len(mine)} (median p {median:.3g})")
    table["mutants"] = mutants
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
