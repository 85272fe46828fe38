"""The tree contract: a batch of draft trees verified in one call, and the validation of its output.

::

    verify_tree(tokens[B,N] int64, parent[B,N] int64, q[B,N,V] float64, p[B,N+1,V] float64,
                num_nodes[B] int64, rng: np.random.Generator) -> (path[B,W] int64, final[B] int64)

Row ``b`` holds a draft tree of ``num_nodes[b] <= N`` nodes (ragged trees: each row its own
shape). Node ``j < num_nodes[b]`` carries the draft token ``tokens[b, j]``, drawn from
``q[b, j]``, the law that token was *really* sampled from given its earlier siblings (the drafter's
q for i.i.d. children, q with earlier siblings removed for sampling without replacement, one-hot
for deterministic top-k). Its parent is ``parent[b, j]`` in ``[-1, j)``; -1 is the root, the
context the round starts from. Nodes are in topological order (a parent before its children) and
siblings are tested in index order (SpecInfer 2305.09781, Alg. 2).

``p[b, 0]`` is the target law at the root; ``p[b, 1 + j]`` the target law after the path to node
``j``: the position of ``j``'s children, or the bonus position when ``j`` is a leaf. Everything
past ``num_nodes[b]`` (tokens, parents, q and p rows) is garbage the verifier must not read;
specaudit fills padding parents with plausible values so that reading them changes the tree.

The verifier returns the accepted path as node ids in root-to-leaf order, padded with -1 (any
width ``W``), and the final token: the replacement drawn at the first node none of whose children
was accepted, or the bonus at an accepted leaf. The round emits ``tokens[b, path[b]]`` then
``final[b]``: accepted + 1 tokens.

Logits form (``--contract logits``): the verifier processes the target logits itself, as
EAGLE's ``evaluate_posterior`` and SGLang's tree sampling do::

    verify_tree(tokens[B,N], parent[B,N], q[B,N,V], target_logits[B,N+1,V], num_nodes[B],
                params: SamplingParams, rng) -> (path[B,W], final[B])

``q`` stays the law each child was really drawn from (a drafter's sibling laws, without
replacement or one-hot, are not a processing of logits). The output must follow the processed
target ``process(target_logits, params)`` at every node, the final token's included. In a
simulated scenario (:func:`prepare`) the verifier gets ``log p`` with identity processing, so the
statistics test its tree rule; the ``tree-logits-processing`` probe
(:mod:`specaudit.checks.tree_probes`) hands it raw logits and real parameters.

Each clause has a stable id, used in messages and reports. Block verification (Sun et al.
2403.10444) keeps the chain contract of :mod:`specaudit.contract.chain`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

import numpy as np

from specaudit.chains.processing import SamplingParams
from specaudit.contract.chain import as_int64, returned_arrays
from specaudit.errors import ContractError, UsageError

#: Clause id -> what a tree verifier must do.
CLAUSES: dict[str, str] = {
    "tree-return": "return a pair (path, final)",
    "tree-shape": "path has shape (B, W) for some W >= 0 and final has shape (B,)",
    "tree-dtype": "path and final hold integers (not floats, NaN or inf)",
    "tree-padding": "path[b] lists node ids, then only -1",
    "tree-node-range": "every node id on path[b] lies in [0, num_nodes[b])",
    "tree-path": "path[b, 0] is a child of the root and path[b, i] a child of path[b, i-1]",
    "tree-vocab-range": "final[b] lies in [0, V)",
}

#: The contracts a verifier can follow; a scenario's algorithm picks one.
CONTRACTS = ("chain", "tree", "loop")
#: Which contract each scenario algorithm drives (block verification keeps the chain contract).
CONTRACT_OF_ALGORITHM = {"chain": "chain", "block": "chain", "tree": "tree"}


class TreeVerifier(Protocol):
    """A callable in the tree contract."""

    def __call__(
        self,
        tokens: np.ndarray,
        parent: np.ndarray,
        q: np.ndarray,
        p: np.ndarray,
        num_nodes: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, np.ndarray]: ...


class TreeLogitsVerifier(Protocol):
    """A callable in the logits form of the tree contract."""

    def __call__(
        self,
        tokens: np.ndarray,
        parent: np.ndarray,
        q: np.ndarray,
        target_logits: np.ndarray,
        num_nodes: np.ndarray,
        params: SamplingParams,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, np.ndarray]: ...


#: How a tree verifier takes the target: processed probabilities, or raw logits plus parameters.
PAYLOADS = ("probs", "logits")


def bind_logits(verify_logits: Callable[..., Any], params: SamplingParams) -> Callable[..., Any]:
    """Return a tree-contract callable whose ``p`` slot carries target logits handed on with ``params``."""

    def call(tokens, parent, q, target_logits, num_nodes, rng):
        return verify_logits(tokens, parent, q, target_logits, num_nodes, params, rng)

    call.params = params  # type: ignore[attr-defined]
    return call


def as_probs(verify_logits: Callable[..., Any]) -> Callable[..., Any]:
    """Return a tree-contract callable (probabilities in) running ``verify_logits`` on ``log p``.

    Identity processing of ``log p`` is ``p``: the simulated scenarios and every probability-based
    probe reach a verifier of the logits form this way.
    """
    identity = SamplingParams()

    def call(tokens, parent, q, p, num_nodes, rng):
        with np.errstate(divide="ignore"):
            return verify_logits(tokens, parent, q, np.log(p), num_nodes, identity, rng)

    return call


def prepare(verify: Callable[..., Any], payload: str) -> Callable[..., Any]:
    """Return the tree-contract callable (probabilities in) that drives ``verify`` taking ``payload``."""
    if payload not in PAYLOADS:
        raise UsageError(f"contract = {payload!r}; allowed: {', '.join(PAYLOADS)}")
    return as_probs(verify) if payload == "logits" else verify


F = TypeVar("F", bound=Callable[..., Any])


def tree_contract(func: F) -> F:
    """Mark ``func`` as a verifier in the tree contract (sets ``func.specaudit_contract``)."""
    func.specaudit_contract = "tree"  # type: ignore[attr-defined]
    return func


def contract_of(func: Callable[..., Any]) -> str:
    """Return the contract ``func`` follows: its declared ``specaudit_contract``, else by signature.

    Without a declaration, a verifier with a positional parameter named ``parent`` or ``parents``
    follows the tree contract; anything else is taken to follow the chain contract.
    """
    declared = getattr(func, "specaudit_contract", None)
    if declared is not None:
        if declared not in CONTRACTS:
            raise UsageError(
                f"specaudit_contract = {declared!r} on {getattr(func, '__qualname__', func)!r}; allowed: "
                + ", ".join(repr(c) for c in CONTRACTS)
            )
        return str(declared)
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):  # builtins and C extensions without a signature
        return "chain"
    return "tree" if {"parent", "parents"} & set(params) else "chain"


def check_compatible(func: Callable[..., Any], label: str, scenarios: Iterable[Any], payload: str = "probs") -> None:
    """Raise UsageError when ``func``'s contract differs from what a scenario's algorithm drives.

    ``scenarios`` are LoadedScenario objects (``.name``, ``.path``, ``.spec.algorithm``);
    ``payload`` is the run's ``--contract`` (probs or logits; a tree verifier takes either form).
    """
    have = contract_of(func)
    if have == "tree":
        _check_tree_arity(func, label, payload)
    for loaded in scenarios:
        algorithm = getattr(loaded.spec, "algorithm", "chain")
        looped = getattr(loaded.spec, "mode", "sample") == "loop"
        want = "loop" if looped else CONTRACT_OF_ALGORITHM[algorithm]
        if want != have:
            drives = "mode: loop" if looped else f"algorithm: {algorithm}"
            if want == "loop":
                fix = ("pass a loop target loop(trace, models, rng) -> {request id: tokens} declaring "
                       "specaudit_contract = 'loop' (see specaudit.contract.loop), or choose other scenarios")
            elif have == "loop":
                fix = "a loop target runs mode: loop scenarios only (e.g. -s tag:loop)"
            elif have == "chain":
                fix = (
                    "pass a tree verifier verify(tokens, parent, q, p, num_nodes, rng) (see specaudit.contract.tree), "
                    "or choose chain/block scenarios (e.g. drop -s tag:tree)"
                )
            else:
                fix = (
                    "pass a chain verifier verify(draft, q, p, num_draft, rng), or choose tree scenarios "
                    "(-s tag:tree)"
                )
            raise UsageError(
                f"{loaded.path}: scenario {loaded.name!r} has {drives}, which drives the "
                f"{want} contract, but TARGET {label!r} follows the {have} contract; {fix}"
            )


def _check_tree_arity(func: Callable[..., Any], label: str, payload: str) -> None:
    """Refuse a tree verifier whose positional parameters cannot take ``payload``'s arguments."""
    if payload not in PAYLOADS:
        raise UsageError(f"--contract {payload}; allowed: {', '.join(PAYLOADS)}")
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return
    positional = [p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    required = sum(p.default is inspect.Parameter.empty for p in positional)
    names = tuple(p.name for p in positional)
    if payload == "probs" and required > 6:
        raise UsageError(
            f"TARGET {label!r} takes {required} arguments {names}; the tree contract passes 6 (tokens, parent, q, p, "
            "num_nodes, rng). For verify(tokens, parent, q, target_logits, num_nodes, params, rng) pass --contract logits"
        )
    if payload == "logits" and len(positional) < 7:
        raise UsageError(
            f"--contract logits: TARGET {label!r} takes {len(positional)} arguments {names}; the logits form of the tree "
            "contract passes 7 (tokens, parent, q, target_logits, num_nodes, params, rng). For verify(tokens, parent, "
            "q, p, num_nodes, rng) leave out --contract logits"
        )


def _first_bad_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))[0])


def validate_tree_output(
    result: Any, parent: np.ndarray, num_nodes: np.ndarray, vocab: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check a tree verifier's return value; return ``(path, accepted, final)`` as int64.

    ``path`` is trimmed or padded to width ``max(accepted)``; ``accepted[b]`` counts the node
    ids on row ``b``'s path. Raises ContractError naming the first clause broken and the row.
    """
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ContractError("tree-return", f"{CLAUSES['tree-return']}; got {type(result).__name__}")
    path, final = returned_arrays("tree-shape", CLAUSES["tree-shape"], path=result[0], final=result[1])
    batch = parent.shape[0]
    if path.ndim != 2 or path.shape[0] != batch or final.shape != (batch,):
        raise ContractError(
            "tree-shape", f"{CLAUSES['tree-shape']}: expected ({batch}, W) and ({batch},), got {path.shape} and {final.shape}"
        )
    path, final = as_int64("tree-dtype", CLAUSES["tree-dtype"], path=path, final=final)
    on = path != -1
    accepted = np.cumprod(on, axis=1).sum(axis=1) if path.shape[1] else np.zeros(batch, dtype=np.int64)
    bad = on & (np.arange(path.shape[1])[None, :] >= accepted[:, None])
    if bad.any():
        b = _first_bad_row(bad)
        raise ContractError("tree-padding", f"{CLAUSES['tree-padding']}: row {b} is {path[b].tolist()}")
    bad = on & ((path < 0) | (path >= num_nodes[:, None]))
    if bad.any():
        b = _first_bad_row(bad)
        raise ContractError(
            "tree-node-range", f"{CLAUSES['tree-node-range']}: row {b} has path {path[b].tolist()}, num_nodes = {num_nodes[b]}"
        )
    if path.shape[1]:
        safe = np.where(on, path, 0)
        parents = np.take_along_axis(parent, safe, axis=1)
        before = np.concatenate([np.full((batch, 1), -1, dtype=np.int64), path[:, :-1]], axis=1)
        bad = on & (parents != before)
        if bad.any():
            b = _first_bad_row(bad)
            raise ContractError(
                "tree-path", f"{CLAUSES['tree-path']}: row {b} has path {path[b].tolist()} with parents {parents[b].tolist()}"
            )
    bad = (final < 0) | (final >= vocab)
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        raise ContractError("tree-vocab-range", f"{CLAUSES['tree-vocab-range']} (V = {vocab}): row {b} has final = {final[b]}")
    width = int(accepted.max()) if batch else 0
    return path[:, :width], accepted, final


#: Tolerance of the "laws sum to 1" invariant (float64 laws rounded by the scenario's chains).
LAW_SUM_TOL = 1e-9


def input_violations(tokens: np.ndarray, parent: np.ndarray, q: np.ndarray, p: np.ndarray, num_nodes: np.ndarray,
                     children: str) -> list[str]:
    """Return what in a tree call's inputs no drafter and no target can produce (empty when it is a real tree).

    The invariants every probe's inputs keep (a verifier may rely on them):

    - laws sum to 1 and are non-negative (q at every node, p at the root and after every node);
    - every draft token has q > 0 under the law it was drawn from;
    - parents come first (``parent[b, j]`` in ``[-1, j)``);
    - prefix consistency: nodes with the same token path share one target row ``p[1 + j]``
      (the target sees only the tokens), and i.i.d. children after the same token path share one
      drafter law ``q``;
    - ``children`` in ("topk", "without_replacement"): siblings carry distinct tokens.
    """
    found: list[str] = []
    for b in range(tokens.shape[0]):
        n = int(num_nodes[b])
        laws = [("q", q[b, :n]), ("p", p[b, : n + 1])]
        for name, law in laws:
            sums = law.sum(axis=-1)
            if law.size and (np.any(law < 0) or np.any(np.abs(sums - 1.0) > LAW_SUM_TOL)):
                found.append(f"row {b}: a {name} law is negative or does not sum to 1")
        paths: dict[tuple[int, ...], int] = {}
        path_of: list[tuple[int, ...]] = []
        siblings: dict[int, list[int]] = {}
        context: dict[tuple[int, ...], list[int]] = {}
        for j in range(n):
            par = int(parent[b, j])
            if not -1 <= par < j:
                found.append(f"row {b}: node {j} has parent {par}, not in [-1, {j})")
                path_of.append((j,))
                continue
            tok = int(tokens[b, j])
            if q[b, j, tok] <= 0:
                found.append(f"row {b}: node {j} carries token {tok} with q = 0 under the law it was drawn from")
            path = (path_of[par] if par >= 0 else ()) + (tok,)
            path_of.append(path)
            same = paths.setdefault(path, j)
            if same != j and not np.array_equal(p[b, 1 + same], p[b, 1 + j]):
                found.append(f"row {b}: nodes {same} and {j} share the token path {list(path)} but not the target law "
                             "after it")
            siblings.setdefault(par, []).append(j)
            context.setdefault(path_of[par] if par >= 0 else (), []).append(j)
        for par, kids in siblings.items():
            toks = [int(tokens[b, j]) for j in kids]
            if children in ("topk", "without_replacement") and len(set(toks)) < len(toks):
                found.append(f"row {b}: the children of node {par} repeat a token ({toks}); {children} siblings "
                             "are distinct")
        if children == "iid":  # drawn from the drafter's law after the same tokens: one law
            for path, kids in context.items():
                if any(not np.array_equal(q[b, kids[0]], q[b, j]) for j in kids[1:]):
                    found.append(f"row {b}: the i.i.d. children after the token path {list(path)} carry different "
                                 "drafter laws")
    return found
