"""Lean start (issue 20): import time, time to the first verifier call, and the whole-command ratio, side by side.

One run of ``python benchmarks/startup.py`` prints, each beside its goal:

- the import time of ``specaudit.cli`` (``python -X importtime``, the cumulative microseconds of its
  top-level line), and of everything a run imports before it forks its child (``specaudit.cli`` plus
  ``specaudit.engine.supervisor`` and the progress reporter);
- two floors, the wall time of a process that only starts (``python -c pass``) and of one that imports
  what the first block cannot do without (numpy and the scenarios: their schema classes and the cache
  of validated scenarios; PyYAML and pydantic load only for a scenario text not validated before),
  and the whole-command ratio such a floor alone would give;
- the time from process start to the first verifier call: a verifier file wraps the reference and
  writes ``time.time()`` at its first call; the process start is the child's start time in
  ``/proc/<pid>/stat`` (clock ticks since boot, plus ``btime`` of ``/proc/stat``), or the time just
  before ``Popen`` where /proc is missing;
- the whole command's wall time, the time inside the verifier (``verifier_seconds`` of ``--json``)
  and their ratio, beside the same run with ``specaudit.cli.main`` called bare (whose exit collects
  every object still alive; the console script, ``specaudit.cli.script``, freezes them first),
  alternated with it; and the CPU seconds (user + system) of the command and its children
  (``getrusage(RUSAGE_CHILDREN)``), which a busy machine disturbs less than the wall times.

Every process runs the installed console script (``specaudit`` beside ``sys.executable``), not a
shell shim. Bytecode is cached as an installed package has it: ``PYTHONDONTWRITEBYTECODE`` is
dropped and ``PYTHONPYCACHEPREFIX`` points to a temporary folder (``--no-bytecode`` keeps the
environment as it is and compiles every module on every start). One warm-up run fills the bytecode
cache and is not counted; the next validates the scenario and stores it in a cache folder of the
benchmark's own (``SPECAUDIT_CACHE``, :mod:`specaudit.scenarios.cache`): its time to the first call is
printed once, as a scenario not validated before; every counted run reads it from that cache, as
every run after the first of a scenario file does. The best and median of ``--repeats`` runs are
printed (a shared machine is noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIME_TO_FIRST_CALL_GOAL = 0.5  # seconds from process start to the first block (issue 20)
RATIO_GOAL = 2.5  # whole command / time inside the verifier, -s markov-v4 (issue 20; 5.0 before)

VERIFIER = '''\
"""The reference verifier, writing the time of its first call (benchmarks/startup.py)."""
import functools
import os
import time

from specaudit.verifiers.reference import verify as _reference

_called = []


@functools.wraps(_reference)
def verify(*args, **kwargs):
    if not _called:
        _called.append(time.time())
        with open(os.environ["STARTUP_FIRST_CALL"], "w") as out:
            out.write(repr(_called[0]))
    return _reference(*args, **kwargs)
'''


def command(collecting: bool = False) -> list[str]:
    """Return the argv prefix that starts specaudit: the console script beside this python, else ``python -c``.

    ``collecting``: ``specaudit.cli.main`` called bare, whose exit collects every object still alive
    (the console script, ``specaudit.cli.script``, freezes them first): the same run, side by side.
    """
    if collecting:
        return [sys.executable, "-c", "import sys; from specaudit.cli import main; sys.argv[0] = 'specaudit'; main()"]
    script = Path(sys.executable).with_name("specaudit")
    if script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "import sys; from specaudit.cli import script; sys.argv[0] = 'specaudit'; script()"]


def environment(bytecode: bool, cache: str) -> dict[str, str]:
    """Return the environment of the measured processes."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    return env


def import_seconds(modules: str, env: dict[str, str], folder: Path) -> float:
    """Return the import time of the specaudit modules of ``modules`` (one ``import`` statement), summed."""
    # run in ``folder``: ``python -c`` puts its working directory first on sys.path, and a checkout's would win
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {modules}"], env=env, cwd=folder,
                          capture_output=True, text=True, check=True)
    total = 0
    # lines: "import time: self [us] | cumulative | imported package", children first, top level unindented
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if match and match.group(2).startswith("specaudit"):
            total += int(match.group(1))  # top-level lines only (no indent): each counted once
    return total / 1e6


#: What every run's first block needs before specaudit's own code: the interpreter and site, then numpy and the
#: scenarios (their classes and the cache of validated scenarios; PyYAML and pydantic wait for a new text).
FLOORS = (
    ("floor: python -c pass", "pass"),
    ("floor: + numpy, scenario classes and cache", "import numpy, specaudit.scenarios"),
)


def floor_seconds(code: str, env: dict[str, str], folder: Path) -> float:
    """Return the wall seconds of ``python -c code``: a process that starts, runs ``code`` and exits."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, cwd=folder, check=True)
    return time.perf_counter() - t0


def process_start(pid: int) -> float | None:
    """Return the start time of process ``pid`` (seconds since the epoch) from /proc, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime"))
    except (OSError, StopIteration):
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, after "pid (comm) state"
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def run_once(scenario: str, folder: Path, env: dict[str, str], collecting: bool = False) -> tuple[float, float, float, float]:
    """Return (seconds to the first verifier call, whole command seconds, verifier seconds, CPU seconds) of one run."""
    first, report = folder / "first_call.txt", folder / "run.json"
    first.unlink(missing_ok=True)
    argv = [*command(collecting), "run", f"{folder / 'timed_verifier.py'}:verify", "-s", scenario, "--json", str(report)]
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = time.time()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env={**env, "STARTUP_FIRST_CALL": str(first)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = process_start(proc.pid)
    _, err = proc.communicate()
    whole = time.perf_counter() - t0
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"specaudit run exited {proc.returncode}:\n{err}")
    # /proc has 10 ms ticks: never earlier than the Popen call itself
    start = before if started is None else max(started, before)
    inside = json.loads(report.read_text())["scenarios"][0]["verifier_seconds"]
    return float(first.read_text()) - start, whole, inside, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="markov-v4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-bytecode", action="store_true", help="keep PYTHONDONTWRITEBYTECODE as it is")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specaudit-startup-") as tmp:
        folder = Path(tmp)
        (folder / "timed_verifier.py").write_text(VERIFIER)
        env = {**environment(not args.no_bytecode, str(folder / "pycache")), "SPECAUDIT_CACHE": str(folder / "cache")}
        run_once(args.scenario, folder, {**env, "SPECAUDIT_CACHE": "off"})  # warm-up: bytecode, page cache
        cold = run_once(args.scenario, folder, env)  # the scenario validated (pydantic, PyYAML) and cached
        imports = {name: [import_seconds(mods, env, folder) for _ in range(args.repeats)] for name, mods in (
            ("import specaudit.cli", "specaudit.cli"),
            ("imports before the fork", "specaudit.cli, specaudit.engine.supervisor, specaudit.reports.progress"),
        )}
        runs, collected = [], []
        for _ in range(args.repeats):  # alternated: a load that comes and goes falls on both
            runs.append(run_once(args.scenario, folder, env))
            collected.append(run_once(args.scenario, folder, env, collecting=True))
        floors = {name: [floor_seconds(code, env, folder) for _ in range(args.repeats)] for name, code in FLOORS}
    print(f"specaudit run <reference, timed> -s {args.scenario}; {args.repeats} runs after a warm-up; "
          f"bytecode {'not cached' if args.no_bytecode else 'cached'}; {os.cpu_count()} CPUs")
    print(f"{'figure':<44} {'best':>8} {'median':>8}  goal")
    rows: list[tuple[str, list[float], str]] = [
        *((f"{name} (importtime), s", values, "within time to first call") for name, values in imports.items()),
        *((f"{name}, s", values, "no run starts sooner") for name, values in floors.items()),
        ("time to first verifier call, s", [r[0] for r in runs], f"<= {TIME_TO_FIRST_CALL_GOAL}"),
        ("  the same, scenario not validated before", [cold[0]], "once: the warm-up (pydantic and PyYAML load)"),
        ("whole command, s", [r[1] for r in runs], ""),
        ("  the same, exit collecting (main bare)", [r[1] for r in collected], "the console script freezes"),
        ("time inside the verifier, s", [r[2] for r in runs], ""),
        ("CPU of the whole command, s", [r[3] for r in runs], ""),
        ("whole command / inside the verifier", [r[1] / r[2] for r in runs], f"<= {RATIO_GOAL} (5.0 before)"),
        ("  the same, exit collecting (main bare)", [r[1] / r[2] for r in collected], "the console script freezes"),
        ("floor of the ratio (floor above + verifier)",
         [(min(floors[FLOORS[-1][0]]) + r[2]) / r[2] for r in runs], "a run with no overhead but its imports"),
    ]
    for name, values, goal in rows:
        print(f"{name:<44} {min(values):8.3f} {statistics.median(values):8.3f}  {goal}")


if __name__ == "__main__":
    main()
