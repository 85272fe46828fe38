"""measure_units with several units in flight on one pool (--jobs N): a unit's blocks that still run when it is decided
are its own to the end, a worker that dies beside blocks of several units is put in doubt, and the rest go on."""

from __future__ import annotations

import types
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import pytest

from specaudit.engine import executors
from specaudit.engine.executors import DIED, BlockError, Doubted, Finished, Unit, measure_units
from specaudit.results import ErrorInfo


class _Tally:
    def __init__(self) -> None:
        self.blocks: list[int] = []
        self.seconds = 0.0
        self.sequences = 0

    def merge(self, other: _Tally) -> None:
        self.blocks += other.blocks


def _unit(name: str, blocks: int) -> Unit:
    bench = types.SimpleNamespace(empty=_Tally, spec=types.SimpleNamespace(name=name), sizes=[1] * blocks)
    return Unit(bench, 0, list(range(blocks)))  # type: ignore[arg-type]


class _Pool:
    """A pool whose blocks end at once, as ``outcome(unit, block)`` says: a tally, a BlockError, or a dead worker."""

    def __init__(self, outcome: Any, slots: int):
        self.outcome, self.slots = outcome, slots

    def broken(self, exc: BaseException) -> bool:
        return isinstance(exc, BrokenProcessPool)

    def submit(self, i: int, unit: Unit, block: int, tick: Any = None) -> Future:
        fut: Future = Future()
        got = self.outcome(i, block)
        if isinstance(got, BaseException):
            fut.set_exception(got)
        else:
            fut.set_result(got)
        return fut

    def close(self) -> None:
        pass


def _measure(monkeypatch: Any, outcome: Any, units: list[Unit], slots: int, doubt: Any = None) -> dict[int, Any]:
    monkeypatch.setattr(executors, "_executor", lambda *a, **k: _Pool(outcome, slots))
    errors: dict[int, Any] = {}
    for event in measure_units(units, jobs=2):  # every look answered "go on"
        if isinstance(event, Doubted) and doubt is not None:
            doubt(event.indices)
        elif isinstance(event, Finished):
            assert event.index not in errors  # each unit is decided once
            errors[event.index] = event.outcome.error
    return errors


def _tally(block: int) -> _Tally:
    t = _Tally()
    t.blocks = [block]
    return t


def test_a_worker_that_dies_in_a_leftover_block_of_an_erred_unit_is_that_units_death(monkeypatch):
    # unit 0 erred at block 0 with block 1 in flight; block 1's worker died: unit 0's, never unit 1's (which ran after)
    crash = ErrorInfo("crash", "the verifier raised RuntimeError")

    def outcome(i: int, block: int) -> Any:
        if i == 0:
            return BlockError(crash, 0.0) if block == 0 else BrokenProcessPool("a worker died")
        return _tally(block)

    errors = _measure(monkeypatch, outcome, [_unit("a", 2), _unit("b", 2)], slots=2)
    assert errors[0] is not None and errors[0].kind == DIED
    assert errors[1] is None


def test_a_fault_in_a_block_left_running_after_the_last_look_is_still_the_units(monkeypatch):
    # unit 0 erred at block 0; block 1, already running, crashed too: the unit keeps its first error; its result comes
    # only once block 1 has ended (so a hang there is charged to it, not to unit 1)
    first, second = ErrorInfo("crash", "first"), ErrorInfo("crash", "second")

    def outcome(i: int, block: int) -> Any:
        if i == 0:
            return BlockError(first if block == 0 else second, 0.0)
        return _tally(block)

    errors = _measure(monkeypatch, outcome, [_unit("a", 2), _unit("b", 1)], slots=3)
    assert errors == {0: first, 1: None}


def test_a_worker_that_dies_beside_blocks_of_two_units_is_put_in_doubt_first(monkeypatch):
    doubted: list[list[int]] = []

    def outcome(i: int, block: int) -> Any:
        return BrokenProcessPool("a worker died") if (i, block) == (0, 0) else _tally(block)

    errors = _measure(monkeypatch, outcome, [_unit("a", 2), _unit("b", 2)], slots=4, doubt=doubted.append)
    assert doubted == [[0, 1]]
    assert errors[0].kind == DIED and errors[1].kind == DIED  # unsupervised (no doubt to settle it): both, never a pass


def test_a_worker_death_is_also_put_on_an_undecided_unit_whose_blocks_ran_in_that_pool(monkeypatch):
    # unit 1's first block left a thread behind that ends a worker later, in a block of unit 0; unit 1 had no block in
    # flight then (it waited at its first look): it was left out, and unit 0 alone was charged with the death
    doubted: list[list[int]] = []

    def outcome(i: int, block: int) -> Any:
        return BrokenProcessPool("a worker died") if (i, block) == (0, 1) else _tally(block)

    a, b = _unit("a", 3), _unit("b", 2)
    a.looks, b.looks = [1, 3], [1, 2]
    errors = _measure(monkeypatch, outcome, [a, b], slots=2, doubt=doubted.append)
    assert doubted == [[0, 1]]
    assert errors[0].kind == DIED and errors[1].kind == DIED


@pytest.mark.parametrize("slots", [1, 2, 4])
def test_clean_units_all_come_out_clean_however_many_run_at_once(monkeypatch, slots):
    errors = _measure(monkeypatch, lambda i, block: _tally(block), [_unit("a", 3), _unit("b", 2), _unit("c", 1)], slots)
    assert errors == {0: None, 1: None, 2: None}
