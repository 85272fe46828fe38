"""A certificate, not only a test: an upper confidence bound on total variation.

A passing goodness-of-fit test says "no evidence against the target law"; engine teams also want
"how close". For a scenario whose joint law of whole sequences is enumerable (``Q``, exact) and
``n`` sequences drawn i.i.d. from the verifier's output law ``P`` (counts ``N``, frequencies
``P_hat = N / n``), :func:`tv_upper_bound` returns ``U`` with

    Pr( TV(P, Q) <= U ) >= 1 - delta        for every P,

namely

    U = TV(P_hat, Q) + sqrt(ln(1 / delta) / (2 n))          (capped at 1).

Why it holds (the proof, non-asymptotic)
----------------------------------------
``TV(P, Q) = max_A P(A) - Q(A)``, attained at ``A* = {x : P(x) > Q(x)}``. ``A*`` depends on P and
Q only, not on the data, so ``n P_hat(A*)`` is Binomial(n, P(A*)) and Hoeffding's inequality for
that one fixed set gives ``Pr(P(A*) - P_hat(A*) >= t) <= exp(-2 n t^2) = delta`` at the ``t``
above. Off that event,

    TV(P, Q) = P(A*) - Q(A*) < P_hat(A*) + t - Q(A*) <= max_A (P_hat(A) - Q(A)) + t = TV(P_hat, Q) + t.

No union over the ``2^k`` subsets is needed: the data only have to be right about the one
(unknown) set ``A*``, and the plug-in maximum over all sets covers whichever set that is.
The plug-in term carries the usual upward bias of ``TV(P_hat, Q)`` (about
``0.5 sqrt(2 / pi) sum_x sqrt(Q(x) / n)`` when P = Q; :func:`specaudit.stats.gof.expected_tv_null`),
so the bound shrinks like ``1 / sqrt(n)``. The one assumption is the one every joint-law check
makes: the n sequences are i.i.d. draws of one law (independently seeded rows and blocks).
Coverage, measured from multinomial draws of laws with known TV (``benchmarks/certificate.py``,
``tests/stats/test_certificate.py``): the bound fell below the true TV in at most 0.072 x delta
of 100,000 draws per law at delta = 0.2, 0.05 and 0.001.

Anytime validity (``specaudit run --certify-tv EPS``)
----------------------------------------------------
Looks at 1, 2, 4, ... blocks (:func:`specaudit.stats.sequential.look_schedule`) get the alpha
weights of :func:`specaudit.stats.sequential.spending` (``sum_j w_j = 1``); look ``j`` reports
the bound at ``delta w_j``. By the union bound over looks, every reported bound holds at once with
probability ``>= 1 - delta``, so the bound at whichever look the run stops (certified, failed or
at its sample cap) keeps its confidence ``1 - delta``, however the stop was chosen.

Candidates compared (``python benchmarks/certificate.py``; markov-v4's 64-cell law, P = Q,
delta = 1e-3, mean bound over 2,000 multinomial draws)::

    n          fixed-set Hoeffding (this)   Weissman L1 (2^k union)   McDiarmid + sqrt(k)
    240,000    0.0081                       0.0147                    0.0162
    960,000    0.0041                       0.0073                    0.0081
    3,840,000  0.0020                       0.0037                    0.0041

Weissman et al. (2003) bound ``||P_hat - P||_1`` uniformly over all ``2^k - 2`` sets
(``ln(2^64) = 44`` against ``ln(1/delta) = 6.9``); McDiarmid's inequality around
``E ||P_hat - P||_1 <= sqrt((k - 1) / n)`` pays ``sqrt(k)`` instead. Both bound a quantity
(``TV(P, P_hat)``) that the fixed-set argument never needs. A Chernoff (KL) bound for the one set
gains nothing in the worst case (its deviation equals Hoeffding's at ``P(A*) = 1/2``, where
``A*`` sits for a verifier close to the target). The exact binomial worst case over ``P(A*)``
(``max_k F(k; n, k/n + t)``) would shave about 17% off the slack at delta = 1e-3 (normal
quantile 3.09 against Hoeffding's 3.72), some 8% off the bound; it needs about n/2 binomial tails
per look to be proved, so it is not used.

References
----------
.. [1] Hoeffding, W. (1963). Probability inequalities for sums of bounded random variables.
   JASA 58(301), 13-30.
.. [2] Weissman, T., Ordentlich, E., Seroussi, G., Verdu, S. and Weinberger, M. J. (2003).
   Inequalities for the L1 deviation of the empirical distribution. HP Labs HPL-2003-97.
.. [3] Devroye, L. and Lugosi, G. (2001). Combinatorial Methods in Density Estimation, ch. 5
   (the Scheffe set ``{p > q}`` and TV as a maximum over sets).
"""

from __future__ import annotations

import math

import numpy as np

from specaudit.results import TVBound
from specaudit.stats.gof import expected_tv_null, tv_distance

__all__ = ["hoeffding_slack", "samples_to_certify", "tv_upper_bound"]

#: The weight ``w_j`` of the look at which a run planned by :func:`samples_to_certify` expects to
#: certify: the cap is 4x the samples, so that look is the third from last (``spending``: 1/8).
PLANNED_WEIGHT = 1 / 8
#: The largest sample size a plan considers (far beyond any run: ``specaudit run --samples`` stops at 10^9).
MAX_PLANNED = 10**12
#: How many times the planned samples a ``--certify-tv`` run may draw before it gives up.
CAP_FACTOR = 4


def hoeffding_slack(n: int, delta: float) -> float:
    """Return ``sqrt(ln(1/delta) / (2 n))``: P(p - p_hat >= slack) <= delta for a binomial proportion of n draws."""
    return math.sqrt(math.log(1.0 / delta) / (2.0 * n))


def tv_upper_bound(observed: np.ndarray, probs: np.ndarray, delta: float, weight: float = 1.0,
                   target: float | None = None) -> TVBound:
    """Return an upper confidence bound on TV between the law that produced ``observed`` and ``probs``.

    Parameters
    ----------
    observed : ndarray of int
        Counts of ``n`` i.i.d. draws over the cells of ``probs`` (a scenario's joint counts).
    probs : ndarray of float
        The exact target law ``Q`` (sums to 1).
    delta : float
        Error probability, 0 < delta < 1: the bound holds with probability ``>= 1 - delta``.
    weight : float, optional
        This look's share of ``delta`` when a run looks several times (weights summing to at most 1
        over the looks): the bound spends ``delta * weight``, and the bounds of all looks hold
        together with probability ``>= 1 - delta`` (union bound), the confidence recorded.
    target : float, optional
        The TV a run asked to certify (``--certify-tv EPS``); recorded in the result.

    Returns
    -------
    TVBound
        ``bound = min(1, TV(P_hat, Q) + sqrt(ln(1/(delta weight)) / (2 n)))``, the plug-in ``tv``, ``n`` and
        the confidence ``1 - delta``.

    Notes
    -----
    Valid for every output law P and every n >= 1 (Hoeffding on the fixed set {P > Q}; the module
    docstring has the proof). It bounds the TV of the whole sequences' law, hence of every
    marginal and every event of the generated text.
    """
    observed = np.asarray(observed)
    n = int(observed.sum())
    if n < 1:
        raise ValueError("a TV bound needs at least one draw")
    if not (0.0 < delta < 1.0 and 0.0 < weight <= 1.0):
        raise ValueError(f"delta = {delta}, weight = {weight}; allowed: 0 < delta < 1, 0 < weight <= 1")
    tv = tv_distance(observed, np.asarray(probs, dtype=np.float64))
    bound = min(1.0, tv + hoeffding_slack(n, delta * weight))
    return TVBound(bound=bound, confidence=1.0 - delta, tv=tv, sequences=n, target=target)


def samples_to_certify(probs: np.ndarray, eps: float, delta: float) -> int | None:
    """Return the n at which a lossless verifier's expected bound reaches ``eps``, or None if no n <= 10^12 does.

    Plans a ``--certify-tv`` run (its sample cap is :data:`CAP_FACTOR` times this): the expected
    plug-in TV under P = Q (:func:`~specaudit.stats.gof.expected_tv_null`, exact) plus the slack at
    ``delta * PLANNED_WEIGHT``. A plan, not a guarantee: the bound's validity never depends on it.
    """
    probs = np.asarray(probs, dtype=np.float64)

    def expected_bound(n: int) -> float:
        return expected_tv_null(probs, n) + hoeffding_slack(n, delta * PLANNED_WEIGHT)

    lo, hi = 1, 1
    while expected_bound(hi) > eps:
        lo, hi = hi, 2 * hi
        if hi > MAX_PLANNED:
            return None
    while hi - lo > max(1, lo // 1000):  # 0.1% is plenty for a plan
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if expected_bound(mid) <= eps else (mid, hi)
    return hi
