"""The reference loop of the loop contract: a batch of requests through the chain rule, step by step.

:func:`verify` runs a :class:`~specaudit.contract.loop.Trace` as an engine's loop does
(:mod:`specaudit.contract.loop`): at the end of each step it drafts the next step's tokens for
every request still in the batch and caches them (the draft tokens and their laws) by batch slot,
as vLLM's proposer does; at the start of a step it moves that cache to the step's batch order (the
trace's reorders, arrivals, preemptions and finishes change it), drafts anew for a request it holds
no cache of (arrived, resumed), processes each target row from the request's history at that
position (prompt, emitted tokens, drafts before it: the penalty and the grammar mask), verifies the
whole batch in one call of :func:`specaudit.verifiers.reference.verify`, and cuts each row's tokens
at its first stop token and at its budget. The model context it conditions on is the prompt and
the emitted tokens, rolled back past every rejected draft.

:func:`run_loop` is that loop with switches, one per bug of the zoo's loop mutants
(:mod:`specaudit.verifiers.zoo.loop`); :data:`BUGS` names them.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from specaudit.contract.loop import Models, Trace, process
from specaudit.verifiers import reference

__all__ = ["BUGS", "run_loop", "verify"]

#: The loop's switches, each a bug of an engine's loop (the mutants of specaudit.verifiers.zoo.loop).
BUGS = ("cache-by-slot", "penalty-last-token", "mask-window-start", "context-not-rolled-back", "padding-as-token",
        "min-tokens-last-only")


def _sample(law: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(law)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(law) - 1))


def run_loop(trace: Trace, models: Models, rng: np.random.Generator, bugs: Collection[str] = ()) -> dict[int, list[int]]:
    """Run ``trace`` and return every request's emitted tokens (``bugs``: the switches of :data:`BUGS` turned on)."""
    unknown = set(bugs) - set(BUGS)
    if unknown:
        raise ValueError(f"unknown loop bugs {sorted(unknown)}; known: {', '.join(BUGS)}")
    by_id = {r.id: r for r in trace.requests}
    out: dict[int, list[int]] = {r.id: [] for r in trace.requests}
    context: dict[int, list[int]] = {r.id: list(r.prompt) for r in trace.requests}  # what the models condition on
    counted: dict[int, list[int]] = {r.id: list(r.prompt) for r in trace.requests}  # what the penalty counts
    done: set[int] = set()
    stops = set(trace.stop_tokens)
    k, v = trace.k, trace.vocab
    cached_ids: list[int] = []  # the batch order the cache was drafted in (one entry per slot)
    cached_drafts: list[list[int]] = []
    cached_laws: list[list[np.ndarray]] = []

    def budget(rid: int) -> int:
        return min(k, by_id[rid].max_tokens - len(out[rid]) - 1)

    def draft(rid: int) -> tuple[list[int], list[np.ndarray]]:
        tokens: list[int] = []
        laws: list[np.ndarray] = []
        for _ in range(budget(rid)):
            law = models.draft([context[rid] + tokens])[0]
            tokens.append(_sample(law, rng))
            laws.append(law)
        return tokens, laws

    for step in range(trace.last_step):
        for r in trace.requests:  # the client ends it at its finish step
            if r.finish is not None and step >= r.finish:
                done.add(r.id)
        running = [r.id for r in trace.requests if r.id not in done and trace.in_batch(r, step)]
        if not running:
            if len(done) == len(trace.requests):
                break
            cached_ids, cached_drafts, cached_laws = [], [], []
            continue
        order = trace.order(step, running)
        drafts: list[list[int]] = []
        laws: list[list[np.ndarray]] = []
        for slot, rid in enumerate(order):  # the cache follows its requests into this step's order
            if rid in cached_ids:
                old = cached_ids.index(rid)
                drafts.append(cached_drafts[old])
                # the bug: the laws stay in their slots while the tokens move with their requests
                laws.append(cached_laws[slot] if "cache-by-slot" in bugs and slot < len(cached_laws)
                            and len(cached_laws[slot]) == len(cached_drafts[old]) else cached_laws[old])
            else:
                tokens, token_laws = draft(rid)
                drafts.append(tokens)
                laws.append(token_laws)
        b = len(order)
        draft_arr = np.zeros((b, k), dtype=np.int64)
        q = np.full((b, k, v), 1.0 / v)
        p = np.full((b, k + 1, v), 1.0 / v)
        num_draft = np.array([len(d) for d in drafts], dtype=np.int64)
        for i, rid in enumerate(order):
            for j, token in enumerate(drafts[i]):
                draft_arr[i, j] = token
                q[i, j] = laws[i][j]
            for j in range(len(drafts[i]) + 1):
                window = context[rid] + drafts[i][:j]  # what the target conditions on
                penalised = counted[rid] + drafts[i][:j]  # what the penalty counts
                history = list(by_id[rid].prompt) + out[rid]
                masked = history if "mask-window-start" in bugs else history + drafts[i][:j]  # the bug: the window's start
                last = j == len(drafts[i])  # the bonus position, or the row's last
                floor = by_id[rid].min_tokens if last or "min-tokens-last-only" not in bugs else 0  # the bug: drafts unmasked
                p[i, j] = process(models.target([window])[0], trace, penalised, masked, generated=len(out[rid]) + j,
                                  min_tokens=floor)
        tokens_out, n_out = reference.verify(draft_arr, q, p, num_draft, rng)
        for i, rid in enumerate(order):
            emitted = [int(t) for t in tokens_out[i, : n_out[i]]]
            room = by_id[rid].max_tokens - len(out[rid])
            kept = []
            for token in emitted[:room]:
                kept.append(token)
                if token in stops:
                    break
            out[rid] += kept
            if "context-not-rolled-back" in bugs and len(emitted) < len(drafts[i]) + 1:
                context[rid] += drafts[i] + kept[-1:]  # the rejected drafts stay in the model's context
            else:
                context[rid] += kept
            if "padding-as-token" in bugs and int(n_out[i]) < k + 1:
                context[rid].append(int(tokens_out[i, int(n_out[i])]) % v)  # -1 read back as token V - 1
            counted[rid] += kept[-1:] if "penalty-last-token" in bugs else kept
            if (kept and kept[-1] in stops) or len(out[rid]) >= by_id[rid].max_tokens:
                done.add(rid)
        # draft the next step now, for the requests still in the batch, in this step's slots
        cached_ids = [rid for rid in order if rid not in done]
        cached_drafts, cached_laws = [], []
        for rid in cached_ids:
            tokens, token_laws = draft(rid)
            cached_drafts.append(tokens)
            cached_laws.append(token_laws)
    return out


def verify(trace: Trace, models: Models, rng: np.random.Generator) -> dict[int, list[int]]:
    """Run ``trace`` by the reference loop (no bug): every request's emitted tokens."""
    return run_loop(trace, models, rng)


verify.specaudit_contract = "loop"  # type: ignore[attr-defined]

