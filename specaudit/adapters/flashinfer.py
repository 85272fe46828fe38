"""FlashInfer's ``chain_speculative_sampling`` layout: ``--adapter flashinfer``, alias ``flashinfer-chain``.

The target has FlashInfer's signature, either the current one::

    chain_speculative_sampling(draft_probs[B, n, V], draft_token_ids[B, n], target_probs[B, n+1, V],
        maybe_output_accepted_token_num[B], maybe_output_emitted_draft_token_num[B],
        deterministic=True, generator=None, seed=None, offset=None)
        -> (output_token_ids int32[B, n+1] padded -1, accepted_num, emitted_num)

or the older one that takes ``uniform_samples[B, n+1]`` after ``draft_token_ids`` (detected by
that parameter name; the adapter then draws the uniforms from the harness rng). Both read from
flashinfer-ai/flashinfer ``flashinfer/sampling.py`` (current form at commit 01c897d7; the accept
test is ``u < p / q``, "r < p/q" in its docstring, as the fixture tests/verifiers/flashinfer_like.py). ``n`` is fixed
for the batch. The two counters are *added to in place*: the adapter hands them over holding a
non-zero base and checks, per row, that ``emitted`` grew by exactly the accepted prefix
(``n_out - 1``) and ``accepted`` (drafts that pass their own test, counted independently) by
between that and the row's real draft count (flashinfer #879: emitted counted past the real
drafts of a padded row).

Ragged rows (``num_draft[b] < n``) are made by padding: the vocabulary gets one phantom id ``V``
with target probability 0 and draft probability 1, and every position from ``num_draft[b]`` on
proposes it. Its acceptance test ``u * 1 < 0`` always fails, so the row stops exactly at
``num_draft[b]``, where the residual ``max(p - onehot(V), 0)`` is ``p[b, num_draft[b]]`` — the
canonical bonus law. A target that emits the phantom id is caught by the vocab-range clause.

Randomness. A target with ``seed`` and ``offset`` parameters (flashinfer-python 0.7.4
``flashinfer/sampling.py``: an int, or int64 tensors with one value per output row, feeding the
kernel's Philox stream) gets per-row tensors drawn from the harness rng (``seeds=per-row``, the
default there): every row a fresh seed and offset each call, so a run is reproducible from its seed
and no two rows or calls share a stream. Otherwise (``seeds=generator``) it gets a
``torch.Generator`` seeded from the rng. The kernel draws its uniforms on the device, so the
adversarial-uniforms probe cannot reach them (it says "not applicable": the draws were seeds).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.adapters import DEVICE, DTYPE, Adapter, Option, parse_bool
from specaudit.adapters.randomness import routed
from specaudit.errors import ContractError

PLACEHOLDER = -1


def padded(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray) -> dict[str, np.ndarray]:
    """Return FlashInfer's fixed-n arrays for ragged canonical inputs (phantom id V on padded positions)."""
    batch, k = draft.shape
    vocab = p.shape[2]
    pad = np.arange(k)[None, :] >= num_draft[:, None]
    width = vocab + 1 if pad.any() else vocab
    draft_probs = np.zeros((batch, k, width), dtype=np.float64)
    target_probs = np.zeros((batch, k + 1, width), dtype=np.float64)
    draft_probs[..., :vocab] = q
    target_probs[..., :vocab] = p
    ids = draft.astype(np.int32, copy=True)
    if pad.any():
        ids[pad] = vocab
        draft_probs[pad] = 0.0
        draft_probs[pad, vocab] = 1.0
    return {"draft_probs": draft_probs, "draft_token_ids": ids, "target_probs": target_probs}


def build(
    target: Callable[..., Any], device: str = "cpu", dtype: str = "float32", deterministic: bool = True,
    seeds: str = "auto",
) -> Callable[..., Any]:
    """Return the canonical verifier that calls a target in FlashInfer's chain layout."""
    import torch

    from specaudit.adapters.torch import check_device, to_torch, torch_dtype

    check_device(device)
    fdt = torch_dtype(dtype)
    try:
        takes_uniforms = "uniform_samples" in inspect.signature(target).parameters
        per_row = {"seed", "offset"} <= set(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        takes_uniforms = per_row = False
    if seeds != "auto":
        per_row = seeds == "per-row"

    def verify(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, rng: Any) -> Any:
        batch, k = draft.shape
        nd = np.asarray(num_draft, dtype=np.int64)
        arrays = padded(draft, q, p, nd)
        base_accepted = (np.arange(batch) % 5 + 1).astype(np.int32)  # non-zero: "added to in place"
        base_emitted = (np.arange(batch) % 7 + 2).astype(np.int32)
        # float32 draws, as the kernel takes them: a float64 1 - 2**-53 would round up to 1.0
        uniforms = rng.random((batch, k + 1), dtype=np.float32) if takes_uniforms else None
        with torch.inference_mode(), routed(rng, device) as seed:
            dp = to_torch(arrays["draft_probs"], device, fdt)
            ids = to_torch(arrays["draft_token_ids"], device)
            tp = to_torch(arrays["target_probs"], device, fdt)
            accepted = to_torch(base_accepted, device).clone()
            emitted = to_torch(base_emitted, device).clone()
            if uniforms is not None:  # takes_uniforms
                u = to_torch(uniforms, device, torch.float32)
                result = target(dp, ids, u, tp, accepted, emitted, deterministic)
            elif per_row:
                row_seed = to_torch(rng.integers(0, np.iinfo(np.int64).max, size=batch, dtype=np.int64), device)
                row_offset = to_torch(rng.integers(0, 1 << 40, size=batch, dtype=np.int64), device)
                result = target(dp, ids, tp, accepted, emitted, deterministic, seed=row_seed, offset=row_offset)
            else:
                generator = torch.Generator(device=device).manual_seed(seed)
                result = target(dp, ids, tp, accepted, emitted, deterministic, generator=generator)
        if isinstance(result, (tuple, list)):
            tokens = result[0]
            if len(result) == 3:
                accepted, emitted = result[1], result[2]
        else:
            tokens = result
        res = tokens.detach().cpu().numpy() if hasattr(tokens, "detach") else np.asarray(tokens)
        if res.shape != (batch, k + 1) or not np.issubdtype(res.dtype, np.integer):
            raise ContractError(
                "layout", f"FlashInfer layout: output_token_ids must be int [B, n+1] = ({batch}, {k + 1}), "
                f"got {res.dtype} {res.shape}"
            )
        n_out = (res != PLACEHOLDER).sum(axis=1).astype(np.int64)
        _check_counters(
            np.asarray(accepted.cpu()) - base_accepted, np.asarray(emitted.cpu()) - base_emitted, n_out, nd
        )
        return res.astype(np.int64), n_out

    return verify


def _check_counters(accepted: np.ndarray, emitted: np.ndarray, n_out: np.ndarray, nd: np.ndarray) -> None:
    """Check that the in-place counters grew by the emitted prefix and a plausible accepted count."""
    bad = np.flatnonzero(emitted != n_out - 1)
    if bad.size:
        b = int(bad[0])
        raise ContractError(
            "layout", f"FlashInfer layout: row {b}: emitted_draft_token_num grew by {int(emitted[b])}, but the row "
            f"emitted {int(n_out[b]) - 1} accepted drafts (num_draft = {int(nd[b])}); the counter must be added to in "
            "place by the accepted prefix length"
        )
    bad = np.flatnonzero((accepted < emitted) | (accepted > nd))
    if bad.size:
        b = int(bad[0])
        raise ContractError(
            "layout", f"FlashInfer layout: row {b}: accepted_token_num grew by {int(accepted[b])}; allowed "
            f"{int(emitted[b])}..{int(nd[b])} (at least the accepted prefix, at most the real drafts)"
        )


ADAPTER = Adapter(
    "flashinfer",
    "FlashInfer chain_speculative_sampling: fixed n, -1 padded, in-place counters, ragged rows by padding",
    build,
    options=(
        DEVICE,
        Option("dtype", str, "float32", DTYPE.help, DTYPE.choices),
        Option("deterministic", parse_bool, True, "passed through to the kernel"),
        Option("seeds", str, "auto", "per-row: int64 seed/offset tensors [B] drawn from the run's rng; generator: a "
               "torch.Generator seeded from it; auto: per-row when the target has seed and offset parameters",
               ("auto", "per-row", "generator")),
    ),
    requires=("torch",),
    extra="torch",
)
