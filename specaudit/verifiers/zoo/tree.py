"""Broken tree and block verifiers, each mirroring a bug class of notes/theory.md.

Tree mutants follow the tree contract (:mod:`specaudit.contract.tree`); block mutants the chain contract.
They are thin wrappers over the references' private cores (:func:`specaudit.verifiers.tree._verify_tree`,
:func:`specaudit.verifiers.block._block`) with one switch turned away from the default, so each differs from
its reference in exactly one place. They live apart from :data:`specaudit.verifiers.zoo.chain.MUTANTS` (the
chain zoo) because they are run on tree / block scenarios; ``specaudit.verifiers.zoo.tree:NAME`` works
as a TARGET.

=================================  ========  =========================================================
name                               contract  shipped scenario that catches it
=================================  ========  =========================================================
tree_residual_not_updated          tree      tree-topk-v4, tree-iid-v4 (joint-law)
tree_duplicates_double_counted     tree      tree-iid-v4 (i.i.d. siblings repeat tokens)
block_first_failure                chain     block-toy (joint-law, TV .48 on the toy law)
block_unscaled_residual            chain     block-extreme (p/q ratios up to 24)
=================================  ========  =========================================================
"""

from __future__ import annotations

from collections.abc import Callable

from specaudit.verifiers.block import _block
from specaudit.verifiers.zoo.chain import Mutant
from specaudit.contract.tree import tree_contract
from specaudit.verifiers.tree import _verify_tree

__all__ = ["MUTANTS"]

MUTANTS: dict[str, Mutant] = {}


def _register(mirrors: str) -> Callable[[Callable], Callable]:
    """Register a distribution mutant; its one-line docstring is the description."""

    def wrap(func: Callable) -> Callable:
        entry = Mutant(func.__name__, func, (func.__doc__ or "").strip(), mirrors, "distribution")
        MUTANTS[entry.name] = entry
        func.mutant = entry  # type: ignore[attr-defined]
        return func

    return wrap


@_register("notes/theory.md, multi-candidate: every child tested against the original p")
@tree_contract
def tree_residual_not_updated(tokens, parent, q, p, num_nodes, rng):
    """Test every child against the node's original p; draw the replacement from norm(max(p - q_last, 0))."""
    return _verify_tree(tokens, parent, q, p, num_nodes, rng, residual="frozen")


@_register("notes/theory.md, multi-candidate: duplicate i.i.d. siblings")
@tree_contract
def tree_duplicates_double_counted(tokens, parent, q, p, num_nodes, rng):
    """Test a sibling repeating an earlier sibling's token against the node's original p again."""
    return _verify_tree(tokens, parent, q, p, num_nodes, rng, duplicates="double")


@_register("Sun et al. 2403.10444 (tau is the last success); vllm-ascend #7807 bug class")
def block_first_failure(draft, q, p, num_draft, rng):
    """Block verification that stops at the first failed position (tau = successes before it)."""
    return _block(draft, q, p, num_draft, rng, stop="first")


@_register("Sun et al. 2403.10444, Alg. 2: residual max(P_tau p - q, 0)")
def block_unscaled_residual(draft, q, p, num_draft, rng):
    """Block verification whose residual is norm(max(p - q, 0)), not scaled by P_tau."""
    return _block(draft, q, p, num_draft, rng, scale=False)
