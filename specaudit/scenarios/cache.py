"""Validated scenarios remembered on disk: a scenario text validated once is read back, not validated again.

pydantic validating a scenario costs its import and the build of its validator, ~0.15 s of a
one-scenario run's start before its first block (issue 20). A scenario text that validated is
stored as the validated objects (a pickle of the schema dataclasses and the lines of its top-level
keys, sealed with its SHA-256, :mod:`specaudit.results.cache`) in ``scenarios/`` of the cache
folder, named by the SHA-256 of the text and of what its validation depends on: this specaudit's
version, the size and modification time of every source file of the scenario schema and of the
chains it checks against, and of pydantic's and pydantic-core's installed files. The same text
read by the same code gives the same objects, read back with neither PyYAML nor pydantic. Only a
text that validated is stored, so every error is found and worded afresh.

The pickle is read by an unpickler that knows the schema classes and nothing else, and what it
builds is checked against the classes' own annotations without pydantic (:func:`conforms`: every
field there with a value of its type, within its ``Rule`` bounds, through its ``Check`` functions, and
every class's ``_check``): a file that names any other object (a function, a module), fails its
checksum, is truncated, is no regular file, or holds anything but a valid scenario (a forged entry
whose seal was recomputed included) is ignored with a one-line warning, and the text is validated
again. The seal is no signature: an entry forged to hold another *valid* scenario is taken for its
text, as a file of specaudit's own source edited by the same hand would be.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import pickle
import re
import struct
import sys
import types
import typing
from importlib import util
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from specaudit import __version__
from specaudit.results.cache import cache_dir, read_sealed, write_sealed
from specaudit.scenarios import schema

#: Top-level keys of a scenario file and their lines, as `specaudit.scenarios.loading.LoadedScenario` keeps them.
Keys = tuple[tuple[str, int], ...]

#: The largest cache entry read: a scenario file holds at most 4 MiB of text, ~1 million numbers (~9 MB pickled).
MAX_ENTRY_BYTES = 64 << 20


@functools.cache
def _code() -> bytes:
    """Return the digest of what validation depends on besides the text (computed once per process)."""
    package = Path(schema.__file__).parent.parent
    files = [package / "errors.py", *sorted((package / "scenarios").glob("*.py")), *sorted((package / "chains").glob("*.py"))]
    for name in ("pydantic", "pydantic_core"):
        found = util.find_spec(name)
        if found is not None and found.origin:
            files.append(Path(found.origin))
    digest = hashlib.sha256(__version__.encode())
    for path in files:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return digest.digest()


def _entry(text: str) -> Path | None:
    """Return the cache file of a scenario text, or None when the cache is off."""
    root = cache_dir()
    if root is None:
        return None
    try:
        code = _code()
    except (OSError, ValueError, ImportError):  # a source file gone mid-run, a broken install: no cache then
        return None
    key = hashlib.sha256(code + text.encode("utf-8", "surrogatepass")).hexdigest()
    return root / "scenarios" / f"{key[:40]}.pickle"


class _SchemaUnpickler(pickle.Unpickler):
    """An unpickler that builds the schema classes and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        found = getattr(schema, name, None) if module == schema.__name__ else None
        if isinstance(found, type) and issubclass(found, schema.Spec):
            return found
        raise pickle.UnpicklingError(f"it names {module}.{name}, which is not a scenario class")


_HINTS: dict[type, dict[str, Any]] = {}


def _fields(cls: type) -> dict[str, Any]:
    """Return the annotations of a schema class's fields, evaluated (their markers included), once per class."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
    return _HINTS[cls]


def _bounds(value: Any, rule: schema.Rule, where: str) -> None:
    """Raise ValueError unless ``value`` is within the bounds a `Rule` sets (the other arguments are pydantic's)."""
    arguments = rule.arguments
    for name, holds in (("ge", lambda b: value >= b), ("gt", lambda b: value > b), ("le", lambda b: value <= b),
                        ("lt", lambda b: value < b), ("min_length", lambda b: len(value) >= b),
                        ("max_length", lambda b: len(value) <= b), ("pattern", lambda b: re.search(b, value))):
        if name in arguments and not holds(arguments[name]):
            raise ValueError(f"{where}: {value!r:.80} breaks {name}={arguments[name]!r}")


def conforms(value: Any, hint: Any = schema.Scenario, where: str = "scenario") -> None:
    """Raise ValueError unless ``value`` is what the schema annotation ``hint`` allows, checked without pydantic.

    Types as validation leaves them (an int is no bool; a float field may hold an int), the bounds
    of each `Rule`, each after-`Check` function, and for a schema class exactly its fields (a field
    at its default is not checked, as pydantic does not validate defaults) and its whole-object
    ``_check``.
    """
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        conforms(value, arguments[0], where)
        for marker in hint.__metadata__:
            if isinstance(marker, schema.Rule):
                _bounds(value, marker, where)
            elif isinstance(marker, schema.Check) and not marker.before:
                marker.function(value)
    elif origin is Union or origin is types.UnionType:
        for arm in arguments:
            try:
                return conforms(value, arm, where)
            except ValueError:
                continue
        raise ValueError(f"{where}: {value!r:.80} is none of {hint}")
    elif origin is Literal:
        if not any(type(value) is type(allowed) and value == allowed for allowed in arguments):
            raise ValueError(f"{where}: {value!r:.80} is not one of {arguments}")
    elif origin is list or origin is dict:
        if type(value) is not origin:
            raise ValueError(f"{where}: a {type(value).__name__}, not a {origin.__name__}")
        for i, item in enumerate(value):
            if origin is dict:
                conforms(item, arguments[0], f"{where} key {i}")
                item = value[item]
            conforms(item, arguments[-1], f"{where}[{i}]")
    elif isinstance(hint, type) and issubclass(hint, schema.Spec):
        if type(value) is not hint or set(vars(value)) != set(_fields(hint)):
            raise ValueError(f"{where}: not a {hint.__name__} with its fields")
        defaults = {f.name: f.default for f in dataclasses.fields(hint)}
        for name, field_hint in _fields(hint).items():
            item = getattr(value, name)
            if type(item) is type(defaults[name]) and item == defaults[name]:
                continue  # a default, as pydantic leaves it (``drafts`` defaults to None, outside its type)
            conforms(item, field_hint, f"{where}.{name}")
        value._check()
    elif type(value) is not hint and not (hint is float and type(value) is int):
        raise ValueError(f"{where}: a {type(value).__name__}, not a {getattr(hint, '__name__', hint)}")
    return None


def _is_keys(value: Any) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], str) and type(k[1]) is int for k in value)


#: What reading a damaged or foreign file raises: the reader (OSError, ValueError for a size or checksum) and
#: the unpickler (bad opcodes, a class it refuses, a memo or stack out of range, a frame larger than memory).
_DAMAGED = (OSError, ValueError, EOFError, TypeError, AttributeError, IndexError, KeyError, RecursionError, MemoryError,
            OverflowError, struct.error, pickle.UnpicklingError)


def load(text: str) -> tuple[schema.Scenario, Keys] | None:
    """Return the validated scenario of ``text`` and its keys' lines from the cache, or None (not there, or refused)."""
    path = _entry(text)
    if path is None:
        return None
    try:
        entry = _SchemaUnpickler(io.BytesIO(read_sealed(path, MAX_ENTRY_BYTES))).load()
        if not (isinstance(entry, tuple) and len(entry) == 2 and _is_keys(entry[1])):
            raise ValueError(f"it holds a {type(entry).__name__}, not a scenario and its keys")
        conforms(entry[0])
    except (FileNotFoundError, NotADirectoryError):  # not stored yet, or no cache folder to hold it
        return None
    except _DAMAGED as exc:
        # one line on stderr: a bad cache costs time, never the run
        print(f"specaudit: warning: ignored cache file {path} ({exc}); validating the scenario again", file=sys.stderr)
        return None
    return entry[0], entry[1]


def store(text: str, spec: schema.Scenario, keys: Keys) -> None:
    """Remember the validated scenario of ``text`` (a cache that cannot be written is not written)."""
    path = _entry(text)
    if path is not None:
        write_sealed(path, pickle.dumps((spec, keys), protocol=pickle.HIGHEST_PROTOCOL))
