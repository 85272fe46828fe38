"""Frozen result objects: what a run measured and decided. Reporters render only these."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specaudit.errors import ExitCode


class Status(str, enum.Enum):
    """Verdict of a check, a scenario or a run (TestU01 style, plus error and skipped)."""

    PASSED = "passed"
    SUSPECT = "suspect"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    PENDING = "pending"  # a statistical check before the run-wide Holm correction

    @property
    def severity(self) -> int:
        """Return the rank used to combine verdicts (worst wins)."""
        return _SEVERITY[self]


_SEVERITY = {
    Status.SKIPPED: 0,
    Status.PASSED: 1,
    Status.PENDING: 2,
    Status.SUSPECT: 3,
    Status.FAILED: 4,
    Status.ERROR: 5,
}


class Category(str, enum.Enum):
    """What a check is about; the CLI can keep a category from gating the exit code."""

    DISTRIBUTION = "distribution"  # is the output law the target's?
    EFFICIENCY = "efficiency"  # are tokens/step and accept lengths what the rule gives?
    CONTRACT = "contract"  # exact clauses: shapes, corners, determinism


def worst(statuses: list[Status] | tuple[Status, ...]) -> Status:
    """Return the most severe status (SKIPPED for none)."""
    return max(statuses, key=lambda s: s.severity, default=Status.SKIPPED)


def document_status(scenario: Mapping[str, Any]) -> Status:
    """Return the verdict of a scenario's JSON form, decided as ``ScenarioResult.status`` decides it."""
    if scenario.get("error"):
        return Status.ERROR
    if scenario.get("rerun"):  # a SUSPECT scenario's re-run decides it
        return document_status(scenario["rerun"])
    return worst([Status(c.get("status", "skipped")) for c in scenario.get("checks") or [] if c.get("gate", True)])


@dataclass(frozen=True)
class CheckResult:
    """One property of one scenario, bound to one statistic."""

    name: str
    category: Category
    status: Status
    summary: str
    statistic: float | None = None
    pvalue: float | None = None
    df: int | None = None
    adjusted_pvalue: float | None = None  # Holm, over every statistical check of the run
    gate: bool = True  # False: reported, but does not change the exit code
    data: Mapping[str, Any] = field(default_factory=dict)  # JSON-able numbers for reports

    @property
    def statistical(self) -> bool:
        """Return True when the verdict rests on a p-value."""
        return self.pvalue is not None


@dataclass(frozen=True)
class ErrorInfo:
    """Why a scenario could not be measured: a contract clause, a crash, a timeout."""

    kind: str  # "contract", "crash", "timeout", "internal"
    message: str
    clause: str | None = None
    traceback: str = ""


@dataclass(frozen=True)
class ScenarioResult:
    """Everything measured on one scenario."""

    name: str
    path: str
    line: int
    content_hash: str
    description: str
    seed: int
    samples: int
    checks: tuple[CheckResult, ...] = ()
    error: ErrorInfo | None = None
    seconds: float = 0.0
    verifier_seconds: float = 0.0
    calls: int = 0
    info: Mapping[str, Any] = field(default_factory=dict)
    # A SUSPECT first result is re-run on a fresh seed with 4x the samples (TestU01 style); both
    # are reported and the re-run's verdict is the scenario's.
    rerun: "ScenarioResult | None" = None

    @property
    def status(self) -> Status:
        """Return the scenario verdict: ERROR if it could not run, the re-run's verdict if re-run, else the worst gating check."""
        if self.error is not None:
            return Status.ERROR
        if self.rerun is not None:
            return self.rerun.status
        return worst([c.status for c in self.checks if c.gate]) if self.checks else Status.SKIPPED

    def check(self, name: str) -> CheckResult | None:
        """Return the check called ``name``, if any."""
        return next((c for c in self.checks if c.name == name), None)


@dataclass(frozen=True)
class RunResult:
    """A whole run: the target, the settings and one result per scenario."""

    target: str
    alpha: float
    seed: int | None
    version: str
    scenarios: tuple[ScenarioResult, ...]
    interrupted: bool = False
    started: str = ""
    seconds: float = 0.0
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        """Return the run verdict: the worst scenario verdict."""
        return worst([s.status for s in self.scenarios])

    def exit_code(self) -> ExitCode:
        """Return the process exit code for this run (pytest numbering)."""
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if not self.scenarios:
            return ExitCode.NO_SCENARIOS
        if self.status in (Status.FAILED, Status.ERROR):
            return ExitCode.CHECKS_FAILED
        return ExitCode.OK
