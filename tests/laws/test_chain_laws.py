"""Exact references for chain verification, checked against an independent brute-force enumerator.

The enumerator below walks every draft sequence, every accept/reject outcome and every emitted
token of the rule (Leviathan et al. 2023, Alg. 1) as plain-Python events with their
probabilities; it never forms the kernels A, R, P that ``specaudit.laws.chain`` is built on.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pytest

from specaudit.chains.tabular import TabularChain, context_free, first_order
from specaudit.errors import UsageError
from specaudit.laws.chain import (
    acceptance_rate,
    closed_form_accept_law,
    closed_form_tokens_per_step,
    finite_horizon,
    first_round_accept_law,
    joint_probabilities,
    round_kernels,
    stationary_tokens_per_step,
)

# --- the independent computation: exhaustive enumeration of events -----------------------------


def round_outcomes(target, draft, s_t, s_d, j, from_residual=True):
    """Yield (prob, emitted tokens, accepted, s_t', s_d') for every outcome of a j-draft round.

    ``from_residual=False`` is a known bug (emit from p, not the residual, after a rejection).
    """
    vocab = target.vocab

    def walk(i, s_t, s_d, prob, emitted):
        p = [float(v) for v in target.dist[s_t]]
        q = [float(v) for v in draft.dist[s_d]]
        if i == j:  # every draft accepted: bonus token from p
            for y in range(vocab):
                if p[y] > 0:
                    yield prob * p[y], emitted + (y,), i, target.nxt[s_t, y], draft.nxt[s_d, y]
            return
        for x in range(vocab):  # draft x ~ q
            if q[x] == 0:
                continue
            accept = min(1.0, p[x] / q[x])
            if accept > 0:
                n_t, n_d = target.nxt[s_t, x], draft.nxt[s_d, x]
                yield from walk(i + 1, n_t, n_d, prob * q[x] * accept, emitted + (x,))
            if accept < 1:  # rejected: emit y from the normalised residual and stop
                residual = [max(p[y] - q[y], 0.0) if from_residual else p[y] for y in range(vocab)]
                total = sum(residual)
                for y in range(vocab):
                    if residual[y] > 0:
                        weight = prob * q[x] * (1 - accept) * residual[y] / total
                        yield weight, emitted + (y,), i, target.nxt[s_t, y], draft.nxt[s_d, y]

    yield from walk(0, s_t, s_d, 1.0, ())


@dataclass
class Enumerated:
    """Accumulate expectations and the emitted-sequence law over all enumerated histories."""

    rounds: float = 0.0
    tokens: float = 0.0
    counts: list = field(default_factory=list)
    sequences: dict = field(default_factory=lambda: defaultdict(float))


def enumerate_sequences(target, draft, draft_law, length, from_residual=True):
    """Run rounds from the start state until ``length`` tokens, over every possible history."""
    out = Enumerated(counts=[0.0] * len(draft_law))

    def run(s_t, s_d, prob, emitted):
        if len(emitted) >= length:
            out.sequences[emitted[:length]] += prob
            return
        for j, w in enumerate(draft_law):
            if w == 0:
                continue
            outcomes = round_outcomes(target, draft, s_t, s_d, j, from_residual)
            for pr, tokens, accepted, n_t, n_d in outcomes:
                branch = prob * w * pr
                out.rounds += branch
                out.tokens += branch * len(tokens)  # uncut n_out, as the simulator records it
                out.counts[accepted] += branch
                run(n_t, n_d, branch, emitted + tokens)

    run(target.start, draft.start, 1.0, ())
    return out


def enumerate_first_round(target, draft, draft_law):
    """Return P(accepted = a) of one round from the start state by enumeration."""
    law = np.zeros(len(draft_law))
    for j, w in enumerate(draft_law):
        for pr, _, accepted, _, _ in round_outcomes(target, draft, target.start, draft.start, j):
            law[accepted] += w * pr
    return law


def as_array(sequences, vocab, length):
    """Return the enumerated sequence law indexed like ``joint_probabilities``."""
    law = np.zeros(vocab**length)
    for seq, prob in sequences.items():
        law[int(np.ravel_multi_index(seq, (vocab,) * length))] += prob
    return law


# --- chains ----------------------------------------------------------------------------------


def markov_pair(rng, vocab=3):
    """Return a first-order target and a first-order drafter with different random matrices."""
    target = first_order(rng.dirichlet(np.full(vocab, 0.7), size=vocab), start=0)
    draft = first_order(rng.dirichlet(np.full(vocab, 0.7), size=vocab), start=1)
    return target, draft


def mixed_pair(rng):
    """Return a first-order target with zero entries and a 2-state drafter (S_T != S_D)."""
    matrix = rng.dirichlet(np.ones(3), size=3)
    matrix[0, 2] = 0.0  # p(x) = 0 < q(x): such drafts are always rejected
    matrix[0] /= matrix[0].sum()
    target = first_order(matrix, start=2)
    dist = rng.dirichlet(np.ones(3), size=2)
    dist[1, 1] = 0.0  # q(x) = 0 < p(x): x is never drafted there, only emitted
    dist[1] /= dist[1].sum()
    # Drafter state (a different space from the target's): 1 after token 0, kept by token 2.
    draft = TabularChain(dist, np.array([[1, 0, 0], [1, 0, 1]]), start=0)
    return target, draft


CASES = [
    # (seed, pair, draft_law, length): ragged laws, K = 2..3
    (11, markov_pair, [0.2, 0.3, 0.5], 3),
    (12, markov_pair, [0.1, 0.0, 0.4, 0.5], 3),
    (13, mixed_pair, [0.0, 0.25, 0.25, 0.5], 3),
    (14, mixed_pair, [0.3, 0.0, 0.7], 4),
]


@pytest.mark.parametrize(("seed", "pair", "draft_law", "length"), CASES)
def test_finite_horizon_matches_enumeration(seed, pair, draft_law, length):
    rng = np.random.default_rng(seed)
    target, draft = pair(rng)
    brute = enumerate_sequences(target, draft, draft_law, length)
    law = finite_horizon(target, draft, np.array(draft_law), length)
    assert law.expected_rounds == pytest.approx(brute.rounds, abs=1e-12)
    assert law.expected_tokens == pytest.approx(brute.tokens, abs=1e-12)
    assert law.tokens_per_step == pytest.approx(brute.tokens / brute.rounds, abs=1e-12)
    np.testing.assert_allclose(law.expected_accept_counts, brute.counts, atol=1e-12)
    np.testing.assert_allclose(law.accept_law, np.array(brute.counts) / brute.rounds, atol=1e-12)


@pytest.mark.parametrize(("seed", "pair", "draft_law", "length"), CASES)
def test_first_round_accept_law_matches_enumeration(seed, pair, draft_law, length):
    rng = np.random.default_rng(seed)
    target, draft = pair(rng)
    expected = enumerate_first_round(target, draft, draft_law)
    got = first_round_accept_law(target, draft, np.array(draft_law))
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert got.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("seed", "pair", "draft_law", "length"), CASES)
def test_rule_is_lossless_by_enumeration(seed, pair, draft_law, length):
    # Leviathan et al. 2023, Thm. 1: the emitted L-token law is the target's, whatever the drafter.
    rng = np.random.default_rng(seed)
    target, draft = pair(rng)
    brute = enumerate_sequences(target, draft, draft_law, length)
    emitted = as_array(brute.sequences, target.vocab, length)
    np.testing.assert_allclose(emitted, joint_probabilities(target, length), rtol=0, atol=1e-12)


def test_buggy_rule_is_caught_by_enumeration():
    # Negative control for the losslessness check: emitting from p after a rejection is biased.
    rng = np.random.default_rng(15)
    target, draft = markov_pair(rng)
    brute = enumerate_sequences(target, draft, [0.0, 0.0, 1.0], 3, from_residual=False)
    emitted = as_array(brute.sequences, target.vocab, 3)
    assert emitted.sum() == pytest.approx(1.0, abs=1e-12)
    assert 0.5 * np.abs(emitted - joint_probabilities(target, 3)).sum() > 0.02


def test_joint_probabilities_matches_path_products():
    # Independent: multiply the conditional probabilities along each path with itertools.product.
    rng = np.random.default_rng(21)
    target, _ = mixed_pair(rng)
    length = 4
    got = joint_probabilities(target, length)
    for index, seq in enumerate(itertools.product(range(target.vocab), repeat=length)):
        state, prob = target.start, 1.0
        for x in seq:
            prob *= target.dist[state, x]
            state = target.nxt[state, x]
        assert got[index] == pytest.approx(prob, abs=1e-15)
    assert got.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_array_equal(joint_probabilities(target, 0), [1.0])


def test_joint_probabilities_detects_a_wrong_target():
    rng = np.random.default_rng(22)
    target, draft = markov_pair(rng)
    assert np.abs(joint_probabilities(target, 3) - joint_probabilities(draft, 3)).sum() > 0.05


def test_kernels_are_stochastic():
    rng = np.random.default_rng(23)
    target, draft = mixed_pair(rng)
    k = round_kernels(target, draft)
    assert k.accept.shape == (6, 6)
    assert k.start == target.start * draft.n_states + draft.start
    np.testing.assert_allclose((k.accept + k.reject).sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(k.bonus.sum(axis=1), 1.0, atol=1e-12)


# --- closed forms and the worked examples of notes/theory.md ----------------------------------


def test_theory_example_closed_form():
    # notes/theory.md: p=[.5,.3,.15,.05], q uniform, K=3 -> alpha = 0.70, E = 2.533.
    p = np.array([0.5, 0.3, 0.15, 0.05])
    q = np.full(4, 0.25)
    alpha = acceptance_rate(p, q)
    assert alpha == pytest.approx(0.70, abs=1e-12)
    assert closed_form_tokens_per_step(alpha, 3) == pytest.approx(2.533, abs=1e-12)  # .7599 / .3
    law = closed_form_accept_law(alpha, 3)
    np.testing.assert_allclose(law, [0.3, 0.21, 0.147, 0.343], atol=1e-12)
    assert np.arange(1, 5) @ law == pytest.approx(closed_form_tokens_per_step(alpha, 3), abs=1e-12)


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 40])
def test_context_free_ratio_equals_closed_form_at_any_length(length):
    # Every round has the same law, so by Wald's identity E[tokens] = E[rounds] E[n_out] exactly.
    p = context_free([0.5, 0.3, 0.15, 0.05])
    q = context_free(np.full(4, 0.25))
    law = finite_horizon(p, q, [0, 0, 0, 1.0], length)
    assert law.tokens_per_step == pytest.approx(closed_form_tokens_per_step(0.7, 3), abs=1e-12)
    np.testing.assert_allclose(law.accept_law, closed_form_accept_law(0.7, 3), atol=1e-12)


def test_context_free_first_round_and_stationary_equal_closed_form():
    p = context_free([0.5, 0.3, 0.15, 0.05])
    q = context_free(np.full(4, 0.25))
    law = [0, 0, 0, 1.0]
    expected = closed_form_accept_law(0.7, 3)
    np.testing.assert_allclose(first_round_accept_law(p, q, law), expected, atol=1e-12)
    rate = stationary_tokens_per_step(p, q, law)
    assert rate == pytest.approx(closed_form_tokens_per_step(0.7, 3), abs=1e-12)


def test_block_toy_chain_accepts_ten_ninths():
    # notes/theory.md, block verification toy: p=(1/3,2/3), q=(2/3,1/3), K=2 -> chain 10/9 accepted.
    p = context_free([1 / 3, 2 / 3])
    q = context_free([2 / 3, 1 / 3])
    law = [0, 0, 1.0]
    accepted = np.arange(3) @ first_round_accept_law(p, q, law)
    assert accepted == pytest.approx(10 / 9, abs=1e-12)
    assert stationary_tokens_per_step(p, q, law) == pytest.approx(19 / 9, abs=1e-12)
    assert closed_form_tokens_per_step(2 / 3, 2) == pytest.approx(19 / 9, abs=1e-12)
    assert closed_form_tokens_per_step(1.0, 2) == 3.0


# --- the long-run rate ----------------------------------------------------------------------


def long_run(target, draft, draft_law, length):
    """Return the finite-horizon ratio at 2L, extrapolated past its O(1/L) bias (Richardson)."""
    short = finite_horizon(target, draft, draft_law, length).tokens_per_step
    return 2 * finite_horizon(target, draft, draft_law, 2 * length).tokens_per_step - short


def test_stationary_agrees_with_long_finite_horizon():
    # Independent: the finite-horizon DP (checked by enumeration above) uses no stationary law.
    rng = np.random.default_rng(31)
    target, draft = mixed_pair(rng)
    draft_law = np.array([0.1, 0.2, 0.3, 0.4])
    stationary = stationary_tokens_per_step(target, draft, draft_law)
    # The ratio converges like 1/L from the start state (here about 0.015 off at L = 200).
    at_200 = finite_horizon(target, draft, draft_law, 200).tokens_per_step
    assert at_200 == pytest.approx(stationary, abs=2e-2)
    assert long_run(target, draft, draft_law, 400) == pytest.approx(stationary, abs=5e-4)


def test_target_stationary_average_is_wrong():
    # notes/theory.md: averaging E[tokens | s] over the TARGET's stationary law instead of the law
    # of round-start states is wrong (1.914 vs 1.956 there). Independent check: long finite horizon.
    rng = np.random.default_rng(32)
    target = first_order(rng.dirichlet(np.full(3, 0.3), size=3), start=0)
    draft = first_order(rng.dirichlet(np.full(3, 0.3), size=3), start=0)
    draft_law = np.array([0, 0, 0, 1.0])
    eigvals, eigvecs = np.linalg.eig(target.dist.T)
    pi_target = np.real(eigvecs[:, np.argmin(np.abs(eigvals - 1))])
    pi_target /= pi_target.sum()
    per_state = []  # E[tokens | previous token x] for one round started there
    for x in range(3):
        from_x = TabularChain(target.dist, target.nxt, x), TabularChain(draft.dist, draft.nxt, x)
        per_state.append(np.arange(1, 5) @ first_round_accept_law(*from_x, draft_law))
    wrong = float(pi_target @ per_state)
    right = stationary_tokens_per_step(target, draft, draft_law)
    assert long_run(target, draft, draft_law, 400) == pytest.approx(right, abs=5e-4)
    assert abs(wrong - right) > 0.1  # 2.586 vs 2.776 here


# --- validation ------------------------------------------------------------------------------


def test_several_recurrent_classes_are_refused():
    # The first token decides forever between two absorbing states: no single long-run rate.
    dist = np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]])
    chain = TabularChain(dist, np.array([[1, 2], [1, 1], [2, 2]]), 0)
    with pytest.raises(UsageError, match="recurrent classes"):
        stationary_tokens_per_step(chain, context_free([0.5, 0.5]), [0, 1.0])


def test_unreachable_states_are_ignored():
    # State 1 is closed but never entered from state 0: the rate is that of state 0's law alone.
    p, q = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]
    dist = np.array([p, [0.9, 0.05, 0.05]])
    target = TabularChain(dist, np.zeros((2, 3), dtype=np.int64) + [[0], [1]], 0)
    rate = stationary_tokens_per_step(target, context_free(q), [0, 0, 1.0])
    assert rate == pytest.approx(closed_form_tokens_per_step(acceptance_rate(p, q), 2), abs=1e-12)


@pytest.mark.parametrize("bad", [[0.5, 0.4], [-0.1, 1.1], [], [[1.0]]])
def test_bad_draft_law_is_refused(bad):
    p = context_free([0.5, 0.5])
    with pytest.raises(UsageError, match="draft_law"):
        first_round_accept_law(p, p, bad)


def test_other_bad_inputs_are_refused():
    p = context_free([0.5, 0.5])
    with pytest.raises(UsageError, match="vocabulary"):
        round_kernels(p, context_free([0.2, 0.3, 0.5]))
    with pytest.raises(UsageError, match="length"):
        finite_horizon(p, p, [0, 1.0], 0)
    with pytest.raises(UsageError, match="alpha"):
        closed_form_tokens_per_step(1.5, 2)
