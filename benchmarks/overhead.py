"""Harness overhead: (total run time) / (time inside the verifier), reference on markov-v4.

Both times come from the same runs, side by side; the best of several repeats is printed to
damp the noise of a shared machine. Goal: <= 1.25. Suspect re-runs are off (a re-run's extra
sequences would count in the total but not in the first result's verifier time); the
"scenario" column is ScenarioResult.seconds (blocks simulated + checks) / verifier seconds.
benchmarks/scale.py prints the same figures next to the other issue-7 numbers.
"""

from __future__ import annotations

import argparse
import time

import specaudit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="markov-v4")
    parser.add_argument("--target", default="specaudit.reference:verify")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        # diagnosis: post-run, not harness; no suspect re-runs (see above)
        result = specaudit.run(args.target, [args.scenario], seed=i, diagnose=False, suspect_level=0.0)
        total = time.perf_counter() - t0
        s = result.scenarios[0]
        rows.append((total / s.verifier_seconds, total, s.verifier_seconds, s.calls, s.samples, s.seconds / s.verifier_seconds))
    print(f"{'run':>4} {'total s':>8} {'verifier s':>10} {'calls':>6} {'seq/s':>9} {'ratio':>6} {'scenario':>8}")
    for i, (ratio, total, inside, calls, n, scen) in enumerate(rows):
        print(f"{i:>4} {total:8.3f} {inside:10.3f} {calls:6d} {n / total:9.0f} {ratio:6.2f} {scen:8.2f}")
    best = min(r[0] for r in rows)
    print(f"overhead ratio (best of {len(rows)}): {best:.2f}  (median {sorted(r[0] for r in rows)[len(rows) // 2]:.2f}; goal <= 1.25)")


if __name__ == "__main__":
    main()
