"""Power of the joint-law test: pure statistics on a law over cells (arrays in, numbers out).

What a joint-law check of a given size can detect, and how many samples a goal needs, evaluated
on the SAME cells the check tests: cells merged by expected count at the sample size
(:func:`specaudit.stats.gof.merge_groups`), cells of target probability 0 tested apart (one
observation there fails the check). :func:`power_against` and :func:`simulated_power` give the
power against one alternative law, :func:`detectable_tv` the worst case over all directions,
:func:`samples_for_tv` and :func:`samples_for_law` the sample size a goal needs. Where the
alternative laws come from (zoo mutants, exact or simulated) is :mod:`specaudit.analysis.mutant_laws`.

What "TV detectable" means
--------------------------
Pearson's X^2 on G merged groups under a fixed alternative r is approximately noncentral
chi-square with G - 1 df and noncentrality ``lambda = N w^2``, ``w^2 = sum_g (r_g - p_g)^2 / p_g``
(notes/theory.md, "Statistics"). By Cauchy-Schwarz ``(sum |r_g - p_g|)^2 <= w^2 sum p_g``, i.e.
``w^2 >= 4 TV^2`` with TV measured over the merged groups. So with ``lambda*`` the noncentrality
that gives the wanted power, EVERY alternative whose merged-cell TV from the target is at least
``TV* = sqrt(lambda* / N) / 2`` is detected with at least that power: TV* is a worst case over all
directions. The bound is tight: the least-favourable alternative scales one half (by mass) of
the groups by ``1 + 2 TV`` and the other half by ``1 - 2 TV``; then ``w = 2 TV`` exactly. Mass
moved inside one merged group is invisible to the test, mass moved onto cells of probability 0
is easier to see (``1 - (1 - r_0)^N``), so neither changes the worst case.

References
----------
.. [1] Cohen, J. (1988). Statistical Power Analysis for the Behavioral Sciences, ch. 7 (w, chi-square power).
.. [2] Mitra, S. K. (1958). On the limiting power function of the frequency chi-square test.
   Annals of Mathematical Statistics 29(4), 1221-1233.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specaudit.errors import UsageError
from specaudit.stats import gof as stats

__all__ = [
    "LAW_NOISE_Z",
    "MAX_SAMPLES",
    "POWER_REPS",
    "TARGET_POWER",
    "VERIFY_REPS",
    "PowerResult",
    "check_level",
    "critical_value",
    "detectable_tv",
    "least_favourable",
    "noncentrality_for_power",
    "power_against",
    "samples_for_law",
    "samples_for_tv",
    "simulated_power",
]

#: A simulated law's effect is taken at this many standard errors below its estimate (one-sided 99.9%).
LAW_NOISE_Z = 3.09
#: Power at which "detectable" is stated.
TARGET_POWER = 0.99
#: The largest sample size the planners search (beyond it: "not reachable").
MAX_SAMPLES = 10**12


@dataclass(frozen=True)
class PowerResult:
    """Power of the joint-law test against one alternative law at one sample size."""

    power: float
    noncentrality: float  # lambda of the noncentral chi-square (bias-corrected when simulated)
    df: int  # merged groups - 1
    alpha: float  # per-test level
    n: int
    tv: float  # TV between the alternative and the target over the merged groups (+ impossible mass)
    impossible_mass: float  # alternative's mass on cells of target probability 0


def check_level(alpha: float, power: float | None = None) -> None:
    """Refuse levels outside (0, 1) and powers not above alpha."""
    if not 0 < alpha < 1:
        raise UsageError(f"alpha = {alpha}; allowed: 0 < alpha < 1")
    if power is not None and not alpha < power < 1:
        raise UsageError(f"power = {power}; allowed: alpha ({alpha:g}) < power < 1")


def noncentrality_for_power(df: int, alpha: float, power: float = TARGET_POWER, crit: float | None = None) -> float:
    """Return the noncentrality at which the chi-square test reaches ``power``.

    Parameters
    ----------
    df : int
        Degrees of freedom (merged groups - 1), >= 1.
    alpha : float
        Level of the test.
    power : float
        Wanted power, ``alpha < power < 1``.
    crit : float, optional
        The test's critical value (default ``chi2.isf(alpha, df)``); the checks read p-values from
        the exact null (`specaudit.stats.gof.null_law`), whose critical value is larger with small
        expected counts, so power is computed at theirs (`critical_value`).

    Returns
    -------
    float
        ``lambda*`` with ``ncx2.sf(crit, df, lambda*) = power``.

    Notes
    -----
    The power is increasing in lambda, so the root is unique (found by Brent's method).
    """
    check_level(alpha, power)
    if df < 1:
        raise UsageError(f"df = {df}; allowed: >= 1 (a test needs two groups)")
    from scipy import optimize  # heavy (~0.3 s), like scipy.sparse: only paid when a power is inverted

    crit = stats.chi2_isf(alpha, df) if crit is None else crit

    def gap(lam: float) -> float:
        return stats.ncx2_sf(crit, df, lam) - power

    hi = max(1.0, float(df))
    while gap(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-10, rtol=1e-12))


def critical_value(expected: np.ndarray, alpha: float) -> float:
    """Return the Pearson X^2 the check rejects at level ``alpha`` on groups expecting ``expected``.

    The check's p-value is the exact-null tail (`specaudit.stats.gof.null_law`), heavier than the
    chi-square limit when groups expect few observations; power read at ``chi2.isf(alpha, G - 1)``
    would overstate what the check detects. Read from the three-cumulant fit (closed form: the
    planners call this inside searches), and at least the chi-square value.
    """
    df = expected.size - 1
    return max(stats.null_law(expected, "pearson").fit_isf(alpha), stats.chi2_isf(alpha, df))


def _grouped(law: np.ndarray, probs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, float, int]:
    """Return (target, alternative) summed per merged group at ``n``, the impossible mass, and G."""
    group = stats.merge_groups(probs * n)
    ok = group >= 0
    g = int(group.max()) + 1 if ok.any() else 0
    pg = np.bincount(group[ok], weights=probs[ok], minlength=g)
    rg = np.bincount(group[ok], weights=law[ok], minlength=g)
    return pg, rg, float(law[~ok].sum()), g


def _effect(pg: np.ndarray, rg: np.ndarray, r0: float, law_samples: int | None) -> tuple[np.ndarray, float]:
    """Return the alternative's group law given no impossible cell, and its effect ``w^2 = sum (r - p)^2 / p``.

    For a law simulated from ``law_samples`` sequences, ``w^2`` is bias-corrected and taken at its
    lower 99.9% confidence bound: ``m w2_hat`` is about noncentral chi-square(G - 1, m w^2) less
    its df, so its sd is ``sqrt(2 (G - 1) + 4 m w^2) / m``. A law equal to the target's then gets
    ``w^2 = 0`` (power alpha) except with probability ~1e-3 (simulation noise was
    counted as effect, "power 0.980" against a mutant whose law is the target's).
    """
    rc = rg / rg.sum() if rg.sum() > 0 else pg
    dev = (rc - pg) ** 2
    if law_samples is None:
        return rc, float((dev / pg).sum())
    m_eff = max(law_samples * (1.0 - r0), 2.0)
    w2 = float(((dev - rc * (1.0 - rc) / (m_eff - 1.0)) / pg).sum())  # unbiased
    sd = float(np.sqrt(2.0 * (pg.size - 1) + 4.0 * m_eff * max(w2, 0.0)) / m_eff)
    return rc, max(w2 - LAW_NOISE_Z * sd, 0.0)


def power_against(
    law: np.ndarray,
    probs: np.ndarray,
    n: int,
    alpha: float,
    *,
    law_samples: int | None = None,
) -> PowerResult:
    """Return the power of the joint-law test of ``probs`` when the verifier's law is ``law``.

    Parameters
    ----------
    law : ndarray
        The alternative: the verifier's probability of every cell (same shape as ``probs``).
    probs : ndarray
        The target's exact law over the cells.
    n : int
        Sample size (sequences).
    alpha : float
        Per-test level.
    law_samples : int, optional
        When ``law`` is an empirical law from this many simulated sequences, the noncentrality is
        bias-corrected for the simulation noise and taken at its lower 99.9% confidence bound
        (:data:`LAW_NOISE_Z` standard errors down), so the power is a conservative figure and a
        law equal to the target's gets power alpha; None for an exact law.

    Returns
    -------
    PowerResult
        ``power = 1 - (1 - r_0)^n (1 - ncx2.sf(chi2.isf(alpha, G-1), G-1, lambda))`` where ``r_0`` is
        the alternative's mass on cells of target probability 0 (one such observation fails the
        check) and ``lambda = n sum_g (r'_g - p_g)^2 / p_g`` on the groups merged at ``n`` exactly
        as the check merges them, ``r'`` being the alternative given no impossible cell.

    Notes
    -----
    The noncentral chi-square is the limit law of Pearson's X^2 under local alternatives
    (Mitra 1958); it is accurate when every group expects >= 5 observations (the merging
    guarantees it) and the effect is small. For large effects both it and the truth are ~1.
    G^2 (``--method g``) has the same limit.

    References
    ----------
    .. [1] Mitra, S. K. (1958). Annals of Mathematical Statistics 29(4), 1221-1233.
    .. [2] notes/theory.md, "Statistics".
    """
    check_level(alpha)
    law = np.asarray(law, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    if law.shape != probs.shape:
        raise UsageError(f"law has {law.size} cells, the target {probs.size}; they must match")
    n = int(n)
    pg, rg, r0, g = _grouped(law, probs, n)
    r0 = min(max(r0, 0.0), 1.0)
    tv = 0.5 * (float(np.abs(rg - pg).sum()) + r0)
    if r0 >= 1.0:
        return PowerResult(1.0, float("inf"), max(g - 1, 0), alpha, n, tv, r0)
    lam = 0.0
    inner = 0.0
    if g >= 2:
        _, w2 = _effect(pg, rg, r0, law_samples)
        lam = n * w2
        inner = stats.ncx2_sf(critical_value(pg * n, alpha), g - 1, lam)
    power = 1.0 - (1.0 - r0) ** n * (1.0 - inner)
    return PowerResult(float(power), float(lam), max(g - 1, 0), alpha, n, tv, r0)


#: Multinomial replicates of :func:`simulated_power` (Monte Carlo s.e. <= 0.008 on a power).
POWER_REPS = 4000


def simulated_power(
    law: np.ndarray,
    probs: np.ndarray,
    n: int,
    alpha: float,
    *,
    reps: int = POWER_REPS,
    seed: int = 0,
    law_samples: int | None = None,
    critical: float | None = None,
) -> float:
    """Return the joint-law check's power against ``law`` by simulating its counts.

    Parameters
    ----------
    law, probs : ndarray
        Alternative and target laws over the same cells.
    n : int
        Sample size.
    alpha : float
        Per-test level.
    reps : int
        Multinomial replicates.
    seed : int
        Seed of the replicates (common random numbers: the result is a deterministic function).
    law_samples : int, optional
        When ``law`` was simulated from this many sequences: its deviation from the target is
        shrunk to the lower 99.9% confidence bound of the effect (`_effect`), so simulation noise
        is not counted as power; a law within noise of the target's gets power ``alpha``.
    critical : float, optional
        The X^2 the check rejects at (default: from its exact-null law, `gof.null_law`; a caller
        simulating many alternatives against one null passes :func:`critical_value`).

    Returns
    -------
    float
        Fraction of replicates the check rejects: any count on a cell of target probability 0,
        or Pearson's X^2 on the groups merged at ``n`` with p-value (the check's,
        :func:`specaudit.stats.gof.null_law`) at most ``alpha``.

    Notes
    -----
    For i.i.d. sequences the cell counts are exactly Multinomial(n, law), so this is the test's
    power up to Monte Carlo error (s.e. ``sqrt(power (1 - power) / reps)``), with no asymptotics:
    use it where :func:`power_against`'s noncentral chi-square, a local approximation, is off
    (large effects at small n; see benchmarks/plan_vs_reality.py).
    """
    check_level(alpha)
    law = np.asarray(law, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    pg, rg, r0, g = _grouped(law, probs, int(n))
    r0 = min(max(r0, 0.0), 1.0)
    if law_samples is not None and g >= 2:
        rc, w2 = _effect(pg, rg, r0, law_samples)
        raw = float(((rc - pg) ** 2 / pg).sum())
        shrink = np.sqrt(w2 / raw) if raw > 0 else 0.0
        if shrink == 0.0 and r0 == 0.0:
            return float(alpha)  # no effect beyond noise: the calibrated check rejects at its level
        rg = (pg + shrink * (rc - pg)) * (1.0 - r0)
    cats = np.append(np.clip(rg, 0.0, None), r0)
    counts = np.random.default_rng(seed).multinomial(int(n), cats / cats.sum(), size=reps)
    reject = counts[:, -1] > 0
    if g >= 2:
        expected = n * pg
        x2 = stats.statistics(counts[:, :-1], expected, "pearson")
        crit = critical if critical is not None else stats.null_law(expected, "pearson").isf(alpha)
        reject |= x2 >= crit  # sf(x2) <= alpha: the tail is monotone
    return float(reject.mean())


#: Multinomial replicates that verify a detectable TV (s.e. 0.0016 on a power of 0.99).
VERIFY_REPS = 4000


def least_favourable(pg: np.ndarray, tv: float) -> np.ndarray | None:
    """Return the law at TV ``tv`` from ``pg`` with the least noncentrality: one half (by mass) x (1 + 2 tv / ...), the other down.

    The groups are split, largest first, into two sets A and B of masses as near 1/2 as the groups
    allow; A is scaled by ``1 + tv / P(A)`` and B by ``1 - tv / P(B)`` (TV exactly ``tv``,
    ``w^2 = tv^2 (1 / P(A) + 1 / P(B))``, the least over all directions at that TV when P(A) = 1/2).
    None when no such law exists (``tv >= P(B)``).
    """
    order = np.argsort(-pg, kind="stable")
    into_a = np.zeros(pg.size, dtype=bool)
    mass = 0.0
    for i in order:
        if mass + pg[i] <= 0.5 or mass == 0.0:
            into_a[i] = True
            mass += pg[i]
    pa, pb = float(pg[into_a].sum()), float(pg[~into_a].sum())
    if pb <= 0.0 or tv >= pb:
        return None
    return np.where(into_a, pg * (1.0 + tv / pa), pg * (1.0 - tv / pb))


def detectable_tv(probs: np.ndarray, n: int, alpha: float, power: float = TARGET_POWER, *, verified: bool = True) -> float:
    """Return the smallest TV that the joint-law test detects with ``power`` in every direction.

    Parameters
    ----------
    probs : ndarray
        The target's exact law over the cells.
    n : int
        Sample size.
    alpha : float
        Per-test level.
    power : float
        Wanted power.

    Returns
    -------
    float
        ``sqrt(lambda* / n) / 2`` on the groups merged at ``n`` (see the module notes: every
        alternative at merged-cell TV >= this is detected with ``power``; the least-favourable
        one reaches it). For a point-mass target only mass on impossible sequences can be seen:
        ``1 - (1 - power)^(1/n)``. ``inf`` when nothing is detectable (one group of many cells).

    verified : bool
        Check the noncentral chi-square answer by simulation (default): in the least-favourable
        direction (`least_favourable`), the check's real power (:func:`simulated_power`,
        :data:`VERIFY_REPS` replicates, fixed seed, rejecting at :func:`critical_value`) must reach
        ``power``; TV is raised by 2% steps
        until it does. ``False``: the noncentral chi-square alone (for searches over n).

    Notes
    -----
    Uses ``w^2 >= 4 TV^2`` (notes/theory.md). Every other direction at the same TV has a larger
    noncentrality; the simulation verifies the direction where the approximation matters.
    """
    check_level(alpha, power)
    probs = np.asarray(probs, dtype=np.float64).ravel()
    n = int(n)
    if n < 1:
        return float("inf")
    group = stats.merge_groups(probs * n)
    g = int(group.max()) + 1
    if g >= 2:
        pg = np.bincount(group[group >= 0], weights=probs[group >= 0], minlength=g)
        crit = critical_value(pg * n, alpha)
        lam = noncentrality_for_power(g - 1, alpha, power, crit=crit)
        tv = float(np.sqrt(lam / n) / 2.0)
        if not verified:
            return tv
        # the noncentral chi-square is a local approximation (0.982 for 0.99 in the audit): raise TV
        # until the simulated power in the least-favourable direction reaches the wanted power
        for _ in range(40):
            alt = least_favourable(pg, tv)
            if alt is None or simulated_power(alt, pg, n, alpha, reps=VERIFY_REPS, critical=crit) >= power:
                return tv
            tv *= 1.02
        return tv

    if int((probs > 0).sum()) == 1:
        return float(-np.expm1(np.log1p(-power) / n))
    return float("inf")


def _smallest_n(ok: Callable[[int], bool], start: int = 1) -> int | None:
    """Return the smallest n >= start with ok(n), by doubling then bisection (ok ~ monotone)."""
    lo, hi = start - 1, max(start, 1)
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_SAMPLES:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def samples_for_tv(probs: np.ndarray, tv: float, alpha: float, power: float = TARGET_POWER) -> int | None:
    """Return the smallest sample size whose :func:`detectable_tv` is at most ``tv``.

    Parameters
    ----------
    probs : ndarray
        The target's exact law over the cells.
    tv : float
        Total-variation distance to detect, in (0, 1].
    alpha, power : float
        Per-test level and wanted power.

    Returns
    -------
    int or None
        None when no sample size up to 10**12 reaches it (e.g. one group of many cells).

    Notes
    -----
    The merged groups change with n, so the search re-merges at every candidate, as the check
    would; doubling then bisection.
    """
    check_level(alpha, power)
    if not 0 < tv <= 1:
        raise UsageError(f"tv = {tv}; allowed: 0 < tv <= 1")
    n = _smallest_n(lambda n: detectable_tv(probs, n, alpha, power, verified=False) <= tv)
    while n is not None and detectable_tv(probs, n, alpha, power) > tv:  # verified: 2% steps up
        n = int(np.ceil(n * 1.02))
        if n > MAX_SAMPLES:
            return None
    return n


def samples_for_law(
    law: np.ndarray,
    probs: np.ndarray,
    alpha: float,
    power: float = TARGET_POWER,
    *,
    law_samples: int | None = None,
    method: str = "ncx2",
) -> int | None:
    """Return the smallest sample size at which the joint-law check reaches ``power`` against ``law``.

    Parameters
    ----------
    law, probs : ndarray
        Alternative and target laws over the same cells.
    alpha, power : float
        Per-test level and wanted power.
    law_samples : int, optional
        Simulation size of ``law`` (bias correction of the noncentrality), None when exact.
    method : {"ncx2", "simulate"}
        :func:`power_against` (noncentral chi-square) or :func:`simulated_power` (multinomial
        replicates; the search starts from the ncx2 answer).

    Returns
    -------
    int or None
        None when the alternative is invisible to the test (same law on the merged cells) or
        needs more than 10**12 samples.
    """
    check_level(alpha, power)
    if method not in ("ncx2", "simulate"):
        raise UsageError(f"method = {method!r}; allowed: 'ncx2', 'simulate'")
    guess = _smallest_n(lambda n: power_against(law, probs, n, alpha, law_samples=law_samples).power >= power)
    if method == "ncx2" or guess is None:
        return guess
    hit = lambda n: simulated_power(law, probs, n, alpha, law_samples=law_samples) >= power  # noqa: E731
    if hit(guess):  # walk down by halving, then bisect
        hi = guess
        while hi > 1 and hit(hi // 2):
            hi //= 2
        return _smallest_n(hit, start=max(hi // 2, 1))
    return _smallest_n(hit, start=guess)
