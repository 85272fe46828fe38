"""The ``sglang_chain`` adapter on a CPU fake of SGLang's chain layout (the real kernel: tests/engines/test_sglang_flashinfer.py).

``chain`` follows the layout of sglang ``sglang/kernels/ops/speculative/reject_sampling.py``
(0.5.23: root slot 0, coins ``uniform_samples[b, step - 1]``, ``coin * q < p``, the stop's token by
inverse CDF of ``max(p - q, 0)`` at ``uniform_samples_for_final_sampling[b]``), written here in
numpy; each other fake carries one bug: ``<=`` (a p = 0 draft accepted at coin 0), an accept count
past the row's real drafts, an ``accept_index`` off by one slot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

import specaudit
from specaudit.errors import ExitCode
from specaudit.scenarios.loading import load_scenario

SCENARIOS = Path(__file__).parents[2] / "scenarios"


def _fake(boundary: str = "<", overcount: bool = False, index_shift: int = 0):
    def chain(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
              retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs,
              threshold_single, threshold_acc, deterministic, *, block_verification=False):
        cand, idx = candidates.numpy(), retrive_index.numpy()
        u, uf = uniform_samples.numpy(), uniform_samples_for_final_sampling.numpy()
        tp, dp = target_probs.numpy().astype(np.float64), draft_probs.numpy().astype(np.float64)
        batch, m = cand.shape
        for b in range(batch):
            accept_index[b, 0] = int(idx[b, 0])
            last, n, row = int(idx[b, 0]), 0, 0
            for step in range(1, m):
                x = int(cand[b, step])
                p, q = tp[b, row, x], dp[b, row, x]
                ok = u[b, step - 1] * q < p if boundary == "<" else u[b, step - 1] * q <= p
                if not (0 < q <= 1 and ok):
                    break
                predicts[last] = x
                n, row = n + 1, step
                last = int(idx[b, step])
                accept_index[b, n] = last + index_shift
            accept_token_num[b] = m if overcount else n  # overcount: past every draft slot
            w = tp[b, row] if n == m - 1 else np.maximum(tp[b, row] - dp[b, row], 0.0)
            cum = np.cumsum(w)
            hit = np.flatnonzero(cum > uf[b] * cum[-1])
            predicts[last] = int(hit[0]) if hit.size else len(w) - 1
    return chain


def _run(target, scenario: str, samples: int = 3000):
    return specaudit.run(target, [load_scenario(SCENARIOS / f"{scenario}.yaml")], samples=samples, seed=5,
                         adapter="sglang_chain", diagnose=False, power=False)


def test_the_layout_read_back_passes_ragged_rows_and_the_probe_reaches_the_uniforms():
    result = _run(_fake(), "ragged-v4")
    assert result.exit_code() == ExitCode.OK, [(c.name, c.status.value, c.summary) for c in result.scenarios[0].checks]
    assert result.scenarios[0].check("adversarial-uniforms").status.value == "passed"


def test_a_non_strict_boundary_is_found_by_the_adversarial_uniforms():
    result = _run(_fake(boundary="<="), "markov-v4", samples=1000)
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    probe = result.scenarios[0].check("adversarial-uniforms")
    # at coin 0 it accepts p = 0 drafts: a real one (a token of probability 0 emitted) or the padding's
    # phantom id (accepted past the row's real drafts)
    assert probe.status.value == "failed" and ("probability 0" in probe.summary or "sglang-accept-num" in probe.summary)


@pytest.mark.parametrize(("bug", "clause"), [({"overcount": True}, "sglang-accept-num"),
                                             ({"index_shift": 1}, "sglang-accept-index")])
def test_a_layout_breach_is_a_contract_error(bug, clause):
    result = _run(_fake(**bug), "markov-v4", samples=500)
    err = result.scenarios[0].error
    assert err is not None and err.clause == clause, err


def test_block_mode_on_a_target_without_it_is_a_usage_error(cli):
    res = cli("run", "specaudit.verifiers.reference:verify", "--adapter", "sglang_chain", "--adapter-arg",
              "block_verification=true", "-s", "markov-v4")
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert "this target has no block_verification parameter" in " ".join(res.output.split())
