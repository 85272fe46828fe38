"""The compiled hot path (specaudit.simulate.kernels) gives exactly what the numpy simulator gives."""

import sys

import numpy as np
import pytest

import specaudit
from specaudit.chains.tabular import first_order
from specaudit.errors import ContractError
from specaudit.simulate import kernels, tables
from specaudit.simulate.chain import JointCounts, Plan, simulate
from specaudit.verifiers import reference
from specaudit.verifiers.zoo import chain as mutants

try:
    from specaudit.simulate import _kernels
except ImportError:
    pytest.skip("the C extension specaudit.simulate._kernels is not built (no C compiler at install): "
                "the numpy simulator runs instead", allow_module_level=True)


@pytest.fixture(autouse=True)
def compiled_path(monkeypatch):
    """Every test here gets the compiled kernels, even in a session run with SPECAUDIT_NO_KERNELS=1."""
    monkeypatch.delenv(kernels.SWITCH, raising=False)
    kernels.load.cache_clear()
    yield
    monkeypatch.undo()
    kernels.load.cache_clear()


class Recorder:
    """A sink other than JointCounts: it sees every finished sequence, in order."""

    def __init__(self):
        self.rows = []

    def observe(self, sequences):
        self.rows.append(sequences.copy())


def _chains(vocab, seed=5):
    rng = np.random.default_rng(seed)
    return (first_order(rng.dirichlet(np.ones(vocab), size=vocab), 0),
            first_order(rng.dirichlet(np.ones(vocab), size=vocab), 1))


def _simulate(monkeypatch, compiled, verify, vocab, length, law, samples=3000, batch=512, seed=3):
    if compiled:
        assert kernels.load() is not None
    monkeypatch.setattr(kernels, "load", kernels.load if compiled else (lambda: None))
    target, draft = _chains(vocab)
    joint, rec = JointCounts(vocab, length), Recorder()
    stats = simulate(verify, target, draft, Plan(length, samples, batch, np.asarray(law, dtype=float)),
                     np.random.default_rng(seed), np.random.default_rng(seed + 1), [joint, rec])
    data = stats.to_dict()
    data.pop("verifier_seconds")
    return data, joint.counts, np.concatenate(rec.rows)


CASES = {
    # name: vocab, length, draft-count law (K = len - 1)
    "whole-path tables (m = K)": (4, 3, [0, 0, 0, 1]),
    "ragged, padded rows": (4, 3, [0.2, 0.3, 0.5, 0.0]),
    "long sequences, several rounds": (3, 7, [0.1, 0, 0.4, 0.5]),
    "K = 8: drafts in several path blocks (m < K)": (4, 5, [0] * 8 + [1]),
    "K = 0": (4, 3, [1]),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("verify", [reference.verify, mutants.resample_from_p], ids=["reference", "resample_from_p"])
def test_compiled_and_numpy_simulators_agree_exactly(monkeypatch, name, verify):
    vocab, length, law = CASES[name]
    fast = _simulate(monkeypatch, True, verify, vocab, length, law, samples=2999)  # drains a partial batch
    slow = _simulate(monkeypatch, False, verify, vocab, length, law, samples=2999)
    assert fast[0] == slow[0]
    assert np.array_equal(fast[1], slow[1]) and fast[1].sum() == 2999
    assert np.array_equal(fast[2], slow[2])


def test_per_state_tables_path_agrees_when_whole_path_tables_are_too_large(monkeypatch):
    monkeypatch.setattr(tables, "BLOCK_ENTRIES", 0)
    fast = _simulate(monkeypatch, True, reference.verify, 4, 3, [0, 0, 0, 1])
    slow = _simulate(monkeypatch, False, reference.verify, 4, 3, [0, 0, 0, 1])
    assert fast[0] == slow[0] and np.array_equal(fast[1], slow[1])


def test_outputs_of_other_integer_types_are_coerced_the_same_way(monkeypatch):
    def int32_ids(d, q, p, nd, rng):
        out, n_out = reference.verify(d, q, p, nd, rng)
        return out.astype(np.int32), n_out.astype(np.int32)

    fast = _simulate(monkeypatch, True, int32_ids, 4, 3, [0.2, 0.3, 0.5, 0.0])
    ref = _simulate(monkeypatch, True, reference.verify, 4, 3, [0.2, 0.3, 0.5, 0.0])
    assert fast[0] == ref[0] and np.array_equal(fast[1], ref[1])


def _wrong_prefix(d, q, p, nd, rng):
    out, n_out = reference.verify(d, q, p, nd, rng)
    rows = np.flatnonzero(n_out > 1)
    out[rows[-1], 0] = (out[rows[-1], 0] + 1) % q.shape[-1]  # one row's accepted draft changed
    return out, n_out


def _id_equal_v(d, q, p, nd, rng):
    out, n_out = reference.verify(d, q, p, nd, rng)
    out[0, n_out[0] - 1] = q.shape[-1]
    return out, n_out


def _n_out_zero(d, q, p, nd, rng):
    out, n_out = reference.verify(d, q, p, nd, rng)
    n_out[-1] = 0
    return out, n_out


@pytest.mark.parametrize("broken", [_wrong_prefix, _id_equal_v, _n_out_zero])
def test_contract_breaches_are_named_the_same_way(monkeypatch, broken):
    messages = []
    for compiled in (True, False):
        with pytest.raises(ContractError) as err:
            _simulate(monkeypatch, compiled, broken, 4, 3, [0.2, 0.3, 0.5, 0.0])
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_switch_and_missing_extension_fall_back_to_numpy(monkeypatch):
    with monkeypatch.context() as m:
        m.setenv(kernels.SWITCH, "1")
        assert kernels.load() is None
    kernels.load.cache_clear()
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "specaudit.simulate._kernels", None)  # import -> ImportError
        assert kernels.load() is None
    kernels.load.cache_clear()
    assert kernels.load() is _kernels


def _begin_args(n=8, k=3, v=4, states=5, paths=64):
    rng = np.random.default_rng(0)
    sp = states * paths
    return [np.zeros(n, np.int64), rng.random((1, n)), paths, rng.random(sp), rng.integers(paths, size=sp),
            rng.integers(v, size=(paths, k)), rng.integers(states, size=(sp, k + 1)), np.empty((0, 0)),
            np.empty((0, 0)), np.full(n, k), np.empty((0, 0), np.int64), np.empty((0, 0), np.int64),
            np.empty((0, 0), np.int64), states, rng.random((states + 64, v)), rng.random((states + 64, v)),
            np.full((n, k + 1), -1), np.empty((n, k), np.int64), np.empty((n, k + 1), np.int64),
            np.empty((n, k + 1, v)), np.empty((n, k, v))]


def test_the_extension_refuses_wrong_arrays_instead_of_reading_out_of_bounds():
    args = _begin_args()
    assert _kernels.begin(*args) is None  # a well-formed call
    cases = {
        "non-contiguous": (20, lambda a: np.empty((16, 3, 4))[::2]),
        "wrong dtype": (0, lambda a: a.astype(np.int32)),
        "wrong ndim": (19, lambda a: a.reshape(a.shape[0], -1)),
        "p rows do not match the others": (19, lambda a: np.empty((a.shape[0] + 1, 4, 4))),
        "alias table too short": (4, lambda a: a[:-1]),
    }
    for i, bad in cases.values():
        broken = list(args)
        broken[i] = bad(args[i])
        with pytest.raises((TypeError, ValueError)):
            _kernels.begin(*broken)
    states_out = list(args)
    states_out[0] = np.full(8, 10**6, np.int64)  # a joint state past the tables
    with pytest.raises(ValueError, match="outside its table"):
        _kernels.begin(*states_out)


def test_a_whole_run_is_identical_with_and_without_the_kernels(monkeypatch):
    def run():
        result = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4", "ragged-v4", "greedy-markov"], seed=4,
                               samples=20_000, diagnose=False, suspect_level=0.0)
        return [(s.name, s.status, [(c.name, c.statistic, c.pvalue) for c in s.checks]) for s in result.scenarios]

    assert kernels.load() is not None
    fast = run()
    monkeypatch.setattr(kernels, "load", lambda: None)
    assert run() == fast
