"""The supervisor's check of each child message's shape and place in the run (supervisor._out_of_turn).

A frame that checks is the child's (its key, specaudit.engine.frames); this is the check behind it: a
message out of turn or malformed (a specaudit bug, or bytes that passed the frame check) ends the
child with its scenario an ERROR, never a green run or an exception in the supervisor.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import types
from typing import Any

import pytest

from specaudit.checks.statistical import Measured
from specaudit.engine.supervisor import _Job, _out_of_turn
from specaudit.results import ErrorInfo, ScenarioResult

JOBS = [_Job(0), _Job(1)]


def _result() -> ScenarioResult:
    return ScenarioResult.__new__(ScenarioResult)  # isinstance is all the check reads


def _measured() -> Measured:
    return Measured.__new__(Measured)


def test_the_childs_own_sequence_passes():
    measured: set[int] = set()
    started: list[int] = []
    assert _out_of_turn(("bound", "t:verify", None), JOBS, started, measured, bound=False) is None
    for job in JOBS:  # one after the other (--jobs 1)
        assert _out_of_turn(("start", job.index), JOBS, started, measured, bound=True) is None
        started.append(job.index)
        assert _out_of_turn(("progress", "s", 1, 2), JOBS, started, measured, bound=True) is None
        assert _out_of_turn(("look", (0, 0), _measured(), 3, False), JOBS, started, measured, bound=True) is None
        assert _out_of_turn(("result", job.index, _result()), JOBS, started, measured, bound=True) is None
        measured.add(job.index)
    assert _out_of_turn(("done",), JOBS, started, measured, bound=True) is None
    assert _out_of_turn(("error", "UsageError", "no", 4), JOBS, [], set(), bound=False) is None
    assert _out_of_turn(("internal", "KeyError", "tb"), JOBS, [0], set(), bound=True) is None


def test_scenarios_in_flight_together_pass():
    """--jobs N: the next scenario starts beside the last blocks of one, and the results still come in job order."""
    jobs = [_Job(3), _Job(4), _Job(7)]
    steps = [("start", 7), ("start", 3), ("look", (0, 2), _measured(), 1, True), ("start", 4),
             ("result", 3, _result()), ("look", (0, 1), _measured(), 1, True), ("result", 4, _result()),
             ("result", 7, _result()), ("done",)]
    assert _out_of_turn(("doubt", [3, 4]), jobs, [7, 3, 4], set(), bound=True) is None
    started: list[int] = []
    measured: set[int] = set()
    for message in steps:
        assert _out_of_turn(message, jobs, started, measured, bound=True) is None, message
        if message[0] == "start":
            started.append(message[1])
        if message[0] == "result":
            measured.add(message[1])


@pytest.mark.parametrize("message, started, measured, bound, why", [
    (("done",), [0, 1], {0}, True, "'done' with 1 scenario(s) unmeasured"),
    (("done",), [0], {0}, True, "'done' with 1 scenario(s) unmeasured"),
    (("start", 0), [0], {0}, True, "a 'start' of scenario 0 out of turn"),
    (("start", 0), [0], set(), True, "a 'start' of scenario 0 out of turn"),
    (("start", 5), [], set(), True, "a 'start' of scenario 5 out of turn"),
    (("look", None), [0], set(), True, "a 'look' out of turn or malformed"),
    (("look", (0, 0), _measured(), 3, False), [], set(), True, "a 'look' out of turn or malformed"),
    (("look", (0, 0), _measured(), 3, False), [0], {0}, True, "a 'look' out of turn or malformed"),
    (("result", 1, _result()), [0, 1], set(), True, "a 'result' out of turn or malformed"),
    (("result", 1, _result()), [0], {0}, True, "a 'result' out of turn or malformed"),
    (("result", 0, "x"), [0], set(), True, "a 'result' out of turn or malformed"),
    (("bound", "t", None), [], set(), True, "a 'bound' message out of turn"),
    (("bound", object, 5), [], set(), False, "a 'bound' message out of turn"),
    (("start", 0), [], set(), False, "a 'start' message before the target was bound"),
    (("error", "E", "m", "4"), [], set(), True, "a malformed 'error' message"),
    (("progress", "s", "1", 2), [0], set(), True, "a malformed 'progress' message"),
    (("hello",), [], set(), True, "a message of kind 'hello'"),
    (("doubt", [0]), [0, 1], set(), True, "a 'doubt' out of turn or malformed"),  # one scenario is no doubt
    (("doubt", [0, 1]), [0], set(), True, "a 'doubt' out of turn or malformed"),  # 1 has not started
    (("doubt", (0, 1)), [0, 1], set(), True, "a 'doubt' out of turn or malformed"),
])
def test_a_message_out_of_turn_or_malformed_says_why(message, started, measured, bound, why):
    assert _out_of_turn(message, JOBS, started, measured, bound=bound) == why


def _supervisor(slots: int = 3) -> Any:
    from specaudit.engine import supervisor
    from specaudit.engine.settings import RunSettings

    loaded = [types.SimpleNamespace(spec=types.SimpleNamespace(name=name)) for name in "abc"]
    return supervisor._Supervisor("specaudit.verifiers.reference:verify", loaded, RunSettings(jobs=slots - 1), None)


def _scripted(sup: Any, script: list[Any]) -> list[list[int]]:
    """Make ``sup`` run scripted children: each step is (results it sends, what it returns); return each child's jobs."""
    children: list[list[int]] = []

    def one_child(jobs: list[_Job], on_result: Any) -> Any:
        children.append([j.index for j in jobs])
        sends, ended = script[len(children) - 1]
        for index in sends:  # an index, or (index, the error its result holds)
            index, error = index if isinstance(index, tuple) else (index, None)
            on_result(index, _Stub(f"result of {index}", error and ErrorInfo("died", error)))
        if ended is None:
            return None
        return [j for j in jobs if j.index in ended], ErrorInfo("died", "it died")

    sup._one_child = one_child
    sup._base = lambda job: _Stub(f"base of {job.index}")
    return children


@dataclasses.dataclass(frozen=True)
class _Stub:
    """A stand-in result: measure() only passes results on, or replaces their error."""

    text: str
    error: Any = None


def _seen(sup: Any, jobs: list[int]) -> list[tuple[int, str, str | None]]:
    seen: list[tuple[int, str, str | None]] = []
    try:
        sup.measure([_Job(i) for i in jobs], lambda i, r: seen.append((i, r.text, r.error and r.error.message)))
    finally:
        sup.close()
    return seen


def test_results_pass_on_in_job_order_when_a_later_scenario_is_charged_first():
    # --jobs 2: the child died in scenario 1's call while scenario 0 was still in flight; 0 is measured again,
    # whole, in the next child, and the run sees 0, 1, 2 in that order
    sup = _supervisor()
    children = _scripted(sup, [([], [1]), ([0, 2], None)])
    assert _seen(sup, [0, 1, 2]) == [(0, "result of 0", None), (1, "base of 1", "it died"), (2, "result of 2", None)]
    assert children == [[0, 1, 2], [0, 2]]


def test_a_death_two_scenarios_could_have_caused_is_charged_to_the_one_that_dies_again():
    sup = _supervisor()
    # the first child died with 0 and 1 in flight and no call to tell; one at a time, 0 passes and 1 dies again
    children = _scripted(sup, [([], [0, 1]), ([0], [1]), ([2], None)])
    assert _seen(sup, [0, 1, 2]) == [(0, "result of 0", None), (1, "base of 1", "it died"), (2, "result of 2", None)]
    assert children == [[0, 1, 2], [0, 1, 2], [2]] and sup._alone


def test_a_death_that_does_not_come_back_is_an_error_of_every_scenario_that_could_have_caused_it():
    sup = _supervisor()
    _scripted(sup, [([], [0, 1]), ([0, 1, 2], None)])
    seen = _seen(sup, [0, 1, 2])
    assert [(i, text) for i, text, _ in seen] == [(0, "result of 0"), (1, "result of 1"), (2, "result of 2")]
    assert seen[0][2] == seen[1][2] == ("it died; measured again one scenario at a time, none of a, b died: the death "
                                        "is not explained (an ERROR all the same)")
    assert seen[2][2] is None


def test_a_scenario_on_probation_that_errs_measured_alone_is_charged_with_its_own_error():
    # measured alone with --jobs 2, scenario 1's worker died again in its own pool: the child lives, and sends 1's
    # result with that death (not a death of the child's); 1 is charged, 0 is clean (a helper's hostile pass: both
    # were ERRORs, "none of a, b died")
    sup = _supervisor()
    _scripted(sup, [([], [0, 1]), ([0, (1, "its worker died again")], None), ([2], None)])
    assert _seen(sup, [0, 1, 2]) == [(0, "result of 0", None), (1, "result of 1", "its worker died again"),
                                     (2, "result of 2", None)]


def test_a_child_that_ends_charging_nothing_is_an_internal_error_not_a_loop():
    from specaudit.engine import supervisor

    sup = _supervisor()
    sup._one_child = lambda jobs, on_result: None
    try:
        with pytest.raises(supervisor._Internal, match="none charged"):
            sup.measure([_Job(0)], lambda i, r: None)
    finally:
        sup.close()


@pytest.mark.parametrize("running, blamed, suspects", [
    ([3, 7], [7], [7]),  # the call it died in, or was killed for
    ([3, 7], [3, 3, 9], [3]),  # a scenario the verifier wrote on the board that is not running is ignored
    ([3, 7], [3, 7], [3, 7]),  # calls of two scenarios: either could have
    ([3, 7], [], [3, 7]),  # in no call: either could have
    ([7], [], [7]),  # one running: that one
    ([], [9], [3]),  # nothing started: the next one
])
def test_the_scenarios_a_child_may_have_died_on(running, blamed, suspects):
    from specaudit.engine.supervisor import _suspects

    left = [_Job(3), _Job(7), _Job(8)]
    assert [j.index for j in _suspects(left, running, blamed)] == suspects


@pytest.mark.parametrize("needs, together, groups", [
    ([10, 20, 30], True, [[0, 1, 2]]),  # the default suite: kilobytes, one pool
    ([10, 20, 30], False, [[0], [1], [2]]),  # --jobs 1, or probation: one each
    ([60, 50, 10, 90, 5], True, [[0], [1, 2], [3, 4]]),  # within a budget of 100
    ([150, 10, 10], True, [[0], [1, 2]]),  # a scenario past the budget alone
    ([], True, []),
])
def test_consecutive_scenarios_share_a_pool_within_the_memory_budget(needs, together, groups):
    from specaudit.engine.supervisor import pools

    assert pools(needs, together, budget=100) == groups


@pytest.mark.usefixtures("start_method")
def test_an_oserror_the_verifiers_signal_handler_raises_while_the_child_awaits_an_answer_is_the_verifiers(tmp_path):
    # TimeoutError is an OSError: raised by a handler of the verifier's while the child read the answer to a look,
    # it was taken for a pipe the verifier had cut ("the child could not hear the supervisor"), not for its own error
    import importlib.util
    import os

    from specaudit.engine.supervisor import _await_answer, _CutOff

    handler = tmp_path / "handler.py"
    handler.write_text("def fire():\n    raise TimeoutError('its own')\n")
    spec = importlib.util.spec_from_file_location("verifier_handler", handler)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Reader:
        received, last_read, closed = 0, 0.0, False

        def __init__(self, fault):
            self.fault = fault

        def next(self, timeout):
            self.fault()

    answered = types.SimpleNamespace(value=0)
    with pytest.raises(TimeoutError, match="its own"):
        _await_answer(Reader(module.fire), answered)
    from specaudit.engine import frames

    read, write = os.pipe()
    answers = frames.Reader(read, b"k" * 32, 1 << 20)
    os.close(write)
    os.close(read)  # the verifier closed the answers' pipe: the read's own OSError
    with pytest.raises(_CutOff, match="could not be read|was closed"):
        _await_answer(answers, answered)


def _may_raise_priority() -> bool:
    """Return True when this process may lower a thread's niceness (privileged, or RLIMIT_NICE allows it)."""
    import resource

    return os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] > 20 - os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="niceness per thread is Linux's")
@pytest.mark.skipif(not _may_raise_priority(), reason="this process may not raise a thread's priority")
def test_settle_gives_the_import_thread_back_its_priority_while_the_run_waits_on_it():
    # a stopped run waits for the warm imports; at a low priority on a busy CI box that wait outlasted 90 s
    import threading

    from specaudit.engine.supervisor import _WARM_NICENESS, _Supervisor

    restored = threading.Event()

    def warm(tid: list[int]) -> None:
        tid.append(threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, tid[0], _WARM_NICENESS)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.getpriority(os.PRIO_PROCESS, tid[0]) <= os.getpriority(os.PRIO_PROCESS, os.getpid()):
                restored.set()
                return
            time.sleep(0.005)

    sup = _Supervisor.__new__(_Supervisor)
    sup._warming_tid = []
    sup._warming = threading.Thread(target=warm, args=(sup._warming_tid,), daemon=True)
    sup._warming.start()
    while not sup._warming_tid or os.getpriority(os.PRIO_PROCESS, sup._warming_tid[0]) != _WARM_NICENESS:
        time.sleep(0.001)
    sup.settle()
    assert restored.is_set(), "the import thread kept its low priority while the run waited for it"
