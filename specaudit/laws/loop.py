"""The exact law of a request's output under the loop contract: the processed target, token by token, stopped.

A lossless loop emits, for every request the client does not end, what the target would emit
without speculation (:mod:`specaudit.contract.loop`): token ``t`` follows
``process(models.target(prompt + tokens so far))`` with the penalty and the grammar mask read from
the same history, and the output ends at its first stop token or at ``max_tokens``. Whatever the
trace does to the batch (arrivals, reorders, preemptions, other requests ending) and whatever the
drafter proposes, that law holds. :func:`request_law` enumerates it: every possible output (at
most ``V ** max_tokens`` of them, fewer with stops) and its probability.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specaudit.contract.loop import Models, Request, Trace, process

__all__ = ["MAX_OUTPUTS", "request_law"]

#: The most outputs of one request the law enumerates (a scenario asking for more is refused at validation).
MAX_OUTPUTS = 200_000


def request_law(trace: Trace, request: Request, models: Models) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Return every output ``request`` can end with and its probability (outputs of probability 0 left out)."""
    stops = set(trace.stop_tokens)
    outputs: list[tuple[int, ...]] = []
    probs: list[float] = []

    def walk(tokens: list[int], mass: float) -> None:
        history = list(request.prompt) + tokens
        law = process(models.target([history])[0], trace, history, generated=len(tokens), min_tokens=request.min_tokens)
        if not law.sum() > 0:
            raise ValueError(f"request {request.id}: the processing bans every token after {list(tokens)} (prompt "
                             f"{list(request.prompt)}): no loop can emit its next token")
        for token in np.flatnonzero(law > 0).tolist():
            here = mass * float(law[token])
            grown = [*tokens, token]
            if token in stops or len(grown) >= request.max_tokens:
                outputs.append(tuple(grown))
                probs.append(here)
            else:
                walk(grown, here)

    walk([], 1.0)
    return outputs, np.array(probs)


def law_table(trace: Trace, requests: Sequence[Request], models: Models) -> dict[int, tuple[dict[tuple[int, ...], int], np.ndarray]]:
    """Return, per request id, the index of every output and the probabilities in that order."""
    table = {}
    for r in requests:
        outputs, probs = request_law(trace, r, models)
        table[r.id] = ({o: i for i, o in enumerate(outputs)}, probs)
    return table
