"""Pure statistics against scipy and exact enumeration."""

import numpy as np
import pytest
from scipy import stats as sps

from specaudit.stats import gof as stats


def test_pearson_equals_scipy_chisquare_when_no_merging():
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(12))
    observed = rng.multinomial(10_000, probs)
    fit = stats.goodness_of_fit(observed, probs)
    ref = sps.chisquare(observed, probs * observed.sum())  # independent: scipy
    assert fit.groups == 12 and fit.df == 11
    assert fit.statistic == pytest.approx(ref.statistic, rel=1e-12)
    # the p-value is the chi-square tail corrected for finite expected counts: close to
    # scipy's in the bulk, and equal to it in the large-count limit
    assert fit.pvalue == pytest.approx(ref.pvalue, rel=0.05, abs=1e-3)
    big = stats.null_law(probs * 1e9)
    assert float(big.sf(ref.statistic)) == pytest.approx(ref.pvalue, rel=1e-5)


def test_g_test_equals_scipy_power_divergence():
    rng = np.random.default_rng(2)
    probs = rng.dirichlet(np.ones(6))
    observed = rng.multinomial(5_000, probs)
    fit = stats.goodness_of_fit(observed, probs, method="g")
    ref = sps.power_divergence(observed, probs * 5_000, lambda_="log-likelihood")
    assert fit.statistic == pytest.approx(ref.statistic, rel=1e-12)


def test_merging_uses_expected_counts_only():
    probs = np.array([0.5, 0.3, 0.1996, 0.0002, 0.0001, 0.0001, 0.0])
    groups_a = stats.merge_groups(probs * 1000)
    fit_1 = stats.goodness_of_fit(np.array([500, 300, 200, 0, 0, 0, 0]), probs)
    fit_2 = stats.goodness_of_fit(np.array([500, 300, 199, 1, 0, 0, 0]), probs)
    assert fit_1.groups == fit_2.groups  # observed zeros never change the grouping
    assert groups_a[-1] == -1  # probability 0: its own 'impossible' test
    exp = np.bincount(groups_a[groups_a >= 0], weights=(probs * 1000)[groups_a >= 0])
    assert exp.min() >= stats.MIN_EXPECTED


@pytest.mark.parametrize("seed", range(5))
def test_merged_groups_all_reach_minimum(seed):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(300, 0.2))
    expected = probs * 2000
    g = stats.merge_groups(expected)
    sums = np.bincount(g[g >= 0], weights=expected[g >= 0])
    assert (g >= 0).sum() == (expected > 0).sum()
    assert sums.min() >= stats.MIN_EXPECTED - 1e-9
    assert sums.sum() == pytest.approx(2000)


def test_impossible_outcome_fails_outright():
    probs = np.array([0.5, 0.5, 0.0])
    fit = stats.goodness_of_fit(np.array([50, 49, 1]), probs)
    assert fit.pvalue == 0.0 and fit.impossible == 1


def test_pearson_level_is_alpha_under_null():
    # positive control: exact multinomial draws keep the nominal level (merged small cells)
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.full(40, 0.3))
    pvals = np.array([stats.goodness_of_fit(rng.multinomial(3000, probs), probs).pvalue for _ in range(400)])
    assert sps.kstest(pvals, "uniform").pvalue > 1e-3
    # negative control: a 10% shift of mass is detected every time
    shifted = probs * 0.9
    shifted[np.argmax(probs)] += 0.1
    assert all(stats.goodness_of_fit(rng.multinomial(3000, shifted), probs).pvalue < 1e-3 for _ in range(20))


def test_expected_tv_null_matches_monte_carlo():
    rng = np.random.default_rng(4)
    probs = rng.dirichlet(np.ones(20))
    sims = [stats.tv_distance(rng.multinomial(500, probs), probs) for _ in range(4000)]
    assert stats.expected_tv_null(probs, 500) == pytest.approx(np.mean(sims), rel=0.02)


def test_ratio_test_calibrated_and_powerful():
    rng = np.random.default_rng(5)

    def moments(shift):
        r = rng.integers(1, 4, size=20_000).astype(float)
        t = r * 2.0 + rng.normal(0, 0.5, size=r.size) + shift * r
        return np.array([r.sum(), t.sum(), (r * r).sum(), (t * t).sum(), (r * t).sum()])

    z = [stats.ratio_test(moments(0.0), 20_000, 2.0).statistic for _ in range(300)]
    assert abs(np.mean(z)) < 0.2 and 0.85 < np.std(z) < 1.15  # z ~ N(0, 1) under the null
    bad = stats.ratio_test(moments(0.02), 20_000, 2.0)
    assert bad.pvalue < 1e-6 and not (bad.ci()[0] <= 2.0 <= bad.ci()[1])


def test_holm_matches_hand_computation():
    adj = stats.holm(np.array([0.01, 0.04, np.nan, 0.03, 0.0001]))
    # sorted: .0001*4, .01*3, .03*2, .04*1 -> running max
    np.testing.assert_allclose(adj[[4, 0, 3, 1]], [0.0004, 0.03, 0.06, 0.06])
    assert np.isnan(adj[2])


def test_distribution_helpers_equal_scipy_stats():
    st = stats
    for x, df in [(0.5, 1), (37.2, 30), (300.0, 63), (1e-3, 5)]:
        assert st.chi2_sf(x, df) == pytest.approx(sps.chi2.sf(x, df), rel=1e-12, abs=1e-300)
    for q, df in [(1e-3, 1), (1e-5, 62), (0.5, 10)]:
        assert st.chi2_isf(q, df) == pytest.approx(sps.chi2.isf(q, df), rel=1e-12)
    for x, df, nc in [(100.0, 60, 5.0), (30.0, 10, 200.0), (12.0, 3, 0.5)]:
        assert st.ncx2_sf(x, df, nc) == pytest.approx(sps.ncx2.sf(x, df, nc), rel=1e-9, abs=1e-15)
    for z in (-3.0, 0.0, 1.5, 8.0):
        assert st.normal_sf(z) == pytest.approx(sps.norm.sf(z), rel=1e-12, abs=1e-300)
    for q in (1e-9, 0.025, 0.5):
        assert st.normal_isf(q) == pytest.approx(sps.norm.isf(q), rel=1e-12, abs=1e-15)
    obs, exp = np.array([12.0, 30.0, 58.0]), np.array([20.0, 30.0, 50.0])
    for method, lam in (("pearson", "pearson"), ("g", "log-likelihood")):
        ref = sps.power_divergence(obs, exp, lambda_=lam)
        statistic, pvalue = st.divergence(obs, exp, method)
        assert statistic == pytest.approx(ref.statistic, rel=1e-12)
        assert pvalue == pytest.approx(float(st.null_law(exp, method).sf(statistic)), rel=1e-12)
        assert pvalue == pytest.approx(ref.pvalue, rel=0.05)  # the finite-count correction is small in the bulk
