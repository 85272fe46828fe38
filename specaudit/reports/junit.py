"""JUnit XML report: one testsuite per scenario, one testcase per scenario x check.

Rendered from a RunResult read back from its results document (like the HTML), so it can be
regenerated from a saved run. Statistics go in ``<properties>`` of each testcase (the form pytest's ``record_property``
writes and Jenkins, GitLab and GitHub test reporters read); a failed check is a ``<failure>``,
a check the verifier crashed in is an ``<error>``, a scenario that could not run is one ``<error>`` testcase, a non-gating failure is reported as
``<skipped>`` with its reason so it does not fail the CI job, and a suspect check passes with
a ``<system-out>`` note (suspect verdicts do not fail a run).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specaudit.results import RERUN_LABEL, CheckResult, RunResult, ScenarioResult, Status
from specaudit.results.document import atomic_write


def _text(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return str(v)


def _properties(parent: ET.Element, props: Mapping[str, Any]) -> None:
    el = ET.SubElement(parent, "properties")
    for k, v in props.items():
        if v is None:
            continue
        ET.SubElement(el, "property", name=k, value=_text(v))


def _check_properties(c: CheckResult) -> dict[str, Any]:
    props: dict[str, Any] = {"category": c.category.value, "statistic": c.statistic, "df": c.df, "pvalue": c.pvalue,
                             "adjusted_pvalue": c.adjusted_pvalue}
    props["gate"] = c.gate
    for k, v in (c.data or {}).items():
        # scalars and short vectors only: per-cell counts stay in the JSON and HTML reports
        if isinstance(v, (int, float, str, bool)) or (isinstance(v, list) and len(v) <= 16 and all(isinstance(x, (int, float)) for x in v)):
            props[f"data.{k}"] = v
    return props


def _detail(s: ScenarioResult, c: CheckResult) -> str:
    lines = [c.summary]
    top = (c.data or {}).get("top_cells") or []
    if top:
        lines.append("most deviating cells (sequence: observed vs expected, std. residual):")
        lines += [f"  {t['cell']}: {t['observed']} vs {float(t['expected']):.1f}, {t['residual']}" for t in top[:5]]
    best = ((s.info or {}).get("diagnosis") or {}).get("best")
    if best:
        lines.append(f"looks like: {best['mutant']}: {best['description']} (similarity {best['similarity']:.2f})")
    lines.append(f"scenario file: {s.path}:{s.line}")
    return "\n".join(lines)


def to_element(result: RunResult) -> ET.Element:
    """Return the ``<testsuites>`` element for a run."""
    root = ET.Element("testsuites", name=f"specaudit {result.target}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in result.scenarios:
        suite = ET.SubElement(root, "testsuite", name=s.name, timestamp=str(result.started))
        _properties(suite, {**{k: getattr(s, k) for k in ("path", "line", "content_hash", "seed", "samples", "calls",
                                                          "verifier_seconds")},
                            **{k: v for k, v in result.environment.items() if k.startswith("engine")}})
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        classname = f"specaudit.{s.name}"
        for label, err in s.reported_errors():  # the first attempt, or a re-run, that could not run
            run = "run" if label == s.name else f"run {RERUN_LABEL}"
            case = ET.SubElement(suite, "testcase", classname=classname, name=run, time=f"{s.seconds:.3f}", file=str(s.path), line=str(s.line))
            e = ET.SubElement(case, "error", type=str(err.kind), message=str(err.message)[:500])
            e.text = "\n".join(x for x in (err.message, err.traceback) if x)
            counts["tests"] += 1
            counts["errors"] += 1
        checks = s.reported_checks()  # a SUSPECT scenario's re-run decides it: its checks are testcases too
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname=classname, name=c.name, time=f"{s.seconds / max(len(checks), 1):.3f}", file=str(s.path), line=str(s.line))
            _properties(case, _check_properties(c))
            counts["tests"] += 1
            status = c.status.value
            if c.status is Status.FAILED and c.gate:
                f = ET.SubElement(case, "failure", type=status, message=c.summary[:500])
                f.text = _detail(s, c)
                counts["failures"] += 1
            elif c.status is Status.FAILED:
                sk = ET.SubElement(case, "skipped", message=f"failed, not gating: {c.summary}"[:500])
                sk.text = _detail(s, c)
                counts["skipped"] += 1
            elif c.status is Status.ERROR:  # a probe the verifier crashed in: the run's ERROR
                e = ET.SubElement(case, "error", type=status, message=c.summary[:500])
                e.text = "\n".join(x for x in (_detail(s, c), str((c.data or {}).get("traceback") or "")) if x)
                counts["errors"] += 1
            elif c.status is Status.SUSPECT:  # does not fail the run (TestU01 style): passed, with a note
                ET.SubElement(case, "system-out").text = "suspect: " + _detail(s, c)
            elif c.status is Status.SKIPPED:
                ET.SubElement(case, "skipped", message=c.summary)
                counts["skipped"] += 1
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("time", f"{s.seconds:.3f}")
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{result.seconds:.3f}")
    return root


#: What XML 1.0 cannot hold, even as a character reference: C0 controls but tab, newline and carriage
#: return, surrogates, U+FFFE and U+FFFF (ElementTree escapes <, & and quotes, and writes these as they are).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    """Return ``text`` with every character XML cannot hold shown as its escape (``\\x1b``), so the file parses."""
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def render(result: RunResult) -> str:
    """Return the JUnit XML text for a run."""
    root = to_element(result)
    for el in root.iter():  # every string a user or a verifier wrote: target, paths, messages, tracebacks
        el.text, el.tail = (None if t is None else _xml(t) for t in (el.text, el.tail))
        el.attrib.update({k: _xml(v) for k, v in el.attrib.items()})
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(result: RunResult, path: str | Path) -> Path:
    """Write the JUnit XML atomically."""
    return atomic_write(path, render(result))
