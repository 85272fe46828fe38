"""CPU verifiers in vLLM v1's packed layout (``rejection_sample``'s signature), for ``--adapter vllm``.

Written after vllm/v1/sample/rejection_sampler.py: per-request uniforms drawn with each request's
``torch.Generator`` (``uniform_(generator=...)``), recovered tokens by the exponential race
``argmax(max(p - q, 0) / E)`` with one ``E ~ Exp(1)`` vector per request, output int32
[B, max_spec_len + 1] pre-filled with -1, and vLLM's own accept test
``draft_prob > 0 and target_prob / draft_prob >= uniform`` (it accepts a draft of target
probability 0 at a uniform of exactly 0: the boundary finding). ``rejection_sample`` has the
signature of vLLM >= 0.16 (sixth argument ``target_logits``, softmaxed inside in float32, vLLM PR
#32852); ``rejection_sample_v015`` the one before (``target_probs``). ``rejection_sample_strict``
is the lossless control (``u * q < p``); the others carry one layout bug each.
"""

from __future__ import annotations

import torch

PLACEHOLDER_TOKEN_ID = -1


def _starts(cu: torch.Tensor) -> list[int]:
    """Request b's drafts are [cu[b-1], cu[b]): cu is an inclusive cumsum with no leading 0."""
    ends = cu.tolist()
    return [0] + ends[:-1]


def _rejection_sample(
    draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_probs,
    bonus_token_ids, sampling_metadata, *, bounds=None, accept=None, logits=False,
):
    if logits:  # vLLM >= 0.16: rejection_sample takes the target logits and softmaxes them in float32
        target_probs = target_probs.softmax(dim=-1, dtype=torch.float32)
    assert draft_token_ids.ndim == 1 and target_probs.ndim == 2 and cu_num_draft_tokens.ndim == 1
    batch = len(num_draft_tokens)
    num_tokens, vocab = target_probs.shape
    device = target_probs.device
    out = torch.full((batch, max_spec_len + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device)
    gens = sampling_metadata.generators
    # uniforms: one per draft token, from the request's own generator (vLLM generate_uniform_probs)
    uniform = torch.rand(num_tokens, dtype=torch.float32, device=device)
    starts = _starts(cu_num_draft_tokens)
    ends = cu_num_draft_tokens.tolist()
    if bounds is not None:
        starts, ends = bounds(cu_num_draft_tokens, num_tokens)
    for b, n in enumerate(num_draft_tokens):
        if n and b in gens:
            uniform[starts[b] : starts[b] + n].uniform_(generator=gens[b])
    # one exponential vector per request (vLLM sample_recovered_tokens)
    race = torch.empty((batch, vocab), dtype=torch.float32, device=device).exponential_()
    for b, g in gens.items():
        if num_draft_tokens[b] > 0:
            race[b].exponential_(generator=g)
    accept = accept or vllm_accepts
    for b in range(batch):
        start, end = starts[b], ends[b]
        rejected = False
        for pos in range(end - start):
            i = start + pos
            x = int(draft_token_ids[i])
            dp = 1.0 if draft_probs is None else float(draft_probs[i, x])
            tp = float(target_probs[i, x])
            if accept(float(uniform[i]), dp, tp):
                out[b, pos] = x
                continue
            if draft_probs is None:
                resid = target_probs[i].clone()
                resid[x] = 0
            else:
                resid = (target_probs[i] - draft_probs[i]).clamp(min=0)
            score = torch.where(resid > 0, resid / race[b], torch.tensor(-float("inf")))
            out[b, pos] = int(score.argmax())
            rejected = True
            break
        if not rejected:
            out[b, end - start] = int(bonus_token_ids[b, 0])
    return out


def vllm_accepts(u: float, dp: float, tp: float) -> bool:
    """vLLM v1's accept test (rejection_random_sample_kernel): ``dp > 0 and tp / dp >= u``."""
    return dp > 0 and tp / dp >= u


def strict_accepts(u: float, dp: float, tp: float) -> bool:
    """The lossless accept test ``u * q < p``: never accepts a draft of target probability 0."""
    return u * dp < tp


def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                     target_logits, bonus_token_ids, sampling_metadata):
    """As released from vLLM 0.16 on: takes target logits; lossless in law, ``>=`` at the boundary."""
    return _rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                             target_logits, bonus_token_ids, sampling_metadata, logits=True)


def rejection_sample_v015(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                          target_probs, bonus_token_ids, sampling_metadata):
    """As released up to vLLM 0.15: takes target probabilities; ``>=`` at the boundary."""
    return _rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                             target_probs, bonus_token_ids, sampling_metadata)


def rejection_sample_strict(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                            target_logits, bonus_token_ids, sampling_metadata):
    """The >= 0.16 layout with the lossless accept test ``u * q < p``: passes every check."""
    return _rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                             target_logits, bonus_token_ids, sampling_metadata, logits=True, accept=strict_accepts)


def _exclusive(cu, num_tokens):
    c = cu.tolist()
    return c, c[1:] + [num_tokens]


def _drop_last(cu, num_tokens):
    c = cu.tolist()
    starts = [0] + c[:-1]
    return starts, [max(s, e - 1) for s, e in zip(starts, c)]


def cu_exclusive(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_logits,
                 bonus_token_ids, sampling_metadata):
    """Off by one: reads cu_num_draft_tokens as exclusive starts (as if it had a leading 0)."""
    return _rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                             target_logits, bonus_token_ids, sampling_metadata, logits=True, accept=strict_accepts,
                             bounds=_exclusive)


def cu_drop_last(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_logits,
                 bonus_token_ids, sampling_metadata):
    """Off by one: request b's drafts end at cu[b] - 1, so its last draft is never verified."""
    return _rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                             target_logits, bonus_token_ids, sampling_metadata, logits=True, accept=strict_accepts,
                             bounds=_drop_last)
