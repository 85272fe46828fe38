"""Scenario files: YAML text -> a validated `Scenario`, with ``file:line: key.path: message`` errors.

Parsing keeps PyYAML's node tree beside the data, so that a pydantic error location (``target.matrix
[2]``) is mapped back to the line that holds it; union-branch labels are dropped from locations, and
whole-scenario checks point at the key their message names. `LoadedScenario` is what the engine
runs: the model plus where it came from. The models and their rules live in
`specaudit.scenarios.schema`; this module only reads files and words errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from specaudit.errors import ScenarioError, closest
from specaudit.scenarios.schema import Scenario

#: libyaml's safe loader when available (same nodes and marks, ~10x faster), else PyYAML's.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class LoadedScenario:
    """A scenario with where it came from (for messages and annotations)."""

    spec: Scenario
    path: str
    line: int = 1

    @property
    def name(self) -> str:
        """Return the scenario name."""
        return self.spec.name


# ---- loading with line numbers ---------------------------------------------------------


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """Return the 1-based line of the YAML node at pydantic location ``loc`` (nearest ancestor)."""
    node, line = root, 1
    for key in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == key:
                    node = v
                    line = k.start_mark.line + 1
                    break
            # a key not in the mapping is a union tag (e.g. 'markov'): stay on this node
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
    if isinstance(node, yaml.ScalarNode) or (isinstance(node, yaml.SequenceNode) and isinstance(loc[-1], int)):
        line = node.start_mark.line + 1
    return line


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for key in loc:
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += ("." if out else "") + str(key)
    return out or "(top level)"


_KINDS = {"context_free", "markov", "dirichlet", "one_hot", "same_as_target", "greedy", "logits", "same_logits_as_target", "zipf"}


def _is_branch_label(key: Any) -> bool:
    """Tell pydantic's union-branch labels ('markov', 'int', 'list[float]') from real keys."""
    return isinstance(key, str) and (
        key in _KINDS or key in {"int", "str", "float"} or any(c in key for c in "[(-")
    )


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop pydantic's union-branch labels from an error location."""
    return tuple(k for k in loc if not _is_branch_label(k))


def parse_scenario(text: str, path: str = "<string>") -> LoadedScenario:
    """Parse and validate one scenario document; raise ScenarioError with file:line on any problem."""
    try:
        root = yaml.compose(text, Loader=_YAML_LOADER)
        data = yaml.load(text, Loader=_YAML_LOADER)  # a safe loader (C or Python): no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise ScenarioError(f"{path}:{line}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}:1: a scenario must be a YAML mapping (name: ..., vocab: ..., ...)")
    try:
        spec = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_describe(exc, root, path)) from None
    return LoadedScenario(spec, path, 1)


def _describe(exc: ValidationError, root: yaml.Node | None, path: str) -> str:
    lines, seen = [], set()
    for err in exc.errors():
        loc = _clean_loc(err["loc"])
        if err["type"] == "unknown_key":
            loc = (*loc, err["ctx"]["key"])
        if err["type"] == "union_tag_invalid":
            loc = (*loc, "kind")
            allowed = err["ctx"]["expected_tags"]
            msg = f"unknown kind {err['ctx']['tag']!r}; allowed: {allowed}{closest(str(err['ctx']['tag']), [t.strip(chr(39)) for t in allowed.split(', ')])}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if not isinstance(err.get("input"), (dict, list)) and err["type"] != "value_error":
                msg += f" (got {err.get('input')!r})"
            # whole-scenario checks name their key first ("drafts = 5 exceeds k"): point at it
            head = re.match(r"^([A-Za-z_][\w.]*)\b", msg)
            if not loc and head:
                loc = tuple(head.group(1).split("."))
            row = re.match(r"^row (\d+) ", msg)
            if row:  # point at the offending row of a matrix
                loc = (*loc, int(row.group(1)))
        text = f"{path}:{_line_of(root, loc)}: {_format_loc(loc)}: {msg}"
        if text not in seen:
            seen.add(text)
            lines.append(text)
    return "\n".join(lines)


def load_scenario(path: str | Path) -> LoadedScenario:
    """Load one scenario file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario file: {exc.strerror}") from None
    return parse_scenario(text, str(path))
