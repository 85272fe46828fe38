"""Null rejection rates far in the tail, by importance sampling of the exact multinomial null.

A check's false-alarm rate at the level Holm really reads (alpha / m ~ 3e-5) is a rare event: a
plain simulation needs ~1 / level draws per expected hit, ~3 million per scenario for a 10% error.
Here the counts are drawn from a *defensive mixture* (Hesterberg 1995) of the null and of
proposals that reach the tail, and every draw carries the likelihood ratio ``null / mixture``:

- **dispersion** (for quadratic statistics: Pearson's X^2, G^2): the cell probabilities of one
  multinomial are drawn from a Dirichlet around the null, so the counts are Dirichlet-multinomial
  with their covariance inflated by ``phi`` in every direction; the statistic's law is stretched
  towards its critical value;
- **tilt** (for statistics linear in the counts, e.g. the tokens-per-step ratio): the null law
  exponentially tilted along a direction ``g``, ``theta_i ~ pi_i exp(eta g_i)``, both signs.

Both likelihood ratios are exact closed forms, so the estimate ``mean(w * 1{p <= level})`` is
unbiased for the null rate whatever the proposal; the proposal only changes its variance. The
null component (share :data:`NULL_SHARE`) bounds every weight by ``1 / NULL_SHARE``, which keeps the
variance finite where the proposals are poor (Owen and Zhou 2000). Intervals are normal with the
weighted sample variance when enough draws hit; with few hits the bound ``w <= 1 / NULL_SHARE``
turns the Clopper-Pearson bound on the hit count into a valid upper bound.

A draw is a list of *blocks*, independent multinomials (a check's counts; the two histograms of the
PIT check are one block of a finer grid). Used by ``benchmarks/calibration.py``; checked against
exact enumerated tails in tests/stats/test_null_rates.py.

References
----------
.. [1] Hesterberg, T. (1995). Weighted average importance sampling and defensive mixture
   distributions. Technometrics 37(2), 185-194.
.. [2] Owen, A. and Zhou, Y. (2000). Safe and effective importance sampling. JASA 95(449), 135-143.
.. [3] Mosimann, J. E. (1962). On the compound multinomial distribution, the multivariate
   beta-distribution, and correlations among proportions. Biometrika 49, 65-82.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as sps

__all__ = ["NULL_SHARE", "Dispersion", "Estimate", "Mixture", "Tilt", "estimate", "union_rate"]

#: Share of the draws taken from the null itself: bounds every weight by 1 / NULL_SHARE.
NULL_SHARE = 0.2
#: Below this many hits the interval comes from the weight bound, not the normal approximation.
MIN_HITS = 30


@dataclass(frozen=True)
class Dispersion:
    """The probabilities of ``blocks`` drawn from Dirichlet(a pi), each block's ``a`` making its covariance x ``phi``.

    ``blocks`` is one block index or several (stretched together: a statistic summed over blocks).
    """

    blocks: int | tuple[int, ...]
    phi: float

    @property
    def members(self) -> tuple[int, ...]:
        """Return the block indices as a tuple."""
        return (self.blocks,) if isinstance(self.blocks, int) else tuple(self.blocks)


@dataclass(frozen=True)
class Tilt:
    """Block ``block``'s law tilted along ``direction`` by ``eta``: ``theta ~ pi exp(eta g)``."""

    block: int
    direction: np.ndarray
    eta: float


class Mixture:
    """The defensive mixture: the null with probability :data:`NULL_SHARE`, else one proposal, uniformly.

    Parameters
    ----------
    blocks : sequence of (probs, total)
        The independent multinomials of one draw (probabilities > 0, normalised here; integer totals).
    proposals : sequence of Dispersion or Tilt
        Components of the mixture; a dispersion with ``phi >= total`` is dropped (no such Dirichlet).
    """

    def __init__(self, blocks: Sequence[tuple[np.ndarray, int]], proposals: Sequence[Dispersion | Tilt]):
        self.blocks = [(np.asarray(p, dtype=np.float64) / float(np.sum(p)), int(n)) for p, n in blocks]
        self.proposals = [c for c in proposals
                          if not (isinstance(c, Dispersion) and not all(1.0 < c.phi < self.blocks[b][1] for b in c.members))]
        self.null_share = NULL_SHARE if self.proposals else 1.0
        self._tilted = {i: self._theta(c) for i, c in enumerate(self.proposals) if isinstance(c, Tilt)}

    def _theta(self, c: Tilt) -> np.ndarray:
        p = self.blocks[c.block][0]
        z = c.eta * np.asarray(c.direction, dtype=np.float64)
        w = p * np.exp(z - z.max())
        return w / w.sum()

    def probabilities(self, rng: np.random.Generator, reps: int) -> list[np.ndarray]:
        """Return each block's cell probabilities [reps, k] for ``reps`` draws of the mixture (draw counts from them)."""
        return self.pick(rng, reps)[0]

    def pick(self, rng: np.random.Generator, reps: int) -> tuple[list[np.ndarray], np.ndarray]:
        """Return each block's cell probabilities [reps, k] and each draw's component (-1: the null).

        For draws whose blocks are nested (a path's cumulative counts at several looks, one block per
        look): a proposal on block ``l`` applies to the draws up to that look, the null after it.
        """
        out = [np.broadcast_to(p, (reps, p.size)).copy() for p, _ in self.blocks]
        pick = np.full(reps, -1)
        if not self.proposals:
            return out, pick
        pick = np.where(rng.random(reps) < self.null_share, -1, rng.integers(0, len(self.proposals), size=reps))
        for i, c in enumerate(self.proposals):
            rows = np.flatnonzero(pick == i)
            if rows.size == 0:
                continue
            if isinstance(c, Dispersion):
                for b in c.members:
                    p, n = self.blocks[b]
                    out[b][rows] = _dirichlet(rng, (n - c.phi) / (c.phi - 1.0) * p, rows.size)
            else:
                out[c.block][rows] = self._tilted[i]
        return out, pick

    def counts(self, rng: np.random.Generator, reps: int) -> tuple[list[np.ndarray], np.ndarray]:
        """Return each block's counts [reps, k] drawn from the mixture and the draws' weights [reps]."""
        probs = self.probabilities(rng, reps)
        counts = [rng.multinomial(n, pr) for (_, n), pr in zip(self.blocks, probs)]
        return counts, self.weights(counts)

    def weights(self, counts: Sequence[np.ndarray]) -> np.ndarray:
        """Return ``null(x) / mixture(x)`` of draws whose blocks' counts (final totals) are ``counts``."""
        reps = counts[0].shape[0]
        if not self.proposals:
            return np.ones(reps)
        terms = [np.full(reps, np.log(self.null_share))]
        share = np.log((1.0 - self.null_share) / len(self.proposals))
        for i, c in enumerate(self.proposals):
            if isinstance(c, Dispersion):
                log_lr = np.zeros(reps)
                for b in c.members:
                    p, n = self.blocks[b]
                    x = np.asarray(counts[b], dtype=np.float64)
                    a = (n - c.phi) / (c.phi - 1.0)
                    ap = a * p
                    log_lr += (special.gammaln(a) - special.gammaln(n + a)
                               + (special.gammaln(x + ap) - special.gammaln(ap) - x * np.log(p)).sum(axis=1))
            else:
                p = self.blocks[c.block][0]
                log_lr = np.asarray(counts[c.block], dtype=np.float64) @ (np.log(self._tilted[i]) - np.log(p))
            terms.append(share + log_lr)
        return np.exp(-special.logsumexp(np.stack(terms), axis=0))


def _dirichlet(rng: np.random.Generator, alpha: np.ndarray, reps: int) -> np.ndarray:
    """Return Dirichlet(alpha) draws [reps, k] by normalised gammas (tiny alphas: zeros are allowed)."""
    g = rng.standard_gamma(np.broadcast_to(alpha, (reps, alpha.size)))
    s = g.sum(axis=1, keepdims=True)
    bad = s[:, 0] <= 0
    if bad.any():  # every gamma underflowed: put the mass on the likeliest cell
        g[bad] = 0.0
        g[bad, int(np.argmax(alpha))] = 1.0
        s[bad] = 1.0
    return g / s


@dataclass(frozen=True)
class Estimate:
    """An importance-sampling estimate of a rejection rate at ``level``."""

    level: float
    rate: float
    stderr: float
    reps: int
    hits: int  # draws that rejected
    weight_max: float  # bound of every weight (1 / NULL_SHARE, or 1 without proposals)

    def ratio(self) -> float:
        """Return the rate over the level."""
        return self.rate / self.level

    def interval(self, confidence: float = 0.99) -> tuple[float, float]:
        """Return a two-sided interval of the rate over the level (normal; weight bound x Clopper-Pearson with few hits)."""
        z = float(sps.norm.isf((1.0 - confidence) / 2.0))
        if self.hits >= MIN_HITS:
            lo, hi = self.rate - z * self.stderr, self.rate + z * self.stderr
        else:
            lo = 0.0
            hi = self.weight_max * float(sps.beta.ppf(1.0 - (1.0 - confidence) / 2.0, self.hits + 1, max(self.reps - self.hits, 1)))
        return max(lo, 0.0) / self.level, hi / self.level

    def __add__(self, other: Estimate) -> Estimate:
        """Pool two estimates of the same level (the mean of their rates, as one row)."""
        reps = self.reps + other.reps
        rate = (self.rate * self.reps + other.rate * other.reps) / reps
        se = np.sqrt((self.stderr * self.reps) ** 2 + (other.stderr * other.reps) ** 2) / reps
        return Estimate(self.level, rate, float(se), reps, self.hits + other.hits, max(self.weight_max, other.weight_max))


def estimate(pvalues: np.ndarray, weights: np.ndarray, levels: Sequence[float], weight_max: float) -> list[Estimate]:
    """Return the weighted rejection rates of ``pvalues`` [reps] at each level."""
    out = []
    for level in levels:
        y = weights * (pvalues <= level)
        reps = y.size
        out.append(Estimate(level, float(y.mean()), float(y.std(ddof=1) / np.sqrt(reps)) if reps > 1 else float("inf"),
                            reps, int((pvalues <= level).sum()), weight_max))
    return out


def union_rate(parts: Sequence[Estimate], level: float) -> Estimate:
    """Return the rate of ``any part rejects`` for independent parts: ``1 - prod(1 - rate)``, delta-method error."""
    rates = np.array([p.rate for p in parts])
    stay = np.prod(1.0 - rates)
    # d/d rate_j of 1 - prod(1 - rate) = prod_{i != j} (1 - rate_i)
    grad = stay / np.maximum(1.0 - rates, 1e-300)
    se = float(np.sqrt(np.sum((grad * np.array([p.stderr for p in parts])) ** 2)))
    return Estimate(level, float(1.0 - stay), se, min(p.reps for p in parts), sum(p.hits for p in parts),
                    max(p.weight_max for p in parts))


def dispersions(block: int | tuple[int, ...], df: float, critical: Sequence[float], count: int = 3) -> list[Dispersion]:
    """Return dispersion proposals for a quadratic statistic of ``df`` degrees of freedom read at ``critical`` values.

    A statistic ~ chi-square(df) stretched by phi has its mode near ``phi df``: the proposals put it
    at the critical values, ``phi = c / df`` (geometric steps between the lowest and highest c).
    """
    lo, hi = min(critical) / max(df, 1.0), max(critical) / max(df, 1.0)
    return [Dispersion(block, float(phi)) for phi in np.geomspace(max(lo, 1.05), max(hi, 1.1), count)]


def rates(mixture: Mixture, pvalue: Callable[[list[np.ndarray]], np.ndarray], levels: Sequence[float],
          rng: np.random.Generator, reps: int, chunk: int = 20_000) -> list[Estimate]:
    """Return the rejection rates at ``levels`` of ``pvalue(counts)`` over ``reps`` mixture draws (chunked)."""
    parts: list[list[Estimate]] = []
    done = 0
    while done < reps:
        r = min(chunk, reps - done)
        counts, w = mixture.counts(rng, r)
        parts.append(estimate(pvalue(counts), w, levels, 1.0 / mixture.null_share))
        done += r
    return [sum(col[1:], col[0]) for col in zip(*parts)]
