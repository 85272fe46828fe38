"""Issue 7 figures, side by side in one run: harness overhead, --jobs 2 speed-up, V = 32k peak RSS.

    python benchmarks/scale.py [--samples-v32k 5000] [--skip-v32k]

Timings are ratios measured in the same run (the machine may be shared: read them as such).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import specaudit


def overhead(repeats: int) -> float:
    """Return the best (total / inside-verifier) ratio of the reference on markov-v4."""
    best = float("inf")
    for i in range(repeats):
        t0 = time.perf_counter()
        s = specaudit.run("specaudit.reference:verify", ["markov-v4"], seed=i, diagnose=False).scenarios[0]
        best = min(best, (time.perf_counter() - t0) / s.verifier_seconds)
    return best


def jobs_speedup() -> tuple[float, float, bool]:
    """Return (seconds --jobs 1, seconds --jobs 2, identical results) on the default suite."""
    out = []
    for jobs in (1, 2):
        t0 = time.perf_counter()
        r = specaudit.run("specaudit.reference:verify", seed=0, jobs=jobs, diagnose=False)
        out.append((time.perf_counter() - t0, [(s.name, c.name, c.statistic, c.pvalue) for s in r.scenarios for c in s.checks]))
    return out[0][0], out[1][0], out[0][1] == out[1][1]


def v32k(target: str, samples: int) -> tuple[int, float, str]:
    """Return (exit code, peak RSS GiB, check summaries) of one zipf-v32k run in a child process."""
    proc = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "run", target, "-s", "zipf-v32k", "--samples", str(samples), "--seed", "1", "-v"],
        capture_output=True, text=True,
    )
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / (1 << 20)  # KiB -> GiB, max over children
    lines = [ln.strip() for ln in proc.stdout.splitlines() if "per-prefix" in ln or "pit" in ln]
    return proc.returncode, rss, " | ".join(lines)[:300]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples-v32k", type=int, default=5000)
    parser.add_argument("--skip-v32k", action="store_true")
    args = parser.parse_args()
    print(f"overhead ratio (reference, markov-v4, best of {args.repeats}): {overhead(args.repeats):.2f}  (goal <= 1.25)")
    one, two, same = jobs_speedup()
    print(f"default suite: --jobs 1 {one:.1f} s, --jobs 2 {two:.1f} s, speed-up {one / two:.2f}x, identical results: {same}")
    if not args.skip_v32k:
        for target in ("specaudit.reference:verify", "specaudit.mutants:resample_from_p"):
            code, rss, summary = v32k(target, args.samples_v32k)
            print(f"zipf-v32k {target}: exit {code}, peak RSS so far {rss:.2f} GiB (goal <= 2); {summary}")


if __name__ == "__main__":
    main()
