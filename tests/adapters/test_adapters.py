"""Adapters: the mechanism, the torch contract, vLLM's packed and FlashInfer's padded layouts.

Layout-faithful CPU verifiers live in tests/verifiers/{torch_like,vllm_like,flashinfer_like}.py;
each layout has a correct verifier that must pass and broken ones that must fail.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import specaudit  # noqa: E402
from specaudit import adapters  # noqa: E402
from specaudit.adapters import flashinfer as fi_adapter  # noqa: E402
from specaudit.adapters import randomness, torch_reference  # noqa: E402
from specaudit.adapters import vllm as vllm_adapter  # noqa: E402
from specaudit.errors import ExitCode, UsageError  # noqa: E402
from specaudit.results import Status  # noqa: E402
from specaudit.scenarios.loading import load_scenario, parse_scenario  # noqa: E402

SCEN = ["markov-v4", "ragged-v4", "peaked-v8"]


def _scenarios(names):
    from pathlib import Path

    root = Path(__file__).parents[2] / "scenarios"
    return [load_scenario(root / f"{n}.yaml") for n in names]


def _run(target, names=SCEN, samples=8000, seed=5, **kw):
    # in this process: the tests look at what adapters and verifiers recorded (supervised runs keep that in a child)
    return specaudit.run(target, _scenarios(names), samples=samples, seed=seed, diagnose=False, supervised=False, **kw)


def _statuses(result):
    return {s.name: (s.status, s.error.clause if s.error else None) for s in result.scenarios}


# ---- the mechanism ------------------------------------------------------------------------


def test_parse_args_and_unknown_option():
    assert adapters.parse_args(["dtype=float32", " device = cpu "]) == {"dtype": "float32", "device": "cpu"}
    with pytest.raises(UsageError, match="expected key=value"):
        adapters.parse_args(["dtype"])
    with pytest.raises(UsageError, match=r"has no option 'dtpye' \(did you mean 'dtype'\?\)"):
        adapters.get("torch").parse_options({"dtpye": "float32"})
    with pytest.raises(UsageError, match=r"dtype = 'float8'; allowed: float64, float32"):
        adapters.get("torch").parse_options({"dtype": "float8"})


def test_unknown_adapter_suggests_closest():
    with pytest.raises(UsageError, match=r"unknown adapter 'toch' \(did you mean 'torch'\?\)"):
        adapters.get("toch")


def test_options_without_adapter_is_a_usage_error():
    with pytest.raises(UsageError, match="without an adapter; add --adapter NAME"):
        _run("specaudit.verifiers.reference:verify", ["markov-v4"], samples=10, adapter_options={"dtype": "float32"})


def test_user_adapter_by_import_path_and_entry_point(monkeypatch, verifiers_dir):
    calls = []

    def build(target, **options):
        """Numpy target called with its arguments reversed (a made-up layout)."""
        calls.append(options)

        def verify(draft, q, p, num_draft, rng):
            return target(rng, num_draft, p, q, draft)

        return verify

    mod = types.ModuleType("my_layout")
    mod.build = build
    mod.reversed_reference = lambda rng, nd, p, q, d: specaudit.verifiers.reference.verify(d, q, p, nd, rng)
    monkeypatch.setitem(sys.modules, "my_layout", mod)
    result = _run("my_layout:reversed_reference", ["markov-v4"], samples=3000, adapter="my_layout:build",
                  adapter_options={"flag": "x"})
    assert result.exit_code() == ExitCode.OK
    assert calls == [{"flag": "x"}]  # options of a plain-callable adapter pass through as given

    class EntryPoint:
        name, value = "reversed", "my_layout:build"

        def load(self):
            return build

    monkeypatch.setattr(adapters, "_entry_points", lambda: {"reversed": EntryPoint()})
    assert adapters.get("reversed").source == "entry point my_layout:build"
    assert "reversed" in [a.name for a in adapters.available()]
    assert _run("my_layout:reversed_reference", ["markov-v4"], samples=3000, adapter="reversed").exit_code() == ExitCode.OK


def test_scenario_adapter_field_and_command_line_precedence():
    text = (
        "schema: 1\nname: s\nvocab: 3\nk: 2\nlength: 2\nsamples: 3000\n"
        "target: {kind: dirichlet, seed: 1}\ndraft: {kind: dirichlet, seed: 2}\n"
        "adapter: {name: torch, options: {dtype: float32}}\n"
    )
    loaded = parse_scenario(text)
    assert loaded.spec.adapter.name == "torch"
    assert loaded.spec.content_hash() == parse_scenario(text.rsplit("adapter", 1)[0]).spec.content_hash()
    binding = adapters.bind("x", specaudit.verifiers.reference.verify, [loaded.spec])
    assert binding.choices[0].label() == "torch(dtype=float32)"
    cli = adapters.bind("x", specaudit.verifiers.reference.verify, [loaded.spec], "torch", {"device": "cpu"})
    assert cli.choices[0].options == {"dtype": "float32", "device": "cpu"}  # merged, command line last
    result = specaudit.run("specaudit.adapters.torch_reference:verify", [loaded], seed=1)
    assert result.exit_code() == ExitCode.OK
    assert result.scenarios[0].info["adapter"] == "torch(dtype=float32)"


def test_missing_extra_is_named(monkeypatch):
    from specaudit.contract.targets import load_target
    from specaudit.errors import TargetLoadError

    for name in ("transformers", "transformers.generation", "transformers.generation.utils"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(TargetLoadError, match=r"it is optional; pip install -e '\.\[hf\]' in specaudit's checkout"):
        load_target("hf-transformers")


# ---- torch ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_reference_passes(dtype):
    result = _run("specaudit.adapters.torch_reference:verify", adapter="torch", adapter_options={"dtype": dtype})
    assert result.exit_code() == ExitCode.OK, _statuses(result)
    assert result.settings["adapter"] == f"torch(dtype={dtype})"


def test_torch_residual_bug_fails(verifiers_dir):
    result = _run(f"{verifiers_dir / 'torch_like.py'}:resample_from_p", adapter="torch", adapter_options={"dtype": "float32"})
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert result.scenarios[0].check("joint-law").status is Status.FAILED


def test_torch_adapter_is_reproducible_and_refuses_missing_cuda():
    rng = np.random.default_rng(3)
    verify = adapters.get("torch").wrap(torch_reference.verify, {"dtype": "float32"})
    d = rng.integers(4, size=(64, 3))
    q = rng.dirichlet(np.ones(4), size=(64, 3))
    p = rng.dirichlet(np.ones(4), size=(64, 4))
    nd = rng.integers(4, size=64)
    a = verify(d, q, p, nd, np.random.default_rng(9))
    b = verify(d, q, p, nd, np.random.default_rng(9))
    assert np.array_equal(a[0], b[0]) and a[0].dtype == np.int64
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="sees no CUDA device"):
            adapters.get("torch").wrap(torch_reference.verify, {"device": "cuda"})


class _Script:
    """The minimal scripted protocol: ``random(size)`` and a class marker."""

    scripted = True

    def __init__(self):
        self.draws = 0

    def random(self, size=None, dtype=np.float64):
        n = int(np.prod(size)) if size is not None else 1
        idx = self.draws + np.arange(n)
        self.draws += n
        out = np.where(idx % 2 == 0, 0.0, 1 - 2.0**-53)
        return out.reshape(size) if size is not None else float(out[0])


def test_scripted_source_reaches_torch_draws():
    src = _Script()
    with randomness.scripted_torch(src):
        u = torch.rand(4, dtype=torch.float32)
        e = torch.empty(2, dtype=torch.float64).exponential_()
        m = torch.multinomial(torch.tensor([[0.0, 0.5, 0.5, 0.0]]), 1)  # u = 0: first positive index
        m2 = torch.tensor([0.2, 0.3, 0.5, 0.0]).multinomial(1)  # u = 1 - 2**-53: last positive index
    assert u.tolist() == [0.0, 1 - 2.0**-24, 0.0, 1 - 2.0**-24]  # rounded down into [0, 1) of float32
    assert e[0] == torch.finfo(torch.float64).tiny and e[1] == pytest.approx(53 * np.log(2))  # never 0: torch never returns it
    assert m.item() == 1 and m2.item() == 2
    assert src.draws == 8
    assert torch.rand(3).max() < 1  # restored


def test_scripted_uniform_reaches_boundary_bug(verifiers_dir):
    sys.path.insert(0, str(verifiers_dir))
    try:
        import vllm_like
    finally:
        sys.path.remove(str(verifiers_dir))
    # one row, one draft of target probability 0: accepted only by `p/q >= u` at u = 0
    d = np.array([[2]])
    q = np.array([[[0.25, 0.25, 0.5]]])
    p = np.array([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]])
    nd = np.array([1])
    for target, accepted in ((vllm_like.rejection_sample_strict, False), (vllm_like.rejection_sample, True),
                             (vllm_like.rejection_sample_v015, True)):
        out, n_out = adapters.get("vllm").wrap(target).__call__(d, q, p, nd, _Script())
        assert bool(n_out[0] == 2) is accepted, (target.__name__, out)


# ---- vLLM packed layout ------------------------------------------------------------------


def test_vllm_packing_is_inclusive_cumsum():
    draft = np.array([[5, 6, 7], [8, 9, 9], [1, 2, 3]])
    q = np.zeros((3, 3, 10))
    p = np.zeros((3, 4, 10))
    flat = vllm_adapter.packed(draft, q, p, np.array([2, 0, 3]))
    assert flat["draft_token_ids"].tolist() == [5, 6, 1, 2, 3]
    assert flat["cu_num_draft_tokens"].tolist() == [2, 2, 5]
    assert flat["target_probs"].shape == (5, 10)


def test_vllm_layout_correct_passes(verifiers_dir):
    # a per-row Python loop: fewer sequences than the other layouts
    result = _run(f"{verifiers_dir / 'vllm_like.py'}:rejection_sample_strict", SCEN + ["zero-drafts"], samples=3000,
                  adapter="vllm")
    assert result.exit_code() == ExitCode.OK, _statuses(result)


def test_vllm_reads_the_sixth_parameter_by_version(verifiers_dir):
    sys.path.insert(0, str(verifiers_dir))
    try:
        import vllm_like
    finally:
        sys.path.remove(str(verifiers_dir))
    assert vllm_adapter.sixth_argument(vllm_like.rejection_sample) == "logits"  # vLLM >= 0.16 (PR #32852)
    assert vllm_adapter.sixth_argument(vllm_like.rejection_sample_v015) == "probs"  # vLLM <= 0.15
    assert vllm_adapter.sixth_argument(lambda *args: None) == "probs"  # no names to read: probabilities
    assert vllm_adapter.sixth_argument(vllm_like.rejection_sample, "probs") == "probs"  # --adapter-arg wins
    p = np.array([0.5, 0.0, 0.5])
    logits = vllm_adapter.as_logits(p)
    assert logits[1] == -np.inf and np.allclose(np.exp(logits) / np.exp(logits).sum(), p)


@pytest.mark.parametrize("target", ["rejection_sample", "rejection_sample_v015"])
def test_vllm_as_released_is_lossless_in_law_and_accepts_p0_at_u0(verifiers_dir, target):
    # vLLM v1's `p / q >= u` (every release checked): the law is right, the boundary is not
    result = _run(f"{verifiers_dir / 'vllm_like.py'}:{target}", ["markov-v4", "ragged-v4"], samples=3000, adapter="vllm")
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    for s in result.scenarios:
        by_name = {c.name: c for c in s.checks}
        statistical = [c for c in s.checks if c.pvalue is not None]
        assert statistical and all(c.status is Status.PASSED for c in statistical), _statuses(result)
        assert by_name["adversarial-uniforms"].status is Status.FAILED
        assert "p = 0" in by_name["adversarial-uniforms"].summary


def test_vllm_probabilities_passed_as_logits_fail(verifiers_dir):
    # the adapter before this change passed probabilities to vLLM >= 0.16, which softmaxes them again
    result = _run(f"{verifiers_dir / 'vllm_like.py'}:rejection_sample_strict", ["markov-v4"], samples=3000,
                  adapter="vllm", adapter_options={"target_input": "probs"})
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    joint = next(c for c in result.scenarios[0].checks if c.name == "joint-law")
    assert joint.status is Status.FAILED, _statuses(result)


@pytest.mark.parametrize("bug", ["cu_exclusive", "cu_drop_last"])
def test_vllm_cu_off_by_one_fails(verifiers_dir, bug):
    result = _run(f"{verifiers_dir / 'vllm_like.py'}:{bug}", ["markov-v4", "ragged-v4"], samples=3000, adapter="vllm")
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert all(s.status in (Status.FAILED, Status.ERROR) for s in result.scenarios), _statuses(result)


def test_vllm_ngram_mode_needs_one_hot_drafts(verifiers_dir):
    ok = _run(f"{verifiers_dir / 'vllm_like.py'}:rejection_sample_strict", ["greedy-drafter"], samples=3000, adapter="vllm",
              adapter_options={"draft_probs": "none"})
    assert ok.exit_code() == ExitCode.OK, _statuses(ok)
    bad = _run(f"{verifiers_dir / 'vllm_like.py'}:rejection_sample", ["markov-v4"], samples=100, adapter="vllm",
               adapter_options={"draft_probs": "none"})
    assert "needs a one-hot drafter" in bad.scenarios[0].error.message


# ---- FlashInfer padded layout ------------------------------------------------------------


def test_flashinfer_padding_uses_phantom_id():
    draft = np.array([[1, 2], [3, 3]])
    arrays = fi_adapter.padded(draft, np.full((2, 2, 4), 0.25), np.full((2, 3, 4), 0.25), np.array([2, 0]))
    assert arrays["draft_token_ids"].tolist() == [[1, 2], [4, 4]]
    assert arrays["draft_probs"][1, :, 4].tolist() == [1.0, 1.0]
    assert arrays["target_probs"][..., 4].max() == 0.0  # never accepted: the row stops at num_draft


@pytest.mark.parametrize("target", ["chain_speculative_sampling", "chain_uniform_samples"])
def test_flashinfer_layout_correct_passes(verifiers_dir, target):
    result = _run(f"{verifiers_dir / 'flashinfer_like.py'}:{target}", SCEN + ["zero-drafts"], samples=5000, adapter="flashinfer")
    assert result.exit_code() == ExitCode.OK, _statuses(result)


def test_flashinfer_stride_off_by_one_fails(verifiers_dir):
    result = _run(f"{verifiers_dir / 'flashinfer_like.py'}:stride_bug", ["markov-v4"], adapter="flashinfer")
    assert result.scenarios[0].check("joint-law").status is Status.FAILED


@pytest.mark.parametrize("bug", ["counters_overwrite", "emitted_overcount"])
def test_flashinfer_counter_bugs_are_layout_errors(verifiers_dir, bug):
    result = _run(f"{verifiers_dir / 'flashinfer_like.py'}:{bug}", ["ragged-v4"], samples=2000, adapter="flashinfer")
    err = result.scenarios[0].error
    assert err is not None and err.clause == "layout" and "emitted_draft_token_num" in err.message


# ---- CLI --------------------------------------------------------------------------------


def test_cli_adapter_options_and_listing(verifiers_dir):
    from click.testing import CliRunner

    from specaudit.cli import main

    runner = CliRunner()
    listing = runner.invoke(main, ["adapters"])
    assert listing.exit_code == 0 and "flashinfer" in listing.output and "alias hf-transformers" in listing.output
    ok = runner.invoke(main, ["run", "specaudit.adapters.torch_reference:verify", "-s", str(verifiers_dir.parent.parent / "scenarios/markov-v4.yaml"),
                              "--adapter", "torch", "--dtype", "float32", "--device", "cpu", "--samples", "3000", "--seed", "1"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(main, ["run", "specaudit.verifiers.reference:verify", "--adapter-arg", "dtype=float32", "--samples", "10"])
    assert bad.exit_code == int(ExitCode.USAGE_ERROR) and "without an adapter" in bad.output


# ---- every built-in adapter routes every global RNG ------------------------------------


def test_torch_adapter_routes_numpy_global_and_python_random():
    import random

    pytest.importorskip("torch")
    from specaudit.contract.uniforms import ScriptedUniforms

    seen = []

    def target(draft, q, p, num_draft, generator):  # draws from numpy's global RNG and Python's random only
        seen.append((float(np.random.random()), random.random()))
        batch = draft.shape[0]
        return np.zeros((batch, draft.shape[1] + 1), np.int64) - 1, np.zeros(batch, np.int64)

    verify = adapters.get("torch").wrap(target)
    args = (np.zeros((0, 1), np.int64), np.zeros((0, 1, 2)), np.zeros((0, 2, 2)), np.zeros(0, np.int64))
    verify(*args, np.random.default_rng(3))
    verify(*args, np.random.default_rng(3))
    verify(*args, np.random.default_rng(4))
    assert seen[0] == seen[1] != seen[2]  # reproducible from the run's seed, and moves with it
    su = ScriptedUniforms(1)
    verify(*args, su)
    assert seen[3] == (1 - 2**-53, 0.0) and su.coins == 2  # the scripted uniforms reached both sources
