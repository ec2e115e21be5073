"""(b) The shared-memory cache: MmcodecSerde (no pickle) and ZeroCopyShmObjectStorage (views)."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Iterator
from multiprocessing import Lock, shared_memory
from typing import Any

import pytest
import torch
import vllm.multimodal.inputs as vi
from vllm.distributed.device_communicators.shm_object_storage import (
    SingleWriterShmObjectStorage,
    SingleWriterShmRingBuffer,
)

from mmcodec.integrations.vllm import MmcodecSerde, ZeroCopyShmObjectStorage
from mmcodec.payloads import PAYLOADS, qwen2_5_vl, small_items
from mmcodec.runtime.errors import DecodeError
from tests.vllm.pickle_spy import PickleSpy
from tests.vllm.strict import assert_same

MB = 1 << 20
QWEN_BYTES = 12_192_768  # one Qwen2.5-VL image's pixel_values


# -- the serde ------------------------------------------------------------------------------


def _through_serde(value: Any) -> Any:
    serde = MmcodecSerde()
    pieces, nbytes, metadata, metadata_bytes = serde.serialize(value)
    assert nbytes == sum(memoryview(p).nbytes for p in pieces)
    chunk = bytearray(metadata) + b"".join(bytes(memoryview(p).cast("B")) for p in pieces)
    assert len(metadata) == metadata_bytes
    return serde.deserialize(memoryview(chunk))


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_items_and_item_maps_round_trip_strictly_without_pickle(name: str) -> None:
    make: Any = PAYLOADS[name]
    items = make(2, api=vi)
    each = [item for entries in items.values() for item in entries]
    with PickleSpy() as spy:
        decoded_map = _through_serde(items)
        decoded_each = [_through_serde(item) for item in each]
    assert (spy.calls, spy.multimodal) == (0, 0)
    assert_same(decoded_map, items)
    for decoded, item in zip(decoded_each, each, strict=True):  # one value each
        assert_same(decoded, item)


def test_tensors_and_builtins_round_trip() -> None:
    tensor = torch.randn(6, 5, dtype=torch.float32).to(torch.bfloat16).t()  # not contiguous
    decoded = _through_serde(tensor)
    assert decoded.dtype == torch.bfloat16 and torch.equal(decoded, tensor)
    value = {"name": "Alice", "age": 30, "scores": [95, 87.5, None, True], b"k": b"\x00\xff"}
    assert _through_serde(value) == value
    # what changes: a tuple comes back a list, a bytearray bytes
    assert _through_serde((1, ("a", bytearray(b"xy")))) == [1, ["a", b"xy"]]
    assert _through_serde("x" * 1000) == "x" * 1000


class _Str(str):
    pass


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1, 2}, r"^set is not stored by MmcodecSerde"),
        (object(), r"^object is not stored"),
        (_Str("x"), r"^_Str is not stored"),
        ({(1, 2): 3}, r"^dict key of type tuple is not stored"),
        ([[{"x": torch.zeros(1)}]], r"^Tensor is not stored"),
        (vi.PlaceholderRange(0, 1), r"^PlaceholderRange is not stored"),
    ],
)
def test_anything_else_is_a_type_error(value: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        MmcodecSerde().serialize(value)


def _serialized(value: Any) -> bytearray:
    pieces, _, metadata, _ = MmcodecSerde().serialize(value)
    return bytearray(metadata) + b"".join(bytes(memoryview(p).cast("B")) for p in pieces)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:10], r"too short for its metadata"),
        (lambda b: b"XXXX" + b[4:], r"starts with b'XXXX' version 1, not b'MMSV' version 1"),
        (lambda b: b[:5] + b"\x09" + b[6:], r"unknown kind 9"),
        (lambda b: b[:12] + b"\x00\x00\x00\x00" + b[16:], r"stored value of 0 frames"),
        (lambda b: b[:8] + b"\xff\xff\xff\x7f" + b[12:], r"data offset 2147483647 outside"),
        (lambda b: b[: len(b) - 100], r"overruns the \d+-byte value"),
    ],
)
def test_damaged_values_raise_decode_error(damage: Any, message: str) -> None:
    data = damage(_serialized(qwen2_5_vl(0, api=vi)["image"][0]))
    with pytest.raises(DecodeError, match=message):
        MmcodecSerde().deserialize(memoryview(bytes(data)))


# -- the zero-copy storage --------------------------------------------------------------------


class _Store:
    """A writer and one reader of one segment, in this process."""

    def __init__(self, ring_bytes: int, max_object: int = 16 * MB) -> None:
        ring = SingleWriterShmRingBuffer(ring_bytes, create=True)
        self.writer = ZeroCopyShmObjectStorage(
            max_object_size=max_object, n_readers=1, ring_buffer=ring, serde_class=MmcodecSerde
        )
        handle = self.writer.handle()
        handle.reader_lock = Lock()
        self.reader = ZeroCopyShmObjectStorage.create_from_handle(handle)
        self.reader.copy_below = 64 << 10

    def put_get(self, key: str, value: Any) -> Any:
        address, monotonic_id = self.writer.put(key, value)
        return self.reader.get(address, monotonic_id, self.writer.get_signature(key), key)

    def handle_of(self, key: str) -> tuple[int, int, list[int], str]:
        address, monotonic_id = self.writer.key_index[key]
        return address, monotonic_id, self.writer.get_signature(key), key

    def leases(self, key: str) -> int:
        ring = self.writer.ring_buffer
        address = self.writer.key_index[key][0]
        at = ring.DATA_OFFSET + address % ring.data_buffer_size + ring.MD_SIZE + 4
        return int.from_bytes(ring.shared_memory.buf[at : at + 4], "little", signed=True)

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


@pytest.fixture
def store() -> Iterator[_Store]:
    made = _Store(ring_bytes=40 * MB)
    yield made
    gc.collect()
    made.close()


def _mapping_range(storage: ZeroCopyShmObjectStorage) -> tuple[int, int]:
    buf = storage.ring_buffer.shared_memory.buf
    anchor = ctypes.c_char.from_buffer(buf)
    start = ctypes.addressof(anchor)
    del anchor
    return start, start + len(buf)


def test_a_reader_views_the_segment_and_holds_a_lease(store: _Store) -> None:
    item = qwen2_5_vl(0, api=vi)["image"][0]
    got = store.put_get("qwen", item)
    assert_same(got, item)
    start, end = _mapping_range(store.reader)
    pixels = got["pixel_values"].data
    assert start <= pixels.data_ptr() < end
    assert pixels.data_ptr() % 64 == 0  # frames land 64-byte aligned in the segment
    assert store.leases("qwen") == 1
    del got, pixels
    gc.collect()
    assert store.leases("qwen") == 0


def test_small_values_are_copied_and_free_their_chunk_at_once(store: _Store) -> None:
    item = small_items(0, 1, api=vi)["image"][0]
    got = store.put_get("small", item)
    start, end = _mapping_range(store.reader)
    assert not start <= got["pixel_values"].data.data_ptr() < end
    assert store.leases("small") == 0
    store.writer.free_unused()
    assert not store.writer.is_cached("small")  # read once by the one reader: free
    assert_same(got, item)


def test_a_chunk_is_reused_only_after_its_last_view_died() -> None:
    store = _Store(ring_bytes=30 * MB)  # room for two Qwen images
    try:
        first, second, third = (qwen2_5_vl(seed, api=vi)["image"][0] for seed in (1, 2, 3))
        view = store.put_get("first", first)["pixel_values"].data  # the only view kept
        store.put_get("second", second)
        # vLLM's condition holds for "first" (its one reader read it), but a view lives:
        # eviction waits, and the put fails as vLLM's does when nothing can be freed.
        with pytest.raises(MemoryError):
            store.writer.put("third", third)
        assert store.writer.is_cached("first")
        assert torch.equal(view, first["pixel_values"].data)  # never overwritten
        del view
        gc.collect()
        assert_same(store.put_get("third", third), third)
        assert not store.writer.is_cached("first")
    finally:
        gc.collect()
        store.close()


def test_a_lease_given_back_while_the_lock_is_held_waits_for_it(store: _Store) -> None:
    got = store.put_get("qwen", qwen2_5_vl(0, api=vi)["image"][0])
    with store.reader._mapping.locked():
        del got  # the finalizer runs here, on the thread that holds the lock
        gc.collect()
        assert store.leases("qwen") == 1  # waiting: not applied under our own feet
    assert store.leases("qwen") == 0  # applied before the lock was released


def test_clear_keeps_viewed_chunks_until_their_views_die(store: _Store) -> None:
    item = qwen2_5_vl(4, api=vi)["image"][0]
    view = store.put_get("kept", item)
    stale = store.handle_of("kept")
    store.writer.clear()
    assert not store.writer.is_cached("kept")
    # A request still draining after the clear reads its own data ...
    assert_same(store.reader.get(*stale), item)
    # ... until the writer's next put, which neither reuses the viewed chunk nor lets
    # the stale handle validate.
    other = qwen2_5_vl(5, api=vi)["image"][0]
    assert_same(store.put_get("other", other), other)
    with pytest.raises(ValueError, match="has been modified or is invalid"):
        store.reader.get(*stale)
    assert_same(view, item)
    del view
    gc.collect()
    store.writer.free_unused()
    assert not store.writer._retired


def test_clear_with_nothing_viewed_starts_the_ring_over(store: _Store) -> None:
    for i in range(3):
        store.put_get(f"k{i}", f"value {i}")
    store.writer.clear()
    assert store.writer.put("new", "value") == (0, 3)


def test_close_with_live_views_keeps_them_readable_then_unmaps() -> None:
    store = _Store(ring_bytes=20 * MB)
    item = qwen2_5_vl(6, api=vi)["image"][0]
    got = store.put_get("qwen", item)
    handle = store.handle_of("qwen")
    name = store.writer.ring_buffer.shared_memory.name
    store.reader.close()
    store.writer.close()
    with pytest.raises(FileNotFoundError):  # the writer removed the segment's name at once
        shared_memory.SharedMemory(name=name)
    with pytest.raises(RuntimeError, match="the shared-memory storage is closed"):
        store.reader.get(*handle)
    assert_same(got, item)  # still mapped: the views read the bytes they were given
    reader_memory = store.reader.ring_buffer.shared_memory
    assert reader_memory.buf is not None
    del got
    gc.collect()
    assert reader_memory.buf is None  # the last view gone: unmapped


def test_the_writers_own_get_copies() -> None:
    ring = SingleWriterShmRingBuffer(20 * MB, create=True)
    writer = ZeroCopyShmObjectStorage(
        max_object_size=16 * MB, n_readers=1, ring_buffer=ring, serde_class=MmcodecSerde
    )
    try:
        item = qwen2_5_vl(7, api=vi)["image"][0]
        got = writer.get(*writer.put("qwen", item))
        start, end = _mapping_range(writer)
        assert not start <= got["pixel_values"].data.data_ptr() < end
        assert_same(got, item)
    finally:
        writer.close()


def test_the_storage_needs_the_mmcodec_serde() -> None:
    from vllm.distributed.device_communicators.shm_object_storage import MsgpackSerde

    ring = SingleWriterShmRingBuffer(MB, create=True)
    try:
        with pytest.raises(TypeError, match="needs serde_class=MmcodecSerde"):
            ZeroCopyShmObjectStorage(
                max_object_size=MB, n_readers=1, ring_buffer=ring, serde_class=MsgpackSerde
            )
    finally:
        ring.close()


def test_copy_mode_vllms_storage_with_the_serde_copies_without_pickle() -> None:
    ring = SingleWriterShmRingBuffer(20 * MB, create=True)
    writer = SingleWriterShmObjectStorage(
        max_object_size=16 * MB, n_readers=1, ring_buffer=ring, serde_class=MmcodecSerde
    )
    handle = writer.handle()
    handle.reader_lock = Lock()
    reader = SingleWriterShmObjectStorage.create_from_handle(handle)
    try:
        item = qwen2_5_vl(8, api=vi)["image"][0]
        with PickleSpy() as spy:
            address, monotonic_id = writer.put("qwen", item)
            got = reader.get(address, monotonic_id, writer.get_signature("qwen"), "qwen")
        assert (spy.calls, spy.multimodal) == (0, 0)
        start, end = _mapping_range(reader)
        assert not start <= got["pixel_values"].data.data_ptr() < end
        assert_same(got, item)
    finally:
        reader.close()
        writer.close()
