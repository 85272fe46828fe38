"""Loop mutants of HF assisted generation: the installed transformers with one bug patched in.

Each mutant wraps ``AssistedCandidateGenerator._generate_candidates``
(``transformers/generation/candidate_generator.py:326-342`` in 5.25.0), the method that hands the
verifier the draft tokens and the assistant's processed scores ``q``; the drafts themselves are
left alone, so only what the verifier is told about them is wrong. They are negative controls of
:func:`specaudit.loops.hf.audit`: the joint-law check must fail on them.

``draft-probs-shifted``
    ``q`` rows of the wrong step: row ``i`` is the assistant's law at step ``i + 1`` (the last
    row kept), the class of vLLM #41044 and #40269 (draft probabilities cached at one step and
    read at another).
``draft-probs-unprocessed``
    ``q`` from the assistant's raw logits (before temperature / top-k / top-p) while the drafts
    were sampled from the processed ones: the acceptance ratio and the residual use a law the
    drafts were not drawn from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from specaudit.errors import UsageError
from specaudit.registry import Registry

__all__ = ["MUTANTS", "applied"]

Patch = Callable[[Callable[..., Any]], Callable[..., Any]]

#: The loop mutants by name: each turns the original ``_generate_candidates`` into the mutated one.
MUTANTS: Registry[Patch] = Registry("hf-generate mutant", UsageError)


@MUTANTS.register("draft-probs-shifted")
def _shifted(original: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    def _generate_candidates(self: Any, generation_args: dict) -> tuple[Any, Any]:
        ids, logits = original(self, generation_args)
        if logits is not None and logits.shape[1] > 1:
            logits = torch.cat([logits[:, 1:], logits[:, -1:]], dim=1)
        return ids, logits

    return _generate_candidates


@MUTANTS.register("draft-probs-unprocessed")
def _unprocessed(original: Callable[..., Any]) -> Callable[..., Any]:

    def _generate_candidates(self: Any, generation_args: dict) -> tuple[Any, Any]:
        ids, logits = original(self, generation_args)
        if logits is not None:
            k = logits.shape[1]
            raw = self.assistant_model(ids).logits[:, -k - 1:-1, :]
            logits = raw.to(dtype=logits.dtype, device=logits.device)
        return ids, logits

    return _generate_candidates


@contextlib.contextmanager
def applied(name: str | None) -> Iterator[None]:
    """Patch the mutant ``name`` into the installed transformers for the block (None: no patch)."""
    if name is None:
        yield
        return
    patch = MUTANTS.get(name)
    from transformers.generation.candidate_generator import AssistedCandidateGenerator

    original = AssistedCandidateGenerator.__dict__["_generate_candidates"]
    AssistedCandidateGenerator._generate_candidates = patch(original)
    try:
        yield
    finally:
        AssistedCandidateGenerator._generate_candidates = original
