"""The results document: a faithful, versioned JSON form of a RunResult (and back).

The engine reads it too (`specaudit merge` sums shard documents); `specaudit.reports.json` is the
reporter that writes it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specaudit.results import Category, CheckResult, ErrorInfo, RunResult, ScenarioResult, Status

SCHEMA_VERSION = 1


def _plain(value: Any) -> Any:
    """Convert results to JSON-able values (enums to strings, inf/NaN to strings)."""
    if isinstance(value, (Status, Category)):
        return value.value
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if hasattr(value, "item"):  # numpy scalar
        return _plain(value.item())
    return value


def to_dict(result: RunResult, partial: bool = False, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return the JSON document for ``result``; ``extra`` adds top-level sections (e.g. ``baseline``)."""
    doc = {"schema_version": SCHEMA_VERSION, "tool": "specaudit", "partial": partial}
    doc.update(_plain(result))
    doc["status"] = result.status.value
    doc["exit_code"] = int(result.exit_code())
    if extra:
        doc.update(_plain(extra))
    return doc


def document(result: RunResult, partial: bool = False, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return the document exactly as a reader of the written file sees it (through JSON and back)."""
    return json.loads(json.dumps(to_dict(result, partial, extra), allow_nan=False))


def scenario_checks(scenario: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return a scenario document's checks, then its re-run's named ``<check> (re-run)``: both are reported."""
    rerun = scenario.get("rerun") or {}
    again = [{**c, "name": f"{c['name']} (re-run)"} for c in rerun.get("checks") or []]
    return [*(scenario.get("checks") or []), *again]


def _float(value: Any) -> Any:
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return value


def _check(d: dict[str, Any]) -> CheckResult:
    return CheckResult(
        name=d["name"],
        category=Category(d["category"]),
        status=Status(d["status"]),
        summary=d["summary"],
        statistic=_float(d.get("statistic")),
        pvalue=_float(d.get("pvalue")),
        df=d.get("df"),
        adjusted_pvalue=_float(d.get("adjusted_pvalue")),
        gate=d.get("gate", True),
        data=d.get("data", {}),
    )


def scenario_from_dict(s: dict[str, Any]) -> ScenarioResult:
    err = s.get("error")
    return ScenarioResult(
        **{k: s[k] for k in ("name", "path", "line", "content_hash", "description", "seed", "samples")},
        checks=tuple(_check(c) for c in s.get("checks", [])),
        error=ErrorInfo(**err) if err else None,
        seconds=s.get("seconds", 0.0),
        verifier_seconds=s.get("verifier_seconds", 0.0),
        calls=s.get("calls", 0),
        info=s.get("info", {}),
        rerun=scenario_from_dict(s["rerun"]) if s.get("rerun") else None,  # a SUSPECT scenario's re-run
    )


def from_dict(doc: dict[str, Any]) -> RunResult:
    """Rebuild a RunResult from its JSON document."""
    if doc.get("schema_version") != SCHEMA_VERSION:
        from specaudit.errors import UsageError

        raise UsageError(f"results file has schema_version {doc.get('schema_version')!r}; this specaudit reads {SCHEMA_VERSION}")
    scenarios = [scenario_from_dict(s) for s in doc["scenarios"]]
    return RunResult(
        target=doc["target"],
        alpha=doc["alpha"],
        seed=doc.get("seed"),
        version=doc.get("version", "?"),
        scenarios=tuple(scenarios),
        interrupted=doc.get("interrupted", False),
        started=doc.get("started", ""),
        seconds=doc.get("seconds", 0.0),
        settings=doc.get("settings", {}),
    )


def write(result: RunResult | dict[str, Any], path: str | Path, partial: bool = False) -> Path:
    """Write the JSON report (a RunResult or its document) atomically: a crash mid-write never leaves a truncated file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = result if isinstance(result, dict) else to_dict(result, partial)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=2, allow_nan=False)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def read_document(path: str | Path) -> dict[str, Any]:
    """Read a results file as its JSON document (schema version checked)."""
    from specaudit.errors import UsageError

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read results file {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        raise UsageError(f"{path}: not a specaudit results file (schema_version {version!r}; this specaudit reads {SCHEMA_VERSION})")
    return doc


def read(path: str | Path) -> RunResult:
    """Read a JSON report written by `write`."""
    return from_dict(read_document(path))
