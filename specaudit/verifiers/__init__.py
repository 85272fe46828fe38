"""Verifiers: the correct ones written from the rule, and the zoo of broken ones that must be caught.

The references are what a lossless verifier does, one module per algorithm and contract:
:mod:`~specaudit.verifiers.reference` (chain speculative sampling, Leviathan et al. 2023, Alg. 1;
alias ``reference``), :mod:`~specaudit.verifiers.block` (block verification, Sun et al. 2024;
``reference-block``), :mod:`~specaudit.verifiers.tree` (multi-candidate tree verification,
SpecInfer; ``reference-tree``), :mod:`~specaudit.verifiers.greedy` (temperature 0;
``reference-greedy``) and :mod:`~specaudit.verifiers.logits` (the logits contract;
``reference-logits``). The block and tree references expose their switchable cores
(:func:`~specaudit.verifiers.block.block_verify`, :func:`~specaudit.verifiers.tree.verify_tree`)
so that each zoo mutant differs from its reference in one switch. :mod:`specaudit.verifiers.zoo`
holds every broken verifier in one registry with one ``Mutant`` type; the checks' negative
controls, power figures and diagnoses come from there.
"""
