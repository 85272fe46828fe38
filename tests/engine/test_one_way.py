"""A run's data flows one way through the engine: no call from one of its modules into a module above it.

The import layers (pyproject's ``engine-one-way`` contract, checked by ``lint-imports``) say what
may import what; they cannot see a callback handed down and called from below. This test
watches a real run with a profiler: every call that crosses from one engine module into another
must point down the layers (run, scenario, tasks and executors, bench). Results, looks and
worker deaths come back up as what the lower module yields; a generator resumed by its consumer
is a call down. The reporter's own observers (``progress``, ``on_scenario``) are outside the
engine and not counted. A negative control plants one callback from below and must be caught.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from specaudit.engine import bench, run
from specaudit.engine.run import execute
from specaudit.engine.settings import RunSettings

#: The engine modules a run passes through, top first (pyproject's engine-one-way layers).
LAYERS = [
    ("specaudit.engine.api",),
    ("specaudit.engine.run",),
    ("specaudit.engine.scenario",),
    ("specaudit.engine.executors", "specaudit.engine.tasks"),
    ("specaudit.engine.bench", "specaudit.engine.device"),
]
RANK = {module: rank for rank, group in enumerate(LAYERS) for module in group}


def _rank(frame: Any) -> int | None:
    return RANK.get(frame.f_globals.get("__name__") or "")


@contextmanager
def _watched() -> Iterator[tuple[list[tuple[str, str]], dict[tuple[str, str], int]]]:
    """Record every call between two engine modules: the upward ones, and how often each downward edge is taken."""
    upward: list[tuple[str, str]] = []
    down: dict[tuple[str, str], int] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or (callee := _rank(frame)) is None:
            return
        caller = frame.f_back
        while caller is not None and _rank(caller) is None:  # through numpy, checks, the verifier: the nearest engine frame
            caller = caller.f_back
        if caller is None:
            return
        above = _rank(caller)
        assert above is not None
        edge = (f"{caller.f_globals['__name__']}:{caller.f_code.co_name}",
                f"{frame.f_globals['__name__']}:{frame.f_code.co_name}")
        if callee < above:
            upward.append(edge)
        elif callee > above:
            down[edge] = down.get(edge, 0) + 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield upward, down
    finally:
        sys.setprofile(previous)


def _audit(**settings: Any) -> tuple[Any, list[tuple[str, str]], dict[tuple[str, str], int]]:
    with _watched() as (upward, down):
        result = execute("specaudit.verifiers.reference:verify", ["markov-v4", "corners"],
                         RunSettings(samples=2000, seed=1, **settings), on_scenario=lambda r: None,
                         progress=lambda name, done, total: None)
    return result, upward, down


@pytest.mark.parametrize("settings", [{}, {"early_stop": True}, {"jobs": 2}], ids=["plain", "early-stop", "jobs-2"])
def test_a_run_calls_only_down_the_engine(settings):
    result, upward, down = _audit(**settings)
    assert result.exit_code() == 0 and len(result.scenarios) == 2
    assert upward == []
    # the run reached every layer, by the one way down: run -> scenario -> executors -> bench
    assert any(a.startswith("specaudit.engine.run:") and b.startswith("specaudit.engine.scenario:") for a, b in down)
    assert any(a.startswith("specaudit.engine.scenario:") and b.startswith("specaudit.engine.executors:measure_units")
               for a, b in down)
    assert any(b.startswith("specaudit.engine.bench:") for _, b in down)
    if settings.get("early_stop"):  # looks were decided, by the scenario, on what the executor yielded
        assert all(c.name != "joint-law" or c.status.name == "PASSED" for c in result.scenarios[0].checks)
        assert "early_stop" in result.scenarios[0].info


def test_a_callback_from_below_is_caught(monkeypatch):
    # negative control: bench calls a function of run's (a callback handed down, as the engine had before)
    original = bench.Bench.measured

    def callback(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    planted: Callable[..., Any] = types.FunctionType(callback.__code__, run.__dict__, "callback", None,
                                                     callback.__closure__)

    def measured(self: Any, *args: Any, **kwargs: Any) -> Any:
        return planted(self, *args, **kwargs)

    measured.__module__ = "specaudit.engine.bench"
    monkeypatch.setattr(bench.Bench, "measured", types.FunctionType(measured.__code__, bench.__dict__, "measured",
                                                                    None, measured.__closure__))
    _, upward, _ = _audit()
    assert ("specaudit.engine.bench:measured", "specaudit.engine.run:callback") in upward
