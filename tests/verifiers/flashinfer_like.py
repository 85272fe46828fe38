"""CPU verifiers in FlashInfer's ``chain_speculative_sampling`` layout, for ``--adapter flashinfer``.

Fixed n per batch, output int32 [B, n+1] padded with -1, counters ``accepted`` (each draft's
own test, counted independently) and ``emitted`` (the accepted prefix) added to in place; draws
from per-row ``seed``/``offset`` tensors or ``generator`` (``uniform_samples`` in the old API). ``chain_speculative_sampling`` is
correct; the others carry one bug each.
"""

from __future__ import annotations

import numpy as np
import torch


def _sample(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cum = weights.cumsum(-1)
    idx = (cum <= (u * cum[:, -1])[:, None]).sum(-1)
    last = weights.shape[-1] - 1 - (weights.flip(-1) > 0).to(torch.int8).argmax(-1)
    return torch.minimum(idx, last)


def _chain(draft_probs, draft_token_ids, uniform, target_probs, acc, emi, *, stride_bug=False, overwrite=False,
           overcount=False):
    batch, n, vocab = draft_probs.shape
    ids = draft_token_ids.long()
    rows = torch.arange(batch)
    target = target_probs.reshape(batch, n + 1, vocab)
    if stride_bug:  # row b's position i read at flat row b*n + i: a stride of n, not n + 1
        target = target_probs.reshape(-1, vocab)[: batch * n].reshape(batch, n, vocab)
        target = torch.cat([target, target_probs[:, n : n + 1]], dim=1)
    q_x = draft_probs.gather(2, ids[..., None])[..., 0]
    p_x = target[:, :n].gather(2, ids[..., None])[..., 0]
    passed = uniform[:, :n] * q_x < p_x
    emitted = passed.int().cumprod(1).sum(1)
    at = emitted.clamp(max=max(n - 1, 0))
    final = target[rows, emitted]
    if n:
        resid = (final - draft_probs[rows, at]).clamp(min=0)
        use = (emitted < n)[:, None] & (resid.sum(-1, keepdim=True) > 0)  # p = q: all-zero residual, use p
        final = torch.where(use, resid, final)
    token = _sample(final, uniform[:, n])
    out = torch.full((batch, n + 1), -1, dtype=torch.int32)
    keep = torch.arange(n)[None, :] < emitted[:, None]
    out[:, :n] = torch.where(keep, ids, -1).int()
    out[rows, emitted] = token.int()
    got_acc = passed.int().sum(1).int()
    got_emi = (got_acc if overcount else emitted).int()
    if overwrite:
        acc.copy_(got_acc)
        emi.copy_(got_emi)
    else:
        acc.add_(got_acc)
        emi.add_(got_emi)
    return out, acc, emi


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num=None,
                               maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None,
                               seed=None, offset=None):
    """Correct, current API: per-row ``seed``/``offset`` tensors when given (as flashinfer-python 0.7.4), else ``generator``."""
    batch, n, _ = draft_probs.shape
    if seed is not None and offset is not None:  # one Philox stream per row from its seed and offset, as the kernel
        rows = [np.random.Generator(np.random.Philox(key=int(s), counter=int(o))).random(n + 1, dtype=np.float32)
                for s, o in zip(seed.tolist(), offset.tolist())]
        u = torch.from_numpy(np.stack(rows) if rows else np.zeros((0, n + 1), np.float32))
    else:
        u = torch.rand((batch, n + 1), generator=generator, dtype=torch.float32)
    acc = maybe_output_accepted_token_num if maybe_output_accepted_token_num is not None else torch.zeros(batch, dtype=torch.int32)
    emi = maybe_output_emitted_draft_token_num if maybe_output_emitted_draft_token_num is not None else torch.zeros(batch, dtype=torch.int32)
    return _chain(draft_probs, draft_token_ids, u, target_probs, acc, emi)


def chain_uniform_samples(draft_probs, draft_token_ids, uniform_samples, target_probs,
                          maybe_output_accepted_token_num=None, maybe_output_emitted_token_num=None, deterministic=True):
    """Correct, old API (explicit uniform_samples[B, n+1]); returns the tokens only."""
    out, _, _ = _chain(draft_probs, draft_token_ids, uniform_samples, target_probs,
                       maybe_output_accepted_token_num, maybe_output_emitted_token_num)
    return out


def stride_bug(draft_probs, draft_token_ids, target_probs, acc, emi, deterministic=True, generator=None):
    """Reads target_probs with a row stride of n instead of n + 1."""
    batch, n, _ = draft_probs.shape
    u = torch.rand((batch, n + 1), generator=generator, dtype=torch.float32)
    return _chain(draft_probs, draft_token_ids, u, target_probs, acc, emi, stride_bug=True)


def counters_overwrite(draft_probs, draft_token_ids, target_probs, acc, emi, deterministic=True, generator=None):
    """Overwrites the counters instead of adding to them."""
    batch, n, _ = draft_probs.shape
    u = torch.rand((batch, n + 1), generator=generator, dtype=torch.float32)
    return _chain(draft_probs, draft_token_ids, u, target_probs, acc, emi, overwrite=True)


def emitted_overcount(draft_probs, draft_token_ids, target_probs, acc, emi, deterministic=True, generator=None):
    """Counts every passing draft as emitted, past the first rejection (flashinfer #879)."""
    batch, n, _ = draft_probs.shape
    u = torch.rand((batch, n + 1), generator=generator, dtype=torch.float32)
    return _chain(draft_probs, draft_token_ids, u, target_probs, acc, emi, overcount=True)
