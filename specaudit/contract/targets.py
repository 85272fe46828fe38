"""Load a verifier from an import string: ``pkg.mod:attr`` or ``path/to/file.py:attr``.

Each failure is a TargetLoadError (usage error, exit code 4) that says which of four things went
wrong: the module does not exist, the module exists but raised while importing (the user's
traceback is shown), the attribute is missing (close names suggested), or it is not callable.
Modelled on uvicorn's ``importer.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specaudit.errors import TargetLoadError, closest

#: Short names for targets that ship with specaudit or its adapters.
ALIASES: dict[str, str] = {
    "reference": "specaudit.verifiers.reference:verify",
    "reference-logits": "specaudit.contract.logits:verify_reference",  # run with --contract logits
    "hf-transformers": "transformers.generation.utils:_speculative_sampling",  # adapter hf
    "vllm-v1": "vllm.v1.sample.rejection_sampler:rejection_sample",  # adapter vllm
    "flashinfer-chain": "flashinfer.sampling:chain_speculative_sampling",  # adapter flashinfer
    "sglang-tree": "sgl_kernel:tree_speculative_sampling_target_only",  # adapter sglang_tree (issue 9)
}

#: Top-level modules of optional dependencies -> how to install them (named in "not found" errors).
INSTALL_HINTS: dict[str, str] = {
    "torch": "pip install 'specaudit[torch]' (pins the CPU build torch==2.13.0)",
    "transformers": "pip install 'specaudit[hf]' (installs transformers and torch)",
    "vllm": "pip install vllm (needs a CUDA GPU)",
    "flashinfer": "pip install flashinfer-python (needs a CUDA GPU)",
}


def _user_traceback(exc: BaseException) -> str:
    """Format ``exc`` without the frames of specaudit and importlib."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "importlib" not in f.filename and not f.filename.endswith("specaudit/loading.py")
    ]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


def _import_file(path: Path) -> Any:
    name = f"_specaudit_target_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetLoadError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))  # let the file import its siblings
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - anything the user's module raises
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TargetLoadError(
            f"importing {path} raised {type(exc).__name__}; the error is in your module:\n{_user_traceback(exc)}"
        ) from None
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        hint = INSTALL_HINTS.get((exc.name or "").partition(".")[0])
        if hint:  # the target's module, or one it imports (transformers without torch), is an optional extra
            raise TargetLoadError(f"module {exc.name!r} not found (needed by {name!r}): it is optional; {hint}") from None
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise TargetLoadError(
                f"module {name!r} not found (is it installed, or on PYTHONPATH?); "
                "for a file write path/to/file.py:attr"
            ) from None
        raise TargetLoadError(
            f"importing {name!r} raised ModuleNotFoundError for {exc.name!r}; the error is in your module:\n"
            f"{_user_traceback(exc)}"
        ) from None
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TargetLoadError(
            f"importing {name!r} raised {type(exc).__name__}; the error is in your module:\n{_user_traceback(exc)}"
        ) from None


def load_target(spec: str) -> Callable[..., Any]:
    """Return the callable named by ``spec`` (``pkg.mod:attr``, ``file.py:attr`` or an alias)."""
    obj = load_object(spec)
    if not callable(obj):
        raise TargetLoadError(f"{spec!r} is a {type(obj).__name__}, not a callable verifier")
    return obj


def load_object(spec: str) -> Any:
    """Return the object named by ``spec`` (``pkg.mod:attr``, ``file.py:attr`` or an alias)."""
    spec = ALIASES.get(spec, spec)
    module_part, sep, attr_part = spec.rpartition(":")
    if not sep or not module_part or not attr_part:
        raise TargetLoadError(
            f"TARGET {spec!r} must look like 'package.module:function' or 'path/to/file.py:function'"
            f"{closest(spec, ALIASES)}; aliases: {', '.join(sorted(ALIASES))}"
        )
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise TargetLoadError(f"file {module_part!r} not found (TARGET {spec!r})")
        module = _import_file(path)
    else:
        module = _import_module(module_part)
    obj: Any = module
    for part in attr_part.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise TargetLoadError(
                f"{module_part!r} has no attribute {part!r}{closest(part, names)}; "
                f"public names: {', '.join(names[:20])}"
            )
        obj = getattr(obj, part)
    return obj
