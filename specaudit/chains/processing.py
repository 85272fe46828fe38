"""Reference sampling processing: temperature -> top-k -> top-p -> min-p, in float64.

Speculative decoding is lossless relative to the *processed* target: the same temperature,
top-k, top-p and min-p must shape the target at every draft position, the residual, the bonus
and the non-speculative path, and q must be the processed law the draft was really sampled
from (notes/theory.md, "Sampling parameters"). This module is the one definition of
"processed" that specaudit's references use.

Order and rules (documented, applied to each row of logits ``z``):

1. **temperature** ``T``: ``z / T``. ``T = 0`` is greedy: a one-hot law at the argmax of the
   raw logits, ties to the first index (every later filter keeps the argmax, so it is the
   argmax of the processed law too).
2. **top-k** ``k`` (0 = off): keep every token whose logit is ``>=`` the k-th largest, so ties
   at the k-th value are all kept (HF ``TopKLogitsWarper``, vLLM ``apply_top_k``).
3. **top-p** ``p`` (1 = off): on the softmax of what is left, keep the smallest top set whose
   mass is ``>= p`` (at least one token). Ties with the last token needed are kept as well,
   so the set does not depend on token order. Cumulative sums are compared with
   ``p - TOP_P_ROUNDING`` so that a boundary exactly at ``p`` in decimal (0.5 + 0.3 = 0.8)
   counts as reached whatever the float rounding.
4. **min-p** ``m`` (0 = off): keep tokens with probability ``>= m * max`` probability. Every
   earlier filter keeps the argmax, so the ratio to the max is the tempered softmax's.

The result is renormalised after each filter. Everything is computed in float64 unless a
dtype is asked for (the float32 path exists to model engines that process in float32).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specaudit.errors import UsageError

__all__ = ["TOP_P_ROUNDING", "SamplingParams", "process", "softmax"]

#: Absolute slack on top-p's cumulative mass comparison (float64 sums of a few terms).
TOP_P_ROUNDING = 1e-12


@dataclass(frozen=True)
class SamplingParams:
    """Sampling processing of one model: temperature, top-k, top-p, min-p.

    The defaults (1, 0, 1, 0) are the identity: the softmax of the logits.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        t, k, p, m = self.temperature, self.top_k, self.top_p, self.min_p
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
            raise UsageError(f"temperature = {t!r}; allowed: a finite number >= 0 (0 = greedy)")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise UsageError(f"top_k = {k!r}; allowed: an integer >= 0 (0 = off)")
        if not (isinstance(p, (int, float)) and 0 < p <= 1):
            raise UsageError(f"top_p = {p!r}; allowed: 0 < top_p <= 1 (1 = off)")
        if not (isinstance(m, (int, float)) and 0 <= m <= 1):
            raise UsageError(f"min_p = {m!r}; allowed: 0 <= min_p <= 1 (0 = off)")

    @property
    def greedy(self) -> bool:
        """Return True for temperature 0."""
        return self.temperature == 0

    @property
    def identity(self) -> bool:
        """Return True when processing is the plain softmax."""
        return self == SamplingParams()

    def as_dict(self) -> dict[str, Any]:
        """Return the parameters as a JSON-able dict."""
        return asdict(self)

    def replace(self, **changes: Any) -> SamplingParams:
        """Return a copy with ``changes`` applied."""
        return SamplingParams(**{**asdict(self), **changes})


def softmax(z: np.ndarray) -> np.ndarray:
    """Return the softmax over the last axis; -inf entries get probability 0."""
    top = np.max(z, axis=-1, keepdims=True)
    e = np.exp(z - top)
    return e / e.sum(axis=-1, keepdims=True)


def _renormalise(probs: np.ndarray, keep: np.ndarray) -> np.ndarray:
    kept = np.where(keep, probs, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def process(logits: np.ndarray, params: SamplingParams, dtype: Any = np.float64) -> np.ndarray:
    """Return the processed next-token laws of ``logits`` under ``params``.

    Parameters
    ----------
    logits : array_like
        Shape ``[..., V]``; ``-inf`` marks a token of probability 0. Every row needs a finite
        entry and no NaN.
    params : SamplingParams
        Temperature, top-k, top-p, min-p, applied in that order (module docstring).
    dtype : numpy dtype, optional
        Arithmetic precision; float64 by default (references are float64).

    Returns
    -------
    numpy.ndarray
        Same shape, rows summing to 1, in ``dtype``.

    Notes
    -----
    Ties at the top-k value and at the top-p boundary are kept; temperature 0 gives the
    one-hot law at the first argmax. Row ``z`` and ``z + c`` give the same law.

    References
    ----------
    HF transformers ``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``,
    ``MinPLogitsWarper`` (same rules and order); Holtzman et al. 2020 (nucleus sampling);
    Nguyen et al. 2024 (min-p sampling).
    """
    ftype = np.dtype(dtype).type
    z = np.asarray(logits).astype(ftype, copy=True)
    if z.ndim == 0 or z.shape[-1] == 0:
        raise UsageError(f"logits: received shape {z.shape}; allowed: [..., V] with V >= 1")
    top = np.max(z, axis=-1, keepdims=True)
    if not (np.all(z < np.inf) and np.all(top > -np.inf)):  # NaN compares false: caught here too
        raise UsageError("logits: every row needs a finite entry and no NaN or +inf")
    v = z.shape[-1]
    if params.greedy:
        hot = np.zeros_like(z)
        np.put_along_axis(hot, np.argmax(z, axis=-1)[..., None], 1, axis=-1)
        return hot
    # z - max first: the same law, and exp never overflows (temperature > 0 keeps the argmax)
    z = (z - top) / ftype(params.temperature) if params.temperature != 1 else z - top
    if 0 < params.top_k < v:
        kth = np.partition(z, v - params.top_k, axis=-1)[..., v - params.top_k, None]
        z = np.where(z >= kth, z, -np.inf)  # ties at the k-th value are kept
    e = np.exp(z)
    probs = e / e.sum(axis=-1, keepdims=True)
    if params.top_p < 1:
        desc = -np.sort(-probs, axis=-1)
        cum = np.cumsum(desc, axis=-1)
        # the last token needed: the first whose cumulative mass reaches p
        need = np.minimum((cum < ftype(params.top_p - TOP_P_ROUNDING)).sum(axis=-1), v - 1)
        boundary = np.take_along_axis(desc, need[..., None], axis=-1)
        probs = _renormalise(probs, probs >= boundary)
    if params.min_p > 0:
        probs = _renormalise(probs, probs >= ftype(params.min_p) * probs.max(axis=-1, keepdims=True))
    return probs
