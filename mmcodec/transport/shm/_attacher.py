"""The receiver's side: checks a control part against the segment, holds its frames, views them."""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import traceback
import weakref
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import Limits
from mmcodec.transport._locks import is_locked, try_lock, unlock
from mmcodec.transport.shm._segment import (
    MAX_READERS,
    OWNER_LOCK,
    READER_LOCK,
    SEQUENCE,
    SEQUENCE_AT,
    TICKET,
    TICKET_LOCK,
    TICKETS_AT,
    Layout,
    check_name,
    open_segment,
    require_memfd,
)
from mmcodec.transport.shm._slots import Board
from mmcodec.transport.shm._wire import ShmControl, ShmFrame, parse_control

__all__ = ["DEFAULT_MAX_SEGMENT_BYTES", "SharedMemoryAttacher", "drop_locals"]

DEFAULT_MAX_SEGMENT_BYTES: Final = 64 << 30
"""The largest segment an attacher maps (it maps without populating)."""


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
    """One segment mapped by a receiver, as reader ``reader``: the segment read-only, its
    board read-write.

    Lives while the attacher caches it or any view of it lives (each view's finalizer
    holds it): its descriptor carries this process's locks, so it closes only when
    nothing is held any more.
    """

    __slots__ = (
        "__weakref__",
        "board",
        "data",
        "fd",
        "held",
        "layout",
        "mapping",
        "name",
        "reader",
    )

    def __init__(self, name: str, fd: int, board_fd: int, layout: Layout, reader: int) -> None:
        self.name = name
        self.fd = fd
        self.layout = layout
        self.reader = reader
        # Exactly what the layout declares (the sizes were checked against it), and not
        # populated: pages are touched only by the frames that are read. The segment is
        # sealed against writable mappings: decoded tensors are read-only memory.
        try:
            self.mapping = mmap.mmap(fd, layout.total, mmap.MAP_SHARED, mmap.PROT_READ)
            board = mmap.mmap(board_fd, layout.board_total, mmap.MAP_SHARED)
        except (OSError, OverflowError, ValueError) as e:
            raise DecodeError(f"cannot map shared memory segment {name} ({e})") from None
        self.board = Board(board, layout)
        pages = np.frombuffer(self.mapping, np.uint8, layout.data_size, layout.data)
        self.data: _SharedPages = pages.view(_SharedPages)
        self.held: set[int] = set()  # tickets with a live view here
        weakref.finalize(self, _close, fd, board_fd)

    def owner_alive(self) -> bool:
        try:
            return is_locked(self.fd, OWNER_LOCK)
        except OSError:
            return False

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

    def check_sequence(self, sequence: int) -> None:
        """A control part names a message the sender has staged: none from the future."""
        (latest,) = SEQUENCE.unpack_from(self.mapping, SEQUENCE_AT)
        if not 0 < sequence <= latest:
            sent = f"{latest} message{'s' if latest != 1 else ''}"
            raise DecodeError(
                f"shared memory control part: sequence {sequence} is "
                f"{'from the future' if sequence > latest else 'no message'} "
                f"(segment {self.name} has sent {sent}, numbered from 1)"
            )

    def hold(self, frames: list[tuple[int, ShmFrame]], sequence: int) -> None:
        """Take each frame's ticket lock, and check under it that the segment's table shows
        exactly this frame of message ``sequence`` with the control part's generation. If
        any frame fails, the message is refused and the others are released at once (this
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
                lock = TICKET_LOCK + frame.ticket
                if not try_lock(self.fd, lock, exclusive=False):  # being revoked right now
                    refused = refused or DecodeError(_revoked(number, frame, self.name))
                    continue
                shown = TICKET.unpack_from(self.mapping, TICKETS_AT + TICKET.size * frame.ticket)
                if shown[0] != frame.generation:
                    unlock(self.fd, lock)  # another message's region by now: not ours
                    refused = refused or DecodeError(_revoked(number, frame, self.name))
                elif shown[1:] != (sequence, frame.offset, frame.length):
                    unlock(self.fd, lock)
                    refused = refused or DecodeError(
                        _not_held(number, frame, sequence, shown, self.name)
                    )
                else:
                    ours.append(frame.ticket)
        except BaseException:
            for ticket in ours:
                unlock(self.fd, TICKET_LOCK + ticket)
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


def _close(fd: int, board_fd: int) -> None:
    for descriptor in (fd, board_fd):
        with contextlib.suppress(OSError):
            os.close(descriptor)


def _revoked(number: int, frame: ShmFrame, name: str) -> str:
    return (
        f"frame {number}: ticket {frame.ticket} of segment {name} was revoked by its sender "
        "before this reader took it (a reader that was gone, skipped it, or outlived the lease)"
    )


def _not_held(
    number: int, frame: ShmFrame, sequence: int, shown: tuple[int, ...], name: str
) -> str:
    _, held, offset, length = shown
    holds = f"{length} bytes at offset {offset} of message {held}" if held else "no frame"
    return (
        f"frame {number}: ticket {frame.ticket} of segment {name} holds {holds}, not what "
        f"the control part says ({frame.length} bytes at offset {frame.offset} of message "
        f"{sequence})"
    )


def _release(attachment: _Attachment, ticket: int) -> None:
    """The finalizer of a received frame: from any thread, during GC too.

    No Python lock, no socket, no allocation to speak of: it may run in the middle of
    anything. The release byte first (the sender's hint), then the lock (the truth).
    """
    attachment.board.release(ticket, attachment.reader)
    attachment.held.discard(ticket)
    with contextlib.suppress(OSError):  # the descriptor went first at interpreter exit
        unlock(attachment.fd, TICKET_LOCK + ticket)


def _attach(name: str, pid: int, fd: int, reader: int, max_segment_bytes: int) -> _Attachment:
    """Open and map segment ``name`` as reader ``reader`` (see
    :func:`~mmcodec.transport.shm._segment.open_segment` for what is checked first)."""
    segment, board, layout = open_segment(name, pid, fd, max_segment_bytes)
    try:
        if reader >= layout.readers:
            raise DecodeError(
                f"this attacher is reader {reader}, but segment {name} has "
                f"{layout.readers} reader{'s' if layout.readers > 1 else ''}"
            )
        attachment = _Attachment(name, segment, board, layout, reader)
    except BaseException:
        _close(segment, board)
        raise
    # The reader's slot lock says "a reader at this index is alive" (shared: load-balanced
    # workers with one reader index may share it).
    try_lock(segment, READER_LOCK + reader, exclusive=False)
    attachment.board.attached[reader] = 1  # after the lock: "came and went" needs it seen free
    return attachment


class SharedMemoryAttacher:
    """The receiver's side: maps each segment named by a control part once, and caches it.

    Hand it to ``recv(..., shm=attacher)``. ``reader`` is this receiver's index among the
    readers a fan-out pool sends to (0 for a one-reader pool). At most ``max_segments``
    stay mapped (the oldest is dropped first); when a new segment appears, segments whose
    senders have closed them are dropped. Segments larger than ``max_segment_bytes`` are
    refused. Dropping a segment never invalidates a decoded tensor: a mapping lives until
    its last view dies. Safe to share between threads.
    """

    def __init__(
        self,
        *,
        reader: int = 0,
        max_segments: int = 16,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
    ) -> None:
        require_memfd()
        if not 0 <= reader < MAX_READERS:
            raise ValueError(f"reader must be in 0..{MAX_READERS - 1}, not {reader}")
        if max_segments < 1:
            raise ValueError(f"max_segments must be at least 1, not {max_segments}")
        self.reader = reader
        self.max_segments = max_segments
        self.max_segment_bytes = max_segment_bytes
        # By name, pid and descriptor: a control part naming a known segment's name with
        # another process's descriptor never reaches the segment cached under that name.
        self._segments: dict[tuple[str, int, int], _Attachment] = {}
        self._lock = threading.Lock()  # only around the cache, never taken by a finalizer

    def frames(self, control: memoryview, parts: Sequence[Any], limits: Limits) -> list[Any]:
        """The codec frames of a shared-memory message: ``parts`` are the ZMQ parts after
        ``control`` (the header first). Everything is checked before any view is made:
        the control part against the segment's own state (its last sequence number, and
        per ticket the generation, message, offset and length it shows), so a control
        part that does not describe a message the sender sent, as it lies now, changes
        nothing."""
        message = parse_control(control, limits)
        from_zmq = 1 + sum(1 for frame in message.frames if frame is None)
        if len(parts) != from_zmq:
            raise DecodeError(
                f"control part announces {from_zmq} ZMQ parts after it (the header and "
                f"{from_zmq - 1} frames), the message has {len(parts)}"
            )
        check_name(message.segment)
        shared = [(n, f) for n, f in enumerate(message.frames, 1) if f is not None]
        if not shared:
            raise DecodeError(
                f"shared memory control part names no frame in segment {message.segment} "
                "(a sender puts at least one there)"
            )
        segment = self._segment(message)
        total = sum(_nbytes(part) for part in parts)
        for number, frame in shared:
            segment.check(frame, number)
            total += frame.length
        segment.check_sequence(message.sequence)
        segment.hold(shared, message.sequence)
        if total > limits.max_total_bytes:
            # Refused, but well formed: give the regions back (this reader's share) now.
            for _, frame in shared:
                _release(segment, frame.ticket)
            raise DecodeError(
                f"{total} bytes in frames exceed the limit of {limits.max_total_bytes}"
            )
        board = segment.board
        if segment.layout.readers > 1 and message.sequence > int(board.last_seq[self.reader]):
            board.last_seq[self.reader] = message.sequence
        frames = [parts[0]]
        following = iter(parts[1:])
        for placed in message.frames:
            frames.append(next(following) if placed is None else segment.view(placed))
        return frames

    def _segment(self, message: ShmControl) -> _Attachment:
        key = (message.segment, message.pid, message.fd)
        with self._lock:
            segment = self._segments.get(key)
            if segment is not None:
                return segment
            segment = _attach(*key, self.reader, self.max_segment_bytes)
            for stale in [k for k, s in self._segments.items() if not s.owner_alive()]:
                del self._segments[stale]
            while len(self._segments) >= self.max_segments:
                del self._segments[next(iter(self._segments))]
            self._segments[key] = segment
            return segment

    def mapped(self) -> dict[str, tuple[int, int]]:
        """Segment name -> (address, bytes) of its data area in this process."""
        with self._lock:
            return {
                segment.name: (segment.data.ctypes.data, segment.layout.data_size)
                for segment in self._segments.values()
            }

    def orphaned(self) -> list[str]:
        """The mapped segments whose sender is gone (its pool's lock is free: the process
        died or closed the pool). Each is dropped from the cache, so its memory goes back
        to the system once the tensors decoded from it die (they stay valid until then).
        A receiver that waits for messages calls this to learn that none will come."""
        with self._lock:
            gone = [k for k, s in self._segments.items() if not s.owner_alive()]
            return [self._segments.pop(key).name for key in gone]

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
