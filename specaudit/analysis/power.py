"""Power of the joint-law test: what a run could have caught, and how many samples a goal needs.

Three layers, each usable alone:

* pure statistics on a law over cells -- :func:`power_against`, :func:`detectable_tv`,
  :func:`samples_for_tv`, :func:`samples_for_law` -- evaluated on the SAME cells the joint-law
  check tests: cells merged by expected count at the sample size (:func:`specaudit.stats.gof.merge_groups`),
  cells of target probability 0 tested apart (one observation there fails the check);
* the output law of a zoo mutant over the V**L joint cells -- :func:`mutant_law`,
  :func:`mutant_joint_law` -- exact by dynamic programme for the mutants whose bug is a change of
  the per-position kernels, the target law for lossless ones, else simulated once and cached;
* :func:`scenario_power` / :func:`annotate`: the per-scenario figures every run reports.

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

Levels
------
In a run, Holm adjusts every statistical p-value over the m checks of the run; a check whose raw
p-value is at most ``alpha / m`` is always rejected by Holm, so powers reported in a run are at the
Bonferroni level ``alpha / m``: a lower bound on the joint-law check's power within the run, and
the joint-law check alone (the efficiency checks can only add detections).

Mutant laws and their cost
--------------------------
Kernel mutants (``resample_from_p``, ``lenient``, ``accept_all``, ``unclamped_residual``) change only
what one draft position accepts (``a(x)``) and what a rejection emits (``e(y)``); their joint law is
computed exactly by a forward pass over (prefix, joint chain state, drafts left in the round).
Lossless mutants (kinds ``lossless-control`` and ``boundary``: right law almost surely) have the
target law. Other distribution mutants are simulated once with :data:`LAW_SAMPLES` sequences and
a fixed seed; the estimated noncentrality is bias-corrected (``E[(r^_g - p_g)^2] = (r_g - p_g)^2
+ r_g (1 - r_g) / M``). ``reused_uniforms`` makes the rows of a batch dependent: the per-sequence
law is right and X^2 is overdispersed rather than noncentral, so no power is modelled for it.

Simulated laws are cached in memory and on disk, keyed by the scenario's content hash, the
specaudit version, the mutant name, the sample count and the seed, under ``$SPECAUDIT_CACHE``
(default ``$XDG_CACHE_HOME/specaudit`` or ``~/.cache/specaudit``; ``SPECAUDIT_CACHE=off``
disables the disk cache). Files are written atomically and are safe to delete at any time. A cold
cache costs about 0.25 s per simulated (mutant, scenario) pair at 200,000 sequences; a warm one
nothing.

References
----------
.. [1] Cohen, J. (1988). Statistical Power Analysis for the Behavioral Sciences, ch. 7 (w, chi-square power).
.. [2] Mitra, S. K. (1958). On the limiting power function of the frequency chi-square test.
   Annals of Mathematical Statistics 29(4), 1221-1233.
"""

from __future__ import annotations

import os
import tempfile
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize

from specaudit import __version__

from specaudit.stats import gof as stats
from specaudit.chains.tabular import TabularChain
from specaudit.errors import SpecauditError, UsageError
from specaudit.scenarios.schema import MAX_JOINT_CELLS, Scenario

__all__ = [
    "COMMON_BUG",
    "LAW_SAMPLES",
    "TARGET_POWER",
    "MutantLaw",
    "MutantPower",
    "Plan",
    "PowerResult",
    "ScenarioPower",
    "annotate",
    "chain_law",
    "detectable_tv",
    "mutant_joint_law",
    "mutant_law",
    "noncentrality_for_power",
    "plan",
    "power_against",
    "samples_for_law",
    "samples_for_tv",
    "scenario_power",
    "simulated_power",
]

#: Power at which "detectable" is stated.
TARGET_POWER = 0.99
#: Sequences simulated per mutant law when it cannot be computed exactly.
LAW_SAMPLES = 200_000
#: Seed of those simulations (mixed with the scenario's content hash and the mutant's name).
LAW_SEED = 20240603
#: The seed's common bug: a scenario with less power than TARGET_POWER against it is flagged.
COMMON_BUG = "resample_from_p"
#: Exact laws are enumerated while (V**L cells) x (joint states) x (K + 1) stays below this.
ENUMERATE_LIMIT = 1 << 24
#: A simulated mutant law is taken as the target's when its own X^2 p-value exceeds this.
SAME_LAW_LEVEL = 1e-3
#: The largest sample size the planners search (beyond it: "not reachable").
MAX_SAMPLES = 10**12


# ---------------------------------------------------------------------------------------------
# Pure statistics
# ---------------------------------------------------------------------------------------------


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


def _check_level(alpha: float, power: float | None = None) -> None:
    """Refuse levels outside (0, 1) and powers not above alpha."""
    if not 0 < alpha < 1:
        raise UsageError(f"alpha = {alpha}; allowed: 0 < alpha < 1")
    if power is not None and not alpha < power < 1:
        raise UsageError(f"power = {power}; allowed: alpha ({alpha:g}) < power < 1")


def noncentrality_for_power(df: int, alpha: float, power: float = TARGET_POWER) -> float:
    """Return the noncentrality at which the chi-square test reaches ``power``.

    Parameters
    ----------
    df : int
        Degrees of freedom (merged groups - 1), >= 1.
    alpha : float
        Level of the test.
    power : float
        Wanted power, ``alpha < power < 1``.

    Returns
    -------
    float
        ``lambda*`` with ``ncx2.sf(chi2.isf(alpha, df), df, lambda*) = power``.

    Notes
    -----
    The power is increasing in lambda, so the root is unique (found by Brent's method).
    """
    _check_level(alpha, power)
    if df < 1:
        raise UsageError(f"df = {df}; allowed: >= 1 (a test needs two groups)")
    crit = stats.chi2_isf(alpha, df)

    def gap(lam: float) -> float:
        return stats.ncx2_sf(crit, df, lam) - power

    hi = max(1.0, float(df))
    while gap(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-10, rtol=1e-12))


def _grouped(law: np.ndarray, probs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, float, int]:
    """Return (target, alternative) summed per merged group at ``n``, the impossible mass, and G."""
    group = stats.merge_groups(probs * n)
    ok = group >= 0
    g = int(group.max()) + 1 if ok.any() else 0
    pg = np.bincount(group[ok], weights=probs[ok], minlength=g)
    rg = np.bincount(group[ok], weights=law[ok], minlength=g)
    return pg, rg, float(law[~ok].sum()), g


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
        bias-corrected for the simulation noise; None for an exact law.

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
    _check_level(alpha)
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
        rc = rg / rg.sum() if rg.sum() > 0 else pg
        dev = (rc - pg) ** 2
        if law_samples is not None:
            m_eff = max(law_samples * (1.0 - r0), 2.0)
            dev = dev - rc * (1.0 - rc) / (m_eff - 1.0)  # unbiased for (r_g - p_g)^2
        lam = n * max(float((dev / pg).sum()), 0.0)
        inner = stats.ncx2_sf(stats.chi2_isf(alpha, g - 1), g - 1, lam)
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

    Returns
    -------
    float
        Fraction of replicates the check rejects: any count on a cell of target probability 0,
        or Pearson's X^2 on the groups merged at ``n`` at least ``chi2.isf(alpha, G - 1)``.

    Notes
    -----
    For i.i.d. sequences the cell counts are exactly Multinomial(n, law), so this is the test's
    power up to Monte Carlo error (s.e. ``sqrt(power (1 - power) / reps)``), with no asymptotics:
    use it where :func:`power_against`'s noncentral chi-square, a local approximation, is off
    (large effects at small n; see benchmarks/plan_vs_reality.py).
    """
    _check_level(alpha)
    law = np.asarray(law, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    pg, rg, r0, g = _grouped(law, probs, int(n))
    cats = np.append(np.clip(rg, 0.0, None), max(r0, 0.0))
    counts = np.random.default_rng(seed).multinomial(int(n), cats / cats.sum(), size=reps)
    reject = counts[:, -1] > 0
    if g >= 2:
        expected = n * pg
        x2 = (((counts[:, :-1] - expected) ** 2) / expected).sum(axis=1)
        reject |= x2 >= stats.chi2_isf(alpha, g - 1)
    return float(reject.mean())


def detectable_tv(probs: np.ndarray, n: int, alpha: float, power: float = TARGET_POWER) -> float:
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

    Notes
    -----
    Uses ``w^2 >= 4 TV^2`` (notes/theory.md); same validity as :func:`power_against`.
    """
    _check_level(alpha, power)
    probs = np.asarray(probs, dtype=np.float64).ravel()
    n = int(n)
    if n < 1:
        return float("inf")
    g = int(stats.merge_groups(probs * n).max()) + 1
    if g >= 2:
        return float(np.sqrt(noncentrality_for_power(g - 1, alpha, power) / n) / 2.0)
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
    _check_level(alpha, power)
    if not 0 < tv <= 1:
        raise UsageError(f"tv = {tv}; allowed: 0 < tv <= 1")
    return _smallest_n(lambda n: detectable_tv(probs, n, alpha, power) <= tv)


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
    _check_level(alpha, power)
    if method not in ("ncx2", "simulate"):
        raise UsageError(f"method = {method!r}; allowed: 'ncx2', 'simulate'")
    guess = _smallest_n(lambda n: power_against(law, probs, n, alpha, law_samples=law_samples).power >= power)
    if method == "ncx2" or guess is None:
        return guess
    hit = lambda n: simulated_power(law, probs, n, alpha) >= power  # noqa: E731
    if hit(guess):  # walk down by halving, then bisect
        hi = guess
        while hi > 1 and hit(hi // 2):
            hi //= 2
        return _smallest_n(hit, start=max(hi // 2, 1))
    return _smallest_n(hit, start=guess)


# ---------------------------------------------------------------------------------------------
# Exact laws of kernel mutants
# ---------------------------------------------------------------------------------------------

Kernel = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Return norm(max(p - q, 0)) per row, p where it is all zero (as the reference does)."""
    z = np.maximum(p - q, 0.0)
    tot = z.sum(axis=1, keepdims=True)
    return np.where(tot > 0, z / np.where(tot > 0, tot, 1.0), p)


def _signed_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Return the law of mutants._sample_signed on the unclamped p - q (index clamped to V - 1)."""
    # idx(u) = #{j : cum_j <= u Z}: with t = sort(cum / Z) clipped to [0, 1], idx = m on
    # [t_(m), t_(m+1)), so P(m) is the gap between consecutive clipped thresholds.
    v = p.shape[1]
    w = p - q
    z = np.maximum(w, 0.0).sum(axis=1, keepdims=True)
    t = np.clip(np.sort(np.cumsum(w, axis=1) / np.where(z > 0, z, 1.0), axis=1), 0.0, 1.0)
    edges = np.concatenate([np.zeros((p.shape[0], 1)), t, np.ones((p.shape[0], 1))], axis=1)
    law = np.diff(edges, axis=1)  # m = 0..V
    law[:, v - 1] += law[:, v]
    return np.where(z > 0, law[:, :v], p)


#: Per-position kernels (a(x): draft x proposed and accepted; e(y): law of the token emitted on a
#: rejection), mirroring the switches of ``mutants._chain``; a test checks each against simulation.
KERNELS: dict[str, Kernel] = {
    "reference": lambda p, q: (np.minimum(p, q), _residual(p, q)),
    "resample_from_p": lambda p, q: (np.minimum(p, q), p),
    # u (l q) < p with l = 0.5: accepted with min(1, 2 p / q), so a = min(q, 2 p)
    "lenient": lambda p, q: (np.minimum(q, 2.0 * p), _residual(p, q)),
    # u = 0: 0 < p accepts every draft of positive target probability
    "accept_all": lambda p, q: (np.where(p > 0, q, 0.0), _residual(p, q)),
    "unclamped_residual": lambda p, q: (np.minimum(p, q), _signed_law(p, q)),
}


def _joint_tables(target: TabularChain, draft: TabularChain) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Return p, q and next state on the joint state ``s_T * S_D + s_D``, and the start state."""
    s_d = draft.n_states
    p = np.repeat(target.dist, s_d, axis=0)
    q = np.tile(draft.dist, (target.n_states, 1))
    nxt = np.repeat(target.nxt, s_d, axis=0) * s_d + np.tile(draft.nxt, (target.n_states, 1))
    return p, q, nxt, target.start * s_d + draft.start


def chain_law(
    target: TabularChain,
    draft: TabularChain,
    draft_law: np.ndarray,
    length: int,
    kernel: Kernel,
) -> np.ndarray:
    """Return the exact law of L-token sequences of a chain verifier with per-position ``kernel``.

    Parameters
    ----------
    target, draft : TabularChain
        Target (p) and drafter (q) chains over the same vocabulary.
    draft_law : array_like
        Weights of the number of drafts j = 0..K per round.
    length : int
        Tokens per sequence L.
    kernel : callable
        ``kernel(p, q) -> (a, e)`` on rows [S, V]: ``a(x)`` = P(draft x proposed and accepted),
        ``e(y)`` = law of the token emitted after a rejection (rows sum to 1).

    Returns
    -------
    ndarray
        Shape ``[V**L]``, indexed like :func:`specaudit.laws.chain.joint_probabilities`.

    Notes
    -----
    Forward pass over (emitted prefix, joint state, drafts left in the round): with r >= 1 drafts
    left, x is emitted with ``a(x)`` and the round goes on; otherwise y with ``(1 - sum a) e(y)``
    and a new round starts (r ~ draft_law); with r = 0 the bonus y ~ p ends the round. With the
    reference kernel this is the target law (Leviathan et al. 2023, Thm. 1); a test checks it.
    Memory ``O(V**L S (K+1))``.
    """
    p, q, nxt, start = _joint_tables(target, draft)
    a, e = kernel(p, q)
    s_count, v = p.shape
    law = np.asarray(draft_law, dtype=np.float64)
    r = law.size
    reject = np.clip(1.0 - a.sum(axis=1), 0.0, 1.0)[:, None] * e
    mass = np.zeros((1, s_count, r))
    mass[0, start] = law
    for _ in range(length):
        prefixes = mass.shape[0]
        cell_state = ((np.arange(prefixes)[:, None, None] * v + np.arange(v)[None, None, :]) * s_count + nxt[None]).ravel()
        end = mass[:, :, 1:].sum(axis=2)[..., None] * reject[None] + mass[:, :, :1] * p[None]  # [P, S, V]
        size = prefixes * v * s_count
        new = np.bincount(cell_state, weights=end.ravel(), minlength=size)[:, None] * law[None, :]
        if r > 1:
            cont = mass[:, :, 1:, None] * a[None, :, None, :]  # [P, S, R-1, V]: r -> r - 1
            idx = (cell_state.reshape(prefixes, s_count, 1, v) * r + np.arange(r - 1)[None, None, :, None]).ravel()
            new = new.ravel() + np.bincount(idx, weights=cont.ravel(), minlength=size * r)
        mass = new.reshape(prefixes * v, s_count, r)
    return mass.sum(axis=(1, 2))


# ---------------------------------------------------------------------------------------------
# Mutant laws (exact, lossless, simulated), cached
# ---------------------------------------------------------------------------------------------

#: Mutants whose rows share randomness: one sequence's law is right, X^2 is overdispersed.
DEPENDENT = {"reused_uniforms": "rows of a batch share their uniforms: sequences are dependent"}


@dataclass(frozen=True, eq=False)
class MutantLaw:
    """A mutant's law of whole sequences on one scenario, and how it was obtained."""

    name: str
    kind: str
    probs: np.ndarray | None  # [V**L]; None when unavailable
    method: str  # "exact", "lossless", "simulated", "dependent", "unavailable"
    samples: int | None = None  # simulated sequences (bias correction); None when exact
    note: str = ""


def _mutant_entry(name: str) -> Any:
    from specaudit.verifiers.zoo import chain as mutants

    try:
        return mutants.get(name)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None


def _is_chain(spec: Scenario) -> bool:
    """Return True when the zoo (written in the chain contract) applies to the scenario."""
    from specaudit.checks.statistical import wants_joint

    return getattr(spec, "algorithm", "chain") == "chain" and wants_joint(spec)


def cache_dir() -> Path | None:
    """Return the disk cache directory for simulated laws, or None when disabled."""
    env = os.environ.get("SPECAUDIT_CACHE")
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "none", "false") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specaudit"


def _cache_file(spec: Scenario, name: str, samples: int, seed: int) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    return root / "mutant-laws" / __version__ / f"{spec.content_hash()}-{name}-{samples}-{seed}.npy"


def _load_counts(path: Path | None, cells: int) -> np.ndarray | None:
    """Return cached counts, or None when absent or unreadable (a bad file is just recomputed)."""
    if path is None or not path.is_file():
        return None
    try:
        counts = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return counts if counts.shape == (cells,) and counts.dtype == np.int64 else None


def _store_counts(path: Path | None, counts: np.ndarray) -> None:
    """Write counts atomically; a read-only or full disk only costs the cache."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, counts, allow_pickle=False)
        os.replace(tmp, path)
    except OSError:
        return


def _simulated_counts(spec: Scenario, name: str, samples: int, seed: int) -> np.ndarray:
    """Simulate the mutant for ``samples`` sequences and return the joint counts."""
    from specaudit.engine import run as runner

    mixed = np.random.SeedSequence([seed, int(spec.content_hash(), 16), zlib.crc32(name.encode())])
    sim_seed = int(mixed.generate_state(1, dtype=np.uint32)[0])
    measured = runner.measure(_mutant_entry(name).func, spec.model_copy(update={"samples": samples}), sim_seed)
    if measured.joint is None:
        raise UsageError(f"scenario {spec.name}: no joint counts to estimate a law from")
    return measured.joint.counts.copy()


#: In-memory cache of mutant laws, keyed by (content hash, version, mutant, samples, seed).
_LAWS: dict[tuple[str, str, str, int, int], MutantLaw] = {}


def _law_cached(spec: Scenario, name: str, samples: int, seed: int) -> MutantLaw:
    key = (spec.content_hash(), __version__, name, samples, seed)
    if key not in _LAWS:
        _LAWS[key] = _compute_law(spec, name, samples, seed)
    return _LAWS[key]


def _compute_law(spec: Scenario, name: str, samples: int, seed: int) -> MutantLaw:
    entry = _mutant_entry(name)
    target, draft = spec.chains()
    cells = spec.joint_cells
    if name in DEPENDENT:
        return MutantLaw(name, entry.kind, None, "dependent", None, DEPENDENT[name])
    if entry.kind in ("lossless-control", "boundary"):
        from specaudit.laws import chain as exact

        note = "lossless by construction" if entry.kind == "lossless-control" else "lossless except at adversarial uniforms"
        return MutantLaw(name, entry.kind, exact.joint_probabilities(target, spec.length), "lossless", None, note)
    size = cells * target.n_states * draft.n_states * (spec.k + 1)
    if name in KERNELS and size <= ENUMERATE_LIMIT:
        probs = chain_law(target, draft, spec.draft_law, spec.length, KERNELS[name])
        return MutantLaw(name, entry.kind, probs, "exact", None, "per-position kernel, enumerated")
    path = _cache_file(spec, name, samples, seed)
    counts = _load_counts(path, cells)
    if counts is None:
        try:
            counts = _simulated_counts(spec, name, samples, seed)
        except SpecauditError as exc:  # a contract breach or crash: the check sees that, not a law
            return MutantLaw(name, entry.kind, None, "unavailable", None, f"simulation failed: {exc}")
        _store_counts(path, counts)
    return MutantLaw(name, entry.kind, counts / counts.sum(), "simulated", int(counts.sum()), f"simulated, {samples:,} sequences")


def mutant_law(spec: Scenario, name: str, samples: int = LAW_SAMPLES, seed: int = LAW_SEED) -> MutantLaw:
    """Return mutant ``name``'s law of whole sequences on ``spec``, with how it was obtained.

    Parameters
    ----------
    spec : Scenario
        A chain scenario whose joint law is enumerable (V**L <= MAX_JOINT_CELLS).
    name : str
        A registered mutant (``specaudit.verifiers.zoo.chain.MUTANTS``).
    samples, seed : int
        Simulation size and seed, used only when the law is not computed exactly.

    Returns
    -------
    MutantLaw
        ``method`` is "exact" (kernel mutants), "lossless" (target law), "simulated" (cached),
        "dependent" (no per-sequence law models the bug; ``probs`` None) or "unavailable".
    """
    if not _is_chain(spec):
        raise UsageError(
            f"scenario {spec.name}: mutant laws need a chain scenario with a joint-law check "
            f"(V**L <= {MAX_JOINT_CELLS:,} cells, not lazy)"
        )
    return _law_cached(spec, name, int(samples), int(seed))


def mutant_joint_law(spec: Scenario, mutant_name: str, samples: int = LAW_SAMPLES, seed: int = LAW_SEED) -> np.ndarray:
    """Return mutant ``mutant_name``'s probability of every V**L sequence on ``spec``.

    Parameters
    ----------
    spec : Scenario
        A chain scenario with an enumerable joint law.
    mutant_name : str
        A registered mutant.
    samples, seed : int
        Simulation size and seed when the law is not exact (see :func:`mutant_law`).

    Returns
    -------
    ndarray
        Shape ``[V**L]``, indexed like :func:`specaudit.laws.chain.joint_probabilities`. For a
        mutant whose bug is dependence between rows (``reused_uniforms``) the simulated
        per-sequence law is returned (it is close to the target's).
    """
    law = mutant_law(spec, mutant_name, samples, seed)
    if law.probs is not None:
        return law.probs
    if law.method == "dependent":
        path = _cache_file(spec, mutant_name, int(samples), int(seed))
        counts = _load_counts(path, spec.joint_cells)
        if counts is None:
            counts = _simulated_counts(spec, mutant_name, int(samples), int(seed))
            _store_counts(path, counts)
        return counts / counts.sum()
    raise UsageError(f"mutant {mutant_name} on {spec.name}: no law ({law.note})")


# ---------------------------------------------------------------------------------------------
# Per-scenario figures
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MutantPower:
    """Power of one scenario's joint-law check against one zoo mutant."""

    name: str
    kind: str
    power: float | None  # None: not modelled (see note)
    noncentrality: float | None
    tv: float | None  # mutant vs target over the merged groups
    law: str  # how the mutant's law was obtained (MutantLaw.method)
    note: str = ""
    # The mutant's law is the target's on this scenario: exact TV 0, or a simulated law whose
    # counts fit the target's law (X^2 p-value > SAME_LAW_LEVEL): no sample size can help.
    same_law: bool = False


@dataclass(frozen=True)
class ScenarioPower:
    """What one scenario's joint-law check could detect at the run's sample size."""

    samples: int
    alpha: float  # per-test level (alpha / tests)
    family_alpha: float
    tests: int
    target_power: float
    cells: int
    groups: int
    detectable_tv: float
    mutants: tuple[MutantPower, ...] = ()
    flag: str | None = None  # why the scenario is flagged (low power against COMMON_BUG)
    law_samples: int = LAW_SAMPLES
    seconds: float = 0.0

    def mutant(self, name: str) -> MutantPower | None:
        """Return the entry of mutant ``name``, if any."""
        return next((m for m in self.mutants if m.name == name), None)

    def to_info(self) -> dict[str, Any]:
        """Return ScenarioResult.info entries: ``power`` (per mutant) and ``sensitivity``."""
        def flat(obj: Any) -> dict[str, Any]:  # fields are numbers and strings: no deep copy needed
            return {f.name: getattr(obj, f.name) for f in fields(obj)}

        head = flat(self)
        head.pop("mutants")
        return {"power": {m.name: flat(m) for m in self.mutants}, "sensitivity": head}

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> "ScenarioPower | None":
        """Rebuild from ScenarioResult.info (e.g. read back from JSON); None when absent."""
        head = info.get("sensitivity")
        if not head:
            return None
        per = info.get("power") or {}
        return cls(**head, mutants=tuple(MutantPower(**m) for m in per.values()))


def scenario_power(
    spec: Scenario,
    n: int,
    alpha: float,
    *,
    family_alpha: float | None = None,
    tests: int = 1,
    target_power: float = TARGET_POWER,
    mutants: Sequence[str] | None = None,
    law_samples: int = LAW_SAMPLES,
) -> ScenarioPower:
    """Return the joint-law check's detectable TV and its power against zoo mutants at ``n``.

    Parameters
    ----------
    spec : Scenario
        The scenario (its joint law must be enumerable).
    n : int
        Sample size of the check.
    alpha : float
        Per-test level (in a run: the family alpha / number of statistical checks).
    family_alpha : float, optional
        The run's alpha, recorded for reports (defaults to ``alpha * tests``).
    tests : int
        Number of statistical checks ``alpha`` was split over.
    target_power : float
        Power at which the detectable TV is stated and below which COMMON_BUG is flagged.
    mutants : sequence of str, optional
        Mutants to evaluate (default: the whole zoo; none for non-chain scenarios).
    law_samples : int
        Simulation size for mutants without an exact law.

    Returns
    -------
    ScenarioPower
        ``flag`` is set when the power against COMMON_BUG is below ``target_power``.
    """
    from specaudit.laws import chain as exact
    from specaudit.verifiers.zoo import chain as zoo

    t0 = time.perf_counter()
    target, _ = spec.chains()
    probs = exact.joint_probabilities(target, spec.length)
    groups = int(stats.merge_groups(probs * n).max()) + 1
    names = list(zoo.MUTANTS) if mutants is None else list(mutants)
    if not _is_chain(spec):
        names = []
    rows = []
    for name in names:
        law = mutant_law(spec, name, law_samples)
        if law.probs is None:
            rows.append(MutantPower(name, law.kind, None, None, None, law.method, law.note))
            continue
        res = power_against(law.probs, probs, n, alpha, law_samples=law.samples)
        rows.append(MutantPower(name, law.kind, res.power, res.noncentrality, res.tv, law.method, law.note, _same_law(law, probs)))
    sp = ScenarioPower(
        samples=int(n),
        alpha=alpha,
        family_alpha=alpha * tests if family_alpha is None else family_alpha,
        tests=tests,
        target_power=target_power,
        cells=int((probs > 0).sum()),
        groups=groups,
        detectable_tv=detectable_tv(probs, n, alpha, target_power),
        mutants=tuple(rows),
        law_samples=law_samples,
    )
    return replace(sp, flag=_flag(sp, spec.name), seconds=time.perf_counter() - t0)


def _same_law(law: MutantLaw, probs: np.ndarray) -> bool:
    """Return True when the mutant's law is the target's (exactly, or within simulation noise)."""
    if law.samples is None:
        return 0.5 * float(np.abs(law.probs - probs).sum()) <= 1e-12
    counts = np.rint(law.probs * law.samples).astype(np.int64)
    return stats.goodness_of_fit(counts, probs).pvalue > SAME_LAW_LEVEL


def _flag(sp: ScenarioPower, scenario: str) -> str | None:
    """Say why a scenario is flagged: its power against the seed's common bug is below target."""
    bug = sp.mutant(COMMON_BUG)
    if bug is None or bug.power is None or bug.power >= sp.target_power:
        return None
    if bug.same_law:
        return f"blind to {COMMON_BUG}: it leaves this scenario's law unchanged, no sample size helps"
    return (
        f"underpowered: power {bug.power:.3f} < {sp.target_power:g} against {COMMON_BUG} at N = {sp.samples:,}; "
        f"`specaudit plan -s {scenario} --mutant {COMMON_BUG}` gives the N needed"
    )


def family_size(results: Sequence[Any]) -> int:
    """Return the number of statistical checks Holm adjusted over in ``results``."""
    return sum(c.adjusted_pvalue is not None for s in results for c in s.checks)


def annotate(
    results: Sequence[Any],
    specs: Sequence[Scenario],
    alpha: float,
    *,
    law_samples: int = LAW_SAMPLES,
    target_power: float = TARGET_POWER,
) -> tuple[Any, ...]:
    """Return ``results`` (ScenarioResults) with ``info["power"]`` and ``info["sensitivity"]`` added.

    Scenarios that errored or have no joint-law check are returned unchanged. The level is the
    Bonferroni ``alpha / m`` over the m checks of the run (a lower bound for Holm). A re-run
    (``result.rerun``) gets its own figures at its own sample size.
    """
    tests = max(family_size(results), 1)
    out = []
    for result, spec in zip(results, specs):
        out.append(_annotate_one(result, spec, alpha, tests, law_samples, target_power))
    return tuple(out) + tuple(results[len(out):])


def _annotate_one(result: Any, spec: Scenario, alpha: float, tests: int, law_samples: int, target_power: float) -> Any:
    joint = result.check("joint-law") if result.error is None else None
    if joint is None or not joint.data.get("n"):
        return result
    n = int(joint.data["n"])
    sp = scenario_power(
        spec, n, alpha / tests, family_alpha=alpha, tests=tests, target_power=target_power, law_samples=law_samples
    )
    new = replace(result, info={**result.info, **sp.to_info()})
    rerun = getattr(result, "rerun", None)
    if rerun is not None:
        new = replace(new, rerun=_annotate_one(rerun, spec, alpha, tests, law_samples, target_power))
    return new


# ---------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Answers of ``specaudit plan`` for one scenario (fields not asked for are None)."""

    scenario: str
    cells: int  # cells of positive target probability
    alpha: float  # per-test level (family alpha / tests)
    power: float
    samples: int | None = None  # the sample size asked about
    groups: int | None = None  # merged groups at ``samples``
    detectable_tv: float | None = None  # at ``samples``
    tv: float | None = None  # the TV asked about
    samples_for_tv: int | None = None
    mutant: str | None = None
    mutant_law: str | None = None  # how its law was obtained
    mutant_tv: float | None = None  # mutant vs target over the cells
    samples_for_mutant: int | None = None  # by multinomial simulation of the check (exact up to MC error)
    samples_for_mutant_ncx2: int | None = None  # by the noncentral chi-square (local approximation)
    mutant_power: float | None = None  # at ``samples``, simulated
    mutant_power_ncx2: float | None = None  # at ``samples``, noncentral chi-square


def plan(
    spec: Scenario,
    *,
    alpha: float,
    power: float = TARGET_POWER,
    tests: int = 1,
    samples: int | None = None,
    tv: float | None = None,
    mutant: str | None = None,
    law_samples: int = LAW_SAMPLES,
) -> Plan:
    """Return the sample size a goal needs, or what a sample size can detect, on one scenario.

    Parameters
    ----------
    spec : Scenario
        A scenario with a joint-law check.
    alpha : float
        Family-wise level; the test runs at ``alpha / tests`` (Bonferroni, a lower bound for
        Holm over ``tests`` checks; a run of the default suite has about 3 per scenario).
    power : float
        Wanted power.
    tests : int
        Number of statistical checks alpha is split over.
    samples : int, optional
        Report the detectable TV (and the mutant's power) at this size. With no question at all
        the scenario's own ``samples`` is used.
    tv : float, optional
        Report the samples needed to detect this TV in every direction.
    mutant : str, optional
        Report the samples needed to catch this zoo mutant.
    law_samples : int
        Simulation size for a mutant law that is not exact.

    Returns
    -------
    Plan

    Notes
    -----
    TV answers use the noncentral chi-square worst case (module notes). Mutant answers are
    given both ways: by the noncentral chi-square and by :func:`simulated_power`, which
    replicates the check on Multinomial(N, mutant law) counts and is exact for i.i.d.
    sequences; mutants are large effects caught at small N, where the local approximation
    is off by up to ~15 points, so ``samples_for_mutant`` is the simulated answer.
    """
    from specaudit.laws import chain as exact
    from specaudit.checks.statistical import wants_joint

    _check_level(alpha, power)
    if tests < 1:
        raise UsageError(f"tests = {tests}; allowed: >= 1")
    if samples is not None and samples < 1:
        raise UsageError(f"samples = {samples}; allowed: >= 1")
    if not wants_joint(spec):
        raise UsageError(
            f"scenario {spec.name}: no joint-law check to plan for (V**L = {spec.joint_cells:,} cells > "
            f"{MAX_JOINT_CELLS:,}, or a lazy chain); lower vocab or length"
        )
    level = alpha / tests
    target, _ = spec.chains()
    probs = exact.joint_probabilities(target, spec.length)
    if samples is None and tv is None and mutant is None:
        samples = spec.samples
    out = Plan(spec.name, int((probs > 0).sum()), level, power)
    if samples is not None:
        groups = int(stats.merge_groups(probs * samples).max()) + 1
        out = replace(out, samples=int(samples), groups=groups, detectable_tv=detectable_tv(probs, samples, level, power))
    if tv is not None:
        out = replace(out, tv=tv, samples_for_tv=samples_for_tv(probs, tv, level, power))
    if mutant is not None:
        law = mutant_law(spec, mutant, law_samples)
        if law.probs is None:
            raise UsageError(f"mutant {mutant}: no law to plan with on {spec.name} ({law.note})")
        out = replace(
            out,
            mutant=mutant,
            mutant_law=law.method if law.samples is None else f"{law.method} ({law.samples:,} sequences)",
            mutant_tv=0.5 * float(np.abs(law.probs - probs).sum()),
            samples_for_mutant=samples_for_law(law.probs, probs, level, power, law_samples=law.samples, method="simulate"),
            samples_for_mutant_ncx2=samples_for_law(law.probs, probs, level, power, law_samples=law.samples),
        )
        if samples is not None:
            out = replace(
                out,
                mutant_power=simulated_power(law.probs, probs, samples, level),
                mutant_power_ncx2=power_against(law.probs, probs, samples, level, law_samples=law.samples).power,
            )
    return out
