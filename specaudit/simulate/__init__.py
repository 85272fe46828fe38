"""Drive a verifier the way an inference engine does, and tally what comes out.

:mod:`~specaudit.simulate.chain` runs a chain verifier (draft K tokens, verify, append, repeat,
with continuous batching) and :mod:`~specaudit.simulate.tree` a tree verifier; both read lookup
tables built once per chain pair (:mod:`~specaudit.simulate.tables`, with the one pool of
padding garbage) and send finished sequences to sinks (:mod:`~specaudit.simulate.tallies`).
:mod:`~specaudit.simulate.blocks` cuts a scenario's N sequences into fixed-size, independently
seeded blocks, the unit that parallel runs, shards, early stop and simulated mutant laws share.
:mod:`~specaudit.simulate.kernels` loads the optional C extension, which gives the same draws
and results as the numpy code, faster. :mod:`~specaudit.simulate.device` is the chain simulator in
torch on a verifier's own device (same law, its own random stream; no p or q crosses the bus), and
:mod:`~specaudit.simulate.transfers` counts the host <-> device crossings that prove it.
"""
