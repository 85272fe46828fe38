"""The guard contains what Python raises: sys.exit, the verifier's own KeyboardInterrupt, GeneratorExit.

Only a real SIGINT (the flag set by `catch_interrupts`' handler) goes through as the user's Ctrl-C.
These run in this process (the Python API); tests/test_hostile.py covers the supervised CLI.
"""

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

import specaudit
import specaudit.errors
from specaudit.contract.guard import catch_interrupts, guarded, user_interrupted
from specaudit.errors import ExitCode, VerifierCrash
from specaudit.results import Status

CALLS = Path(__file__).parents[1] / "verifiers" / "hostile" / "calls.py"


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["untimed", "timed"])
@pytest.mark.parametrize(("raise_it", "message"), [
    (lambda: sys.exit(0), "the verifier called sys.exit(0)"),
    (lambda: sys.exit("bye"), "the verifier called sys.exit('bye')"),
    (lambda: sys.exit(), "the verifier called sys.exit()"),
    (lambda: (_ for _ in ()).throw(KeyboardInterrupt), "the verifier raised KeyboardInterrupt itself"),
    (lambda: (_ for _ in ()).throw(GeneratorExit), "the verifier raised GeneratorExit"),
], ids=["exit0", "exit-msg", "exit-none", "keyboard-interrupt", "generator-exit"])
def test_base_exceptions_of_the_verifier_become_crashes(raise_it, message, timeout):
    with pytest.raises(VerifierCrash) as info:
        guarded(lambda *a: raise_it(), timeout)(1, 2)
    assert str(info.value).startswith(message)


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["untimed", "timed"])
@pytest.mark.parametrize(("exc", "message"), [
    (ValueError(), "the verifier raised ValueError"),  # no ": " after an empty message
    (ValueError("ends with a colon:"), "the verifier raised ValueError: ends with a colon:"),
    (_Unprintable(), "the verifier raised _Unprintable: (its __str__ raised RuntimeError)"),
], ids=["empty", "colon", "str-raises"])
def test_the_crash_says_what_was_raised_as_the_exception_says_it(exc, message, timeout):
    def verify(*args):
        raise exc

    with pytest.raises(VerifierCrash) as info:
        guarded(verify, timeout)(1, 2)
    assert info.value.args[0] == message


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["untimed", "timed"])
def test_a_real_sigint_is_the_users_and_goes_through(timeout):
    # positive control of the flag: the same KeyboardInterrupt, after a real SIGINT, is not converted
    def verify(*args):
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the SIGINT handler should have raised")

    with catch_interrupts(), pytest.raises(KeyboardInterrupt):
        guarded(verify, timeout)(1, 2)
    assert user_interrupted()
    with catch_interrupts():  # the flag is cleared for the next run
        assert not user_interrupted()


@pytest.mark.usefixtures("start_method")
def test_the_api_run_contains_sys_exit_and_goes_on():
    result = specaudit.run(f"{CALLS}:exit0", ["markov-v4", "peaked-v8"], samples=1000, diagnose=False, power=False)
    first, second = result.scenarios
    assert first.status is not Status.ERROR and second.status is Status.ERROR
    assert second.error.message == "the verifier called sys.exit(0)"
    assert result.exit_code() == ExitCode.CHECKS_FAILED


def test_a_dead_block_worker_in_the_api_run_is_that_scenarios_error(monkeypatch):
    # --jobs 2 in this process (supervised=False): the worker's os._exit breaks the pool; the scenario is an ERROR,
    # not an internal error
    monkeypatch.setenv("SPECAUDIT_HOSTILE_MIN_BATCH", "4096")
    result = specaudit.run(f"{CALLS}:os_exit0", ["peaked-v8", "markov-v4"], samples=15_001, jobs=2, diagnose=False,
                           power=False, supervised=False)
    first, second = result.scenarios
    assert first.error is not None and first.error.kind == "died" and "worker process died" in first.error.message
    # in this process the culprit cannot be told apart from a scenario whose blocks ran beside it: both are
    # ERRORs that say so (the supervised CLI measures them again to tell; tests/test_hostile.py)
    assert second.error is None or "blocks of peaked-v8 ran in the same pool of workers" in second.error.message
    assert result.exit_code() == ExitCode.CHECKS_FAILED


# --- the return value's own code (``__array__``, a tuple subclass's ``__iter__``) runs inside the guard ----------

class _ArrayRaises:
    def __init__(self, exc):
        self.exc = exc

    def __array__(self, dtype=None, copy=None):
        raise self.exc


class _IterRaises(tuple):
    def __iter__(self):
        raise SystemExit(0)


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["untimed", "timed"])
@pytest.mark.parametrize(("result", "message"), [
    ((_ArrayRaises(SystemExit(0)), 1), "reading the verifier's return value (tuple): its code called sys.exit(0)"),
    ((_ArrayRaises(RuntimeError("boom")), 1), "reading the verifier's return value (tuple): its code raised "
                                              "RuntimeError: boom"),
    ([1, _ArrayRaises(KeyboardInterrupt())], "reading the verifier's return value (list): its code raised "
                                             "KeyboardInterrupt itself (no Ctrl-C was pressed)"),
    (_IterRaises((1, 2)), "reading the verifier's return value (_IterRaises): its code called sys.exit(0)"),
], ids=["array-exit0", "array-raises", "array-keyboard-interrupt", "tuple-iter-exit0"])
def test_what_reading_the_return_value_raises_is_the_verifiers(result, message, timeout):
    with pytest.raises(VerifierCrash) as info:
        guarded(lambda *a: result, timeout)(1, 2)
    assert info.value.args[0] == message


def test_the_return_value_is_read_into_plain_arrays_and_containers():
    class Out:
        def __array__(self, dtype=None, copy=None):
            return np.arange(3)

    class Pair(tuple):
        pass

    got = guarded(lambda *a: Pair((Out(), [1, 2])))(1, 2)
    assert type(got) is tuple and type(got[0]) is np.ndarray and got[1] == [1, 2]
    plain = np.zeros(2)
    assert guarded(lambda *a: (plain,))()[0] is plain  # an ndarray is not copied
    assert guarded(lambda *a: {"r": Out()})()["r"].tolist() == [0, 1, 2]  # the loop contract's mapping


def test_a_return_value_that_hangs_when_read_is_under_the_timeout():
    import time

    class Slow:
        def __array__(self, dtype=None, copy=None):
            while True:
                time.sleep(0.05)

    start = time.monotonic()
    with pytest.raises(specaudit.errors.VerifierTimeout):
        guarded(lambda *a: (Slow(), 1), 0.5)()
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("raised", ["SystemExit(0)", "RuntimeError('array boom')"])
def test_the_in_process_api_contains_what_a_canonical_return_value_raises(tmp_path, raised):
    path = tmp_path / "returns.py"
    path.write_text(
        "from specaudit.verifiers.reference import verify as _reference\n"
        "class Out:\n"
        "    def __array__(self, dtype=None, copy=None):\n"
        f"        raise {raised}\n"
        "def verify(draft, q, p, num_draft, rng):\n"
        "    out, n_out = _reference(draft, q, p, num_draft, rng)\n"
        "    return Out(), n_out\n")
    result = specaudit.run(f"{path}:verify", ["markov-v4"], supervised=False, samples=1000, diagnose=False,
                           power=False)
    (scenario,) = result.scenarios
    assert scenario.status is Status.ERROR and "reading the verifier's return value" in scenario.error.message
    assert result.exit_code() == ExitCode.CHECKS_FAILED


class _Rows:
    """A sequence type of the verifier's own: reading it (numpy's ``len``/``getitem``) runs its code."""

    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise RuntimeError("row boom")


def test_an_object_of_the_verifiers_own_type_is_read_inside_the_guard():
    with pytest.raises(VerifierCrash) as info:
        guarded(lambda *a: (_Rows(), 1))()
    assert info.value.args[0] == "reading the verifier's return value (tuple): its code raised RuntimeError: row boom"
    assert guarded(lambda *a: ([[1, 2], [3]], 1))()[0] == [[1, 2], [3]]  # builtins stay for the contract's clauses


def test_a_ragged_out_is_a_contract_breach_with_exit_1_not_an_internal_error(cli, tmp_path):
    path = tmp_path / "ragged.py"
    path.write_text(
        "from specaudit.verifiers.reference import verify as _reference\n"
        "def verify(draft, q, p, num_draft, rng):\n"
        "    out, n_out = _reference(draft, q, p, num_draft, rng)\n"
        "    return [list(row)[: 1 + i % 2] for i, row in enumerate(out)], n_out\n")
    out = tmp_path / "r.json"
    result = cli("run", f"{path}:verify", "-s", "markov-v4", "--samples", "1000", "--no-power", "--json", str(out))
    assert result.exit_code == ExitCode.CHECKS_FAILED, result.output
    doc = __import__("json").loads(out.read_text())
    assert doc["exit_code"] == 1 and "out is not a rectangular array" in doc["scenarios"][0]["error"]["message"]
