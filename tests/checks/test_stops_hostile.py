"""Hostile stops verifiers and hostile stop keys: every one ends in an honest verdict, never exit 0 for a broken one, never 3.

Each verifier here declares the stops contract (``verify.stops = True``) and attacks the call that
carries stops only (``stops.tokens.shape[1] > 0``: the split form's calls carry none), or its
declaration, or the value it returns. The verdicts pinned: exit 1 with the finding named (a FAILED
check), exit 1 with an ERROR scenario, or exit 4 naming the attribute, file, line and key. A
correct verifier in an odd shape (a callable instance, a list of finished codes, one that scribbles
on the stops it was handed after it is done) passes: a PASS is earned, and so is not refused.

The ``xfail(strict=True)`` tests are bugs found while writing this file; each reason says what
is observed and what is expected.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import specaudit
from specaudit.errors import ExitCode
from specaudit.scenarios.catalogue import resolve

HEADER = """\
import numpy as np
from specaudit.contract.stops import LENGTH, RUNNING, STOPPED, apply_stops
from specaudit.verifiers import reference as _chain
from specaudit.verifiers.stops import verify as _reference


def _stops_given(stops):
    return stops.tokens.shape[1] > 0  # the stops check's call; the split form's calls carry no stop tokens

"""

#: Rows of the stops check's call (12 cases x 4 repeats).
ROWS = 48


def _target(tmp_path: Path, body: str, name: str = "hostile", declare: bool = False) -> str:
    """Write a verifier module (HEADER, then ``body``; ``declare``: add ``verify.stops = True``); return its target."""
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(body) + ("\nverify.stops = True\n" if declare else ""))
    return f"{path}:verify"


def _evidence(doc: dict[str, Any]) -> str:
    """Return what a run's document says went wrong: scenario errors and the summaries of checks not passed."""
    said = []
    for scenario in doc["scenarios"]:
        if scenario["error"] is not None:
            said.append(f"{scenario['error']['kind']}: {scenario['error']['message']}")
        said += [f"{c['name']} {c['status']}: {c['summary']}" for c in scenario["checks"] if c["status"] != "passed"]
    return "\n".join(said)


def _run(cli, tmp_path: Path, target: str, *extra: object) -> tuple[Any, dict[str, Any] | None]:
    out = tmp_path / "r.json"
    out.unlink(missing_ok=True)
    res = cli("run", target, "-s", "stops", "--timeout", "2", "--no-power", "--json", out, *extra)
    doc = json.loads(out.read_text()) if out.exists() else None
    return res, doc


# --- the stops call: crashes, exits, hangs, signals ---------------------------------------------------------------

#: (id, verifier body, scenario status, what the document says)
FAULTS = [
    ("raises", """
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                raise RuntimeError("boom in the stops call")
            return _reference(draft, q, p, num_draft, rng, stops)
     """, "error", "stops error: the verifier crashed: the verifier raised RuntimeError: boom in the stops call"),
    ("sys-exit-0", """
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                raise SystemExit(0)
            return _reference(draft, q, p, num_draft, rng, stops)
     """, "error", "stops error: the verifier crashed: the verifier called sys.exit(0)"),
    ("keyboard-interrupt", """
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                raise KeyboardInterrupt
            return _reference(draft, q, p, num_draft, rng, stops)
     """, "error", "raised KeyboardInterrupt itself (no Ctrl-C was pressed)"),
    ("hangs", """
        import time
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                time.sleep(600)
            return _reference(draft, q, p, num_draft, rng, stops)
     """, "error", "timeout: the verifier call did not return within 2 s (--timeout 2)"),
    ("os-exit-0", """
        import os
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                os._exit(0)
            return _reference(draft, q, p, num_draft, rng, stops)
     """, "error", "died: the verifier ended the process with os._exit(0) while this scenario ran"),
    ("sigkill-self", """
        import os, signal
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                os.kill(os.getpid(), signal.SIGKILL)
            return _reference(draft, q, p, num_draft, rng, stops)
     """, "error", "died: the verifier was killed by signal 9 (SIGKILL)"),
    ("os-exit-in-finished-array", """
        import os
        class Finished:
            def __array__(self, dtype=None, copy=None):
                os._exit(0)
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            return (out, n_out, Finished()) if _stops_given(stops) else (out, n_out, finished)
     """, "error", "died: the verifier ended the process with os._exit(0)"),
    ("raises-in-finished-array", """
        class Finished:
            def __array__(self, dtype=None, copy=None):
                raise RuntimeError("array boom")
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            return (out, n_out, Finished()) if _stops_given(stops) else (out, n_out, finished)
     """, "error", "RuntimeError: array boom"),
    ("sys-exit-in-finished-array", """
        class Finished:
            def __array__(self, dtype=None, copy=None):
                raise SystemExit(0)
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            return (out, n_out, Finished()) if _stops_given(stops) else (out, n_out, finished)
     """, "error", "reading the verifier's return value (tuple): its code called sys.exit(0)"),
    ("raises-in-len-of-return", """
        class Triple(tuple):
            def __len__(self):
                raise RuntimeError("len boom")
        def verify(draft, q, p, num_draft, rng, stops):
            result = _reference(draft, q, p, num_draft, rng, stops)
            return Triple(result) if _stops_given(stops) else result
     """, "error", "RuntimeError: len boom"),
    ("own-generator", """
        def verify(draft, q, p, num_draft, rng, stops):
            return _reference(draft, q, p, num_draft, np.random.default_rng(), stops)
     """, "failed", "determinism failed"),
]


@pytest.mark.parametrize("body, status, says", [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_a_fault_of_the_stops_call_is_an_error_or_a_finding_never_a_pass(cli, tmp_path, body, status, says):
    res, doc = _run(cli, tmp_path, _target(tmp_path, body, declare=True))
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert doc is not None and doc["exit_code"] == ExitCode.CHECKS_FAILED
    assert [s["status"] for s in doc["scenarios"]] == [status], _evidence(doc)
    assert says in _evidence(doc), _evidence(doc)


# --- what the stops call returns ----------------------------------------------------------------------------------

#: (id, verifier body, what the stops check's finding says)
RETURNS = [
    ("finished-bool", "return out, n_out, finished.astype(bool)",
     "[dtype] finished must be an integer array: finished has dtype bool"),
    ("finished-float", "return out, n_out, finished.astype(float)",
     "[dtype] finished must be an integer array: finished has dtype float64"),
    ("finished-nan", "finished = finished.astype(float); finished[0] = np.nan; return out, n_out, finished",
     "finished has dtype float64 (holding NaN/inf)"),
    ("finished-none", "return out, n_out, None", f"[shape] finished must have shape ({ROWS},), got ()"),
    ("finished-str", "return out, n_out, 'stop'", f"[shape] finished must have shape ({ROWS},), got ()"),
    ("finished-2d", "return out, n_out, finished[:, None]", f"finished must have shape ({ROWS},), got ({ROWS}, 1)"),
    ("finished-short", "return out, n_out, finished[:-1]", f"finished must have shape ({ROWS},), got ({ROWS - 1},)"),
    ("finished-objects", "return out, n_out, np.array([object()] * len(finished))",
     "finished must be an integer array: finished has dtype object"),
    ("finished-python-huge", "finished = finished.tolist(); finished[0] = 10 ** 30; return out, n_out, finished",
     "finished has dtype object"),
    ("finished-minus-one", "finished[0] = -1; return out, n_out, finished",
     "[finished] finished[0] = -1: not one of 0 (running), 1 (stop), 2 (length)"),
    ("finished-256", "return out, n_out, finished + 256", "finished[0] = 257: not one of"),
    ("finished-all-running", "return out, n_out, np.zeros_like(finished)", "finished running: a stop token accepted mid-block"),
    ("finished-stop-for-length", "return out, n_out, np.where(finished == LENGTH, STOPPED, finished)",
     "finished stop: the budget ends the request"),
    ("n-out-zero", "return np.full_like(out, -1), np.zeros_like(n_out), finished",
     "[n_out-range] 1 <= n_out[b] <= num_draft[b] + 1: row 0 has n_out = 0"),
    ("n-out-negative", "n_out = n_out.copy(); n_out[0] = -1; return out, n_out, finished", "row 0 has n_out = -1"),
    ("n-out-float", "return out, n_out.astype(float), finished", "n_out has dtype float64"),
    ("n-out-past-the-budget",  # every token kept, past the stop and the budget, finished honest
     "full, n_full = _chain.verify(draft, q, p, num_draft, np.random.default_rng(0)); return full, n_full, finished",
     "rows broke the stop rule"),
    ("not-padded-after-the-stop",  # n_out and finished right, the tokens after the stop left in out
     "full, _ = _chain.verify(draft, q, p, num_draft, np.random.default_rng(0)); return full, n_out, finished",
     "[padding] out[b, n_out[b]:] is -1: row 0 is"),
    ("a-pair", "return out, n_out", "a verifier declaring stops returns (out, n_out, finished); got a 2-tuple"),
    ("none", "return None", "returns (out, n_out, finished); got NoneType"),
    ("an-iterator", "return iter((out, n_out, finished))", "got tuple_iterator"),
    ("a-dict", "return {'out': out, 'n_out': n_out, 'finished': finished}", "got dict"),
    ("a-4-tuple", "return out, n_out, finished, None", "got a 4-tuple"),
]


@pytest.mark.parametrize("tail, says", [r[1:] for r in RETURNS], ids=[r[0] for r in RETURNS])
def test_a_wrong_return_of_the_stops_call_fails_the_stops_check_naming_it(cli, tmp_path, tail, says):
    body = f"""
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            if not _stops_given(stops):
                return out, n_out, finished
            {tail}
        verify.stops = True
    """
    res, doc = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert doc is not None
    (scenario,) = doc["scenarios"]
    failed = [c for c in scenario["checks"] if c["status"] == "failed"]
    assert scenario["status"] == "failed" and "stops" in [c["name"] for c in failed], _evidence(doc)
    assert says in _evidence(doc), _evidence(doc)


# --- odd but correct: a PASS earned is not refused ---------------------------------------------------------------

#: (id, the whole verifier module body)
CORRECT = [
    ("callable-instance", """
        class Verifier:
            stops = True
            def __call__(self, draft, q, p, num_draft, rng, stops):
                return _reference(draft, q, p, num_draft, rng, stops)
        verify = Verifier()
     """),
    ("property-true", """
        class Verifier:
            @property
            def stops(self):
                return True
            def __call__(self, draft, q, p, num_draft, rng, stops):
                return _reference(draft, q, p, num_draft, rng, stops)
        verify = Verifier()
     """),
    ("bound-method", """
        class Engine:
            def verify(self, draft, q, p, num_draft, rng, stops):
                return _reference(draft, q, p, num_draft, rng, stops)
        Engine.verify.stops = True
        verify = Engine().verify
     """),
    ("positional-only", """
        def verify(draft, q, p, num_draft, rng, stops, /):
            return _reference(draft, q, p, num_draft, rng, stops)
        verify.stops = True
     """),
    ("varargs", """
        def verify(*args):
            return _reference(*args)
        verify.stops = True
     """),
    ("finished-as-list", """
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            return out, n_out, finished.tolist()
        verify.stops = True
     """),
    ("finished-uint8", """
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            return out, n_out, finished.astype(np.uint8)
        verify.stops = True
     """),
    ("scribbles-on-its-stops-after-use", """
        def verify(draft, q, p, num_draft, rng, stops):
            result = _reference(draft, q, p, num_draft, rng, stops)
            stops.tokens[:] = 3  # the check judges against its own copy of what it handed over
            stops.remaining[:] = 1
            return result
        verify.stops = True
     """),
    ("stops-false-and-canonical", """
        def verify(draft, q, p, num_draft, rng, stops=None):
            return _chain.verify(draft, q, p, num_draft, rng)
        verify.stops = False
     """),
]


@pytest.mark.parametrize("body", [c[1] for c in CORRECT], ids=[c[0] for c in CORRECT])
def test_a_correct_verifier_in_an_odd_shape_passes(cli, tmp_path, body):
    res, doc = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.OK, res.output
    (scenario,) = doc["scenarios"]
    stops = next(c for c in scenario["checks"] if c["name"] == "stops")
    assert scenario["status"] == "passed" and stops["status"] in ("passed", "skipped"), _evidence(doc)


def test_a_verifier_that_blanks_the_stops_before_using_them_fails(cli, tmp_path):
    body = """
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                stops.tokens[:] = -1
                stops.remaining[:] = 10 ** 6
            return _reference(draft, q, p, num_draft, rng, stops)
        verify.stops = True
    """
    res, doc = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.CHECKS_FAILED and "rows broke the stop rule" in _evidence(doc), res.output


def test_a_callable_instance_with_a_broken_stop_rule_fails(cli, tmp_path):
    body = """
        from specaudit.verifiers.zoo.stops import budget_ignored
        class Verifier:
            stops = True
            def __call__(self, draft, q, p, num_draft, rng, stops):
                return budget_ignored(draft, q, p, num_draft, rng, stops)
        verify = Verifier()
    """
    res, doc = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert "the budget ends the request after `remaining` tokens" in _evidence(doc)


# --- the declaration ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [
    ("1", "verify.stops = 1: not a bool"),
    ("np.True_", "verify.stops = np.True_: not a bool"),
    ("None", "verify.stops = None: not a bool"),
    ("'True'", "verify.stops = 'True': not a bool"),
    ("[True]", "verify.stops = [True]: not a bool"),
])
def test_a_stops_declaration_that_is_not_a_bool_exits_4_naming_it(cli, tmp_path, value, shown):
    body = f"""
        def verify(draft, q, p, num_draft, rng, stops):
            return _reference(draft, q, p, num_draft, rng, stops)
        verify.stops = {value}
    """
    res, doc = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.USAGE_ERROR and shown in res.output, res.output


def test_a_stops_method_is_not_a_declaration_exits_4(cli, tmp_path):
    body = """
        class Verifier:
            def stops(self):
                return True
            def __call__(self, draft, q, p, num_draft, rng, stops=None):
                return _chain.verify(draft, q, p, num_draft, rng)
        verify = Verifier()
    """
    res, _ = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.USAGE_ERROR and "Verifier.stops = <bound method" in res.output, res.output


def test_a_stops_property_that_raises_exits_4_naming_the_error(cli, tmp_path):
    body = """
        class Verifier:
            @property
            def stops(self):
                raise RuntimeError("property boom")
            def __call__(self, draft, q, p, num_draft, rng, stops=None):
                return _reference(draft, q, p, num_draft, rng, stops)
        verify = Verifier()
    """
    res, _ = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.USAGE_ERROR and "raised RuntimeError: property boom" in res.output, res.output


@pytest.mark.parametrize("signature", ["draft, q, p, num_draft, rng", "draft, q, p, num_draft, rng, *, stops"],
                         ids=["five-arguments", "stops-keyword-only"])
def test_a_declaration_the_signature_cannot_take_is_an_error_never_a_pass(cli, tmp_path, signature):
    body = f"""
        def verify({signature}):
            return _chain.verify(draft, q, p, num_draft, rng)
        verify.stops = True
    """
    res, doc = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert doc["scenarios"][0]["status"] == "error"
    assert "takes 5 positional arguments but 6 were given" in _evidence(doc)


@pytest.mark.parametrize("signature", [
    "draft, q, p, num_draft, rng, stops, *, debug=False",
    "draft, q, p, num_draft, rng, stops, **options",
    "draft, q, p, num_draft, rng, stops, debug=False",
], ids=["keyword-only-option", "kwargs", "defaulted-trailing"])
def test_a_correct_stops_verifier_with_an_optional_parameter_passes(cli, tmp_path, signature):
    body = f"""
        def verify({signature}):
            return _reference(draft, q, p, num_draft, rng, stops)
        verify.stops = True
    """
    res, _ = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.OK, res.output


def test_a_stops_verifier_with_too_many_arguments_is_told_how_many_the_stops_contract_passes(cli, tmp_path):
    body = """
        def verify(draft, q, p, num_draft, rng, stops, extra):
            return _reference(draft, q, p, num_draft, rng, stops)
        verify.stops = True
    """
    res, _ = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert "takes 7 arguments" in res.output and "extra" in res.output, res.output


def test_declaring_both_stops_and_logprobs_is_a_usage_error_naming_both(cli, tmp_path):
    body = """
        def verify(draft, q, p, num_draft, rng, stops):
            return _reference(draft, q, p, num_draft, rng, stops)
        verify.stops = True
        verify.logprobs_mode = "processed"
    """
    res, _ = _run(cli, tmp_path, _target(tmp_path, body))
    assert "got a 2-tuple" not in res.output
    assert res.exit_code == ExitCode.USAGE_ERROR and "logprobs_mode" in res.output and "stops" in res.output


# --- what the stops check does not see ----------------------------------------------------------------------------

def test_a_verifier_writing_into_its_inputs_only_when_given_stops_fails(cli, tmp_path):
    body = """
        def verify(draft, q, p, num_draft, rng, stops):
            result = _reference(draft, q, p, num_draft, rng, stops)
            if _stops_given(stops):
                p[...] = 0.0
                draft[...] = 0
            return result
        verify.stops = True
    """
    res, _ = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output


@pytest.mark.xfail(strict=True, reason=(
    "gap: the statistical checks sample a stops verifier only through its split form (Stops.unbounded: no stop "
    "tokens), and the stops check forces every verification (p = q or one-hot), so a verifier whose sampling is "
    "lossy only when it is given stop tokens (resample_from_p there; the path an engine always takes) passes "
    "markov-v4 and stops with exit 0; expected: exit 1"))
def test_a_verifier_lossy_only_when_given_stops_fails(cli, tmp_path):
    body = """
        from specaudit.verifiers.zoo import chain
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                out, n_out = chain.MUTANTS["resample_from_p"].func(draft, q, p, num_draft, rng)
            else:
                out, n_out = _chain.verify(draft, q, p, num_draft, rng)
            return apply_stops(out, n_out, stops)
        verify.stops = True
    """
    out = tmp_path / "r.json"
    res = cli("run", _target(tmp_path, body), "-s", "stops", "-s", "markov-v4", "--samples", "20000", "--no-power",
              "--json", out)
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output


def test_a_declared_stops_verifier_behind_the_torch_adapter_is_not_reported_undeclared(cli, tmp_path):
    pytest.importorskip("torch")
    body = """
        import torch
        from specaudit.verifiers.zoo.stops import budget_ignored
        def verify(draft, q, p, num_draft, generator, stops=None):
            rng = np.random.default_rng(int(torch.randint(0, 2 ** 31, (1,), generator=generator)))
            args = (draft.numpy(), q.numpy(), p.numpy(), num_draft.numpy(), rng)
            if stops is None:
                return tuple(torch.from_numpy(x) for x in _chain.verify(*args))
            return tuple(torch.from_numpy(x) for x in budget_ignored(*args, stops))
        verify.stops = True
    """
    res, doc = _run(cli, tmp_path, _target(tmp_path, body), "--adapter", "torch")
    assert "does not declare the stops contract" not in res.output + json.dumps(doc)
    assert res.exit_code in (ExitCode.CHECKS_FAILED, ExitCode.USAGE_ERROR), res.output


def test_a_wrapped_finished_value_is_shown_as_returned(cli, tmp_path):
    body = """
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            finished = finished.astype(np.uint64)
            if len(finished):
                finished[0] = 2 ** 64 - 1
            return out, n_out, finished
        verify.stops = True
    """
    res, doc = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert "18446744073709551615" in _evidence(doc), _evidence(doc)


def test_an_exception_from_the_returned_value_is_attributed_to_the_return(cli, tmp_path):
    body = """
        class Finished:
            def __array__(self, dtype=None, copy=None):
                raise RuntimeError("array boom")
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            return (out, n_out, Finished()) if _stops_given(stops) else (out, n_out, finished)
        verify.stops = True
    """
    res, doc = _run(cli, tmp_path, _target(tmp_path, body))
    assert res.exit_code == ExitCode.CHECKS_FAILED
    assert "from a signal handler or a thread" not in _evidence(doc), _evidence(doc)


def _session(sid: int) -> list[int]:
    """Return the live processes of session ``sid`` (the supervised child has a process group of its own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _end_session(proc: subprocess.Popen) -> None:
    """End a CLI started with ``start_new_session`` and every process of its session (no orphan left hanging)."""
    proc.send_signal(signal.SIGTERM)  # the CLI ends its child on a stop
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    for pid in _session(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate()


def test_a_return_value_that_hangs_when_read_is_bounded_by_the_timeout(tmp_path):
    path = tmp_path / "hangs_when_read.py"
    path.write_text(HEADER + textwrap.dedent("""
        import time
        class Finished:
            def __array__(self, dtype=None, copy=None):
                while True:
                    time.sleep(0.1)
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            return (out, n_out, Finished()) if _stops_given(stops) else (out, n_out, finished)
        verify.stops = True
    """))
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "specaudit", "run", f"{path}:verify", "-s", "stops", "--timeout", "1",
                             "--no-power", "--json", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        _end_session(proc)
        pytest.fail("the run hung past --timeout 1 + its grace (killed after 15 s)")
    assert proc.returncode == ExitCode.CHECKS_FAILED, output
    assert json.loads(out.read_text())["scenarios"][0]["status"] == "error"


# --- the Python API -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("supervised", [True, False], ids=["supervised", "in-process"])
def test_the_api_gives_the_same_verdicts(tmp_path, supervised):
    raises = _target(tmp_path, """
        def verify(draft, q, p, num_draft, rng, stops):
            if _stops_given(stops):
                raise RuntimeError("boom in the stops call")
            return _reference(draft, q, p, num_draft, rng, stops)
        verify.stops = True
    """, "raises")
    result = specaudit.run(raises, ["stops"], supervised=supervised, timeout=2, power=False)
    (scenario,) = result.scenarios
    stops = next(c for c in scenario.checks if c.name == "stops")
    assert result.exit_code() == ExitCode.CHECKS_FAILED and stops.status.value == "error"
    assert "boom in the stops call" in stops.summary
    mutant = specaudit.run("specaudit.verifiers.zoo.stops:cap_before_stop", ["stops"], supervised=supervised,
                           power=False)
    assert mutant.exit_code() == ExitCode.CHECKS_FAILED
    assert [c.name for c in mutant.scenarios[0].checks if c.status.value == "failed"] == ["stops"]
    assert specaudit.run("reference-stops", ["stops"], supervised=supervised, power=False).exit_code() == ExitCode.OK


@pytest.mark.parametrize("raised", ["SystemExit(0)", "RuntimeError('array boom')"])
def test_the_in_process_api_contains_what_a_return_value_raises(tmp_path, raised):
    target = _target(tmp_path, f"""
        class Finished:
            def __array__(self, dtype=None, copy=None):
                raise {raised}
        def verify(draft, q, p, num_draft, rng, stops):
            out, n_out, finished = _reference(draft, q, p, num_draft, rng, stops)
            return (out, n_out, Finished()) if _stops_given(stops) else (out, n_out, finished)
        verify.stops = True
    """)
    try:
        result = specaudit.run(target, ["stops"], supervised=False, timeout=2, power=False)
    except BaseException as exc:  # noqa: BLE001 - what escapes is the finding
        pytest.fail(f"{type(exc).__name__}({exc}) escaped specaudit.run(supervised=False)")
    assert result.exit_code() == ExitCode.CHECKS_FAILED


# --- the scenario keys --------------------------------------------------------------------------------------------

SHIPPED = Path(resolve(["stops"])[0].path)


def _edited(tmp_path: Path, old: str, new: str, name: str = "bad.yaml") -> Path:
    text = SHIPPED.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("old, new, says", [
    ("stop_tokens: [7, 5]", 'stop_tokens: "7"', ":16: stop_tokens: Input should be a valid list (got '7')"),
    ("stop_tokens: [7, 5]", 'stop_tokens: "7, 5"', ":16: stop_tokens: Input should be a valid list (got '7, 5')"),
    ("stop_tokens: [7, 5]", "stop_tokens: 7", ":16: stop_tokens: Input should be a valid list (got 7)"),
    ("stop_tokens: [7, 5]", "stop_tokens: {eos: 7}", ":16: stop_tokens: Input should be a valid list"),
    ("stop_tokens: [7, 5]", "stop_tokens: [[7], [5]]", ":16: stop_tokens[0]: Input should be a valid integer"),
    ("stop_tokens: [7, 5]", "stop_tokens: [7.0, 5]", ":16: stop_tokens[0]: Input should be a valid integer (got 7.0)"),
    ("stop_tokens: [7, 5]", "stop_tokens: [6.5]", ":16: stop_tokens[0]: Input should be a valid integer (got 6.5)"),
    ("stop_tokens: [7, 5]", "stop_tokens: [.inf]", ":16: stop_tokens[0]: Input should be a valid integer (got inf)"),
    ("stop_tokens: [7, 5]", "stop_tokens: [true]", ":16: stop_tokens[0]: Input should be a valid integer (got True)"),
    ("stop_tokens: [7, 5]", "stop_tokens: ['7']", ":16: stop_tokens[0]: Input should be a valid integer (got '7')"),
    ("stop_tokens: [7, 5]", "stop_tokens: [7, null]", ":16: stop_tokens[1]: Input should be a valid integer (got None)"),
    ("stop_tokens: [7, 5]", "stop_tokens: [99999999999999999999999999]",
     ":16: stop_tokens: token 99999999999999999999999999 is outside the vocabulary; allowed: ids 0..7"),
    ("stop_tokens: [7, 5]", "stop_tokens: [9223372036854775808]",
     ":16: stop_tokens: token 9223372036854775808 is outside the vocabulary"),
    ("stop_tokens: [7, 5]", "stop_tokens: [7, 5]\nstop_tokens: [6]",
     ":17: stop_tokens: duplicate key (first given at line 16)"),
    ("max_tokens: 6", "max_tokens: 6.0", ":17: max_tokens: Input should be a valid integer (got 6.0)"),
    ("max_tokens: 6", "max_tokens: 6.5", ":17: max_tokens: Input should be a valid integer (got 6.5)"),
    ("max_tokens: 6", "max_tokens: -3", ":17: max_tokens: Input should be greater than or equal to 1 (got -3)"),
    ("max_tokens: 6", "max_tokens: true", ":17: max_tokens: Input should be a valid integer (got True)"),
    ("max_tokens: 6", 'max_tokens: "6"', ":17: max_tokens: Input should be a valid integer (got '6')"),
    ("max_tokens: 6", "max_tokens: [6]", ":17: max_tokens: Input should be a valid integer"),
    ("max_tokens: 6", "max_tokens: .inf", ":17: max_tokens: Input should be a valid integer (got inf)"),
    ("max_tokens: 6", "max_tokens: .nan", ":17: max_tokens: Input should be a valid integer (got nan)"),
    ("max_tokens: 6", "max_tokens: 6\nmax_tokens: 7", ":18: max_tokens: duplicate key (first given at line 17)"),
])
def test_a_hostile_stop_key_exits_4_naming_file_line_and_key(cli, tmp_path, old, new, says):
    bad = _edited(tmp_path, old, new)
    for command in (("validate", bad), ("run", "reference-stops", "-s", bad, "--no-power")):
        res = cli(*command)
        assert res.exit_code == ExitCode.USAGE_ERROR and f"{bad}{says}" in res.output, res.output


@pytest.mark.parametrize("old, new", [
    ("max_tokens: 6", "max_tokens: 99999999999999999999999999"),  # no budget a call reaches
    ("max_tokens: 6", "max_tokens: 1"),
    ("max_tokens: 6", "max_tokens: null"),
    ("stop_tokens: [7, 5]", "stop_tokens: null"),
    ("stop_tokens: [7, 5]", "stop_tokens: [0x7]"),
    ("stop_tokens: [7, 5]", "stop_tokens: [0, 1, 2, 3, 4, 5, 6]"),  # every id but one
])
def test_an_odd_but_valid_stop_key_runs_and_judges(cli, tmp_path, old, new):
    path = _edited(tmp_path, old, new, "odd.yaml")
    assert cli("validate", path).exit_code == ExitCode.OK
    assert cli("run", "reference-stops", "-s", path, "--no-power").exit_code == ExitCode.OK
    res = cli("run", "specaudit.verifiers.zoo.stops:budget_ignored", "-s", path, "--no-power")
    assert res.exit_code == ExitCode.CHECKS_FAILED and "stops" in res.output, res.output


def test_stop_tokens_covering_the_vocabulary_are_a_usage_error(cli, tmp_path):
    bad = _edited(tmp_path, "stop_tokens: [7, 5]", "stop_tokens: [0, 1, 2, 3, 4, 5, 6, 7]")
    for command in (("validate", bad), ("run", "reference-stops", "-s", bad, "--no-power")):
        res = cli(*command)
        assert res.exit_code == ExitCode.USAGE_ERROR and f"{bad}:16: stop_tokens" in res.output, res.output


def test_stop_keys_on_a_sampled_scenario_run_every_check(cli, tmp_path):
    sampled = _edited(tmp_path, "mode: exact", "mode: sample", "sampled.yaml")
    sampled.write_text(sampled.read_text().replace("name: stops", "name: stops-sampled"))
    out = tmp_path / "ref.json"
    res = cli("run", "reference-stops", "-s", sampled, "--samples", "2000", "--no-power", "--json", out)
    assert res.exit_code == ExitCode.OK, res.output
    checks = {c["name"]: c["status"] for c in json.loads(out.read_text())["scenarios"][0]["checks"]}
    assert checks["stops"] == "passed" and "joint-law" in checks
    out = tmp_path / "mutant.json"
    res = cli("run", "specaudit.verifiers.zoo.stops:cap_before_stop", "-s", sampled, "--samples", "2000", "--no-power",
              "--json", out)
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    (scenario,) = json.loads(out.read_text())["scenarios"]
    assert [c["name"] for c in scenario["checks"] if c["status"] == "failed"] == ["stops"], _evidence({"scenarios": [scenario]})

