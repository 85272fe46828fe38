"""Block verification (Sun et al. 2024, arXiv 2403.10444, Alg. 2) in the chain contract.

Token-wise (chain) verification accepts each draft with min(1, p/q) and stops at the first
rejection. Block verification judges the draft block jointly: it keeps a running weight

    P_0 = 1,  P_i = min(1, P_{i-1} p_i(x_i) / q_i(x_i))

and, with independent eta_i ~ U(0, 1), marks position i a success when eta_i <= h_i, where

    h_i = Z_i / (Z_i + 1 - P_i),  Z_i = sum_y max(P_i p_{i+1}(y) - q_{i+1}(y), 0)   (i < K; 1 if 0/0)
    h_K = P_K.

tau is the LAST success (0 if none), not the run of successes before the first failure. The
round emits x_1..x_tau and then Y ~ p_{K+1} when tau = K, else
Y ~ norm(max(P_tau p_{tau+1} - q_{tau+1}, 0)). The output law is the target's (Sun et al.,
Thm. 1), so a block verifier must pass every distribution check of a chain verifier; its
expected accepted count E[tau] = sum_i E_{x ~ q}[P_i] is never below the chain's
(notes/theory.md), so it fails the *chain* tokens/step reference and passes the block one
(scenarios with ``algorithm: block``).

Vectorised over the batch; the only Python loop runs over the K positions.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specaudit.chains.sampling import final_token
from specaudit.contract.chain import assemble, chain_inputs, draw_uniforms, row_generators
from specaudit.verifiers.reference import bad_rows, raise_bad_p


def _ratio(p_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    """Return p/q with q = 0 read as +inf where p > 0 and 0 where p = 0 (no division by zero)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(q_x > 0, p_x / np.where(q_x > 0, q_x, 1.0), np.where(p_x > 0, np.inf, 0.0))


@chain_inputs
def block_verify(
    draft: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_draft: np.ndarray,
    rng: np.random.Generator,
    *,
    stop: Literal["last", "first"] = "last",
    scale: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Run block verification; switches at their defaults are the reference, each other value one zoo bug."""
    batch: int
    batch, k = draft.shape
    rows = np.arange(batch)
    # The bad-row rule (specaudit.checks.bad_rows): a bad q row ends the block there, so its draft is not
    # accepted and, when every draft before it is kept, the token there is Y ~ p at that position (a block
    # of that length: lossless, Sun et al. Thm. 1 holds for any block length); a bad p row read raises.
    bad_q = (np.arange(k)[None, :] < num_draft[:, None]) & bad_rows(q)
    if bad_q.any():
        num_draft = np.where(bad_q.any(axis=1), np.argmax(bad_q, axis=1), num_draft)
    bad_p = (np.arange(k + 1)[None, :] <= num_draft[:, None]) & bad_rows(p)
    if bad_p.any():
        raise_bad_p(bad_p, p)
    eta, v = draw_uniforms(rng, num_draft, k)  # one Generator, or per-request generators (RowGenerators)
    weight = np.ones(batch)  # P_i
    tau = np.zeros(batch, dtype=np.int64)
    weight_tau = np.ones(batch)  # P_tau
    running = np.ones(batch, dtype=bool)  # for the first-failure bug: no failure seen yet
    for i in range(k):
        valid = i < num_draft
        x = np.where(valid, draft[:, i], 0)  # padding ids may be garbage: never index with them
        # P_i = min(1, P_{i-1} p/q); once 0 it stays 0 (0 * inf, a draft with q = 0 after one with p = 0, is 0, not NaN)
        grown = np.where(weight > 0, weight, 1.0) * _ratio(p[rows, i, x], q[rows, i, x])
        weight = np.where(valid, np.where(weight > 0, np.minimum(1.0, grown), 0.0), weight)
        last = i + 1 == num_draft
        # h_i needs the next position's laws; at the last draft it is P_K. Padding rows read
        # position i + 1 only through where(), which discards it (i + 1 <= num_draft there).
        nxt = min(i + 1, k - 1)
        z = np.maximum(weight[:, None] * p[:, i + 1] - q[:, nxt], 0.0).sum(axis=1)
        denom = z + (1.0 - weight)  # (z + 1) - P rounds z away: h = 1 - 2**-53 at P = 1, u = 1 - 2**-53 rejected
        h = np.where(denom > 0, z / np.where(denom > 0, denom, 1.0), 1.0)
        h = np.where(last, weight, h)
        success = valid & (eta[:, i] < h)
        if stop == "first":
            # Bug: tau is the run of successes before the first failure (the token-wise habit).
            success &= running
            running &= success | ~valid
        tau = np.where(success, i + 1, tau)
        weight_tau = np.where(success, weight, weight_tau)

    all_in = tau == num_draft
    target = p[rows, tau]  # the bonus position num_draft when every draft is kept
    residual = None
    if k:
        scaled = weight_tau[:, None] * target if scale else target  # bug when not scaled by P_tau
        residual = np.maximum(scaled - q[rows, np.minimum(tau, k - 1)], 0.0)
    # A residual with no mass has probability 0 (Sun et al., Lemma 2); final_token keeps rounding from NaN.
    token = final_token(target, residual, ~all_in, v)
    return assemble(draft, tau, token)


@row_generators
def verify(
    draft: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_draft: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify a batch of ragged draft blocks by block verification; return ``(out[B, K+1], n_out[B])``.

    Chain contract (:mod:`specaudit.contract.chain`). Row ``b`` has ``num_draft[b]`` valid drafts and its
    bonus position at ``p[b, num_draft[b]]``; nothing past it is read. Sun et al. 2024, Alg. 2.
    """
    return block_verify(draft, q, p, num_draft, rng)
