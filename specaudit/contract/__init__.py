"""Contract: what a verifier must do, how it is called, and how a TARGET string becomes one.

:mod:`~specaudit.contract.chain` is the canonical chain-verifier contract (arrays in, padded
output and counts out), its clauses and the validation of what a verifier returns;
:mod:`~specaudit.contract.logits` and :mod:`~specaudit.contract.tree` are the logits contract
(the verifier processes raw logits itself) and the tree contract (a batch of draft trees in one
call). :mod:`~specaudit.contract.guard` calls user code safely (crashes and timeouts become the
verifier's fault, with its own frames); :mod:`~specaudit.contract.targets` loads a verifier from
``pkg.mod:attr``, a file path, an alias or ``mutant:NAME``; :mod:`~specaudit.contract.uniforms`
is the scripted-uniform Generator a verifier may be handed (the adversarial-uniform probes, and
the adapters that pass its draws through to torch), which is why it lives here rather than with
the checks.
"""
