"""Obtain vLLM's *released* v1 rejection sampler and import it on a machine without CUDA.

Nothing of vLLM is stored in this repository. :func:`fetch` downloads the released wheel of one
vLLM version with pip (``pip download vllm==X --no-deps --only-binary :all:``; the wheel, not the
sdist: building the sdist's metadata runs vLLM's setup.py, which needs torch's CUDA toolchain and
``setuptools_scm``), extracts only :data:`REAL_MODULES` into a per-version cache folder (the
wheel itself is deleted; the cache is ``$SPECAUDIT_WHEEL_CACHE``, else ``$XDG_CACHE_HOME/specaudit``,
else ``~/.cache/specaudit``), so CI downloads each version once.

:func:`package_root` lays out an importable ``vllm`` package in a folder: the real files,
unmodified, plus the **stand-ins** of :data:`STANDINS` -- the minimal modules needed to import
``vllm/v1/sample/rejection_sampler.py`` without vLLM's compiled extensions, CUDA or its hundreds
of dependencies. Every stand-in says so in its first line. Any other ``vllm.*`` module the real
files import is a placeholder package whose attributes are inert placeholder classes (used by
``RejectionSampler``'s methods and type annotations, never by ``rejection_sample``). With
``TRITON_INTERPRET=1`` the real Triton kernels run on CPU in Triton's interpreter (~15 ms a row).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: The versions driven in CI: one before vLLM PR #32852 (0.16: ``target_probs`` -> ``target_logits``), one after.
VERSIONS = ("0.8.5", "0.33.0")

#: Files taken unmodified from the wheel, when the version has them (the 0.3x launcher
#: ``triton_kernel_dispatcher_with_warmup`` lives in model_executor/warmup and reads vllm.envs).
REAL_MODULES = (
    "vllm/v1/sample/rejection_sampler.py",
    "vllm/v1/sample/metadata.py",
    "vllm/envs.py",
    "vllm/model_executor/warmup/jit_warmup.py",
    "vllm/model_executor/warmup/jit_warmup_triton_helper.py",
)

_MARK = "# STAND-IN written by specaudit's tests/helpers/real_vllm.py: NOT vLLM code.\n"

#: The stand-in modules (path -> source). Only what importing the real files needs.
STANDINS = {
    # the package: makes every vllm.* module that is neither real nor a stand-in an inert placeholder
    "vllm/__init__.py": _MARK + '''
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "standin"


def _placeholder(module, attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    value = type(attr, (), {"__module__": module.__name__, "__init__": lambda self, *a, **k: None})
    setattr(module, attr, value)
    return value


class _Placeholders(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: a vllm.* module found nowhere else is a placeholder package."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("vllm."):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__getattr__ = lambda attr: _placeholder(module, attr)


if not any(isinstance(f, _Placeholders) for f in sys.meta_path):
    sys.meta_path.append(_Placeholders())
''',
    "vllm/logger.py": _MARK + "import logging\n\n\ndef init_logger(name):\n    return logging.getLogger(name)\n",
    "vllm/triton_utils/__init__.py": _MARK + "import triton\nimport triton.language as tl\n\nHAS_TRITON = True\n",
    "vllm/platforms/__init__.py": _MARK + '''
import torch


class _CpuPlatform:
    device_type = "cpu"

    def is_cuda(self):
        return False

    def is_rocm(self):
        return False

    def is_cuda_alike(self):
        return False

    def __getattr__(self, name):
        if name.startswith("is_"):
            return lambda *args, **kwargs: False
        raise AttributeError(name)


current_platform = _CpuPlatform()
''',
}


def cache_dir() -> Path:
    """Return the folder that holds the extracted real modules, one subfolder per version."""
    if os.environ.get("SPECAUDIT_WHEEL_CACHE"):
        return Path(os.environ["SPECAUDIT_WHEEL_CACHE"]) / "vllm"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specaudit" / "vllm"


class FetchError(RuntimeError):
    """The released wheel could not be downloaded or lacks the rejection sampler."""


def fetch(version: str) -> Path:
    """Return a folder holding :data:`REAL_MODULES` of vLLM ``version``, downloading its wheel once."""
    final = cache_dir() / version
    if (final / "vllm/v1/sample/rejection_sampler.py").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wheels = sorted(Path(tmp).glob("vllm-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise FetchError(f"`{' '.join(cmd[2:])}` failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
        staged = Path(tmp) / "extracted"
        with zipfile.ZipFile(wheels[0]) as whl:
            names = set(whl.namelist())
            if REAL_MODULES[0] not in names:
                raise FetchError(f"{wheels[0].name} has no {REAL_MODULES[0]}")
            for member in REAL_MODULES:
                if member in names:
                    whl.extract(member, staged)
        wheels[0].unlink()
        try:
            os.replace(staged, final)
        except OSError:  # another process cached it meanwhile
            if not (final / REAL_MODULES[0]).is_file():
                raise
    return final


def package_root(version: str, into: Path) -> Path:
    """Lay out an importable ``vllm`` (real files of ``version`` + stand-ins) under ``into``; return ``into``."""
    real = fetch(version)
    for member in REAL_MODULES:
        if (real / member).is_file():
            dest = into / member
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(real / member, dest)
    for member, source in STANDINS.items():
        dest = into / member
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(source)
    # folders of real files become packages (stand-in __init__ files, empty)
    folders = {parent for p in into.rglob("*.py") for parent in p.relative_to(into).parents}
    for folder in folders - {Path(".")}:
        if not (into / folder / "__init__.py").exists():
            (into / folder / "__init__.py").write_text(_MARK)
    return into
