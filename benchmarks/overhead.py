"""Harness overhead: (total run time) / (time inside the verifier), reference on markov-v4.

Both times come from the same runs, side by side; the best of several repeats is printed to
damp the noise of a shared machine. Goal: <= 1.25.
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
        result = specaudit.run(args.target, [args.scenario], seed=i, diagnose=False)  # diagnosis: post-run, not harness
        total = time.perf_counter() - t0
        s = result.scenarios[0]
        rows.append((total / s.verifier_seconds, total, s.verifier_seconds, s.calls, s.samples))
    print(f"{'run':>4} {'total s':>8} {'verifier s':>10} {'calls':>6} {'seq/s':>9} {'ratio':>6}")
    for i, (ratio, total, inside, calls, n) in enumerate(rows):
        print(f"{i:>4} {total:8.3f} {inside:10.3f} {calls:6d} {n / total:9.0f} {ratio:6.2f}")
    best = min(r[0] for r in rows)
    print(f"overhead ratio (best of {len(rows)}): {best:.2f}  (median {sorted(r[0] for r in rows)[len(rows) // 2]:.2f}; goal <= 1.25)")


if __name__ == "__main__":
    main()
