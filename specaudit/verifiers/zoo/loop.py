"""Loop mutants: the reference loop with one bug of an engine's loop each (the loop contract).

Each is :func:`specaudit.verifiers.loop.run_loop` with one switch of
:data:`specaudit.verifiers.loop.BUGS` on. The verifier call inside is the reference's: what is
wrong is the state the loop keeps across steps, so no single verifier call shows it; the
``loop-law`` check of a ``mode: loop`` scenario does (shipped: ``loop-v4``; ``min_tokens_last_only`` on
``loop-processing-v6``, whose requests have a ``min_tokens``). Registered as
``distribution`` mutants of the ``loop`` contract.
"""

from __future__ import annotations

from specaudit.verifiers.loop import run_loop
from specaudit.verifiers.zoo import mutant as zoo

__all__ = ["MUTANTS", "cache_by_slot", "context_not_rolled_back", "mask_window_start", "min_tokens_last_only",
           "padding_as_token", "penalty_last_token"]


@zoo.register("distribution", "vLLM PR #41044 and #40269 (draft probabilities cached per batch slot handed to another "
              "request after the batch was reordered)", contract="loop")
def cache_by_slot(trace, models, rng):
    """Move the cached draft tokens with their requests on a reorder, but leave their laws in the old slots."""
    return run_loop(trace, models, rng, {"cache-by-slot"})


@zoo.register("distribution", "SGLang PR #33643 (penalty counts fed only the last accepted token of each step)",
              contract="loop")
def penalty_last_token(trace, models, rng):
    """Count only each step's last emitted token in the repetition penalty's history."""
    return run_loop(trace, models, rng, {"penalty-last-token"})


@zoo.register("distribution", "vLLM PR #44297 (one grammar mask for the whole draft window, from the state before it)",
              contract="loop")
def mask_window_start(trace, models, rng):
    """Take the grammar mask of every position of a step from the history at the step's start."""
    return run_loop(trace, models, rng, {"mask-window-start"})


@zoo.register("distribution", "mlx-lm PR #1109 (rejected drafts left in the model's cache)", contract="loop")
def context_not_rolled_back(trace, models, rng):
    """Keep a step's rejected drafts in the context the models condition on next."""
    return run_loop(trace, models, rng, {"context-not-rolled-back"})


@zoo.register("distribution", "TensorRT-LLM #15182 (the -1 padding of a short step fed back as a token)",
              contract="loop")
def padding_as_token(trace, models, rng):
    """Append the -1 padding of a step that emitted fewer than K + 1 tokens to the context, read as token V - 1."""
    return run_loop(trace, models, rng, {"padding-as-token"})


@zoo.register("distribution", "vLLM PR #32642 (before it the rejection sampler applied no min_tokens mask at the draft "
              "positions: a stop token could be accepted before min_tokens)", contract="loop")
def min_tokens_last_only(trace, models, rng):
    """Ban the stop tokens below min_tokens at a step's last position only, not at its draft positions."""
    return run_loop(trace, models, rng, {"min-tokens-last-only"})


for _mutant in (cache_by_slot, penalty_last_token, mask_window_start, context_not_rolled_back, padding_as_token,
                min_tokens_last_only):
    _mutant.specaudit_contract = "loop"  # type: ignore[attr-defined]

#: The loop mutants of the one zoo registry, by name, in definition order.
MUTANTS = zoo.family("loop")
