"""The lossless panel (specaudit.verifiers.lossless): each member passes where it must, and the benchmark runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import specaudit
from specaudit.verifiers.lossless import (
    PANEL,
    _float32_below,
    merge_equal_siblings,
    tree_eagle_lt,
    tree_merge_equal_siblings,
)
from specaudit.verifiers.tree import verify as specinfer

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("false_alarms", ROOT / "benchmarks" / "false_alarms.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_merge_reparents_children_of_a_later_copy_and_leaves_padding():
    tokens = np.array([[1, 1, 2, 3, 9]])
    parent = np.array([[-1, -1, 0, 1, 3]])  # node 4 is padding (num_nodes 4): never read, never changed
    assert merge_equal_siblings(tokens, parent, np.array([4])).tolist() == [[-1, -1, 0, 0, 3]]
    distinct = np.array([[1, 2, 2, 3, 0]])  # siblings differ: nothing merges
    assert merge_equal_siblings(distinct, parent, np.array([4])).tolist() == parent.tolist()


def _two_copies():
    """Root children 0 and 1 both token 1 (accepted for sure); node 2 (token 2, p = 0) under 0, node 3 (token 3, p = 1) under 1."""
    v = 4
    tokens = np.array([[1, 1, 2, 3]])
    parent = np.array([[-1, -1, 0, 1]])
    q = np.zeros((1, 4, v))
    q[0, [0, 1], 1] = 1.0
    q[0, [2, 3], :] = 0.25  # children drawn i.i.d. from a uniform drafter after token 1
    p = np.zeros((1, 5, v))
    p[0, 0, 1] = 1.0
    p[0, [1, 2], 3] = 1.0  # after token 1 (either copy) the target emits 3
    p[0, [3, 4], 0] = 1.0
    return tokens, parent, q, p, np.array([4])


def test_merged_verifier_reaches_the_candidate_below_the_second_copy():
    tokens, parent, q, p, n = _two_copies()
    path, final = tree_merge_equal_siblings(tokens, parent, q, p, n, np.random.default_rng(3))
    assert path.tolist() == [[1, 3]] and final.tolist() == [0]  # the path in the original tree
    path, final = specinfer(tokens, parent, q, p, n, np.random.default_rng(3))
    assert path.tolist() == [[0]] and final.tolist() == [3]  # SpecInfer never sees node 3: one token fewer


@pytest.mark.parametrize("verify", [tree_merge_equal_siblings, tree_eagle_lt])
def test_prefix_grouping_verifiers_accept_the_candidate_below_the_second_copy(verify):
    path, final = verify(*_two_copies(), np.random.default_rng(4))
    assert path.tolist() == [[1, 3]] and final.tolist() == [0]


def test_float32_uniforms_round_down_below_one():
    u = np.array([0.0, 1 - 2**-53, 0.3])
    f = _float32_below(u)
    assert f.dtype == np.float32 and (f.astype(np.float64) <= u).all() and f[1] < 1 and f[0] == 0


#: Per member: (scenarios, seed) on which every check passes on the code as it stands; the i.i.d.
#: tree scenario's joint law for the members that differ from SpecInfer there.
CASES = {
    "reference": (["corners", "markov-v4"], 1),
    "chain_float32": (["corners", "markov-v4"], 1),
    "reference-block": (["block-toy"], 1),
    "reference-tree": (["tree-topk-v4"], 1),
    "tree_merge_equal_siblings": (["tree-topk-v4"], 2),
    "tree_eagle_lt": (["tree-topk-v4"], 2),
}


def test_cases_cover_the_panel():
    assert set(CASES) == set(PANEL.names())


@pytest.mark.parametrize("name", list(CASES))
def test_panel_member_passes_its_small_scenarios(name):
    scenarios, seed = CASES[name]
    result = specaudit.run(PANEL.get(name).target, scenarios, seed=seed, samples=4000, supervised=False,
                           power=False, diagnose=False)
    failed = [(s.name, c.name, c.summary) for s in result.scenarios for c in s.checks if c.status.value != "passed"]
    assert not failed and result.exit_code() == 0


@pytest.mark.parametrize("name", ["tree_merge_equal_siblings", "tree_eagle_lt"])
def test_prefix_grouping_keeps_the_joint_law_on_iid_trees(name):
    result = specaudit.run(PANEL.get(name).target, ["tree-iid-v4"], seed=1, samples=20000, supervised=False,
                           power=False, diagnose=False)
    (joint,) = [c for c in result.scenarios[0].checks if c.name == "joint-law"]
    assert joint.status.value in ("passed", "suspect"), joint.summary  # suspect: below alpha, not a failure


def test_benchmark_runs_and_writes_its_table(tmp_path, capsys):
    out = tmp_path / "fa.json"
    code = _benchmark().main(["--variant", "reference-tree", "--scenario", "tree-topk-v4", "--seeds", "1",
                              "--samples", "2000", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert code == 0 and doc["failures"] == [] and doc["table"]["reference-tree"]["joint-law"] == [0, 1]
    assert "reference-tree  (0 failures)" in capsys.readouterr().out


def test_benchmark_table_counts_and_names_a_failure():
    bench = _benchmark()
    runs = [{"variant": "v", "scenario": "s", "seed": 7, "checks": [
        {"check": "joint-law", "status": "failed", "summary": "TV too big"},
        {"check": "tree-one-hot", "status": "suspect", "summary": "x"}]},
        {"variant": "v", "scenario": "s", "seed": 8, "checks": [{"check": "joint-law", "status": "passed", "summary": ""}]}]
    folded = bench.tabulate(runs)
    assert folded["table"]["v"] == {"joint-law": [1, 2], "tree-one-hot": [0, 1]}
    text = bench.render(folded)
    assert "v / s / joint-law: 1 (seeds 7)" in text and "seed 7: TV too big" in text


def test_benchmark_refuses_an_unknown_variant(capsys):
    with pytest.raises(SystemExit) as exc:
        _benchmark().main(["--variant", "tree_eagle"])
    assert exc.value.code == 2 and "unknown panel member 'tree_eagle'" in capsys.readouterr().err
