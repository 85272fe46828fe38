"""Tree and block verification (draft trees and block verification): contract, exact references, simulator, mutants, SGLang layout.

Reference numbers come from closed forms computed here (theory.md: P(no child accepted) =
prod_j (1 - sum min(p_j, q)) for i.i.d. children; P(accept c) = p(c) for deterministic trees;
Sun et al.'s toy E[tau] = 11/9 vs chain 10/9), never from the code under test alone.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import specaudit
from specaudit.chains import tabular as chains
from specaudit.cli import main
from specaudit.contract.tree import contract_of, validate_tree_output
from specaudit.errors import ContractError, ExitCode, ScenarioError, UsageError
from specaudit.laws import chain as exact
from specaudit.laws import tree_block as exact_multi
from specaudit.results import Status
from specaudit.scenarios.loading import load_scenario, parse_scenario
from specaudit.simulate.tables import garbage_pool
from specaudit.simulate.tree import TreePlan, draft_trees

SHIPPED = "scenarios"
TOY_P, TOY_Q = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3])


def shipped(name: str):
    return load_scenario(f"{SHIPPED}/{name}.yaml")


def run(target, names, samples, **kw):
    return specaudit.run(target, [shipped(n) for n in names], samples=samples, diagnose=False, **kw)


# ---- exact references -------------------------------------------------------------------------


def test_toy_block_and_chain_accepted_drafts():
    # Sun et al. 2403.10444, toy example: chain keeps alpha + alpha^2 = 10/9, block 11/9.
    alpha = np.minimum(TOY_P, TOY_Q).sum()
    assert alpha + alpha**2 == pytest.approx(10 / 9)
    assert exact_multi.block_expected_accepted(TOY_P, TOY_Q, 2) == pytest.approx(11 / 9, abs=1e-12)
    t, d = chains.context_free(TOY_P), chains.context_free(TOY_Q)
    steps, start = exact_multi.block_step_kernels(t, d, np.array([0.0, 0.0, 1.0]))
    law = steps.sum(axis=2)[:, start]
    assert law @ np.arange(3) == pytest.approx(11 / 9, abs=1e-12)
    assert exact.horizon_from_steps(steps, start, 6).tokens_per_step == pytest.approx(20 / 9, abs=1e-12)
    chain = exact.finite_horizon(t, d, np.array([0.0, 0.0, 1.0]), 6)
    assert chain.tokens_per_step == pytest.approx(19 / 9, abs=1e-12)


def test_block_kernels_match_enumeration_and_never_lose_to_chain():
    rng = np.random.default_rng(901)
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
        t, d = chains.context_free(p), chains.context_free(q)
        steps, start = exact_multi.block_step_kernels(t, d, np.array([0, 0, 0, 1.0]))
        assert np.allclose(steps.sum(axis=(0, 2)), 1.0)  # a round always ends
        block = steps.sum(axis=2)[:, start] @ np.arange(4)
        assert block == pytest.approx(exact_multi.block_expected_accepted(p, q, 3), abs=1e-12)
        a = np.minimum(p, q).sum()
        assert block >= a + a**2 + a**3 - 1e-12  # never below chain (Sun et al., Thm. 2)


def test_tree_kernels_match_closed_forms():
    p, q = np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])
    t, d = chains.context_free(p), chains.context_free(q)
    # i.i.d. children: the residual after a rejection does not depend on the rejected token.
    res, none = p.copy(), 1.0
    for _ in range(3):
        none *= 1 - np.minimum(res, q).sum()
        res = np.maximum(res - q, 0) / np.maximum(res - q, 0).sum()
    steps, start = exact_multi.tree_step_kernels(t, d, [3], "iid")
    assert steps.sum(axis=2)[0, start] == pytest.approx(none, abs=1e-12)
    # Deterministic top-2 tree of depth 2 (context-free): accept at each level w.p. p(c1) + p(c2).
    a = p[3] + p[2]
    steps, start = exact_multi.tree_step_kernels(t, d, [2, 2], "topk")
    assert steps.sum(axis=2)[:, start] == pytest.approx([1 - a, a * (1 - a), a * a], abs=1e-12)
    # Without replacement, every ragged or full tree: kernels are stochastic.
    for ragged in (False, True):
        steps, _ = exact_multi.tree_step_kernels(t, d, [3, 2], "without_replacement", ragged)
        assert np.allclose(steps.sum(axis=(0, 2)), 1.0)


def test_tree_width_one_is_chain():
    rng = np.random.default_rng(902)
    m = rng.dirichlet(np.ones(3), size=3)
    t, d = chains.first_order(m, 0), chains.first_order(rng.dirichlet(np.ones(3), size=3), 1)
    steps, start = exact_multi.tree_step_kernels(t, d, [1, 1, 1], "iid")
    chain = exact.first_round_accept_law(t, d, np.array([0, 0, 0, 1.0]))
    assert steps.sum(axis=2)[:, start] == pytest.approx(chain, abs=1e-12)


# ---- contract ----------------------------------------------------------------------------------


PARENT = np.array([[-1, -1, 0, 1]])
NUM = np.array([4])


@pytest.mark.parametrize(
    "result, clause",
    [
        ((np.array([[0]]),), "tree-return"),
        ((np.array([0]), np.array([0])), "tree-shape"),
        ((np.array([[0.0]]), np.array([0])), "tree-dtype"),
        ((np.array([[-1, 0]]), np.array([0])), "tree-padding"),
        ((np.array([[4]]), np.array([0])), "tree-node-range"),
        ((np.array([[0, 3]]), np.array([0])), "tree-path"),  # node 3's parent is 1, not 0
        ((np.array([[2]]), np.array([0])), "tree-path"),  # node 2 is not a root child
        ((np.array([[1, 3]]), np.array([5])), "tree-vocab-range"),
    ],
)
def test_tree_output_clauses(result, clause):
    with pytest.raises(ContractError, match=clause):
        validate_tree_output(result, PARENT, NUM, vocab=5)


def test_tree_output_accepts_a_valid_path():
    path, acc, final = validate_tree_output((np.array([[1, 3, -1]]), np.array([4])), PARENT, NUM, 5)
    assert path.tolist() == [[1, 3]] and acc.tolist() == [2] and final.tolist() == [4]


def test_contract_detection():
    from specaudit.verifiers import block, reference
    from specaudit.verifiers import tree as tree_reference

    assert contract_of(tree_reference.verify) == "tree"
    assert contract_of(reference.verify) == "chain" and contract_of(block.verify) == "chain"
    assert contract_of(lambda tokens, parent, q, p, num_nodes, rng: None) == "tree"


# ---- scenarios and usage errors ------------------------------------------------------------------

BASE = """schema: 1
name: t
vocab: 3
k: 2
length: 2
samples: 10
target: {kind: dirichlet}
draft: {kind: dirichlet}
"""


@pytest.mark.parametrize(
    "extra, match",
    [
        ("algorithm: tree\n", r":\d+: tree: tree is required with algorithm: tree"),
        ("tree: {width: 2}\n", r"algorithm = 'chain' but a tree shape is given"),
        ("algorithm: tree\ntree: {width: [2, 2, 2]}\n", r"tree.width lists 3 levels; k = 2"),
        ("algorithm: tree\ntree: {width: 2, children: random}\n", r"tree.children"),
        ("algorithm: tree\ntree: {width: 2, wdth: 3}\n", r"unknown key 'wdth'.*did you mean 'width'"),
        ("algorithm: trie\n", r"algorithm"),
        ("algorithm: tree\ntree: {width: 64}\n", r"nodes; allowed: at most 512"),
    ],
)
def test_tree_scenario_validation(extra, match):
    with pytest.raises(ScenarioError, match=match):
        parse_scenario(BASE + extra, "s.yaml")


def test_chain_verifier_on_tree_scenario_is_a_usage_error():
    with pytest.raises(UsageError, match=r"tree-iid-v4.*algorithm: tree.*follows the chain contract"):
        run("specaudit.verifiers.reference:verify", ["tree-iid-v4"], 100)
    with pytest.raises(UsageError, match=r"block-toy.*follows the tree contract"):
        run("specaudit.verifiers.tree:verify", ["block-toy"], 100)


def test_cli_contract_mismatch_exits_4():
    result = CliRunner().invoke(main, ["run", "specaudit.verifiers.reference:verify", "-s", f"{SHIPPED}/tree-topk-v4.yaml"])
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert "tree contract" in result.output and "Traceback" not in result.output


# ---- simulator -------------------------------------------------------------------------------


def test_ragged_trees_are_compact_topological_and_padded_with_garbage():
    rng = np.random.default_rng(903)
    target, draft = shipped("tree-ragged-wr-v4").spec.chains()
    plan = TreePlan(3, 64, 64, (3, 2), "without_replacement", ragged=True)
    n = 64
    trees = draft_trees(target, draft, np.zeros(n, int), np.zeros(n, int), plan, rng, garbage_pool(4, rng))
    assert len(set(trees.num_nodes.tolist())) > 3  # rows have different shapes
    for b in range(n):
        k = trees.num_nodes[b]
        assert all(-1 <= trees.parent[b, j] < j for j in range(k))  # topological
        for j in range(k):  # siblings drawn without replacement are distinct
            sib = [i for i in range(k) if trees.parent[b, i] == trees.parent[b, j]]
            assert len({int(trees.tokens[b, i]) for i in sib}) == len(sib)
            assert trees.q[b, j, trees.tokens[b, j]] > 0
    assert (trees.parent[trees.num_nodes < plan.max_nodes, -1] >= -1).all()


# ---- references pass, mutants fail (positive and negative controls) ---------------------------


def test_tree_reference_passes_tree_scenarios():
    result = run("specaudit.verifiers.tree:verify", ["tree-iid-v4", "tree-topk-v4", "tree-ragged-wr-v4"], 30_000)
    assert result.exit_code() == ExitCode.OK, [(s.name, [(c.name, c.pvalue) for c in s.checks]) for s in result.scenarios]


@pytest.mark.parametrize(
    "mutant, scenario",
    [
        ("tree_residual_not_updated", "tree-topk-v4"),
        ("tree_duplicates_double_counted", "tree-iid-v4"),
        ("block_first_failure", "block-toy"),
        ("block_unscaled_residual", "block-extreme"),
    ],
)
def test_tree_and_block_mutants_fail_their_scenario(mutant, scenario):
    result = run(f"specaudit.verifiers.zoo.tree:{mutant}", [scenario], 30_000)
    joint = result.scenarios[0].check("joint-law")
    assert joint.status is Status.FAILED, joint.summary
    assert result.exit_code() == ExitCode.CHECKS_FAILED


def test_duplicates_mutant_is_invisible_without_duplicates():
    # top-k siblings are distinct: the bug cannot show, the run must pass (no false alarm)
    result = run("specaudit.verifiers.zoo.tree:tree_duplicates_double_counted", ["tree-topk-v4"], 20_000)
    assert result.exit_code() == ExitCode.OK


def test_toy_reproduces_chain_and_block_tokens_per_step():
    # 19/9 tokens/step for chain, 20/9 for block, each inside its measured 99.9% interval
    chain = run("specaudit.verifiers.reference:verify", ["toy-chain"], 60_000).scenarios[0].check("tokens-per-step")
    block = run("specaudit.verifiers.block:verify", ["block-toy"], 60_000)
    tps = block.scenarios[0].check("tokens-per-step")
    assert chain.data["exact"] == pytest.approx(19 / 9) and tps.data["exact"] == pytest.approx(20 / 9)
    assert tps.data["closed_form"] == pytest.approx(20 / 9) and tps.data["chain_closed_form"] == pytest.approx(19 / 9)
    assert chain.data["ci999"][0] <= 19 / 9 <= chain.data["ci999"][1]
    assert tps.data["ci999"][0] <= 20 / 9 <= tps.data["ci999"][1]
    assert block.exit_code() == ExitCode.OK


def test_chain_rule_on_block_scenario_is_lossless_but_slower():
    # vllm-ascend #7807 bug class: token-wise rule where block was meant; law right, efficiency not
    result = run("specaudit.verifiers.reference:verify", ["block-toy"], 30_000)
    s = result.scenarios[0]
    assert s.check("joint-law").status is Status.PASSED
    assert s.check("tokens-per-step").status is Status.FAILED


# ---- SGLang layout -------------------------------------------------------------------------------


def test_sglang_links():
    from specaudit.adapters.sglang_tree import links

    # root -> {0, 1}; 0 -> {2, 3}; 1 -> {4}; node 5 is padding
    parent = np.array([[-1, -1, 0, 0, 1, 0]])
    first, sibling = links(parent, np.array([5]))
    assert first[0].tolist() == [1, 3, 5, -1, -1, -1, -1]
    assert sibling[0].tolist() == [-1, 2, -1, 4, -1, -1, -1]


@pytest.mark.parametrize(
    "name, options, ok",
    [
        ("verify", {}, True),
        ("no_writeback", {}, False),
        ("coin_not_reset", {}, False),
        ("verify", {"threshold_acc": "0.5"}, False),  # lossy by design below 1
    ],
)
def test_sglang_layout_verifiers(verifiers_dir, name, options, ok):
    result = specaudit.run(
        f"{verifiers_dir / 'sglang_tree.py'}:{name}", [shipped("tree-topk-v4")], samples=20_000,
        adapter="sglang_tree", adapter_options=options, diagnose=False,
    )
    checks = result.scenarios[0].checks
    statistical = [c for c in checks if c.pvalue is not None]  # the tree probes are judged below
    assert all(c.status is Status.PASSED for c in statistical) is ok, [(c.name, c.pvalue) for c in statistical]
    # the layout copies SGLang's `coin <= cumulative p` and its final-token fall-off to V - 1: the boundary probe
    # finds both (sglang #35771, vLLM #20531 class) while every statistic passes
    adversarial = result.scenarios[0].check("tree-adversarial-uniforms")
    assert adversarial.status is Status.FAILED and "sglang #35771" in adversarial.summary, adversarial.summary
    assert "fell off to V - 1" in adversarial.summary


def test_sglang_adapter_refuses_random_children(verifiers_dir):
    result = specaudit.run(
        f"{verifiers_dir / 'sglang_tree.py'}:verify", [shipped("tree-iid-v4")], samples=200,
        adapter="sglang_tree", diagnose=False,
    )
    err = result.scenarios[0].error
    assert err is not None and "children: topk" in err.message


def test_a_more_efficient_lossless_verifier_passes_as_such_and_a_less_efficient_one_fails():
    # block verification on a chain scenario beats the chain's closed form (20/9 > 19/9): lossless and better
    better = run("specaudit.verifiers.block:verify", ["toy-chain"], 30_000)
    s = better.scenarios[0]
    assert s.check("joint-law").status is Status.PASSED
    for name in ("tokens-per-step", "accept-length"):
        c = s.check(name)
        assert c.status is Status.PASSED and c.data["more_efficient"] is True, c.summary
        assert "more efficient than the scheme's rule" in c.summary and c.adjusted_pvalue < 1e-6
    assert better.exit_code() == ExitCode.OK
    # the chain rule on a block scenario is below its bound: still failed (the other direction)
    worse = run("specaudit.verifiers.reference:verify", ["block-toy"], 30_000).scenarios[0]
    assert worse.check("tokens-per-step").status is Status.FAILED
    assert "more_efficient" not in worse.check("tokens-per-step").data


def test_an_efficiency_departure_in_the_verifier_favour_takes_the_joint_law_verdict_and_no_other_is_excused():
    from specaudit.engine.run import more_efficient_passes
    from specaudit.results import Category, CheckResult

    def tps(estimate, status=Status.FAILED):
        return CheckResult("tokens-per-step", Category.EFFICIENCY, status, "s", 9.0, 1e-9,
                           data={"estimate": estimate, "exact": 2.0})

    def accept(observed, status=Status.SUSPECT):
        return CheckResult("accept-length", Category.EFFICIENCY, status, "s", 9.0, 1e-3,
                           data={"observed_first": observed, "expected_first": [50.0, 50.0]})

    def joint(status):
        return CheckResult("joint-law", Category.DISTRIBUTION, status, "j", 1.0, 0.5)

    got = more_efficient_passes([joint(Status.PASSED), tps(2.1), tps(1.9), accept([40, 60]), accept([60, 40])])
    assert [c.status for c in got[1:]] == [Status.PASSED, Status.FAILED, Status.PASSED, Status.SUSPECT]
    for lost in (Status.FAILED, Status.ERROR, Status.SKIPPED):  # the joint law shows no loss: nothing excuses it
        assert more_efficient_passes([joint(lost), tps(2.1)])[1].status is Status.FAILED
    assert more_efficient_passes([tps(2.1)])[0].status is Status.FAILED
    # a suspect joint law: the favourable departure takes its verdict (the re-run decides both), once
    once = more_efficient_passes([joint(Status.SUSPECT), tps(2.1), tps(1.9)])
    assert [c.status for c in once[1:]] == [Status.SUSPECT, Status.FAILED]
    assert "the joint law is suspect" in once[1].summary
    twice = more_efficient_passes(once)
    assert twice[1].summary == once[1].summary and twice == once


def test_block_reference_keeps_a_sure_draft_at_the_largest_uniform():
    # P_1 = 1 (p one-hot at the draft), so h_1 = Z / (Z + 1 - P_1) = 1: kept for every u < 1. Computed as
    # (Z + 1) - P_1 the sum rounded Z's low bits away, h_1 came out 1 - 2**-53, and u = 1 - 2**-53 rejected it
    # (corner-one-hot-run failed the reference at 24 of 30 seeds of one-hot, hf-one-hot and corners)
    from specaudit.contract.uniforms import ScriptedUniforms
    from specaudit.verifiers import block

    draft, num_draft = np.array([[2, 3, 1]]), np.array([2])
    q = np.full((1, 3, 4), 0.25)
    q[0, 0] = [0.17359797, 0.05111755, 0.4481918, 0.32709269]
    q[0, 1] = [0.5, 0.36510664311806484, 0.13489335688193516, 0.0]  # Z = 1 - q(2): (Z + 1) - 1 != Z
    p = np.zeros((1, 4, 4))
    p[0, :, 2] = 1.0
    out, n_out = block.verify(draft, q, p, num_draft, ScriptedUniforms(1))  # u[0, 0] = 1 - 2**-53
    assert n_out.tolist() == [2] and out[0, :2].tolist() == [2, 2]
