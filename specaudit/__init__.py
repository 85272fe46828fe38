"""
specaudit: statistical conformance tests for speculative-decoding verifiers
============================================================================

A speculative-decoding verifier is lossless when its output follows the target model's law
exactly. specaudit drives a verifier on scenarios whose laws are known exactly, measures what it
emits, and tests the measurements against the exact references (with a negative control: a zoo
of broken verifiers that the same tests must catch).

Public names
------------

   run              -- audit a verifier on scenarios; returns a `RunResult` (specaudit.engine.api)
   assert_lossless  -- the same, raising an AssertionError with a summary (pytest-friendly)
   Scenario         -- a validated scenario (specaudit.scenarios.schema)
   load_scenario    -- read one scenario file (specaudit.scenarios.loading)
   RunResult, ScenarioResult, CheckResult, Status  -- what a run decided (specaudit.results)
   SpecauditError, UsageError, ScenarioError, ContractError, ExitCode  -- errors and exit codes

The command line is ``specaudit`` (specaudit.cli); the pytest plugin (specaudit.pytest_plugin)
gives tests the ``specaudit`` fixture.

Folders, each answering one question (top to bottom: a folder imports only from those below it)
-------------------------------------------------------------------------------------------------

   cli, pytest_plugin  -- the two entry points: parse, call the engine, render, exit
   reports/            -- how is a RunResult shown? terminal, JSON, HTML and plots, JUnit, GitHub
   engine/             -- how does a run go? the Python API (supervised by default), settings,
                          scenarios in blocks, executors, the supervisor, shard merge, selftest;
                          returns data, never prints
   analysis/           -- what could the run have caught, and what does a failure look like?
                          mutant laws, power and plans, diagnosis, baselines
   checks/             -- which properties are tested, and how? one registry of statistical
                          checks and exact probes, each returning a CheckResult
   simulate/           -- how is a verifier driven the way an engine drives it? chains and trees
                          of rounds, the tallies they fill, the optional C kernel
   verifiers/          -- what does a correct verifier do? the references (chain, block, tree,
                          greedy, logits); verifiers/zoo/ holds the broken ones, one registry
   adapters/           -- how is a verifier in another layout driven? torch, HF, vLLM,
                          FlashInfer, SGLang trees
   laws/               -- what must a lossless verifier's output look like? exact reference laws
   scenarios/          -- what is audited? YAML files validated into frozen dataclasses; the catalogue
   contract/           -- what must a verifier do, and how is it called? chain, logits and tree
                          contracts, the safe call, loading a TARGET
   chains/             -- where do tokens come from? tabular, lazy and logits chains; processing
   stats/              -- which statistic, which p-value? pure: arrays in, frozen results out
   results/            -- what did a run decide? frozen result objects; their JSON document
   registry, errors    -- one registry type; one exception root and the exit codes
"""


__version__ = "0.1.0"

from specaudit.errors import ContractError, ExitCode, ScenarioError, SpecauditError, UsageError
from specaudit.results import CheckResult, RunResult, ScenarioResult, Status

# The engine (numpy, scipy, pydantic) loads on first use (PEP 562): `import specaudit` and the
# pytest plugin, which pytest imports in every session, stay cheap (benchmarks/plugin_import.py).
_LAZY = {
    "run": "specaudit.engine.api",
    "Scenario": "specaudit.scenarios.schema",
    "load_scenario": "specaudit.scenarios.loading",
    "assert_lossless": "specaudit.pytest_plugin",
}


def __getattr__(name: str):
    """Import a lazily exported name on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'specaudit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "CheckResult",
    "ContractError",
    "ExitCode",
    "RunResult",
    "Scenario",
    "ScenarioError",
    "ScenarioResult",
    "SpecauditError",
    "Status",
    "UsageError",
    "assert_lossless",
    "load_scenario",
    "run",
]
