"""The per-row adapter: a batch-1 verifier driven row by row, every global RNG routed."""

import re
from pathlib import Path

import numpy as np
import pytest

import specaudit
from specaudit.adapters import get
from specaudit.contract.targets import load_object
from specaudit.errors import ContractError, ExitCode
from specaudit.results import Status

README = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"  # the adapters page of the docs


def _run(target, scenarios=("markov-v4",), samples=5000, **options):
    return specaudit.run(target, list(scenarios), samples=samples, seed=7, adapter="per-row",
                         adapter_options=options, diagnose=False)


def test_readme_batch1_example_runs_and_passes(tmp_path, cli):
    text = README.read_text()
    block = re.search(r"\*\*A batch-1 verifier\*\*.*?```python\n(.*?)```", text, re.S)
    assert block is not None
    assert len(block.group(1).strip().splitlines()) <= 12  # the "ten-line example"
    path = tmp_path / "mybatch1.py"
    path.write_text(block.group(1))
    res = cli("run", f"{path}:verify_row", "--adapter", "per-row", "-s", "markov-v4", "--samples", "5000", "--seed", "3")
    assert res.exit_code == ExitCode.OK, res.output
    assert "adversarial-uniforms" in res.output  # probed, and the routed numpy draws reached it


@pytest.mark.parametrize("target", ["with_rng", "python_random"])
def test_correct_batch1_verifiers_pass_with_reach(target, verifiers_dir):
    result = _run(f"{verifiers_dir / 'batch1.py'}:{target}")
    s = result.scenarios[0]
    assert result.exit_code() == ExitCode.OK, [(c.name, c.summary) for c in s.checks if c.status is not Status.PASSED]
    assert s.check("adversarial-uniforms").status is Status.PASSED  # reached: never "not applicable"
    assert s.check("determinism").status is Status.PASSED


def test_leq_batch1_verifier_on_python_random_fails_adversarial_uniforms(verifiers_dir):
    # negative control: `u <= p/q` on Python's random.random(), reached through the routing
    s = _run(f"{verifiers_dir / 'batch1.py'}:python_random_leq").scenarios[0]
    adv = s.check("adversarial-uniforms")
    assert adv.status is Status.FAILED and "has p = 0" in adv.summary


def test_torch_batch1_verifier_is_routed(verifiers_dir):
    pytest.importorskip("torch")
    s = _run(f"{verifiers_dir / 'batch1.py'}:torch_style", samples=3000, tensors="torch").scenarios[0]
    assert s.status is Status.PASSED, [(c.name, c.summary) for c in s.checks if c.status is not Status.PASSED]
    assert s.check("adversarial-uniforms").status is Status.PASSED


def test_per_row_layout_breach_is_a_contract_error():
    verify = get("per-row").wrap(lambda draft, q, p: [0] * (draft.shape[0] + 2))
    rng = np.random.default_rng(0)
    with pytest.raises(ContractError, match="per-row layout: row 0"):
        verify(np.zeros((1, 2), np.int64), np.full((1, 2, 3), 1 / 3), np.full((1, 3, 3), 1 / 3), np.array([2]), rng)


def test_per_row_passes_rng_only_to_targets_that_take_it(verifiers_dir):
    seen = []
    verify = get("per-row").wrap(lambda draft, q, p, rng: seen.append(rng) or [0])
    rng = np.random.default_rng(0)
    verify(np.zeros((2, 1), np.int64), np.full((2, 1, 2), 0.5), np.full((2, 2, 2), 0.5), np.array([0, 0]), rng)
    assert seen == [rng, rng]
    assert callable(load_object(f"{verifiers_dir / 'batch1.py'}:with_rng"))
