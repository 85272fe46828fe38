"""Diagnosis: a failure's deviation pattern names the zoo mutant that produced it."""

import numpy as np
import pytest
from report_runs import failing, passing

import specaudit
from specaudit.analysis import diagnose
from specaudit.scenarios.catalogue import resolve


def test_pattern_similarity_is_cosine_of_standardised_residuals():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(16, 20.0))  # every n p > 1: no floor in the scale
    m = rng.dirichlet(np.ones(16))
    n = 10_000
    exp = n * p
    obs = rng.multinomial(n, m).astype(float)
    sim = diagnose.pattern_similarity({"joint-law": (obs, exp)}, {"joint-law": m})
    r, e = (obs - exp) / np.sqrt(exp), (n * m - exp) / np.sqrt(exp)  # independent: numpy directly
    assert sim == pytest.approx(r @ e / np.linalg.norm(r) / np.linalg.norm(e))
    assert sim > 0.9  # data drawn from m match m's pattern
    null = rng.multinomial(n, p).astype(float)
    assert abs(diagnose.pattern_similarity({"joint-law": (null, exp)}, {"joint-law": m})) < 0.5  # noise does not
    assert diagnose.pattern_similarity({"joint-law": (obs, exp)}, {"joint-law": p}) is None  # no deviation at all


def test_failure_of_a_mutant_is_diagnosed_as_that_mutant():
    result = failing()  # resample_from_p, seeded
    for s in result.scenarios:
        found = s.info["diagnosis"]
        assert found["best"]["mutant"] == "resample_from_p", found["candidates"]
        assert found["best"]["similarity"] > 0.9
        assert found["candidates"][1]["similarity"] < found["best"]["similarity"] - 0.05


def test_passing_run_has_no_diagnosis():
    assert all("diagnosis" not in s.info for s in passing().scenarios)


@pytest.mark.parametrize("mutant", ["count_after_reject", "no_bonus"])
def test_other_mutants_named_correctly(mutant):
    # no_bonus keeps the joint law: it is recognised by its accept-length pattern alone
    result = specaudit.run(f"specaudit.verifiers.zoo.chain:{mutant}", ["seed-context-free"], samples=20_000, seed=4)
    assert result.scenarios[0].info["diagnosis"]["best"]["mutant"] == mutant


def test_diagnosis_can_be_turned_off_and_takes_a_provider():
    result = specaudit.run("specaudit.verifiers.zoo.chain:resample_from_p", ["markov-v4"], samples=20_000, seed=1, diagnose=False)
    assert "diagnosis" not in result.scenarios[0].info
    spec = resolve(["markov-v4"])[0].spec
    calls = []

    def provider(sc, name):  # a provider with no law for anything: no candidates, no match
        calls.append(name)
        return None

    found = diagnose.diagnose(spec, result.scenarios[0], provider)
    assert found is not None and found.best is None and found.candidates == () and calls


# ---- honest diagnosis -------------------------------------------------------------------


def _failed_joint(obs, exp, category="distribution"):
    from specaudit.results import Category, CheckResult, ScenarioResult, Status

    check = CheckResult("joint-law", Category(category), Status.FAILED, "x", 1.0, 0.0, 1,
                        data={"observed": obs.tolist(), "expected": exp.tolist()})
    return ScenarioResult("s", "<test>", 1, "0" * 16, "", 0, int(obs.sum()), checks=(check,))


def _patterns():
    # exact law p, a mutant law m; observed counts drawn from m (numpy multinomial, independent of specaudit)
    rng = np.random.default_rng(14)
    p = rng.dirichlet(np.full(16, 20.0))
    m = rng.dirichlet(np.ones(16))
    n = 20_000
    return p, m, n, n * p, rng.multinomial(n, m).astype(float)


def test_a_lossless_control_is_never_the_explanation_of_a_distribution_failure():
    p, m, n, exp, obs = _patterns()
    spec = resolve(["markov-v4"])[0].spec
    laws = {"sample_and_match": m, "lenient": 0.5 * (m + p)}  # the control's law fits the data best
    found = diagnose.diagnose(spec, _failed_joint(obs, exp), lambda sc, name: {"joint-law": laws[name]},
                              candidates=list(laws))
    assert [c.mutant for c in found.candidates] == ["lenient"]  # sample_and_match is not even offered
    assert found.best is not None and found.best.mutant == "lenient"
    # negative control: on an efficiency failure the lossless control is a fair candidate and wins
    eff = diagnose.diagnose(spec, _failed_joint(obs, exp, "efficiency"), lambda sc, name: {"joint-law": laws[name]},
                            candidates=list(laws))
    assert eff.best is not None and eff.best.mutant == "sample_and_match"


def test_below_the_stated_similarity_no_mutant_is_named():
    p, m, n, exp, obs = _patterns()
    spec = resolve(["markov-v4"])[0].spec
    rng = np.random.default_rng(15)
    other = rng.dirichlet(np.ones(16))
    weak = 0.55 * m + 0.45 * other  # a partial fit: similarity between 0.6 and the 0.8 bar
    sim = diagnose.pattern_similarity({"joint-law": (obs, exp)}, {"joint-law": weak})
    assert 0.6 <= sim < diagnose.MIN_SIMILARITY == 0.8, sim
    found = diagnose.diagnose(spec, _failed_joint(obs, exp), lambda sc, name: {"joint-law": weak}, candidates=["lenient"])
    assert found.best is None and found.candidates[0].similarity == pytest.approx(sim, abs=1e-4)
    strong = diagnose.diagnose(spec, _failed_joint(obs, exp), lambda sc, name: {"joint-law": m}, candidates=["lenient"])
    assert strong.best is not None  # positive control: the true law clears the bar


def test_probe_failures_alone_are_not_diagnosed_as_mutants(verifiers_dir):
    # writing into p breaks only inputs-unmodified: an exact probe names its own cause, no mutant is offered
    result = specaudit.run(f"{verifiers_dir / 'rng_sources.py'}:writes_p", ["markov-v4"], samples=5000, seed=3)
    s = result.scenarios[0]
    assert s.check("inputs-unmodified").status.value == "failed" and "diagnosis" not in s.info
