"""Load a verifier from a TARGET: ``pkg.mod:attr``, ``path/to/file.py:attr``, an alias, ``ENGINE@VERSION`` or ``mutant:NAME``.

Each failure is a TargetLoadError (usage error, exit code 4) that says which of four things went
wrong: the module does not exist, the module exists but raised while importing (the user's
traceback is shown), the attribute is missing (close names suggested), or it is not callable.
Modelled on uvicorn's ``importer.py``.

This module also holds the one table of target aliases (:data:`ALIASES`): each short name brings
its import string and, where it needs them, the adapter, the adapter options and the default suite
it is run with (``hf-transformers`` is driven by the ``hf`` adapter on ``tag:hf corners``). Import
strings of the modules that moved into folders keep working through :data:`LEGACY` (e.g.
``specaudit.mutants:NAME`` loads ``specaudit.verifiers.zoo.chain:NAME``), and ``mutant:NAME``
names any mutant of the zoo. The label a run records stays the string the user typed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specaudit import engines
from specaudit.contract.guard import user_interrupted
from specaudit.errors import TargetLoadError, closest
from specaudit.registry import Registry


@dataclass(frozen=True)
class Alias:
    """A short TARGET name: its import string, and the adapter and default suite it brings."""

    target: str  # the import string it stands for
    adapter: str | None = None  # the adapter ``specaudit run ALIAS`` drives it with
    scenarios: tuple[str, ...] | None = None  # its default suite (None: the default suite)
    options: Mapping[str, Any] = field(default_factory=dict)  # adapter options it brings


#: Short names for targets that ship with specaudit or its adapters, in listing order.
ALIASES: Registry[Alias] = Registry("target alias", TargetLoadError)
ALIASES.register("reference", Alias("specaudit.verifiers.reference:verify"))
ALIASES.register("reference-block", Alias("specaudit.verifiers.block:verify", scenarios=("tag:block",)))
ALIASES.register("reference-tree", Alias("specaudit.verifiers.tree:verify", scenarios=("tag:tree",)))
ALIASES.register("reference-greedy", Alias("specaudit.verifiers.greedy:verify", scenarios=("tag:greedy",)))
# run with --contract logits
ALIASES.register("reference-logits", Alias("specaudit.verifiers.logits:verify_reference"))
# run with --contract draft-vocab
ALIASES.register("reference-draft-vocab", Alias("specaudit.verifiers.vocab:verify", scenarios=("tag:draft-vocab",)))
ALIASES.register("reference-stops", Alias("specaudit.verifiers.stops:verify", scenarios=("tag:stops",)))
ALIASES.register("reference-loop", Alias("specaudit.verifiers.loop:verify", scenarios=("tag:loop",)))
ALIASES.register(
    "hf-transformers", Alias("transformers.generation.utils:_speculative_sampling", "hf", ("tag:hf", "corners"))
)
ALIASES.register(
    "vllm-v1", Alias("vllm.v1.sample.rejection_sampler:rejection_sample", "vllm", options={"device": "cuda"})
)
ALIASES.register(
    "flashinfer-chain",
    Alias("flashinfer.sampling:chain_speculative_sampling", "flashinfer", options={"device": "cuda"}),
)
ALIASES.register(  # the tree contract
    "sglang-tree",
    Alias("sgl_kernel:tree_speculative_sampling_target_only", "sglang_tree", ("tag:topk",),
          {"tensors": "torch", "device": "cuda"}),
)

#: ``mutant:NAME`` names any mutant of the zoo (:data:`specaudit.verifiers.zoo.MUTANTS`).
MUTANT_PREFIX = "mutant:"
#: Name prefix of the modules of verifiers loaded from a file path (not importable by that name elsewhere).
FILE_MODULE_PREFIX = "_specaudit_target_"
#: The module holding the zoo registry, imported by name when a ``mutant:NAME`` target is loaded.
ZOO_MODULE = "specaudit.verifiers.zoo"

#: Import strings of modules that moved into folders: old ``module:`` (or whole string) -> new.
LEGACY: dict[str, str] = {
    "specaudit.reference:": "specaudit.verifiers.reference:",
    "specaudit.mutants:": "specaudit.verifiers.zoo.chain:",
    "specaudit.block:": "specaudit.verifiers.block:",
    "specaudit.greedy:verify": "specaudit.verifiers.greedy:verify",
    "specaudit.tree_reference:": "specaudit.verifiers.tree:",
    "specaudit.tree_mutants:": "specaudit.verifiers.zoo.tree:",
    "specaudit.logits_mutants:": "specaudit.verifiers.zoo.logits:",
    "specaudit.logits:verify_reference": "specaudit.verifiers.logits:verify_reference",
}


def import_string(spec: str) -> str:
    """Return the import string ``spec`` stands for: an alias's, a legacy one's new form, or ``spec``."""
    if engines.split(spec) is not None:  # ENGINE@VERSION: loaded from the release, never imported by name
        return spec
    if spec in ALIASES:
        return ALIASES.get(spec).target
    for old, new in LEGACY.items():
        if spec == old or (old.endswith(":") and spec.startswith(old)):
            return new + spec[len(old):]
    return spec


def alias(spec: Any) -> Alias | None:
    """Return the alias ``spec`` names (None for an import string or a callable).

    ``ENGINE@VERSION`` is an alias too: the adapter, options and suite of the layout covering that
    release (read without downloading anything).
    """
    layout = engines.layout_of(spec)
    if layout is not None:
        return Alias(spec, layout.adapter, layout.scenarios, layout.options)
    return ALIASES.get(spec) if isinstance(spec, str) and spec in ALIASES else None

#: Top-level modules of optional dependencies -> how to install them (named in "not found" errors).
INSTALL_HINTS: dict[str, str] = {
    "torch": "pip install -e '.[torch]' in specaudit's checkout (pins the CPU build torch==2.13.0)",
    "transformers": "pip install -e '.[hf]' in specaudit's checkout (installs transformers and torch)",
    "vllm": "pip install vllm (needs a CUDA GPU)",
    "flashinfer": "pip install flashinfer-python (needs a CUDA GPU)",
}


def _user_traceback(exc: BaseException) -> str:
    """Format ``exc`` without the frames of specaudit and importlib."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "importlib" not in f.filename and not f.filename.endswith("specaudit/contract/targets.py")
    ]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


def _raised(what: str, exc: BaseException) -> TargetLoadError:
    """Return the usage error of a module that raised while importing (a real Ctrl-C is re-raised)."""
    if isinstance(exc, KeyboardInterrupt) and user_interrupted():
        raise exc
    if isinstance(exc, SystemExit):  # sys.exit() at import must not end the run, whatever its code
        code = "" if exc.code is None else repr(exc.code)
        did = f"called sys.exit({code})"
    else:
        did = f"raised {type(exc).__name__}"
    return TargetLoadError(f"importing {what} {did}; the error is in your module:\n{_user_traceback(exc)}")


def _import_file(path: Path) -> Any:
    name = f"{FILE_MODULE_PREFIX}{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetLoadError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))  # let the file import its siblings
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - anything the user's module raises, sys.exit included
        sys.modules.pop(name, None)
        raise _raised(str(path), exc) from None
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
    except BaseException as exc:  # noqa: BLE001 - anything the user's module raises, sys.exit included
        raise _raised(repr(name), exc) from None


def load_target(spec: str) -> Callable[..., Any]:
    """Return the callable named by ``spec`` (``pkg.mod:attr``, ``file.py:attr``, an alias or ``mutant:NAME``)."""
    obj = load_object(spec)
    if not callable(obj):
        kind = type(obj).__name__
        raise TargetLoadError(f"{spec!r} is {'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}, not a callable verifier")
    return obj


def _is_file(module_part: str) -> bool:
    return module_part.endswith(".py") or "/" in module_part or "\\" in module_part


def check_target(spec: str) -> tuple[str, str]:
    """Return (module or file, attribute path) that ``spec`` names, after the checks that run none of its code.

    A malformed TARGET, a missing file, a top-level module that is not installed and an unknown
    ``mutant:NAME`` are TargetLoadErrors (exit 4) here, before a run or a merge starts; importing
    the module (and what its code does then) is left to :func:`load_object`.
    """
    if spec.startswith(MUTANT_PREFIX):
        _load_mutant(spec[len(MUTANT_PREFIX):])
        return spec, ""
    if engines.layout_of(spec) is not None:  # ENGINE@VERSION: a known engine, a version its layouts cover
        return spec, ""
    spec = import_string(spec)
    module_part, sep, attr_part = spec.rpartition(":")
    if not sep or not module_part or not attr_part:
        raise TargetLoadError(
            f"TARGET {spec!r} must look like 'package.module:function' or 'path/to/file.py:function'"
            f"{closest(spec, ALIASES)}; aliases: {', '.join(sorted(ALIASES))}"
        )
    if _is_file(module_part):
        _check_file(module_part, spec)
        return module_part, attr_part
    top = module_part.partition(".")[0]
    try:
        found = top in sys.modules or importlib.util.find_spec(top) is not None  # without running any code
    except (ValueError, ImportError):  # a name Python cannot import ("a..b"), reported below
        found = False
    if not found:
        hint = INSTALL_HINTS.get(top)
        if hint:
            raise TargetLoadError(f"module {top!r} not found (needed by {module_part!r}): it is optional; {hint}")
        raise TargetLoadError(
            f"module {module_part!r} not found (is it installed, or on PYTHONPATH?); for a file write path/to/file.py:attr"
            + _local_hint(module_part)
        )
    return module_part, attr_part


#: The longest file name (one path component) most file systems allow, in bytes (POSIX NAME_MAX).
NAME_MAX = 255


def _local_hint(module_part: str) -> str:
    """Return why a module name that is also a path here is not a target (a folder, a file that is not .py)."""
    try:
        here = Path(module_part)
        if here.is_dir():
            return f"; {module_part!r} here is a folder: name a Python file in it (path/to/file.py:attr)"
        if here.is_file():
            return f"; {module_part!r} here is a file but not a Python file (.py)"
    except (OSError, ValueError):
        pass
    return ""


def _check_file(module_part: str, spec: str) -> None:
    """Raise TargetLoadError unless ``module_part`` is an existing Python source file (.py)."""
    path = Path(module_part)
    long = [part for part in path.parts if len(os.fsencode(part)) > NAME_MAX]
    if long:
        raise TargetLoadError(
            f"TARGET {spec[:60]!r}...: a name in the path is {len(os.fsencode(long[0])):,} bytes long; "
            f"allowed: at most {NAME_MAX} (NAME_MAX) per name"
        )
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except (OSError, ValueError) as exc:  # a path the OS refuses (too long as a whole, a NUL byte)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TargetLoadError(f"TARGET file {module_part[:80]!r}: cannot be read ({reason})") from None
    if is_dir:
        raise TargetLoadError(
            f"TARGET file {module_part!r} is a folder; name a Python file in it (path/to/file.py:attr)"
        )
    if not is_file:
        raise TargetLoadError(f"file {module_part!r} not found (TARGET {spec!r})")
    if path.suffix != ".py":
        raise TargetLoadError(
            f"TARGET file {module_part!r} is not a Python file (.py); write path/to/file.py:attr"
        )


def load_object(spec: str) -> Any:
    """Return the object named by ``spec`` (``pkg.mod:attr``, ``file.py:attr``, an alias or ``mutant:NAME``)."""
    if spec.startswith(MUTANT_PREFIX):
        return _load_mutant(spec[len(MUTANT_PREFIX):])
    if engines.split(spec) is not None:
        return engines.load(spec).verifier
    module_part, attr_part = check_target(spec)
    module = _import_file(Path(module_part)) if _is_file(module_part) else _import_module(module_part)
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


def _load_mutant(name: str) -> Any:
    """Return the zoo mutant ``name``'s function; unknown names get the closest match."""
    zoo = _import_module(ZOO_MODULE)  # by name: the contract layer sits below the verifiers
    try:
        return zoo.get(name).func
    except KeyError as exc:
        raise TargetLoadError(f"TARGET 'mutant:{name}': {exc.args[0]}") from None
