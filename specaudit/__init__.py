"""specaudit: statistical conformance tests for speculative-decoding verifiers."""

__version__ = "0.1.0"

from specaudit.errors import ContractError, ExitCode, ScenarioError, SpecauditError, UsageError  # noqa: E402
from specaudit.results import CheckResult, RunResult, ScenarioResult, Status  # noqa: E402
from specaudit.runner import run  # noqa: E402
from specaudit.scenarios import Scenario, load_scenario  # noqa: E402

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
    "load_scenario",
    "run",
]
