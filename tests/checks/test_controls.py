"""Every registered gating check has a positive and a negative control, side by side.

One test, parametrised over the check registry (:data:`specaudit.checks.CHECKS`): for each result
name a gating check emits, a correct verifier must PASS it and a known-broken verifier must FAIL
it, on the same scenario. A check registered without an entry in :data:`CONTROLS` fails
``test_every_gating_check_has_controls``, so no check lands without a control that can fail.
Runs are small (a few thousand sequences) and shared between checks through a cache.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from scenario_texts import ZIPF_V64  # a large-vocabulary scenario: per-prefix and PIT instead of the joint law

import specaudit
from specaudit.checks import CHECKS
from specaudit.results import Status
from specaudit.scenarios.loading import parse_scenario
from specaudit.verifiers.reference import verify as reference

VERIFIERS = Path(__file__).resolve().parent.parent / "verifiers"



def k0_no_token(draft, q, p, num_draft, rng):
    """Emit no token at all when K = 0 (n_out = 0); the reference otherwise."""
    if draft.shape[1] == 0:
        batch = draft.shape[0]
        return np.full((batch, 1), -1, dtype=np.int64), np.zeros(batch, dtype=np.int64)
    return reference(draft, q, p, num_draft, rng)


class Control(NamedTuple):
    """Where a check is controlled: a scenario, a verifier that passes, one that fails, the samples."""

    scenario: str
    good: str
    bad: str
    samples: int | None = None
    contract: str = "probs"


def _file(module: str, name: str) -> str:
    return f"{VERIFIERS / (module + '.py')}:{name}"


#: Result name -> its controls. Statistical checks: a zoo mutant or a broken verifier whose bug the
#: check is the one to see; probes: the broken verifiers of tests/verifiers/exact_broken.py, broken.py.
CONTROLS: dict[str, Control] = {
    "joint-law": Control("markov-v4", "reference", "mutant:resample_from_p", 5000),
    "tokens-per-step": Control("seed-context-free", "reference", "mutant:no_bonus", 20_000),
    "accept-length": Control("seed-context-free", "reference", "mutant:ignore_drafts", 5000),
    "greedy-equality": Control("greedy-ties", "reference-greedy", _file("exact_broken", "greedy_tie_last"), 3000),
    "per-prefix": Control("zipf-v64", "reference", "mutant:lenient"),
    "pit": Control("zipf-v64", "reference", "mutant:lenient"),
    "corner-empty-batch": Control("corners", "reference", _file("exact_broken", "empty_batch_wrong_shape")),
    "corner-k0": Control("corners", "reference", "k0_no_token"),
    "corner-zero-drafts": Control("corners", "reference", _file("exact_broken", "zero_drafts_from_next")),
    "corner-p-equals-q": Control("corners", "reference", _file("exact_broken", "float32_ratio")),
    "corner-one-hot": Control("corners", "reference", _file("exact_broken", "swapped_residual")),
    "corner-one-hot-run": Control("corners", "reference", "mutant:ignore_drafts"),
    "corner-greedy-drafter": Control("corners", "reference", "mutant:resample_from_p"),
    "determinism": Control("corners", "reference", _file("exact_broken", "ignores_seed")),
    "replicas": Control("corners", "reference", _file("exact_broken", "digest_seeded")),
    "padding-independence": Control("corners", "reference", "mutant:bonus_from_last"),
    "adversarial-uniforms": Control("corners", "reference", "mutant:leq_ratio"),
    "inputs-unmodified": Control("corners", "reference", _file("exact_broken", "mutates_p")),
    "contract-clauses": Control("corners", "reference", _file("broken", "id_equals_vocab")),
    # batches of 1-15 rows with every decision forced by p and q (a decode step's kernel)
    "small-batches": Control("corners", "reference", _file("exact_broken", "small_batch_accepts_all")),
    "small-batches-run": Control("corners", "reference", _file("exact_broken", "small_batch_rejects_all")),
    # a batch mix's temperature-0 classes, exactly (specaudit.checks.serving)
    "greedy-rows": Control("serving-mix", "reference-logits", "mutant:greedy_rows_sampled", 3000, "logits"),
    # bad-row probe: exact scenarios tagged bad-rows (vLLM #41834: token 0 after an all-NaN q row)
    "bad-rows": Control("bad-rows", "reference", "mutant:nan_rows_token0"),
    # per-request seed probe: simulated scenarios tagged seeded (alibaba/rtp-llm PR #1318: seeded rows on the shared stream)
    "seeded-rows": Control("serving-seeded", "reference", "mutant:seeded_rows_shared_stream", 2000),
    # tree probes: run with every tree scenario (tests/verifiers/tree_broken.py, specaudit.verifiers.zoo.tree)
    "tree-one-hot": Control("tree-iid-v4", "reference-tree", _file("tree_broken", "swapped_residual"), 2000),
    "tree-one-hot-path": Control("tree-iid-v4", "reference-tree", _file("tree_broken", "one_level"), 2000),
    "tree-p-equals-q": Control("tree-iid-v4", "reference-tree", _file("tree_broken", "one_level"), 2000),
    "tree-single-child": Control("tree-iid-v4", "reference-tree", _file("tree_broken", "final_from_p"), 2000),
    "tree-determinism": Control("tree-iid-v4", "reference-tree", _file("tree_broken", "ignores_seed"), 2000),
    "tree-padding-independence": Control("tree-iid-v4", "reference-tree", _file("tree_broken", "bonus_from_last"), 2000),
    "tree-adversarial-uniforms": Control("tree-iid-v4", "reference-tree", "mutant:tree_leq_ratio", 2000),
    "tree-logits-processing": Control("tree-iid-v4", "specaudit.verifiers.tree:verify_logits",
                                      "mutant:tree_bonus_unprocessed", 2000, "logits"),
    "tree-inputs-unmodified": Control("tree-iid-v4", "reference-tree", _file("tree_broken", "mutates_p"), 2000),
    "tree-contract-clauses": Control("tree-iid-v4", "reference-tree", _file("tree_broken", "final_eq_vocab"), 2000),
}

#: Every result name a gating check of the registry emits, in registry order.
GATING = [name for check in CHECKS.values() if check.gate for name in check.results]


@functools.cache
def _run(target: str, scenario: str, samples: int | None, contract: str = "probs") -> specaudit.RunResult:
    """Run one small scenario (cached: controls share runs)."""
    spec = parse_scenario(ZIPF_V64, "zipf-v64.yaml") if scenario == "zipf-v64" else scenario
    verify = k0_no_token if target == "k0_no_token" else target
    return specaudit.run(verify, [spec], samples=samples, seed=1, diagnose=False, power=False, contract=contract)


def test_every_gating_check_has_controls():
    missing = [name for name in GATING if name not in CONTROLS]
    assert not missing, f"register a positive and a negative control for {missing} in CONTROLS"
    assert set(CONTROLS) == set(GATING), set(CONTROLS) - set(GATING)


@pytest.mark.parametrize("name", GATING)
def test_reference_passes_and_the_mutant_fails(name):
    control = CONTROLS[name]
    good = _run(control.good, control.scenario, control.samples, control.contract).scenarios[0].check(name)
    bad = _run(control.bad, control.scenario, control.samples, control.contract).scenarios[0].check(name)
    assert good is not None and good.status is Status.PASSED, good
    assert bad is not None and bad.status is Status.FAILED and bad.gate, bad
