"""Signals and streams are inputs too: a verifier that signals the run, a Ctrl-C at any moment, full or closed
stdout/stderr, FIFOs and devices as paths, non-finite numbers in a results file.

Every case runs the CLI as a user does (a subprocess, with a timeout so that a regression fails
rather than hangs) and asserts the exit code, the message and what the JSON says.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specaudit.errors import ExitCode

HOSTILE = Path(__file__).parent / "verifiers" / "hostile"
SIGNALS = HOSTILE / "signals_parent.py"
REFERENCE = "specaudit.verifiers.reference:verify"
#: A run of markov-v4 at this many samples makes 157 verifier calls (4096-row blocks, then the probes).
SAMPLES = "200000"
#: Longer than any run here takes; past it the run hangs (the regression this file guards against).
WAIT = 90


def _cli(*args: object, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen:
    """Start ``specaudit ARGS`` as the console script does (`specaudit.cli.script`)."""
    return subprocess.Popen([sys.executable, "-c", "from specaudit.cli import script; script()", *map(str, args)],
                            env={**os.environ, **(env or {})}, **kw)  # type: ignore[call-overload]


def _alive(pid: int) -> bool:
    """Return True when ``pid`` is a live process (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("at", ["1", "2", "150"], ids=["first-call", "second-call", "late-call"])
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_verifier_that_signals_its_supervisor_interrupts_the_run_with_its_json_and_no_process_left(tmp_path, name,
                                                                                                       at):
    out, pids = tmp_path / "r.json", tmp_path / "pids"
    proc = _cli("run", f"{SIGNALS}:verify", "-s", "markov-v4", "--samples", SAMPLES, "--no-power", "--json", out,
                env={"SPECAUDIT_SIGNAL": f"{name}@{at}", "SPECAUDIT_HOSTILE_PIDS": str(pids)},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=WAIT)  # it hung in waitpid on a child left in poll (at calls 1, 2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert "interrupted" in stdout
    doc = _json(out)
    assert doc["status"] == "interrupted" and doc["exit_code"] == ExitCode.INTERRUPTED and doc["interrupted"] is True
    children = [int(p) for p in pids.read_text().split()]
    assert children and not [p for p in children if _alive(p)], "the verifier's process outlived the run"


def test_a_verifier_that_signals_its_supervisor_at_every_call_interrupts_the_run_once(tmp_path):
    out = tmp_path / "r.json"
    proc = _cli("run", f"{SIGNALS}:verify", "-s", "markov-v4", "-s", "peaked-v8", "--samples", SAMPLES, "--no-power",
                "--json", out, env={"SPECAUDIT_SIGNAL": "SIGTERM@0"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)
    try:
        _, stderr = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert _json(out)["status"] == "interrupted"


def test_the_control_verifier_of_this_file_passes(tmp_path):
    # positive control: the same verifier, told to signal at a call it never makes, passes
    out = tmp_path / "r.json"
    proc = _cli("run", f"{SIGNALS}:verify", "-s", "markov-v4", "--samples", SAMPLES, "--no-power", "--json", out,
                env={"SPECAUDIT_SIGNAL": "SIGTERM@100000"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=WAIT)
    assert proc.returncode == ExitCode.OK, stderr
    assert _json(out)["status"] == "passed"


def _handles_sigterm(pid: int) -> bool:
    """Return True once process ``pid`` catches SIGTERM (the console script has installed its stop handlers)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see the CLI's signal handlers")
@pytest.mark.parametrize("delay", [0.0, 0.1, 0.3, 0.6, 1.0])
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_stop_in_the_first_second_exits_2_and_never_leaves_a_passed_json(tmp_path, name, delay):
    out, pids = tmp_path / "r.json", tmp_path / "pids"
    # 0.02 s a call: the run lasts seconds, so every delay lands inside it (imports, fork, first calls)
    proc = _cli("run", f"{SIGNALS}:verify", "-s", "markov-v4", "--samples", "20000", "--no-power", "--json", out,
                env={"SPECAUDIT_SLEEP": "0.02", "SPECAUDIT_HOSTILE_PIDS": str(pids)},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT
        while not _handles_sigterm(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(getattr(signal, name))
        stdout, stderr = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr  # 0 (a lost Ctrl-C) and hangs were seen before
    assert "interrupted" in stdout + stderr
    if out.exists() or delay >= 0.6:  # by 0.6 s the paths are checked: the JSON is there, and says so
        doc = _json(out)
        assert doc["status"] == "interrupted" and doc["exit_code"] == ExitCode.INTERRUPTED
    children = [int(p) for p in pids.read_text().split()] if pids.exists() else []
    assert not [p for p in children if _alive(p)], "the verifier's process outlived the run"
