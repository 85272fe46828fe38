"""Progress on stderr while a run measures: a rich bar on a terminal, plain lines elsewhere.

The runner calls ``progress(scenario, done, total)`` after every batch of finished sequences.
On a terminal this drives one bar per scenario (sequences done, sequences/s, time left),
removed when the run ends so the summary table stands alone. On anything else (a file, a
pipe, a CI log) nothing animates and no escape code is written: with ``-v`` one plain line per
finished scenario, otherwise silence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


class ProgressReporter:
    """A ``progress(scenario, done, total)`` callback; use it as a context manager.

    ``console`` is a rich Console, or a function that returns one: then rich is imported when the
    reporter is first needed (:meth:`open`), not before. A supervised run opens it right after
    forking its child, so the ~60 ms of rich's imports are not spent before the first block (issue 20).
    """

    def __init__(self, console: Console | Callable[[], Console], verbosity: int = 0):
        self._make = console if callable(console) else (lambda: console)
        self.verbosity = verbosity
        self._console: Console | None = None
        self.live = False
        self.lines = False
        self._bar: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._started: dict[str, float] = {}
        self._entered = False

    @property
    def console(self) -> Console:
        """Return the console (opening the reporter)."""
        self.open()
        assert self._console is not None
        return self._console

    def open(self) -> None:
        """Make the console and, on a terminal inside the ``with`` block, start the bar (once)."""
        if self._console is not None:
            return
        console = self._console = self._make()
        self.live = console.is_terminal and not console.is_dumb_terminal and self.verbosity >= 0
        self.lines = not self.live and self.verbosity > 0
        if self.live and self._entered:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}", style="bold", markup=False),  # a scenario name is text
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("sequences · {task.fields[rate]} seq/s"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self._bar.start()

    def __enter__(self) -> ProgressReporter:
        self._entered = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._entered = False
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def rerun(self, scenario: str, samples: int, seconds: float) -> None:
        """Say, before it starts, that SUSPECT ``scenario`` is re-run and what it will cost (an estimate)."""
        self.console.print(f"specaudit: {scenario} is SUSPECT: re-running it on a fresh seed with {samples:,} sequences "
                           f"(about {_duration(seconds)} at its first run's pace)", markup=False, highlight=False)

    def __call__(self, scenario: str, done: int, total: int) -> None:
        """Record that ``done`` of ``total`` sequences of ``scenario`` are finished."""
        self.open()
        now = time.perf_counter()
        start = self._started.setdefault(scenario, now)
        rate = done / (now - start) if now > start else 0.0
        if self._bar is not None:
            task = self._tasks.get(scenario)
            if task is None:
                task = self._tasks[scenario] = self._bar.add_task(scenario, total=total, rate="-")
            self._bar.update(task, completed=done, rate=f"{rate:,.0f}")
        elif self.lines and done >= total:
            self.console.print(f"specaudit: {scenario}: {total:,} sequences in {now - start:.2f} s ({rate:,.0f} seq/s)",
                               markup=False, highlight=False)


def _duration(seconds: float) -> str:
    """Return ``seconds`` as '12 s', '3.5 min' or '1.2 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
