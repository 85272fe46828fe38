"""Importance-sampled null rejection rates (specaudit.analysis.null_rates) against exact tails.

The estimator must be unbiased whatever the proposal: checked where the exact rate is known by
enumeration (two- and three-group multinomials, a binomial linear statistic), with the plain null
draws as a second, independent estimate, and the mixture's weights averaging one.
"""

import numpy as np
import pytest
from scipy import stats as sps

from specaudit.analysis import null_rates as nr
from specaudit.stats import gof


def _exact_rate(expected, method, level):
    """P(p <= level) for the enumerated law of `gof.null_law` (two or three groups)."""
    law = gof.null_law(expected, method)
    values, tail = law._exact
    hit = np.flatnonzero(law.sf(values) <= level)
    return float(tail[hit[0]]) if hit.size else 0.0


@pytest.mark.parametrize("expected", [(5.0, 5.0, 290.0), (30.0, 50.0, 120.0), (12.0, 188.0)])
@pytest.mark.parametrize("level", [3.3e-5, 3.3e-4])
def test_importance_sampled_rate_covers_the_exact_rate(expected, level):
    expected = np.array(expected)
    n = int(expected.sum())
    law = gof.null_law(expected, "pearson")
    exact = _exact_rate(expected, "pearson", level)
    mix = nr.Mixture([(expected / n, n)], nr.dispersions(0, expected.size - 1, [law.fit_isf(level)]))
    rng = np.random.default_rng(20)
    est = nr.rates(mix, lambda c: law.sf(gof.statistics(c[0], expected, "pearson")), [level], rng, 40_000)[0]
    lo, hi = est.interval(0.999)
    assert lo * level <= exact <= hi * level
    assert hi - lo < 0.5  # and tight: 40k plain draws would give about [0, 3] at 3.3e-5


def test_plain_draws_and_importance_sampling_agree_far_in_the_tail():
    rng = np.random.default_rng(21)
    probs = rng.dirichlet(np.full(40, 2.0))
    n = 50_000
    law = gof.null_law(probs * n, "pearson")
    level = 1e-3

    def pvalue(c):
        return law.sf(gof.statistics(c[0], probs * n, "pearson"))

    tilted = nr.rates(nr.Mixture([(probs, n)], nr.dispersions(0, 39, [law.isf(level)])), pvalue, [level], rng, 30_000)[0]
    plain = nr.rates(nr.Mixture([(probs, n)], []), pvalue, [level], rng, 300_000)[0]
    assert plain.weight_max == 1.0 and tilted.weight_max == pytest.approx(1 / nr.NULL_SHARE)
    diff = abs(tilted.rate - plain.rate)
    assert diff <= 3.3 * np.hypot(tilted.stderr, plain.stderr)


def test_weights_average_one_under_the_mixture():
    rng = np.random.default_rng(22)
    blocks = [(rng.dirichlet(np.ones(8)), 400), (np.full(5, 0.2), 100)]
    mix = nr.Mixture(blocks, [nr.Dispersion(0, 3.0), nr.Dispersion((0, 1), 2.0),
                              nr.Tilt(1, np.arange(5.0), 0.3), nr.Tilt(1, np.arange(5.0), -0.3)])
    _, w = mix.counts(rng, 200_000)
    assert w.max() <= 1 / nr.NULL_SHARE + 1e-12
    assert w.mean() == pytest.approx(1.0, abs=4 * w.std() / np.sqrt(w.size))


def test_tilt_recovers_a_binomial_tail():
    # a linear statistic: the count of the first cell, read two-sided by its normal z
    n, p = 2_000, 0.3
    level = 1e-5
    z_c = sps.norm.isf(level / 2)
    eta = z_c / np.sqrt(n * p * (1 - p))
    mix = nr.Mixture([(np.array([p, 1 - p]), n)], [nr.Tilt(0, np.array([1.0, 0.0]), s * eta) for s in (1, -1)])

    def pvalue(c):
        z = (c[0][:, 0] - n * p) / np.sqrt(n * p * (1 - p))
        return 2 * sps.norm.sf(np.abs(z))

    est = nr.rates(mix, pvalue, [level], np.random.default_rng(23), 40_000)[0]
    k = np.arange(n + 1)
    z = (k - n * p) / np.sqrt(n * p * (1 - p))
    exact = sps.binom.pmf(k, n, p)[2 * sps.norm.sf(np.abs(z)) <= level].sum()
    lo, hi = est.interval(0.999)
    assert lo * level <= exact <= hi * level


def test_union_of_independent_parts():
    parts = [nr.Estimate(1e-4, r, r / 10, 1000, 500, 5.0) for r in (1e-4, 2e-4, 3e-4)]
    u = nr.union_rate(parts, 1e-3)
    assert u.rate == pytest.approx(1 - (1 - 1e-4) * (1 - 2e-4) * (1 - 3e-4))
    assert u.stderr == pytest.approx(np.sqrt(sum((r / 10) ** 2 for r in (1e-4, 2e-4, 3e-4))), rel=1e-3)


def test_few_hits_give_a_valid_upper_bound_from_the_weight_bound():
    est = nr.Estimate(1e-4, 0.0, 0.0, 10_000, 0, 5.0)
    lo, hi = est.interval()
    assert lo == 0.0 and hi * 1e-4 == pytest.approx(5.0 * sps.beta.ppf(0.995, 1, 10_000))
