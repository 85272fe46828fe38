"""The zoo: broken verifiers, each mirroring a filed bug, in one registry with one Mutant type.

:data:`MUTANTS` holds every mutant (:class:`Mutant`: name, func, description, mirrors, kind,
contract, algorithm, diverges) in definition order: the chain-rule mutants of
:mod:`~specaudit.verifiers.zoo.chain`, the processing mismatches of the logits contract in
:mod:`~specaudit.verifiers.zoo.logits`, and the tree and block mutants of
:mod:`~specaudit.verifiers.zoo.tree`, and the per-request seed mutants of
:mod:`~specaudit.verifiers.zoo.seeded`, and the draft-vocabulary remaps of
:mod:`~specaudit.verifiers.zoo.vocab`, the stop rules of :mod:`~specaudit.verifiers.zoo.stops`, and the generate loops of
:mod:`~specaudit.verifiers.zoo.loop`. :func:`get` looks one up (``zoo=`` restricts it to one
module, as power and diagnosis do for the chain zoo), :func:`family` lists one module's. Each
module also keeps its own ``MUTANTS`` dict, and every mutant is a module-level function, so
``specaudit.verifiers.zoo.chain:NAME`` (or the alias ``mutant:NAME``) works as a TARGET.
"""

from __future__ import annotations

from specaudit.verifiers.zoo import chain, logits, loop, seeded, stops, tree, vocab
from specaudit.verifiers.zoo.mutant import KINDS, MUTANTS, ZOOS, Mutant, family, get, register

__all__ = [
    "KINDS", "MUTANTS", "ZOOS", "Mutant", "chain", "family", "get", "logits", "loop", "register", "seeded", "stops", "tree",
    "vocab",
]
