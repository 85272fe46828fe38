"""Pure statistics: arrays in, frozen results out; no I/O, no verifiers, no randomness of its own.

Goodness of fit
    :func:`goodness_of_fit` (Pearson's X^2 or G^2 with cells merged before sampling,
    :func:`merge_groups`), :func:`tv_distance`, :func:`expected_tv_null`, :func:`divergence`;
    p-values from the exact multinomial null, :func:`null_law` (:class:`NullLaw`), not the
    chi-square limit (the limit under-states the tail Holm reads).
Ratio of means and multiplicity
    :func:`ratio_test` (tokens per step by the delta method), :func:`holm`.
Distribution tails
    :func:`chi2_sf`, :func:`chi2_isf`, :func:`ncx2_sf`, :func:`normal_sf`, :func:`normal_isf`: the
    scipy.special functions scipy.stats calls, without importing scipy.stats (~0.4 s a process).
Sequential early stop
    :func:`look_schedule`, :func:`spending`, :func:`stop_level`, :class:`Track`, :func:`decisive`
    (:mod:`~specaudit.stats.sequential`: why family-wise alpha holds).
Certificate
    :func:`~specaudit.stats.certificate.tv_upper_bound` (an upper confidence bound on TV to the
    exact law, valid for every law and N), :func:`~specaudit.stats.certificate.samples_to_certify`
    (:mod:`~specaudit.stats.certificate`: the proof, candidates compared).
Power and sample size
    :func:`power_against`, :func:`simulated_power`, :func:`noncentrality_for_power`,
    :func:`detectable_tv`, :func:`samples_for_tv`, :func:`samples_for_law`
    (:mod:`~specaudit.stats.power`: what "TV detectable" means).
"""

from __future__ import annotations

from specaudit.stats.gof import (
    MIN_EXPECTED,
    GoodnessOfFit,
    NullLaw,
    RatioTest,
    chi2_isf,
    chi2_sf,
    divergence,
    expected_tv_null,
    goodness_of_fit,
    holm,
    merge_groups,
    ncx2_sf,
    normal_isf,
    normal_sf,
    null_law,
    ratio_test,
    ratio_z,
    saddlepoint_z,
    statistics,
    tv_distance,
)
from specaudit.stats.power import (
    PowerResult,
    detectable_tv,
    noncentrality_for_power,
    power_against,
    samples_for_law,
    samples_for_tv,
    simulated_power,
)
from specaudit.stats.sequential import Track, decisive, look_schedule, spending, stop_level

__all__ = [
    "MIN_EXPECTED",
    "GoodnessOfFit",
    "NullLaw",
    "PowerResult",
    "RatioTest",
    "Track",
    "chi2_isf",
    "chi2_sf",
    "decisive",
    "detectable_tv",
    "divergence",
    "expected_tv_null",
    "goodness_of_fit",
    "holm",
    "look_schedule",
    "merge_groups",
    "ncx2_sf",
    "noncentrality_for_power",
    "normal_isf",
    "normal_sf",
    "null_law",
    "power_against",
    "ratio_test",
    "ratio_z",
    "saddlepoint_z",
    "samples_for_law",
    "samples_for_tv",
    "simulated_power",
    "spending",
    "statistics",
    "stop_level",
    "tv_distance",
]
