"""A drafter with a vocabulary of its own: a draft-to-target id map (``d2t``) and the drafter's law on it.

EAGLE-3-style drafters predict over a reduced vocabulary of ``Vd < V`` ids; draft id ``i`` stands
for target id ``d2t[i]`` (vLLM ``vllm/model_executor/models/llama_eagle3.py`` keeps the map as
offsets, ``target = draft + d2t[draft]``; SGLang ``hot_token_id`` as absolute target ids, the form
used here). The engine samples a draft id from ``q_draft[Vd]`` and hands the verifier the target
id; the verifier must read ``q`` at the draft id (``q_target[d2t[i]] = q_draft[i]``, 0 off the
map's image). rtp-llm PR #1295/#1311 indexed ``q_draft`` with the target id instead.

:func:`restrict` builds such a drafter from any drafter chain on the target's states: its law is
the chain's, renormalised on the image of ``d2t`` (a logits drafter: its logits masked to the
image before processing, as a drafter whose head has only those ids). In target space the law is
an ordinary chain, so every exact reference applies unchanged; only the contract that hands q in
draft space (:mod:`specaudit.contract.logits`, ``draft-vocab``) sees the map.
"""

from __future__ import annotations

import numpy as np

from specaudit.chains.logits import LogitsChain, logits_chain
from specaudit.chains.tabular import TabularChain
from specaudit.errors import UsageError

__all__ = ["check_map", "restrict"]


def check_map(d2t: list[int] | np.ndarray, vocab: int) -> np.ndarray:
    """Return ``d2t`` as int64 after checking it is a one-to-one map from 0..Vd-1 into 0..vocab-1 (ValueError)."""
    ids = list(d2t)
    if not 1 <= len(ids) <= vocab:
        raise ValueError(f"d2t lists {len(ids)} draft ids; allowed: 1 .. vocab = {vocab} (one target id per draft id)")
    for i, t in enumerate(ids):
        if not 0 <= t < vocab:
            raise ValueError(f"d2t[{i}] = {t} is not a target id; allowed: 0 .. {vocab - 1} (the map goes into the "
                             f"target vocabulary of {vocab} ids)")
    seen: dict[int, int] = {}
    for i, t in enumerate(ids):
        if t in seen:
            raise ValueError(f"d2t[{seen[t]}] and d2t[{i}] are both target id {t}; allowed: a one-to-one map (each "
                             "target id at most once), so that a target id names one draft id")
        seen[t] = i
    return np.asarray(ids, dtype=np.int64)


def restrict(chain: TabularChain, d2t: np.ndarray) -> TabularChain:
    """Return the drafter ``chain`` restricted to the target ids ``d2t`` names (its law renormalised there)."""
    v = chain.vocab
    image = np.zeros(v, dtype=bool)
    image[d2t] = True
    if isinstance(chain, LogitsChain):
        masked = np.where(image, chain.logits, -np.inf)
        if not np.isfinite(masked.max(axis=-1)).all():
            raise UsageError(f"d2t: a drafter logits row is -.inf on every target id of the map {d2t.tolist()}")
        return logits_chain(masked, chain.nxt, chain.start, chain.params)
    kept = np.where(image, chain.dist, 0.0)
    mass = kept.sum(axis=-1)
    if not (mass > 0).all():
        row = int(np.flatnonzero(~(mass > 0))[0])
        raise UsageError(f"d2t: drafter row {row} has no mass on the target ids of the map {d2t.tolist()}; allowed: a "
                         "drafter with mass on the map's image in every state")
    return TabularChain(kept / mass[:, None], chain.nxt, chain.start)
