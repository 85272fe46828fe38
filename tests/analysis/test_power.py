"""Power figures: checked against scipy's ncx2, against replicated checks, and against simulation.

Reference numbers come from scipy.stats (ncx2, chi2) computed here independently of
specaudit.stats.power, from stats.goodness_of_fit run on multinomial counts (the check itself), and
from exact.joint_probabilities (the target law a lossless kernel must reproduce).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats as sps

import specaudit
from specaudit.analysis import mutant_laws, power
from specaudit.analysis import plan as planning
from specaudit.engine.scenario import measure
from specaudit.errors import UsageError
from specaudit.laws import chain as exact
from specaudit.laws import mutants as kernel_laws
from specaudit.results import cache
from specaudit.scenarios.catalogue import resolve
from specaudit.stats import gof as stats
from specaudit.stats import power as spower


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path / "cache"))


def spec_of(name: str):
    return resolve([name])[0].spec


def target_law(spec):
    return exact.joint_probabilities(spec.chains()[0], spec.length)


def test_power_against_matches_scipy_ncx2():
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(10))
    r = 0.985 * p + 0.015 * rng.dirichlet(np.ones(10))
    n, alpha = 20_000, 1e-3
    assert (p * n >= 5).all()  # no merging: the groups are the cells
    lam = n * np.sum((r - p) ** 2 / p)
    # read at the check's own critical value (exact-null tail): at least chi-square's
    crit = spower.critical_value(p * n, alpha)
    assert crit >= sps.chi2.isf(alpha, 9)
    expected = sps.ncx2.sf(crit, 9, lam)
    got = spower.power_against(r, p, n, alpha)
    assert got.df == 9
    assert got.noncentrality == pytest.approx(lam, rel=1e-12)
    assert got.power == pytest.approx(expected, rel=1e-12)
    assert 0.05 < got.power < 0.999  # a non-trivial point of the curve


def test_null_power_is_alpha_and_impossible_mass_adds_detection():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    null = spower.power_against(p, p, 1000, 0.01).power
    assert 0.009 <= null <= 0.01  # alpha, read conservatively at the check's critical value
    # all deviation on a cell of probability 0: detected unless no draw lands there
    r = np.array([0.5 * 0.999, 0.3 * 0.999, 0.2 * 0.999, 0.001])
    got = spower.power_against(r, p, 1000, 0.01)
    assert got.impossible_mass == pytest.approx(0.001)
    assert got.power == pytest.approx(1 - 0.999**1000 * (1 - null), rel=1e-9)


def test_noncentrality_for_power_inverts_scipy():
    lam = spower.noncentrality_for_power(62, 1e-3, 0.99)
    assert sps.ncx2.sf(sps.chi2.isf(1e-3, 62), 62, lam) == pytest.approx(0.99, abs=1e-9)


def test_detectable_tv_is_reached_by_the_least_favourable_alternative():
    rng = np.random.default_rng(2)
    p = np.full(16, 1 / 16)
    n, alpha = 50_000, 1e-3
    tv = spower.detectable_tv(p, n, alpha, 0.99, verified=False)  # the noncentral chi-square figure
    lf = p * np.where(np.arange(16) < 8, 1 + 2 * tv, 1 - 2 * tv)  # w = 2 TV exactly
    assert 0.5 * np.abs(lf - p).sum() == pytest.approx(tv)
    assert spower.power_against(lf, p, n, alpha).power == pytest.approx(0.99, abs=1e-6)
    for _ in range(20):  # any direction at the same TV is detected at least as often
        d = rng.normal(size=16)
        d -= d.mean()
        r = p + d / np.abs(d).sum() * 2 * tv
        if (r >= 0).all():
            assert spower.power_against(r, p, n, alpha).power >= 0.99 - 1e-9
    # and the noncentral chi-square is right in this local regime: the replicated check agrees
    assert spower.simulated_power(lf, p, n, alpha, reps=4000, seed=3) == pytest.approx(0.99, abs=0.01)


def test_detectable_tv_of_a_point_mass_is_impossible_mass():
    p = np.array([1.0, 0.0, 0.0])
    assert spower.detectable_tv(p, 1000, 1e-3, 0.99) == pytest.approx(1 - 0.01 ** (1 / 1000))


def test_simulated_power_replicates_the_check():
    # the check itself (stats.goodness_of_fit with its merging) on multinomial counts
    rng = np.random.default_rng(4)
    spec = spec_of("seed-context-free")
    probs = target_law(spec)
    law = mutant_laws.mutant_joint_law(spec, "resample_from_p")
    n, alpha, reps = 300, 1e-3, 300
    hits = sum(stats.goodness_of_fit(rng.multinomial(n, law), probs).pvalue <= alpha for _ in range(reps))
    predicted = spower.simulated_power(law, probs, n, alpha)
    assert 0.3 < predicted < 0.99
    assert abs(hits / reps - predicted) < 4 * np.sqrt(predicted * (1 - predicted) / reps)


def test_samples_for_tv_is_the_smallest():
    p = target_law(spec_of("markov-v4"))
    n = spower.samples_for_tv(p, 0.02, 1e-3, 0.99)
    assert spower.detectable_tv(p, n, 1e-3, 0.99) <= 0.02  # verified by simulation at n
    unverified = spower.samples_for_tv(p, 0.02, 1e-3, 0.99)
    assert unverified is not None and n <= unverified * 1.1


def test_samples_for_law_is_the_smallest_and_none_for_the_target():
    spec = spec_of("seed-context-free")
    probs = target_law(spec)
    law = mutant_laws.mutant_joint_law(spec, "lenient")
    n = spower.samples_for_law(law, probs, 1e-3, 0.99)
    assert spower.power_against(law, probs, n, 1e-3).power >= 0.99 > spower.power_against(law, probs, n - 1, 1e-3).power
    assert spower.samples_for_law(probs, probs, 1e-3, 0.99) is None


@pytest.mark.parametrize("name", ["markov-v4", "ragged-v4", "peaked-v8", "greedy-drafter"])
def test_reference_kernel_reproduces_the_target_law(name):
    spec = spec_of(name)
    target, draft = spec.chains()
    law = kernel_laws.chain_law(target, draft, spec.draft_law, spec.length, kernel_laws.KERNELS["reference"])
    np.testing.assert_allclose(law, target_law(spec), atol=1e-12)


@pytest.mark.parametrize("mutant", ["resample_from_p", "lenient", "accept_all", "unclamped_residual"])
def test_kernel_law_matches_the_simulated_mutant(mutant):
    # positive control: the exact law fits the mutant's own counts; negative: not the target's
    spec = spec_of("ragged-v4")
    law = mutant_laws.mutant_law(spec, mutant)
    assert law.method == "exact"
    counts = measure(mutant_laws.mutant_entry(mutant).func, dataclasses.replace(spec, samples=40_000), 9).joint.counts
    assert stats.goodness_of_fit(counts, law.probs).pvalue > 1e-4
    assert stats.goodness_of_fit(counts, target_law(spec)).pvalue < 1e-12


@pytest.mark.parametrize("mutant", ["shared_uniform", "reused_uniforms"])
def test_simulated_law_counts_are_those_a_run_measures(mutant):
    # one simulation path: mutant_laws runs the scenario's blocks through specaudit.simulate directly;
    # the engine's measure (its Bench over the same two blocks, 15,000 + 5,000) must count the same sequences
    spec = spec_of("markov-v4")
    counts = mutant_laws._simulated_counts(spec, mutant, 20_000, 3)
    sized = dataclasses.replace(spec, samples=20_000)
    seed = mutant_laws.simulation_seed(spec, mutant, 3)
    np.testing.assert_array_equal(counts, measure(mutant_laws.mutant_entry(mutant).func, sized, seed).joint.counts)
    assert counts.sum() == 20_000


def test_simulated_law_is_cached_on_disk_and_rebuilt_when_corrupt(tmp_path, monkeypatch):
    spec = spec_of("seed-context-free")
    first = mutant_laws.mutant_law(spec, "shared_uniform", samples=5000, seed=1)
    assert first.method == "simulated" and first.samples == 5000
    files = list((tmp_path / "cache").rglob("*.npy"))
    assert len(files) == 1
    mutant_laws._LAWS.clear()

    def boom(*args, **kwargs):
        raise AssertionError("simulated again instead of reading the cache")

    monkeypatch.setattr(mutant_laws, "_simulated_counts", boom)
    again = mutant_laws.mutant_law(spec, "shared_uniform", samples=5000, seed=1)
    np.testing.assert_array_equal(again.probs, first.probs)
    mutant_laws._LAWS.clear()
    files[0].write_bytes(b"not a numpy file")
    with pytest.raises(AssertionError, match="simulated again"):
        mutant_laws.mutant_law(spec, "shared_uniform", samples=5000, seed=1)


def test_cache_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", "off")
    assert cache.cache_dir() is None


def test_scenario_power_flags_blind_and_underpowered_scenarios():
    blind = power.scenario_power(spec_of("zero-drafts"), 100_000, 1e-4, law_samples=20_000)
    assert blind.flag.startswith("blind to resample_from_p")
    assert blind.mutant("resample_from_p").same_law
    weak = power.scenario_power(spec_of("markov-v4"), 60, 1e-4, law_samples=20_000)
    assert weak.flag.startswith("underpowered") and weak.mutant("resample_from_p").power < 0.99
    strong = power.scenario_power(spec_of("markov-v4"), 300_000, 1e-4, law_samples=20_000)
    assert strong.flag is None and strong.mutant("resample_from_p").power > 0.999
    assert strong.mutant("reused_uniforms").power is None  # dependent rows: not modelled
    assert strong.mutant("no_bonus").law == "lossless"
    assert power.ScenarioPower.from_info(strong.to_info()) == strong


def test_run_reports_power_per_scenario():
    result = specaudit.run("specaudit.verifiers.reference:verify", ["seed-context-free", "zero-drafts"], samples=20_000,
                           diagnose=False)
    by = {s.name: s for s in result.scenarios}
    sens = by["seed-context-free"].info["sensitivity"]
    # 3 + 1: zero-drafts' accept-length (one group) and tokens-per-step (one possible value) have a
    # constant p-value, so they are exact checks outside Holm's family
    assert sens["tests"] == 4 and sens["alpha"] == pytest.approx(1e-3 / 4)
    zero = {c.name: c for c in by["zero-drafts"].checks}
    assert zero["accept-length"].pvalue is None and zero["tokens-per-step"].pvalue is None
    assert zero["accept-length"].status.name == "PASSED" and zero["tokens-per-step"].status.name == "PASSED"
    probs = target_law(spec_of("seed-context-free"))
    assert sens["detectable_tv"] == pytest.approx(spower.detectable_tv(probs, 20_000, 1e-3 / 4))
    assert by["seed-context-free"].info["power"]["resample_from_p"]["power"] > 0.99
    assert by["zero-drafts"].info["sensitivity"]["flag"].startswith("blind")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: spower.power_against(np.ones(3) / 3, np.ones(3) / 3, 10, 1.5), "alpha"),
        (lambda: spower.detectable_tv(np.ones(3) / 3, 10, 0.01, 0.001), "power"),
        (lambda: spower.samples_for_tv(np.ones(3) / 3, 0.0, 0.01), "tv"),
        (lambda: spower.power_against(np.ones(3) / 3, np.ones(4) / 4, 10, 0.01), "cells"),
        (lambda: mutant_laws.mutant_law(spec_of("markov-v4"), "resample_from_q"), "resample_from_p"),
        (lambda: planning.plan(spec_of("markov-v4"), alpha=0.01, tests=0), "tests"),
    ],
)
def test_validation(call, match):
    with pytest.raises(UsageError, match=match):
        call()


@pytest.mark.slow
@pytest.mark.parametrize("scenario, mutant", [("seed-context-free", "resample_from_p"), ("markov-v4", "shared_uniform")])
def test_plan_agrees_with_reality(scenario, mutant):
    # plan's N for power 0.95, then 100 seeded runs of the mutant's joint-law check at that N
    from specaudit.checks import statistical as checks
    from specaudit.verifiers.zoo.chain import MUTANTS

    spec = spec_of(scenario)
    n = planning.plan(spec, alpha=1e-3, power=0.95, mutant=mutant).samples_for_mutant
    predicted = spower.simulated_power(mutant_laws.mutant_joint_law(spec, mutant), target_law(spec), n, 1e-3)
    sized = dataclasses.replace(spec, samples=n)
    hits = sum(
        checks.joint_law(measure(MUTANTS[mutant].func, sized, seed)).pvalue <= 1e-3 for seed in range(100)
    )
    assert abs(hits / 100 - predicted) <= 0.05, (n, predicted, hits)


def test_detectable_tv_is_cached_on_disk_and_a_bad_file_is_recomputed(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(31)
    probs = rng.dirichlet(np.ones(16))
    want = spower.detectable_tv(probs, 5000, 1e-4)  # the simulation-verified figure, computed here
    assert mutant_laws.cached_detectable_tv(probs, 5000, 1e-4, spower.TARGET_POWER) == want
    (path,) = (tmp_path / "cache" / "detectable-tv").rglob("*.npy")

    def boom(*args, **kwargs):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(mutant_laws, "detectable_tv", boom)
    assert mutant_laws.cached_detectable_tv(probs, 5000, 1e-4, spower.TARGET_POWER) == want  # read back
    monkeypatch.undo()
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path / "cache"))
    other = mutant_laws.cached_detectable_tv(probs, 6000, 1e-4, spower.TARGET_POWER)  # another n: another key
    assert other == spower.detectable_tv(probs, 6000, 1e-4) and other < want
    data = bytearray(path.read_bytes())
    data[-cache.TRAILER_BYTES - 1] ^= 1  # a flipped bit in the value: the checksum no longer matches
    path.write_bytes(bytes(data))
    assert mutant_laws.cached_detectable_tv(probs, 5000, 1e-4, spower.TARGET_POWER) == want
    err = capsys.readouterr().err
    assert f"ignored cache file {path} (checksum does not match its data)" in err, err
    np.save(path, np.array([np.nan]))  # no trailer, NaN: ignored quietly as an old-format file, recomputed
    assert mutant_laws.cached_detectable_tv(probs, 5000, 1e-4, spower.TARGET_POWER) == want


@pytest.mark.parametrize(("header", "value", "why"), [
    ("-" * 3000 + "1", 0.1, "ignored cache file"),  # numpy's header parser recursed: an internal error (exit 3)
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 0.0, "values NaN, zero or negative"),
])
def test_a_hostile_detectable_tv_file_is_recomputed(tmp_path, capsys, header, value, why):
    import hashlib

    rng = np.random.default_rng(32)
    probs = rng.dirichlet(np.ones(8))
    want = mutant_laws.cached_detectable_tv(probs, 3000, 1e-3, spower.TARGET_POWER)
    (path,) = (tmp_path / "cache" / "detectable-tv").rglob("*.npy")
    text = header.encode()
    pad = 64 - (10 + len(text) + 1) % 64
    payload = np.array([value]).tobytes()
    path.write_bytes(b"\x93NUMPY\x01\x00" + (len(text) + pad + 1).to_bytes(2, "little") + text + b" " * pad + b"\n"
                     + payload + cache.CHECKSUM_TAG + hashlib.sha256(payload).hexdigest().encode())
    assert mutant_laws.cached_detectable_tv(probs, 3000, 1e-3, spower.TARGET_POWER) == want
    err = capsys.readouterr().err
    assert why in err and err.count("ignored cache file") == 1, err
