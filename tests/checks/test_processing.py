"""Reference sampling processing against hand-computed cases and a literal per-row implementation."""

import math

import numpy as np
import pytest

from specaudit.chains.processing import SamplingParams, process
from specaudit.errors import UsageError

E = math.e


def test_identity_is_softmax_and_shift_invariant():
    z = np.log([1.0, 2.0, 4.0])
    np.testing.assert_allclose(process(z, SamplingParams()), [1 / 7, 2 / 7, 4 / 7], rtol=1e-15)
    np.testing.assert_allclose(process(z + 100.0, SamplingParams()), [1 / 7, 2 / 7, 4 / 7], rtol=1e-14)


@pytest.mark.parametrize(
    "temperature, expected",
    [
        (0.5, [1 / 21, 4 / 21, 16 / 21]),  # z / 0.5 squares the odds 1:2:4
        (2.0, [1 / (3 + 2**0.5), 2**0.5 / (3 + 2**0.5), 2 / (3 + 2**0.5)]),  # square roots
    ],
)
def test_temperature(temperature, expected):
    np.testing.assert_allclose(process(np.log([1.0, 2.0, 4.0]), SamplingParams(temperature)), expected, rtol=1e-14)


def test_temperature_zero_is_one_hot_at_first_argmax():
    assert process([1.0, 3.0, 3.0, 0.0], SamplingParams(temperature=0)).tolist() == [0, 1, 0, 0]
    # filters keep the argmax, so they do not change greedy
    assert process([1.0, 3.0, 3.0, 0.0], SamplingParams(0, top_k=1, top_p=0.1, min_p=0.9)).tolist() == [0, 1, 0, 0]
    assert process([-np.inf, 0.5, 2.0], SamplingParams(temperature=0)).tolist() == [0, 0, 1]


def test_top_k_keeps_ties_at_the_kth_value():
    z = [3.0, 1.0, 1.0, 0.0]
    tie = [E**3 / (E**3 + 2 * E), E / (E**3 + 2 * E), E / (E**3 + 2 * E), 0.0]
    np.testing.assert_allclose(process(z, SamplingParams(top_k=2)), tie, rtol=1e-14)
    np.testing.assert_allclose(process(z, SamplingParams(top_k=3)), tie, rtol=1e-14)  # k-th value 1: same set
    assert process(z, SamplingParams(top_k=1)).tolist() == [1, 0, 0, 0]
    np.testing.assert_allclose(process(z, SamplingParams(top_k=4)), process(z, SamplingParams()), rtol=0)
    np.testing.assert_allclose(process(z, SamplingParams(top_k=99)), process(z, SamplingParams()), rtol=0)
    # a tie at the top with top_k = 1 keeps both; -inf stays at 0
    np.testing.assert_allclose(process([0.0, -np.inf, 0.0], SamplingParams(top_k=1)), [0.5, 0, 0.5], rtol=0)


def test_top_p_boundary_exactly_at_p():
    z = np.log([0.5, 0.3, 0.2])
    # 0.5 + 0.3 = 0.8 exactly in decimal: two tokens reach p = 0.8
    np.testing.assert_allclose(process(z, SamplingParams(top_p=0.8)), [0.625, 0.375, 0.0], rtol=1e-14)
    np.testing.assert_allclose(process(z, SamplingParams(top_p=0.8000001)), [0.5, 0.3, 0.2], rtol=1e-14)
    assert process(z, SamplingParams(top_p=0.5)).tolist() == [1, 0, 0]  # the first token alone reaches 0.5
    assert process(z, SamplingParams(top_p=0.5000001)).tolist() == pytest.approx([0.625, 0.375, 0.0])
    assert process(z, SamplingParams(top_p=1e-9)).tolist() == [1, 0, 0]  # at least one token
    # dyadic masses, exact in binary: 0.5 + 0.25 = 0.75
    y = np.log([0.5, 0.25, 0.125, 0.125])
    np.testing.assert_allclose(process(y, SamplingParams(top_p=0.75)), [2 / 3, 1 / 3, 0, 0], rtol=1e-15)


def test_top_p_keeps_ties_with_the_last_token_needed():
    # reaching 0.76 needs token 2 (0.125); token 3 ties with it and is kept: the set does not
    # depend on which of two equal tokens comes first
    y = np.log([0.5, 0.25, 0.125, 0.125])
    np.testing.assert_allclose(process(y, SamplingParams(top_p=0.76)), [0.5, 0.25, 0.125, 0.125], rtol=1e-15)
    np.testing.assert_allclose(process(np.log([0.125, 0.25, 0.125, 0.5]), SamplingParams(top_p=0.76)),
                               [0.125, 0.25, 0.125, 0.5], rtol=1e-15)


def test_min_p_is_relative_to_the_max():
    y = np.log([0.5, 0.25, 0.125, 0.125])
    np.testing.assert_allclose(process(y, SamplingParams(min_p=0.25)), [0.5, 0.25, 0.125, 0.125], rtol=1e-15)
    np.testing.assert_allclose(process(y, SamplingParams(min_p=0.26)), [2 / 3, 1 / 3, 0, 0], rtol=1e-15)
    assert process(y, SamplingParams(min_p=1.0)).tolist() == [1, 0, 0, 0]


def test_order_temperature_before_top_p():
    z = np.log([0.5, 0.3, 0.2])
    # T = 0.5 first: masses 25:9:4, the top token alone has 25/38 = 0.658 >= 0.6
    assert process(z, SamplingParams(temperature=0.5, top_p=0.6)).tolist() == [1, 0, 0]
    # (top-p first would keep {0, 1}: 0.5 < 0.6)


def test_order_top_k_before_top_p():
    z = np.log([0.4, 0.3, 0.2, 0.1])
    # top-2 renormalises to 4/7, 3/7; then 4/7 >= 0.5 keeps token 0 alone
    assert process(z, SamplingParams(top_k=2, top_p=0.5)).tolist() == [1, 0, 0, 0]
    # on the unfiltered law 0.4 < 0.5 would keep two


def test_all_four_hand_computed():
    # z / T with T = 0.5 gives odds 8:4:2:1:1 (of 16); top-4 keeps all five (tie at the 4th value);
    # top-p 0.8: 8/16, 12/16, 14/16 = .875 >= .8 -> {0, 1, 2}; min-p 0.3 of the max 8/14: 2/8 < .3 -> {0, 1}
    z = np.log([8.0, 4.0, 2.0, 1.0, 1.0]) / 2
    np.testing.assert_allclose(process(z, SamplingParams(0.5, 4, 0.8, 0.3)), [2 / 3, 1 / 3, 0, 0, 0], rtol=1e-14)
    np.testing.assert_allclose(process(z, SamplingParams(0.5, 4, 0.8, 0.2)), [8 / 14, 4 / 14, 2 / 14, 0, 0], rtol=1e-14)
    # top-p 0.9 needs the 4th token (15/16), which ties with the 5th: all kept
    np.testing.assert_allclose(process(z, SamplingParams(0.5, 4, 0.9)), [0.5, 0.25, 0.125, 0.0625, 0.0625], rtol=1e-14)


def _literal(row: np.ndarray, prm: SamplingParams) -> np.ndarray:
    """Process one row by the written rules, with Python lists (an independent implementation)."""
    v = len(row)
    if prm.temperature == 0:
        out = [0.0] * v
        out[max(range(v), key=lambda i: (row[i], -i))] = 1.0
        return np.array(out)
    z = [x / prm.temperature for x in row]
    if 0 < prm.top_k < v:
        kth = sorted(z, reverse=True)[prm.top_k - 1]
        z = [x if x >= kth else -math.inf for x in z]
    m = max(z)
    w = [math.exp(x - m) for x in z]
    probs = [x / sum(w) for x in w]
    if prm.top_p < 1:
        acc, bound = 0.0, None
        for x in sorted(probs, reverse=True):
            acc += x
            if acc >= prm.top_p - 1e-12:
                bound = x
                break
        probs = [x if x >= bound else 0.0 for x in probs]
        probs = [x / sum(probs) for x in probs]
    if prm.min_p > 0:
        top = max(probs)
        probs = [x if x >= prm.min_p * top else 0.0 for x in probs]
        probs = [x / sum(probs) for x in probs]
    return np.array(probs)


def test_vectorised_matches_literal_rules_on_random_rows():
    rng = np.random.default_rng(8)
    for _ in range(200):
        v = int(rng.integers(2, 9))
        z = rng.normal(scale=2.0, size=(3, v))
        z[rng.random((3, v)) < 0.1] = -np.inf
        z[:, 0] = np.where(np.isfinite(z).any(axis=1), z[:, 0], 0.0)
        prm = SamplingParams(
            float(rng.choice([0.0, 0.5, 1.0, 1.7])), int(rng.integers(0, v + 1)),
            float(rng.choice([1.0, 0.3, 0.7, 0.95])), float(rng.choice([0.0, 0.05, 0.3])),
        )
        got = process(z, prm)
        want = np.stack([_literal(r, prm) for r in z])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15, err_msg=str((z, prm)))


def test_float32_merges_near_ties_at_top_k():
    z = [2.0, 1.000000001, 1.0, -1.0]
    assert (process(z, SamplingParams(top_k=2)) > 0).sum() == 2
    assert (process(z, SamplingParams(top_k=2), dtype=np.float32) > 0).sum() == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"temperature": -1.0}, "temperature = -1.0; allowed: a finite number >= 0"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": -2}, "top_k = -2; allowed: an integer >= 0"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, r"top_p = 0.0; allowed: 0 < top_p <= 1"),
        ({"min_p": 1.5}, r"min_p = 1.5; allowed: 0 <= min_p <= 1"),
    ],
)
def test_invalid_params(kwargs, match):
    with pytest.raises(UsageError, match=match):
        SamplingParams(**kwargs)


def test_invalid_logits():
    with pytest.raises(UsageError, match="finite entry and no NaN"):
        process([0.0, np.nan], SamplingParams())
    with pytest.raises(UsageError, match="finite entry"):
        process([-np.inf, -np.inf], SamplingParams())
