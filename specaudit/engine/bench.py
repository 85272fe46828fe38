"""Bench: one scenario prepared to run its blocks, and the additive Tally its blocks fill.

A scenario's N sequences are fixed-size, independently seeded blocks (the block scheme and why:
:mod:`specaudit.simulate.blocks`). A :class:`Bench` builds the scenario's chains and binds the
verifier once per process, then simulates any block on demand (chain or draft-tree simulator)
into a :class:`Tally`: round statistics plus the sinks the scenario's checks need (joint counts,
greedy matches, or prefix and PIT counts for large V^L). Tallies of disjoint blocks add up in
any order, and :meth:`Bench.measured` turns the sum into what the checks read. This is the unit
that :mod:`specaudit.engine.executors` schedules over processes or Ray, that a shard writes to
JSON (:meth:`Tally.to_dict`) and that :mod:`specaudit.engine.merge` reads back (:meth:`Bench.tally`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specaudit.chains.tabular import one_hot_of
from specaudit.checks import seeded, serving
from specaudit.checks import statistical as checks
from specaudit.checks.pit import PitCounts
from specaudit.checks.prefix import PrefixCounts
from specaudit.contract import logits, tree
from specaudit.contract.chain import SeededRequests, takes_row_generators
from specaudit.contract.tensors import TensorCall
from specaudit.simulate.blocks import block_seeds, block_sizes
from specaudit.simulate.chain import DEFAULT_MAX_MEMORY, Plan, simulate
from specaudit.simulate.tables import warm
from specaudit.simulate.tallies import EXAMPLES, GreedyMatch, JointCounts, RoundStats
from specaudit.simulate.tree import TreePlan, simulate_tree

#: The engine's one progress shape: ``progress(scenario, done, total)`` sequences, after every batch
#: (in this process) or block (in several) of finished sequences.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Ticker:
    """A block's finished batches told to ``progress``: ``ticker(done, total)`` reports ``base + done`` of ``planned``.

    Made by whoever schedules the block and called from the simulation below it: the observer is
    the reporter's, so nothing calls back into the engine module that scheduled the block.
    """

    progress: Progress
    name: str
    base: int  # sequences of the scenario done before this block
    planned: int

    def __call__(self, done: int, _total: int) -> None:
        self.progress(self.name, self.base + done, self.planned)


@dataclass
class Tally:
    """Additive measurements of some blocks of one scenario (a mutable accumulator, not a result)."""

    rounds: RoundStats
    joint: JointCounts | None = None
    greedy: GreedyMatch | None = None  # greedy mode
    extra: dict[str, Any] = field(default_factory=dict)  # "prefix", "pit" for large V^L
    blocks: list[int] = field(default_factory=list)
    example_blocks: list[int] = field(default_factory=list)  # block of every greedy example
    seconds: float = 0.0  # wall time spent simulating the blocks (summed over processes)

    @property
    def sequences(self) -> int:
        """Return how many sequences the tally holds."""
        return self.rounds.sequences

    def merge(self, other: Tally) -> None:
        """Add ``other`` (disjoint blocks of the same scenario); the sum is independent of the order."""
        overlap = set(self.blocks) & set(other.blocks)
        if overlap:
            raise ValueError(f"blocks {sorted(overlap)} counted twice")
        self.rounds.merge(other.rounds)
        if self.joint is not None:
            assert other.joint is not None  # tallies of one scenario hold the same sinks
            self.joint.merge(other.joint)
        if self.greedy is not None:
            g, o = self.greedy, other.greedy
            assert o is not None
            g.sequences += o.sequences
            g.mismatched += o.mismatched
            g.first_diff += o.first_diff
            # the first EXAMPLES mismatches in block order, whatever order the tallies come in
            pairs = sorted(zip(self.example_blocks + other.example_blocks, g.examples + o.examples), key=lambda z: z[0])
            keep = pairs[:EXAMPLES]
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


class Bench:
    """One scenario prepared to run blocks: chains built and the verifier bound once per process.

    Parameters
    ----------
    verify : callable
        The verifier in ``contract`` (already guarded by the engine).
    spec : Scenario
        The scenario; ``spec.samples`` fixes the blocks.
    contract : {"probs", "logits"}
        How ``verify`` is called (chain scenarios).
    max_memory : int, optional
        Bytes the simulator's batch may use.
    tensors : TensorCall, optional
        The verifier's tensor form: simulate on its device (:mod:`specaudit.simulate.device`).
    max_device_memory : int, optional
        Bytes the batch may use on a CUDA device (at most what is free there; None: a share of it).
    """

    def __init__(self, verify: Callable[..., Any], spec: Any, contract: str = "probs", max_memory: int | None = None,
                 tensors: TensorCall | None = None, max_device_memory: int | None = None):
        self.spec = spec
        self.tree = getattr(spec, "algorithm", "chain") == "tree"
        if self.tree:  # draft trees: the tree contract (specaudit.contract.tree), either payload
            self.target, self.draft = spec.chains()
            verify = tree.prepare(verify, contract)
        else:
            if seeded.applies(spec) and takes_row_generators(verify):  # per-request generators (checks.seeded)
                verify = SeededRequests(verify)
            target, draft = spec.chains()
            verify, self.target, self.draft = logits.prepare(verify, contract, target, draft, spec.draft_map())
        self.verify = verify
        self.max_memory = DEFAULT_MAX_MEMORY if max_memory is None else max_memory
        self.sizes = block_sizes(spec.samples)
        if not self.tree:  # tables built once here, inherited by forked workers instead of rebuilt in each
            warm(self.target, self.draft, len(spec.draft_law) - 1)
        self.greedy = not self.tree and spec.mode == "greedy"
        self.device = None
        if tensors is not None:  # torch only when asked for (specaudit.engine.device refuses a batch mix)
            from specaudit.simulate.device import DevicePath

            self.device = DevicePath(tensors, self.target, self.draft, max_device_memory)
        self.joint = checks.wants_joint(spec) and not self.greedy

    @property
    def blocks(self) -> int:
        """Return the number of blocks."""
        return len(self.sizes)

    def empty(self, pit_rng: np.random.Generator | None = None) -> Tally:
        """Return a tally of no blocks (sinks ready to observe or to merge into)."""
        spec = self.spec
        tally = Tally(RoundStats(self._depth()))
        if self.greedy:
            tally.greedy = GreedyMatch(self.target, spec.length)
        elif self.joint:
            # a mix, even of one class: (class, seq) rows
            tally.joint = JointCounts(spec.vocab, spec.length, len(spec.mix or ()) or 1, mixed=spec.mix is not None)
            greedy_rows = serving.greedy_rows_sink(self.target, spec.length)  # a mix's temperature-0 classes
            if greedy_rows is not None:
                tally.extra = {"greedy-rows": greedy_rows}
        else:  # too large to enumerate: chain-rule and PIT tests
            # no generator: a tally to merge into or load (its PIT draws come with the blocks)
            pit = PitCounts(self.target, spec.length, pit_rng)  # type: ignore[arg-type]
            tally.extra = {"prefix": PrefixCounts(spec.length), "pit": pit}
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
            shape = spec.tree
            tree_plan = TreePlan(spec.length, n, spec.batch, tuple(shape.widths(spec.k)), shape.children, shape.ragged)
            rounds = simulate_tree(self.verify, self.target, self.draft, tree_plan, np.random.default_rng(harness),
                                   np.random.default_rng(verifier), sinks, progress)
        elif self.device is not None:
            plan = Plan(spec.length, n, spec.batch, spec.draft_law)
            rounds = self.device.simulate(plan, harness, np.random.default_rng(verifier), sinks, progress, self.max_memory)
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
        if "greedy-rows" in out.extra:
            out.extra["greedy-rows"].load(data["greedy-rows"])
        if "prefix" in out.extra:
            out.extra["prefix"] = PrefixCounts.from_dict(data["prefix"])
            out.extra["pit"].load(data["pit"])
        return out

    def measured(self, tally: Tally, method: str = "pearson") -> checks.Measured:
        """Return the checks' view (:class:`specaudit.checks.statistical.Measured`) of a tally."""
        target = self.target
        if self.greedy:  # temperature 0: the argmax chain is the exact reference (specaudit.checks.greedy)
            target = one_hot_of(target)
        return checks.Measured(self.spec, target, self.draft, tally.rounds, tally.joint, method,
                               greedy=tally.greedy, extra=tally.extra)

    def measure(self, seed: int, blocks: Sequence[int] | None = None, progress: Progress | None = None) -> Tally:
        """Run ``blocks`` (default: all) in order in this process and return their merged tally."""
        total = self.empty()
        todo = range(self.blocks) if blocks is None else blocks
        planned = sum(self.sizes[b] for b in todo)
        name = self.spec.name
        for b in todo:
            tick = None if progress is None else Ticker(progress, name, total.sequences, planned)
            total.merge(self.run(seed, b, tick))
        return total
