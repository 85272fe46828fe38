"""Exact probes of the tree contract: boundary uniforms on sibling tests and the final draw, and the corners.

The tree twin of :mod:`specaudit.checks.probes`. Every simulated ``algorithm: tree`` scenario runs
these probes with its own chains and tree shape (:func:`run_tree_probes`): target rows give the
node laws p, drafter rows the children and their laws q (i.i.d., without replacement or top-k, as
the scenario drafts them). Each probe is a handful of small calls; every call is validated against
the tree contract (:func:`specaudit.contract.tree.validate_tree_output`), its inputs are compared
with copies taken before the call, and whether numpy's legacy global RNG or Python's ``random``
moved during it is recorded (the determinism probe names such a source).

===========================  ==========  ===================================================
check                        category    property
===========================  ==========  ===================================================
tree-one-hot                 contract    one-hot target at every node -> every emitted token
                                         (path and final) is the argmax at its position
tree-one-hot-path            efficiency  ... the path descends into the first child equal to
                                         the argmax at every node
tree-p-equals-q              efficiency  q = p at every child -> the first child is always
                                         accepted: the path is the first-child chain to a leaf
tree-single-child            efficiency  single-child trees are the chain rule (Leviathan et al.
                                         2023): a child with p >= q is always accepted; after a
                                         rejected child c the final token lies in the support of
                                         norm(max(p - q_c, 0)); at a leaf, in the support of p
tree-determinism             contract    same seed -> same output; another seed -> another output
                                         (unless the scenario's output law is degenerate)
tree-padding-independence    contract    changing nodes past num_nodes (tokens, parents, q, p)
                                         changes nothing
tree-adversarial-uniforms    contract    uniforms 0.0 / 1 - 2**-53 on the sibling tests and the
                                         final draw: no token of probability 0, no id >= V;
                                         "not applicable" unless the uniforms reached every row
tree-logits-processing       contract    (``--contract logits`` only) raw target logits with
                                         temperature and top-k: every emitted token, path and
                                         final, lies in the processed target's support
tree-inputs-unmodified       contract    tokens, parent, q, p, num_nodes are never written to
tree-contract-clauses        contract    every clause of the tree contract held on every call
===========================  ==========  ===================================================

The one-hot, p = q and single-child probes run with a seeded Generator and with both phases of
:class:`specaudit.contract.uniforms.ScriptedUniforms`. Their exact references follow from the
acceptance test ``u q_j(c) < p(c)`` for any u in [0, 1) (SpecInfer 2305.09781, Alg. 2): a child
with ``p(c) >= q_j(c) > 0`` passes whatever u is, a child with ``p(c) = 0`` never does, and a
one-hot residual stays one-hot. The efficiency probes hold for that rule, not for every lossless
tree verifier, so ``--allow-inefficient`` keeps them from gating. Each probe runs on its own: a
contract breach fails the probe that met it, a crash makes that probe ERROR, a timeout stops the
probes.
"""

from __future__ import annotations

import random as _pyrandom
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specaudit.chains.processing import SamplingParams, process
from specaudit.chains.sampling import sample_rows
from specaudit.checks.probes import (
    CALL_FLOATS,
    DEGENERATE,
    ExactOutcome,
    foreign_source,
    probe_all,
    result_of,
    rng_sources,
    same_state,
    skipped,
)
from specaudit.checks.replay import Call, recorded, source_of
from specaudit.contract import tree
from specaudit.contract.uniforms import ScriptedUniforms
from specaudit.errors import ContractError
from specaudit.results import Category, CheckResult
from specaudit.simulate.tables import garbage_pool
from specaudit.simulate.tree import TreePlan, draft_trees

__all__ = ["ALSO_EMITS", "TREE_CHECKS", "TreeInputs", "TreeProber", "run_tree_probes"]

#: Rows (trees) of each probe call.
PROBE_ROWS = 64
#: Rows of the adversarial probe (three kinds of rows, 11 each).
ADVERSARIAL_ROWS = 33
CONTRACT, EFFICIENCY = Category.CONTRACT, Category.EFFICIENCY
#: Processing the tree-logits-processing probe hands with raw logits (top-k leaves a quarter of V).
LOGITS_TEMPERATURE = 0.7
#: Where to route a global source (named by the determinism and adversarial probes).
ROUTE_HINT = ("draw from the rng argument, or wrap the call in specaudit.adapters.randomness.routed(rng), "
              "which routes numpy's global RNG, Python's random and torch to it")


@dataclass(frozen=True)
class TreeInputs:
    """One call's inputs in the tree contract (probabilities)."""

    tokens: np.ndarray  # [B, N] int64
    parent: np.ndarray  # [B, N] int64
    q: np.ndarray  # [B, N, V] float64
    p: np.ndarray  # [B, N+1, V] float64
    num_nodes: np.ndarray  # [B] int64

    FIELDS = ("tokens", "parent", "q", "p", "num_nodes")

    @property
    def batch(self) -> int:
        """Return B."""
        return int(self.tokens.shape[0])

    def copy(self) -> TreeInputs:
        """Return a deep copy."""
        return TreeInputs(*(getattr(self, name).copy() for name in self.FIELDS))

    def first_change(self, after: TreeInputs) -> str | None:
        """Describe the first entry that differs in ``after`` (a verifier wrote into it), or None."""
        for name in self.FIELDS:
            a, b = getattr(self, name), getattr(after, name)
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"{name} changed shape/dtype from {a.shape} {a.dtype} to {b.shape} {b.dtype}"
            diff = ~((a == b) | (np.isnan(a) & np.isnan(b))) if a.dtype.kind == "f" else a != b
            if diff.any():
                where = tuple(int(i) for i in np.argwhere(diff)[0])
                return f"{name}{list(where)} {a[where]:.6g} -> {b[where]:.6g} ({int(diff.sum())} entries changed)"
        return None


@dataclass(frozen=True)
class Output:
    """A validated tree output, with the law index of every emitted position."""

    path: np.ndarray  # [B, W] node ids, -1 padded
    accepted: np.ndarray  # [B]
    final: np.ndarray  # [B]

    def law_rows(self) -> np.ndarray:
        """Return [B, W+1]: the p row of each emitted position (0 = root, 1 + node after a node)."""
        batch, width = self.path.shape
        rows = np.zeros((batch, width + 1), dtype=np.int64)
        if width:
            rows[:, 1:] = np.where(self.path >= 0, 1 + self.path, 0)
        return rows

    def end_row(self) -> np.ndarray:
        """Return the p row the final token is drawn at: 0, or 1 + the last accepted node."""
        return self.law_rows()[np.arange(self.accepted.size), self.accepted]

    def emitted(self, inputs: TreeInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(token, law_row, on)`` [B, W+1]: path tokens then the final token, and which are emitted."""
        batch, width = self.path.shape
        token = np.zeros((batch, width + 1), dtype=np.int64)
        if width:
            token[:, :width] = np.take_along_axis(inputs.tokens, np.maximum(self.path, 0), axis=1)
        token[np.arange(batch), self.accepted] = self.final
        on = np.arange(width + 1)[None, :] <= self.accepted[:, None]
        return token, self.law_rows(), on


class TreeProber:
    """Calls a tree verifier on probe trees, validating every output and watching the inputs."""

    def __init__(self, verify: Callable[..., Any], spec: Any, seed: int, payload: str = "probs"):
        self.raw = verify  # the verifier in its own payload (probs or logits)
        self.payload = payload
        self.verify = tree.prepare(verify, payload)  # probabilities in
        self.target, self.drafter = spec.chains()
        self.vocab = int(spec.vocab)
        shape = spec.tree
        self.plan = TreePlan(spec.length, PROBE_ROWS, spec.batch, tuple(shape.widths(spec.k)), shape.children,
                             shape.ragged)
        # top-k children are one-hot in q (EAGLE-2, SGLang): probe trees keep them so (SGLang's kernel ignores q)
        self.one_hot_q = shape.children == "topk"
        self.seed = seed
        self.calls = self.rows = 0
        self.seconds = 0.0
        self.check = ""  # name of the probe now running
        self.breaches: list[tuple[str, str, str]] = []  # (check, clause, message)
        self.mutations: list[tuple[str, str]] = []  # (check, what changed)
        self.moved: dict[str, int] = {"numpy": 0, "python": 0}  # calls during which a global source moved
        self.watch = False
        self.deterministic: bool | None = None  # the determinism probe's same-seed verdict, reused by padding

    @property
    def nodes(self) -> int:
        """Return N, the node slots of the scenario's full tree."""
        return self.plan.max_nodes

    def rng(self, tag: str) -> np.random.Generator:
        """Return a Generator fixed by the scenario seed and ``tag``."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, zlib.crc32(tag.encode())]))

    def call(self, inputs: TreeInputs, rng: np.random.Generator, verify: Callable[..., Any] | None = None,
             given: TreeInputs | None = None) -> Output:
        """Call the verifier on a copy of ``inputs``; return the validated output; record breaches and writes.

        ``verify`` and ``given`` (what the verifier is handed, e.g. logits in the p slot) default to
        the probability form and a copy of ``inputs``.
        """
        handed = (inputs if given is None else given).copy()
        pristine = handed.copy()
        watch = self.watch
        if watch:
            np_state, py_state = np.random.get_state(legacy=False), _pyrandom.getstate()
        t0 = time.perf_counter()
        try:
            result = (verify or self.verify)(handed.tokens, handed.parent, handed.q, handed.p, handed.num_nodes, rng)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            self.rows += inputs.batch
            if watch:
                self.moved["numpy"] += not same_state(np_state, np.random.get_state(legacy=False))
                self.moved["python"] += py_state != _pyrandom.getstate()
        change = pristine.first_change(handed)
        if change is not None:
            self.mutations.append((self.check, change))
        try:
            return Output(*tree.validate_tree_output(result, inputs.parent, inputs.num_nodes, self.vocab))
        except ContractError as exc:
            self.breaches.append((self.check, exc.clause, exc.detail))
            raise

    # ---- input builders -------------------------------------------------------------------

    def rows_of(self, chain: Any, n: int, rng: np.random.Generator) -> np.ndarray:
        """Return ``n`` next-token laws [n, V] of ``chain`` in random states."""
        return np.asarray(chain.probs(rng.integers(chain.n_states, size=n)), dtype=np.float64)

    def trees(self, rng: np.random.Generator, batch: int = PROBE_ROWS) -> TreeInputs:
        """Return draft trees of the scenario's shape from random target and drafter states, garbage padding."""
        st = rng.integers(self.target.n_states, size=batch)
        sd = rng.integers(self.drafter.n_states, size=batch)
        drafted = draft_trees(self.target, self.drafter, st, sd, self.plan, rng, garbage_pool(self.vocab, rng))
        return TreeInputs(drafted.tokens.astype(np.int64), drafted.parent.astype(np.int64), drafted.q, drafted.p,
                          drafted.num_nodes.astype(np.int64))

    def truncate(self, inputs: TreeInputs, keep: np.ndarray, rng: np.random.Generator) -> TreeInputs:
        """Return ``inputs`` with only the first ``keep[b]`` nodes of row b (a tree: parents come first); the rest padding."""
        x = inputs.copy()
        keep = np.minimum(np.asarray(keep, dtype=np.int64), x.num_nodes)
        n = self.nodes
        pad = np.arange(n)[None, :] >= keep[:, None]
        pad_p = np.arange(n + 1)[None, :] > keep[:, None]
        pool = garbage_pool(self.vocab, rng)
        x.tokens[pad] = rng.integers(self.vocab, size=int(pad.sum()))
        plausible = np.floor(rng.random((x.batch, n)) * (np.arange(n) + 1)[None, :]).astype(np.int64) - 1
        x.parent[pad] = plausible[pad]
        x.q[pad] = pool[rng.integers(len(pool), size=int(pad.sum()))]
        x.p[pad_p] = pool[rng.integers(len(pool), size=int(pad_p.sum()))]
        x.num_nodes[:] = keep
        return x


def _live(inputs: TreeInputs) -> np.ndarray:
    """Return [B, N]: which node slots are nodes (not padding)."""
    return np.arange(inputs.tokens.shape[1])[None, :] < inputs.num_nodes[:, None]


def path_groups(inputs: TreeInputs) -> tuple[np.ndarray, list[dict[int, list[int]]]]:
    """Return the positions that share a token path, and the children of each such group.

    ``canon`` [B, N+1]: for position ``t`` (0 the root, ``1 + j`` after node ``j``) the first
    position whose node has the same token path (the target sees only the tokens, so every
    position of a group has one target law); padding positions map to themselves. ``kids[b]``
    maps a group's canonical position to the nodes whose parent lies in the group, in index order.
    A probe that sets a target law per position sets one per group (:func:`shared`), so that no
    two nodes with the same token path carry different laws: a tree no drafter and no target can
    produce, on which a verifier that groups nodes by token prefix (EAGLE) is judged wrongly.
    """
    batch, n = inputs.tokens.shape
    canon = np.tile(np.arange(n + 1), (batch, 1))
    kids: list[dict[int, list[int]]] = []
    for b in range(batch):
        first: dict[tuple[int, ...], int] = {(): 0}
        path_of: list[tuple[int, ...]] = []
        groups: dict[int, list[int]] = {}
        for j in range(int(inputs.num_nodes[b])):
            par = int(inputs.parent[b, j])
            path = (path_of[par] if par >= 0 else ()) + (int(inputs.tokens[b, j]),)
            path_of.append(path)
            canon[b, 1 + j] = first.setdefault(path, 1 + j)
            groups.setdefault(int(canon[b, 1 + par if par >= 0 else 0]), []).append(j)
        kids.append(groups)
    return canon, kids


def shared(rows: np.ndarray, canon: np.ndarray) -> np.ndarray:
    """Return ``rows`` [B, N+1, ...] with every position given its group's row (the canonical position's)."""
    return np.take_along_axis(rows, canon.reshape(canon.shape + (1,) * (rows.ndim - 2)), axis=1)


def dyadic(laws: np.ndarray) -> np.ndarray:
    """Return ``laws`` [..., V] rounded to multiples of 2**-bits that sum to exactly 1.0, zeros kept zero.

    Sums of dyadic rationals are exact in float64, so a verifier that renormalises p sees the
    same numbers: the exact references (u q < p when p = q) do not hinge on rounding.
    """
    v = laws.shape[-1]
    scale = 2.0 ** max(24, int(np.ceil(np.log2(v))) + 12)
    k = np.floor(laws * scale)
    k[(laws > 0) & (k == 0)] = 1.0
    top = np.argmax(laws, axis=-1)[..., None]
    np.put_along_axis(k, top, np.take_along_axis(k, top, axis=-1) + scale - k.sum(axis=-1, keepdims=True), axis=-1)
    return k / scale


def _walk(inputs: TreeInputs, take: Callable[[int, int, int], bool]) -> list[list[int]]:
    """Return, per row, the path that descends into the first child ``j`` of the current node with ``take(b, j, cur)``."""
    paths = []
    for b in range(inputs.batch):
        cur, path = -1, []
        for j in range(int(inputs.num_nodes[b])):
            if inputs.parent[b, j] == cur and take(b, j, cur):
                path.append(j)
                cur = j
        paths.append(path)
    return paths


def _path_of(out: Output, b: int) -> list[int]:
    return out.path[b, : out.accepted[b]].tolist()


# ---- corners -------------------------------------------------------------------------------


def tree_one_hot(pr: TreeProber) -> list[CheckResult]:
    """One-hot target at every position: every emitted token is the argmax; the path goes at least as deep as the
    SpecInfer rule's (the first child carrying the argmax, at every node).

    The tree is the drafter's, untouched; the target's token at a position (one per token-path
    group) is, with probability 1/2, one of the group's children's tokens (so paths descend), else
    the argmax of the target's own law there. A verifier that merges nodes with the same token path
    may go deeper; never shallower.
    """
    rng = pr.rng("tree-one-hot/inputs")
    inputs = pr.trees(rng)
    canon, kids = path_groups(inputs)
    live_p = np.arange(pr.nodes + 1)[None, :] <= inputs.num_nodes[:, None]
    top = np.argmax(inputs.p, axis=2)  # [B, N+1]
    pick = rng.random(top.shape) < 0.5
    choice = rng.random(top.shape)
    for b, groups in enumerate(kids):
        for g, nodes in groups.items():
            if pick[b, g]:
                top[b, g] = inputs.tokens[b, nodes[int(choice[b, g] * len(nodes))]]
    top = shared(top[..., None], canon)[..., 0]
    hot = np.zeros_like(inputs.p)
    np.put_along_axis(hot, top[..., None], 1.0, axis=2)
    inputs.p[live_p] = hot[live_p]
    want = np.take_along_axis(top, np.where(inputs.parent >= 0, 1 + inputs.parent, 0), axis=1)  # [B, N]
    expected = _walk(inputs, lambda b, j, cur: bool(inputs.tokens[b, j] == want[b, j]))
    token_fail = path_fail = None
    for label, src in rng_sources(pr, "tree-one-hot"):
        out = pr.call(inputs, src)
        token, rows, on = out.emitted(inputs)
        argmax = np.take_along_axis(top, rows, axis=1)
        wrong = on & (token != argmax)
        if token_fail is None and wrong.any():
            b, i = (int(x) for x in np.argwhere(wrong)[0])
            what = "the final token" if i == out.accepted[b] else f"path position {i} (node {out.path[b, i]})"
            token_fail = (
                f"one-hot target ({label}): row {b}: {what} is {token[b, i]}, the target's only token there is "
                f"{argmax[b, i]} (path {_path_of(out, b)}, final {out.final[b]}); {int(wrong.any(axis=1).sum())} of "
                f"{inputs.batch} rows wrong"
            )
        if path_fail is None:
            for b in range(inputs.batch):
                if out.accepted[b] < len(expected[b]):
                    path_fail = (
                        f"one-hot target ({label}): row {b} took path {_path_of(out, b)}; a child equal to the argmax "
                        f"passes u q < p = 1 for every u, so the path goes at least as deep as {expected[b]} (the first "
                        "argmax child at each node)"
                    )
                    break
    n = inputs.batch
    return [
        result_of("tree-one-hot", CONTRACT, token_fail is None,
                token_fail or f"one-hot target: every emitted token is the argmax ({n} trees x 3 uniform sources)"),
        result_of("tree-one-hot-path", EFFICIENCY, path_fail is None,
                path_fail or "one-hot target: the path descends at least to the first argmax child at every node"),
    ]


def equal_first_child(inputs: TreeInputs) -> TreeInputs:
    """Return ``inputs`` (its own tree, untouched) with the target law at every position that has children set to the
    law its first child was drawn from, one per token-path group, and every law dyadic.

    The first child then passes ``u q < p`` for every ``u < 1`` (i.i.d. siblings share that law, so
    they pass too): every path descends to a leaf. Positions without children keep their law.
    """
    x = inputs.copy()
    live = _live(x)
    live_p = np.arange(x.tokens.shape[1] + 1)[None, :] <= x.num_nodes[:, None]
    x.q[live] = dyadic(x.q[live])
    x.p[live_p] = dyadic(x.p[live_p])
    canon, kids = path_groups(x)
    for b, groups in enumerate(kids):
        for g, nodes in groups.items():
            x.p[b, g] = x.q[b, nodes[0]]
    x.p[:] = np.where(live_p[..., None], shared(x.p, canon), x.p)
    return x


def tree_p_equals_q(pr: TreeProber) -> CheckResult:
    """p = the first child's q at every position: that child passes u q < p for any u < 1, so every path ends at a leaf,
    at least as deep as the first-child chain."""
    name = "tree-p-equals-q"
    inputs = equal_first_child(pr.trees(pr.rng("tree-p=q/inputs")))
    expected = _walk(inputs, lambda b, j, cur: True)
    for label, src in rng_sources(pr, "tree-p=q"):
        out = pr.call(inputs, src)
        for b in range(inputs.batch):
            path = _path_of(out, b)
            n = int(inputs.num_nodes[b])
            last = path[-1] if path else -1
            if len(path) < len(expected[b]) or np.any(inputs.parent[b, :n] == last):
                return result_of(
                    name, EFFICIENCY, False,
                    f"q = p ({label}): row {b} took path {path} and stopped at a node with children; the first child "
                    f"there is drawn from q = p, so it passes u q < p for every u < 1 (the first-child chain is "
                    f"{expected[b]})",
                    row=b, source=label,
                )
    return result_of(name, EFFICIENCY, True, f"q = p: every path descends to a leaf on {inputs.batch} trees x 3 uniform "
                   "sources")


def single_child_inputs(pr: TreeProber) -> tuple[TreeInputs, np.ndarray]:
    """Return single-child trees (a chain of depth D) whose nodes are 'sure' (p = 2 q at c) or 'never' (p(c) = 0).

    A sure node's q is half p plus half a point mass on another token m, its child c drawn from p
    without m, so p(c) / q(c) = 2: accepted whatever u. A never node's child c has p(c) = 0 and
    q puts (1 + p(t)) / 2 > p(t) on t = argmax p, the rest on c, so norm(max(p - q, 0)) is p
    without c and t. The margins survive a verifier's own renormalisation or ``softmax(log p)``.
    Returns the inputs and ``sure`` [B, D].
    """
    rng = pr.rng("tree-single-child/inputs")
    v, depth, rows = pr.vocab, pr.plan.depth, PROBE_ROWS
    p = dyadic(pr.rows_of(pr.target, rows * (depth + 1), rng)).reshape(rows, depth + 1, v)
    q = np.zeros((rows, depth, v))
    tokens = np.zeros((rows, depth), dtype=np.int64)
    sure = rng.random((rows, depth)) < 0.5
    for b in range(rows):
        for j in range(depth):
            law = p[b, j]
            if pr.one_hot_q:  # top-k children: q is one-hot at c; sure: p = q there, never: p(c) = 0
                c = int(np.argmax(law))
                if sure[b, j]:
                    law[:] = 0.0
                    law[c] = 1.0
                elif law[c] >= 1.0:  # a one-hot law has no other token: c is any token of p = 0
                    c = (c + 1) % v
                else:
                    law[c] = 0.0
                    law[:] = dyadic(law / law.sum())
                q[b, j, c], tokens[b, j] = 1.0, c
                continue
            if sure[b, j]:
                m = int(np.argmin(law))
                q[b, j] = 0.5 * law
                q[b, j, m] += 0.5
                rest = law.copy()
                rest[m] = 0.0
                tokens[b, j] = sample_rows(rest[None, :], rng.random(1))[0]
                continue
            c = int(rng.integers(v))
            law[c] = 0.0
            if law.max() >= law.sum():  # one-hot (or empty) after removing c: spread mass so that p(t) < 1
                law += np.where(np.arange(v) == c, 0.0, max(law.sum(), 1.0) / (v - 1))
            law[:] = dyadic(law / law.sum())
            t = int(np.argmax(law))
            q[b, j, t] = 0.5 * (1.0 + law[t])
            q[b, j, c] = 1.0 - q[b, j, t]
            tokens[b, j] = c
    parent = np.broadcast_to(np.arange(depth) - 1, (rows, depth)).astype(np.int64).copy()
    num_nodes = rng.integers(0, depth + 1, size=rows).astype(np.int64)
    inputs = TreeInputs(tokens, parent, q, p, num_nodes)
    pad_q = np.arange(depth)[None, :] >= num_nodes[:, None]
    pool = garbage_pool(v, rng)
    inputs.q[pad_q] = pool[rng.integers(len(pool), size=int(pad_q.sum()))]
    pad_p = np.arange(depth + 1)[None, :] > num_nodes[:, None]
    inputs.p[pad_p] = pool[rng.integers(len(pool), size=int(pad_p.sum()))]
    return inputs, sure


def tree_single_child(pr: TreeProber) -> CheckResult:
    """Single-child trees are the chain rule: p >= q always accepted; the final token in the residual's support."""
    name = "tree-single-child"
    if pr.vocab < 3:
        return skipped(name, EFFICIENCY, f"V = {pr.vocab}: a rejected child needs a residual apart from it and the argmax")
    inputs, sure = single_child_inputs(pr)
    live = _live(inputs)
    run = np.cumprod(sure & live, axis=1).sum(axis=1)  # the sure prefix: accepted whatever u
    for label, src in rng_sources(pr, "tree-single-child"):
        out = pr.call(inputs, src)
        for b in range(inputs.batch):
            r, got = int(run[b]), int(out.accepted[b])
            if got != r:
                if got < r:
                    j = got
                    c = inputs.tokens[b, j]
                    why = (f"child {j} (token {c}) has p = {inputs.p[b, j, c]:.3g} >= q = {inputs.q[b, j, c]:.3g} there, "
                           "so u q < p holds for every u < 1")
                else:
                    j = r
                    why = f"child {j} (token {inputs.tokens[b, j]}) has p = 0 there and can never be accepted"
                return result_of(name, EFFICIENCY, False,
                               f"single-child tree ({label}): row {b} (num_nodes = {inputs.num_nodes[b]}) accepted {got} "
                               f"children, the chain rule accepts {r}: {why}", row=b, source=label)
            y = int(out.final[b])
            law = inputs.p[b, r]
            if r < inputs.num_nodes[b]:  # stopped at a rejected child: the residual norm(max(p - q, 0))
                residual = np.maximum(law - inputs.q[b, r], 0.0)
                if residual[y] <= 0:
                    return result_of(
                        name, EFFICIENCY, False,
                        f"single-child tree ({label}): row {b}: child {r} (token {inputs.tokens[b, r]}) has p = 0, so the "
                        f"chain rule rejects it and draws from norm(max(p - q, 0)); the final token is {y} with p = "
                        f"{law[y]:.3g} <= q = {inputs.q[b, r, y]:.3g}, outside that residual's support (a replacement drawn "
                        "from p or from the wrong residual, or the child never tested)", row=b, source=label)
            elif law[y] <= 0:
                return result_of(name, EFFICIENCY, False,
                               f"single-child tree ({label}): row {b}: the final token after {r} accepted children is {y}, "
                               "which has p = 0 at the leaf", row=b, source=label)
    return result_of(name, EFFICIENCY, True, f"single-child trees: the chain rule's accepted count and residual support on "
                   f"{inputs.batch} chains of depth {pr.plan.depth} x 3 uniform sources")


# ---- contract: determinism, padding, adversarial uniforms, logits, inputs ----------------------


def _first_diff(a: Output, b: Output) -> int | None:
    """Return the first row where two outputs differ, or None."""
    width = max(a.path.shape[1], b.path.shape[1])
    pa = np.pad(a.path, ((0, 0), (0, width - a.path.shape[1])), constant_values=-1)
    pb = np.pad(b.path, ((0, 0), (0, width - b.path.shape[1])), constant_values=-1)
    rows = np.flatnonzero((pa != pb).any(axis=1) | (a.final != b.final))
    return int(rows[0]) if rows.size else None


def tree_determinism(pr: TreeProber) -> CheckResult:
    """Same seed -> same output; on a non-degenerate output law, another seed -> another output.

    Notes
    -----
    The seed clause uses trees of no node, whose final token is drawn from p[b, 0], the
    scenario's own target rows: two independent seeds agree on all rows with probability
    prod_b sum_x p_b(x)**2 (computed exactly). At or above ``DEGENERATE`` only the same-seed
    clause applies.
    """
    pr.watch = True
    try:
        return _determinism(pr)
    finally:
        pr.watch = False


def _determinism(pr: TreeProber) -> CheckResult:
    name = "tree-determinism"
    rng = pr.rng("tree-determinism/inputs")
    ragged = pr.trees(rng)
    empty = pr.truncate(pr.trees(rng), np.zeros(PROBE_ROWS, dtype=np.int64), rng)
    collision = float(np.exp(np.log(np.maximum((empty.p[:, 0] ** 2).sum(axis=1), 1e-300)).sum()))
    seeds = [int(s) for s in pr.rng("tree-determinism/seeds").integers(2**32, size=2)]
    before = dict(pr.moved)
    g = np.random.default_rng(seeds[0])
    state = g.bit_generator.state
    first = pr.call(ragged, g)
    drew = g.bit_generator.state != state
    second = pr.call(ragged, np.random.default_rng(seeds[0]))
    b = _first_diff(first, second)
    pr.deterministic = b is None
    if b is not None:
        return result_of(
            name, CONTRACT, False,
            f"same seed {seeds[0]}, same trees, different outputs: row {b} gave path {_path_of(first, b)} final "
            f"{first.final[b]}, then path {_path_of(second, b)} final {second.final[b]}: the verifier draws from a "
            f"source other than rng: {foreign_source(pr, before)}",
            row=b, drew=drew, cause="foreign-source",
        )
    if collision >= DEGENERATE:
        return result_of(name, CONTRACT, True,
                       f"same seed -> identical outputs; the scenario's output law is (nearly) degenerate (two seeds agree "
                       f"with probability {collision:.3g}), so another seed need not give another output", drew=drew)
    g = np.random.default_rng(seeds[0])
    state = g.bit_generator.state
    one = pr.call(empty, g)
    drew |= g.bit_generator.state != state
    other = pr.call(empty, np.random.default_rng(seeds[1]))
    if _first_diff(one, other) is None:
        top = np.argmax(empty.p[:, 0], axis=1)
        if not drew and np.array_equal(one.final, top):
            cause, why = "argmax", "it is not sampling at all: every final token is the argmax of p"
        elif not drew:
            cause, why = "fixed-seed", (
                "it never draws from rng and restarts a fixed seed on every call (a generator seeded with a constant "
                "inside the call, or np.random.seed / random.seed / torch.manual_seed with a constant)")
        else:
            cause, why = "ignores-draws", "it draws from rng but its output does not depend on the draws"
        return result_of(
            name, CONTRACT, False,
            f"seeds {seeds[0]} and {seeds[1]} gave identical outputs on {PROBE_ROWS} trees of no node (final token from "
            f"the scenario's target; a lossless sampler agrees with probability {collision:.3g}): {why}",
            drew=drew, cause=cause,
        )
    return result_of(name, CONTRACT, True,
                   f"same seed -> identical outputs; another seed -> different outputs (chance of agreeing {collision:.3g})",
                   drew=drew)


def tree_padding_independence(pr: TreeProber) -> CheckResult:
    """Changing only the node slots past num_nodes (tokens, parents, q rows, p rows) changes nothing."""
    name = "tree-padding-independence"
    if pr.deterministic is False:
        return skipped(name, CONTRACT, "the verifier is not deterministic for a fixed seed (see tree-determinism)")
    rng = pr.rng("tree-padding/inputs")
    full = pr.trees(rng)
    base = pr.truncate(full, rng.integers(0, np.maximum(full.num_nodes, 1)), rng)  # every row padded
    v, n = pr.vocab, pr.nodes
    pad = ~_live(base)
    pad_p = np.arange(n + 1)[None, :] > base.num_nodes[:, None]

    def variant(token: int, chain: bool) -> TreeInputs:
        law = np.full(v, 0.1 / (v - 1))
        law[token] = 0.9
        x = base.copy()
        parents = np.broadcast_to(np.arange(n) - 1 if chain else np.full(n, -1), x.parent.shape)
        x.tokens[pad], x.q[pad], x.p[pad_p], x.parent[pad] = token, law, law, parents[pad]
        return x

    seed = int(pr.rng("tree-padding/seed").integers(2**32))
    low = pr.call(variant(0, False), np.random.default_rng(seed))
    if pr.deterministic is None:  # determinism did not run first: check the same-seed clause here
        if _first_diff(low, pr.call(variant(0, False), np.random.default_rng(seed))) is not None:
            return skipped(name, CONTRACT, "the verifier is not deterministic for a fixed seed (see tree-determinism)")
    high = pr.call(variant(v - 1, True), np.random.default_rng(seed))
    b = _first_diff(low, high)
    if b is not None:
        return result_of(
            name, CONTRACT, False,
            f"only the node slots past num_nodes changed (token 0 vs {v - 1}, root vs chain parents, same seed) and row "
            f"{b} (num_nodes = {base.num_nodes[b]}) went from path {_path_of(low, b)} final {low.final[b]} to path "
            f"{_path_of(high, b)} final {high.final[b]}: the verifier reads padding",
            row=b,
        )
    return result_of(name, CONTRACT, True,
                   f"output unchanged when the node slots past num_nodes change ({base.batch} trees, same seed)")


def adversarial_inputs(pr: TreeProber) -> TreeInputs:
    """Return trees that expose boundary bugs at u = 0 and u = 1 - 2**-53 (three kinds of rows).

    The trees are the drafter's (tokens and q untouched); only the target laws change, one per
    token-path group. Kind 0: every child has p = 0 at its position (q > 0) and p is peaked with
    zeros on its upper half (its last token of mass below V - 1 where the children leave room), so
    the residual after the rejected children is peaked with trailing zeros. Kind 1: p is the first
    child's q wherever there are children (accepted), and a law on the first three tokens at the
    leaves, so the final token is drawn from a law with trailing zeros. Kind 2: kind 0 on ragged
    trees (padding past num_nodes).
    """
    v = pr.vocab
    rng = pr.rng("tree-adversarial/inputs")
    x = pr.trees(rng, ADVERSARIAL_ROWS)
    x = pr.truncate(x, np.where(np.arange(ADVERSARIAL_ROWS) % 3 == 2,
                                rng.integers(0, x.num_nodes + 1), x.num_nodes), rng)
    kind = np.arange(ADVERSARIAL_ROWS) % 3
    x = equal_first_child(x)  # kind 1's inner positions; the rest is set below
    head = max(1, min(3, v - 1))
    thirds = np.where(np.arange(v) < head, 1.0 / head, 0.0)
    canon, kids = path_groups(x)
    for b in range(ADVERSARIAL_ROWS):
        m = int(x.num_nodes[b])
        if kind[b] == 1:
            leaf = ~np.isin(canon[b, : m + 1], list(kids[b]))
            x.p[b, : m + 1][leaf] = thirds
            continue
        for t in range(m + 1):
            g = int(canon[b, t])
            x.p[b, t] = _peaked_without(v, {int(x.tokens[b, j]) for j in kids[b].get(g, [])})
    return x


def _peaked_without(v: int, children: set[int]) -> np.ndarray:
    """Return a law 2**-i on the tokens outside ``children``, zero on the upper half of V where that leaves mass, else
    on the last token of mass where that does (trailing zeros: a CDF that runs past them falls off to V - 1)."""
    law = np.where(np.isin(np.arange(v), list(children)), 0.0, 2.0 ** -np.arange(v))
    for cut in (max(1, v // 2), v - 1):
        trimmed = np.where(np.arange(v) >= cut, 0.0, law)
        if trimmed.sum() > 0:
            law = trimmed
            break
    if law.sum() == 0:  # every token is a child's: the children cannot all have p = 0
        law = 2.0 ** -np.arange(v)
    return law / law.sum()


#: Boundary bug classes the tree adversarial probe tells apart, and how its failure names them.
BOUNDARY_CLASSES = {
    "accepts-p0": "an accepted child has p = 0: `r <= p/q` accepts it at u = 0 (EAGLE evaluate_posterior "
                  "`if r <= acp`; sglang #35771 class); accept iff u q < p",
    "cdf-falloff": "the final token is id V - 1 with p = 0: the inverse CDF ran past the last token of positive mass "
                   "at u -> 1 and fell off to V - 1; clamp to the last index with mass (vLLM #20531 class)",
    "sampled-p0": "the final token has p = 0 at a boundary uniform: the residual or bonus law gives mass to tokens "
                  "outside p's support",
    "vocab-range": "a final id >= V: the inverse CDF is not clamped at u -> 1 (vLLM #20531 class)",
}


def _zero_p(inputs: TreeInputs, out: Output, label: str) -> tuple[list[str], set[str]]:
    """Return a line per emitted token of target probability 0 at its position, and their classes."""
    token, rows, on = out.emitted(inputs)
    mass = inputs.p[np.arange(inputs.batch)[:, None], rows, token]
    findings, classes = [], set()
    for b, i in zip(*np.nonzero(on & (mass <= 0))):
        b, i = int(b), int(i)
        if i < out.accepted[b]:
            classes.add("accepts-p0")
            findings.append(f"({label}) row {b}: accepted node {out.path[b, i]} (token {token[b, i]}) has p = 0")
        else:
            classes.add("cdf-falloff" if token[b, i] == inputs.p.shape[-1] - 1 else "sampled-p0")
            findings.append(f"({label}) row {b}: the final token {token[b, i]} has p = 0")
    return findings, classes


def tree_adversarial_uniforms(pr: TreeProber) -> CheckResult:
    """Uniforms 0.0 and 1 - 2**-53 (both phases) on the sibling tests and the final draw: no p = 0 token, no id >= V.

    Reach: a phase counts only when the scripted uniforms the verifier consumed, leaving out those
    taken through ``integers`` (a seed for another generator), cover every tree with a node. Without
    reach and without a finding the probe is "not applicable", never "passed".
    """
    name = "tree-adversarial-uniforms"
    inputs = adversarial_inputs(pr)
    rows = int((inputs.num_nodes > 0).sum()) or inputs.batch
    findings: list[str] = []
    classes: set[str] = set()
    draws, coins, seeding, unscripted = 0, [], 0, False
    call: dict[str, Any] | None = None  # the first failing call, replayable (the verifier's own form: probabilities)
    for start in (0, 1):
        src = ScriptedUniforms(start, seed=pr.seed)
        label = "0.0 first" if start == 0 else "1 - 2**-53 first"
        source = source_of(src)
        try:
            out: Output | None = pr.call(inputs, src)
        except ContractError as exc:
            if exc.clause != "tree-vocab-range":
                raise
            findings.append(f"[tree-vocab-range] ({label}) {exc.detail}")
            classes.add("vocab-range")
            out = None
        draws += src.draws
        coins.append(src.coins)
        seeding += src.counts.get("integers", 0)
        unscripted |= src.unscripted
        if out is not None:
            found, kinds = _zero_p(inputs, out, label)
            if found and call is None and pr.payload == "probs" and source is not None:
                call = recorded(pr.verify, Call(inputs.tokens, inputs.q, inputs.p, inputs.num_nodes, source,
                                                "tree-p-positive", parent=inputs.parent), CALL_FLOATS)
            findings += found
            classes |= kinds
    if findings:
        why = "; ".join(BOUNDARY_CLASSES[c] for c in sorted(classes))
        return result_of(name, CONTRACT, False, f"{findings[0]}; {len(findings)} finding(s) with uniforms 0.0 / 1 - 2**-53: "
                       f"{why}", findings=findings[:20], draws=draws, coins=coins, classes=sorted(classes), call=call)
    if min(coins) < rows:
        if draws == 0:
            why = ("it drew only through Generator methods that ScriptedUniforms does not script"
                   if unscripted else "the verifier never drew from the rng it was given")
        else:
            why = (f"only {min(coins)} scripted uniforms reached it for {rows} trees with a node"
                   + (f" ({seeding} taken through rng.integers, as a seed for another generator)" if seeding else "")
                   + (", the rest drawn through methods ScriptedUniforms does not script" if unscripted else ""))
        return skipped(name, CONTRACT, f"{why}, so the adversarial uniforms never reached its sibling tests; wrap "
                        "the call in specaudit.adapters.randomness.routed(rng) (it routes torch, numpy's global RNG and "
                        "Python's random to the scripted rng), or substitute specaudit.contract.uniforms.ScriptedUniforms "
                        "for a framework's own random source")
    return result_of(name, CONTRACT, True, f"{min(coins)}+ scripted uniforms per phase (0.0, 1 - 2**-53) reached the sibling "
                   f"tests and final draws of {rows} trees: no token of probability 0, every id in [0, {pr.vocab}) x 2 "
                   "phases", draws=draws, coins=coins)


def logits_params(vocab: int) -> SamplingParams:
    """Return the processing the logits probe hands: temperature 0.7 and top-k keeping a quarter of V (at least 1)."""
    return SamplingParams(temperature=LOGITS_TEMPERATURE, top_k=max(1, vocab // 4))


def tree_logits_processing(pr: TreeProber) -> CheckResult:
    """Logits form: raw target logits with temperature and top-k; every emitted token lies in the processed support.

    The children keep the scenario's laws; a child outside the processed support must be
    rejected, and the final token (after rejections, or the bonus at an accepted leaf or a
    childless root) drawn from the processed law. A verifier that tests or samples any position
    with ``softmax(logits)`` emits tokens of processed probability 0 here (EAGLE's
    ``sample_p = torch.softmax(gt_logits)`` where no child was rejected).
    """
    name = "tree-logits-processing"
    rng = pr.rng("tree-logits/inputs")
    inputs = pr.trees(rng)
    inputs = pr.truncate(inputs, np.where(np.arange(inputs.batch) % 4 == 0, 0, inputs.num_nodes), rng)
    params = logits_params(pr.vocab)
    logits = 2.0 * rng.standard_normal(inputs.p.shape)  # every token of positive raw mass
    # at half the positions with children, one child's token gets a raw logit above the rest (the processed argmax,
    # accepted), so some paths reach leaves; one set of logits per token-path group
    canon, kids = path_groups(inputs)
    pick, choice = rng.random(canon.shape) < 0.5, rng.random(canon.shape)
    for b, groups in enumerate(kids):
        for g, nodes in groups.items():
            if pick[b, g]:
                logits[b, g, inputs.tokens[b, nodes[int(choice[b, g] * len(nodes))]]] = logits[b, g].max() + 8.0
    logits = shared(logits, canon)
    processed = process(logits, params)
    truth = TreeInputs(inputs.tokens, inputs.parent, inputs.q, processed, inputs.num_nodes)
    given = TreeInputs(inputs.tokens, inputs.parent, inputs.q, logits, inputs.num_nodes)
    verify = tree.bind_logits(pr.raw, params)
    for label, src in rng_sources(pr, "tree-logits"):
        out = pr.call(truth, src, verify=verify, given=given)
        found, _ = _zero_p(truth, out, label)
        if found:
            return result_of(
                name, CONTRACT, False,
                f"{found[0]} under the processed target ({params.as_dict()}): {len(found)} emitted token(s) outside "
                "process(target_logits, params); some position is tested or sampled from softmax(logits) unprocessed "
                "(EAGLE evaluate_posterior samples the bonus from softmax(logits) class)",
                findings=found[:20], params=params.as_dict(),
            )
    return result_of(name, CONTRACT, True, f"every emitted token lies in the support of process(target_logits, "
                   f"{params.as_dict()}) on {inputs.batch} trees x 3 uniform sources")


def tree_inputs_unmodified(pr: TreeProber) -> CheckResult:
    """No call wrote into tokens, parent, q, p or num_nodes (copies compared after every call)."""
    name = "tree-inputs-unmodified"
    pr.call(pr.trees(pr.rng("tree-inputs/inputs")), pr.rng("tree-inputs"))
    if pr.mutations:
        where, change = pr.mutations[0]
        return result_of(name, CONTRACT, False,
                       f"the verifier writes into its inputs: {change} (in {where}); {len(pr.mutations)} of {pr.calls} "
                       "calls", mutations=[f"{w}: {c}" for w, c in pr.mutations[:10]])
    return result_of(name, CONTRACT, True, f"tokens, parent, q, p and num_nodes unchanged after all {pr.calls} calls")


def tree_contract_clauses(pr: TreeProber) -> CheckResult:
    """Every clause of the tree contract held on every probe call."""
    name = "tree-contract-clauses"
    if pr.breaches:
        clauses = sorted({c for _, c, _ in pr.breaches})
        where, clause, message = pr.breaches[0]
        return result_of(name, CONTRACT, False,
                       f"clause(s) {', '.join(clauses)} broken on {len(pr.breaches)} call(s); first in {where}: "
                       f"[{clause}] {message}", clauses=clauses)
    return result_of(name, CONTRACT, True,
                   f"all {len(tree.CLAUSES)} clauses of the tree contract held on {pr.calls} calls ({pr.rows:,} trees)")


#: (name, category, probe) in run order; registered in :data:`specaudit.checks.CHECKS` after the chain probes.
TREE_CHECKS: list[tuple[str, Category, Callable[[TreeProber], CheckResult | list[CheckResult]]]] = [
    ("tree-one-hot", CONTRACT, tree_one_hot),
    ("tree-p-equals-q", EFFICIENCY, tree_p_equals_q),
    ("tree-single-child", EFFICIENCY, tree_single_child),
    ("tree-determinism", CONTRACT, tree_determinism),
    ("tree-padding-independence", CONTRACT, tree_padding_independence),
    ("tree-adversarial-uniforms", CONTRACT, tree_adversarial_uniforms),
    ("tree-logits-processing", CONTRACT, tree_logits_processing),
    ("tree-inputs-unmodified", CONTRACT, tree_inputs_unmodified),
    ("tree-contract-clauses", CONTRACT, tree_contract_clauses),
]
#: Result names a probe emits besides its own.
ALSO_EMITS: dict[str, tuple[str, ...]] = {"tree-one-hot": ("tree-one-hot-path",)}
#: Probes that apply only to the logits form of the tree contract (``--contract logits``).
LOGITS_ONLY = ("tree-logits-processing",)
#: Probes that need p handed bit for bit: ``softmax(log p)`` is p only to rounding, and p = q exactly
#: is the point of the p = q corner, so the logits form skips it.
PROBS_ONLY = ("tree-p-equals-q",)


def run_tree_probes(
    verify: Callable[..., Any], spec: Any, seed: int, gate_efficiency: bool = True, contract: str = "probs"
) -> ExactOutcome:
    """Run :data:`TREE_CHECKS` on an ``algorithm: tree`` scenario with its own chains and tree shape.

    ``verify`` is the target as the run drives it (already ``contract.guarded``), in the payload
    ``contract`` (probs, or logits for the logits form). Returns no checks for another algorithm.
    """
    if getattr(spec, "algorithm", "chain") != "tree":
        return ExactOutcome(())
    skip = PROBS_ONLY if contract == "logits" else LOGITS_ONLY
    plan = [entry for entry in TREE_CHECKS if entry[0] not in skip]
    pr = TreeProber(verify, spec, seed, contract)
    results, error = probe_all(pr, plan, gate_efficiency, clauses="tree-contract-clauses")
    return ExactOutcome(tuple(results), error, pr.calls, pr.seconds, {"rows": pr.rows})
