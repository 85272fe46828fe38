"""Supervised-run overhead: total / inside-verifier on markov-v4, in-process vs supervised child.

The supervisor (:mod:`specaudit.engine.supervisor`) runs the verifier in a forked child that writes
a shared-memory clock at every timed call and sends one message per finished scenario; this prints
the overhead ratio of ``benchmarks/overhead.py`` (goal <= 1.25) for both ways of running, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import time

from specaudit.engine.run import execute
from specaudit.engine.settings import RunSettings
from specaudit.engine.supervisor import execute_supervised


def run_once(how, target: str, scenario: str, seed: int) -> tuple[float, float]:
    """Return (total s, verifier s) of one run."""
    settings = RunSettings(seed=seed, diagnose=False, suspect_level=0.0)
    t0 = time.perf_counter()
    result = how(target, [scenario], settings)
    return time.perf_counter() - t0, result.scenarios[0].verifier_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="markov-v4")
    parser.add_argument("--target", default="specaudit.verifiers.reference:verify")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    ways = {"in-process": execute, "supervised": execute_supervised}
    ratios: dict[str, list[float]] = {name: [] for name in ways}
    for how in ways.values():  # warm-up: imports, caches
        run_once(how, args.target, args.scenario, 10_000)
    for i in range(args.repeats):
        for name, how in ways.items():
            total, inside = run_once(how, args.target, args.scenario, i)
            ratios[name].append(total / inside)
            print(f"{name:>10} run {i}: total {total:.3f} s, verifier {inside:.3f} s, ratio {total / inside:.2f}")
    for name, r in ratios.items():
        print(f"overhead ratio, {name}: best {min(r):.2f}, median {statistics.median(r):.2f} (goal <= 1.25)")


if __name__ == "__main__":
    main()
