"""Hostile verifiers and inputs: nothing a verifier does can end, hang or turn green the run.

One table of faults (tests/verifiers/hostile/): each is run through the CLI (click's CliRunner, so
the supervisor forks from this process) and must end with the exact exit code, say what happened,
and leave the JSON on disk that says the same; no case exits 0 or 3, none leaves a process or a
temporary file behind. Faults sit on the scenario of vocabulary 8 (peaked-v8): the scenarios
before and after it must pass, which shows the run went on in a fresh process. The same table
runs with ``--jobs 2`` on scenarios large enough to be cut into blocks on forked workers.
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
CALLS = HOSTILE / "calls.py"
SCENARIOS = ["markov-v4", "peaked-v8", "seed-context-free"]  # the fault is on peaked-v8 (V = 8) only
TIMEOUT = "1"

#: (verifier in calls.py, error kind of peaked-v8, what its message must say)
AT_CALL = [
    ("exit0", "crash", "the verifier called sys.exit(0)"),
    ("exit1", "crash", "the verifier called sys.exit(1)"),
    ("exit2", "crash", "the verifier called sys.exit(2)"),
    ("exit3", "crash", "the verifier called sys.exit(3)"),
    ("exit_msg", "crash", "the verifier called sys.exit('bye')"),
    ("exit_none", "crash", "the verifier called sys.exit()"),
    ("exit_bare", "crash", "the verifier called sys.exit()"),
    ("keyboard_interrupt", "crash", "the verifier raised KeyboardInterrupt itself (no Ctrl-C was pressed)"),
    ("self_sigint", "crash", "the verifier raised KeyboardInterrupt itself"),
    ("generator_exit", "crash", "the verifier raised GeneratorExit"),
    ("base_exception", "crash", "the verifier raised BaseException: boom"),
    ("custom_base", "crash", "the verifier raised Custom: mine"),
    ("os_exit0", "died", "the verifier ended the process with os._exit(0)"),
    ("os_exit1", "died", "the verifier ended the process with os._exit(1)"),
    ("os_exit2", "died", "the verifier ended the process with os._exit(2)"),
    ("os_exit3", "died", "the verifier ended the process with os._exit(3)"),
    ("os_exit4", "died", "the verifier ended the process with os._exit(4)"),
    ("segfault", "died", "killed by signal 11 (SIGSEGV)"),
    ("abort", "died", "killed by signal 6 (SIGABRT)"),
    ("sigkill_self", "died", "killed by signal 9 (SIGKILL)"),
    ("sigterm_self", "died", "killed by signal 15 (SIGTERM)"),
    ("sigbus_self", "died", "killed by signal 7 (SIGBUS)"),
    ("killpg_self", "died", "killed by signal 9 (SIGKILL)"),
    ("swallow_exception", "timeout", "did not stop when told to (it swallows the timeout)"),
    ("swallow_base", "timeout", "did not stop when told to (it swallows the timeout)"),
    ("ignore_alarm", "timeout", "did not stop when told to"),
    ("cancel_timer", "timeout", "did not stop when told to"),
    ("sleeps", "timeout", f"did not return within {TIMEOUT} s (--timeout {TIMEOUT})"),
    ("recursion", "crash", "the verifier raised RecursionError"),
    ("memory_error", "crash", "the verifier raised MemoryError: pretend"),
    ("stop_iteration", "crash", "the verifier raised StopIteration"),
    ("fork_and_return", "crash", "the verifier raised RuntimeError: forked a copy of the process"),
    ("sleeper_and_exit", "died", "the verifier ended the process with os._exit(0)"),
    ("fork_sleeper_and_segfault", "died", "killed by signal 11 (SIGSEGV)"),
    ("close_streams", "crash", "the verifier raised ValueError: closed stdout"),
    ("chdir", "crash", "the verifier raised ValueError: moved to /"),
    ("markup_close", "crash", "[/b] closes a tag it never opened"),
    ("markup_generic", "crash", "expected list[int], got [dtype] float64"),
    ("markup_emoji", "crash", "shape :x: of :smile: rows"),
    ("unprintable_exception", "crash", "the verifier raised _Unprintable: (its __str__ raised RuntimeError)"),
    ("returns_none", "contract", ""),
]

#: (module file in hostile/, what the usage error must say)
AT_IMPORT = [
    ("import_exit0", "called sys.exit(0)"),
    ("import_exit1", "called sys.exit(1)"),
    ("import_exit_msg", "called sys.exit('no GPU here')"),
    ("import_os_exit0", "ended the process with os._exit(0) while importing"),
    ("import_os_exit1", "ended the process with os._exit(1) while importing"),
    ("import_segfault", "was killed by signal 11 (SIGSEGV) while importing"),
    ("import_abort", "was killed by signal 6 (SIGABRT) while importing"),
    ("import_keyboard_interrupt", "raised KeyboardInterrupt"),
    ("import_generator_exit", "raised GeneratorExit"),
    ("import_markup", "[/b] needs list[int]"),
]


def _alive(pid: int) -> bool:
    """Return True when ``pid`` is a live process (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _process_table() -> dict[int, tuple[int, bytes]]:
    """Return ``{pid: (parent pid, command line)}`` of the live processes (zombies left out)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if fields[0] != "Z":
                table[int(entry.name)] = (int(fields[1]), cmdline)
    return table


def _children() -> set[int]:
    """Return the live processes whose parent is this one."""
    me = os.getpid()
    return {pid for pid, (parent, _) in _process_table().items() if parent == me}


def _descendants(root: int) -> set[int]:
    """Return the live processes below ``root`` in the process table (children, their children, ...)."""
    parent = {pid: pp for pid, (pp, _) in _process_table().items()}
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def _ray_processes() -> set[int]:
    """Return the live processes of a Ray instance (raylet, GCS, workers) on this machine."""
    return {pid for pid, (_, cmd) in _process_table().items()
            if (b"/ray/" in cmd and b"python" in cmd) or b"raylet" in cmd or b"gcs_server" in cmd}


def _assert_nothing_left(pids_file: Path, before: set[int]) -> None:
    """Every process the verifier started, and every child of this process, is gone."""
    started = [int(x) for x in pids_file.read_text().split()] if pids_file.exists() else []
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and (any(_alive(p) for p in started) or _children() - before):
        time.sleep(0.05)
    assert not [p for p in started if _alive(p)], "a process the verifier started is still running"
    assert not _children() - before, "a child process of the run is still running"


def _run(cli, tmp_path, monkeypatch, target: str, *extra: str, samples: int = 2000):
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("SPECAUDIT_HOSTILE_PIDS", str(pids))
    out = tmp_path / "out" / "r.json"
    before = _children()
    cwd = os.getcwd()
    args = ["run", target, "--samples", samples, "--timeout", TIMEOUT, "--no-power", "--json", out, *extra]
    for name in SCENARIOS:
        args += ["-s", name]
    result = cli(*args)
    assert os.getcwd() == cwd  # the verifier's os.chdir stayed in its own process
    _assert_nothing_left(pids, before)
    assert not [p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp")], "a temporary file was left"
    return result, out


def _check_scenario_error(result, out: Path, kind: str, message: str) -> None:
    assert result.exit_code == ExitCode.CHECKS_FAILED, result.output
    doc = json.loads(out.read_text())
    assert doc["status"] == "error" and doc["exit_code"] == 1 and doc["partial"] is False
    assert doc["interrupted"] is False
    by_name = {s["name"]: s for s in doc["scenarios"]}
    assert list(by_name) == SCENARIOS  # the run went on past the fault
    err = by_name["peaked-v8"]["error"]
    assert err is not None and err["kind"] == kind, err
    assert message in err["message"], err["message"]
    for name in ("markov-v4", "seed-context-free"):
        decided = by_name[name]["rerun"] or by_name[name]  # a SUSPECT first look is settled by its re-run
        assert by_name[name]["error"] is None and decided["error"] is None, by_name[name]["error"]
        assert all(c["status"] == "passed" for c in decided["checks"]), by_name[name]
    if message:
        assert message in result.output  # shown as text, markup characters and all
    if kind == "died" and "signal 11" in message:  # the child's faulthandler traceback comes with it
        assert "Segmentation fault" in err["traceback"] and "calls.py" in err["traceback"]


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize(("name", "kind", "message"), AT_CALL, ids=[c[0] for c in AT_CALL])
def test_a_fault_at_call_time_is_that_scenarios_error_and_the_run_goes_on(cli, tmp_path, monkeypatch, name, kind,
                                                                        message):
    result, out = _run(cli, tmp_path, monkeypatch, f"{CALLS}:{name}")
    _check_scenario_error(result, out, kind, message)


#: Faults whose ``--jobs 2`` form is in the default run; the rest of the table runs with -m slow.
JOBS_QUICK = {"exit0", "keyboard_interrupt", "os_exit0", "segfault", "abort", "swallow_base", "fork_and_return",
              "killpg_self", "sigterm_self", "markup_close"}


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize(
    ("name", "kind", "message"),
    [pytest.param(*c, marks=() if c[0] in JOBS_QUICK else pytest.mark.slow, id=c[0]) for c in AT_CALL],
)
def test_the_same_faults_in_forked_block_workers_with_jobs_2(cli, tmp_path, monkeypatch, name, kind, message):
    # 15,001 sequences: two blocks per scenario, measured on two forked workers; the fault strikes only the
    # simulation's batches (4,096 rows; the probes use at most 3,927): in a worker, not in the exact probes
    monkeypatch.setenv("SPECAUDIT_HOSTILE_MIN_BATCH", "4096")
    result, out = _run(cli, tmp_path, monkeypatch, f"{CALLS}:{name}", "--jobs", "2", samples=15_001)
    _check_scenario_error(result, out, kind, JOBS_MESSAGE.get(name, message))


@pytest.mark.parametrize(("name", "kind"), [("crash_then_die", "died"), ("crash_then_hang", "timeout")])
def test_a_fault_in_a_block_left_running_after_its_scenario_erred_is_not_charged_to_the_next(cli, tmp_path,
                                                                                           monkeypatch, name, kind):
    # --jobs 2, one pool for every scenario: peaked-v8 erred at its first block in a worker while that worker had
    # another of its blocks to run; that block's death or swallowed hang was charged to seed-context-free, which ran
    # beside it (a helper's hostile pass, 3 of 3 runs at 300,001 sequences). Now a decided scenario is yielded only
    # once its blocks in flight end, so the fault is still its own.
    result, out = _run(cli, tmp_path, monkeypatch, f"{CALLS}:{name}", "--jobs", "2", samples=300_001)
    _check_scenario_error(result, out, kind, "")


#: Where --jobs 2 says it otherwise: the worker's forked copy holds its pipes, so the pool never sees it die;
#: the supervisor does (the worker is a zombie in the middle of a call) and reads faulthandler's line
JOBS_MESSAGE = {"fork_sleeper_and_segfault": "a --jobs worker process died inside a verifier call (Segmentation fault)"}


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize(("name", "message"), AT_IMPORT, ids=[c[0] for c in AT_IMPORT])
def test_a_fault_at_import_time_is_a_usage_error_before_any_result(cli, tmp_path, monkeypatch, name, message):
    result, out = _run(cli, tmp_path, monkeypatch, f"{HOSTILE / (name + '.py')}:verify")
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert message in result.output
    assert not out.exists()  # nothing was measured, so nothing claims a verdict


def test_a_control_verifier_passes_the_same_way(cli, tmp_path, monkeypatch):
    # positive control: the table's harness does not turn a correct verifier into an error
    result, out = _run(cli, tmp_path, monkeypatch, "reference")
    assert result.exit_code == ExitCode.OK, result.output
    doc = json.loads(out.read_text())
    assert doc["status"] == "passed" and doc["exit_code"] == 0


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_and_sigint_exit_2_keep_every_finished_scenario_and_leave_no_process(tmp_path, signum, jobs):
    out = tmp_path / "r.json"
    env = {**os.environ, "SPECAUDIT_HOSTILE_MIN_BATCH": "4096" if jobs == "2" else "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "specaudit.cli", "run", f"{CALLS}:sleeps", "-s", "markov-v4", "-s", "peaked-v8",
         "--samples", "15001" if jobs == "2" else "2000", "--timeout", "0", "--jobs", jobs, "--no-power",
         "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        deadline = time.monotonic() + 90
        while not out.exists() and time.monotonic() < deadline:  # markov-v4 is written when it ends
            time.sleep(0.05)
        assert out.exists(), proc.stderr.read() if proc.poll() is not None else "no partial JSON"
        running = json.loads(out.read_text())
        assert running["status"] == "running" and running["exit_code"] is None  # never 0 before the end
        time.sleep(1.0)  # now inside the sleeping verifier call of peaked-v8
        below = _descendants(proc.pid)
        assert below, "the run has no engine process"
        os.kill(proc.pid, signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["status"] == "interrupted" and doc["exit_code"] == ExitCode.INTERRUPTED
    assert [s["name"] for s in doc["scenarios"]] == ["markov-v4"]
    assert all(c["status"] != "pending" for c in doc["scenarios"][0]["checks"])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in below):
        time.sleep(0.05)
    assert not [p for p in below if _alive(p)], "a process of the run outlived it"


#: (report option, path under tmp_path or absolute, what the usage error says); checked before any simulation
BAD_OUTPUTS = [
    ("--json", "/proc/specaudit-r.json", "cannot write in /proc"),
    ("--junit", "/proc/specaudit-r.xml", "cannot write in /proc"),
    ("--html", "/proc/", "cannot write in /proc"),
    ("--json", "{tmp}/a-file/r.json", "a-file is not a folder"),
    ("--junit", "{tmp}", "is a directory"),
    ("--json", "{tmp}/a-file/deeper/r.json", "a-file is not a folder"),
    ("--json", "{tmp}", "is a directory"),
]


@pytest.mark.parametrize(("option", "path", "message"), BAD_OUTPUTS, ids=[f"{o}={p}" for o, p, _ in BAD_OUTPUTS])
def test_an_unwritable_report_path_is_a_usage_error_before_any_simulation(cli, tmp_path, monkeypatch, option, path,
                                                                         message):
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("SPECAUDIT_HOSTILE_CALLS", str(calls))
    (tmp_path / "a-file").write_text("")
    result = cli("run", f"{CALLS}:records_calls", "-s", "markov-v4", "--samples", "500", option,
                 path.format(tmp=tmp_path))
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert message in result.output
    assert not calls.exists()  # the verifier was never called
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no probe file left behind


def test_a_relative_json_path_does_not_move_when_the_verifier_changes_directory(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("run", f"{CALLS}:chdir", "-s", "peaked-v8", "--samples", "500", "--no-power", "--json", "rel/r.json")
    assert result.exit_code == ExitCode.CHECKS_FAILED, result.output
    doc = json.loads((tmp_path / "rel" / "r.json").read_text())
    assert doc["scenarios"][0]["error"]["message"] == "the verifier raised ValueError: moved to /"
    assert f"wrote {tmp_path / 'rel' / 'r.json'}" in result.output  # reported by its absolute path


def test_scenario_names_and_paths_are_text_not_markup(cli):
    result = cli("run", "reference", "-s", "[/b]list[int]")
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert "[/b]list[int]" in result.output


def test_paths_are_text_not_emoji_codes(cli, tmp_path):
    out = tmp_path / "a:smile:b.json"
    result = cli("run", "reference", "-s", "markov-v4", "--samples", "2000", "--no-power", "--json", str(out))
    assert result.exit_code == ExitCode.OK, result.output
    assert f"wrote {out}" in result.output  # rich's emoji codes would print a😄b.json


def test_a_verifier_printing_100_mb_does_not_reach_the_report_on_stdout(tmp_path):
    # its prints go to stderr (thrown away here); stdout holds the report alone, and the run goes on
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "run", f"{CALLS}:print_flood", *[a for s in SCENARIOS for a in ("-s", s)],
         "--samples", "2000", "--no-power", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=300,
    )
    assert proc.returncode == ExitCode.CHECKS_FAILED
    assert "x" * 100 not in proc.stdout and len(proc.stdout) < 100_000
    assert "the verifier raised ValueError: printed 100 MB" in proc.stdout
    doc = json.loads(out.read_text())
    assert [s["error"] and s["error"]["message"] for s in doc["scenarios"]] == [
        None, "the verifier raised ValueError: printed 100 MB", None]


@pytest.mark.usefixtures("start_method")
def test_ray_workers_contain_every_kind_of_fault_and_the_run_goes_on(cli, tmp_path, monkeypatch):
    # one run, one Ray instance, a different fault in each scenario (by its vocabulary): os._exit, a segfault,
    # a call that swallows its timeout, sys.exit(0); the scenario before them passes, nothing is retried
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'specaudit[ray]')")
    peaked = (Path(__file__).parents[1] / "scenarios" / "peaked-v8.yaml").read_text()
    names = ["markov-v4"]
    for v in (5, 6, 7):
        path = tmp_path / f"ray-v{v}.yaml"
        path.write_text(peaked.replace("name: peaked-v8", f"name: ray-v{v}").replace("vocab: 8", f"vocab: {v}")
                        .replace("support: 0.625", "support: 0.8"))
        names.append(str(path))
    names.append("peaked-v8")
    monkeypatch.setenv("SPECAUDIT_HOSTILE_BY_V", "5=os_exit0,6=segfault,7=swallow_base,8=exit0")
    monkeypatch.setenv("SPECAUDIT_HOSTILE_MIN_BATCH", "4096")  # the simulation's blocks (on Ray), not the probes
    out = tmp_path / "r.json"
    before = _ray_processes()
    args = ["run", f"{CALLS}:by_vocabulary", "--samples", 15_001, "--timeout", TIMEOUT, "--no-power",
            "--backend", "ray", "--jobs", "2", "--json", out]
    for name in names:
        args += ["-s", name]
    result = cli(*args)
    assert result.exit_code == ExitCode.CHECKS_FAILED, result.output
    doc = json.loads(out.read_text())
    assert doc["status"] == "error" and doc["exit_code"] == 1
    errors = {s["name"]: s["error"] and (s["error"]["kind"], s["error"]["message"]) for s in doc["scenarios"]}
    died = "the Ray worker process running block 0 of this scenario died: the verifier ended it"
    assert errors["markov-v4"] is None
    assert errors["ray-v5"][0] == "died" and died in errors["ray-v5"][1]
    assert errors["ray-v6"][0] == "died" and died in errors["ray-v6"][1]
    assert errors["ray-v7"][0] == "timeout" and "did not stop when told to (it swallows the timeout); its Ray worker " \
        "process was killed" in errors["ray-v7"][1]
    assert errors["peaked-v8"] == ("crash", "the verifier called sys.exit(0)")
    deadline = time.monotonic() + 60  # the instance ends with the engine process; its workers follow it
    while time.monotonic() < deadline and _ray_processes() - before:
        time.sleep(0.5)
    assert not _ray_processes() - before, "a Ray process outlived the run"


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_reports_are_written_exits_2_and_the_json_holds_the_finished_run(cli, tmp_path,
                                                                                          monkeypatch, signum):
    from specaudit.reports import html

    def cancelled(*args, **kwargs):  # CI cancels the job while the HTML is rendered
        os.kill(os.getpid(), signum)
        time.sleep(5)
        raise AssertionError("the signal did not stop the writing")

    monkeypatch.setattr(html, "write", cancelled)
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    result = cli("run", "reference", "-s", "markov-v4", "--samples", "2000", "--no-power", "--json", out,
                 "--html", page, "--junit", tmp_path / "r.xml")
    assert result.exit_code == ExitCode.INTERRUPTED, result.output
    assert f"interrupted while writing the reports; {out} holds the finished run (verdict: exit 0)" in result.output
    doc = json.loads(out.read_text())
    assert doc["status"] == "passed" and doc["exit_code"] == 0 and doc["partial"] is False  # not a 'running' partial
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no HTML, no JUnit, no temporary file
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back


@pytest.mark.usefixtures("start_method")
def test_a_target_that_hangs_at_import_is_stopped_after_import_timeout(cli, tmp_path, monkeypatch):
    result, out = _run(cli, tmp_path, monkeypatch, f"{HOSTILE / 'import_hangs.py'}:verify", "--import-timeout", "2")
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert "importing and binding the target did not finish within 2 s (--import-timeout 2)" in result.output
    assert "import_hangs.py" in result.output  # faulthandler: where it was stuck
    assert not out.exists()


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize(("name", "kind", "message"), [
    ("os_exit0", "died", "the verifier ended the process with os._exit(0)"),
    ("segfault", "died", "killed by signal 11 (SIGSEGV)"),
    ("swallow_base", "timeout", "did not stop when told to (it swallows the timeout)"),
], ids=["os_exit0", "segfault", "swallow_base"])
def test_the_python_api_is_supervised_so_the_calling_process_outlives_the_verifier(name, kind, message):
    # what a pytest session calling specaudit.run / assert_lossless meets: os._exit(0) there would end it green
    import specaudit

    result = specaudit.run(f"{CALLS}:{name}", ["markov-v4", "peaked-v8"], samples=2000, power=False, timeout=1)
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    errors = {s.name: s.error for s in result.scenarios}
    assert errors["markov-v4"] is None
    assert errors["peaked-v8"].kind == kind and message in errors["peaked-v8"].message
    with pytest.raises(AssertionError, match="peaked-v8"):
        specaudit.assert_lossless(f"{CALLS}:{name}", scenarios=["peaked-v8"], samples=2000, timeout=1)


def _peaked_v8_error(tmp_path, target, *args, **run):
    """Run ``target`` on markov-v4 then peaked-v8 (2,000 sequences, no power) in a process of its own; return
    peaked-v8's error, after asserting exit 1 and a clean markov-v4 (the verifier misbehaves on vocabulary 8)."""
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "run", str(target), "-s", "markov-v4", "-s", "peaked-v8",
         "--samples", "2000", "--no-power", "--json", str(out), *args],
        capture_output=True, timeout=300, **{"close_fds": True, **run},
    )
    assert done.returncode == ExitCode.CHECKS_FAILED, (done.returncode, done.stderr.decode(errors="replace")[-2000:])
    by_name = {s["name"]: s for s in json.loads(out.read_text())["scenarios"]}
    assert by_name["markov-v4"]["error"] is None  # the reference elsewhere: a clean pass before the fault
    assert by_name["peaked-v8"]["error"] is not None
    return by_name["peaked-v8"]["error"]


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize("early_stop", [False, True])
@pytest.mark.parametrize("name", ["pipe_garbage", "pipe_forged_length", "pipe_small_forged_length", "pipe_magic"])
def test_bytes_the_verifier_writes_into_the_supervisors_pipe_are_that_scenarios_error(tmp_path, name, early_stop):
    # in a process of its own: the verifier writes into every descriptor from 3 (inside pytest, xdist's among them).
    # Garbage made exit 3 (UnpicklingError); a forged 2 GiB length hung the supervisor in recv() forever, and a
    # forged 1 MiB one (under the read limit) hung it while the child waited for the answer to its look.
    err = _peaked_v8_error(tmp_path, f"{CALLS}:{name}", *(["--early-stop"] if early_stop else []))
    # the shared memory of the call board lives in a file whose descriptor is open too (multiprocessing's heap): four
    # bytes at its start are a call start no call made, which the supervisor may see before the pipe's bytes
    said = ("could not read the child's messages: the verifier wrote into the pipe", "wrote into the supervisor's call board")
    assert err["kind"] == "died" and any(s in err["message"] for s in said), err["message"]


@pytest.mark.parametrize("name", ["pipe_forged_done", "pipe_forged_start", "pipe_forged_look", "pipe_forged_kind"])
def test_a_frame_the_verifier_lays_out_as_the_childs_is_refused(tmp_path, name):
    # frames with crc32s that checked, written into the pipe: a forged "done" ended the run with peaked-v8 unmeasured
    # and exit 0, a forged "start" or "look" raised in the supervisor (exit 3). Without the child's key they do not check.
    err = _peaked_v8_error(tmp_path, f"{CALLS}:{name}")
    assert err["kind"] == "died" and "does not check" in err["message"], err


@pytest.mark.parametrize("name, message", [
    ("pipes_read_ends_closed", "the child could not hear the supervisor (the answer to a look could not be read"),
    ("pipes_write_ends_on_devnull", "or closed or replaced that pipe"),  # the child's frames went to /dev/null
    ("descriptors_closed", "the child could no longer write to the supervisor (the verifier closed or replaced"),
])
def test_a_verifier_that_closes_or_replaces_the_childs_pipes_is_that_scenarios_error(tmp_path, name, message):
    # closed answers: exit 3 (the OSError of recv was "internal"); results onto /dev/null: the child waited for the
    # answer to a look the supervisor never got, and both waited for ever; all closed: "ended with os._exit(3)"
    err = _peaked_v8_error(tmp_path, f"{CALLS}:{name}")
    assert err["kind"] == "died" and message in err["message"], err


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize("name, messages", [
    ("answers_read_away", ["the supervisor answered a look and the answer never came", "the child could not hear"]),
    ("results_read_away", ["a message the child sent never came (the verifier read it out of the pipe",
                           "was due", "does not check"]),
])
def test_a_verifier_that_reads_the_childs_pipes_is_that_scenarios_error_within_seconds(tmp_path, name, messages):
    # a thread of the verifier's reading the answers (or the child's messages, through /proc/self/fd) left the child
    # waiting 600 s for an answer that was gone. The counters of frames sent and answers given tell within 2 s; the
    # thief may also take part of a frame (what is left does not check). The race decides whether it takes anything:
    # a run it took nothing from is clean, and one it took from ends within seconds with peaked-v8 an ERROR
    out = tmp_path / "r.json"
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "run", f"{CALLS}:{name}", "-s", "markov-v4", "-s", "peaked-v8",
         "--samples", "2000", "--no-power", "--suspect-level", "0", "--json", str(out)],
        capture_output=True, timeout=300, close_fds=True,
    )
    assert time.monotonic() - t0 < 120
    assert done.returncode in (ExitCode.OK, ExitCode.CHECKS_FAILED), done.stderr.decode(errors="replace")[-2000:]
    errors = {s["name"]: s["error"] for s in json.loads(out.read_text())["scenarios"]}
    assert errors["markov-v4"] is None
    err = errors["peaked-v8"]
    assert (done.returncode == ExitCode.OK) == (err is None)
    assert err is None or (err["kind"] == "died" and any(m in err["message"] for m in messages)), err


def test_a_target_that_does_not_load_again_in_a_fresh_child_is_an_error_of_the_scenarios_left(tmp_path):
    # the child of peaked-v8 dies; the fresh child's import of the target raises: that ended the run with exit 4
    # and a results file left "running", the verdict and peaked-v8's ERROR lost
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "run", f"{HOSTILE / 'loads_once.py'}:verify", "-s", "peaked-v8",
         "-s", "markov-v4", "--samples", "2000", "--no-power", "--json", str(out)],
        capture_output=True, timeout=300, env={**os.environ, "SPECAUDIT_HOSTILE_FIRST": str(tmp_path / "first")},
    )
    assert done.returncode == ExitCode.CHECKS_FAILED, done.stderr.decode(errors="replace")[-2000:]
    doc = json.loads(out.read_text())
    errors = {s["name"]: s["error"] for s in doc["scenarios"]}
    assert "os._exit(7)" in errors["peaked-v8"]["message"]
    assert "the child stopped on TargetLoadError" in errors["markov-v4"]["message"]
    assert "this module loads once" in errors["markov-v4"]["message"]


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize("name, message", [
    ("error_exit0_from_a_handler", "raised by the verifier's signal handler"),
    ("timeout_error_from_a_handler", "the verifier raised TimeoutError: its own outside a verifier call"),
    ("sigint_between_calls", "the verifier raised KeyboardInterrupt itself (no Ctrl-C was pressed) outside a verifier call"),
])
def test_what_the_verifiers_signal_handler_raises_between_calls_is_that_scenarios_error(tmp_path, name, message):
    # raised in the harness, outside a call: a SpecauditError with exit code 0 was passed on as the run's error and the
    # run exited 0 with peaked-v8 never measured; TimeoutError and KeyboardInterrupt were "internal" (exit 3)
    err = _peaked_v8_error(tmp_path, f"{CALLS}:{name}", close_fds=False)
    assert message in err["message"], err


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize("name", ["lingering_output"])
def test_a_child_that_does_nothing_outside_any_call_is_that_scenarios_error(monkeypatch, name):
    # no clock watched the harness between calls: a finalizer of the verifier's output that never ends (as a SIGSTOP
    # or a thread holding the GIL outside a call) hung the run for ever. The idle limit (at least 300 s) is 3 s here.
    import specaudit
    from specaudit.engine import supervisor

    monkeypatch.setattr(supervisor, "_idle_limit", lambda timeout: 3.0)
    t0 = time.monotonic()
    result = specaudit.run(f"{CALLS}:{name}", ["markov-v4", "peaked-v8"], samples=2000, power=False, timeout=30,
                           suspect_level=0.0)
    assert time.monotonic() - t0 < 120
    errors = {s.name: s.error for s in result.scenarios}
    assert errors["markov-v4"] is None
    assert errors["peaked-v8"].kind == "died" and "did nothing for" in errors["peaked-v8"].message, errors["peaked-v8"]
    assert result.exit_code() == ExitCode.CHECKS_FAILED


@pytest.mark.usefixtures("start_method")
@pytest.mark.parametrize("name", ["board_forged_supervisor", "board_forged_group"])
def test_a_pid_the_verifier_writes_into_the_call_board_is_never_signalled(tmp_path, name):
    # the board (start times and pids of running calls) is shared memory the verifier can write: the supervisor sent
    # its stack-dump SIGUSR1 to whatever pid it held, and died of it with the finished scenarios (exit 138)
    err = _peaked_v8_error(tmp_path, f"{CALLS}:{name}", "--timeout", "5", start_new_session=True)
    # a start time no call of the child's made is the verifier's writing, not a call past the timeout ("killed after
    # 21616 s" before)
    assert err["kind"] == "died" and "wrote into the supervisor's call board" in err["message"], err


@pytest.mark.usefixtures("start_method")
def test_a_jobs_worker_that_dies_between_two_blocks_is_that_scenarios_error(tmp_path):
    # a thread of the verifier's ends its worker 0.3 s after a call returned: the pool is found broken at a later
    # submit or in a pending block, whichever comes first (the submit was exit 3, BrokenProcessPool; timing decides
    # which path a run takes, and both must be the scenario's ERROR)
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "run", f"{CALLS}:thread_exit_later", "-s", "markov-v4", "-s", "peaked-v8",
         "--samples", "300000", "--early-stop", "--jobs", "2", "--no-power", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == ExitCode.CHECKS_FAILED, done.stderr[-2000:]
    by_name = {s["name"]: s for s in json.loads(out.read_text())["scenarios"]}
    assert by_name["markov-v4"]["error"] is None
    err = by_name["peaked-v8"]["error"]
    assert err["kind"] == "died" and ("worker process died" in err["message"] or "os._exit(7)" in err["message"]), err


def test_a_message_no_utf8_or_xml_can_hold_is_shown_escaped_in_every_output(tmp_path):
    # a lone surrogate ended the terminal report, the HTML and the JUnit writers with UnicodeEncodeError (exit 3),
    # and NUL or ESC made the JUnit file one no XML parser reads
    import xml.etree.ElementTree as ET

    out = {kind: tmp_path / f"r.{kind}" for kind in ("json", "html", "xml")}
    summary = tmp_path / "summary.md"
    proc = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "run", f"{CALLS}:unprintable", "-s", "peaked-v8", "--samples", "500",
         "--no-power", "--json", str(out["json"]), "--html", str(out["html"]), "--junit", str(out["xml"])],
        capture_output=True, timeout=300, env={**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert proc.returncode == ExitCode.CHECKS_FAILED, proc.stdout + proc.stderr
    shown = r"lone \ud800 NUL \x00 clear \x1b[2J end"
    message = json.loads(out["json"].read_text())["scenarios"][0]["error"]["message"]
    assert message == "the verifier raised ValueError: lone \ud800 NUL \x00 clear \x1b[2J end"  # verbatim
    error = ET.parse(out["xml"]).getroot().find(".//testcase/error")
    assert error is not None and shown in error.get("message")
    page = out["html"].read_text()
    assert shown in page and "\x1b" not in page and "\x00" not in page  # no HTML may hold NUL or ESC
    assert r"lone \ud800" in summary.read_text()
    assert rb"lone \ud800" in proc.stdout
    # the terminal report and the annotations show the escape sequence; none reaches the terminal (or a log)
    assert rb"clear \x1b[2J end" in proc.stdout and b"\x1b" not in proc.stdout + proc.stderr


def test_a_scenario_key_with_an_escape_sequence_is_named_by_its_escapes(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text('name: s\nvocab: 4\nk: 2\nlength: 2\nsamples: 100\ntarget: {kind: dirichlet}\n'
                    'draft: {kind: dirichlet}\n"k\\e[31m:x:": 1\n')
    proc = subprocess.run([sys.executable, "-m", "specaudit.cli", "validate", str(path)], capture_output=True, timeout=120)
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert rb"unknown key 'k\x1b[31m:x:'" in proc.stderr and b"\x1b" not in proc.stderr
