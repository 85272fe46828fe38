"""``python -m specaudit``: the console script's CLI in a fresh interpreter, with the same exit codes and messages.

Each case runs ``python -m specaudit ARGS`` in a subprocess (this checkout first on ``PYTHONPATH``)
and the same ARGS through click's CliRunner on ``specaudit.cli:main``; the exit code is asserted to
be the documented one in both, and the message of a refusal to be the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import specaudit
from specaudit.errors import ExitCode

ROOT = Path(specaudit.__file__).resolve().parents[1]
QUICK = ("-s", "markov-v4", "--samples", "2000", "--seed", "1", "--no-power", "-q")

CASES = [
    (("--help",), ExitCode.OK, "Exit codes: 0 passed"),
    (("--version",), ExitCode.OK, specaudit.__version__),
    (("run", "reference", *QUICK), ExitCode.OK, "PASSED"),
    (("run", "mutant:resample_from_p", "-s", "markov-v4", "--samples", "20000", "--seed", "1", "--no-power", "-q"),
     ExitCode.CHECKS_FAILED, "FAILED"),
    (("run", "no_such_module:verify"), ExitCode.USAGE_ERROR, "module 'no_such_module' not found"),
    (("run", "reference", "-s", "markov-v5"), ExitCode.USAGE_ERROR, "did you mean 'markov-v4'"),
    (("run", "reference", "--bogus"), ExitCode.USAGE_ERROR, "No such option '--bogus'"),
    (("run", "reference", "-s", "tag:nonexistent"), ExitCode.NO_SCENARIOS, "nothing to run"),
    (("report", "missing.json"), ExitCode.USAGE_ERROR, "cannot read results file missing.json"),
]


def python_m(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m specaudit ARGS`` with this checkout importable, as a user's shell would."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("COLUMNS", None)
    return subprocess.run([sys.executable, "-m", "specaudit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize(("args", "code", "says"), CASES, ids=[" ".join(c[0][:3]) for c in CASES])
def test_python_m_specaudit_is_the_cli(args, code, says, cli, tmp_path, monkeypatch):
    proc = python_m(*args, cwd=tmp_path)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert says in proc.stdout + proc.stderr
    monkeypatch.chdir(tmp_path)
    same = cli(*args)
    assert same.exit_code == code, same.output
    if code == ExitCode.USAGE_ERROR:  # a refusal reads the same from either entry point
        assert proc.stderr.strip().splitlines()[-1] == same.output.strip().splitlines()[-1]


def test_python_m_names_itself_in_usage(tmp_path):
    proc = python_m("run", cwd=tmp_path)  # TARGET missing
    assert proc.returncode == ExitCode.USAGE_ERROR
    assert "Usage: python -m specaudit run [OPTIONS] TARGET" in proc.stderr
