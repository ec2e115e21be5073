"""The shared-memory pool's bookkeeping: first-fit regions, coalescing, alignment, tickets.

:class:`RegionAllocator` is tested on its own (no file); the pool's tickets and reaping
are tested by writing release bytes into its segment the way a receiver's finalizer does.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import mmap
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcodec.transport import shm
from mmcodec.transport.shm import (
    ALIGNMENT,
    RegionAllocator,
    SharedMemoryAttacher,
    SharedMemoryPool,
    SharedMemoryUnavailable,
)
from mmcodec.transport.shm import _segment as segment
from tests.transport.test_shm import leads_to_segment


class Receiver:
    """Sets a ticket's release byte through a separate mapping of the segment's board."""

    def __init__(self, pool: SharedMemoryPool) -> None:
        with open(f"/proc/{pool.pid}/fd/{pool._segment.board_fd}", "r+b") as file:
            self._mapping = mmap.mmap(file.fileno(), 0)
        self._states = pool._layout.releases
        self._readers = pool.readers

    def release(self, ticket: int, reader: int = 0) -> None:
        self._mapping[self._states + ticket * self._readers + reader] = 1

    def close(self) -> None:
        self._mapping.close()


@pytest.fixture
def pool() -> Iterator[SharedMemoryPool]:
    with SharedMemoryPool(64 * ALIGNMENT, tickets=8) as made:
        yield made


# -- RegionAllocator ----------------------------------------------------------------------


def test_first_fit_takes_the_lowest_region_that_fits() -> None:
    regions = RegionAllocator(1024)
    a, b, c = regions.allocate(100), regions.allocate(300), regions.allocate(64)
    assert (a, b, c) == (0, 128, 448)  # lengths rounded up to 64: 128, 320, 64
    regions.free(128)
    assert regions.allocate(64) == 128  # the first hole, although the tail is larger
    assert regions.allocate(300) == 512  # the rest of the hole (256 bytes) is too small
    assert regions.allocate(200) == 192  # ... but this fills it exactly
    assert regions.free_regions() == [(832, 1024)]


def test_every_region_is_aligned_and_rounded_up() -> None:
    regions = RegionAllocator(4096)
    starts = [regions.allocate(n) for n in (1, 63, 64, 65, 127, 129)]
    assert starts == [0, 64, 128, 192, 320, 448]
    assert all(s is not None and s % ALIGNMENT == 0 for s in starts)
    assert regions.free_bytes == 4096 - 640


def test_freeing_coalesces_with_both_neighbours() -> None:
    regions = RegionAllocator(64 * 10)
    starts = [regions.allocate(64) for _ in range(10)]
    assert regions.allocate(1) is None
    for index in (1, 3, 5):
        regions.free(index * 64)
    assert regions.free_regions() == [(64, 128), (192, 256), (320, 384)]
    regions.free(128)  # joins (64, 128) and (192, 256)
    assert regions.free_regions() == [(64, 256), (320, 384)]
    regions.free(256)  # joins both again
    assert regions.free_regions() == [(64, 384)]
    assert regions.allocate(320) == 64  # one region of five slots now
    for start in (0, 64, 384, 448, 512, 576):
        regions.free(start)
    assert regions.free_regions() == [(0, 640)]
    assert starts[0] == 0


def test_nothing_fits_returns_none_and_the_size_rounds_down() -> None:
    regions = RegionAllocator(1000)
    assert regions.size == 960
    assert regions.allocate(961) is None
    assert regions.allocate(960) == 0
    assert regions.allocate(1) is None
    assert regions.free_regions() == []
    regions.free(0)
    assert regions.free_regions() == [(0, 960)]


def test_bad_requests_are_refused() -> None:
    regions = RegionAllocator(1024)
    with pytest.raises(ValueError, match="cannot allocate 0 bytes"):
        regions.allocate(0)
    with pytest.raises(KeyError):
        regions.free(64)  # never allocated
    with pytest.raises(ValueError, match="power of two"):
        RegionAllocator(1024, alignment=48)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.integers(1, 3000)),
        st.tuples(st.just("free"), st.integers(0, 1000)),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(operations, st.sampled_from([64, 4096, 10_000]))
def test_random_sequences_never_overlap_and_always_coalesce(
    ops: list[tuple[str, int]], size: int
) -> None:
    regions = RegionAllocator(size)
    live: dict[int, int] = {}  # start -> requested bytes
    for op, value in ops:
        if op == "allocate":
            start = regions.allocate(value)
            if start is None:
                # First fit misses only when no free region is long enough.
                needed = -(-value // ALIGNMENT) * ALIGNMENT
                assert all(end - s < needed for s, end in regions.free_regions())
                continue
            assert start % ALIGNMENT == 0 and start + value <= regions.size
            live[start] = value
        elif live:
            start = sorted(live)[value % len(live)]
            del live[start]
            regions.free(start)
        spans = sorted((s, s + -(-n // ALIGNMENT) * ALIGNMENT) for s, n in live.items())
        spans += regions.free_regions()
        spans.sort()
        # Live and free regions tile the area exactly: no overlap, no gap.
        assert [s for s, _ in spans[1:]] == [e for _, e in spans[:-1]]
        assert not spans or (spans[0][0] == 0 and spans[-1][1] == regions.size)
        free = regions.free_regions()
        assert all(a[1] < b[0] for a, b in itertools.pairwise(free))  # coalesced
    for start in list(live):
        regions.free(start)
    assert regions.free_regions() == ([(0, regions.size)] if regions.size else [])


# -- the pool -----------------------------------------------------------------------------


def test_the_segment_is_a_sealed_memfd_with_no_name_in_any_file_system(
    pool: SharedMemoryPool,
) -> None:
    assert segment.SEGMENT_NAME.fullmatch(pool.name)
    assert pool.path == f"/proc/{os.getpid()}/fd/{pool._fd}"
    assert os.readlink(pool.path) == f"/memfd:{pool.name} (deleted)"
    assert not os.path.exists(f"/dev/shm/{pool.name}")
    info = os.stat(pool.path)
    assert info.st_uid == os.geteuid() and info.st_nlink == 0
    # header, 8 tickets' entries, then the data on its own page
    assert info.st_size == mmap.PAGESIZE + pool.size
    assert pool.size == 64 * ALIGNMENT
    seals = fcntl.fcntl(pool._fd, segment._F_GET_SEALS)
    assert seals & segment.SEGMENT_SEALS == segment.SEGMENT_SEALS
    board = f"/proc/{os.getpid()}/fd/{pool._segment.board_fd}"
    assert os.readlink(board) == f"/memfd:{pool.name}-board (deleted)"
    seals = fcntl.fcntl(pool._segment.board_fd, segment._F_GET_SEALS)
    assert seals & segment.BOARD_SEALS == segment.BOARD_SEALS
    assert not seals & segment._F_SEAL_FUTURE_WRITE  # readers write the board
    assert repr(pool) == f"<SharedMemoryPool {pool.name} 4,096 bytes, 0 in flight>"


def test_tickets_come_back_only_when_the_receiver_releases_them(pool: SharedMemoryPool) -> None:
    receiver = Receiver(pool)
    try:
        first = pool.allocate(2000)
        second = pool.allocate(2000)
        assert first == (0, 0) and second == (1, 2048)
        assert pool.allocate(1) is None  # 4096 bytes in use
        assert pool.in_flight == 2
        receiver.release(1)
        assert pool.in_flight == 1
        assert pool.free_bytes == 2048
        assert pool.allocate(64) == (1, 2048)  # the released ticket and region again
        receiver.release(0)
        receiver.release(1)
        assert pool.free_bytes == 4096 and pool.in_flight == 0
    finally:
        receiver.close()


def test_a_release_byte_for_a_ticket_not_in_flight_is_ignored(pool: SharedMemoryPool) -> None:
    receiver = Receiver(pool)
    try:
        assert pool.allocate(64) == (0, 0)
        receiver.release(5)  # never handed out
        assert pool.in_flight == 1
        assert pool.free_bytes == 4096 - 64
        receiver.release(0)
        assert pool.in_flight == 0
    finally:
        receiver.close()


def test_running_out_of_tickets_is_running_out_of_room() -> None:
    with SharedMemoryPool(4096, tickets=2) as pool:
        assert pool.allocate(64) is not None
        assert pool.allocate(64) is not None
        assert pool.allocate(64) is None
        assert pool.free_bytes == 4096 - 128


def test_stage_copies_large_frames_and_leaves_the_rest() -> None:
    with SharedMemoryPool(4096, min_frame_bytes=100, tickets=8) as pool:
        header, small, large = b"h" * 10, b"s" * 99, bytes(range(200))
        staged = pool.stage([header, small, large])
        assert staged is not None
        assert staged.parts == [header, small]
        assert staged.tickets == [0]
        assert bytes(staged.control).startswith(shm.MARKER)
        with open(pool.path, "rb") as file:
            file.seek(mmap.PAGESIZE)
            assert file.read(200) == large
        pool.cancel(staged)
        assert pool.in_flight == 0 and pool.free_bytes == 4096
        assert pool.stage([header, small]) is None  # nothing placed: a plain message


def test_a_frame_that_cannot_be_staged_gives_back_what_was_taken() -> None:
    with SharedMemoryPool(4096, min_frame_bytes=100) as pool:
        strided = memoryview(bytearray(400))[::2]  # 200 bytes, not contiguous
        with pytest.raises(BufferError):  # when copied, after its region was taken
            pool.stage([b"h", bytes(300), strided])
        assert pool.in_flight == 0 and pool.free_bytes == 4096


def test_close_closes_and_later_use_is_refused() -> None:
    pool = SharedMemoryPool(4096)
    path = pool.path
    assert leads_to_segment(path, pool.name)
    pool.close()
    pool.close()  # idempotent
    assert pool.closed and not leads_to_segment(path, pool.name)
    with pytest.raises(ValueError, match=r"^shared memory pool mmcodec-[0-9a-f]{32} is closed$"):
        pool.allocate(64)
    assert repr(pool).endswith(" closed>")


def test_garbage_collection_and_interpreter_exit_close_the_segment() -> None:
    pool = SharedMemoryPool(4096)
    path, name = pool.path, pool.name
    del pool
    assert not leads_to_segment(path, name)
    code = (
        "import os\n"
        "from mmcodec.transport.shm import SharedMemoryPool\n"
        "pool = SharedMemoryPool(4096)\n"
        "print(pool.name, os.readlink(pool.path))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    name, link = out.strip().split(" ", 1)
    assert link == f"/memfd:{name} (deleted)"  # it never had a name to unlink
    assert not os.path.exists(f"/dev/shm/{name}")


def test_memory_that_cannot_be_reserved_is_a_clear_error_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_space(*args: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    monkeypatch.setattr(secrets, "token_hex", lambda n: "ab" * n)
    with pytest.raises(OSError) as caught:
        SharedMemoryPool(1 << 20)
    assert caught.value.errno == errno.ENOSPC
    # 1 MiB of data after 33 pages (the header and 4096 tickets' entries)
    assert str(caught.value) == (
        "[Errno 28] cannot reserve 1,183,744 bytes of shared memory (No space left on "
        "device); pass a smaller size="
    )
    assert not leads_to_segment_anywhere("mmcodec-" + "ab" * 16)  # every descriptor closed


def leads_to_segment_anywhere(name: str) -> bool:
    """Whether a descriptor of this process leads to segment ``name`` or its board."""
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(f"/memfd:{name}"):
                return True
    return False


def test_bad_pool_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="size must be at least 64 bytes"):
        SharedMemoryPool(10)
    with pytest.raises(ValueError, match="min_frame_bytes must be at least 1"):
        SharedMemoryPool(4096, min_frame_bytes=0)
    with pytest.raises(ValueError, match=r"tickets must be in 1\.\.1048576"):
        SharedMemoryPool(4096, tickets=0)
    with pytest.raises(ValueError, match="max_segments must be at least 1"):
        SharedMemoryAttacher(max_segments=0)


def test_other_platforms_get_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    for make in (SharedMemoryPool, SharedMemoryAttacher):
        with pytest.raises(SharedMemoryUnavailable) as caught:
            make()
        assert str(caught.value) == (
            "shared-memory frames need Linux's sealed memfds (platform 'darwin'); send without shm="
        )
