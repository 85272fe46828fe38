"""vLLM 0.33.0's own rejection sampler on a mixed greedy/sampled serving batch (``serving-mix``, logits contract).

The ``vllm`` adapter builds vLLM's ``SamplingMetadata`` per request (greedy rows at the input batch's
sentinel, 0; ``all_greedy`` / ``all_random`` False on a mixed batch). The released sampler
(``vllm/v1/sample/rejection_sampler.py``, 0.33.0: ``GREEDY_TEMPERATURE = 0``, ``is_greedy =
temperature == GREEDY_TEMPERATURE``) passes the joint law and greedy-rows. The mutant of vLLM PR
#27077 (the batch's sentinel moved to 0, the sampler's constant left at -1: greedy rows taken as
sampled) fails greedy-rows exactly and the joint law. The adversarial probe's ``accepts-p0`` finding
of 0.33.0 (pinned in test_vllm.py) fails both runs and is not what this test is about.

Cost: one child process (Triton interpreter, ``TRITON_INTERPRET=1`` before triton is imported), both
runs at N = 40 on the 2-core VM.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed: vLLM's kernels cannot run in Triton's interpreter", allow_module_level=True)

REPO = Path(__file__).parents[2]

_CHILD = r'''
import json, os
os.environ["TRITON_INTERPRET"] = "1"
import specaudit
from specaudit import engines
from specaudit.engines.fetch import IndexUnreachable

try:
    fn = engines.load("vllm@0.33.0").verifier
except IndexUnreachable as exc:
    print(json.dumps({"offline": str(exc)}))
    raise SystemExit(0)
released = fn.__globals__["GREEDY_TEMPERATURE"]
out = {"released_sentinel": released}
for name, sentinel in (("released", released), ("mutant", -1)):
    fn.__globals__["GREEDY_TEMPERATURE"] = sentinel  # the mutant: vLLM PR #27077's sampler constant
    res = specaudit.run(fn, "scenarios/serving-mix.yaml", adapter="vllm", contract="logits", samples=40, seed=32,
                        power=False, timeout=0)
    (s,) = res.scenarios
    out[name] = {"error": None if s.error is None else str(s.error),
                 "checks": {c.name: [c.status.value, c.summary] for c in s.checks}}
print(json.dumps(out))
'''


@pytest.mark.slow  # ~30 s in Triton's interpreter: run with -m slow (kept out of .ci/run's 15-minute budget)
def test_mixed_greedy_sampled_batch_on_vllm_0_33_0_and_the_pr_27077_mutant() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if "offline" in got:
        pytest.skip(f"offline: {got['offline']}")
    assert got["released_sentinel"] == 0  # 0.33.0's GREEDY_TEMPERATURE, read from the release
    ref, mutant = got["released"]["checks"], got["mutant"]["checks"]
    assert got["released"]["error"] is None and got["mutant"]["error"] is None
    for name in ("joint-law", "accept-length", "greedy-rows", "contract-clauses"):
        assert ref[name][0] == "passed", (name, ref[name])
    # tokens/step at N = 40 (seed 32) reads z = -2.44: SUSPECT, which a real run re-runs at 4x; at N = 100 z = -1.09
    assert ref["tokens-per-step"][0] in ("passed", "suspect"), ref["tokens-per-step"]
    assert "all" in ref["greedy-rows"][1] and "equal greedy decoding" in ref["greedy-rows"][1]
    assert mutant["greedy-rows"][0] == "failed", mutant["greedy-rows"]
    assert "differ from greedy decoding" in mutant["greedy-rows"][1]
    assert mutant["joint-law"][0] == "failed", mutant["joint-law"]


@pytest.mark.parametrize("value", ["1", "0.5", "nan", "inf", "x"])
def test_a_greedy_sentinel_above_zero_or_not_a_number_is_a_usage_error(value: str) -> None:
    from click.testing import CliRunner

    from specaudit.cli import main
    from specaudit.errors import ExitCode

    result = CliRunner().invoke(main, ["run", "specaudit.verifiers.reference:verify", "--adapter", "vllm",
                                       "--adapter-arg", f"greedy_temperature={value}", "-s", "toy-chain"])
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert "greedy_temperature" in result.output
