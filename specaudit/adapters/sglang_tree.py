"""SGLang's tree verifier ``tree_speculative_sampling_target_only``: ``--adapter sglang_tree``.

Drives a target with sgl-kernel's signature through the *tree* contract (:mod:`specaudit.contract.tree`)::

    tree_speculative_sampling_target_only(
        predicts[bs*n] int32 (out), accept_index[bs, D+1] int32 (out), accept_token_num[bs] int32 (out),
        candidates[bs, n] int64, retrive_index[bs, n] int64, retrive_next_token[bs, n] int64,
        retrive_next_sibling[bs, n] int64, uniform_samples[bs, n] f32,
        uniform_samples_for_final_sampling[bs] f32, target_probs[bs, n, V] f32,
        draft_probs[bs, n, V] f32 (in/out), threshold_single=1.0, threshold_acc=1.0,
        deterministic=True) -> None

``draft_probs`` is in the signature of sgl-kernel's ``python/sgl_kernel/speculative.py`` up to
commit 6bfad8f1 and gone from it at commit 01fe7c22 (the kernel keeps its own scratch; the
``_rejmask`` variant was added beside it). The adapter reads the target's parameter names and
passes a zeroed ``draft_probs`` only to a target that has one (``--adapter-arg draft_probs=pass|omit``
overrides it for a target without a readable signature; ``auto`` passes it then).

Layout (sgl-kernel ``speculative_sampling.cuh`` and its Triton port): node 0 of a row is the root
(the context), nodes 1..n-1 the drafts; ``retrive_next_token[i]`` is node i's first child and
``retrive_next_sibling[i]`` its next sibling, -1 ending either list; ``retrive_index[b, i] =
b * n + i`` is where node i's prediction goes in the flat ``predicts``. ``target_probs[b, i]`` is
the target law after node i, so canonical ``p[b, 0]`` / ``p[b, 1 + j]`` map to rows 0 / 1 + j.
*Target-only*: ``draft_probs`` starts at zero (q is one-hot: the tree is the deterministic top-k of
the drafter), and the kernel writes ``p(c)`` into it for every rejected sibling c, so the final
token is drawn from ``relu(p - draft_probs)``: p with the rejected siblings removed. It walks a
level with one coin, accepting sibling j when ``coin <= (p(c_1) + .. + p(c_j)) / threshold_acc``
(or ``p(c_j) >= threshold_single``); with both thresholds 1 that is P(accept c_j) = p(c_j), the
multi-candidate rule with one-hot q_j. Thresholds below 1 are lossy by design (notes/theory.md).
Accepted: ``accept_index[b, 0..a]`` (root first), ``accept_token_num[b] = a``, and the emitted
tokens are ``predicts[accept_index[b, 0..a]]``.

Options: ``tensors`` numpy (default; the CPU layout-faithful verifiers in the tests) or torch
(the real kernel, ``device=cuda``), ``dtype`` of the probabilities (float32 as the kernel), and the
two thresholds. The adapter refuses trees that are not deterministic (q not one-hot at the node's
token): SGLang's target-only kernel ignores q, so it only fits ``children: topk`` scenarios.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.adapters import Adapter, Option
from specaudit.adapters.randomness import routed
from specaudit.contract.tree import tree_contract
from specaudit.errors import ContractError


def links(parent: np.ndarray, num_nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return SGLang's ``retrive_next_token`` and ``retrive_next_sibling`` [B, N+1] (root = node 0).

    Canonical node j is SGLang node j + 1; children keep their index order; -1 ends a list.
    Nodes past ``num_nodes[b]`` are left unlinked.
    """
    batch, n = parent.shape
    first = np.full((batch, n + 1), -1, dtype=np.int64)
    sibling = np.full((batch, n + 1), -1, dtype=np.int64)
    last = np.full((batch, n + 1), -1, dtype=np.int64)  # last child seen so far, per parent
    rows = np.arange(batch)
    for j in range(n):  # index order = sibling order; parents precede children
        live = j < num_nodes
        par = np.where(live, parent[:, j] + 1, 0)
        node = j + 1
        no_child = live & (first[rows, par] == -1)
        first[rows[no_child], par[no_child]] = node
        chained = live & ~no_child
        sibling[rows[chained], last[rows[chained], par[chained]]] = node
        last[rows[live], par[live]] = node
    return first, sibling


def build(
    target: Callable[..., Any],
    tensors: str = "numpy",
    device: str = "cpu",
    dtype: str = "float32",
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    draft_probs: str = "auto",
) -> Callable[..., Any]:
    """Return a tree-contract verifier that drives ``target`` in SGLang's layout."""
    pass_draft_probs = takes_draft_probs(target) if draft_probs == "auto" else draft_probs == "pass"

    @tree_contract
    def verify(tokens, parent, q, p, num_nodes, rng):
        tokens = np.asarray(tokens)
        batch, n = tokens.shape
        if batch == 0:
            return np.zeros((0, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
        live = np.arange(n)[None, :] < num_nodes[:, None]
        safe = np.where(live, tokens, 0)
        q_c = np.take_along_axis(q, safe[..., None], axis=2)[..., 0]
        if np.any(live & (q_c != 1.0)):
            b, j = (int(x[0]) for x in np.nonzero(live & (q_c != 1.0)))
            raise ContractError(
                "sglang-target-only",
                f"SGLang's target-only tree kernel ignores q and fits deterministic (top-k) trees only; row {b} "
                f"node {j} has q(token) = {q_c[b, j]:.4g}, not 1. Use scenarios with tree.children: topk",
            )
        first, sibling = links(np.asarray(parent), np.asarray(num_nodes))
        depth = _depth(np.asarray(parent), np.asarray(num_nodes))
        m = n + 1
        candidates = np.zeros((batch, m), dtype=np.int64)
        candidates[:, 1:] = np.where(live, tokens, 0)
        retrive_index = (np.arange(batch)[:, None] * m + np.arange(m)[None, :]).astype(np.int64)
        args = dict(
            predicts=np.full(batch * m, -1, dtype=np.int32),
            accept_index=np.full((batch, depth + 1), -1, dtype=np.int32),
            accept_token_num=np.zeros(batch, dtype=np.int32),
            candidates=candidates,
            retrive_index=retrive_index,
            retrive_next_token=first,
            retrive_next_sibling=sibling,
            uniform_samples=rng.random((batch, m)).astype(np.float32),
            uniform_samples_for_final_sampling=rng.random(batch).astype(np.float32),
            target_probs=np.asarray(p, dtype=dtype),
        )
        if pass_draft_probs:  # sgl-kernel up to 6bfad8f1: the caller's zeroed scratch, written for rejected siblings
            args["draft_probs"] = np.zeros((batch, m, p.shape[2]), dtype=dtype)
        if tensors == "torch":
            import torch

            moved = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in args.items()}
            with routed(rng, device):
                target(**moved, threshold_single=threshold_single, threshold_acc=threshold_acc, deterministic=True)
            if device != "cpu":
                torch.cuda.synchronize()
            out = {k: moved[k].cpu().numpy() for k in ("predicts", "accept_index", "accept_token_num")}
        else:
            with routed(rng, device):
                target(**args, threshold_single=threshold_single, threshold_acc=threshold_acc, deterministic=True)
            out = args
        acc = out["accept_token_num"].astype(np.int64)
        index = out["accept_index"].astype(np.int64)
        if np.any((acc < 0) | (acc > depth)):
            b = int(np.flatnonzero((acc < 0) | (acc > depth))[0])
            raise ContractError("sglang-accept-num", f"accept_token_num[{b}] = {acc[b]}; allowed 0..{depth}")
        rows = np.arange(batch)
        on = np.arange(1, depth + 1)[None, :] <= acc[:, None]
        # accept_index holds flat retrive_index positions: node = position - b * m; canonical = node - 1
        path = np.where(on, index[:, 1:] - rows[:, None] * m - 1, -1)
        final = out["predicts"].astype(np.int64)[np.clip(index[rows, acc], 0, batch * m - 1)]
        return path, final

    return verify


def takes_draft_probs(target: Callable[..., Any]) -> bool:
    """Return whether ``target`` has sgl-kernel's older ``draft_probs`` parameter (True when unreadable)."""
    import inspect

    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # a torch op or builtin: the older, wider form is the safe guess
        return True
    return "draft_probs" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _depth(parent: np.ndarray, num_nodes: np.ndarray) -> int:
    """Return the largest node depth over the batch (a root child has depth 1)."""
    batch, n = parent.shape
    depth = np.zeros((batch, n), dtype=np.int64)
    for j in range(n):
        live = j < num_nodes
        par = parent[:, j]
        up = np.where(par >= 0, depth[np.arange(batch), np.maximum(par, 0)], 0)
        depth[:, j] = np.where(live, up + 1, 0)
    return int(depth.max()) if depth.size else 0


def _threshold(value: Any) -> float:
    t = float(value)
    if not 0.0 < t <= 1.0:
        raise ValueError("allowed: a threshold in (0, 1]; 1 is lossless")
    return t


ADAPTER = Adapter(
    name="sglang_tree",
    summary="SGLang tree_speculative_sampling_target_only (retrive_next_token / next_sibling layout, tree contract)",
    build=build,
    options=(
        Option("tensors", str, "numpy", "array type handed to the target", ("numpy", "torch")),
        Option("device", str, "cpu", "torch device (tensors=torch)", ("cpu", "cuda")),
        Option("dtype", str, "float32", "dtype of target_probs / draft_probs (the kernel's is float32)",
               ("float32", "float64")),
        Option("threshold_single", _threshold, 1.0, "accept when p(c) >= this; < 1 is lossy"),
        Option("threshold_acc", _threshold, 1.0, "coin <= cumulative p / this; < 1 is lossy"),
        Option("draft_probs", str, "auto", "pass the zeroed draft_probs scratch (sgl-kernel up to 6bfad8f1) or omit it "
               "(from 01fe7c22); auto: read the target's parameters", ("auto", "pass", "omit")),
    ),
)
