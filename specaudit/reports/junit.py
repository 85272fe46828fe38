"""JUnit XML report: one testsuite per scenario, one testcase per scenario x check.

Rendered from the results JSON document (like the HTML), so it can be regenerated from a saved
run. Statistics go in ``<properties>`` of each testcase (the form pytest's ``record_property``
writes and Jenkins, GitLab and GitHub test reporters read); a failed check is a ``<failure>``,
a scenario that could not run is one ``<error>`` testcase, a non-gating failure is reported as
``<skipped>`` with its reason so it does not fail the CI job, and a suspect check passes with
a ``<system-out>`` note (suspect verdicts do not fail a run).
"""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specaudit.results.document import scenario_checks


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


def _check_properties(c: Mapping[str, Any]) -> dict[str, Any]:
    props = {k: c.get(k) for k in ("category", "statistic", "df", "pvalue", "adjusted_pvalue")}
    props["gate"] = c.get("gate", True)
    for k, v in (c.get("data") or {}).items():
        # scalars and short vectors only: per-cell counts stay in the JSON and HTML reports
        if isinstance(v, (int, float, str, bool)) or (isinstance(v, list) and len(v) <= 16 and all(isinstance(x, (int, float)) for x in v)):
            props[f"data.{k}"] = v
    return props


def _detail(s: Mapping[str, Any], c: Mapping[str, Any]) -> str:
    lines = [c.get("summary", "")]
    top = (c.get("data") or {}).get("top_cells") or []
    if top:
        lines.append("most deviating cells (sequence: observed vs expected, std. residual):")
        lines += [f"  {t['cell']}: {t['observed']} vs {float(t['expected']):.1f}, {t['residual']}" for t in top[:5]]
    best = ((s.get("info") or {}).get("diagnosis") or {}).get("best")
    if best:
        lines.append(f"looks like: {best['mutant']}: {best['description']} (similarity {best['similarity']:.2f})")
    lines.append(f"scenario file: {s.get('path')}:{s.get('line')}")
    return "\n".join(lines)


def to_element(doc: Mapping[str, Any]) -> ET.Element:
    """Return the ``<testsuites>`` element for a results document."""
    root = ET.Element("testsuites", name=f"specaudit {doc.get('target', '')}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in doc.get("scenarios", []):
        suite = ET.SubElement(root, "testsuite", name=s["name"], timestamp=str(doc.get("started", "")))
        _properties(suite, {k: s.get(k) for k in ("path", "line", "content_hash", "seed", "samples", "calls", "verifier_seconds")})
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        classname = f"specaudit.{s['name']}"
        if s.get("error"):
            err = s["error"]
            case = ET.SubElement(suite, "testcase", classname=classname, name="run", time=f"{s.get('seconds', 0):.3f}", file=str(s.get("path", "")), line=str(s.get("line", "")))
            e = ET.SubElement(case, "error", type=str(err.get("kind")), message=str(err.get("message", ""))[:500])
            e.text = "\n".join(x for x in (err.get("message"), err.get("traceback")) if x)
            counts["tests"] += 1
            counts["errors"] += 1
        checks = scenario_checks(s)  # a SUSPECT scenario's re-run decides it: its checks are testcases too
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname=classname, name=c["name"], time=f"{s.get('seconds', 0) / max(len(checks), 1):.3f}", file=str(s.get("path", "")), line=str(s.get("line", "")))
            _properties(case, _check_properties(c))
            counts["tests"] += 1
            status = c.get("status")
            if status == "failed" and c.get("gate", True):
                f = ET.SubElement(case, "failure", type=status, message=c.get("summary", "")[:500])
                f.text = _detail(s, c)
                counts["failures"] += 1
            elif status == "failed":
                sk = ET.SubElement(case, "skipped", message=f"failed, not gating: {c.get('summary', '')}"[:500])
                sk.text = _detail(s, c)
                counts["skipped"] += 1
            elif status == "suspect":  # does not fail the run (TestU01 style): passed, with a note
                ET.SubElement(case, "system-out").text = "suspect: " + _detail(s, c)
            elif status == "skipped":
                ET.SubElement(case, "skipped", message=c.get("summary", ""))
                counts["skipped"] += 1
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("time", f"{s.get('seconds', 0):.3f}")
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{doc.get('seconds', 0):.3f}")
    return root


def render(doc: Mapping[str, Any]) -> str:
    """Return the JUnit XML text for a results document."""
    root = to_element(doc)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Write the JUnit XML atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(render(doc))
    os.replace(tmp, path)
    return path
