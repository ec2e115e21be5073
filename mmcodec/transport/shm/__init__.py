"""A shared-memory side channel for large frames between processes of one host (Linux).

Over ``ipc://`` ZMQ copies every byte twice through the kernel, and once more per
subscriber when it fans out. With this module the sender copies each large codec frame
once, into a shared segment it owns, and sends through ZMQ only a small *control* part
naming where the frame lies; every receiver decodes zero-copy views of the shared pages.
Opt-in on both sides::

    from mmcodec.transport import zmq as mmzmq
    from mmcodec.transport.shm import SharedMemoryAttacher, SharedMemoryPool

    pool = SharedMemoryPool()                       # sender: one sealed memfd segment
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

The segment (:mod:`._segment`)
    Two memfds, sealed so that no process can shrink or grow them: no SIGBUS for anyone
    who maps them, whatever another process does. The *segment* (header, a table of
    tickets, the data area) is also sealed against writes by anyone but the sender, whose
    own mapping predates the seal: readers map it read-only, and what they decoded can
    change only if the sender rewrites it. The *board* (each reader's slot, a release
    byte per ticket and reader) is what readers write, and holds only hints. Neither has
    a name in any file system: readers open them through ``/proc/<sender pid>/fd/<n>``,
    which the kernel allows to processes of the same user that may inspect the sender,
    and the kernel frees them with the last descriptor or mapping, however processes die.

    :meth:`SharedMemoryPool.stage` copies each frame of at least ``min_frame_bytes``
    into a free region (first fit, :mod:`._allocation`) and names it by a *ticket* and the
    ticket's current *generation*; the segment's table shows, per ticket, the generation
    and which message's frame it holds where. Frames that find no room go through ZMQ as
    before, so a full pool never loses or blocks a message.

Holding and releasing (why a region is never reused while someone reads it)
    The truth is kept by the kernel, in open-file-description byte locks on the segment
    (:mod:`mmcodec.transport._locks`): a reader takes a *shared* lock on its ticket's
    lock byte before it builds any view, and checks, under that lock, that the segment's
    table shows exactly the frame its control part describes (generation, message,
    offset, length); it drops the lock when the last view of the frame dies, right after
    setting its release byte. The sender reuses a region only after taking the ticket's
    *exclusive* lock, which the kernel grants only when no reader holds the shared one;
    under it the sender bumps the generation, so a reader that comes later (a stale copy
    of the message) sees the change and rejects the frame
    (:class:`~mmcodec.runtime.errors.DecodeError`, "was revoked") instead of reading
    memory that is being rewritten. Locks of a process that dies, by SIGKILL too, vanish
    with it, so a dead reader's holds free themselves.

    The board (:mod:`._slots`) only decides *when* the sender tries; the lock makes every
    try safe. The sender tries a ticket when all N release bytes are set (the usual case:
    no system call until then), and in a slower pass, at most every
    :data:`CHECK_INTERVAL_S`, for readers that will never release:

    * a reader that is *gone*: each attached reader holds a shared lock on its slot's lock
      byte and marks the slot as attached; the pass sees whether anyone holds it. A marked
      slot that every pass has found free for :data:`GONE_GRACE_S` (counted from the
      ticket's send, if later) gives up the ticket: about a second after a reader dies
      its share is back, and a reader restarted in its place has that second to attach;
    * a reader that *skipped* the message (fan-out): ZMQ delivers in order, so a reader
      whose slot shows a later sequence number than the message's never gets it (a PUB
      socket dropped it at its high-water mark, or the reader joined later). A reader
      writes its slot only for a message it took, after checking it against the segment;
      the sender ignores a slot past its own last message;
    * the *lease*: a ticket still not released ``lease`` seconds after its message was
      sent (readers that never started; default 10 s with ``readers > 1``, none with one
      reader, whose socket delivers or dies).

    A reader that holds a view holds the lock, and no pass takes it away. Ordering: lock
    calls are system calls, full barriers; the sender's copy and table entry precede its
    ZMQ send and a reader's first read follows its ZMQ receive.

Trust
    For peers on the same host, under the same user, that already trust each other with
    their memory. The structure (the codec header) still travels through ZMQ and is
    validated as usual, and the receiver checks every name, descriptor, seal, size,
    offset, length, ticket, generation and sequence number against the segment before it
    maps or builds anything (:mod:`._attacher`); but the tensors' bytes live in the
    sender's segment, and a sender that keeps writing it can change a tensor's values
    after it was decoded (a bool tensor validated as 0/1 could change). No other process
    can, and no process can resize it. Readers of one fan-out share a board: one can set
    another's release bytes (wasted tries, nothing more: the other's lock holds) or its
    slot (its undelivered messages are revoked early, never rewritten under it). Decoded
    tensors are read-only memory: writing one in place is a segmentation fault; decode
    with ``copy=True`` to mutate. Hence the receiver must opt in: without an attacher, a
    shared-memory message is a :class:`~mmcodec.runtime.errors.DecodeError`, and no peer
    can make a default receiver open anything. Nothing is pickled.

Lifetimes and crashes
    The sender may mutate or free a tensor whose frame went to shared memory as soon as
    ``send`` returns (it was copied). A decoded tensor keeps its region until it dies,
    however many messages follow, and stays valid when its sender dies or closes the pool.
    :meth:`SharedMemoryPool.close` (also run at garbage collection and interpreter exit)
    closes the segment; a sender killed by SIGKILL has it closed by the kernel. Either
    way nothing is left behind: the memory goes when the last reader's mapping does,
    and a reader learns that its sender is gone (by the owner's lock, which only a live
    pool holds, never by pid) from :meth:`SharedMemoryAttacher.orphaned`, which also
    drops the segment from its cache.

A pool is not thread-safe (one per sending thread, like sockets); an attacher may be
shared. The receive-side release runs in whichever thread drops the last view, during
garbage collection too: one byte store and one ``fcntl`` call.
"""

from __future__ import annotations

from mmcodec.transport.shm._allocation import ALIGNMENT, RegionAllocator
from mmcodec.transport.shm._attacher import (
    DEFAULT_MAX_SEGMENT_BYTES,
    SharedMemoryAttacher,
    drop_locals,
)
from mmcodec.transport.shm._legacy import ORPHAN_AGE_S as ORPHAN_AGE_S
from mmcodec.transport.shm._legacy import SEGMENT_DIR as SEGMENT_DIR
from mmcodec.transport.shm._legacy import sweep
from mmcodec.transport.shm._pool import (
    CHECK_INTERVAL_S,
    DEFAULT_FANOUT_LEASE_S,
    DEFAULT_MIN_FRAME_BYTES,
    DEFAULT_POOL_BYTES,
    DEFAULT_TICKETS,
    GONE_GRACE_S,
    SharedMemoryPool,
    Staged,
)
from mmcodec.transport.shm._segment import MAX_READERS, SharedMemoryUnavailable
from mmcodec.transport.shm._segment import MAX_TICKETS as MAX_TICKETS
from mmcodec.transport.shm._segment import SEGMENT_PREFIX as SEGMENT_PREFIX
from mmcodec.transport.shm._wire import CONTROL_VERSION as CONTROL_VERSION
from mmcodec.transport.shm._wire import MARKER, ShmControl, ShmFrame, is_control

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
