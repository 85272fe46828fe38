"""The exact per-sequence law of (rounds, tokens): what the tokens-per-step ratio test averages.

:func:`specaudit.laws.horizon` gives the expectations over one sequence; this module gives the
whole finite law of the pair (R rounds, T uncut tokens emitted) of one ``length``-token sequence,
from the same step kernels. The calibration benchmark draws from it, and a check whose law is a
single point (every round accepts everything, or K = 0) has nothing to test.
"""

from __future__ import annotations

import numpy as np

from specaudit.chains.serving import MixedChain
from specaudit.chains.tabular import TabularChain
from specaudit.laws import scenario_step_kernels
from specaudit.scenarios.schema import Scenario

__all__ = ["rounds_tokens_law"]


def rounds_tokens_law(scenario: Scenario, target: TabularChain, draft: TabularChain) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the exact law of (rounds R, uncut tokens T) of one sequence: values R, T and their probabilities.

    Notes
    -----
    Dynamic programme over (position, state, rounds so far) with the step kernels of
    :func:`specaudit.laws.scenario_step_kernels`: a round started at position ``t`` that emits
    ``m`` tokens continues at ``t + m`` when ``t + m < L`` and ends the sequence otherwise, with
    ``T = t + m`` (the last round is not cut). Cost ``O(L^2 M S^2)``. A batch mix is the
    mixture of its classes' laws (each request draws its class once).
    """
    if isinstance(target, MixedChain):
        assert isinstance(draft, MixedChain)
        mixed: dict[tuple[float, float], float] = {}
        for w, t_c, d_c in zip(target.weights.tolist(), target.classes, draft.classes):
            for r, tk, pr in zip(*rounds_tokens_law(scenario, t_c, d_c)):
                mixed[(float(r), float(tk))] = mixed.get((float(r), float(tk)), 0.0) + w * float(pr)
        points = sorted(key for key, value in mixed.items() if value > 0)
        return (np.array([p[0] for p in points]), np.array([p[1] for p in points]), np.array([mixed[p] for p in points]))
    steps, start = scenario_step_kernels(scenario, target, draft)
    length, states = scenario.length, steps.shape[1]
    alive = np.zeros((length, states, length + 1))  # [position, state, rounds so far]
    alive[0, start, 0] = 1.0
    ended: dict[tuple[int, int], float] = {}
    for t in range(length):
        for m in range(1, len(steps) + 1):
            mass = np.einsum("sr,su->ur", alive[t], steps[m - 1])  # [next state, rounds so far]
            if t + m < length:
                alive[t + m, :, 1:] += mass[:, :-1]
                continue
            for r, p in enumerate(mass.sum(axis=0)):
                if p > 0:
                    ended[(r + 1, t + m)] = ended.get((r + 1, t + m), 0.0) + float(p)
    keys = sorted(ended)
    rounds = np.array([k[0] for k in keys], dtype=np.float64)
    tokens = np.array([k[1] for k in keys], dtype=np.float64)
    return rounds, tokens, np.array([ended[k] for k in keys])
