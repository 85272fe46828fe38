"""The logits contract: schema, bridge, exact mismatch laws, positive and negative controls."""

import numpy as np
import pytest
from click.testing import CliRunner

import specaudit
from specaudit.chains import logits as logits_chains
from specaudit.chains.processing import SamplingParams, process
from specaudit.chains.tabular import first_order
from specaudit.cli import main
from specaudit.contract import logits
from specaudit.errors import ExitCode, ScenarioError
from specaudit.laws import chain as exact
from specaudit.laws import processing as mismatch
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve
from specaudit.scenarios.loading import parse_scenario
from specaudit.simulate.chain import JointCounts, Plan, simulate
from specaudit.stats import gof as stats
from specaudit.verifiers import reference
from specaudit.verifiers.logits import verify_reference
from specaudit.verifiers.zoo.logits import MUTANTS

SAMPLING = ["convention-min-p", "convention-top-k-top-p", "sampling-greedy", "sampling-min-p", "sampling-mixed", "sampling-near-tie", "sampling-temperature",
            "sampling-top-k", "sampling-top-p"]

HEAD = "schema: 1\nname: t\nvocab: 3\nk: 2\nlength: 2\nsamples: 100\n"


def test_logits_kinds_build_processed_chains():
    doc = HEAD + (
        "target:\n  kind: logits\n  matrix: [[0.0, 1.0, -.inf]]\n  sampling: {temperature: 0.5, top_k: 1}\n"
        "draft:\n  kind: same_logits_as_target\n  sampling: {temperature: 2}\n"
    )
    target, draft = parse_scenario(doc).spec.chains()
    assert isinstance(target, logits_chains.LogitsChain) and target.n_states == 1
    assert target.dist.tolist() == [[0.0, 1.0, 0.0]]
    np.testing.assert_allclose(draft.dist[0], [1 / (1 + np.exp(0.5)), np.exp(0.5) / (1 + np.exp(0.5)), 0.0])
    assert draft.payload(np.array([0, 0])).tolist() == [[0.0, 1.0, -np.inf]] * 2  # raw logits
    assert draft.params == SamplingParams(temperature=2.0)


def test_random_logits_differ_by_role_and_seed():
    doc = HEAD + "target: {kind: logits, seed: 3}\ndraft: {kind: logits, seed: 3}\n"
    target, draft = parse_scenario(doc).spec.chains()
    assert target.n_states == 3 and not np.allclose(target.logits, draft.logits)


@pytest.mark.parametrize(
    "body, match",
    [
        ("target: {kind: logits, sampling: {temprature: 0.5}}\ndraft: {kind: same_as_target}\n",
         r"<s>:7: target.sampling.temprature: unknown key 'temprature'.*did you mean 'temperature'"),
        ("target: {kind: logits, sampling: {top_p: 0}}\ndraft: {kind: same_as_target}\n",
         r"<s>:7: target.sampling.top_p: .*greater than 0"),
        ("target: {kind: dirichlet}\ndraft: {kind: same_logits_as_target}\n",
         r"draft.kind: .*same_logits_as_target needs target.kind logits, got 'dirichlet'"),
        ("target: {kind: logits, matrix: [[0, 1]]}\ndraft: {kind: same_as_target}\n",
         r"target.matrix must be 1 x 3 \(context-free\) or 3 x 3"),
        ("target: {kind: logits, matrix: [[.nan, 1, 2]]}\ndraft: {kind: same_as_target}\n",
         r"row 0 must hold logits"),
    ],
)
def test_schema_errors_name_the_place(body, match):
    with pytest.raises(ScenarioError, match=match):
        parse_scenario(HEAD + body, "<s>")


def test_views_and_bridge():
    rng = np.random.default_rng(1)
    plain = first_order(rng.dirichlet(np.ones(3), size=3), 0)
    as_logits = logits.view(plain, "logits")
    np.testing.assert_allclose(np.exp(as_logits.payload(np.arange(3))), plain.dist)
    assert logits_chains.params_of(as_logits).identity
    chain = logits_chains.logits_chain(rng.normal(size=(3, 3)), plain.nxt, 0, SamplingParams(top_k=2))
    assert logits.view(chain, "probs").payload(np.array([1])).tolist() == [chain.dist[1].tolist()]
    seen = {}

    def spy(draft, dl, tl, nd, params, rng):
        seen["params"] = params
        return verify_reference(draft, dl, tl, nd, params, rng)

    verify, t, d = logits.prepare(spy, "logits", chain, plain)
    verify(np.zeros((1, 1), np.int64), d.payload(np.array([[0]])), t.payload(np.array([[0, 0]])), np.array([1]), rng)
    assert seen["params"] == logits.LogitsParams(SamplingParams(top_k=2), SamplingParams())
    with pytest.raises(specaudit.UsageError, match="contract = 'logit'; allowed: probs, logits.*did you mean 'logits'"):
        logits.prepare(spy, "logit", chain, plain)


def test_as_canonical_runs_a_logits_verifier_on_probabilities():
    rng = np.random.default_rng(2)
    q = rng.dirichlet(np.ones(5), size=(64, 3))
    p = rng.dirichlet(np.ones(5), size=(64, 4))
    p[:, :, 0] = 0.0  # probability 0 -> logit -inf
    p /= p.sum(axis=2, keepdims=True)
    draft = rng.integers(5, size=(64, 3))
    nd = rng.integers(0, 4, size=64)
    got = logits.as_canonical(verify_reference)(draft, q, p, nd, np.random.default_rng(9))
    want = reference.verify(draft, q, p, nd, np.random.default_rng(9))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_output_law_of_lossless_verifier_is_the_target_joint_law():
    # independent computation: exact.joint_probabilities multiplies the target's own rows
    sc = resolve(["sampling-mixed"])[0].spec
    target, draft = sc.chains()
    used = mismatch.HYPOTHESES["as-specified"].build(target, draft)
    law = mismatch.output_law(target, draft, used, sc.draft_law, sc.length)
    np.testing.assert_allclose(law, exact.joint_probabilities(target, sc.length), atol=1e-15)


def test_output_law_of_a_mismatch_matches_the_simulated_mutant():
    # the exact law under "q unprocessed" against the mutant driven through the simulator
    rng = np.random.default_rng(3)
    sc = resolve(["sampling-min-p"])[0].spec  # ragged drafts
    target, draft = sc.chains()
    verify, t, d = logits.prepare(MUTANTS["unprocessed_q"].func, "logits", target, draft)
    joint = JointCounts(sc.vocab, sc.length)
    simulate(verify, t, d, Plan(sc.length, 40_000, 4096, sc.draft_law), rng, np.random.default_rng(4), [joint])
    used = mismatch.HYPOTHESES["q-unprocessed"].build(target, draft)
    law = mismatch.output_law(target, draft, used, sc.draft_law, sc.length)
    assert stats.goodness_of_fit(joint.counts, law).pvalue > 1e-3
    assert stats.goodness_of_fit(joint.counts, exact.joint_probabilities(target, sc.length)).pvalue < 1e-9


def test_reference_logits_verifier_passes_every_sampling_scenario():
    result = specaudit.run("reference-logits", ["tag:sampling"], contract="logits", samples=30_000, seed=1)
    assert [s.name for s in result.scenarios] == SAMPLING
    assert result.exit_code() == ExitCode.OK, [(s.name, [(c.name, c.pvalue) for c in s.checks]) for s in result.scenarios]
    for s in result.scenarios:
        check = s.check("processing") or s.check("greedy-equality")
        assert check.status is Status.PASSED


def test_probs_reference_passes_sampling_scenarios_on_processed_laws():
    result = specaudit.run("specaudit.verifiers.reference:verify", ["tag:sampling"], samples=30_000, seed=2)
    assert result.exit_code() == ExitCode.OK


def test_logits_verifier_passes_probability_scenarios():
    # probability chains reach a logits verifier as log p with identity processing
    result = specaudit.run("reference-logits", ["markov-v4", "ragged-v4", "one-hot"], contract="logits", samples=20_000)
    assert result.exit_code() == ExitCode.OK


@pytest.mark.parametrize(
    "mutant, scenario",
    [
        ("unprocessed_q", "sampling-top-k"),
        ("bonus_only_processing", "sampling-top-p"),
        ("temperature_target_only", "sampling-mixed"),
        ("float32_draft", "sampling-near-tie"),
    ],
)
def test_mismatch_mutant_fails_and_the_diverging_quantity_is_named(mutant, scenario):
    result = specaudit.run(f"specaudit.verifiers.zoo.logits:{mutant}", [scenario], contract="logits", samples=60_000, seed=3)
    s = result.scenarios[0]
    assert result.exit_code() == ExitCode.CHECKS_FAILED and s.check("joint-law").status is Status.FAILED
    diag = s.check("processing")
    assert diag.status is Status.FAILED and not diag.gate
    assert diag.data["hypothesis"] == MUTANTS[mutant].diverges, diag.summary
    assert diag.summary.startswith(mismatch.HYPOTHESES[MUTANTS[mutant].diverges].says)


def test_every_mutant_fails_some_shipped_scenario_and_passes_where_its_quantity_agrees():
    # temperature_target_only is lossless where the drafter's temperature is 1 (sampling-top-k)
    fails = {
        name: specaudit.run(f"specaudit.verifiers.zoo.logits:{name}", ["sampling-top-k", "sampling-near-tie"],
                            contract="logits", samples=20_000, seed=4)
        for name in MUTANTS
        if MUTANTS[name].diverges is not None  # the processing mismatches (serving mutants: tests/contract/test_serving.py)
    }
    statuses = {name: [s.status for s in r.scenarios] for name, r in fails.items()}
    assert statuses["temperature_target_only"] == [Status.PASSED, Status.PASSED]
    assert statuses["float32_draft"] == [Status.PASSED, Status.FAILED]
    assert statuses["unprocessed_q"] == [Status.FAILED, Status.FAILED]
    assert statuses["bonus_only_processing"] == [Status.FAILED, Status.FAILED]


def _greedy_tie_to_last(draft, draft_logits, target_logits, num_draft, params, rng):
    """A logits verifier whose temperature-0 argmax breaks ties to the LAST index (a bug)."""
    v = target_logits.shape[-1]
    last = v - 1 - np.argmax(target_logits[..., ::-1], axis=-1)
    p = np.zeros_like(target_logits)
    np.put_along_axis(p, last[..., None], 1.0, axis=-1)
    return reference.verify(draft, process(draft_logits, params.draft), p, num_draft, rng)


def test_greedy_tie_to_last_index_fails_temperature_zero():
    spec = resolve(["sampling-greedy"])[0]
    result = specaudit.run(_greedy_tie_to_last, [spec], contract="logits", samples=2000)
    check = result.scenarios[0].check("greedy-equality")
    # row 1 of the raw logits ties tokens 2 and 3: greedy takes 2 at position 1, the bug takes 3
    assert check.status is Status.FAILED and check.data["first_diff_position"] == [0, 2000, 0, 0]
    assert "position 1 emitted 3" in check.summary


def test_cli_contract_option():
    runner = CliRunner()
    ok = runner.invoke(main, ["run", "reference-logits", "--contract", "logits", "-s", "sampling-top-k", "--samples", "20000"])
    assert ok.exit_code == ExitCode.OK, ok.output
    assert "processing" in ok.output
    missing = runner.invoke(main, ["run", "reference-logits", "-s", "sampling-top-k"])
    assert missing.exit_code == ExitCode.USAGE_ERROR and "pass --contract logits" in missing.output
    wrong = runner.invoke(main, ["run", "reference", "--contract", "logits", "-s", "sampling-top-k"])
    assert wrong.exit_code == ExitCode.USAGE_ERROR and "leave out --contract logits" in wrong.output
    bad = runner.invoke(main, ["run", "specaudit.verifiers.zoo.logits:unprocessed_q", "--contract", "logits", "-s",
                               "sampling-top-k", "--samples", "20000"])
    assert bad.exit_code == ExitCode.CHECKS_FAILED
    assert "q diverges: the verifier used softmax(draft logits), unprocessed" in bad.output
