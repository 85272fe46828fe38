"""The logprobs check: a logits verifier's returned logprobs are those of the law its logprobs_mode names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specaudit.checks.logprobs import TOLERANCE, run_logprobs
from specaudit.contract.logits import logprobs_mode, logprobs_of, split_logprobs
from specaudit.errors import ExitCode, UsageError
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve
from specaudit.verifiers.logits import verify_reference, verify_reference_logprobs, verify_reference_raw_logprobs
from specaudit.verifiers.zoo.logits import logprobs_processed_as_raw


def _spec(name: str = "markov-v4"):
    return resolve([name])[0].spec


def _check(verify, mode: str, scenario: str = "markov-v4", seed: int = 1):
    done = run_logprobs(verify, mode, _spec(scenario), seed, "logits")
    assert done.error is None and len(done.checks) == 1
    return done.checks[0]


@pytest.mark.parametrize("scenario", ["markov-v4", "corners", "sampling-min-p", "sampling-greedy"])
def test_correct_logprobs_pass_in_both_modes_and_the_other_mode_fails(scenario: str) -> None:
    for verify, mode, wrong in ((verify_reference_logprobs, "processed", "raw"),
                                (verify_reference_raw_logprobs, "raw", "processed")):
        ok = _check(verify, mode, scenario)
        assert ok.status is Status.PASSED, ok.summary
        assert ok.data["positions"] > 0 and ok.data["largest_error"] < 1e-9
        bad = _check(verify, wrong, scenario)  # the same numbers under the other mode: the processing moves every law
        assert bad.status is Status.FAILED and bad.data["matches_other"], bad.summary


def test_the_vllm_30846_mutant_fails_naming_the_bug() -> None:
    mode = logprobs_mode(logprobs_processed_as_raw)
    assert mode == "raw"
    c = _check(logprobs_processed_as_raw, mode)
    assert c.status is Status.FAILED and c.data["wrong"] == c.data["positions"]
    assert "they are the processed law's (vLLM PR #30846" in c.summary and "expected" in c.summary


def test_float32_logprobs_pass_within_the_tolerance_and_a_small_shift_does_not() -> None:
    def float32(*args):
        out, n_out, lp = verify_reference_logprobs(*args)
        return out, n_out, lp.astype(np.float32)

    def shifted(*args):
        out, n_out, lp = verify_reference_logprobs(*args)
        return out, n_out, lp + 3 * TOLERANCE

    assert _check(float32, "processed").status is Status.PASSED
    c = _check(shifted, "processed")
    assert c.status is Status.FAILED and "match neither" in c.summary


@pytest.mark.parametrize(("returns", "says"), [
    (lambda r: r[:2], "expected (out, n_out, logprobs), got a 2-tuple"),
    (lambda r: (r[0], r[1], r[2][:, :-1]), "logprobs must be float [B, K+1]"),
    (lambda r: (r[0], r[1], np.zeros(r[2].shape, dtype=np.int64)), "logprobs must be float [B, K+1]"),
    (lambda r: (r[0][:, :-1], r[1], r[2]), "out"),
    (lambda r: (r[0], r[1], np.full(r[2].shape, np.nan)), "match neither"),  # NaN where a token was emitted
])
def test_a_malformed_logprobs_output_fails_saying_what_is_wrong(returns, says) -> None:
    c = _check(lambda *a: returns(verify_reference_logprobs(*a)), "processed")
    assert c.status is Status.FAILED and says in c.summary, c.summary


def test_the_split_keeps_the_signature_and_hands_the_simulation_out_and_n_out() -> None:
    import inspect

    split = split_logprobs(verify_reference_logprobs)
    assert logprobs_of(split) == ("processed", verify_reference_logprobs)
    assert inspect.signature(split) == inspect.signature(verify_reference_logprobs)
    assert split_logprobs(verify_reference) is verify_reference and logprobs_of(verify_reference) is None


@pytest.mark.parametrize("mode", ["raw_logprob", 3, ""])
def test_a_mode_that_is_not_one_is_a_usage_error_naming_the_attribute(mode) -> None:
    def verify(*a):
        return verify_reference_logprobs(*a)

    verify.logprobs_mode = mode  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match=r"verify\.logprobs_mode = .*not a logprobs mode"):
        split_logprobs(verify)


def test_other_contracts_and_trees_skip_it() -> None:
    done = run_logprobs(verify_reference_logprobs, "processed", _spec(), 1, "probs")
    assert done.checks[0].status is Status.SKIPPED and "--contract logits" in done.checks[0].summary


BOGUS = """
from specaudit.verifiers.logits import verify_reference_logprobs as _v
def verify(*a):
    return _v(*a)
verify.logprobs_mode = "raw_logprob"
"""


@pytest.mark.parametrize(("target", "code", "check"), [
    ("specaudit.verifiers.logits:verify_reference_logprobs", ExitCode.OK, "passed"),
    ("specaudit.verifiers.zoo.logits:logprobs_processed_as_raw", ExitCode.CHECKS_FAILED, "failed"),
])
def test_the_cli_runs_the_check_and_gates_on_it(tmp_path: Path, target: str, code: int, check: str) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "specaudit", "run", target, "--contract", "logits", "-s", "markov-v4",
                           "--samples", "1000", "--seed", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    checks = {c["name"]: c for c in json.loads(out.read_text())["scenarios"][0]["checks"]}
    assert checks["logprobs"]["status"] == check and checks["joint-law"]["status"] == "passed"


def test_the_cli_refuses_a_mode_that_is_not_one(tmp_path: Path) -> None:
    (tmp_path / "bogus.py").write_text(BOGUS)
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "specaudit", "run", f"{tmp_path / 'bogus.py'}:verify", "--contract", "logits",
                           "-s", "markov-v4", "--samples", "500", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stderr[-2000:]
    assert "verify.logprobs_mode = 'raw_logprob': not a logprobs mode" in proc.stderr
    assert "did you mean 'raw_logprobs'?" in proc.stderr


def test_no_false_alarm_and_full_power_over_seeds() -> None:
    # exact: a correct verifier never fails it, the mutant always does (measured 0 / 2,700 and 2,700 / 2,700 over
    # 300 seeds on nine scenarios, float32 logprobs included; here 30 seeds on three)
    for scenario in ("markov-v4", "sampling-top-p", "serving-mix"):
        spec = _spec(scenario)
        for seed in range(30):
            assert run_logprobs(verify_reference_logprobs, "processed", spec, seed, "logits").checks[0].status is Status.PASSED
            assert run_logprobs(logprobs_processed_as_raw, "raw", spec, seed, "logits").checks[0].status is Status.FAILED
