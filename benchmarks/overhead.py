"""Harness overhead: (total run time) / (time inside the verifier), reference on markov-v4.

Both times come from the same runs, side by side, for the compiled simulator
(:mod:`specaudit.simulate.kernels`, a C extension) and the numpy one, alternating; the best and median of several
repeats are printed to damp the noise of a shared machine. Goal: <= 1.25. Suspect re-runs are
off (a re-run's extra sequences would count in the total but not in the first result's
verifier time); the "scenario" column is ScenarioResult.seconds (blocks simulated + checks) /
verifier seconds. The first run of each path (imports, compiled-code cache, power cache) is a
warm-up and is printed apart. benchmarks/scale.py prints the same figures next to the other
issue-7 numbers.
"""

from __future__ import annotations

import argparse
import statistics
import time

import specaudit
from specaudit.simulate import kernels


def run_once(target: str, scenario: str, seed: int) -> tuple[float, float, float, int, int]:
    """Return (total s, verifier s, scenario s, calls, sequences) of one run."""
    t0 = time.perf_counter()
    # diagnosis: post-run, not harness; no suspect re-runs (see above); in this process: the engine's own
    # overhead (benchmarks/supervised.py measures what the supervisor adds)
    result = specaudit.run(target, [scenario], seed=seed, diagnose=False, suspect_level=0.0, supervised=False)
    total = time.perf_counter() - t0
    s = result.scenarios[0]
    return total, s.verifier_seconds, s.seconds, s.calls, s.samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="markov-v4")
    parser.add_argument("--target", default="specaudit.verifiers.reference:verify")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    compiled = kernels.load
    paths = {"compiled": compiled, "numpy": lambda: None}
    if compiled() is None:
        print("the C extension is not built (or SPECAUDIT_NO_KERNELS is set): numpy path only")
        paths.pop("compiled")
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in paths}
    for name, load in paths.items():
        kernels.load = load
        total, inside, *_ = run_once(args.target, args.scenario, 10_000)
        print(f"warm-up, {name}: total {total:.3f} s, verifier {inside:.3f} s, ratio {total / inside:.2f}")
    for i in range(args.repeats):
        for name, load in paths.items():
            kernels.load = load
            rows[name].append(run_once(args.target, args.scenario, i))
    kernels.load = compiled
    print(f"{'path':>8} {'run':>4} {'total s':>8} {'verifier s':>10} {'calls':>6} {'seq/s':>9} {'ratio':>6} {'scenario':>8}")
    for name, runs in rows.items():
        for i, (total, inside, scen, calls, n) in enumerate(runs):
            print(f"{name:>8} {i:>4} {total:8.3f} {inside:10.3f} {calls:6d} {n / total:9.0f} {total / inside:6.2f} {scen / inside:8.2f}")
    for name, runs in rows.items():
        ratios = [total / inside for total, inside, *_ in runs]
        scen = [s / inside for _, inside, s, *_ in runs]
        print(f"overhead ratio, {name}: best {min(ratios):.2f}, median {statistics.median(ratios):.2f} "
              f"(scenario measure: best {min(scen):.2f}, median {statistics.median(scen):.2f}; goal <= 1.25)")


if __name__ == "__main__":
    main()
