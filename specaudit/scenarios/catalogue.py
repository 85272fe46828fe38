"""The scenario catalogue: the shipped scenarios, the default suite, and ``--scenario`` resolution.

Shipped scenarios are YAML files in the ``specaudit.shipped`` package data, parsed once per file
version per process; `resolve` turns the CLI's ``--scenario`` values (a shipped name, ``tag:NAME``
or a path) into loaded scenarios, and `json_schema` gives editors the schema of a scenario file.
A shipped scenario's file is named after it (``NAME.yaml``, a test holds every shipped file to it),
so a run that names its scenarios parses those files only, not the whole catalogue (issue 20: the
first block of ``-s markov-v4`` waited for 40 files).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any, cast

from specaudit.errors import UsageError, closest
from specaudit.scenarios.loading import LoadedScenario, load_scenario
from specaudit.scenarios.schema import validator


def shipped_paths() -> list[Path]:
    """Return the shipped scenario files, sorted by name."""
    root = resources.files("specaudit.shipped")
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith((".yaml", ".yml")))


def shipped() -> list[LoadedScenario]:
    """Load every shipped scenario (parsed once per file version per process)."""
    return [_load_shipped(str(p), p.stat().st_mtime_ns) for p in shipped_paths()]


@functools.lru_cache(maxsize=256)
def _load_shipped(path: str, mtime_ns: int) -> LoadedScenario:
    """Load a shipped file; the cache key includes its mtime, so edits are seen (run overhead)."""
    return load_scenario(path)


def _named(name: str) -> LoadedScenario | None:
    """Return the shipped scenario ``name`` from its own file ``NAME.yaml``, or None (not such a file)."""
    if not name.replace("-", "").replace("_", "").isalnum():  # a path, a tag, a glob: the catalogue decides
        return None
    path = Path(str(resources.files("specaudit.shipped"))) / f"{name}.yaml"
    if not path.is_file():
        return None
    loaded = _load_shipped(str(path), path.stat().st_mtime_ns)
    return loaded if loaded.name == name else None


def default_suite() -> list[LoadedScenario]:
    """Return the shipped scenarios tagged ``default``."""
    return [s for s in shipped() if "default" in s.spec.tags]


def resolve(names_or_paths: list[str] | tuple[str, ...] | None) -> list[LoadedScenario]:
    """Resolve ``--scenario`` values (shipped names, tags as ``tag:NAME``, or YAML paths)."""
    if not names_or_paths:
        return default_suite()
    named = [_named(item) for item in names_or_paths]
    if all(s is not None for s in named):
        return [s for s in named if s is not None]
    catalogue = {s.name: s for s in shipped()}
    found: list[LoadedScenario] = []
    for item in names_or_paths:
        if item.startswith("tag:"):
            found.extend(s for s in catalogue.values() if item[4:] in s.spec.tags)  # none: nothing to run
        elif item in catalogue:
            found.append(catalogue[item])
        elif Path(item).exists() or item.endswith((".yaml", ".yml")):
            found.append(load_scenario(item))
        else:
            raise UsageError(
                f"--scenario {item}: not a shipped scenario name nor a file{closest(item, catalogue)}; "
                f"`specaudit list` shows the names"
            )
    return found


def json_schema() -> dict[str, Any]:
    """Return the JSON Schema of a scenario file, for editors."""
    schema = cast(dict[str, Any], validator().json_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "specaudit scenario (schema version 1)"
    return schema
