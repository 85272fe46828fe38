"""Stop mutants: the reference chain rule, then a stop rule as three engines got it wrong.

Each verifies by :func:`specaudit.verifiers.reference.verify` (lossless tokens) and declares the
stops contract (:mod:`specaudit.contract.stops`); only which tokens a request keeps, and why it
ended, is wrong. Without stop tokens and budgets each is the reference, so every law check
passes; the ``stops`` check (:mod:`specaudit.checks.stops`) catches each, on every chain
scenario of the probs contract (shipped: ``stops``). Registered as ``boundary`` mutants.
"""

from __future__ import annotations

import numpy as np

from specaudit.contract.stops import LENGTH, RUNNING, STOPPED, Stops, apply_stops
from specaudit.verifiers import reference
from specaudit.verifiers.zoo import mutant as zoo

__all__ = ["MUTANTS", "budget_ignored", "cap_before_stop", "stop_last_token_only"]


def _stop_sets(stops: Stops) -> list[set[int]]:
    return [{int(t) for t in row if t >= 0} for row in stops.tokens]


@zoo.register("boundary", "transformers #47912, fixed by PR #47931 (assisted decoding appended the whole accepted "
              "block, and EosTokenCriteria looked only at its last token)", contract="stops")
def stop_last_token_only(draft, q, p, num_draft, rng, stops):
    """Keep the block up to the budget; a stop only when the last kept token is a stop token."""
    out, n_out = reference.verify(draft, q, p, num_draft, rng)
    keep = np.minimum(n_out, stops.remaining)
    out[np.arange(out.shape[1])[None, :] >= keep[:, None]] = -1
    last = out[np.arange(len(keep)), keep - 1]
    sets = _stop_sets(stops)
    finished = np.array([STOPPED if int(t) in s else (LENGTH if k >= r else RUNNING)
                         for t, s, k, r in zip(last, sets, keep, stops.remaining)], dtype=np.int64)
    return out, keep.astype(np.int64), finished


@zoo.register("boundary", "SGLang #31599, fixed by PR #31569 (Req.update_finish_state checked max_new_tokens before "
              "the stops: an in-budget stop finished as a length, and the tokens after it leaked)", contract="stops")
def cap_before_stop(draft, q, p, num_draft, rng, stops):
    """Check the budget on the whole block first: a block reaching it is cut there as a length finish."""
    out, n_out = reference.verify(draft, q, p, num_draft, rng)
    capped = n_out >= stops.remaining
    kept_out, kept, finished = apply_stops(out, n_out, stops)  # the stop rule, for the blocks under the budget
    cut = np.where(capped, stops.remaining, kept)
    lengthened = np.where(np.arange(out.shape[1])[None, :] < stops.remaining[:, None], out, -1)
    return (np.where(capped[:, None], lengthened, kept_out), cut.astype(np.int64),
            np.where(capped, LENGTH, finished).astype(np.int64))


@zoo.register("boundary", "ohdearquant/lattice #242, fixed by PR #245 (every accepted draft committed without "
              "re-checking max_new_tokens: a request got more tokens than it asked for)", contract="stops")
def budget_ignored(draft, q, p, num_draft, rng, stops):
    """Cut at stop tokens, never at the budget: every accepted token is committed."""
    out, n_out = reference.verify(draft, q, p, num_draft, rng)
    unbounded = Stops(stops.tokens, np.full_like(stops.remaining, np.iinfo(np.int64).max))
    return apply_stops(out, n_out, unbounded)


for _mutant in (stop_last_token_only, cap_before_stop, budget_ignored):
    _mutant.stops = True  # type: ignore[attr-defined]  # each declares the stops contract

#: The stop mutants of the one zoo registry, by name, in definition order.
MUTANTS = zoo.family("stops")
