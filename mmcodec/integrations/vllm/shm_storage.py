"""(b) The shared-memory processor cache's storage, with readers that view the segment.

vLLM 0.33's ``SingleWriterShmObjectStorage`` counts a read as done when ``get`` returns,
and from then on the writer may reuse the chunk: safe only because its serde copies the
tensors out. :class:`ZeroCopyShmObjectStorage` hands readers tensors that view the chunk
and keeps the chunk until the last of those views is gone:

- Each chunk's in-use flags are two counters (8 bytes instead of vLLM's 4): reads, as vLLM
  counts them (one per ``get``, for its reference counting), and live *leases*. A reader's
  ``get`` takes a lease on the chunk, under the readers' lock; the lease is a read-only
  numpy array over the chunk's memory that the decoded frames and tensors are slices of,
  so it dies with the last of them, and its finalizer gives the lease back.
- The writer frees (and so reuses) a chunk only when vLLM's condition holds *and* no lease
  is live. Eviction waits: a ``put`` that finds no room raises ``MemoryError`` as vLLM's
  does (vLLM's cache then sends the item uncached); nothing blocks.
- Values smaller than ``copy_below`` bytes are copied out instead (a copy of a few KB
  costs less than a lease, and frees the chunk at once: the ring frees in order, so one
  long-lived view holds back every chunk written after it).
- ``clear()`` forgets every key at once, but a chunk with live leases keeps its bytes: a
  handle issued before the clear still reads its own data until the writer's next
  ``put``, which marks those chunks invalid ("has been modified or is invalid"), as vLLM's
  reuse of the memory would.
- ``close()`` with live views: the call returns, the writer's segment name is removed at
  once, and this process keeps the segment mapped until its last view dies, so every
  view stays valid and readable; then the segment is unmapped. ``get`` and ``put`` after
  ``close()`` raise ``RuntimeError``.

Decoded tensors view shared memory that other readers read too: treat them as
read-only (the arrays under them are). The writer's own ``get`` (vLLM never calls it)
returns copies. A reader process that dies with live views leaves their chunks counted:
the writer cannot reuse them (vLLM stops the engine when a worker dies).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import suppress
from typing import Any, Final

import numpy as np
from vllm.distributed.device_communicators.shm_object_storage import (
    ShmObjectStorageHandle,
    SingleWriterShmObjectStorage,
    SingleWriterShmRingBuffer,
)

from mmcodec.integrations.vllm.shm_serde import ALIGNMENT, MmcodecSerde

__all__ = ["DEFAULT_COPY_BELOW", "ZeroCopyShmObjectStorage"]

DEFAULT_COPY_BELOW: Final = 64 << 10
"""Values whose data is smaller than this are copied out rather than viewed (see ``make
bench-vllm``, "shm cache")."""

_FLAG_BYTES: Final = 8
_READS: Final = slice(0, 4)
_LEASES: Final = slice(4, 8)
_INVALID_ID: Final = (-1).to_bytes(4, "little", signed=True)


def _i32(view: Any) -> int:
    return int.from_bytes(view, "little", signed=True)


def _add(segment: memoryview, at: int, delta: int) -> None:
    segment[at : at + 4] = (_i32(segment[at : at + 4]) + delta).to_bytes(4, "little", signed=True)


class _Mapping:
    """This process's mapping of the segment, the leases on it, and their counters.

    Leases are numpy arrays made from the mapping's address (``ctypes``), not from the
    segment's memoryview: they hold no buffer export on the mapping, so ``close`` can
    unmap it once the last lease is gone, from that lease's finalizer. Until then this
    object (held by every lease's finalizer) keeps the ring buffer, and so the mapping.
    """

    def __init__(self, ring_buffer: Any, lock: Any) -> None:
        self.ring_buffer = ring_buffer
        self.lock = lock
        buf = ring_buffer.shared_memory.buf
        anchor = ctypes.c_char.from_buffer(buf)
        self.address = ctypes.addressof(anchor)
        del anchor  # drop the export at once
        self.live = 0
        self.closing = False
        self._guard = threading.Lock()  # live, closing
        self._holding = threading.local()
        self._pending: list[int] = []

    @property
    def segment(self) -> memoryview:
        buf = self.ring_buffer.shared_memory.buf
        if buf is None:
            raise RuntimeError("the shared-memory storage is closed")
        return buf  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def locked(self) -> Iterator[memoryview]:
        """The readers' lock, held; lease returns met meanwhile on this thread wait for it."""
        # Marked before acquiring: a finalizer that a garbage collection runs on this
        # thread while it waits for or holds the lock must not wait for it (deadlock).
        self._holding.on = True
        try:
            with self.lock:
                segment = self.segment
                yield segment
                while self._pending:
                    _add(segment, self._pending.pop(), -1)
        finally:
            self._holding.on = False

    def lease(self, leases_at: int, start: int, length: int) -> np.ndarray[Any, Any]:
        """A read-only array over ``length`` bytes at ``start``; its death returns the lease."""
        raw = (ctypes.c_ubyte * length).from_address(self.address + start)
        array = np.frombuffer(memoryview(raw), dtype=np.uint8)
        array.flags.writeable = False
        with self._guard:
            self.live += 1
        weakref.finalize(array, self._give_back, leases_at).atexit = False
        return array

    def _give_back(self, leases_at: int) -> None:
        if getattr(self._holding, "on", False):
            self._pending.append(leases_at)  # applied before this thread releases the lock
        else:
            with self.locked() as segment:
                _add(segment, leases_at, -1)
        with self._guard:
            self.live -= 1
            unmap = self.closing and not self.live
        if unmap:
            self.ring_buffer.close()

    def close(self) -> None:
        with self._guard:
            self.closing = True
            unmap = not self.live
        if unmap:
            self.ring_buffer.close()
        elif self.ring_buffer.is_writer:  # the name goes now; the mapping with the last view
            with suppress(FileNotFoundError):
                self.ring_buffer.shared_memory.unlink()


class ZeroCopyShmObjectStorage(SingleWriterShmObjectStorage):  # type: ignore[misc]
    """vLLM's ``SingleWriterShmObjectStorage`` whose readers get views (see the module docstring).

    Same constructor and methods; ``serde_class`` must be :class:`MmcodecSerde` (or a
    subclass): it is what lays a value out so that it can be viewed. ``copy_below``: values
    with less data than this are copied out, not viewed.
    """

    def __init__(self, *args: Any, copy_below: int = DEFAULT_COPY_BELOW, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.ser_de, MmcodecSerde):
            raise TypeError(
                f"ZeroCopyShmObjectStorage needs serde_class=MmcodecSerde, not {self.serde_class!r}"
            )
        self.ser_de: MmcodecSerde
        self.flag_bytes = _FLAG_BYTES
        self.copy_below = copy_below
        self._mapping = _Mapping(self.ring_buffer, self._reader_lock)
        self._closed = False
        if self.is_writer:
            self._retired: set[int] = set()
            """Chunks of keys forgotten by clear() that still have live leases."""
            self._invalidate_retired = False

    # -- writer ---------------------------------------------------------------------------

    def put(self, key: str, value: Any) -> tuple[int, int]:
        self._check_open()
        if key in self.key_index:
            raise ValueError(f"Key '{key}' already exists in the storage.")
        serialized = self.ser_de.prepare(value)
        metadata_bytes = serialized.metadata_bytes
        # Room to start the data on a 64-byte boundary of the segment wherever it lands.
        buffer_size = self.flag_bytes + metadata_bytes + ALIGNMENT - 1 + serialized.data_bytes
        if buffer_size > self.max_object_size:
            raise ValueError(
                f"Serialized object size ({buffer_size} bytes) exceeds "
                f"max object size ({self.max_object_size} bytes)"
            )
        self._invalidate()
        try:
            address, monotonic_id = self.ring_buffer.allocate_buf(buffer_size)
        except MemoryError:
            self.free_unused()
            address, monotonic_id = self.ring_buffer.allocate_buf(buffer_size)
        ring = self.ring_buffer
        chunk = ring.DATA_OFFSET + address % ring.data_buffer_size + ring.MD_SIZE
        metadata_at = chunk + self.flag_bytes
        data_at = -(-(metadata_at + metadata_bytes) // ALIGNMENT) * ALIGNMENT
        segment = self._mapping.segment
        segment[chunk:metadata_at] = bytes(self.flag_bytes)
        segment[metadata_at : metadata_at + metadata_bytes] = serialized.metadata(
            data_at - metadata_at
        )
        serialized.write(segment, data_at)
        self.increment_writer_flag(monotonic_id)
        self.key_index[key] = (address, monotonic_id)
        self.id_index[monotonic_id] = key
        return address, monotonic_id

    def default_is_free_check(self, id: int, buf: memoryview) -> bool:
        if _i32(buf[_LEASES]):
            return False
        if id in self._retired:
            return True
        return super().default_is_free_check(id, buf)  # type: ignore[no-any-return]

    def free_unused(self) -> None:
        freed = self.ring_buffer.free_buf(self.default_is_free_check, 2 * self.max_object_size)
        self._forget(freed)

    def _forget(self, freed_ids: Iterable[int]) -> None:
        for freed_id in freed_ids:
            if freed_id in self._retired:
                self._retired.discard(freed_id)
                continue
            key = self.id_index.pop(freed_id)
            del self.key_index[key]
            del self.writer_flag[freed_id]

    def clear(self) -> None:
        if not self.is_writer:
            return
        self._retired.update(self.ring_buffer.metadata)
        self.key_index.clear()
        self.id_index.clear()
        self.writer_flag.clear()
        self._touched.clear()
        # Free what no lease holds now (all of it, usually: the ring then starts over at 0).
        self._forget(self.ring_buffer.free_buf(self.default_is_free_check, None))
        self._invalidate_retired = bool(self._retired)

    def _invalidate(self) -> None:
        """At the first put after a clear: handles of chunks still leased stop validating."""
        if not self._invalidate_retired:
            return
        self._invalidate_retired = False
        ring = self.ring_buffer
        segment = self._mapping.segment
        for retired_id in self._retired:
            header = ring.DATA_OFFSET + ring.metadata[retired_id] % ring.data_buffer_size
            segment[header : header + ring.ID_NBYTES] = _INVALID_ID

    # -- readers --------------------------------------------------------------------------

    def increment_reader_flag(self, data_view: memoryview) -> None:
        """vLLM's read count, in the first 4 of this storage's 8 flag bytes."""
        data_view[_READS] = (_i32(data_view[_READS]) + 1).to_bytes(4, "little", signed=True)

    def get(
        self,
        address: int,
        monotonic_id: int,
        signature: list[int] | None = None,
        key: str | None = None,
    ) -> Any:
        self._check_open()
        if self._reader_lock is None:  # the writer's own read: copies (it reuses chunks)
            return super().get(address, monotonic_id, signature, key)
        if not self.is_writer:
            # Reject forged handles before dereferencing the supplied address.
            self.verify_signature(key, address, monotonic_id, signature)
        ring = self.ring_buffer
        header = ring.DATA_OFFSET + address % ring.data_buffer_size
        chunk = header + ring.MD_SIZE
        with self._mapping.locked() as segment:
            found = _i32(segment[header : header + ring.ID_NBYTES])
            size = _i32(segment[header + ring.ID_NBYTES : chunk])
            self._validate_monotonic_id(address, monotonic_id, (found, size))
            end = min(header + size, ring.DATA_OFFSET + ring.data_buffer_size)
            metadata_at = chunk + self.flag_bytes
            _add(segment, chunk + _READS.start, 1)
            if end - metadata_at < self.copy_below:
                # Copied while the lock is held: the chunk cannot be reused meanwhile.
                return self.ser_de.read(segment[metadata_at:end], copy=True)
            _add(segment, chunk + _LEASES.start, 1)
        # The lease dies (and is given back) with the last frame or tensor that views it.
        data = self._mapping.lease(chunk + _LEASES.start, metadata_at, end - metadata_at)
        return self.ser_de.read(data, copy=False)

    # -- both -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the shared-memory storage is closed")

    def close(self) -> None:
        """Close; with live views, unmap when the last one dies (see the module docstring)."""
        if not self._closed:
            self._closed = True
            self._mapping.close()

    @classmethod
    def create_from_handle(cls, handle: ShmObjectStorageHandle) -> ZeroCopyShmObjectStorage:
        """A reader (or another writer object) of the storage ``handle`` describes."""
        ring_buffer = SingleWriterShmRingBuffer(*handle.ring_buffer_handle)
        return cls(
            max_object_size=handle.max_object_size,
            n_readers=handle.n_readers,
            ring_buffer=ring_buffer,
            serde_class=handle.serde_class,
            reader_lock=handle.reader_lock,
        )
