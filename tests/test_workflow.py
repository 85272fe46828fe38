"""The GitHub Action (``action.yml``), this repository's workflow that uses it, and the README's recipe.

``action.yml`` is a composite action; its ``run:`` steps are executed here as GitHub's runner
would (``bash -e -c``, ``GITHUB_ACTIONS=true``, ``GITHUB_ACTION_PATH``, ``GITHUB_STEP_SUMMARY``,
``GITHUB_OUTPUT``, the step's ``env`` with ``${{ inputs.NAME }}`` replaced by the input) in a fresh
virtual environment (made ``--without-pip``: its ``pip`` is this interpreter's pip run by the
venv's python, so the install uses this interpreter's setuptools, not the older one a venv bundles):

- the install step ``python -m pip install "$GITHUB_ACTION_PATH"`` installs a copy of this checkout
  (the action's path: for ``uses: ./``, the workspace itself) offline (``--no-deps
  --no-build-isolation --no-index``: the dependencies come from this interpreter's site-packages,
  which the venv sees), and the test checks that what it installed is this project under its
  distribution name;
- the audit step runs ``.github/action/run.sh`` with the inputs of ``.github/workflows/specaudit.yml``
  (the reference verifier on the default suite, at full size): it must exit 0 and write the JSON,
  JUnit and HTML files the upload step collects, the Markdown summary and the step's outputs; a
  broken verifier must exit 1 with ``::error`` annotations and ``status=failed``;
- ``uses:`` steps (setup-python, upload-artifact) are GitHub's part and are not run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from specaudit.errors import ExitCode
from specaudit.results.schema import validate

ROOT = Path(__file__).resolve().parents[1]
ACTION = ROOT / "action.yml"
WORKFLOW = ROOT / ".github" / "workflows" / "specaudit.yml"
SCRIPT = ".github/action/run.sh"
# not copied into the test's checkout: build outputs, caches, VCS data (and the top-level reports/ folder)
_IGNORE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".venv",
                                 ".mypy_cache", ".ruff_cache", ".pytest_cache", ".import_linter_cache")
_EXPRESSION = re.compile(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}")


def not_copied(folder: str, names: list[str]) -> set[str]:
    """Return the names not to copy from ``folder`` (shutil.copytree's ``ignore``)."""
    return set(_IGNORE(folder, names)) | ({"reports"} if Path(folder) == ROOT else set())


def action() -> dict[str, Any]:
    doc = yaml.safe_load(ACTION.read_text())
    assert isinstance(doc, dict)
    return doc


def workflow_steps(text: str) -> list[dict[str, Any]]:
    """Return the audit job's steps of a workflow (note: YAML 1.1 reads the key ``on`` as True)."""
    doc = yaml.safe_load(text)
    assert doc[True] == ["push", "pull_request"]
    return doc["jobs"]["audit"]["steps"]


def readme_recipe() -> str:
    readme = (ROOT / "docs" / "reports.md").read_text()  # the CI gate's page of the docs site
    blocks = re.findall(r"^```yaml\n(name: specaudit\n.*?)^```", readme, re.S | re.M)
    assert len(blocks) == 1, "the docs show the recipe once"
    return blocks[0]


def inputs_of(step: dict[str, Any]) -> dict[str, str]:
    """Return every input of the action for a ``uses:`` step: its ``with:`` values over the defaults."""
    declared = action()["inputs"]
    given = {k: str(v) for k, v in (step.get("with") or {}).items()}
    unknown = set(given) - set(declared)
    assert not unknown, f"inputs the action does not declare: {unknown}"
    missing = [k for k, v in declared.items() if v.get("required") and k not in given]
    assert not missing, f"required inputs not given: {missing}"
    return {k: given.get(k, str(v.get("default", ""))) for k, v in declared.items()}


def test_the_action_is_composite_with_its_inputs_and_uploads_what_it_writes() -> None:
    doc = action()
    assert doc["runs"]["using"] == "composite"
    assert {"target", "scenarios", "extra-args", "python-version"} <= set(doc["inputs"])
    assert doc["inputs"]["target"]["required"] is True
    steps = doc["runs"]["steps"]
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["python-version"] == "${{ inputs.python-version }}"
    audit = next(s for s in steps if s.get("id") == "audit")
    assert audit["run"] == f'bash "$GITHUB_ACTION_PATH/{SCRIPT}"'  # one script, the one the tests run
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"  # the report of a failing audit is what one wants to read
    assert upload["with"]["path"].rstrip("/") == audit["env"]["SPECAUDIT_REPORT_DIR"]
    assert {o["value"] for o in doc["outputs"].values()} == {
        "${{ steps.audit.outputs." + name + " }}" for name in ("status", "exit-code", "report")}
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"] == "specaudit-verifiers"


def test_this_repository_gates_itself_with_the_action() -> None:
    steps = workflow_steps(WORKFLOW.read_text())
    assert [s["uses"] for s in steps] == ["actions/checkout@v4", "./"]
    assert inputs_of(steps[1])["target"] == "reference"


def test_the_readme_recipe_uses_the_action_by_its_repository() -> None:
    steps = workflow_steps(readme_recipe())
    (step,) = [s for s in steps if s.get("uses", "").startswith("OWNER/REPO@")]
    given = inputs_of(step)
    assert given["target"] == "mypkg.spec:verify" and given["install"] == "pip install -e ."


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment that sees this interpreter's packages (not this checkout)."""
    venv = tmp_path_factory.mktemp("venv")
    # without the venv's own (older) pip and setuptools: this interpreter's, seen through the system site
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    (venv / "bin" / "pip").write_text(f'#!/bin/sh\nexec "{venv / "bin" / "python"}" -m pip "$@"\n')
    (venv / "bin" / "pip").chmod(0o755)
    return venv


def run_step(step: dict[str, Any], inputs: dict[str, str], workspace: Path, venv: Path, tmp: Path,
             offline: bool = True) -> tuple[subprocess.CompletedProcess[str], str, dict[str, str]]:
    """Run one ``run:`` step of the action as GitHub's runner does; return the process, the summary, the outputs."""
    def expand(text: str) -> str:
        return _EXPRESSION.sub(lambda m: inputs[m.group(1)], text)

    summary, outputs = tmp / "step-summary.md", tmp / "github-output"
    summary.write_text("")
    outputs.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COLUMNS")}
    env.update({k: expand(str(v)) for k, v in (step.get("env") or {}).items()})
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv), GITHUB_ACTIONS="true",
               GITHUB_ACTION_PATH=str(workspace), GITHUB_STEP_SUMMARY=str(summary), GITHUB_OUTPUT=str(outputs),
               GITHUB_WORKSPACE=str(workspace))
    command = expand(step["run"])
    if offline and command.startswith("python -m pip install "):
        command = command.replace("pip install", "pip install --no-deps --no-build-isolation --no-index", 1)
    proc = subprocess.run(["bash", "-e", "-c", command], cwd=workspace, env=env, capture_output=True, text=True,
                          timeout=900)
    said = dict(line.split("=", 1) for line in outputs.read_text().splitlines() if "=" in line)
    return proc, summary.read_text(), said


@pytest.fixture(scope="module")
def installed(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace of this repository's workflow: this checkout, with the action's install steps run on it."""
    workspace = tmp_path_factory.mktemp("workspace") / "repo"
    shutil.copytree(ROOT, workspace, ignore=not_copied)  # actions/checkout; `uses: ./`: the action's path too
    inputs = inputs_of(workflow_steps(WORKFLOW.read_text())[1])
    ran = []
    for step in action()["runs"]["steps"]:
        if "run" not in step or step.get("id") == "audit":
            continue
        if step.get("if") == "inputs.install != ''" and not inputs["install"]:
            continue
        proc, _, _ = run_step(step, inputs, workspace, venv, tmp_path_factory.mktemp("step"))
        assert proc.returncode == 0, f"step {step['name']} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        ran.append(step["name"])
    assert ran == ["Install specaudit"]
    return workspace


def audit_step() -> dict[str, Any]:
    return next(s for s in action()["runs"]["steps"] if s.get("id") == "audit")


def test_the_action_installs_this_project_and_audits_the_reference(installed: Path, venv: Path, tmp_path: Path) -> None:
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.metadata as m, specaudit; print(m.version('specaudit-verifiers')); print(specaudit.__file__)"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""}, capture_output=True, text=True, check=True)
    version, location = probe.stdout.split()
    assert version == __import__("specaudit").__version__
    assert Path(location).is_relative_to(venv), location

    inputs = inputs_of(workflow_steps(WORKFLOW.read_text())[1])
    proc, summary, outputs = run_step(audit_step(), inputs, installed, venv, tmp_path)
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert outputs == {"exit-code": "0", "status": "passed", "report": "specaudit-report"}
    report = installed / "specaudit-report"
    doc = json.loads((report / "specaudit.json").read_text())
    validate(doc)
    assert doc["exit_code"] == 0 and doc["target"] == "reference" and len(doc["scenarios"]) >= 8
    assert "<testsuites" in (report / "specaudit.xml").read_text()
    (html,) = report.glob("*.html")
    assert html.read_bytes().startswith(b"<!DOCTYPE html>")
    assert "PASSED" in summary.upper() and "::error" not in proc.stdout


def test_the_action_fails_a_broken_verifier_with_annotations(installed: Path, venv: Path, tmp_path: Path) -> None:
    inputs = inputs_of({"with": {"target": "mutant:resample_from_p", "scenarios": "markov-v4 corners",
                                 "extra-args": "--samples 20000 --seed '1' --no-power"}})
    proc, summary, outputs = run_step(audit_step(), inputs, installed, venv, tmp_path)
    assert proc.returncode == ExitCode.CHECKS_FAILED, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert outputs == {"exit-code": "1", "status": "failed", "report": "specaudit-report"}
    assert "::error title=specaudit markov-v4 / joint-law%3A failed::" in proc.stdout
    assert "FAILED" in summary and "mutant:resample_from_p" in summary
    doc = json.loads((installed / "specaudit-report" / "specaudit.json").read_text())
    assert [s["name"] for s in doc["scenarios"]] == ["markov-v4", "corners"] and doc["settings"]["samples"] == 20000


@pytest.mark.parametrize(("given", "says"), [
    ({"target": ""}, "specaudit action: error: the input 'target' is empty"),
    ({"target": "reference", "extra-args": "--seed '1"},
     "specaudit action: error: the input extra-args cannot be split into words (No closing quotation)"),
    ({"target": "reference", "extra-args": "--bogus"}, "No such option '--bogus'"),
    ({"target": "reference", "scenarios": "markov-v5"}, "did you mean 'markov-v4'"),
])
def test_unusable_inputs_exit_4_saying_which(given, says, installed: Path, venv: Path, tmp_path: Path) -> None:
    proc, _, outputs = run_step(audit_step(), inputs_of({"with": given}), installed, venv, tmp_path)
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert says in proc.stderr
    assert outputs in ({}, {"exit-code": "4", "status": "none", "report": "specaudit-report"})
