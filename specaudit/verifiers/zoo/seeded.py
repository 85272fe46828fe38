"""Seeding mutants: the reference chain rule with per-request generators used wrongly.

Each is :func:`specaudit.verifiers.reference.verify` with another way of drawing the round's
uniforms (its ``draw`` switch). Given one Generator, as on every scenario but those tagged
``seeded``, each draws exactly as the reference and is lossless; given per-request generators
(:class:`specaudit.contract.chain.RowGenerators`, scenario ``serving-seeded``) the law still holds,
and only the ``seeded-rows`` probe (:mod:`specaudit.checks.seeded`) sees the bug: a seeded request's
tokens change with the batch, or an unseeded row's with the seeded rows' seeds. Registered as
``boundary`` mutants (lossless under ordinary randomness; caught by a probe, not a law check).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specaudit.contract.chain import RowGenerators, chain_inputs, draw_uniforms, row_generators
from specaudit.verifiers import reference
from specaudit.verifiers.zoo import mutant as zoo

__all__ = ["MUTANTS", "seeded_rows_shared_stream", "unseeded_reads_seeded", "zero_draft_advances_generator"]


def _shared_stream(rng: Any, num_draft: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw every row, seeded or not, from the shared generator."""
    return draw_uniforms(rng.shared if isinstance(rng, RowGenerators) else rng, num_draft, k)


def _stale_buffer(rng: Any, num_draft: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Fill only the seeded rows (k + 1 draws each); unseeded rows read the last seeded row's draws."""
    if not isinstance(rng, RowGenerators) or not rng.seeded:
        return draw_uniforms(rng, num_draft, k)
    buf = np.empty((num_draft.shape[0], k + 1))
    for b, gen in rng.seeded.items():
        buf[b] = gen.random(k + 1)
    unseeded = np.setdiff1d(np.arange(num_draft.shape[0]), list(rng.seeded))
    buf[unseeded] = buf[max(rng.seeded)]  # what the re-allocated buffer holds there
    return buf[:, :k], buf[:, k]


@zoo.register("boundary", seeded=True, mirrors="alibaba/rtp-llm PR #1318 review (draft sampling ignored the per-request random_seed and "
                          "drew from the global generator: seeded requests no longer reproducible)")
@row_generators
@chain_inputs
def seeded_rows_shared_stream(draft, q, p, num_draft, rng):
    """Draw seeded rows from the batch-wide shared stream, not their own generators (tokens change with the batch)."""
    return reference.verify(draft, q, p, num_draft, rng, draw=_shared_stream)


@zoo.register("boundary", seeded=True, mirrors="vllm-ascend #13608, fixed by PR #13755 (sample_recovered_tokens drew a vocabulary of "
                          "exponentials from a zero-draft request's generator, then discarded it with torch.where)")
@row_generators
@chain_inputs
def zero_draft_advances_generator(draft, q, p, num_draft, rng):
    """Whenever some row has drafts, draw V exponentials from every seeded row's generator, zero-draft rows too."""
    vocab = p.shape[2]

    def draw(rng: Any, num_draft: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(rng, RowGenerators) and (num_draft > 0).any():  # the rejection step runs for this batch
            for gen in rng.seeded.values():  # recovered-token noise; a zero-draft row throws its draw away
                gen.standard_exponential(vocab)
        return draw_uniforms(rng, num_draft, k)

    return reference.verify(draft, q, p, num_draft, rng, draw=draw)


@zoo.register("boundary", seeded=True, mirrors="vllm-ascend PR #4908 review (q = torch.empty_like(probs) re-allocated after the global "
                          "exponential_ fill when some requests are seeded: unseeded rows read uninitialised memory)")
@row_generators
@chain_inputs
def unseeded_reads_seeded(draft, q, p, num_draft, rng):
    """With seeded rows in the batch, skip the shared fill: unseeded rows read the seeded rows' draws."""
    return reference.verify(draft, q, p, num_draft, rng, draw=_stale_buffer)


#: The seeding mutants by name (their entries of :data:`specaudit.verifiers.zoo.MUTANTS`).
MUTANTS: dict[str, zoo.Mutant] = zoo.family("seeded")
