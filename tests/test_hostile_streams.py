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


# --- stdout and stderr: full, closed, broken ------------------------------------------------------------------

QUICK = ("-s", "markov-v4", "--samples", "2000", "--no-power")
#: (target, exit code, JSON status): a correct verifier and a lossy one (resampling from p, caught at 2,000)
VERDICTS = [(REFERENCE, ExitCode.OK, "passed"), ("specaudit.verifiers.zoo.chain:resample_from_p", ExitCode.CHECKS_FAILED,
                                                  "failed")]


def _closed(fd: int):
    return lambda: os.close(fd)


#: How each stream is spoiled: (stdout, stderr, preexec_fn) for Popen; "broken" is a pipe whose reader is gone.
SPOILED = {
    "stderr-full": ("pipe", "/dev/full", None),
    "stdout-full": ("/dev/full", "pipe", None),
    "stderr-closed": ("pipe", "null", _closed(2)),
    "stdout-closed": ("null", "pipe", _closed(1)),
    "stdout-broken-pipe": ("broken", "pipe", None),
}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(("target", "code", "status"), VERDICTS, ids=["correct", "lossy"])
@pytest.mark.parametrize("spoiled", list(SPOILED))
def test_a_full_closed_or_broken_stream_never_changes_the_verdict_or_the_exit_code(tmp_path, spoiled, target, code,
                                                                                    status):
    out_how, err_how, preexec = SPOILED[spoiled]
    opened = []

    def stream(how: str):
        if how == "pipe":
            return subprocess.PIPE
        if how == "null":
            return subprocess.DEVNULL
        if how == "broken":
            read, write = os.pipe()
            os.close(read)  # the reader is gone before anything is written (`specaudit run ... | true`)
            opened.append(write)
            return write
        opened.append(fh := open(how, "w"))
        return fh

    out = tmp_path / "r.json"
    proc = _cli("run", target, *QUICK, "--json", out, stdout=stream(out_how), stderr=stream(err_how),
                preexec_fn=preexec)
    for f in opened:
        f.close() if hasattr(f, "close") else os.close(f)
    try:
        stdout, stderr = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = (stdout or b"").decode() + (stderr or b"").decode()
    assert proc.returncode == code, text  # 2>/dev/full: exit 1 for a correct verifier; >/dev/full, 2>&-: exit 3
    doc = _json(out)
    assert doc["status"] == status and doc["exit_code"] == code  # was left "running" / null with 2>/dev/full
    if spoiled.startswith("stdout-"):
        why = {"stdout-full": "No space left on device", "stdout-broken-pipe": "Broken pipe",
               "stdout-closed": "it was closed"}[spoiled]
        assert f"specaudit: note: stdout could not be written ({why}): the report printed there is lost" in text
    if spoiled in ("stderr-full", "stderr-closed"):
        assert f"specaudit: {status.upper()}" in text  # the report on stdout is whole
    assert "internal error" not in text and "Traceback" not in text


# --- paths: FIFOs and devices are refused, on write before anything is simulated, on read at once ----------------

def _run_refused(args: list[object], env: dict[str, str] | None = None) -> str:
    """Run the CLI, which must refuse ``args`` with a usage error within WAIT seconds; return what it printed."""
    proc = _cli(*args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=WAIT)  # a FIFO blocked the open or the read, for good
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.USAGE_ERROR, output
    return output


@pytest.mark.parametrize("option", ["--json", "--html", "--junit"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/full"])
def test_a_report_path_that_is_a_fifo_or_a_device_is_refused_before_anything_is_simulated(tmp_path, option, kind):
    if kind == "fifo":
        path = tmp_path / "report"
        os.mkfifo(path)
        what = "a FIFO"
    elif os.path.exists(kind):
        path, what = Path(kind), "a character device"
    else:
        pytest.skip(f"needs {kind}")
    calls = tmp_path / "calls.txt"
    output = _run_refused(["run", f"{HOSTILE / 'calls.py'}:records_calls", *QUICK, option, path],
                          env={"SPECAUDIT_HOSTILE_CALLS": str(calls)})
    assert f"specaudit: error: {option} {path}: not a regular file ({what}); give a file path, or /dev/null" in output
    assert not calls.exists()  # refused before the verifier's first call (--html /dev/full: after the whole run)
    assert not path.is_file()  # the FIFO, the device: left as they were


def test_a_fifo_in_the_place_of_the_html_file_of_a_folder_is_refused_before_anything_is_simulated(tmp_path):
    fifo = tmp_path / "specaudit-reference.html"  # the file --html FOLDER/ picks for TARGET "reference"
    os.mkfifo(fifo)
    output = _run_refused(["run", "reference", *QUICK, "--html", f"{tmp_path}/"])
    assert f"specaudit: error: --html {fifo}: not a regular file (a FIFO)" in output
    assert "PASSED" not in output  # refused before the run, not after it (exit 1 became 4)


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "input"
    os.mkfifo(path)
    return path


def test_a_fifo_as_a_scenario_file_is_refused_by_run_and_validate(tmp_path):
    fifo = _fifo(tmp_path)
    out = tmp_path / "r.json"
    output = _run_refused(["run", REFERENCE, "-s", fifo, "--json", out])
    assert f"specaudit: error: {fifo}: cannot read scenario file: not a regular file (a FIFO)" in output
    assert not out.exists()
    output = _run_refused(["validate", fifo])
    assert f"{fifo}: cannot read scenario file: not a regular file (a FIFO)" in output


@pytest.mark.parametrize("command", ["report", "merge", "--baseline"])
def test_a_fifo_as_a_results_file_is_refused(tmp_path, command):
    fifo = _fifo(tmp_path)
    args = ["run", REFERENCE, *QUICK, "--baseline", fifo] if command == "--baseline" else [command, fifo]
    output = _run_refused(args)
    assert f"specaudit: error: cannot read results file {fifo}: not a regular file (a FIFO)" in output


def test_a_scenario_device_is_refused_too(tmp_path):
    output = _run_refused(["validate", "/dev/zero"])  # would never end (MAX_SCENARIO_BYTES is read, then refused)
    assert "/dev/zero: cannot read scenario file: not a regular file (a character device)" in output


# --- non-finite numbers in results files ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def baseline_text(tmp_path_factory) -> str:
    """Return the JSON of a correct verifier's run (tokens/step measured) to edit into baselines."""
    out = tmp_path_factory.mktemp("baseline") / "b.json"
    proc = _cli("run", REFERENCE, *QUICK, "--seed", "3", "--json", out, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == ExitCode.OK, err
    return out.read_text()


def _with_tokens_per_step(text: str, value: str) -> str:
    """Return ``text`` with every tokens-per-step estimate written as ``value`` (JSON text)."""
    doc = json.loads(text)
    for s in doc["scenarios"]:
        for check in s["checks"]:
            if check["name"] == "tokens-per-step":
                check["data"]["estimate"] = "@@"
    return json.dumps(doc, indent=1).replace('"@@"', value)


@pytest.mark.parametrize(("value", "message"), [
    ("Infinity", "Infinity at line {line} is not a number JSON allows"),
    ("-Infinity", "-Infinity at line {line} is not a number JSON allows"),
    ("NaN", "NaN at line {line} is not a number JSON allows"),
    ('"inf"', "scenario markov-v4: tokens per step is inf, not a finite number; --fail-on tokens-per-step:2% cannot "
              "compare with it"),
    ('"nan"', "scenario markov-v4: tokens per step is nan, not a finite number"),
])
def test_a_baseline_with_a_non_finite_tokens_per_step_is_refused_not_a_gate_turned_off(tmp_path, baseline_text, value,
                                                                                       message):
    text = _with_tokens_per_step(baseline_text, value)
    line = text[:text.index(value)].count("\n") + 1
    base = tmp_path / "b.json"
    base.write_text(text)
    output = _run_refused(["run", REFERENCE, *QUICK, "--baseline", base, "--fail-on", "tokens-per-step:2%"])
    assert message.format(line=line) in output  # was "+nan%" and exit 0: --fail-on silently off


def test_the_tokens_per_step_gate_controls(tmp_path, baseline_text):
    # positive control: the baseline as written gates a run of the same verifier and seed without a regression
    base = tmp_path / "b.json"
    base.write_text(baseline_text)
    run = ["run", REFERENCE, *QUICK, "--seed", "3", "--baseline", base, "--fail-on", "tokens-per-step:2%"]
    done = subprocess.run([sys.executable, "-m", "specaudit.cli", *map(str, run)], capture_output=True, text=True,
                          timeout=WAIT)
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    # negative control: a baseline claiming 10 tokens/step makes the same run a regression
    base.write_text(_with_tokens_per_step(baseline_text, "10.0"))
    done = subprocess.run([sys.executable, "-m", "specaudit.cli", *map(str, run)], capture_output=True, text=True,
                          timeout=WAIT)
    assert done.returncode == ExitCode.CHECKS_FAILED, done.stdout + done.stderr
    assert "regression: markov-v4: tokens per step 10 -> " in done.stdout


def test_a_run_whose_tokens_per_step_is_not_a_number_breaks_the_rule(baseline_text):
    import dataclasses

    from specaudit.analysis import baseline
    from specaudit.results import document

    old = document.from_document(json.loads(baseline_text))
    rule = baseline.parse_rule("tokens-per-step:2%")
    assert not baseline.compare(old, old, [rule]).regressions  # control: the run against itself
    s = old.scenarios[0]
    checks = tuple(dataclasses.replace(c, data={**c.data, "estimate": float("nan")}) if c.name == "tokens-per-step"
                   else c for c in s.checks)
    new = dataclasses.replace(old, scenarios=(dataclasses.replace(s, checks=checks),))
    regressions = baseline.compare(old, new, [rule]).regressions
    assert [r["scenario"] for r in regressions] == ["markov-v4"]  # was skipped: the rule silently off
