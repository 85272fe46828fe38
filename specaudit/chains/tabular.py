"""Token sources as finite-state chains: the law of the next token given the context state.

A chain has states ``0..S-1``; in state ``s`` the next token is drawn from ``dist[s]`` and the
state becomes ``nxt[s, x]``. A context-free source has one state; a first-order Markov source
has one state per previous token. Target and drafter are separate chains read in the same
context, so exact references work on the product of their states.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True, eq=False)
class TabularChain:
    """A finite-state token source with every conditional law held in a table."""

    dist: np.ndarray  # [S, V] float64, rows sum to 1
    nxt: np.ndarray  # [S, V] int64, next state after each token
    start: int  # state before the first token

    @property
    def vocab(self) -> int:
        """Return the vocabulary size V."""
        return self.dist.shape[1]

    @property
    def n_states(self) -> int:
        """Return the number of context states S."""
        return self.dist.shape[0]

    def start_states(self, n: int) -> np.ndarray:
        """Return ``n`` copies of the start state."""
        return np.full(n, self.start, dtype=np.int64)

    def probs(self, states: np.ndarray) -> np.ndarray:
        """Return the next-token laws [n, V] in ``states``."""
        return self.dist[states]

    def payload(self, states: np.ndarray) -> np.ndarray:
        """Return what the verifier is handed for ``states`` (probabilities here; logits chains override)."""
        return self.dist[states]

    def payload_of(self, probs: np.ndarray) -> np.ndarray:
        """Return the payload form of explicit probability rows (used for padding garbage)."""
        return probs

    def advance(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Return the states after emitting ``tokens`` in ``states``."""
        return self.nxt[states, tokens]

    @cached_property
    def _cdf(self) -> np.ndarray:
        cdf = np.cumsum(self.dist, axis=1)
        # Rounding can leave the total below u: from the last positive token on, the CDF is 1+.
        v = self.vocab
        last = v - 1 - np.argmax(self.dist[:, ::-1] > 0, axis=1)
        cdf[np.arange(v)[None, :] >= last[:, None]] = np.inf
        return cdf

    def sample(self, states: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Draw one token per state by inverse CDF at uniforms ``u``."""
        return (self._cdf[states] <= u[:, None]).sum(axis=1)


def context_free(p: np.ndarray) -> TabularChain:
    """Build a one-state chain that draws every token from ``p``."""
    p = np.asarray(p, dtype=np.float64)
    return TabularChain(p[None, :].copy(), np.zeros((1, p.size), dtype=np.int64), 0)


def first_order(matrix: np.ndarray, start: int) -> TabularChain:
    """Build a chain whose state is the previous token; ``start`` plays the token before the first."""
    matrix = np.asarray(matrix, dtype=np.float64)
    v = matrix.shape[1]
    nxt = np.broadcast_to(np.arange(v, dtype=np.int64), (matrix.shape[0], v)).copy()
    return TabularChain(matrix.copy(), nxt, int(start))


def one_hot_of(chain: TabularChain) -> TabularChain:
    """Return the chain that puts all mass on the argmax of ``chain`` (ties to the first index)."""
    hot = np.zeros_like(chain.dist)
    hot[np.arange(chain.n_states), np.argmax(chain.dist, axis=1)] = 1.0
    return TabularChain(hot, chain.nxt, chain.start)


def on_states_of(chain: TabularChain, like: TabularChain) -> TabularChain:
    """Re-express a one-state ``chain`` on the state space of ``like`` (same law in every state)."""
    if chain.n_states != 1:
        raise ValueError("only a one-state chain can be spread over another state space")
    dist = np.repeat(chain.dist, like.n_states, axis=0)
    return TabularChain(dist, like.nxt, like.start)
