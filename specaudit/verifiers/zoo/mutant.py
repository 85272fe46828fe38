"""The one Mutant type and the one registry every zoo module registers into.

A mutant is a broken (or deliberately inefficient) verifier plus what it mirrors: the bug report
it reproduces, the kind of bug (what must catch it), and the contract it speaks. The chain zoo
(:mod:`specaudit.verifiers.zoo.chain`), the logits zoo (:mod:`specaudit.verifiers.zoo.logits`)
and the tree/block zoo (:mod:`specaudit.verifiers.zoo.tree`) all register here with
:func:`register`, so power, diagnosis, the self-test and the ``mutant:NAME`` target alias look
mutants up in one place. This module is apart from ``zoo/__init__`` only so that the zoo modules
can import it while the package imports them (at the top, no registration at the bottom of a file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from specaudit.errors import closest
from specaudit.registry import Registry

__all__ = ["KINDS", "MUTANTS", "ZOOS", "Mutant", "family", "get", "register"]

Kind = Literal["distribution", "boundary", "lossless-control"]
#: What must catch a mutant: a law check, a boundary probe, or the efficiency checks alone.
KINDS: tuple[str, ...] = ("distribution", "boundary", "lossless-control")
#: The zoo modules, by the scenarios they run on: chain rule (probs), logits contract, tree/block, seeded requests.
ZOOS: tuple[str, ...] = ("chain", "logits", "tree", "seeded", "draft-vocab", "stops", "loop")
Verifier = Callable[..., tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Mutant:
    """A broken (or deliberately inefficient) verifier and what it mirrors.

    ``contract`` is the calling convention (``probs``: the canonical chain contract, ``logits``,
    ``tree``, ``tree-logits``: the tree contract's logits form); ``algorithm`` the verification
    algorithm it breaks (``chain``, ``block``, ``tree``);
    ``diverges`` (logits mutants) names the hypothesis of :mod:`specaudit.laws.processing` that
    describes the bug, so the processing diagnosis can be checked.
    """

    name: str
    func: Verifier
    description: str  # one line
    mirrors: str  # the bug report, issue or paper it reproduces
    kind: Kind
    contract: str = "probs"
    algorithm: str = "chain"
    diverges: str | None = None
    seeded: bool = False  # breaks per-request generators only (zoo/seeded.py; scenarios tagged seeded)

    @property
    def zoo(self) -> str:
        """Return the zoo module the mutant belongs to: ``chain``, ``logits``, ``tree``, ``seeded``, ``draft-vocab``, ``stops`` or ``loop``."""
        if self.seeded:
            return "seeded"
        if self.contract in ("logits", "draft-vocab", "stops", "loop"):
            return self.contract
        return "chain" if self.algorithm == "chain" else "tree"

    def __call__(self, *args: Any) -> tuple[np.ndarray, np.ndarray]:
        """Run the mutant on one batch (the arguments of its contract)."""
        return self.func(*args)


#: Every registered mutant, chain, logits and tree, in definition order.
MUTANTS: Registry[Mutant] = Registry("mutant")

#: How an unknown name is reported per zoo (the chain zoo's message is the registry's own).
_WHAT = {"chain": "mutant", "logits": "logits mutant", "tree": "tree mutant", "seeded": "seeding mutant",
         "draft-vocab": "draft-vocabulary mutant", "stops": "stop mutant", "loop": "loop mutant"}


def register(
    kind: Kind, mirrors: str, *, contract: str = "probs", algorithm: str = "chain", diverges: str | None = None,
    seeded: bool = False,
) -> Callable[[Verifier], Verifier]:
    """Register a mutant function; its one-line docstring is the description."""

    def wrap(func: Verifier) -> Verifier:
        entry = Mutant(func.__name__, func, (func.__doc__ or "").strip(), mirrors, kind, contract, algorithm, diverges,
                       seeded)
        MUTANTS.register(entry.name, entry)
        func.mutant = entry  # type: ignore[attr-defined]
        return func

    return wrap


def family(zoo: str) -> dict[str, Mutant]:
    """Return the mutants of one zoo (``chain``, ``logits``, ``tree``) by name, in definition order."""
    return MUTANTS.select(lambda m: m.zoo == zoo)


def get(name: str, zoo: str | None = None) -> Mutant:
    """Return the mutant ``name`` (of ``zoo`` when given); raise KeyError with the closest name otherwise."""
    if zoo is None:
        return MUTANTS.get(name)
    known = family(zoo)
    if name not in known:
        raise KeyError(f"unknown {_WHAT[zoo]} {name!r}{closest(name, known)}; known: {', '.join(known)}")
    return known[name]
