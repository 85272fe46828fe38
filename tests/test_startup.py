"""Lean start (issue 20): what a process has imported when it starts, and when a run reaches its first block.

Structure only, in fresh subprocesses (sys.modules of this pytest process holds everything); the
times themselves are measured by benchmarks/startup.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy import stats as sps

from specaudit.errors import ExitCode

HEAVY = ("scipy", "jinja2", "torch", "rich.console", "rich.table", "pydantic", "specaudit.reports.html", "specaudit.analysis.power")


def _loaded(code: str) -> dict[str, bool]:
    """Return which HEAVY modules are in sys.modules after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_module():
    # `specaudit --help` and every command start here: scipy, pydantic, rich tables, reporters wait for a need
    assert _loaded("import specaudit.cli") == dict.fromkeys(HEAVY, False)


def test_what_a_run_imports_before_its_fork_leaves_out_scipy_and_the_reports():
    # the supervisor forks its child after these; scipy (~0.3 s, judging and power) and rich (~60 ms, the progress
    # bar and the report) are imported in the supervisor once the child is on its way
    loaded = _loaded("import specaudit.cli, specaudit.engine.supervisor, specaudit.reports.progress")
    later = ("scipy", "jinja2", "torch", "rich.console", "specaudit.reports.html", "specaudit.analysis.power")
    assert {m: loaded[m] for m in later} == dict.fromkeys(later, False)
    assert not loaded["pydantic"]  # imported with the validator, when a scenario file is validated


def test_the_chi_square_tail_loads_scipy_special_on_first_use():
    rng = np.random.default_rng(20)
    x, df = float(rng.uniform(1.0, 30.0)), int(rng.integers(1, 40))
    code = textwrap.dedent(f"""
        import sys
        from specaudit.stats import gof
        before = "scipy.special" in sys.modules
        tail = gof.chi2_sf({x!r}, {df})
        print(before, "scipy.special" in sys.modules, gof.special is sys.modules["scipy.special"], repr(tail))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, after, replaced, tail = done.stdout.split()
    assert (before, after, replaced) == ("False", "True", "True")
    assert float(tail) == pytest.approx(sps.chi2.sf(x, df), rel=1e-12)  # independent: scipy.stats


VERIFIER = '''
import functools, json, os, sys

from specaudit.verifiers.reference import verify as _reference

_seen = []


@functools.wraps(_reference)
def verify(*args, **kwargs):
    if not _seen:
        _seen.append(1)
        with open(os.environ["FIRST_CALL_MODULES"], "w") as out:
            json.dump({m: m in sys.modules for m in ("scipy", "scipy.special", "scipy.optimize", "jinja2", "yaml",
                                                     "pydantic")}, out)
    return _reference(*args, **kwargs)
'''


def test_a_run_reaches_its_first_block_before_importing_scipy_and_a_known_scenario_before_pydantic(tmp_path):
    verifier, seen = tmp_path / "timed.py", tmp_path / "first.json"
    verifier.write_text(VERIFIER)
    env = {**os.environ, "FIRST_CALL_MODULES": str(seen), "SPECAUDIT_CACHE": str(tmp_path / "cache")}
    for validated_before in (False, True):  # the first run validates markov-v4 and caches it; the second reads it back
        done = subprocess.run(
            [sys.executable, "-m", "specaudit.cli", "run", f"{verifier}:verify", "-s", "markov-v4", "--samples", "20000"],
            capture_output=True, text=True, timeout=300, env=env,
        )
        assert done.returncode == ExitCode.OK, done.stdout + done.stderr
        assert "specaudit: PASSED (1 passed)" in done.stdout
        assert "power of the joint-law check" in done.stdout  # the power figures, computed after the child, are there
        assert json.loads(seen.read_text()) == {"scipy": False, "scipy.special": False, "scipy.optimize": False,
                                                "jinja2": False, "yaml": not validated_before,
                                                "pydantic": not validated_before}


EXIT_PROBE = '''
import atexit, gc, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, file=sys.stderr))
sys.argv = ["specaudit", *{args!r}]
from specaudit.cli import script
script()
'''


@pytest.mark.parametrize(("args", "code", "says"), [
    (["run", "reference", "-s", "markov-v4", "--samples", "2000", "--no-power"], ExitCode.OK, "PASSED"),
    (["run", "specaudit.verifiers.zoo.chain:resample_from_p", "-s", "markov-v4", "--samples", "20000", "--no-power"],
     ExitCode.CHECKS_FAILED, "FAILED"),
    (["run", "no_such_module:verify", "-s", "markov-v4"], ExitCode.USAGE_ERROR, "no_such_module"),
])
def test_the_console_script_exits_with_its_code_and_leaves_the_last_objects_uncollected(args, code, says):
    # the interpreter's last collection (some 0.25 s after a run, benchmarks/startup.py) finds nothing to free
    done = subprocess.run([sys.executable, "-c", EXIT_PROBE.format(args=args)], capture_output=True, text=True, timeout=300)
    assert done.returncode == code, done.stdout + done.stderr
    assert says in done.stdout + done.stderr
    assert "frozen at exit: True" in done.stderr


def test_main_called_in_a_process_that_goes_on_leaves_the_collector_alone(cli):
    import gc

    result = cli("run", "reference", "-s", "markov-v4", "--samples", "2000", "--no-power")
    assert result.exit_code == ExitCode.OK, result.output
    assert gc.get_freeze_count() == 0
