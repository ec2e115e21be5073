"""Codec messages over ZeroMQ (pyzmq): one codec message is one multipart ZMQ message.

Part ``i`` of the ZMQ message is frame ``i`` of the codec message (the msgpack header
first, then tensor payloads); on a ROUTER socket a routing-id part comes first. Works
with any socket type that carries multipart messages (PUSH/PULL, DEALER/ROUTER, PAIR,
PUB/SUB) over ``ipc://``, ``tcp://`` and ``inproc://``::

    from mmcodec.generated import multimodal as mm
    from mmcodec.transport import zmq as mmzmq

    tracker = mmzmq.send(push, mm, items)  # None when every part was copied
    items = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems)

Sending
    Parts of at least :data:`COPY_THRESHOLD` bytes go zero-copy (``copy=False``,
    ``track=True``): ZMQ reads the tensor's memory itself, later, on its I/O thread.
    Smaller parts are copied into ZMQ messages at once (tensors under the codec's inline
    threshold are already copied into the header by the encoder). :func:`send` returns a
    ``zmq.MessageTracker`` covering every zero-copy part, or None when nothing was sent
    zero-copy.

Buffer lifetime (the contract)
    *Memory is never freed early.* Each zero-copy part holds a reference to its frame
    until libzmq releases the message, and a frame (a memoryview of a numpy view of the
    tensor's storage) keeps that storage alive, so dropping the tensor right after
    :func:`send` is safe.

    *Do not mutate a sent tensor until its tracker is done.* Returning from :func:`send`
    means the message is queued, not sent: until ``tracker.done``, ZMQ may still read the
    memory (over ``inproc://`` the receiver's decoded tensors even alias it), so writing
    to the tensor, recycling its buffer into a pool, or ``resize_``-ing its storage
    corrupts what the peer receives. Wait with ``tracker.wait()`` or use :class:`Sender`,
    which holds in-flight messages and reports when none is left. A tracker completes
    only after every ZMQ message referencing the memory is closed; never keep the
    ``zmq.Frame`` objects of a send around (this module does not create any that it
    keeps), or the tracker cannot finish.

Receiving
    :func:`recv` receives with ``copy=False`` and decodes from the ``zmq.Frame`` parts
    (their buffer protocol exposes ZMQ's message memory), so tensors are views of that
    memory (no copy) and keep the frames, and so the memory, alive.
    They are read-only by contract; pass ``copy=True`` for tensors you will modify.
    A payload whose address does not suit its dtype's alignment (ZMQ gives no alignment
    guarantee) is copied by the decoder, so results are always correct.

Untrusted peers
    A malformed message raises :class:`~mmcodec.runtime.errors.DecodeError` (and, for
    bad content, nothing else); the message is consumed and the socket stays usable.
    ZMQ assembles a whole multipart message before :func:`recv` sees it, so bound what
    a peer can make it buffer on the socket: ``socket.setsockopt(zmq.MAXMSGSIZE, n)``
    (per part; libzmq disconnects a peer that exceeds it) and the high-water marks;
    ``limits`` then bounds frame count, sizes and nesting before anything is built.

Shared memory (same host, opt-in on both sides)
    ``send(..., shm=pool)`` with a :class:`~mmcodec.transport.shm.SharedMemoryPool` copies
    each payload frame of at least ``pool.min_frame_bytes`` into the pool's segment (one
    copy, instead of ZMQ's two through the kernel) and sends ``[control, header, other
    frames...]``, where the control part says where each frame lies; a frame that finds
    no room goes through ZMQ as above, and a message with nothing in the pool is sent
    plain. Frames copied into the pool free their tensors at once: mutate them whenever
    you like after ``send`` returns (the tracker covers only what ZMQ still reads).
    ``recv(..., shm=attacher)`` with a :class:`~mmcodec.transport.shm.SharedMemoryAttacher`
    decodes tensors that view the shared pages; without one a control part is a
    DecodeError, so a default receiver never opens anything a peer names. Fan-out: a pool
    made with ``readers=N`` and a PUB (or XPUB) socket with N SUB subscribers, each
    receiving with ``SharedMemoryAttacher(reader=i)``: one copy into shared memory, N
    readers of it; a region is reused once all N released it (or are gone, skipped the
    message, or outlived the pool's lease). Read :mod:`mmcodec.transport.shm` for the
    trust this requires and the release protocol.

Sockets are not thread-safe; neither are :class:`Sender` objects. The encode and
decode functions hold no shared state, so threads with their own sockets may share a
codec.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Final, Protocol, TypeVar

from mmcodec._extras import missing_extra

try:
    import zmq
except ModuleNotFoundError as e:
    raise missing_extra(e, __name__) from None

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits
from mmcodec.transport.shm import (
    SharedMemoryAttacher,
    SharedMemoryPool,
    Staged,
    drop_locals,
    is_control,
)

__all__ = [
    "COPY_THRESHOLD",
    "Codec",
    "Sender",
    "recv",
    "recv_routed",
    "send",
    "send_frames",
]

COPY_THRESHOLD: Final = 64 * 1024
"""Parts smaller than this many bytes are copied; larger ones are sent zero-copy.

Measured on a 2-core VM (pyzmq 27, libzmq 4.3.5, ``ipc://`` to another process, median
time of the send call over 2000 sends per size): a zero-copy part costs a fixed 8-12 us
(a ``zmq.Frame``, a tracker event, and later a message to pyzmq's garbage-collector
thread), a copied part about 1 us per 8-12 KiB (5 us at 64 KiB, 15 us at 128 KiB);
they cross between 64 and 96 KiB. That is pyzmq's own default ``zmq.COPY_THRESHOLD``,
below which a ``copy=False`` send is copied anyway.
"""

_T = TypeVar("_T")


class Codec(Protocol):
    """What the transport needs from a codec; a generated module satisfies it.

    ``from mmcodec.generated import multimodal as mm`` then pass ``mm``.
    """

    def encode(self, obj: Any, *, type: Any = None) -> list[memoryview]: ...

    def decode(
        self, frames: Sequence[Any], type: Any, *, copy: bool = False, limits: Limits = ...
    ) -> Any: ...


def send(
    socket: zmq.Socket[Any],
    codec: Codec,
    obj: Any,
    *,
    type: Any = None,
    routing_id: bytes | None = None,
    flags: int = 0,
    track: bool = True,
    shm: SharedMemoryPool | None = None,
) -> zmq.MessageTracker | None:
    """Encode ``obj`` and send it as one multipart message.

    ``routing_id`` (ROUTER sockets) is sent as the first part. ``flags`` applies to
    every part (e.g. ``zmq.NOBLOCK``: a full queue raises ``zmq.Again`` before any part
    is queued, as libzmq counts whole messages against the high-water mark). Returns the
    tracker of the zero-copy parts, or None when every part was copied; do not mutate
    the tensors of ``obj`` until it is done (see the module docstring).

    ``track=False`` skips the tracker (about 10 % of throughput for large messages over
    ``ipc://``) and returns None: only for senders that never mutate or recycle a tensor
    after sending it. The memory itself stays alive until ZMQ is done either way.

    ``shm`` (a pool; the receiver needs an attacher) copies large frames into shared
    memory instead: their tensors may be mutated as soon as this returns.
    """
    frames = codec.encode(obj, type=type)
    return _send_message(socket, frames, routing_id, flags, track, shm)[0]


def send_frames(
    socket: zmq.Socket[Any],
    frames: Sequence[Any],
    *,
    routing_id: bytes | None = None,
    flags: int = 0,
    track: bool = True,
    shm: SharedMemoryPool | None = None,
) -> zmq.MessageTracker | None:
    """Send already-encoded frames as one multipart message (see :func:`send`)."""
    return _send_message(socket, frames, routing_id, flags, track, shm)[0]


def _send_message(
    socket: zmq.Socket[Any],
    frames: Sequence[Any],
    routing_id: bytes | None,
    flags: int,
    track: bool,
    shm: SharedMemoryPool | None,
) -> tuple[zmq.MessageTracker | None, Sequence[Any]]:
    """Send one message; returns its tracker and the frames that went through ZMQ."""
    if not frames:
        raise ValueError("a message has at least one frame (the header)")
    if flags & zmq.SNDMORE:
        raise ValueError("flags must not include SNDMORE: a call sends one whole message")
    staged = shm.stage(frames) if shm is not None else None
    if staged is None:
        return _send_parts(socket, frames, routing_id, flags, track), frames
    parts = [staged.control, *staged.parts]
    return _send_parts(socket, parts, routing_id, flags, track, shm, staged), staged.parts


def _send_parts(
    socket: zmq.Socket[Any],
    parts: Sequence[Any],
    routing_id: bytes | None,
    flags: int,
    track: bool,
    shm: SharedMemoryPool | None = None,
    staged: Staged | None = None,
) -> zmq.MessageTracker | None:
    more = flags | zmq.SNDMORE
    queued = False
    try:
        if routing_id is not None:
            socket.send(routing_id, more)
            queued = True
        trackers: list[zmq.MessageTracker] = []
        last = len(parts) - 1
        for index, part in enumerate(parts):
            part_flags = more if index < last else flags
            nbytes = part.nbytes if type(part) is memoryview else memoryview(part).nbytes
            if nbytes >= COPY_THRESHOLD:
                tracker = socket.send(part, part_flags, copy=False, track=track)
                if track and tracker is not None:
                    trackers.append(tracker)
            else:
                socket.send(part, part_flags, copy=True)
            queued = True
    except BaseException:
        # Nothing queued (zmq.Again of a full queue, say): no receiver will ever see
        # these regions, so the pool takes them back. Once a part is queued, the
        # message may still be delivered: the regions stay out (a leak, never a reuse).
        if not queued and shm is not None and staged is not None:
            shm.cancel(staged)
        raise
    return zmq.MessageTracker(*trackers) if trackers else None


def recv(
    socket: zmq.Socket[Any],
    codec: Codec,
    type: type[_T],
    *,
    copy: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    flags: int = 0,
    shm: SharedMemoryAttacher | None = None,
) -> _T:
    """Receive one multipart message and decode a ``type`` from it, zero-copy.

    Raises DecodeError for a malformed message (consumed; the socket stays usable) and
    ``zmq.Again`` when ``flags`` has ``zmq.NOBLOCK`` or the socket's ``RCVTIMEO``
    expires with nothing to receive. ``shm`` accepts messages whose large frames lie in
    a sender's shared memory (see :mod:`mmcodec.transport.shm`); without it they are a
    DecodeError.
    """
    # zmq.Frame exposes its message memory through the buffer protocol: the decoder's
    # views of it keep the Frame (and so the message) alive. Passing the Frames as they
    # are lets the decoder check the part count before touching any part.
    parts = socket.recv_multipart(flags, copy=False)
    return _decode(codec, parts, type, copy, limits, shm)


def _decode(
    codec: Codec,
    parts: list[Any],
    type: type[_T],
    copy: bool,
    limits: Limits,
    shm: SharedMemoryAttacher | None,
) -> _T:
    first = parts[0].buffer if parts else None
    if first is None or not is_control(first):
        decoded: _T = codec.decode(parts, type, copy=copy, limits=limits)
        return decoded
    if shm is None:
        raise DecodeError(
            "the message holds frames in shared memory, but shared memory is not enabled "
            "on this receiver (pass shm=SharedMemoryAttacher() to accept them)"
        )
    handled = sys.exc_info()[1]  # the caller's own exception, if it calls us in an except
    frames = shm.frames(first, parts[1:], limits)
    try:
        decoded = codec.decode(frames, type, copy=copy, limits=limits)
    except Exception as e:
        # Release the shared regions now: the traceback would keep views of them. Only
        # what this decode created: the walk stops at the caller's exception.
        frames.clear()
        drop_locals(e, handled)
        raise
    return decoded


def recv_routed(
    socket: zmq.Socket[Any],
    codec: Codec,
    type: type[_T],
    *,
    copy: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    flags: int = 0,
    shm: SharedMemoryAttacher | None = None,
) -> tuple[bytes, _T]:
    """Receive on a ROUTER socket: ``(routing id, decoded value)``.

    Reply to the peer with ``send(socket, codec, reply, routing_id=routing_id)``.
    A message that holds nothing but a routing id is a DecodeError like any other.
    """
    parts = socket.recv_multipart(flags, copy=False)
    routing_id = parts[0].bytes
    return routing_id, _decode(codec, parts[1:], type, copy, limits, shm)


class Sender:
    """Sends codec messages on one socket and keeps each in flight until ZMQ is done with it.

    Each message's frames, and through them the storage of every tensor sent zero-copy,
    stay referenced here until the message's tracker reports done. ``pending()`` says
    how many messages ZMQ may still be reading; when ``wait()`` returns True none is, and
    every tensor sent so far may be mutated or its buffer recycled::

        sender = Sender(push, mm)
        sender.send(items)
        ...
        if sender.wait(timeout=5.0):
            recycle(buffers)

    With ``shm`` (a :class:`~mmcodec.transport.shm.SharedMemoryPool`), frames copied
    into shared memory are not held: only what ZMQ still reads zero-copy is.

    Not thread-safe (nor is the socket).
    """

    __slots__ = ("_codec", "_in_flight", "_shm", "_socket", "_type")

    def __init__(
        self,
        socket: zmq.Socket[Any],
        codec: Codec,
        *,
        type: Any = None,
        shm: SharedMemoryPool | None = None,
    ) -> None:
        self._socket = socket
        self._codec = codec
        self._type = type
        self._shm = shm
        self._in_flight: deque[tuple[zmq.MessageTracker, Sequence[Any]]] = deque()

    def send(
        self,
        obj: Any,
        *,
        type: Any = None,
        routing_id: bytes | None = None,
        flags: int = 0,
    ) -> zmq.MessageTracker | None:
        """Send ``obj`` (see :func:`send`); returns its tracker, or None if all was copied."""
        frames = self._codec.encode(obj, type=self._type if type is None else type)
        tracker, sent = _send_message(self._socket, frames, routing_id, flags, True, self._shm)
        self._reap()
        if tracker is not None and not tracker.done:
            self._in_flight.append((tracker, sent))
        return tracker

    def pending(self) -> int:
        """The number of sent messages whose memory ZMQ may still read."""
        self._reap()
        return len(self._in_flight)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every message sent so far is done; False if ``timeout`` s passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._in_flight:
            tracker = self._in_flight[0][0]
            remaining = -1.0 if deadline is None else deadline - time.monotonic()
            if deadline is not None and remaining <= 0:
                self._reap()
                return not self._in_flight
            try:
                tracker.wait(remaining)
            except zmq.NotDone:
                self._reap()
                return not self._in_flight
            self._in_flight.popleft()
        return True

    def _reap(self) -> None:
        in_flight = self._in_flight
        if in_flight:
            self._in_flight = deque(entry for entry in in_flight if not entry[0].done)
