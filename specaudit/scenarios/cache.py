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

The pickle is read by an unpickler that knows the schema classes and nothing else: a file that
names any other object (a function, a module), fails its checksum, is truncated or holds anything
but a scenario is ignored with a one-line warning, and the text is validated again.
"""

from __future__ import annotations

import functools
import hashlib
import io
import pickle
import struct
import sys
from importlib import util
from pathlib import Path
from typing import Any

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
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], schema.Scenario) and _is_keys(entry[1])):
            raise ValueError(f"it holds a {type(entry).__name__}, not a scenario and its keys")
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
