"""Cost of the exact checks and promptness of the per-call timeout, measured side by side.

1. The default suite with and without its exact scenario ('corners'): seconds of each and the
   ratio (default suite time / suite time without corners), best of several repeats.
2. A verifier spinning in Python on V = 8: how long its scenario took to be stopped, against
   --timeout, for a few timeouts.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import specaudit
from specaudit.scenarios.catalogue import default_suite

HERE = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", default="specaudit.verifiers.reference:verify")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    suite = default_suite()
    without = [s for s in suite if s.spec.mode != "exact"]
    exact = [s for s in suite if s.spec.mode == "exact"]
    rows = []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        specaudit.run(args.target, without, seed=i, diagnose=False)
        t_without = time.perf_counter() - t0
        t0 = time.perf_counter()
        r = specaudit.run(args.target, exact, seed=i, diagnose=False)
        t_exact = time.perf_counter() - t0
        rows.append((t_without, t_exact, r.scenarios[0].calls))
    print(f"target {args.target}: default suite without corners vs corners alone")
    for t_without, t_exact, calls in rows:
        print(f"  without {t_without:7.3f} s   corners {t_exact:6.3f} s ({calls} calls)   ratio (with / without) {(t_without + t_exact) / t_without:.3f}")
    best = min(rows, key=lambda r: r[0] + r[1])
    print(f"best: exact checks add {best[1]:.3f} s to {best[0]:.3f} s: ratio {(best[0] + best[1]) / best[0]:.3f}")

    hang = f"{HERE / 'tests' / 'verifiers' / 'exact_broken.py'}:hangs"
    print("hanging verifier (pure-Python spin on V = 8, scenario peaked-v8):")
    for timeout in (0.5, 1.0, 2.0):
        t0 = time.perf_counter()
        r = specaudit.run(hang, ["peaked-v8"], samples=1000, timeout=timeout, diagnose=False)
        wall = time.perf_counter() - t0
        s = r.scenarios[0]
        print(f"  --timeout {timeout:4.1f}: stopped after {s.seconds:.3f} s (scenario), {wall:.3f} s (run); "
              f"overshoot {s.seconds - timeout:+.3f} s; {s.error.kind}")


if __name__ == "__main__":
    main()
