"""The shared-memory receiver held to the decoder's promise (issue 13, points 4-7).

Nothing but ``DecodeError`` leaves ``recv(..., shm=attacher)``; the attacher checks a
segment file's size against its header and its own bound before it maps anything, maps
only what the header declares, populates nothing the frames do not need; and a failed
decode drops only what the decode itself created, never the caller's state.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from typing import Any, Final

import pytest
import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import shm
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryAttacher, SharedMemoryPool
from tests.transport._sockets import Sockets
from tests.transport.test_shm import control, header_of, rejected
from tests.transport.test_zmq import item, pair

GIB: Final = 1 << 30


@pytest.fixture
def hostile(sockets: Sockets) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
    return pair(sockets, f"hostile-{secrets.token_hex(4)}")


@pytest.fixture
def attacher() -> Iterator[SharedMemoryAttacher]:
    with SharedMemoryAttacher() as made:
        yield made


@pytest.fixture
def planted() -> Iterator[str]:
    name = "mmcodec-" + secrets.token_hex(16)
    yield name
    if os.path.lexists(f"/dev/shm/{name}"):
        os.unlink(f"/dev/shm/{name}")


def plant(name: str, file_bytes: int, data_size: int, tickets: int = 1) -> str:
    """A sparse file in /dev/shm with a valid layout header declaring ``data_size`` bytes."""
    layout = shm._Layout(1, tickets, data_size)
    path = f"/dev/shm/{name}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, file_bytes)
        header = shm._LAYOUT.pack(shm._SEGMENT_MAGIC, 2, 1, tickets, 0, layout.data, data_size)
        os.pwrite(fd, header, 0)
    finally:
        os.close(fd)
    return path


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- 13.4: a deeply nested control part -----------------------------------------------------


@pytest.mark.parametrize("version", [b"\x01", b"\x02"])
@pytest.mark.parametrize("depth", [990, 1000, 100_000])
def test_a_deeply_nested_control_part_is_a_decode_error_before_any_file_is_opened(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    attacher: SharedMemoryAttacher,
    monkeypatch: pytest.MonkeyPatch,
    version: bytes,
    depth: int,
) -> None:
    opened: list[Any] = []
    monkeypatch.setattr(shm, "_open_segment", lambda *args: opened.append(args))
    part = shm.MARKER + b"\x92" + version + b"\x91" * depth + b"\x90"
    found = rejected(hostile, [part, header_of(item(x=torch.ones(2)))], attacher)
    # Deep enough, the version is never read ("nested too deeply"); shallower, the head
    # decoder gets to it. A DecodeError either way, never a RecursionError.
    assert found.startswith("$: malformed shared memory control part (") or found == (
        "$: shared memory control version 1 is not supported (this receiver reads version 2)"
    ), found
    if depth > 10_000:
        assert found == "$: malformed shared memory control part (nested too deeply)"
    assert opened == []


# -- 13.5 and 13.6: segment files that lie about their size ---------------------------------


def test_a_sparse_petabyte_file_is_refused_before_mapping(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], attacher: SharedMemoryAttacher, planted: str
) -> None:
    plant(planted, 1 << 50, (1 << 50) - 4096)
    parts = [control(planted, [[0, 0, 0, 64]]), header_of(item(x=torch.ones(16)))]
    assert rejected(hostile, parts, attacher) == (
        f"$: segment {planted} declares 1,125,899,906,842,624 bytes, more than this attacher "
        "maps (max_segment_bytes=68,719,476,736)"
    )
    assert attacher.mapped() == {}


def test_an_unmappable_segment_is_a_decode_error_not_an_os_error(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], planted: str
) -> None:
    plant(planted, 1 << 50, (1 << 50) - 4096)
    parts = [control(planted, [[0, 0, 0, 64]]), header_of(item(x=torch.ones(16)))]
    with SharedMemoryAttacher(max_segment_bytes=1 << 60) as lenient:
        found = rejected(hostile, parts, lenient)
    assert found.startswith(f"$: cannot map shared memory segment {planted} ("), found


def test_a_file_larger_than_its_header_declares_is_refused_unmapped(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], attacher: SharedMemoryAttacher, planted: str
) -> None:
    path = plant(planted, GIB, 4096)  # a 57-byte control part names 1 GiB of sparse file
    parts = [control(planted, [[0, 0, 0, 4096]]), header_of(item(x=torch.ones(1024)))]
    before = resident_bytes()
    found = rejected(hostile, parts, attacher, limits=mm.Limits(max_total_bytes=1 << 20))
    assert found == f"$: segment {planted} is 1,073,741,824 bytes, but its header declares 8,192"
    assert os.stat(path).st_blocks * 512 <= 1 << 16  # still sparse: nothing populated
    assert resident_bytes() - before < 64 << 20


def test_only_the_pages_a_message_reads_are_populated(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], attacher: SharedMemoryAttacher, planted: str
) -> None:
    path = plant(planted, GIB, GIB - 4096)  # a consistent, sparse 1 GiB segment
    values = torch.zeros(1024, dtype=torch.float32)  # 4 KiB of zeros: what a hole reads as
    frames = mm.encode(item(x=values))  # above the inline threshold: a frame of its own
    push, pull = hostile
    push.send_multipart([control(planted, [[0, 0, 0, 4096]]), bytes(frames[0])])
    before = resident_bytes()
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
    assert received == item(x=values)
    assert os.stat(path).st_blocks * 512 <= 1 << 20  # the frame's pages, not the gigabyte
    assert resident_bytes() - before < 64 << 20


def test_frames_beyond_max_total_bytes_are_refused_and_given_back(
    sockets: Sockets, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "total")
    with SharedMemoryPool(32 << 20) as pool:
        mmzmq.send(push, mm, PAYLOADS["qwen2.5-vl"](1), shm=pool)
        with pytest.raises(
            mm.DecodeError, match=r"^\$: 12\d{6} bytes in frames exceed the limit of 1048576$"
        ):
            mmzmq.recv(
                pull,
                mm,
                mm.MultiModalKwargsItems,
                shm=attacher,
                limits=mm.Limits(max_total_bytes=1 << 20),
            )
        assert pool.in_flight == 0  # refused, and released at once


# -- 13.7: a failed decode leaves the caller's state alone ----------------------------------


def failing_helper(state: dict[str, int]) -> None:
    state["seen"] = 1
    raise KeyError("the caller's own error")


def test_a_failed_shared_memory_decode_does_not_clear_the_callers_frames(
    sockets: Sockets, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "caller")
    with SharedMemoryPool(16 << 20) as pool:
        mmzmq.send(push, mm, PAYLOADS["whisper"](2), shm=pool)
        state = {"mine": 1}
        try:
            failing_helper(state)
        except KeyError:
            handled = sys.exc_info()
            with pytest.raises(mm.DecodeError):  # the wrong type: the decode fails
                mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
            assert pool.in_flight == 0  # the decode's own views went at once
            traceback = handled[2]
            assert traceback is not None and traceback.tb_next is not None
            helper = traceback.tb_next.tb_frame  # the finished frame of the caller's error
            assert helper.f_code is failing_helper.__code__
            assert helper.f_locals == {"state": {"mine": 1, "seen": 1}}


def test_a_message_with_one_revoked_frame_gives_the_others_back_at_once(
    sockets: Sockets, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "partly")
    with SharedMemoryPool(16 << 20) as pool:
        frames = mm.encode(item(a=torch.ones(1 << 18), b=torch.zeros(1 << 18)))
        staged = pool.stage(frames)
        assert staged is not None and staged.tickets == [0, 1]
        pool._generations[1] += 1  # ticket 1 revoked in the meantime (as by a lease)
        push.send_multipart([staged.control, *staged.parts])
        with pytest.raises(mm.DecodeError, match=r"frame 2: ticket 1 of segment .* was revoked"):
            mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
        assert pool.in_flight == 1  # ticket 0 released by the refusal; ticket 1 never taken
