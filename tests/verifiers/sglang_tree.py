"""CPU stand-ins for sgl-kernel's ``tree_speculative_sampling_target_only``, faithful to its layout.

Written from the Triton port of ``sgl-kernel/csrc/speculative/speculative_sampling.cuh`` (one
program per request, here vectorised over requests with numpy): walk the levels from the root,
at each level scan the siblings with one coin against the running sum of target probabilities,
write p(c) into ``draft_probs`` for every rejected sibling, and finally draw from
``relu(target_probs - draft_probs)`` at the last accepted node (plain ``target_probs`` when every
level was accepted). Outputs are written in place, as the kernel does.

``verify`` is the faithful one, with sgl-kernel's older signature (``draft_probs`` passed in, as in
``python/sgl_kernel/speculative.py`` at 6bfad8f1); ``verify_without_draft_probs`` the same with the
newer one (no ``draft_probs``, at 01fe7c22). The others each break one line:

* ``no_writeback``: rejected siblings are not written into ``draft_probs`` (the final token is
  drawn from p, a rejected sibling can come back: resampling from p);
* ``coin_not_reset``: the running sum is not reset after an acceptance, so the next level starts
  with the previous level's mass and accepts too often.
"""

import numpy as np


def _kernel(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
            draft_probs, threshold_single=1.0, threshold_acc=1.0, deterministic=True, *,
            writeback=True, reset=True):
    bs, n = candidates.shape
    num_spec = accept_index.shape[1]
    rows = np.arange(bs)
    cur_prob_step = np.zeros(bs, dtype=np.int64)
    prob_acc = np.zeros(bs, dtype=np.float32)
    coin = uniform_samples[:, 0].copy()
    last_idx = retrive_index[:, 0].copy()
    accept_index[:, 0] = last_idx
    num_acc = np.zeros(bs, dtype=np.int64)
    cur = np.zeros(bs, dtype=np.int64)
    walking = np.ones(bs, dtype=bool)
    for _level in range(1, num_spec):
        cur = np.where(walking, retrive_next_token[rows, cur], cur)
        accepted_level = np.zeros(bs, dtype=bool)
        for _sibling in range(n):
            act = walking & ~accepted_level & (cur != -1)
            if not act.any():
                break
            c = np.where(act, cur, 0)
            draft_index = retrive_index[rows, c]
            token = candidates[rows, c]
            p_single = target_probs[rows, cur_prob_step, token]
            prob_acc = np.where(act, prob_acc + p_single, prob_acc)
            ok = act & ((coin <= prob_acc / threshold_acc) | (p_single >= threshold_single))
            no = act & ~ok
            # accepted
            predicts[last_idx[ok]] = token[ok].astype(predicts.dtype)
            num_acc[ok] += 1
            accept_index[rows[ok], num_acc[ok]] = draft_index[ok]
            last_idx = np.where(ok, draft_index, last_idx)
            cur_prob_step = np.where(ok, c, cur_prob_step)
            coin = np.where(ok, uniform_samples[rows, c], coin)
            if reset:
                prob_acc = np.where(ok, 0.0, prob_acc).astype(np.float32)
            accepted_level |= ok
            # rejected: mask the token out of the residual, move to the next sibling
            if writeback:
                draft_probs[rows[no], cur_prob_step[no], token[no]] = p_single[no]
            cur = np.where(no, retrive_next_sibling[rows, c], cur)
        walking &= accepted_level
    accept_token_num[:] = num_acc
    all_accepted = num_acc == num_spec - 1
    tp = target_probs[rows, cur_prob_step]
    dp = draft_probs[rows, cur_prob_step]
    val = np.where(all_accepted[:, None], tp, np.maximum(tp - dp, 0.0))
    norm = val.sum(axis=1)
    cum = np.cumsum(val, axis=1)
    hits = cum > (uniform_samples_for_final_sampling * norm)[:, None]
    final = np.where(hits.any(axis=1), np.argmax(hits, axis=1), target_probs.shape[2] - 1)
    predicts[last_idx] = final.astype(predicts.dtype)


def verify(*args, **kwargs):
    """Faithful CPU port of the kernel."""
    _kernel(*args, **kwargs)


def verify_without_draft_probs(predicts, accept_index, accept_token_num, candidates, retrive_index,
                               retrive_next_token, retrive_next_sibling, uniform_samples,
                               uniform_samples_for_final_sampling, target_probs, threshold_single=1.0, threshold_acc=1.0,
                               deterministic=True):
    """The faithful port with sgl-kernel's newer signature (speculative.py at 01fe7c22): no draft_probs argument."""
    scratch = np.zeros_like(target_probs)
    _kernel(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, scratch,
            threshold_single, threshold_acc, deterministic)


def no_writeback(*args, **kwargs):
    """Rejected siblings are not masked out of the residual."""
    _kernel(*args, writeback=False, **kwargs)


def coin_not_reset(*args, **kwargs):
    """The running probability sum carries over from one level to the next."""
    _kernel(*args, reset=False, **kwargs)
