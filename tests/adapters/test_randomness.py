"""The routing helper: thread safety, values a real generator can return, reach accounting."""

import random
import threading

import numpy as np
import pytest

from specaudit.adapters.randomness import bypassed, harness_draws, op_draws, routed, watched
from specaudit.contract.uniforms import HIGH, ScriptedUniforms


def test_routed_from_threads_never_crosses_scripted_or_seeded_streams():
    torch = pytest.importorskip("torch")

    def seeded(seed):
        with routed(np.random.default_rng(seed)):
            return (np.random.random(40).tolist(), [random.random() for _ in range(40)],
                    torch.rand(40, dtype=torch.float64).tolist())

    expected = {s: seeded(s) for s in range(3)}  # one thread: the reference
    barrier, errors = threading.Barrier(4), []

    def scripted_worker():
        barrier.wait()
        for i in range(40):
            su = ScriptedUniforms(i % 2)
            with routed(su):
                got = np.random.random(4).tolist() + [random.random()] + torch.rand(3, dtype=torch.float64).tolist()
            want = [(0.0, HIGH)[(i + j) % 2] for j in range(8)]
            if got != want:
                errors.append(f"scripted stream crossed: {got}")

    def seeded_worker(offset):
        barrier.wait()
        for i in range(40):
            s = (i + offset) % 3
            if seeded(s) != expected[s]:
                errors.append(f"seed {s}: another thread's draws crossed its stream")

    def outside_worker():  # not routed: never handed a scripted value, though the functions are patched meanwhile
        gen = torch.Generator().manual_seed(1)
        barrier.wait()
        for _ in range(300):
            x = torch.rand(64, dtype=torch.float64, generator=gen)
            if bool((x == 0.0).any()) or bool((x == HIGH).any()):
                errors.append("a scripted value reached a thread outside routed")

    threads = [threading.Thread(target=f, args=a) for f, a in
               ((scripted_worker, ()), (seeded_worker, (0,)), (seeded_worker, (1,)), (outside_worker, ()))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert torch.rand is torch._C._VariableFunctions.rand  # every substitute removed


def test_scripted_exponential_is_never_zero_but_the_smallest_value_torch_returns():
    torch = pytest.importorskip("torch")
    su = ScriptedUniforms()
    with routed(su):
        e32 = torch.empty(4, dtype=torch.float32).exponential_()
        e64 = torch.empty(2, dtype=torch.float64).exponential_(2.0)
    # u = 0 -> torch's CPU minimum finfo.tiny (MKL shift), never 0; u = 1 - 2**-53 -> -log(2**-53) / lambda
    assert e32[0].item() == torch.finfo(torch.float32).tiny and e32[1].item() == pytest.approx(53 * np.log(2), rel=1e-6)
    assert e64[0].item() == torch.finfo(torch.float64).tiny and e64[1].item() == pytest.approx(53 * np.log(2) / 2)
    assert bool((e32 > 0).all()) and op_draws(su) == {"Tensor.exponential_": 6}
    # the false alarm it prevents: an exponential race argmax(p / E) with E = 0 picks a p = 0 token (0/0 = NaN)
    with routed(ScriptedUniforms()):
        token = (torch.tensor([0.0, 1.0]) / torch.empty(2).exponential_()).argmax()
    assert token.item() == 1


def test_harness_draws_are_not_coins_and_bypass_is_named():
    torch = pytest.importorskip("torch")
    su = ScriptedUniforms()
    with harness_draws(su):
        su.random(5)  # an adapter's own bonus draws
    su.random(2)
    assert su.draws == 7 and su.coins == 2 and su.counts == {"harness": 5, "random": 2}
    gen = torch.Generator().manual_seed(3)
    with routed(su), watched(su, gen):
        torch.randn(3)  # not scripted: torch's default generator advances
        torch.rand(3, generator=gen)  # scripted (the generator is ignored), so gen does not move
    assert bypassed(su) == {"torch's default generator": 1}
    with routed(su), watched(su, gen):
        gen.manual_seed(4)
        torch.randint(0, 5, (2,), generator=gen)
    assert bypassed(su)["the torch.Generator on cpu given to the target"] == 1
    plain = np.random.default_rng(0)
    with routed(plain):
        torch.randn(3)
    assert bypassed(plain) == {}  # a seeded call is not scripted: nothing to bypass


def test_numpy_and_python_draws_past_the_script_are_named():
    su = ScriptedUniforms()
    with routed(su):
        np.random.normal(size=2)  # not scripted
        random.getrandbits(8)  # not scripted
    assert set(bypassed(su)) == {"numpy's legacy global RNG", "Python's random"}
