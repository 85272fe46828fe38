"""The results document: the versioned JSON form of a RunResult, and the one atomic file writer.

This is the file boundary of :mod:`specaudit.results`: :func:`to_document` turns a
:class:`~specaudit.results.RunResult` into plain JSON values and :func:`from_document` turns
them back, so everything above this module (reporters, ``specaudit merge``, the baseline
comparison) works on result objects and only this module knows the JSON layout. Reading
validates: a file that is not JSON, not a specaudit document, of another schema version or
missing a field raises :class:`~specaudit.errors.ResultsFileError` (exit 4) naming the file and
the field, never a bare ``KeyError``. :func:`atomic_write` is the one writer every report file
goes through (temporary file in the same folder, then ``os.replace``), so a crash mid-write
never leaves a truncated file behind.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from specaudit.errors import ResultsFileError, UsageError, closest
from specaudit.results import (
    Category,
    CheckResult,
    Comparison,
    ComparisonRow,
    ErrorInfo,
    RunResult,
    ScenarioResult,
    Status,
    TVBound,
)

__all__ = [
    "SCHEMA_VERSION",
    "atomic_write",
    "replace_file",
    "dumps",
    "from_document",
    "read",
    "read_document",
    "roundtrip",
    "scenario_from_dict",
    "to_document",
    "write",
]

#: Version of the document layout; a reader refuses any other.
SCHEMA_VERSION = 1

#: RunResult fields that the document places apart from the others (``partial`` first, ``baseline`` last).
_APART = ("partial", "baseline")

_T = TypeVar("_T")


def _plain(value: Any) -> Any:
    """Convert results to JSON-able values (enums to strings, inf/NaN to strings)."""
    if isinstance(value, (Status, Category)):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
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


def to_document(result: RunResult) -> dict[str, Any]:
    """Return the JSON document of ``result`` (plain values; floats that are not finite as strings)."""
    # an interrupted run's results are partial too
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "tool": "specaudit", "partial": result.partial or result.interrupted}
    for f in dataclasses.fields(result):
        if f.name not in _APART:
            doc[f.name] = _plain(getattr(result, f.name))
    # a reader must never see a verdict or exit code 0 before the run has ended
    if result.interrupted:
        doc["status"], doc["exit_code"] = "interrupted", int(result.exit_code())
    elif result.partial:
        doc["status"], doc["exit_code"] = "running", None
    else:
        doc["status"], doc["exit_code"] = result.status.value, int(result.exit_code())
    if result.baseline is not None:
        doc["baseline"] = _plain(result.baseline.to_dict())
    return doc


def dumps(result: RunResult) -> str:
    """Return the text of the results file of ``result``."""
    return json.dumps(to_document(result), indent=2, allow_nan=False) + "\n"


def roundtrip(result: RunResult) -> RunResult:
    """Return ``result`` exactly as a reader of its written file sees it (through JSON and back)."""
    return from_document(json.loads(json.dumps(to_document(result), allow_nan=False)))


# --- reading: every field checked, every problem a ResultsFileError that says where ---------------


class _Bad(Exception):
    """A problem at one place of a document; ``from_document`` turns it into a ResultsFileError."""

    def __init__(self, where: str, what: str):
        super().__init__(f"{where}: {what}" if where else what)


def _float(value: Any) -> Any:
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return value


def _need(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise _Bad(where, f"missing key {key!r}")
    return d[key]


#: The largest number a float holds (an int beyond it, 10**400 say, ends any float format).
_LARGEST = 1.7976931348623157e308
#: What each typed field may hold: JSON kinds, by the name used in messages.
_KINDS: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


def _typed(d: Mapping[str, Any], key: str, where: str, kind: str, default: Any = ..., optional: bool = False) -> Any:
    """Return ``d[key]`` (or ``default`` when absent) after checking it is a ``kind`` (null allowed when ``optional``)."""
    value = _need(d, key, where) if default is ... else d.get(key, default)
    return _of_kind(value, f"{where}.{key}" if where else key, kind, optional or default is None)


def _of_kind(value: Any, spot: str, kind: str, optional: bool = False) -> Any:
    """Return ``value`` after checking it is a ``kind`` (null allowed when ``optional``); "nan", "inf" as floats."""
    if value is None and optional:
        return None
    if kind == "number":
        value = _float(value)
    ok = isinstance(value, _KINDS[kind]) and (kind == "boolean" or not isinstance(value, bool))
    if ok and kind == "number" and isinstance(value, int) and abs(value) > _LARGEST:  # no float holds it: formats fail
        raise _Bad(spot, f"an integer of {len(str(abs(value)))} digits is out of range; allowed: a number a float "
                         f"can hold (up to {_LARGEST:.3g})")
    if not ok:
        raise _Bad(spot, f"expected {'an' if kind == 'integer' else 'a'} {kind}{' or null' if optional else ''}, "
                         f"got {_kind(value)}{'' if value is None else f' {value!r:.40}'}")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Bad(where, f"expected a JSON object, got {_kind(value)}")
    return value


def _items(value: Any, where: str, build: Callable[[Any, str], _T]) -> tuple[_T, ...]:
    if not isinstance(value, list):
        raise _Bad(where, f"expected a JSON list, got {_kind(value)}")
    return tuple(build(v, f"{where}[{i}]") for i, v in enumerate(value))


def _enum(kind: Callable[[str], _T], value: Any, where: str) -> _T:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)  # type: ignore[attr-defined]
        raise _Bad(where, f"{value!r} is not one of {allowed}") from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


#: What the reports read of a check's ``data`` and of a scenario's ``info``: a kind (``"number?"``: the key may be
#: absent or null), an object of such keys (``"key?"``: an object or list that may be absent; ``"*"``: every key
#: not named), a list [shape], or a tuple of alternatives.
#: Other keys are free. A hand-edited file whose ``tv`` is a string is refused here (exit 4), not in a
#: reporter's format string (exit 3); numbers written as "nan" or "inf" come back as floats.
_CHECK_DATA: dict[str, Any] = {
    "tv": "number?", "tv_null": "number?", "estimate": "number?", "exact": "number?", "stderr": "number?", "n": "integer?",
    "traceback": "string?",
    "top_cells?": [{"cell": ["integer"], "observed": "number", "expected": "number", "residual": "number"}],
}
_INFO: dict[str, Any] = {
    "reference": "string?",
    "diagnosis?": {
        "best?": {"mutant": "string", "description": "string", "similarity": "number", "mirrors": "string"},
        "candidates?": [{"mutant": "string", "description": "string", "similarity": "number"}],
        "min_similarity": "number?",
    },
    "sensitivity?": {"samples": "integer", "groups": "integer", "detectable_tv": "number", "alpha": "number",
                     "family_alpha": "number", "tests": "integer", "target_power": "number", "flag": "string?"},
    "power?": {"*": ("number", {"kind": "string?", "power": "number?", "same_law": "boolean?"})},
}
#: What the reports read of a run's ``settings`` (the reproduce line, the certificate line).
_SETTINGS: dict[str, Any] = {"samples": "integer?", "timeout": "number?", "certify_tv": "number?", "alpha": "number?",
                             "gate_efficiency": "boolean?", "early_stop": "boolean?", "adapter": "string?"}


def _shaped(value: Any, shape: Any, where: str) -> Any:
    """Return ``value`` checked against ``shape`` (see ``_CHECK_DATA``), its numbers read back as floats."""
    if isinstance(shape, tuple):  # alternatives: the first that fits, else what the last one says
        for alternative in shape[:-1]:
            try:
                return _shaped(value, alternative, where)
            except _Bad:
                continue
        return _shaped(value, shape[-1], where)
    if isinstance(shape, list):
        return [_shaped(v, shape[0], f"{where}[{i}]") for i, v in enumerate(_items(value, where, lambda v, _: v))]
    if isinstance(shape, dict):
        out = dict(_object(value, where))
        for key, inner in shape.items():
            optional = key.endswith("?") or (isinstance(inner, str) and inner.endswith("?"))
            name = key.rstrip("?")
            names = [k for k in out if k not in shape] if name == "*" else [name]
            for k in names:
                if k not in out or (out[k] is None and optional):
                    if not optional and name != "*":
                        raise _Bad(where, f"missing key {k!r}")
                    continue
                out[k] = _shaped(out[k], inner, f"{where}.{k}")
        return out
    return _of_kind(value, where, shape.rstrip("?"), shape.endswith("?"))


def _check(value: Any, where: str) -> CheckResult:
    d = _object(value, where)
    return CheckResult(
        name=_typed(d, "name", where, "string"),
        category=_enum(Category, _need(d, "category", where), f"{where}.category"),
        status=_enum(Status, _need(d, "status", where), f"{where}.status"),
        summary=_typed(d, "summary", where, "string"),
        statistic=_typed(d, "statistic", where, "number", None, optional=True),
        pvalue=_typed(d, "pvalue", where, "number", None, optional=True),
        df=_typed(d, "df", where, "number", None, optional=True),
        adjusted_pvalue=_typed(d, "adjusted_pvalue", where, "number", None, optional=True),
        gate=_typed(d, "gate", where, "boolean", True),
        data=_shaped(d.get("data", {}), _CHECK_DATA, f"{where}.data"),
    )


def _error(value: Any, where: str) -> ErrorInfo:
    d = _object(value, where)
    known = {f.name for f in dataclasses.fields(ErrorInfo)}
    if set(d) - known:
        raise _Bad(where, f"unknown key {sorted(set(d) - known)[0]!r}")
    return ErrorInfo(kind=_typed(d, "kind", where, "string"), message=_typed(d, "message", where, "string"),
                     clause=_typed(d, "clause", where, "string", None, optional=True),
                     traceback=_typed(d, "traceback", where, "string", ""))


def _scenario(value: Any, where: str) -> ScenarioResult:
    s = _object(value, where)
    err = s.get("error")
    fields = {"name": "string", "path": "string", "line": "integer", "content_hash": "string", "description": "string",
              "seed": "integer", "samples": "integer"}
    return ScenarioResult(
        **{k: _typed(s, k, where, kind) for k, kind in fields.items()},
        checks=_items(s.get("checks", []), f"{where}.checks", _check),
        error=_error(err, f"{where}.error") if err is not None else None,
        seconds=_typed(s, "seconds", where, "number", 0.0),
        verifier_seconds=_typed(s, "verifier_seconds", where, "number", 0.0),
        calls=_typed(s, "calls", where, "integer", 0),
        info=_shaped(s.get("info", {}), _INFO, f"{where}.info"),
        # null or absent: none; anything else ({}, 0, false, "") is checked, never read as absent
        rerun=_scenario(s["rerun"], f"{where}.rerun") if s.get("rerun") is not None else None,  # a SUSPECT scenario's re-run
        tv_bound=_tv_bound(s["tv_bound"], f"{where}.tv_bound") if s.get("tv_bound") is not None else None,
    )


#: Slack on the TV bound's range checks: the plug-in TV is a float sum (0.5 * sum |P_hat - Q|) that may round past 1.
_TV_ROUNDING = 1e-9


def _in_range(d: Mapping[str, Any], key: str, where: str, ok: Callable[[float], bool], allowed: str, **kw: Any) -> Any:
    """Return the number ``d[key]`` (as :func:`_typed`) after checking it is finite and ``ok``; ``allowed`` says what is."""
    value = _typed(d, key, where, "integer" if kw.pop("integer", False) else "number", **kw)
    # an int is finite however large (math.isfinite would overflow converting it to a float)
    if value is not None and not ((isinstance(value, int) or math.isfinite(value)) and ok(value)):
        raise _Bad(f"{where}.{key}" if where else key, f"{value!r} is out of range; allowed: {allowed}")
    return value


def _tv_bound(value: Any, where: str) -> TVBound:
    """Read a TV certificate (:func:`specaudit.stats.certificate.tv_upper_bound` makes them), every field in its range."""
    d = _object(value, where)
    known = [f.name for f in dataclasses.fields(TVBound)]
    extra = sorted(set(d) - set(known))
    if extra:
        raise _Bad(where, f"unknown key {extra[0]!r}; allowed: {', '.join(known)}{closest(extra[0], known)}")
    top = 1.0 + _TV_ROUNDING
    bound = _in_range(d, "bound", where, lambda x: 0.0 <= x <= top, "a TV bound, 0 <= bound <= 1")
    tv = _in_range(d, "tv", where, lambda x: 0.0 <= x <= top, "a total variation, 0 <= tv <= 1")
    if tv > bound + _TV_ROUNDING:
        raise _Bad(f"{where}.tv", f"{tv!r} exceeds bound = {bound!r}; allowed: tv <= bound (the bound is tv plus a "
                                  "Hoeffding slack, capped at 1)")
    return TVBound(
        bound=bound,
        # 1 - alpha rounds to exactly 1 for alpha below 1e-16 (any alpha in (0, 1) is allowed), so 1 is kept
        confidence=_in_range(d, "confidence", where, lambda x: 0.0 < x <= 1.0,
                             "a confidence 1 - alpha, 0 < confidence <= 1"),
        tv=tv,
        sequences=_in_range(d, "sequences", where, lambda x: x >= 1, "a count of sequences >= 1", integer=True),
        target=_in_range(d, "target", where, lambda x: 0.0 < x < 1.0,
                         "the --certify-tv EPS, 0 < target < 1, or null (not asked)", default=None, optional=True),
    )


def _row(value: Any, where: str) -> ComparisonRow:
    d = _object(value, where)
    kinds = {"scenario": "string", "old_status": "string?", "new_status": "string?", "old_tps": "number?",
             "new_tps": "number?", "tps_change": "number?", "comparable": "boolean"}
    return ComparisonRow(**{name: _of_kind(_need(d, name, where), f"{where}.{name}", kind.rstrip("?"), kind.endswith("?"))
                            for name, kind in kinds.items()}, note=_typed(d, "note", where, "string", ""))


def _comparison(value: Any, where: str) -> Comparison:
    d = _object(value, where)
    return Comparison(
        path=_need(d, "path", where),
        version=_need(d, "version", where),
        started=_need(d, "started", where),
        rules=_items(_need(d, "rules", where), f"{where}.rules", lambda v, w: v),
        rows=_items(_need(d, "rows", where), f"{where}.rows", _row),
        regressions=_items(d.get("regressions", []), f"{where}.regressions", _object),
        not_comparable=_items(d.get("not_comparable", []), f"{where}.not_comparable", lambda v, w: _of_kind(v, w, "string")),
        engine_change=_of_kind(d.get("engine_change", ""), f"{where}.engine_change", "string"),
    )


def scenario_from_dict(s: Mapping[str, Any]) -> ScenarioResult:
    """Rebuild one scenario's result from its JSON form (raise ResultsFileError if it is malformed)."""
    try:
        return _scenario(s, "scenario")
    except _Bad as exc:
        raise ResultsFileError(f"not a specaudit results document: {exc}") from None


def from_document(doc: Any, source: str = "results document") -> RunResult:
    """Rebuild a RunResult from its JSON document; raise ResultsFileError naming ``source`` and the field."""
    if not isinstance(doc, Mapping):
        raise ResultsFileError(f"{source}: not a specaudit results file (expected a JSON object, got {_kind(doc)})")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultsFileError(
            f"{source}: not a specaudit results file (schema_version {version!r}; this specaudit reads {SCHEMA_VERSION})"
        )
    try:
        base = doc.get("baseline")
        return RunResult(
            target=_typed(doc, "target", "", "string"),
            alpha=_in_range(doc, "alpha", "", lambda x: 0.0 < x < 1.0, "a family-wise alpha, 0 < alpha < 1"),
            seed=_typed(doc, "seed", "", "integer", None, optional=True),
            version=_typed(doc, "version", "", "string", "?"),
            scenarios=_items(_need(doc, "scenarios", ""), "scenarios", _scenario),
            interrupted=_typed(doc, "interrupted", "", "boolean", False),
            started=_typed(doc, "started", "", "string", ""),
            seconds=_typed(doc, "seconds", "", "number", 0.0),
            settings=_shaped(doc.get("settings", {}), _SETTINGS, "settings"),
            environment=_object(doc.get("environment", {}), "environment"),
            partial=_typed(doc, "partial", "", "boolean", False),
            baseline=_comparison(base, "baseline") if base else None,
        )
    except _Bad as exc:
        raise ResultsFileError(f"{source}: not a specaudit results file: {exc}") from None


def read_document(path: str | Path) -> dict[str, Any]:
    """Read a results file as its JSON document, checked field by field (ResultsFileError otherwise)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ResultsFileError(f"cannot read results file {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsFileError(
            f"cannot read results file {path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        # an error at the very end of the text: the file was cut short (a copy or a write that did not finish)
        ended = exc.pos >= len(text.rstrip())
        what = "the JSON ends early (a truncated file?)" if ended and text.strip() else "not JSON"
        raise ResultsFileError(
            f"cannot read results file {path}: {exc.msg} at line {exc.lineno} column {exc.colno}: {what}"
        ) from None
    except RecursionError:
        raise ResultsFileError(f"cannot read results file {path}: JSON nested too deeply") from None
    except ValueError as exc:  # a number json parses and Python will not build: an int of 5,000 digits
        raise ResultsFileError(f"cannot read results file {path}: {str(exc)[:300]}") from None
    from_document(doc, str(path))
    return doc


def read(path: str | Path) -> RunResult:
    """Read a results file written by :func:`write`."""
    return from_document(read_document(path), str(path))


# --- writing ------------------------------------------------------------------------------------


def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically: a temporary file in the same folder, then ``os.replace``.

    A lone surrogate in the text (a verifier's message, a file name that is not UTF-8) is written
    as its escape ``\\udcff``: text no UTF-8 can hold is shown, never a crash.

    The file gets the mode a plain ``open(path, "w")`` gives (0666 less the umask), so every report
    file is readable alike; a crash mid-write leaves ``path`` as it was and no temporary file.
    """
    path = Path(path)
    raw = data.encode("utf-8", errors="backslashreplace") if isinstance(data, str) else data
    try:
        return _replace(path, raw)
    except OSError as exc:  # a full disk, a folder where the file should be, a read-only mount: not a bug here
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _replace(path: Path, raw: bytes) -> Path:
    """Write ``raw`` as :func:`atomic_write` says; a device or a pipe (``/dev/null``, ``/dev/stdout``) is written through.

    ``os.replace`` onto a character device would put a regular file in its place: run as root,
    ``--html /dev/null`` replaced the system's /dev/null.
    """
    if path.exists() and not path.is_file() and not path.is_dir():
        with open(path, "wb") as fh:  # no temporary file can stand in for a device: written as it is
            fh.write(raw)
        return path
    return replace_file(path, raw)


def replace_file(path: Path, raw: bytes) -> Path:
    """Write ``raw`` to a temporary file beside ``path``, then put it in ``path``'s place (``os.replace``).

    Whatever ``path`` was (a file, a FIFO, a link) is replaced, never written through; the
    folders above it are made. Raises OSError.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write(result: RunResult, path: str | Path) -> Path:
    """Write the results file of ``result`` atomically; return its path."""
    return atomic_write(path, dumps(result))
