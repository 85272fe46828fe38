"""Per-request seeds: a seeded request's tokens depend on its own rows and its own seed only.

Engines give each seeded request its own generator and let the unseeded ones share one; the
verifier is handed both (:class:`specaudit.contract.chain.RowGenerators`, declared with
:func:`specaudit.contract.chain.row_generators`). Real samplers broke that contract in three ways:
seeded requests drawing from a batch-wide stream (alibaba/rtp-llm PR #1318 review: draft sampling
ignored the per-request seed and used the global generator), a request's generator advanced in a
round where it had no drafts, but only when other rows had some (vllm-ascend #13608: "later
rejection sampling depend[s] on scheduling and batch composition"), and unseeded rows reading a
buffer that only the seeded rows' generators filled (vllm-ascend PR #4908 review).

The probe
---------
``seeded-rows`` (contract) runs on every scenario tagged :data:`TAG`: a simulated one (the shipped
``serving-seeded``) after its blocks, whose simulation already handed the verifier per-request
generators (:class:`specaudit.contract.chain.SeededRequests`), so the statistical checks test the
law under seeding as usual; an exact-mode one after its exact probes, with no simulation. Three seeded *requests* of :data:`STEPS` verifier
calls each (num_draft 0 then K, K then 0, and random; p and q random laws of full support, so
that their tokens depend on their uniforms however peaked the scenario's rows are) are run
alone, one request per call, twice with different shared generators, and then inside batches of other compositions: together,
after rows with drafts, beside zero-draft rows, reversed among ragged rows, among unseeded rows,
in a batch of the probes' size (64 rows below large vocabularies) most of whose rows are seeded;
each batch with a shared generator of its own, its other rows half seeded. Must hold, exactly:

1. each seeded request emits the same tokens at every step as alone, whatever the batch, its
   position in it, the shared generator or the other rows' drafts (zero-draft rows included);
2. its generator's state after the last step is the one it has alone: it drew the same amount,
   so its later tokens are the same too (vllm-ascend #13608 shows here first);
3. unseeded rows are not affected by seeded ones: with the same shared generator, changing only
   the seeded rows' seeds (:data:`RESEEDS` times) leaves every unseeded row's tokens and the shared
   generator's state unchanged.

*Not applicable* when the verifier does not declare per-request generators, when no seeded
generator was drawn from (a deterministic verifier, e.g. greedy: seeds change nothing), for a
contract or algorithm the probes do not speak (tree scenarios).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specaudit.chains.sampling import sample_rows
from specaudit.checks.probes import ExactOutcome, Inputs, Prober, _canonical, _not_probed, probe_all, result_of, skipped
from specaudit.contract.chain import RowGenerators, takes_row_generators
from specaudit.results import Category, CheckResult

__all__ = ["NAME", "SEEDED_CHECKS", "STEPS", "TAG", "applies", "run_seeded", "seeded_rows"]

#: The check's result name.
NAME = "seeded-rows"
#: The tag a simulated scenario carries to run with per-request generators and this probe.
TAG = "seeded"
#: Verifier calls per request (its generator carries over from one to the next).
STEPS = 2
#: Other seed sets the seeded rows get, shared generator unchanged, to see whether unseeded rows follow them
#: (one misses a mutant that reads them in about 1 run of 100 at V = 4: its unseeded tokens can agree by chance).
RESEEDS = 3
CONTRACT = Category.CONTRACT


def applies(spec: Any) -> bool:
    """Return True when ``spec`` is tagged :data:`TAG` (per-request generators in its simulation, and this probe)."""
    return TAG in getattr(spec, "tags", ())


@dataclass(frozen=True)
class Row:
    """One request in a probe batch: its single-row inputs per step, its seed (None: unseeded), its subject index."""

    steps: tuple[Inputs, ...]
    seed: int | None
    subject: int | None = None


def _stack(parts: Sequence[Inputs]) -> Inputs:
    """Return the batch of single-row inputs ``parts``, in order."""
    return Inputs(*(np.concatenate([getattr(x, name) for x in parts]) for name in ("draft", "q", "p", "num_draft")))


def _request(pr: Prober, rng: np.random.Generator, drafts: Sequence[int], seed: int | None, subject: int | None = None) -> Row:
    """Return a request of ``len(drafts)`` steps with those draft counts, rows from the scenario's chains."""
    return Row(tuple(pr.standard(rng, 1, num_draft=nd) for nd in drafts), seed, subject)


def _flat(pr: Prober, rng: np.random.Generator, nd: int) -> Inputs:
    """Return one row whose p and q are random laws of full support, drafts drawn from q.

    A subject's tokens must depend on its uniforms for the probe to see whose uniforms they are:
    scenario rows can be peaked or one-hot (a greedy class, a low temperature), and then every
    stream gives the same tokens and a verifier drawing from the wrong one goes unseen.
    """
    k, v = pr.k, pr.vocab
    q, p = pr.garbage(k, rng)[None], pr.garbage(k + 1, rng)[None]
    draft = sample_rows(q[0], rng.random(k)).astype(np.int64)[None]
    draft[0, nd:] = rng.integers(v, size=k - nd)
    return Inputs(draft, q, p, np.array([nd], dtype=np.int64))


def _subject(pr: Prober, rng: np.random.Generator, drafts: Sequence[int], subject: int) -> Row:
    """Return seeded request ``subject``: flat rows (:func:`_flat`), its own seed."""
    return Row(tuple(_flat(pr, rng, nd) for nd in drafts), int(rng.integers(2**63)), subject)


def _fillers(pr: Prober, rng: np.random.Generator, n: int, drafts: str, seeded: bool | None = None) -> list[Row]:
    """Return ``n`` other requests: ``drafts`` ``full`` (K), ``zero`` or ``ragged``; half seeded unless ``seeded`` says."""
    k = pr.k
    rows = []
    for _ in range(n):
        nds = [k if drafts == "full" else 0 if drafts == "zero" else int(rng.integers(0, k + 1)) for _ in range(STEPS)]
        is_seeded = bool(rng.random() < 0.5) if seeded is None else seeded
        rows.append(_request(pr, rng, nds, int(rng.integers(2**63)) if is_seeded else None))
    return rows


@dataclass
class Ran:
    """What one batch layout produced: per step, each row's emitted tokens; the generators after the last step."""

    tokens: list[list[list[int]]]  # [step][row] -> emitted tokens
    gens: dict[int, np.random.Generator]
    shared: np.random.Generator


def _run(pr: Prober, layout: Sequence[Row], shared: np.random.Generator, seeds: dict[int, int] | None = None) -> Ran:
    """Run ``layout`` for :data:`STEPS` calls, each row's generator carried from call to call."""
    gens = {b: np.random.default_rng(row.seed if seeds is None else seeds[b]) for b, row in enumerate(layout)
            if row.seed is not None}
    tokens = []
    for t in range(STEPS):
        inputs = _stack([row.steps[t] for row in layout])
        out, n_out = pr.call(inputs, RowGenerators(shared, gens, len(layout)))  # type: ignore[arg-type]
        tokens.append([out[b, : n_out[b]].tolist() for b in range(len(layout))])
    return Ran(tokens, gens, shared)


def _state(gen: np.random.Generator) -> Any:
    return gen.bit_generator.state


def _drafts(row: Row) -> str:
    return " then ".join(str(int(x.num_draft[0])) for x in row.steps)


def seeded_rows(pr: Prober) -> CheckResult:
    """Probe per-request generators: seeded requests keep their tokens in any batch; unseeded rows ignore seeded ones."""
    k = pr.k
    rng = pr.rng("seeded/requests")
    plans = [(0, k), (k, 0), tuple(int(x) for x in rng.integers(0, k + 1, size=STEPS))]  # STEPS = 2 draft counts
    subjects = [_subject(pr, rng, plan, s) for s, plan in enumerate(plans)]
    alone = [_run(pr, [subject], pr.rng(f"seeded/alone/{s}")) for s, subject in enumerate(subjects)]
    reached = any(_state(ran.gens[0]) != _state(np.random.default_rng(subject.seed))
                  for ran, subject in zip(alone, subjects))
    failures: list[str] = []
    # alone again, another shared generator: a seeded request alone must not read the shared stream either
    for s, subject in enumerate(subjects):
        again = _run(pr, [subject], pr.rng(f"seeded/alone-again/{s}"))
        if again.tokens != alone[s].tokens:
            reached = True
            failures.append(f"seeded request {s} (num_draft {_drafts(subject)}) alone: emitted "
                            f"{[t[0] for t in alone[s].tokens]}, then {[t[0] for t in again.tokens]} with only the shared "
                            "generator changed; its tokens depend on the batch's shared stream, not its own seed "
                            "(alibaba/rtp-llm PR #1318 review)")

    s0, s1, s2 = subjects
    layouts: list[tuple[str, list[Row]]] = [
        ("together", [s0, s1, s2]),
        ("after 4 rows with K drafts", [*_fillers(pr, rng, 4, "full"), s0, s1, s2]),
        ("beside zero-draft rows", [f for pair in zip(_fillers(pr, rng, 3, "zero"), subjects) for f in pair]),
        ("reversed among ragged rows", [*_fillers(pr, rng, 2, "ragged"), s2, s1, s0, *_fillers(pr, rng, 2, "ragged")]),
        ("among unseeded rows with K drafts", [*_fillers(pr, rng, 3, "full", seeded=False), s1,
                                               *_fillers(pr, rng, 2, "full", seeded=False), s0, s2]),
    ]
    # a batch as large as the probes' (engines switch kernels and buffers by batch size and seeded count)
    big = pr.probe_rows - 3
    if big > 10:
        layouts.append((f"in a batch of {big + 3} rows, most seeded",
                        [*_fillers(pr, rng, big // 2, "ragged", seeded=True), s0, *_fillers(pr, rng, big // 4, "full"),
                         s1, *_fillers(pr, rng, big - big // 2 - big // 4, "ragged"), s2]))
    for label, layout in layouts:
        ran = _run(pr, layout, pr.rng(f"seeded/shared/{label}"))
        for b, row in enumerate(layout):
            if row.subject is None:
                continue
            want = alone[row.subject]
            where = (f"seeded request {row.subject} (num_draft {_drafts(row)}) at row {b} of {len(layout)} "
                     f"({label})")
            for t in range(STEPS):
                if ran.tokens[t][b] != want.tokens[t][0]:
                    failures.append(f"{where}: step {t + 1} emitted {ran.tokens[t][b]}, alone {want.tokens[t][0]}; "
                                    "its tokens depend on the batch")
                    break
            else:
                if _state(ran.gens[b]) != _state(want.gens[0]):
                    failures.append(f"{where}: same tokens, but its generator's state after {STEPS} steps differs "
                                    "from alone: it drew a different amount, so its later tokens change with the "
                                    "batch (vllm-ascend #13608: a zero-draft row's generator advanced when other rows had drafts)")

    # unseeded rows: same layout and shared generator, other seeds for the seeded rows
    mixed = [*_fillers(pr, rng, 3, "ragged", seeded=False), s0, *_fillers(pr, rng, 2, "ragged"), s1,
             *_fillers(pr, rng, 2, "ragged", seeded=False), s2]
    first = _run(pr, mixed, pr.rng("seeded/unseeded"))
    for _ in range(RESEEDS):
        other = {b: int(rng.integers(2**63)) for b, row in enumerate(mixed) if row.seed is not None}
        second = _run(pr, mixed, pr.rng("seeded/unseeded"), other)
        for b, row in enumerate(mixed):
            if row.seed is not None:
                continue
            for t in range(STEPS):
                if first.tokens[t][b] != second.tokens[t][b]:
                    failures.append(f"unseeded row {b} of {len(mixed)}: step {t + 1} emitted {first.tokens[t][b]}, "
                                    f"then {second.tokens[t][b]} when only the seeded rows' seeds changed (same shared "
                                    "generator): unseeded rows read the seeded rows' draws (vllm-ascend PR #4908)")
                    break
        if _state(first.shared) != _state(second.shared):
            failures.append("the shared generator's state after the calls changed when only the seeded rows' seeds "
                            "changed: what unseeded rows draw depends on the seeded rows")

    checked = len(subjects) + len(layouts) + 1 + RESEEDS
    if failures:
        return result_of(NAME, CONTRACT, False, f"{len(failures)} per-request seed violations in {checked} runs "
                         f"(alone again, batch compositions, re-seeds); first: {failures[0]}", failures=failures[:20], compositions=checked)
    if not reached:
        return skipped(NAME, CONTRACT, "the verifier drew nothing from the seeded rows' generators (deterministic, "
                       "e.g. greedy: per-request seeds change nothing)", compositions=checked)
    return result_of(NAME, CONTRACT, True, f"3 seeded requests of {STEPS} steps kept their tokens and generator "
                     f"states in {len(layouts)} batch compositions (position, shared generator, other rows' drafts "
                     "incl. zero-draft rows); unseeded rows ignored the seeded rows' seeds", compositions=checked)


#: (name, category, probe) as :data:`specaudit.checks.probes.EXACT_CHECKS`; registered in :data:`specaudit.checks.CHECKS`.
SEEDED_CHECKS: list[tuple[str, Category, Callable[[Prober], CheckResult]]] = [(NAME, CONTRACT, seeded_rows)]


def run_seeded(
    verify: Callable[..., Any], spec: Any, seed: int, gate_efficiency: bool = True, contract: str = "probs"
) -> ExactOutcome:
    """Run the per-request seed probe on ``verify`` (already ``contract.guarded``) with the scenario's V, K and chains.

    As :func:`specaudit.checks.probes.run_exact`; "not applicable" when the verifier does not
    declare per-request generators or the probes do not speak the scenario's contract.
    """
    why = _not_probed(spec, contract)
    if why is not None:
        reason = f"the per-request seed probe speaks the canonical chain contract, not {why}"
        return ExactOutcome((skipped(NAME, CONTRACT, reason),))
    if not takes_row_generators(verify):
        return ExactOutcome((skipped(NAME, CONTRACT, "the verifier does not take per-request generators (mark it with "
                                     "specaudit.contract.chain.row_generators)"),))
    canonical, logits_input = _canonical(verify, contract)
    pr = Prober(canonical, spec, seed, logits_input)
    results, error = probe_all(pr, SEEDED_CHECKS, gate_efficiency)
    return ExactOutcome(tuple(results), error, pr.calls, pr.seconds, {"rows": pr.rows})
