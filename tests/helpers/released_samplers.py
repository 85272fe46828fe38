"""The engines' own sampling functions, read from their released wheels at test time (never stored here).

:func:`released_file` downloads a release's wheel once (``pip download DIST==VERSION --no-deps
--only-binary :all:``), keeps only the named files, unmodified, in a per-release cache folder
(``$SPECAUDIT_WHEEL_CACHE``, else ``$XDG_CACHE_HOME/specaudit``, else ``~/.cache/specaudit``; the
wheel is deleted) and returns one file's path. :func:`released_function` compiles one top-level
function (or one method of a class) of that file on its own, in a namespace holding ``torch`` and
``typing``: the sampling functions are plain torch, while importing their modules would need the
engine's compiled extensions and CUDA. A download that fails because the index cannot be reached
skips the test; any other failure (no such release, the file moved) fails it.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import typing
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: Words of pip's output that mean the package index could not be reached.
_OFFLINE = re.compile(r"NewConnectionError|ConnectionError|Max retries|Temporary failure in name resolution|"
                      r"Network is unreachable|Connection refused|Name or service not known|timed out|ProxyError", re.I)


def cache_dir() -> Path:
    """Return the folder holding the extracted files, one subfolder per distribution and version."""
    if os.environ.get("SPECAUDIT_WHEEL_CACHE"):
        return Path(os.environ["SPECAUDIT_WHEEL_CACHE"]) / "samplers"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specaudit" / "samplers"


def extract(wheel: Path, members: tuple[str, ...], into: Path) -> None:
    """Extract ``members`` of ``wheel`` unmodified into ``into`` (raise when one is missing)."""
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        missing = [m for m in members if m not in names]
        if missing:
            raise AssertionError(f"{wheel.name} has no {', '.join(missing)} (the engine moved its sampler)")
        for member in members:
            whl.extract(member, into)


def released_file(dist: str, version: str, members: tuple[str, ...], member: str) -> Path:
    """Return the path of ``member`` of release ``dist==version`` (``members`` are cached together)."""
    final = cache_dir() / dist / version
    if all((final / m).is_file() for m in members):
        return final / member
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"{dist}=={version}", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            if _OFFLINE.search(proc.stderr + proc.stdout):
                pytest.skip(f"offline: `{' '.join(cmd[2:])}` could not reach the package index")
            raise AssertionError(f"`{' '.join(cmd[2:])}` failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
        staged = Path(tmp) / "extracted"
        extract(wheels[0], members, staged)
        wheels[0].unlink()
        for m in members:
            (final / m).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged / m, final / m)
    return final / member


def source_of(path: Path, name: str) -> str:
    """Return the source of function ``name`` (``Class.method`` for a method) in ``path``, dedented."""
    tree = ast.parse(path.read_text())
    owner, _, leaf = name.rpartition(".")
    body: list[ast.stmt] = tree.body
    if owner:
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner]
        assert classes, f"{path} has no class {owner}"
        body = classes[0].body
    found = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == leaf]
    assert found, f"{path} has no function {name}"
    return textwrap.dedent(ast.get_source_segment(path.read_text(), found[0]) or "")


def released_function(path: Path, name: str, **names: Any) -> Callable[..., Any]:
    """Compile function ``name`` of ``path`` alone, with ``torch``, ``typing`` and ``names`` in its globals."""
    import torch

    namespace: dict[str, Any] = {"torch": torch, **{n: getattr(typing, n) for n in typing.__all__}, **names}
    code = compile(source_of(path, name), f"{path}:{name}", "exec")
    exec(code, namespace)  # the released function, unmodified, read from the wheel at test time
    return namespace[name.rpartition(".")[2]]
