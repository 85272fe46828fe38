"""Broken verifiers for the exact checks (each breaks one exact property on purpose)."""

import time

import numpy as np

from specaudit.chains.sampling import final_token
from specaudit.contract.chain import assemble
from specaudit.verifiers.reference import verify as _reference


def mutates_p(draft, q, p, num_draft, rng):
    """Correct output, then zeroes the target rows it used in place (vllm-ascend PR #2881)."""
    out, n_out = _reference(draft, q, p, num_draft, rng)
    p[np.arange(p.shape[0]), n_out - 1] = 0.0
    return out, n_out


def ignores_seed(draft, q, p, num_draft, rng):
    """Draws from a fresh, unseeded generator instead of rng (vLLM #6038 class)."""
    return _reference(draft, q, p, num_draft, np.random.default_rng())


def fixed_seed(draft, q, p, num_draft, rng):
    """Deterministic: its own generator with a constant seed, never the rng it is given."""
    return _reference(draft, q, p, num_draft, np.random.default_rng(1234))


def _accepted_run(draft, q, p, num_draft, u, accept):
    """Return (n_acc, rows) for the acceptance rule ``accept(u, p_x, q_x, valid)``."""
    k = draft.shape[1]
    valid = np.arange(k)[None, :] < num_draft[:, None]
    safe = np.where(valid, draft, 0)
    p_x = np.take_along_axis(p[:, :k], safe[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(q, safe[..., None], axis=2)[..., 0]
    return np.cumprod(accept(u, p_x, q_x, valid), axis=1).sum(axis=1), np.arange(draft.shape[0])


def float32_ratio(draft, q, p, num_draft, rng):
    """Accept test u < p/q with u rounded to float32: u = 1 - 2**-53 becomes 1.0 and p = q is rejected."""
    batch, k = draft.shape
    if batch == 0:
        return np.full((0, k + 1), -1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    u = rng.random((batch, k)).astype(np.float32)  # torch.rand's default dtype

    def accept(u, p_x, q_x, valid):
        with np.errstate(divide="ignore", invalid="ignore"):
            return valid & (u < np.where(q_x > 0, p_x / q_x, np.inf))

    n_acc, rows = _accepted_run(draft, q, p, num_draft, u, accept)
    target = p[rows, n_acc]
    resid = np.maximum(target - q[rows, np.minimum(n_acc, k - 1)], 0.0) if k else None
    return assemble(draft, n_acc, final_token(target, resid, n_acc < num_draft, rng.random(batch)))


def swapped_residual(draft, q, p, num_draft, rng):
    """Residual norm(max(q - p, 0)) instead of norm(max(p - q, 0)) (Chen et al. swap p and q)."""
    batch, k = draft.shape
    if batch == 0:
        return np.full((0, k + 1), -1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    u = rng.random((batch, k))
    n_acc, rows = _accepted_run(draft, q, p, num_draft, u, lambda u, p_x, q_x, valid: valid & (u * q_x < p_x))
    target = p[rows, n_acc]
    resid = np.maximum(q[rows, np.minimum(n_acc, k - 1)] - target, 0.0) if k else None  # the bug: q - p
    return assemble(draft, n_acc, final_token(target, resid, n_acc < num_draft, rng.random(batch)))


def empty_batch_wrong_shape(draft, q, p, num_draft, rng):
    """Returns out of shape (0,) for an empty batch."""
    if draft.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return _reference(draft, q, p, num_draft, rng)


def k0_crash(draft, q, p, num_draft, rng):
    """Reads q[:, 0] unconditionally: IndexError when K = 0."""
    _ = q[:, 0]
    return _reference(draft, q, p, num_draft, rng)


def zero_drafts_from_next(draft, q, p, num_draft, rng):
    """Rows with no drafts draw their token from p[:, 1] (padding) instead of p[:, 0]."""
    out, n_out = _reference(draft, q, p, num_draft, rng)
    none = num_draft == 0
    if none.any() and p.shape[1] > 1:
        from specaudit.chains.sampling import sample_rows

        out[none, 0] = sample_rows(p[none, 1], rng.random(int(none.sum())))
    return out, n_out


def hangs(draft, q, p, num_draft, rng):
    """Spins forever in Python on vocab 8 (peaked-v8, corners); correct elsewhere."""
    if p.shape[-1] == 8:
        while True:
            pass
    return _reference(draft, q, p, num_draft, rng)


def sleeps(draft, q, p, num_draft, rng):
    """Sleeps a long time on vocab 8; correct elsewhere (for Ctrl-C tests)."""
    if p.shape[-1] == 8:
        time.sleep(60)
    return _reference(draft, q, p, num_draft, rng)


def swallows_timeout(draft, q, p, num_draft, rng):
    """Hangs on vocab 8 and swallows every exception raised into it, for a few seconds."""
    if p.shape[-1] == 8:
        end = time.monotonic() + 4.0
        while time.monotonic() < end:
            try:
                time.sleep(0.05)
            except Exception:  # noqa: BLE001 - the bug: swallows specaudit's timeout
                pass
    return _reference(draft, q, p, num_draft, rng)


def greedy_tie_last(draft, q, p, num_draft, rng):
    """Temperature-0 verifier whose argmax breaks ties towards the last index."""
    flipped = p[..., ::-1]
    top = p.shape[-1] - 1 - np.argmax(flipped, axis=2)
    batch, k = draft.shape
    out = np.full((batch, k + 1), -1, dtype=np.int64)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    n_acc = np.cumprod(valid & (draft == top[:, :k]), axis=1).sum(axis=1)
    out[:, :k] = np.where(np.arange(k)[None, :] < n_acc[:, None], draft, -1)
    out[np.arange(batch), n_acc] = top[np.arange(batch), n_acc]
    return out, n_acc + 1


def greedy_loop(draft, q, p, num_draft, rng):
    """An independent temperature-0 verifier: a per-row loop with max() and list.index (first max)."""
    batch, k = draft.shape
    out = -np.ones((batch, k + 1), dtype=np.int64)
    n_out = np.zeros(batch, dtype=np.int64)
    for b in range(batch):
        emitted = []
        for i in range(int(num_draft[b]) + 1):
            row = p[b, i].tolist()
            best = row.index(max(row))
            if i < num_draft[b] and draft[b, i] == best:
                emitted.append(best)
                continue
            emitted.append(best)
            break
        out[b, : len(emitted)] = emitted
        n_out[b] = len(emitted)
    return out, n_out



def small_batch_accepts_all(draft, q, p, num_draft, rng):
    """Below 16 rows (a decode step's batch) every draft is accepted and the bonus drawn from p: a small-batch kernel bug."""
    if not 0 < draft.shape[0] < 16:
        return _reference(draft, q, p, num_draft, rng)
    rows = np.arange(draft.shape[0])
    token = final_token(p[rows, num_draft], None, np.zeros(len(rows), dtype=bool), rng.random(len(rows)))
    return assemble(draft, num_draft.copy(), token)


def small_batch_rejects_all(draft, q, p, num_draft, rng):
    """Below 16 rows every draft is rejected and the token drawn from p: lossless, but not the chain rule's run."""
    if not 0 < draft.shape[0] < 16:
        return _reference(draft, q, p, num_draft, rng)
    rows = np.arange(draft.shape[0])
    token = final_token(p[rows, 0], None, np.zeros(len(rows), dtype=bool), rng.random(len(rows)))
    return assemble(draft, np.zeros(len(rows), dtype=np.int64), token)


def digest_seeded(draft, q, p, num_draft, rng):
    """Lossless per call, but its generator is seeded from rng and a digest of p's bytes: same inputs and seed give
    the same output, and inputs a few ulps apart (another tensor-parallel rank's logits) give another (replicas).
    Only the valid positions enter the digest, so padding-independence holds."""
    import zlib

    valid = b"".join(np.ascontiguousarray(p[b, : int(n) + 1]).tobytes() for b, n in enumerate(num_draft))
    own = np.random.default_rng([int(rng.integers(2**32)), zlib.crc32(valid)])  # the padding is not read
    return _reference(draft, q, p, num_draft, own)
