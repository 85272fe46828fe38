"""The reference tree verifier: multi-candidate speculative sampling written from the rule.

SpecInfer (Miao et al. 2023, arXiv 2305.09781), Alg. 2, with the per-child draft laws of
notes/theory.md: at a node with candidate children c_1..c_k and current target law p,

    for j = 1..k: accept c_j if u_j q_j(c_j) < p(c_j)   (descend into c_j, p <- its target law)
                  else p <- norm(max(p - q_j, 0))        (the residual, after EVERY rejected child)
    no child accepted: emit Y ~ p.

``q_j`` is the law child j was really drawn from, supplied by the caller in ``q[b, j]``: the
drafter's q for i.i.d. children, q with the earlier siblings removed and renormalised for sampling
without replacement (recursive rejection sampling, Jeon et al. 2024, arXiv 2402.14160), one-hot
at c_j for deterministic distinct top-k children (EAGLE-2, SGLang). With one-hot q_j the test
accepts c_j with probability p(c_j) and the residual is p with c_j removed.

Vectorised over the batch: the only Python loop runs over the N node slots, in index order.
Because parents precede children and siblings are tested in index order, visiting nodes in index
order visits the children of the current node in order, and after a descent the children of the
new node all lie ahead.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from specaudit.chains.processing import SamplingParams, process
from specaudit.chains.sampling import sample_rows
from specaudit.contract.tree import tree_contract


def verify_tree(
    tokens: np.ndarray,
    parent: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_nodes: np.ndarray,
    rng: np.random.Generator,
    *,
    residual: Literal["updated", "frozen"] = "updated",
    duplicates: Literal["tested", "double"] = "tested",
    accept: Literal["lt", "leq_ratio"] = "lt",
    bonus: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run SpecInfer Alg. 2; switches at their defaults are the reference, each other value one zoo bug.

    ``accept="leq_ratio"`` tests ``u <= p/q`` (a child of probability 0 is accepted at u = 0);
    ``bonus`` [B, N+1, V], when given, is the law the final token is drawn from at a node where
    no child was rejected (an accepted leaf, a childless root) in place of ``p``.
    """
    tokens = np.asarray(tokens)
    parent = np.asarray(parent)
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    batch: int
    batch, n = tokens.shape
    path = np.full((batch, n), -1, dtype=np.int64)
    if batch == 0:
        return path, np.zeros(0, dtype=np.int64)
    rows = np.arange(batch)
    u = rng.random((batch, n))
    cur = np.full(batch, -1, dtype=np.int64)  # node whose children are being tested; -1 = root
    depth = np.zeros(batch, dtype=np.int64)
    base = np.array(p[:, 0], dtype=np.float64)  # target law at the current node
    res = base.copy()  # current target: the residual after the children rejected so far
    last_q = np.zeros_like(res)  # q of the last rejected child (for the frozen-residual bug)
    seen = np.zeros(res.shape, dtype=bool)  # tokens of the current node's children tested so far
    rejected = np.zeros(batch, dtype=bool)  # a child of the current node was rejected
    for j in range(n):
        live = (j < num_nodes) & (parent[:, j] == cur)  # padding is never read as a tree
        if not live.any():
            continue
        x = np.where(live, tokens[:, j], 0)
        q_j = q[:, j]
        target = base if residual == "frozen" else res
        if duplicates == "double":
            # Bug: a sibling repeating an earlier sibling's token is tested against the node's
            # original p again, as if it were a fresh candidate: the token's acceptance mass is
            # counted once per copy. Done right, the copy meets a residual with p(c) = 0 there
            # (c was rejected, so p(c) < q(c)) and is always rejected.
            dup = live & seen[rows, x]
            target = np.where(dup[:, None], base, target)
            seen[rows[live], x[live]] = True
        norm = target.sum(axis=1)
        p_x = target[rows, x] / np.where(norm > 0, norm, 1.0)
        if accept == "leq_ratio":
            # Bug: u <= p/q; at u = 0 a child with p = 0 passes (EAGLE evaluate_posterior `r <= acp`).
            with np.errstate(divide="ignore", invalid="ignore"):
                ok = u[:, j] <= p_x / q_j[rows, x]
        else:
            ok = u[:, j] * q_j[rows, x] < p_x
        took = live & ok
        reject = live & ~took
        rejected |= reject
        # Rejected: p <- norm(max(p - q_j, 0)). p = q_j exactly leaves nothing; then rejection had
        # probability 0 and the row keeps p.
        sub = np.maximum(res - q_j, 0.0)
        total = sub.sum(axis=1, keepdims=True)
        upd = reject[:, None] & (total > 0)
        res = np.where(upd, sub / np.where(total > 0, total, 1.0), res)
        last_q = np.where(reject[:, None], q_j, last_q)
        # Accepted: record the node and descend; its target law is p[:, 1 + j].
        if took.any():
            a = rows[took]
            path[a, depth[a]] = j
            depth[a] += 1
            cur[a] = j
            base[a] = p[a, 1 + j]
            res[a] = p[a, 1 + j]
            last_q[a] = 0.0
            seen[a] = False
            rejected[a] = False
    if residual == "frozen":
        # Bug: the residual is never carried from child to child; the replacement is drawn from
        # norm(max(p - q_last, 0)) of the node's ORIGINAL p and the last rejected child's q only.
        sub = np.maximum(base - last_q, 0.0)
        res = np.where(sub.sum(axis=1, keepdims=True) > 0, sub, base)
    if bonus is not None:  # no child rejected here: the final token is drawn from the given law instead of p
        res = np.where(rejected[:, None], res, bonus[rows, 1 + cur])
    final = sample_rows(res, rng.random(batch))
    return path[:, : max(int(depth.max()), 0)], final


@tree_contract
def verify(
    tokens: np.ndarray,
    parent: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_nodes: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify a batch of ragged draft trees; return ``(path[B, W], final[B])`` (tree contract).

    Children of the current node are tested in index order with ``u * q_j(c) < p(c)``; after each
    rejected child ``p <- norm(max(p - q_j, 0))``; an accepted child becomes the current node with
    target law ``p[b, 1 + j]``. When no child is accepted (or the node is a leaf), ``final`` is
    drawn from the current ``p``. Nodes past ``num_nodes[b]`` are never read.
    """
    return verify_tree(tokens, parent, q, p, num_nodes, rng)


def verify_logits(
    tokens: np.ndarray,
    parent: np.ndarray,
    q: np.ndarray,
    target_logits: np.ndarray,
    num_nodes: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify draft trees in the tree logits contract: process the target logits, then SpecInfer Alg. 2.

    ``p = process(target_logits, params)`` at every node, the final token's included
    (:mod:`specaudit.contract.tree`, logits form); ``q`` are the laws the children were drawn from.
    """
    return verify_tree(tokens, parent, q, process(target_logits, params), num_nodes, rng)
