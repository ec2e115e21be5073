"""A shared-memory side channel for large frames between processes of one host (Linux).

Over ``ipc://`` ZMQ copies every byte twice through the kernel, and once more per
subscriber when it fans out. With this module the sender copies each large codec frame
once, into a shared segment it owns, and sends through ZMQ only a small *control* part
naming where the frame lies; every receiver decodes zero-copy views of the shared pages.
Opt-in on both sides::

    from mmcodec.transport import zmq as mmzmq
    from mmcodec.transport.shm import SharedMemoryAttacher, SharedMemoryPool

    pool = SharedMemoryPool()                       # sender: one segment in /dev/shm
    mmzmq.send(push, mm, items, shm=pool)
    attacher = SharedMemoryAttacher()               # receiver: maps the segments it meets
    items = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)

    pool = SharedMemoryPool(readers=4)              # fan-out: one copy for 4 readers
    mmzmq.send(pub, mm, items, shm=pool)            # a PUB socket, 4 SUB sockets
    attacher = SharedMemoryAttacher(reader=i)       # reader i of 0..3

Sockets: with ``readers=1``, any socket that gives each message to one receiver
(PUSH/PULL, also to several load-balanced PULL workers; DEALER/ROUTER; PAIR). With
``readers=N``, a socket that gives each message to all N readers: PUB or XPUB with N SUB
or XSUB sockets, each reader with its own index.

The segment
    One file ``/dev/shm/mmcodec-<32 random hex digits>`` (mode 0600, its pages reserved
    with ``posix_fallocate`` so a full ``/dev/shm`` fails here, not with SIGBUS later)::

        0        header: magic, layout version, readers, tickets, data offset, data size
        64       one 64-byte slot per reader: the last message sequence number it took,
                 and whether a reader ever attached as that index
        ...      one 8-byte generation per ticket (the sender's)
        ...      one release byte per ticket and reader
        page     data area: 64-byte aligned regions, one per frame in flight

    :meth:`SharedMemoryPool.stage` copies each frame of at least ``min_frame_bytes``
    into a free region (first fit) and names it by a *ticket* and the ticket's current
    *generation*. Frames that find no room go through ZMQ as before, so a full pool never
    loses or blocks a message.

Holding and releasing (why a region is never reused while someone reads it)
    The truth is kept by the kernel, in open-file-description byte locks on the segment
    file (:mod:`mmcodec.transport._locks`): a reader takes a *shared* lock on its ticket's
    lock byte before it builds any view, and checks, under that lock, that the ticket's
    generation is still the one its control part names; it drops the lock when the last
    view of the frame dies, right after setting its release byte. The sender reuses a
    region only after taking the ticket's *exclusive* lock, which the kernel grants only
    when no reader holds the shared one; under it the sender bumps the generation, so a
    reader that comes later (a stale copy of the message) sees the change and rejects the
    frame (:class:`~mmcodec.runtime.errors.DecodeError`, "was revoked") instead of reading
    memory that is being rewritten. Locks of a process that dies, by SIGKILL too, vanish
    with it, so a dead reader's holds free themselves.

    The release bytes and everything below only decide *when* the sender tries; the lock
    makes every try safe. The sender tries a ticket when all N release bytes are set (the
    usual case: no system call until then), and in a slower pass, at most every
    :data:`CHECK_INTERVAL_S`, for readers that will never release:

    * a reader that is *gone*: each attached reader holds a shared lock on its slot's lock
      byte and marks the slot as attached; the pass sees whether anyone holds it. A marked
      slot that every pass has found free for :data:`GONE_GRACE_S` (counted from the
      ticket's send, if later) gives up the ticket: about a second after a reader dies
      its share is back, and a reader restarted in its place has that second to attach;
    * a reader that *skipped* the message (fan-out): ZMQ delivers in order, so a reader
      whose slot shows a later sequence number than the message's never gets it (a PUB
      socket dropped it at its high-water mark, or the reader joined later);
    * the *lease*: a ticket still not released ``lease`` seconds after its message was
      sent (readers that never started; default 10 s with ``readers > 1``, none with one
      reader, whose socket delivers or dies).

    A reader that holds a view holds the lock, and no pass takes it away. Ordering: lock
    calls are system calls, full barriers; the sender's copy precedes its ZMQ send and a
    reader's first read follows its ZMQ receive.

Trust
    For peers on the same host, under the same user, that already trust each other with
    their memory. The structure (the codec header) still travels through ZMQ and is
    validated as usual, and the receiver checks every name, size, offset, length, ticket
    and generation before it maps or builds anything; but the tensors' bytes live in the
    sender's segment, and a sender that keeps writing it can change a tensor's values after
    it was decoded (a bool tensor validated as 0/1 could change), or shrink the file so
    that reading it raises SIGBUS. Readers of one fan-out share a segment: one can set
    another's release bytes (wasted tries, nothing more: the other's lock holds) or its
    sequence slot (its undelivered messages are revoked early), but not make the sender
    rewrite a region another reader holds. Hence the receiver must opt in: without an
    attacher, a shared-memory message is a :class:`~mmcodec.runtime.errors.DecodeError`,
    and no peer can make a default receiver open a file. Nothing is pickled.

Lifetimes and crashes
    The sender may mutate or free a tensor whose frame went to shared memory as soon as
    ``send`` returns (it was copied). A decoded tensor keeps its region until it dies,
    however many messages follow, and stays valid when its sender dies or closes the pool.
    :meth:`SharedMemoryPool.close` (also run at garbage collection and interpreter exit)
    unlinks the file. A sender killed by SIGKILL cannot; its file is removed by
    :func:`sweep`, which every new pool runs, or by a receiver's
    :meth:`SharedMemoryAttacher.orphaned`. Both go by the owner's lock, which only a live
    pool holds, never by pid, so pid reuse cannot fool them.

A pool is not thread-safe (one per sending thread, like sockets); an attacher may be
shared. The receive-side release runs in whichever thread drops the last view, during
garbage collection too: one byte store and one ``fcntl`` call.
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
import time
import traceback
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import numpy as np

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import Limits
from mmcodec.transport._locks import LOCK_BASE, is_locked, try_lock, unlock

__all__ = [
    "ALIGNMENT",
    "CHECK_INTERVAL_S",
    "DEFAULT_FANOUT_LEASE_S",
    "DEFAULT_MAX_SEGMENT_BYTES",
    "DEFAULT_MIN_FRAME_BYTES",
    "DEFAULT_POOL_BYTES",
    "DEFAULT_TICKETS",
    "GONE_GRACE_S",
    "MARKER",
    "MAX_READERS",
    "RegionAllocator",
    "SharedMemoryAttacher",
    "SharedMemoryPool",
    "SharedMemoryUnavailable",
    "ShmControl",
    "ShmFrame",
    "Staged",
    "drop_locals",
    "is_control",
    "sweep",
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
"""Frames in flight at most (one generation and ``readers`` release bytes each)."""
MAX_TICKETS: Final = 1 << 20
MAX_READERS: Final = 64
DEFAULT_FANOUT_LEASE_S: Final = 10.0
"""With ``readers > 1``: seconds after which a ticket that some reader has not released
(and does not hold) is revoked. Readers that run keep up far sooner than this; it is for
readers that never started or went quiet."""
CHECK_INTERVAL_S: Final = 0.25
"""The sender looks for gone readers, skipped messages and expired leases at most this
often, whenever it stages a message or is asked how full it is."""
GONE_GRACE_S: Final = 1.0
"""A reader index that no process holds gives up a ticket once it has been free, at every
pass, for this long since the later of the ticket's send and the first pass that found it
free: a restarted reader that was sent the message has that long to attach and take it."""
DEFAULT_MAX_SEGMENT_BYTES: Final = 64 << 30
"""The largest segment file an attacher maps (it maps without populating)."""
ORPHAN_AGE_S: Final = 60.0
"""A segment file without a valid header and without an owner is removed by
:func:`sweep` only once it is this old (a pool may be writing its header right now)."""
ALIGNMENT: Final = 64
"""Every region starts at a multiple of this from the (page-aligned) data area."""

MARKER: Final = b"\xc1mmc-shm"
"""First bytes of a control part. 0xc1 is the one byte msgpack never uses, so no
msgpack document, and so no codec header (a msgpack array), can start with it."""
CONTROL_VERSION: Final = 2

# magic, layout version, readers, tickets, (reserved), data offset, data size
_LAYOUT = struct.Struct("<8sIIIIQQ")
_SEGMENT_MAGIC: Final = b"mmcshm\x00\x00"
_LAYOUT_VERSION: Final = 2
_READERS_OFFSET: Final = 64
_READER_SLOT: Final = 64  # a cache line each: the last sequence number, then reserved
_IN_USE: Final = 0
_RELEASED: Final = 1
_RELEASED_BYTE: Final = bytes([_RELEASED])

# Lock bytes (see mmcodec.transport._locks): the pool's owner, each reader slot, each ticket.
_OWNER_LOCK: Final = LOCK_BASE
_READER_LOCK: Final = LOCK_BASE + 1
_TICKET_LOCK: Final = LOCK_BASE + 1 + MAX_READERS


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


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each area of a segment lies; both sides compute it from readers and tickets."""

    readers: int
    tickets: int
    data_size: int

    @property
    def generations(self) -> int:
        return _READERS_OFFSET + _READER_SLOT * self.readers

    @property
    def states(self) -> int:
        return self.generations + 8 * self.tickets

    @property
    def data(self) -> int:
        return _align(self.states + self.tickets * self.readers, mmap.PAGESIZE)

    @property
    def total(self) -> int:
        return self.data + self.data_size

    def views(self, buffer: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The readers' sequence numbers and attach marks, the generations and the release
        bytes of a mapped segment."""
        slots = np.ndarray(
            (self.readers, 2), "<u8", buffer, _READERS_OFFSET, strides=(_READER_SLOT, 8)
        )
        generations = np.ndarray((self.tickets,), "<u8", buffer, self.generations)
        states = np.ndarray((self.tickets, self.readers), np.uint8, buffer, self.states)
        return slots[:, 0], slots[:, 1], generations, states


# -- the wire: the control part ---------------------------------------------------------------


class ShmFrame(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """Where one codec frame lies in the segment."""

    ticket: int
    generation: int
    """The ticket's generation when the frame was copied in; a reader takes the frame
    only while the segment still shows it."""
    offset: int
    """Bytes from the start of the data area."""
    length: int


class ShmControl(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """The control part after :data:`MARKER`: ``[version, segment, sequence, frames]``.

    ``sequence`` numbers the pool's messages from 1. ``frames`` describes codec frames
    1..N (the header, frame 0, always comes through ZMQ, right after the control part):
    ``None`` is "the next ZMQ part", a :class:`ShmFrame` a region of the segment.
    """

    version: int
    segment: str
    sequence: int
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


@dataclass(slots=True)
class _Outstanding:
    """A ticket handed out: its region, and its message's sequence number and send time."""

    offset: int
    sequence: int
    sent_ns: int


def _remove_segment(fd: int, path: str) -> None:
    """Unlink the file (receivers keep their mappings) and drop the owner's lock."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.close(fd)


_DEFAULT: Final[Any] = object()


class SharedMemoryPool:
    """The sender's segment: regions for large frames, reclaimed as readers release them.

    ``size`` bytes of data area (rounded down to :data:`ALIGNMENT`), ``readers`` readers
    per message (1 to :data:`MAX_READERS`; each message goes to all of them), ``tickets``
    frames in flight at most; frames of at least ``min_frame_bytes`` go through the pool.
    ``lease`` (seconds, or None for no lease) bounds how long a ticket that some reader
    neither released nor holds stays out (see the module docstring); the default is
    :data:`DEFAULT_FANOUT_LEASE_S` with several readers and None with one. Creating a pool
    first runs :func:`sweep`, removing the files of pools whose process died.

    Raises :class:`SharedMemoryUnavailable` off Linux, and ``OSError`` when ``/dev/shm``
    cannot hold the segment. Use as a context manager, or call :meth:`close`; garbage
    collection and interpreter exit close it too. Not thread-safe.
    """

    def __init__(
        self,
        size: int = DEFAULT_POOL_BYTES,
        *,
        readers: int = 1,
        min_frame_bytes: int = DEFAULT_MIN_FRAME_BYTES,
        tickets: int = DEFAULT_TICKETS,
        lease: float | None = _DEFAULT,
    ) -> None:
        _require_dev_shm()
        if size < ALIGNMENT:
            raise ValueError(f"size must be at least {ALIGNMENT} bytes, not {size}")
        if not 1 <= readers <= MAX_READERS:
            raise ValueError(f"readers must be in 1..{MAX_READERS}, not {readers}")
        if min_frame_bytes < 1:
            raise ValueError(f"min_frame_bytes must be at least 1, not {min_frame_bytes}")
        if not 1 <= tickets <= MAX_TICKETS:
            raise ValueError(f"tickets must be in 1..{MAX_TICKETS}, not {tickets}")
        if lease is _DEFAULT:
            lease = DEFAULT_FANOUT_LEASE_S if readers > 1 else None
        if lease is not None and not lease > 0:
            raise ValueError(f"lease must be positive seconds or None, not {lease}")
        sweep()
        self.readers = readers
        self.min_frame_bytes = min_frame_bytes
        self.tickets = tickets
        self.lease = lease
        self._lease_ns = None if lease is None else int(lease * 1e9)
        self._regions = RegionAllocator(size)
        self._layout = _Layout(readers, tickets, self._regions.size)
        self._data_offset = self._layout.data
        self.name = SEGMENT_PREFIX + secrets.token_hex(16)
        self.path = os.path.join(SEGMENT_DIR, self.name)
        self._fd, self._mapping = self._create(self._layout.total)
        self._finalizer = weakref.finalize(self, _remove_segment, self._fd, self.path)
        views = self._layout.views(self._mapping)
        self._last_seq, self._attached, self._generations, self._states = views
        self._generations[:] = 1
        # The header last: a file with a valid header always has a live owner's lock.
        _LAYOUT.pack_into(
            self._mapping,
            0,
            _SEGMENT_MAGIC,
            _LAYOUT_VERSION,
            readers,
            tickets,
            0,
            self._layout.data,
            self._regions.size,
        )
        self._free_tickets = list(range(tickets - 1, -1, -1))  # a stack: ticket 0 first
        self._outstanding: dict[int, _Outstanding] = {}
        self._sequence = 0
        self._gone_since: dict[int, int] = {}  # slot -> the first pass that found it free
        self._next_check_ns = 0
        self.revoked = 0
        """Tickets taken back from readers that were gone, skipped them, or outlived the lease."""

    def _create(self, total: int) -> tuple[int, mmap.mmap]:
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            if not try_lock(fd, _OWNER_LOCK, exclusive=True):  # a fresh file: never held
                raise OSError(f"cannot lock new segment {self.path}")
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
            return fd, mmap.mmap(fd, total, mmap.MAP_SHARED | populate)
        except BaseException:
            os.unlink(self.path)
            os.close(fd)
            raise

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
        """Tickets handed out and not yet taken back."""
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
        Regions that readers released are reclaimed first."""
        self._check_open()
        self._reap()
        self._sequence += 1
        return self._take(nbytes, self._sequence, time.monotonic_ns())

    def _take(self, nbytes: int, sequence: int, now_ns: int) -> tuple[int, int] | None:
        if not self._free_tickets:
            return None
        offset = self._regions.allocate(nbytes)
        if offset is None:
            return None
        ticket = self._free_tickets.pop()
        self._states[ticket] = _IN_USE  # before the message leaves (and so already)
        self._outstanding[ticket] = _Outstanding(offset, sequence, now_ns)
        return ticket, offset

    def _reap(self) -> None:
        """Take back every ticket all readers released; now and then, look for gone readers."""
        if not self._outstanding or self.closed:
            return
        if self.readers == 1:
            mapping, start = self._mapping, self._layout.states
            end = start + self.tickets
            position = mapping.find(_RELEASED_BYTE, start, end)
            while position != -1:
                self._reclaim(position - start)
                position = mapping.find(_RELEASED_BYTE, position + 1, end)
        else:
            for ticket in np.flatnonzero(self._states.all(axis=1)).tolist():
                self._reclaim(ticket)
        now = time.monotonic_ns()
        if now >= self._next_check_ns:
            self._reclaim_abandoned(now)

    def _reclaim(self, ticket: int) -> bool:
        """Take a ticket back if no reader holds it; False (try later) if one does."""
        if ticket not in self._outstanding:
            self._states[ticket] = _IN_USE  # a stray write for a ticket not in flight
            return False
        lock = _TICKET_LOCK + ticket
        if not try_lock(self._fd, lock, exclusive=True):
            return False
        try:
            # Under the lock: a reader that comes for the old frame later sees the change.
            self._generations[ticket] += 1
            self._states[ticket] = _IN_USE
        finally:
            unlock(self._fd, lock)
        self._regions.free(self._outstanding.pop(ticket).offset)
        self._free_tickets.append(ticket)
        return True

    def reclaim(self) -> int:
        """Look for gone readers, skipped messages and expired leases now, not at the next
        :data:`CHECK_INTERVAL_S`; returns how many tickets came back."""
        self._check_open()
        before = len(self._outstanding)
        self._reap()
        self._reclaim_abandoned(time.monotonic_ns())
        return before - len(self._outstanding)

    def _reclaim_abandoned(self, now: int) -> None:
        self._next_check_ns = now + int(CHECK_INTERVAL_S * 1e9)
        if not self._outstanding:
            return
        gone_since: list[int | None] = []
        attached = self._attached.tolist()
        for reader in range(self.readers):
            if is_locked(self._fd, _READER_LOCK + reader):
                self._gone_since.pop(reader, None)
                gone_since.append(None)
            elif attached[reader]:  # a reader came as this index, and none is there now
                gone_since.append(self._gone_since.setdefault(reader, now))
            else:
                gone_since.append(None)
        last_seq = self._last_seq.tolist() if self.readers > 1 else [0]
        lease, grace = self._lease_ns, int(GONE_GRACE_S * 1e9)
        for ticket, entry in list(self._outstanding.items()):
            if lease is not None and now - entry.sent_ns > lease:
                abandoned = True
            else:
                row = self._states[ticket].tolist()
                abandoned = all(
                    state == _RELEASED
                    or last_seq[reader] > entry.sequence
                    or (
                        (gone := gone_since[reader]) is not None
                        and now - max(gone, entry.sent_ns) >= grace
                    )
                    for reader, state in enumerate(row)
                )
            if abandoned and self._reclaim(ticket):
                self.revoked += 1

    def stage(self, frames: Sequence[Any]) -> Staged | None:
        """Copy the frames (after the header) that reach ``min_frame_bytes`` and fit into
        the pool; None when none did (send the frames as a plain message)."""
        self._check_open()
        self._reap()
        parts = [frames[0]]
        placed: list[ShmFrame | None] = []
        staged = Staged(bytearray(MARKER), parts, [])
        mapping, base = self._mapping, self._data_offset
        sequence = self._sequence + 1
        now = time.monotonic_ns()
        try:
            for frame in frames[1:]:
                view = _byte_view(frame)
                nbytes = view.nbytes
                slot = self._take(nbytes, sequence, now) if nbytes >= self.min_frame_bytes else None
                if slot is None:
                    parts.append(frame)
                    placed.append(None)
                    continue
                ticket, offset = slot
                staged.tickets.append(ticket)
                mapping[base + offset : base + offset + nbytes] = view  # the one copy
                generation = int(self._generations[ticket])
                placed.append(ShmFrame(ticket, generation, offset, nbytes))
        except BaseException:
            self.cancel(staged)  # a frame that is no contiguous buffer, say
            raise
        if not staged.tickets:
            return None
        self._sequence = sequence
        control = ShmControl(CONTROL_VERSION, self.name, sequence, placed)
        _ENCODER.encode_into(control, staged.control, -1)
        return staged

    def cancel(self, staged: Staged) -> None:
        """Take back the regions of a message that was never sent."""
        for ticket in staged.tickets:
            self._regions.free(self._outstanding.pop(ticket).offset)
            self._free_tickets.append(ticket)

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"shared memory pool {self.name} is closed")

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Unlink the segment and unmap it here (readers' views stay valid)."""
        if self.closed:
            return
        self._finalizer()
        del self._last_seq, self._attached, self._generations, self._states  # its exports
        self._mapping.close()

    def __enter__(self) -> SharedMemoryPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._outstanding)} in flight"
        readers = f", {self.readers} readers" if self.readers > 1 else ""
        return f"<SharedMemoryPool {self.name} {self.size:,} bytes{readers}, {state}>"


def sweep(directory: str = SEGMENT_DIR) -> list[str]:
    """Remove the segment files of pools whose process is gone; returns their names.

    A live pool holds an exclusive lock on its file's owner byte from the moment it
    creates the file, and writes the header only after taking it; the kernel drops the
    lock when the process dies (SIGKILL included). So a file with a valid header and no
    owner lock belongs to nobody and goes; a file whose owner lock is held is never
    touched, whoever holds it (a forked child that kept the descriptor counts as owner).
    Files of other users, of another layout version (their liveness cannot be told), and
    headerless files younger than :data:`ORPHAN_AGE_S` are left alone. Receivers' mappings
    and decoded views of a removed segment stay valid.
    """
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if not _SEGMENT_NAME.fullmatch(name):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                continue
            if is_locked(fd, _OWNER_LOCK):
                continue
            head = os.pread(fd, _LAYOUT.size, 0)
            if len(head) == _LAYOUT.size and head[:8] == _SEGMENT_MAGIC:
                if _LAYOUT.unpack(head)[1] != _LAYOUT_VERSION:
                    continue
            elif time.time() - info.st_mtime < ORPHAN_AGE_S:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            removed.append(name)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


# -- the receiver side --------------------------------------------------------------------------


class _SharedPages(np.ndarray):
    """A segment's data area, and each received frame: a view of it.

    A subclass for one reason: numpy makes a new array's base the first array up the
    chain of views that owns its memory or whose own base is of another class. The
    tensors of a frame are built from a memoryview of the frame's array; with plain
    arrays their base would skip to the whole data area, and the frame's array (and its
    finalizer) would die at once. With this class their base is the frame's array, which
    lives as long as they do (tests check the release waits for the last view).
    """


class _Attachment:
    """One segment mapped by a receiver, as reader ``reader``.

    Lives while the attacher caches it or any view of it lives (each view's finalizer
    holds it): its descriptor carries this process's locks, so it closes only when
    nothing is held any more.
    """

    __slots__ = (
        "__weakref__",
        "attached",
        "data",
        "fd",
        "generations",
        "held",
        "last_seq",
        "layout",
        "mapping",
        "name",
        "reader",
        "states_offset",
    )

    def __init__(self, name: str, fd: int, layout: _Layout, reader: int) -> None:
        self.name = name
        self.fd = fd
        self.layout = layout
        self.reader = reader
        # Exactly what the layout declares (the file's size was checked against it), and
        # not populated: pages are touched only by the frames that are read.
        try:
            self.mapping = mmap.mmap(fd, layout.total, mmap.MAP_SHARED)
        except (OSError, OverflowError, ValueError) as e:
            raise DecodeError(f"cannot map shared memory segment {name} ({e})") from None
        self.last_seq, self.attached, self.generations, _ = layout.views(self.mapping)
        self.states_offset = layout.states
        pages = np.frombuffer(self.mapping, np.uint8, layout.data_size, layout.data)
        self.data: _SharedPages = pages.view(_SharedPages)
        self.held: set[int] = set()  # tickets with a live view here
        weakref.finalize(self, os.close, fd)

    def owner_alive(self) -> bool:
        try:
            return is_locked(self.fd, _OWNER_LOCK)
        except OSError:
            return False

    def unlinked(self) -> bool:
        return os.fstat(self.fd).st_nlink == 0

    def check(self, frame: ShmFrame, number: int) -> None:
        if not 0 <= frame.ticket < self.layout.tickets:
            raise DecodeError(
                f"frame {number}: ticket {frame.ticket} outside 0..{self.layout.tickets - 1} "
                f"of segment {self.name}"
            )
        size = self.layout.data_size
        if frame.offset < 0 or frame.length < 0 or frame.offset + frame.length > size:
            raise DecodeError(
                f"frame {number}: {frame.length} bytes at offset {frame.offset} lie outside "
                f"the {size}-byte data area of segment {self.name}"
            )

    def hold(self, frames: list[tuple[int, ShmFrame]]) -> None:
        """Take each frame's ticket lock, and check its generation under it. If any frame
        was revoked, the message is refused and the others are released at once (this
        reader's share of them goes back to the sender, nothing stays pinned)."""
        tickets = [frame.ticket for _, frame in frames]
        for number, frame in frames:
            if frame.ticket in self.held or tickets.count(frame.ticket) > 1:
                raise DecodeError(
                    f"frame {number}: ticket {frame.ticket} of segment {self.name} is held "
                    "already (a message cannot name a region twice)"
                )
        ours: list[int] = []
        refused: DecodeError | None = None
        try:
            for number, frame in frames:
                lock = _TICKET_LOCK + frame.ticket
                if not try_lock(self.fd, lock, exclusive=False):  # being revoked right now
                    refused = refused or DecodeError(_revoked(number, frame, self.name))
                elif int(self.generations[frame.ticket]) != frame.generation:
                    unlock(self.fd, lock)  # another message's region by now: not ours
                    refused = refused or DecodeError(_revoked(number, frame, self.name))
                else:
                    ours.append(frame.ticket)
        except BaseException:
            for ticket in ours:
                unlock(self.fd, _TICKET_LOCK + ticket)
            raise
        self.held.update(ours)
        if refused is not None:
            for ticket in ours:
                _release(self, ticket)
            raise refused

    def view(self, frame: ShmFrame) -> memoryview:
        """The frame's bytes, zero-copy; releases the ticket when the last view dies."""
        region = self.data[frame.offset : frame.offset + frame.length]
        weakref.finalize(region, _release, self, frame.ticket)
        return memoryview(region)  # type: ignore[arg-type]


def _revoked(number: int, frame: ShmFrame, name: str) -> str:
    return (
        f"frame {number}: ticket {frame.ticket} of segment {name} was revoked by its sender "
        "before this reader took it (a reader that was gone, skipped it, or outlived the lease)"
    )


def _release(attachment: _Attachment, ticket: int) -> None:
    """The finalizer of a received frame: from any thread, during GC too.

    No Python lock, no socket, no allocation to speak of: it may run in the middle of
    anything. The release byte first (the sender's hint), then the lock (the truth).
    """
    layout = attachment.layout
    position = attachment.states_offset + ticket * layout.readers + attachment.reader
    with contextlib.suppress(ValueError):  # unmapped already (interpreter exit): nothing to do
        attachment.mapping[position] = _RELEASED
    attachment.held.discard(ticket)
    with contextlib.suppress(OSError):  # the descriptor went first at interpreter exit
        unlock(attachment.fd, _TICKET_LOCK + ticket)


def _check_layout(name: str, head: bytes, file_size: int, max_segment_bytes: int) -> _Layout:
    """The layout the segment's header declares, after checking it against the file."""
    if len(head) < _LAYOUT.size:
        raise DecodeError(f"shared memory segment {name} is too short for its header")
    magic, version, readers, tickets, _, data_offset, data_size = _LAYOUT.unpack(head)
    if magic != _SEGMENT_MAGIC:
        raise DecodeError(f"segment {name} is not an mmcodec segment (magic {magic!r})")
    if version != _LAYOUT_VERSION:
        raise DecodeError(f"segment {name} has layout version {version}, not {_LAYOUT_VERSION}")
    if not 1 <= readers <= MAX_READERS:
        raise DecodeError(f"segment {name}: reader count {readers} outside 1..{MAX_READERS}")
    if not 1 <= tickets <= MAX_TICKETS:
        raise DecodeError(f"segment {name}: ticket count {tickets} outside 1..{MAX_TICKETS}")
    layout = _Layout(readers, tickets, data_size)
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
    if file_size != layout.total:
        raise DecodeError(
            f"segment {name} is {file_size:,} bytes, but its header declares {layout.total:,}"
        )
    return layout


def _open_segment(name: str, reader: int, max_segment_bytes: int) -> _Attachment:
    """Map segment ``name`` of ``/dev/shm`` as reader ``reader``, after checking the name,
    the file and its layout; nothing is mapped before the file's size matches its header."""
    if not _SEGMENT_NAME.fullmatch(name):
        raise DecodeError(
            f"shared memory segment name {name[:80]!r} is not 'mmcodec-' and 32 hex digits"
        )
    path = os.path.join(SEGMENT_DIR, name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise DecodeError(
            f"shared memory segment {name} does not exist (its sender closed it?)"
        ) from None
    except OSError as e:
        raise DecodeError(f"cannot open shared memory segment {name}: {e.strerror}") from None
    try:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise DecodeError(f"shared memory segment {name} is not a regular file")
            if info.st_uid != os.geteuid():
                raise DecodeError(f"shared memory segment {name} belongs to another user")
            head = os.pread(fd, _LAYOUT.size, 0)
        except OSError as e:
            raise DecodeError(f"cannot read shared memory segment {name}: {e.strerror}") from None
        layout = _check_layout(name, head, info.st_size, max_segment_bytes)
        if reader >= layout.readers:
            raise DecodeError(
                f"this attacher is reader {reader}, but segment {name} has "
                f"{layout.readers} reader{'s' if layout.readers > 1 else ''}"
            )
        attachment = _Attachment(name, fd, layout, reader)
    except BaseException:
        os.close(fd)
        raise
    # The reader's slot lock says "a reader at this index is alive" (shared: load-balanced
    # workers with one reader index may share it).
    try_lock(fd, _READER_LOCK + reader, exclusive=False)
    attachment.attached[reader] = 1  # after the lock: "came and went" needs the lock seen free
    return attachment


class SharedMemoryAttacher:
    """The receiver's side: maps each segment named by a control part once, and caches it.

    Hand it to ``recv(..., shm=attacher)``. ``reader`` is this receiver's index among the
    readers a fan-out pool sends to (0 for a one-reader pool). At most ``max_segments``
    stay mapped (the oldest is dropped first); when a new segment appears, segments whose
    senders have closed them are dropped. Segment files larger than ``max_segment_bytes``
    are refused. Dropping a segment never invalidates a decoded tensor: a mapping lives
    until its last view dies. Safe to share between threads.
    """

    def __init__(
        self,
        *,
        reader: int = 0,
        max_segments: int = 16,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
    ) -> None:
        _require_dev_shm()
        if not 0 <= reader < MAX_READERS:
            raise ValueError(f"reader must be in 0..{MAX_READERS - 1}, not {reader}")
        if max_segments < 1:
            raise ValueError(f"max_segments must be at least 1, not {max_segments}")
        self.reader = reader
        self.max_segments = max_segments
        self.max_segment_bytes = max_segment_bytes
        self._segments: dict[str, _Attachment] = {}
        self._lock = threading.Lock()  # only around the cache, never taken by a finalizer

    def frames(self, control: memoryview, parts: Sequence[Any], limits: Limits) -> list[Any]:
        """The codec frames of a shared-memory message: ``parts`` are the ZMQ parts after
        ``control`` (the header first). Everything is checked before any view is made."""
        message = _parse_control(control, limits)
        from_zmq = 1 + sum(1 for frame in message.frames if frame is None)
        if len(parts) != from_zmq:
            raise DecodeError(
                f"control part announces {from_zmq} ZMQ parts after it (the header and "
                f"{from_zmq - 1} frames), the message has {len(parts)}"
            )
        segment = self._segment(message.segment)
        shared = [(n, f) for n, f in enumerate(message.frames, 1) if f is not None]
        total = sum(_nbytes(part) for part in parts)
        for number, frame in shared:
            segment.check(frame, number)
            total += frame.length
        segment.hold(shared)
        if total > limits.max_total_bytes:
            # Refused, but well formed: give the regions back (this reader's share) now.
            for _, frame in shared:
                _release(segment, frame.ticket)
            raise DecodeError(
                f"{total} bytes in frames exceed the limit of {limits.max_total_bytes}"
            )
        if segment.layout.readers > 1 and message.sequence > int(segment.last_seq[self.reader]):
            segment.last_seq[self.reader] = message.sequence
        frames = [parts[0]]
        following = iter(parts[1:])
        for placed in message.frames:
            frames.append(next(following) if placed is None else segment.view(placed))
        return frames

    def _segment(self, name: str) -> _Attachment:
        with self._lock:
            segment = self._segments.get(name)
            if segment is not None:
                return segment
            segment = _open_segment(name, self.reader, self.max_segment_bytes)
            for stale in [s for s in self._segments.values() if s.unlinked()]:
                del self._segments[stale.name]
            while len(self._segments) >= self.max_segments:
                del self._segments[next(iter(self._segments))]
            self._segments[name] = segment
            return segment

    def mapped(self) -> dict[str, tuple[int, int]]:
        """Segment name -> (address, bytes) of its data area in this process."""
        with self._lock:
            return {
                name: (segment.data.ctypes.data, segment.layout.data_size)
                for name, segment in self._segments.items()
            }

    def orphaned(self) -> list[str]:
        """The mapped segments whose sender is gone (its pool's lock is free: the process
        died or closed the pool). Each is dropped from the cache and its file removed, so
        a sender killed by SIGKILL leaves nothing behind once its readers looked; tensors
        decoded from it stay valid. A receiver that waits for messages calls this to learn
        that none will come."""
        with self._lock:
            gone = [s for s in self._segments.values() if not s.owner_alive()]
            for segment in gone:
                del self._segments[segment.name]
                if not segment.unlinked():
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(SEGMENT_DIR, segment.name))
            return [segment.name for segment in gone]

    def close(self) -> None:
        """Drop every segment; tensors decoded from them stay valid."""
        with self._lock:
            self._segments.clear()

    def __enter__(self) -> SharedMemoryAttacher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _nbytes(part: Any) -> int:
    buffer = getattr(part, "buffer", part)  # a zmq.Frame exposes its memory as .buffer
    try:
        return memoryview(buffer).nbytes
    except TypeError:
        return 0  # not a buffer: the codec rejects it with its own message


def _parse_control(control: memoryview, limits: Limits) -> ShmControl:
    body = control[len(MARKER) :]
    if body.nbytes > limits.max_header_bytes:
        raise DecodeError(
            f"control part of {body.nbytes} bytes exceeds the limit of {limits.max_header_bytes}"
        )
    # A control part is three levels deep; msgspec's recursion limit (RecursionError) stops
    # deeper input in C, after work proportional to the bytes read.
    try:
        head = _HEAD_DECODER.decode(body)
    except (msgspec.DecodeError, RecursionError) as e:
        raise DecodeError(f"malformed shared memory control part ({_reason(e)})") from None
    if head.version != CONTROL_VERSION:
        raise DecodeError(
            f"shared memory control version {head.version} is not supported "
            f"(this receiver reads version {CONTROL_VERSION})"
        )
    try:
        message = _CONTROL_DECODER.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
        raise DecodeError(f"malformed shared memory control part ({_reason(e)})") from None
    if len(message.frames) + 1 > limits.max_frames:
        raise DecodeError(
            f"{len(message.frames) + 1} frames exceed the limit of {limits.max_frames}"
        )
    return message


def _reason(error: BaseException) -> str:
    return "nested too deeply" if isinstance(error, RecursionError) else str(error)


def drop_locals(error: BaseException, handled: BaseException | None = None) -> None:
    """Clear the locals of the finished frames in ``error``'s tracebacks and those of the
    exceptions chained to it, so views of shared memory held there die now, not when the
    exception does. ``handled`` is the exception the caller was handling when the failed
    call began (``sys.exception()`` then): the walk stops there, so nothing the caller
    owns is touched, only what the failed call itself created."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or current is handled or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]
