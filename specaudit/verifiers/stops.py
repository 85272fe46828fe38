"""The reference verifier of the stops contract: the chain rule, then the stop rule.

:func:`verify` is :func:`specaudit.verifiers.reference.verify` followed by
:func:`specaudit.contract.stops.apply_stops`: each emitted token is checked for a stop token
before the budget, token by token, as vLLM's scheduler does (``check_stop``). The zoo's stop
mutants (:mod:`specaudit.verifiers.zoo.stops`) differ from it in that last step only.
"""

from __future__ import annotations

import numpy as np

from specaudit.contract.stops import Stops, apply_stops
from specaudit.verifiers import reference

__all__ = ["verify"]


def verify(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, rng: np.random.Generator,
           stops: Stops) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Verify a batch by the chain rule and keep what each request keeps: ``(out, n_out, finished)``."""
    out, n_out = reference.verify(draft, q, p, num_draft, rng)
    return apply_stops(out, n_out, stops)


verify.stops = True  # type: ignore[attr-defined]
