"""HF transformers' ``_speculative_sampling``: ``--adapter hf``, target alias ``hf-transformers``.

``transformers.generation.utils._speculative_sampling(candidate_input_ids, candidate_logits,
candidate_length, new_logits, assistant_ensemble_weight=None) -> (valid_tokens, n_matches)``
(read from the installed source, transformers 5.x):

- batch size 1; ``candidate_logits`` [1, g, V] and ``new_logits`` [1, g+1, V] are *logits*: it
  takes ``softmax`` of both, so the adapter passes ``log q`` and ``log p`` (``-inf`` where a
  probability is 0; softmax of log q is q again);
- the drafts are the last ``candidate_length`` ids of ``candidate_input_ids``; ``g`` (the number
  of drafts it verifies) is ``candidate_logits.shape[1]``, so a row with ``j`` drafts is one call
  with ``candidate_length = j`` and ``j`` positions of logits (``j + 1`` for the target);
- accept draft ``i`` when ``r_i <= p_i / q_i`` with ``r = torch.rand_like(...)``; ``n_matches``
  is the run of accepts; at a rejection it samples ``norm(max(p - q, 0))`` with
  ``torch.multinomial``, otherwise the bonus from ``new_logits[:, g]``; it returns the accepted
  drafts plus that token ([1, n_matches + 1]) — so ``n_out = n_matches + 1``;
- its draws come from torch's global generator: the adapter seeds it from the harness rng once
  per verify call (inside ``torch.random.fork_rng``, so the caller's torch state is untouched);
- releases before the DIVERSE option (5.0.0, ...) take ``is_done_candidate`` instead as fifth
  argument (True drops the bonus when the candidate ended the sequence); the adapter reads the
  signature and passes False, as ``generate()`` does for a sequence that has not ended;
- ``assistant_ensemble_weight = w`` in (0, 1) accepts with ``1 - w + w p/q`` (DIVERSE,
  arXiv 2604.07622): lossy by design, and specaudit must fail it.

Rows are driven one at a time (the function is batch-1) by the per-row adapter's path
(:func:`specaudit.adapters.per_row.drive`: every global RNG routed, so the probes reach it) under
``torch.inference_mode`` with one intra-op thread (tiny tensors: threads only add latency), on
views of tensors built once per call.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from specaudit.adapters import DEVICE, DTYPE, Adapter, Option, optional_float
from specaudit.adapters.per_row import drive
from specaudit.errors import ContractError


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    if n > 0 and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _ensemble_weight(value: Any) -> float | None:
    w = optional_float(value)
    if w is not None and not 0.0 <= w <= 1.0:
        raise ValueError("allowed: none, or a weight in [0, 1]")
    return w


def _parameters(target: Callable[..., Any]) -> Mapping[str, Any] | None:
    try:
        return inspect.signature(target).parameters
    except (TypeError, ValueError):  # a builtin or C function: its signature cannot be read
        return None


def build(
    target: Callable[..., Any],
    device: str = "cpu",
    dtype: str = "float64",
    assistant_ensemble_weight: float | None = None,
    threads: int = 1,
) -> Callable[..., Any]:
    """Return the canonical verifier that drives the batch-1 ``target`` row by row."""
    import torch

    from specaudit.adapters.torch import check_device, torch_dtype

    check_device(device)
    fdt = torch_dtype(dtype)
    extra: dict[str, Any] = {}
    params = _parameters(target)
    if assistant_ensemble_weight is not None:
        if params is not None and "assistant_ensemble_weight" not in params:
            raise ContractError("layout", "this release's _speculative_sampling takes no assistant_ensemble_weight "
                                "(added in transformers 5.x with DIVERSE)")
        extra["assistant_ensemble_weight"] = assistant_ensemble_weight
    if params is not None and "is_done_candidate" in params:
        # releases up to 5.x's early ones: True drops the bonus when the candidate ended the sequence; a
        # sequence that has not ended (every call here) passes False, as generate() does then
        extra["is_done_candidate"] = False

    def verify(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, rng: Any) -> Any:
        k = draft.shape[1]
        with np.errstate(divide="ignore"):
            log_q, log_p = np.log(q), np.log(p)
        nd = np.asarray(num_draft).tolist()
        with torch.inference_mode(), _threads(threads):
            ids = torch.from_numpy(np.ascontiguousarray(draft, dtype=np.int64)).to(device)
            cand = torch.from_numpy(log_q).to(device=device, dtype=fdt)
            new = torch.from_numpy(log_p).to(device=device, dtype=fdt)
            # views per draft count, sliced once: a row is then one cheap 1-D slice of each
            views = {j: (ids[:, :j], cand[:, :j], new[:, : j + 1]) for j in set(nd)}

            def row(b: int, j: int) -> list[int]:
                i, c, t = views[j]
                tokens, n_matches = target(i[b : b + 1], c[b : b + 1], j, t[b : b + 1], **extra)
                got = tokens.tolist()[0]
                if len(got) != int(n_matches) + 1 or len(got) > k + 1:
                    raise ContractError(
                        "layout", f"HF layout: row {b}: valid_tokens has {len(got)} ids with n_matches = "
                        f"{int(n_matches)}; expected n_matches + 1"
                    )
                return got

            return drive(row, draft.shape, nd, rng, device, layout="HF")

    return verify


ADAPTER = Adapter(
    "hf",
    "HF transformers _speculative_sampling (batch 1, logits, global torch RNG), driven row by row",
    build,
    options=(
        DEVICE,
        DTYPE,
        Option(
            "assistant_ensemble_weight", _ensemble_weight, None,
            "DIVERSE ensemble weight w in (0, 1): accept with 1 - w + w p/q (lossy by design)",
        ),
        Option("threads", int, 1, "torch intra-op threads while verifying (1 is fastest for batch-1 calls)"),
    ),
    requires=("torch", "transformers"),
    extra="hf",
)
