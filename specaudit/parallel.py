"""Parallel and sharded runs (issue 7): scenarios in worker processes, additive shard counts.

``--jobs N`` runs scenarios in N forked processes. Every scenario's seed is derived from the run
seed and its content (``runner.scenario_seed``), never from the order of execution, so results
are identical to ``--jobs 1``; they are yielded in the input order. ``--shard i/n`` runs every
n-th scenario-block of sequences (see :func:`shard_samples`) and writes additive counts that
``specaudit merge`` adds up.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from specaudit.errors import UsageError

T = TypeVar("T")

_TASK: Callable[[int], Any] | None = None  # inherited by forked workers; never pickled


def _call(i: int) -> Any:
    assert _TASK is not None
    return _TASK(i)


def map_ordered(task: Callable[[int], T], count: int, jobs: int = 1) -> Iterator[T]:
    """Yield ``task(0), ..., task(count - 1)`` in order, computed by up to ``jobs`` forked processes.

    The task (a closure over the verifier, which need not be picklable) reaches the workers by
    fork; only indices and results cross process boundaries. ``jobs <= 1`` runs in-process.
    """
    global _TASK
    if jobs < 1:
        raise UsageError(f"jobs = {jobs}; allowed: >= 1")
    if jobs == 1 or count <= 1 or "fork" not in mp.get_all_start_methods():
        for i in range(count):
            yield task(i)
        return
    _TASK = task
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, count), mp_context=mp.get_context("fork")) as pool:
            yield from pool.map(_call, range(count))
    finally:
        _TASK = None


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``i/n`` (0 <= i < n) into ``(i, n)``."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text}: expected i/n with integers, e.g. 0/2") from None
    if not (n >= 1 and 0 <= i < n):
        raise UsageError(f"--shard {text}: allowed 0 <= i < n, e.g. 0/2 and 1/2")
    return i, n
