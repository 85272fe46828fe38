"""Pure statistics: goodness of fit with pre-registered cell merging, TV, ratio tests, Holm.

No I/O, no randomness, no knowledge of verifiers: arrays in, frozen results out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

__all__ = [
    "MIN_EXPECTED",
    "GoodnessOfFit",
    "NullLaw",
    "RatioTest",
    "chi2_isf",
    "chi2_sf",
    "divergence",
    "expected_tv_null",
    "goodness_of_fit",
    "grouped_null_law",
    "holm",
    "merge_groups",
    "ncx2_sf",
    "normal_isf",
    "normal_sf",
    "null_law",
    "ratio_test",
    "ratio_z",
    "saddlepoint_z",
    "statistics",
    "tv_distance",
]


class _DeferredSpecial:
    """Stand in for ``scipy.special`` until first use, then put the module in its place.

    Importing scipy.special costs ~0.3 s (its array-API shim loads numpy.f2py); a supervised run
    forks its child before any p-value is needed, so the first block need not wait for it (issue 20).
    """

    def __getattr__(self, name: str) -> Any:
        from scipy import special as module  # heavy: deferred to the first tail computed

        globals()["special"] = module
        return getattr(module, name)


special: Any = _DeferredSpecial()

#: Cells are merged until each group's expected count reaches this (Cochran's rule of five).
MIN_EXPECTED = 5.0


def merge_groups(expected: np.ndarray, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """Assign cells to groups whose expected counts reach ``min_expected``.

    Parameters
    ----------
    expected : ndarray
        Expected count of every cell, fixed before sampling.
    min_expected : float
        Smallest admissible expected count of a group.

    Returns
    -------
    ndarray of int
        Group id per cell (0..G-1); cells with expected count 0 get -1 (impossible outcomes,
        tested separately).

    Notes
    -----
    Groups depend on the expected counts only, never on what was observed: merging by
    observed counts (e.g. dropping unobserved cells, PyTorch ``_check_sampler_discrete``)
    biases the test. Cells at or above ``min_expected`` stay alone; the small ones are pooled
    in ascending order of expectation, and a short final pool joins the one before it.
    """
    expected = np.asarray(expected, dtype=np.float64)
    group = np.full(expected.size, -1, dtype=np.int64)
    big = np.flatnonzero(expected >= min_expected)
    group[big] = np.arange(big.size)
    small = np.flatnonzero((expected > 0) & (expected < min_expected))
    if small.size == 0:
        return group
    small = small[np.argsort(expected[small], kind="stable")]
    cs = np.cumsum(expected[small])
    gid = np.empty(small.size, dtype=np.int64)
    start = 0
    totals: list[float] = []
    while start < small.size:
        base = cs[start - 1] if start else 0.0
        stop = min(int(np.searchsorted(cs, base + min_expected, side="left")) + 1, small.size)
        gid[start:stop] = big.size + len(totals)
        totals.append(cs[stop - 1] - base)
        start = stop
    if totals[-1] < min_expected:
        tail = gid == gid[-1]
        if len(totals) > 1:
            gid[tail] -= 1  # a short tail pool joins the pool before it
        elif big.size:
            gid[tail] = int(np.argmin(expected[big]))  # or the smallest single cell
    group[small] = gid
    return group


@dataclass(frozen=True)
class GoodnessOfFit:
    """Result of a goodness-of-fit test of observed counts against an exact law."""

    statistic: float
    pvalue: float
    df: int
    method: str  # "pearson" or "g"
    n: int
    cells: int  # cells of the law with positive probability
    groups: int  # after merging by expected count
    impossible: int  # observations in cells of probability 0
    tv: float  # total-variation distance between the empirical and the exact law
    tv_null: float  # E[TV] if the verifier were exact, at this n

    def effect_size(self) -> float:
        """Return Cohen's w = sqrt(X^2 / n)."""
        return float(np.sqrt(self.statistic / self.n)) if self.n else float("nan")


def tv_distance(observed: np.ndarray, probs: np.ndarray) -> float:
    """Return the total-variation distance between observed frequencies and ``probs``."""
    n = observed.sum()
    return float(0.5 * np.abs(observed / n - probs).sum()) if n else float("nan")


def expected_tv_null(probs: np.ndarray, n: int) -> float:
    """Return E[TV(empirical, probs)] for ``n`` exact draws from ``probs``.

    Parameters
    ----------
    probs : ndarray
        The exact law.
    n : int
        Sample size.

    Returns
    -------
    float
        ``0.5 * sum_i E|X_i/n - p_i|`` with ``X_i ~ Binomial(n, p_i)``.

    Notes
    -----
    Uses De Moivre's closed form of the binomial mean absolute deviation,
    ``E|X - np| = 2 (m+1) C(n, m+1) p^(m+1) (1-p)^(n-m)`` with ``m = floor(np)``, in logs.

    References
    ----------
    .. [1] Diaconis, P. and Zabell, S. (1991). Closed form summation for classical
       distributions. Statistical Science 6(3), 284-302.
    """
    p = np.asarray(probs, dtype=np.float64)
    p = p[(p > 0) & (p < 1)]
    if n <= 0 or p.size == 0:
        return 0.0
    m = np.floor(n * p)
    logmad = (
        np.log(2.0)
        + np.log(m + 1)
        + special.gammaln(n + 1)
        - special.gammaln(m + 2)
        - special.gammaln(n - m)
        + (m + 1) * np.log(p)
        + (n - m) * np.log1p(-p)
    )
    return float(0.5 * np.exp(logmad).sum() / n)


def goodness_of_fit(
    observed: np.ndarray,
    probs: np.ndarray,
    method: str = "pearson",
    min_expected: float = MIN_EXPECTED,
) -> GoodnessOfFit:
    """Test observed counts against an exact law, merging cells by expected count.

    Parameters
    ----------
    observed : ndarray of int
        Observed count per cell.
    probs : ndarray
        Exact probability per cell (sums to 1).
    method : {"pearson", "g"}
        Pearson's X^2 or the likelihood-ratio G^2 (as scipy ``power_divergence``).
    min_expected : float
        Merge cells until each group expects at least this many observations.

    Returns
    -------
    GoodnessOfFit
        ``pvalue`` from the chi-square law with ``groups - 1`` degrees of freedom; 0 with an
        infinite statistic when any observation fell in a cell of probability 0.

    Notes
    -----
    Valid when every group's expected count is at least about 5 (Cochran). Groups are fixed by
    ``probs`` and ``n`` alone (see `merge_groups`), so the test keeps its level.

    References
    ----------
    .. [1] Cochran, W. G. (1954). Some methods for strengthening the common chi-square tests.
       Biometrics 10(4), 417-451.
    """
    observed = np.asarray(observed, dtype=np.int64)
    probs = np.asarray(probs, dtype=np.float64)
    n = int(observed.sum())
    group = merge_groups(probs * n, min_expected)
    impossible = int(observed[group < 0].sum())
    n_groups = int(group.max()) + 1 if group.size and group.max() >= 0 else 0
    tv = tv_distance(observed, probs)
    tv_null = expected_tv_null(probs, n)
    cells = int((probs > 0).sum())
    if impossible:
        return GoodnessOfFit(float("inf"), 0.0, max(n_groups - 1, 0), method, n, cells, n_groups, impossible, tv, tv_null)
    if n_groups < 2:
        # one possible outcome (or all merged into one): nothing to test beyond impossibility
        return GoodnessOfFit(0.0, 1.0, 0, method, n, cells, n_groups, 0, tv, tv_null)
    ok = group >= 0
    obs = np.bincount(group[ok], weights=observed[ok], minlength=n_groups)
    exp = np.bincount(group[ok], weights=probs[ok], minlength=n_groups) * n
    statistic, pvalue = divergence(obs, exp, method)
    return GoodnessOfFit(statistic, pvalue, n_groups - 1, method, n, cells, n_groups, 0, tv, tv_null)


def grouped_null_law(probs: np.ndarray, n: int, method: str = "pearson", min_expected: float = MIN_EXPECTED) -> NullLaw:
    """Return the null law of the statistic `goodness_of_fit` computes for ``n`` draws from ``probs``.

    Cells merged as there (`merge_groups`); laws of independent tests add (``law_a + law_b``), so a
    statistic summed over independent multinomials is read through the sum of their laws.
    """
    probs = np.asarray(probs, dtype=np.float64)
    group = merge_groups(probs * n, min_expected)
    ok = group >= 0
    if not ok.any():
        return NullLaw((0.0, 0.0, 0.0))
    return null_law(np.bincount(group[ok], weights=probs[ok], minlength=int(group.max()) + 1) * n, method)


#: Groups expecting more than this are summed in closed form (terms within O(1/E^2) of chi-square(1)).
_NUMERIC_MAX = 2000.0


#: P-values of the three-cumulant fit below this are recomputed from the characteristic function.
REFINE_BELOW = 0.02
#: Two- and three-group laws with at most this many outcomes get their exact tail by enumeration.
EXACT_MAX_OUTCOMES = 2_000_000
#: At most this many quadrature nodes (else, for few df, the fit alone is used).
_CF_MAX_NODES = 20_000
#: Groups expecting more than this enter the characteristic function as chi-square(1) with 1/E corrections.
_CF_EXACT_MAX = 200.0


@dataclass(frozen=True, eq=False)
class NullLaw:
    """The null law of a count statistic over merged groups (or a sum of independent ones).

    ``kappa`` holds the statistic's first three cumulants; ``parts`` the (expected counts, method)
    of each independent multinomial it sums, e.g. the configurations of the greedy-drafter
    corner (:meth:`__add__`). :meth:`sf` reads the bulk from a three-cumulant chi-square fit and
    the tail (fit below :data:`REFINE_BELOW`) from the characteristic function (`null_law`).
    """

    kappa: tuple[float, float, float]
    parts: tuple[tuple[np.ndarray, str], ...] = ()

    def __add__(self, other: NullLaw) -> NullLaw:
        kappa = (self.kappa[0] + other.kappa[0], self.kappa[1] + other.kappa[1], self.kappa[2] + other.kappa[2])
        return NullLaw(kappa, self.parts + other.parts)

    @property
    def df(self) -> float:
        """Return the mean, the chi-square degrees of freedom the statistic would have asymptotically."""
        return self.kappa[0]

    def fit_sf(self, x: float | np.ndarray) -> np.ndarray:
        """Return ``P(T >= x)`` under the three-cumulant fit ``c + a chi2(b)`` (vectorised over ``x``)."""
        k1, k2, k3 = self.kappa
        x = np.asarray(x, dtype=np.float64)
        if k1 <= 0 or k2 <= 0 or k3 <= 0:
            return np.where(x > 0, 0.0, 1.0) if k1 <= 0 else special.chdtrc(k1, x)
        a = k3 / (4.0 * k2)
        b = 8.0 * k2**3 / k3**2
        c = k1 - a * b
        return np.where(x > c, special.chdtrc(b, np.maximum(x - c, 0.0) / a), 1.0)

    def sf(self, x: float | np.ndarray) -> np.ndarray:
        """Return ``P(T >= x)`` under the null (vectorised over ``x``)."""
        x = np.asarray(x, dtype=np.float64)
        p = np.array(self.fit_sf(x), dtype=np.float64)
        refine = (p < REFINE_BELOW) & (p > 1e-15)  # below 1e-15 no level is near
        if not refine.any():
            return p
        table = self._exact
        if table is not None:  # two or three groups: the exact multinomial tail, by enumeration
            values, tail = table
            at = np.searchsorted(values, x[refine] * (1.0 - 1e-12) - 1e-12, side="left")
            p[refine] = np.where(at < values.size, tail[np.minimum(at, values.size - 1)], 0.0)
            return p
        if (grid := self._grid) is None:
            if (split := self._split) is not None:  # few groups, some small: exact over the small ones
                p[refine] = split.sf(x[refine])
            return p
        refine &= x <= grid[2]
        if refine.any():
            t, weight, _ = grid
            xs = x[refine]
            cf = 0.5 + (np.imag(np.exp(-1j * np.outer(xs, t)) * weight).sum(axis=1))
            # Gil-Pelaez is accurate to ~1e-12 here; below that keep the (also negligible) fit
            p[refine] = np.where(cf > 1e-11, np.minimum(cf, 1.0), np.minimum(p[refine], 1e-11))
        return p

    def fit_isf(self, q: float) -> float:
        """Return ``x`` with ``P(T >= x) = q`` under the three-cumulant fit (closed form, cheap)."""
        k1, k2, k3 = self.kappa
        if k1 <= 0 or k2 <= 0 or k3 <= 0:
            return float(special.chdtri(max(k1, 1e-12), q))
        a, b = k3 / (4.0 * k2), 8.0 * k2**3 / k3**2
        return float(k1 - a * b + a * special.chdtri(b, q))

    def isf(self, q: float) -> float:
        """Return the smallest ``x`` with ``P(T >= x) <= q``: the critical value of a test at level ``q``."""
        lo, hi = 0.0, max(self.kappa[0], 1.0)
        while float(self.sf(hi)) > q:
            lo, hi = hi, 2.0 * hi
        for _ in range(60):  # bisection to ~1e-12 relative
            mid = 0.5 * (lo + hi)
            if float(self.sf(mid)) > q:
                lo = mid
            else:
                hi = mid
        return hi

    @cached_property
    def _exact(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Return (sorted statistic values, P(T >= value)) by enumerating every outcome, or None.

        Only for one multinomial of two or three groups with at most :data:`EXACT_MAX_OUTCOMES`
        outcomes: there the law is coarse (a few df, small counts: per-prefix nodes) and neither the
        fit nor the characteristic function holds far in the tail (x10 at 2.4e-7 for expected
        counts 5, 5, 290).
        """
        if len(self.parts) != 1:
            return None
        expected, method = self.parts[0]
        k, n = expected.size, int(round(float(expected.sum())))
        if k not in (2, 3) or abs(n - expected.sum()) > 1e-6 * max(n, 1) or (n + 1) ** (k - 1) / (k - 1) > EXACT_MAX_OUTCOMES:
            return None
        probs = expected / n
        if k == 2:
            first = np.arange(n + 1.0)
            outcomes = np.stack([first, n - first], axis=1)
        else:
            a, b = np.meshgrid(np.arange(n + 1.0), np.arange(n + 1.0), indexing="ij")
            keep = a + b <= n
            outcomes = np.stack([a[keep], b[keep], n - a[keep] - b[keep]], axis=1)
        logpmf = special.gammaln(n + 1.0) + (special.xlogy(outcomes, probs) - special.gammaln(outcomes + 1.0)).sum(axis=1)
        values = statistics(outcomes, expected, method)
        order = np.argsort(values, kind="stable")
        values, pmf = values[order], np.exp(logpmf[order])
        tail = np.cumsum(pmf[::-1])[::-1]  # P(T >= values[i])
        return values, np.minimum(tail, 1.0)

    @cached_property
    def _split(self) -> _SmallCells | None:
        """Return the small-cell enumeration of a few-group law (see :class:`_SmallCells`), or None."""
        if len(self.parts) != 1:
            return None
        return _SmallCells.of(*self.parts[0])

    @cached_property
    def _grid(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """Return the Gil-Pelaez quadrature (nodes t, weights phi(t) dt / (pi t), largest x served), or None."""
        k1, k2, _ = self.kappa
        if not self.parts or k1 < 2.0:
            return None
        x_max = k1 + 60.0 * np.sqrt(k2) + 50.0
        step = np.pi / x_max  # period 2 x_max: no aliasing for x <= x_max
        # |phi(t)| ~ (1 + 4 t^2)^(-df / 4): stop where it is below 1e-10
        top = 0.5 * np.sqrt(10.0 ** (40.0 / k1) - 1.0)
        if top / step > _CF_MAX_NODES:  # few df: phi decays too slowly to integrate cheaply; keep the fit
            return None
        t = (np.arange(int(np.ceil(top / step))) + 0.5) * step
        log_phi = np.zeros(t.size, dtype=np.complex128)
        for expected, method in self.parts:
            log_phi += _log_cf(t, expected, method)
        return t, np.exp(log_phi) * step / (np.pi * t), x_max


#: Groups expecting at most this are enumerated by `_SmallCells` (their Poisson skew drives the far tail).
SMALL_CELL = 5000.0
#: At most this many joint outcomes of the small groups are enumerated.
SMALL_OUTCOMES = 200_000
#: Above this many statistic values a tail is read from a table (built once) instead of summed per value.
_TABLE_ABOVE = 64


class _SmallCells:
    """The tail of X^2 or G^2 for few groups, exact over the small ones, asymptotic over the large ones.

    With few degrees of freedom the characteristic function decays too slowly to integrate, and a
    group expecting ~50 observations makes the far tail heavier than any three-moment fit: at 3.3e-5
    the fit under-states one-hot's accepted-count law x1.28 (``benchmarks/calibration.py``). The
    statistic splits exactly: with S the small groups, L the rest, ``pi_L`` their probability,
    ``n' = n - sum O_S`` and ``D = sum_S (O - E)``,

    - Pearson: ``X^2 = sum_S (O - E)^2 / E + D^2 / (n pi_L) + (n' / (n pi_L)) X^2_L'``,
    - G^2:     ``G^2 = 2 sum_S O log(O / E) + 2 n' log(n' / (n pi_L)) + G^2_L'``,

    where ``X^2_L'`` (``G^2_L'``) is the statistic of the large groups against their conditional law
    given ``O_S`` (a multinomial of ``n'`` draws). So ``P(T >= x) = sum_{o_S} P(O_S = o_S)
    P(T_L' >= (x - A(o_S)) / c(o_S))``: the small groups' counts are enumerated under their exact
    multinomial marginal, the large part read from its own `null_law` (groups expecting > SMALL_CELL,
    where the fit is accurate).
    """

    def __init__(self, pmf: np.ndarray, shift: np.ndarray, scale: np.ndarray, rest: NullLaw):
        self.pmf, self.shift, self.scale, self.rest = pmf, shift, scale, rest

    @classmethod
    def of(cls, expected: np.ndarray, method: str) -> _SmallCells | None:
        """Return the split of a law over groups ``expected`` (None: nothing small, or too many outcomes)."""
        e = np.asarray(expected, dtype=np.float64)
        n = float(e.sum())
        order = np.argsort(e, kind="stable")
        small: list[int] = []
        outcomes = 1.0
        for i in order[: e.size - 1]:  # at least one group stays in the large part
            span = 2.0 * (10.0 * np.sqrt(e[i]) + 15.0)
            if e[i] > SMALL_CELL or outcomes * span > SMALL_OUTCOMES:
                break
            small.append(int(i))
            outcomes *= span
        if not small:
            return None
        large = np.setdiff1d(np.arange(e.size), small)
        pi = e / n
        pi_large = float(pi[large].sum())
        axes = [np.arange(max(np.floor(e[i] - 10.0 * np.sqrt(e[i]) - 15.0), 0.0), np.ceil(e[i] + 10.0 * np.sqrt(e[i]) + 15.0) + 1.0)
                for i in small]
        grid = np.stack([a.ravel() for a in np.meshgrid(*axes, indexing="ij")], axis=1)  # [outcomes, |S|]
        rest_n = n - grid.sum(axis=1)
        keep = rest_n >= 0
        grid, rest_n = grid[keep], rest_n[keep]
        logpmf = (special.gammaln(n + 1.0) - special.gammaln(rest_n + 1.0) - special.gammaln(grid + 1.0).sum(axis=1)
                  + (grid * np.log(pi[small])).sum(axis=1) + rest_n * np.log(pi_large))
        keep = logpmf > logpmf.max() - 60.0  # outcomes below e^-60 of the mode: no tail read here is near them
        grid, rest_n, pmf = grid[keep], rest_n[keep], np.exp(logpmf[keep])
        es = e[small]
        if method == "pearson":
            d = (grid - es).sum(axis=1)
            shift = ((grid - es) ** 2 / es).sum(axis=1) + d**2 / (n * pi_large)
            scale = rest_n / (n * pi_large)
        else:
            shift = 2.0 * special.xlogy(grid, grid / es).sum(axis=1) + 2.0 * special.xlogy(rest_n, rest_n / (n * pi_large))
            scale = np.ones_like(rest_n)
        rest = null_law(e[large] / pi_large * (1.0 - pi[small].sum()) if large.size > 1 else e[large], method)
        # outcomes whose shifts agree to 2e-3 are summed (scale averaged): tails move by < 0.1% for such a shift
        key = np.round(shift / 2e-3).astype(np.int64)
        uniq, at = np.unique(key, return_inverse=True)
        mass = np.bincount(at, weights=pmf, minlength=uniq.size)
        shift = np.bincount(at, weights=pmf * shift, minlength=uniq.size) / np.maximum(mass, 1e-300)
        scale = np.bincount(at, weights=pmf * scale, minlength=uniq.size) / np.maximum(mass, 1e-300)
        return cls(mass, shift, scale, rest)

    @cached_property
    def _rest_table(self) -> tuple[np.ndarray, np.ndarray]:
        """Return (x grid, log tail) of the large part's fit, to interpolate (the fit is smooth: 1e-5 relative)."""
        xs = np.linspace(0.0, self._top, 20_000)
        return xs, np.log(np.maximum(self.rest.fit_sf(xs), 1e-300))

    @cached_property
    def _top(self) -> float:
        """Return a statistic value beyond which every tail here is below ~1e-16."""
        k1, k2, _ = self.rest.kappa
        return float(self.shift.max() + self.scale.max() * (k1 + 60.0 * np.sqrt(max(k2, 1.0)) + 50.0))

    def _sf(self, x: np.ndarray) -> np.ndarray:
        """Return the tail at each x by summing over the enumerated outcomes."""
        out = np.empty(x.size)
        xs, log_tail = self._rest_table
        chunk = max(1, 2_000_000 // max(self.pmf.size, 1))  # bounded memory
        for lo in range(0, x.size, chunk):
            arg = (x[lo : lo + chunk, None] - self.shift) / np.maximum(self.scale, 1e-300)
            if self.rest.kappa[0] <= 0:  # one large group: no large part
                tail = (arg <= 1e-9).astype(np.float64)
            else:
                tail = np.where(arg <= 0.0, 1.0, np.exp(np.interp(arg, xs, log_tail, right=-np.inf)))
            out[lo : lo + chunk] = tail @ self.pmf
        return out

    @cached_property
    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        """Return (x grid, log tail) for interpolation, on [0, where the tail reaches ~1e-16]."""
        xs = np.linspace(0.0, self._top, 600)
        return xs, np.log(np.maximum(self._sf(xs), 1e-300))

    def sf(self, x: np.ndarray) -> np.ndarray:
        """Return ``P(T >= x)`` (summed directly for a few values, else interpolated in log from a table)."""
        x = np.asarray(x, dtype=np.float64)
        if x.size <= _TABLE_ABOVE:
            return np.minimum(self._sf(x.ravel()), 1.0).reshape(x.shape)
        xs, log_tail = self._table
        return np.minimum(np.exp(np.interp(x, xs, log_tail)), 1.0)


def _log_cf(t: np.ndarray, expected: np.ndarray, method: str) -> np.ndarray:
    """Return log E[exp(i t T)] of the statistic over groups expecting ``expected`` (multinomial null).

    The Poisson terms' characteristic functions (exact pmf sums; chi-square(1) with the 1/E
    cumulant corrections above :data:`_CF_EXACT_MAX`) times ``(1 - 2it)^(1/2)``, which removes the
    chi-square(1) of the Poisson total: ``X^2_Poisson = X^2_multinomial + (S - n)^2 / n`` exactly,
    the two nearly independent.
    """
    half = np.log1p(-2j * t) / 2.0
    out = half.copy()
    e = np.asarray(expected, dtype=np.float64)
    big = e[e > _CF_EXACT_MAX]
    if big.size:
        d = _poisson_term_cumulants(big, method).sum(axis=1) - np.array([1.0, 2.0, 8.0]) * big.size
        out += -big.size * half + 1j * t * d[0] - d[1] * t**2 / 2.0 - 1j * d[2] * t**3 / 6.0
    for one in e[e <= _CF_EXACT_MAX]:
        lo = max(np.floor(one - 10.0 * np.sqrt(one) - 15.0), 0.0)  # pmf outside < 1e-20
        o = np.arange(lo, np.ceil(one + 10.0 * np.sqrt(one) + 15.0) + 1.0)
        pmf = np.exp(special.xlogy(o, one) - one - special.gammaln(o + 1.0))
        pmf /= pmf.sum()
        term = (o - one) ** 2 / one if method == "pearson" else 2.0 * (special.xlogy(o, o / one) - (o - one))
        for lo_t in range(0, t.size, 2048):  # bounded memory
            out[lo_t : lo_t + 2048] += np.log(np.exp(1j * np.outer(t[lo_t : lo_t + 2048], term)) @ pmf)
    return out


def _poisson_term_cumulants(expected: np.ndarray, method: str) -> np.ndarray:
    """Return the first three cumulants [3, k] of each group's term under a Poisson(E) count."""
    e = np.asarray(expected, dtype=np.float64)
    if method == "pearson":  # (O - E)^2 / E, O ~ Poisson(E): moments from mu4 = E + 3E^2, mu6 = E + 25E^2 + 15E^3
        return np.stack([np.ones_like(e), 2.0 + 1.0 / e, 8.0 + 22.0 / e + 1.0 / e**2])
    # deviance 2 (O log(O / E) - (O - E)): sums to G^2 when sum O = sum E; moments by summing the pmf
    out = np.empty((3, e.size))
    big = e > _NUMERIC_MAX
    # large E: 1 + 1/(6E), 2 + 2/(3E), 8 + 4/E (the 1/E terms of the pmf sums; Williams 1976 for the mean)
    out[0, big] = 1.0 + 1.0 / (6.0 * e[big])
    out[1, big] = 2.0 + 2.0 / (3.0 * e[big])
    out[2, big] = 8.0 + 4.0 / e[big]
    small = np.flatnonzero(~big)
    if small.size:
        es = e[small][:, None]
        lo = np.maximum(np.floor(es - 12.0 * np.sqrt(es) - 30.0), 0.0)
        width = int(np.max(np.ceil(es + 12.0 * np.sqrt(es) + 30.0) - lo)) + 1
        o = lo + np.arange(width)[None, :]
        logpmf = special.xlogy(o, es) - es - special.gammaln(o + 1.0)
        pmf = np.exp(logpmf)
        pmf /= pmf.sum(axis=1, keepdims=True)
        d = 2.0 * (special.xlogy(o, o / es) - (o - es))
        m1 = (pmf * d).sum(axis=1)
        c = d - m1[:, None]
        out[0, small] = m1
        out[1, small] = (pmf * c**2).sum(axis=1)
        out[2, small] = (pmf * c**3).sum(axis=1)
    return out


def null_law(expected: np.ndarray, method: str = "pearson") -> NullLaw:
    """Return the null law of Pearson's X^2 or G^2 over groups with these expected counts.

    Parameters
    ----------
    expected : ndarray
        Expected count per group (all > 0), summing to the multinomial total n.
    method : {"pearson", "g"}
        The statistic.

    Returns
    -------
    NullLaw
        A three-cumulant fit ``c + a chi2(b)`` to the statistic's law under the exact multinomial.

    Notes
    -----
    The chi-square law with ``k - 1`` df is only the limit: with groups expecting ~5 its tail,
    read at alpha / m after Holm (~3e-5), is too light, and a correct verifier is rejected up to
    twice as often as stated (``benchmarks/calibration.py``). The counts are taken as
    independent Poisson(E_g), whose per-group term cumulants are exact (closed form for Pearson,
    a pmf sum for G^2), and conditioning on the total is accounted for by removing one chi-square(1)
    (cumulants 1, 2, 8): this gives Pearson's exact mean ``k - 1`` and Haldane's variance
    ``2(k - 1) + sum 1/E`` to O(k^2 / n), and the third cumulant's 1/E term that drives the tail.
    The three-moment chi-square fit is Pearson's (1959) / Satterthwaite's construction; with every E
    large it is the chi-square(k - 1) law. Measured calibration: ``benchmarks/calibration.py``.

    References
    ----------
    .. [1] Haldane, J. B. S. (1937). The exact value of the moments of the distribution of chi-square.
       Biometrika 29, 133-143.
    .. [2] Williams, D. A. (1976). Improved likelihood ratio tests for complete contingency tables.
       Biometrika 63(1), 33-37.
    .. [3] Pearson, E. S. (1959). Note on an approximation to the distribution of non-central chi2.
       Biometrika 46, 364.
    """
    e = np.asarray(expected, dtype=np.float64)
    if e.size < 2:
        return NullLaw((0.0, 0.0, 0.0))
    terms = _poisson_term_cumulants(e, method).sum(axis=1)
    return NullLaw((float(terms[0] - 1.0), float(terms[1] - 2.0), float(terms[2] - 8.0)), ((e, method),))


def divergence(observed: np.ndarray, expected: np.ndarray, method: str = "pearson") -> tuple[float, float]:
    """Return Pearson's X^2 or the G^2 statistic of ``observed`` against ``expected`` counts, and its p-value.

    Parameters
    ----------
    observed, expected : ndarray
        Counts per group (expected all > 0, same total).
    method : {"pearson", "g"}
        ``sum (O - E)^2 / E`` or ``2 sum O log(O / E)``.

    Returns
    -------
    tuple of float
        The statistic and its tail under the exact multinomial null (`null_law`: the chi-square law
        with ``len(observed) - 1`` df, corrected by three cumulants for small expected counts).

    Notes
    -----
    The terms of ``scipy.stats.power_divergence`` (lambda 1 or 0) without its argument handling,
    and the tail through ``scipy.special``. The distribution helpers below call the same
    scipy.special functions as scipy.stats, ~100x cheaper per call and without importing
    scipy.stats (~0.4 s per process).
    """
    obs = np.asarray(observed, dtype=np.float64)
    exp = np.asarray(expected, dtype=np.float64)
    statistic = float(statistics(obs[None, :], exp, method)[0])
    return statistic, float(null_law(exp, method).sf(statistic))


def statistics(observed: np.ndarray, expected: np.ndarray, method: str = "pearson") -> np.ndarray:
    """Return X^2 or G^2 of each row of ``observed`` [R, k] against ``expected`` [k] (vectorised)."""
    obs = np.asarray(observed, dtype=np.float64)
    if method == "pearson":
        return ((obs - expected) ** 2 / expected).sum(axis=-1)
    return 2.0 * special.xlogy(obs, obs / expected).sum(axis=-1)


def chi2_sf(x: float, df: int) -> float:
    """Return the chi-square tail ``P(X >= x)`` with ``df`` degrees of freedom (``scipy.stats.chi2.sf``)."""
    return float(special.chdtrc(df, x))


def chi2_isf(q: float, df: int) -> float:
    """Return ``x`` with ``P(X >= x) = q`` for ``df`` degrees of freedom (``scipy.stats.chi2.isf``)."""
    return float(special.chdtri(df, q))


def ncx2_sf(x: float, df: int, nc: float) -> float:
    """Return the noncentral chi-square tail ``P(X >= x)`` (``scipy.stats.ncx2.sf``; absolute error ~1e-16)."""
    return 1.0 - float(special.chndtr(x, df, nc))


def normal_sf(z: float) -> float:
    """Return the standard normal tail ``P(Z >= z)`` (``scipy.stats.norm.sf``)."""
    return float(special.ndtr(-z))


def normal_isf(q: float) -> float:
    """Return ``z`` with ``P(Z >= z) = q`` (``scipy.stats.norm.isf``)."""
    return float(-special.ndtri(q))


@dataclass(frozen=True)
class RatioTest:
    """Observed ratio of sums (e.g. tokens per step) against its exact value."""

    statistic: float  # z-score
    pvalue: float  # two-sided
    estimate: float
    exact: float
    stderr: float
    n: int

    def ci(self, level: float = 0.999) -> tuple[float, float]:
        """Return the two-sided normal confidence interval of the estimate."""
        half = normal_isf((1 - level) / 2) * self.stderr
        return (self.estimate - half, self.estimate + half)


def ratio_test(moments: np.ndarray, n: int, exact: float, law: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> RatioTest:
    """Test a ratio estimator sum(T)/sum(R) over ``n`` i.i.d. units against ``exact``.

    Parameters
    ----------
    moments : ndarray, shape (5,)
        Sums over units of R, T, R^2, T^2 and R*T (e.g. rounds and tokens per sequence).
    n : int
        Number of i.i.d. units (sequences).
    exact : float
        The exact value of E[T] / E[R].
    law : (R values, T values, probabilities), optional
        The exact per-unit law of (R, T) under the null (:func:`specaudit.laws.rounds.rounds_tokens_law`).

    Returns
    -------
    RatioTest
        z = (estimate - exact) / stderr with a two-sided normal p-value; with ``law``, z is the
        normal score of the saddlepoint tail (:func:`saddlepoint_z`), so the p-value is that tail's.

    Notes
    -----
    Delta method: Var(T/R-bar) ~ Var(T - r R) / (n E[R]^2), with the variance estimated from the
    sample moments around the exact ratio (valid under the null; large n). The studentised z is
    skewed at small n (D = T - r R is): at N = 2,000-3,000 its normal tail at 3.3e-5 was 1.05-1.16x
    the level (benchmarks/calibration.py). With the exact law of D at hand the mean of D is tested
    by its saddlepoint tail instead (Lugannani-Rice), whose relative error is O(1/n) uniformly in the tail.

    References
    ----------
    .. [1] Cochran, W. G. (1977). Sampling Techniques, 3rd ed., section 6.4 (ratio estimators).
    """
    sr = float(moments[0])
    if n < 2 or sr <= 0:
        return RatioTest(float("nan"), float("nan"), float("nan"), exact, float("nan"), n)
    z, estimate, stderr = (float(x) for x in ratio_z(np.asarray(moments, dtype=np.float64), n, exact, law))
    return RatioTest(z, 2 * normal_sf(abs(z)), estimate, exact, stderr, n)


def ratio_z(moments: np.ndarray, n: int, exact: float,
            law: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (z, estimate, stderr) of `ratio_test` for moments [..., 5] (vectorised; sum R > 0).

    With ``law`` (R values, T values, probabilities: the exact per-unit law), z is
    :func:`saddlepoint_z` of the mean of D = T - exact R, not the studentised delta-method score.
    """
    sr, st, srr, stt, srt = np.moveaxis(np.asarray(moments, dtype=np.float64), -1, 0)
    estimate = st / sr
    mean_r = sr / n
    # E[(T - c R)^2] with c the exact ratio: zero-mean under the null
    var = (stt - 2 * exact * srt + exact * exact * srr) / n - ((st - exact * sr) / n) ** 2
    stderr = np.sqrt(np.maximum(var, 0.0) / n) / mean_r
    same = np.isclose(estimate, exact, rtol=1e-12, atol=1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(stderr == 0.0, np.where(same, 0.0, np.inf), (estimate - exact) / np.where(stderr == 0.0, 1.0, stderr))
    if law is not None:
        r, t, probs = (np.asarray(x, dtype=np.float64) for x in law)
        d = t - exact * r
        if np.count_nonzero(probs) > 1 and float(probs @ d**2) > 0:
            z = saddlepoint_z((st - exact * sr) / n, n, d, probs)
    return z, estimate, stderr


def saddlepoint_z(mean: np.ndarray | float, n: int, values: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Return the normal score of the tail of the mean of ``n`` i.i.d. draws from a finite law, where ``mean`` lies.

    The law puts ``probs`` on ``values`` and has mean 0 (a null hypothesis). The tail on the side
    of ``mean`` (above it when positive, below when negative) is the Lugannani-Rice saddlepoint
    approximation; the result is the z with the same normal tail, signed like ``mean``, so that
    ``2 * normal_sf(|z|)`` is the two-sided p-value (twice the tail the mean lies in). A mean at
    the law's end has its exact probability ``w^n``; one outside its range probability 0: z = +-inf.
    Vectorised over ``mean``. For a law of few values and a handful of draws (n < ~20) the
    approximation is lumpy (p is not monotone in the mean everywhere); the checks' n are thousands.

    References
    ----------
    .. [1] Lugannani, R. and Rice, S. (1980). Saddle point approximation for the distribution of the
       sum of independent random variables. Advances in Applied Probability 12(2), 475-490.
    .. [2] Butler, R. W. (2007). Saddlepoint Approximations with Applications, section 1.2.
    """
    keep = probs > 0
    d, w = values[keep], probs[keep]
    x = np.atleast_1d(np.asarray(mean, dtype=np.float64))
    lo, hi = float(d.min()), float(d.max())
    var = float(w @ d**2 - (w @ d) ** 2)
    inside = (x > lo) & (x < hi)
    xi = np.clip(x, lo + 1e-12 * (hi - lo), hi - 1e-12 * (hi - lo))
    # solve K'(s) = x by Newton steps kept inside a bisection bracket (K' increases from lo to hi)
    s = xi / var
    below, above = np.full(x.shape, -np.inf), np.full(x.shape, np.inf)
    for _ in range(100):
        e = w * np.exp((s[:, None] - 0.0) * d - np.max(s[:, None] * d, axis=1, keepdims=True))
        m0 = e.sum(axis=1)
        k1 = (e @ d) / m0
        k2 = (e @ d**2) / m0 - k1**2
        gap = k1 - xi
        below = np.where(gap < 0, np.maximum(below, s), below)
        above = np.where(gap > 0, np.minimum(above, s), above)
        step = s - gap / np.maximum(k2, 1e-300)
        bisect = np.where(np.isfinite(below) & np.isfinite(above), 0.5 * (below + above),
                          np.where(np.isfinite(below), 2 * np.abs(s) + 1.0, -2 * np.abs(s) - 1.0))
        s = np.where((step > below) & (step < above), step, bisect)
        if np.all(np.abs(gap) <= 1e-13 * (hi - lo)):
            break
    peak = np.max(s[:, None] * d, axis=1)
    cgf = np.log((w * np.exp(s[:, None] * d - peak[:, None])).sum(axis=1)) + peak  # K(s)
    e = w * np.exp(s[:, None] * d - peak[:, None])
    m0 = e.sum(axis=1)
    k2 = (e @ d**2) / m0 - ((e @ d) / m0) ** 2
    r = np.sign(s) * np.sqrt(np.maximum(2 * n * (s * xi - cgf), 0.0))
    u = s * np.sqrt(n * k2)
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = special.ndtr(-np.abs(r)) + np.exp(-0.5 * r * r) / np.sqrt(2 * np.pi) * (1 / np.abs(u) - 1 / np.abs(r))
    # next to the mean the formula is 0/0: the normal tail of the standardised mean, skew-corrected (its limit)
    near = np.abs(r) < 1e-3
    skew = float(w @ d**3) / var**1.5
    z0 = x * np.sqrt(n / var)
    tail = np.where(near, special.ndtr(-np.abs(z0)) - skew / (6 * np.sqrt(2 * np.pi * n)) * np.sign(z0), tail)
    tail = np.clip(tail, 0.0, 0.5)
    # at the law's end the mean is every draw at that value: probability w^n, no approximation needed
    edge = np.isclose(x, hi, rtol=0.0, atol=1e-12 * (hi - lo)) | np.isclose(x, lo, rtol=0.0, atol=1e-12 * (hi - lo))
    at_end = np.where(x > 0, w[np.argmax(d)], w[np.argmin(d)]) ** n
    tail = np.where(edge, np.minimum(at_end, 0.5), tail)
    z = np.sign(x) * -special.ndtri(np.maximum(tail, 1e-300))
    z = np.where(inside | edge | (x == 0), z, np.sign(x) * np.inf)
    return z if np.ndim(mean) else z[0]


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Return Holm-adjusted p-values: reject hypothesis i at family-wise level alpha iff adj[i] <= alpha.

    Parameters
    ----------
    pvalues : ndarray
        One p-value per hypothesis; NaN means not tested (stays NaN, never rejected).

    Returns
    -------
    ndarray
        Adjusted p-values, ``max_{j <= i} min(1, (m - j) p_(j))`` in sorted order.

    Notes
    -----
    Controls the family-wise error rate under any dependence between the tests.

    References
    ----------
    .. [1] Holm, S. (1979). A simple sequentially rejective multiple test procedure.
       Scandinavian Journal of Statistics 6(2), 65-70.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    adj = np.full(p.size, np.nan)
    tested = np.flatnonzero(~np.isnan(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = order.size
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[idx]))
        adj[idx] = running
    return adj
