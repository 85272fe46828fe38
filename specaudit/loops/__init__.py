"""Engines' own generate loops, run end to end on tiny models whose exact law is enumerable.

A verifier contract (:mod:`specaudit.contract`) hands one call the history; here the engine keeps
it: its loop drafts, verifies, crops caches, stops at EOS and at ``max_new_tokens``, and only the
tokens it emits are read.

=====================  ==================================================================
:mod:`.hf`             HF transformers' assisted generation (``generate(assistant_model=...)``):
                       tiny random-weight Llama target and assistant built from configs, the exact
                       law of a short continuation by enumeration, the sampled and greedy checks
:mod:`.hf_mutants`     loop mutants patched into the installed transformers (negative controls)
=====================  ==================================================================

``specaudit run hf-generate`` runs :func:`specaudit.loops.hf.audit` on the installed transformers.
"""
