"""Scenario files: YAML text -> a validated `Scenario`, with ``file:line: key.path: message`` errors.

`LoadedScenario` is what the engine runs: the scenario plus where it came from. Before any
parsing a file larger than :data:`MAX_SCENARIO_BYTES` (refused unread) and a file that is not
UTF-8 are ScenarioErrors. A text validated before is read back from the cache of validated
scenarios (`specaudit.scenarios.cache`); any other is parsed and validated by
`specaudit.scenarios.parsing` (PyYAML, pydantic and the ``file:line`` wording of errors), which
loads only then. The classes and their rules live in `specaudit.scenarios.schema`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specaudit.errors import ScenarioError
from specaudit.results.document import read_regular
from specaudit.scenarios import cache
from specaudit.scenarios.schema import MAX_SCENARIO_BYTES, Scenario

__all__ = ["MAX_SCENARIO_BYTES", "LoadedScenario", "load_scenario", "parse_scenario"]


@dataclass(frozen=True)
class LoadedScenario:
    """A scenario with where it came from (for messages and annotations)."""

    spec: Scenario
    path: str
    line: int = 1
    keys: tuple[tuple[str, int], ...] = ()  # (top-level key, its line), for messages

    def key_line(self, key: str) -> int:
        """Return the line of a top-level key of the file (the scenario's line when unknown)."""
        return dict(self.keys).get(key, self.line)

    @property
    def name(self) -> str:
        """Return the scenario name."""
        return self.spec.name


def parse_scenario(text: str, path: str = "<string>") -> LoadedScenario:
    """Parse and validate one scenario document; raise ScenarioError with file:line on any problem.

    A text validated before (by this code) is read back from the cache of validated scenarios
    (:mod:`specaudit.scenarios.cache`), without PyYAML or pydantic.
    """
    cached = cache.load(text)
    if cached is None:
        from specaudit.scenarios import parsing  # PyYAML and pydantic: only for a text not validated before

        cached = parsing.parse(text, path)
        cache.store(text, *cached)
    spec, keys = cached
    return LoadedScenario(spec, path, 1, keys)


def load_scenario(path: str | Path) -> LoadedScenario:
    """Load one scenario file."""
    path = Path(path)
    try:
        raw = read_regular(path, MAX_SCENARIO_BYTES + 1)  # the size guard reads at most one byte past the limit
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario file: {exc.strerror or exc}") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError(
            f"{path}: scenario file larger than {MAX_SCENARIO_BYTES >> 20} MiB (the limit); a scenario is a few kB: "
            "generate large chains (kind: dirichlet, logits or zipf with a seed) instead of listing them"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ScenarioError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save the scenario file as UTF-8"
        ) from None
    return parse_scenario(text, str(path))
