"""The CI recipe: `.github/workflows/specaudit.yml` is the README's example, and its steps work.

The workflow is parsed (PyYAML) and its ``run:`` steps are executed as GitHub's runner would
(``bash -e -c``, ``GITHUB_ACTIONS=true``, the job's ``env``) in a fresh virtual environment (made
``--without-pip``: its ``pip`` is this interpreter's pip run by the venv's python, so the install
uses this interpreter's setuptools, not the older one a venv bundles):

- ``pip install ./.specaudit`` installs a copy of this checkout, where the second checkout step puts
  it, offline (``--no-deps --no-build-isolation --no-index``: the dependencies come from this
  interpreter's site-packages, which the venv sees), and the test checks that what it installed is
  this project under its distribution name, with the ``specaudit`` command in the venv;
- ``pip install -e .`` installs the user's own package: skipped (the test audits the reference
  verifier, which ships with specaudit), as ``TARGET=mypkg.spec:verify`` is replaced by it;
- ``specaudit run "$TARGET" ...`` must exit 0 and write the JSON, JUnit and HTML files that the
  upload step collects, and the Markdown summary GitHub shows.
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

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "specaudit.yml"
REFERENCE = "specaudit.verifiers.reference:verify"
# not copied into the test's checkout: build outputs, caches, VCS data (and the top-level reports/ folder)
_IGNORE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".venv",
                                 ".mypy_cache", ".ruff_cache", ".pytest_cache", ".import_linter_cache")


def not_copied(folder: str, names: list[str]) -> set[str]:
    """Return the names not to copy from ``folder`` (shutil.copytree's ``ignore``)."""
    return set(_IGNORE(folder, names)) | ({"reports"} if Path(folder) == ROOT else set())


def workflow() -> dict[Any, Any]:
    """Return the parsed workflow (note: YAML 1.1 reads the key ``on`` as True)."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(doc, dict)
    return doc


def steps() -> list[dict[str, Any]]:
    """Return the audit job's steps."""
    return workflow()["jobs"]["audit"]["steps"]


def test_workflow_is_the_readme_example() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```yaml\n(name: specaudit\n.*?)^```", readme, re.S | re.M)
    assert len(blocks) == 1, "the README shows the workflow once"
    body = "".join(line for line in WORKFLOW.read_text().splitlines(keepends=True) if not line.startswith("#"))
    assert blocks[0] == body


def test_workflow_installs_this_project_and_uploads_what_it_writes() -> None:
    doc = workflow()
    assert doc[True] == ["push", "pull_request"]
    checkouts = [s for s in steps() if s.get("uses", "").startswith("actions/checkout@")]
    assert len(checkouts) == 2, "the user's repository, then specaudit's sources"
    src = checkouts[1]["with"]["path"]
    assert checkouts[1]["with"]["repository"] == "${{ env.SPECAUDIT_REPOSITORY }}"
    runs = [s["run"] for s in steps() if "run" in s]
    assert runs[0].split() == ["pip", "install", f"./{src}"]  # this project, never the name `specaudit` on PyPI
    upload = next(s for s in steps() if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"  # the report of a failing audit is what one wants to read
    uploaded = upload["with"]["path"].split()
    audit = next(r for r in runs if r.startswith("specaudit run"))
    for flag in ("--json", "--junit", "--html"):
        written = audit.split()[audit.split().index(flag) + 1]
        assert written in uploaded, (flag, written, uploaded)
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"] == "specaudit-verifiers"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runner's workspace: the user's repository, with this checkout copied where the workflow puts it."""
    root = tmp_path_factory.mktemp("workspace")
    checkout = next(s for s in steps() if s.get("with", {}).get("path"))
    shutil.copytree(ROOT, root / checkout["with"]["path"], ignore=not_copied)
    return root


def test_workflow_run_steps_in_a_fresh_venv(workspace: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # without the venv's own (older) pip and setuptools: this interpreter's, seen through the system site
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    bin_dir = venv / "bin"
    (bin_dir / "pip").write_text(f'#!/bin/sh\nexec "{bin_dir / "python"}" -m pip "$@"\n')
    (bin_dir / "pip").chmod(0o755)
    summary = tmp_path / "step-summary.md"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({k: str(v) for k, v in workflow()["env"].items()})
    env.update(TARGET=REFERENCE, PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", GITHUB_ACTIONS="true",
               GITHUB_STEP_SUMMARY=str(summary), VIRTUAL_ENV=str(venv))
    done = []
    for step in steps():
        command = step.get("run")
        if command is None:
            continue  # `uses:` steps: GitHub's actions (checkout, setup-python, upload) are the runner's part
        if command.split() == ["pip", "install", "-e", "."]:
            continue  # the user's own package: the reference verifier audited here ships with specaudit
        if command.startswith("pip install ./"):
            command = command.replace("pip install", "pip install --no-deps --no-build-isolation --no-index", 1)
        res = subprocess.run(["bash", "-e", "-c", command], cwd=workspace, env=env, capture_output=True, text=True,
                             timeout=900)
        assert res.returncode == 0, f"step `{step['run']}` exited {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        done.append(step["run"])
    assert len(done) == 2, done

    # the install step installed this project, under its own name, with its command, into the venv
    probe = subprocess.run(
        [str(bin_dir / "python"), "-c",
         "import importlib.metadata as m, specaudit; print(m.version('specaudit-verifiers')); print(specaudit.__file__)"],
        cwd=workspace, env=env, capture_output=True, text=True, check=True)
    version, location = probe.stdout.split()
    assert version == __import__("specaudit").__version__
    assert Path(location).is_relative_to(venv), location
    assert (bin_dir / "specaudit").exists()

    # the audit step's artefacts, as the upload step collects them
    report = json.loads((workspace / "specaudit.json").read_text())
    assert report["exit_code"] == 0 and report["target"] == REFERENCE
    assert "<testsuites" in (workspace / "specaudit.xml").read_text()
    (html,) = (workspace / "reports").glob("*.html")
    assert html.read_bytes().startswith(b"<!DOCTYPE html>")
    assert "PASSED" in summary.read_text().upper()
