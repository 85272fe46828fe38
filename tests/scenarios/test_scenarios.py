"""Scenarios: schema validation messages with file:line, loading files, the shipped catalogue, the JSON schema."""

import json
from pathlib import Path

import numpy as np
import pytest

from specaudit import scenarios
from specaudit.errors import ScenarioError, UsageError
from specaudit.scenarios.catalogue import default_suite, json_schema, resolve, shipped
from specaudit.scenarios.loading import load_scenario, parse_scenario
from specaudit.scenarios.schema import MAX_JOINT_CELLS, Scenario

GOOD = """\
name: t
vocab: 3
k: 2
length: 2
samples: 100
target:
  kind: markov
  matrix:
    - [0.2, 0.3, 0.5]
    - [1.0, 0.0, 0.0]
    - [0.3, 0.3, 0.4]
draft:
  kind: dirichlet
  concentration: 0.5
"""


def test_good_scenario_builds_chains():
    sc = parse_scenario(GOOD, "good.yaml").spec
    target, draft = sc.chains()
    assert target.dist.shape == (3, 3) and draft.dist.shape == (3, 3)
    np.testing.assert_allclose(draft.dist.sum(axis=1), 1.0)
    np.testing.assert_array_equal(sc.draft_law, [0, 0, 1])


#: The "billion laughs": ten levels of nine aliases of the level below (9**10 values; validation hung on it).
LAUGHS = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))


@pytest.mark.parametrize(
    "edit, match",
    [
        (("concentration: 0.5", "concentraton: 0.5"), r"bad\.yaml:14: draft\.concentraton: unknown key .*did you mean 'concentration'"),
        (("- [1.0, 0.0, 0.0]", "- [0.9, 0.0, 0.0]"), r"bad\.yaml:10: target\.matrix\[1\]: row 1 sums to 0\.9; it must sum to 1 within 1e-06"),
        (("k: 2", "k: two"), r"bad\.yaml:3: k: Input should be a valid integer \(got 'two'\)"),
        (("vocab: 3", "vocab: 1"), r"bad\.yaml:2: vocab: Input should be greater than or equal to 2"),
        (("kind: dirichlet", "kind: dirichlett"), r"bad\.yaml:13: draft\.kind: unknown kind 'dirichlett'.*did you mean 'dirichlet'"),
        (("samples: 100", "samples: 100\ndrafts: 5"), r"drafts: drafts = 5 exceeds k = 2; allowed: 0\.\.2"),
        (("samples: 100", "samples: 100\ndrafts: [0.5, 0.5]"), r"drafts weights need k \+ 1 = 3 entries"),
        (("name: t", "name: t\nfoo: 1"), r"bad\.yaml:2: foo: unknown key 'foo'; allowed: schema, name"),
        # a nested class given a non-mapping: worded as it was when the classes were pydantic models
        (("samples: 100", "samples: 100\nadapter: 3"), r"^bad\.yaml:\d+: adapter: Input should be a valid dictionary or "
                                                       r"instance of AdapterSpec \(got 3\)$"),
        (("length: 2", "length: [2"), r"bad\.yaml:\d+: malformed YAML"),
        # values PyYAML parses and cannot build, and a nesting its recursive composer would overflow the stack on
        # (a segfault in the C loader); each was exit 3 or a crash
        (("k: 2", "k: " + "9" * 5000), r"bad\.yaml: a value YAML cannot build: ValueError: Exceeds the limit \(4300 digits\)"),
        (("k: 2", "k: 2026-13-45"), r"bad\.yaml: a value YAML cannot build: ValueError: month must be in 1\.\.12"),
        (("k: 2", "k: " + "[" * 100_000 + "]" * 100_000), r"bad\.yaml:3: nested more than 64 levels deep"),
        (("name: t", LAUGHS + "name: t"), r"bad\.yaml:\d+: its aliases \(\*name\) expand to more than 4,194,304 values"),
    ],
)
def test_validation_messages_name_file_line_key(edit, match):
    with pytest.raises(ScenarioError, match=match):
        parse_scenario(GOOD.replace(*edit), "bad.yaml")


def test_matrix_shape_must_match_vocab():
    with pytest.raises(ScenarioError, match=r"target\.matrix must be 4 x 4"):
        parse_scenario(GOOD.replace("vocab: 3", "vocab: 4"), "x.yaml")


def test_shipped_scenarios_are_valid_and_default_suite_complete():
    names = {s.name for s in shipped()}
    assert {"seed-context-free", "markov-v4", "ragged-v4", "peaked-v8", "one-hot", "p-equals-q",
            "zero-drafts", "greedy-drafter"} <= names
    for s in shipped():
        assert s.spec.joint_cells <= MAX_JOINT_CELLS or s.spec.lazy  # lazy (zipf): per-prefix + PIT


def test_a_shipped_file_is_named_after_its_scenario_and_a_name_parses_only_its_file(monkeypatch):
    loaded = shipped()
    assert all(Path(s.path).name == f"{s.name}.yaml" for s in loaded)  # resolve's one-file lookup relies on it
    assert len({s.name for s in loaded}) == len(loaded)
    import specaudit.scenarios.catalogue as catalogue

    def no_catalogue():
        raise AssertionError("the whole catalogue was parsed for a shipped name")

    monkeypatch.setattr(catalogue, "shipped", no_catalogue)
    got = resolve(["markov-v4", "zipf-v32k"])
    assert [s.name for s in got] == ["markov-v4", "zipf-v32k"]
    assert got[0].spec == next(s for s in loaded if s.name == "markov-v4").spec
    with pytest.raises(AssertionError, match="whole catalogue"):  # a tag, a typo or a path still reads it
        resolve(["tag:default"])


def test_resolve_suggests_close_names():
    with pytest.raises(UsageError, match="did you mean 'markov-v4'"):
        resolve(["markov-v5"])


def test_dirichlet_support_makes_partly_disjoint_rows():
    sc = resolve(["peaked-v8"])[0].spec
    target, draft = sc.chains()
    assert ((target.dist > 0).sum(axis=1) == 5).all()
    only_q = (draft.dist > 0) & (target.dist == 0)
    only_p = (target.dist > 0) & (draft.dist == 0)
    assert only_q.any() and only_p.any()


def test_json_schema_is_valid_json_with_kinds():
    schema = json.loads(json.dumps(json_schema()))
    text = json.dumps(schema)
    for kind in ("context_free", "markov", "dirichlet", "one_hot", "same_as_target", "greedy"):
        assert kind in text


def test_load_scenario_reads_files_and_names_unreadable_ones(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    loaded = load_scenario(path)
    assert (loaded.name, loaded.path, loaded.line) == ("t", str(path), 1)
    with pytest.raises(ScenarioError, match=r"missing\.yaml: cannot read scenario file"):
        load_scenario(tmp_path / "missing.yaml")


def test_resolve_takes_names_tags_and_paths(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD)
    assert [s.name for s in resolve(["markov-v4", str(path)])] == ["markov-v4", "t"]
    tagged = resolve(["tag:default"])
    assert tagged and [s.name for s in tagged] == [s.name for s in default_suite()]
    assert resolve(["tag:no-such-tag"]) == []


def test_package_reexports_the_three_modules():
    # `specaudit.scenarios` was one module before the folder split: its names still import from it
    assert scenarios.load_scenario is load_scenario and scenarios.parse_scenario is parse_scenario
    assert scenarios.resolve is resolve and scenarios.json_schema is json_schema
    assert scenarios.Scenario is Scenario and scenarios.MAX_JOINT_CELLS == MAX_JOINT_CELLS
