"""The reference verifier written in torch, for ``--adapter torch`` (Leviathan et al. 2023, Alg. 1).

Same rule as :mod:`specaudit.verifiers.reference`: draft ``x`` at position ``i`` is accepted when
``u * q[i, x] < p[i, x]``; at the first rejection the token is drawn from
``norm(max(0, p - q))`` (from ``p`` when that residual is all zero); if every valid draft is
accepted the bonus comes from ``p[num_draft]``. Vectorised over the batch; every draw comes from
``generator``; works in float64, float32 and on any device.

At large V a call's cost is memory: the final token's row is copied once per call into a
workspace this module keeps per thread, device and dtype (as an engine keeps its buffers: a fresh
[B, V] tensor is fresh pages to fault, 5x the copy itself on a 2-core VM), and its inverse CDF is
:func:`inverse_cdf`'s (block sums, then one block's running sums; no whole-row cumsum).

    specaudit run specaudit.adapters.torch_reference:verify --adapter torch --dtype float32
"""

from __future__ import annotations

import threading

import torch

#: :func:`inverse_cdf` sums rows in blocks of this many entries (as :data:`specaudit.chains.sampling.CDF_BLOCK`).
CDF_BLOCK = 256

_workspaces: dict[tuple, torch.Tensor] = {}


def _workspace(name: str, rows: int, like: torch.Tensor) -> torch.Tensor:
    """Return a [rows, V] tensor of ``like``'s dtype and device, reused across calls of this thread."""
    # an inference-mode tensor takes no in-place update outside inference mode: one workspace for each mode
    key = (name, threading.get_ident(), like.device, like.dtype, torch.is_inference_mode_enabled())
    size = rows * like.shape[-1]
    buf = _workspaces.get(key)
    if buf is None or buf.numel() < size:
        buf = _workspaces[key] = torch.empty(size, dtype=like.dtype, device=like.device)
    return buf[:size].view(rows, like.shape[-1])


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Return, per row of non-negative ``weights`` [n, V], the index whose CDF interval holds ``u * total``; -1: no mass.

    The first index whose running sum exceeds ``u * total``, never one of zero weight (where the
    threshold rounds to the total: the last index with positive weight). The running sums are those
    of blocks of :data:`CDF_BLOCK` entries (one pass, a strided view: no copy) and of the one block
    the threshold falls in: the law of ``weights / total`` to rounding.
    """
    weights = weights.contiguous()  # the block view below assumes unit stride along the row
    n, v = weights.shape
    device = weights.device
    full = v - v % CDF_BLOCK
    blocks = full // CDF_BLOCK
    sums = weights.as_strided((n, blocks, CDF_BLOCK), (weights.stride(0), CDF_BLOCK, 1)).sum(-1)
    if full < v:
        sums = torch.cat([sums, weights[:, full:].sum(-1, keepdim=True)], dim=1)
    ends = sums.cumsum(dim=1)
    total = ends[:, -1]
    threshold = (u * total)[:, None]
    j = torch.searchsorted(ends, threshold, right=True)[:, 0].clamp_(max=ends.shape[1] - 1)
    at = j[:, None] * CDF_BLOCK + torch.arange(CDF_BLOCK, device=device)[None, :]
    inside = at < v
    block = torch.where(inside, weights.gather(1, at.clamp(max=v - 1)), 0)
    start = torch.where(j > 0, ends.gather(1, (j - 1).clamp(min=0)[:, None])[:, 0], 0)
    i = torch.searchsorted(start[:, None] + block.cumsum(dim=1), threshold, right=True)[:, 0]
    lands = block.gather(1, i.clamp(max=CDF_BLOCK - 1)[:, None])[:, 0]
    token = j * CDF_BLOCK + i
    off = (i >= CDF_BLOCK) | ~(lands > 0)  # rounding put the threshold past a positive weight: the last positive
    if bool(off.any()):
        for r in torch.nonzero(off).reshape(-1).tolist():
            row = weights[r]
            positive = torch.nonzero(row > 0).reshape(-1)
            token[r] = positive[-1] if positive.numel() else -1
    return torch.where(total > 0, token, -1)


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
    if p.dtype != q.dtype:  # a float32 target with a float64 drafter (or the reverse): the residual in the wider type
        wide = torch.promote_types(p.dtype, q.dtype)
        p, q = p.to(wide), q.to(wide)
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
    weights = torch.index_select(p_rows, 0, target, out=_workspace("weights", batch, p))  # the residual is made in it
    if k:
        rej = torch.nonzero(rejected).reshape(-1)
        at = rej * k + n_acc[rej]  # q's row at the rejection (n_acc < num_draft <= K there)
        drawn = torch.index_select(q_rows, 0, at, out=_workspace("q", rej.numel(), q))
        weights.index_add_(0, rej, drawn, alpha=-1).clamp_(min=0)  # in place: p - q, then max(0, .)
    u_final = torch.rand(batch, generator=generator, device=device, dtype=p.dtype)
    token = inverse_cdf(weights, u_final)
    empty = token < 0  # p = q at the rejected position: sample from p
    if bool(empty.any()):
        again = torch.nonzero(empty).reshape(-1)
        token[again] = inverse_cdf(p_rows.index_select(0, target[again]), u_final[again])

    keep = positions[None, :] < n_acc[:, None]
    out[:, :k] = torch.where(keep, draft, -1)
    out[rows, n_acc] = token
    return out, n_acc + 1
