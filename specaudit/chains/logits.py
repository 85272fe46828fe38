"""Chains of raw logits: a token source whose law is the *processed* logits.

A scenario of kind ``logits`` describes each chain state by raw logits and sampling parameters
(temperature, top-k, top-p, min-p). :class:`LogitsChain` is that chain: a
:class:`~specaudit.chains.tabular.TabularChain` whose ``dist`` is ``process(logits, params)``, so
every exact reference reads the processed law, while the simulator hands the verifier the raw
logits rows (``payload``) when it runs under the logits contract
(:mod:`specaudit.contract.logits`). It lives with the other token sources, below the contract
that consumes it, so scenarios build it without importing a contract module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specaudit.chains.processing import SamplingParams, process
from specaudit.chains.tabular import TabularChain

__all__ = ["LogitsChain", "logits_chain", "params_of", "with_convention"]


@dataclass(frozen=True, eq=False)
class LogitsChain(TabularChain):
    """A chain whose ``dist`` is the processed law of raw ``logits`` under ``params``.

    Exact references read ``dist`` (the processed law); the simulator samples drafts from it and
    hands the verifier ``payload`` = the raw logits rows.
    """

    logits: np.ndarray  # [S, V] raw logits, -inf for probability 0
    params: SamplingParams

    def payload(self, states: np.ndarray) -> np.ndarray:
        """Return the raw logits rows for ``states``."""
        return self.logits[states]

    def payload_of(self, probs: np.ndarray) -> np.ndarray:
        """Return logits ``log(probs)`` for explicit probability rows (padding garbage)."""
        with np.errstate(divide="ignore"):
            return np.log(probs)


def logits_chain(logits: np.ndarray, nxt: np.ndarray, start: int, params: SamplingParams) -> LogitsChain:
    """Build a chain from raw logits [S, V]; its law is ``process(logits, params)``."""
    logits = np.asarray(logits, dtype=np.float64)
    return LogitsChain(process(logits, params), np.asarray(nxt, dtype=np.int64), int(start), logits, params)


def params_of(chain: TabularChain) -> SamplingParams:
    """Return the chain's sampling parameters (identity for a probability chain)."""
    return chain.params if isinstance(chain, LogitsChain) else SamplingParams()


def with_convention(chain: TabularChain, convention: str) -> TabularChain:
    """Return a logits ``chain`` processed in the order of ``convention`` (any other chain as it is)."""
    if not isinstance(chain, LogitsChain) or chain.params.convention == convention:
        return chain
    return logits_chain(chain.logits, chain.nxt, chain.start, chain.params.replace(convention=convention))
