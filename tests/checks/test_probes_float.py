"""Float tolerance of the p = q corner for verifiers that softmax logits themselves (float32).

Positive control: a logits-contract verifier that takes p as a float32 softmax of log p passes
(the exact judgement would fail it: rounding makes p/q < 1 on some drafts, rejected at
u = 1 - 2**-53). Negative control: one that accepts with 0.999 p/q fails, the bound named.
"""

import numpy as np
import pytest

from specaudit.checks import probes
from specaudit.contract.guard import guarded
from specaudit.contract.targets import load_object
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve


@pytest.fixture
def f32(verifiers_dir):
    return lambda name: load_object(f"{verifiers_dir / 'logits_f32.py'}:{name}")


def _p_equals_q(verify, contract="logits"):
    done = probes.run_scenario_probes(guarded(verify), resolve(["p-equals-q"])[0].spec, 3, contract=contract)
    return {c.name: c for c in done.checks}["corner-p-equals-q"]


def test_float32_softmax_verifier_passes_p_equals_q_within_the_rounding_bound_it_states(f32):
    corner = _p_equals_q(f32("float32_softmax"))
    assert corner.status is Status.PASSED, corner.summary
    assert "float32 softmax rounding" in corner.summary and "delta = 6.73e-06" in corner.summary
    assert "V = 4" in corner.summary and corner.data["delta"] == pytest.approx(6.73e-06, rel=1e-2)


def test_the_exact_judgement_would_fail_the_same_verifier(f32):
    # the false "must always accept": without logits_input the corner demands acceptance at u = 1 - 2**-53
    spec = resolve(["p-equals-q"])[0].spec
    pr = probes.Prober(probes._on_logits(guarded(f32("float32_softmax"))), spec, 3, logits_input=False)
    exact = probes.corner_p_equals_q(pr)
    assert exact.status is Status.FAILED and "must always be accepted" in exact.summary


def test_a_verifier_rejecting_p_equals_q_materially_fails_naming_the_bound(f32):
    corner = _p_equals_q(f32("rejects_p_equals_q"))
    assert corner.status is Status.FAILED, corner.summary
    assert "uniforms 1 - 2 delta" in corner.summary and "rejects drafts with p = q materially" in corner.summary
    assert "float32 softmax rounding, at most delta = 6.73e-06" in corner.summary


def test_vllm_adapter_on_logits_marks_itself_and_passes_p_equals_q(verifiers_dir):
    pytest.importorskip("torch")
    from specaudit.adapters import get
    from specaudit.adapters.torch import takes_logits

    new = get("vllm").wrap(load_object(f"{verifiers_dir / 'vllm_like.py'}:rejection_sample"))  # target_logits (>= 0.16)
    old = get("vllm").wrap(load_object(f"{verifiers_dir / 'vllm_like.py'}:rejection_sample_v015"))  # target_probs
    assert takes_logits(new) and takes_logits(guarded(new, 60.0)) and not takes_logits(old)
    corner = _p_equals_q(new, contract="probs")
    assert corner.status is Status.PASSED and "logits input" in corner.summary, corner.summary


def test_the_bound_covers_float32_softmax_rounding_measured_directly():
    # independent check: torch-free float32 softmax of log p against p itself, on Dirichlet rows of several V
    rng = np.random.default_rng(11)
    for v in (2, 8, 64, 1024):
        p = rng.dirichlet(np.full(v, 0.3), size=400)
        p = np.maximum(p, 1e-30)
        p /= p.sum(axis=1, keepdims=True)
        x = np.log(p).astype(np.float32)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        soft = (e / e.sum(axis=1, keepdims=True, dtype=np.float32)).astype(np.float64)
        q32 = p.astype(np.float32).astype(np.float64)
        worst = float(np.max(np.abs(soft / q32 - 1.0)))
        bound = probes.softmax_rounding(p)
        assert worst <= bound, (v, worst, bound)
        assert bound < 1e-2  # still a test: a 0.999 p/q rejector lies outside it for these V
