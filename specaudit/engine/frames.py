"""Framed messages from a supervised child: bytes the verifier writes into the pipe cannot pass for one.

The verifier shares the child's process and its file descriptors, the write end of the result pipe
among them. A frame is ``MAGIC | seq | length | tag(header) | payload | tag(header, payload)``, the
tags keyed HMAC-SHA256 with a key the supervisor draws for each child (:func:`new_key`) and ``seq``
counting the child's frames from 0. A reader handed bytes of the verifier's (before, after or inside
a frame of the child's, a frame laid out as the child's but without its key, one of the child's
frames replayed) sees a tag or a count that does not check, and says so; it never waits on a length
it cannot trust, and never unpickles a payload the child did not send. :class:`Reader` never
blocks: it reads what the pipe holds and parses what it has, so the supervisor keeps watching its
clocks while a frame arrives.
"""

from __future__ import annotations

import hmac
import os
import pickle
import secrets
import select
import struct
import time
from typing import Any

#: The first bytes of every frame.
MAGIC = b"SPAF"
_HEAD = struct.Struct("<4sQQ8s")  # magic, frame number, payload length, tag of the three
_TAIL = 16  # bytes of the payload's tag
#: The most one read takes from the pipe, bytes.
_CHUNK = 1 << 20


class Corrupt(Exception):
    """The bytes in the pipe are not a frame of the child's (the verifier wrote into it)."""


def new_key() -> bytes:
    """Return a fresh key for one child's frames."""
    return secrets.token_bytes(32)


def _tag(key: bytes, data: bytes | memoryview, size: int) -> bytes:
    return hmac.digest(key, data, "sha256")[:size]


def encode(message: Any, key: bytes, seq: int) -> bytes:
    """Return ``message`` pickled and framed as frame number ``seq`` under ``key``."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    fields = MAGIC + struct.pack("<QQ", seq, len(payload))
    head = fields + _tag(key, fields, 8)
    return head + payload + _tag(key, head + payload, _TAIL)


class Writer:
    """Frames to the write end ``fd`` of a pipe, numbered from 0, under ``key``.

    ``sent``: a shared counter (``multiprocessing.RawValue``) of the frames written whole, so the
    reader can tell a frame that is on its way from one the verifier read out of the pipe.
    """

    def __init__(self, fd: int, key: bytes, sent: Any = None):
        self.fd = fd
        self.sent = sent
        self._key = key
        self._seq = 0

    def write(self, message: Any, within: float | None = None) -> None:
        """Write ``message`` as the next frame, waiting until all of it is in the pipe.

        Waits on a full pipe even where the descriptor was made non-blocking (the verifier shares
        it); on a non-blocking descriptor, ``within`` seconds at most (then TimeoutError).
        """
        view = memoryview(encode(message, self._key, self._seq))
        self._seq += 1
        room: select.poll | None = None
        start = time.monotonic()
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:
                if within is not None and time.monotonic() - start > within:
                    raise TimeoutError(f"the pipe took no more of a frame for {within:g} s") from None
                if room is None:
                    room = select.poll()
                    room.register(self.fd, select.POLLOUT)
                room.poll(100)
        if self.sent is not None:
            self.sent.value = self._seq


class Reader:
    """Frames from the read end ``fd`` of a pipe under ``key``, parsed as they arrive; ``limit`` caps one payload, bytes."""

    def __init__(self, fd: int, key: bytes, limit: int):
        self.fd = fd
        self.limit = limit
        self._key = key
        self._seq = 0  # the number of the next frame
        self.closed = False  # the pipe read EOF: every writer has closed it
        self.last_read = time.monotonic()  # when bytes last came
        self._buffer = bytearray()
        self._poll = select.poll()  # not select.select: a descriptor past FD_SETSIZE (1024) is refused there
        self._poll.register(fd, select.POLLIN)
        os.set_blocking(fd, False)  # bytes another reader takes between poll and read must not leave this one waiting

    def _readable(self, timeout: float) -> bool:
        """Return True when the pipe holds bytes or its end (EOF, an error) within ``timeout`` seconds."""
        return bool(self._poll.poll(max(0, int(timeout * 1000))))

    def next(self, timeout: float) -> Any | None:
        """Return the next message, waiting up to ``timeout`` seconds for its bytes; None when none is complete.

        Raises :class:`Corrupt` when the bytes are not a frame (a header or payload that does not
        check, a length past ``limit``, a payload that does not unpickle).
        """
        message = self._parse()
        if message is not None or self.closed:
            return message
        readable = self._readable(timeout)
        while readable and not self.closed:
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:  # taken by another reader of the same pipe (the verifier, through /proc)
                break
            if not chunk:
                self.closed = True
                break
            self._buffer += chunk
            self.last_read = time.monotonic()
            message = self._parse()
            if message is not None:
                return message
            readable = self._readable(0)
        return self._parse()

    @property
    def received(self) -> int:
        """Return the number of frames read whole."""
        return self._seq

    def pending(self) -> int:
        """Return the number of bytes read that make no complete frame yet."""
        return len(self._buffer)

    def _parse(self) -> Any | None:
        """Return the message of the frame at the front of the buffer (and drop it), or None if it is incomplete."""
        buffer = self._buffer
        if len(buffer) < _HEAD.size:
            if buffer and not MAGIC.startswith(bytes(buffer[:len(MAGIC)])):
                raise Corrupt(f"a frame starts with {bytes(buffer[:8])!r}, not {MAGIC!r}")
            return None
        magic, seq, length, tag = _HEAD.unpack_from(buffer)
        if magic != MAGIC or not hmac.compare_digest(_tag(self._key, bytes(buffer[:_HEAD.size - 8]), 8), tag):
            raise Corrupt(f"a frame header that does not check: {bytes(buffer[:_HEAD.size])!r}")
        if seq != self._seq:
            raise Corrupt(f"frame number {seq} where {self._seq} was due (a frame of the child's read away, or sent again)")
        if length > self.limit:
            raise Corrupt(f"a frame of {length} bytes, past the limit of {self.limit}")
        end = _HEAD.size + length + _TAIL
        if len(buffer) < end:
            return None
        body = memoryview(buffer)[:_HEAD.size + length]
        ok = hmac.compare_digest(_tag(self._key, body, _TAIL), bytes(buffer[_HEAD.size + length:end]))
        payload = bytes(body[_HEAD.size:])
        body.release()
        if not ok:
            raise Corrupt(f"a frame of {length} bytes whose payload does not check")
        del buffer[:end]
        self._seq += 1
        try:
            return pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - the child's own frame, and it does not unpickle: say so
            raise Corrupt(f"a frame that does not unpickle ({type(exc).__name__}: {exc})") from None
