"""Framed messages from a supervised child: bytes the verifier writes into the pipe cannot pass for one.

The verifier shares the child's process and its file descriptors, the write end of the result pipe
among them. A frame is ``MAGIC | length | crc32(MAGIC | length) | payload | crc32(payload)``, so a
reader that is handed bytes of the verifier's (before, after or inside a frame of the child's) sees a
header that does not check, or a payload that does not, and says so; it never waits on a length the
verifier wrote. :class:`Reader` never blocks: it reads what the pipe holds and parses what it has,
so the supervisor keeps watching its clocks while a frame arrives.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import zlib
from typing import Any

#: The first bytes of every frame.
MAGIC = b"SPAF"
_HEAD = struct.Struct("<4sQI")  # magic, payload length, crc32 of magic and length
_TAIL = struct.Struct("<I")  # crc32 of the payload
#: The most one read takes from the pipe, bytes.
_CHUNK = 1 << 20


class Corrupt(Exception):
    """The bytes in the pipe are not a frame of the child's (the verifier wrote into it)."""


def encode(message: Any) -> bytes:
    """Return ``message`` pickled and framed."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    head = MAGIC + struct.pack("<Q", len(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload + _TAIL.pack(zlib.crc32(payload))


def write(fd: int, message: Any) -> None:
    """Write ``message`` as one frame to ``fd``, waiting until all of it is in the pipe.

    Waits on a full pipe even where the descriptor was made non-blocking (the verifier shares it).
    """
    view = memoryview(encode(message))
    room: select.poll | None = None
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            if room is None:
                room = select.poll()
                room.register(fd, select.POLLOUT)
            room.poll(1000)


class Reader:
    """Frames from the read end ``fd`` of a pipe, parsed as they arrive; ``limit`` caps one payload, bytes."""

    def __init__(self, fd: int, limit: int):
        self.fd = fd
        self.limit = limit
        self.closed = False  # the pipe read EOF: every writer has closed it
        self._buffer = bytearray()
        self._poll = select.poll()  # not select.select: a descriptor past FD_SETSIZE (1024) is refused there
        self._poll.register(fd, select.POLLIN)

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
            chunk = os.read(self.fd, _CHUNK)
            if not chunk:
                self.closed = True
                break
            self._buffer += chunk
            message = self._parse()
            if message is not None:
                return message
            readable = self._readable(0)
        return self._parse()

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
        magic, length, check = _HEAD.unpack_from(buffer)
        if magic != MAGIC or zlib.crc32(bytes(buffer[:12])) != check:
            raise Corrupt(f"a frame header that does not check: {bytes(buffer[:_HEAD.size])!r}")
        if length > self.limit:
            raise Corrupt(f"a frame of {length} bytes, past the limit of {self.limit}")
        end = _HEAD.size + length + _TAIL.size
        if len(buffer) < end:
            return None
        payload = bytes(buffer[_HEAD.size:_HEAD.size + length])
        (check,) = _TAIL.unpack_from(buffer, _HEAD.size + length)
        if zlib.crc32(payload) != check:
            raise Corrupt(f"a frame of {length} bytes whose payload does not check")
        del buffer[:end]
        try:
            return pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - a payload that checks but does not unpickle: not the child's
            raise Corrupt(f"a frame that does not unpickle ({type(exc).__name__}: {exc})") from None
