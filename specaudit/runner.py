"""Deprecated: ``specaudit.runner`` moved to :mod:`specaudit.engine.run` (one release of grace).

The run pipeline now lives in ``specaudit.engine`` (settings, run, scenario, executors); this
module re-exports the names that code outside the package imported from the old runner, and
warns once on import. Use ``specaudit.run`` or ``specaudit.engine.run`` instead.
"""

from __future__ import annotations

import warnings

from specaudit.checks import evaluate
from specaudit.engine.api import run
from specaudit.engine.run import (
    DEFAULT_ALPHA,
    RERUN_FACTOR,
    apply_holm,
    default_suspect_level,
    measure,
    rerun_seed,
    rerun_suspects,
    resolve_scenarios,
    resolve_target,
    scenario_seed,
)
from specaudit.results import RunResult, ScenarioResult

warnings.warn(
    "specaudit.runner is deprecated and will be removed in the next release; use specaudit.run or specaudit.engine.run",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "DEFAULT_ALPHA",
    "RERUN_FACTOR",
    "RunResult",
    "ScenarioResult",
    "apply_holm",
    "default_suspect_level",
    "evaluate",
    "measure",
    "rerun_seed",
    "rerun_suspects",
    "resolve_scenarios",
    "resolve_target",
    "run",
    "scenario_seed",
]
