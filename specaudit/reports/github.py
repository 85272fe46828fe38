"""GitHub Actions output: workflow-command annotations and a Markdown job summary.

Rendered from a RunResult read back from its results document. Annotations point at the scenario YAML
(``ScenarioResult.path``/``line``), relative to the workspace, so GitHub shows them on the file
in pull requests; a scenario file outside the workspace (a shipped one, in site-packages) gets no
``file=``, since GitHub cannot attach it, and the title names the scenario. See "Workflow commands for GitHub Actions" (``::error file=...,line=...::``)
and ``$GITHUB_STEP_SUMMARY`` in the GitHub documentation.
"""

# no ``from __future__ import annotations``: this module's public function ``annotations`` would shadow it
import html
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from specaudit.reports import format as fmt
from specaudit.results import RunResult, Status


def active(environ: Mapping[str, str] | None = None) -> bool:
    """Return True inside a GitHub Actions job."""
    return (environ if environ is not None else os.environ).get("GITHUB_ACTIONS") == "true"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _relative(path: str, workspace: str | None) -> str | None:
    """Return ``path`` relative to the workspace (POSIX separators), or None for a file outside it.

    GitHub attaches an annotation to a file only by its path in the repository; an absolute path
    (a shipped scenario in site-packages) cannot be attached and shows as a broken link, so a
    file outside the workspace gets no ``file=`` at all and the title names the scenario.
    """
    base = Path(workspace or os.getcwd()).resolve()
    try:
        return Path(path).resolve().relative_to(base).as_posix()
    except (ValueError, OSError):
        return None


def command(level: str, message: str, file: str | None = None, line: int | None = None, title: str | None = None) -> str:
    """Return one workflow command line, e.g. ``::error file=a.yaml,line=3,title=t::message``."""
    props = []
    if file:
        props.append(f"file={_escape_property(file)}")
    if line:
        props.append(f"line={int(line)}")
    if title:
        props.append(f"title={_escape_property(fmt.visible(title))}")
    head = f"::{level} {','.join(props)}" if props else f"::{level}"
    return f"{head}::{_escape_data(fmt.visible(message))}"  # an escape sequence would colour the job's log


def _best(info: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Return the zoo mutant a scenario's failure looks like, if the diagnosis found one."""
    return ((info or {}).get("diagnosis") or {}).get("best")


def annotations(result: RunResult, workspace: str | None = None) -> list[str]:
    """Return an annotation for every errored scenario and failed, suspect or errored check."""
    out = []
    for s in result.scenarios:
        # scenario objects from the API ("<...>") and files outside the workspace get no file=
        file = None if str(s.path).startswith("<") else _relative(str(s.path), workspace)
        line = s.line if file is not None else None
        best = _best(s.info)
        hint = f" Looks like: {best['mutant']} ({best['description']})" if best else ""
        for label, err in s.reported_errors():
            out.append(command("error", f"{err.kind}: {err.message}", title=f"specaudit {label}: error", file=file, line=line))
        for c in s.reported_checks():
            if c.status not in (Status.FAILED, Status.SUSPECT, Status.ERROR):
                continue
            level = "error" if c.status is Status.ERROR or (c.status is Status.FAILED and c.gate) else "warning"
            note = "" if c.gate else " (not gating)"
            out.append(command(level, f"{c.summary}{note}.{hint}", title=f"specaudit {s.name} / {c.name}: {c.status.value}", file=file, line=line))
    for reg in result.baseline.regressions if result.baseline is not None else ():
        out.append(command("error", reg["message"], title=f"specaudit {reg['scenario']}: regression"))
    return out


def _seeds(result: RunResult) -> str:
    """Return the seed the run used: the run seed, or each scenario's own seed when the run had none."""
    if result.seed is not None:
        return f"seed {result.seed}"
    own = ", ".join(f"{s.name} {s.seed}" for s in result.scenarios if s.seed is not None)
    return f"seeds per scenario ({own})" if own else "no seed (nothing ran)"


def _code(text: Any) -> str:
    """Return ``text`` as one Markdown code span: fenced by a backtick more than its longest run (CommonMark).

    A target or a baseline path is the user's text: a backtick in it ended a single-backtick span.
    """
    text = fmt.visible(text).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md(text: Any) -> str:
    """Return ``text`` as one line of Markdown text: controls as escapes, no tag, no table cell break, no new line.

    A verifier's message goes into the summary's Failures list: a new line in it started a list
    item of the verifier's own, a ``<script>`` was left for the page to sanitise.
    """
    return html.escape(fmt.visible(text).replace("\n", " ")).replace("|", "\\|")


def summary_markdown(result: RunResult) -> str:
    """Return the Markdown job summary: verdict, one row per scenario x check, failures, baseline."""
    status = result.status.value
    icon = {"passed": "✅", "failed": "❌", "error": "💥", "suspect": "⚠️"}.get(status, "")
    lines = [
        f"## specaudit {icon} {status.upper()}: {_code(result.target)}",
        "",
        f"specaudit {result.version}, family-wise alpha {result.alpha} (Holm), {_seeds(result)}, {float(result.seconds or 0):.1f} s",
        "",
        "| scenario | check | statistic | p (Holm) | verdict |",
        "|---|---|---:|---:|---|",
    ]
    for s in result.scenarios:
        for label, err in s.reported_errors():
            lines.append(f"| {_md(label)} | {_md(err.kind)} | | | **error** |")
        for c in s.reported_checks():
            p = c.adjusted_pvalue if c.adjusted_pvalue is not None else c.pvalue
            stat = fmt.optional(None if c.statistic is None else float(c.statistic))
            verdict = c.status.value
            verdict = f"**{verdict}**" if c.status in (Status.FAILED, Status.SUSPECT, Status.ERROR) else verdict
            lines.append(f"| {_md(s.name)} | {_md(c.name)} | {stat} | {fmt.pvalue(p)} | {verdict}{'' if c.gate else ' (not gating)'} |")
    problems = []
    for s in result.scenarios:
        best = _best(s.info)
        failed = [c for c in s.reported_checks() if c.status in (Status.FAILED, Status.ERROR)]
        for c in failed:
            problems.append(f"- **{_md(s.name)} / {_md(c.name)}**: {_md(c.summary)}")
            top = (c.data or {}).get("top_cells") or []
            if top:
                cells = ", ".join(f"{_code(t['cell'])} {t['observed']} vs {float(t['expected']):.1f}" for t in top[:3])
                problems.append(f"  - most deviating: {cells}")
        if best and failed:
            problems.append(f"  - looks like: **{_md(best['mutant'])}**, {_md(best['description'])} (similarity {best['similarity']:.2f})")
    if problems:
        lines += ["", "### Failures", "", *problems]
    base = result.baseline
    if base is not None:
        lines += ["", f"### Against the baseline {_code(base.path)}", ""]
        lines += [f"- ❌ {_md(r['message'])}" for r in base.regressions] or ["- no regressions"]
        lines += [f"- not comparable: {_md(r)}" for r in base.not_comparable]
    return "\n".join(lines) + "\n"


def emit(result: RunResult, stream: TextIO, environ: Mapping[str, str] | None = None) -> None:
    """Print annotations to ``stream`` and append the summary to ``$GITHUB_STEP_SUMMARY``."""
    env = environ if environ is not None else os.environ
    for line in annotations(result, env.get("GITHUB_WORKSPACE")):
        print(line, file=stream)
    target = env.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(summary_markdown(result))
