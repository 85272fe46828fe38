"""Issue 7 figures, side by side in one run.

    python benchmarks/scale.py [--repeats 5] [--samples-v32k 20000] [--skip-v32k] [--skip-zoo]

1. Harness overhead on markov-v4 (reference verifier), two definitions from the same runs, on the
   compiled simulator when the C extension is built (benchmarks/overhead.py compares it with numpy):
   - measurement: ScenarioResult.seconds / verifier_seconds, i.e. (simulating the blocks +
     running the checks) / (time inside the verifier calls). This is the harness per sequence.
   - whole run: wall time of ``specaudit.run`` (adds the power figures and import-time caches)
     / verifier_seconds. Suspect re-runs are off (``suspect_level=0``) so both count the same
     sequences; diagnosis is off (it runs only for failures).
2. Samples to a verdict for every 'distribution' zoo mutant with ``early_stop=True`` on every
   simulated default-suite scenario: the fewest sequences after which a scenario stopped with
   a failed check, vs the fixed 300k.
3. ``--jobs 2`` vs ``--jobs 1`` on the default suite (best of two alternating runs each, after a
   warm-up), identical results checked; the load average is printed (the machine is shared).
4. zipf-v32k (V = 32768, K = 8): the reference at --samples-v32k and a mutant, each in a child
   process, exit code, wall time and peak RSS (ru_maxrss of that child alone).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import specaudit
from specaudit.scenarios.catalogue import resolve
from specaudit.simulate import kernels
from specaudit.verifiers.zoo.chain import MUTANTS

REF = "specaudit.verifiers.reference:verify"


def overhead(repeats: int) -> tuple[list[float], list[float]]:
    """Return the (measurement, whole-run) ratios of ``repeats`` runs of the reference on markov-v4."""
    specaudit.run(REF, ["markov-v4"], seed=99, diagnose=False, suspect_level=0.0)  # warm-up: imports, caches
    meas, whole = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        s = specaudit.run(REF, ["markov-v4"], seed=i, diagnose=False, suspect_level=0.0).scenarios[0]
        total = time.perf_counter() - t0
        meas.append(s.seconds / s.verifier_seconds)
        whole.append(total / s.verifier_seconds)
    return meas, whole


def zoo() -> list[tuple[str, int | None, str]]:
    """Return (mutant, fewest sequences to a failed verdict with early stop, scenario) per distribution mutant."""
    scenarios = [item.spec.name for item in resolve(None) if item.spec.mode != "exact"]
    out = []
    for name, entry in MUTANTS.items():
        if entry.kind != "distribution":
            continue
        best: tuple[int | None, str] = (None, "-")
        for sc in scenarios:
            r = specaudit.run(f"specaudit.verifiers.zoo.chain:{name}", [sc], seed=0, early_stop=True, diagnose=False, power=False,
                              suspect_level=0.0)
            s = r.scenarios[0]
            if s.error is None and any(c.status.value == "failed" for c in s.checks):
                n = s.info["early_stop"]["sequences"]
                if best[0] is None or n < best[0]:
                    best = (n, sc)
        out.append((name, *best))
    return out


def jobs_speedup() -> tuple[float, float, bool]:
    """Return (best seconds --jobs 1, best seconds --jobs 2, identical results) on the default suite."""
    kw = dict(seed=0, diagnose=False, power=False, suspect_level=0.0)
    specaudit.run(REF, jobs=1, **kw)  # warm-up: caches that forked workers then inherit
    times: dict[int, list[float]] = {1: [], 2: []}
    keys = {}
    for jobs in (1, 2, 1, 2):
        t0 = time.perf_counter()
        r = specaudit.run(REF, jobs=jobs, **kw)
        times[jobs].append(time.perf_counter() - t0)
        keys[jobs] = [(s.name, c.name, c.statistic, c.pvalue, c.status) for s in r.scenarios for c in s.checks]
    return min(times[1]), min(times[2]), keys[1] == keys[2]


def v32k(target: str, samples: int, *extra: str) -> tuple[int, float, float, str]:
    """Return (exit code, seconds, peak RSS GiB, per-prefix/pit lines) of one zipf-v32k run in a child process."""
    code = (
        "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "print(p.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(p.stdout)"
    )
    cmd = [sys.executable, "-m", "specaudit.cli", "run", target, "-s", "zipf-v32k", "--samples", str(samples),
           "--seed", "1", "-v", "--no-power", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    rc, rss, *out = proc.stdout.splitlines()
    lines = [ln.strip() for ln in out if "per-prefix" in ln or "pit" in ln]
    return int(rc), int(rss) / (1 << 20), seconds, " | ".join(lines)[:400]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples-v32k", type=int, default=20000)
    parser.add_argument("--skip-v32k", action="store_true")
    parser.add_argument("--skip-zoo", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    meas, whole = overhead(args.repeats)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    path = "compiled simulator (C)" if kernels.load() is not None else "numpy simulator (C extension not built)"
    print(f"overhead, reference on markov-v4, {path} ({args.repeats} runs): measurement (scenario seconds / verifier seconds) "
          f"best {min(meas):.2f} median {med(meas):.2f}; whole run (wall / verifier) best {min(whole):.2f} "
          f"median {med(whole):.2f}  (goal <= 1.25)")
    if not args.skip_zoo:
        print("samples to a failed verdict with --early-stop (fixed design: 300,000 on the 300k scenarios):")
        for name, n, sc in zoo():
            shown = f"{n:,}" if n is not None else "not caught"
            print(f"  {name:<22} {shown:>10} sequences on {sc}  ({'<=' if n is not None and n <= 30_000 else '>'} 30,000)")
    one, two = float("nan"), float("nan")
    load = os.getloadavg()[0]
    one, two, same = jobs_speedup()
    print(f"default suite (load {load:.2f}): --jobs 1 {one:.2f} s, --jobs 2 {two:.2f} s, speed-up {one / two:.2f}x, "
          f"identical results: {same}  (goal >= 1.8x)")
    if not args.skip_v32k:
        for target, n, extra in ((REF, args.samples_v32k, ()), ("specaudit.verifiers.zoo.chain:resample_from_p", 5000, ())):
            code, rss, seconds, summary = v32k(target, n, *extra)
            print(f"zipf-v32k {target} N={n:,}: exit {code}, {seconds:.0f} s, peak RSS {rss:.2f} GiB (goal <= 2); {summary}")


if __name__ == "__main__":
    main()
