"""Scenario text -> a validated `Scenario` and its keys' lines, with ``file:line: key.path: message`` errors.

Parsing keeps PyYAML's node tree beside the data, so that a pydantic error location (``target.matrix
[2]``) is mapped back to the line that holds it; union-branch labels are dropped from locations, and
whole-scenario checks point at the key their message names. Before any validation a document
nested too deep, whose aliases expand past any file's size, or a mapping that repeats a key (PyYAML
would keep the last value silently) is a ScenarioError. Imported by `specaudit.scenarios.loading`
when a text is not in the cache of validated scenarios (PyYAML and pydantic load with it).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import ValidationError

from specaudit.errors import ScenarioError, closest
from specaudit.scenarios.schema import MAX_SCENARIO_BYTES, Scenario, validate

#: libyaml's safe loader when available (same nodes and marks, ~10x faster), else PyYAML's.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


#: A key path at the start of a message ("mix[1].target", "drafts"), and whether ": " follows it.
_HEAD = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\])*)(: )?")


def _parse_path(path: str) -> tuple[Any, ...]:
    """Return the location tuple of a key path written ``mix[1].target`` (keys and list indices)."""
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"[A-Za-z_]\w*|\d+", path))


def _duplicate_key(root: yaml.Node | None) -> tuple[str, int, int] | None:
    """Return (key, first line, second line) of the first key repeated in a mapping, or None.

    YAML 1.2 requires unique keys, but PyYAML keeps the last value silently (``vocab: 4`` then
    ``vocab: 8`` reads as 8); a scenario must say what it means once.
    """
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if key.value in seen:
                        return key.value, seen[key.value], line
                    seen[key.value] = line
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


#: The deepest nesting of mappings and lists a scenario file may have (the schema needs 5: mix, sampling, bias).
MAX_NESTING = 64


def _too_deep(path: str, line: int) -> ScenarioError:
    return ScenarioError(f"{path}:{line}: nested more than {MAX_NESTING} levels deep (mappings and lists); "
                         "a scenario needs 5 at most")


def _check_shape(text: str, path: str) -> None:
    """Refuse a document nested past MAX_NESTING, or whose aliases expand past MAX_SCENARIO_BYTES values.

    Read as a stream of events, which needs no recursion: PyYAML builds its node tree recursively,
    and a file nested 100,000 levels deep overflowed the C loader's stack (a segfault, signal 11)
    before any error could be raised. Aliases (``*a``) repeat a node without its bytes: ten levels
    of nine (the "billion laughs") hung validation; expanded, no file holds more values than its
    size allows unaliased.
    """
    loader = _YAML_LOADER(text)
    depth, values = 0, 0
    sizes: dict[str, int] = {}  # each anchor's expanded values
    opened: list[tuple[str | None, int]] = []  # the anchor of each open collection, and the values before it
    try:
        while loader.check_event():
            event = loader.get_event()
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent):
                values += sizes.get(event.anchor, 1)
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                opened.append((event.anchor, values))
                values += 1
                if depth > MAX_NESTING:
                    raise _too_deep(path, line)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
                anchor, before = opened.pop()
                if anchor is not None:
                    sizes[anchor] = values - before
            elif isinstance(event, yaml.ScalarEvent):
                values += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            if values > MAX_SCENARIO_BYTES:
                raise ScenarioError(f"{path}:{line}: its aliases (*name) expand to more than {MAX_SCENARIO_BYTES:,} "
                                    "values, more than any scenario file can hold written out")
    except yaml.MarkedYAMLError as exc:
        # libyaml (PyYAML 6.0.4's C loader) scans flow collections ahead of the events and stops at its own
        # nesting limit (1,000 flow levels) before this loop sees level 65: the same refusal, worded as ours
        if "nesting" not in str(exc.problem):
            raise
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise _too_deep(path, line) from None
    finally:
        loader.dispose()


def parse(text: str, path: str) -> tuple[Scenario, tuple[tuple[str, int], ...]]:
    """Return one scenario document validated, and the lines of its top-level keys; raise ScenarioError with file:line."""
    loader = _YAML_LOADER(text)  # a safe loader (C or Python): no arbitrary objects
    try:  # parse once: the node tree (for lines) and the data built from it
        _check_shape(text, path)
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise ScenarioError(f"{path}:{line}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # a value PyYAML parsed and cannot build: an int of
        # 5,000 digits (Python's int-from-string limit), a date 2026-13-45, nesting deeper than the stack
        raise ScenarioError(f"{path}: a value YAML cannot build: {type(exc).__name__}: {str(exc)[:300]}") from None
    finally:
        loader.dispose()
    duplicate = _duplicate_key(root)
    if duplicate is not None:
        key, first, again = duplicate
        raise ScenarioError(
            f"{path}:{again}: {key}: duplicate key (first given at line {first}); YAML would keep only the "
            f"last value silently: give {key!r} once"
        )
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}:1: a scenario must be a YAML mapping (name: ..., vocab: ..., ...)")
    try:
        spec = validate(data)
    except ValidationError as exc:
        raise ScenarioError(_describe(exc, root, path)) from None
    top = root.value if isinstance(root, yaml.MappingNode) else []
    keys = tuple((k.value, k.start_mark.line + 1) for k, _ in top if isinstance(k, yaml.ScalarNode))
    return spec, keys


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
            if err["type"] == "dataclass_type":  # a nested class given a non-mapping: worded as when it was a model
                msg = f"Input should be a valid dictionary or instance of {err['ctx']['class_name']}"
            if not isinstance(err.get("input"), (dict, list)) and err["type"] != "value_error":
                msg += f" (got {err.get('input')!r})"
            # whole-scenario checks name their key first ("drafts = 5 exceeds k", "mix[1].target: token ids"):
            # point at it, and drop a "key.path: " prefix so the path is printed once
            head = _HEAD.match(msg)
            if not loc and head:
                loc = _parse_path(head.group(1))
                if head.group(2):
                    msg = msg[head.end():]
            row = re.match(r"^row (\d+) ", msg)
            if row:  # point at the offending row of a matrix
                loc = (*loc, int(row.group(1)))
        text = f"{path}:{_line_of(root, loc)}: {_format_loc(loc)}: {msg}"
        if text not in seen:
            seen.add(text)
            lines.append(text)
    return "\n".join(lines)
