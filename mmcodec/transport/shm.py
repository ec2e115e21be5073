"""A shared-memory side channel for large frames between processes of one host (Linux).

Over ``ipc://`` ZMQ copies every byte twice through the kernel. With this module the
sender copies each large codec frame once, into a shared segment it owns, and sends
through ZMQ only a small *control* part naming where the frame lies; the receiver
decodes zero-copy views of the shared pages. Opt-in on both sides::

    from mmcodec.transport import zmq as mmzmq
    from mmcodec.transport.shm import SharedMemoryAttacher, SharedMemoryPool

    pool = SharedMemoryPool()                       # sender: one segment in /dev/shm
    mmzmq.send(push, mm, items, shm=pool)
    attacher = SharedMemoryAttacher()               # receiver: maps the segments it meets
    items = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)

The segment
    One file ``/dev/shm/mmcodec-<32 random hex digits>`` (mode 0600, its pages reserved
    with ``posix_fallocate`` so a full ``/dev/shm`` fails here, not with SIGBUS later)::

        0     header: magic, layout version, ticket count, data offset, data size
        64    control area: one release byte per ticket
        page  data area: 64-byte aligned regions, one per frame in flight

    :meth:`SharedMemoryPool.stage` copies each frame of at least ``min_frame_bytes``
    into a free region (first fit) and names it by a *ticket*. Frames that find no room
    go through ZMQ as before, so a full pool never loses or blocks a message.

The release protocol (why it is race-free)
    Each ticket has one byte in the control area, and each byte has one writer at a time.
    The sender writes 0 ("in use") when it hands the ticket out, *before* the message is
    sent; from then on only the receiver writes it, once, 1 ("released"), when the last
    view of the frame dies. The sender reads the byte and, seeing 1, takes the region and
    the ticket back and writes 0 again; it never writes a region or hands out a ticket
    while the receiver may still read it, since it reuses nothing the receiver has not
    released.

    Memory order: the sender's copy precedes its ZMQ send, and the receiver's first read
    follows its ZMQ receive (system calls and locks between them: full barriers). The
    release store follows the receiver's last read of the region in program order, and
    x86-64 never lets a store overtake an earlier load. Weakly ordered CPUs (aarch64)
    allow it in principle and Python has no fence to forbid it; in practice the whole
    teardown of the views lies between the last read and the store.

    One message, one receiver: a control part must be decoded by one receiver only
    (PUSH/PULL, DEALER/ROUTER, PAIR), never fanned out (PUB/SUB), or the first receiver
    to release frees memory the others still read.

Trust
    For peers on the same host, under the same user, that already trust each other with
    their memory. The structure (the codec header) still travels through ZMQ and is
    validated as usual, and the receiver checks every name, offset, length and ticket
    before it maps or builds anything; but the tensors' bytes live in the sender's
    segment, and a sender that keeps writing it can change a tensor's values after it
    was decoded (a bool tensor validated as 0/1 could change), or shrink the file so
    that reading it raises SIGBUS. Hence the receiver must opt in: without an attacher,
    a shared-memory message is a :class:`~mmcodec.runtime.errors.DecodeError`, and no
    peer can make a default receiver open a file. Enable it only on sockets that only
    local, trusted processes can reach (an ``ipc://`` path with tight permissions, not
    a TCP port). Nothing is pickled.

Lifetimes
    The sender may mutate or free a tensor whose frame went to shared memory as soon as
    ``send`` returns (it was copied); a ZMQ tracker covers only parts sent zero-copy.
    A decoded tensor keeps its region until it dies, however many messages follow.
    :meth:`SharedMemoryPool.close` (also run at garbage collection and interpreter
    exit) unlinks the file; receivers keep their mappings, and views stay valid. A
    receiver that dies never releases its tickets: the pool fills and the sender falls
    back to ZMQ. A sender killed with SIGKILL leaves its file behind (``rm
    /dev/shm/mmcodec-*`` when no mmcodec process runs).

A pool is not thread-safe (one per sending thread, like sockets); an attacher may be
shared. The receive-side release runs in whichever thread drops the last view, during
garbage collection too, and only stores one byte.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import re
import secrets
import stat
import struct
import sys
import threading
import traceback
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import numpy as np

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import Limits

__all__ = [
    "ALIGNMENT",
    "DEFAULT_MIN_FRAME_BYTES",
    "DEFAULT_POOL_BYTES",
    "DEFAULT_TICKETS",
    "MARKER",
    "RegionAllocator",
    "SharedMemoryAttacher",
    "SharedMemoryPool",
    "SharedMemoryUnavailable",
    "ShmControl",
    "ShmFrame",
    "Staged",
    "drop_locals",
    "is_control",
]

SEGMENT_DIR: Final = "/dev/shm"
SEGMENT_PREFIX: Final = "mmcodec-"
_SEGMENT_NAME: Final = re.compile(r"mmcodec-[0-9a-f]{32}")

DEFAULT_POOL_BYTES: Final = 256 << 20
"""Data area of a pool: two 151 MB 16-image requests do not fit at once; the second
falls back to ZMQ for the frames that find no room."""
DEFAULT_MIN_FRAME_BYTES: Final = 64 << 10
"""Frames smaller than this go through ZMQ.

Measured on a 2-core VM (one tensor per message over ``ipc://`` to another process,
median of send -> decoded -> acked over 1000 messages): the pool costs a fixed ~15 us
more per message (the control part, the lookups, the release) and saves ZMQ's two
kernel copies; 87 vs 74 us through ZMQ at 32 KiB, 92 vs 100 us at 64 KiB, 102 vs 216 us
at 256 KiB. The same as ``zmq.COPY_THRESHOLD``: with room in the pool, nothing goes
zero-copy through ZMQ.
"""
DEFAULT_TICKETS: Final = 4096
"""Frames in flight at most (one control byte each)."""
MAX_TICKETS: Final = 1 << 20
ALIGNMENT: Final = 64
"""Every region starts at a multiple of this from the (page-aligned) data area."""

MARKER: Final = b"\xc1mmc-shm"
"""First bytes of a control part. 0xc1 is the one byte msgpack never uses, so no
msgpack document, and so no codec header (a msgpack array), can start with it."""
CONTROL_VERSION: Final = 1

_LAYOUT = struct.Struct("<8sIIQQ")  # magic, layout version, tickets, data offset, data size
_SEGMENT_MAGIC: Final = b"mmcshm\x00\x00"
_LAYOUT_VERSION: Final = 1
_FLAGS_OFFSET: Final = 64
_IN_USE: Final = 0
_RELEASED: Final = 1
_RELEASED_BYTE: Final = bytes([_RELEASED])


class SharedMemoryUnavailable(OSError):
    """This platform has no ``/dev/shm`` (the side channel is Linux-only)."""


def _require_dev_shm() -> None:
    if not sys.platform.startswith("linux") or not os.path.isdir(SEGMENT_DIR):
        raise SharedMemoryUnavailable(
            f"shared-memory frames need Linux's {SEGMENT_DIR} (platform {sys.platform!r}); "
            "send without shm="
        )


def _align(n: int, to: int = ALIGNMENT) -> int:
    return (n + to - 1) // to * to


# -- the wire: the control part ---------------------------------------------------------------


class ShmFrame(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """Where one codec frame lies in the segment."""

    ticket: int
    offset: int
    """Bytes from the start of the data area."""
    length: int


class ShmControl(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """The control part after :data:`MARKER`: ``[version, segment, frames]``.

    ``frames`` describes codec frames 1..N (the header, frame 0, always comes through
    ZMQ, right after the control part): ``None`` is "the next ZMQ part", a
    :class:`ShmFrame` a region of the segment.
    """

    version: int
    segment: str
    frames: list[ShmFrame | None]


class _ControlHead(msgspec.Struct, array_like=True, gc=False, frozen=True):
    version: int


_ENCODER: Final = msgspec.msgpack.Encoder()
_HEAD_DECODER: Final = msgspec.msgpack.Decoder(_ControlHead)
_CONTROL_DECODER: Final = msgspec.msgpack.Decoder(ShmControl)


def is_control(part: memoryview) -> bool:
    """Whether a message's first part is a shared-memory control part."""
    return part[: len(MARKER)].tobytes() == MARKER


def _byte_view(frame: Any) -> memoryview:
    view = frame if type(frame) is memoryview else memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


# -- the sender side ----------------------------------------------------------------------------


class RegionAllocator:
    """First-fit allocation of ``alignment``-aligned regions of ``[0, size)``.

    Free regions are kept sorted and coalesced: freeing a region merges it with free
    neighbours, so after every region is freed one region spans the whole area again.
    """

    __slots__ = ("_alignment", "_ends", "_size", "_starts", "_used")

    def __init__(self, size: int, alignment: int = ALIGNMENT) -> None:
        if alignment < 1 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, not {alignment}")
        self._alignment = alignment
        self._size = size // alignment * alignment
        self._starts: list[int] = [0] if self._size else []
        self._ends: list[int] = [self._size] if self._size else []
        self._used: dict[int, int] = {}  # start -> end of each allocated region

    @property
    def size(self) -> int:
        return self._size

    @property
    def free_bytes(self) -> int:
        return sum(self._ends) - sum(self._starts)

    def free_regions(self) -> list[tuple[int, int]]:
        """``(start, end)`` of each free region, in address order."""
        return list(zip(self._starts, self._ends, strict=True))

    def allocate(self, nbytes: int) -> int | None:
        """The start of a free region of at least ``nbytes`` (the lowest that fits), or None."""
        if nbytes < 1:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        length = _align(nbytes, self._alignment)
        ends = self._ends
        for index, start in enumerate(self._starts):
            if ends[index] - start >= length:
                if ends[index] - start == length:
                    del self._starts[index], ends[index]
                else:
                    self._starts[index] = start + length
                self._used[start] = start + length
                return start
        return None

    def free(self, start: int) -> None:
        """Return the region that :meth:`allocate` gave out at ``start``."""
        end = self._used.pop(start)
        starts, ends = self._starts, self._ends
        index = bisect.bisect_left(starts, start)
        joins_previous = index > 0 and ends[index - 1] == start
        joins_next = index < len(starts) and starts[index] == end
        if joins_previous and joins_next:
            ends[index - 1] = ends[index]
            del starts[index], ends[index]
        elif joins_previous:
            ends[index - 1] = end
        elif joins_next:
            starts[index] = start
        else:
            starts.insert(index, start)
            ends.insert(index, end)


@dataclass(frozen=True, slots=True)
class Staged:
    """One message's frames placed in a pool: what to send through ZMQ instead."""

    control: bytearray
    """The control part, sent first."""
    parts: list[Any]
    """The codec header, then the frames that go through ZMQ, in order."""
    tickets: list[int]


def _remove_segment(mapping: mmap.mmap, path: str) -> None:
    """Unlink the file (receivers keep their mappings) and unmap this process's view."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    mapping.close()


class SharedMemoryPool:
    """The sender's segment: regions for large frames, reclaimed as receivers release them.

    ``size`` bytes of data area (rounded down to :data:`ALIGNMENT`), ``tickets`` frames
    in flight at most; frames of at least ``min_frame_bytes`` go through the pool. Raises
    :class:`SharedMemoryUnavailable` off Linux, and ``OSError`` when ``/dev/shm`` cannot
    hold ``size`` bytes. Use as a context manager, or call :meth:`close`; garbage
    collection and interpreter exit close it too. Not thread-safe.
    """

    def __init__(
        self,
        size: int = DEFAULT_POOL_BYTES,
        *,
        min_frame_bytes: int = DEFAULT_MIN_FRAME_BYTES,
        tickets: int = DEFAULT_TICKETS,
    ) -> None:
        _require_dev_shm()
        if size < ALIGNMENT:
            raise ValueError(f"size must be at least {ALIGNMENT} bytes, not {size}")
        if min_frame_bytes < 1:
            raise ValueError(f"min_frame_bytes must be at least 1, not {min_frame_bytes}")
        if not 1 <= tickets <= MAX_TICKETS:
            raise ValueError(f"tickets must be in 1..{MAX_TICKETS}, not {tickets}")
        self.min_frame_bytes = min_frame_bytes
        self.tickets = tickets
        self._regions = RegionAllocator(size)
        self._data_offset = _align(_FLAGS_OFFSET + tickets, mmap.PAGESIZE)
        self._flags_end = _FLAGS_OFFSET + tickets
        self.name = SEGMENT_PREFIX + secrets.token_hex(16)
        self.path = os.path.join(SEGMENT_DIR, self.name)
        self._mapping = self._create(self._data_offset + self._regions.size)
        _LAYOUT.pack_into(
            self._mapping,
            0,
            _SEGMENT_MAGIC,
            _LAYOUT_VERSION,
            tickets,
            self._data_offset,
            self._regions.size,
        )
        self._free_tickets = list(range(tickets - 1, -1, -1))  # a stack: ticket 0 first
        self._outstanding: dict[int, int] = {}  # ticket -> region start
        self._finalizer = weakref.finalize(self, _remove_segment, self._mapping, self.path)

    def _create(self, total: int) -> mmap.mmap:
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            os.ftruncate(fd, total)
            try:
                os.posix_fallocate(fd, 0, total)  # tmpfs: reserve the pages now, not SIGBUS later
            except OSError as e:
                raise OSError(
                    e.errno,
                    f"cannot reserve {total:,} bytes in {SEGMENT_DIR} ({e.strerror}); "
                    "pass a smaller size= or give /dev/shm more room",
                ) from None
            populate = getattr(mmap, "MAP_POPULATE", 0)  # no page faults on first use
            return mmap.mmap(fd, total, mmap.MAP_SHARED | populate)
        except BaseException:
            os.unlink(self.path)
            raise
        finally:
            os.close(fd)

    # -- allocation -------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes of data area."""
        return self._regions.size

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def in_flight(self) -> int:
        """Tickets handed out and not yet released by a receiver."""
        self._reap()
        return len(self._outstanding)

    @property
    def free_bytes(self) -> int:
        """Data-area bytes free for new frames, once released regions are reclaimed."""
        self._reap()
        return self._regions.free_bytes

    def allocate(self, nbytes: int) -> tuple[int, int] | None:
        """``(ticket, offset)`` of a region of ``nbytes`` (offset from the data area, a
        multiple of :data:`ALIGNMENT`), or None when no ticket or no region is free.
        Regions that receivers released are reclaimed first."""
        self._check_open()
        self._reap()
        return self._take(nbytes)

    def _take(self, nbytes: int) -> tuple[int, int] | None:
        if not self._free_tickets:
            return None
        offset = self._regions.allocate(nbytes)
        if offset is None:
            return None
        ticket = self._free_tickets.pop()
        self._mapping[_FLAGS_OFFSET + ticket] = _IN_USE  # before the message leaves
        self._outstanding[ticket] = offset
        return ticket, offset

    def _reap(self) -> None:
        """Take back every outstanding ticket whose release byte a receiver set."""
        if not self._outstanding:
            return
        mapping, end = self._mapping, self._flags_end
        position = mapping.find(_RELEASED_BYTE, _FLAGS_OFFSET, end)
        while position != -1:
            ticket = position - _FLAGS_OFFSET
            mapping[position] = _IN_USE
            offset = self._outstanding.pop(ticket, None)
            if offset is not None:  # else a stray write for a ticket not in flight
                self._regions.free(offset)
                self._free_tickets.append(ticket)
            position = mapping.find(_RELEASED_BYTE, position + 1, end)

    def stage(self, frames: Sequence[Any]) -> Staged | None:
        """Copy the frames (after the header) that reach ``min_frame_bytes`` and fit into
        the pool; None when none did (send the frames as a plain message)."""
        self._check_open()
        self._reap()
        parts = [frames[0]]
        placed: list[ShmFrame | None] = []
        staged = Staged(bytearray(MARKER), parts, [])
        mapping, base = self._mapping, self._data_offset
        try:
            for frame in frames[1:]:
                view = _byte_view(frame)
                nbytes = view.nbytes
                slot = self._take(nbytes) if nbytes >= self.min_frame_bytes else None
                if slot is None:
                    parts.append(frame)
                    placed.append(None)
                    continue
                ticket, offset = slot
                staged.tickets.append(ticket)
                mapping[base + offset : base + offset + nbytes] = view  # the one copy
                placed.append(ShmFrame(ticket, offset, nbytes))
        except BaseException:
            self.cancel(staged)  # a frame that is no contiguous buffer, say
            raise
        if not staged.tickets:
            return None
        control = ShmControl(CONTROL_VERSION, self.name, placed)
        _ENCODER.encode_into(control, staged.control, -1)
        return staged

    def cancel(self, staged: Staged) -> None:
        """Take back the regions of a message that was never sent."""
        for ticket in staged.tickets:
            self._regions.free(self._outstanding.pop(ticket))
            self._free_tickets.append(ticket)

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"shared memory pool {self.name} is closed")

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Unlink the segment and unmap it here (receivers' views stay valid)."""
        self._finalizer()

    def __enter__(self) -> SharedMemoryPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._outstanding)} in flight"
        return f"<SharedMemoryPool {self.name} {self.size:,} bytes, {state}>"


# -- the receiver side --------------------------------------------------------------------------


def _release(mapping: mmap.mmap, position: int) -> None:
    """The finalizer of a received frame: one byte store, from any thread, during GC too.

    No lock, no socket, no allocation to speak of: it may run in the middle of anything.
    """
    try:  # noqa: SIM105 (no context manager object to build here)
        mapping[position] = _RELEASED
    except ValueError:  # unmapped already (only at interpreter exit): nothing to release
        pass


class _SharedPages(np.ndarray):
    """A segment's data area, and each received frame: a view of it.

    A subclass for one reason: numpy makes a new array's base the first array up the
    chain of views that owns its memory or whose own base is of another class. The
    tensors of a frame are built from a memoryview of the frame's array; with plain
    arrays their base would skip to the whole data area, and the frame's array (and its
    finalizer) would die at once. With this class their base is the frame's array, which
    lives as long as they do (tests check the release waits for the last view).
    """


class _Segment:
    """One attached segment: its mapping and the layout read (and checked) once."""

    __slots__ = ("data", "data_size", "fd", "mapping", "name", "tickets")

    def __init__(self, name: str, fd: int, mapping: mmap.mmap) -> None:
        self.name = name
        self.fd = fd
        self.mapping = mapping
        self.tickets, data_offset, self.data_size = _check_layout(name, mapping)
        pages = np.frombuffer(mapping, np.uint8, self.data_size, data_offset)
        self.data: _SharedPages = pages.view(_SharedPages)

    def check(self, frame: ShmFrame, number: int) -> None:
        if not 0 <= frame.ticket < self.tickets:
            raise DecodeError(
                f"frame {number}: ticket {frame.ticket} outside 0..{self.tickets - 1} "
                f"of segment {self.name}"
            )
        if frame.offset < 0 or frame.length < 0 or frame.offset + frame.length > self.data_size:
            raise DecodeError(
                f"frame {number}: {frame.length} bytes at offset {frame.offset} lie outside "
                f"the {self.data_size}-byte data area of segment {self.name}"
            )

    def view(self, frame: ShmFrame) -> memoryview:
        """The frame's bytes, zero-copy; releases the ticket when the last view dies."""
        region = self.data[frame.offset : frame.offset + frame.length]
        weakref.finalize(region, _release, self.mapping, _FLAGS_OFFSET + frame.ticket)
        return memoryview(region)  # type: ignore[arg-type]

    def unlinked(self) -> bool:
        return os.fstat(self.fd).st_nlink == 0

    def close(self) -> None:
        """Drop this side's references; live views keep the mapping until they die."""
        del self.data
        with contextlib.suppress(BufferError):  # views alive: unmapped when the last one dies
            self.mapping.close()
        os.close(self.fd)


def _check_layout(name: str, mapping: mmap.mmap) -> tuple[int, int, int]:
    """``(tickets, data offset, data size)`` from the segment's header, all in bounds."""
    size = len(mapping)
    magic, version, tickets, data_offset, data_size = _LAYOUT.unpack_from(mapping, 0)
    if magic != _SEGMENT_MAGIC:
        raise DecodeError(f"segment {name} is not an mmcodec segment (magic {magic!r})")
    if version != _LAYOUT_VERSION:
        raise DecodeError(f"segment {name} has layout version {version}, not {_LAYOUT_VERSION}")
    if not 1 <= tickets <= MAX_TICKETS:
        raise DecodeError(f"segment {name}: ticket count {tickets} outside 1..{MAX_TICKETS}")
    if data_offset < _FLAGS_OFFSET + tickets or data_offset % ALIGNMENT:
        raise DecodeError(f"segment {name}: data area offset {data_offset} is not valid")
    if data_offset + data_size > size:
        raise DecodeError(
            f"segment {name}: data area ({data_size} bytes at {data_offset}) overruns "
            f"the {size}-byte file"
        )
    return tickets, data_offset, data_size


def _open_segment(name: str) -> _Segment:
    """Map segment ``name`` of ``/dev/shm`` after checking the name, the file and its layout."""
    if not _SEGMENT_NAME.fullmatch(name):
        raise DecodeError(
            f"shared memory segment name {name[:80]!r} is not 'mmcodec-' and 32 hex digits"
        )
    path = os.path.join(SEGMENT_DIR, name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DecodeError(
            f"shared memory segment {name} does not exist (its sender closed it?)"
        ) from None
    except OSError as e:
        raise DecodeError(f"cannot open shared memory segment {name}: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DecodeError(f"shared memory segment {name} is not a regular file")
        if info.st_uid != os.geteuid():
            raise DecodeError(f"shared memory segment {name} belongs to another user")
        if info.st_size < _FLAGS_OFFSET:
            raise DecodeError(f"shared memory segment {name} is too short for its header")
        populate = getattr(mmap, "MAP_POPULATE", 0)
        mapping = mmap.mmap(fd, info.st_size, mmap.MAP_SHARED | populate)
        try:
            return _Segment(name, fd, mapping)
        except BaseException:
            mapping.close()
            raise
    except BaseException:
        os.close(fd)
        raise


class SharedMemoryAttacher:
    """The receiver's side: maps each segment named by a control part once, and caches it.

    Hand it to ``recv(..., shm=attacher)``. At most ``max_segments`` stay mapped (the
    oldest is dropped first); when a new segment appears, segments whose senders have
    closed them are dropped. Dropping a segment never invalidates a decoded tensor: a
    mapping lives until its last view dies. Safe to share between threads.
    """

    def __init__(self, *, max_segments: int = 16) -> None:
        _require_dev_shm()
        if max_segments < 1:
            raise ValueError(f"max_segments must be at least 1, not {max_segments}")
        self.max_segments = max_segments
        self._segments: dict[str, _Segment] = {}
        self._lock = threading.Lock()  # only around the cache, never taken by a finalizer

    def frames(self, control: memoryview, parts: Sequence[Any], limits: Limits) -> list[Any]:
        """The codec frames of a shared-memory message: ``parts`` are the ZMQ parts after
        ``control`` (the header first). Everything is checked before any view is made."""
        message = _parse_control(control, limits)
        segment = self._segment(message.segment)
        from_zmq = 1 + sum(1 for frame in message.frames if frame is None)
        if len(parts) != from_zmq:
            raise DecodeError(
                f"control part announces {from_zmq} ZMQ parts after it (the header and "
                f"{from_zmq - 1} frames), the message has {len(parts)}"
            )
        for number, frame in enumerate(message.frames, 1):
            if frame is not None:
                segment.check(frame, number)
        frames = [parts[0]]
        following = iter(parts[1:])
        for frame in message.frames:
            frames.append(next(following) if frame is None else segment.view(frame))
        return frames

    def _segment(self, name: str) -> _Segment:
        with self._lock:
            segment = self._segments.get(name)
            if segment is not None:
                return segment
            segment = _open_segment(name)
            for stale in [s for s in self._segments.values() if s.unlinked()]:
                self._drop(stale)
            while len(self._segments) >= self.max_segments:
                self._drop(next(iter(self._segments.values())))
            self._segments[name] = segment
            return segment

    def _drop(self, segment: _Segment) -> None:
        del self._segments[segment.name]
        segment.close()

    def mapped(self) -> dict[str, tuple[int, int]]:
        """Segment name -> (address, bytes) of its data area in this process."""
        with self._lock:
            return {
                name: (segment.data.ctypes.data, segment.data_size)
                for name, segment in self._segments.items()
            }

    def close(self) -> None:
        """Drop every segment; tensors decoded from them stay valid."""
        with self._lock:
            for segment in list(self._segments.values()):
                self._drop(segment)

    def __enter__(self) -> SharedMemoryAttacher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse_control(control: memoryview, limits: Limits) -> ShmControl:
    body = control[len(MARKER) :]
    if body.nbytes > limits.max_header_bytes:
        raise DecodeError(
            f"control part of {body.nbytes} bytes exceeds the limit of {limits.max_header_bytes}"
        )
    try:
        head = _HEAD_DECODER.decode(body)
    except msgspec.DecodeError as e:
        raise DecodeError(f"malformed shared memory control part ({e})") from None
    if head.version != CONTROL_VERSION:
        raise DecodeError(
            f"shared memory control version {head.version} is not supported "
            f"(this receiver reads version {CONTROL_VERSION})"
        )
    try:
        message = _CONTROL_DECODER.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed shared memory control part ({e})") from None
    if len(message.frames) + 1 > limits.max_frames:
        raise DecodeError(
            f"{len(message.frames) + 1} frames exceed the limit of {limits.max_frames}"
        )
    return message


def drop_locals(error: BaseException) -> None:
    """Clear the locals of every frame in ``error``'s tracebacks (causes and contexts too),
    so views of shared memory held there die now, not when the exception does."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]
