"""The disk cache: where it lives, and sealed files (their contents followed by the SHA-256 of them).

A cache only ever saves time: a file that is missing, unreadable, truncated, altered or of another
version is recomputed, and a cache that cannot be written (a read-only folder, a full disk) is
not written. The folder is ``$SPECAUDIT_CACHE``, else ``$XDG_CACHE_HOME/specaudit``, else
``~/.cache/specaudit``; ``SPECAUDIT_CACHE=off`` (or empty, ``0``, ``none``, ``false``) turns it off.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from specaudit.results.document import replace_file

#: Trailer after a sealed file's contents: this tag and the SHA-256 of the contents, in hex.
CHECKSUM_TAG = b"\nspecaudit-sha256:"
TRAILER_BYTES = len(CHECKSUM_TAG) + 64


def cache_dir() -> Path | None:
    """Return the cache folder, or None when the cache is off."""
    env = os.environ.get("SPECAUDIT_CACHE")
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "none", "false") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specaudit"


def seal(payload: bytes) -> bytes:
    """Return ``payload`` followed by its checksum trailer."""
    return payload + CHECKSUM_TAG + hashlib.sha256(payload).hexdigest().encode()


def unseal(data: bytes) -> bytes:
    """Return the contents of a sealed file's bytes; raise ValueError when its trailer is missing or does not match."""
    payload, tag, digest = data[:-TRAILER_BYTES], data[-TRAILER_BYTES:-64], data[-64:]
    if len(data) < TRAILER_BYTES or tag != CHECKSUM_TAG:
        raise ValueError("no checksum trailer (truncated, or not a specaudit cache file)")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ValueError("checksum does not match its data")
    return payload


def read_sealed(path: Path, limit: int) -> bytes:
    """Return the contents of the sealed file ``path`` of at most ``limit`` content bytes.

    Raises OSError when it cannot be read, ValueError when it is no regular file (a FIFO would block
    the open, a device never end), is larger than the limit allows or its checksum is wrong.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO opens at once, and is refused below
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = fh.read(limit + TRAILER_BYTES + 1)
    if len(data) > limit + TRAILER_BYTES:
        raise ValueError(f"larger than the {limit:,} bytes a cache file of its kind holds")
    return unseal(data)


def write_entry(path: Path, data: bytes) -> None:
    """Write a cache file atomically, in place of whatever is there (a FIFO is replaced, not written through);
    a folder that cannot be written (read-only, full, a file in its place) only costs the cache."""
    try:
        replace_file(path, data)
    except OSError:
        return


def write_sealed(path: Path, payload: bytes) -> None:
    """Write ``payload`` sealed (:func:`seal`), as :func:`write_entry` does."""
    write_entry(path, seal(payload))
