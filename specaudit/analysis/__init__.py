"""After the verdict: what a run could have caught, what a failure looks like, and what changed.

Everything here reads results and scenarios and adds figures to them; nothing runs a verifier
under test. :mod:`~specaudit.analysis.mutant_laws` gives a zoo mutant's law on a scenario (exact,
lossless or simulated once, with one simulation path and one cache) to the three modules that
need it: :mod:`~specaudit.analysis.power` (each scenario's detectable TV and power against the
zoo, stored with every run), :mod:`~specaudit.analysis.plan` (the sample size a goal needs,
``specaudit plan``) and :mod:`~specaudit.analysis.diagnose` (which mutant a failure looks like).
:mod:`~specaudit.analysis.baseline` compares a run with a stored one.
"""
