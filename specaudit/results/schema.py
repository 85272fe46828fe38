"""The layout of the results document: its version, the shapes its reader checks, and its JSON Schema.

A results file (``specaudit run --json``) is the :func:`~specaudit.results.document.to_document`
form of a :class:`~specaudit.results.RunResult`. This module describes that layout once:
:data:`SCHEMA_VERSION`, the shapes of the free-form parts that reports read (:data:`CHECK_DATA`,
:data:`INFO`, :data:`SETTINGS`, used by the reader in :mod:`specaudit.results.document`), and
:func:`json_schema`, the JSON Schema (draft 2020-12) that every document this release writes
validates against (``specaudit schema --results`` prints it). :func:`validate` checks a document
with the ``jsonschema`` package.

Versions
--------
1   0.1.0: the run's ``status`` and ``exit_code``; no verdict per scenario.
2   each scenario (and its re-run) carries its ``status``, written by the one verdict rule
    (:attr:`specaudit.results.ScenarioResult.status`), so a consumer reads the verdict instead of
    deriving it from the checks a second time.

A reader of this release reads versions 1 and 2 (:data:`READS`). specaudit's own readers derive
every verdict from the checks by that same rule, never trusting a stated one, so a version-1 file
(a baseline kept from 0.1.0) is upgraded on reading with nothing lost: ``report``, ``merge`` and
``--baseline`` take it as it is. Any other version (0, a string, a newer 3) is refused with exit
code 4, naming the versions this release reads.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from specaudit.errors import ExitCode
from specaudit.results import Category, Status

__all__ = ["CHECK_DATA", "INFO", "READS", "RUN_STATES", "SCHEMA_VERSION", "SETTINGS", "json_schema", "validate"]

#: Version of the document layout this release writes.
SCHEMA_VERSION = 2
#: Versions a reader of this release reads (1: upgraded on reading, see the module docstring).
READS = (1, 2)

#: What the reports read of a check's ``data`` and of a scenario's ``info``: a kind (``"number?"``: the key may be
#: absent or null), an object of such keys (``"key?"``: an object or list that may be absent; ``"*"``: every key
#: not named), a list [shape], or a tuple of alternatives.
#: Other keys are free. A hand-edited file whose ``tv`` is a string is refused here (exit 4), not in a
#: reporter's format string (exit 3); numbers written as "nan" or "inf" come back as floats.
CHECK_DATA: dict[str, Any] = {
    "tv": "number?", "tv_null": "number?", "estimate": "number?", "exact": "number?", "stderr": "number?", "n": "integer?",
    "traceback": "string?",
    "top_cells?": [{"cell": ["integer"], "observed": "number", "expected": "number", "residual": "number"}],
    # a failed exact finding's call, replayable (specaudit.checks.replay.Call; `specaudit repro` reads it)
    "call?": {"rule": "string", "rule_text": "string?", "expected": "string?", "got": "string?", "source": {"kind": "string"},
              "draft": [["integer"]], "q": [[["number"]]], "p": [[["number"]]], "num_draft": ["integer"], "origin?": ["integer"]},
}
INFO: dict[str, Any] = {
    "reference": "string?",
    "diagnosis?": {
        "best?": {"mutant": "string", "description": "string", "similarity": "number", "mirrors": "string"},
        "candidates?": [{"mutant": "string", "description": "string", "similarity": "number"}],
        "min_similarity": "number?",
    },
    "sensitivity?": {"samples": "integer", "groups": "integer", "detectable_tv": "number", "alpha": "number",
                     "family_alpha": "number", "tests": "integer", "target_power": "number", "flag": "string?"},
    "power?": {"*": ("number", {"kind": "string?", "power": "number?", "same_law": "boolean?"})},
    # the repro files `specaudit run --repro DIR` wrote for the scenario's failed exact findings
    "repro?": [{"name": "string", "check": "string"}],
}
#: What the reports read of a run's ``settings`` (the reproduce line, the certificate line).
SETTINGS: dict[str, Any] = {"samples": "integer?", "timeout": "number?", "certify_tv": "number?", "alpha": "number?",
                            "gate_efficiency": "boolean?", "early_stop": "boolean?", "adapter": "string?"}

#: The run's ``status`` before it has ended: ``running`` (a partial file), ``interrupted`` (stopped); never a verdict.
RUN_STATES = ("running", "interrupted")

_NUMBER = {"$ref": "#/$defs/number"}


def _or_null(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"anyOf": [dict(schema), {"type": "null"}]}


def _kind(kind: str) -> dict[str, Any]:
    """Return the schema of a kind of :data:`CHECK_DATA` (``"number"``, ``"integer?"``, ...)."""
    base = _NUMBER if kind.rstrip("?") == "number" else {"type": kind.rstrip("?")}
    return _or_null(base) if kind.endswith("?") else dict(base)


def _shape(shape: Any) -> dict[str, Any]:
    """Return the JSON Schema of a reader's shape (see :data:`CHECK_DATA`): the same rule, written for jsonschema."""
    if isinstance(shape, tuple):
        return {"anyOf": [_shape(s) for s in shape]}
    if isinstance(shape, list):
        return {"type": "array", "items": _shape(shape[0])}
    if isinstance(shape, dict):
        properties, required, rest = {}, [], None
        for key, inner in shape.items():
            name = key.rstrip("?")
            if name == "*":
                rest = _shape(inner)
                continue
            optional = key.endswith("?") or (isinstance(inner, str) and inner.endswith("?"))
            properties[name] = _or_null(_shape(inner)) if key.endswith("?") and not isinstance(inner, str) else _shape(inner)
            if not optional:
                required.append(name)
        out: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            out["required"] = required
        if rest is not None:
            out["additionalProperties"] = rest
        return out
    return _kind(shape)


def _closed(properties: Mapping[str, Any], required: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Return an object schema with exactly ``properties`` (all required unless ``required`` names the ones that are)."""
    return {"type": "object", "properties": dict(properties), "required": list(properties if required is None else required),
            "additionalProperties": False}


_STATUSES = [s.value for s in Status]


@functools.cache
def _schema() -> dict[str, Any]:
    check = _closed({
        "name": {"type": "string"},
        "category": {"enum": [c.value for c in Category]},
        "status": {"enum": _STATUSES},
        "summary": {"type": "string"},
        "statistic": _or_null(_NUMBER),
        "pvalue": _or_null(_NUMBER),
        "df": _or_null(_NUMBER),
        "adjusted_pvalue": _or_null(_NUMBER),
        "gate": {"type": "boolean"},
        "data": _shape(CHECK_DATA),
    }, ("name", "category", "status", "summary"))
    error = _closed({"kind": {"type": "string"}, "message": {"type": "string"}, "clause": {"type": ["string", "null"]},
                     "traceback": {"type": "string"}}, ("kind", "message"))
    unit = {"type": "number", "minimum": 0, "maximum": 1 + 1e-9}  # a float sum may round just past 1
    tv_bound = _closed({
        "bound": unit, "confidence": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "tv": unit,
        "sequences": {"type": "integer", "minimum": 1},
        "target": {"anyOf": [{"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, {"type": "null"}]},
    }, ("bound", "confidence", "tv", "sequences"))
    scenario = _closed({
        "name": {"type": "string"},
        "status": {"enum": _STATUSES, "description": "the scenario's verdict: ScenarioResult.status"},
        "path": {"type": "string"},
        "line": {"type": "integer"},
        "content_hash": {"type": "string"},
        "description": {"type": "string"},
        "seed": {"type": "integer"},
        "samples": {"type": "integer"},
        "checks": {"type": "array", "items": {"$ref": "#/$defs/check"}},
        "error": _or_null({"$ref": "#/$defs/error"}),
        "seconds": _NUMBER,
        "verifier_seconds": _NUMBER,
        "calls": {"type": "integer"},
        "info": _shape(INFO),
        "rerun": _or_null({"$ref": "#/$defs/scenario"}),
        "tv_bound": _or_null({"$ref": "#/$defs/tv_bound"}),
    })
    row = _closed({
        "scenario": {"type": "string"}, "old_status": {"type": ["string", "null"]},
        "new_status": {"type": ["string", "null"]}, "old_tps": _or_null(_NUMBER), "new_tps": _or_null(_NUMBER),
        "tps_change": _or_null(_NUMBER), "comparable": {"type": "boolean"}, "note": {"type": "string"},
    }, ("scenario", "old_status", "new_status", "old_tps", "new_tps", "tps_change", "comparable"))
    comparison = _closed({
        "path": {"type": "string"}, "version": {"type": "string"}, "started": {"type": "string"},
        "rules": {"type": "array", "items": {"type": "string"}}, "rows": {"type": "array", "items": {"$ref": "#/$defs/row"}},
        "regressions": {"type": "array", "items": {"type": "object"}},
        "not_comparable": {"type": "array", "items": {"type": "string"}}, "engine_change": {"type": "string"},
    }, ("path", "version", "started", "rules", "rows"))
    run = _closed({
        "schema_version": {"const": SCHEMA_VERSION},
        "tool": {"const": "specaudit"},
        "partial": {"type": "boolean", "description": "results so far of a run still going, or stopped"},
        "target": {"type": "string"},
        "alpha": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "seed": {"type": ["integer", "null"]},
        "version": {"type": "string"},
        "scenarios": {"type": "array", "items": {"$ref": "#/$defs/scenario"}},
        "interrupted": {"type": "boolean"},
        "started": {"type": "string"},
        "seconds": _NUMBER,
        "settings": _shape(SETTINGS),
        "environment": {"type": "object"},
        "status": {"enum": [*_STATUSES, *RUN_STATES],
                   "description": "the run's verdict (RunResult.status), or running / interrupted before it has one"},
        "exit_code": {"anyOf": [{"enum": [int(c) for c in ExitCode]}, {"type": "null"}],
                      "description": "the exit code of the run (null while it is running)"},
        "baseline": {"$ref": "#/$defs/comparison"},
    }, ("schema_version", "tool", "partial", "target", "alpha", "seed", "version", "scenarios", "interrupted",
        "started", "seconds", "settings", "environment", "status", "exit_code"))
    # a verdict and an exit code only once the run has ended: a reader never sees exit code 0 early
    run["allOf"] = [
        {"if": {"properties": {"status": {"const": "running"}}},
         "then": {"properties": {"partial": {"const": True}, "exit_code": {"type": "null"}}}},
        {"if": {"properties": {"status": {"const": "interrupted"}}},
         "then": {"properties": {"interrupted": {"const": True}, "exit_code": {"const": int(ExitCode.INTERRUPTED)}}}},
        {"if": {"properties": {"status": {"enum": _STATUSES}}},
         "then": {"properties": {"partial": {"const": False}, "interrupted": {"const": False},
                                 "exit_code": {"type": "integer"}}}},
    ]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:specaudit:results:{SCHEMA_VERSION}",
        "title": "specaudit results document",
        "description": f"What `specaudit run --json` writes (schema_version {SCHEMA_VERSION}); "
                       "numbers that are not finite are written as the strings nan, inf and -inf.",
        **run,
        "$defs": {
            "number": {"anyOf": [{"type": "number"}, {"enum": ["nan", "inf", "-inf"]}]},
            "check": check, "error": error, "tv_bound": tv_bound, "scenario": scenario, "row": row,
            "comparison": comparison,
        },
    }


def json_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of the results documents this release writes (a fresh copy)."""
    import copy

    return copy.deepcopy(_schema())


@functools.cache
def _validator() -> Any:
    import jsonschema  # deferred: only schema checks pay for it, never a run

    cls = jsonschema.Draft202012Validator
    cls.check_schema(_schema())
    return cls(_schema())


def validate(doc: Any) -> None:
    """Raise ``jsonschema.ValidationError`` (jsonschema's best match) unless ``doc`` fits :func:`json_schema`."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(doc))
    if error is not None:
        raise error
