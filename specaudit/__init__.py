"""specaudit: statistical conformance tests for speculative-decoding verifiers."""

__version__ = "0.1.0"

from specaudit.errors import ContractError, ExitCode, ScenarioError, SpecauditError, UsageError  # noqa: E402
from specaudit.results import CheckResult, RunResult, ScenarioResult, Status  # noqa: E402

# The engine (numpy, scipy, pydantic) loads on first use (PEP 562): `import specaudit` and the
# pytest plugin, which pytest imports in every session, stay cheap (benchmarks/plugin_import.py).
_LAZY = {
    "run": "specaudit.engine.run",
    "Scenario": "specaudit.scenarios.schema",
    "load_scenario": "specaudit.scenarios.schema",
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
