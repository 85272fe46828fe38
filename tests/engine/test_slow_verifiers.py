"""Slow verifiers (issue 16): ``--batch N``, a timeout message that says how to raise the limit, re-run costs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specaudit.contract.guard import SLOW_HINT
from specaudit.engine.run import execute
from specaudit.engine.settings import RunSettings
from specaudit.errors import ExitCode, UsageError
from specaudit.reports.progress import ProgressReporter, _duration
from specaudit.scenarios.loading import load_scenario
from specaudit.verifiers.reference import verify as reference

SCENARIOS = Path(__file__).parents[2] / "scenarios"


def test_batch_sets_the_rows_of_every_verifier_call():
    rows: list[int] = []

    def counting(draft, q, p, num_draft, rng):
        rows.append(draft.shape[0])
        return reference(draft, q, p, num_draft, rng)

    spec = load_scenario(SCENARIOS / "markov-v4.yaml")
    settings = RunSettings(samples=300, batch=64, seed=3, timeout=None, power=False, diagnose=False, suspect_level=0.0)
    result = execute(counting, [spec], settings)
    assert result.scenarios[0].error is None and result.exit_code() == ExitCode.OK
    simulated = [r for r in rows if r != 0]
    assert simulated and max(simulated) <= 64 and 64 in simulated  # the simulator's calls (probes use their own rows)
    try:
        RunSettings(batch=0)
    except UsageError as exc:
        assert "batch = 0; allowed: an integer 1 .. 1,048,576 (rows per verifier call)" in str(exc)
    else:  # pragma: no cover - the assertion below reports it
        raise AssertionError("batch = 0 was accepted")


def test_batch_on_the_command_line_is_validated(cli):
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", str(SCENARIOS / "markov-v4.yaml"), "--batch", "0")
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert "--batch" in res.output and "0; allowed: an integer 1 .. 1,048,576" in res.output
    res = cli("run", "--help")
    assert "--batch N" in res.output and "Rows per verifier call" in res.output


def test_timeout_message_says_how_to_give_a_slow_verifier_room(verifiers_dir):
    import specaudit

    # `hangs` spins on V = 8 (peaked-v8)
    result = specaudit.run(f"{verifiers_dir / 'exact_broken.py'}:hangs", [str(SCENARIOS / "peaked-v8.yaml")], samples=200,
                           timeout=0.5, diagnose=False, power=False)
    (s,) = result.scenarios
    assert s.error is not None and s.error.kind == "timeout"
    assert "did not return within 0.5 s (--timeout 0.5)" in s.error.message
    assert SLOW_HINT in s.error.message
    assert "raise the limit with --timeout S (0: no limit)" in SLOW_HINT and "--batch N" in SLOW_HINT


def test_suspect_rerun_announces_its_cost(cli):
    rng = np.random.default_rng(16)
    seed = int(rng.integers(0, 2**31))
    # suspect level 0.99: a correct verifier's first look is SUSPECT (some p <= 0.99), so its scenario is re-run
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", str(SCENARIOS / "markov-v4.yaml"), "--samples",
              "500", "--suspect-level", "0.99", "--seed", str(seed), "--no-power", "--timeout", "0")
    assert res.exit_code in (ExitCode.OK, ExitCode.CHECKS_FAILED), res.output
    assert "specaudit: markov-v4 is SUSPECT: re-running it on a fresh seed with 2,000 sequences (about " in res.output
    assert "at its first run's pace)" in res.output


def test_rerun_announcement_text(capsys):
    from rich.console import Console

    console = Console(file=None, force_terminal=False, width=200)
    with ProgressReporter(console, -1) as progress:
        progress.rerun("peaked-v8", 4 * 15_000, 130.0)
    out = capsys.readouterr().out
    assert "specaudit: peaked-v8 is SUSPECT: re-running it on a fresh seed with 60,000 sequences (about 2.2 min at" in out
    assert [_duration(12.4), _duration(90), _duration(7200)] == ["12 s", "1.5 min", "2.0 h"]
