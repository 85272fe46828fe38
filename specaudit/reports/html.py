"""HTML report: one self-contained, offline file rendered from the results JSON document.

The page is a pure function of the JSON (``render(doc)``): ``specaudit report r.json --html``
gives the same bytes as the run that wrote ``r.json``. Jinja2 autoescapes every string from
the document (target, descriptions, messages); only the SVG produced by
:mod:`specaudit.reports.plots` is inserted as markup. No script, font or stylesheet is loaded
from anywhere.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specaudit.reports import plots
from specaudit.results.document import scenario_checks
from specaudit.results import Status, document_status, worst

#: Data values longer than this (as JSON) are shown truncated in the raw-data box.
RAW_LIMIT = 4000


def _env():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("specaudit.reports", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["p"] = fmt_p
    env.filters["num"] = fmt_num
    env.filters["p_clause"] = fmt_p_clause
    return env


def fmt_p(p: Any) -> str:
    """Format a p-value ('<1e-300' for 0)."""
    if p is None:
        return ""
    p = float(p)
    if p == 0:
        return "<1e-300"
    return f"{p:.3g}"


def fmt_p_clause(p: Any) -> str:
    """Format 'p = 0.03', or 'p <1e-300' for 0."""
    text = fmt_p(p)
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def fmt_num(x: Any, digits: int = 4) -> str:
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
        return "[" + ", ".join(fmt_num(v, digits) for v in x) + "]"
    return str(x)


def _scalar(v: Any) -> bool:
    if isinstance(v, (int, float, str, bool)) or v is None:
        return True
    return isinstance(v, (list, tuple)) and len(v) <= 4 and all(isinstance(x, (int, float, str)) for x in v)


def _raw(v: Any) -> str:
    text = json.dumps(v, indent=None)
    return text if len(text) <= RAW_LIMIT else text[:RAW_LIMIT] + f" ... ({len(text):,} characters)"


def _shape(data: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Return (vocab, length) of a joint law from its stored cells, if it can be told."""
    top = data.get("top_cells") or []
    n = len(data.get("observed") or [])
    if not top or not n:
        return None, None
    length = len(top[0].get("cell", []))
    if length < 1:
        return None, None
    vocab = round(n ** (1 / length))
    return (vocab, length) if vocab**length == n else (None, None)


def _power_rows(info: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Return (mutant, power) pairs from any ``*power*`` entry of a scenario's info."""
    rows: list[tuple[str, float]] = []
    for key, value in info.items():
        if "power" not in key:
            continue
        items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
        for name, v in items:
            if isinstance(v, Mapping):
                name = v.get("mutant", v.get("name", name))
                v = v.get("power")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                rows.append((str(name), float(v)))
    return rows


def _check_view(c: Mapping[str, Any]) -> dict[str, Any]:
    data = c.get("data") or {}
    vocab, length = _shape(data)
    scalars = {k: v for k, v in data.items() if _scalar(v)}
    return {
        **c,
        "plots": plots.for_check(data, vocab, length),
        "scalars": scalars,
        "raw": {k: _raw(v) for k, v in data.items() if k not in scalars and k != "top_cells"},
        "top_cells": data.get("top_cells") or [],
        "shown_p": c.get("adjusted_pvalue") if c.get("adjusted_pvalue") is not None else c.get("pvalue"),
    }


def _scenario_view(s: Mapping[str, Any]) -> dict[str, Any]:
    checks = scenario_checks(s)  # a SUSPECT scenario's re-run follows its first result and decides it
    status = document_status(s).value
    info = s.get("info") or {}
    power_rows = _power_rows(info)
    return {
        **s,
        "status": status,
        "checks": [_check_view(c) for c in checks],
        "diagnosis": info.get("diagnosis"),
        "power_svg": plots.power(power_rows) if power_rows else None,
        "info_scalars": {k: v for k, v in info.items() if _scalar(v)},
        "info_raw": {k: _raw(v) for k, v in info.items() if not _scalar(v) and k != "diagnosis" and "power" not in k},
    }


def view(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Return the template's context: the document plus counts, headline and plots."""
    scenarios = [_scenario_view(s) for s in doc.get("scenarios", [])]
    counts: dict[str, int] = {}
    for s in scenarios:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    problems = []
    for s in scenarios:
        if s.get("error"):
            problems.append({"scenario": s, "check": None, "first": True})
        for c in s["checks"]:
            if c["status"] in ("failed", "suspect"):
                first = not problems or problems[-1]["scenario"] is not s
                problems.append({"scenario": s, "check": c, "first": first})
    n_stat = sum(1 for s in scenarios for c in s["checks"] if c.get("pvalue") is not None)
    status = doc.get("status") or worst([Status(s["status"]) for s in scenarios]).value
    return {
        "doc": doc,
        "status": status,
        "scenarios": scenarios,
        "counts": sorted(counts.items(), key=lambda kv: -Status(kv[0]).severity),
        "problems": problems,
        "n_statistical": n_stat,
        "pvalues_svg": plots.pvalues(doc),
        "tokens_svg": plots.tokens_per_step(doc),
        "baseline": doc.get("baseline"),
        "settings": doc.get("settings") or {},
    }


def render(doc: Mapping[str, Any]) -> str:
    """Return the HTML page for a results document (the dict that reports.json writes)."""
    return _env().get_template("report.html.j2").render(**view(doc))


def output_path(path: str | Path, target: str) -> Path:
    """Return the file for ``--html PATH``: PATH itself, or ``specaudit-<target>.html`` in a folder."""
    p = Path(path)
    if str(path).endswith(("/", os.sep)) or p.is_dir():
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", target).strip("_.")[:80] or "run"
        return p / f"specaudit-{slug}.html"
    return p


def write(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Render ``doc`` to ``path`` (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(doc), encoding="utf-8")
    return path
