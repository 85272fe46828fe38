"""The console script's stdout and stderr: a full, closed or broken stream costs its text, never the run.

``2>/dev/full`` ended a correct verifier's run with exit 1 and its JSON left ``running`` (the
progress bar's write raised, then so did the error message's); ``>/dev/full`` and ``2>&-`` were
internal errors (exit 3). :func:`guard_streams` makes every standard descriptor open (a closed one
is ``/dev/null``, so no file the run opens takes its number) and wraps ``sys.stdout`` and
``sys.stderr`` in :class:`Degrading` streams: the first write or flush that fails turns that
descriptor into ``/dev/null`` (what the process holds buffered goes there too) and is remembered, so
the run's verdict, its exit code and its report files are what they would have been.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

__all__ = ["Degrading", "guard_streams"]


class Degrading(io.TextIOBase):
    """A text stream that writes to ``stream`` until a write fails, then discards (its descriptor becomes /dev/null)."""

    def __init__(self, stream: Any, fd: int, name: str):
        self._stream = stream
        self._fd = fd
        self.name = name
        #: Why the stream was lost (the OS's message), or None while it works.
        self.lost: str | None = None

    def write(self, text: str) -> int:
        try:
            self._stream.write(text)
        except (OSError, ValueError) as exc:  # ENOSPC, EPIPE, EBADF; ValueError: a stream closed under it
            self._lose(exc)
        return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self._lose(exc)

    def _lose(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._fd)  # what stays buffered flushes into /dev/null: no error at exit (status 120)
        finally:
            os.close(null)
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def isatty(self) -> bool:
        try:
            return self.lost is None and bool(self._stream.isatty())
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._stream, "errors", None)


def _open_standard_descriptors() -> set[int]:
    """Open /dev/null on each of descriptors 0, 1 and 2 that is closed (``2>&-``); return those.

    Otherwise the next file opened takes that number: the child that runs the verifier writes its
    stdout to descriptor 2, which would be the pipe of its messages or a report being written.
    """
    reopened = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            reopened.add(fd)
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    return reopened


def guard_streams() -> tuple[Degrading, Degrading]:
    """Make the standard descriptors open and ``sys.stdout``, ``sys.stderr`` :class:`Degrading`; return the two.

    For a process that is the CLI (the console script): the streams stay replaced.
    """
    closed = _open_standard_descriptors()
    guarded = []
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None:  # closed when Python started: a text stream on the /dev/null just opened there
            stream = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                      line_buffering=True)
        wrapper = stream if isinstance(stream, Degrading) else Degrading(stream, fd, f"<{name}>")
        if fd in closed:
            wrapper.lost = "it was closed"
        setattr(sys, name, wrapper)
        guarded.append(wrapper)
    return guarded[0], guarded[1]
