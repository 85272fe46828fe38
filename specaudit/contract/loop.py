"""The loop contract: a target that owns the generate loop, driven through a request trace.

A verifier call is handed its history; an engine's loop keeps it, across steps, for every request
of a batch that changes under it. Bugs live there (vLLM PR #41044 and #40269: cached draft laws
handed to another request after the batch was reordered; SGLang PR #33643: penalty counts fed only
a step's last accepted token; vLLM PR #44297: one grammar mask for the whole draft window;
mlx-lm PR #1109: rejected drafts left in the model's state; TensorRT-LLM #15182: -1 padding fed
back as a token). A target of this contract runs the loop itself::

    loop(trace: Trace, models: Models, rng: np.random.Generator) -> Mapping[int, Sequence[int]]

and returns every request's emitted tokens, by request id. Steps are ``0, 1, ...``. Request ``r``
is in the batch from step ``r.arrive`` until it ends, except from a ``preempt`` step up to its
``resume`` step (its history is kept; the loop recomputes what it cached). It ends when it emits a
stop token of ``trace.stop_tokens`` (kept), when it has emitted ``r.max_tokens`` tokens, or at step
``r.finish`` (the client ends it; no token of that step). At every step each request in the batch
drafts ``trace.k`` tokens from ``models.draft`` (fewer where its budget is closer), the target
verifies them by the chain rule, and the request emits the accepted drafts and one token more, cut
at its first stop token and at its budget. The batch's order at a step is the order of arrival, or
``trace.reorders[step]`` (an order of the request ids: a loop that caches per batch slot must move
its caches with the requests).

``models.target(histories)`` and ``models.draft(histories)`` return the raw next-token laws
``[B, V]`` after each history (the prompt and every token after it). The processing the loop
applies itself, at every position from the history at that position (the prompt, the tokens the
request emitted, and the drafts before that position): ``trace.repetition_penalty`` (each token
already in the history has its probability raised to that power, then renormalised: the logit
rule ``logit * penalty`` of non-positive logits, on ``log p``) and the grammar mask (once
``trace.mask_after`` is in the history, only ``trace.mask_allowed`` may follow). :func:`process`
is that rule; the drafter's law is used as it comes. The law of every request's output is then the
processed target's, token by token, stopped as above, whatever the trace and the drafter:
:mod:`specaudit.laws.loop` enumerates it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specaudit.chains.tabular import TabularChain
from specaudit.errors import ContractError

__all__ = ["Models", "Request", "Trace", "process", "validate_outputs"]


@dataclass(frozen=True)
class Request:
    """One request of a trace."""

    id: int
    prompt: tuple[int, ...]
    arrive: int = 0  # first step in the batch
    max_tokens: int = 4
    finish: int | None = None  # the step at which the client ends it (None: it runs to a stop or its budget)
    preempt: tuple[tuple[int, int], ...] = ()  # (step, resume step): out of the batch from step to resume - 1
    min_tokens: int = 0  # no stop token before this many tokens


@dataclass(frozen=True)
class Trace:
    """The requests of one loop run, the drafts per step, the processing and the batch reorders."""

    requests: tuple[Request, ...]
    k: int
    vocab: int
    stop_tokens: tuple[int, ...] = ()
    repetition_penalty: float = 1.0
    mask_after: int | None = None  # the token after which only mask_allowed may follow
    mask_allowed: tuple[int, ...] = ()
    reorders: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # step -> order of request ids
    no_repeat_ngram: int = 0  # no n-gram of this size twice in a history (0: off)
    bad_words: tuple[tuple[int, ...], ...] = ()  # token sequences that must not appear

    def in_batch(self, request: Request, step: int) -> bool:
        """Return whether ``request`` (not yet ended) is in the batch at ``step``."""
        if step < request.arrive or (request.finish is not None and step >= request.finish):
            return False
        return not any(start <= step < resume for start, resume in request.preempt)

    def order(self, step: int, running: Sequence[int]) -> list[int]:
        """Return the request ids of ``running`` in the batch order of ``step``."""
        if step in self.reorders:
            rank = {rid: i for i, rid in enumerate(self.reorders[step])}
            return sorted(running, key=lambda rid: rank[rid])
        arrival = {r.id: (r.arrive, i) for i, r in enumerate(self.requests)}
        return sorted(running, key=lambda rid: arrival[rid])

    @property
    def last_step(self) -> int:
        """Return a step by which every request has ended (each step emits at least one token of each)."""
        return max(r.arrive + r.max_tokens + sum(b - a for a, b in r.preempt) for r in self.requests) + 1


class Models:
    """The target's and the drafter's raw next-token laws after a history (chains of a scenario).

    The target is position-aware, as a model with positional embeddings is: after a history of
    ``n`` tokens its law is the chain's, tempered by ``temperatures[n % len(temperatures)]``
    (``p ** (1 / t)``, renormalised). A loop that keeps rejected drafts in its context conditions
    the target at the wrong positions even where the chain reads only the last token.
    """

    def __init__(self, target: TabularChain, draft: TabularChain, temperatures: Sequence[float] = (1.0,)):
        self._target, self._draft = target, draft
        self.vocab = target.vocab
        self.temperatures = tuple(float(t) for t in temperatures)

    @staticmethod
    def _state(chain: TabularChain, history: Sequence[int]) -> int:
        state = chain.start
        for token in history:
            state = int(chain.nxt[state, int(token)])
        return state

    def target(self, histories: Sequence[Sequence[int]]) -> np.ndarray:
        """Return the target's next-token laws ``[B, V]`` after each history."""
        rows = []
        for h in histories:
            law = self._target.dist[self._state(self._target, h)]
            t = self.temperatures[len(h) % len(self.temperatures)]
            if t != 1.0:
                law = law ** (1.0 / t)
                law = law / law.sum()
            rows.append(law)
        return np.array(rows).reshape(-1, self.vocab)

    def draft(self, histories: Sequence[Sequence[int]]) -> np.ndarray:
        """Return the drafter's next-token laws ``[B, V]`` after each history."""
        return np.array([self._draft.dist[self._state(self._draft, h)] for h in histories]).reshape(-1, self.vocab)


def process(p: np.ndarray, trace: Trace, history: Sequence[int], mask_history: Sequence[int] | None = None, *,
            generated: int = 0, min_tokens: int = 0) -> np.ndarray:
    """Return the processed target law after ``history``, renormalised.

    In order: the repetition penalty over ``history``; then, reading ``mask_history`` (default:
    ``history``, as the contract says), the grammar mask, the ban of every token that would repeat
    an n-gram (``no_repeat_ngram``, HF's rule) and of every token that would complete a bad word;
    and while ``generated < min_tokens`` the ban of every stop token (vLLM's ``MinTokensLogitsProcessor``).
    """
    law = np.array(p, dtype=np.float64)
    seen = sorted({int(t) for t in history})
    if trace.repetition_penalty != 1.0 and seen:
        law[seen] = law[seen] ** trace.repetition_penalty
    read = [int(t) for t in (history if mask_history is None else mask_history)]
    banned: set[int] = set()
    if trace.mask_after is not None and trace.mask_after in read:
        banned |= set(range(law.shape[-1])) - set(trace.mask_allowed)
    n = trace.no_repeat_ngram
    if n >= 1 and len(read) >= n - 1:
        tail = read[len(read) - n + 1:] if n > 1 else []
        banned |= {read[i + n - 1] for i in range(len(read) - n + 1) if read[i:i + n - 1] == tail}
    for word in trace.bad_words:
        prefix = [int(t) for t in word[:-1]]
        if not prefix or read[max(len(read) - len(prefix), 0):] == prefix:
            banned.add(int(word[-1]))
    if generated < min_tokens:
        banned |= set(trace.stop_tokens)
    if banned:
        law[sorted(banned)] = 0.0
    total = law.sum()
    return law / total if total > 0 else law


def validate_outputs(result: Any, trace: Trace) -> dict[int, list[int]]:
    """Return a loop's outputs by request id; raise ContractError naming the first request that breaks the contract.

    Every request has a list of token ids in ``[0, V)``, no token after its first stop token, at
    most ``max_tokens`` tokens, and (when the client did not end it) ends at a stop or its budget.
    """
    if not isinstance(result, Mapping):
        raise ContractError("return", f"a loop returns a mapping request id -> emitted tokens; got {type(result).__name__}")
    ids = {r.id for r in trace.requests}
    if set(result) != ids:
        missing, extra = sorted(ids - set(result)), sorted(set(result) - ids, key=repr)
        raise ContractError("return", f"a loop returns the tokens of every request and no other: missing {missing}, "
                            f"unknown {extra[:5]}")
    stops = set(trace.stop_tokens)
    out: dict[int, list[int]] = {}
    for r in trace.requests:
        try:
            tokens = [int(t) for t in np.asarray(result[r.id]).reshape(-1)]
            if any(float(t) != float(x) for t, x in zip(tokens, np.asarray(result[r.id], dtype=np.float64).reshape(-1))):
                raise ValueError("not integers")
        except (TypeError, ValueError) as exc:
            raise ContractError("dtype", f"request {r.id}: its tokens are not integers ({exc})") from None
        bad = [t for t in tokens if not 0 <= t < trace.vocab]
        if bad:
            raise ContractError("vocab-range", f"request {r.id}: token {bad[0]} outside [0, {trace.vocab}) in {tokens}")
        first = next((j for j, t in enumerate(tokens) if t in stops), None)
        if first is not None and first < len(tokens) - 1:
            raise ContractError("stop", f"request {r.id}: {len(tokens) - 1 - first} token(s) after the stop token "
                                f"{tokens[first]} at position {first}: {tokens}")
        if len(tokens) > r.max_tokens:
            raise ContractError("max-tokens", f"request {r.id}: {len(tokens)} tokens, max_tokens {r.max_tokens}: {tokens}")
        if r.finish is None and first is None and len(tokens) < r.max_tokens:
            raise ContractError("ended-early", f"request {r.id}: {len(tokens)} tokens, no stop token and max_tokens "
                                f"{r.max_tokens}: it ended early ({tokens})")
        out[r.id] = tokens
    return out
