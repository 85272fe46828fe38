"""HTML report: one self-contained, offline file rendered from a RunResult.

The page is a pure function of the results document: the run renders the RunResult read back
from its own JSON form (:func:`specaudit.results.document.roundtrip`), and
``specaudit report r.json --html`` renders ``document.read("r.json")``, so both give the same
bytes. Jinja2 autoescapes every string of the result (target, names, descriptions, messages), its
control characters shown as escapes (``\\x1b``, :func:`specaudit.reports.format.visible`);
only the SVG produced by :mod:`specaudit.reports.plots` (which escapes its own labels) is
inserted as markup. No script, font or stylesheet is loaded from anywhere.

The top of the page is what a reader needs first: the reproduce line (a ``specaudit run``
command rebuilt from the recorded settings, the seed, the specaudit/python/numpy versions and
the platform from ``RunResult.environment``), then the summary: what failed or stays suspect,
one "looks like" box per diagnosed mutant (not one per scenario), the scenarios whose power
figures flag them as blind or underpowered, and the suspects that their re-run cleared (shown
as resolved, never as failures). A default run's page is ~225 kB and renders in ~0.3 s of CPU
(``benchmarks/html_report.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import math
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specaudit.reports import format as fmt
from specaudit.reports import plots
from specaudit.results import RERUN_LABEL, CheckResult, RunResult, ScenarioResult, Status
from specaudit.results.document import SCHEMA_VERSION, atomic_write

#: Data values longer than this (as JSON) are shown truncated in the raw-data box (the results JSON has them whole).
RAW_LIMIT = 2000
#: Runs with more scenarios than this draw plots and raw data only for the scenarios that did not pass.
DETAIL_LIMIT = 100
#: Significant digits of the numbers in the raw-data boxes.
RAW_DIGITS = 6
#: The ``--alpha`` default of ``specaudit run`` (left out of the rebuilt command).
DEFAULT_ALPHA = 1e-3


@functools.cache
def _env() -> Any:
    """Return the Jinja2 environment (built once per process: compiling the template is most of a small render)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
    from markupsafe import Markup

    def shown(value: Any) -> Any:  # every {{ }} of text: NUL or ESC, which no HTML may hold, as their escapes
        return fmt.visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value

    env = Environment(
        finalize=shown,
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


def _rounded(v: Any) -> Any:
    """Return ``v`` with every float rounded to :data:`RAW_DIGITS` significant digits (for display)."""
    if isinstance(v, float):
        return float(f"{v:.{RAW_DIGITS}g}") if math.isfinite(v) else str(v)
    if isinstance(v, Mapping):
        return {str(k): _rounded(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_rounded(x) for x in v]
    return v


def _raw(v: Any) -> str:
    text = json.dumps(_rounded(v), indent=None, separators=(",", ":"))
    return text if len(text) <= RAW_LIMIT else text[:RAW_LIMIT] + f" ... ({len(text):,} characters)"


def _shape(data: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Return (vocab, length) of a joint law from its stored cells, if it can be told."""
    top = data.get("top_cells") or []
    n = len(data.get("observed") or [])
    if not top or not n or not isinstance(top[0], Mapping):
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


def _note(p: Any, gate: bool) -> str:
    """Return '(p = 0.03)', '(p = 0.03, not gating)', '(not gating)' or '' (never an empty 'p = ')."""
    parts = ([fmt.pvalue_clause(p)] if p is not None else []) + ([] if gate else ["not gating"])
    return f"({', '.join(parts)})" if parts else ""


def _check_view(c: CheckResult, light: bool = False) -> dict[str, Any]:
    data = c.data or {}
    vocab, length = _shape(data)
    scalars = {k: v for k, v in data.items() if _scalar(v)}
    shown_p = c.adjusted_pvalue if c.adjusted_pvalue is not None else c.pvalue
    columns = [(k, f(v)) for k, v, f in (("statistic", c.statistic, fmt.number), ("df", c.df, str),
                                         ("p", c.pvalue, fmt.pvalue), ("p (Holm)", c.adjusted_pvalue, fmt.pvalue))
               if v is not None]
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
        "plots": plots.for_check(data, vocab, length) if data and not light else [],
        "scalars": scalars,
        "columns": [*columns, *((k, fmt.number(v)) for k, v in scalars.items())],
        "raw": {} if light else {k: _raw(v) for k, v in data.items() if k not in scalars and k != "top_cells"},
        "top_cells": data.get("top_cells") or [],
        "shown_p": shown_p,
        "note": _note(shown_p, c.gate),
    }


def _sensitivity(s: ScenarioResult) -> Mapping[str, Any]:
    """Return the power figures of the attempt that decides the scenario (its re-run, if any)."""
    last = s.attempts()[-1]
    return (last.info or {}).get("sensitivity") or (s.info or {}).get("sensitivity") or {}


def _scenario_view(s: ScenarioResult, light: bool = False) -> dict[str, Any]:
    """Return one card's context; ``light`` leaves out its plots and raw data (a passed scenario of a long run)."""
    info = s.info or {}
    power_rows = [] if light else _power_rows(info)
    sens = _sensitivity(s)
    return {
        **{k: getattr(s, k) for k in ("name", "path", "line", "content_hash", "description", "seed", "samples",
                                      "error", "seconds", "verifier_seconds", "calls")},
        "status": s.status.value,
        # a SUSPECT scenario's re-run follows its first result and decides it
        "checks": [_check_view(c, light) for c in s.reported_checks()],
        "light": light,
        "rerun": None if s.rerun is None else {"seed": s.rerun.seed, "samples": s.rerun.samples,
                                                "status": s.rerun.status.value},
        "diagnosis": info.get("diagnosis"),
        "repro": info.get("repro") or [],
        "certificate": None if s.certificate is None else dataclasses.asdict(s.certificate) | {
            "certified": s.certificate.certified},
        "power_svg": plots.power(power_rows) if power_rows else None,
        "sensitivity": sens,
        "flag": str(sens["flag"]) if sens.get("flag") else None,
        "info_scalars": {k: v for k, v in info.items() if _scalar(v)},
        "info_raw": {} if light else {k: _raw(v) for k, v in info.items()
                                      if not _scalar(v) and k not in ("diagnosis", "sensitivity", "repro") and "power" not in k},
    }


def _problems(result: RunResult, views: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (problems, resolved): what fails or stays suspect, and the suspects a re-run cleared.

    A scenario with a re-run is decided by it (``ScenarioResult.status``): a first-attempt p-value
    check that was suspect (or failed) and passed on the re-run is *resolved*, never a failure; an
    exact probe that failed or errored at the first attempt stays a problem whatever the re-run
    found; the re-run's own failing checks are problems too.
    """
    problems: list[dict[str, Any]] = []
    resolved: list[dict[str, Any]] = []
    bad = ("failed", "suspect", "error")
    for s, v in zip(result.scenarios, views):
        if s.error is not None:
            problems.append({"scenario": v, "check": None, "error": s.error})
        checks = {c["name"]: c for c in v["checks"]}
        if s.rerun is None:
            problems.extend({"scenario": v, "check": c, "error": None} for c in v["checks"] if c["status"] in bad)
            continue
        again = {c.name: c for c in s.rerun.checks}
        for c in s.checks:
            if c.status.value not in bad:
                continue
            if c.gate and c.pvalue is None and c.status in (Status.FAILED, Status.ERROR):  # an exact finding stands
                problems.append({"scenario": v, "check": checks[c.name], "error": None})
                continue
            later = again.get(c.name)
            if (later is not None and later.status.value not in bad) or (later is None and s.rerun.status.value == "passed"):
                resolved.append({"scenario": v, "check": checks[c.name], "rerun": v["rerun"],
                                 "again": checks.get(f"{c.name} {RERUN_LABEL}")})
        if s.rerun.error is not None:
            problems.append({"scenario": v, "check": None, "error": s.rerun.error})
        problems.extend({"scenario": v, "check": checks[f"{c.name} {RERUN_LABEL}"], "error": None}
                        for c in s.rerun.checks if c.status.value in bad)
    return problems, resolved


def _diagnoses(problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group the failing scenarios by the mutant their diagnosis names (one box per mutant, in run order)."""
    groups: dict[str | None, dict[str, Any]] = {}
    seen: set[str] = set()
    for pr in problems:
        s = pr["scenario"]
        d = s["diagnosis"]
        if not isinstance(d, Mapping) or s["name"] in seen:
            continue
        seen.add(s["name"])
        best = d.get("best")
        key = best["mutant"] if isinstance(best, Mapping) else None
        g = groups.setdefault(key, {"best": best, "scenarios": [], "similarities": [],
                                    "min_similarity": d.get("min_similarity")})
        g["scenarios"].append(s["name"])
        if isinstance(best, Mapping) and isinstance(best.get("similarity"), (int, float)):
            g["similarities"].append(float(best["similarity"]))
    for g in groups.values():
        sims = g["similarities"]
        g["similarity"] = "" if not sims else f"{min(sims):.2f}" if len(sims) == 1 else f"{min(sims):.2f}-{max(sims):.2f}"
    return list(groups.values())


def _blind(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group the scenarios whose power figures flag them (blind to, or underpowered against, the common bug)."""
    groups: dict[str, list[str]] = {}
    for v in views:
        if v["flag"]:
            groups.setdefault(v["flag"], []).append(v["name"])
    return [{"flag": flag, "scenarios": names} for flag, names in groups.items()]


def _shipped_folder() -> str | None:
    """Return the folder of the shipped scenario files (their ``-s`` value is the name), if installed."""
    try:
        spec = importlib.util.find_spec("specaudit.shipped")
    except (ImportError, ValueError):
        return None
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.normpath(places[0]) if places else None


def reproduce(result: RunResult) -> dict[str, Any]:
    """Return the reproduce line: a command rebuilt from the recorded settings, the seed, versions, platform.

    The command is rebuilt from the results document (target, scenarios, seed, alpha and the
    recorded settings) rather than copied from the shell, so it holds for runs made from Python
    too; a shipped scenario is named, any other file is given by its path. Options that change no
    verdict (``--jobs``, output paths) are left out.
    """
    settings = result.settings or {}
    shipped = _shipped_folder()
    picks: list[str] = []
    built_in_python = []
    for s in result.scenarios:
        folder = os.path.normpath(os.path.dirname(s.path)) if s.path else ""
        pick = s.name if shipped is not None and folder == shipped else s.path
        if s.path.startswith("<"):
            built_in_python.append(s.name)
            continue
        if pick not in picks:
            picks.append(pick)
    cmd = ["specaudit", "run", result.target, *(a for p in picks for a in ("-s", p))]
    if result.seed is not None:
        cmd += ["--seed", str(result.seed)]
    if result.alpha != DEFAULT_ALPHA:
        cmd += ["--alpha", f"{result.alpha:g}"]
    if settings.get("samples") is not None:
        cmd += ["--samples", str(settings["samples"])]
    for key, flag, default in (("method", "--method", "pearson"), ("contract", "--contract", "probs")):
        if settings.get(key, default) != default:
            cmd += [flag, str(settings[key])]
    if settings.get("timeout", 60.0) != 60.0:
        cmd += ["--timeout", f"{settings['timeout']:g}"]
    if settings.get("gate_efficiency") is False:
        cmd.append("--allow-inefficient")
    if settings.get("early_stop"):
        cmd.append("--early-stop")
    if settings.get("certify_tv") is not None:
        cmd += ["--certify-tv", f"{settings['certify_tv']:g}"]
    env = result.environment or {}
    return {
        "command": shlex.join(cmd),
        "built_in_python": built_in_python,
        "seed": result.seed,
        "adapter": settings.get("adapter"),
        "merged_shards": settings.get("merged_shards"),
        "versions": [("specaudit", result.version), ("python", env.get("python")), ("numpy", env.get("numpy")),
                     *([(env["engine"], env.get("engine_version"))] if env.get("engine") else [])],
        "platform": env.get("platform"),
    }


def view(result: RunResult) -> dict[str, Any]:
    """Return the template's context: the run plus counts, headline, grouped findings and plots."""
    light = len(result.scenarios) > DETAIL_LIMIT  # a long run: plots only where something went wrong
    scenarios = [_scenario_view(s, light and s.status in (Status.PASSED, Status.SKIPPED)) for s in result.scenarios]
    counts: dict[str, int] = {}
    for s in scenarios:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    problems, resolved = _problems(result, scenarios)
    n_stat = sum(1 for s in scenarios for c in s["checks"] if c["pvalue"] is not None)
    return {
        "doc": result,
        "schema_version": SCHEMA_VERSION,
        "status": result.status.value,
        "scenarios": scenarios,
        "detail_limit": DETAIL_LIMIT if light else None,
        "counts": sorted(counts.items(), key=lambda kv: -Status(kv[0]).severity),
        "problems": problems,
        "resolved": resolved,
        "diagnoses": _diagnoses(problems),
        "blind": _blind(scenarios),
        "reproduce": reproduce(result),
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
