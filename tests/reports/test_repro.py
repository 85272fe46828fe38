"""`specaudit repro`: each failed exact finding as a self-contained pytest file.

Positive and negative controls for every file written: it fails against the mutant that produced
it and passes with SPECAUDIT_REPRO_TARGET set to the reference verifier; it imports no specaudit
module; the shrunk call is one row with at most two drafts. Hostile inputs: a results file with no
failure, a truncated one, one whose target no longer imports.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from click.testing import CliRunner

from specaudit.cli import main
from specaudit.errors import ExitCode

REFERENCE = "specaudit.verifiers.reference:verify"
TREE_REFERENCE = "specaudit.verifiers.tree:verify"
#: (mutant, scenario, the check whose repro must be written, the reference it passes on): a boundary bug, a lost
#: bonus token, a verifier that reads the padding past num_draft (two calls that differ there), one that writes
#: into its inputs (the inputs after the call), one that draws from numpy's global RNG (the same seed repeated),
#: a tree verifier's boundary bug (the tree contract)
CASES = [("leq_ratio", "corners", "adversarial-uniforms", REFERENCE),
         ("no_bonus", "corners", "corner-p-equals-q", REFERENCE),
         ("bonus_from_last", "corners", "padding-independence", REFERENCE),
         ("writes_target_probs", "corners", "inputs-unmodified", REFERENCE),
         ("global_generator", "corners", "determinism", REFERENCE),
         ("tree_leq_ratio", "tree-iid-v4", "tree-adversarial-uniforms", TREE_REFERENCE)]
MUTANTS = [(mutant, check) for mutant, _, check, _ in CASES]


def _name(mutant: str) -> str:
    """Return the repro file the mutant's case must write (without .py)."""
    _, scenario, check, _ = next(c for c in CASES if c[0] == mutant)
    return f"test_repro_{scenario.replace('-', '_')}_{check.replace('-', '_')}"


def _run(target: str, out: Path, scenario: str = "corners") -> None:
    got = CliRunner().invoke(main, ["run", target, "-s", scenario, "--samples", "2000", "--no-power", "--json", str(out)])
    assert got.exit_code in (ExitCode.OK, ExitCode.CHECKS_FAILED), got.output


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Run each mutant on its scenario and write its repro files: {mutant: (folder, repro output)}."""
    done = {}
    for mutant, scenario, _, _ in CASES:
        base = tmp_path_factory.mktemp(mutant)
        _run(f"mutant:{mutant}", base / "r.json", scenario)
        got = CliRunner().invoke(main, ["repro", str(base / "r.json"), "-o", str(base / "repro")])
        assert got.exit_code == ExitCode.OK, got.output
        done[mutant] = (base / "repro", got.output)
    return done


def _pytest(paths: list[Path], target: str | None, report: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPECAUDIT_REPRO_TARGET"}
    if target is not None:
        env["SPECAUDIT_REPRO_TARGET"] = target
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:specaudit", "-p", "no:randomly", f"--junitxml={report}", *map(str, paths)],
                          capture_output=True, text=True, env=env, timeout=120)


#: The large-vocabulary call: V tokens, K = 2, one row (shrunk to K = 1: 3 V + 2 numbers; the shrinker's 400 replays
#: leave about V - 400 tokens, still above the inline limit).
LARGE_V = 8000


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """A leq_ratio call of LARGE_V tokens (draft 0 has p = 0 and q > 0, uniforms 0.0 first) written as a repro:
    (folder, the repros)."""
    import numpy as np

    from specaudit.checks.replay import Call
    from specaudit.reports.repro import Finding, build, write_all

    rng = np.random.default_rng(36)
    q = rng.dirichlet(np.ones(LARGE_V), size=(1, 2))
    p = rng.dirichlet(np.ones(LARGE_V), size=(1, 3))
    p[0, 0, 0] = 0.0
    p[0, 0] /= p[0, 0].sum()
    call = Call(np.array([[0, 1]]), q, p, np.array([2]), {"kind": "scripted", "start": 0, "skip": 0, "seed": 1},
                "p-positive")
    doc = {"target": "mutant:leq_ratio", "version": "test"}
    repros, gone = build(doc, [Finding("large-v", "adversarial-uniforms", "a p = 0 draft accepted", call)],
                         "mutant:leq_ratio")
    assert not gone and len(repros) == 1
    folder = tmp_path_factory.mktemp("large") / "repro"
    write_all(repros, folder)
    return folder, repros


def test_inputs_above_the_size_limit_go_to_an_npz_beside_the_file(large):
    from specaudit.reports.repro import INLINE_NUMBERS, inputs_of

    folder, (repro,) = large
    numbers = sum(a.size for a in inputs_of(repro.shrunk.call).values())
    assert numbers > INLINE_NUMBERS, repro.shrunk.after  # still large after shrinking
    assert sorted(p.name for p in folder.iterdir()) == sorted([repro.name, repro.data_name])
    assert repro.data_name == "test_repro_large_v_adversarial_uniforms.npz"
    text = repro.text
    assert f"os.path.dirname(os.path.abspath(__file__)), {repro.data_name!r}" in text
    assert len(text) < 10_000  # the numbers are not inline


@pytest.fixture(scope="module")
def outcomes(written, large, tmp_path_factory):
    """Run the repro files written against their own targets (one pytest run), then against each reference (one run
    per reference): {target or None: {file name without .py: the failure message, "" when it passed}}."""
    paths = {mutant: written[mutant][0] / f"{_name(mutant)}.py" for mutant, *_ in CASES}
    missing = [p for p in paths.values() if not p.exists()]
    assert not missing, missing
    done = {}
    large_path = large[0] / large[1][0].name
    for target in (None, REFERENCE, TREE_REFERENCE):
        chosen = [paths[m] for m, _, _, ref in CASES if target in (None, ref)]
        chosen += [large_path] if target in (None, REFERENCE) else []
        report = tmp_path_factory.mktemp("junit") / "report.xml"
        got = _pytest(chosen, target, report)
        assert got.returncode in (0, 1), got.stdout[-3000:]
        cases = ElementTree.parse(report).getroot().iter("testcase")
        done[target] = {Path(c.get("file") or c.get("classname", "").replace(".", "/")).name.removesuffix(".py"):
                        next((f.get("message", "") for f in c if f.tag in ("failure", "error")), "") for c in cases}
    return done


@pytest.mark.parametrize(("mutant", "scenario", "check", "reference"), CASES)
def test_a_repro_fails_on_its_mutant_and_passes_on_the_reference(outcomes, mutant, scenario, check, reference):
    name = _name(mutant)
    bad, good = outcomes[None], outcomes[reference]
    assert name in bad and name in good, (bad, good)
    assert bad[name].startswith("AssertionError: expected"), bad[name]  # the rule's assertion, not a crash
    assert good[name] == "", good[name]


def test_a_repro_with_its_inputs_in_an_npz_fails_on_its_mutant_and_passes_on_the_reference(outcomes, large):
    name = large[1][0].name.removesuffix(".py")
    assert outcomes[None][name].startswith("AssertionError: expected"), outcomes[None][name]
    assert outcomes[REFERENCE][name] == "", outcomes[REFERENCE][name]


@pytest.mark.parametrize(("mutant", "check"), MUTANTS)
def test_a_repro_imports_numpy_and_the_target_only_and_is_shrunk(written, mutant, check):
    folder, output = written[mutant]
    path = folder / f"{_name(mutant)}.py"
    tree = ast.parse(path.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "specaudit" not in imported and "numpy" in imported, imported
    line = next(x for x in output.splitlines() if path.name in x)
    assert "to 1 row(s)" in line, line
    k = int(line.rsplit("K = ", 1)[1].split(",")[0])
    assert k <= 2, line


def test_a_passing_run_has_nothing_to_reproduce(tmp_path):
    _run(REFERENCE, tmp_path / "r.json")
    got = CliRunner().invoke(main, ["repro", str(tmp_path / "r.json"), "-o", str(tmp_path / "repro")])
    assert got.exit_code == ExitCode.OK, got.output
    assert "nothing to reproduce" in got.output
    assert not (tmp_path / "repro").exists()


def test_a_truncated_results_file_is_a_usage_error_and_nothing_is_written(tmp_path, written):
    folder, _ = written["leq_ratio"]
    source = folder.parent / "r.json"
    broken = tmp_path / "r.json"
    broken.write_text(source.read_text()[: len(source.read_text()) // 2])
    got = CliRunner().invoke(main, ["repro", str(broken), "-o", str(tmp_path / "repro")])
    assert got.exit_code == ExitCode.USAGE_ERROR, got.output
    assert "r.json" in got.output
    assert not (tmp_path / "repro").exists()


def test_a_target_that_no_longer_imports_is_a_usage_error_and_nothing_is_written(tmp_path, written):
    folder, _ = written["leq_ratio"]
    doc = json.loads((folder.parent / "r.json").read_text())
    doc["target"] = "no_such_module_here:verify"
    moved = tmp_path / "r.json"
    moved.write_text(json.dumps(doc))
    got = CliRunner().invoke(main, ["repro", str(moved), "-o", str(tmp_path / "repro")])
    assert got.exit_code == ExitCode.USAGE_ERROR, got.output
    assert "no_such_module_here" in got.output
    assert not (tmp_path / "repro").exists()


def test_a_results_file_of_another_schema_version_is_a_usage_error_and_nothing_is_written(tmp_path, written):
    folder, _ = written["leq_ratio"]
    doc = json.loads((folder.parent / "r.json").read_text())
    doc["schema_version"] = 99
    other = tmp_path / "r.json"
    other.write_text(json.dumps(doc))
    got = CliRunner().invoke(main, ["repro", str(other), "-o", str(tmp_path / "repro")])
    assert got.exit_code == ExitCode.USAGE_ERROR, got.output
    assert "schema_version 99" in got.output, got.output
    assert not (tmp_path / "repro").exists()


def test_a_verifier_whose_output_ignores_the_seed_gets_an_other_seed_repro(tmp_path):
    # determinism's second clause (another seed -> another output) failed by a verifier that restarts a constant
    # seed on every call: the repro calls through 32 seeds; it fails on that verifier, passes on the reference
    broken = Path(__file__).resolve().parents[1] / "verifiers" / "exact_broken.py"
    _run(f"{broken}:fixed_seed", tmp_path / "r.json")
    got = CliRunner().invoke(main, ["repro", str(tmp_path / "r.json"), "-o", str(tmp_path / "repro")])
    assert got.exit_code == ExitCode.OK and "corners / determinism, shrunk from 64 row(s)" in got.output, got.output
    path = tmp_path / "repro" / "test_repro_corners_determinism.py"
    text = path.read_text()
    assert "another rng seed gives another output" in text and "np.random.default_rng(seed) for seed in range(1, 32)" in text
    assert "DRAFT = np.array([[]], dtype=np.int64).reshape((1, 0))" in text  # shrunk to one row, no drafts
    bad = _pytest([path], None, tmp_path / "bad.xml")
    assert bad.returncode == 1 and "expected another seed to give another output" in bad.stdout, bad.stdout[-2000:]
    good = _pytest([path], REFERENCE, tmp_path / "good.xml")
    assert good.returncode == 0, good.stdout[-2000:]


def test_the_other_seed_replay_sees_a_constant_output_only():
    import numpy as np

    from specaudit.checks.replay import Call, replay, source_of
    from specaudit.verifiers.reference import verify

    p = np.full((4, 1, 3), 1 / 3)
    call = Call(np.zeros((4, 0), dtype=np.int64), np.zeros((4, 0, 3)), p, np.zeros(4, dtype=np.int64),
                source_of(np.random.default_rng(5)), "other-seed")
    assert replay(verify, call) is None  # the reference's output moves with the seed
    found = replay(lambda d, q, pp, n, rng: verify(d, q, pp, n, np.random.default_rng(0)), call)
    assert found is not None and "all 32 seeds gave" in found.got
