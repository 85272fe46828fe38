"""Per-prefix (chain-rule) tests for vocabularies too large for the joint test.

The joint law of L tokens factorises over the prefix tree: G^2 is additive over nodes and the
node statistics are independent under the null given the node counts (notes/theory.md). At
every prefix whose *expected* count ``N P(prefix)`` is large enough, the next-token counts are
tested (the run's statistic: Pearson's X^2 by default, G^2 with ``--method g``) against the
exact conditional law ``p(. | prefix)``, cells merged by expected count
(:func:`specaudit.stats.gof.merge_groups`); the node p-values are combined with Holm. Which nodes
are tested depends on the chain and N only, never on what was observed.

The counts are additive (:meth:`PrefixCounts.merge`), so shards can be merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specaudit.chains.lazy import mix64
from specaudit.results import Category, CheckResult, Status
from specaudit.stats import gof as stats

#: A node is tested when its expected count reaches this (at least two groups of five).
NODE_MIN = 4 * stats.MIN_EXPECTED
#: At most this many nodes are tested (largest expected counts first, breadth first).
MAX_NODES = 2000


def prefix_keys(sequences: np.ndarray) -> np.ndarray:
    """Return uint64 hashes [n, L] of every prefix: column t hashes tokens 0..t-1 (column 0: empty)."""
    n, length = sequences.shape
    keys = np.empty((n, length), dtype=np.uint64)
    h = np.zeros(n, dtype=np.uint64)
    for t in range(length):
        keys[:, t] = h
        with np.errstate(over="ignore"):
            h = mix64(h * np.uint64(0x100000001B3) + sequences[:, t].astype(np.uint64) + np.uint64(1))
    return keys


class PrefixCounts:
    """Sparse, additive counts of (position, prefix, next token) over observed sequences."""

    def __init__(self, length: int):
        self.length = length
        self.n = 0
        self._chunks: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in range(length)]

    def observe(self, sequences: np.ndarray) -> None:
        """Add finished sequences [n, L]."""
        keys = prefix_keys(sequences)
        self.n += sequences.shape[0]
        for t in range(self.length):
            self._chunks[t].append((keys[:, t].copy(), sequences[:, t].astype(np.int64), np.ones(len(sequences), dtype=np.int64)))
            if len(self._chunks[t]) > 64:
                self._chunks[t] = [self.level(t)]

    def level(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return (prefix hash, token, count) at position ``t``, sorted by hash then token."""
        parts = self._chunks[t]
        if not parts:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        h = np.concatenate([p[0] for p in parts])
        x = np.concatenate([p[1] for p in parts])
        c = np.concatenate([p[2] for p in parts])
        order = np.lexsort((x, h))
        h, x, c = h[order], x[order], c[order]
        new = np.ones(h.size, dtype=bool)
        new[1:] = (h[1:] != h[:-1]) | (x[1:] != x[:-1])
        starts = np.flatnonzero(new)
        out = (h[starts], x[starts], np.add.reduceat(c, starts))
        self._chunks[t] = [out]
        return out

    def node_counts(self, t: int, prefix_hash: int, vocab: int) -> np.ndarray:
        """Return the next-token counts [V] after the prefix with hash ``prefix_hash`` at position ``t``."""
        h, x, c = self.level(t)
        lo, hi = np.searchsorted(h, np.uint64(prefix_hash), "left"), np.searchsorted(h, np.uint64(prefix_hash), "right")
        return np.bincount(x[lo:hi], weights=c[lo:hi], minlength=vocab).astype(np.int64)

    def merge(self, other: PrefixCounts) -> None:
        """Add another shard's counts."""
        self.n += other.n
        for t in range(self.length):
            self._chunks[t].append(other.level(t))

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-able counts."""
        levels = [self.level(t) for t in range(self.length)]
        return {"n": self.n, "levels": [[h.tolist(), x.tolist(), c.tolist()] for h, x, c in levels]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrefixCounts:
        """Rebuild counts written by :meth:`to_dict`."""
        out = cls(len(data["levels"]))
        out.n = int(data["n"])
        for t, (h, x, c) in enumerate(data["levels"]):
            out._chunks[t] = [(np.asarray(h, np.uint64), np.asarray(x, np.int64), np.asarray(c, np.int64))]
        return out


@dataclass(frozen=True)
class NodeTest:
    """One prefix node's test (X^2 or G^2)."""

    position: int
    prefix: tuple[int, ...]
    statistic: float
    pvalue: float
    df: int
    n: int
    impossible: int
    token: int  # the token with the largest standardised residual
    observed: int
    expected: float


def _node_test(counts: np.ndarray, probs: np.ndarray, planned: float, method: str) -> tuple[float, float, int, int, int, int, float]:
    """X^2 (or G^2) of ``counts`` against ``probs``, groups fixed by the planned expected counts."""
    n = int(counts.sum())
    group = stats.merge_groups(probs * planned)
    impossible = int(counts[group < 0].sum())
    expected = probs * n
    with np.errstate(divide="ignore", invalid="ignore"):
        resid = np.where(expected > 0, (counts - expected) / np.sqrt(expected), np.where(counts > 0, np.inf, 0.0))
    # localise to a token with a testable expectation when there is one (tiny cells are pooled)
    big = probs * planned >= stats.MIN_EXPECTED
    worst = int(np.argmax(np.where(big, np.abs(resid), -1.0) if big.any() else np.abs(resid)))
    n_groups = int(group.max()) + 1 if group.size and group.max() >= 0 else 0
    if impossible:
        return float("inf"), 0.0, max(n_groups - 1, 0), impossible, worst, int(counts[worst]), float(expected[worst])
    if n_groups < 2:
        return 0.0, 1.0, 0, 0, worst, int(counts[worst]), float(expected[worst])
    if n == 0:  # a planned node nobody reached: stays in the family (membership is fixed by the plan)
        return 0.0, 1.0, n_groups - 1, 0, worst, 0, 0.0
    ok = group >= 0
    obs = np.bincount(group[ok], weights=counts[ok], minlength=n_groups)
    exp = np.bincount(group[ok], weights=probs[ok], minlength=n_groups) * n
    statistic, pvalue = stats.divergence(obs, exp, method)
    return statistic, pvalue, n_groups - 1, 0, worst, int(counts[worst]), float(expected[worst])


@dataclass(frozen=True, eq=False)
class PlannedNode:
    """A prefix node the per-prefix check tests, chosen from the chain and N alone."""

    position: int
    prefix: tuple[int, ...]
    state: Any
    hash: int
    planned: float  # N P(prefix)
    probs: np.ndarray  # p(. | prefix)

    def grouping_total(self) -> float:
        """Return the total the node's groups are merged for: a lower bound of its count under the null.

        Under the null the node's count is Binomial-like around ``planned`` with sd <= sqrt(planned);
        merging for ``planned - 4 sd`` (at least half the plan) keeps every group near its minimum
        expected count even when the observed total falls short of the plan.
        """
        return max(self.planned - 4.0 * np.sqrt(self.planned), 0.5 * self.planned)


def plan_nodes(target: Any, n_total: int, length: int) -> list[PlannedNode]:
    """Return the nodes to test: expected count ``N P(prefix)`` >= NODE_MIN, breadth first, at most MAX_NODES.

    The plan depends on the chain and N only, never on what was observed (pre-registered), so the
    family of node tests is fixed before sampling.
    """
    frontier: list[tuple[tuple[int, ...], Any, int, float]] = [((), target.start_states(1), 0, float(n_total))]
    nodes: list[PlannedNode] = []
    for t in range(length):
        nxt: list[tuple[tuple[int, ...], Any, int, float]] = []
        for prefix, state, h, planned in frontier:
            if len(nodes) >= MAX_NODES:
                break
            probs = np.asarray(target.probs(state)[0], dtype=np.float64)
            nodes.append(PlannedNode(t, prefix, state, h, planned, probs))
            if t + 1 < length:
                for x in np.flatnonzero(probs * planned >= NODE_MIN):
                    nxt.append(((*prefix, int(x)), target.advance(state, np.array([x])), 0, planned * float(probs[x])))
        # hashes of the next level's prefixes, computed in one go
        if nxt:
            seqs = np.array([[*p, 0] for p, *_ in nxt], dtype=np.int64)
            hashes = prefix_keys(seqs)[:, -1]
            nxt = [(p, s, int(hh), e) for (p, s, _, e), hh in zip(nxt, hashes)]
            nxt.sort(key=lambda item: -item[3])
        frontier = nxt
    return nodes


def prefix_tests(target: Any, counts: PrefixCounts, length: int, method: str = "g") -> list[NodeTest]:
    """Test every planned prefix node (`plan_nodes`), breadth first.

    Parameters
    ----------
    target : chain
        The target chain (``probs``, ``advance``, ``start_states``): exact conditional laws.
    counts : PrefixCounts
        Observed counts of N sequences.
    length : int
        Sequence length L.
    method : {"g", "pearson"}
        Node statistic; the run's ``--method`` (Pearson by default; G^2 is additive over the tree).

    Returns
    -------
    list of NodeTest
        One per tested node, in breadth-first order.

    Notes
    -----
    Nodes are chosen from ``N P(prefix)`` alone (pre-registered); each node's groups are
    merged for a lower bound of its count under the null (`PlannedNode.grouping_total`); the
    node is tested conditionally on its observed total, its p-value from the statistic's null
    law at the observed expected counts (`specaudit.stats.gof.null_law`).
    """
    tests: list[NodeTest] = []
    vocab = int(target.vocab)
    for node in plan_nodes(target, counts.n, length):
        observed = counts.node_counts(node.position, node.hash, vocab)
        stat, pv, df, imp, tok, obs, exp = _node_test(observed, node.probs, node.grouping_total(), method)
        tests.append(NodeTest(node.position, node.prefix, stat, pv, df, int(observed.sum()), imp, tok, obs, exp))
    return tests


def per_prefix(m: Any) -> CheckResult | None:
    """Chain-rule check: X^2 (or G^2) tests at every planned prefix node, combined with Holm."""
    counts = m.extra.get("prefix") if hasattr(m, "extra") else None
    if counts is None or counts.n == 0:
        return None
    tests = prefix_tests(m.target, counts, m.scenario.length, "g" if m.method == "g" else "pearson")
    tested = [t for t in tests if t.df > 0 or t.impossible]
    if not tested:
        return None
    pv = np.array([t.pvalue for t in tested])
    adj = stats.holm(pv)
    worst = tested[int(np.argmin(pv))]
    combined = float(np.min(adj))  # Holm's smallest adjusted p-value = m * min p
    where = f"position {worst.position} after prefix {list(worst.prefix)}"
    summary = (
        f"{len(tested)} prefix nodes, Holm-combined p = {combined:.3g}; worst: {where}: token {worst.token} "
        f"observed {worst.observed}, expected {worst.expected:.0f}"
    )
    if worst.impossible:
        summary = f"{where}: {worst.impossible} tokens of target probability 0 emitted; " + summary
    data = {
        "nodes": len(tested),
        "worst": {"position": worst.position, "prefix": list(worst.prefix), "token": worst.token,
                  "observed": worst.observed, "expected": worst.expected, "statistic": worst.statistic,
                  "pvalue": worst.pvalue, "df": worst.df, "n": worst.n},
        "failing_nodes": [
            {"position": t.position, "prefix": list(t.prefix), "token": t.token, "observed": t.observed,
             "expected": t.expected, "adjusted_pvalue": float(a)}
            for t, a in sorted(zip(tested, adj), key=lambda z: z[1])[:8]
        ],
    }
    return CheckResult("per-prefix", Category.DISTRIBUTION, Status.PENDING, summary, worst.statistic, combined, worst.df, data=data)
