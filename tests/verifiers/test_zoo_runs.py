"""Every zoo mutant through specaudit.run: its own negative-control test, next to the reference.

Each distribution mutant is run on a scenario where ``specaudit.analysis.power`` predicts the joint-law
check catches it at the sample size used (the prediction is asserted too); lossless controls must
pass the distribution check and fail tokens/step; boundary mutants are lossless with ordinary
uniforms (the adversarial-uniform checks catch them), which is all that is asserted here. The
whole default suite per mutant is under ``-m slow``.
"""

from __future__ import annotations

import pytest

import specaudit
from specaudit.analysis import power
from specaudit.errors import ExitCode
from specaudit.results import Category, Status
from specaudit.scenarios.catalogue import resolve
from specaudit.verifiers.zoo.chain import MUTANTS

N = 5000
#: Where each distribution mutant's bug shows (bonus_from_last needs ragged rows).
CATCHES = {
    "resample_from_p": "markov-v4",
    "unclamped_residual": "seed-context-free",
    "shared_uniform": "seed-context-free",
    "reused_uniforms": "seed-context-free",
    "count_after_reject": "markov-v4",
    "bonus_from_last": "ragged-v4",
    "accept_all": "seed-context-free",
    "lenient": "seed-context-free",
}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path_factory.getbasetemp() / "law-cache"))


def run(target, scenarios, samples=N, **kw):
    return specaudit.run(target, scenarios, samples=samples, seed=1, diagnose=False, power=False, **kw)


def test_zoo_covers_every_kind():
    kinds = {m.kind for m in MUTANTS.values()}
    assert kinds == {"distribution", "boundary", "lossless-control"}
    assert set(CATCHES) == {n for n, m in MUTANTS.items() if m.kind == "distribution"}


@pytest.mark.parametrize("name", sorted(set(CATCHES.values())))
def test_reference_passes_where_mutants_are_caught(name):
    assert run("specaudit.verifiers.reference:verify", [name]).exit_code() == ExitCode.OK


@pytest.mark.parametrize("mutant", list(CATCHES))
def test_distribution_mutant_fails_joint_law(mutant):
    scenario = CATCHES[mutant]
    result = run(f"specaudit.verifiers.zoo.chain:{mutant}", [scenario])
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    joint = result.scenarios[0].check("joint-law")
    assert joint.category is Category.DISTRIBUTION and joint.status is Status.FAILED
    predicted = power.scenario_power(resolve([scenario])[0].spec, N, 1e-3 / 3, mutants=[mutant], law_samples=50_000)
    if mutant != "reused_uniforms":  # dependent rows: no per-sequence law models the bug
        assert predicted.mutant(mutant).power > 0.999


@pytest.mark.parametrize("mutant", [n for n, m in MUTANTS.items() if m.kind == "lossless-control"])
def test_lossless_control_passes_law_and_fails_tokens_per_step(mutant):
    result = run(f"specaudit.verifiers.zoo.chain:{mutant}", ["seed-context-free", "markov-v4"], samples=20_000)
    for s in result.scenarios:  # a SUSPECT first look is re-run (4x samples, fresh seed); the re-run decides
        law = (s.rerun or s).check("joint-law")
        assert law.status is Status.PASSED, (s.name, law.pvalue)
    assert any(s.check("tokens-per-step").status is Status.FAILED for s in result.scenarios)
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    allowed = run(f"specaudit.verifiers.zoo.chain:{mutant}", ["seed-context-free"], samples=20_000, gate_efficiency=False)
    assert allowed.exit_code() == ExitCode.OK  # --allow-inefficient: lossless is enough


@pytest.mark.parametrize("mutant", [n for n, m in MUTANTS.items() if m.kind == "boundary"])
def test_boundary_mutant_is_lossless_with_ordinary_uniforms(mutant):
    # peaked-v8 has drafts of target probability 0: leq_ratio would accept one only at u == 0
    result = run(f"specaudit.verifiers.zoo.chain:{mutant}", ["peaked-v8", "seed-context-free"], samples=20_000)
    for s in result.scenarios:
        assert s.error is None
        assert s.check("joint-law").status is Status.PASSED


@pytest.mark.slow
@pytest.mark.parametrize("mutant", list(CATCHES))
def test_distribution_mutant_fails_default_suite(mutant):
    assert specaudit.run(f"specaudit.verifiers.zoo.chain:{mutant}").exit_code() == ExitCode.CHECKS_FAILED
