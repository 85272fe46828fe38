"""Exact laws of a batch mix: each request draws its class once, so every law mixes the classes' laws.

A serving scenario's batch holds requests of several classes (:class:`specaudit.chains.serving.MixedChain`),
each with its own processed target and drafter. The classes share nothing but the batch, so a
lossless verifier's rounds are, request by request, those of the request's class: expectations
over one sequence are the weighted sums of the classes' expectations, and the tokens per step
(a ratio of expectations over i.i.d. sequences) is ``sum_c w_c E_c[T] / sum_c w_c E_c[R]``, not
the mean of the classes' ratios. :func:`specaudit.laws.horizon` and the other dispatchers call
:func:`mix_horizon` on the classes' laws.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specaudit.laws.chain import HorizonLaw

__all__ = ["mix_horizon"]


def mix_horizon(parts: Sequence[HorizonLaw], weights: np.ndarray) -> HorizonLaw:
    """Return the round law of one sequence whose class is drawn with ``weights`` from the classes' ``parts``.

    Notes
    -----
    Linear in the class law: ``E[R] = sum_c w_c E_c[R]``, ``E[T]`` alike, the expected
    accepted-count histogram per sequence alike; the pooled accept law and the tokens per step
    are the ratios of the mixed expectations.
    """
    w = np.asarray(weights, dtype=np.float64)
    rounds = float(sum(wc * h.expected_rounds for wc, h in zip(w, parts)))
    tokens = float(sum(wc * h.expected_tokens for wc, h in zip(w, parts)))
    counts = np.sum([wc * h.expected_accept_counts for wc, h in zip(w, parts)], axis=0)
    return HorizonLaw(
        length=parts[0].length,
        expected_rounds=rounds,
        expected_tokens=tokens,
        tokens_per_step=tokens / rounds,
        accept_law=counts / rounds,
        expected_accept_counts=counts,
    )
