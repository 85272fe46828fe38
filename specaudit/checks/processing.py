"""Which processed quantity diverges? Exact output laws of mis-processing verifiers.

A chain-rule verifier is a function of three processed quantities: ``q`` (the draft law used
in the acceptance test and the residual), ``p`` at the verified positions (acceptance and
residual) and ``p`` at the bonus position. It is lossless only when ``q`` is the law the drafts
were sampled from and both ``p`` are the processed target (notes/theory.md, "Sampling
parameters"). Each *hypothesis* below replaces exactly one of them by a known wrong processing
(unprocessed, temperature dropped, float32, the other role's parameters); :func:`output_law`
gives the exact law of the emitted sequences under any such verifier, so the observed joint
counts can be scored against every hypothesis. The best-scoring one names the quantity that
diverges; :func:`processing` is the (non-gating) check that reports it on every scenario with
sampling processing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specaudit.stats import gof as stats
from specaudit.chains.tabular import TabularChain
from specaudit.contract.logits import LogitsChain
from specaudit.chains.processing import SamplingParams, process
from specaudit.results import Category, CheckResult, Status

__all__ = ["HYPOTHESES", "Hypothesis", "Quantities", "diagnose", "output_law", "processing"]

#: A hypothesis fits when its own G^2 p-value is above this (a loose bar: it names, not tests).
FIT_LEVEL = 1e-4
#: Largest forward-pass table (prefixes x joint states x round positions) a diagnosis builds.
MAX_WORK = 5e7


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


def _h(name: str, quantity: str, says: str):
    def wrap(build: Callable[[LogitsChain, LogitsChain], Quantities]) -> Hypothesis:
        h = Hypothesis(name, quantity, says, build)
        HYPOTHESES[name] = h
        return h

    return wrap


HYPOTHESES: dict[str, Hypothesis] = {}


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


@dataclass(frozen=True)
class Score:
    """How well one hypothesis explains the observed joint counts."""

    hypothesis: str
    g2: float  # deviance 2 sum O log(O / E); inf when a count falls on a cell of probability 0
    df: int
    pvalue: float


def _score(name: str, counts: np.ndarray, probs: np.ndarray) -> Score:
    total = counts.sum()
    expected = probs * total
    seen = counts > 0
    if np.any(seen & (expected <= 0)):
        return Score(name, float("inf"), 0, 0.0)
    g2 = float(2.0 * np.sum(counts[seen] * np.log(counts[seen] / expected[seen])))
    df = max(int((probs > 0).sum()) - 1, 1)
    return Score(name, g2, df, stats.chi2_sf(g2, df))


#: Quantities closer than this (max abs difference of probabilities) are one hypothesis here.
SAME = 1e-6


def diagnose(
    target: LogitsChain, draft: LogitsChain, draft_law: np.ndarray, length: int, counts: np.ndarray
) -> tuple[list[Score], dict[str, list[str]]]:
    """Score every distinct hypothesis on the joint ``counts``; return the ranking and the aliases.

    A hypothesis whose quantities coincide (within ``SAME``) with an earlier one on this
    scenario is not scored separately: it is listed as an alias of that one (e.g. "q
    unprocessed" and "q without temperature" when the drafter's only processing is a
    temperature); aliases of "as-specified" cannot be told apart from a lossless verifier.
    The ranking is by G^2, ties kept in definition order.
    """
    seen: list[tuple[str, Quantities]] = []
    aliases: dict[str, list[str]] = {}
    scores: list[Score] = []
    for h in HYPOTHESES.values():
        used = h.build(target, draft)
        same = next(
            (
                name
                for name, other in seen
                if all(
                    np.allclose(getattr(used, f), getattr(other, f), rtol=0, atol=SAME)
                    for f in ("q_verify", "p_verify", "p_bonus")
                )
            ),
            None,
        )
        if same is not None:
            aliases[same].append(h.name)
            continue
        seen.append((h.name, used))
        aliases[h.name] = []
        scores.append(_score(h.name, counts, output_law(target, draft, used, draft_law, length)))
    return sorted(scores, key=lambda s: s.g2), aliases


def processing(m) -> CheckResult | None:  # noqa: ANN001 - checks.Measured (import cycle)
    """Name the processed quantity that diverges, on scenarios with sampling processing.

    Not gating and not a test of its own (the joint-law check is): it says which single
    mis-processing best explains the joint counts, so a failure reads "q diverges: ...".
    PASSED when the specified processing fits (G^2 p-value above ``FIT_LEVEL``), FAILED
    naming the best fitting hypothesis otherwise, SUSPECT when none fits.
    """
    sc = m.scenario
    if m.joint is None or getattr(sc, "algorithm", "chain") != "chain":  # the laws here are the chain rule's
        return None
    if sc.target.kind != "logits" or sc.draft.kind not in ("logits", "same_logits_as_target"):
        return None
    target, draft = sc.chains()
    if target.params.identity and draft.params.identity:
        return None
    work = sc.joint_cells * target.n_states * draft.n_states * (sc.k + 1) ** 2
    if work > MAX_WORK:
        says = f"diagnosis skipped: the forward pass needs {work:.3g} cells (> {MAX_WORK:.0e}); use smaller V, L or K"
        return CheckResult("processing", Category.DISTRIBUTION, Status.SKIPPED, says, gate=False, data={"diagnosis": says})
    ranking, aliases = diagnose(target, draft, sc.draft_law, sc.length, m.joint.counts)
    null = next(s for s in ranking if s.hypothesis == "as-specified")
    fitting = [s for s in ranking if s.pvalue > FIT_LEVEL and s.hypothesis != "as-specified"]
    best = None
    if null.pvalue > FIT_LEVEL:
        status = Status.PASSED
        says = f"{HYPOTHESES['as-specified'].says} (G^2 = {null.g2:.1f} on {null.df} df)"
    elif fitting:
        status, top = Status.FAILED, fitting[0]
        best = HYPOTHESES[top.hypothesis]
        same = aliases[top.hypothesis]
        says = best.says + (f" (here the same as: {', '.join(same)})" if same else "")
        says += f"; G^2 = {top.g2:.1f} on {top.df} df vs {null.g2:.1f} as specified"
        if len(fitting) > 1:
            says += f"; also consistent: {', '.join(s.hypothesis for s in fitting[1:])}"
    else:
        status, top = Status.SUSPECT, ranking[0]
        says = (
            f"no single listed processing mismatch fits (closest: {top.hypothesis}, G^2 = {top.g2:.1f} on "
            f"{top.df} df; as specified {null.g2:.1f})"
        )
    data = {
        "diagnosis": says,
        "quantity": best.quantity if best else None,
        "hypothesis": best.name if best else None,
        "consistent": [s.hypothesis for s in fitting],
        "aliases": {k: v for k, v in aliases.items() if v},
        "ranking": [{"hypothesis": s.hypothesis, "g2": s.g2, "df": s.df, "pvalue": s.pvalue} for s in ranking],
        "sampling": {"target": target.params.as_dict(), "draft": draft.params.as_dict()},
    }
    return CheckResult("processing", Category.DISTRIBUTION, status, says, gate=False, data=data)
