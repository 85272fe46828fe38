"""Sampling conventions: each built-in order against the engine's released code, and the verdicts they decide.

The reference of a logits scenario is the engine's own non-speculative sampler
(:data:`specaudit.chains.processing.CONVENTIONS`). Each convention is compared with the engine's
function, read from its released wheel at test time (tests/helpers/released_samplers.py; HF from
the installed transformers), on random logits. Then the verdict matrix: a verifier with one
engine's order built in passes under that engine's convention and fails under the others, and the
pre-fix SGLang speculative verifier (SGLang PR #36173) fails under ``--convention sglang``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from released_samplers import released_file, released_function, source_of  # tests/helpers: pytest's pythonpath

import specaudit
from specaudit.chains.logits import LogitsChain, logits_chain
from specaudit.chains.processing import CONVENTIONS, SamplingParams, process
from specaudit.errors import ExitCode, UsageError
from specaudit.laws.chain import joint_probabilities
from specaudit.scenarios.loading import load_scenario
from specaudit.stats.power import power_against

SCENARIOS = Path(__file__).parents[2] / "scenarios"
TOPK_TOPP = str(SCENARIOS / "convention-top-k-top-p.yaml")
MIN_P = str(SCENARIOS / "convention-min-p.yaml")
VERIFIERS = {
    "hf-order": "specaudit.verifiers.logits:verify_hf_order",
    "vllm-order": "specaudit.verifiers.logits:verify_vllm_order",
    "sglang-order": "specaudit.verifiers.logits:verify_sglang_order",
    "sglang-pre-fix": "specaudit.verifiers.zoo.logits:sglang_speculative_order",
}
#: Parameter sets compared with the engines: each filter alone, pairs, and all three.
PARAMS = [
    SamplingParams(top_k=5), SamplingParams(top_p=0.8), SamplingParams(min_p=0.1),
    SamplingParams(temperature=0.7, top_k=8, top_p=0.75), SamplingParams(top_k=6, min_p=0.05),
    SamplingParams(top_p=0.9, min_p=0.1), SamplingParams(temperature=1.3, top_k=10, top_p=0.85, min_p=0.08),
]
SGLANG = ("sglang", "0.5.23", ("sglang/srt/layers/sampler.py",))
VLLM = ("vllm", "0.33.0", ("vllm/v1/sample/sampler.py", "vllm/v1/sample/ops/topk_topp_sampler.py",
                           "vllm/v1/sample/logits_processor/builtin.py"))


def _logits(rng: np.random.Generator) -> np.ndarray:
    return 2.5 * rng.standard_normal((64, 32))


# ---- the orders against the engines' own code --------------------------------------------------


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_hf_convention_is_transformers_warpers(params: SamplingParams) -> None:
    torch = pytest.importorskip("torch")
    from transformers.generation import logits_process as lp

    rng = np.random.default_rng(341)
    z = _logits(rng)
    warpers = [lp.TemperatureLogitsWarper(params.temperature)]
    if params.top_k:
        warpers.append(lp.TopKLogitsWarper(params.top_k))
    if params.top_p < 1:
        warpers.append(lp.TopPLogitsWarper(params.top_p))
    if params.min_p:
        warpers.append(lp.MinPLogitsWarper(params.min_p))
    scores = torch.tensor(z, dtype=torch.float64)
    for warper in warpers:
        scores = warper(None, scores)
    theirs = torch.softmax(scores, dim=-1).numpy()
    np.testing.assert_allclose(process(z, params), theirs, rtol=0, atol=1e-12)


def test_hf_generation_appends_top_k_top_p_min_p_in_that_order() -> None:
    from transformers.generation import utils

    source = source_of(Path(utils.__file__), "GenerationMixin._get_logits_processor")
    where = [source.index(f"{name}LogitsWarper(") for name in ("Temperature", "TopK", "TopP", "MinP")]
    assert where == sorted(where)


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_sglang_convention_is_the_released_sampler(params: SamplingParams) -> None:
    torch = pytest.importorskip("torch")
    path = released_file(*SGLANG, "sglang/srt/layers/sampler.py")
    sample = released_function(path, "top_k_top_p_min_p_sampling_from_probs_torch")
    rng = np.random.default_rng(342)
    z = _logits(rng)
    b, v = z.shape
    probs = torch.softmax(torch.tensor(z / params.temperature, dtype=torch.float64), dim=-1)
    _, weights, index, _ = sample(
        probs.clone(), torch.full((b,), params.top_k or v), torch.full((b,), params.top_p, dtype=torch.float64),
        torch.full((b,), params.min_p, dtype=torch.float64), params.min_p > 0, None, None,
        return_filtered_probs=True)
    theirs = torch.zeros_like(probs).scatter_(1, index.long(), weights).numpy()
    theirs /= theirs.sum(axis=-1, keepdims=True)  # torch.multinomial draws from the weights, normalised
    np.testing.assert_allclose(process(z, params.replace(convention="sglang")), theirs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_vllm_convention_is_the_released_sampler(params: SamplingParams) -> None:
    torch = pytest.importorskip("torch")
    ops = released_file(*VLLM, "vllm/v1/sample/ops/topk_topp_sampler.py")
    builtin = released_file(*VLLM, "vllm/v1/sample/logits_processor/builtin.py")
    top_k_only = released_function(ops, "apply_top_k_only")
    top_k_top_p = released_function(ops, "apply_top_k_top_p_pytorch", apply_top_k_only=top_k_only)
    min_p_apply = released_function(builtin, "MinPLogitsProcessor.apply")
    rng = np.random.default_rng(343)
    z = _logits(rng)
    b, v = z.shape
    logits = torch.tensor(z, dtype=torch.float64) / params.temperature  # Sampler.apply_temperature
    if params.min_p:  # the argmax-invariant processors, before top-k / top-p (Sampler.sample)
        state = type("MinP", (), {"min_p_count": b, "min_p": torch.full((b, 1), params.min_p, dtype=torch.float64)})
        logits = min_p_apply(state, logits)
    k = torch.full((b,), params.top_k, dtype=torch.long) if params.top_k else None
    p = torch.full((b,), params.top_p, dtype=torch.float64) if params.top_p < 1 else None
    theirs = torch.softmax(top_k_top_p(logits, k, p, allow_cpu_sync=True), dim=-1).numpy()
    np.testing.assert_allclose(process(z, params.replace(convention="vllm")), theirs, rtol=0, atol=1e-12)


def test_vllm_sampler_applies_min_p_before_top_k_top_p() -> None:
    sampler = released_file(*VLLM, "vllm/v1/sample/sampler.py")
    source = source_of(sampler, "Sampler.sample")
    assert source.index("apply_temperature(") < source.index("argmax_invariant") < source.index("self.topk_topp_sampler(")


def test_conventions_agree_with_one_filter_and_differ_with_two() -> None:
    rng = np.random.default_rng(344)
    z = _logits(rng)
    for one in (SamplingParams(top_k=5), SamplingParams(top_p=0.8), SamplingParams(min_p=0.1)):
        laws = [process(z, one.replace(convention=c)) for c in CONVENTIONS]
        for law in laws[1:]:
            np.testing.assert_allclose(law, laws[0], rtol=0, atol=1e-12)
    both = SamplingParams(top_k=5, top_p=0.6, min_p=0.2)
    laws = {c: process(z, both.replace(convention=c)) for c in CONVENTIONS}
    for a in laws:
        for c in laws:
            if a < c:
                assert 0.5 * np.abs(laws[a] - laws[c]).sum(axis=-1).max() > 0.05, (a, c)


# ---- verdicts per convention x verifier ----------------------------------------------------------

#: scenario -> verifier -> the conventions it passes under (every other one fails).
PASSES = {
    TOPK_TOPP: {"hf-order": {"hf", "vllm"}, "vllm-order": {"hf", "vllm"}, "sglang-order": {"sglang"},
                "sglang-pre-fix": {"hf", "vllm"}},  # min-p 0: hf = vllm, and the pre-fix order is hf's
    MIN_P: {"hf-order": {"hf"}, "vllm-order": {"vllm"}, "sglang-order": {"sglang"}, "sglang-pre-fix": set()},
}


@pytest.mark.parametrize("scenario", [TOPK_TOPP, MIN_P], ids=["top-k-top-p", "min-p"])
@pytest.mark.parametrize("convention", list(CONVENTIONS))
def test_verdicts_per_convention(scenario: str, convention: str) -> None:
    for name, target in VERIFIERS.items():
        result = specaudit.run(target, [scenario], contract="logits", convention=convention, seed=7, power=False)
        want = "passed" if convention in PASSES[scenario][name] else "failed"
        assert result.status.value == want, (name, convention, [(c.name, c.pvalue) for c in result.scenarios[0].checks])
        assert result.scenarios[0].info["reference"] == convention
    # the reference verifier follows the parameters' convention: it passes under each
    assert specaudit.run("reference-logits", [scenario], contract="logits", convention=convention, seed=7,
                         power=False).status.value == "passed"


@pytest.mark.parametrize(("scenario", "convention", "wrong"), [
    (TOPK_TOPP, "sglang", {"convention": "hf", "min_p": 0.0}),  # the pre-fix verifier's law under sglang
    (MIN_P, "sglang", {"convention": "hf", "min_p": 0.0}),
    (TOPK_TOPP, "hf", {"convention": "sglang"}),  # the fixed SGLang order under hf
    (MIN_P, "vllm", {"convention": "hf"}),
])
def test_power_of_the_wrong_order_at_the_scenarios_samples(scenario: str, convention: str, wrong: dict) -> None:
    # The wrong-order verifiers run the exact chain rule on a wrongly processed p (q right), so their output
    # law is the target chain under that processing: the exact joint law, no simulation.
    spec = load_scenario(scenario).spec
    reference, _ = dataclasses.replace(spec, convention=convention).chains()
    assert isinstance(reference, LogitsChain)
    law = joint_probabilities(logits_chain(reference.logits, reference.nxt, reference.start,
                                           reference.params.replace(**wrong)), spec.length)
    probs = joint_probabilities(reference, spec.length)
    tests = 3  # the joint law is one of about three gating checks of a logits scenario (Holm, Bonferroni bound)
    assert power_against(law.ravel(), probs.ravel(), spec.samples, 1e-3 / tests).power >= 0.99


# ---- hostile inputs and the report ----------------------------------------------------------------


def test_unknown_convention_in_a_scenario_is_a_usage_error_naming_file_line_and_key(cli, tmp_path: Path) -> None:
    text = Path(TOPK_TOPP).read_text().replace("samples: 50000\n", "samples: 50000\nconvention: sglnag\n")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = text.splitlines().index("convention: sglnag") + 1
    result = cli("run", "reference-logits", "--contract", "logits", "-s", str(path))
    assert result.exit_code == ExitCode.USAGE_ERROR
    assert f"{path}:{line}" in result.output and "convention" in result.output
    assert "'sglnag'" in result.output and "did you mean 'sglang'" in result.output


def test_unknown_convention_option_is_a_usage_error(cli) -> None:
    result = cli("run", "reference-logits", "--contract", "logits", "-s", TOPK_TOPP, "--convention", "hugging")
    assert result.exit_code == ExitCode.USAGE_ERROR
    assert "convention = 'hugging'" in result.output and "known: hf, vllm, sglang" in result.output
    with pytest.raises(UsageError, match="convention = 'x'"):
        SamplingParams(convention="x")


def test_report_names_the_reference(cli, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = cli("run", "reference-logits", "--contract", "logits", "-s", TOPK_TOPP, "--convention", "sglang",
                 "--samples", "2000", "--no-power", "--json", str(out))
    assert result.exit_code == ExitCode.OK, result.output
    assert "reference: sglang sampling convention (1 scenario)" in result.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["convention"] == "sglang"
    assert doc["scenarios"][0]["info"]["reference"] == "sglang"
