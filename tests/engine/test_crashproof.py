"""Crash-proof runs: per-call timeout, crashes and contract breaches as ERRORs, Ctrl-C keeps results."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import specaudit
from specaudit.contract.guard import guarded
from specaudit.errors import ExitCode, VerifierCrash, VerifierTimeout
from specaudit.results import Status

SCENARIOS = ["seed-context-free", "peaked-v8", "markov-v4"]  # peaked-v8 has V = 8: the broken ones stall there


def _cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "specaudit.cli", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.usefixtures("start_method")
def test_hanging_verifier_is_stopped_by_timeout_and_the_run_goes_on(verifiers_dir, tmp_path):
    # a pure-Python spin on V = 8; subprocess timeout only guards the suite if the alarm never fires
    out = tmp_path / "r.json"
    args = ["run", f"{verifiers_dir / 'exact_broken.py'}:hangs", "--samples", "2000", "--timeout", "1.5", "--json", str(out)]
    for name in SCENARIOS:
        args += ["-s", name]
    res = _cli(*args)
    assert res.returncode == ExitCode.CHECKS_FAILED, res.stderr
    doc = json.loads(out.read_text())
    by_name = {s["name"]: s for s in doc["scenarios"]}
    assert list(by_name) == SCENARIOS and doc["partial"] is False
    err = by_name["peaked-v8"]["error"]
    assert err["kind"] == "timeout" and "within 1.5 s (--timeout 1.5)" in err["message"]
    assert "exact_broken.py" in err["message"] and "in hangs" in err["message"]  # where it was stopped
    for name in ("seed-context-free", "markov-v4"):
        decided = by_name[name]["rerun"] or by_name[name]  # a SUSPECT first look is settled by its re-run
        assert by_name[name]["error"] is None and all(c["status"] == "passed" for c in decided["checks"])


@pytest.mark.usefixtures("start_method")
def test_timeout_swallowed_by_the_verifier_still_stops_it(verifiers_dir):
    result = specaudit.run(
        f"{verifiers_dir / 'exact_broken.py'}:swallows_timeout", ["peaked-v8", "markov-v4"], samples=500, timeout=0.5,
        diagnose=False,
    )
    first, second = result.scenarios
    assert first.error is not None and first.error.kind == "timeout"
    assert second.status is Status.PASSED


@pytest.mark.usefixtures("start_method")
def test_hang_in_the_exact_probes_is_an_error_that_keeps_earlier_checks(verifiers_dir):
    result = specaudit.run(f"{verifiers_dir / 'exact_broken.py'}:hangs", ["corners"], timeout=0.5, diagnose=False)
    (s,) = result.scenarios
    assert s.error.kind == "timeout" and s.error.message.startswith("corner-empty-batch: ")
    assert result.exit_code() == ExitCode.CHECKS_FAILED


def test_guarded_times_out_in_the_main_thread_and_restores_the_handler():
    before = signal.getsignal(signal.SIGALRM)

    def spin(*args):
        while True:
            pass

    with pytest.raises(VerifierTimeout, match=r"within 0.2 s .* at .*test_crashproof.py:\d+ in spin"):
        guarded(spin, 0.2)(1, 2)
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert guarded(lambda *a: sum(a), 0.2)(1, 2) == 3  # a quick call is untouched


def test_guarded_off_the_main_thread_runs_without_a_limit():
    found = []

    def worker():
        found.append(guarded(lambda *a: time.sleep(0.3) or "done", 0.05)())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert found == ["done"]  # documented: no SIGALRM off the main thread, the call runs to the end


def test_guarded_turns_exceptions_into_crashes_with_the_users_frame():
    def bad(*args):
        raise ValueError("shape mismatch in kernel")

    with pytest.raises(VerifierCrash, match="raised ValueError: shape mismatch") as info:
        guarded(bad, 5.0)()
    assert "in bad" in info.value.user_traceback


@pytest.mark.usefixtures("start_method")
def test_raising_verifier_errors_each_scenario_including_corners(verifiers_dir):
    result = specaudit.run(f"{verifiers_dir / 'broken.py'}:raises", ["corners", "seed-context-free"], samples=500, diagnose=False)
    assert result.exit_code() == ExitCode.CHECKS_FAILED and len(result.scenarios) == 2
    for s in result.scenarios:
        if s.error is None:  # the exact probes record a crash in each probe's check
            assert s.status is Status.ERROR and "out of shared memory" in s.checks[0].summary
            continue
        assert s.error.kind == "crash" and "out of shared memory" in s.error.message
        assert "broken.py" in s.error.traceback and "raise RuntimeError" in s.error.traceback


@pytest.mark.parametrize("name, clause", [("nan_ids", "dtype"), ("float_ids", "dtype"), ("wrong_shape", "shape"), ("id_equals_vocab", "vocab-range")])
def test_contract_breach_in_simulation_is_an_error_naming_the_clause(verifiers_dir, name, clause):
    result = specaudit.run(f"{verifiers_dir / 'broken.py'}:{name}", ["ragged-v4"], samples=300, diagnose=False)
    err = result.scenarios[0].error
    assert err.kind == "contract" and err.clause == clause and f"[{clause}]" in err.message


def test_timeout_is_validated():
    with pytest.raises(specaudit.UsageError, match="timeout = -1"):
        specaudit.run("specaudit.verifiers.reference:verify", ["corners"], timeout=-1)


@pytest.mark.usefixtures("start_method")
def test_ctrl_c_exits_2_and_keeps_what_was_measured(verifiers_dir, tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specaudit.cli", "run", f"{verifiers_dir / 'exact_broken.py'}:sleeps",
         "-s", "seed-context-free", "-s", "peaked-v8", "--samples", "2000", "--timeout", "0", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:  # the first scenario is written when it ends
            time.sleep(0.05)
        assert out.exists(), proc.stderr.read() if proc.poll() is not None else "no partial JSON"
        time.sleep(0.3)  # now inside the sleeping verifier call of peaked-v8
        os.kill(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and doc["interrupted"] is True and doc["exit_code"] == ExitCode.INTERRUPTED
    assert [s["name"] for s in doc["scenarios"]] == ["seed-context-free"]
    assert {c["name"] for c in doc["scenarios"][0]["checks"]} >= {"joint-law", "tokens-per-step"}
    for c in doc["scenarios"][0]["checks"]:  # Holm settled on what was kept (the probes have no p-value)
        assert c["status"] != "pending" and (c["pvalue"] is None or c["adjusted_pvalue"] is not None)


def test_faulthandler_dumps_fold_the_harness_frames_but_keep_a_stack_with_no_user_frame():
    from specaudit.engine.supervisor import _PACKAGE, fold_harness

    dump = "\n".join([
        "Fatal Python error: Segmentation fault",
        "",
        "Current thread 0x00007f (most recent call first):",
        '  File "/home/u/verifier.py", line 9 in inner',
        '  File "/home/u/verifier.py", line 4 in verify',
        f'  File "{_PACKAGE}/contract/guard.py", line 120 in _watched',
        f'  File "{_PACKAGE}/simulate/chain.py", line 300 in simulate',
        f'  File "{_PACKAGE}/engine/run.py", line 40 in measure',
        "",
        "Thread 0x00007e (most recent call first):",
        f'  File "{_PACKAGE}/engine/supervisor.py", line 80 in _loop',
    ])
    folded = fold_harness(dump)
    assert "verifier.py\", line 9" in folded and "verifier.py\", line 4" in folded
    assert "guard.py" not in folded and "simulate/chain.py" not in folded
    assert "  ... 3 frames of specaudit's harness" in folded
    assert "supervisor.py" in folded  # a stack that never left specaudit stays whole (a specaudit hang)
    assert folded.startswith("Fatal Python error: Segmentation fault")
