"""A correct verifier written differently from the reference: a per-row loop with division,
``rng.choice`` sampling, and an explicit residual. Slow, but independent of the reference."""

import numpy as np


def verify(draft, q, p, num_draft, rng):
    batch, k = draft.shape
    vocab = p.shape[-1]
    out = -np.ones((batch, k + 1), dtype=np.int64)
    n_out = np.zeros(batch, dtype=np.int64)
    for b in range(batch):
        j = int(num_draft[b])
        emitted = []
        for i in range(j):
            x = int(draft[b, i])
            ratio = p[b, i, x] / q[b, i, x] if q[b, i, x] > 0 else np.inf
            if rng.uniform() < min(1.0, ratio):
                emitted.append(x)
                continue
            residual = np.clip(p[b, i] - q[b, i], 0.0, None)
            total = residual.sum()
            law = residual / total if total > 0 else p[b, i]
            emitted.append(int(rng.choice(vocab, p=law / law.sum())))
            break
        else:
            bonus = p[b, j]
            emitted.append(int(rng.choice(vocab, p=bonus / bonus.sum())))
        out[b, : len(emitted)] = emitted
        n_out[b] = len(emitted)
    return out, n_out
