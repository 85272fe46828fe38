"""What one range of an engine's releases looks like: where its verifier lives, and how it is driven.

An :class:`Engine` is a package on the package index (``transformers``, ``vllm``, ...) whose
released wheels hold a speculative-decoding verifier. Each :class:`Layout` covers the releases
whose verifier sits in the same files with the same signature: the files taken from the wheel
(unmodified, into the user cache: nothing of an engine is stored in specaudit), how they are made
importable without the rest of the engine (one function compiled alone, or a package laid out
with stand-ins), the target inside them and the adapter that drives it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version


@dataclass(frozen=True)
class Layout:
    """The releases (a PEP 440 range) whose verifier sits in ``files`` and is driven alike."""

    versions: str  # PEP 440 specifier, e.g. ">=0.16,<0.34"
    files: tuple[str, ...]  # wheel members taken; the first holds the verifier and must be there
    target: str  # "module:attr" of the verifier once laid out (or "file-member:function" for a compiled one)
    adapter: str | None  # the adapter that drives it (None: the target speaks the canonical contract)
    options: Mapping[str, Any] = field(default_factory=dict)  # adapter options it brings
    scenarios: tuple[str, ...] | None = None  # its default suite (None: the default suite)
    #: ``prepare(files_folder, into) -> folder to put on sys.path``: lays out an importable package from
    #: the real files (stand-ins for the rest); None: the target is one function compiled alone (see load.py)
    prepare: Callable[[Path, Path], Path] | None = None
    triton: bool = False  # Triton kernels: run in Triton's interpreter on a machine without a GPU
    #: the default ``--samples`` where its Triton kernels run in the interpreter (a scenario's own N would take hours)
    interpreted_samples: int | None = None
    optional: tuple[str, ...] = ()  # files taken when the release has them (none of them needed)
    note: str = ""  # what is known of these releases (one line, shown by `specaudit engines`)
    #: why the verifier runs only on a CUDA device (empty: it runs here). Such a layout is never laid out
    #: from the wheel: on a CUDA machine ``target`` is imported from the installed release of that version
    cuda_only: str = ""

    def covers(self, version: str) -> bool:
        return SpecifierSet(self.versions).contains(Version(version), prereleases=True)


@dataclass(frozen=True)
class Engine:
    """An engine on the package index and the layouts of its releases, oldest first."""

    name: str  # the target prefix: ``NAME@VERSION``
    distribution: str  # its distribution on the package index
    summary: str
    layouts: tuple[Layout, ...]
    installed_target: str | None = None  # the unversioned alias's import string (audits the installed release)

    def layout(self, version: str) -> Layout | None:
        """Return the layout covering ``version`` (the newest is open-ended: a later release is tried on it)."""
        return next((layout for layout in self.layouts if layout.covers(version)), None)

    def ranges(self) -> str:
        return "; ".join(f"{lay.versions}: {lay.files[0]}" for lay in self.layouts)
