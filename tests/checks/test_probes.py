"""Exact checks (mode: exact, the shipped 'corners'), adversarial uniforms and greedy mode.

Every check has a positive control (the reference and the loop verifier pass it) and a broken
verifier it catches (tests/verifiers/exact_broken.py, broken.py, specaudit.verifiers.zoo.chain).
"""

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import specaudit
from specaudit.checks import CHECKS
from specaudit.cli import main
from specaudit.contract.uniforms import HIGH, HIGH32, ScriptedUniforms
from specaudit.errors import ExitCode, ScenarioError
from specaudit.results import Category, Status
from specaudit.scenarios.catalogue import default_suite, resolve
from specaudit.scenarios.loading import parse_scenario

CHECK_NAMES = [name for check in CHECKS.values() if check.kind == "probe" for name in check.results]


def corners(target, **kw):
    result = specaudit.run(target, ["corners"], diagnose=False, **kw)
    (scenario,) = result.scenarios
    return result, scenario


@pytest.fixture
def broken(verifiers_dir):
    return lambda name: f"{verifiers_dir / 'exact_broken.py'}:{name}"


def test_corners_is_in_the_default_suite():
    assert "corners" in [s.name for s in default_suite()]
    assert resolve(["corners"])[0].spec.mode == "exact"


@pytest.mark.parametrize("target", ["specaudit.verifiers.reference:verify", "loop"])
def test_correct_verifiers_pass_every_exact_check(target, verifiers_dir):
    if target == "loop":
        target = f"{verifiers_dir / 'loop.py'}:verify"
    result, s = corners(target)
    assert result.exit_code() == ExitCode.OK, [(c.name, c.summary) for c in s.checks if c.status is not Status.PASSED]
    assert sorted(c.name for c in s.checks) == sorted(CHECK_NAMES)
    assert all(c.status is Status.PASSED for c in s.checks)
    greedy = s.check("corner-greedy-drafter")
    assert greedy.pvalue is not None and greedy.adjusted_pvalue is not None  # through the run's Holm
    assert s.check("adversarial-uniforms").data["draws"] > 0


# (target, check that must fail, text its summary must hold)
BROKEN = [
    ("specaudit.verifiers.zoo.chain:leq_ratio", "adversarial-uniforms", "has p = 0"),  # accepts p = 0 at u = 0
    ("specaudit.verifiers.zoo.chain:recovered_id_eq_v", "adversarial-uniforms", "vocab-range"),  # id == V
    ("exact_broken:mutates_p", "inputs-unmodified", "writes into its inputs: p["),
    ("exact_broken:ignores_seed", "determinism", "same seed"),
    ("specaudit.verifiers.zoo.chain:bonus_from_last", "padding-independence", "reads padding"),
    ("exact_broken:swapped_residual", "corner-one-hot", "the target's only token"),  # wrong one-hot replacement
    ("exact_broken:float32_ratio", "corner-p-equals-q", "uniforms"),  # rejects p = q at u -> 1
    ("specaudit.verifiers.zoo.chain:no_bonus", "corner-p-equals-q", "n_out"),
    ("exact_broken:empty_batch_wrong_shape", "corner-empty-batch", "[shape]"),
    ("exact_broken:zero_drafts_from_next", "corner-zero-drafts", "has p = 0"),
    ("specaudit.verifiers.zoo.chain:resample_from_p", "corner-greedy-drafter", "probability 0"),
    ("specaudit.verifiers.zoo.chain:ignore_drafts", "corner-one-hot-run", "accepted 0 drafts"),
    ("broken:nan_ids", "contract-clauses", "dtype"),
    ("broken:wrong_shape", "contract-clauses", "shape"),
    ("broken:float_ids", "contract-clauses", "dtype"),
    ("broken:id_equals_vocab", "contract-clauses", "vocab-range"),
]


@pytest.mark.parametrize("target, check, text", BROKEN, ids=[f"{t.split(':')[1]}-{c}" for t, c, _ in BROKEN])
def test_each_broken_verifier_fails_its_exact_check(target, check, text, verifiers_dir):
    module, _, attr = target.partition(":")
    if module in ("exact_broken", "broken"):
        target = f"{verifiers_dir / (module + '.py')}:{attr}"
    result, s = corners(target)
    found = s.check(check)
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert found is not None and found.status is Status.FAILED, (check, [(c.name, c.status) for c in s.checks])
    assert text in found.summary


def test_boundary_mutants_pass_everything_but_the_boundary_probes():
    # lossless almost surely: the statistical greedy-drafter corner with real uniforms passes
    _, s = corners("specaudit.verifiers.zoo.chain:leq_ratio")
    assert s.check("corner-greedy-drafter").status is Status.PASSED
    assert s.check("determinism").status is Status.PASSED


def test_crash_in_a_probe_is_that_probes_error_and_the_others_still_run(broken):
    # k0_crash raises on K = 0 only: corner-k0 is ERROR with the user's frame, every later probe runs
    result, s = corners(broken("k0_crash"))
    assert s.status is Status.ERROR and result.exit_code() == ExitCode.CHECKS_FAILED
    k0 = s.check("corner-k0")
    assert k0.status is Status.ERROR and "the verifier raised IndexError" in k0.summary
    assert "exact_broken.py" in k0.data["traceback"] and "q[:, 0]" in k0.data["traceback"]
    assert sorted(c.name for c in s.checks) == sorted(CHECK_NAMES)
    assert s.check("adversarial-uniforms").status is Status.PASSED
    assert [c.name for c in s.checks if c.status is not Status.PASSED] == ["corner-k0"]


def test_verifier_that_never_draws_is_not_applicable_not_passed(broken):
    result, s = corners(broken("fixed_seed"))
    adv = s.check("adversarial-uniforms")
    assert adv.status is Status.SKIPPED and adv.summary.startswith("not applicable: the verifier never drew")
    assert "specaudit.adapters.randomness.routed(rng)" in adv.summary and "ScriptedUniforms" in adv.summary
    det = s.check("determinism")
    assert det.data["drew"] is False and det.status is Status.FAILED and det.data["cause"] == "fixed-seed"
    assert "restarts a fixed seed on every call" in det.summary


def test_allow_inefficient_keeps_efficiency_corners_from_gating():
    # sample-and-match is lossless but accepts fewer drafts than the chain rule at p = q
    result, s = corners("specaudit.verifiers.zoo.chain:sample_and_match", gate_efficiency=False)
    pq = s.check("corner-p-equals-q")
    assert pq.status is Status.FAILED and pq.category is Category.EFFICIENCY and not pq.gate
    assert result.exit_code() == ExitCode.OK
    assert all(c.status is Status.PASSED for c in s.checks if c.category is Category.CONTRACT)


def test_cli_run_on_a_verifier_writing_into_p_exits_1_and_says_so(broken):
    res = CliRunner().invoke(main, ["run", broken("mutates_p"), "-s", "corners"], catch_exceptions=False)
    assert res.exit_code == ExitCode.CHECKS_FAILED
    assert "inputs-unmodified" in res.output and "writes into its inputs" in res.output


# ---- adversarial uniforms ---------------------------------------------------------------------


def test_scripted_uniforms_sequence_and_bookkeeping():
    su = ScriptedUniforms()
    assert isinstance(su, np.random.Generator) and not su.drawn
    np.testing.assert_array_equal(su.random(5), [0.0, HIGH, 0.0, HIGH, 0.0])
    assert su.random() == HIGH and su.draws == 6
    np.testing.assert_array_equal(ScriptedUniforms(1).random((2, 2)), [[HIGH, 0.0], [HIGH, 0.0]])
    f32 = ScriptedUniforms(1).random(2, dtype=np.float32)
    assert f32.dtype == np.float32 and f32[0] == np.float32(HIGH32) and f32[0] < 1
    assert HIGH < 1.0 and HIGH == np.nextafter(1.0, 0.0)
    assert not su.unscripted
    su.normal()  # not scripted: real randomness, detected
    assert su.unscripted and su.methods == {"random"}


def test_scripted_uniforms_derived_draws_hit_the_extremes():
    su = ScriptedUniforms()
    assert su.integers(3, 10, size=2).tolist() == [3, 9]
    assert su.uniform(2.0, 4.0, size=2).tolist() == [2.0, 2.0 + 2.0 * HIGH]
    p = [0.0, 0.5, 0.5, 0.0]
    assert su.choice(4, p=p) == 1 and su.choice(4, p=p) == 2  # first / last index of positive mass
    assert su.choice(["a", "b", "c"], size=2).tolist() == ["a", "c"]
    assert su.exponential(2.0) == 0.0
    with pytest.raises(ValueError, match="do not sum to 1"):
        su.choice(3, p=[0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="allowed: 0"):
        ScriptedUniforms(2)


def test_scripted_choice_agrees_with_numpy_at_the_same_uniform():
    # numpy's Generator.choice with p: cdf /= cdf[-1]; searchsorted(cdf, u, 'right') (independent code path)
    rng = np.random.default_rng(4)
    for _ in range(20):
        p = rng.dirichlet(np.ones(6)) * (rng.random(6) < 0.7)
        if p.sum() == 0:
            continue
        p /= p.sum()
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        su = ScriptedUniforms()
        assert [su.choice(6, p=p) for _ in range(2)] == [int(np.searchsorted(cdf, u, "right")) for u in (0.0, HIGH)]


# ---- greedy mode ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["specaudit.verifiers.greedy:verify", "reference-greedy", "specaudit.greedy:verify",
                                    "greedy_loop"])
def test_greedy_verifiers_equal_greedy_decoding_with_ties(target, broken):
    if target == "greedy_loop":
        target = broken("greedy_loop")
    result = specaudit.run(target, ["greedy-ties", "greedy-markov"], samples=3000, diagnose=False)
    assert result.exit_code() == ExitCode.OK
    for s in result.scenarios:
        eq = s.check("greedy-equality")
        assert eq.status is Status.PASSED and eq.data["mismatched"] == 0 and eq.data["sequences"] == 3000
        assert s.check("joint-law") is None
    assert result.scenarios[0].check("greedy-equality").data["expected"] == [1, 2, 0, 1, 2, 0]


def test_greedy_tie_to_last_index_fails_and_is_named_a_tie(broken):
    result = specaudit.run(broken("greedy_tie_last"), ["greedy-ties"], samples=2000, diagnose=False)
    eq = result.scenarios[0].check("greedy-equality")
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert eq.status is Status.FAILED and eq.data["mismatched"] == 2000 and eq.data["tie"] is True
    assert "ties go to the first index" in eq.summary


def test_sampling_verifier_is_not_a_temperature_zero_verifier():
    # greedy mode hands p as it is; a sampling verifier draws from it and breaks equality
    result = specaudit.run("specaudit.verifiers.reference:verify", ["greedy-ties"], samples=2000, diagnose=False)
    assert result.scenarios[0].check("greedy-equality").status is Status.FAILED


def test_mode_is_validated_and_leaves_old_hashes_alone():
    text = "name: x\nvocab: 2\nk: 1\nlength: 1\nsamples: 5\ntarget: {kind: context_free, probs: [0.5, 0.5]}\ndraft: {kind: same_as_target}\n"
    with pytest.raises(ScenarioError, match=r"<string>:8: mode: .*'sample', 'greedy', 'exact' or 'loop' \(got 'greedyy'\)"):
        parse_scenario(text + "mode: greedyy\n")
    plain = parse_scenario(text).spec
    assert plain.mode == "sample"
    assert parse_scenario(text + "mode: sample\n").spec.content_hash() == plain.content_hash()
    assert parse_scenario(text + "mode: greedy\n").spec.content_hash() != plain.content_hash()


def test_small_batches_probe_reaches_every_scenario_and_catches_a_small_batch_path():
    # the simulator never calls with fewer than ~25 rows: a verifier broken below 16 rows passed every run
    import specaudit
    from specaudit.results import Status

    bad = str(Path(__file__).resolve().parent.parent / "verifiers" / "exact_broken.py") + ":small_batch_accepts_all"
    for scenario in ("markov-v4", "peaked-v8", "serving-mix"):
        ok = specaudit.run("reference", [scenario], samples=2000, seed=3, power=False, diagnose=False, supervised=False)
        assert ok.scenarios[0].check("small-batches").status is Status.PASSED, ok.scenarios[0].checks
        res = specaudit.run(bad, [scenario], samples=2000, seed=3, power=False, diagnose=False, supervised=False)
        check = res.scenarios[0].check("small-batches")
        assert check.status is Status.FAILED and "of probability 0 in p there" in check.summary, check
        assert res.scenarios[0].check("small-batches-run").status is Status.FAILED
        assert res.scenarios[0].check("joint-law").status is Status.PASSED  # the law never sees it
    lossless = str(Path(__file__).resolve().parent.parent / "verifiers" / "exact_broken.py") + ":small_batch_rejects_all"
    res = specaudit.run(lossless, ["markov-v4"], samples=2000, seed=3, power=False, diagnose=False, supervised=False)
    assert res.scenarios[0].check("small-batches").status is Status.PASSED  # no token of probability 0 ...
    run = res.scenarios[0].check("small-batches-run")
    assert run.status is Status.FAILED and "where p and q force" in run.summary  # ... but not the chain rule's run
