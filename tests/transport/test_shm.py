"""The ZMQ transport with shared-memory frames, within one process.

The receiver maps the sender's segment a second time, as another process would, so a
decoded tensor's address tells whether it views the shared pages (no copy) and a pool's
``in_flight`` count tells when the receiver released them.
"""

from __future__ import annotations

import fcntl
import gc
import os
import secrets
import threading
from collections.abc import Iterator
from typing import Any, Final

import msgspec
import numpy as np
import pytest
import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS, iter_tensors
from mmcodec.transport import shm
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryAttacher, SharedMemoryPool
from mmcodec.transport.shm import _attacher as shm_attacher
from tests.transport._planted import control as planted_control
from tests.transport._planted import plant
from tests.transport._sockets import Sockets
from tests.transport.test_zmq import BIG, item, pair, tensor_of

PLAN: Final = ["qwen2.5-vl", "llava", "internvl", "minicpm-v", "whisper", "idefics3"]
LLAVA_FRAME: Final = 3 * 336 * 336 * 2  # one bf16 image: the llava payload's only frame


@pytest.fixture
def pool() -> Iterator[SharedMemoryPool]:
    with SharedMemoryPool(64 << 20) as made:
        yield made


@pytest.fixture
def attacher() -> Iterator[SharedMemoryAttacher]:
    with SharedMemoryAttacher() as made:
        yield made


def inside(t: torch.Tensor, attacher: SharedMemoryAttacher) -> bool:
    """Whether the tensor's bytes lie in a data area the attacher mapped."""
    start, end = t.data_ptr(), t.data_ptr() + t.nbytes
    return any(a <= start and end <= a + n for a, n in attacher.mapped().values())


def pixels(value: mm.MultiModalKwargsItems, index: int = 0) -> Any:
    """The first image item's ``pixel_values`` data (a tensor, or a list for minicpm-v)."""
    first = value["image"][index]
    assert first is not None
    return first["pixel_values"].data


def leads_to_segment(path: str, name: str) -> bool:
    """Whether ``path`` (``/proc/<pid>/fd/<n>``) is a descriptor of segment ``name``."""
    try:
        return os.readlink(path) == f"/memfd:{name} (deleted)"
    except FileNotFoundError:
        return False


def released(pool: SharedMemoryPool) -> bool:
    gc.collect()
    return pool.in_flight == 0


# -- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*PLAN, "64 small items"])
def test_every_payload_round_trips_and_large_tensors_view_the_shared_pages(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher, name: str
) -> None:
    push, pull = pair(sockets, f"shm-{name}")
    sent = PAYLOADS[name](7)
    frames = mm.encode(sent)
    shared = sum(1 for f in frames[1:] if f.nbytes >= pool.min_frame_bytes)
    assert mmzmq.send(push, mm, sent, shm=pool) is None  # nothing left for ZMQ to read
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)
    assert received == PAYLOADS[name](7)
    assert pool.in_flight == shared
    large = [t for t in iter_tensors(received) if t.nbytes >= pool.min_frame_bytes]
    assert all(inside(t, attacher) for t in large)  # views of the mapping: nothing copied
    assert len(large) >= shared
    small = [t for t in iter_tensors(received) if not inside(t, attacher)]
    assert all(t.nbytes < pool.min_frame_bytes for t in small)
    del received, large, small
    assert released(pool)


def test_round_trip_over_ipc_within_one_process(
    sockets: Sockets, ipc_dir: str, attacher: SharedMemoryAttacher
) -> None:
    pull = sockets(zmq.PULL, RCVTIMEO=5000, LINGER=0)
    pull.bind(f"ipc://{ipc_dir}/shm")
    push = sockets(zmq.PUSH, SNDTIMEO=5000, LINGER=0)
    push.connect(f"ipc://{ipc_dir}/shm")
    with SharedMemoryPool(96 << 20) as pool:  # all six in flight at once: 69 MB
        for name in PLAN:
            assert mmzmq.send(push, mm, PAYLOADS[name](9), shm=pool) is None
        for name in PLAN:
            received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)
            assert received == PAYLOADS[name](9)
            large = [t for t in iter_tensors(received) if t.nbytes >= pool.min_frame_bytes]
            assert large and all(inside(t, attacher) for t in large)
        del received, large
        assert released(pool)


def test_a_message_with_nothing_large_is_sent_plain(
    sockets: Sockets, pool: SharedMemoryPool
) -> None:
    push, pull = pair(sockets, "plain")
    sent = PAYLOADS["64 small items"](1)
    mmzmq.send(push, mm, sent, shm=pool)
    parts = pull.recv_multipart()
    assert not parts[0].startswith(shm.MARKER)
    assert mm.decode(parts, mm.MultiModalKwargsItems) == sent  # any receiver reads it


def test_the_wire_is_control_then_header_then_zmq_frames(
    sockets: Sockets, pool: SharedMemoryPool
) -> None:
    push, pull = pair(sockets, "wire")
    big = torch.arange(BIG, dtype=torch.float32)
    small = torch.arange(1000, dtype=torch.float32)  # 4,000 bytes: a frame, not inline
    tiny = torch.arange(10, dtype=torch.float32)  # inline in the header
    frames = mm.encode(item(a=big, b=small, c=tiny))
    assert [f.nbytes for f in frames[1:]] == [4 * BIG, 4000]
    mmzmq.send_frames(push, frames, shm=pool)
    parts = pull.recv_multipart()
    assert len(parts) == 3  # control, header, the small frame
    assert parts[0][:8] == b"\xc1mmc-shm"
    control = msgspec.msgpack.decode(parts[0][8:])
    # version, segment, where to find it (pid, descriptor), sequence, then per frame:
    # ticket, generation, offset, length
    assert control == [3, pool.name, os.getpid(), pool._fd, 1, [[0, 1, 0, 4 * BIG], None]]
    assert pool.path == f"/proc/{os.getpid()}/fd/{pool._fd}"
    assert parts[1:] == [bytes(frames[0]), bytes(frames[2])]


def test_the_sender_may_mutate_a_tensor_once_send_returns(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "mutate")
    source = torch.arange(BIG, dtype=torch.float32)
    assert mmzmq.send(push, mm, item(x=source), shm=pool) is None
    source.fill_(-1.0)  # copied at send time: the message keeps the old values
    x = tensor_of(mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher), "x")
    assert torch.equal(x, torch.arange(BIG, dtype=torch.float32))
    assert x.data_ptr() != source.data_ptr()


def test_the_sender_writing_its_segment_changes_decoded_tensors(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher
) -> None:
    """Why the receiver must opt in: decoded bytes stay under the sender's control."""
    push, pull = pair(sockets, "trust")
    mask = torch.zeros(BIG, dtype=torch.bool)
    mmzmq.send(push, mm, item(mask=mask), shm=pool)
    received = tensor_of(mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher), "mask")
    assert not bool(received.any())  # validated: every byte 0 or 1
    pool._mapping[pool._data_offset + 5] = 7  # the sender's own mapping: writable
    assert received.view(torch.uint8)[5] == 7  # the same pages: no copy was made


def mappings_of(name: str) -> dict[tuple[int, int], str]:
    """(start, end) -> permissions of this process's mappings of memfd ``name``."""
    found = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms, *_ = line.split()
            if line.rstrip().endswith(f"/memfd:{name} (deleted)"):
                start, end = (int(x, 16) for x in span.split("-"))
                found[(start, end)] = perms
    return found


def test_decoded_tensors_view_a_read_only_mapping(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher
) -> None:
    """Only the sender's own mapping of the segment is writable; the board is the readers'."""
    push, pull = pair(sockets, "read-only")
    mmzmq.send(push, mm, item(x=torch.ones(BIG)), shm=pool)
    x = tensor_of(mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher), "x")
    segment = mappings_of(pool.name)
    assert sorted(segment.values()) == ["r--s", "rw-s"]  # the reader's, the sender's
    (reader,) = [span for span, perms in segment.items() if perms == "r--s"]
    assert reader[0] <= x.data_ptr() and x.data_ptr() + x.nbytes <= reader[1]
    assert sorted(mappings_of(pool.name + "-board").values()) == ["rw-s", "rw-s"]
    del x


def test_recv_routed_reads_shared_frames(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher
) -> None:
    router = sockets(zmq.ROUTER, RCVTIMEO=5000, LINGER=0)
    router.bind("inproc://routed")
    dealer = sockets(zmq.DEALER, SNDTIMEO=5000, LINGER=0)
    dealer.setsockopt(zmq.ROUTING_ID, b"peer-1")
    dealer.connect("inproc://routed")
    sent = PAYLOADS["idefics3"](3)
    mmzmq.send(dealer, mm, sent, shm=pool)
    routing_id, received = mmzmq.recv_routed(router, mm, mm.MultiModalKwargsItems, shm=attacher)
    assert routing_id == b"peer-1"
    assert received == sent
    assert all(inside(t, attacher) for t in iter_tensors(received) if t.nbytes >= 1 << 16)


def test_the_sender_holds_only_what_zmq_still_reads(
    sockets: Sockets, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "sender")
    with SharedMemoryPool(4 * BIG + 4 * BIG // 2) as pool:
        sender = mmzmq.Sender(push, mm, shm=pool)
        assert sender.send(item(x=torch.ones(BIG))) is None  # into the pool
        assert sender.pending() == 0
        tracker = sender.send(item(y=torch.ones(BIG)))  # no room: zero-copy through ZMQ
        assert tracker is not None
        first = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
        second = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
        assert inside(tensor_of(first, "x"), attacher)
        assert not inside(tensor_of(second, "y"), attacher)
        del first, second
        assert sender.wait(timeout=5)
        assert released(pool)


# -- release --------------------------------------------------------------------------------


def test_regions_return_only_when_every_view_is_gone(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "release")
    mmzmq.send(push, mm, PAYLOADS["minicpm-v"](2), shm=pool)  # ten frames, ten tickets
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)
    assert pool.in_flight == 10
    slices = pixels(received)
    assert isinstance(slices, list)
    kept = slices[3][1:2]  # a view of a view of one frame's tensor
    del received, slices
    gc.collect()
    assert pool.in_flight == 1  # nine frames released, the one under `kept` is not
    assert inside(kept, attacher)
    del kept
    assert released(pool)
    assert pool.free_bytes == pool.size


def test_copy_true_releases_at_once(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "copy")
    sent = PAYLOADS["whisper"](4)
    mmzmq.send(push, mm, sent, shm=pool)
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, copy=True, shm=attacher)
    assert pool.in_flight == 0  # no garbage collection needed
    assert received == sent
    assert not any(inside(t, attacher) for t in iter_tensors(received))


def test_a_failed_decode_releases_at_once(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "failed")
    mmzmq.send(push, mm, PAYLOADS["minicpm-v"](2), shm=pool)
    with pytest.raises(mm.DecodeError) as caught:  # holds the exception and its traceback
        mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
    assert "holds a MultiModalKwargsItems, not a MultiModalKwargsItem" in str(caught.value)
    assert pool.in_flight == 0
    mmzmq.send(push, mm, PAYLOADS["minicpm-v"](2), shm=pool)
    limits = mm.Limits(max_total_bytes=1 << 20)
    with pytest.raises(mm.DecodeError, match="exceed the limit of 1048576"):
        mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, limits=limits, shm=attacher)
    assert pool.in_flight == 0


def test_the_last_view_may_die_in_another_thread(
    sockets: Sockets, pool: SharedMemoryPool, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "thread")
    mmzmq.send(push, mm, item(x=torch.ones(BIG)), shm=pool)
    box = [mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)]
    thread = threading.Thread(target=box.clear)
    thread.start()
    thread.join(5)
    assert pool.in_flight == 0


# -- a full pool ----------------------------------------------------------------------------


def test_frames_that_find_no_room_go_through_zmq(
    sockets: Sockets, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "full")
    with SharedMemoryPool(4 * BIG) as pool:
        a, b = torch.full((BIG,), 1.0), torch.full((BIG,), 2.0)
        tracker = mmzmq.send(push, mm, item(a=a, b=b), shm=pool)
        assert tracker is not None  # one frame went zero-copy through ZMQ
        received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
        assert [inside(tensor_of(received, k), attacher) for k in "ab"] == [True, False]
        assert received == item(a=a, b=b)
        too_big = torch.ones(4 * BIG + 1)
        mmzmq.send(push, mm, item(c=too_big), shm=pool)  # larger than the pool: plain
        parts = pull.recv_multipart(copy=False)
        assert not shm.is_control(parts[0].buffer)
        assert mm.decode(parts, mm.MultiModalKwargsItem) == item(c=too_big)
        del received
        assert released(pool)


def test_a_receiver_holding_everything_never_blocks_the_sender(
    sockets: Sockets, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "holding")
    held = []
    with SharedMemoryPool(3 * LLAVA_FRAME, tickets=16) as pool:
        for seed in range(8):
            mmzmq.send(push, mm, PAYLOADS["llava"](seed), shm=pool)
            held.append(mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher))
        shared = [inside(pixels(value), attacher) for value in held]
        assert shared == [True] * 3 + [False] * 5  # the pool filled, then ZMQ took over
        assert held == [PAYLOADS["llava"](seed) for seed in range(8)]
        assert pool.in_flight == 3
        del held[:3]
        assert released(pool)


def test_held_tensors_are_never_overwritten(
    sockets: Sockets, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "held")
    with SharedMemoryPool(2 * LLAVA_FRAME) as pool:
        mmzmq.send(push, mm, PAYLOADS["llava"](100), shm=pool)
        first = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)
        first_data = pixels(first)
        assert isinstance(first_data, torch.Tensor) and inside(first_data, attacher)
        addresses = set()
        for seed in range(101, 121):
            mmzmq.send(push, mm, PAYLOADS["llava"](seed), shm=pool)
            later = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)
            data = pixels(later)
            assert isinstance(data, torch.Tensor) and inside(data, attacher)
            assert later == PAYLOADS["llava"](seed)
            addresses.add(data.data_ptr())
            del later, data
        # Every later message reused the one other region, never the held one.
        assert len(addresses) == 1 and first_data.data_ptr() not in addresses
        assert first == PAYLOADS["llava"](100)


def test_a_send_that_queues_nothing_gives_the_regions_back(
    sockets: Sockets, pool: SharedMemoryPool
) -> None:
    push = sockets(zmq.PUSH, SNDTIMEO=1000, LINGER=0)
    push.bind("inproc://nobody")  # no peer: nothing can be queued
    with pytest.raises(zmq.Again):
        mmzmq.send(push, mm, item(x=torch.ones(BIG)), shm=pool, flags=zmq.NOBLOCK)
    assert pool.in_flight == 0 and pool.free_bytes == pool.size


# -- lifetimes ------------------------------------------------------------------------------


def test_views_outlive_the_senders_close_and_the_attachers(sockets: Sockets) -> None:
    push, pull = pair(sockets, "lifetime")
    pool = SharedMemoryPool(16 << 20)
    attacher = SharedMemoryAttacher()
    sent = PAYLOADS["internvl"](5)
    mmzmq.send(push, mm, sent, shm=pool)
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)
    pool.close()  # closed: the receiver's mapping stays
    assert not leads_to_segment(pool.path, pool.name)
    attacher.close()  # dropped: the views keep the mapping
    assert attacher.mapped() == {}
    gc.collect()
    np.ones(16 << 20, dtype=np.uint8)  # churn
    assert received == PAYLOADS["internvl"](5)
    del received
    gc.collect()  # the release store goes to the still-mapped pages: no crash


def test_segments_closed_by_their_senders_are_dropped_when_a_new_one_appears(
    sockets: Sockets, attacher: SharedMemoryAttacher
) -> None:
    push, pull = pair(sockets, "stale")
    names = []
    for _ in range(3):
        with SharedMemoryPool(4 * BIG) as pool:
            mmzmq.send(push, mm, item(x=torch.ones(BIG)), shm=pool)
            mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
            assert pool.name in attacher.mapped()
            names.append(pool.name)
        assert list(attacher.mapped()) == [names[-1]]  # the previous one went


def test_at_most_max_segments_stay_mapped(sockets: Sockets) -> None:
    push, pull = pair(sockets, "bounded")
    pools = [SharedMemoryPool(4 * BIG) for _ in range(3)]
    try:
        with SharedMemoryAttacher(max_segments=2) as attacher:
            for pool in pools:
                mmzmq.send(push, mm, item(x=torch.ones(BIG)), shm=pool)
                mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher)
            assert list(attacher.mapped()) == [pools[1].name, pools[2].name]
    finally:
        for pool in pools:
            pool.close()


# -- hostile control parts ------------------------------------------------------------------


def control(pool: SharedMemoryPool, frames: list[Any], **changes: Any) -> bytes:
    """A control part naming ``pool``'s segment where it is."""
    return planted_control(pool.name, frames, fd=pool._fd, **changes)


def header_of(value: mm.MultiModalKwargsItem) -> bytes:
    return bytes(mm.encode(value)[0])


@pytest.fixture
def hostile(sockets: Sockets) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
    return pair(sockets, f"hostile-{secrets.token_hex(4)}")


def rejected(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    parts: list[bytes],
    attacher: SharedMemoryAttacher | None,
    **kwargs: Any,
) -> str:
    """The DecodeError that receiving ``parts`` raises; the socket stays usable after it."""
    push, pull = hostile
    push.send_multipart(parts)
    with pytest.raises(mm.DecodeError) as caught:
        mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher, **kwargs)
    valid = item(z=torch.arange(10))
    mmzmq.send(push, mm, valid)
    assert mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, shm=attacher) == valid
    return str(caught.value)


def test_a_receiver_without_an_attacher_opens_nothing(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    pool: SharedMemoryPool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def forbidden(*args: Any) -> None:
        raise AssertionError("a default receiver opened a segment")

    monkeypatch.setattr(shm_attacher, "open_segment", forbidden)
    monkeypatch.setattr(os, "open", forbidden)
    monkeypatch.setattr(os, "readlink", forbidden)
    frames = mm.encode(item(x=torch.ones(BIG)))
    staged = pool.stage(frames)
    assert staged is not None
    assert rejected(hostile, [bytes(staged.control), *staged.parts], None) == (
        "$: the message holds frames in shared memory, but shared memory is not enabled on "
        "this receiver (pass shm=SharedMemoryAttacher() to accept them)"
    )


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "/dev/shm/mmcodec-" + "0" * 32,
        "mmcodec-" + "0" * 31,
        "mmcodec-" + "A" * 32,
        "mmcodec-" + "0" * 32 + "\n",
        "mmcodec-" + "0" * 16 + "/../" + "0" * 12,
        "",
    ],
)
def test_segment_names_must_match_the_exact_pattern(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    pool: SharedMemoryPool,
    attacher: SharedMemoryAttacher,
    name: str,
) -> None:
    parts = [planted_control(name, [[0, 1, 0, 8]], fd=pool._fd), header_of(item(x=torch.ones(2)))]
    assert rejected(hostile, parts, attacher) == (
        f"$: shared memory segment name {name!r} is not 'mmcodec-' and 32 hex digits"
    )
    assert attacher.mapped() == {}


def test_a_missing_segment(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], attacher: SharedMemoryAttacher
) -> None:
    name = "mmcodec-" + secrets.token_hex(16)
    unused = os.sysconf("SC_OPEN_MAX") + 10  # no descriptor has this number
    parts = [planted_control(name, [[0, 1, 0, 8]], fd=unused), header_of(item(x=torch.ones(2)))]
    assert rejected(hostile, parts, attacher) == (
        f"$: shared memory segment {name} does not exist (its sender closed it or exited)"
    )


@pytest.mark.parametrize(
    ("pid", "fd", "message"),
    [
        (0, 3, "no process 0 or descriptor 3"),
        (-1, 3, "no process -1 or descriptor 3"),
        (1 << 22, 3, "no process 4194304 or descriptor 3"),
        (1, -1, "no process 1 or descriptor -1"),
        (1, 1 << 31, "no process 1 or descriptor 2147483648"),
    ],
)
def test_pids_and_descriptors_that_cannot_exist(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    attacher: SharedMemoryAttacher,
    pid: int,
    fd: int,
    message: str,
) -> None:
    name = "mmcodec-" + secrets.token_hex(16)
    parts = [
        planted_control(name, [[0, 1, 0, 8]], pid=pid, fd=fd),
        header_of(item(x=torch.ones(2))),
    ]
    assert rejected(hostile, parts, attacher) == f"$: shared memory segment {name}: {message}"


@pytest.fixture
def opened(tmp_path: Any) -> Iterator[dict[str, int]]:
    """Descriptors of this process that lead to things that are no segment."""
    reading, writing = os.pipe()
    null = os.open("/dev/null", os.O_RDONLY)
    (tmp_path / "secret").write_bytes(b"s" * 65536)
    regular = os.open(tmp_path / "secret", os.O_RDONLY)
    made = {"a pipe": reading, "a device": null, "a regular file": regular}
    yield made
    for fd in (reading, writing, null, regular):
        os.close(fd)


@pytest.mark.parametrize("what", ["a pipe", "a device", "a regular file"])
def test_a_descriptor_that_leads_elsewhere_is_never_opened(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    attacher: SharedMemoryAttacher,
    opened: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    what: str,
) -> None:
    tried: list[Any] = []
    real_open = os.open

    def watched(*args: Any) -> int:
        tried.append(args)
        return real_open(*args)

    monkeypatch.setattr(os, "open", watched)
    name = "mmcodec-" + secrets.token_hex(16)
    parts = [
        planted_control(name, [[0, 1, 0, 8]], fd=opened[what]),
        header_of(item(x=torch.ones(2))),
    ]
    assert rejected(hostile, parts, attacher) == (
        f"$: shared memory segment {name} does not exist (its sender closed it or exited)"
    )
    assert not [args for args in tried if str(args[0]).startswith("/proc/")]


def test_a_memfd_that_any_process_could_resize_is_refused_before_mapping(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], attacher: SharedMemoryAttacher
) -> None:
    for seals, found in [(0, "0x0"), (fcntl.F_SEAL_SHRINK, "0x2"), (fcntl.F_SEAL_GROW, "0x4")]:
        planted = plant(seals=seals)
        try:
            parts = [planted.control([[0, 1, 0, 8]]), header_of(item(x=torch.ones(2)))]
            assert rejected(hostile, parts, attacher) == (
                f"$: shared memory segment {planted.name}: {planted.name} is not sealed as a "
                f"pool seals it (seals {found}, not all of 0x17): a process could resize it"
            )
        finally:
            planted.close()
    assert attacher.mapped() == {}


def test_a_memfd_of_another_name_is_refused(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], attacher: SharedMemoryAttacher
) -> None:
    planted = plant(memfd_name="mmcodec-" + "0" * 32)  # a real segment's name, say
    try:
        parts = [planted.control([[0, 1, 0, 8]]), header_of(item(x=torch.ones(2)))]
        assert rejected(hostile, parts, attacher) == (
            f"$: shared memory segment {planted.name} does not exist (its sender closed it or "
            "exited)"
        )
    finally:
        planted.close()


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b"", "is too short for its header"),
        (b"x" * 64, "is not an mmcodec segment (magic b'xxxxxxxx')"),
        (
            b"mmcshm\x00\x00" + bytes([2, 0, 0, 0]) + bytes(44),
            "has layout version 2, not 3",
        ),
    ],
)
def test_a_memfd_that_is_not_a_segment(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    attacher: SharedMemoryAttacher,
    header: bytes,
    message: str,
) -> None:
    planted = plant(header=header, file_bytes=len(header))
    try:
        parts = [planted.control([[0, 1, 0, 8]]), header_of(item(x=torch.ones(2)))]
        found = rejected(hostile, parts, attacher)
        assert found.startswith("$: ") and found.endswith(message), found
    finally:
        planted.close()
    assert attacher.mapped() == {}


def test_a_segment_holding_another_segments_id_is_refused(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]], attacher: SharedMemoryAttacher
) -> None:
    other = "mmcodec-" + secrets.token_hex(16)
    donor = plant(other)  # its header carries the other name's id
    header = os.pread(donor.fd, 56, 0)
    donor.close()
    planted = plant(header=header)
    try:
        parts = [planted.control([[0, 1, 0, 8]]), header_of(item(x=torch.ones(2)))]
        assert rejected(hostile, parts, attacher) == (
            f"$: segment {planted.name} holds the id of segment {other}"
        )
    finally:
        planted.close()


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ([4096, 1, 0, 64], "frame 1: ticket 4096 outside 0..4095 of segment {name}"),
        ([-1, 1, 0, 64], "frame 1: ticket -1 outside 0..4095 of segment {name}"),
        ([0, 1, 64 << 20, 64], "frame 1: 64 bytes at offset 67108864 lie outside the"),
        ([0, 1, (64 << 20) - 32, 64], "frame 1: 64 bytes at offset 67108832 lie outside the"),
        ([0, 1, 0, (64 << 20) + 1], "frame 1: 67108865 bytes at offset 0 lie outside the"),
        ([0, 1, -64, 64], "frame 1: 64 bytes at offset -64 lie outside the"),
        ([0, 1, 64, -1], "frame 1: -1 bytes at offset 64 lie outside the"),
    ],
)
def test_out_of_range_tickets_offsets_and_lengths(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    pool: SharedMemoryPool,
    attacher: SharedMemoryAttacher,
    frame: list[int],
    message: str,
) -> None:
    header = header_of(item(x=torch.ones(BIG)))
    found = rejected(hostile, [control(pool, [frame]), header], attacher)
    assert found.startswith("$: " + message.format(name=pool.name)), found
    assert pool.in_flight == 0


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda pool: shm.MARKER,
            "malformed shared memory control part (Input data was truncated)",
        ),
        (
            lambda pool: control(pool, [[0, 1, 0, 64]])[:-3],
            "malformed shared memory control part (Input data was truncated)",
        ),
        (
            lambda pool: control(pool, [[0, 1, 0, 64]], version=2),
            "shared memory control version 2 is not supported (this receiver reads version 3)",
        ),
        (
            lambda pool: control(pool, ["x"]),
            "malformed shared memory control part (Expected `array | null`, got `str` - at "
            "`$[5][0]`)",
        ),
        (
            lambda pool: control(pool, [None, None]),
            "control part announces 3 ZMQ parts after it (the header and 2 frames), the "
            "message has 1",
        ),
        (
            lambda pool: control(pool, []),
            "shared memory control part names no frame in segment {name} (a sender puts at "
            "least one there)",
        ),
    ],
)
def test_malformed_control_parts(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    pool: SharedMemoryPool,
    attacher: SharedMemoryAttacher,
    build: Any,
    message: str,
) -> None:
    header = header_of(item(x=torch.ones(2)))
    found = rejected(hostile, [build(pool), header], attacher)
    assert found == f"$: {message.format(name=pool.name)}"


def test_limits_bound_the_control_part(
    hostile: tuple[zmq.Socket[Any], zmq.Socket[Any]],
    pool: SharedMemoryPool,
    attacher: SharedMemoryAttacher,
) -> None:
    header = header_of(item(x=torch.ones(2)))
    part = control(pool, [None] * 20)
    parts = [part, header, *[b"x"] * 20]
    found = rejected(hostile, parts, attacher, limits=mm.Limits(max_frames=8))
    assert found == "$: 21 frames exceed the limit of 8"
    found = rejected(hostile, parts, attacher, limits=mm.Limits(max_header_bytes=16))
    assert found == f"$: control part of {len(part) - 8} bytes exceeds the limit of 16"
