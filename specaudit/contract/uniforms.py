"""Adversarial uniforms: a ``np.random.Generator`` whose uniforms sit on the edges of [0, 1).

Bugs at the ends of the unit interval are lossless almost surely and invisible to statistics:
``u <= p/q`` accepts a draft of probability 0 only when ``u == 0`` (sglang #35771), and an
unclamped inverse CDF returns id ``V`` only when ``u * total`` rounds up to ``total`` (vLLM
#20531). :class:`ScriptedUniforms` makes those draws happen on purpose.

Draw sequence (stable; adapters rely on it)
-------------------------------------------
Every scalar uniform the object hands out, in the order asked for (C order within an array),
is the next term of::

    0.0, 1 - 2**-53, 0.0, 1 - 2**-53, ...        (start=0, the default)
    1 - 2**-53, 0.0, 1 - 2**-53, 0.0, ...        (start=1)

``1 - 2**-53`` is the largest float64 below 1. Requests for float32 uniforms get
``1 - 2**-24`` (the largest float32 below 1) in its place. Every scripted method derives its
value from these uniforms the way NumPy does (``uniform``: ``low + (high - low) u``;
``integers``: ``low + floor(u * span)``; ``choice`` with ``p``: NumPy's normalised-CDF
``searchsorted``; ``exponential``: ``-scale log1p(-u)``), so ``u = 0`` gives the first outcome
and ``u = 1 - 2**-53`` the last one with positive mass.

Framework adapters (torch, CUDA kernels) that cannot pass this object to the code they call
substitute it for the framework's random source during the call: :meth:`ScriptedUniforms.next`
returns the next ``n`` uniforms of the sequence and counts them as drawn
(:func:`specaudit.adapters.randomness.routed` does this for torch, numpy's legacy global RNG
and Python's ``random``).

Reach
-----
``counts`` records the scripted uniforms handed out per method. Uniforms taken through
``integers`` are what a wrapper draws to *seed* another generator (``torch.manual_seed(int(
rng.integers(2**62)))``): they never reach an acceptance test, so :attr:`ScriptedUniforms.coins`
leaves them out; a probe counts a call as reached only when ``coins`` covers its rows.

Any Generator method not scripted here (``normal``, ``gumbel``, ``permutation``...) still works,
drawing real randomness from a seeded PCG64; such draws are detected (``unscripted``) so a check
can say that its adversarial values never reached the verifier instead of passing it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["HIGH", "HIGH32", "ScriptedUniforms"]

#: The largest float64 below 1.
HIGH = 1.0 - 2.0**-53
#: The largest float32 below 1 (what a float32 request gets instead of HIGH, which rounds to 1).
HIGH32 = 1.0 - 2.0**-24


def _scalar(size: Any) -> int:
    """Return a scalar ``size`` as an int."""
    return int(size)


def _shape(size: Any) -> tuple[int, ...]:
    """Return ``size`` (a scalar or a sequence of ints) as a shape tuple."""
    return (_scalar(size),) if np.isscalar(size) else tuple(int(s) for s in size)


class ScriptedUniforms(np.random.Generator):
    """A Generator whose uniforms alternate 0.0 and 1 - 2**-53, recording whether it was drawn from.

    Parameters
    ----------
    start : {0, 1}
        Index of the first term: 0 starts at 0.0, 1 starts at 1 - 2**-53.
    seed : int
        Seed of the PCG64 behind the methods that are not scripted.

    Attributes
    ----------
    draws : int
        Scripted scalar uniforms handed out so far.
    methods : set of str
        Scripted methods that were called.
    counts : dict of str to int
        Scripted uniforms handed out per method (``next`` for direct calls of :meth:`next`).
    """

    def __init__(self, start: int = 0, seed: int = 0):
        if start not in (0, 1):
            raise ValueError(f"start = {start!r}; allowed: 0 (begin at 0.0) or 1 (begin at 1 - 2**-53)")
        super().__init__(np.random.PCG64(seed))
        self.start = start
        self.seed = seed
        self.draws = 0
        self.methods: set[str] = set()
        self.counts: dict[str, int] = {}
        self._initial_state = self.bit_generator.state

    # ---- the sequence ----------------------------------------------------------------------

    def next(self, n: int, dtype: Any = np.float64) -> np.ndarray:
        """Return the next ``n`` terms of the sequence as a 1-D array of ``dtype`` (float64 or float32)."""
        self.methods.add("next")
        return self._next(n, dtype, "next")

    def _next(self, n: int, dtype: Any, method: str) -> np.ndarray:
        """Return the next ``n`` terms, counted under ``method``."""
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise TypeError(f"ScriptedUniforms draws float64 or float32 uniforms, not {dtype}")
        high = HIGH if dtype == np.float64 else HIGH32
        idx = self.start + self.draws + np.arange(int(n))
        self.draws += int(n)
        self.counts[method] = self.counts.get(method, 0) + int(n)
        return np.where(idx % 2 == 0, 0.0, high).astype(dtype)

    def _u(self, size: Any, method: str, dtype: Any = np.float64) -> Any:
        """Return uniforms shaped like ``size`` (a scalar for None)."""
        self.methods.add(method)
        if size is None:
            return self._next(1, dtype, method)[0].item()
        shape = _shape(size)
        return self._next(math.prod(shape), dtype, method).reshape(shape)

    @property
    def drawn(self) -> bool:
        """Return True when at least one scripted uniform was handed out."""
        return self.draws > 0

    @property
    def coins(self) -> int:
        """Return the scripted uniforms that could reach an acceptance test (every method but ``integers``,
        which wrappers use to seed other generators, and the ``harness`` draws an adapter makes for itself:
        ``specaudit.adapters.randomness.harness_draws``)."""
        return self.draws - self.counts.get("integers", 0) - self.counts.get("harness", 0)

    @property
    def unscripted(self) -> bool:
        """Return True when a method that is not scripted drew from the underlying PCG64."""
        return self.bit_generator.state != self._initial_state

    # ---- scripted Generator methods --------------------------------------------------------

    def random(self, size: Any = None, dtype: Any = np.float64, out: np.ndarray | None = None) -> Any:
        """Return scripted uniforms in [0, 1) (``Generator.random``)."""
        if out is not None:
            out[...] = self._u(out.shape, "random", out.dtype)
            return out
        return self._u(size, "random", dtype)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        """Return ``low + (high - low) * u`` (``Generator.uniform``)."""
        low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        if size is None and (low.ndim or high.ndim):
            size = np.broadcast_shapes(low.shape, high.shape)
        u = self._u(size, "uniform")
        value = low + (high - low) * u
        return float(value) if size is None else value

    def integers(self, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64, endpoint: bool = False) -> Any:
        """Return ``low + floor(u * span)`` (``Generator.integers``): u = 0 gives low, the top gives the last value."""
        if high is None:
            low, high = 0, low
        low, high = np.asarray(low, dtype=np.int64), np.asarray(high, dtype=np.int64)
        span = high - low + (1 if endpoint else 0)
        if np.any(span <= 0):
            raise ValueError("low >= high" if not endpoint else "low > high")
        if size is None and (low.ndim or high.ndim):
            size = np.broadcast_shapes(low.shape, high.shape)
        u = self._u(size, "integers")
        value = np.minimum(low + np.floor(np.asarray(u) * span).astype(np.int64), low + span - 1).astype(dtype)
        return value.item() if size is None else value

    def choice(
        self, a: Any, size: Any = None, replace: bool = True, p: Any = None, axis: int = 0, shuffle: bool = True
    ) -> Any:
        """Return scripted choices (``Generator.choice``); with ``p``, NumPy's normalised-CDF rule."""
        pool = np.arange(int(a)) if np.ndim(a) == 0 else np.asarray(a)
        n = pool.shape[axis] if pool.ndim else 0
        if n == 0:
            raise ValueError("a cannot be empty unless no samples are taken")
        if p is None:
            weights = np.ones(n)
        else:
            weights = np.asarray(p, dtype=np.float64)
            if weights.ndim != 1 or weights.size != n:
                raise ValueError("a and p must have same size")
            if np.any(weights < 0) or not np.all(np.isfinite(weights)):
                raise ValueError("probabilities are not non-negative")
            if abs(math.fsum(weights) - 1.0) > np.sqrt(np.finfo(np.float64).eps):
                raise ValueError("probabilities do not sum to 1")
        count = 1 if size is None else math.prod((_scalar(size),) if np.isscalar(size) else tuple(size))
        if not replace and count > int((weights > 0).sum()):
            raise ValueError("Cannot take a larger sample than population when replace is False")
        picks = np.empty(count, dtype=np.int64)
        w = weights.copy()
        for i in range(count):
            cdf = np.cumsum(w)
            cdf /= cdf[-1]
            picks[i] = min(int(np.searchsorted(cdf, self._u(None, "choice"), side="right")), n - 1)
            if not replace:
                w[picks[i]] = 0.0
        taken = np.take(pool, picks, axis=axis) if pool.ndim else picks
        if size is None:
            return taken[0] if taken.ndim == 1 else np.take(taken, 0, axis=axis)
        shape = _shape(size)
        return taken.reshape(shape) if pool.ndim == 1 else taken

    def standard_exponential(self, size: Any = None, dtype: Any = np.float64, method: str = "zig", out: Any = None) -> Any:
        """Return ``-log1p(-u)`` (inverse CDF of Exp(1))."""
        u = self._u(size, "standard_exponential")
        value = -np.log1p(-np.asarray(u, dtype=np.float64))
        return float(value) if size is None else value.astype(dtype)

    def exponential(self, scale: float = 1.0, size: Any = None) -> Any:  # type: ignore[override]  # one signature for numpy's overloads
        """Return ``-scale * log1p(-u)`` (inverse CDF of Exp(scale))."""
        u = self._u(size, "exponential")
        value = -scale * np.log1p(-np.asarray(u, dtype=np.float64))
        return float(value) if size is None else value

    def __repr__(self) -> str:
        return f"ScriptedUniforms(start={self.start}, draws={self.draws})"
