"""Tree probes (specaudit.checks.tree_probes): run with every tree scenario, each with its controls.

Positive controls: the reference tree verifier, the per-row loop of tests/verifiers/tree_broken.py
(an independent implementation) and the reference of the logits form. Negative controls: the
broken copies of the loop and the tree zoo's boundary and processing mutants.
"""

import numpy as np
import pytest
from click.testing import CliRunner

import specaudit
from specaudit.checks import CHECKS
from specaudit.checks.tree_probes import TREE_CHECKS, dyadic, run_tree_probes
from specaudit.cli import main
from specaudit.contract.guard import guarded
from specaudit.errors import ExitCode
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve
from specaudit.verifiers import tree as reference_tree
from specaudit.verifiers.zoo import tree as tree_zoo

TREE_SCENARIOS = ["tree-iid-v4", "tree-topk-v4", "tree-ragged-wr-v4"]
#: Every tree result name, probability form (the logits-only probe runs with --contract logits).
PROBS_NAMES = sorted(name for check in CHECKS.values() if check.kind == "tree-probe" for name in check.results
                     if name != "tree-logits-processing")


def _spec(name):
    return resolve([name])[0].spec


def _broken(verifiers_dir, name):
    return f"{verifiers_dir / 'tree_broken.py'}:{name}"


def _load(verifiers_dir, name):
    import importlib.util

    spec = importlib.util.spec_from_file_location("tree_broken", verifiers_dir / "tree_broken.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


@pytest.mark.parametrize("scenario", TREE_SCENARIOS)
@pytest.mark.parametrize("target", ["reference", "loop"])
def test_correct_tree_verifiers_pass_every_tree_probe(scenario, target, verifiers_dir):
    verify = reference_tree.verify if target == "reference" else _load(verifiers_dir, "loop")
    done = run_tree_probes(guarded(verify, 60.0), _spec(scenario), seed=11)
    assert done.error is None
    assert sorted(c.name for c in done.checks) == PROBS_NAMES
    failed = [(c.name, c.summary) for c in done.checks if c.status is not Status.PASSED]
    assert not failed, failed
    assert done.calls > 0 and done.info["rows"] > 0


@pytest.mark.parametrize("scenario", TREE_SCENARIOS)
def test_logits_form_reference_passes_and_runs_the_processing_probe(scenario):
    done = run_tree_probes(guarded(reference_tree.verify_logits, 60.0), _spec(scenario), seed=11, contract="logits")
    names = {c.name for c in done.checks}
    assert "tree-logits-processing" in names and "tree-p-equals-q" not in names  # p = q needs p bit for bit
    assert all(c.status is Status.PASSED for c in done.checks), [(c.name, c.summary) for c in done.checks]


def test_tree_probes_do_not_run_on_chain_scenarios():
    assert run_tree_probes(reference_tree.verify, _spec("markov-v4"), seed=1).checks == ()


# (target in tree_broken.py or the zoo, check that must fail, text its summary must hold)
BROKEN = [
    ("zoo:tree_leq_ratio", "tree-adversarial-uniforms", "`r <= p/q` accepts it at u = 0"),
    ("swapped_residual", "tree-one-hot", "the target's only token there is"),
    ("one_level", "tree-one-hot-path", "the first argmax child at each node"),
    ("one_level", "tree-p-equals-q", "stopped at a node with children"),
    ("final_from_p", "tree-single-child", "outside that residual's support"),
    ("ignores_seed", "tree-determinism", "restarts a fixed seed on every call"),
    ("numpy_global", "tree-determinism", "numpy's global RNG"),
    ("bonus_from_last", "tree-padding-independence", "the verifier reads padding"),
    ("mutates_p", "tree-inputs-unmodified", "writes into its inputs: p["),
    ("final_eq_vocab", "tree-contract-clauses", "tree-vocab-range"),
    ("leq_numpy_routed", "tree-adversarial-uniforms", "has p = 0"),  # routed(rng): the scripted uniforms reach it
]


@pytest.mark.parametrize("target, check, text", BROKEN, ids=[f"{t}-{c}" for t, c, _ in BROKEN])
def test_each_broken_tree_verifier_fails_its_probe(target, check, text, verifiers_dir):
    if target.startswith("zoo:"):
        verify = getattr(tree_zoo, target[4:])
    else:
        verify = _load(verifiers_dir, target)
    done = run_tree_probes(guarded(verify, 60.0), _spec("tree-iid-v4"), seed=5)
    found = {c.name: c for c in done.checks}[check]
    assert found.status is Status.FAILED and found.gate, found
    assert text in found.summary, found.summary


def test_a_wrapper_seeding_its_own_generator_is_not_applicable_never_passed(verifiers_dir):
    done = run_tree_probes(guarded(_load(verifiers_dir, "leq_seeds_own"), 60.0), _spec("tree-iid-v4"), seed=5)
    adversarial = {c.name: c for c in done.checks}["tree-adversarial-uniforms"]
    assert adversarial.status is Status.SKIPPED
    assert "taken through rng.integers" in adversarial.summary
    assert "specaudit.adapters.randomness.routed(rng)" in adversarial.summary


def test_a_crash_in_one_tree_probe_is_its_error_and_the_others_still_run():
    def crashes_on_empty_trees(tokens, parent, q, p, num_nodes, rng):
        if len(num_nodes) and not np.any(num_nodes):  # only the determinism probe hands trees of no node
            raise RuntimeError("no nodes")
        return reference_tree.verify(tokens, parent, q, p, num_nodes, rng)

    done = run_tree_probes(guarded(crashes_on_empty_trees, 60.0), _spec("tree-iid-v4"), seed=5)
    status = {c.name: c.status for c in done.checks}
    assert status["tree-determinism"] is Status.ERROR
    assert "no nodes" in {c.name: c for c in done.checks}["tree-determinism"].summary
    assert status["tree-adversarial-uniforms"] is Status.PASSED and status["tree-one-hot"] is Status.PASSED
    assert done.error is None  # other probes reached the verifier


def test_dyadic_laws_sum_to_exactly_one_and_keep_zeros():
    rng = np.random.default_rng(3)
    laws = rng.dirichlet(np.full(7, 0.3), size=200)
    laws[:, 2] = 0.0
    laws /= laws.sum(axis=1, keepdims=True)
    out = dyadic(laws)
    assert np.all(out.sum(axis=1) == 1.0)  # exact: sums of multiples of 2**-24
    assert np.all(out[:, 2] == 0.0) and np.all((out > 0) == (laws > 0))
    assert np.max(np.abs(out - laws)) < 1e-5


def test_every_tree_probe_is_registered_once_as_a_tree_probe():
    registered = [c.name for c in CHECKS.values() if c.kind == "tree-probe"]
    assert registered == [name for name, _, _ in TREE_CHECKS]


def _cli(*args):
    return CliRunner().invoke(main, ["run", *args, "--no-power", "--seed", "3"])


def test_cli_leq_ratio_tree_mutant_fails_the_shipped_tree_scenarios_and_the_reference_passes():
    scenarios = [arg for name in TREE_SCENARIOS for arg in ("-s", name)]
    bad = _cli("specaudit.verifiers.zoo.tree:tree_leq_ratio", *scenarios, "--samples", "2000")
    assert bad.exit_code == ExitCode.CHECKS_FAILED, bad.output
    assert bad.output.count("tree-adversarial-uniforms") >= 3, bad.output
    assert "`r <= p/q` accepts it at u = 0" in bad.output
    good = _cli("reference-tree", *scenarios, "--samples", "2000")
    assert good.exit_code == ExitCode.OK, good.output


def test_cli_logits_form_of_the_tree_contract():
    bad = _cli("specaudit.verifiers.zoo.tree:tree_bonus_unprocessed", "-s", "tree-iid-v4", "--samples", "2000",
               "--contract", "logits")
    assert bad.exit_code == ExitCode.CHECKS_FAILED, bad.output
    assert "tree-logits-processing" in bad.output and "outside process(target_logits, params)" in bad.output
    good = _cli("specaudit.verifiers.tree:verify_logits", "-s", "tree-iid-v4", "--samples", "2000", "--contract", "logits")
    assert good.exit_code == ExitCode.OK, good.output


def test_cli_tree_payload_mismatch_is_a_usage_error():
    wrong = _cli("reference-tree", "-s", "tree-iid-v4", "--samples", "100", "--contract", "logits")
    assert wrong.exit_code == ExitCode.USAGE_ERROR, wrong.output
    assert "the logits form of the tree contract passes 7" in wrong.output
    missing = _cli("specaudit.verifiers.tree:verify_logits", "-s", "tree-iid-v4", "--samples", "100")
    assert missing.exit_code == ExitCode.USAGE_ERROR, missing.output
    assert "pass --contract logits" in missing.output


def test_run_reports_tree_probes_with_the_scenario_checks():
    result = specaudit.run("reference-tree", ["tree-topk-v4"], samples=2000, seed=2, diagnose=False, power=False)
    (scenario,) = result.scenarios
    names = {c.name for c in scenario.checks}
    assert {"joint-law", "tree-adversarial-uniforms", "tree-determinism"} <= names
    assert result.exit_code() == ExitCode.OK


# ---- the inputs every probe hands are trees a drafter and a target can produce -----------------


@pytest.mark.parametrize("scenario", TREE_SCENARIOS)
@pytest.mark.parametrize("contract", ["probs", "logits"])
def test_every_tree_probe_hands_inputs_that_keep_the_contract_invariants(scenario, contract, monkeypatch):
    from specaudit.checks import tree_probes
    from specaudit.contract.tree import input_violations

    seen: list[tuple[str, object]] = []
    call = tree_probes.TreeProber.call

    def spy(self, inputs, rng, verify=None, given=None):
        seen.append((self.check, inputs.copy()))
        return call(self, inputs, rng, verify=verify, given=given)

    monkeypatch.setattr(tree_probes.TreeProber, "call", spy)
    spec = _spec(scenario)
    verify = reference_tree.verify_logits if contract == "logits" else reference_tree.verify
    for seed in (1, 11):
        done = run_tree_probes(guarded(verify, 60.0), spec, seed=seed, contract=contract)
        assert done.error is None
    building = {"tree-one-hot", "tree-single-child", "tree-determinism", "tree-padding-independence",
                "tree-adversarial-uniforms", "tree-logits-processing" if contract == "logits" else "tree-p-equals-q"}
    assert building <= {check for check, _ in seen}
    bad = [(check, v) for check, x in seen
           for v in input_violations(x.tokens, x.parent, x.q, x.p, x.num_nodes, spec.tree.children)]
    assert not bad, bad[:5]


def _two_siblings(token_b, p_b=None):
    tokens = np.array([[1, token_b]])
    parent = np.array([[-1, -1]])
    law = np.full(4, 0.25)
    q = np.stack([law, law])[None]
    p = np.stack([law, law, law if p_b is None else p_b])[None]
    return tokens, parent, q, p, np.array([2])


def test_the_invariant_checker_names_each_tree_no_drafter_or_target_produces():
    from specaudit.contract.tree import input_violations

    assert input_violations(*_two_siblings(2), "topk") == []
    assert input_violations(*_two_siblings(1), "iid") == []  # i.i.d. duplicates with one law: a real tree
    other = np.array([0.7, 0.1, 0.1, 0.1])
    assert "share the token path [1]" in input_violations(*_two_siblings(1, other), "iid")[0]
    assert "repeat a token" in input_violations(*_two_siblings(1), "topk")[0]
    assert "repeat a token" in input_violations(*_two_siblings(1), "without_replacement")[0]
    tokens, parent, q, p, n = _two_siblings(2)
    q[0, 1] = [0.5, 0.5, 0.0, 0.0]
    found = input_violations(tokens, parent, q, p, n, "iid")
    assert any("q = 0" in f for f in found) and any("different drafter laws" in f for f in found)
    p[0, 0] = [0.5, 0.5, 0.5, 0.0]
    assert any("does not sum to 1" in f for f in input_violations(tokens, parent, q, p, n, "iid"))
    parent[0, 1] = 1
    assert any("not in [-1, 1)" in f for f in input_violations(tokens, parent, q, p, n, "iid"))
