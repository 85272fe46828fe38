"""Probes that reach every verifier: every simulated scenario is probed, every RNG routed.

Positive controls (the reference, a routed numpy-global verifier, a greedy verifier on a greedy
scenario) pass; each broken verifier of tests/verifiers/rng_sources.py fails the probe that names
its cause.
"""

import random

import numpy as np
import pytest

import specaudit
from specaudit.adapters.randomness import routed
from specaudit.checks import probes
from specaudit.contract.guard import guarded
from specaudit.contract.targets import load_object
from specaudit.contract.uniforms import HIGH, ScriptedUniforms
from specaudit.errors import ExitCode
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve


@pytest.fixture
def rs(verifiers_dir):
    return lambda name: f"{verifiers_dir / 'rng_sources.py'}:{name}"


def _spec(name):
    return resolve([name])[0].spec


def probe(target, scenario="markov-v4", seed=3):
    """Run the scenario probes alone (no simulation) on ``target``; return {check name: result}."""
    done = probes.run_scenario_probes(guarded(load_object(target)), _spec(scenario), seed)
    return {c.name: c for c in done.checks}


# ---- done-when: `specaudit run X -s markov-v4` exits 1 and names the cause --------------------------

# (verifier, failing check, text naming the cause)
CAUSES = [
    ("numpy_global", "determinism", "numpy's global RNG (np.random.*) moved"),
    ("writes_p", "inputs-unmodified", "writes into its inputs: p["),
    ("fixed_seed_per_call", "determinism", "restarts a fixed seed on every call"),
    ("module_generator", "determinism", "its own generator (a module-level"),
]


@pytest.mark.parametrize("name, check, text", CAUSES, ids=[c[0] for c in CAUSES])
def test_cli_markov_v4_fails_a_verifier_that_breaks_the_contract_and_names_the_cause(name, check, text, rs, cli):
    res = cli("run", rs(name), "-s", "markov-v4", "--samples", "20000", "--seed", "5")
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert check in res.output and text in " ".join(res.output.split()), res.output


def test_cli_markov_v4_passes_the_same_numpy_global_verifier_behind_the_routing_helper(rs, cli):
    res = cli("run", rs("numpy_global_routed"), "-s", "markov-v4", "--samples", "20000", "--seed", "5")
    assert res.exit_code == ExitCode.OK, res.output


def test_every_simulated_scenario_carries_the_probes_and_the_reference_passes_them():
    result = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4", "ragged-v4"], samples=5000, seed=2,
                           diagnose=False)
    assert result.exit_code() == ExitCode.OK
    for s in result.scenarios:
        names = {c.name for c in s.checks}
        assert {"determinism", "inputs-unmodified", "padding-independence", "adversarial-uniforms",
                "contract-clauses", "corner-empty-batch", "joint-law"} <= names
        assert all(c.pvalue is None for c in s.checks if c.name in probes.SCENARIO_PROBES)  # pass/fail, not in Holm
        assert s.check("adversarial-uniforms").status is Status.PASSED
    ragged = result.scenarios[1]
    assert ragged.check("corner-zero-drafts") is not None  # ragged-v4 draws 0 drafts; markov-v4 never does
    assert result.scenarios[0].check("corner-zero-drafts") is None


@pytest.mark.parametrize("scenario, corners", [
    ("markov-v4", {"corner-empty-batch"}),
    ("p-equals-q", {"corner-empty-batch", "corner-p-equals-q"}),  # its drafter is its target
    ("one-hot", {"corner-empty-batch", "corner-one-hot", "corner-one-hot-run"}),  # its target is one-hot
    ("zero-drafts", {"corner-empty-batch", "corner-zero-drafts"}),
    ("sampling-greedy", {"corner-empty-batch", "corner-zero-drafts", "corner-one-hot", "corner-one-hot-run"}),
])
def test_a_scenario_runs_the_corners_it_reaches(scenario, corners):
    checks = probe("specaudit.verifiers.reference:verify", scenario)
    assert {n for n in checks if n.startswith("corner-")} == corners


# ---- determinism that means it -------------------------------------------------------------------


def test_determinism_names_not_sampling_on_a_sampling_scenario_and_passes_it_on_a_greedy_one(rs):
    det = probe(rs("argmax_only"))["determinism"]
    assert det.status is Status.FAILED and det.data["cause"] == "argmax" and "not sampling at all" in det.summary
    greedy = probe("specaudit.verifiers.greedy:verify", "sampling-greedy")
    assert greedy["determinism"].status is Status.PASSED and "mode: greedy" in greedy["determinism"].summary
    assert greedy["adversarial-uniforms"].status is Status.SKIPPED  # never draws: not applicable, never passed
    assert all(c.status is not Status.FAILED for c in greedy.values()), {n: c.summary for n, c in greedy.items()}


def test_determinism_seed_clause_on_the_scenarios_own_rows():
    # markov-v4's target rows: two seeds agree on 64 zero-draft rows with probability prod sum p^2 (tiny)
    det = probe("specaudit.verifiers.reference:verify")["determinism"]
    assert det.status is Status.PASSED and "another seed -> different outputs" in det.summary
    assert det.data["drew"] is True


# ---- reach: the routing helper --------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["python", "torch"])
def test_wrapper_seeding_a_framework_is_not_applicable_and_the_routed_one_fails(framework, rs):
    if framework == "torch":
        pytest.importorskip("torch")
    seeded = probe(rs(f"seeds_{framework}"))["adversarial-uniforms"]
    assert seeded.status is Status.SKIPPED, seeded.summary  # never "passed" without reach
    assert "taken through rng.integers" in seeded.summary and "routed(rng)" in seeded.summary
    routed_ = probe(rs(f"routes_{framework}"))["adversarial-uniforms"]
    assert routed_.status is Status.FAILED, routed_.summary
    assert "has p = 0" in routed_.summary and "accepted draft has p = 0" in routed_.summary


def test_routed_correct_torch_verifier_passes_with_reach(rs):
    pytest.importorskip("torch")
    checks = probe(rs("routes_torch_correct"))
    adv = checks["adversarial-uniforms"]
    assert adv.status is Status.PASSED and min(adv.data["coins"]) >= 22  # 22 of 33 rows carry a draft
    assert checks["determinism"].status is Status.PASSED


def test_routed_restores_every_global_state_and_reproduces_from_the_seed():
    np_state, py_state = np.random.get_state(legacy=False), random.getstate()
    with routed(np.random.default_rng(8)) as seed:
        a = (np.random.random(3).tolist(), random.random())
    with routed(np.random.default_rng(8)) as seed2:
        b = (np.random.random(3).tolist(), random.random())
    with routed(np.random.default_rng(9)):
        c = (np.random.random(3).tolist(), random.random())
    assert a == b and a != c and seed == seed2
    after = np.random.get_state(legacy=False)
    assert np.array_equal(after["state"]["key"], np_state["state"]["key"]) and random.getstate() == py_state


def test_routed_scripts_numpy_global_and_python_random():
    su = ScriptedUniforms()
    with routed(su):
        assert np.random.random(2).tolist() == [0.0, HIGH]
        assert np.random.rand() == 0.0 and np.random.uniform(2.0, 4.0) == 2.0 + 2.0 * HIGH
        assert random.random() == 0.0
        assert random.choices([0, 1, 2], weights=[0, 1, 1]) == [2]  # u = HIGH: the last token with mass
        assert random.randint(0, 9) == 0
    assert su.coins == su.draws == 7 and su.counts["random"] == 6
    # restored: the module functions are the shared instances' own methods again
    assert np.random.random.__self__ is np.random.mtrand._rand and random.random.__self__ is random._inst
    assert "random" not in vars(random._inst)


def test_coins_leave_out_integers_drawn_as_seeds():
    su = ScriptedUniforms()
    su.integers(2**62)
    su.random(3)
    su.choice(3, p=[0.5, 0.5, 0.0])
    assert su.draws == 5 and su.coins == 4 and su.counts == {"integers": 1, "random": 3, "choice": 1}


# ---- independent probes, boundary classes ----------------------------------------------------------


def test_one_crashing_probe_is_error_and_the_others_still_run(rs):
    checks = probe(rs("crashes_on_empty"))
    assert checks["corner-empty-batch"].status is Status.ERROR
    assert "empty batch" in checks["corner-empty-batch"].summary
    assert all(c.status is Status.PASSED for n, c in checks.items() if n != "corner-empty-batch")
    assert "adversarial-uniforms" in checks


@pytest.mark.parametrize("name, cls, text", [
    ("leq_ratio", "accepts-p0", "`u <= p/q` accepts it at u = 0"),
    ("cdf_falloff", "cdf-falloff", "fell off to V - 1"),
])
def test_adversarial_failure_names_the_boundary_class_that_fits(name, cls, text, rs):
    adv = probe(rs(name))["adversarial-uniforms"]
    assert adv.status is Status.FAILED and adv.data["classes"] == [cls] and text in adv.summary


# ---- block verification, the logits contract and lazy chains are probed ------------------------------


def test_block_verification_scenario_runs_the_contract_probes_not_the_chain_rules_corners(rs):
    checks = probe("specaudit.verifiers.block:verify", "block-toy")
    assert {"determinism", "padding-independence", "adversarial-uniforms", "inputs-unmodified"} <= set(checks)
    assert all(c.status is Status.PASSED for c in checks.values()), {n: c.summary for n, c in checks.items()}
    assert not {n for n in checks if n in ("corner-p-equals-q", "corner-one-hot-run", "corner-greedy-drafter")}
    leq = probe(rs("leq_ratio"), "block-toy")["adversarial-uniforms"]  # the negative control on the same scenario
    assert leq.status is Status.FAILED and "accepted draft has p = 0" in leq.summary


def test_logits_contract_scenario_is_probed_on_log_p_and_sees_writes_into_the_logits():
    spec = _spec("sampling-top-k")
    ref = probes.run_scenario_probes(guarded(load_object("specaudit.verifiers.logits:verify_reference")), spec, 3,
                                     contract="logits")
    checks = {c.name: c for c in ref.checks}
    assert checks["adversarial-uniforms"].status is Status.PASSED and checks["determinism"].status is Status.PASSED

    def writes_logits(draft, draft_logits, target_logits, num_draft, params, rng):
        out = load_object("specaudit.verifiers.logits:verify_reference")(draft, draft_logits, target_logits, num_draft,
                                                                          params, rng)
        target_logits[:, 0] = 0.0  # in place, as a processing step that masks the caller's tensor would
        return out

    bad = {c.name: c for c in probes.run_scenario_probes(guarded(writes_logits), spec, 3, contract="logits").checks}
    assert bad["inputs-unmodified"].status is Status.FAILED and "writes into its inputs: p[" in bad["inputs-unmodified"].summary


def test_lazy_large_vocabulary_scenario_is_probed_with_fewer_rows():
    checks = probe("specaudit.verifiers.reference:verify", "zipf-v32k")
    assert all(c.status is Status.PASSED for c in checks.values()), {n: c.summary for n, c in checks.items()}
    assert "(7 rows, same seed)" in checks["padding-independence"].summary  # 4,000,000 floats / (17 x 32768)
    assert "every id in [0, 32768)" in checks["adversarial-uniforms"].summary


# ---- reach counts only the draws at the acceptance step ---------------------------------------------


def test_vllm_adapter_bonus_draws_do_not_count_as_reach():
    pytest.importorskip("torch")
    import torch

    from specaudit.adapters import get

    def never_draws(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_probs,
                    bonus_token_ids, sampling_metadata):
        """Accepts every draft with target_probs > 0, draws nothing: only the adapter's bonus uniforms are scripted."""
        out = torch.full((len(num_draft_tokens), max_spec_len + 1), -1, dtype=torch.int32)
        start = 0
        for b, n in enumerate(num_draft_tokens):
            ids = draft_token_ids[start:start + n]
            ok = int(torch.cumprod((target_probs[start:start + n].gather(1, ids[:, None].long())[:, 0] > 0).int(), 0).sum())
            out[b, :ok] = ids[:ok]
            out[b, ok] = bonus_token_ids[b, 0] if ok == n else target_probs[start + ok].argmax()  # no draw at all
            start += n
        return out

    adv = probes.run_scenario_probes(guarded(get("vllm").wrap(never_draws)), _spec("markov-v4"), 3).checks
    adv = {c.name: c for c in adv}["adversarial-uniforms"]
    assert adv.status is Status.SKIPPED, adv.summary  # the adapter's 66 bonus uniforms are not the verifier's
    assert "only 0 scripted uniforms reached it" in adv.summary and adv.data["draws"] == 66  # 33 bonus x 2 phases


def test_a_verifier_drawing_no_replacement_is_not_applicable():
    # one uniform per tested draft, then the replacement taken as the argmax of the residual: no replacement draw
    def no_replacement_draw(draft, q, p, num_draft, rng):
        out = np.full((draft.shape[0], draft.shape[1] + 1), -1, dtype=np.int64)
        n_out = np.zeros(draft.shape[0], dtype=np.int64)
        for b in range(draft.shape[0]):
            n = 0
            while n < num_draft[b] and rng.random() * q[b, n, draft[b, n]] < p[b, n, draft[b, n]]:
                out[b, n] = draft[b, n]
                n += 1
            law = np.maximum(p[b, n] - q[b, n], 0.0) if n < num_draft[b] else p[b, n]
            out[b, n], n_out[b] = int(np.argmax(law)), n + 1
        return out, n_out

    adv = probes.run_scenario_probes(guarded(no_replacement_draw), _spec("markov-v4"), 3).checks
    adv = {c.name: c for c in adv}["adversarial-uniforms"]
    assert adv.status is Status.SKIPPED, adv.summary
    assert "the replacement tokens were not drawn from the script" in adv.summary
