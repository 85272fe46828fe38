"""FlashInfer's per-row ``seed``/``offset`` arguments (flashinfer-python 0.7.4 ``flashinfer/sampling.py``), on CPU.

The real kernel needs CUDA; the plumbing is tested with a fake kernel of the 0.7.4 signature that
records what it is handed and then runs the correct rule on uniforms derived from those seeds
(tests/verifiers/flashinfer_like.py ``chain_speculative_sampling``, one stream per row).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import specaudit  # noqa: E402
from specaudit import adapters  # noqa: E402
from specaudit.errors import ExitCode  # noqa: E402
from specaudit.scenarios.loading import load_scenario  # noqa: E402

SCENARIOS = Path(__file__).parents[2] / "scenarios"


class Recorder:
    """A fake kernel with 0.7.4's signature: records each call's seed/offset/generator, runs the fixture's rule."""

    def __init__(self, rule):
        self.rule = rule
        self.calls: list[dict] = []

    def __call__(self, draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num=None,
                 maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None, seed=None, offset=None):
        self.calls.append({"seed": seed, "offset": offset, "generator": generator, "batch": draft_probs.shape[0]})
        return self.rule(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num,
                         maybe_output_emitted_draft_token_num, deterministic, generator, seed, offset)


def _fixture_rule(verifiers_dir: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("flashinfer_like_fixture", verifiers_dir / "flashinfer_like.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.chain_speculative_sampling


def _inputs(rng: np.random.Generator, batch: int = 6, k: int = 3, vocab: int = 5):
    q = rng.dirichlet(np.ones(vocab), (batch, k))
    p = rng.dirichlet(np.ones(vocab), (batch, k + 1))
    draft = np.array([[rng.choice(vocab, p=q[b, i]) for i in range(k)] for b in range(batch)])
    return draft, q, p, np.full(batch, k)


def test_per_row_seed_and_offset_are_int64_tensors_one_per_row_fresh_each_call_and_reproducible(verifiers_dir):
    rec = Recorder(_fixture_rule(verifiers_dir))
    verify = adapters.get("flashinfer").wrap(rec, {})
    inputs = _inputs(np.random.default_rng(11))
    for seed in (5, 5):
        rng = np.random.default_rng(seed)
        verify(*inputs, rng)
        verify(*inputs, rng)
    first, second, again = rec.calls[0], rec.calls[1], rec.calls[2]
    for call in rec.calls:
        assert call["generator"] is None  # seeds given: no generator
        for name in ("seed", "offset"):
            t = call[name]
            assert isinstance(t, torch.Tensor) and t.dtype == torch.int64 and t.shape == (6,) and t.device.type == "cpu"
    assert len(set(first["seed"].tolist())) == 6  # one stream per row
    assert first["seed"].tolist() != second["seed"].tolist()  # a fresh stream every call
    assert first["seed"].tolist() == again["seed"].tolist() and first["offset"].tolist() == again["offset"].tolist()


def test_seeds_generator_hands_a_generator_and_no_seeds(verifiers_dir):
    rec = Recorder(_fixture_rule(verifiers_dir))
    verify = adapters.get("flashinfer").wrap(rec, {"seeds": "generator"})
    verify(*_inputs(np.random.default_rng(12)), np.random.default_rng(3))
    call = rec.calls[0]
    assert isinstance(call["generator"], torch.Generator) and call["seed"] is None and call["offset"] is None


def test_a_kernel_driven_by_per_row_seeds_passes_and_the_uniform_probe_is_not_applicable(verifiers_dir):
    rec = Recorder(_fixture_rule(verifiers_dir))
    result = specaudit.run(rec, [load_scenario(SCENARIOS / "markov-v4.yaml")], samples=3000, seed=4,
                           adapter="flashinfer", diagnose=False, power=False)
    assert result.exit_code() == ExitCode.OK
    probe = result.scenarios[0].check("adversarial-uniforms")
    assert probe.status.value == "skipped" and "rng.integers" in probe.summary, probe.summary


def test_a_kernel_that_ignores_its_per_row_seeds_fails(verifiers_dir):
    # the negative control: every call draws the same stream (seed and offset ignored), so the rows of
    # one call and the calls repeat their uniforms, and the determinism and law checks see it
    rule = _fixture_rule(verifiers_dir)

    def fixed(dp, ids, tp, acc, emi, det, gen, seed, offset):
        return rule(dp, ids, tp, acc, emi, det, None, torch.zeros_like(seed), torch.zeros_like(offset))

    result = specaudit.run(Recorder(fixed), [load_scenario(SCENARIOS / "markov-v4.yaml")], samples=3000, seed=4,
                           adapter="flashinfer", diagnose=False, power=False)
    assert result.exit_code() == ExitCode.CHECKS_FAILED
