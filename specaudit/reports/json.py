"""JSON report: the results file, the one report every other report can be rebuilt from.

The document's layout belongs to the results (:mod:`specaudit.results.document`, which the
engine also reads back, e.g. for ``specaudit merge``); this reporter only decides where it goes:
:func:`render` gives the text and :func:`write` puts it on disk atomically, so a run stopped
mid-write leaves the previous file whole.
"""

from __future__ import annotations

from pathlib import Path

from specaudit.results import RunResult, document

__all__ = ["render", "write"]


def render(result: RunResult) -> str:
    """Return the text of the results file of ``result`` (indented JSON, one trailing newline)."""
    return document.dumps(result)


def write(result: RunResult, path: str | Path) -> Path:
    """Write the results file of ``result`` to ``path`` atomically; return the path."""
    return document.atomic_write(path, render(result))
