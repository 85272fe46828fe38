"""Deprecated alias of :mod:`specaudit.verifiers.zoo.chain` (the chain mutant zoo), kept for one release.

The house redesign moved ``specaudit.mutants`` into its folder. Importing this module warns
(DeprecationWarning) and forwards every attribute to the new module; the TARGET string
``specaudit.mutants:NAME`` keeps working without a warning through the legacy-prefix table of
:mod:`specaudit.contract.targets`. Import ``specaudit.verifiers.zoo.chain`` instead.
"""

from __future__ import annotations

import warnings
from typing import Any

from specaudit.verifiers.zoo import chain as _new

warnings.warn(
    "specaudit.mutants is deprecated and will be removed in the next release; import specaudit.verifiers.zoo.chain",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    """Forward every other attribute to :mod:`specaudit.verifiers.zoo.chain`."""
    return getattr(_new, name)
