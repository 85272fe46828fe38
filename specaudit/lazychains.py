"""Lazy large-vocabulary chains: every context's law generated from a seed on demand (issue 7).

A :class:`ZipfChain` has one context per prefix: the state is a 64-bit hash of every token so
far, so the law of token t may depend on the whole prefix (no Markov shortcut, as in a real
model). In state ``s`` the tokens are ranked by an affine permutation of ``0..V-1`` drawn from
``hash(s, seed)``, and the token of rank ``r`` has probability proportional to
``(r + 1) ** -exponent`` (Zipf). Nothing of size V^L is ever built: a row costs O(V) when asked
for, sampling costs O(log V). Two chains with the same ``seed`` rank tokens alike in every
context and differ only in sharpness, like a draft model and its target.

Same interface as :class:`specaudit.chains.TabularChain`: ``vocab``, ``start_states``,
``probs``, ``payload``, ``payload_of``, ``sample``, ``advance``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import gcd

import numpy as np

_MASK = (1 << 64) - 1
#: The state before the first token (an arbitrary odd constant).
ROOT = 0x9E3779B97F4A7C15


def mix64(x: np.ndarray) -> np.ndarray:
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

    def start_states(self, n: int) -> np.ndarray:
        """Return ``n`` copies of the empty-prefix state."""
        return np.full(n, ROOT, dtype=np.uint64)

    def _affine(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (a, b) with token(rank r) = (a r + b) mod V; ``a`` coprime to V."""
        h = mix64(np.asarray(states, dtype=np.uint64) ^ np.uint64(mix64(np.uint64(self.seed))))
        v = self.vocab
        a = (h % np.uint64(v)).astype(np.int64)
        b = ((h >> np.uint64(32)) % np.uint64(v)).astype(np.int64)
        bad = np.gcd(a, v) != 1
        while bad.any():  # at most a few steps: coprime residues are dense
            a[bad] = (a[bad] + 1) % v
            bad = np.gcd(a, v) != 1
        return a, b

    def probs(self, states: np.ndarray) -> np.ndarray:
        """Return the next-token laws [n, V] in ``states`` (rows generated, unique states once)."""
        states = np.asarray(states, dtype=np.uint64)
        uniq, inv = np.unique(states, return_inverse=True)
        a, b = self._affine(uniq)
        v = self.vocab
        a_inv = np.array([pow(int(x), -1, v) if v > 1 else 0 for x in a], dtype=np.int64)
        tok = np.arange(v, dtype=np.int64)
        rank = (a_inv[:, None] * ((tok[None, :] - b[:, None]) % v)) % v
        return self._weights[rank][inv.ravel()]

    def payload(self, states: np.ndarray) -> np.ndarray:
        """Return what the verifier is handed (probabilities)."""
        return self.probs(states)

    def payload_of(self, probs: np.ndarray) -> np.ndarray:
        """Return the payload form of explicit probability rows (padding garbage)."""
        return probs

    def sample(self, states: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Draw one token per state at uniforms ``u``: a Zipf rank, then its token."""
        rank = np.searchsorted(self._cdf, u, side="right").astype(np.int64)
        a, b = self._affine(states)
        return (a * rank + b) % self.vocab

    def advance(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Return the hash of the prefix extended by ``tokens``."""
        s = np.asarray(states, dtype=np.uint64)
        with np.errstate(over="ignore"):
            return mix64(s * np.uint64(0x100000001B3) + np.asarray(tokens, dtype=np.uint64) + np.uint64(1))


def check_coprime(a: int, v: int) -> bool:
    """Return True when ``a`` is invertible mod ``v`` (helper for tests)."""
    return gcd(a, v) == 1
