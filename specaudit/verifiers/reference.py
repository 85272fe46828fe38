"""The reference verifier: chain speculative sampling written from the rule.

Leviathan et al. 2023, Alg. 1; Chen et al. 2023. Vectorised over the batch, no per-row loop.

Bad input rows follow the bad-row rule of :mod:`specaudit.checks.bad_rows` (a row with a NaN or
+-inf entry, or no positive mass): a bad p row it reads raises ValueError naming the row (there is
no law to draw from); a bad q row makes the draft there rejected and the token there is drawn
from p itself, which keeps the output law (vLLM #41834: an all-NaN draft row recovered token 0,
the rejected draft). Rows past ``num_draft`` are padding and are never read, bad or not.

It takes per-request generators (:func:`specaudit.contract.chain.row_generators`): a seeded row's
uniforms come from its own generator, ``num_draft[b] + 1`` of them
(:func:`specaudit.contract.chain.draw_uniforms`, as vLLM's ``generate_uniform_probs``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.chains.sampling import ROWWISE_FROM, token_after
from specaudit.contract.chain import assemble, chain_inputs, draw_uniforms, row_generators


@row_generators
@chain_inputs
def verify(
    draft: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_draft: np.ndarray,
    rng: np.random.Generator,
    *,
    draw: Callable[[Any, np.ndarray, int], tuple[np.ndarray, np.ndarray]] = draw_uniforms,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify a batch of ragged draft chains; return ``(out[B, K+1], n_out[B])``.

    Row ``b`` has ``num_draft[b]`` valid drafts. Draft ``x`` at position ``i`` is accepted when
    ``u * q[b, i, x] < p[b, i, x]`` (probability min(1, p/q), never for p(x) = 0, no division).
    At the first rejection the token is drawn from norm(max(0, p - q)); if every valid draft is
    accepted, a bonus token is drawn from ``p[b, num_draft[b]]``. ``out`` is padded with -1 and
    ``n_out = accepted + 1``. Everything past ``num_draft[b]`` is padding and is never read.

    Raises ValueError naming the rows when a p row it reads holds NaN / inf or no mass; a q row
    like that is not trusted: the draft there is rejected and the token drawn from p (lossless).
    ``draw`` makes the round's uniforms (:func:`specaudit.contract.chain.draw_uniforms`; the seeding
    mutants of :mod:`specaudit.verifiers.zoo.seeded` swap it).
    """
    batch: int
    batch, k = draft.shape
    rows = np.arange(batch)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    safe = np.where(valid, draft, 0)  # padding ids may be garbage: never index with them
    bad_p = bad_rows(p, num_draft + 1)  # the rows it reads: positions 0..num_draft
    if bad_p.any():
        raise_bad_p(bad_p, p)
    bad_q = bad_rows(q, num_draft)  # not trusted: the draft there is rejected and the token drawn from p
    u, v = draw(rng, num_draft, k)  # one Generator, or per-request generators (RowGenerators)
    p_x = np.take_along_axis(p[:, :k], safe[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(q, safe[..., None], axis=2)[..., 0]
    accepted = valid & (u * q_x < p_x) & ~bad_q
    n_acc = np.cumprod(accepted, axis=1).sum(axis=1)  # run length before the first rejection
    rejected = n_acc < num_draft

    if k:
        rejected &= ~bad_q[rows, np.minimum(n_acc, k - 1)]  # a bad q row: draw from p itself, not the residual
    # the target p[b, n_acc] (the bonus position num_draft when nothing was rejected), or its residual
    token = token_after(p, q, n_acc, rejected, v)
    return assemble(draft, n_acc, token)


def bad_rows(rows: np.ndarray, upto: np.ndarray | None = None) -> np.ndarray:
    """Return where a probability row (last axis) holds NaN or +-inf, or no positive mass (one pass: the row sum).

    ``rows`` [B, J, V]; ``upto`` [B]: only positions ``j < upto[b]`` are read (the rest is padding,
    never read, reported good). From :data:`specaudit.chains.sampling.ROWWISE_FROM` entries a row the
    read rows are summed batch row by batch row, so padding costs nothing; below it one pass over all.
    """
    if upto is None:
        with np.errstate(invalid="ignore", over="ignore"):
            total = np.einsum("...v->...", rows)  # NaN / inf propagate; 3-4x faster than sum(axis=-1) at small V
        return ~(np.isfinite(total) & (total > 0))
    read = np.arange(rows.shape[1])[None, :] < upto[:, None]
    if rows.shape[-1] < ROWWISE_FROM:
        return read & bad_rows(rows)
    total = np.ones(read.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        for b, n in enumerate(np.minimum(upto, rows.shape[1]).tolist()):
            if n > 0:
                total[b, :n] = np.einsum("jv->j", rows[b, :n])
    return read & ~(np.isfinite(total) & (total > 0))


def raise_bad_p(bad: np.ndarray, p: np.ndarray) -> None:
    """Raise ValueError naming the bad p rows a verifier read (the bad-row rule: no law to draw from)."""
    raise ValueError(f"bad probability rows in p (NaN, inf or no mass): {where_bad(bad, p, 'p')}; a verifier has no "
                     "law to draw these rows' tokens from")


def where_bad(bad: np.ndarray, rows: np.ndarray, name: str, most: int = 4) -> str:
    """Name the first bad rows as ``row b (p[b, j]: all NaN)`` (``name`` ending in ``logits``: -inf entries are mass 0)."""
    found = np.argwhere(bad)
    parts = []
    for b, j in found[:most].tolist():
        row = rows[b, j]
        what = ("all NaN" if np.isnan(row).all() else "NaN" if np.isnan(row).any() else "inf" if np.isposinf(row).any()
                else "-inf" if np.isneginf(row).any() and not name.endswith("logits") else "no mass")
        parts.append(f"row {b} ({name}[{b}, {j}]: {what})")
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return ", ".join(parts) + more
