"""The segment: two sealed memfds, one that only its sender writes and a board its readers write.

The *segment* holds everything a reader must be able to trust, and is sealed so that no
process but its sender (which mapped it for writing before sealing) can change it::

    0        header: magic, layout version, readers, tickets, the board's descriptor
             number, data offset, data size, the segment's 16-byte id
    64       the sequence number of the last message staged
    128      per ticket (32 bytes): generation, the sequence number of the message whose
             frame it holds (0: none), the frame's offset and length
    page     data area: 64-byte aligned regions, one per frame in flight

The *board* is what readers write: their hints to the sender, nothing a reader trusts::

    0        header: magic, layout version, readers, tickets, the segment's id
    64       one 64-byte slot per reader: the last message sequence number it took, and
             whether a reader ever attached as that index
    ...      one release byte per ticket and reader

Both are memfds (``memfd_create``): no name in ``/dev/shm``, nothing in any file system,
freed by the kernel when the last descriptor and mapping go, however their processes die.
Both are sealed against shrinking and growing (``F_SEAL_SHRINK | F_SEAL_GROW``, then
``F_SEAL_SEAL``), so no process can truncate a page that someone maps: no SIGBUS. The
segment is also sealed against every *new* writable mapping and ``write`` (Linux 5.1's
``F_SEAL_FUTURE_WRITE``): readers map it read-only, and even a process that opens it
read-write gets ``EPERM``.

Readers reach both through ``/proc/<sender pid>/fd/<descriptor>``: opening that path
opens the sender's memfd anew (an open file description of the reader's own, which its
locks need), and the kernel allows it only to processes that may inspect the sender (the
same user, in the same pid namespace; see :func:`open_segment` for what a reader checks
first).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import re
import stat
import struct
import sys
from dataclasses import dataclass
from typing import Final

from mmcodec.runtime.errors import DecodeError
from mmcodec.transport._locks import LOCK_BASE, try_lock, unlock
from mmcodec.transport.shm._allocation import align

__all__ = [
    "BOARD_HEADER",
    "BOARD_SEALS",
    "BOARD_SUFFIX",
    "HEADER",
    "MAX_READERS",
    "MAX_TICKETS",
    "OWNER_LOCK",
    "READER_LOCK",
    "SEGMENT_NAME",
    "SEGMENT_PREFIX",
    "SEGMENT_SEALS",
    "SEQUENCE",
    "SEQUENCE_AT",
    "SLOT",
    "SLOTS_AT",
    "TICKET",
    "TICKETS_AT",
    "TICKET_LOCK",
    "Layout",
    "OwnedSegment",
    "SharedMemoryUnavailable",
    "check_name",
    "open_segment",
    "release_owned",
    "require_memfd",
    "segment_id",
]

SEGMENT_PREFIX: Final = "mmcodec-"
SEGMENT_NAME: Final = re.compile(r"mmcodec-[0-9a-f]{32}")
BOARD_SUFFIX: Final = "-board"
MAX_READERS: Final = 64
MAX_TICKETS: Final = 1 << 20
LAYOUT_VERSION: Final = 3
_PID_LIMIT: Final = 1 << 22  # PID_MAX_LIMIT of 64-bit Linux: no pid reaches it
_FD_LIMIT: Final = 1 << 31

# magic, layout version, readers, tickets, board descriptor, data offset, data size, id
HEADER: Final = struct.Struct("<8sIIIiQQ16s")
SEQUENCE: Final = struct.Struct("<Q")
SEQUENCE_AT: Final = 64
TICKET: Final = struct.Struct("<QQQQ")  # generation, sequence (0: none), offset, length
TICKETS_AT: Final = 128
# magic, layout version, readers, tickets, id
BOARD_HEADER: Final = struct.Struct("<8sIII4x16s")
SLOTS_AT: Final = 64
SLOT: Final = 64  # a cache line each: the last sequence number, the attach mark
_SEGMENT_MAGIC: Final = b"mmcshm\x00\x00"
_BOARD_MAGIC: Final = b"mmcboard"

# Lock bytes (see mmcodec.transport._locks), all on the segment: the pool's owner, each
# reader slot, each ticket. A read-only descriptor may take shared locks and test any.
OWNER_LOCK: Final = LOCK_BASE
READER_LOCK: Final = LOCK_BASE + 1
TICKET_LOCK: Final = LOCK_BASE + 1 + MAX_READERS

# Linux's values, for Pythons whose fcntl and os do not name them yet.
_F_ADD_SEALS: Final = getattr(fcntl, "F_ADD_SEALS", 1033)
_F_GET_SEALS: Final = getattr(fcntl, "F_GET_SEALS", 1034)
_F_SEAL_SEAL: Final = getattr(fcntl, "F_SEAL_SEAL", 0x01)
_F_SEAL_SHRINK: Final = getattr(fcntl, "F_SEAL_SHRINK", 0x02)
_F_SEAL_GROW: Final = getattr(fcntl, "F_SEAL_GROW", 0x04)
_F_SEAL_FUTURE_WRITE: Final = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x10)
_MFD_NOEXEC_SEAL: Final = getattr(os, "MFD_NOEXEC_SEAL", 0x08)
SEGMENT_SEALS: Final = _F_SEAL_SHRINK | _F_SEAL_GROW | _F_SEAL_FUTURE_WRITE | _F_SEAL_SEAL
BOARD_SEALS: Final = _F_SEAL_SHRINK | _F_SEAL_GROW | _F_SEAL_SEAL


class SharedMemoryUnavailable(OSError):
    """This platform cannot make sealed shared memory (the side channel is Linux-only)."""


def require_memfd() -> None:
    if not sys.platform.startswith("linux") or not hasattr(os, "memfd_create"):
        raise SharedMemoryUnavailable(
            f"shared-memory frames need Linux's sealed memfds (platform {sys.platform!r}); "
            "send without shm="
        )


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each area lies; both sides compute it from readers, tickets and data size."""

    readers: int
    tickets: int
    data_size: int

    @property
    def data(self) -> int:
        return align(TICKETS_AT + TICKET.size * self.tickets, mmap.PAGESIZE)

    @property
    def total(self) -> int:
        return self.data + self.data_size

    @property
    def releases(self) -> int:
        """Where the board's release bytes start."""
        return SLOTS_AT + SLOT * self.readers

    @property
    def board_total(self) -> int:
        return align(self.releases + self.tickets * self.readers, mmap.PAGESIZE)


def segment_id(name: str) -> bytes:
    return bytes.fromhex(name.removeprefix(SEGMENT_PREFIX))


# -- the sender's side --------------------------------------------------------------------------


def _memfd(name: str) -> int:
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        return os.memfd_create(name, flags | _MFD_NOEXEC_SEAL)  # nothing in it runs
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    return os.memfd_create(name, flags)  # before Linux 6.3, which has no such flag


def _reserve(fd: int, size: int) -> mmap.mmap:
    """Size the memfd, reserve its pages now (a failure here, not SIGBUS on first use) and
    map it for writing, populated (no page faults on first use)."""
    os.ftruncate(fd, size)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        raise OSError(
            e.errno,
            f"cannot reserve {size:,} bytes of shared memory ({e.strerror}); pass a smaller size=",
        ) from None
    populate = getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(fd, size, mmap.MAP_SHARED | populate)


def _seal(fd: int, seals: int) -> None:
    try:
        fcntl.fcntl(fd, _F_ADD_SEALS, seals)
    except OSError as e:
        raise SharedMemoryUnavailable(
            f"this kernel cannot seal shared memory ({e.strerror}); shared-memory frames "
            "need Linux 5.1 or later"
        ) from None


class OwnedSegment:
    """The sender's segment and board: created, reserved, mapped for writing, then sealed.

    The sender holds the exclusive owner lock from the moment the segment exists; readers
    tell a live sender by it. Raises ``OSError`` when the memory cannot be reserved.
    """

    __slots__ = ("board", "board_fd", "fd", "layout", "mapping", "name")

    def __init__(self, name: str, layout: Layout) -> None:
        self.name = name
        self.layout = layout
        self.fd = self.board_fd = -1
        maps: list[mmap.mmap] = []
        try:
            self.fd = _memfd(name)
            if not try_lock(self.fd, OWNER_LOCK, exclusive=True):  # a fresh file: never held
                raise OSError(f"cannot lock new shared memory segment {name}")
            self.mapping = _reserve(self.fd, layout.total)
            maps.append(self.mapping)
            _seal(self.fd, SEGMENT_SEALS)  # from here only this mapping writes it
            self.board_fd = _memfd(name + BOARD_SUFFIX)
            self.board = _reserve(self.board_fd, layout.board_total)
            maps.append(self.board)
            _seal(self.board_fd, BOARD_SEALS)
        except BaseException:
            for made in maps:
                made.close()
            release_owned(self.fd, self.board_fd)
            raise
        identity = segment_id(name)
        BOARD_HEADER.pack_into(
            self.board, 0, _BOARD_MAGIC, LAYOUT_VERSION, layout.readers, layout.tickets, identity
        )
        HEADER.pack_into(
            self.mapping,
            0,
            _SEGMENT_MAGIC,
            LAYOUT_VERSION,
            layout.readers,
            layout.tickets,
            self.board_fd,
            layout.data,
            layout.data_size,
            identity,
        )


def release_owned(fd: int, board_fd: int) -> None:
    """Drop the owner lock and close both descriptors (a pool's finalizer: it holds no
    reference to the pool). The lock goes first: the mappings hold duplicates of the
    descriptor, which would keep the lock until they are collected."""
    with contextlib.suppress(OSError):
        unlock(fd, OWNER_LOCK)
    for descriptor in (fd, board_fd):
        if descriptor >= 0:
            with contextlib.suppress(OSError):
                os.close(descriptor)


# -- the readers' side --------------------------------------------------------------------------


def check_name(name: str) -> None:
    if not SEGMENT_NAME.fullmatch(name):
        raise DecodeError(
            f"shared memory segment name {name[:80]!r} is not 'mmcodec-' and 32 hex digits"
        )


def open_segment(name: str, pid: int, fd: int, max_segment_bytes: int) -> tuple[int, int, Layout]:
    """Open segment ``name`` of process ``pid`` (its descriptor ``fd``) read-only, and its
    board read-write; returns both descriptors and the layout. Nothing is mapped yet.

    Each is opened through ``/proc/<pid>/fd/<n>`` only if that link leads to a memfd of
    the expected name (read before opening: a forged control part never makes a receiver
    open a device, a FIFO or another file of the sender's), and kept only if it is a
    regular file of this user, sealed as a pool seals it (no process can resize it under
    a mapping), with a header whose id, counts and sizes match its name and its size.
    """
    check_name(name)
    if not (0 < pid < _PID_LIMIT and 0 <= fd < _FD_LIMIT):
        raise DecodeError(f"shared memory segment {name}: no process {pid} or descriptor {fd}")
    segment = _open_memfd(name, pid, fd, name, os.O_RDONLY, SEGMENT_SEALS)
    try:
        try:
            size = os.fstat(segment).st_size
            head = os.pread(segment, HEADER.size, 0)
        except OSError as e:
            raise DecodeError(f"cannot read shared memory segment {name}: {e.strerror}") from None
        layout, board_fd = _check_header(name, head, size, max_segment_bytes)
        board = _open_memfd(name, pid, board_fd, name + BOARD_SUFFIX, os.O_RDWR, BOARD_SEALS)
        try:
            _check_board(name, board, layout)
        except BaseException:
            os.close(board)
            raise
    except BaseException:
        os.close(segment)
        raise
    return segment, board, layout


def _open_memfd(segment: str, pid: int, fd: int, expected: str, flags: int, seals: int) -> int:
    link = f"/proc/{pid}/fd/{fd}"
    try:
        target = os.readlink(link)
    except FileNotFoundError:
        target = None
    except OSError as e:
        raise DecodeError(
            f"cannot open shared memory segment {segment} through {link}: {e.strerror}"
        ) from None
    if target != f"/memfd:{expected} (deleted)":
        raise DecodeError(
            f"shared memory segment {segment} does not exist (its sender closed it or exited)"
        )
    try:
        opened = os.open(link, flags | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise DecodeError(
            f"cannot open shared memory segment {segment} through {link}: {e.strerror}"
        ) from None
    try:
        try:
            info = os.fstat(opened)
            found = fcntl.fcntl(opened, _F_GET_SEALS)
        except OSError as e:
            raise DecodeError(
                f"shared memory segment {segment}: {expected} is no sealed memfd ({e.strerror})"
            ) from None
        if not stat.S_ISREG(info.st_mode):
            raise DecodeError(f"shared memory segment {segment}: {expected} is not a regular file")
        if info.st_uid != os.geteuid():
            raise DecodeError(f"shared memory segment {segment} belongs to another user")
        if found & seals != seals:
            raise DecodeError(
                f"shared memory segment {segment}: {expected} is not sealed as a pool seals "
                f"it (seals {found:#x}, not all of {seals:#x}): a process could resize it"
            )
    except BaseException:
        os.close(opened)
        raise
    return opened


def _check_header(name: str, head: bytes, size: int, max_segment_bytes: int) -> tuple[Layout, int]:
    """The layout the segment's header declares and the board's descriptor number, after
    checking them against the segment's name and size."""
    if len(head) < HEADER.size:
        raise DecodeError(f"shared memory segment {name} is too short for its header")
    magic, version, readers, tickets, board, data_offset, data_size, identity = HEADER.unpack(head)
    if magic != _SEGMENT_MAGIC:
        raise DecodeError(f"segment {name} is not an mmcodec segment (magic {magic!r})")
    if version != LAYOUT_VERSION:
        raise DecodeError(f"segment {name} has layout version {version}, not {LAYOUT_VERSION}")
    if identity != segment_id(name):
        raise DecodeError(f"segment {name} holds the id of segment mmcodec-{identity.hex()}")
    if not 1 <= readers <= MAX_READERS:
        raise DecodeError(f"segment {name}: reader count {readers} outside 1..{MAX_READERS}")
    if not 1 <= tickets <= MAX_TICKETS:
        raise DecodeError(f"segment {name}: ticket count {tickets} outside 1..{MAX_TICKETS}")
    if board < 0:
        raise DecodeError(f"segment {name}: board descriptor {board} cannot exist")
    layout = Layout(readers, tickets, data_size)
    if data_offset != layout.data:
        raise DecodeError(
            f"segment {name}: data area offset {data_offset} is not {layout.data}, where "
            f"{readers} readers and {tickets} tickets put it"
        )
    if layout.total > max_segment_bytes:
        raise DecodeError(
            f"segment {name} declares {layout.total:,} bytes, more than this attacher maps "
            f"(max_segment_bytes={max_segment_bytes:,})"
        )
    if size != layout.total:
        raise DecodeError(
            f"segment {name} is {size:,} bytes, but its header declares {layout.total:,}"
        )
    return layout, board


def _check_board(name: str, board: int, layout: Layout) -> None:
    try:
        size = os.fstat(board).st_size
        head = os.pread(board, BOARD_HEADER.size, 0)
    except OSError as e:
        raise DecodeError(f"cannot read the board of segment {name}: {e.strerror}") from None
    expected = (_BOARD_MAGIC, LAYOUT_VERSION, layout.readers, layout.tickets, segment_id(name))
    if len(head) < BOARD_HEADER.size or BOARD_HEADER.unpack(head) != expected:
        raise DecodeError(f"segment {name}: its board's header does not match the segment")
    if size != layout.board_total:
        raise DecodeError(
            f"segment {name}: its board is {size:,} bytes, not the {layout.board_total:,} "
            "its layout needs"
        )
