"""Zero copy, both directions: frames reference tensor memory; decoded tensors view frames.

Addresses prove it: ``data_ptr()`` against the address of the frame (plus the run's
offset), and against the received buffer, a file ``mmap`` or a shared-memory block.
"""

from __future__ import annotations

import gc
import mmap
import struct
import warnings
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime.tensors import DEFAULT_INLINE_THRESHOLD
from tests.codec.helpers import address, assert_nested_equal, header, inside


def _elem(data: mm.NestedTensors) -> mm.MultiModalFieldElem:
    return mm.MultiModalFieldElem(data, mm.BatchedField())


def _tensor(x: object) -> torch.Tensor:
    assert isinstance(x, torch.Tensor)
    return x


def _tensors(x: object) -> list[torch.Tensor]:
    assert isinstance(x, list)
    return [_tensor(t) for t in x]


# -- encoding: frames reference the tensors' memory -----------------------------------


def test_a_large_contiguous_tensor_is_sent_from_its_own_memory() -> None:
    t = torch.arange(4096, dtype=torch.float32)
    frames = mm.encode(_elem(t))
    assert len(frames) == 2
    (run,) = header(frames).tensors
    assert run.data == 1
    assert address(frames[1]) + run.offset == t.data_ptr()
    assert frames[1].nbytes == t.numel() * 4
    t[0] = 42.0  # the frame is a view: it sees the change (do not do this before sending)
    assert np.frombuffer(frames[1], dtype=np.float32)[0] == 42.0


def test_a_view_into_a_larger_storage_is_sent_from_its_own_memory() -> None:
    storage = torch.arange(10_000, dtype=torch.int64)
    view = storage[1000:3000]
    frames = mm.encode(_elem(view))
    (run,) = header(frames).tensors
    assert run.data == 1
    assert address(frames[1]) + run.offset == view.data_ptr()
    assert frames[1].nbytes == 2000 * 8  # only the bytes the view covers


def test_bf16_travels_without_a_copy() -> None:
    t = torch.randn(300, 300).to(torch.bfloat16)
    frames = mm.encode(_elem(t))
    (run,) = header(frames).tensors
    assert (run.dtype, run.shape) == ("bfloat16", [300, 300])
    assert address(frames[1]) + run.offset == t.data_ptr()


def test_the_inline_threshold_boundary() -> None:
    below = torch.zeros(DEFAULT_INLINE_THRESHOLD - 1, dtype=torch.uint8)
    at = torch.ones(DEFAULT_INLINE_THRESHOLD, dtype=torch.uint8)
    frames_below = mm.encode(_elem(below))
    assert len(frames_below) == 1
    (run,) = header(frames_below).tensors
    assert not isinstance(run.data, int) and run.data.nbytes == DEFAULT_INLINE_THRESHOLD - 1
    frames_at = mm.encode(_elem(at))
    assert len(frames_at) == 2
    assert address(frames_at[1]) == at.data_ptr()


def test_inline_payloads_are_copies_taken_when_encoding() -> None:
    small = torch.arange(5, dtype=torch.int64)
    frames = mm.encode(_elem(small))
    (run,) = header(frames).tensors
    assert bytes(run.data) == small.numpy().tobytes()
    small.fill_(-1)  # frame payloads view the tensor; an inline one no longer does
    decoded = mm.decode(frames, mm.MultiModalFieldElem).data
    assert isinstance(decoded, torch.Tensor) and decoded.tolist() == [0, 1, 2, 3, 4]


# -- decoding: tensors view the frames -------------------------------------------------


LARGE = (0, 1, 3)
"""Positions of the tensors of :func:`_message` above the inline threshold."""


def _message() -> tuple[list[torch.Tensor], list[memoryview]]:
    tensors = [
        torch.arange(5000, dtype=torch.float32),
        torch.randn(64, 64).to(torch.bfloat16),
        torch.arange(3, dtype=torch.int64),  # inline
        torch.tensor([True, False] * 700),
    ]
    return tensors, mm.encode(_elem(list[mm.NestedTensors](tensors)))


def test_decoded_tensors_view_writable_frames() -> None:
    tensors, frames = _message()
    received = [bytearray(f) for f in frames]
    decoded = _tensors(mm.decode(received, mm.MultiModalFieldElem).data)
    assert_nested_equal(decoded, tensors)
    payload_frames = received[1:]
    for i in LARGE:
        assert any(inside(decoded[i], f) for f in payload_frames)
    # Aliasing, not equality: writing the frame changes the tensor.
    run = header(frames).tensors[0]
    assert isinstance(run.data, int)
    frame = np.frombuffer(received[run.data], dtype=np.float32, count=1, offset=run.offset)
    frame[0] = -7.0
    assert decoded[0][0].item() == -7.0


def test_decoding_read_only_bytes_is_zero_copy_and_silent() -> None:
    tensors, frames = _message()
    received = [bytes(f) for f in frames]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decoded = _tensors(mm.decode(received, mm.MultiModalFieldElem).data)
        buffer = bytes(mm.encode_bytes(_elem(list[mm.NestedTensors](tensors))))
        from_buffer = _tensors(mm.decode_bytes(buffer, mm.MultiModalFieldElem).data)
    assert caught == []
    assert_nested_equal(decoded, tensors)
    assert_nested_equal(from_buffer, tensors)
    assert any(inside(decoded[0], f) for f in received[1:])
    assert all(inside(from_buffer[i], buffer) for i in LARGE)


def test_copy_true_owns_its_memory() -> None:
    tensors, frames = _message()
    received = [bytearray(f) for f in frames]
    decoded = _tensors(mm.decode(received, mm.MultiModalFieldElem, copy=True).data)
    assert_nested_equal(decoded, tensors)
    for t in decoded:
        assert not any(inside(t, f) for f in received)
    for f in received:
        f[:] = bytes(len(f))  # scribbling over the frames leaves the copies intact
    assert_nested_equal(decoded, tensors)
    buffer = mm.encode_bytes(_elem(list[mm.NestedTensors](tensors)))
    copied = _tensors(mm.decode_bytes(buffer, mm.MultiModalFieldElem, copy=True).data)
    assert not any(inside(t, buffer) for t in copied)
    assert_nested_equal(copied, tensors)


def test_unaligned_frames_are_copied_not_misread() -> None:
    t = torch.arange(2000, dtype=torch.float64)
    frames = mm.encode(_elem(t))
    shifted = bytearray(1 + frames[1].nbytes)
    shifted[1:] = frames[1]
    unaligned = memoryview(shifted)[1:]
    assert address(unaligned) % 8 != 0
    decoded = _tensor(mm.decode([frames[0], unaligned], mm.MultiModalFieldElem).data)
    assert_nested_equal(decoded, t)
    assert decoded.data_ptr() % 8 == 0


# -- the single buffer: alignment, files, shared memory -------------------------------


def _frame_table(buffer: Any) -> list[tuple[int, int]]:
    magic, _version, count = struct.unpack_from("<4sIQ", buffer, 0)
    assert magic == b"MMCB"
    return [struct.unpack_from("<QQ", buffer, 16 + 16 * i) for i in range(count)]


def test_single_buffer_payloads_are_64_byte_aligned() -> None:
    tensors = [
        torch.arange(n, dtype=dtype)
        for n, dtype in [(2001, torch.int8), (333, torch.float64), (2047, torch.int16)]
    ]
    item = mm.MultiModalKwargsItem(
        {f"k{i}": _elem(t) for i, t in enumerate(tensors)} | {"small": _elem(torch.ones(3))}
    )
    frames = mm.encode(item)
    buffer = mm.encode_bytes(item)
    table = _frame_table(buffer)
    assert len(table) == len(frames) == 4
    for (offset, length), frame in zip(table, frames, strict=True):
        assert offset % 64 == 0
        assert length == frame.nbytes
        assert bytes(buffer[offset : offset + length]) == bytes(frame)
    decoded = mm.decode_bytes(buffer, mm.MultiModalKwargsItem)
    base = address(buffer)
    for (offset, _), key in zip(table[1:], ["k0", "k1", "k2"], strict=True):
        t = _tensor(decoded[key].data)
        assert t.data_ptr() - base == offset
    assert decoded == item


@pytest.fixture
def encoded_file(tmp_path: Path) -> tuple[Path, list[torch.Tensor]]:
    tensors, _ = _message()
    path = tmp_path / "message.mmc"
    path.write_bytes(mm.encode_bytes(_elem(list[mm.NestedTensors](tensors))))
    return path, tensors


@pytest.fixture
def mapped(encoded_file: tuple[Path, list[torch.Tensor]]) -> Iterator[mmap.mmap]:
    with encoded_file[0].open("rb") as handle:
        view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    yield view
    gc.collect()
    view.close()  # raises BufferError if a decoded tensor still held the mapping


def test_decoding_from_a_file_mmap_is_zero_copy(
    encoded_file: tuple[Path, list[torch.Tensor]], mapped: mmap.mmap
) -> None:
    decoded = _tensors(mm.decode_bytes(mapped, mm.MultiModalFieldElem).data)
    assert_nested_equal(decoded, encoded_file[1])
    assert all(inside(decoded[i], mapped) for i in LARGE)
    copied = _tensors(mm.decode_bytes(mapped, mm.MultiModalFieldElem, copy=True).data)
    assert not any(inside(t, mapped) for t in copied)
    del decoded, copied


def test_decoding_from_shared_memory_is_zero_copy() -> None:
    tensors, _ = _message()
    buffer = mm.encode_bytes(_elem(list[mm.NestedTensors](tensors)))
    writer = shared_memory.SharedMemory(create=True, size=len(buffer))
    try:
        written = writer.buf
        assert written is not None
        written[: len(buffer)] = buffer
        reader = shared_memory.SharedMemory(name=writer.name)  # as another process would
        try:
            assert reader.buf is not None
            block = reader.buf[: len(buffer)]
            decoded = _tensors(mm.decode_bytes(block, mm.MultiModalFieldElem).data)
            try:
                assert_nested_equal(decoded, tensors)
                assert all(inside(decoded[i], block) for i in LARGE)
                # The writer's memory is the reader's memory: a write shows through.
                run = header(mm.encode(_elem(list[mm.NestedTensors](tensors)))).tensors[0]
                assert run.data == 1
                offset = _frame_table(buffer)[1][0] + run.offset
                written[offset : offset + 4] = np.float32(123.0).tobytes()
                assert decoded[0][0].item() == 123.0
            finally:
                del decoded, block
                gc.collect()
        finally:
            reader.close()  # raises BufferError if a decoded tensor still held the block
    finally:
        del written
        writer.close()
        writer.unlink()
