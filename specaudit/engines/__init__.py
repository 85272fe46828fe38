"""Engines as released: ``ENGINE@VERSION`` targets, their layouts, fetching and loading.

========================  ==================================================================
:mod:`.release`           :class:`Engine` and :class:`Layout`: where a range of releases keeps its verifier
:mod:`.fetch`             the release's files from its wheel, once, into the user cache
:mod:`.loading`              the verifier made callable without installing the engine
:mod:`.hf`, ...           one module per engine: its layouts, release by release
========================  ==================================================================

``specaudit run hf-transformers@5.24.0`` audits that release's verifier wherever specaudit runs,
whatever is installed; an unversioned alias (``hf-transformers``) audits the installed release.
Either way :func:`describe` says which engine and version a result audited.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from specaudit.engines.fetch import EngineError
from specaudit.engines.release import Engine, Layout
from specaudit.errors import TargetLoadError
from specaudit.registry import Lazy, Registry

__all__ = ["ENGINES", "Engine", "EngineError", "Layout", "describe", "interpreted_samples", "layout_of", "load", "split"]

#: The engines specaudit drives by release (``NAME@VERSION``), in listing order.
ENGINES: Registry[Engine] = Registry("engine", TargetLoadError)
ENGINES.register("hf-transformers", Lazy("specaudit.engines.hf:ENGINE"))
ENGINES.register("vllm", Lazy("specaudit.engines.vllm:ENGINE"))
ENGINES.register("sglang", Lazy("specaudit.engines.sglang:ENGINE"))
ENGINES.register("flashinfer", Lazy("specaudit.engines.flashinfer:ENGINE"))

#: The separator of ``ENGINE@VERSION``.
AT = "@"


def split(spec: Any) -> tuple[Engine, str] | None:
    """Return (engine, version) for an ``ENGINE@VERSION`` string, None for anything else.

    A string with ``:`` or ``/`` is an import string or a path, never this. ``NAME@VERSION`` with
    an unknown NAME is a TargetLoadError naming the closest engine.
    """
    if not isinstance(spec, str) or AT not in spec or ":" in spec or "/" in spec:
        return None
    name, _, version = spec.partition(AT)
    if name not in ENGINES:
        ENGINES.get(name)  # raises, naming the closest engine
    return ENGINES.get(name), version.strip()


def layout_of(spec: Any) -> Layout | None:
    """Return the layout an ``ENGINE@VERSION`` target is driven by (no download), None for other targets."""
    from specaudit.engines.fetch import check_version

    found = split(spec)
    return None if found is None else check_version(*found)


def interpreted_samples(spec: Any) -> int | None:
    """Return the default ``--samples`` of an ``ENGINE@VERSION`` target whose Triton kernels will run in the
    interpreter here (no CUDA device), None for any other target (a bad version is reported when it loads)."""
    import os

    from specaudit.engines.loading import has_cuda

    try:
        layout = layout_of(spec)
    except TargetLoadError:
        return None
    if layout is None or not layout.triton or layout.interpreted_samples is None:
        return None
    if os.environ.get("TRITON_INTERPRET") != "1" and has_cuda():
        return None
    return layout.interpreted_samples


_LOADED: dict[tuple[str, str], Any] = {}


def load(spec: str) -> Any:
    """Return the :class:`~specaudit.engines.loading.Loaded` release ``ENGINE@VERSION`` (fetched once, loaded once)."""
    from specaudit.engines.loading import load as load_release

    found = split(spec)
    if found is None:
        raise TargetLoadError(f"{spec!r} is not ENGINE@VERSION")
    key = (found[0].name, found[1])
    if key not in _LOADED:
        _LOADED[key] = load_release(*found)
    return _LOADED[key]


def describe(spec: Any, module: str | None = None) -> dict[str, str]:
    """Return what a result records of the engine a target is: name, version and where it came from.

    ``ENGINE@VERSION``: the release, its wheel and the verifier file's SHA-256 (loads it: cached).
    An import string (or alias) into an installed engine's package: that engine and the installed
    version. Anything else: nothing.
    """
    from specaudit.engines.fetch import check_version, fetch
    from specaudit.engines.loading import record

    found = split(spec)
    if found is not None:  # the cached release's manifest: nothing of the engine is imported here
        return record(*found, check_version(*found), fetch(*found))
    top = (module or "").partition(".")[0]
    for name in ENGINES:
        engine = ENGINES.get(name)
        installed = (engine.installed_target or "").partition(".")[0]
        if top and top == installed:
            try:
                version = importlib.metadata.version(engine.distribution)
            except importlib.metadata.PackageNotFoundError:
                return {"engine": engine.name, "engine_version": "unknown (not installed as a distribution)"}
            return {"engine": engine.name, "engine_version": version,
                    "engine_source": f"installed {engine.distribution} {version}"}
    return {}
