"""Framed child messages (specaudit.engine.frames): bytes that are not the child's are refused, never waited on."""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib

import numpy as np
import pytest

from specaudit.engine import frames


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_messages_come_back_in_order_whole(pipe):
    r, w = pipe
    big = np.arange(200_000, dtype=np.int64)  # 1.6 MB: more than a pipe holds, written from a thread
    writer = threading.Thread(target=lambda: [frames.write(w, m) for m in (("start", 0), ("look", big), ("done",))])
    writer.start()
    reader = frames.Reader(r, 1 << 30)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        message = reader.next(0.05)
        if message is not None:
            got.append(message)
    writer.join()
    assert got[0] == ("start", 0) and got[2] == ("done",)
    assert np.array_equal(got[1][1], big)
    assert reader.pending() == 0


def test_a_partial_frame_is_waited_for_within_the_timeout_and_no_longer(pipe):
    r, w = pipe
    data = frames.encode(("progress", "x", 1, 2))
    os.write(w, data[:10])
    reader = frames.Reader(r, 1 << 30)
    assert reader.next(0.2) is None and reader.pending() == 10  # what the pipe held is read, and kept
    t0 = time.monotonic()
    assert reader.next(0.2) is None  # nothing more came: it waited the timeout, and returned
    assert 0.15 < time.monotonic() - t0 < 5
    os.write(w, data[10:])
    assert reader.next(0.2) == ("progress", "x", 1, 2)


@pytest.mark.parametrize("where", ["before", "after", "inside"])
def test_bytes_written_beside_a_frame_are_corrupt(pipe, where):
    r, w = pipe
    frame, garbage = frames.encode(("result", 3, "x" * 100)), b"\x00\x00\x00\x08garbage!"
    data = {"before": garbage + frame, "after": frame + garbage + frame, "inside": frame[:40] + garbage + frame[40:]}[where]
    os.write(w, data)
    reader = frames.Reader(r, 1 << 30)
    if where == "after":
        assert reader.next(0.1) == ("result", 3, "x" * 100)
    with pytest.raises(frames.Corrupt):
        reader.next(0.1)


@pytest.mark.parametrize("forged", [b"\x7f\xff\xff\xf0", b"\x00\x10\x00\x00", b"\x00\x10\x00\x00" + b"\x80\x05" * 8])
def test_a_forged_length_is_refused_at_once_not_waited_on(pipe, forged):
    # multiprocessing's own framing (a 4-byte length) would wait for the bytes it announces, for ever
    r, w = pipe
    os.write(w, forged + frames.encode(("done",)))
    reader = frames.Reader(r, 1 << 30)
    t0 = time.monotonic()
    with pytest.raises(frames.Corrupt, match="frame"):
        reader.next(1.0)
    assert time.monotonic() - t0 < 0.5


def test_a_header_that_checks_but_announces_too_much_is_refused(pipe):
    r, w = pipe
    head = frames.MAGIC + struct.pack("<Q", 1 << 40)
    os.write(w, head + struct.pack("<I", zlib.crc32(head)))
    with pytest.raises(frames.Corrupt, match="past the limit"):
        frames.Reader(r, 1 << 30).next(0.1)


def test_a_payload_that_does_not_check_or_unpickle_is_corrupt(pipe):
    r, w = pipe
    data = bytearray(frames.encode(("done",)))
    data[-6] ^= 0xFF  # a payload byte
    os.write(w, bytes(data))
    with pytest.raises(frames.Corrupt, match="does not check"):
        frames.Reader(r, 1 << 30).next(0.1)
    r2, w2 = os.pipe()
    try:
        payload = b"not a pickle"
        head = frames.MAGIC + struct.pack("<Q", len(payload))
        os.write(w2, head + struct.pack("<I", zlib.crc32(head)) + payload + struct.pack("<I", zlib.crc32(payload)))
        with pytest.raises(frames.Corrupt, match="unpickle"):
            frames.Reader(r2, 1 << 30).next(0.1)
    finally:
        os.close(r2)
        os.close(w2)


def test_the_end_of_the_pipe_is_seen_and_what_came_before_it_kept():
    r, w = os.pipe()
    try:
        os.write(w, frames.encode(("done",)) + b"SPA")  # a frame, then the start of one the writer never finished
        os.close(w)
        reader = frames.Reader(r, 1 << 30)
        assert reader.next(0.1) == ("done",)
        assert reader.next(0.1) is None and reader.closed and reader.pending() == 3
    finally:
        os.close(r)


def test_a_descriptor_past_fd_setsize_is_read():
    # select.select refuses descriptors from 1024 on; a process with torch, Ray and a verifier's files may hold that many
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the descriptor limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1100 if hard == resource.RLIM_INFINITY else min(hard, 1100), hard))
    r, w = os.pipe()
    high_r, high_w = os.dup2(r, 1090), os.dup2(w, 1091)
    os.close(r)
    os.close(w)
    try:
        frames.write(high_w, ("done",))
        assert frames.Reader(high_r, 1 << 30).next(1.0) == ("done",)
    finally:
        os.close(high_r)
        os.close(high_w)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_frame_is_written_whole_through_a_descriptor_made_non_blocking(pipe):
    # the verifier shares the child's descriptors: one that sets O_NONBLOCK makes a full pipe raise EAGAIN
    r, w = pipe
    os.set_blocking(w, False)
    big = ("look", b"x" * (1 << 20))  # past the pipe's 64 KiB
    writer = threading.Thread(target=frames.write, args=(w, big))
    writer.start()
    reader = frames.Reader(r, 1 << 30)
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        got = reader.next(0.05)
    writer.join()
    assert got == big
