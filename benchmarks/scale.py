"""Speed and memory at scale (issues 7 and 20), side by side in one run, each figure beside its goal.

    python benchmarks/scale.py [--quick] [--repeats 5] [--samples-large 2000] [--large-tries 3]
                               [--samples-torch 400] [--gate-samples 20000] [--skip-gate] [--zoo]

1. Harness overhead on markov-v4 (reference verifier), on the compiled simulator when the C
   extension is built (benchmarks/overhead.py compares it with numpy): measurement =
   ScenarioResult.seconds / verifier_seconds (simulating the blocks + running the checks, over
   the time inside the verifier calls); whole run = wall time of ``specaudit.run`` (adds the power
   figures and caches) / verifier_seconds. Suspect re-runs and diagnosis are off.
2. Default-suite CPU: user + system seconds of ``specaudit run <reference>`` on the default
   suite, in a child process (``getrusage(RUSAGE_CHILDREN)``; a busy machine disturbs CPU time
   less than wall time).
3. Time from process start to the first verifier call, and whole command / time inside the
   verifier, of ``specaudit run <reference> -s markov-v4`` (benchmarks/startup.py's measurement).
4. Copy bandwidth of this machine: the best of 5 ``np.copyto`` of a 256 MiB float64 array
   (bytes copied per second; 64 MiB with --quick).
5. Real vocabularies, V = 32k / 128k / 152k (zipf-v32k, llama3-v128k, qwen-v152k), float64 and
   float32 payloads, ``--samples-large`` sequences through the engine's Bench (the code a run
   uses) in a child process each (the one with the least CPU of ``--large-tries`` children per line:
   a shared machine only ever adds time), the reference verifier wrapped to count what it is handed:
   rows/s (verify rows = rounds of all sequences, per wall second), seconds to the first verifier
   call, peak RSS of the child (ru_maxrss), and the floor ratio = run time / (valid p and q bytes
   at the copy bandwidth), where the valid bytes are (2 num_draft + 1) V itemsize per row and
   call: what must be written and read once. The run time is the child's CPU seconds (one
   thread, so the wall time of an idle machine; a shared machine stretches wall times, printed
   beside). "harness" leaves out the time inside the verifier (the simulator's own share);
   "whole" counts it (the reference's inverse-CDF sampling included).
   The torch path (specaudit.simulate.device, --device cpu, the torch reference through the
   torch adapter) gets the same columns at ``--samples-torch`` sequences when it is importable.
6. ``--jobs 2`` vs ``--jobs 1`` on the default suite, supervised as ``specaudit run`` runs it (best of three
   alternating runs each, after a warm-up), identical results checked; the load average is printed (the machine is
   shared), and beside it the machine's own ceiling: two processes each running the suite with ``--jobs 1`` at
   once against one alone (2 x alone / together; two vCPUs sharing a core's caches or memory bandwidth give < 2).
   ``--jobs-only`` runs this section alone.
7. The gate at real size: ``specaudit run <reference> -s llama3-v128k --samples N`` (the scenario
   ships with N = 20,000) and the ``resample_from_p`` mutant at N / 4, each in a child process:
   exit code, wall time beside the floor (valid bytes per sequence from 5 times N), peak RSS.
8. With --zoo: samples to a verdict for every 'distribution' zoo mutant with ``early_stop=True``
   on every simulated default-suite scenario (the fewest sequences to a failed check).

--quick runs every section on small sizes (a test runs it; its figures are not the goals'). The
run with ``--samples-large 3000`` took about 10 minutes of wall time with each real-vocabulary line run 3 times,
the gate included (2-core machine, load average 0.5-1.4, 2026-12-02); a shared machine stretches it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import specaudit
from specaudit.scenarios.catalogue import resolve
from specaudit.simulate import kernels
from specaudit.verifiers.zoo.chain import MUTANTS

REF = "specaudit.verifiers.reference:verify"
LARGE = ("zipf-v32k", "llama3-v128k", "qwen-v152k")
RSS_GOAL_GIB = 2.0
FLOOR_GOAL = 3.0
OVERHEAD_GOAL = 1.25
JOBS_GOAL = 1.8
FIRST_CALL_GOAL = 0.5
STARTUP_RATIO_GOAL = 2.5


def overhead(repeats: int, samples: int | None) -> tuple[list[float], list[float]]:
    """Return the (measurement, whole-run) ratios of ``repeats`` runs of the reference on markov-v4."""
    kw = dict(diagnose=False, suspect_level=0.0, samples=samples)
    specaudit.run(REF, ["markov-v4"], seed=99, **kw)  # warm-up: imports, caches
    meas, whole = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        s = specaudit.run(REF, ["markov-v4"], seed=i, **kw).scenarios[0]
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


def _suite_in_processes(copies: int, kw: dict) -> float:
    """Return the wall seconds of ``copies`` forked processes each running the default suite with --jobs 1, at once."""
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=specaudit.run, args=(REF,), kwargs={**kw, "jobs": 1}) for _ in range(copies)]
    t0 = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return time.perf_counter() - t0


def jobs_speedup(samples: int | None, rounds: int) -> tuple[float, float, bool, float]:
    """Return (best seconds --jobs 1, best seconds --jobs 2, identical results, this machine's ceiling), ``rounds`` each.

    The ceiling is what two processes can gain here at all: 2 x (one process running the suite
    alone) / (two processes running it at once), best of ``rounds`` each, alternated with the
    runs. Two vCPUs that share a core's caches, memory bandwidth or clock give less than 2.
    """
    kw = dict(seed=0, diagnose=False, power=False, suspect_level=0.0, samples=samples)
    specaudit.run(REF, jobs=1, **kw)  # warm-up: caches that forked workers then inherit
    times: dict[int, list[float]] = {1: [], 2: []}
    alone, together = [], []
    keys = {}
    for jobs in (1, 2) * rounds:  # alternating: a neighbour's load falls on both
        t0 = time.perf_counter()
        r = specaudit.run(REF, jobs=jobs, **kw)
        times[jobs].append(time.perf_counter() - t0)
        keys[jobs] = [(s.name, c.name, c.statistic, c.pvalue, c.status) for s in r.scenarios for c in s.checks]
        (alone if jobs == 1 else together).append(_suite_in_processes(jobs, kw))
    return min(times[1]), min(times[2]), keys[1] == keys[2], 2 * min(alone) / min(together)


def jobs_line(samples: int | None, quick: bool) -> None:
    """Print the --jobs 2 line: best of 3 alternating supervised runs each (1 with --quick), the load average at the end."""
    one, two, same, ceiling = jobs_speedup(samples, 1 if quick else 3)
    print(f"default suite (load {os.getloadavg()[0]:.2f}): --jobs 1 {one:.2f} s, --jobs 2 {two:.2f} s, speed-up "
          f"{one / two:.2f}x, identical results: {same}  (goal >= {JOBS_GOAL}x); this machine's ceiling for two "
          f"processes: {ceiling:.2f}x (two suites at once against one alone)")


def child(cmd: list[str]) -> tuple[int, float, float, str]:
    """Run ``cmd`` in a child; return (exit code, wall seconds, peak RSS GiB of that child alone, stdout)."""
    code = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(p.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(p.stdout)")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    rc, rss, *out = proc.stdout.splitlines()
    return int(rc), int(rss) / (1 << 20), seconds, "\n".join(out)


def default_suite_cpu(samples: int | None) -> tuple[int, float, float]:
    """Return (exit code, CPU seconds, wall seconds) of ``specaudit run <reference>`` on the default suite."""
    cmd = [sys.executable, "-m", "specaudit.cli", "run", REF, "-q"] + ([] if samples is None else ["--samples", str(samples)])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, capture_output=True, text=True).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return rc, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def first_call(repeats: int) -> tuple[list[float], list[float]] | str:
    """Return (seconds to the first verifier call, whole / inside the verifier) of markov-v4 runs (benchmarks/startup.py)."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import startup  # benchmarks/startup.py (issue 20, lean start)
    except ImportError as exc:
        return f"benchmarks/startup.py not importable ({exc})"
    with tempfile.TemporaryDirectory(prefix="specaudit-scale-") as tmp:
        folder = Path(tmp)
        (folder / "timed_verifier.py").write_text(startup.VERIFIER)
        env = {**startup.environment(True, str(folder / "pycache")), "SPECAUDIT_CACHE": str(folder / "cache")}
        startup.run_once("markov-v4", folder, env)  # warm-up: bytecode, the scenario validated and cached
        runs = [startup.run_once("markov-v4", folder, env) for _ in range(repeats)]
    return [r[0] for r in runs], [r[1] / r[2] for r in runs]


def copy_bandwidth(mib: int) -> float:
    """Return the best of 5 ``np.copyto`` of a ``mib`` MiB float64 array, bytes copied per second."""
    src = np.ones((mib << 20) // 8)
    dst = np.zeros_like(src)  # touched: no page faults in the timed copies
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return src.nbytes / best


def measure_large(name: str, dtype: str, samples: int, path: str) -> dict[str, float]:
    """Simulate ``samples`` sequences of shipped scenario ``name`` through the engine's Bench (run in a child)."""
    from specaudit.engine.bench import Bench
    from specaudit.verifiers.reference import verify as reference

    spec = resolve([name])[0].spec
    roles = {role: dataclasses.replace(getattr(spec, role), dtype=dtype) for role in ("target", "draft")}
    spec = dataclasses.replace(spec, samples=samples, **roles)
    seen = {"bytes": 0, "first": 0.0}

    def counted(verify):
        def call(draft, q, p, num_draft, rng):
            if not seen["first"]:
                seen["first"] = time.perf_counter()
            seen["bytes"] += int((2 * np.asarray(num_draft) + 1).sum()) * spec.vocab * np.dtype(dtype).itemsize
            return verify(draft, q, p, num_draft, rng)
        return call

    if path != "numpy":  # torch and the device path imported before the clock starts, like numpy's modules above
        import torch  # noqa: F401

        import specaudit.simulate.device  # noqa: F401
    t0, cpu0 = time.perf_counter(), time.process_time()
    if path == "numpy":
        bench = Bench(counted(reference), spec)
    else:  # the torch path of specaudit.simulate.device (import guarded by the caller)
        from specaudit.adapters import get as get_adapter
        from specaudit.adapters.torch_reference import verify as torch_reference
        from specaudit.contract.tensors import TensorCall, tensor_call

        verify = get_adapter("torch").wrap(torch_reference, {"device": "cpu", "dtype": dtype})
        call = tensor_call(verify)
        assert call is not None

        def tensor_counted(draft, q, p, num_draft, rng):
            if not seen["first"]:
                seen["first"] = time.perf_counter()
            seen["bytes"] += int((2 * num_draft + 1).sum()) * spec.vocab * np.dtype(dtype).itemsize
            return call.call(draft, q, p, num_draft, rng)

        bench = Bench(verify, spec, tensors=TensorCall(tensor_counted, call.device, call.dtype))
    tally = bench.measure(1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    rounds = tally.rounds
    return {"wall": wall, "cpu": cpu, "verifier": rounds.verifier_seconds, "bytes": seen["bytes"], "rows": float(rounds.moments[0]),
            "sequences": rounds.sequences, "first": seen["first"] - t0, "calls": rounds.calls,
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)}


def torch_path() -> str | None:
    """Return why the torch path cannot be measured here, or None when it can."""
    try:
        import specaudit.simulate.device  # noqa: F401  (issue 20's torch-native path)
        from specaudit.contract.tensors import TensorCall  # noqa: F401
    except ImportError as exc:
        return f"not available ({exc})"
    return None


def large_table(samples: int, torch_samples: int, bandwidth: float, quick: bool, tries: int) -> dict[str, dict[str, float]]:
    """Print rows/s, first call, peak RSS and the floor ratios at V = 32k / 128k / 152k; return the figures.

    Each line is the child run with the least CPU of ``tries`` (a shared machine only ever adds time).
    """
    paths = ["numpy"]
    why = torch_path()
    if why is None:
        paths.append("torch-cpu")
    print(f"real vocabularies, {samples:,} sequences each ({torch_samples:,} on the torch path), reference verifiers, "
          f"the best of {tries} child processes per line (floor: valid p, q bytes at {bandwidth / 1e9:.1f} GB/s):")
    print(f"  {'scenario':<14} {'V':>7} {'dtype':<7} {'path':<9} {'rows/s':>8} {'first call':>10} {'peak RSS':>9} "
          f"{'floor s':>8} {'CPU s':>7} {'wall s':>7} {'harness':>8} {'whole':>7}")
    out = {}
    for name in LARGE:
        for dtype in ("float64", "float32"):
            for path in paths:
                if path != "numpy" and quick and (name, dtype) != (LARGE[0], "float64"):
                    continue  # --quick: the torch path once
                n = samples if path == "numpy" else torch_samples
                cmd = [sys.executable, __file__, "--child", name, dtype, str(n), path]
                runs = [subprocess.run(cmd, capture_output=True, text=True) for _ in range(tries)]
                failed = next((proc for proc in runs if proc.returncode != 0), None)
                if failed is not None:
                    print(f"  {name:<14} {dtype:<7} {path:<9} failed: {failed.stderr.strip().splitlines()[-1:]}")
                    continue
                m = min((json.loads(proc.stdout.strip().splitlines()[-1]) for proc in runs), key=lambda m: m["cpu"])
                floor = m["bytes"] / bandwidth
                vocab = resolve([name])[0].spec.vocab
                # ratios on CPU seconds (one thread: = wall time on an idle machine; a shared one stretches wall time)
                inside = m["verifier"] * min(1.0, m["cpu"] / m["wall"])
                print(f"  {name:<14} {vocab:>7,} {dtype:<7} {path:<9} {m['rows'] / m['wall']:8.0f} {m['first']:9.2f}s "
                      f"{m['rss']:7.2f}GiB {floor:8.2f} {m['cpu']:7.1f} {m['wall']:7.1f} {(m['cpu'] - inside) / floor:8.2f} "
                      f"{m['cpu'] / floor:7.2f}")
                out[f"{name}/{dtype}/{path}"] = {**m, "floor": floor}
    if why is not None:
        print(f"  torch path: {why}")
    else:
        for dtype in ("float64", "float32"):
            a, b = out.get(f"{LARGE[0]}/{dtype}/numpy"), out.get(f"{LARGE[0]}/{dtype}/torch-cpu")
            if a and b:
                ratio = (a["rows"] / a["wall"]) / (b["rows"] / b["wall"])
                print(f"  {LARGE[0]} {dtype}: numpy rows/s / torch-cpu rows/s = {ratio:.2f} (goal <= 1.5)")
    print(f"  goals: peak RSS <= {RSS_GOAL_GIB} GiB; floor ratio (run time / floor) <= {FLOOR_GOAL} at every V "
          "(CPU seconds / floor; harness: without the time inside the verifier; whole: with the reference inside)")
    return out


def gate(samples: int, bandwidth: float, per_sequence: float | None) -> None:
    """Print the llama3-v128k gate: the reference at ``samples`` and resample_from_p at a quarter of it."""
    for target, n in ((REF, samples), ("specaudit.verifiers.zoo.chain:resample_from_p", max(1, samples // 4))):
        cmd = [sys.executable, "-m", "specaudit.cli", "run", target, "-s", "llama3-v128k", "--samples", str(n),
               "--seed", "1", "-v", "--no-power"]
        rc, rss, seconds, text = child(cmd)
        lines = " | ".join(ln.strip() for ln in text.splitlines() if "per-prefix" in ln or "pit " in ln or "│ pit" in ln)
        floor = f"{per_sequence * n / bandwidth:.1f} s" if per_sequence else "n/a"
        want = "exit 0" if target == REF else "exit 1"
        print(f"llama3-v128k {target.rsplit(':', 1)[1]} N={n:,}: exit {rc} (goal: {want}), {seconds:.0f} s beside a floor "
              f"of {floor}, peak RSS {rss:.2f} GiB (goal <= {RSS_GOAL_GIB}); {lines[:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="every section on small sizes (tests)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples-large", type=int, default=2000)
    parser.add_argument("--large-tries", type=int, default=3, help="child runs per real-vocabulary line (the best is printed)")
    parser.add_argument("--samples-torch", type=int, default=None,
                        help="sequences per line on the torch path (default: --samples-large, the numpy path's)")
    parser.add_argument("--gate-samples", type=int, default=20000)
    parser.add_argument("--skip-gate", action="store_true")
    parser.add_argument("--zoo", action="store_true", help="samples to a verdict per distribution mutant (slow)")
    parser.add_argument("--jobs-only", action="store_true", help="only the --jobs 2 line (section 6)")
    parser.add_argument("--child", nargs=4, metavar=("SCENARIO", "DTYPE", "SAMPLES", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, dtype, samples, path = args.child
        print(json.dumps(measure_large(name, dtype, int(samples), path)))
        return
    quick = args.quick
    repeats = 1 if quick else args.repeats
    small = 2000 if quick else None  # sequences per scenario in the suite-wide sections
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)"
          + ("; --quick: small sizes, figures not comparable with the goals" if quick else ""))

    if args.jobs_only:
        jobs_line(small, quick)
        return
    meas, whole = overhead(repeats, small)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    path = "compiled simulator (C)" if kernels.load() is not None else "numpy simulator (C extension not built)"
    print(f"overhead, reference on markov-v4, {path} ({repeats} runs): measurement (scenario seconds / verifier seconds) "
          f"best {min(meas):.2f} median {med(meas):.2f}; whole run (wall / verifier) best {min(whole):.2f} "
          f"median {med(whole):.2f}  (goal <= {OVERHEAD_GOAL})")

    rc, cpu, wall = default_suite_cpu(small)
    print(f"default suite, reference, whole command: {cpu:.1f} s CPU, {wall:.1f} s wall, exit {rc}  (goal: no fixed "
          "figure; issue 20 measured ~1.8 s of imports and ~0.7 s of power figures around ~2 s of verifier time)")

    first = first_call(repeats)
    if isinstance(first, str):
        print(f"time to the first verifier call: {first}")
    else:
        ttf, ratio = first
        print(f"time to the first verifier call, markov-v4: best {min(ttf):.3f} s median {med(ttf):.3f} s "
              f"(goal <= {FIRST_CALL_GOAL}); whole command / inside the verifier best {min(ratio):.2f} "
              f"median {med(ratio):.2f} (goal <= {STARTUP_RATIO_GOAL})")

    bandwidth = copy_bandwidth(64 if quick else 256)
    print(f"copy bandwidth: {bandwidth / 1e9:.2f} GB/s (np.copyto, best of 5; the floor of the ratios below)")
    figures = large_table(100 if quick else args.samples_large,
                          50 if quick else args.samples_torch or args.samples_large, bandwidth, quick,
                          1 if quick else args.large_tries)

    jobs_line(small, quick)

    if not args.skip_gate:
        m = figures.get("llama3-v128k/float64/numpy")
        per_sequence = m["bytes"] / m["sequences"] if m else None
        gate(100 if quick else args.gate_samples, bandwidth, per_sequence)

    if args.zoo:
        print("samples to a failed verdict with --early-stop (fixed design: 300,000 on the 300k scenarios):")
        for name, n, sc in zoo():
            shown = f"{n:,}" if n is not None else "not caught"
            print(f"  {name:<22} {shown:>10} sequences on {sc}  ({'<=' if n is not None and n <= 30_000 else '>'} 30,000)")


if __name__ == "__main__":
    main()
