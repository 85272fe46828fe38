"""Broken tree and block verifiers, each mirroring a bug class of notes/theory.md.

Tree mutants follow the tree contract (:mod:`specaudit.contract.tree`); block mutants the chain contract.
They are thin wrappers over the references' switchable cores (:func:`specaudit.verifiers.tree.verify_tree`,
:func:`specaudit.verifiers.block.block_verify`) with one switch turned away from the default, so each differs
from its reference in exactly one place. They register in the one zoo registry
(:data:`specaudit.verifiers.zoo.MUTANTS`) with ``algorithm`` tree or block, so the chain zoo
(:data:`specaudit.verifiers.zoo.chain.MUTANTS`) leaves them out: they are run on tree / block scenarios;
``specaudit.verifiers.zoo.tree:NAME`` works as a TARGET.

=================================  ===========  ======================================================
name                               contract     shipped scenario that catches it
=================================  ===========  ======================================================
tree_residual_not_updated          tree         tree-topk-v4, tree-iid-v4 (joint-law)
tree_duplicates_double_counted     tree         tree-iid-v4 (i.i.d. siblings repeat tokens)
tree_leq_ratio                     tree         every tree scenario (tree-adversarial-uniforms)
tree_bonus_unprocessed             tree-logits  every tree scenario with --contract logits
                                                (tree-logits-processing)
block_first_failure                chain        block-toy (joint-law, TV .48 on the toy law)
block_unscaled_residual            chain        block-extreme (p/q ratios up to 24)
=================================  ===========  ======================================================
"""

from __future__ import annotations

from specaudit.chains.processing import SamplingParams, process
from specaudit.contract.tree import tree_contract
from specaudit.verifiers.block import block_verify
from specaudit.verifiers.tree import verify_tree
from specaudit.verifiers.zoo import mutant as zoo
from specaudit.verifiers.zoo.mutant import Mutant

__all__ = ["MUTANTS"]


@zoo.register("distribution", "notes/theory.md, multi-candidate: every child tested against the original p",
              contract="tree", algorithm="tree")
@tree_contract
def tree_residual_not_updated(tokens, parent, q, p, num_nodes, rng):
    """Test every child against the node's original p; draw the replacement from norm(max(p - q_last, 0))."""
    return verify_tree(tokens, parent, q, p, num_nodes, rng, residual="frozen")


@zoo.register("distribution", "notes/theory.md, multi-candidate: duplicate i.i.d. siblings",
              contract="tree", algorithm="tree")
@tree_contract
def tree_duplicates_double_counted(tokens, parent, q, p, num_nodes, rng):
    """Test a sibling repeating an earlier sibling's token against the node's original p again."""
    return verify_tree(tokens, parent, q, p, num_nodes, rng, duplicates="double")


@zoo.register("boundary", "EAGLE evaluate_posterior `if r <= acp` (acp = px / qx), SafeAILab/EAGLE "
              "eagle/model/utils.py; sglang #35771 class", contract="tree", algorithm="tree")
@tree_contract
def tree_leq_ratio(tokens, parent, q, p, num_nodes, rng):
    """Accept a child when u <= p/q: a child of probability 0 is accepted at u = 0."""
    return verify_tree(tokens, parent, q, p, num_nodes, rng, accept="leq_ratio")


@zoo.register("distribution", "EAGLE evaluate_posterior: sample_p = softmax(logits) when no child was rejected, "
              "SafeAILab/EAGLE eagle/model/utils.py", contract="tree-logits", algorithm="tree")
@tree_contract
def tree_bonus_unprocessed(tokens, parent, q, target_logits, num_nodes, params, rng):
    """Logits form: draw the final token from softmax(target logits), unprocessed, where no child was rejected."""
    raw = process(target_logits, SamplingParams())
    return verify_tree(tokens, parent, q, process(target_logits, params), num_nodes, rng, bonus=raw)


@zoo.register("distribution", "Sun et al. 2403.10444 (tau is the last success); vllm-ascend #7807 bug class",
              algorithm="block")
def block_first_failure(draft, q, p, num_draft, rng):
    """Block verification that stops at the first failed position (tau = successes before it)."""
    return block_verify(draft, q, p, num_draft, rng, stop="first")


@zoo.register("distribution", "Sun et al. 2403.10444, Alg. 2: residual max(P_tau p - q, 0)", algorithm="block")
def block_unscaled_residual(draft, q, p, num_draft, rng):
    """Block verification whose residual is norm(max(p - q, 0)), not scaled by P_tau."""
    return block_verify(draft, q, p, num_draft, rng, scale=False)


#: The tree and block mutants of the one zoo registry, by name, in definition order.
MUTANTS: dict[str, Mutant] = zoo.family("tree")
