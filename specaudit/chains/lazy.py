"""Lazy large-vocabulary chains: every context's law generated from a seed on demand (large vocabularies).

A :class:`ZipfChain` has one context per prefix: the state is a 64-bit hash of every token so
far, so the law of token t may depend on the whole prefix (no Markov shortcut, as in a real
model). The chain's ``seed`` fixes a base ranking of ``0..V-1`` (a random permutation); in state
``s`` the ranking is shifted cyclically by ``b(s) = hash(s, seed) mod V``: the token of rank ``r``
is ``(perm[r] + b(s)) mod V`` and has probability proportional to ``(r + 1) ** -exponent``
(Zipf). Nothing of size V^L is ever built: a row is one contiguous copy out of a doubled base
row (O(V) memory traffic, no arithmetic per entry), sampling costs O(log V), and the CDF below a
token is O(1) from a cyclic prefix sum (:meth:`ZipfChain.cdf_at`, used by the PIT). Two chains
with the same ``seed`` rank tokens alike in every context and differ only in sharpness, like a
draft model and its target.

Same interface as :class:`specaudit.chains.tabular.TabularChain`: ``vocab``, ``start_states``,
``probs``, ``payload``, ``payload_of``, ``sample``, ``advance``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

_MASK = (1 << 64) - 1
#: The state before the first token (an arbitrary odd constant).
ROOT = 0x9E3779B97F4A7C15


def mix64(x: npt.ArrayLike) -> np.ndarray:
    """Return splitmix64 of uint64 values (Steele, Lea, Flood 2014): a bijective 64-bit mixer."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclass(frozen=True, eq=False)
class ZipfChain:
    """Zipf-shaped next-token laws, one per full prefix, generated from ``seed`` on demand."""

    vocab: int
    exponent: float = 1.0
    seed: int = 0

    start = ROOT  # the state of the empty prefix

    @cached_property
    def _weights(self) -> np.ndarray:
        w = (np.arange(1, self.vocab + 1, dtype=np.float64)) ** -self.exponent
        return w / w.sum()

    @cached_property
    def _cdf(self) -> np.ndarray:
        cdf = np.cumsum(self._weights)
        cdf[-1] = np.inf  # every entry > 0: rounding can never leave u above the total
        return cdf

    @cached_property
    def _perm(self) -> np.ndarray:
        """Token of rank r in the base context (shift 0): a permutation drawn from the seed."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, 0x5A1F])).permutation(self.vocab)

    @cached_property
    def _base2(self) -> np.ndarray:
        """The base context's row twice over: any shifted row is one contiguous window of it."""
        base = np.empty(self.vocab)
        base[self._perm] = self._weights
        return np.concatenate([base, base])

    @cached_property
    def _prefix2(self) -> np.ndarray:
        """Prefix sums of the doubled base row, with a leading 0: window sums in O(1)."""
        return np.concatenate([[0.0], np.cumsum(self._base2)])

    def start_states(self, n: int) -> np.ndarray:
        """Return ``n`` copies of the empty-prefix state."""
        return np.full(n, ROOT, dtype=np.uint64)

    def _shift(self, states: np.ndarray) -> np.ndarray:
        """Return b(s) in 0..V-1: the cyclic shift of the ranking in each state."""
        h = mix64(np.asarray(states, dtype=np.uint64) ^ np.uint64(mix64(np.uint64(self.seed))))
        return (h % np.uint64(self.vocab)).astype(np.int64)

    def probs(self, states: np.ndarray) -> np.ndarray:
        """Return the next-token laws [n, V] in ``states``: row[t] = base[(t - b) mod V], one window copy each."""
        v = self.vocab
        windows = np.lib.stride_tricks.sliding_window_view(self._base2, v)  # [V + 1, V], no copy
        return windows[(v - self._shift(np.asarray(states).ravel())) % v]

    def payload_into(self, states: np.ndarray, out: np.ndarray) -> None:
        """Write the payload rows of ``states`` into ``out`` [n, V] (no temporary: one copy per row)."""
        v, base2 = self.vocab, self._base2
        for i, start in enumerate(((v - self._shift(np.asarray(states).ravel())) % v).tolist()):
            out[i] = base2[start : start + v]  # a memcpy; np.take from the strided window view is far slower

    def cdf_at(self, states: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (F(x - 1), p(x)) of ``tokens`` x in ``states`` without building rows (randomised PIT)."""
        v = self.vocab
        start = (v - self._shift(states)) % v  # row[t] = base2[start + t]
        x = np.asarray(tokens, dtype=np.int64)
        below = self._prefix2[start + x] - self._prefix2[start]
        return below, self._base2[start + x]

    def payload(self, states: np.ndarray) -> np.ndarray:
        """Return what the verifier is handed (probabilities)."""
        return self.probs(states)

    def payload_of(self, probs: np.ndarray) -> np.ndarray:
        """Return the payload form of explicit probability rows (padding garbage)."""
        return probs

    def sample(self, states: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Draw one token per state at uniforms ``u``: a Zipf rank, then its token."""
        rank = np.searchsorted(self._cdf, u, side="right").astype(np.int64)
        return (self._perm[rank] + self._shift(states)) % self.vocab

    def advance(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Return the hash of the prefix extended by ``tokens``."""
        s = np.asarray(states, dtype=np.uint64)
        with np.errstate(over="ignore"):
            return mix64(s * np.uint64(0x100000001B3) + np.asarray(tokens, dtype=np.uint64) + np.uint64(1))
