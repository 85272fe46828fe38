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
``target-scores-block-start``
    the target's scores at every position of a block processed with the history at the block's
    start (``candidate_input_ids[:, :cur_len]`` for position ``cur_len + i``: the drafts before it in
    the block left out), the class of vLLM PR #44297 (a grammar mask for the whole draft window
    taken from the state before it) and SGLang PR #33643 (penalties fed only the last accepted
    token of each step); it wraps the ``logits_processor`` that ``GenerationMixin._assisted_decoding``
    calls once per position (``utils.py`` in 5.25.0: ``logits_processor(candidate_input_ids[:, :
    cur_len + i], new_logits[:, i, :])``). Lossless without history-dependent processing; the
    history configurations (``repetition-penalty``, ``no-repeat-ngram``, ``min-new-tokens``,
    ``bad-words``) must fail on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from specaudit.errors import UsageError
from specaudit.registry import Registry

__all__ = ["CAUGHT_ON", "MUTANTS", "applied"]

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


class _BlockStart:
    """A LogitsProcessorList stand-in: positions of one block (one scores tensor) get the block's first history."""

    def __init__(self, processors: Any):
        self.processors = processors
        self.block: tuple[int, int] | None = None  # (storage of the block's scores, its first history length)

    def __len__(self) -> int:
        return len(self.processors)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.processors)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        storage = scores.untyped_storage().data_ptr()
        if self.block is None or self.block[0] != storage:
            self.block = (storage, input_ids.shape[1])
        return self.processors(input_ids[:, : self.block[1]], scores, **kwargs)


def _block_start(original: Callable[..., Any]) -> Callable[..., Any]:
    def _assisted_decoding(self: Any, *args: Any, **kwargs: Any) -> Any:
        if "logits_processor" in kwargs:
            kwargs["logits_processor"] = _BlockStart(kwargs["logits_processor"])
        return original(self, *args, **kwargs)

    return _assisted_decoding


#: The configurations of ``specaudit run hf-generate`` each mutant must fail (``benchmarks/hf_generate.py`` measures its
#: power there): the history-blind mutant is lossless where nothing depends on the history.
CAUGHT_ON: dict[str, tuple[str, ...]] = {
    "draft-probs-shifted": ("sampled",),
    "draft-probs-unprocessed": ("sampled",),
    "target-scores-block-start": ("repetition-penalty", "no-repeat-ngram", "min-new-tokens", "bad-words"),
}

#: Mutants that patch ``GenerationMixin._assisted_decoding`` (the others patch ``_generate_candidates``).
_DECODING = {"target-scores-block-start": _block_start}
MUTANTS.register("target-scores-block-start", _block_start)


@contextlib.contextmanager
def applied(name: str | None) -> Iterator[None]:
    """Patch the mutant ``name`` into the installed transformers for the block (None: no patch)."""
    if name is None:
        yield
        return
    patch = MUTANTS.get(name)
    if name in _DECODING:
        from transformers.generation.utils import GenerationMixin as owner

        method = "_assisted_decoding"
    else:
        from transformers.generation.candidate_generator import AssistedCandidateGenerator as owner

        method = "_generate_candidates"
    original = owner.__dict__[method]
    setattr(owner, method, patch(original))
    try:
        yield
    finally:
        setattr(owner, method, original)
