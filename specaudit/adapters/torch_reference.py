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


def sample_rows(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draw one index per row of non-negative ``weights`` [n, V] by inverse CDF; never a zero-weight index."""
    cum = weights.cumsum(dim=-1)
    idx = (cum <= (u * cum[:, -1])[:, None]).sum(dim=-1)
    vocab = weights.shape[-1]
    last = vocab - 1 - (weights.flip(-1) > 0).to(torch.int8).argmax(dim=-1)
    return torch.minimum(idx, last)


def verify(
    draft: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    num_draft: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a batch of ragged draft chains on torch tensors; return ``(out[B, K+1], n_out[B])``."""
    batch, k = draft.shape
    device = draft.device
    out = torch.full((batch, k + 1), -1, dtype=torch.int64, device=device)
    if batch == 0:
        return out, torch.zeros(0, dtype=torch.int64, device=device)
    rows = torch.arange(batch, device=device)
    positions = torch.arange(k, device=device)
    valid = positions[None, :] < num_draft[:, None]
    safe = torch.where(valid, draft, 0)  # padding ids may be garbage: never index with them
    u = torch.rand((batch, k), generator=generator, device=device, dtype=p.dtype)
    p_x = p[:, :k].gather(2, safe[..., None])[..., 0]
    q_x = q.gather(2, safe[..., None])[..., 0]
    accepted = valid & (u * q_x < p_x)
    n_acc = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)
    rejected = n_acc < num_draft

    target = p[rows, n_acc]
    if k:
        at = n_acc.clamp(max=k - 1)
        residual = (target - q[rows, at]).clamp(min=0)
        weights = torch.where(rejected[:, None], residual, target)
    else:
        weights = target
    empty = weights.sum(dim=1) <= 0  # p = q at the rejected position: sample from p
    weights = torch.where(empty[:, None], target, weights)
    token = sample_rows(weights, torch.rand(batch, generator=generator, device=device, dtype=p.dtype))

    keep = positions[None, :] < n_acc[:, None]
    out[:, :k] = torch.where(keep, draft, -1)
    out[rows, n_acc] = token
    return out, n_acc + 1
