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
draft model and its target. A sparse chain (``support`` > 0) ranks only ``support`` ids, all at
or above ``lowest`` and always the last id V-1, so that index bugs at high ids (16-bit ids, a
mask off by one at V-1) meet most of the mass; ``dtype`` float32 hands the verifier float32 rows.

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
    """Zipf-shaped next-token laws, one per full prefix, generated from ``seed`` on demand.

    ``support`` > 0 puts the mass on that many tokens only (:attr:`ids`): ``support - 1`` ids
    drawn from the seed in ``lowest .. V-2`` plus the last id ``V - 1``; every other token has
    probability 0. ``dtype`` is the floating type of the payload the verifier is handed (the
    exact laws, :meth:`probs` and :meth:`cdf_at`, stay float64).
    """

    vocab: int
    exponent: float = 1.0
    seed: int = 0
    support: int = 0  # tokens with mass (0: all V)
    lowest: int = 0  # smallest id the support may hold
    dtype: str = "float64"

    start = ROOT  # the state of the empty prefix

    def __post_init__(self) -> None:
        if self.support and not (1 <= self.support <= self.vocab - self.lowest and 0 <= self.lowest < self.vocab):
            raise ValueError(f"support = {self.support} tokens in ids {self.lowest}..{self.vocab - 1}; allowed: "
                             f"1..{self.vocab - self.lowest}")

    @cached_property
    def ids(self) -> np.ndarray | None:
        """Return the sorted ids with mass (None: every id): the last id V-1 and support - 1 ids drawn from the seed."""
        if not self.support:
            return None
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0x5A1F, 1]))
        drawn = self.lowest + rng.choice(self.vocab - 1 - self.lowest, size=self.support - 1, replace=False)
        return np.sort(np.append(drawn, self.vocab - 1)).astype(np.int64)

    @property
    def _n(self) -> int:
        """Return how many tokens have mass (the length of a ranking)."""
        return self.support or self.vocab

    @cached_property
    def _weights(self) -> np.ndarray:
        w = (np.arange(1, self._n + 1, dtype=np.float64)) ** -self.exponent
        return w / w.sum()

    @cached_property
    def _cdf(self) -> np.ndarray:
        cdf = np.cumsum(self._weights)
        cdf[-1] = np.inf  # every entry > 0: rounding can never leave u above the total
        return cdf

    @cached_property
    def _perm(self) -> np.ndarray:
        """Position (in :attr:`ids`) of the token of rank r in the base context (shift 0): drawn from the seed."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, 0x5A1F])).permutation(self._n)

    @cached_property
    def _base2(self) -> np.ndarray:
        """The base context's row (over the support) twice over: any shifted row is one contiguous window of it."""
        base = np.empty(self._n)
        base[self._perm] = self._weights
        return np.concatenate([base, base])

    @cached_property
    def _base2_payload(self) -> np.ndarray:
        """:attr:`_base2` in the payload dtype (float32 rows are copied, not converted, per call)."""
        return self._base2.astype(self.dtype)

    @cached_property
    def _prefix2(self) -> np.ndarray:
        """Prefix sums of the doubled base row, with a leading 0: window sums in O(1)."""
        return np.concatenate([[0.0], np.cumsum(self._base2)])

    @property
    def payload_dtype(self) -> np.dtype:
        """Return the floating type of the payload rows."""
        return np.dtype(self.dtype)

    def start_states(self, n: int) -> np.ndarray:
        """Return ``n`` copies of the empty-prefix state."""
        return np.full(n, ROOT, dtype=np.uint64)

    def _shift(self, states: np.ndarray) -> np.ndarray:
        """Return b(s) in 0..n-1: the cyclic shift of the ranking in each state."""
        h = mix64(np.asarray(states, dtype=np.uint64) ^ np.uint64(mix64(np.uint64(self.seed))))
        return (h % np.uint64(self._n)).astype(np.int64)

    def _starts(self, states: np.ndarray) -> np.ndarray:
        """Return where each state's row starts in :attr:`_base2`: row[ids[j]] = base2[start + j]."""
        n = self._n
        return (n - self._shift(np.asarray(states).ravel())) % n

    def probs(self, states: np.ndarray) -> np.ndarray:
        """Return the next-token laws [n, V] in ``states``: row[ids[j]] = base[(j - b) mod n], one window copy each."""
        windows = np.lib.stride_tricks.sliding_window_view(self._base2, self._n)  # [n + 1, n], no copy
        rows = windows[self._starts(states)]
        if self.ids is None:
            return rows
        out = np.zeros((rows.shape[0], self.vocab))
        out[:, self.ids] = rows
        return out

    def payload_into(self, states: np.ndarray, out: np.ndarray, rows: np.ndarray | None = None) -> None:
        """Write the payload row of ``states[i]`` into ``out[rows[i]]`` (default ``out[i]``): one copy a row, no temporary."""
        n, ids, base2 = self._n, self.ids, self._base2_payload
        if base2.dtype != out.dtype:
            base2 = base2.astype(out.dtype)
        where = range(out.shape[0]) if rows is None else rows.tolist()
        for r, start in zip(where, self._starts(states).tolist()):
            if ids is None:
                out[r] = base2[start : start + n]  # a memcpy; np.take from the strided window view is far slower
            else:
                out[r] = 0.0
                out[r, ids] = base2[start : start + n]

    def cdf_at(self, states: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (F(x - 1), p(x)) of ``tokens`` x in ``states`` without building rows (randomised PIT)."""
        start = self._starts(states)  # row[ids[j]] = base2[start + j]
        x = np.asarray(tokens, dtype=np.int64)
        if self.ids is None:
            j, hit = x, np.ones(x.shape, dtype=bool)
        else:  # j = how many ids lie below x; x has mass only where ids[j] == x
            j = np.searchsorted(self.ids, x)
            hit = self.ids[np.minimum(j, self._n - 1)] == x
        below = self._prefix2[start + j] - self._prefix2[start]
        return below, np.where(hit, self._base2[start + np.minimum(j, self._n - 1)], 0.0)

    def payload(self, states: np.ndarray) -> np.ndarray:
        """Return what the verifier is handed (probabilities, in the payload dtype)."""
        return self.payload_of(self.probs(states))

    def payload_of(self, probs: np.ndarray) -> np.ndarray:
        """Return the payload form of explicit probability rows (padding garbage)."""
        return np.asarray(probs).astype(self.dtype, copy=False)

    def sample(self, states: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Draw one token per state at uniforms ``u``: a Zipf rank, then its token."""
        rank = np.searchsorted(self._cdf, u, side="right").astype(np.int64)
        j = (self._perm[rank] + self._shift(states)) % self._n
        return j if self.ids is None else self.ids[j]

    def advance(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Return the hash of the prefix extended by ``tokens``."""
        s = np.asarray(states, dtype=np.uint64)
        with np.errstate(over="ignore"):
            return mix64(s * np.uint64(0x100000001B3) + np.asarray(tokens, dtype=np.uint64) + np.uint64(1))
