"""Formatting shared by every reporter: p-values, p-value clauses, compact numbers, visible text.

The terminal table, the HTML page, the GitHub summary and the pytest assertion message all show
the same p-values, so they format them here, once: three significant digits, and ``<1e-300``
for a p-value that underflowed to exactly 0 (a double cannot hold a smaller tail, so "0" would
claim more than was computed). Other numbers use :func:`number` (thousands separators for
counts, scientific notation only for very large or very small values). What a terminal would act on
rather than show (an escape sequence in a verifier's message) goes through :func:`visible`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["FLOOR", "number", "optional", "pvalue", "pvalue_clause", "shown", "visible"]

#: What a terminal acts on rather than shows: the C0 controls but tab and newline, DEL and the C1 controls.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

#: Shown, after ``<``, for a p-value of exactly 0.
FLOOR = "1e-300"


def pvalue(p: Any, missing: str = "") -> str:
    """Format a p-value with 3 significant digits ('<1e-300' for 0, ``missing`` for None)."""
    if p is None:
        return missing
    p = float(p)
    if p == 0:
        return f"<{FLOOR}"
    return f"{p:.3g}"


def pvalue_clause(p: Any, name: str = "p", missing: str | None = None, spaced: bool = False) -> str:
    """Format 'p = 0.03', or 'p <1e-300' for 0 ('p < 1e-300' when ``spaced``); None gives 'p ``missing``'."""
    if p is None and missing is not None:
        return f"{name} {missing}"
    text = pvalue(p)
    if text.startswith("<"):
        return f"{name} < {FLOOR}" if spaced else f"{name} {text}"
    return f"{name} = {text}"


def optional(x: Any, spec: str = ".3g") -> str:
    """Format ``x`` with ``spec``, or '' for None."""
    if x is None:
        return ""
    return format(x, spec)


def number(x: Any, digits: int = 4) -> str:
    """Format a number compactly; pass strings and others through."""
    if isinstance(x, bool) or x is None:
        return "" if x is None else str(x).lower()
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(number(v, digits) for v in x) + "]"
    return str(x)


def visible(text: Any) -> str:
    """Return ``text`` with every control character shown as its escape (ESC as ``\\x1b``, CR as ``\\r``).

    A verifier's message, a traceback or a path is printed as the characters it holds: an escape
    sequence in it would colour, retitle or clear the user's terminal, and in a file it is noise.
    """
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def shown(value: Any) -> Any:
    """Return ``value`` (a result, a comparison: frozen dataclasses, dicts, lists) with :func:`visible` applied to every string.

    The terminal report prints what a verifier, a user or a results file wrote (names, messages,
    tracebacks, paths, a diagnosis): it renders ``shown(result)``, so no string reaches the
    terminal unescaped, whichever field holds it. Enums (statuses) and numbers are kept.
    """
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        return visible(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: shown(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init})
    if isinstance(value, Mapping):
        return {shown(k): shown(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(shown(v) for v in value)
    return value
