"""Probes that survive compilation: scripted randomness reaches compiled code, or the probe says it did not.

Under a scripted rng, torch.compile'd functions run eagerly (their draws are scripted and nothing
is traced with scripted values); code whose draws bypass the routing (TorchScript here) advances
torch's real generator, and the adversarial probe reports "not applicable", never "passed".
Compiling is slow on a small CPU: the dynamo tests use the "eager" backend (dynamo's tracing and
guards, no code generation); the inductor one is marked slow.
"""

import numpy as np
import pytest

from specaudit.adapters import get
from specaudit.checks import probes
from specaudit.contract.guard import guarded
from specaudit.contract.targets import load_object
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve

torch = pytest.importorskip("torch")


@pytest.fixture
def compiled(verifiers_dir):
    return lambda name: load_object(f"{verifiers_dir / 'compiled.py'}:{name}")


def _probe(target, scenario="markov-v4"):
    done = probes.run_scenario_probes(guarded(get("torch").wrap(target)), resolve([scenario])[0].spec, 3)
    return {c.name: c for c in done.checks}


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_a_compiled_leq_verifier_fails_adversarial_uniforms_and_a_correct_one_passes(backend, compiled, verifiers_dir):
    torch._dynamo.reset()
    leq = _probe(torch.compile(compiled("chain_rule")(leq=True), backend=backend))["adversarial-uniforms"]
    assert leq.status is Status.FAILED, leq.summary
    assert "accepted draft has p = 0" in leq.summary and leq.data["classes"] == ["accepts-p0"]
    right = _probe(torch.compile(compiled("chain_rule")(), backend=backend))
    adv = right["adversarial-uniforms"]
    assert adv.status is Status.PASSED, adv.summary
    # every draw was scripted: the race's exponentials too (one per entry of each replacement law)
    assert adv.data["op_draws"]["Tensor.exponential_"] > 0 and adv.data["bypassed"] == {}
    assert right["determinism"].status is Status.PASSED


def test_a_scripted_call_leaves_compiled_code_as_it_was(compiled):
    # the compiled verifier's output for a seed is the same whether or not a probe's scripted calls came first
    torch._dynamo.reset()
    target = torch.compile(compiled("chain_rule")(), backend="eager")
    verify = guarded(get("torch").wrap(target))
    spec = resolve(["markov-v4"])[0].spec
    pr = probes.Prober(verify, spec, 3)
    inputs = pr.standard(np.random.default_rng(1), 16)

    def run():
        return verify(inputs.draft, inputs.q, inputs.p, inputs.num_draft, np.random.default_rng(5))

    alone = run()
    torch._dynamo.reset()
    adv = probes.adversarial_uniforms(pr)  # scripted calls first: nothing may be traced or frozen here
    assert adv.status is Status.PASSED, adv.summary
    after = run()
    again = run()
    for a, b, c in zip(alone, after, again):
        assert np.array_equal(a, b) and np.array_equal(b, c)


def test_draws_that_bypass_the_routing_make_the_probe_not_applicable_never_passed(compiled):
    # a correct verifier whose replacement race runs in TorchScript: its exponentials are real, not scripted
    adv = _probe(compiled("correct_torchscript_race"))["adversarial-uniforms"]
    assert adv.status is Status.SKIPPED, adv.summary
    assert adv.summary.startswith("not applicable: compiled code bypassed the scripted generator")
    assert "torch's default generator (2 of 2 scripted calls)" in adv.summary
    assert "Tensor.exponential_" not in adv.data["op_draws"] and adv.data["op_draws"]["torch.rand"] > 0
    # with the same race, a `u <= p/q` acceptance step is still caught: the finding comes first
    leq = _probe(compiled("leq_torchscript_race"))["adversarial-uniforms"]
    assert leq.status is Status.FAILED and "accepted draft has p = 0" in leq.summary
