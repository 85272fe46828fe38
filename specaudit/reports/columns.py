"""Tables that fit the console width without cutting a number or a name.

rich shrinks a table wider than the console by wrapping its cells and, where a word is longer
than the space left, cutting it with "…": at 80 columns a Holm p of 1e-117 printed as
``1.01e-1…`` (issue 19). Here the reporters give each column the breaks it allows (after a
space; after ``,`` or ``/`` between letters; before the ``/df`` of a statistic) and this module
computes the widths itself: natural widths when they fit, otherwise every column at least as
wide as its longest unbreakable piece, the rest shared out. A table whose unbreakable pieces do
not fit returns None, and the caller prints another layout (grouped rows, a legend, plain lines).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich import box as boxes
from rich.cells import cell_len
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

__all__ = ["Column", "fit", "fit_first", "fit_matrix", "pieces", "wrap"]

#: Break opportunities: after whitespace; after "," or "/" between two letters ("block,toy",
#: "tokens/step"; never inside "200,000" or "1/3").
_TEXT_BREAKS = re.compile(r"(?<=\s)(?=\S)|(?<=[A-Za-z_][,/])(?=[A-Za-z_])")
#: A statistic "2033.0/50df" may also break before its "/df" part.
_STAT_BREAKS = re.compile(r"(?<=\s)(?=\S)|(?=/\d+df$)")

Breaks = Literal["text", "stat", "none"]
Cell = str | Text


@dataclass(frozen=True)
class Column:
    """One column: its header, alignment and where its cells may break."""

    header: str
    justify: Literal["left", "center", "right"] = "left"
    breaks: Breaks = "text"


def pieces(text: str, breaks: Breaks = "text") -> list[str]:
    """Split ``text`` into the pieces no line break may cut (trailing spaces kept)."""
    if breaks == "none" or not text:
        return [text]
    pattern = _STAT_BREAKS if breaks == "stat" else _TEXT_BREAKS
    lead = len(text) - len(text.lstrip())  # an indent is not a break
    cuts = [m.start() for m in pattern.finditer(text) if lead < m.start() < len(text)]
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _min_width(text: str, breaks: Breaks) -> int:
    return max((cell_len(p.rstrip()) for line in text.split("\n") for p in pieces(line, breaks)), default=0)


def _natural_width(text: str) -> int:
    return max((cell_len(line.rstrip()) for line in text.split("\n")), default=0)


def wrap(cell: Cell, width: int, breaks: Breaks = "text") -> Text:
    """Return ``cell`` with line breaks inserted at its allowed breaks so no line exceeds ``width``.

    Styles survive (the text is divided, not rebuilt). A piece wider than ``width`` gets a line
    of its own; callers size columns so that does not happen.
    """
    text = cell if isinstance(cell, Text) else Text(cell)
    out: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        offsets: list[int] = []
        used = pos = 0
        for piece in pieces(line.plain, breaks):
            if used and used + cell_len(piece.rstrip()) > width:
                offsets.append(pos)
                used = 0
            used += cell_len(piece)
            pos += len(piece)
        for part in line.divide(offsets):
            part.rstrip()
            out.append(part)
    return Text("\n").join(out)


def overhead(ncols: int, show_edge: bool = True, pad_edge: bool = True) -> int:
    """Return the cells a boxed table with ``ncols`` columns spends on borders and padding (1 each side)."""
    return (2 if show_edge else 0) + (ncols - 1) + 2 * ncols - (0 if pad_edge else 2)


def _share(mins: list[int], nats: list[int], avail: int) -> list[int]:
    """Widen columns from their minimum toward their natural width within ``avail``, in proportion to their need."""
    need = [n - m for n, m in zip(nats, mins)]
    extra = avail - sum(mins)
    total = sum(need)
    give = [min(d, extra * d // total) if total else 0 for d in need]
    left = extra - sum(give)
    for i in sorted(range(len(need)), key=lambda i: need[i] - give[i], reverse=True):  # the rounding remainder
        more = min(left, need[i] - give[i])
        give[i] += more
        left -= more
    return [m + g for m, g in zip(mins, give)]


def fit(
    columns: Sequence[Column],
    rows: Iterable[Sequence[Cell] | None],
    width: int | None,
    *,
    title: Cell | None = None,
    show_edge: bool = True,
    pad_edge: bool = True,
    **table: Any,
) -> Table | None:
    """Return a rich Table of ``rows`` no wider than ``width``, or None when it cannot fit whole.

    ``rows`` holds one sequence of cells per row; None ends a section (a rule under the row
    before). ``width`` None: natural widths, as rich would lay the table out on a wide console.
    Extra keywords go to ``rich.table.Table``.
    """
    body = list(rows)
    real = [r for r in body if r is not None]
    mins, nats = [], []
    for j, col in enumerate(columns):
        texts = [col.header] + [_plain(r[j]) for r in real]
        mins.append(max(_min_width(t, col.breaks) for t in texts))
        nats.append(max(_natural_width(t) for t in texts))
    mins = [max(m, 1) for m in mins]
    nats = [max(n, m) for n, m in zip(nats, mins)]
    if width is None:
        widths = nats
    else:
        avail = width - overhead(len(columns), show_edge, pad_edge)
        if sum(mins) > avail:
            return None
        widths = nats if sum(nats) <= avail else _share(mins, nats, avail)
    out = Table(title=title, title_justify="left", show_edge=show_edge, pad_edge=pad_edge,
                box=table.pop("box", boxes.HEAVY_HEAD), **table)
    for col, w in zip(columns, widths):
        out.add_column(wrap(col.header, w, col.breaks), justify=col.justify, width=w, overflow="fold")
    for r in body:
        if r is None:
            out.add_section()
            continue
        out.add_row(*(wrap(cell, w, col.breaks) for cell, w, col in zip(r, widths, columns)))
    return out


def fit_first(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell] | None], width: int | None, **table: Any
) -> Table | None:
    """Return :func:`fit`'s table, or the same without its outer border when only that fits."""
    return fit(columns, rows, width, **table) or fit(columns, rows, width, show_edge=False, **table)


def fit_matrix(
    lead: Sequence[Column],
    names: Sequence[str],
    rows: Sequence[tuple[Sequence[Cell], Sequence[Cell]]],
    width: int | None,
    *,
    title: Cell | None = None,
) -> list[RenderableType]:
    """Return a matrix whose columns are ``names`` (scenarios), laid out to fit ``width``.

    ``rows`` holds (lead cells, one cell per name). Headers are the names when the table fits
    whole; otherwise the columns are numbered, with a legend below, and split over as few
    tables as fit (never a cut name).
    """
    n = len(names)

    def build(idx: Sequence[int], numbered: bool, head: Cell | None, w: int | None, edge: bool) -> Table | None:
        cols = [*lead, *(Column(str(i + 1) if numbered else names[i], "center") for i in idx)]
        return fit(cols, [[*a, *(b[i] for i in idx)] for a, b in rows], w, title=head, show_edge=edge)

    for edge in (True, False):
        whole = build(range(n), False, title, width, edge)
        if whole is not None:
            return [whole]
    for count in range(1, n + 1):  # the fewest tables that fit, their columns shared out evenly
        size = -(-n // count)
        chunks = [range(k, min(k + size, n)) for k in range(0, n, size)]
        for edge in (True, False):
            tables = [build(c, True, title if k == 0 else None, width, edge) for k, c in enumerate(chunks)]
            if all(t is not None for t in tables):
                legend = Text("columns: " + ", ".join(f"{i + 1} = {name}" for i, name in enumerate(names)), style="dim")
                out: list[RenderableType] = [t for t in tables if t is not None]
                return [*out, legend]
    return [t for t in (build(range(n), False, title, None, True),) if t is not None]  # narrower than any column
