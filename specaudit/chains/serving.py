"""Serving chains: a batch mix of request classes, and targets whose law depends on the history.

A serving engine verifies a batch in which every request has its own sampling parameters
(temperature, top-k, top-p, min-p, penalties, logit bias, an allowed-token mask). Two chains
make that exact on small vocabularies:

* :class:`HistoryChain`, a logits chain whose state is (base state, token counts of the history):
  repetition, frequency and presence penalties make the next-token law depend on how often each
  token occurred, so the counts are part of the state. At a verification position ``j`` the
  history holds the generated prefix and drafts ``0..j-1``; walking the chain along the drafts
  does exactly that, so every exact reference (joint law, round kernels) reads the penalised
  target at the right history. Counts are enumerated up to ``depth`` tokens (length + k: the
  longest history a verifier sees); a state at ``depth`` keeps its counts (never read).
* :class:`MixedChain`, the disjoint union of per-class chains with the class law ``weights``:
  each request draws its class when it starts (the simulator, from the harness's generator), so
  rows of one batch follow different processed laws. Exact references are per class and mix
  linearly (:mod:`specaudit.laws.serving`); the joint-law check counts (class, sequence) cells.

Both are :class:`~specaudit.chains.tabular.TabularChain` s: the simulator's tables, the
probes and the laws read them like any other chain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from specaudit.chains.logits import LogitsChain
from specaudit.chains.processing import SamplingParams, process
from specaudit.chains.tabular import TabularChain

__all__ = ["HistoryChain", "MixedChain", "class_chains", "history_chain", "history_states", "mixed"]


@dataclass(frozen=True, eq=False)
class HistoryChain(LogitsChain):
    """A logits chain on (base state, history counts): its law is ``process(logits, params, counts)``."""

    counts: np.ndarray  # [S, V] int64: how often each token occurs in the history of each state


def history_states(base_states: int, vocab: int, depth: int) -> int:
    """Return an upper bound on the states of a history chain: base states x count vectors of total <= depth."""
    return base_states * math.comb(depth + vocab, vocab)


def history_chain(base: LogitsChain, params: SamplingParams, depth: int) -> HistoryChain:
    """Return the chain of ``base``'s raw logits processed with ``params`` on the history's token counts.

    States are enumerated breadth first from (``base.start``, no tokens) up to ``depth`` tokens of
    history; the payload of every state is its base state's raw logits (what an engine hands
    the verifier), its law the penalised, processed one.
    """
    v = base.vocab
    code: dict[tuple[int, tuple[int, ...]], int] = {}
    keys: list[tuple[int, tuple[int, ...]]] = []

    def state(key: tuple[int, tuple[int, ...]]) -> int:
        if key not in code:
            code[key] = len(keys)
            keys.append(key)
        return code[key]

    state((int(base.start), (0,) * v))
    nxt_rows: list[list[int]] = []
    i = 0
    while i < len(keys):
        b, counts = keys[i]
        row = []
        for x in range(v):
            if sum(counts) >= depth:  # never read: the row has finished
                row.append(i)
                continue
            grown = list(counts)
            grown[x] += 1
            row.append(state((int(base.nxt[b, x]), tuple(grown))))
        nxt_rows.append(row)
        i += 1
    bases = np.array([b for b, _ in keys], dtype=np.int64)
    table = np.array([c for _, c in keys], dtype=np.int64)
    logits = base.logits[bases]
    return HistoryChain(process(logits, params, counts=table), np.array(nxt_rows, dtype=np.int64), 0, logits, params,
                        table)


@dataclass(frozen=True, eq=False)
class MixedChain(TabularChain):
    """The disjoint union of per-class chains; a request starts in its class's start state.

    ``rows`` are the payload rows of every union state (raw logits for logits classes, else the
    probabilities), ``state_class`` the class of every state, ``starts`` each class's start state
    in the union (``start`` is class 0's).
    """

    classes: tuple[TabularChain, ...]
    weights: np.ndarray  # [C] the request-class law
    names: tuple[str, ...]
    starts: np.ndarray  # [C] int64
    state_class: np.ndarray  # [S] int64
    rows: np.ndarray  # [S, V] payload rows

    def payload(self, states: np.ndarray) -> np.ndarray:
        """Return the payload rows of ``states`` (each class's own payload form)."""
        return self.rows[states]

    def payload_of(self, probs: np.ndarray) -> np.ndarray:
        """Return padding rows in the payload form of class 0."""
        return self.classes[0].payload_of(probs)

    def with_classes(self, classes: tuple[TabularChain, ...]) -> MixedChain:
        """Return the same union over ``classes`` (same states, another payload form)."""
        return mixed(classes, self.weights, self.names)


def mixed(classes: tuple[TabularChain, ...], weights: np.ndarray, names: tuple[str, ...]) -> MixedChain:
    """Build the union of ``classes`` (one vocabulary) with the request-class law ``weights``."""
    sizes = [c.n_states for c in classes]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    dist = np.concatenate([c.dist for c in classes])
    nxt = np.concatenate([c.nxt + off for c, off in zip(classes, offsets)])
    rows = np.concatenate([np.asarray(c.payload(np.arange(c.n_states)), dtype=np.float64) for c in classes])
    starts = np.array([off + c.start for c, off in zip(classes, offsets)], dtype=np.int64)
    state_class = np.repeat(np.arange(len(classes)), sizes).astype(np.int64)
    w = np.asarray(weights, dtype=np.float64)
    return MixedChain(dist, nxt, int(starts[0]), tuple(classes), w / w.sum(), tuple(names), starts, state_class, rows)


def class_chains(chain: TabularChain) -> tuple[TabularChain, ...]:
    """Return the per-class chains of a mix (the chain itself otherwise)."""
    return chain.classes if isinstance(chain, MixedChain) else (chain,)


def with_params(chain: LogitsChain, params: SamplingParams, depth: int) -> LogitsChain:
    """Return ``chain``'s raw logits under ``params``: a history chain when a penalty is on."""
    if params.penalised:
        return history_chain(chain, params, depth)
    return replace(chain, dist=process(chain.logits, params), params=params)
