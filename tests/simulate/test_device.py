"""The device path (specaudit.simulate.device): same law as the host path, no p/q across the bus, through the engine.

Positive control: the torch reference passes the default chain scenarios with --device cpu. Negative
control: the torch mutant ``resample_from_p`` (tests/verifiers/torch_like.py) fails. Null rejection
rate: joint-law p-values of the reference over independent seeds on the device path are uniform.
The transfer counter has its own positive control: the host path hands the verifier p and q
through numpy on every call (2 p/q-shaped transfers a call), the device path none.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import specaudit  # noqa: E402
from specaudit.adapters import get as get_adapter  # noqa: E402
from specaudit.adapters.torch_reference import verify as torch_reference  # noqa: E402
from specaudit.chains.lazy import ZipfChain  # noqa: E402
from specaudit.chains.tabular import TabularChain, first_order  # noqa: E402
from specaudit.contract.tensors import TensorCall, tensor_call  # noqa: E402
from specaudit.engine.bench import Bench  # noqa: E402
from specaudit.errors import ExitCode, UsageError  # noqa: E402
from specaudit.results import Status  # noqa: E402
from specaudit.scenarios.catalogue import default_suite, resolve  # noqa: E402
from specaudit.simulate import device  # noqa: E402
from specaudit.simulate.transfers import count_transfers  # noqa: E402

REF = "specaudit.adapters.torch_reference:verify"


def _torch_verify(dtype: str = "float64"):
    return get_adapter("torch").wrap(torch_reference, {"device": "cpu", "dtype": dtype})


def _bench(spec, on_device: bool, dtype: str = "float64") -> Bench:
    verify = _torch_verify(dtype)
    call = tensor_call(verify)
    assert call is not None
    return Bench(verify, spec, tensors=TensorCall(call.call, call.device, call.dtype) if on_device else None)


# ---- the device forms of the chains follow the host chains bit for bit ----------------------


def _zipf_chains():
    chains = [ZipfChain(1000, 1.1, 3), ZipfChain(777, 0.8, 5)]
    try:
        chains.append(ZipfChain(1000, 0.9, 3, support=40, lowest=500))  # mass on high ids only
    except TypeError:  # a ZipfChain without sparse supports
        pass
    return chains


@pytest.mark.parametrize("chain", _zipf_chains(), ids=lambda c: f"zipf-v{c.vocab}-s{getattr(c, 'support', 0)}")
def test_zipf_device_form_is_the_chain(chain):
    rng = np.random.default_rng(11)
    dc = device.device_chain(chain, "cpu", torch.float64)
    dc.with_pool(torch.full((device.GARBAGE_POOL, chain.vocab), 1.0 / chain.vocab, dtype=torch.float64))
    states, dstates = chain.start_states(64), torch.as_tensor(chain.start_states(64).view(np.int64))
    for _ in range(4):  # hashes of prefixes of length 0..3, with tokens drawn by both
        u = rng.random(64)
        x = chain.sample(states, u)
        dx = dc.sample(dstates, torch.as_tensor(u))
        np.testing.assert_array_equal(dx.numpy(), x)
        rows = torch.empty(64, chain.vocab, dtype=torch.float64)
        dc.fill(rows, dstates, None, None)
        np.testing.assert_array_equal(rows.numpy(), chain.probs(states))
        states, dstates = chain.advance(states, x), dc.advance(dstates, dx)
        np.testing.assert_array_equal(dstates.numpy().view(np.uint64), states)


def test_tabular_device_form_samples_and_pads_like_the_chain():
    rng = np.random.default_rng(12)
    dist = rng.dirichlet(np.ones(6), size=6)
    dist[2, 4:] = 0.0  # zero-mass tokens at the end: never drawn, whatever the rounding
    dist /= dist.sum(axis=1, keepdims=True)
    chain = first_order(dist, start=1)
    dc = device.device_chain(chain, "cpu", torch.float64)
    pool = torch.as_tensor(rng.dirichlet(np.ones(6), size=device.GARBAGE_POOL))
    dc.with_pool(pool)
    states = rng.integers(6, size=500)
    u = rng.random(500)
    u[:5] = np.nextafter(1.0, 0.0)
    np.testing.assert_array_equal(dc.sample(torch.as_tensor(states), torch.as_tensor(u)).numpy(), chain.sample(states, u))
    pad = torch.as_tensor(rng.random(500) < 0.3)
    pick = torch.as_tensor(rng.integers(device.GARBAGE_POOL, size=500))
    rows = torch.empty(500, 6, dtype=torch.float64)
    dc.fill(rows, torch.as_tensor(states), pad, pick)
    want = np.where(pad.numpy()[:, None], pool.numpy()[pick.numpy()], chain.dist[states])
    np.testing.assert_array_equal(rows.numpy(), want)


def test_a_chain_without_device_form_is_a_usage_error():
    class Other(TabularChain):
        pass

    with pytest.raises(UsageError, match="has no device form.*leave out --device"):
        device.device_chain(Other(np.ones((1, 2)) / 2, np.zeros((1, 2), dtype=np.int64), 0), "cpu", torch.float64)


# ---- the device path through the engine: positive and negative controls ---------------------


def _chain_defaults() -> list[str]:
    return [s.name for s in default_suite() if s.spec.mode != "exact" and s.spec.algorithm == "chain"]


def test_reference_passes_the_default_chain_scenarios_on_the_device():
    names = _chain_defaults()
    assert {"markov-v4", "ragged-v4", "sampling-greedy", "sampling-mixed"} <= set(names)
    result = specaudit.run(REF, names, adapter="torch", adapter_options={"device": "cpu"}, device="cpu",
                           samples=6000, seed=5, power=False, supervised=False)
    for s in result.scenarios:
        assert s.info.get("device") == "cpu", s.name  # measured on the device path, not the host
        assert s.error is None and s.status is Status.PASSED, (s.name, s.error, [(c.name, c.status) for c in s.checks])


@pytest.mark.slow
def test_reference_passes_the_default_suite_at_full_size_on_the_device(cli):
    done = cli("run", REF, "--adapter", "torch", "--device", "cpu", "--seed", "1")
    assert done.exit_code == 0, done.output


def test_mutant_fails_on_the_device(verifiers_dir):
    result = specaudit.run(f"{verifiers_dir / 'torch_like.py'}:resample_from_p", ["markov-v4"], adapter="torch",
                           adapter_options={"device": "cpu"}, device="cpu", samples=20000, seed=5, power=False,
                           diagnose=False, supervised=False)
    s = result.scenarios[0]
    assert s.info.get("device") == "cpu"
    assert s.status is Status.FAILED and any(c.name == "joint-law" and c.status is Status.FAILED for c in s.checks)


def test_null_rejection_rate_of_the_device_path():
    """Joint-law p-values of the reference over 24 seeds on the device path: uniform (KS), none below 1e-3."""
    from scipy import stats

    spec = dataclasses.replace(resolve(["markov-v4"])[0].spec, samples=3000)
    bench = _bench(spec, on_device=True)
    pvalues = []
    for seed in range(24):
        measured = bench.measured(bench.measure(1000 + seed))
        pvalues.append(next(c.pvalue for c in specaudit.checks.evaluate(measured, True) if c.name == "joint-law"))
    assert min(pvalues) > 1e-3
    assert stats.kstest(pvalues, "uniform").pvalue > 1e-3


# ---- reproducible, and the tallies add up ----------------------------------------------------


def test_device_blocks_are_reproducible_and_consistent():
    spec = dataclasses.replace(resolve(["ragged-v4"])[0].spec, samples=4000)
    bench = _bench(spec, on_device=True)
    a, b, c = bench.run(3, 0), bench.run(3, 0), bench.run(4, 0)
    np.testing.assert_array_equal(a.joint.counts, b.joint.counts)
    np.testing.assert_array_equal(a.rounds.accept_all, b.rounds.accept_all)
    assert not np.array_equal(a.joint.counts, c.joint.counts)
    assert a.sequences == 4000 and a.joint.counts.sum() == 4000
    assert a.rounds.accept_first.sum() == 4000  # one first round per sequence
    assert a.rounds.accept_all.sum() == a.rounds.moments[0]  # every round of every sequence, counted once
    # tokens: every round emits accepted + 1; the totals agree
    emitted = (a.rounds.accept_all * (np.arange(a.rounds.k + 1) + 1)).sum()
    assert emitted == a.rounds.moments[1]


# ---- transfers: none of p or q on the device path ----------------------------------------------


@pytest.mark.parametrize("name", ["markov-v4", "zipf-v32k"])
def test_no_pq_transfers_on_the_device_path_and_two_on_the_host_path(name):
    spec = dataclasses.replace(resolve([name])[0].spec, samples=200)
    vocab = spec.vocab
    host, dev = _bench(spec, on_device=False), _bench(spec, on_device=True)
    dev.device.chains()  # the chains' tables: once per process, before the calls
    with count_transfers() as on_host:
        h = host.run(1, 0)
    with count_transfers() as on_dev:
        d = dev.run(1, 0)
    assert h.rounds.calls > 0 and d.rounds.calls > 0
    assert on_host.payload(vocab) == 2 * h.rounds.calls  # the control: q and p through numpy on every call
    assert on_dev.payload(vocab) == 0
    # floating data crosses twice a block, whatever the calls: the draft law's CDF in, the round moments out
    assert [t.shape for t in on_dev.seen if t.floating] == [(len(spec.draft_law) - 1,), (5,)]


# ---- the verifier's outputs are checked on the device ------------------------------------------


def _run_target(target, names=("ragged-v4",), **extra):
    return specaudit.run(target, list(names), adapter="torch", adapter_options={"device": "cpu"}, device="cpu",
                         samples=500, seed=2, power=False, diagnose=False, supervised=False, **extra)


def test_a_contract_breach_on_the_device_names_its_clause():
    def overcount(draft, q, p, num_draft, generator):
        out, n_out = torch_reference(draft, q, p, num_draft, generator)
        return out, n_out + 1

    s = _run_target(overcount).scenarios[0]
    assert s.error is not None and s.error.clause == "n_out-range"


def test_int32_outputs_are_coerced_as_on_the_host():
    def narrow(draft, q, p, num_draft, generator):
        out, n_out = torch_reference(draft, q, p, num_draft, generator)
        return out.to(torch.int32), n_out.to(torch.int32)

    s = _run_target(narrow).scenarios[0]
    assert s.error is None and s.info.get("device") == "cpu"


def test_float32_device_path_passes():
    result = specaudit.run(REF, ["markov-v4"], adapter="torch", adapter_options={"device": "cpu", "dtype": "float32"},
                           device="cpu", samples=6000, seed=8, power=False, supervised=False)
    assert result.scenarios[0].status is Status.PASSED


# ---- hostile input: every refusal is exit 4 with a message that names the fix ---------------------


def test_cli_device_refusals(cli, verifiers_dir):
    bad = cli("run", REF, "--adapter", "torch", "--device", "tpu", "--samples", "100")
    assert bad.exit_code == int(ExitCode.USAGE_ERROR)
    assert "tpu" in bad.output
    tree = cli("run", REF, "--adapter", "torch", "--device", "cpu", "-s", "tree-iid-v4", "--samples", "100")
    assert tree.exit_code == int(ExitCode.USAGE_ERROR) and "algorithm: tree" in tree.output
    logits = cli("run", "specaudit.verifiers.logits:verify_reference", "--adapter", "torch", "--device", "cpu",
                 "--contract", "logits", "-s", "markov-v4", "--samples", "100")
    assert logits.exit_code == int(ExitCode.USAGE_ERROR)
    assert "the logits contract passes 6" in logits.output
    numpy_target = cli("run", "specaudit.verifiers.reference:verify", "--device", "cpu", "--samples", "100")
    assert numpy_target.exit_code == int(ExitCode.USAGE_ERROR) and "without an adapter" in numpy_target.output


def test_api_device_refusals():
    with pytest.raises(UsageError, match="no tensor form"):
        specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], device="cpu", samples=100,
                      supervised=False)
    with pytest.raises(UsageError, match="puts the verifier's tensors on 'cpu'"):
        specaudit.run(REF, ["markov-v4"], adapter="torch", device="cuda", samples=100, supervised=False)
    with pytest.raises(UsageError, match="allowed: 'cpu', 'cuda'"):
        specaudit.run(REF, ["markov-v4"], adapter="torch", device="gpu", samples=100, supervised=False)


def test_cli_device_run_is_supervised_and_recorded(cli, tmp_path):
    out = tmp_path / "r.json"
    done = cli("run", REF, "--adapter", "torch", "--device", "cpu", "-s", "markov-v4", "--samples", "3000",
               "--seed", "4", "--no-power", "--json", out)
    assert done.exit_code == 0, done.output
    import json

    doc = json.loads(out.read_text())
    assert doc["settings"]["device"] == "cpu"


def test_settings_record_the_device_and_read_it_back():
    from specaudit.engine.settings import RunSettings

    on = RunSettings(seed=3, device="cuda:1", shard=(0, 2))
    assert on.record()["device"] == "cuda:1"
    assert RunSettings.from_record({"alpha": on.alpha, "seed": on.seed, "settings": on.record()}) == on
    assert "device" not in RunSettings().record()  # the host path records nothing new


def test_cli_refuses_a_scenario_whose_chains_have_no_device_form(cli):
    from specaudit.scenarios.catalogue import shipped

    if "serving-mix" not in {s.name for s in shipped()}:
        pytest.skip("no batch-mix scenario shipped")
    done = cli("run", REF, "--adapter", "torch", "--device", "cpu", "-s", "serving-mix", "--samples", "200")
    assert done.exit_code == int(ExitCode.USAGE_ERROR)
    assert "has no device form" in done.output and "leave out --device" in done.output


@pytest.mark.parametrize(("flag", "given", "arg"), [("--device", "cpu", "device=cuda"), ("--dtype", "float32", "dtype=float16")])
def test_two_answers_for_one_adapter_option_are_refused(cli, flag, given, arg):
    # --device / --dtype are the adapter's options: a disagreeing --adapter-arg was resolved silently
    done = cli("run", REF, "--adapter", "torch", flag, given, "--adapter-arg", arg, "-s", "markov-v4", "--samples", "200")
    assert done.exit_code == int(ExitCode.USAGE_ERROR), done.output
    assert f"{flag} {given} and --adapter-arg {arg} disagree" in " ".join(done.output.split())
    same = cli("run", REF, "--adapter", "torch", flag, given, "--adapter-arg", f"{arg.split('=')[0]}={given}",
               "-s", "markov-v4", "--samples", "2000", "--no-power", "-q")
    assert same.exit_code == 0, same.output
