"""The reference verifier written in torch, for ``--adapter torch`` (Leviathan et al. 2023, Alg. 1).

Same rule as :mod:`specaudit.verifiers.reference`: draft ``x`` at position ``i`` is accepted when
``u * q[i, x] < p[i, x]``; at the first rejection the token is drawn from
``norm(max(0, p - q))`` (from ``p`` when that residual is all zero); if every valid draft is
accepted the bonus comes from ``p[num_draft]``. Vectorised over the batch; every draw comes from
``generator``; works in float64, float32 and on any device.

    specaudit run specaudit.adapters.torch_reference:verify --adapter torch --dtype float32
"""

from __future__ import annotations

import torch


def sample_rows(weights: torch.Tensor, u: torch.Tensor, cum: torch.Tensor | None = None) -> torch.Tensor:
    """Draw one index per row of non-negative ``weights`` [n, V] by inverse CDF; never a zero-weight index.

    ``cum``: the rows' cumulative sums, when already at hand. The index is the first ``j`` with
    ``cum[j] > u * total`` (so ``weights[j] > 0``), capped at the first ``j`` with ``cum[j] >= total``
    (a positive weight too) for a ``u * total`` that rounding put at the total.
    """
    cum = weights.cumsum(dim=-1) if cum is None else cum
    total = cum[:, -1:].contiguous()
    idx = torch.searchsorted(cum, u[:, None] * total, right=True)
    last = torch.searchsorted(cum, total)
    return torch.minimum(idx, last)[:, 0]


def verify(
    draft: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    num_draft: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a batch of ragged draft chains on torch tensors; return ``(out[B, K+1], n_out[B])``."""
    batch, k = draft.shape
    vocab = p.shape[-1]
    device = draft.device
    out = torch.full((batch, k + 1), -1, dtype=torch.int64, device=device)
    if batch == 0:
        return out, torch.zeros(0, dtype=torch.int64, device=device)
    rows = torch.arange(batch, device=device)
    positions = torch.arange(k, device=device)
    valid = positions[None, :] < num_draft[:, None]
    safe = torch.where(valid, draft, 0)  # padding ids may be garbage: never index with them
    u = torch.rand((batch, k), generator=generator, device=device, dtype=p.dtype)
    p_rows, q_rows = p.reshape(-1, vocab), q.reshape(-1, vocab)  # [B*(K+1), V] and [B*K, V]: one row per position
    # p[b, i, x] and q[b, i, x] of the drafts, read one entry each (no [B, K, V] temporary)
    p_x = p_rows.reshape(-1).take((rows[:, None] * (k + 1) + positions[None, :]) * vocab + safe)
    q_x = q_rows.reshape(-1).take((rows[:, None] * k + positions[None, :]) * vocab + safe)
    accepted = valid & (u * q_x < p_x)
    n_acc = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)
    rejected = n_acc < num_draft

    target = rows * (k + 1) + n_acc  # p's row at the first rejection, or the bonus row num_draft
    weights = p_rows.index_select(0, target)  # a copy: the residual is made in it
    if k:
        rej = torch.nonzero(rejected).reshape(-1)
        at = rej * k + n_acc[rej]  # q's row at the rejection (n_acc < num_draft <= K there)
        weights.index_add_(0, rej, q_rows.index_select(0, at), alpha=-1).clamp_(min=0)  # in place: p - q, then max(0, .)
    cum = weights.cumsum_(dim=1)  # weights are not needed past their cumulative sums
    empty = cum[:, -1] <= 0  # p = q at the rejected position: sample from p
    if bool(empty.any()):
        cum = torch.where(empty[:, None], p_rows.index_select(0, target).cumsum(dim=1), cum)
    token = sample_rows(cum, torch.rand(batch, generator=generator, device=device, dtype=p.dtype), cum)

    keep = positions[None, :] < n_acc[:, None]
    out[:, :k] = torch.where(keep, draft, -1)
    out[rows, n_acc] = token
    return out, n_acc + 1
