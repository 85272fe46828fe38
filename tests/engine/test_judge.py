"""A supervised run's looks are judged in the supervisor (scenario.Judge), with the verdicts an in-process run gives.

The child only measures: it sends each look's Measured and gets the decision back, so it never
imports scipy (the chi-square tails), and the supervisor imports it while the child measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import specaudit
from specaudit.errors import ExitCode


def _verdicts(result: specaudit.RunResult) -> list[tuple]:
    out = []
    for s in result.scenarios:
        checks = [(c.name, c.status, c.statistic, c.pvalue, c.df) for c in s.checks]
        bound = None if s.tv_bound is None else (s.tv_bound.bound, s.tv_bound.sequences)
        out.append((s.name, s.status, s.samples, checks, bound, s.info.get("early_stop"),
                    s.info.get("tokens_per_step_exact")))
    return out


@pytest.mark.parametrize(("target", "early_stop"), [
    ("specaudit.verifiers.reference:verify", False),
    ("specaudit.verifiers.zoo.chain:resample_from_p", True),  # stops at an interim look
    ("specaudit.verifiers.reference:verify", True),  # every look taken, sequential p-values
], ids=["reference", "mutant-early-stop", "reference-early-stop"])
def test_the_supervisor_judges_every_look_as_an_in_process_run_does(target, early_stop):
    kwargs = {"samples": 40_000, "seed": 3, "power": False, "diagnose": False, "early_stop": early_stop}
    here = specaudit.run(target, ["markov-v4", "peaked-v8"], supervised=False, **kwargs)
    there = specaudit.run(target, ["markov-v4", "peaked-v8"], supervised=True, **kwargs)
    assert _verdicts(there) == _verdicts(here)
    if early_stop:
        stops = [s.info["early_stop"] for s in there.scenarios]
        assert all(len(e["looks"]) >= 1 for e in stops)
        if "resample_from_p" in target:  # the control that interim looks were judged: it stopped before the end
            assert any(e["stopped"] and e["sequences"] < e["planned"] for e in stops)


VERIFIER = '''
import json, os, sys

from specaudit.verifiers.reference import verify as _reference


def verify(*args, **kwargs):
    with open(os.environ["CALL_MODULES"], "w") as out:  # the last call wins: after every look and the probes
        json.dump({m: m in sys.modules for m in ("scipy", "scipy.special", "specaudit.analysis.power")}, out)
    return _reference(*args, **kwargs)
'''


@pytest.mark.parametrize("early_stop", [False, True], ids=["one-look", "early-stop"])
def test_a_supervised_child_never_imports_scipy(tmp_path, early_stop):
    verifier, seen = tmp_path / "recording.py", tmp_path / "modules.json"
    verifier.write_text(VERIFIER)
    args = ["--early-stop"] if early_stop else []
    done = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "run", f"{verifier}:verify", "-s", "markov-v4", "--samples", "30000",
         *args], capture_output=True, text=True, timeout=300, env={**os.environ, "CALL_MODULES": str(seen)},
    )
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    assert "specaudit: PASSED (1 passed)" in done.stdout  # the looks were judged (p-values need scipy: the parent's)
    assert "joint-law" in done.stdout
    assert json.loads(seen.read_text()) == {"scipy": False, "scipy.special": False, "specaudit.analysis.power": False}


def test_a_child_that_dies_while_its_look_is_judged_is_that_scenarios_error(monkeypatch):
    # the verifier cannot run while its process waits for the judge, but a thread or a fork of its own can end it
    import multiprocessing
    import signal

    from specaudit.engine import supervisor
    from specaudit.results import Status

    class Killing(supervisor.Judge):
        def __call__(self, *args):
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)
            return super().__call__(*args)

    monkeypatch.setattr(supervisor, "Judge", Killing)
    result = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], samples=20_000, power=False, diagnose=False,
                           supervised=True)
    (only,) = result.scenarios
    assert only.status is Status.ERROR
    assert "signal 9" in only.error.message
    assert result.exit_code() == ExitCode.CHECKS_FAILED


def test_the_supervisor_kills_the_childs_group_before_it_joins_the_child(monkeypatch):
    # --jobs workers (and the verifier's forks) hold the child's sentinel open: a join first waited 5 s for them
    from specaudit.engine import supervisor
    from specaudit.engine.settings import RunSettings

    order = []

    class Child:
        pid, exitcode = 12345, 0

        def join(self, timeout=None):
            order.append("join")

        def close(self):
            order.append("close")

    sup = supervisor._Supervisor("specaudit.verifiers.reference:verify", [], RunSettings(), None)
    monkeypatch.setattr(sup, "_kill_group", lambda child: order.append("kill"))
    try:
        sup._end(Child())
    finally:
        sup.close()
    assert order == ["kill", "join", "close"]
