"""Adapters follow each engine's real signatures, old and new (issue 16): SGLang's tree kernel, FlashInfer's chain.

SGLang: sgl-kernel ``python/sgl_kernel/speculative.py`` takes ``draft_probs`` at 6bfad8f1 and no
longer at 01fe7c22. FlashInfer: ``flashinfer/sampling.py`` (01c897d7) takes a ``generator``; the
older API took ``uniform_samples`` (both forms: tests/adapters/test_adapters.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import specaudit
from specaudit.adapters import sglang_tree
from specaudit.results import Status
from specaudit.scenarios.loading import load_scenario

SCENARIOS = Path(__file__).parents[2] / "scenarios"


def _fixture(verifiers_dir: Path) -> ModuleType:
    """Return tests/verifiers/sglang_tree.py, imported under a private name."""
    spec = importlib.util.spec_from_file_location("sglang_tree_fixture", verifiers_dir / "sglang_tree.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sglang_adapter_reads_whether_the_kernel_takes_draft_probs(verifiers_dir):
    fixture = _fixture(verifiers_dir)
    assert sglang_tree.takes_draft_probs(fixture.verify)  # **kwargs: the older form's draft_probs fits
    assert not sglang_tree.takes_draft_probs(fixture.verify_without_draft_probs)
    assert sglang_tree.takes_draft_probs(max)  # no readable signature: the older, wider form


@pytest.mark.parametrize("name", ["verify", "verify_without_draft_probs"])
def test_sglang_both_signatures_pass_the_statistics_and_keep_the_boundary_finding(verifiers_dir, name):
    result = specaudit.run(f"{verifiers_dir / 'sglang_tree.py'}:{name}", [load_scenario(SCENARIOS / "tree-topk-v4.yaml")],
                           samples=6000, seed=16, adapter="sglang_tree", diagnose=False, power=False)
    (s,) = result.scenarios
    assert s.error is None, s.error
    statistical = [c for c in s.checks if c.pvalue is not None]
    assert statistical and all(c.status is Status.PASSED for c in statistical), [(c.name, c.pvalue) for c in statistical]
    adversarial = s.check("tree-adversarial-uniforms")  # SGLang's `coin <= cumulative p` (sglang #35771)
    assert adversarial.status is Status.FAILED and "sglang #35771" in adversarial.summary, adversarial.summary


def test_sglang_draft_probs_option_overrides_the_signature(verifiers_dir):
    # a target of the newer form handed draft_probs anyway: it does not take it, and the run says so
    result = specaudit.run(f"{verifiers_dir / 'sglang_tree.py'}:verify_without_draft_probs",
                           [load_scenario(SCENARIOS / "tree-topk-v4.yaml")], samples=200, seed=16,
                           adapter="sglang_tree", adapter_options={"draft_probs": "pass"}, diagnose=False, power=False)
    (s,) = result.scenarios
    assert s.error is not None and "draft_probs" in s.error.message, s.error


def test_sglang_rejected_sibling_is_masked_in_both_forms(verifiers_dir):
    # one request, root -> {a, b}: coin 0.8 rejects a (p 0.3) and accepts b (0.3 + 0.6 >= 0.8); final draw from p[b]
    rng = np.random.default_rng(16)
    p = rng.dirichlet(np.ones(4), size=(1, 3)).astype(np.float32)
    p[0, 0] = [0.3, 0.6, 0.05, 0.05]
    fixture = _fixture(verifiers_dir)
    outs = []
    for fn, extra in ((fixture.verify, {"draft_probs": np.zeros_like(p)}), (fixture.verify_without_draft_probs, {})):
        args = dict(
            predicts=np.full(3, -1, np.int32), accept_index=np.full((1, 2), -1, np.int32),
            accept_token_num=np.zeros(1, np.int32), candidates=np.array([[0, 0, 1]]),
            retrive_index=np.array([[0, 1, 2]]), retrive_next_token=np.array([[1, -1, -1]]),
            retrive_next_sibling=np.array([[-1, 2, -1]]), uniform_samples=np.array([[0.8, 0.5, 0.5]], np.float32),
            uniform_samples_for_final_sampling=np.array([0.5], np.float32), target_probs=p, **extra,
        )
        fn(**args)
        outs.append((args["accept_token_num"].tolist(), args["accept_index"].tolist(), args["predicts"].tolist()))
    assert outs[0] == outs[1]
    assert outs[0][0] == [1] and outs[0][1] == [[0, 2]] and outs[0][2][0] == 1
