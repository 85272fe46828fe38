"""A torch-contract verifier with a residual bug, for ``--adapter torch``."""

from __future__ import annotations

import torch

from specaudit.adapters.torch_reference import inverse_cdf


def resample_from_p(draft, q, p, num_draft, generator):
    """At a rejection, draws from p instead of norm(max(p - q, 0)): the seed's common bug."""
    batch, k = draft.shape
    out = torch.full((batch, k + 1), -1, dtype=torch.int64)
    rows = torch.arange(batch)
    valid = torch.arange(k)[None, :] < num_draft[:, None]
    safe = torch.where(valid, draft, 0)
    u = torch.rand((batch, k), generator=generator, dtype=p.dtype)
    p_x = p[:, :k].gather(2, safe[..., None])[..., 0]
    q_x = q.gather(2, safe[..., None])[..., 0]
    n_acc = (valid & (u * q_x < p_x)).long().cumprod(1).sum(1)
    token = inverse_cdf(p[rows, n_acc], torch.rand(batch, generator=generator, dtype=p.dtype))
    out[:, :k] = torch.where(torch.arange(k)[None, :] < n_acc[:, None], draft, -1)
    out[rows, n_acc] = token
    return out, n_acc + 1

