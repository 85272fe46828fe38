"""Blocks: a scenario's N sequences as fixed-size, independently seeded blocks.

Block ``b`` of a scenario measured with seed ``s`` holds ``min(BLOCK, N - b BLOCK)`` sequences
and draws everything (drafts, draft counts, padding, the verifier's ``rng``, the PIT's
randomisation) from ``SeedSequence(s, spawn_key=(b,))``. What a block measures therefore
depends on (scenario, s, b) alone, never on which process, shard, machine or order ran it, and
its measurements are additive (:class:`specaudit.engine.bench.Tally`). Merged in block order they
are the scenario's measurements, so one mechanism gives:

- ``--jobs N``: blocks of every scenario run in N processes (:mod:`specaudit.engine.executors`), with
  results identical to ``--jobs 1``;
- ``--shard i/n`` + ``specaudit merge``: a shard runs blocks ``b = i mod n`` and writes its
  tallies; the merge adds them and checks the sums (:mod:`specaudit.engine.merge`);
- sequential early stop: looks at block boundaries (:mod:`specaudit.stats.sequential`);
- simulated mutant laws (:mod:`specaudit.analysis.mutant_laws`): :func:`run_blocks` runs a
  zoo mutant over a scenario's blocks exactly as a run measures it, without the engine.

The block size is a constant, not a function of jobs or shards. 15,000 sequences: the doubling
looks fall on 15k, 30k, 60k, ... (the 30k bar of the parallel-run design is a look), a 300k
scenario has 20 blocks to spread over workers, and a block is several batches long, so the
drain at the end of a block (its last rows finishing in small calls) costs under 10% of the
verify calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specaudit.contract import logits
from specaudit.simulate.chain import DEFAULT_MAX_MEMORY, Plan, simulate
from specaudit.simulate.tables import warm
from specaudit.simulate.tallies import RoundStats, Sink

__all__ = ["BLOCK", "block_seeds", "block_sizes", "run_blocks"]

#: Sequences per block (the last block of a scenario holds the remainder).
BLOCK = 15_000


def block_sizes(samples: int) -> list[int]:
    """Return the sizes of a scenario's blocks: BLOCK each, the last one the remainder."""
    full, rest = divmod(int(samples), BLOCK)
    return [BLOCK] * full + ([rest] if rest else [])


def block_seeds(seed: int, block: int) -> tuple[np.random.SeedSequence, ...]:
    """Return the (harness, verifier, PIT) seed sequences of block ``block`` of a scenario seeded ``seed``."""
    return tuple(np.random.SeedSequence(seed, spawn_key=(block,)).spawn(3))


def run_blocks(
    verify: Callable[..., Any],
    spec: Any,
    seed: int,
    sinks: Sequence[Sink],
    *,
    contract: str = "probs",
    max_memory: int = DEFAULT_MAX_MEMORY,
) -> RoundStats:
    """Run ``verify`` over every block of chain scenario ``spec`` in order, into ``sinks``.

    Each block is simulated with its own seeds (:func:`block_seeds`) and the round tallies are
    merged in block order, so the sinks and the returned tallies hold what a run of the
    scenario with seed ``seed`` measures (``specaudit.engine.bench.Bench.measure``). The sinks
    observe every block in turn: they must be additive and draw no randomness of their own
    (e.g. :class:`specaudit.simulate.tallies.JointCounts`).
    """
    target, draft = spec.chains()
    verify, target, draft = logits.prepare(verify, contract, target, draft, spec.draft_map())
    k = len(spec.draft_law) - 1
    warm(target, draft, k)
    total = RoundStats(k)
    for block, n in enumerate(block_sizes(spec.samples)):
        harness, verifier, _ = block_seeds(seed, block)
        plan = Plan(spec.length, n, spec.batch, spec.draft_law)
        total.merge(simulate(verify, target, draft, plan, np.random.default_rng(harness),
                             np.random.default_rng(verifier), sinks, None, max_memory=max_memory))
    return total
