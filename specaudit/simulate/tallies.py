"""Tallies: what a simulation hands its checks, and the protocol every tally follows.

A simulator sends every finished block of sequences to its *sinks* (:class:`Sink`: anything with
``observe(sequences)``); a sink accumulates what one check needs. :class:`JointCounts` counts
whole sequences (the joint-law check), :class:`RoundStats` is what the simulator itself returns
(accepted-count histograms, round and token moments, verify calls). Both are additive: tallies
of disjoint blocks ``merge`` into the tallies of their union and round-trip through JSON
(``to_dict``), which is what parallel runs, shards and ``specaudit merge`` rely on.
:class:`GreedyMatch` compares every sequence with greedy decoding of the target (greedy mode).
The sinks of the large-vocabulary tests live with their checks (:mod:`specaudit.checks.prefix`,
:mod:`specaudit.checks.pit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from specaudit.chains.tabular import TabularChain
from specaudit.laws.chain import greedy_path

__all__ = ["JointCounts", "RoundStats", "Sink"]


class Sink(Protocol):
    """Receives every finished sequence; accumulates what a check needs."""

    def observe(self, sequences: np.ndarray) -> None:
        """Take a block of finished sequences [n, L]."""


class JointCounts:
    """Counts of whole sequences, cell index = sum_t x_t V**(L-1-t).

    With ``mixed`` (a batch mix: :mod:`specaudit.chains.serving`, ``classes`` request classes) the
    sequences arrive with their request class as a leading column and the cell is
    ``class * V**L + sequence``. A mix of one class still has that column (the simulator adds it
    for every :class:`~specaudit.chains.serving.MixedChain`), so the column follows ``mixed``, not
    ``classes > 1``; ``mixed`` defaults to ``classes > 1``.
    """

    def __init__(self, vocab: int, length: int, classes: int = 1, *, mixed: bool | None = None):
        self.mixed = classes > 1 if mixed is None else mixed
        if classes > 1 and not self.mixed:
            raise ValueError(f"joint counts of {classes} classes need the class column (mixed=True)")
        self.weights = vocab ** np.arange(length - 1, -1, -1, dtype=np.int64)
        if self.mixed:
            self.weights = np.concatenate([[vocab**length], self.weights]).astype(np.int64)
        self.counts = np.zeros(classes * vocab**length, dtype=np.int64)

    def observe(self, sequences: np.ndarray) -> None:
        """Add the sequences' cells to the counts."""
        if sequences.shape[1] != self.weights.size:
            what = "a class column, then" if self.mixed else "no class column,"
            raise ValueError(f"joint counts take rows of {what} {self.weights.size - self.mixed} tokens; "
                             f"got rows of {sequences.shape[1]} columns")
        self.counts += np.bincount(sequences @ self.weights, minlength=self.counts.size)

    def merge(self, other: JointCounts) -> None:
        """Add another shard's counts (same V and L)."""
        self.counts += other.counts

    def to_dict(self) -> dict[str, Any]:
        """Return the counts as JSON-able data."""
        nz = np.flatnonzero(self.counts)
        return {"cells": int(self.counts.size), "index": nz.tolist(), "count": self.counts[nz].tolist()}

    def load(self, data: dict[str, Any]) -> None:
        """Add counts written by :meth:`to_dict`."""
        if int(data["cells"]) != self.counts.size:
            raise ValueError(f"joint counts have {data['cells']} cells, expected {self.counts.size}")
        np.add.at(self.counts, np.asarray(data["index"], dtype=np.int64), np.asarray(data["count"], dtype=np.int64))


@dataclass
class RoundStats:
    """Additive per-round and per-sequence tallies (mergeable across shards)."""

    k: int
    accept_first: np.ndarray = field(init=False)  # accepted-count histogram, first round only
    accept_all: np.ndarray = field(init=False)  # accepted-count histogram, every round
    sequences: int = 0
    # sums over sequences of R (rounds), T (uncut tokens), R^2, T^2, R*T: the ratio's delta method
    moments: np.ndarray = field(default_factory=lambda: np.zeros(5))
    calls: int = 0
    verifier_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.accept_first = np.zeros(self.k + 1, dtype=np.int64)
        self.accept_all = np.zeros(self.k + 1, dtype=np.int64)

    def finish(self, rounds: np.ndarray, tokens: np.ndarray) -> None:
        """Record finished sequences' round and token totals."""
        r, t = rounds.astype(np.float64), tokens.astype(np.float64)
        self.sequences += r.size
        self.moments += (r.sum(), t.sum(), (r * r).sum(), (t * t).sum(), (r * t).sum())

    def merge(self, other: RoundStats) -> None:
        """Add another shard's tallies (same K)."""
        if other.k != self.k:
            raise ValueError(f"cannot merge round stats with k = {other.k} into k = {self.k}")
        self.accept_first += other.accept_first
        self.accept_all += other.accept_all
        self.sequences += other.sequences
        self.moments += other.moments
        self.calls += other.calls
        self.verifier_seconds += other.verifier_seconds

    def to_dict(self) -> dict[str, Any]:
        """Return the tallies as JSON-able data (moments as exact float repr)."""
        return {
            "k": self.k,
            "accept_first": self.accept_first.tolist(),
            "accept_all": self.accept_all.tolist(),
            "sequences": self.sequences,
            "moments": [float(x) for x in self.moments],
            "calls": self.calls,
            "verifier_seconds": self.verifier_seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundStats:
        """Rebuild tallies written by :meth:`to_dict`."""
        out = cls(int(data["k"]))
        out.accept_first[:] = data["accept_first"]
        out.accept_all[:] = data["accept_all"]
        out.sequences = int(data["sequences"])
        out.moments[:] = data["moments"]
        out.calls = int(data["calls"])
        out.verifier_seconds = float(data["verifier_seconds"])
        return out


#: How many mismatching sequences a failed check keeps for the report.
EXAMPLES = 5


class GreedyMatch:
    """Sink comparing every finished sequence with greedy decoding of the target."""

    def __init__(self, target: TabularChain, length: int):
        self.target = target
        self.expected, self.states = greedy_path(target, length)
        self.sequences = 0
        self.mismatched = 0
        self.first_diff = np.zeros(length, dtype=np.int64)  # histogram of the first differing position
        self.examples: list[list[int]] = []

    def observe(self, sequences: np.ndarray) -> None:
        """Count sequences that differ from the greedy one; keep a few of them."""
        diff = sequences != self.expected[None, :]
        bad = diff.any(axis=1)
        self.sequences += sequences.shape[0]
        if bad.any():
            self.mismatched += int(bad.sum())
            self.first_diff += np.bincount(np.argmax(diff[bad], axis=1), minlength=self.expected.size)
            for row in sequences[bad][: EXAMPLES - len(self.examples)]:
                self.examples.append([int(x) for x in row])
