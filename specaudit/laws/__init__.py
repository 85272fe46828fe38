"""Exact reference laws: what a lossless verifier's output and rounds must look like (pure float64).

Every number a statistical check compares a verifier against comes from here, computed from the
scenario's chains alone: :mod:`~specaudit.laws.chain` holds the chain rule's round kernels, the
law of whole sequences, the finite-horizon and long-run tokens per step and their closed forms;
:mod:`~specaudit.laws.tree_block` the step kernels of tree (SpecInfer) and block (Sun et al.)
verification; :mod:`~specaudit.laws.mutants` the exact laws of the zoo's kernel mutants;
:mod:`~specaudit.laws.processing` the output laws of logits-processing mismatches;
:mod:`~specaudit.laws.serving` the mixture of a batch mix's per-class laws. This
``__init__`` is the one dispatch on a scenario's verification ``algorithm`` (chain, block, tree)
and on a batch mix (each class's laws, then mixed):
:func:`scenario_step_kernels`, :func:`horizon` and :func:`first_round_accept_law` take a scenario
and pick the right kernels, so no other module branches on the algorithm to find its exact law.
"""

from __future__ import annotations

import numpy as np

from specaudit.chains.serving import MixedChain
from specaudit.chains.tabular import TabularChain
from specaudit.laws import chain, serving
from specaudit.laws.chain import HorizonLaw
from specaudit.laws.tree_block import block_step_kernels, tree_step_kernels
from specaudit.scenarios.schema import Scenario

__all__ = ["algorithm_of", "first_round_accept_law", "horizon", "scenario_step_kernels"]


def algorithm_of(scenario: Scenario) -> str:
    """Return the scenario's verification algorithm: "chain" (the default), "block" or "tree"."""
    return getattr(scenario, "algorithm", "chain")


def scenario_step_kernels(scenario: Scenario, target: TabularChain, draft: TabularChain) -> tuple[np.ndarray, int]:
    """Return the step kernels and start state of ``scenario``'s verification algorithm."""
    algorithm = algorithm_of(scenario)
    if algorithm == "tree":
        shape = scenario.tree
        assert shape is not None, "a tree scenario has a tree (the schema requires it)"
        return tree_step_kernels(target, draft, shape.widths(scenario.k), shape.children, shape.ragged)
    if algorithm == "block":
        return block_step_kernels(target, draft, scenario.draft_law)
    kernels = chain.round_kernels(target, draft)
    return chain.step_kernels(kernels, chain.check_draft_law(scenario.draft_law)), kernels.start


def horizon(scenario: Scenario, target: TabularChain, draft: TabularChain) -> HorizonLaw:
    """Return the exact finite-horizon round law of ``scenario`` (any algorithm; a batch mix mixes its classes')."""
    if isinstance(target, MixedChain):
        assert isinstance(draft, MixedChain)  # a mix builds both (Scenario.chains)
        parts = [horizon(scenario, t, d) for t, d in zip(target.classes, draft.classes)]
        return serving.mix_horizon(parts, target.weights)
    if algorithm_of(scenario) == "chain":
        return chain.finite_horizon(target, draft, scenario.draft_law, scenario.length)
    steps, start = scenario_step_kernels(scenario, target, draft)
    return chain.horizon_from_steps(steps, start, scenario.length)


def first_round_accept_law(scenario: Scenario, target: TabularChain, draft: TabularChain) -> np.ndarray:
    """Return P(accepted = a) of the first round of ``scenario`` (any algorithm; a batch mix mixes its classes')."""
    if isinstance(target, MixedChain):
        assert isinstance(draft, MixedChain)
        laws = [first_round_accept_law(scenario, t, d) for t, d in zip(target.classes, draft.classes)]
        return np.asarray(target.weights) @ np.array(laws)
    if algorithm_of(scenario) == "chain":
        return chain.first_round_accept_law(target, draft, scenario.draft_law)
    steps, start = scenario_step_kernels(scenario, target, draft)
    return steps.sum(axis=2)[:, start]
