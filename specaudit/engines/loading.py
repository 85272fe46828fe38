"""Make a fetched release's verifier callable, without installing the engine.

Two ways, as the release's layout says:

- **one function compiled alone** (``Layout.prepare`` is None; the target is ``member:function``):
  the function's own source is cut from the real file by its syntax tree and compiled with the
  file's name, so tracebacks point into the release; the module-level names it reads must all be
  bound by import statements of that file (``import torch``), which are run, and nothing else of
  the file is. A function that reads any other module-level name cannot be compiled alone, and
  loading it says which name (the release changed shape: a new layout is needed).
- **a package laid out** by the layout's ``prepare(files, into)``: the real files plus stand-ins
  for the rest of the engine, put first on ``sys.path``; an engine package of another release or
  of the installed one already imported in this process is unloaded first (two releases never
  meet in one interpreter). Triton kernels run in Triton's interpreter on a machine without a
  CUDA device (``TRITON_INTERPRET=1``, which must be set before triton is first imported).

A layout whose verifier is a CUDA kernel (``Layout.cuda_only``: a JIT-built or compiled op) is
fetched all the same (its wheel must still hold the file: a moved verifier is told apart from one
that needs CUDA), and then refused on a machine without a CUDA device, with the reason; on a CUDA
machine its target is imported from the installed release, which must be that version.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specaudit.engines.fetch import EngineError, Fetched, fetch
from specaudit.engines.release import Engine, Layout


@dataclass(frozen=True)
class Loaded:
    """A release's verifier and where it came from (recorded in the results)."""

    verifier: Callable[..., Any]
    engine: Engine
    version: str
    layout: Layout
    fetched: Fetched
    interpreted: bool  # Triton kernels run in Triton's CPU interpreter

    def record(self) -> dict[str, str]:
        """Return what a result records of it (see :func:`record`)."""
        return record(self.engine, self.version, self.layout, self.fetched)


def record(engine: Engine, version: str, layout: Layout, fetched: Fetched) -> dict[str, str]:
    """Return what a result records of a release: engine, version, wheel and verifier file digests, runtime."""
    member = layout.files[0]
    out = {
        "engine": engine.name,
        "engine_version": version,
        "engine_source": f"{fetched.wheel} (sha256 {fetched.wheel_sha256[:16]}), "
                         f"{member} (sha256 {fetched.files[member][:16]})",
    }
    if layout.triton and (os.environ.get("TRITON_INTERPRET") == "1" or not has_cuda()):
        out["engine_runtime"] = "Triton interpreter (TRITON_INTERPRET=1: no CUDA device)"
    return out


def load(engine: Engine, version: str) -> Loaded:
    """Return ``engine`` ``version``'s verifier, fetched (once) and made callable."""
    fetched = fetch(engine, version)
    layout = engine.layout(version)
    assert layout is not None  # fetch checked it
    module_part, _, attr = layout.target.rpartition(":")
    if layout.cuda_only:
        return Loaded(_installed_cuda(engine, version, layout), engine, version, layout, fetched, False)
    if layout.prepare is None:
        return Loaded(_compile_function(engine, version, fetched.folder / module_part, attr), engine, version,
                      layout, fetched, False)
    interpreted = _triton_mode(engine, version) if layout.triton else False
    into = fetched.folder.parent / f"{version}.site"
    try:
        root = layout.prepare(fetched.folder, into)
    except OSError as exc:
        raise EngineError(f"{engine.name}@{version}: cannot lay out its package in {into} ({exc})") from None
    _unload_other(module_part.partition(".")[0], root)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(module_part)
    except Exception as exc:  # noqa: BLE001 - the release's own code (or a stand-in it outgrew) raised
        raise EngineError(f"{engine.name}@{version}: importing {module_part} of the release raised "
                          f"{type(exc).__name__}: {exc}; the stand-ins of layout {layout.versions} do not fit it") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise EngineError(f"{engine.name}@{version}: {module_part} has no function {attr!r}: the release changed "
                          f"the layout specaudit knows for {layout.versions}")
    return Loaded(fn, engine, version, layout, fetched, interpreted)


def _installed_cuda(engine: Engine, version: str, layout: Layout) -> Callable[..., Any]:
    """Return a CUDA-only layout's target from the installed release (refused without CUDA or at another version)."""
    if not has_cuda():
        raise EngineError(f"{engine.name}@{version}: not drivable on this machine (no CUDA device): {layout.cuda_only}")
    try:
        installed = importlib.metadata.version(engine.distribution)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != version:
        raise EngineError(f"{engine.name}@{version}: its CUDA kernel is driven from the installed release; "
                          f"{engine.distribution} {installed or 'is not installed'}"
                          f"{' is installed' if installed else ''}: pip install {engine.distribution}=={version}")
    module_part, _, attr = layout.target.rpartition(":")
    try:
        fn = getattr(importlib.import_module(module_part), attr)
    except Exception as exc:  # noqa: BLE001 - the installed engine's own import raised
        raise EngineError(f"{engine.name}@{version}: importing {layout.target} from the installed release raised "
                          f"{type(exc).__name__}: {exc}") from None
    if not callable(fn):
        raise EngineError(f"{engine.name}@{version}: {layout.target} is not a function")
    return fn


def _triton_mode(engine: Engine, version: str) -> bool:
    """Return True when Triton's kernels will run in its interpreter (no CUDA device here)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    if has_cuda():
        return False
    if "triton" in sys.modules:
        raise EngineError(f"{engine.name}@{version}: its Triton kernels need Triton's interpreter on this machine "
                          "(no CUDA device), but triton was imported before TRITON_INTERPRET=1 could be set: run "
                          "in a fresh process, or set TRITON_INTERPRET=1 before starting Python")
    os.environ["TRITON_INTERPRET"] = "1"
    return True


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA install counts as none
        return False


def _unload_other(top: str, root: Path) -> None:
    """Drop ``top`` and its submodules from ``sys.modules`` unless they were imported from ``root``."""
    loaded = sys.modules.get(top)
    if loaded is None:
        return
    where = getattr(loaded, "__file__", None) or next(iter(getattr(loaded, "__path__", []) or []), "")
    if where and Path(where).resolve().is_relative_to(root.resolve()):
        return
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not (Path(p).name.endswith(".site") and (Path(p) / top).is_dir())]


def _compile_function(engine: Engine, version: str, path: Path, name: str) -> Callable[..., Any]:
    """Return function ``name`` of the file ``path``, compiled alone (see the module doc)."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        raise EngineError(f"{engine.name}@{version}: {path.name} has no module-level function {name!r}: the release "
                          "moved its verifier")
    fn_node = found[-1]
    imports = _module_imports(tree)
    free = sorted(_free_names(fn_node) - set(dir(builtins)))
    unbound = [n for n in free if n not in imports]
    if unbound:
        raise EngineError(f"{engine.name}@{version}: {name} in {path.name} reads module-level "
                          f"{', '.join(unbound)}, which specaudit cannot bind without importing the whole engine")
    namespace: dict[str, Any] = {"__name__": f"_specaudit_engine_{engine.distribution}_{version}",
                                 "__file__": str(path)}
    needed = ast.Module(body=[imports[n] for n in dict.fromkeys(free)], type_ignores=[])
    try:
        exec(compile(needed, str(path), "exec"), namespace)
    except ImportError as exc:
        raise EngineError(f"{engine.name}@{version}: {name} needs {exc.name!r}, which is not installed "
                          "(pip install -e '.[hf]' in specaudit's checkout installs torch)") from None
    alone = ast.Module(body=[fn_node], type_ignores=[])
    exec(compile(alone, str(path), "exec"), namespace)  # line numbers are the release's own
    fn: Callable[..., Any] = namespace[name]
    return fn


def _module_imports(tree: ast.Module) -> dict[str, ast.stmt]:
    """Return the name each top-level ``import``/``from ... import`` binds -> a statement binding only it."""
    out: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.partition(".")[0]
                out.setdefault(bound, ast.copy_location(ast.Import(names=[alias]), node))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                out.setdefault(alias.asname or alias.name,
                               ast.copy_location(ast.ImportFrom(module=node.module, names=[alias], level=0), node))
    return out


def _free_names(fn: ast.FunctionDef) -> set[str]:
    """Return the names ``fn`` reads that none of its own parameters, assignments or nested scopes bind."""
    bound = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    bound |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    loads: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {a.asname or a.name.partition(".")[0] for a in node.names}
    # annotations of the parameters are evaluated at definition time: they must be bound too
    return loads - bound

