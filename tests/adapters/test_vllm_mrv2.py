"""The vllm-mrv2 adapter's layout, its options, and scripted uniforms inside Triton kernels (``tl.rand``).

The layout is checked against a pure-Python stand-in target (no vLLM, no Triton); the routing of
``tl.rand`` runs a small Triton kernel of this file in Triton's interpreter, in a child process
(``TRITON_INTERPRET=1`` must be set before triton is first imported).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specaudit.adapters import get  # noqa: E402
from specaudit.adapters.randomness import TRITON_UNREACHABLE, hashed, unreachable  # noqa: E402
from specaudit.adapters.vllm_mrv2 import RESAMPLE, packed  # noqa: E402
from specaudit.contract.uniforms import ScriptedUniforms  # noqa: E402
from specaudit.errors import ExitCode  # noqa: E402

REPO = Path(__file__).parents[2]


def test_packed_layout_has_a_leading_zero_drafts_after_the_last_token_and_a_bonus_per_row() -> None:
    draft = np.array([[2, 1, 0], [1, 0, 0]])
    p = np.full((2, 4, 3), 1 / 3)
    flat = packed(draft, p, np.array([2, 0]), np.array([10, 20]))
    assert flat["cu_num_logits"].tolist() == [0, 3, 4]  # 2 drafts + bonus, 0 drafts + bonus
    assert flat["draft_sampled"].tolist() == [0, 2, 1, 0]  # start holds the last token; draft i at start + 1 + i
    assert flat["expanded_local_pos"].tolist() == [0, 1, 2, 0]
    assert flat["expanded_idx_mapping"].tolist() == [0, 0, 0, 1]
    assert flat["pos"].tolist() == [10, 11, 12, 20]
    assert flat["target_logits"].shape == (4, 3)


def _echo_target(seen: dict[str, Any]) -> Any:
    """A stand-in with MRv2's signature: accepts every draft, records what it was handed."""

    def rejection_sample(target_logits, draft_logits_cache, draft_sampled, cu_num_logits, pos, idx_mapping,
                         expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps, **kw):
        seen.update(cache=draft_logits_cache, temperature=temperature.clone(), kw=kw)
        cu = cu_num_logits.tolist()
        batch = len(cu) - 1
        sampled = torch.full((batch, num_speculative_steps + 1), 99, dtype=torch.int64)  # garbage past num_sampled
        n = torch.zeros(batch, dtype=torch.int32)
        for b in range(batch):
            drafts = draft_sampled[cu[b] + 1: cu[b + 1]].tolist()
            sampled[b, : len(drafts) + 1] = torch.tensor([*drafts, 0])
            n[b] = len(drafts) + 1
        return sampled, n

    return rejection_sample


def test_output_past_num_sampled_is_padded_and_temperature_scales_the_draft_logits() -> None:
    seen: dict[str, Any] = {}
    verify = get("vllm-mrv2").wrap(_echo_target(seen), {"temperature": "0.5,2"})
    rng = np.random.default_rng(32)
    q = np.full((2, 2, 3), 1 / 3)
    q[0, 0] = [0.5, 0.5, 0.0]
    p = np.full((2, 3, 3), 1 / 3)
    out, n = verify(np.array([[1, 2], [0, 0]]), q, p, np.array([2, 1]), rng)
    assert out.tolist() == [[1, 2, 0], [0, 0, -1]] and n.tolist() == [3, 2]
    assert seen["temperature"].tolist() == [0.5, 2.0]
    values = seen["cache"].values  # pre-temperature logits: T * log q, so softmax(values / T) = q
    assert torch.allclose(torch.softmax(values[0, 0] / 0.5, -1), torch.tensor([0.5, 0.5, 0.0]))
    assert torch.allclose(torch.softmax(values[1, 0] / 2.0, -1), torch.full((3,), 1 / 3))


def test_modes_pass_the_release_arguments() -> None:
    seen: dict[str, Any] = {}
    args = (np.array([[0]]), np.full((1, 1, 2), 0.5), np.full((1, 2, 2), 0.5), np.array([1]))
    for mode, expect in [("block", {"use_block_verification": True}), ("fly", {"fly_window_size": 2,
                                                                                 "fly_entropy_threshold": 0.3})]:
        get("vllm-mrv2").wrap(_echo_target(seen), {"mode": mode, "fly_window": "2"})(*args, np.random.default_rng(1))
        assert seen["kw"] == expect
    get("vllm-mrv2").wrap(_echo_target(seen), {"mode": "synthetic", "synthetic_rate": "0.25"})(*args,
                                                                                                 np.random.default_rng(1))
    assert seen["kw"]["synthetic_conditional_rates"].tolist() == [0.25]


def test_scripted_call_without_the_interpreter_is_out_of_reach_and_says_why() -> None:
    # what a GPU run meets: the kernel's tl.rand is compiled, the script reaches nothing
    verify = get("vllm-mrv2").wrap(_echo_target({}), {})
    src = ScriptedUniforms(0, seed=1)
    if importlib.util.find_spec("triton") is not None and os.environ.get("TRITON_INTERPRET") == "1" \
            and "triton.language" in sys.modules:
        pytest.skip("this process runs Triton in its interpreter: tl.rand is reachable here")
    verify(np.array([[0]]), np.full((1, 1, 2), 0.5), np.full((1, 2, 2), 0.5), np.array([1]), src)
    assert unreachable(src) == TRITON_UNREACHABLE and hashed(src) == RESAMPLE
    assert src.draws == 0


@pytest.mark.parametrize(("arg", "message"), [
    ("temperature=0", "temperatures must be finite and > 0"),
    ("temperature=nan", "temperatures must be finite and > 0"),
    ("mode=speculative", "allowed: standard, block, synthetic, fly"),
    ("synthetic_rate=1.5", "a synthetic acceptance rate lies in [0, 1]"),
    ("fly_window=0", "FLy's window is at least 1"),
])
def test_hostile_adapter_arguments_are_usage_errors(arg: str, message: str, tmp_path: Path) -> None:
    target = tmp_path / "t.py"
    target.write_text("def rejection_sample(*a, **k):\n    raise AssertionError('never called')\n")
    proc = subprocess.run([sys.executable, "-m", "specaudit.cli", "run", f"{target}:rejection_sample", "--adapter",
                           "vllm-mrv2", "--adapter-arg", arg, "-s", "markov-v4", "--samples", "10"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stdout[-1000:] + proc.stderr[-1000:]
    assert message in proc.stderr, proc.stderr[-1000:]


#: A Triton kernel that stores tl.rand(seed, offsets): under a scripted routed call it must store the
#: script's values (rounded down into [0, 1) of float32); outside one, Triton's own Philox draws.
_KERNEL = r'''
import json
import numpy as np
import torch
import triton
import triton.language as tl
from specaudit.adapters.randomness import op_draws, routed
from specaudit.contract.uniforms import ScriptedUniforms

@triton.jit
def draw(out_ptr, seed, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.rand(seed, offs))

def run(rng):
    out = torch.empty(4, dtype=torch.float32)
    with routed(rng):
        draw[(1,)](out, 7, N=4)
    return out.tolist()

src = ScriptedUniforms(0, seed=1)
scripted = run(src)
real = run(np.random.default_rng(32))
print(json.dumps({"scripted": scripted, "coins": src.coins, "ops": op_draws(src), "real": real,
                  "after": run(np.random.default_rng(32))}))
'''


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_tl_rand_in_an_interpreted_kernel_takes_the_scripted_uniforms() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", _KERNEL], capture_output=True, text=True, env=env, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    below_one = float(np.nextafter(np.float32(1), np.float32(0)))
    assert got["scripted"] == [0.0, below_one, 0.0, below_one]  # ScriptedUniforms alternates 0.0, 1 - 2**-53
    assert got["coins"] == 4 and got["ops"] == {"tl.rand": 4}
    # the negative control: an ordinary rng leaves Triton's own Philox draws, the same for the same seed
    assert got["real"] == got["after"] and len(set(got["real"])) == 4 and 0.0 not in got["real"]


#: A chain verifier whose acceptance test runs in a Triton kernel drawing tl.rand (this file's own code,
#: written for the controls below): RULE is `<=` (accepts p = 0 at u = 0) or `<` (correct). Replacements
#: and the bonus are drawn by inverse CDF on the harness rng (routed: scripted in the probe).
_KERNEL_VERIFIER = r'''
import numpy as np
import torch
import triton
import triton.language as tl
from specaudit.adapters.randomness import routed

@triton.jit
def accept_kernel(p_ptr, q_ptr, out_ptr, seed, N: tl.constexpr, LENIENT: tl.constexpr):
    offs = tl.arange(0, N)
    u = tl.rand(seed, offs)
    p = tl.load(p_ptr + offs)
    q = tl.load(q_ptr + offs)
    if LENIENT:
        ok = u * q <= p
    else:
        ok = u * q < p
    tl.store(out_ptr + offs, ok.to(tl.int32))

def _sample(w, u):
    c = np.cumsum(w)
    return int(min(np.searchsorted(c, u * c[-1], side="right"), np.flatnonzero(w > 0)[-1]))

def verify(draft, q, p, num_draft, rng):
    B, K = draft.shape
    out = np.full((B, K + 1), -1, dtype=np.int64)
    n_out = np.zeros(B, dtype=np.int64)
    with routed(rng) as seed:
        for b in range(B):
            k = int(num_draft[b])
            n = 1 << max(k - 1, 0).bit_length()
            pd = np.zeros(n, np.float32); qd = np.ones(n, np.float32)
            pd[:k] = p[b, np.arange(k), draft[b, :k]]; qd[:k] = q[b, np.arange(k), draft[b, :k]]
            ok = torch.zeros(n, dtype=torch.int32)
            if k:
                accept_kernel[(1,)](torch.from_numpy(pd), torch.from_numpy(qd), ok, (seed + b) % 2**31, N=n,
                                    LENIENT=RULE == "<=")
            j = 0
            while j < k and ok[j]:
                out[b, j] = draft[b, j]; j += 1
            w = np.maximum(p[b, j] - q[b, j], 0) if j < k else p[b, j]
            if w.sum() <= 0:
                w = p[b, j]
            out[b, j] = _sample(w, float(rng.random())); n_out[b] = j + 1
    return out, n_out
'''


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.parametrize(("rule", "code", "status"), [("<=", ExitCode.CHECKS_FAILED, "failed"), ("<", ExitCode.OK, "passed")])
def test_the_boundary_probe_reaches_a_triton_kernels_tl_rand(rule: str, code: int, status: str, tmp_path: Path) -> None:
    # positive control (`<=`: the probe's accepts-p0 finding, through tl.rand) and negative control (`<`: passes)
    path = tmp_path / "kernel_verifier.py"
    path.write_text(f"RULE = {rule!r}\n" + _KERNEL_VERIFIER)
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-m", "specaudit.cli", "run", f"{path}:verify", "-s", "markov-v4",
                           "--samples", "2000", "--seed", "32", "--no-power", "--json", str(tmp_path / "r.json")],
                          capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
    assert proc.returncode == code, proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["scenarios"][0]["checks"]}
    probe = checks["adversarial-uniforms"]
    assert probe["status"] == status, probe["summary"]
    assert probe["data"]["op_draws"]["tl.rand"] > 0
    if rule == "<=":
        assert probe["data"]["classes"] == ["accepts-p0"]
