"""The supervisor's check of each child message's shape and place in the run (supervisor._out_of_turn).

A frame that checks is the child's (its key, specaudit.engine.frames); this is the check behind it: a
message out of turn or malformed (a specaudit bug, or bytes that passed the frame check) ends the
child with its scenario an ERROR, never a green run or an exception in the supervisor.
"""

from __future__ import annotations

import pytest

from specaudit.checks.statistical import Measured
from specaudit.engine.supervisor import _Job, _out_of_turn
from specaudit.results import ScenarioResult

JOBS = [_Job(0), _Job(1)]


def _result() -> ScenarioResult:
    return ScenarioResult.__new__(ScenarioResult)  # isinstance is all the check reads


def _measured() -> Measured:
    return Measured.__new__(Measured)


def test_the_childs_own_sequence_passes():
    measured: set[int] = set()
    assert _out_of_turn(("bound", "t:verify", None), JOBS, None, measured, bound=False) is None
    for job in JOBS:
        assert _out_of_turn(("start", job.index), JOBS, None, measured, bound=True) is None
        assert _out_of_turn(("progress", "s", 1, 2), JOBS, job, measured, bound=True) is None
        assert _out_of_turn(("look", (0, 0), _measured(), 3, False), JOBS, job, measured, bound=True) is None
        assert _out_of_turn(("result", job.index, _result()), JOBS, job, measured, bound=True) is None
        measured.add(job.index)
    assert _out_of_turn(("done",), JOBS, None, measured, bound=True) is None
    assert _out_of_turn(("error", "UsageError", "no", 4), JOBS, None, measured, bound=False) is None
    assert _out_of_turn(("internal", "KeyError", "tb"), JOBS, JOBS[0], measured, bound=True) is None


@pytest.mark.parametrize("message, current, measured, bound, why", [
    (("done",), JOBS[1], {0}, True, "'done' with 1 scenario(s) unmeasured"),
    (("done",), None, {0}, True, "'done' with 1 scenario(s) unmeasured"),
    (("start", 0), None, {0}, True, "a 'start' of scenario 0 out of turn"),
    (("start", 5), None, set(), True, "a 'start' of scenario 5 out of turn"),
    (("start", 1), JOBS[0], set(), True, "a 'start' of scenario 1 out of turn"),
    (("look", None), JOBS[0], set(), True, "a 'look' out of turn or malformed"),
    (("look", (0, 0), _measured(), 3, False), None, set(), True, "a 'look' out of turn or malformed"),
    (("result", 1, _result()), JOBS[0], set(), True, "a 'result' out of turn or malformed"),
    (("result", 0, "x"), JOBS[0], set(), True, "a 'result' out of turn or malformed"),
    (("bound", "t", None), None, set(), True, "a 'bound' message out of turn"),
    (("bound", object, 5), None, set(), False, "a 'bound' message out of turn"),
    (("start", 0), None, set(), False, "a 'start' message before the target was bound"),
    (("error", "E", "m", "4"), None, set(), True, "a malformed 'error' message"),
    (("progress", "s", "1", 2), JOBS[0], set(), True, "a malformed 'progress' message"),
    (("hello",), None, set(), True, "a message of kind 'hello'"),
])
def test_a_message_out_of_turn_or_malformed_says_why(message, current, measured, bound, why):
    assert _out_of_turn(message, JOBS, current, measured, bound=bound) == why
