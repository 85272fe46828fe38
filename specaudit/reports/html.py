"""HTML report: one self-contained, offline file rendered from a RunResult.

The page is a pure function of the results document: the run renders the RunResult read back
from its own JSON form (:func:`specaudit.results.document.roundtrip`), and
``specaudit report r.json --html`` renders ``document.read("r.json")``, so both give the same
bytes. Jinja2 autoescapes every string of the result (target, descriptions, messages); only the
SVG produced by :mod:`specaudit.reports.plots` is inserted as markup. No script, font or
stylesheet is loaded from anywhere.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specaudit.reports import format as fmt
from specaudit.reports import plots
from specaudit.results import CheckResult, RunResult, ScenarioResult, Status
from specaudit.results.document import SCHEMA_VERSION, atomic_write

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
    env.filters["p"] = fmt.pvalue
    env.filters["num"] = fmt.number
    env.filters["p_clause"] = fmt.pvalue_clause
    return env


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


def _check_view(c: CheckResult) -> dict[str, Any]:
    data = c.data or {}
    vocab, length = _shape(data)
    scalars = {k: v for k, v in data.items() if _scalar(v)}
    return {
        "name": c.name,
        "category": c.category.value,
        "status": c.status.value,
        "summary": c.summary,
        "statistic": c.statistic,
        "pvalue": c.pvalue,
        "df": c.df,
        "adjusted_pvalue": c.adjusted_pvalue,
        "gate": c.gate,
        "plots": plots.for_check(data, vocab, length),
        "scalars": scalars,
        "raw": {k: _raw(v) for k, v in data.items() if k not in scalars and k != "top_cells"},
        "top_cells": data.get("top_cells") or [],
        "shown_p": c.adjusted_pvalue if c.adjusted_pvalue is not None else c.pvalue,
    }


def _scenario_view(s: ScenarioResult) -> dict[str, Any]:
    info = s.info or {}
    power_rows = _power_rows(info)
    return {
        **{k: getattr(s, k) for k in ("name", "path", "line", "content_hash", "description", "seed", "samples",
                                      "error", "seconds", "verifier_seconds", "calls")},
        "status": s.status.value,
        # a SUSPECT scenario's re-run follows its first result and decides it
        "checks": [_check_view(c) for c in s.reported_checks()],
        "diagnosis": info.get("diagnosis"),
        "power_svg": plots.power(power_rows) if power_rows else None,
        "info_scalars": {k: v for k, v in info.items() if _scalar(v)},
        "info_raw": {k: _raw(v) for k, v in info.items() if not _scalar(v) and k != "diagnosis" and "power" not in k},
    }


def view(result: RunResult) -> dict[str, Any]:
    """Return the template's context: the run plus counts, headline and plots."""
    scenarios = [_scenario_view(s) for s in result.scenarios]
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
    n_stat = sum(1 for s in scenarios for c in s["checks"] if c["pvalue"] is not None)
    return {
        "doc": result,
        "schema_version": SCHEMA_VERSION,
        "status": result.status.value,
        "scenarios": scenarios,
        "counts": sorted(counts.items(), key=lambda kv: -Status(kv[0]).severity),
        "problems": problems,
        "n_statistical": n_stat,
        "pvalues_svg": plots.pvalues(result),
        "tokens_svg": plots.tokens_per_step(result),
        "baseline": result.baseline,
        "settings": result.settings or {},
    }


def render(result: RunResult) -> str:
    """Return the HTML page for a run (render the RunResult read back from its document)."""
    return _env().get_template("report.html.j2").render(**view(result))


def output_path(path: str | Path, target: str) -> Path:
    """Return the file for ``--html PATH``: PATH itself, or ``specaudit-<target>.html`` in a folder."""
    p = Path(path)
    if str(path).endswith(("/", os.sep)) or p.is_dir():
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", target).strip("_.")[:80] or "run"
        return p / f"specaudit-{slug}.html"
    return p


def write(result: RunResult, path: str | Path) -> Path:
    """Render ``result`` to ``path`` atomically (parent folders are created)."""
    return atomic_write(path, render(result))
