"""GitHub Actions output: workflow-command annotations and a Markdown job summary.

Rendered from the results JSON document. Annotations point at the scenario YAML
(``ScenarioResult.path``/``line``), relative to the workspace, so GitHub shows them on the file
in pull requests. See "Workflow commands for GitHub Actions" (``::error file=...,line=...::``)
and ``$GITHUB_STEP_SUMMARY`` in the GitHub documentation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from specaudit.results.document import scenario_checks


def active(environ: Mapping[str, str] | None = None) -> bool:
    """Return True inside a GitHub Actions job."""
    return (environ if environ is not None else os.environ).get("GITHUB_ACTIONS") == "true"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _relative(path: str, workspace: str | None) -> str:
    base = Path(workspace or os.getcwd()).resolve()
    try:
        return str(Path(path).resolve().relative_to(base))
    except (ValueError, OSError):
        return path


def command(level: str, message: str, file: str | None = None, line: int | None = None, title: str | None = None) -> str:
    """Return one workflow command line, e.g. ``::error file=a.yaml,line=3,title=t::message``."""
    props = []
    if file:
        props.append(f"file={_escape_property(file)}")
    if line:
        props.append(f"line={int(line)}")
    if title:
        props.append(f"title={_escape_property(title)}")
    head = f"::{level} {','.join(props)}" if props else f"::{level}"
    return f"{head}::{_escape_data(message)}"


def annotations(doc: Mapping[str, Any], workspace: str | None = None) -> list[str]:
    """Return an annotation for every errored scenario and failed or suspect check."""
    out = []
    for s in doc.get("scenarios", []):
        where = {"file": _relative(str(s.get("path", "")), workspace), "line": s.get("line")}
        if where["file"].startswith("<"):  # scenario objects from the API have no file
            where = {"file": None, "line": None}
        best = ((s.get("info") or {}).get("diagnosis") or {}).get("best")
        hint = f" Looks like: {best['mutant']} ({best['description']})" if best else ""
        if s.get("error"):
            err = s["error"]
            out.append(command("error", f"{err.get('kind')}: {err.get('message')}", title=f"specaudit {s['name']}: error", **where))
        for c in scenario_checks(s):
            status = c.get("status")
            if status not in ("failed", "suspect"):
                continue
            level = "error" if status == "failed" and c.get("gate", True) else "warning"
            note = "" if c.get("gate", True) else " (not gating)"
            out.append(command(level, f"{c.get('summary', '')}{note}.{hint}", title=f"specaudit {s['name']} / {c['name']}: {status}", **where))
    for reg in (doc.get("baseline") or {}).get("regressions", []):
        out.append(command("error", reg["message"], title=f"specaudit {reg['scenario']}: regression"))
    return out


def summary_markdown(doc: Mapping[str, Any]) -> str:
    """Return the Markdown job summary: verdict, one row per scenario x check, failures, baseline."""
    status = str(doc.get("status", "?"))
    icon = {"passed": "✅", "failed": "❌", "error": "💥", "suspect": "⚠️"}.get(status, "")
    lines = [
        f"## specaudit {icon} {status.upper()}: `{doc.get('target', '')}`",
        "",
        f"specaudit {doc.get('version', '?')}, family-wise alpha {doc.get('alpha')} (Holm), seed {doc.get('seed')}, {float(doc.get('seconds') or 0):.1f} s",
        "",
        "| scenario | check | statistic | p (Holm) | verdict |",
        "|---|---|---:|---:|---|",
    ]
    for s in doc.get("scenarios", []):
        if s.get("error"):
            lines.append(f"| {s['name']} | {s['error'].get('kind')} | | | **error** |")
        for c in scenario_checks(s):
            p = c.get("adjusted_pvalue") if c.get("adjusted_pvalue") is not None else c.get("pvalue")
            stat = "" if c.get("statistic") is None else f"{float(c['statistic']):.3g}"
            pv = "" if p is None else ("<1e-300" if float(p) == 0 else f"{float(p):.3g}")
            verdict = c.get("status", "")
            verdict = f"**{verdict}**" if verdict in ("failed", "suspect") else verdict
            lines.append(f"| {s['name']} | {c['name']} | {stat} | {pv} | {verdict}{'' if c.get('gate', True) else ' (not gating)'} |")
    problems = []
    for s in doc.get("scenarios", []):
        best = ((s.get("info") or {}).get("diagnosis") or {}).get("best")
        for c in scenario_checks(s):
            if c.get("status") == "failed":
                problems.append(f"- **{s['name']} / {c['name']}**: {c.get('summary', '')}")
                top = (c.get("data") or {}).get("top_cells") or []
                if top:
                    cells = ", ".join(f"`{t['cell']}` {t['observed']} vs {float(t['expected']):.1f}" for t in top[:3])
                    problems.append(f"  - most deviating: {cells}")
        if best and any(c.get("status") == "failed" for c in scenario_checks(s)):
            problems.append(f"  - looks like: **{best['mutant']}**, {best['description']} (similarity {best['similarity']:.2f})")
    if problems:
        lines += ["", "### Failures", "", *problems]
    base = doc.get("baseline")
    if base:
        lines += ["", f"### Against the baseline `{base.get('path')}`", ""]
        lines += [f"- ❌ {r['message']}" for r in base.get("regressions", [])] or ["- no regressions"]
        lines += [f"- not comparable: {r}" for r in base.get("not_comparable", [])]
    return "\n".join(lines) + "\n"


def emit(doc: Mapping[str, Any], stream: TextIO, environ: Mapping[str, str] | None = None) -> None:
    """Print annotations to ``stream`` and append the summary to ``$GITHUB_STEP_SUMMARY``."""
    env = environ if environ is not None else os.environ
    for line in annotations(doc, env.get("GITHUB_WORKSPACE")):
        print(line, file=stream)
    target = env.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(summary_markdown(doc))
