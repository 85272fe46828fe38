"""`specaudit repro` of a failed `stops` check: one forced row, numpy and the target only.

Positive and negative controls for each stop mutant: its file fails against the mutant and passes with
SPECAUDIT_REPRO_TARGET set to the reference; it imports no specaudit module; its row is one row with at
most two drafts (three where the case needs them); `run --repro` writes the same file. A finding that
no longer fails on the target is said and not written.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specaudit.errors import ExitCode

REFERENCE = "specaudit.verifiers.stops:verify"
#: Each mutant, the case its repro rebuilds (its first failing case in the check's order), and that case's fewest drafts.
MUTANTS = {"stop_last_token_only": ("mid-block-stop", 2), "cap_before_stop": ("stop-inside-budget", 2),
           "budget_ignored": ("length", 2)}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Run each mutant on the stops scenario and write its repro: {mutant: (file, repro output, results path)}."""
    from click.testing import CliRunner

    from specaudit.cli import main

    done = {}
    for mutant in MUTANTS:
        base = tmp_path_factory.mktemp(mutant)
        got = CliRunner().invoke(main, ["run", f"specaudit.verifiers.zoo.stops:{mutant}", "-s", "stops", "--json",
                                        str(base / "r.json")])
        assert got.exit_code == ExitCode.CHECKS_FAILED, got.output
        got = CliRunner().invoke(main, ["repro", str(base / "r.json"), "-o", str(base / "repro")])
        assert got.exit_code == ExitCode.OK, got.output
        files = sorted((base / "repro").glob("test_repro_*.py"))
        assert [f.name for f in files] == ["test_repro_stops_stops.py"], got.output
        done[mutant] = (files[0], got.output, base / "r.json")
    return done


def _pytest(path: Path, target: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPECAUDIT_REPRO_TARGET"}
    if target is not None:
        env["SPECAUDIT_REPRO_TARGET"] = target
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:specaudit",
                           str(path)], cwd=path.parent, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_stops_repro_fails_on_its_mutant_and_passes_on_the_reference(written, mutant):
    path, output, _ = written[mutant]
    case, _ = MUTANTS[mutant]
    assert f"stops / stops ({case}), rebuilt from 48 row(s), K = 4, V = 8 as 1 forced row" in output
    bad = _pytest(path)
    assert bad.returncode == 1 and "AssertionError" in bad.stdout, bad.stdout + bad.stderr
    assert "expected" in bad.stdout and "got" in bad.stdout
    good = _pytest(path, REFERENCE)
    assert good.returncode == 0, good.stdout + good.stderr


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_stops_repro_imports_numpy_and_the_target_only_and_has_one_short_row(written, mutant):
    path, _, _ = written[mutant]
    text = path.read_text()
    tree = ast.parse(text)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"collections", "importlib", "os", "numpy"}, imported
    _, drafts = MUTANTS[mutant]
    assert f"One forced row: K = {drafts}, V = 8" in text
    namespace: dict = {}
    exec(compile(text.split("\ndef load(")[0], str(path), "exec"), namespace)  # the constants only
    assert namespace["DRAFT"].shape == (1, drafts) and namespace["P"].shape == (1, drafts + 1, 8)


def test_run_repro_writes_the_same_file(cli, tmp_path, written):
    res = cli("run", "specaudit.verifiers.zoo.stops:budget_ignored", "-s", "stops", "--repro", tmp_path / "r",
              "--json", tmp_path / "r.json")
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert (tmp_path / "r" / "test_repro_stops_stops.py").read_text() == written["budget_ignored"][0].read_text()
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["scenarios"][0]["info"]["repro"] == [{"name": "test_repro_stops_stops.py", "check": "stops"}]


def test_a_stops_finding_fixed_since_is_said_and_not_written(cli, tmp_path, written):
    doc = json.loads(written["cap_before_stop"][2].read_text())
    doc["target"] = REFERENCE  # the run's target now keeps the stop rule
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(doc))
    res = cli("repro", fixed, "-o", tmp_path / "out")
    assert res.exit_code == ExitCode.OK, res.output
    assert "stops / stops: the recorded call no longer fails" in res.output
    assert not list((tmp_path / "out").glob("*.py")) if (tmp_path / "out").exists() else True
