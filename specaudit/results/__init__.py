"""Frozen result objects: what a run measured and decided, and the one place its verdict is decided.

A run's outcome is a tree of frozen dataclasses: :class:`RunResult` holds one
:class:`ScenarioResult` per scenario, each holding its :class:`CheckResult` objects (or the
:class:`ErrorInfo` that kept it from running) and, for a SUSPECT scenario, its re-run. The
verdict rule (:attr:`ScenarioResult.status`, :attr:`RunResult.status`) and the order in which
a re-run is reported (:meth:`ScenarioResult.reported_checks`) live here once, so every reporter
renders these objects and none re-derives a verdict. The JSON form is only the file boundary:
:mod:`specaudit.results.document` writes and reads it (pytest's ``reports.py`` keeps a report's
JSON form with the report in the same way), and :mod:`specaudit.results.cache` the files of the
disk cache (its folder, and files sealed with their SHA-256).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specaudit.errors import ContractError, ExitCode, VerifierCrash, VerifierTimeout


class Status(str, enum.Enum):
    """Verdict of a check, a scenario or a run (TestU01 style, plus error and skipped)."""

    PASSED = "passed"
    SUSPECT = "suspect"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    #: A statistical check before the run-wide Holm correction.
    PENDING = "pending"

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

    #: Is the output law the target's?
    DISTRIBUTION = "distribution"
    #: Are tokens/step and accept lengths what the rule gives?
    EFFICIENCY = "efficiency"
    #: Exact clauses: shapes, corners, determinism.
    CONTRACT = "contract"


def worst(statuses: list[Status] | tuple[Status, ...]) -> Status:
    """Return the most severe status (SKIPPED for none)."""
    return max(statuses, key=lambda s: s.severity, default=Status.SKIPPED)


@dataclass(frozen=True)
class CheckResult:
    """One property of one scenario, bound to one statistic (scipy's names: statistic, pvalue, df)."""

    #: The check's registered name, e.g. ``"joint-law"``.
    name: str
    #: What the check is about; decides whether it gates the exit code.
    category: Category
    #: The check's verdict (PENDING until the run-wide Holm correction).
    status: Status
    #: One sentence for people: the statistic, the effect size, the exact value.
    summary: str
    #: The test statistic (chi-square, z, ...), when the verdict rests on one.
    statistic: float | None = None
    #: The raw p-value of the statistic.
    pvalue: float | None = None
    #: Degrees of freedom of the statistic, when it has them.
    df: int | None = None
    #: The Holm-adjusted p-value, over every statistical check of the run.
    adjusted_pvalue: float | None = None
    #: False: reported, but does not change the exit code.
    gate: bool = True
    #: JSON-able numbers for reports (cells, estimates, intervals), keyed by name.
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def statistical(self) -> bool:
        """Return True when the verdict rests on a p-value."""
        return self.pvalue is not None


@dataclass(frozen=True)
class ErrorInfo:
    """Why a scenario could not be measured: a contract clause, a crash, a timeout."""

    #: One of ``"contract"``, ``"crash"``, ``"timeout"``, ``"internal"``.
    kind: str
    #: What went wrong, for people.
    message: str
    #: The contract clause the verifier broke (``kind == "contract"`` only).
    clause: str | None = None
    #: The frames from the user's code where the crash or timeout happened.
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Return why a verifier broke a scenario (contract breach, crash, timeout); re-raise anything else."""
        if isinstance(exc, ContractError):
            return cls("contract", str(exc), exc.clause)
        if isinstance(exc, VerifierTimeout):
            return cls("timeout", str(exc), traceback=exc.user_traceback)
        if isinstance(exc, VerifierCrash):
            return cls("crash", str(exc), traceback=exc.user_traceback)
        raise exc


@dataclass(frozen=True)
class TVBound:
    """An upper confidence bound on the total variation between the verifier's output law and the target's.

    Made by :func:`specaudit.stats.certificate.tv_upper_bound` for every scenario whose joint law
    of whole sequences is enumerated; the method and its proof are in that module.
    """

    #: TV(verifier's law, target's law) <= bound, with probability >= ``confidence``.
    bound: float
    #: 1 - delta: the run's confidence (1 - alpha), spent over the looks of a sequential run.
    confidence: float
    #: The plug-in TV(empirical law, target law) the bound starts from.
    tv: float
    #: Sequences the bound rests on.
    sequences: int
    #: The TV ``specaudit run --certify-tv EPS`` asked to certify (None: not asked).
    target: float | None = None

    @property
    def certified(self) -> bool:
        """Return True when a certificate was asked for and the bound reached it."""
        return self.target is not None and self.bound <= self.target


@dataclass(frozen=True)
class ScenarioResult:
    """Everything measured on one scenario."""

    #: The scenario's name.
    name: str
    #: The scenario file (``<...>`` for scenario objects built in Python).
    path: str
    #: The line of the scenario in its file.
    line: int
    #: Hash of the scenario's content: two results compare only when their hashes agree.
    content_hash: str
    #: The scenario's description.
    description: str
    #: The seed the scenario was measured with.
    seed: int
    #: Sequences measured.
    samples: int
    #: One result per check, in the order the checks ran.
    checks: tuple[CheckResult, ...] = ()
    #: Why the scenario could not be measured, if it could not.
    error: ErrorInfo | None = None
    #: Wall time of the scenario.
    seconds: float = 0.0
    #: Time spent inside the verifier.
    verifier_seconds: float = 0.0
    #: Verifier calls made.
    calls: int = 0
    #: JSON-able extras for reports: power, sensitivity, diagnosis, tallies.
    info: Mapping[str, Any] = field(default_factory=dict)
    #: A SUSPECT first result is re-run on a fresh seed with 4x the samples (TestU01 style); both
    #: are reported and the re-run's verdict is the scenario's.
    rerun: ScenarioResult | None = None
    #: Upper confidence bound on TV(output law, target law); None where the joint law is not enumerated.
    tv_bound: TVBound | None = None

    @property
    def certificate(self) -> TVBound | None:
        """Return the TV bound of the attempt that decides the scenario (the re-run's when re-run)."""
        return self.tv_bound if self.rerun is None else self.rerun.tv_bound

    @property
    def status(self) -> Status:
        """Return the scenario verdict: ERROR if it could not run, else the worst gating check; a re-run decides its suspects.

        A re-run never overturns an exact finding of the first look (a probe, no p-value, that failed
        or errored: a flaky crash, a contract breach): the verdict is the worst of those and the
        re-run's. P-value checks are decided by the re-run, as the suspect rule's error bound says.
        """
        if self.error is not None:
            return Status.ERROR
        if self.rerun is not None:  # the re-run decides the p-value checks; an exact finding of the first look stands
            found = [c.status for c in self.checks
                     if c.gate and c.pvalue is None and c.status in (Status.FAILED, Status.ERROR)]
            return worst([*found, self.rerun.status])
        return worst([c.status for c in self.checks if c.gate]) if self.checks else Status.SKIPPED

    def check(self, name: str) -> CheckResult | None:
        """Return the check called ``name``, if any."""
        return next((c for c in self.checks if c.name == name), None)

    def attempts(self) -> tuple[ScenarioResult, ...]:
        """Return this result, then its re-run if it has one: both are reported, the last decides."""
        return (self,) if self.rerun is None else (self, self.rerun)

    def reported_errors(self) -> tuple[tuple[str, ErrorInfo], ...]:
        """Return (label, error) of every attempt that could not run: the first by its name, a re-run as ``<name> (re-run)``."""
        return tuple((self.name if part is self else f"{self.name} {RERUN_LABEL}", part.error)
                     for part in self.attempts() if part.error is not None)

    def reported_checks(self) -> tuple[CheckResult, ...]:
        """Return the checks of every attempt, a re-run's named ``<check> (re-run)``."""
        again = () if self.rerun is None else tuple(
            dataclasses.replace(c, name=f"{c.name} {RERUN_LABEL}") for c in self.rerun.checks
        )
        return (*self.checks, *again)


#: How a re-run's checks are labelled next to the first result's.
RERUN_LABEL = "(re-run)"


@dataclass(frozen=True)
class ComparisonRow:
    """One scenario against the baseline run, then and now."""

    #: The scenario's name.
    scenario: str
    #: Its verdict in the baseline run (None: not there).
    old_status: str | None
    #: Its verdict in this run (None: not run now).
    new_status: str | None
    #: Tokens per step in the baseline run.
    old_tps: float | None
    #: Tokens per step in this run.
    new_tps: float | None
    #: Relative change of tokens per step.
    tps_change: float | None
    #: Whether the scenario's content hash is the same in both runs.
    comparable: bool
    #: What changed, for people ("fixed", "newly failed", ...).
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    """A run compared with an earlier one (``--baseline``), made by :mod:`specaudit.analysis.baseline`."""

    #: Where the baseline run was read from.
    path: str
    #: The specaudit version of the baseline run.
    version: str
    #: When the baseline run started.
    started: str
    #: The gate rules applied (``METRIC:THRESHOLD``).
    rules: tuple[str, ...]
    #: One row per scenario of either run.
    rows: tuple[ComparisonRow, ...]
    #: One entry per broken rule: scenario, metric, old, new, worse_by, rule, message, path, line.
    regressions: tuple[Mapping[str, Any], ...] = ()
    #: Scenarios whose content changed between the runs.
    not_comparable: tuple[str, ...] = ()
    #: The engine release audited then and now, when they differ (``hf-transformers 5.24.0 -> 5.25.0``).
    engine_change: str = ""

    @property
    def failed(self) -> bool:
        """Return True when a rule was broken on a comparable scenario."""
        return bool(self.regressions)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (stored under ``baseline`` in the results document)."""
        d = dataclasses.asdict(self)
        d["rules"], d["rows"] = list(self.rules), [dataclasses.asdict(r) for r in self.rows]
        d["regressions"], d["not_comparable"] = [dict(r) for r in self.regressions], list(self.not_comparable)
        return d


def engine_label(environment: Mapping[str, Any]) -> str | None:
    """Return ``NAME VERSION (SOURCE)`` from a run's environment record, None when it audited no engine."""
    name = environment.get("engine")
    if not name:
        return None
    label = f"{name} {environment.get('engine_version', '?')}"
    source = environment.get("engine_source")
    label = f"{label} ({source})" if source else label
    runtime = environment.get("engine_runtime")  # e.g. its Triton kernels run in Triton's interpreter
    return f"{label}, {runtime}" if runtime else label


@dataclass(frozen=True)
class RunResult:
    """A whole run: the target, the settings and one result per scenario."""

    #: The verifier audited, as the user named it.
    target: str
    #: Family-wise false-alarm rate over every statistical check (Holm).
    alpha: float
    #: The run seed (None: each scenario's own seed).
    seed: int | None
    #: The specaudit version that ran.
    version: str
    #: One result per scenario, in run order.
    scenarios: tuple[ScenarioResult, ...]
    #: The run was stopped before every scenario ran.
    interrupted: bool = False
    #: When the run started (ISO 8601).
    started: str = ""
    #: Wall time of the run.
    seconds: float = 0.0
    #: The run's settings, as the results document stores them.
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: Where the run ran: ``python``, ``numpy`` and ``platform`` version strings (the reports' reproduce line),
    #: and the engine the target is, when it is one: ``engine``, ``engine_version``, ``engine_source``.
    environment: Mapping[str, Any] = field(default_factory=dict)
    #: Results so far of a run still going (or stopped): written after every scenario.
    partial: bool = False
    #: The comparison with a ``--baseline`` run, when one was asked for.
    baseline: Comparison | None = None

    @property
    def status(self) -> Status:
        """Return the run verdict: the worst scenario verdict."""
        return worst([s.status for s in self.scenarios])

    def engine(self) -> str | None:
        """Return the engine and release the run audited (``hf-transformers 5.25.0 (installed ...)``), or None."""
        return engine_label(self.environment)

    def exit_code(self) -> ExitCode:
        """Return the process exit code for this run (pytest numbering)."""
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if not self.scenarios:
            return ExitCode.NO_SCENARIOS
        if self.status in (Status.FAILED, Status.ERROR):
            return ExitCode.CHECKS_FAILED
        if self.uncertified():
            return ExitCode.NOT_CERTIFIED
        return ExitCode.OK

    def uncertified(self) -> list[str]:
        """Return the scenarios a ``--certify-tv`` run did not certify (their bound stayed above EPS at the cap).

        Scenarios with no joint law to bound (no certificate: exact, greedy, per-prefix) are not
        among them; they ran as without ``--certify-tv``.
        """
        if self.settings.get("certify_tv") is None:
            return []
        return [s.name for s in self.scenarios if s.certificate is not None and not s.certificate.certified]
