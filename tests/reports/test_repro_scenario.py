"""Statistical findings as repro files: the scenario inline, re-run through assert_lossless at a planned N.

Positive and negative controls: the file fails on the mutant whose joint law failed and passes with
SPECAUDIT_REPRO_TARGET set to the reference; exact-scenario findings without a call get none; a scenario
changed or gone since the run is a usage error (exit 4) with nothing written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from specaudit.cli import main
from specaudit.errors import ExitCode

REFERENCE = "specaudit.verifiers.reference:verify"
NAME = "test_repro_markov_v4_statistical.py"


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    """A resample_from_p run on markov-v4 (its joint law fails) and corners, and its repro folder: (folder, json, output)."""
    base = tmp_path_factory.mktemp("stat")
    got = CliRunner().invoke(main, ["run", "mutant:resample_from_p", "-s", "markov-v4", "-s", "corners", "--samples", "2000",
                                    "--seed", "4", "--no-power", "--json", str(base / "r.json")])
    assert got.exit_code == ExitCode.CHECKS_FAILED, got.output
    out = CliRunner().invoke(main, ["repro", str(base / "r.json"), "-o", str(base / "repro")])
    assert out.exit_code == ExitCode.OK, out.output
    return base / "repro", base / "r.json", out.output


def _pytest(path: Path, target: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPECAUDIT_REPRO_TARGET"}
    if target is not None:
        env["SPECAUDIT_REPRO_TARGET"] = target
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p",
                           "no:randomly", str(path)], capture_output=True, text=True, env=env, timeout=300, cwd=path.parent)


def test_the_statistical_repro_fails_on_the_mutant_and_passes_on_the_reference(found):
    folder, _, output = found
    assert f"{NAME}: markov-v4 / joint-law, the scenario re-run at N = " in output
    assert sorted(p.name for p in folder.iterdir()) == [NAME]  # corners' exact finding recorded no call: none
    bad = _pytest(folder / NAME, None)
    assert bad.returncode == 1 and "joint-law" in bad.stdout, bad.stdout[-2000:]
    good = _pytest(folder / NAME, REFERENCE)
    assert good.returncode == 0, good.stdout[-2000:]


def test_the_file_states_its_size_how_it_was_planned_and_its_false_alarm_rate(found):
    folder, _, _ = found
    text = (folder / NAME).read_text()
    assert "power 0.99 against the joint law the run observed" in text and "Holm's first step" in text
    assert "A lossless verifier fails this file with probability at most 0.001" in text
    assert "name: markov-v4" in text and "SEED = 5" in text and "specaudit.assert_lossless(TARGET" in text
    samples = int(next(line for line in text.splitlines() if line.startswith("SAMPLES = ")).split("=")[1])
    assert 100 <= samples < 2000  # a strong departure (TV ~0.2) needs far fewer than the run's 2,000


@pytest.mark.parametrize("change", ["changed", "gone"])
def test_a_scenario_changed_or_gone_since_the_run_is_a_usage_error_and_nothing_is_written(found, tmp_path, change):
    _, results, _ = found
    doc = json.loads(results.read_text())
    scenario = next(s for s in doc["scenarios"] if s["name"] == "markov-v4")
    if change == "changed":
        scenario["content_hash"] = "0" * 16
    else:
        scenario["name"], scenario["path"] = "no-such-scenario", str(tmp_path / "gone.yaml")
    doc["scenarios"] = [scenario]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    got = CliRunner().invoke(main, ["repro", str(edited), "-o", str(tmp_path / "repro")])
    assert got.exit_code == ExitCode.USAGE_ERROR, got.output
    assert ("has changed since the run" if change == "changed" else "is gone and it is not a shipped scenario") in got.output
    assert not (tmp_path / "repro").exists()


@pytest.mark.parametrize("counts", [{"observed": ["a", "b"]}, {"observed": [1.0, -2.0]}, {"expected": [1.0]},
                                    {"observed": ["nan", 1.0]}])
def test_malformed_joint_law_counts_are_a_usage_error(found, tmp_path, counts):
    _, results, _ = found
    doc = json.loads(results.read_text())
    scenario = next(s for s in doc["scenarios"] if s["name"] == "markov-v4")
    joint = next(c for c in scenario["checks"] if c["name"] == "joint-law")
    joint["data"] = {**joint["data"], "observed": [3.0, 1.0], "expected": [2.0, 2.0], **counts}
    doc["scenarios"] = [scenario]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    got = CliRunner().invoke(main, ["repro", str(edited), "-o", str(tmp_path / "repro")])
    assert got.exit_code == ExitCode.USAGE_ERROR, got.output
    assert "joint-law" in got.output and not (tmp_path / "repro").exists()
