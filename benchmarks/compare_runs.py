"""Prove that a refactor changed no output: the same specaudit CLI runs on two code trees, compared.

A layout refactor must not move a single p-value. This script runs one fixed set of CLI runs with
the tree "before" and the tree "after" and compares, run by run, the JSON results documents byte
for byte (re-serialised in their own key order), the exit codes and the terminal output. Only the
fields that differ between two runs of the *same* tree (wall times, the start timestamp: see
VOLATILE) are removed first, and absolute paths of the tree copies are written as <TREE>;
everything else, every statistic, p-value, count, power figure, diagnosis and verdict, must match.

    python benchmarks/compare_runs.py                        # after = this checkout, before = 7e7e8ac
    python benchmarks/compare_runs.py --before-ref main~3    # another git ref (a worktree under --workdir)
    python benchmarks/compare_runs.py --before /tmp/before --after /tmp/before   # a null check: all identical
    python benchmarks/compare_runs.py --no-kernels after     # numpy simulator in one tree: same results?

Runs (`runs`): the default suite; the same with --jobs 2; a 2-way sharded run and its merge; and
every chain mutant of the zoo on markov-v4 + corners with a fixed seed and fewer samples (p-values,
power and diagnosis are still computed). The two trees run side by side: about 2.5 minutes in all
on an idle 2-core machine.

Isolation: each tree is copied (git-tracked and untracked-but-not-ignored files, so no stale build
output and no edits landing mid-run), installed editable into its own venv under --workdir
(system site-packages for the dependencies, so the install is a few seconds), which also builds
its C kernels the same way. Every run goes through `python -I` (no cwd or PYTHONPATH on sys.path)
with no SPECAUDIT_* variables but a fresh SPECAUDIT_CACHE per tree, and records which files every
loaded specaudit module came from: a module from outside its own tree copy aborts the comparison.

Targets are named as in the before tree. When the after tree no longer has a target's module
(a documented move, MOVED or --moved OLD=NEW), its new name is used there and the results' target
field and header are read back under the old name; the script says so.

Exit status: 0 all runs identical, 1 some run differs, 2 the comparison could not be set up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BEFORE_REF = "7e7e8ac"
DEFAULT_WORKDIR = Path("/tmp/specaudit-compare-runs")

#: Fields that differ between two runs of the same tree, so are removed before comparing: exactly
#: those that differed when this script ran with --before and --after the same tree and
#: --strip-nothing (every other field matched byte for byte); `[*]` is any list index. All are
#: wall times or timestamps: the documents hold no host name, `version` is the package version
#: (no commit), and the only absolute paths are the tree's own (see TREE_MARK).
VOLATILE: dict[str, str] = {
    "$.started": "start time of the run (ISO timestamp; a merge takes its shards' earliest)",
    "$.seconds": "wall time of the run",
    "$.scenarios[*].seconds": "wall time of the scenario (blocks simulated + checks; a merge sums its shards')",
    "$.scenarios[*].verifier_seconds": "wall time inside the verifier",
    "$.scenarios[*].info.sensitivity.seconds": "wall time of the power figures",
    "$.scenarios[*].info.tally.seconds": "shard runs: wall time of the scenario's blocks",
    "$.scenarios[*].info.tally.rounds.verifier_seconds": "shard runs: wall time inside the verifier",
    "$.scenarios[*].rerun.seconds": "a SUSPECT scenario's re-run: its wall time",
    "$.scenarios[*].rerun.verifier_seconds": "a SUSPECT scenario's re-run: wall time inside the verifier",
    "$.scenarios[*].rerun.info.sensitivity.seconds": "a SUSPECT scenario's re-run: wall time of its power figures",
}

#: Absolute paths of a tree copy (a scenario's `path`) are written as this mark + the path inside
#: the tree, so the two copies' locations don't differ but a moved scenario file still does.
TREE_MARK = "<TREE>"

#: Target modules that the refactor moved (before name -> after name), used in the after tree only
#: when the before name no longer imports there.
MOVED: dict[str, str] = {
    "specaudit.reference": "specaudit.verifiers.reference",
    "specaudit.mutants": "specaudit.verifiers.zoo.chain",
}

REFERENCE = "specaudit.reference:verify"
ZOO = "specaudit.mutants"  # the chain mutant registry: module-level MUTANTS, every entry a CLI target
ZOO_OPTIONS = ("-s", "markov-v4", "-s", "corners", "--seed", "1", "--samples", "60000")
SHARD_OPTIONS = ("--seed", "1")


@dataclass(frozen=True)
class Run:
    """One CLI call; `args` name targets by their before-tree module (see `concrete`)."""

    name: str
    args: tuple[str, ...]
    json: str  # the results file it writes, relative to the run folder
    target: str  # the target its results name (a merge: its shards')
    expect: int  # exit code expected of a correct tree (a mismatch is only reported)


def runs(zoo: list[str]) -> list[Run]:
    """Return the runs to compare, in the order they run (the shards before their merge)."""
    out = [
        Run("default", ("run", REFERENCE, "--json", "default.json"), "default.json", REFERENCE, 0),
        Run("jobs-2", ("run", REFERENCE, "--jobs", "2", "--json", "jobs2.json"), "jobs2.json", REFERENCE, 0),
        *(Run(f"shard-{i}/2", ("run", REFERENCE, *SHARD_OPTIONS, "--shard", f"{i}/2", "--json", f"shard{i}.json"),
              f"shard{i}.json", REFERENCE, 0) for i in (0, 1)),
        Run("merge", ("merge", "shard0.json", "shard1.json", "--json", "merged.json"), "merged.json", REFERENCE, 0),
    ]
    for name in zoo:  # every mutant must be caught: exit 1
        target = f"{ZOO}:{name}"
        out.append(Run(f"zoo:{name}", ("run", target, *ZOO_OPTIONS, "--json", f"zoo-{name}.json"), f"zoo-{name}.json",
                       target, 1))
    return out


# Run inside a tree's venv as `python -I -c WRAPPER ARGS...`: the CLI, then (at exit, in the main
# process only) the files of every specaudit module it loaded and which compiled kernels it used.
WRAPPER = r"""
import atexit, json, os, sys

def _provenance(pid=os.getpid()):
    if os.getpid() != pid:
        return
    root = os.path.realpath(os.environ["COMPARE_RUNS_TREE"])
    outside, kernels, count = [], [], 0
    for name, mod in sorted(sys.modules.items()):
        if mod is None or (name != "specaudit" and not name.startswith("specaudit.")):
            continue
        count += 1
        where = getattr(mod, "__file__", None)
        for f in [where] if where else list(getattr(mod, "__path__", None) or []):
            if os.path.commonpath([root, os.path.realpath(f)]) != root:
                outside.append(name + ": " + f)
        if name.rsplit(".", 1)[-1] == "_kernels":
            kernels.append(name)
    with open(os.environ["COMPARE_RUNS_PROVENANCE"], "w") as fh:
        json.dump({"modules": count, "outside": outside, "kernels": kernels}, fh)

atexit.register(_provenance)
sys.argv[0] = "specaudit"
from specaudit.cli import main
main()
"""

# Run once per tree after the install: where specaudit and its shipped scenarios resolve from, the
# concrete module of each target module, the zoo registry, and the compiled kernels built.
PROBE = r"""
import importlib, json, os, sys
root = os.path.realpath(sys.argv[1])
wanted = json.loads(sys.argv[2])  # {before module: [candidates]}
zoo = sys.argv[3]
inside = lambda f: os.path.commonpath([root, os.path.realpath(f)]) == root
import specaudit, specaudit.shipped
out = {"specaudit": specaudit.__file__, "shipped": list(specaudit.shipped.__path__), "modules": {}, "errors": {}}
out["isolated"] = inside(specaudit.__file__) and all(inside(p) for p in specaudit.shipped.__path__)
for module, candidates in wanted.items():
    for c in candidates:
        try:
            importlib.import_module(c)
        except Exception as exc:  # a tree mid-refactor may fail in any way: its runs will show it
            out["errors"].setdefault(module, []).append(f"{c}: {type(exc).__name__}: {exc}")
        else:
            out["modules"][module] = c
            break
zoo_module = out["modules"].get(zoo)
out["zoo"] = list(getattr(importlib.import_module(zoo_module), "MUTANTS", None) or []) if zoo_module else None
out["kernels_built"] = sorted(
    os.path.relpath(os.path.join(d, f), root)
    for d, _, files in os.walk(os.path.join(root, "specaudit")) for f in files
    if f.startswith("_kernels") and f.endswith((".so", ".pyd"))
)
print(json.dumps(out))
"""


class SetupError(Exception):
    """The comparison cannot be made (install failed, a tree leaks into the other, ...)."""


@dataclass
class Tree:
    """One side of the comparison: its source, its copy, venv, cache and run folder."""

    label: str
    source: Path
    home: Path  # workdir/<label>
    no_kernels: bool = False
    probe: dict[str, Any] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def copy(self) -> Path:
        return self.home / "src"

    @property
    def venv(self) -> Path:
        return self.home / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def rundir(self) -> Path:
        return self.home / "runs"

    def concrete(self, arg: str) -> str:
        """Return ``arg`` with a target module replaced by its name in this tree."""
        module, sep, attr = arg.partition(":")
        return f"{self.probe['modules'][module]}:{attr}" if sep and module in self.probe.get("modules", {}) else arg


def sh(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """Run ``cmd``, capturing its output as text."""
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)


def before_worktree(ref: str, workdir: Path) -> Path:
    """Return a git worktree of ``ref`` under ``workdir`` (created, or reused when at that commit)."""
    commit = sh(["git", "-C", str(REPO), "rev-parse", "--verify", f"{ref}^{{commit}}"])
    if commit.returncode:
        raise SetupError(f"--before-ref {ref}: {commit.stderr.strip()}")
    sha = commit.stdout.strip()
    path = workdir / f"worktree-{sha[:12]}"
    if path.exists():
        head = sh(["git", "-C", str(path), "rev-parse", "HEAD"]).stdout.strip()
        if head == sha and not sh(["git", "-C", str(path), "status", "--porcelain"]).stdout.strip():
            return path
        sh(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)])
        shutil.rmtree(path, ignore_errors=True)
    sh(["git", "-C", str(REPO), "worktree", "prune"])
    added = sh(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), sha])
    if added.returncode:
        raise SetupError(f"git worktree add {path} {sha}: {added.stderr.strip()}")
    return path


def tree_files(src: Path) -> Iterator[Path]:
    """Yield the files of a tree, relative: git's tracked and untracked-not-ignored ones, or all but build output."""
    listed = sh(["git", "-C", str(src), "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    if listed.returncode == 0 and sh(["git", "-C", str(src), "rev-parse", "--show-prefix"]).stdout.strip() == "":
        for name in dict.fromkeys(listed.stdout.split("\0")):  # a path can be listed twice (merge stages)
            if name and (src / name).is_file():  # a deleted but still tracked file is skipped
                yield Path(name)
        return
    skip = {"__pycache__", ".git", "build", "dist", ".venv", ".pytest_cache"}
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in skip and not d.endswith(".egg-info")]
        for f in filenames:
            if not f.endswith((".so", ".pyd", ".pyc")):
                yield Path(dirpath, f).relative_to(src)


def prepare(tree: Tree, wanted: dict[str, list[str]]) -> None:
    """Copy the tree, install it editable into its venv (building its kernels), and probe the result."""
    tree.home.mkdir(parents=True, exist_ok=True)
    for path in (tree.copy, tree.rundir, tree.home / "cache"):
        shutil.rmtree(path, ignore_errors=True)
    for rel in tree_files(tree.source):
        (tree.copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree.source / rel, tree.copy / rel)
    if not (tree.copy / "pyproject.toml").is_file():
        raise SetupError(f"{tree.label}: {tree.source} is not a specaudit checkout (no pyproject.toml)")
    tree.rundir.mkdir()
    if not tree.python.exists():
        made = sh([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(tree.venv)])
        if made.returncode:
            raise SetupError(f"{tree.label}: venv: {made.stderr.strip()}")
    # --no-build-isolation: setuptools comes from the system (no download); dependencies that the
    # system lacks are installed into the venv, once.
    pip = sh([str(tree.python), "-m", "pip", "install", "-q", "--no-build-isolation", "-e", str(tree.copy)],
             env=clean_env(), cwd=tree.home)
    if pip.returncode:
        raise SetupError(f"{tree.label}: pip install -e failed:\n{pip.stdout}{pip.stderr}")
    probe = sh([str(tree.python), "-I", "-c", PROBE, str(tree.copy), json.dumps(wanted), ZOO],
               env=clean_env(), cwd=tree.rundir)
    if probe.returncode:
        raise SetupError(f"{tree.label}: cannot import specaudit from its venv:\n{probe.stderr}")
    tree.probe = json.loads(probe.stdout)
    if not tree.probe["isolated"]:
        raise SetupError(f"{tree.label}: specaudit resolves to {tree.probe['specaudit']} and specaudit.shipped to "
                         f"{tree.probe['shipped']}, not inside its copy {tree.copy}: the trees are not isolated")


def clean_env(tree: Tree | None = None) -> dict[str, str]:
    """Return the environment of a tree's commands: no PYTHON*, SPECAUDIT_* or CI-report variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "SPECAUDIT_")) and k not in ("GITHUB_ACTIONS", "VIRTUAL_ENV", "COLUMNS")}
    env["NO_COLOR"] = "1"
    if tree is not None:
        env["SPECAUDIT_CACHE"] = str(tree.home / "cache")  # fresh per tree and invocation
        env["COMPARE_RUNS_TREE"] = str(tree.copy)
        env["PATH"] = f"{tree.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        if tree.no_kernels:
            env["SPECAUDIT_NO_KERNELS"] = "1"
    return env


def execute(tree: Tree, run: Run) -> dict[str, Any]:
    """Run ``run`` in ``tree``; return its exit code, output, document, provenance and wall time."""
    env = clean_env(tree)
    provenance = tree.home / "provenance.json"
    provenance.unlink(missing_ok=True)
    env["COMPARE_RUNS_PROVENANCE"] = str(provenance)
    args = [tree.concrete(a) for a in run.args]
    t0 = time.perf_counter()
    done = sh([str(tree.python), "-I", "-c", WRAPPER, *args], env=env, cwd=tree.rundir, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    doc_path = tree.rundir / run.json
    doc = json.loads(doc_path.read_text()) if doc_path.is_file() else None
    prov = json.loads(provenance.read_text()) if provenance.is_file() else {"modules": 0, "outside": [], "kernels": []}
    if prov["outside"]:
        raise SetupError(f"{tree.label} {run.name}: modules loaded from outside {tree.copy}: {prov['outside']}")
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "doc": doc, "prov": prov,
            "seconds": seconds, "args": args}


# ------------------------------------------------------------------------------------------------
# Comparison
# ------------------------------------------------------------------------------------------------


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile(re.escape(path).replace(r"\[\*\]", r"\[\d+\]") + r"\Z")


VOLATILE_RE = [_pattern(p) for p in VOLATILE]


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][\w-]*", key) else f"{path}[{json.dumps(key)}]"


def normalise(value: Any, tree: Tree, path: str = "$") -> Any:
    """Return ``value`` without VOLATILE fields, the tree copy's path written as TREE_MARK."""
    if isinstance(value, dict):
        return {k: normalise(v, tree, _key(path, k)) for k, v in value.items()
                if not any(p.match(_key(path, k)) for p in VOLATILE_RE)}
    if isinstance(value, list):
        return [normalise(v, tree, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        return value.replace(str(tree.copy), TREE_MARK)
    return value


def logical_doc(doc: dict[str, Any], tree: Tree, run: Run) -> dict[str, Any]:
    """Return the normalised document with its target under its before-tree name."""
    out = normalise(doc, tree)
    if out.get("target") == tree.concrete(run.target):
        out["target"] = run.target
    return out


def logical_stdout(text: str, tree: Tree, run: Run) -> list[str]:
    """Return the terminal output's lines, the timing of the verdict line and trailing blanks removed."""
    target = run.target
    lines = []
    for line in text.replace(str(tree.copy), TREE_MARK).splitlines():
        line = line.rstrip()
        if line.startswith("specaudit ") and line.endswith(": " + tree.concrete(target)):
            line = line[: -len(tree.concrete(target))] + target
        lines.append(re.sub(r"^(specaudit: [A-Z]+ .*), [\d.]+s$", r"\1, <seconds>s", line))
    return lines


def differences(a: Any, b: Any, path: str = "$") -> Iterator[tuple[str, Any, Any]]:
    """Yield (path, before, after) for every leaf where ``a`` and ``b`` differ, in document order."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in dict.fromkeys([*a, *b]):
            yield from differences(a.get(k, "<absent>"), b.get(k, "<absent>"), _key(path, k))
        if list(a) != list(b) and set(a) == set(b):
            yield f"{path} (key order)", list(a), list(b)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            yield from differences(a[i] if i < len(a) else "<absent>", b[i] if i < len(b) else "<absent>", f"{path}[{i}]")
    elif type(a) is not type(b) or a != b:
        yield path, a, b


def compare(run: Run, before: Tree, after: Tree, max_diffs: int) -> list[str]:
    """Return the report lines of a run's differences (empty when identical)."""
    b, a = before.results[run.name], after.results[run.name]
    out = []
    if b["rc"] != a["rc"]:
        out.append(f"  exit code: before {b['rc']}, after {a['rc']}")
    if (b["doc"] is None) != (a["doc"] is None):
        out.append(f"  results file {run.json}: {'only after' if b['doc'] is None else 'only before'} wrote it")
    elif b["doc"] is not None:
        db, da = logical_doc(b["doc"], before, run), logical_doc(a["doc"], after, run)
        if json.dumps(db, indent=1) != json.dumps(da, indent=1):
            diffs = list(differences(db, da))
            out.append(f"  --- before/{run.json}\n  +++ after/{run.json}  ({len(diffs)} differing fields)")
            for path, vb, va in diffs[:max_diffs]:
                out.append(f"  @@ {path}\n  - {json.dumps(vb)[:300]}\n  + {json.dumps(va)[:300]}")
            if len(diffs) > max_diffs:
                out.append(f"  ... {len(diffs) - max_diffs} more (--max-diffs)")
    sb, sa = logical_stdout(b["stdout"], before, run), logical_stdout(a["stdout"], after, run)
    if sb != sa:
        import difflib

        diff = list(difflib.unified_diff(sb, sa, "before/stdout", "after/stdout", n=1, lineterm=""))
        out.append("  terminal output differs:")
        out.extend("  " + line for line in diff[: 3 * max_diffs])
    if out and (b["rc"] not in (0, 1) or a["rc"] not in (0, 1)):  # a crash: show its last words
        for label, r in (("before", b), ("after", a)):
            if r["rc"] not in (0, 1):
                out.append(f"  {label} stderr (last lines):")
                out.extend("    " + line for line in r["stderr"].rstrip().splitlines()[-12:])
    return out


def both(serial: bool, first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
    """Return the values of two independent calls, made side by side (one per core) unless ``serial``."""
    if serial:
        return first(), second()
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.submit(first), pool.submit(second)
        return a.result(), b.result()


def describe(tree: Tree) -> str:
    """Return a tree's provenance line: its source, copy, kernels built, and how its targets resolve."""
    p = tree.probe
    kernels = ", ".join(p["kernels_built"]) or "none built"
    moved = [f"{m} -> {c}" for m, c in p["modules"].items() if m != c]
    return (f"{tree.label}: {tree.source} (copy {tree.copy}); specaudit from {Path(p['specaudit']).parent}, "
            f"shipped scenarios from {', '.join(p['shipped'])}; compiled kernels: {kernels}"
            f"{' (switched off: SPECAUDIT_NO_KERNELS=1)' if tree.no_kernels else ''}"
            + (f"; moved target modules: {', '.join(moved)}" if moved else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="the before tree (default: a worktree of --before-ref)")
    parser.add_argument("--before-ref", default=DEFAULT_BEFORE_REF, help="git ref of the before tree (default %(default)s)")
    parser.add_argument("--after", type=Path, default=REPO, help="the after tree (default: this checkout, %(default)s)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                        help="venvs, tree copies, caches and results (default %(default)s; venvs are reused)")
    parser.add_argument("--moved", action="append", default=[], metavar="OLD=NEW",
                        help="a target module's name in the after tree, when the before name no longer imports there")
    parser.add_argument("--no-kernels", choices=("before", "after", "both"),
                        help="run this tree's simulator on numpy (SPECAUDIT_NO_KERNELS=1), e.g. to check kernels change nothing")
    parser.add_argument("--only", action="append", default=[], metavar="RUN",
                        help="compare only runs whose name starts with RUN (repeatable; merge needs its shards)")
    parser.add_argument("--serial", action="store_true",
                        help="run the trees one after the other (default: side by side, the outputs never depend on it)")
    parser.add_argument("--strip-nothing", action="store_true",
                        help="keep the VOLATILE fields too: with the same tree on both sides, shows which fields are noise")
    parser.add_argument("--max-diffs", type=int, default=10, help="differing fields shown per run (default %(default)s)")
    args = parser.parse_args(argv)
    if args.strip_nothing:
        VOLATILE_RE.clear()
    t_start = time.perf_counter()
    moved = dict(MOVED)
    for item in args.moved:
        old, sep, new = item.partition("=")
        if not sep:
            parser.error(f"--moved {item}: expected OLD=NEW")
        moved[old] = new
    try:
        workdir = args.workdir.resolve()
        before_src = args.before.resolve() if args.before else before_worktree(args.before_ref, workdir)
        no_kernels = {args.no_kernels} & {"before", "both"}, {args.no_kernels} & {"after", "both"}
        before = Tree("before", before_src, workdir / "before", bool(no_kernels[0]))
        after = Tree("after", args.after.resolve(), workdir / "after", bool(no_kernels[1]))
        modules = [REFERENCE.partition(":")[0], ZOO]
        both(args.serial, lambda: prepare(before, {m: [m] for m in modules}),
             lambda: prepare(after, {m: [m, moved[m]] if m in moved else [m] for m in modules}))
        for tree in (before, after):
            print(describe(tree), flush=True)
        missing = [m for m in modules if m not in before.probe["modules"]]
        if missing:
            raise SetupError(f"before: cannot import {missing}: {before.probe['errors']}")
        if bool(before.probe["kernels_built"]) != bool(after.probe["kernels_built"]):
            raise SetupError("one tree built compiled kernels and the other did not (see above); both must be "
                             "built alike (use --no-kernels to compare with the numpy simulator on purpose)")
        for m in modules:
            if m not in after.probe["modules"]:
                print(f"note: after: {m} does not import ({'; '.join(after.probe['errors'].get(m, []))}); "
                      "its runs will fail there (--moved OLD=NEW names its new place)")
        zoo = before.probe["zoo"]
        notes = []
        if after.probe.get("zoo") is not None and after.probe["zoo"] != zoo:
            notes.append(f"zoo registry: before {zoo}\n  after  {after.probe['zoo']}")
        selected = [r for r in runs(zoo) if not args.only or any(r.name.startswith(o) for o in args.only)]
        if not selected:
            raise SetupError(f"--only {args.only}: no run matches; runs: {', '.join(r.name for r in runs(zoo))}")
        print(f"{len(selected)} runs per tree: {', '.join(r.name for r in selected)}", flush=True)
        for run in selected:  # in step: a merge runs after its shards in each tree
            rb, ra = both(args.serial, lambda r=run: execute(before, r), lambda r=run: execute(after, r))
            before.results[run.name], after.results[run.name] = rb, ra
    except SetupError as exc:
        print(f"compare_runs: cannot compare: {exc}", file=sys.stderr)
        return 2

    differ = 0
    for run in selected:
        b, a = before.results[run.name], after.results[run.name]
        kern = "/".join("C kernels" if r["prov"]["kernels"] else "numpy" if r["doc"] and r["doc"].get("scenarios") else "-"
                        for r in (b, a))
        lines = compare(run, before, after, args.max_diffs)
        unexpected = [f"{label} exited {r['rc']}" for label, r in (("before", b), ("after", a)) if r["rc"] != run.expect]
        differ += bool(lines)
        status = "DIFFERS" if lines else "identical"
        print(f"{run.name:<28} {status:<9}  exit {b['rc']}/{a['rc']}  {b['seconds']:5.1f}s/{a['seconds']:5.1f}s  "
              f"simulator {kern}" + (f"  (expected exit {run.expect}: {', '.join(unexpected)})" if unexpected else ""))
        for line in lines:
            print(line)
    for note in notes:
        differ += 1
        print(f"DIFFERS {note}")
    compared = len(selected) + len(notes)
    print(f"stripped fields: {', '.join(VOLATILE) if VOLATILE_RE else 'none (--strip-nothing)'}; tree paths as {TREE_MARK}")
    print(f"{compared} runs compared, {differ} differ  ({time.perf_counter() - t_start:.0f}s)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
