"""Take a release's verifier files from its wheel on the package index, once, into the user cache.

``fetch(engine, version)`` runs ``pip download DIST==VERSION --no-deps --only-binary :all:`` (the
wheel, never the sdist: building an engine's sdist runs its setup.py, which wants CUDA), extracts
only the files its :class:`~specaudit.engines.release.Layout` names, unmodified, deletes the wheel
and records what it took in a sealed manifest (the wheel's name and SHA-256, each file's SHA-256).
A later fetch of the same release reads the folder back after checking every file against the
manifest; a damaged or incomplete entry is fetched again. The folder is
``<cache>/engines/<distribution>/<version>/`` of the specaudit cache (``$SPECAUDIT_CACHE``, see
:mod:`specaudit.results.cache`); with the cache off, a temporary folder of this process.

Every failure is an :class:`EngineError` (a usage error, exit 4) that says which of these it is:
a version that is no release, a release outside every layout, no package index (offline), or a
wheel that lacks the verifier's file (the engine moved it: a new layout is needed, and the error
says so rather than letting a test skip).
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from specaudit.engines.release import Engine, Layout
from specaudit.errors import TargetLoadError
from specaudit.results.cache import cache_dir, read_sealed, seal
from specaudit.results.document import replace_file

#: The sealed manifest of a fetched release, beside its files.
MANIFEST = "release.json"
#: The most bytes a manifest may hold (a few dozen file names and digests).
MANIFEST_LIMIT = 1 << 20
#: The longest a download may take (vLLM's wheels are ~240 MB).
DOWNLOAD_TIMEOUT = 900.0
#: Words of pip's output that mean the index could not be reached (not: the release does not exist).
_OFFLINE = re.compile(r"NewConnectionError|ConnectionError|Max retries|Temporary failure in name resolution|"
                      r"Network is unreachable|Connection refused|connection error|Name or service not known|timed out|ProxyError|SSLError", re.I)


class EngineError(TargetLoadError):
    """A release that cannot be had or driven: named with the cache folder and the command that pre-fetches."""


class IndexUnreachable(EngineError):
    """The package index could not be reached (offline): the one failure a test of a release may skip on."""


@dataclass(frozen=True)
class Fetched:
    """A release's files in the cache and what they were taken from."""

    folder: Path  # the layout's files at their paths in the wheel
    wheel: str  # the wheel's file name
    wheel_sha256: str
    files: dict[str, str]  # member -> SHA-256 of the file taken


def check_version(engine: Engine, version: str) -> Layout:
    """Return the layout of ``engine`` covering ``version``; raise EngineError for a malformed or uncovered one."""
    try:
        Version(version)
    except InvalidVersion:
        raise EngineError(f"{engine.name}@{version}: {version!r} is not a version (PEP 440), e.g. "
                          f"{engine.name}@{engine.layouts[-1].versions.split(',')[0].lstrip('<>=!~')}") from None
    layout = engine.layout(version)
    if layout is None:
        raise EngineError(f"{engine.name}@{version}: specaudit drives {engine.distribution} releases "
                          f"{', '.join(lay.versions for lay in engine.layouts)} only; {version} is outside them")
    return layout


def engines_folder() -> Path:
    """Return the folder holding fetched releases (a temporary one, removed at exit, when the cache is off)."""
    base = cache_dir()
    if base is None:
        global _TEMPORARY
        if _TEMPORARY is None:
            _TEMPORARY = Path(tempfile.mkdtemp(prefix="specaudit-engines-"))
            atexit.register(shutil.rmtree, _TEMPORARY, True)
        return _TEMPORARY
    return base / "engines"


_TEMPORARY: Path | None = None


def release_folder(engine: Engine, version: str) -> Path:
    return engines_folder() / engine.distribution / version


def prefetch_hint(engine: Engine, version: str) -> str:
    return (f"the cache folder is {release_folder(engine, version)}; on a machine that reaches the package index "
            f"run `specaudit engines --fetch {engine.name}@{version}` and copy that folder here "
            "(or point $SPECAUDIT_CACHE at a copy of its cache)")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cached(engine: Engine, version: str) -> Fetched | None:
    """Return the cached release when its manifest and every file it lists check out, else None."""
    folder = release_folder(engine, version)
    try:
        manifest = json.loads(read_sealed(folder / MANIFEST, MANIFEST_LIMIT))
        files = {str(k): str(v) for k, v in manifest["files"].items()}
        fetched = Fetched(folder, str(manifest["wheel"]), str(manifest["wheel_sha256"]), files)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    layout = engine.layout(version)
    if layout is None or not set(layout.files) <= set(files):
        return None  # taken for another layout (an older specaudit): fetch again
    for member, digest in files.items():
        path = folder / member
        try:
            if not path.is_file() or path.is_symlink() or _sha256(path) != digest:
                return None
        except OSError:
            return None
    return fetched


def fetch(engine: Engine, version: str) -> Fetched:
    """Return ``engine`` ``version``'s verifier files, from the cache or downloaded once (see the module doc)."""
    check_version(engine, version)
    found = cached(engine, version)
    if found is not None:
        return found
    folder = release_folder(engine, version)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(folder.parent / f".{version}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise EngineError(f"{engine.name}@{version}: cannot write the cache folder {folder.parent} "
                          f"({exc.strerror or exc}); set $SPECAUDIT_CACHE to a writable folder") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process fetches a release; the others then read its copy
        found = cached(engine, version)
        return found if found is not None else _fetch_into(engine, version, folder)
    finally:
        os.close(lock)


def _fetch_into(engine: Engine, version: str, folder: Path) -> Fetched:
    layout = check_version(engine, version)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=folder.parent))
    try:
        wheel = _download(engine, version, staging)
        files = _extract(engine, version, layout, wheel, staging / "files")
        fetched = Fetched(folder, wheel.name, _sha256(wheel), files)
        wheel.unlink()
        manifest = {"distribution": engine.distribution, "version": version, "wheel": fetched.wheel,
                    "wheel_sha256": fetched.wheel_sha256, "files": files}
        (staging / "files" / MANIFEST).write_bytes(seal(json.dumps(manifest, indent=1).encode()))
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif folder.exists():  # a damaged entry: replaced whole
            shutil.rmtree(folder)
        os.replace(staging / "files", folder)
        return fetched
    except OSError as exc:
        raise EngineError(f"{engine.name}@{version}: cannot write {folder} ({exc.strerror or exc}); "
                          "set $SPECAUDIT_CACHE to a writable folder") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _download(engine: Engine, version: str, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", f"{engine.distribution}=={version}", "--no-deps",
           "--only-binary", ":all:", "--disable-pip-version-check", "-vv", "-d", str(into)]  # -vv: pages fetched
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise IndexUnreachable(f"{engine.name}@{version}: downloading its wheel took over {DOWNLOAD_TIMEOUT:.0f} s; "
                          + prefetch_hint(engine, version)) from None
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode == 0 and wheels:
        return wheels[0]
    said = " ".join(line for line in proc.stderr.splitlines() if line.startswith("ERROR"))
    if _unreachable(proc.stdout + proc.stderr):
        raise IndexUnreachable(f"{engine.name}@{version}: the package index cannot be reached (offline?): "
                          f"{said[-300:]}; " + prefetch_hint(engine, version))
    if "No matching distribution" in said or "Could not find a version" in said:
        raise EngineError(f"{engine.name}@{version}: {engine.distribution} {version} has no wheel on the package "
                          f"index (no such release, or none for this platform); `pip index versions "
                          f"{engine.distribution}` lists its releases")
    raise EngineError(f"{engine.name}@{version}: `pip download` exited {proc.returncode}: {said[-400:]}; "
                      + prefetch_hint(engine, version))


def _unreachable(log: str) -> bool:
    """Return True when pip reached no package index over the network (every page it tried failed to connect)."""
    failed = re.search(r"^Could not fetch URL https?://\S+: .*(?:" + _OFFLINE.pattern + ")", log, re.M | re.I)
    fetched = re.search(r"^Fetched page https?://", log, re.M)
    return bool(failed) and not fetched or bool(_OFFLINE.search(" ".join(
        line for line in log.splitlines() if line.startswith(("ERROR", "WARNING: Retrying")))))


def _extract(engine: Engine, version: str, layout: Layout, wheel: Path, into: Path) -> dict[str, str]:
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise EngineError(f"{engine.name}@{version}: {wheel.name} is not a readable wheel ({exc})") from None
    with archive:
        names = set(archive.namelist())
        missing = [m for m in layout.files if m not in names]
        if missing:
            raise EngineError(
                f"{engine.name}@{version}: its wheel {wheel.name} has no {', '.join(missing)}: this release moved "
                f"its verifier away from the layout specaudit knows for {layout.versions}; it cannot be driven "
                "until specaudit learns the new layout (`specaudit engines` lists the known ones)")
        files = {}
        for member in (*layout.files, *(m for m in layout.optional if m in names)):
            target = into / member
            if ".." in Path(member).parts:
                raise EngineError(f"{engine.name}@{version}: {wheel.name} names an unsafe path {member!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src:
                replace_file(target, src.read())
            files[member] = _sha256(target)
    return files


def latest(engine: Engine) -> str:
    """Return the newest release of ``engine`` on the package index (``pip index versions``)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", engine.distribution, "--disable-pip-version-check", "-vv"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{engine.name}: `pip index versions {engine.distribution}` took over 120 s") from None
    found = re.search(rf"^{re.escape(engine.distribution)} \(([^)]+)\)", proc.stdout, re.M | re.I)
    if proc.returncode != 0 or found is None:
        said = " ".join(line for line in proc.stderr.splitlines() if line.startswith("ERROR"))
        if _unreachable(proc.stdout + proc.stderr):
            raise IndexUnreachable(f"{engine.name}: cannot read its newest release: the package index cannot be "
                                   "reached (offline?)")
        raise EngineError(f"{engine.name}: cannot read its newest release: {said[-300:] or 'pip said nothing'}")
    return found.group(1)


def cached_versions(engine: Engine) -> list[str]:
    """Return the releases of ``engine`` whose files are in the cache and check out, oldest first."""
    folder = engines_folder() / engine.distribution
    try:
        names = [p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []
    good = []
    for name in names:
        try:
            Version(name)
        except InvalidVersion:
            continue
        if engine.layout(name) is not None and cached(engine, name) is not None:
            good.append(name)
    return sorted(good, key=Version)
