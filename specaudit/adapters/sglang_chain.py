"""SGLang's Triton chain verifier ``chain_speculative_sampling_triton``: ``--adapter sglang_chain``.

Drives a target with the signature of sglang ``sglang/kernels/ops/speculative/reject_sampling.py``
(read in the 0.5.16 to 0.5.23 wheels) through the chain contract::

    chain_speculative_sampling_triton(predicts[B*(K+1)] int32 (out), accept_index[B, K+1] int32 (out),
        accept_token_num[B] int32 (out), candidates[B, K+1] int64, retrive_index[B, K+1] int64,
        retrive_next_token, retrive_next_sibling (not read in chain verification),
        uniform_samples[B, K] f32, uniform_samples_for_final_sampling[B] f32,
        target_probs[B, K+1, V], draft_probs[B, K, V], threshold_single, threshold_acc,
        deterministic, *, block_verification=False)   # block_verification from 0.5.22

Slot 0 of a row is the root (the context), slots 1..K its drafts: ``candidates[b, 1 + j] =
draft[b, j]``; ``retrive_index[b, i] = b * (K + 1) + i`` is where slot i's prediction goes in the
flat ``predicts``. The kernel tests draft ``step`` against ``target_probs[b, step - 1]`` and
``draft_probs[b, step - 1]`` with coin ``uniform_samples[b, step - 1]``, writes ``accept_index[b,
0..a]`` (root first), ``accept_token_num[b] = a`` and, at those positions of ``predicts``, the a
accepted drafts and then the token drawn at the stop with ``uniform_samples_for_final_sampling[b]``
(by inverse CDF of ``max(p - q, 0)``, or of p after all K). The adapter reads the emitted tokens
back as ``predicts[accept_index[b, 0..a]]`` and checks ``accept_index`` is ``retrive_index``'s
prefix and ``a`` at most the row's real drafts.

The uniforms are the caller's: the adapter draws them from the harness rng (float32, as SGLang
makes them; ``rng.random(..., dtype=float32)``), so a seeded run is reproducible and the
adversarial-uniforms probe's scripted values (0.0, the largest float32 below 1) reach the kernel's
acceptance test and its final draw directly.

``block_verification=true`` runs the kernel's block mode (Sun et al. 2024, Algorithm 2): it is
audited with the block scenarios (``algorithm: block``, e.g. ``-s block-extreme``); a release
without the parameter is a usage error. Ragged rows (``num_draft[b] < K``) are padded as in the
``flashinfer`` adapter: a phantom id V with target probability 0 and draft probability 1 on every
padded position, which both modes reject, so a row stops at ``num_draft[b]`` with the canonical
law there. The kernel computes in the dtype of the probabilities (``dtype``, float32 as SGLang).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.adapters import DEVICE, DTYPE, Adapter, Option, parse_bool
from specaudit.adapters.flashinfer import padded
from specaudit.adapters.randomness import routed
from specaudit.errors import ContractError, UsageError


def build(
    target: Callable[..., Any], device: str = "cpu", dtype: str = "float32", block_verification: bool = False
) -> Callable[..., Any]:
    """Return the canonical verifier that calls a target in SGLang's chain layout."""
    import torch

    from specaudit.adapters.torch import check_device, to_torch, torch_dtype

    check_device(device)
    fdt = torch_dtype(dtype)
    if block_verification and not _takes_block_verification(target):
        raise UsageError("--adapter-arg block_verification=true: this target has no block_verification parameter "
                         "(sglang added it to chain_speculative_sampling_triton in 0.5.22)")
    extra = {"block_verification": True} if block_verification else {}

    def verify(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, rng: Any) -> Any:
        batch, k = draft.shape
        m = k + 1
        nd = np.asarray(num_draft, dtype=np.int64)
        arrays = padded(draft, q, p, nd)
        candidates = np.zeros((batch, m), dtype=np.int64)
        candidates[:, 1:] = arrays["draft_token_ids"]
        retrive_index = (np.arange(batch)[:, None] * m + np.arange(m)[None, :]).astype(np.int64)
        unlinked = np.full((batch, m), -1, dtype=np.int64)
        uniforms = rng.random((batch, k), dtype=np.float32)  # one coin per draft slot
        final = rng.random(batch, dtype=np.float32)  # the stop's (or bonus) draw
        with torch.inference_mode(), routed(rng, device):
            predicts = torch.full((batch * m,), -1, dtype=torch.int32, device=device)
            accept_index = torch.full((batch, m), -1, dtype=torch.int32, device=device)
            accept_num = torch.zeros(batch, dtype=torch.int32, device=device)
            if batch:
                target(predicts, accept_index, accept_num, to_torch(candidates, device), to_torch(retrive_index, device),
                       to_torch(unlinked, device), to_torch(unlinked, device), to_torch(uniforms, device),
                       to_torch(final, device), to_torch(arrays["target_probs"], device, fdt),
                       to_torch(arrays["draft_probs"], device, fdt), 1.0, 1.0, True, **extra)
            flat = predicts.cpu().numpy().astype(np.int64)
            index = accept_index.cpu().numpy().astype(np.int64)
            acc = accept_num.cpu().numpy().astype(np.int64)
        return _emitted(flat, index, acc, retrive_index, nd)

    return verify


def _emitted(flat: np.ndarray, index: np.ndarray, acc: np.ndarray, retrive_index: np.ndarray,
             nd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return canonical (out, n_out) from predicts / accept_index / accept_token_num, checking the layout."""
    batch, m = index.shape
    bad = np.flatnonzero((acc < 0) | (acc > nd))
    if bad.size:
        b = int(bad[0])
        raise ContractError("sglang-accept-num", f"SGLang chain layout: accept_token_num[{b}] = {int(acc[b])}; allowed "
                            f"0..{int(nd[b])} (the row's real drafts)")
    on = np.arange(m)[None, :] <= acc[:, None]
    wrong = on & (index != retrive_index)
    if wrong.any():
        b, i = (int(x[0]) for x in np.nonzero(wrong))
        raise ContractError("sglang-accept-index", f"SGLang chain layout: accept_index[{b}, {i}] = {int(index[b, i])}, "
                            f"expected retrive_index[{b}, {i}] = {int(retrive_index[b, i])} (accepted slots in order)")
    out = np.where(on, flat[np.where(on, retrive_index, 0)], -1)
    return out.astype(np.int64), (acc + 1).astype(np.int64)


def _takes_block_verification(target: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return True  # unreadable (a compiled op): let the call say
    return "block_verification" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


ADAPTER = Adapter(
    "sglang_chain",
    "SGLang chain_speculative_sampling_triton: root + K slots, caller-made float32 uniforms, chain or block mode",
    build,
    options=(
        DEVICE,
        Option("dtype", str, "float32", DTYPE.help, DTYPE.choices),
        Option("block_verification", parse_bool, False, "run the kernel's block mode (sglang 0.5.22+; audit it "
               "with algorithm: block scenarios)"),
    ),
    requires=("torch",),
    extra="torch",
)
