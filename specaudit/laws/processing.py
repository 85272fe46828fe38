"""Exact output laws of mis-processing chain-rule verifiers: which processed quantity diverges.

A chain-rule verifier is a function of three processed quantities: ``q`` (the draft law used
in the acceptance test and the residual), ``p`` at the verified positions (acceptance and
residual) and ``p`` at the bonus position. It is lossless only when ``q`` is the law the drafts
were sampled from and both ``p`` are the processed target (notes/theory.md, "Sampling
parameters"). Each *hypothesis* in :data:`HYPOTHESES` replaces exactly one of them by a known
wrong processing (unprocessed, temperature dropped, float32, the other role's parameters), and
:func:`output_law` gives the exact law of the emitted sequences under any such verifier. These
are exact reference laws (pure float64, no statistics), so they live in ``laws/``; the check that
scores observed counts against them is :func:`specaudit.checks.processing.processing`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specaudit.chains.logits import LogitsChain
from specaudit.chains.processing import SamplingParams, process
from specaudit.chains.tabular import TabularChain
from specaudit.registry import Registry

__all__ = ["HYPOTHESES", "Hypothesis", "Quantities", "output_law"]


@dataclass(frozen=True, eq=False)
class Quantities:
    """What a verifier uses, per context state: each row set indexed by its chain's states."""

    q_verify: np.ndarray  # [S_D, V] q in the acceptance test and the residual
    p_verify: np.ndarray  # [S_T, V] p at verified (draft) positions
    p_bonus: np.ndarray  # [S_T, V] p at the bonus position


@dataclass(frozen=True)
class Hypothesis:
    """One processed quantity replaced by a wrong processing."""

    name: str
    quantity: str  # "q", "p (verified positions)", "p (bonus)", "none"
    says: str  # the diagnosis sentence
    build: Callable[[LogitsChain, LogitsChain], Quantities]


def _proc(chain: TabularChain, params: SamplingParams, dtype: type = np.float64) -> np.ndarray:
    return process(chain.logits, params, dtype).astype(np.float64)  # type: ignore[attr-defined]


#: The hypotheses, scored in this order; "as-specified" (the lossless verifier) first.
HYPOTHESES: Registry[Hypothesis] = Registry("processing hypothesis")


def _h(name: str, quantity: str, says: str) -> Callable[[Callable[[LogitsChain, LogitsChain], Quantities]], Hypothesis]:
    """Register the hypothesis whose quantities ``build`` returns."""

    def wrap(build: Callable[[LogitsChain, LogitsChain], Quantities]) -> Hypothesis:
        return HYPOTHESES.register(name, Hypothesis(name, quantity, says, build))  # type: ignore[return-value]

    return wrap


@_h("as-specified", "none", "the outputs fit the processed target: no processing mismatch identified")
def _as_specified(t: LogitsChain, d: LogitsChain) -> Quantities:
    return Quantities(d.dist, t.dist, t.dist)


@_h("q-unprocessed", "q", "q diverges: the verifier used softmax(draft logits), unprocessed, while the drafts "
    "were sampled from the processed q")
def _q_unprocessed(t: LogitsChain, d: LogitsChain) -> Quantities:
    return Quantities(_proc(d, SamplingParams()), t.dist, t.dist)


@_h("q-no-temperature", "q", "q diverges: the draft's temperature was not applied in verification "
    "(temperature applied to the target only)")
def _q_no_temperature(t: LogitsChain, d: LogitsChain) -> Quantities:
    return Quantities(_proc(d, d.params.replace(temperature=1.0)), t.dist, t.dist)


@_h("q-float32", "q", "q diverges: the draft logits were processed in float32 (near-ties merge) against a "
    "float64 p")
def _q_float32(t: LogitsChain, d: LogitsChain) -> Quantities:
    return Quantities(_proc(d, d.params, np.float32), t.dist, t.dist)


@_h("q-target-params", "q", "q diverges: the draft logits were processed with the target's sampling parameters")
def _q_target_params(t: LogitsChain, d: LogitsChain) -> Quantities:
    return Quantities(_proc(d, t.params), t.dist, t.dist)


@_h("p-bonus-only", "p (verified positions)", "p at the verified positions diverges: the target's processing was "
    "applied at the bonus position only (softmax of raw logits when verifying drafts)")
def _p_bonus_only(t: LogitsChain, d: LogitsChain) -> Quantities:
    return Quantities(d.dist, _proc(t, SamplingParams()), t.dist)


@_h("p-unprocessed", "p (verified positions and bonus)", "p diverges everywhere: the target logits were not "
    "processed at all")
def _p_unprocessed(t: LogitsChain, d: LogitsChain) -> Quantities:
    raw = _proc(t, SamplingParams())
    return Quantities(d.dist, raw, raw)


@_h("p-no-temperature", "p (verified positions and bonus)", "p diverges: the target's temperature was not applied")
def _p_no_temperature(t: LogitsChain, d: LogitsChain) -> Quantities:
    warm = _proc(t, t.params.replace(temperature=1.0))
    return Quantities(d.dist, warm, warm)


@_h("p-draft-params", "p (verified positions and bonus)", "p diverges: the target logits were processed with the "
    "drafter's sampling parameters")
def _p_draft_params(t: LogitsChain, d: LogitsChain) -> Quantities:
    other = _proc(t, d.params)
    return Quantities(d.dist, other, other)


@_h("bonus-unprocessed", "p (bonus)", "p at the bonus position diverges: the bonus token was drawn from the "
    "unprocessed target")
def _bonus_unprocessed(t: LogitsChain, d: LogitsChain) -> Quantities:
    return Quantities(d.dist, t.dist, _proc(t, SamplingParams()))


def output_law(
    target: TabularChain, draft: TabularChain, used: Quantities, draft_law: np.ndarray, length: int
) -> np.ndarray:
    """Return the exact law of the first ``length`` emitted tokens of a chain-rule verifier.

    Parameters
    ----------
    target, draft : TabularChain
        Chains giving the context transitions; drafts are sampled from ``draft.dist``.
    used : Quantities
        The q and p rows the verifier actually uses (``Quantities(draft.dist, target.dist,
        target.dist)`` is the lossless verifier).
    draft_law : array_like
        Law of the number of drafts j = 0..K per round.
    length : int
        Tokens per sequence L.

    Returns
    -------
    numpy.ndarray
        Shape ``[V**L]``, cell ``sum_t x_t V**(L-1-t)`` as in :class:`specaudit.simulate.chain.JointCounts`.

    Notes
    -----
    Forward algorithm on the hidden round position: state ``(s_T, s_D, i, j)`` with ``j`` the
    round's draft count and ``i <= j`` the drafts accepted so far. From ``i < j`` token ``x`` is
    emitted as an accepted draft with probability ``q(x) a(x)``, ``a(x) = P(u q'(x) < p'(x))``
    (``min(1, p'/q')``; 1 when ``q' = 0 < p'``; 0 when ``p' = 0``), or as the recovered token
    with probability ``(1 - sum_x q a) r(x)``, ``r = norm(max(p' - q', 0))`` (``p'`` when that
    is empty), which ends the round; from ``i = j`` the bonus ``p_bonus`` ends it. A new round
    draws ``j`` from ``draft_law``. With the lossless quantities this equals
    :func:`specaudit.laws.chain.joint_probabilities` (tested). Cost ``O(V^L S (K+1)^2 V)``.

    References
    ----------
    Leviathan et al. 2023, Alg. 1; notes/theory.md, "Sampling parameters".
    """
    law = np.asarray(draft_law, dtype=np.float64)
    k = law.size - 1
    v = target.vocab
    s_d = draft.n_states
    n = target.n_states * s_d
    joint_t = np.repeat(np.arange(target.n_states), s_d)
    joint_d = np.tile(np.arange(s_d), target.n_states)
    q = draft.dist[joint_d]  # [S, V] sampling law
    qv = used.q_verify[joint_d]
    pv = used.p_verify[joint_t]
    pb = used.p_bonus[joint_t]
    nxt = target.nxt[joint_t] * s_d + draft.nxt[joint_d]  # [S, V]

    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(pv <= 0, 0.0, np.where(qv <= 0, 1.0, np.minimum(1.0, pv / qv)))
    acc = q * accept  # [S, V] emitted as an accepted draft
    resid = np.maximum(pv - qv, 0.0)
    tot = resid.sum(axis=1, keepdims=True)
    resid = np.where(tot > 0, resid / np.where(tot > 0, tot, 1.0), pv)
    rej = (1.0 - acc.sum(axis=1, keepdims=True)).clip(min=0.0) * resid  # [S, V] recovered token, round ends

    # alpha[prefix, s, i, j]: the round position after the prefix (i <= j)
    alpha = np.zeros((1, n, k + 1, k + 1))
    alpha[0, target.start * s_d + draft.start, 0, :] = law
    move = np.zeros((v, n, n))  # move[x, s, s'] = 1 when token x takes joint state s to s'
    move[np.arange(v)[None, :], np.arange(n)[:, None], nxt] = 1.0
    for _ in range(length):
        m = alpha.shape[0]
        new = np.zeros((m, v, n, k + 1, k + 1))
        ended = np.zeros((m, v, n))
        for j in range(k + 1):
            for i in range(j + 1):
                a = alpha[:, :, i, j]  # [m, S]
                if not a.any():
                    continue
                if i < j:
                    new[:, :, :, i + 1, j] += _moved(a, acc, move)
                    emit = rej
                else:
                    emit = pb
                ended += _moved(a, emit, move)
        new[:, :, :, 0, :] += ended[..., None] * law
        alpha = new.reshape(m * v, n, k + 1, k + 1)
    return alpha.reshape(alpha.shape[0], -1).sum(axis=1)


def _moved(a: np.ndarray, weight: np.ndarray, move: np.ndarray) -> np.ndarray:
    """Return ``out[m, x, t] = sum_s a[m, s] weight[s, x] move[x, s, t]``: mass emitting x, by next state."""
    flow = a[None, :, :] * weight.T[:, None, :]  # [V, m, S]
    return np.matmul(flow, move).transpose(1, 0, 2)
