"""The TV certificate (specaudit.stats.certificate): its formula, and its coverage measured from known laws.

Coverage is measured with direct multinomial draws (no verifier): ``n`` sequences from a law P whose
TV to the target Q is known exactly, many seeds, and the fraction of draws whose bound falls below
TV(P, Q) must not exceed delta. The laws include P = Q (the markov-v4 joint law), P != Q with cells
far from equality and P(A*) = 1/2 (where Hoeffding is tightest and the plug-in TV is unbiased, the
hardest case for coverage), a mixture towards a point mass, and a P with impossible outcomes. A
negative control (the plug-in TV without the Hoeffding term) misses far more than delta on the same
draws, so the harness can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specaudit.chains.tabular import TabularChain
from specaudit.laws.chain import joint_probabilities
from specaudit.scenarios.catalogue import resolve
from specaudit.stats import sequential
from specaudit.stats.certificate import CAP_FACTOR, PLANNED_WEIGHT, hoeffding_slack, samples_to_certify, tv_upper_bound
from specaudit.stats.gof import expected_tv_null


def _markov_v4() -> np.ndarray:
    spec = resolve(["markov-v4"])[0].spec
    target, _ = spec.chains()
    assert isinstance(target, TabularChain)
    return joint_probabilities(target, spec.length)


def _laws() -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """Return name -> (P, Q, TV(P, Q) computed independently of the module under test)."""
    q = _markov_v4()
    uniform = np.full(64, 1 / 64)
    split = uniform * np.where(np.arange(64) < 32, 1.1, 0.9)  # P(A*) = 0.55, every cell 10% off: TV = 0.05
    point = np.zeros(64)
    point[int(np.argmin(q))] = 1.0
    mixed = 0.98 * q + 0.02 * point  # TV = 0.02 (1 - q_min) exactly
    leaky = np.append(q * 0.99, 0.01)  # 1% on an outcome of target probability 0: TV = 0.01
    return {
        "P = Q (markov-v4)": (q, q, 0.0),
        "balanced, TV 0.05": (split, uniform, 0.05),
        "mixture, TV ~0.02": (mixed, q, 0.02 * (1 - q.min())),
        "impossible outcomes, TV 0.01": (leaky, np.append(q, 0.0), 0.01),
    }


def _bounds(counts: np.ndarray, q: np.ndarray, delta: float) -> np.ndarray:
    """Return the bound of every row of ``counts`` (vectorised twin of tv_upper_bound, checked against it below)."""
    n = counts.sum(axis=1)
    tv = 0.5 * np.abs(counts / n[:, None] - q).sum(axis=1)
    return np.minimum(1.0, tv + np.sqrt(np.log(1 / delta) / (2 * n)))


def test_bound_is_plug_in_tv_plus_hoeffding_slack() -> None:
    # by hand: P_hat = (3/4, 1/4) vs (1/2, 1/2): TV 1/4; delta = e^-2, n = 4: sqrt(2 / 8) = 1/2
    b = tv_upper_bound(np.array([3, 1]), np.array([0.5, 0.5]), math.exp(-2))
    assert b.tv == pytest.approx(0.25) and b.bound == pytest.approx(0.75) and b.sequences == 4
    assert b.confidence == pytest.approx(1 - math.exp(-2)) and b.target is None and not b.certified
    # a look's share of delta: the slack at delta * weight, the confidence still 1 - delta
    half = tv_upper_bound(np.array([3, 1]), np.array([0.5, 0.5]), math.exp(-2), weight=math.exp(-1))
    assert half.bound == pytest.approx(0.25 + math.sqrt(3 / 8)) and half.confidence == pytest.approx(1 - math.exp(-2))
    assert tv_upper_bound(np.array([40, 0]), np.array([0.0, 1.0]), 0.5).bound == 1.0  # capped at 1
    certified = tv_upper_bound(np.array([500_000, 500_000]), np.array([0.5, 0.5]), 1e-3, target=0.005)
    assert certified.bound == pytest.approx(hoeffding_slack(10**6, 1e-3)) and certified.certified
    with pytest.raises(ValueError, match="at least one draw"):
        tv_upper_bound(np.zeros(3, dtype=np.int64), np.full(3, 1 / 3), 0.1)
    with pytest.raises(ValueError, match="allowed: 0 < delta < 1"):
        tv_upper_bound(np.array([1, 2]), np.array([0.5, 0.5]), 1.0)


@pytest.mark.parametrize("delta", [0.2, 0.05, 1e-3])
def test_coverage_from_known_laws_at_least_one_minus_delta(delta: float) -> None:
    rng = np.random.default_rng(20261201)
    reps, n = 20_000, 20_000
    for name, (p, q, tv) in _laws().items():
        counts = rng.multinomial(n, p, size=reps)
        bounds = _bounds(counts, q, delta)
        for row in range(20):  # the vectorised twin is the module's formula
            assert bounds[row] == pytest.approx(tv_upper_bound(counts[row], q, delta).bound, rel=1e-12)
        missed = float(np.mean(bounds < tv))
        assert missed <= delta, f"{name}: TV {tv:.4f} above the bound in {missed:.4%} of {reps} draws (delta {delta})"
        # negative control: the plug-in TV alone is no upper bound where P(A*) sits away from equality
        if name.startswith("balanced"):
            plug_in = bounds - np.sqrt(np.log(1 / delta) / (2 * n))
            assert np.mean(plug_in < tv) > max(delta, 0.3)


def test_anytime_coverage_over_doubling_looks() -> None:
    """The bounds of every look of a run (alpha spent over the looks) hold together with probability >= 1 - delta."""
    rng = np.random.default_rng(7)
    delta, block, blocks, reps = 0.1, 500, 20, 2_000
    looks = sequential.look_schedule(blocks)  # 1, 2, 4, 8, 16, 20 blocks
    weights = sequential.spending(len(looks))
    for name, (p, q, tv) in _laws().items():
        per_block = rng.multinomial(block, p, size=(reps, blocks))
        running = np.cumsum(per_block, axis=1)
        missed_any = np.zeros(reps, dtype=bool)
        for b, w in zip(looks, weights):
            missed_any |= _bounds(running[:, b - 1], q, delta * w) < tv
        assert float(np.mean(missed_any)) <= delta, name


def test_samples_to_certify_plans_where_the_expected_bound_reaches_eps() -> None:
    q = _markov_v4()
    n = samples_to_certify(q, 0.005, 1e-3)
    assert n is not None

    def expected(m: int) -> float:
        return expected_tv_null(q, m) + hoeffding_slack(m, 1e-3 * PLANNED_WEIGHT)

    assert expected(n) <= 0.005 < expected(int(0.99 * n))
    assert CAP_FACTOR * n < 3_000_000  # markov-v4 at 0.005: the cap a `--certify-tv 0.005` run gets
    assert samples_to_certify(q, 1e-12, 1e-3) is None  # beyond any feasible run
    # a lossless verifier's bound, measured from draws at the planned n, is at eps on average
    rng = np.random.default_rng(11)
    drawn = _bounds(rng.multinomial(n, q, size=500), q, 1e-3 * PLANNED_WEIGHT)
    assert abs(float(drawn.mean()) - 0.005) < 0.0003
