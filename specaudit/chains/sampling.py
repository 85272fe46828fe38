"""Vectorised categorical sampling shared by the simulator and the reference verifier."""

from __future__ import annotations

import numpy as np

#: From this many entries a row, rows are worked one by one (a Python loop over the batch) rather than by passes
#: over the whole batch: the inverse CDF is located by binary search per row (log V steps) rather than by
#: comparing every entry with the threshold, and :func:`token_after` reads its rows in place rather than copying
#: them into [B, V] temporaries. At large V the passes and copies, not the loop, are the cost (benchmarks/scale.py).
ROWWISE_FROM = 2048


def sample_rows(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draw one index per row of non-negative ``weights`` [n, V] by inverse CDF at uniforms ``u`` [n].

    Rows need not be normalised. A zero-weight index is never returned, whatever ``u`` in [0, 1)
    is, including 1 - 2**-53 where ``u * total`` can round up to ``total`` (vLLM #20531).
    """
    cum = _cumulative(weights)
    return _locate(weights, cum, u * cum[..., -1])


def _cumulative(weights: np.ndarray) -> np.ndarray:
    """Return the running sums of ``weights`` along the last axis, in float32 at least.

    float16 running sums near 0.5 step by as much as an entry: drawn in float16, a row's tokens
    sat at TV 0.1 off its own law.
    """
    return np.cumsum(weights, axis=-1, dtype=np.result_type(weights.dtype, np.float32))


def _locate(weights: np.ndarray, cum: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """Return, per row, the number of CDF entries <= its threshold, moved off trailing zero weights.

    The count is ``searchsorted(cum, threshold, side='right')``: the first index whose CDF exceeds
    the threshold, which has positive weight unless it is past the last one (``u * total`` rounded
    up to ``total``); those rows take the last index with positive weight.
    """
    v = weights.shape[-1]
    if cum.ndim == 2 and v >= ROWWISE_FROM:
        idx = np.fromiter((np.searchsorted(row, t, side="right") for row, t in zip(cum, threshold)),
                          dtype=np.int64, count=cum.shape[0])
    else:
        idx = (cum <= threshold[..., None]).sum(axis=-1)
    past = idx >= v
    if cum.ndim == 2:
        lands = np.minimum(idx, v - 1)
        past |= weights[np.arange(weights.shape[0]), lands] <= 0
        if past.any():  # rare: the threshold rounded to the total
            rows = np.flatnonzero(past)
            idx[rows] = v - 1 - np.argmax(weights[rows, ::-1] > 0, axis=-1)
        return idx
    last = v - 1 - np.argmax(weights[..., ::-1] > 0, axis=-1)
    return np.minimum(idx, last)


def final_token(target: np.ndarray, residual: np.ndarray | None, use_residual: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draw the token after the accepted drafts: from ``residual`` where ``use_residual``, else ``target``.

    A residual with no mass (p = q at the rejected position, reachable only through rounding)
    falls back to ``target``, never to NaN weights. ``residual`` None means K = 0. ``residual`` may
    be overwritten (rows drawn from ``target`` are copied into it).
    """
    if residual is None:
        return sample_rows(target, u)
    weights = residual
    weights[~use_residual] = target[~use_residual]  # rows copied, not a pass over the batch
    cum = _cumulative(weights)
    empty = cum[:, -1] <= 0
    if empty.any():  # the residual had no mass: the target's row
        weights[empty] = target[empty]
        cum[empty] = _cumulative(target[empty])
    return _locate(weights, cum, u * cum[:, -1])


def token_after(p: np.ndarray, q: np.ndarray | None, at: np.ndarray, use_residual: np.ndarray, u: np.ndarray,
                *, rowwise: bool | None = None) -> np.ndarray:
    """Draw the token after the accepted drafts of a chain: :func:`final_token` of rows read in place.

    Row ``b``'s target is ``p[b, at[b]]``; where ``use_residual[b]`` its weights are the residual
    ``max(0, p[b, at[b]] - q[b, min(at[b], K - 1)])`` (``q`` None: K = 0, no residual). The tokens are
    :func:`final_token`'s for the same uniforms below :data:`ROWWISE_FROM` entries a row. From
    there (or with ``rowwise=True``) the rows are worked one at a time through one row buffer, so
    the [B, V] copies of the target and residual rows are never made, and each row's inverse CDF is
    :func:`inverse_cdf`'s (block sums, no whole-row cumsum): the same law, and the same tokens
    wherever the sums are exact (a token may differ only where ``u * total`` lies within rounding
    of a CDF step). The floor of a large-V call is then the p and q it must read (benchmarks/scale.py).
    """
    batch, v = p.shape[0], p.shape[-1]
    rows = np.arange(batch)
    k = 0 if q is None else q.shape[1]
    if not (v >= ROWWISE_FROM if rowwise is None else rowwise):
        target = p[rows, at]
        if q is None or not k:
            return final_token(target, None, use_residual, u)
        with np.errstate(invalid="ignore"):  # NaN in a bad q row: its residual is not used
            residual = target - q[rows, np.minimum(at, k - 1)]
            np.maximum(residual, 0.0, out=residual)
        return final_token(target, residual, use_residual, u)
    kind = p.dtype if q is None or not k else np.result_type(p.dtype, q.dtype)  # final_token's weights
    weights = np.empty(v, dtype=kind)
    out = np.empty(batch, dtype=np.int64)
    for b in range(batch):
        target = p[b, at[b]]
        w = target
        if q is not None and k and use_residual[b]:
            w = weights
            with np.errstate(invalid="ignore"):
                np.subtract(target, q[b, min(at[b], k - 1)], out=w)
            np.maximum(w, 0.0, out=w)  # max(0, p - q)
        i = inverse_cdf(w, u[b])
        out[b] = inverse_cdf(target, u[b]) if i < 0 else i  # a residual with no mass: the target's row
    return out


#: :func:`inverse_cdf` sums a row in blocks of this many entries, then scans one block.
CDF_BLOCK = 256


def inverse_cdf(weights: np.ndarray, u: float) -> int:
    """Return the index whose CDF interval holds ``u * total`` for one row of non-negative ``weights``; -1 if no mass.

    The first index whose running sum exceeds ``u * total``, never one of zero weight: when the
    threshold rounds to the total, the last index with positive weight. The running sums are
    those of blocks of :data:`CDF_BLOCK` entries (one vectorised pass) and of the one block the
    threshold falls in, not a cumsum of the whole row (4 ns an entry, the cost of a large-V row):
    the law is that of ``weights / total`` to rounding; a token may differ from a whole-row
    cumsum's only where ``u * total`` lies within rounding of a CDF step.
    """
    v = weights.size
    full = v - v % CDF_BLOCK
    # sums in float64 whatever the weights' dtype: float16 running sums near 0.5 step by as much as an entry
    sums = np.add.reduce(weights[:full].reshape(-1, CDF_BLOCK), axis=1, dtype=np.float64)
    if full < v:
        sums = np.append(sums, weights[full:].sum(dtype=np.float64))
    ends = np.cumsum(sums)
    total = ends[-1]
    if not total > 0:
        return -1
    threshold = u * total
    j = int(np.searchsorted(ends, threshold, side="right"))
    if j < ends.size:
        lo = j * CDF_BLOCK
        block = weights[lo : lo + CDF_BLOCK]
        start = ends[j - 1] if j else 0.0
        i = int(np.searchsorted(start + np.cumsum(block, dtype=np.float64), threshold, side="right"))
        if i < block.size and block[i] > 0:
            return lo + i
        if sums[j] > 0:  # the threshold rounded past this block's running sums: its last positive weight
            return lo + block.size - 1 - int(np.argmax(block[::-1] > 0))
    return v - 1 - int(np.argmax(weights[::-1] > 0))
