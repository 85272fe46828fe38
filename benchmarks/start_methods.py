"""First-call time of a supervised run by start method: fork, forkserver (specaudit preloaded) and spawn.

A caller that has initialised CUDA gets its child by forkserver (issue 33): the child imports the
target anew instead of inheriting it. This prints, side by side and alternating, per start method:
the time from ``specaudit.run`` to the verifier's first call (in the child, on the system-wide
clock), the whole run's time, and each as a ratio to fork's. A fresh interpreter runs every
measurement (a forkserver is started by the run that needs it and stopped when it ends), so each
includes what a first run in a process pays. ``--torch`` imports torch in the caller first (as a
CUDA user's process has), with the torch reference as the target.

    python benchmarks/start_methods.py [--repeats 5] [--torch]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

METHODS = ("fork", "forkserver", "spawn")

# the caller: imports specaudit (and torch), then times one supervised run; its target stamps its first call
CALLER = textwrap.dedent("""
    import json, os, sys, time
    {torch}
    import specaudit
    out = sys.argv[1]
    t0 = time.time()
    result = specaudit.run("first_call:verify", ["markov-v4"], samples=2000, seed=1, power=False, diagnose=False,
                           suspect_level=0.0, {adapter})
    total = time.time() - t0
    with open(os.environ["FIRST_CALL_FILE"]) as fh:
        first = float(fh.read()) - t0
    json.dump({{"first": first, "total": total, "status": result.status.value}}, open(out, "w"))
""")

# the target: the reference (numpy or torch), and the wall-clock time of its first call written to a file
TARGET = textwrap.dedent("""
    import os, time
    from {module} import verify as _reference
    _stamped = False

    def verify(*args):
        global _stamped
        if not _stamped:
            _stamped = True
            with open(os.environ["FIRST_CALL_FILE"], "w") as fh:
                fh.write(repr(time.time()))
        return _reference(*args)
""")


def measure(method: str, folder: str, use_torch: bool) -> dict[str, float]:
    """Return the first-call and total seconds of one run whose child starts by ``method``, in a fresh interpreter."""
    out = os.path.join(folder, f"{method}.json")
    env = {**os.environ, "SPECAUDIT_START_METHOD": method, "FIRST_CALL_FILE": os.path.join(folder, "first"),
           "PYTHONPATH": os.pathsep.join([folder, os.environ.get("PYTHONPATH", "")])}
    code = CALLER.format(torch="import torch" if use_torch else "",
                         adapter='adapter="torch", adapter_options={"device": "cpu"}, device="cpu"' if use_torch else "")
    subprocess.run([sys.executable, "-c", code, out], env=env, check=True, cwd=folder)
    with open(out) as fh:
        got = json.load(fh)
    if got["status"] != "passed":
        raise SystemExit(f"{method}: the reference did not pass ({got['status']})")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--torch", action="store_true", help="torch imported in the caller; the torch reference")
    args = parser.parse_args()
    module = "specaudit.adapters.torch_reference" if args.torch else "specaudit.verifiers.reference"
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "first_call.py"), "w") as fh:
            fh.write(TARGET.format(module=module))
        for method in METHODS:  # warm-up: the OS's file cache, the scenario cache
            measure(method, folder, args.torch)
        runs: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
        for i in range(args.repeats):
            for method in METHODS:
                got = measure(method, folder, args.torch)
                runs[method].append(got)
                print(f"{method:>10} run {i}: first call {got['first']:.3f} s, whole run {got['total']:.3f} s")
    base = {key: statistics.median(r[key] for r in runs["fork"]) for key in ("first", "total")}
    print(f"median of {args.repeats} ({'torch imported, torch reference' if args.torch else 'numpy reference'}, markov-v4, "
          "2,000 sequences):")
    for method in METHODS:
        first = statistics.median(r["first"] for r in runs[method])
        total = statistics.median(r["total"] for r in runs[method])
        print(f"{method:>10}: first call {first:.3f} s ({first / base['first']:.2f}x fork's), "
              f"whole run {total:.3f} s ({total / base['total']:.2f}x fork's)")


if __name__ == "__main__":
    main()
