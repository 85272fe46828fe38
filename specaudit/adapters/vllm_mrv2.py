"""vLLM Model Runner V2's rejection sampler: ``--adapter vllm-mrv2`` (the layout of ``vllm@0.34`` and later).

The target has the signature of
``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py:rejection_sample`` (read in the 0.34.0
wheel)::

    rejection_sample(target_logits[L, V], draft_logits_cache, draft_sampled[L], cu_num_logits[B+1],
                     pos[L], idx_mapping[B], expanded_idx_mapping[L], expanded_local_pos[L],
                     temperature[B] f32, seed[B] i64, num_speculative_steps,
                     synthetic_conditional_rates=None, use_fp64=False, use_block_verification=False,
                     ..., fly_window_size=0, fly_entropy_threshold=0.3, ...) -> (sampled[B, K+1] i64, num_sampled[B] i32)

as ``RejectionSampler.__call__`` (vllm/v1/worker/gpu/spec_decode/rejection_sampler.py) calls it:

- request ``b`` owns logits ``cu_num_logits[b] .. cu_num_logits[b+1]`` (a leading 0): its
  ``num_draft[b]`` draft positions then the bonus position, so ``L = sum(num_draft + 1)``; the
  target logits are processed already (``apply_sampling_params``), so the adapter passes ``log p``
  (-inf where p = 0) of ``p[b, :num_draft[b] + 1]``; the bonus is sampled inside;
- ``draft_sampled[start + 1 + i]`` is draft ``i`` (position ``start`` holds the last accepted
  token: the adapter puts 0 there); ``expanded_local_pos`` counts 0.. within a request (a 0 after
  a position marks it the bonus), ``expanded_idx_mapping`` names the request of each logit,
  ``idx_mapping`` the request state of each request (the identity here);
- ``draft_logits_cache.values[b, i]`` holds draft ``i``'s logits *before* temperature (the kernel
  divides them by ``temperature[b]``): the adapter passes ``T_b log q`` so the law the kernel
  verifies against is ``q`` at every temperature, and the target's ``log p`` as it is (processed);
  ``--adapter-arg temperature=0.5,1,2`` cycles per-request temperatures over the rows (each row
  sees its own temperature: a kernel that read another request's would verify the wrong q).
  ``draft_logits=none`` passes no cache: one-hot drafts (n-gram), which needs a one-hot drafter;
- ``seed[b]`` is a fresh 63-bit integer per request and call from the harness rng; ``pos`` is a
  prompt length (drawn per request) plus the local position: the kernel draws ``u = tl.rand(seed,
  pos)`` (floored at 4.66e-10) and Gumbel noise for the resample from the same seed;
- the output's row ``b`` holds ``num_sampled[b]`` ids; what lies past them is left uninitialised
  by the kernel (``new_empty``) and is padded with -1 here.

Modes (``--adapter-arg mode=...``): ``standard`` (Leviathan et al.: the chain contract),
``block`` (``use_block_verification=True``: Sun et al.'s block verification, run it on a block
scenario such as ``block-extreme``), ``synthetic`` (``synthetic_conditional_rates``: accepts by a
fixed rate per step, ignoring p and q, a benchmarking mode: lossy, and specaudit must fail it) and
``fly`` (``fly_window_size = W``: FLy's entropy-gated deferral of rejections, audited as found).

Greedy rows (temperature 0: accept iff the draft is the target's argmax) follow the greedy
contract, not the chain's: they are exercised by ``tests/engines/test_vllm.py``, not by a
distribution check here, so temperatures must be > 0.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.adapters import DEVICE, Adapter, Option
from specaudit.adapters.randomness import (
    TRITON_UNREACHABLE,
    hashed_replacements,
    is_scripted,
    out_of_reach,
    routed,
    triton_interpreted,
)
from specaudit.errors import ContractError

PLACEHOLDER = -1
#: How the kernel samples replacement and bonus tokens: from no random source a script can reach.
RESAMPLE = ("Gumbel-max over murmur3 hashes of (seed, pos, token) in _resample_kernel, "
            "vllm/v1/worker/gpu/sample/gumbel.py:gumbel_noised_argmax")
MODES = ("standard", "block", "synthetic", "fly")


def temperatures(value: Any) -> tuple[float, ...]:
    """Parse ``--adapter-arg temperature=T[,T...]`` (each > 0)."""
    temps = tuple(float(t) for t in str(value).split(","))
    if not temps or any(not t > 0 or t != t or t == float("inf") for t in temps):
        raise ValueError("temperatures must be finite and > 0 (greedy rows, T = 0, follow the greedy contract)")
    return temps


def _rate(value: Any) -> float:
    rate = float(value)
    if not 0.0 <= rate <= 1.0:
        raise ValueError("a synthetic acceptance rate lies in [0, 1]")
    return rate


def _window(value: Any) -> int:
    window = int(value)
    if window < 1:
        raise ValueError("FLy's window is at least 1")
    return window


def packed(draft: np.ndarray, p: np.ndarray, num_draft: np.ndarray, prompt: np.ndarray) -> dict[str, np.ndarray]:
    """Return Model Runner V2's flat arrays (numpy) for canonical inputs: one logit per draft and one bonus per row."""
    batch = draft.shape[0]
    per_row = num_draft + 1
    cu = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    rows = np.repeat(np.arange(batch), per_row)
    local = np.arange(int(cu[-1])) - np.repeat(cu[:-1], per_row)
    sampled = np.zeros(int(cu[-1]), dtype=np.int64)
    is_draft = local > 0  # position start + 1 + i holds draft i
    sampled[is_draft] = draft[rows[is_draft], local[is_draft] - 1]
    with np.errstate(divide="ignore"):
        target_logits = np.log(p[rows, local])
    return {
        "target_logits": target_logits,
        "draft_sampled": sampled,
        "cu_num_logits": cu,
        "pos": (prompt[rows] + local).astype(np.int64),
        "idx_mapping": np.arange(batch, dtype=np.int32),
        "expanded_idx_mapping": rows.astype(np.int32),
        "expanded_local_pos": local.astype(np.int32),
    }


def build(
    target: Callable[..., Any], device: str = "cpu", mode: str = "standard", temperature: tuple[float, ...] = (1.0,),
    synthetic_rate: float = 0.5, fly_window: int = 1, fly_entropy_threshold: float = 0.3, draft_logits: str = "given",
) -> Callable[..., Any]:
    """Return the canonical verifier that calls a target in Model Runner V2's layout."""
    import torch

    from specaudit.adapters.torch import check_device, mark_logits_input, to_torch

    check_device(device)
    try:
        params = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        params = []
    cache_object = len(params) > 1 and params[1] == "draft_logits_cache"  # 0.34: a DraftLogitsCache; 0.33: the tensor

    def verify(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, rng: Any) -> Any:
        batch, k = draft.shape
        nd = np.asarray(num_draft, dtype=np.int64)
        if batch == 0:
            return np.zeros((0, k + 1), np.int64), np.zeros(0, np.int64)
        if is_scripted(rng):
            if not triton_interpreted():  # a kernel compiled for the GPU: tl.rand is out of reach
                out_of_reach(rng, TRITON_UNREACHABLE)  # the probe says "not applicable", with this reason
            hashed_replacements(rng, RESAMPLE)
            seeds, prompt = np.zeros(batch, np.int64), np.zeros(batch, np.int64)
        else:
            seeds = rng.integers(0, 2**63 - 1, size=batch, dtype=np.int64)
            prompt = rng.integers(0, 4096, size=batch, dtype=np.int64)
        flat = packed(draft, p, nd, prompt)
        temps = np.resize(np.asarray(temperature, dtype=np.float64), batch)
        with np.errstate(divide="ignore"):
            scaled = temps[:, None, None] * np.log(q)  # pre-temperature logits: softmax(scaled / T) = q
        values = to_torch(scaled.astype(np.float32), device)
        cache: Any = None
        if draft_logits == "given":
            cache = types.SimpleNamespace(values=values, row_mapping=None) if cache_object else values
        kwargs: dict[str, Any] = {}
        if mode == "block":
            kwargs["use_block_verification"] = True
        elif mode == "synthetic":
            kwargs["synthetic_conditional_rates"] = torch.full((k,), synthetic_rate, dtype=torch.float32, device=device)
        elif mode == "fly":
            kwargs["fly_window_size"] = fly_window
            kwargs["fly_entropy_threshold"] = fly_entropy_threshold
        # np.errstate: the interpreter computes -inf - -inf and log(0) of masked lanes in numpy
        with torch.inference_mode(), routed(rng, device), np.errstate(invalid="ignore", divide="ignore"):
            result = target(
                to_torch(flat["target_logits"].astype(np.float32), device),
                cache,
                to_torch(flat["draft_sampled"], device),
                to_torch(flat["cu_num_logits"], device),
                to_torch(flat["pos"], device),
                to_torch(flat["idx_mapping"], device),
                to_torch(flat["expanded_idx_mapping"], device),
                to_torch(flat["expanded_local_pos"], device),
                to_torch(temps.astype(np.float32), device),
                to_torch(seeds, device),
                k,
                **kwargs,
            )
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ContractError("layout", f"vLLM MRv2 layout: rejection_sample must return (sampled, num_sampled), "
                                          f"got {type(result).__name__}")
        sampled, num_sampled = (r.detach().cpu().numpy() for r in result)
        if sampled.shape != (batch, k + 1) or num_sampled.shape != (batch,):
            raise ContractError("layout", f"vLLM MRv2 layout: expected sampled ({batch}, {k + 1}) and num_sampled "
                                          f"({batch},), got {sampled.shape} and {num_sampled.shape}")
        n_out = num_sampled.astype(np.int64)
        if np.any(n_out < 0) or np.any(n_out > k + 1):
            raise ContractError("layout", f"vLLM MRv2 layout: num_sampled outside 0..{k + 1}: {n_out.tolist()}")
        out = np.where(np.arange(k + 1)[None, :] < n_out[:, None], sampled, PLACEHOLDER).astype(np.int64)
        return out, n_out

    return mark_logits_input(verify)  # logits, softmaxed inside in float32


ADAPTER = Adapter(
    "vllm-mrv2",
    "vLLM Model Runner V2 rejection_sample: draft logits, cu_num_logits with a leading 0, bonus inside, "
    "per-request temperature and int64 seeds, uniforms drawn in the Triton kernel",
    build,
    options=(
        DEVICE,
        Option("mode", str, "standard", "standard: chain; block: use_block_verification; synthetic: fixed acceptance "
               "rates (lossy by design); fly: FLy deferred rejections", MODES),
        Option("temperature", temperatures, (1.0,), "per-request temperatures > 0, cycled over the rows (e.g. 0.5,1,2)"),
        Option("synthetic_rate", _rate, 0.5, "mode=synthetic: the acceptance rate of every step"),
        Option("fly_window", _window, 1, "mode=fly: fly_window_size, the drafts that must follow a deferred rejection"),
        Option("fly_entropy_threshold", float, 0.3, "mode=fly: the top-k entropy at which a rejection may be deferred"),
        Option("draft_logits", str, "given", "given: pass q's logits; none: no cache (one-hot drafts, n-gram)",
               ("given", "none")),
    ),
    requires=("torch",),
    extra="torch",
)
