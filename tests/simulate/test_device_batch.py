"""Device-sized batches: on a CUDA device the batch comes from its free memory and --max-device-memory.

CPU only: ``torch.cuda.mem_get_info`` is faked. The figures of issue 33: ``-s llama3-v128k
--device cuda`` on a 139 GiB device made calls of ~27 rows, sized from the 2 GiB host budget.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import specaudit  # noqa: E402
from specaudit.contract.tensors import TensorCall  # noqa: E402
from specaudit.engine.settings import RunSettings  # noqa: E402
from specaudit.errors import ExitCode, UsageError  # noqa: E402
from specaudit.scenarios.catalogue import resolve  # noqa: E402
from specaudit.simulate import device  # noqa: E402
from specaudit.simulate.tables import CALL_BYTES, rows_within  # noqa: E402

GIB = 1 << 30
REF = "specaudit.adapters.torch_reference:verify"
V, K = 128_256, 2  # llama3-v128k: V = 128256, K = 8 capped at the L - 1 = 2 tokens a sequence still needs


@pytest.fixture
def h200(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Fake a CUDA device with 139 GiB free of 141 GiB; return the devices it was asked about."""
    asked: list[object] = []

    def mem_get_info(where: object = None) -> tuple[int, int]:
        asked.append(where)
        return 139 * GIB, 141 * GIB

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    return asked


def test_on_a_cuda_device_the_batch_is_sized_from_its_free_memory(h200):
    budget = device.batch_budget("cuda", 2 * GIB)
    # 80% of 139 GiB is 111.2 GiB: rounded down to 3 x 32 GiB = 96 GiB (a seed's run repeats while 80% of the free
    # memory stays in [96, 128) GiB)
    assert budget == 96 * GIB and h200 == [torch.device("cuda")]
    row = 8 * V * (2 * K + 1)  # float64 p and q of one row: (2K + 1) V entries
    rows = rows_within(budget, V, K, 8, None)
    assert rows == budget // (3 * row)  # 3 payload items per entry (p, q and the verifier's temporaries)
    assert 3 * row * (rows + 1) > budget  # the budget is filled
    assert 3 * row * rows * 2 >= 139 * GIB  # within 2x of all the device's free memory (the goal of issue 33)
    host = rows_within(2 * GIB, V, K, 8)  # what a run sized from --max-memory gets (the host path's cap)
    assert host == min(2 * GIB // (3 * row), CALL_BYTES // row) and rows > 100 * host


def test_the_free_memory_budget_moves_in_steps_so_a_seeds_batches_repeat(monkeypatch):
    rng = np.random.default_rng(33)
    free = [120 * GIB, 125 * GIB, 139 * GIB, 159 * GIB]  # 80%: 96 .. 127.2 GiB, one step
    budgets = set()
    for f in free:
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda where=None, f=f: (f, 141 * GIB))
        budgets.add(device.batch_budget("cuda", 2 * GIB))
    assert budgets == {96 * GIB}
    for f in rng.integers(1 << 20, 1 << 40, size=200):  # never above the share, never 1.5x below it
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda where=None, f=int(f): (f, f))
        share = int(int(f) * device.DEVICE_SHARE)
        assert share / 1.5 <= device.batch_budget("cuda", 2 * GIB) <= share


@pytest.mark.parametrize(("asked", "got"), [(40 * GIB, 40 * GIB), (200 * GIB, 139 * GIB), (1, 1)])
def test_max_device_memory_bounds_the_batch_and_cannot_exceed_what_is_free(h200, asked, got):
    assert device.batch_budget("cuda:1", 2 * GIB, asked) == got
    assert h200 == [torch.device("cuda:1")]


def test_on_the_cpu_the_batch_stays_in_host_memory(monkeypatch):
    def no_device(*args: object) -> tuple[int, int]:
        raise AssertionError("mem_get_info asked for a CPU run")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_device)
    assert device.batch_budget("cpu", 3 * GIB, 40 * GIB) == 3 * GIB


def test_the_device_path_sizes_each_block_from_the_budget(h200, monkeypatch):
    seen: list[int] = []
    monkeypatch.setattr(device, "simulate", lambda *args, max_memory: seen.append(max_memory) or "stats")
    target, draft = resolve(["markov-v4"])[0].spec.chains()
    path = device.DevicePath(TensorCall(lambda *a: None, "cuda", "float64"), target, draft, max_device_memory=10 * GIB)
    monkeypatch.setattr(path, "chains", lambda: (target, draft))  # no device tables: no device here
    rng = np.random.default_rng(0)
    assert path.simulate(None, np.random.SeedSequence(0), rng, [], None, 2 * GIB) == "stats"  # type: ignore[arg-type]
    assert seen == [10 * GIB] and path.budget == 10 * GIB


def test_a_run_records_and_prints_its_rows_per_call(cli):
    spec = resolve(["markov-v4"])[0].spec
    row = 8 * spec.vocab * (2 * spec.k + 1)  # float64 bytes of one row's p and q

    def rows(max_memory: int) -> float:
        result = specaudit.run(REF, ["markov-v4"], adapter="torch", adapter_options={"device": "cpu"}, device="cpu",
                               samples=4000, seed=1, power=False, diagnose=False, max_memory=max_memory)
        (s,) = result.scenarios
        assert s.info["device"] == "cpu" and s.info["device_budget"] == max_memory
        return s.info["rows_per_call"]

    assert 5 <= rows(3 * row * 10) <= 10  # a budget of 10 rows binds: calls of at most 10 rows
    assert rows(GIB) > 1000  # 1 GiB does not: the block's sequences (continuous batching) fill the calls
    out = cli("run", REF, "--adapter", "torch", "--device", "cpu", "-s", "markov-v4", "--samples", "4000",
              "--no-power", "--max-memory", "1")
    assert out.exit_code == ExitCode.OK, out.output
    assert re.search(r"markov-v4: on cpu: [\d.]+ rows per verifier call \(batch sized from 1.00 GiB\)", out.output)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "lots", "2e6", ""])
def test_a_bad_max_device_memory_exits_4_and_says_what_is_allowed(cli, value):
    res = cli("run", REF, "--adapter", "torch", "--device", "cpu", "-s", "markov-v4", "--max-device-memory", value)
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert "Invalid value for '--max-device-memory'" in res.output
    assert "allowed: a number 0 < x <= 1,048,576, e.g. 40 or 0.5" in res.output


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "1"])
def test_a_bad_max_device_memory_is_a_usage_error_from_the_api(value):
    with pytest.raises(UsageError, match=r"max_device_memory = .*; allowed: bytes >= 1 \(an integer\), or None"):
        RunSettings(max_device_memory=value)
