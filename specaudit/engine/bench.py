"""Blocks: a scenario's N sequences as fixed-size, independently seeded blocks (issue 7).

Block ``b`` of a scenario measured with seed ``s`` holds ``min(BLOCK, N - b BLOCK)`` sequences
and draws everything (drafts, draft counts, padding, the verifier's ``rng``, the PIT's
randomisation) from ``SeedSequence(s, spawn_key=(b,))``. What a block measures therefore
depends on (scenario, s, b) alone, never on which process, shard, machine or order ran it, and
its measurements are additive (:class:`Tally`). Merged in block order they are the scenario's
measurements, so one mechanism gives:

- ``--jobs N``: blocks of every scenario run in N processes (:mod:`specaudit.engine.executors`), with
  results identical to ``--jobs 1``;
- ``--shard i/n`` + ``specaudit merge``: a shard runs blocks ``b = i mod n`` and writes its
  tallies; the merge adds them and checks the sums (:mod:`specaudit.engine.merge`);
- sequential early stop: looks at block boundaries (:mod:`specaudit.stats.sequential`).

The block size is a constant, not a function of jobs or shards. 15,000 sequences: the doubling
looks fall on 15k, 30k, 60k, ... (the issue's 30k bar is a look), a 300k scenario has 20
blocks to spread over workers, and a block is several batches long, so the drain at the end of
a block (its last rows finishing in small calls) costs under 10% of the verify calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specaudit.simulate.chain import DEFAULT_MAX_MEMORY, JointCounts, Plan, RoundStats, simulate

#: Sequences per block (the last block of a scenario holds the remainder).
BLOCK = 15_000


def block_sizes(samples: int) -> list[int]:
    """Return the sizes of a scenario's blocks: BLOCK each, the last one the remainder."""
    full, rest = divmod(int(samples), BLOCK)
    return [BLOCK] * full + ([rest] if rest else [])


def block_seeds(seed: int, block: int) -> tuple[np.random.SeedSequence, ...]:
    """Return the (harness, verifier, PIT) seed sequences of block ``block`` of a scenario seeded ``seed``."""
    return tuple(np.random.SeedSequence(seed, spawn_key=(block,)).spawn(3))


@dataclass
class Tally:
    """Additive measurements of some blocks of one scenario (a mutable accumulator, not a result)."""

    rounds: RoundStats
    joint: JointCounts | None = None
    greedy: Any = None  # specaudit.checks.greedy.GreedyMatch in greedy mode
    extra: dict[str, Any] = field(default_factory=dict)  # "prefix", "pit" for large V^L
    blocks: list[int] = field(default_factory=list)
    example_blocks: list[int] = field(default_factory=list)  # block of every greedy example
    seconds: float = 0.0  # wall time spent simulating the blocks (summed over processes)

    @property
    def sequences(self) -> int:
        """Return how many sequences the tally holds."""
        return self.rounds.sequences

    def merge(self, other: "Tally") -> None:
        """Add ``other`` (disjoint blocks of the same scenario); the sum is independent of the order."""
        overlap = set(self.blocks) & set(other.blocks)
        if overlap:
            raise ValueError(f"blocks {sorted(overlap)} counted twice")
        self.rounds.merge(other.rounds)
        if self.joint is not None:
            self.joint.merge(other.joint)
        if self.greedy is not None:
            g, o = self.greedy, other.greedy
            g.sequences += o.sequences
            g.mismatched += o.mismatched
            g.first_diff += o.first_diff
            # the first EXAMPLES mismatches in block order, whatever order the tallies come in
            pairs = sorted(zip(self.example_blocks + other.example_blocks, g.examples + o.examples), key=lambda z: z[0])
            keep = pairs[: _examples()]
            self.example_blocks, g.examples = [b for b, _ in keep], [e for _, e in keep]
        for key, sink in self.extra.items():
            sink.merge(other.extra[key])
        self.blocks = sorted(self.blocks + other.blocks)
        self.seconds += other.seconds

    def to_dict(self) -> dict[str, Any]:
        """Return the tallies as compact JSON-able data (what ``specaudit merge`` needs)."""
        out: dict[str, Any] = {"blocks": list(self.blocks), "seconds": self.seconds, "rounds": self.rounds.to_dict()}
        if self.joint is not None:
            out["joint"] = self.joint.to_dict()
        if self.greedy is not None:
            g = self.greedy
            out["greedy"] = {"sequences": g.sequences, "mismatched": g.mismatched, "first_diff": g.first_diff.tolist(),
                             "examples": g.examples, "example_blocks": list(self.example_blocks)}
        for key, sink in self.extra.items():
            out[key] = sink.to_dict()
        return out


def _examples() -> int:
    from specaudit.checks.greedy import EXAMPLES

    return EXAMPLES


class Bench:
    """One scenario prepared to run blocks: chains built and the verifier bound once per process.

    Parameters
    ----------
    verify : callable
        The verifier in ``contract`` (already guarded by the runner).
    spec : Scenario
        The scenario; ``spec.samples`` fixes the blocks.
    contract : {"probs", "logits"}
        How ``verify`` is called (chain scenarios).
    max_memory : int, optional
        Bytes the simulator's batch may use.
    """

    def __init__(self, verify: Callable[..., Any], spec: Any, contract: str = "probs", max_memory: int | None = None):
        from specaudit.checks import statistical as checks
        from specaudit.contract import logits

        self.spec = spec
        self.tree = getattr(spec, "algorithm", "chain") == "tree"
        if self.tree:  # draft trees: the tree contract (issue 9)
            self.target, self.draft = spec.chains()
        else:
            verify, self.target, self.draft = logits.prepare(verify, contract, *spec.chains())
        self.verify = verify
        self.max_memory = DEFAULT_MAX_MEMORY if max_memory is None else max_memory
        self.sizes = block_sizes(spec.samples)
        if not self.tree:  # tables built once here, inherited by forked workers instead of rebuilt in each
            from specaudit.simulate.chain import warm

            warm(self.target, self.draft, len(spec.draft_law) - 1)
        self.greedy = not self.tree and spec.mode == "greedy"
        self.joint = checks.wants_joint(spec) and not self.greedy

    @property
    def blocks(self) -> int:
        """Return the number of blocks."""
        return len(self.sizes)

    def empty(self, pit_rng: np.random.Generator | None = None) -> Tally:
        """Return a tally of no blocks (sinks ready to observe or to merge into)."""
        from specaudit.checks.greedy import GreedyMatch

        spec = self.spec
        tally = Tally(RoundStats(self._depth()))
        if self.greedy:
            tally.greedy = GreedyMatch(self.target, spec.length)
        elif self.joint:
            tally.joint = JointCounts(spec.vocab, spec.length)
        else:  # too large to enumerate: chain-rule and PIT tests (issue 7)
            from specaudit.checks.pit import PitCounts
            from specaudit.checks.prefix import PrefixCounts

            tally.extra = {"prefix": PrefixCounts(spec.length), "pit": PitCounts(self.target, spec.length, pit_rng)}
        return tally

    def _depth(self) -> int:
        if self.tree:
            return len(self.spec.tree.widths(self.spec.k))
        return len(self.spec.draft_law) - 1

    def run(self, seed: int, block: int, progress: Callable[[int, int], None] | None = None) -> Tally:
        """Simulate block ``block`` of the scenario seeded ``seed`` and return its tally."""
        t0 = time.perf_counter()
        harness, verifier, pit = block_seeds(seed, block)
        tally = self.empty(np.random.default_rng(pit))
        sinks = [s for s in (tally.joint, tally.greedy, *tally.extra.values()) if s is not None]
        spec, n = self.spec, self.sizes[block]
        if self.tree:
            from specaudit.simulate.tree import TreePlan, simulate_tree

            shape = spec.tree
            plan = TreePlan(spec.length, n, spec.batch, tuple(shape.widths(spec.k)), shape.children, shape.ragged)
            rounds = simulate_tree(self.verify, self.target, self.draft, plan, np.random.default_rng(harness),
                                   np.random.default_rng(verifier), sinks, progress)
        else:
            plan = Plan(spec.length, n, spec.batch, spec.draft_law)
            rounds = simulate(self.verify, self.target, self.draft, plan, np.random.default_rng(harness),
                              np.random.default_rng(verifier), sinks, progress, max_memory=self.max_memory)
        tally.rounds = rounds
        tally.blocks = [block]
        tally.seconds = time.perf_counter() - t0
        if tally.greedy is not None:
            tally.example_blocks = [block] * len(tally.greedy.examples)
        return tally

    def tally(self, data: dict[str, Any]) -> Tally:
        """Rebuild a tally written by :meth:`Tally.to_dict` (a shard's JSON)."""
        out = self.empty()
        out.blocks = [int(b) for b in data["blocks"]]
        out.seconds = float(data.get("seconds", 0.0))
        out.rounds = RoundStats.from_dict(data["rounds"])
        if out.joint is not None:
            out.joint.load(data["joint"])
        if out.greedy is not None:
            g, d = out.greedy, data["greedy"]
            g.sequences, g.mismatched = int(d["sequences"]), int(d["mismatched"])
            g.first_diff[:] = d["first_diff"]
            g.examples = [list(map(int, e)) for e in d["examples"]]
            out.example_blocks = [int(b) for b in d["example_blocks"]]
        if "prefix" in out.extra:
            from specaudit.checks.prefix import PrefixCounts

            out.extra["prefix"] = PrefixCounts.from_dict(data["prefix"])
            out.extra["pit"].load(data["pit"])
        return out

    def measured(self, tally: Tally, method: str = "pearson") -> Any:
        """Return the checks' view (:class:`specaudit.checks.statistical.Measured`) of a tally."""
        from specaudit.checks import statistical as checks

        target = self.target
        if self.greedy:  # temperature 0: the argmax chain is the exact reference (specaudit.checks.greedy)
            from specaudit.chains.tabular import one_hot_of

            target = one_hot_of(target)
        return checks.Measured(self.spec, target, self.draft, tally.rounds, tally.joint, method,
                               greedy=tally.greedy, extra=tally.extra)

    def measure(self, seed: int, blocks: Sequence[int] | None = None, progress: Callable[[int, int], None] | None = None) -> Tally:
        """Run ``blocks`` (default: all) in order in this process and return their merged tally."""
        total = self.empty()
        todo = range(self.blocks) if blocks is None else blocks
        planned = sum(self.sizes[b] for b in todo)
        for b in todo:
            base = total.sequences
            tick = None if progress is None else (lambda done, _n, base=base: progress(base + done, planned))
            total.merge(self.run(seed, b, tick))
        return total
