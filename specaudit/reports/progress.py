"""Progress on stderr while a run measures: a rich bar on a terminal, plain lines elsewhere.

The runner calls ``progress(scenario, done, total)`` after every batch of finished sequences.
On a terminal this drives one bar per scenario (sequences done, sequences/s, time left),
removed when the run ends so the summary table stands alone. On anything else (a file, a
pipe, a CI log) nothing animates and no escape code is written: with ``-v`` one plain line per
finished scenario, otherwise silence.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class ProgressReporter:
    """A ``progress(scenario, done, total)`` callback; use it as a context manager."""

    def __init__(self, console: Console, verbosity: int = 0):
        self.console = console
        self.live = console.is_terminal and not console.is_dumb_terminal and verbosity >= 0
        self.lines = not self.live and verbosity > 0
        self._bar: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._started: dict[str, float] = {}

    def __enter__(self) -> ProgressReporter:
        if self.live:
            self._bar = Progress(
                TextColumn("{task.description}", style="bold", markup=False),  # a scenario name is text
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("sequences · {task.fields[rate]} seq/s"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def rerun(self, scenario: str, samples: int, seconds: float) -> None:
        """Say, before it starts, that SUSPECT ``scenario`` is re-run and what it will cost (an estimate)."""
        self.console.print(f"specaudit: {scenario} is SUSPECT: re-running it on a fresh seed with {samples:,} sequences "
                           f"(about {_duration(seconds)} at its first run's pace)", markup=False, highlight=False)

    def __call__(self, scenario: str, done: int, total: int) -> None:
        """Record that ``done`` of ``total`` sequences of ``scenario`` are finished."""
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
