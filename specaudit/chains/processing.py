"""Reference sampling processing: mask, bias, penalties -> temperature -> top-k -> top-p -> min-p, in float64.

Speculative decoding is lossless relative to the *processed* target: the same temperature,
top-k, top-p and min-p must shape the target at every draft position, the residual, the bonus
and the non-speculative path, and q must be the processed law the draft was really sampled
from (notes/theory.md, "Sampling parameters"). This module is the one definition of
"processed" that specaudit's references use.

Order and rules (documented, applied to each row of logits ``z``):

0. **allowed-token mask, logit bias, penalties** (serving parameters; off by default), on the raw
   logits, in vLLM v1's order (``vllm/v1/sample/sampler.py``, ``Sampler``: allowed token ids,
   then the non-argmax-invariant processors such as logit bias, then
   ``vllm/v1/sample/ops/penalties.py`` ``apply_all_penalties``, all before greedy sampling and
   temperature): tokens outside ``allowed_tokens`` get ``-inf``; ``logit_bias`` adds to its
   tokens; with ``counts`` (how often each token occurs in the request's history) the repetition
   penalty ``r`` divides a positive logit by ``r`` and multiplies a negative one by ``r`` for
   every token seen, the frequency penalty subtracts ``f * count`` and the presence penalty
   ``pres * [count > 0]``. Under speculative decoding the history at verification position
   ``j`` is the generated prefix plus drafts ``0..j-1`` (vLLM #18902; ``vllm/v1/sample/
   rejection_sampler.py`` applies the penalties to the target logits of every draft position
   with the drafts before it in the history). Temperature divides after these, so additive
   penalties and bias are in raw-logit units, and a greedy row is the argmax of the penalised,
   biased, masked logits. The repetition penalty and the mask commute with temperature; the
   additive ones do not, which is why the order is fixed here.
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

Steps 1-4 are the ``hf`` convention. Engines order the filters differently, and "lossless" means
"the same law as the engine's own non-speculative sampler", so the order is a named choice
(:data:`CONVENTIONS`, ``SamplingParams.convention``; a scenario's ``convention`` key and
``specaudit run --convention``). The three built in differ only when top-p is combined with
top-k or min-p in one request (min-p and top-k are both thresholds on the tempered logits, so
they commute; the top-p cut is what moves):

- ``hf``: top-k -> renormalise -> top-p -> min-p (transformers 5.25
  ``generation/logits_process.py``: ``TopKLogitsWarper``, ``TopPLogitsWarper``, ``MinPLogitsWarper``,
  in the order ``GenerationMixin._get_logits_processor`` appends them);
- ``vllm``: min-p -> top-k -> renormalise -> top-p (vLLM 0.33.0 ``vllm/v1/sample/sampler.py``
  ``Sampler.sample`` applies the argmax-invariant logits processors, ``MinPLogitsProcessor`` of
  ``vllm/v1/sample/logits_processor/builtin.py``, before ``vllm/v1/sample/ops/topk_topp_sampler.py``
  ``apply_top_k_top_p``), so the top-p cut sees the min-p survivors renormalised;
- ``sglang``: the top-p cut on the *original* (tempered) law, intersected with top-k and min-p,
  renormalised once (SGLang 0.5.23 ``sglang/srt/layers/sampler.py``
  ``top_k_top_p_min_p_sampling_from_probs_torch``: the cumulative sum is taken before the top-k
  mask). SGLang PR #36173 fixed a speculative verifier that used the ``hf`` order without min-p.

The result is renormalised after each filter. Everything is computed in float64 unless a
dtype is asked for (the float32 path exists to model engines that process in float32).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specaudit.errors import UsageError
from specaudit.registry import Registry

__all__ = ["CONVENTIONS", "DEFAULT_CONVENTION", "TOP_P_ROUNDING", "Convention", "SamplingParams", "process",
           "process_rows", "softmax"]

#: Absolute slack on top-p's cumulative mass comparison (float64 sums of a few terms).
TOP_P_ROUNDING = 1e-12


#: A filter order: tempered logits ``z`` [..., V] (max 0), top_k, top_p, min_p -> processed law.
Filters = Callable[[np.ndarray, int, float, float], np.ndarray]


@dataclass(frozen=True)
class Convention:
    """One engine's order of the top-k, top-p and min-p filters (module docstring)."""

    name: str
    order: str  # the order, in words, for reports and messages
    source: str  # the released engine file it follows
    filters: Filters


#: The built-in conventions, by name; ``hf`` (the order specaudit always used) is the default.
CONVENTIONS: Registry[Convention] = Registry("sampling convention", UsageError)
DEFAULT_CONVENTION = "hf"


def _top_k_logits(z: np.ndarray, k: int) -> np.ndarray:
    """Return ``z`` with every logit below the k-th largest set to -inf (ties at the k-th value kept)."""
    v = z.shape[-1]
    if not 0 < k < v:
        return z
    kth = np.partition(z, v - k, axis=-1)[..., v - k, None]
    return np.where(z >= kth, z, -np.inf)


def _top_p_keep(probs: np.ndarray, p: float) -> np.ndarray:
    """Return the mask of the smallest top set of ``probs`` whose mass reaches ``p`` (ties at the boundary kept)."""
    ftype = probs.dtype.type
    desc = -np.sort(-probs, axis=-1)
    cum = np.cumsum(desc, axis=-1)
    # the last token needed: the first whose cumulative mass reaches p
    need = np.minimum((cum < ftype(p - TOP_P_ROUNDING)).sum(axis=-1), probs.shape[-1] - 1)
    boundary = np.take_along_axis(desc, need[..., None], axis=-1)
    return probs >= boundary


def _min_p_keep(probs: np.ndarray, m: float) -> np.ndarray:
    """Return the mask of tokens of probability ``>= m`` times the largest (ratios: any renormalisation)."""
    return probs >= probs.dtype.type(m) * probs.max(axis=-1, keepdims=True)


def _softmax_shifted(z: np.ndarray) -> np.ndarray:
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _hf(z: np.ndarray, k: int, p: float, m: float) -> np.ndarray:
    """Apply top-k, renormalise, top-p, then min-p (HF's warpers)."""
    probs = _softmax_shifted(_top_k_logits(z, k))
    if p < 1:
        probs = _renormalise(probs, _top_p_keep(probs, p))
    if m > 0:
        probs = _renormalise(probs, _min_p_keep(probs, m))
    return probs


def _vllm(z: np.ndarray, k: int, p: float, m: float) -> np.ndarray:
    """Apply min-p on the tempered law, then top-k, renormalise, top-p (vLLM v1's Sampler)."""
    if m > 0:
        z = np.where(_min_p_keep(_softmax_shifted(z), m), z, -np.inf)
    probs = _softmax_shifted(_top_k_logits(z, k))
    if p < 1:
        probs = _renormalise(probs, _top_p_keep(probs, p))
    return probs


def _sglang(z: np.ndarray, k: int, p: float, m: float) -> np.ndarray:
    """Intersect top-k, the top-p cut of the tempered law and min-p, then renormalise once (SGLang's sampler)."""
    probs = _softmax_shifted(z)
    keep = np.isfinite(_top_k_logits(z, k))
    if p < 1:
        keep &= _top_p_keep(probs, p)
    if m > 0:
        keep &= _min_p_keep(probs, m)
    return _renormalise(probs, keep)


CONVENTIONS.register("hf", Convention(
    "hf", "top-k -> renormalise -> top-p -> min-p",
    "transformers 5.25.0 generation/logits_process.py (TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper)", _hf))
CONVENTIONS.register("vllm", Convention(
    "vllm", "min-p -> top-k -> renormalise -> top-p",
    "vLLM 0.33.0 vllm/v1/sample/sampler.py (Sampler.sample), vllm/v1/sample/ops/topk_topp_sampler.py "
    "(apply_top_k_top_p), vllm/v1/sample/logits_processor/builtin.py (MinPLogitsProcessor)", _vllm))
CONVENTIONS.register("sglang", Convention(
    "sglang", "top-k and min-p intersected with the top-p cut of the unfiltered law, renormalised once",
    "SGLang 0.5.23 sglang/srt/layers/sampler.py (top_k_top_p_min_p_sampling_from_probs_torch)", _sglang))


@dataclass(frozen=True)
class SamplingParams:
    """Sampling processing of one model: temperature, top-k, top-p, min-p, and the serving parameters.

    The defaults (1, 0, 1, 0; no penalty, bias or mask) are the identity: the softmax of the
    logits. ``repetition_penalty`` (1 = off, > 0), ``frequency_penalty`` and ``presence_penalty``
    (0 = off) depend on the request's history (:func:`process`'s ``counts``);
    ``logit_bias`` is ``((token, bias), ...)``; ``allowed_tokens`` (None = all) is the
    structured-output mask.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    allowed_tokens: tuple[int, ...] | None = None
    convention: str = "hf"  # the engine's filter order (CONVENTIONS), the same for every request of a run

    def __post_init__(self) -> None:
        if self.convention not in CONVENTIONS:
            raise UsageError(f"convention = {self.convention!r}: {CONVENTIONS.unknown(str(self.convention))}")
        r, f, pres = self.repetition_penalty, self.frequency_penalty, self.presence_penalty
        if not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0):
            raise UsageError(f"repetition_penalty = {r!r}; allowed: a finite number > 0 (1 = off)")
        for name, value in (("frequency_penalty", f), ("presence_penalty", pres)):
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise UsageError(f"{name} = {value!r}; allowed: a finite number (0 = off)")
        for pair in self.logit_bias:
            if not (len(pair) == 2 and isinstance(pair[0], (int, np.integer)) and pair[0] >= 0
                    and isinstance(pair[1], (int, float)) and math.isfinite(pair[1])):
                raise UsageError(f"logit_bias entry {pair!r}; allowed: (token >= 0, finite bias)")
        if self.allowed_tokens is not None and (
            not self.allowed_tokens or any(not isinstance(x, (int, np.integer)) or x < 0 for x in self.allowed_tokens)
        ):
            raise UsageError(f"allowed_tokens = {self.allowed_tokens!r}; allowed: None (all) or token ids >= 0, at least one")
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
        """Return True when processing is the plain softmax (under every convention)."""
        return self.replace(convention=DEFAULT_CONVENTION) == SamplingParams()

    @property
    def penalised(self) -> bool:
        """Return True when the law depends on the request's history (a penalty is on)."""
        return self.repetition_penalty != 1 or self.frequency_penalty != 0 or self.presence_penalty != 0

    def as_dict(self) -> dict[str, Any]:
        """Return the parameters as a JSON-able dict (serving parameters and the convention only when set)."""
        out = asdict(self)
        for name in (*_SERVING, "convention"):
            if out[name] == _DEFAULTS[name]:
                del out[name]
        if "logit_bias" in out:
            out["logit_bias"] = [list(pair) for pair in self.logit_bias]
        if "allowed_tokens" in out:
            out["allowed_tokens"] = list(self.allowed_tokens or ())
        return out

    def replace(self, **changes: Any) -> SamplingParams:
        """Return a copy with ``changes`` applied."""
        return SamplingParams(**{**asdict(self), **changes})


#: The serving parameters (penalties, bias, mask): left out of ``as_dict`` at their defaults.
_SERVING = ("repetition_penalty", "frequency_penalty", "presence_penalty", "logit_bias", "allowed_tokens")
_DEFAULTS = asdict(SamplingParams())


def softmax(z: np.ndarray) -> np.ndarray:
    """Return the softmax over the last axis; -inf entries get probability 0."""
    top = np.max(z, axis=-1, keepdims=True)
    e = np.exp(z - top)
    return e / e.sum(axis=-1, keepdims=True)


def _renormalise(probs: np.ndarray, keep: np.ndarray) -> np.ndarray:
    kept = np.where(keep, probs, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def _serving(z: np.ndarray, params: SamplingParams, counts: np.ndarray | None) -> np.ndarray:
    """Apply the mask, the bias and the penalties (step 0 of the module docstring) to raw logits ``z``."""
    ftype = z.dtype.type
    v = z.shape[-1]
    if params.allowed_tokens is not None:
        allowed = np.zeros(v, dtype=bool)
        allowed[[t for t in params.allowed_tokens if t < v]] = True
        z = np.where(allowed, z, -np.inf).astype(z.dtype)
    for token, bias in params.logit_bias:
        if token < v:
            z[..., token] += ftype(bias)
    if params.penalised and counts is not None:
        c = np.broadcast_to(np.asarray(counts), z.shape)
        seen = c > 0
        if params.repetition_penalty != 1:
            r = ftype(params.repetition_penalty)
            z = np.where(seen, np.where(z > 0, z / r, z * r), z)
        if params.frequency_penalty != 0:
            z = z - ftype(params.frequency_penalty) * c.astype(z.dtype)
        if params.presence_penalty != 0:
            z = z - ftype(params.presence_penalty) * seen.astype(z.dtype)
    dead = np.argwhere(~(np.max(z, axis=-1) > -np.inf))
    if dead.size:
        row = ", ".join(str(int(i)) for i in dead[0]) or "0"
        more = f" and {len(dead) - 1} more" if len(dead) > 1 else ""
        raise UsageError(f"allowed_tokens: a row has no allowed token of finite logit (row {row}{more} of the logits, "
                         f"mask {list(params.allowed_tokens or ())}): nothing to sample; allowed: a mask that keeps a "
                         "token of finite logit in every row")
    return z


def process(
    logits: np.ndarray, params: SamplingParams, dtype: Any = np.float64, counts: np.ndarray | None = None
) -> np.ndarray:
    """Return the processed next-token laws of ``logits`` under ``params``.

    Parameters
    ----------
    logits : array_like
        Shape ``[..., V]``; ``-inf`` marks a token of probability 0. Every row needs a finite
        entry and no NaN.
    params : SamplingParams
        Temperature, then top-k, top-p, min-p in the order of ``params.convention`` (module docstring).
    dtype : numpy dtype, optional
        Arithmetic precision; float64 by default (references are float64).
    counts : array_like, optional
        Shape broadcastable to ``logits``: how often each token occurs in the request's history
        (the penalties' input; None = an empty history).

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
    ``MinPLogitsWarper`` (same rules; the ``hf`` order); the other orders: :data:`CONVENTIONS`;
    Holtzman et al. 2020 (nucleus sampling);
    Nguyen et al. 2024 (min-p sampling).
    """
    ftype = np.dtype(dtype).type
    z = np.asarray(logits).astype(ftype, copy=True)
    if z.ndim == 0 or z.shape[-1] == 0:
        raise UsageError(f"logits: received shape {z.shape}; allowed: [..., V] with V >= 1")
    top = np.max(z, axis=-1, keepdims=True)
    if not (np.all(z < np.inf) and np.all(top > -np.inf)):  # NaN compares false: caught here too
        raise UsageError("logits: every row needs a finite entry and no NaN or +inf")
    if params.allowed_tokens is not None or params.logit_bias or params.penalised:
        z = _serving(z, params, counts)
        top = np.max(z, axis=-1, keepdims=True)
    if params.greedy:
        hot = np.zeros_like(z)
        np.put_along_axis(hot, np.argmax(z, axis=-1)[..., None], 1, axis=-1)
        return hot
    # z - max first: the same law, and exp never overflows (temperature > 0 keeps the argmax)
    z = (z - top) / ftype(params.temperature) if params.temperature != 1 else z - top
    return CONVENTIONS.get(params.convention).filters(z, params.top_k, params.top_p, params.min_p)


def process_rows(
    logits: np.ndarray, params: list[SamplingParams], counts: np.ndarray | None = None, dtype: Any = np.float64
) -> np.ndarray:
    """Return :func:`process` of each row ``logits[b]`` under its own ``params[b]`` (a batch of requests).

    ``logits`` is ``[B, ..., V]``, ``counts`` None or of the same shape. Rows with equal
    parameters are processed together (a batch holds few distinct requests' settings).
    """
    logits = np.asarray(logits)
    out = np.empty(logits.shape, dtype=np.dtype(dtype))
    groups: dict[SamplingParams, list[int]] = {}
    for b, row in enumerate(params):
        groups.setdefault(row, []).append(b)
    for row, members in groups.items():
        idx = np.asarray(members, dtype=np.int64)
        out[idx] = process(logits[idx], row, dtype, None if counts is None else counts[idx])
    return out
