"""The shared-memory receiver held to the decoder's promise (issue 13, points 4-7; issue 21, 7).

Nothing but ``DecodeError`` leaves ``recv(..., shm=attacher)``; the attacher checks a
segment's size against its header and its own bound before it maps anything, maps only
what the header declares, populates nothing the frames do not need; a control part is
checked against the segment's own state (its last message, each ticket's entry) and
changes nothing unless it describes a message the sender sent, as it lies now; and a
failed decode drops only what the decode itself created, never the caller's state.
"""

from __future__ import annotations

import mmap
import os
import secrets
import sys
from collections.abc import Iterator
from typing import Any, Final

import msgspec
import numpy as np
import pytest
import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import shm
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryAttacher, SharedMemoryPool
from mmcodec.transport.shm import _attacher as shm_attacher
from tests.transport._planted import Planted, plant
from tests.transport._sockets import Sockets
from tests.transport.test_shm import header_of, rejected
from tests.transport.test_zmq import item, pair

GIB: Final = 1 << 30


@pytest.fixture
def hostile(sockets: Sockets) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
    return pair(sockets, f"hostile-{secrets.token_hex(4)}")


@pytest.fixture
def attacher() -> Iterator[SharedMemoryAttacher]:
    with SharedMemoryAttacher() as made:
        yield made


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- 13.4: a deeply nested control part -----------------------------------------------------


@pytest.mark.parametrize("version", [b"\x02", b"\x03"])
@pytest.mark.parametrize("depth", [990, 1000, 100_000])
def test_a_deeply_nested_control_part_is_a_decode_error_before_any_file_is_opened(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    attacher: SharedMemoryAttacher,
    monkeypatch: pytest.MonkeyPatch,
    version: bytes,
    depth: int,
) -> None:
    opened: list[Any] = []
    monkeypatch.setattr(shm_attacher, "open_segment", lambda *args: opened.append(args))
    part = shm.MARKER + b"\x92" + version + b"\x91" * depth + b"\x90"
    found = rejected(hostile, [part, header_of(item(x=torch.ones(2)))], attacher)
    # Deep enough, the version is never read ("nested too deeply"); shallower, the head
    # decoder gets to it. A DecodeError either way, never a RecursionError.
    assert found.startswith("$: malformed shared memory control part (") or found == (
        "$: shared memory control version 2 is not supported (this receiver reads version 3)"
    ), found
    if depth > 10_000:
        assert found == "$: malformed shared memory control part (nested too deeply)"
    assert opened == []


# -- 13.5 and 13.6: segments that lie about their size --------------------------------------


@pytest.fixture
def planted() -> Iterator[list[Planted]]:
    made: list[Planted] = []
    yield made
    for one in made:
        one.close()


def test_a_sparse_petabyte_segment_is_refused_before_mapping(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    attacher: SharedMemoryAttacher,
    planted: list[Planted],
) -> None:
    huge = plant(data_size=(1 << 50) - 4096, file_bytes=1 << 50)
    planted.append(huge)
    parts = [huge.control([[0, 0, 0, 64]]), header_of(item(x=torch.ones(16)))]
    assert rejected(hostile, parts, attacher) == (
        f"$: segment {huge.name} declares 1,125,899,906,842,624 bytes, more than this attacher "
        "maps (max_segment_bytes=68,719,476,736)"
    )
    assert attacher.mapped() == {}


def test_an_unmappable_segment_is_a_decode_error_not_an_os_error(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], planted: list[Planted]
) -> None:
    huge = plant(data_size=(1 << 50) - 4096, file_bytes=1 << 50)
    planted.append(huge)
    parts = [huge.control([[0, 0, 0, 64]]), header_of(item(x=torch.ones(16)))]
    with SharedMemoryAttacher(max_segment_bytes=1 << 60) as lenient:
        found = rejected(hostile, parts, lenient)
    assert found.startswith(f"$: cannot map shared memory segment {huge.name} ("), found


def test_a_segment_larger_than_its_header_declares_is_refused_unmapped(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    attacher: SharedMemoryAttacher,
    planted: list[Planted],
) -> None:
    big = plant(data_size=4096, file_bytes=GIB)  # a small control part names 1 GiB
    planted.append(big)
    parts = [big.control([[0, 0, 0, 4096]]), header_of(item(x=torch.ones(1024)))]
    before = resident_bytes()
    found = rejected(hostile, parts, attacher, limits=mm.Limits(max_total_bytes=1 << 20))
    assert found == f"$: segment {big.name} is 1,073,741,824 bytes, but its header declares 8,192"
    assert os.fstat(big.fd).st_blocks * 512 <= 1 << 16  # still sparse: nothing populated
    assert resident_bytes() - before < 64 << 20


def test_only_the_pages_a_message_reads_are_populated(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    attacher: SharedMemoryAttacher,
    planted: list[Planted],
) -> None:
    # A consistent, sparse 1 GiB segment: ticket 0 holds 4 KiB at offset 0 of message 1.
    sparse = plant(data_size=GIB - 4096, entries={0: (1, 1, 0, 4096)}, sequence=1)
    planted.append(sparse)
    values = torch.zeros(1024, dtype=torch.float32)  # 4 KiB of zeros: what a hole reads as
    frames = mm.encode(item(x=values))  # above the inline threshold: a frame of its own
    push, pull = hostile
    push.send_multipart([sparse.control([[0, 1, 0, 4096]]), bytes(frames[0])])
    before = resident_bytes()
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
    assert received == item(x=values)
    assert os.fstat(sparse.fd).st_blocks * 512 <= 1 << 20  # the frame's pages, not the gigabyte
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
        pool._show(1)
        push.send_multipart([staged.control, *staged.parts])
        with pytest.raises(mm.DecodeError, match=r"frame 2: ticket 1 of segment .* was revoked"):
            mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
        assert pool.in_flight == 1  # ticket 0 released by the refusal; ticket 1 never taken


# -- issue 21, item 7: control parts checked against the segment's own state ----------------


def forged(control: bytes | bytearray, **changes: Any) -> bytes:
    """A copy of a genuine control part with some fields changed."""
    genuine = msgspec.msgpack.decode(bytes(control[len(shm.MARKER) :]), type=shm.ShmControl)
    return shm.MARKER + msgspec.msgpack.encode(msgspec.structs.replace(genuine, **changes))


@pytest.fixture
def fanout() -> Iterator[SharedMemoryPool]:
    with SharedMemoryPool(16 << 20, readers=2, lease=None) as made:
        yield made


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        (0, "sequence 0 is no message"),
        (2, "sequence 2 is from the future"),
        (2**64 - 1, "sequence 18446744073709551615 is from the future"),
    ],
)
def test_a_control_part_names_a_message_its_segment_has_sent(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    fanout: SharedMemoryPool,
    attacher: SharedMemoryAttacher,
    sequence: int,
    message: str,
) -> None:
    staged = fanout.stage(mm.encode(item(x=torch.ones(1 << 18))))
    assert staged is not None
    parts = [forged(staged.control, sequence=sequence), *staged.parts]
    assert rejected(hostile, parts, attacher) == (
        f"$: shared memory control part: {message} (segment {fanout.name} has sent 1 "
        "message, numbered from 1)"
    )
    assert fanout._board.last_seq.tolist() == [0, 0]  # no slot moved
    push, pull = hostile
    push.send_multipart([staged.control, *staged.parts])  # the genuine one is taken
    assert mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher) == item(
        x=torch.ones(1 << 18)
    )
    assert fanout._board.last_seq.tolist() == [1, 0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"offset": (1 << 20) + 64},
            "holds 1048576 bytes at offset 1048576 of message 2, not what the control part "
            "says (1048576 bytes at offset 1048640 of message 2)",
        ),
        (
            {"length": 1024},
            "holds 1048576 bytes at offset 1048576 of message 2, not what the control part "
            "says (1024 bytes at offset 1048576 of message 2)",
        ),
        (
            {"ticket": 2},
            "holds no frame, not what the control part says (1048576 bytes at offset "
            "1048576 of message 2)",
        ),
    ],
)
def test_a_frame_is_taken_only_as_its_ticket_shows_it(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    fanout: SharedMemoryPool,
    attacher: SharedMemoryAttacher,
    change: dict[str, int],
    message: str,
) -> None:
    first = fanout.stage(mm.encode(item(x=torch.ones(1 << 18))))
    second = fanout.stage(mm.encode(item(y=torch.zeros(1 << 18))))
    assert first is not None and second is not None
    assert (first.tickets, second.tickets) == ([0], [1])
    genuine = msgspec.msgpack.decode(bytes(second.control[8:]), type=shm.ShmControl)
    frame = genuine.frames[0]
    assert frame is not None
    frame = msgspec.structs.replace(frame, **change)
    ticket = frame.ticket
    found = rejected(hostile, [forged(second.control, frames=[frame]), *second.parts], attacher)
    assert found == f"$: frame 1: ticket {ticket} of segment {fanout.name} {message}"
    assert fanout._board.last_seq.tolist() == [0, 0]
    assert fanout.in_flight == 2  # nothing released, nothing taken


def test_a_frame_of_one_message_cannot_be_passed_off_as_another_s(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    fanout: SharedMemoryPool,
    attacher: SharedMemoryAttacher,
) -> None:
    first = fanout.stage(mm.encode(item(x=torch.ones(1 << 18))))
    second = fanout.stage(mm.encode(item(y=torch.zeros(1 << 18))))
    assert first is not None and second is not None
    # Message 2's frame, exactly, under message 1's sequence number (or the reverse).
    genuine = msgspec.msgpack.decode(bytes(second.control[8:]), type=shm.ShmControl)
    parts = [forged(first.control, frames=genuine.frames), *second.parts]
    assert rejected(hostile, parts, attacher) == (
        f"$: frame 1: ticket 1 of segment {fanout.name} holds 1048576 bytes at offset 1048576 "
        "of message 2, not what the control part says (1048576 bytes at offset 1048576 of "
        "message 1)"
    )


def test_a_slot_written_past_the_senders_last_message_is_ignored(
    sockets: Sockets, fanout: SharedMemoryPool
) -> None:
    """Any reader can write any slot of the board; the sender takes none from the future."""
    push, pull = pair(sockets, f"slot-{secrets.token_hex(4)}")
    with open(f"/proc/self/fd/{fanout._segment.board_fd}", "r+b") as board:
        rogue = mmap.mmap(board.fileno(), 0)
    slot = np.ndarray((2,), "<u8", rogue, 64, strides=(64,))
    slot[1] = 2**64 - 1  # reader 1 "is past every message"
    mmzmq.send(push, mm, item(x=torch.ones(1 << 18)), shm=fanout)
    with SharedMemoryAttacher(reader=0) as zero:
        got = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=zero)
        del got
    assert fanout.reclaim() == 0 and fanout.revoked == 0  # reader 1 may still come
    mmzmq.send(push, mm, item(x=torch.ones(1 << 18)), shm=fanout)
    with SharedMemoryAttacher(reader=1) as one:
        assert mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=one) == item(x=torch.ones(1 << 18))
    del slot
    rogue.close()


def test_a_fake_segment_under_a_real_ones_name_does_not_shadow_it(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    pool: SharedMemoryPool,
    attacher: SharedMemoryAttacher,
    planted: list[Planted],
) -> None:
    """A process of the user can make a memfd of any name; a control part naming it by its
    own pid and descriptor reaches that memfd, never the segment cached under that name."""
    push, pull = hostile
    sent = item(x=torch.arange(1 << 18, dtype=torch.float32))
    mmzmq.send(push, mm, sent, shm=pool)
    assert mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher) == sent
    fake = plant(pool.name, data_size=1 << 20, entries={0: (1, 1, 0, 1 << 20)}, sequence=1)
    planted.append(fake)
    frames = mm.encode(item(x=torch.zeros(1 << 18)))
    push.send_multipart([fake.control([[0, 1, 0, 1 << 20]]), bytes(frames[0])])
    # Its own bytes: as if it had sent them through ZMQ, which it could as well.
    assert mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher) == item(
        x=torch.zeros(1 << 18)
    )
    mmzmq.send(push, mm, sent, shm=pool)
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
    assert received == sent  # from the pool's segment, not the fake
    del received


@pytest.fixture
def pool() -> Iterator[SharedMemoryPool]:
    with SharedMemoryPool(64 << 20) as made:
        yield made
