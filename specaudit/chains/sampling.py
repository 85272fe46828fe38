"""Vectorised categorical sampling shared by the simulator and the reference verifier."""

from __future__ import annotations

import numpy as np

#: From this many entries a row, the inverse CDF is located by binary search per row (a Python loop of
#: log V steps each) rather than by comparing every entry with the threshold (a pass over the batch):
#: at large V the passes, not the loop, are the cost (benchmarks/scale.py).
SEARCH_FROM = 2048


def sample_rows(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draw one index per row of non-negative ``weights`` [n, V] by inverse CDF at uniforms ``u`` [n].

    Rows need not be normalised. A zero-weight index is never returned, whatever ``u`` in [0, 1)
    is, including 1 - 2**-53 where ``u * total`` can round up to ``total`` (vLLM #20531).
    """
    cum = np.cumsum(weights, axis=-1)
    return _locate(weights, cum, u * cum[..., -1])


def _locate(weights: np.ndarray, cum: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """Return, per row, the number of CDF entries <= its threshold, moved off trailing zero weights.

    The count is ``searchsorted(cum, threshold, side='right')``: the first index whose CDF exceeds
    the threshold, which has positive weight unless it is past the last one (``u * total`` rounded
    up to ``total``); those rows take the last index with positive weight.
    """
    v = weights.shape[-1]
    if cum.ndim == 2 and v >= SEARCH_FROM:
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
    cum = np.cumsum(weights, axis=-1)
    empty = cum[:, -1] <= 0
    if empty.any():  # the residual had no mass: the target's row
        weights[empty] = target[empty]
        cum[empty] = np.cumsum(target[empty], axis=-1)
    return _locate(weights, cum, u * cum[:, -1])
