"""Chains: the token sources a scenario describes, as the law of the next token given a context state.

Target and drafter are both chains read in the same context. :mod:`~specaudit.chains.tabular`
holds finite-state chains with explicit tables (context-free, first-order, one-hot), on which the
exact references work; :mod:`~specaudit.chains.lazy` the large-vocabulary Zipf chains generated on
demand from a seed (no tables: per-prefix and PIT checks); :mod:`~specaudit.chains.logits` the
chains of raw logits whose law is the processed logits; :mod:`~specaudit.chains.processing` the
float64 reference of temperature, top-k, top-p and min-p (and of the serving parameters:
penalties, logit bias, allowed-token mask); :mod:`~specaudit.chains.serving` the chains of a
serving batch (a mix of request classes, a penalised target on its history's token counts); :mod:`~specaudit.chains.sampling` the
vectorised categorical draws shared by the simulator and the reference verifier. Chains are pure
numpy and sit below the contract, the scenarios and the laws that read them.
"""
