"""Engine: turn a target and scenarios into a RunResult; returns data, never prints.

One run is a pipeline over one frozen, validated :class:`~specaudit.engine.settings.RunSettings`:
:mod:`~specaudit.engine.run` binds the target to the scenarios, which :mod:`~specaudit.engine.tasks`
resolved and made Tasks, :mod:`~specaudit.engine.scenario` makes each Task a ScenarioResult (exact
probes, or blocks of simulated sequences prepared by :mod:`~specaudit.engine.bench` and scheduled by
:mod:`~specaudit.engine.executors` over processes, shards or Ray), and :func:`specaudit.engine.run.finish` settles the run (Holm, re-runs of suspects,
power and diagnosis). :mod:`~specaudit.engine.device` decides which scenarios are simulated on a torch verifier's device.
:mod:`~specaudit.engine.merge` ends a sharded run through the same
``finish``; :mod:`~specaudit.engine.selftest` is a run of runs that tests the tester.
:mod:`~specaudit.engine.supervisor` runs the same pipeline with the verifier in supervised child
processes (``specaudit run``): an exit, a signal or a hang there is an ERROR of one scenario. The engine
sits above checks and analysis and below the reporters, which it never imports. Data flows one way
down run, scenario, executors, bench: what comes back up is returned or yielded, never called back
(docs/code-layout.md, tests/engine/test_one_way.py).
"""
