"""One exception root, the exit codes, and the single map from one to the other."""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable


class ExitCode(enum.IntEnum):
    """Process exit codes, numbered like pytest's."""

    OK = 0
    CHECKS_FAILED = 1
    INTERRUPTED = 2
    INTERNAL_ERROR = 3
    USAGE_ERROR = 4
    NO_SCENARIOS = 5
    #: ``run --certify-tv EPS``: every check passed, but the TV bound stayed above EPS at the sample cap.
    NOT_CERTIFIED = 6


class SpecauditError(Exception):
    """Root of every error specaudit raises on purpose."""

    exit_code = ExitCode.INTERNAL_ERROR


class UsageError(SpecauditError):
    """The command line or API call asked for something that cannot be done."""

    exit_code = ExitCode.USAGE_ERROR


class TargetLoadError(UsageError):
    """The verifier named by TARGET could not be loaded."""


class NothingToRun(SpecauditError):
    """No scenario matched what was asked for."""

    exit_code = ExitCode.NO_SCENARIOS


class ScenarioError(UsageError):
    """A scenario file is malformed; the message starts with ``file:line: key:``."""


class ResultsFileError(UsageError):
    """A results file cannot be read back: not JSON, not a specaudit document, or missing a field."""


class ContractError(SpecauditError):
    """A verifier broke a clause of the contract; ``clause`` names it."""

    exit_code = ExitCode.CHECKS_FAILED

    def __init__(self, clause: str, message: str):
        super().__init__(f"[{clause}] {message}")
        self.clause = clause
        self.detail = message


class VerifierCrash(SpecauditError):
    """The verifier raised; ``user_traceback`` holds the frames from the user's code."""

    exit_code = ExitCode.CHECKS_FAILED

    def __init__(self, message: str, user_traceback: str = ""):
        super().__init__(message)
        self.user_traceback = user_traceback


class VerifierTimeout(SpecauditError):
    """One verifier call ran past the per-call timeout; ``user_traceback`` shows where it was stopped."""

    exit_code = ExitCode.CHECKS_FAILED

    def __init__(self, message: str, user_traceback: str = ""):
        super().__init__(message)
        self.user_traceback = user_traceback


def closest(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean X?)' for the closest choice, or ''."""
    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def check_level(name: str, value: float) -> float:
    """Return ``value``; raise UsageError unless it is a probability level, 0 < value < 1 (alpha, say)."""
    if not 0 < value < 1:
        raise UsageError(f"{name} = {value}; allowed: 0 < {name} < 1")
    return value


def exit_code_for(exc: BaseException) -> ExitCode:
    """Map any exception to the process exit code (pytest ``wrap_session``)."""
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    if isinstance(exc, SpecauditError):
        return exc.exit_code
    return ExitCode.INTERNAL_ERROR
