"""Vectorised categorical sampling shared by the simulator and the reference verifier."""

from __future__ import annotations

import numpy as np


def sample_rows(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draw one index per row of non-negative ``weights`` [n, V] by inverse CDF at uniforms ``u`` [n].

    Rows need not be normalised. A zero-weight index is never returned, whatever ``u`` in [0, 1)
    is, including 1 - 2**-53 where ``u * total`` can round up to ``total`` (vLLM #20531).
    """
    cum = np.cumsum(weights, axis=-1)
    threshold = u * cum[..., -1]
    idx = (cum <= threshold[..., None]).sum(axis=-1)
    # u*total can round to total; fall back to the last index with positive weight.
    last = weights.shape[-1] - 1 - np.argmax(weights[..., ::-1] > 0, axis=-1)
    return np.minimum(idx, last)


def final_token(target: np.ndarray, residual: np.ndarray | None, use_residual: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draw the token after the accepted drafts: from ``residual`` where ``use_residual``, else ``target``.

    A residual with no mass (p = q at the rejected position, reachable only through rounding)
    falls back to ``target``, never to NaN weights. ``residual`` None means K = 0.
    """
    weights = target if residual is None else np.where(use_residual[:, None], residual, target)
    empty = weights.sum(axis=1) <= 0
    return sample_rows(np.where(empty[:, None], target, weights), u)
