"""Randomised PIT omnibus: an O(N L) test of the whole output law for any vocabulary.

Every emitted token x_t is mapped to ``u_t = F_t(x_t - 1 | x_<t) + W p_t(x_t | x_<t)`` with
``W ~ U(0, 1)`` (randomised probability integral transform, Rosenblatt 1952; Brockwell 2007).
Under the null every u_t is U(0, 1) and the u_t are independent, whatever V and L are
(notes/theory.md). Two additive histograms are kept: the u_t pooled over positions
(uniformity) and consecutive pairs (u_t, u_{t+1}) on a grid (serial independence); both are
Pearson-tested against uniform and combined by Bonferroni.

Complements, does not replace, the per-prefix tests: a bug that only permutes tokens of equal
probability keeps the PIT uniform.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specaudit.results import Category, CheckResult, Status
from specaudit.stats import gof as stats

#: Bins of the pooled uniformity histogram.
BINS = 64
#: Bins per axis of the serial-pair grid.
PAIR_BINS = 8
#: Rows of V probabilities computed at once (bounds memory for large V).
ROWS_PER_STEP = 256


class PitCounts:
    """Additive histograms of the randomised PIT of finished sequences under ``target``."""

    def __init__(self, target: Any, length: int, rng: np.random.Generator):
        self.target, self.length, self.rng = target, length, rng
        self.hist = np.zeros(BINS, dtype=np.int64)
        self.pairs = np.zeros(PAIR_BINS * PAIR_BINS, dtype=np.int64)

    def transform(self, sequences: np.ndarray) -> np.ndarray:
        """Return the randomised PIT values [n, L] of ``sequences`` under the target."""
        n, length = sequences.shape
        u = np.empty((n, length))
        point = getattr(self.target, "cdf_at", None)
        if point is not None:  # chains that know F(x - 1) and p(x) directly (specaudit.chains.lazy): O(1) a token
            state = self.target.start_states(n)
            for t in range(length):
                below, prob = point(state, sequences[:, t])
                u[:, t] = below + self.rng.random(n) * prob
                state = self.target.advance(state, sequences[:, t])
            return np.clip(u, 0.0, np.nextafter(1.0, 0.0))
        for lo in range(0, n, ROWS_PER_STEP):
            seq = sequences[lo : lo + ROWS_PER_STEP]
            rows = np.arange(seq.shape[0])
            state = self.target.start_states(seq.shape[0])
            for t in range(length):
                probs = np.asarray(self.target.probs(state), dtype=np.float64)
                x = seq[:, t]
                below = np.cumsum(probs, axis=1)[rows, x] - probs[rows, x]  # F(x - 1)
                u[lo : lo + seq.shape[0], t] = below + self.rng.random(seq.shape[0]) * probs[rows, x]
                state = self.target.advance(state, x)
        return np.clip(u, 0.0, np.nextafter(1.0, 0.0))

    def observe(self, sequences: np.ndarray) -> None:
        """Add finished sequences [n, L]."""
        u = self.transform(sequences)
        self.hist += np.bincount((u * BINS).astype(np.int64).ravel(), minlength=BINS)
        if self.length > 1:
            cell = (u * PAIR_BINS).astype(np.int64)
            # disjoint pairs (u_0, u_1), (u_2, u_3), ...: independent under the null, so exact
            half = (self.length // 2) * 2
            pair = cell[:, 0:half:2] * PAIR_BINS + cell[:, 1:half:2]
            self.pairs += np.bincount(pair.ravel(), minlength=PAIR_BINS * PAIR_BINS)

    def merge(self, other: PitCounts) -> None:
        """Add another shard's histograms."""
        self.hist += other.hist
        self.pairs += other.pairs

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-able histograms."""
        return {"hist": self.hist.tolist(), "pairs": self.pairs.tolist()}

    def load(self, data: dict[str, Any]) -> None:
        """Add histograms written by :meth:`to_dict`."""
        self.hist += np.asarray(data["hist"], dtype=np.int64)
        self.pairs += np.asarray(data["pairs"], dtype=np.int64)


def pit_test(hist: np.ndarray, pairs: np.ndarray) -> tuple[float, float, float, float]:
    """Test PIT histograms against uniformity; return (X^2 pooled, p pooled, X^2 pairs, p pairs).

    Parameters
    ----------
    hist : ndarray of int
        Counts of u in BINS equal bins of [0, 1).
    pairs : ndarray of int
        Counts of consecutive pairs on a PAIR_BINS x PAIR_BINS grid (empty counts: not tested).

    Returns
    -------
    tuple of float
        Pearson statistics and p-values (chi-square, cells - 1 df); NaN p-value when empty.

    Notes
    -----
    Under the null the u are i.i.d. U(0, 1), so each bin expects n / bins and each cell of
    the grid n_pairs / bins^2. Bins are fixed before sampling; the pairs are disjoint
    ((u_0, u_1), (u_2, u_3), ...), hence independent. Valid when n / bins >= 5.

    References
    ----------
    .. [1] Rosenblatt, M. (1952). Remarks on a multivariate transformation. Ann. Math. Stat. 23.
    .. [2] Brockwell, A. E. (2007). Universal residuals. Biometrika 94(3), 779-786.
    """
    out = []
    for counts in (hist, pairs):
        n = counts.sum()
        if n == 0:
            out += [float("nan"), float("nan")]
            continue
        out += list(stats.divergence(counts, np.full(counts.size, n / counts.size)))  # Pearson vs uniform
    return out[0], out[1], out[2], out[3]


def pit(m: Any) -> CheckResult | None:
    """Randomised PIT omnibus: uniformity and serial independence of u_t, Bonferroni-combined."""
    counts = m.extra.get("pit") if hasattr(m, "extra") else None
    if counts is None or counts.hist.sum() == 0:
        return None
    x1, p1, x2, p2 = pit_test(counts.hist, counts.pairs)
    ps = [p for p in (p1, p2) if not np.isnan(p)]
    combined = min(1.0, len(ps) * min(ps))
    n = int(counts.hist.sum())
    dev = counts.hist / n * BINS - 1.0
    worst = int(np.argmax(np.abs(dev)))
    summary = (
        f"randomised PIT of {n} tokens: uniformity X^2 = {x1:.1f} on {BINS - 1} df (p = {p1:.3g}), "
        f"serial pairs X^2 = {x2:.1f} (p = {p2:.3g}); worst bin [{worst / BINS:.3f}, {(worst + 1) / BINS:.3f}) "
        f"holds {dev[worst]:+.1%} vs uniform"
    )
    data = {"tokens": n, "uniformity": {"statistic": x1, "pvalue": p1}, "serial": {"statistic": x2, "pvalue": p2},
            "hist": counts.hist.tolist()}
    return CheckResult("pit", Category.DISTRIBUTION, Status.PENDING, summary, x1, combined, BINS - 1, data=data)
