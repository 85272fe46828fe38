"""Framed child messages (specaudit.engine.frames): bytes that are not the child's are refused, never waited on."""

from __future__ import annotations

import os
import pickle
import struct
import threading
import time
import zlib

import numpy as np
import pytest

from specaudit.engine import frames

KEY = frames.new_key()


def _reader(fd, limit=1 << 30):
    return frames.Reader(fd, KEY, limit)


def _frames(*messages, key=KEY, start=0):
    return b"".join(frames.encode(m, key, start + i) for i, m in enumerate(messages))


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_messages_come_back_in_order_whole(pipe):
    r, w = pipe
    big = np.arange(200_000, dtype=np.int64)  # 1.6 MB: more than a pipe holds, written from a thread
    out = frames.Writer(w, KEY)
    writer = threading.Thread(target=lambda: [out.write(m) for m in (("start", 0), ("look", big), ("done",))])
    writer.start()
    reader = _reader(r)
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
    data = _frames(("progress", "x", 1, 2))
    os.write(w, data[:10])
    reader = _reader(r)
    assert reader.next(0.2) is None and reader.pending() == 10  # what the pipe held is read, and kept
    t0 = time.monotonic()
    assert reader.next(0.2) is None  # nothing more came: it waited the timeout, and returned
    assert 0.15 < time.monotonic() - t0 < 5
    os.write(w, data[10:])
    assert reader.next(0.2) == ("progress", "x", 1, 2)


@pytest.mark.parametrize("where", ["before", "after", "inside"])
def test_bytes_written_beside_a_frame_are_corrupt(pipe, where):
    r, w = pipe
    frame, garbage = _frames(("result", 3, "x" * 100)), b"\x00\x00\x00\x08garbage!"
    second = frames.encode(("result", 3, "x" * 100), KEY, 1)
    data = {"before": garbage + frame, "after": frame + garbage + second, "inside": frame[:40] + garbage + frame[40:]}[where]
    os.write(w, data)
    reader = _reader(r)
    if where == "after":
        assert reader.next(0.1) == ("result", 3, "x" * 100)
    with pytest.raises(frames.Corrupt):
        reader.next(0.1)


@pytest.mark.parametrize("forged", [b"\x7f\xff\xff\xf0", b"\x00\x10\x00\x00", b"\x00\x10\x00\x00" + b"\x80\x05" * 8])
def test_a_forged_length_is_refused_at_once_not_waited_on(pipe, forged):
    # multiprocessing's own framing (a 4-byte length) would wait for the bytes it announces, for ever
    r, w = pipe
    os.write(w, forged + _frames(("done",)))
    reader = _reader(r)
    t0 = time.monotonic()
    with pytest.raises(frames.Corrupt, match="frame"):
        reader.next(1.0)
    assert time.monotonic() - t0 < 0.5


def test_a_header_that_checks_but_announces_too_much_is_refused(pipe):
    r, w = pipe
    os.write(w, frames.encode(b"x" * 2000, KEY, 0))
    with pytest.raises(frames.Corrupt, match="past the limit"):
        _reader(r, limit=1000).next(0.1)


def test_a_payload_that_does_not_check_is_corrupt(pipe):
    r, w = pipe
    data = bytearray(_frames(("done",)))
    data[-20] ^= 0xFF  # a payload byte
    os.write(w, bytes(data))
    with pytest.raises(frames.Corrupt, match="does not check"):
        _reader(r).next(0.1)


@pytest.mark.parametrize("how", ["another key", "checksums", "replayed"])
def test_a_frame_laid_out_as_the_childs_without_its_key_or_sent_again_is_refused(pipe, how):
    # the verifier can import specaudit.engine.frames and lay out a frame: without this child's key it does not
    # check, and a frame of the child's it read and wrote again has a number already seen
    r, w = pipe
    if how == "another key":
        forged = frames.encode(("done",), frames.new_key(), 0)
    elif how == "checksums":  # magic, length and crc32s: the layout this module had before its tags
        payload = pickle.dumps(("done",))
        head = frames.MAGIC + struct.pack("<Q", len(payload))
        forged = head + struct.pack("<I", zlib.crc32(head)) + payload + struct.pack("<I", zlib.crc32(payload))
    else:
        forged = _frames(("start", 0)) + _frames(("start", 0))
    os.write(w, forged)
    reader = _reader(r)
    if how == "replayed":
        assert reader.next(0.1) == ("start", 0)
    with pytest.raises(frames.Corrupt, match="does not check|where 1 was due"):
        reader.next(0.1)


def test_a_forged_payload_is_never_unpickled(pipe, tmp_path):
    # a pickle runs code as it loads: a frame without the key must be refused before its payload is touched
    r, w = pipe
    flag = tmp_path / "ran"
    payload = b"cos\nsystem\n(S'touch " + str(flag).encode() + b"'\ntR."
    fields = frames.MAGIC + struct.pack("<QQ", 0, len(payload))
    os.write(w, fields + b"\x00" * 8 + payload + b"\x00" * 16)
    with pytest.raises(frames.Corrupt):
        _reader(r).next(0.1)
    assert not flag.exists()


def test_the_end_of_the_pipe_is_seen_and_what_came_before_it_kept():
    r, w = os.pipe()
    try:
        os.write(w, _frames(("done",)) + b"SPA")  # a frame, then the start of one the writer never finished
        os.close(w)
        reader = _reader(r)
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
        frames.Writer(high_w, KEY).write(("done",))
        assert _reader(high_r).next(1.0) == ("done",)
    finally:
        os.close(high_r)
        os.close(high_w)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_frame_is_written_whole_through_a_descriptor_made_non_blocking(pipe):
    # the verifier shares the child's descriptors: one that sets O_NONBLOCK makes a full pipe raise EAGAIN
    r, w = pipe
    os.set_blocking(w, False)
    big = ("look", b"x" * (1 << 20))  # past the pipe's 64 KiB
    writer = threading.Thread(target=frames.Writer(w, KEY).write, args=(big,))
    writer.start()
    reader = _reader(r)
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        got = reader.next(0.05)
    writer.join()
    assert got == big
