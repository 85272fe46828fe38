"""Lossless verifiers that differ from the references: the panel a correct tester must never fail.

Each verifier here emits the target's law exactly (or to float32 rounding) but computes it
differently from the references, the way an engine may: merging equal siblings, grouping
candidates by token prefix, working in float32. A check or probe that fails one of them raises
a false alarm; ``benchmarks/false_alarms.py`` runs every member of :data:`PANEL` (these and the
references) through every shipped scenario of its contract and prints the failure rates.

=============================  ========  ======================================================
panel member                   contract  how it differs from its reference, and why lossless
=============================  ========  ======================================================
reference                      chain     the chain reference (Leviathan et al. 2023, Alg. 1)
chain_float32                  chain     the same rule in float32: rounding only
reference-block                chain     block verification (Sun et al. 2024): the target's law,
                                         more tokens/step than the chain rule
reference-tree                 tree      SpecInfer Alg. 2 (Miao et al. 2023)
tree_merge_equal_siblings      tree      SpecInfer on the tree whose equal-token siblings are
                                         merged: more candidates below a shared token
tree_eagle_lt                  tree      EAGLE-2's evaluate_posterior (prefix groups) with
                                         ``r < p/q`` in place of its ``r <= p/q``
=============================  ========  ======================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from specaudit.chains.sampling import final_token, sample_rows
from specaudit.contract.chain import assemble, chain_inputs, draw_uniforms, row_generators
from specaudit.contract.tree import tree_contract
from specaudit.registry import Registry
from specaudit.verifiers.reference import bad_rows, raise_bad_p
from specaudit.verifiers.tree import verify_tree

__all__ = ["PANEL", "Member", "chain_float32", "merge_equal_siblings", "tree_eagle_lt", "tree_merge_equal_siblings"]


@dataclass(frozen=True)
class Member:
    """A lossless verifier of the panel: its import string and the shipped scenarios it is run on.

    ``algorithms`` are the scenario algorithms (``chain``, ``block``, ``tree``) whose closed forms
    it must meet or beat: a chain verifier is not run on ``algorithm: block`` scenarios, whose
    tokens/step reference is the block rule's (a chain verifier rightly falls short of it).
    """

    target: str
    contract: Literal["chain", "tree"]
    algorithms: tuple[str, ...]
    note: str


#: The lossless panel, by name, in listing order.
PANEL: Registry[Member] = Registry("panel member")


def merge_equal_siblings(tokens: np.ndarray, parent: np.ndarray, num_nodes: np.ndarray) -> np.ndarray:
    """Return the parents of the tree in which equal-token siblings are merged into the first of them.

    A node whose token repeats an earlier sibling's (after merging the levels above) stays a
    sibling, but its children are re-parented to that first copy, so the first copy's subtree
    holds every candidate drafted below the shared token path. Nodes past ``num_nodes`` are left
    as they are and never read.
    """
    batch, n = tokens.shape
    rows = np.arange(batch)
    new_parent = parent.copy()
    canon = np.broadcast_to(np.arange(n), (batch, n)).copy()  # the first copy of each node's token path
    for j in range(n):
        live = j < num_nodes
        par = np.where(live, parent[:, j], -1)
        cp = np.where(par >= 0, canon[rows, np.clip(par, 0, max(j - 1, 0))], -1)
        new_parent[:, j] = np.where(live, cp, parent[:, j])
        if j == 0:
            continue
        same = ((new_parent[:, :j] == cp[:, None]) & (tokens[:, :j] == tokens[:, j, None])
                & (canon[:, :j] == np.arange(j)[None, :]) & live[:, None])
        first = same.any(axis=1)
        canon[first, j] = np.argmax(same[first], axis=1)
    return new_parent


def _original_path(path: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Rewrite an accepted path of the merged tree as the ancestors of its last node in the original tree."""
    batch, width = path.shape
    if width == 0:
        return path
    rows = np.arange(batch)
    depth = (path >= 0).sum(axis=1)
    out = np.full_like(path, -1)
    cur = np.where(depth > 0, path[rows, np.maximum(depth - 1, 0)], -1)
    for level in range(width - 1, -1, -1):
        here = level < depth
        out[here, level] = cur[here]
        cur = np.where(here, parent[rows, np.maximum(cur, 0)], cur)
    return out


@tree_contract
def tree_merge_equal_siblings(
    tokens: np.ndarray,
    parent: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_nodes: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """SpecInfer Alg. 2 (Miao et al. 2023, arXiv 2305.09781) on the tree with equal-token siblings merged.

    i.i.d. siblings repeat tokens; two copies of token c after the same context share the target
    law after c and the drafter's law of their children (both are laws of the same prefix), so
    the children of every copy are i.i.d. candidates after c. Re-parenting them to the first copy
    (:func:`merge_equal_siblings`) gives that node more candidates: the output law is still the
    target's (SpecInfer's rule is lossless for any number of i.i.d. children, and a later copy,
    tested only after the first was rejected, meets a residual with p(c) = 0 and is rejected as
    before), while more tokens are accepted per step than under the plain rule
    (:func:`specaudit.verifiers.tree.verify`). Sibling tests, residuals and the final draw are
    the reference's; the path is reported in the original tree (the copy the last node hangs from).
    """
    tokens = np.asarray(tokens)
    parent = np.asarray(parent)
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    merged = merge_equal_siblings(tokens, parent, num_nodes)
    path, final = verify_tree(tokens, merged, q, p, num_nodes, rng)
    return _original_path(path, parent), final


@tree_contract
def tree_eagle_lt(
    tokens: np.ndarray,
    parent: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_nodes: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE-2's tree verification with the acceptance ``r < p/q`` (its ``r <= p/q`` fixed).

    After ``evaluate_posterior`` of SafeAILab/EAGLE ``eagle/model/utils.py`` (commit 08dc06cc,
    the sampling branch), written anew for the tree contract and one row at a time as there:

    - the candidates at depth i are the children of every node whose token path equals the
      accepted tokens so far (EAGLE compares candidate prefixes, ``is_eq``), in index order; the
      target law there is that of the first such node (EAGLE's ``fi``);
    - each distinct token is tested once with a fresh uniform, ``r < px / qx`` with ``px`` the
      current (residual) target law and ``qx`` the law that child was drawn from (EAGLE tests
      ``r <= acp``, which accepts a token of probability 0 at r = 0: the zoo's
      ``tree_leq_ratio``); a candidate with ``qx <= 0`` is skipped as in EAGLE;
    - a rejected token turns the target into ``norm(max(p - q, 0))``. EAGLE skips a repeated
      token (``xi in candidates_set``), right for its distinct top-k siblings; a repeat of an
      i.i.d. draft must still update the residual (it would be rejected for sure: p(c) = 0 there),
      as SpecInfer does, so here it does;
    - no token accepted: the final token is drawn from the residual when a token was rejected at
      this depth (EAGLE's ``adjustflag``), else from the target law of the node (a leaf).

    ``q[b, j]`` is the contract's law child j was really drawn from: EAGLE's drafter law with the
    earlier siblings masked (``b_indices``) for sampling without replacement, one-hot for
    deterministic top-k children. Grouping by prefix makes the verifier as efficient as
    :func:`tree_merge_equal_siblings` on i.i.d. trees (more than SpecInfer's plain rule).
    """
    tokens = np.asarray(tokens)
    parent = np.asarray(parent)
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    batch, n = tokens.shape
    u = rng.random((batch, n))  # at most one test per node: row b's r values, consumed in order
    weights = np.zeros((batch, p.shape[-1]), dtype=np.float64)
    paths: list[list[int]] = []
    for b in range(batch):
        live = int(num_nodes[b])
        par = parent[b, :live].tolist()
        tok = tokens[b, :live].tolist()
        group = [-1]  # the nodes whose token path is the accepted one (-1: the root)
        accepted: list[int] = []
        draws = 0
        while True:
            members = set(group)
            candidates = [j for j in range(live) if par[j] in members]
            gtp = np.array(p[b, 1 + group[0]], dtype=np.float64)
            gtp = gtp / gtp.sum()
            adjusted = False
            tested: set[int] = set()
            took = -1
            for j in candidates:
                x = tok[j]
                if x in tested:  # a repeat of a rejected i.i.d. draft: rejected for sure, the residual moves
                    adjusted = _residual(gtp, q[b, j]) or adjusted
                    continue
                tested.add(x)
                qx = float(q[b, j, x])
                if qx <= 0:
                    continue
                r = float(u[b, draws])
                draws += 1
                if r < gtp[x] / qx:  # EAGLE: `if r <= acp` (acp = px / qx)
                    took = x
                    break
                adjusted = _residual(gtp, q[b, j]) or adjusted
            if took < 0:
                weights[b] = gtp if adjusted else p[b, 1 + group[0]]
                break
            group = [j for j in candidates if tok[j] == took]
            accepted.append(group[0])
        paths.append(accepted)
    width = max((len(a) for a in paths), default=0)
    path = np.full((batch, width), -1, dtype=np.int64)
    for b, nodes in enumerate(paths):
        path[b, : len(nodes)] = nodes
    final = sample_rows(weights, np.asarray(rng.random(batch)))
    # The accepted nodes are the first copies of each token; report the ancestors of the last one.
    return _original_path(path, parent), final


def _residual(gtp: np.ndarray, q_j: np.ndarray) -> bool:
    """Turn ``gtp`` into norm(max(gtp - q_j, 0)) in place; return False (unchanged) when no mass is left."""
    sub = np.maximum(gtp - q_j, 0.0)
    total = sub.sum()
    if total <= 0:  # p = q_j: rejection had probability 0 (rounding); keep p
        return False
    gtp[:] = sub / total
    return True


def _float32_below(u: np.ndarray) -> np.ndarray:
    """Return float64 uniforms in [0, 1) as float32, rounded down, so that they stay below 1 (torch.rand's range)."""
    f = u.astype(np.float32)
    return np.where(f > u, np.nextafter(f, np.float32(0)), f)


@row_generators
@chain_inputs
def chain_float32(
    draft: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_draft: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Chain speculative sampling (Leviathan et al. 2023, Alg. 1) computed in float32, as GPU engines do.

    p, q and the uniforms are cast to float32 (uniforms rounded down, so they stay in [0, 1) as
    ``torch.rand``'s do); a draft is accepted when ``u * q(x) < p(x)`` in float32; the token
    after the accepted drafts is drawn by inverse CDF in float32 from ``max(p - q, 0)`` or from
    ``p`` at the bonus position; tokens are returned as int64. Lossless up to float32 rounding
    (about 2**-24 of a probability). The bad-row rule of :mod:`specaudit.verifiers.reference`
    is applied to the float64 inputs first (a bad p row raises, a bad q row's draft is rejected
    and the token there drawn from p).
    """
    batch: int
    batch, k = draft.shape
    rows = np.arange(batch)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    safe = np.where(valid, draft, 0)
    bad_p = bad_rows(p, num_draft + 1)
    if bad_p.any():
        raise_bad_p(bad_p, p)
    bad_q = bad_rows(q, num_draft)
    u, v = draw_uniforms(rng, num_draft, k)
    u32, v32 = _float32_below(np.asarray(u)), _float32_below(np.asarray(v))
    with np.errstate(over="ignore", invalid="ignore"):
        p32 = np.asarray(p, dtype=np.float32)
        q32 = np.asarray(q, dtype=np.float32)
    p_x = np.take_along_axis(p32[:, :k], safe[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(q32, safe[..., None], axis=2)[..., 0]
    with np.errstate(invalid="ignore"):
        accepted = valid & (u32 * q_x < p_x) & ~bad_q
    n_acc = np.cumprod(accepted, axis=1).sum(axis=1)
    rejected = n_acc < num_draft
    target = p32[rows, n_acc]
    residual = None
    if k:
        rejected &= ~bad_q[rows, np.minimum(n_acc, k - 1)]
        with np.errstate(invalid="ignore"):
            residual = np.maximum(target - q32[rows, np.minimum(n_acc, k - 1)], np.float32(0))
    token = final_token(target, residual, rejected, v32)
    return assemble(draft, n_acc, token.astype(np.int64))


PANEL.register("reference", Member("specaudit.verifiers.reference:verify", "chain", ("chain",),
                                   "chain reference, Leviathan et al. 2023 Alg. 1"))
PANEL.register("chain_float32", Member("specaudit.verifiers.lossless:chain_float32", "chain", ("chain",),
                                       "the chain rule in float32"))
PANEL.register("reference-block", Member("specaudit.verifiers.block:verify", "chain", ("chain", "block"),
                                         "block verification, Sun et al. 2024 (beats the chain closed form)"))
PANEL.register("reference-tree", Member("specaudit.verifiers.tree:verify", "tree", ("tree",),
                                        "SpecInfer Alg. 2"))
PANEL.register("tree_merge_equal_siblings", Member("specaudit.verifiers.lossless:tree_merge_equal_siblings", "tree",
                                                   ("tree",), "SpecInfer with equal-token siblings merged"))
PANEL.register("tree_eagle_lt", Member("specaudit.verifiers.lossless:tree_eagle_lt", "tree", ("tree",),
                                       "EAGLE-2 evaluate_posterior with r < p/q"))
