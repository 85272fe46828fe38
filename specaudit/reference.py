"""Deprecated alias of :mod:`specaudit.verifiers.reference` (the reference verifier), kept for one release.

The house redesign moved ``specaudit.reference`` into its folder. Importing this module warns
(DeprecationWarning) and forwards every attribute to the new module; the TARGET string
``specaudit.reference:NAME`` keeps working without a warning through the legacy-prefix table of
:mod:`specaudit.contract.targets`. Import ``specaudit.verifiers.reference`` instead.
"""

from __future__ import annotations

import warnings
from typing import Any

from specaudit.verifiers import reference as _new

warnings.warn(
    "specaudit.reference is deprecated and will be removed in the next release; import specaudit.verifiers.reference",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    """Forward every other attribute to :mod:`specaudit.verifiers.reference`."""
    return getattr(_new, name)
