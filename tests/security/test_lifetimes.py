"""Lifetimes and aliasing: what keeps which memory alive, and what a decoded tensor views.

- Decoded zero-copy tensors keep their frames alive after the caller drops them.
- ``copy=True`` tensors keep nothing alive and share no memory with the frames.
- Encoded payload frames keep the tensors' memory alive after the caller drops them.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import torch

from mmcodec.generated import multimodal as mm
from tests.security.samples import tensor_of

ITEMS = mm.MultiModalKwargsItems


def _pixels() -> torch.Tensor:
    return torch.arange(2 * 512, dtype=torch.float32).reshape(2, 512)  # 4 KiB: a frame


def _message() -> mm.MultiModalKwargsItems:
    return mm.MultiModalKwargsItems.from_hf_inputs(
        {"pixel_values": _pixels(), "grid": torch.tensor([[1, 2, 3], [4, 5, 6]])},
        {
            "pixel_values": mm.MultiModalFieldConfig.batched("image"),
            "grid": mm.MultiModalFieldConfig.batched("image"),
        },
    )


def _owned_frames() -> list[np.ndarray[Any, Any]]:
    """The message's frames, each copied into a numpy array (which, unlike bytes, weakrefs)."""
    return [np.frombuffer(bytes(f), dtype=np.uint8).copy() for f in mm.encode(_message())]


def _churn() -> None:
    """Allocate and fill memory of the frames' sizes, to reuse anything freed too early."""
    junk = [np.full(n, 0xAB, dtype=np.uint8) for n in (4096, 4096, 8192, 256) for _ in range(64)]
    del junk
    gc.collect()


def _assert_values(items: mm.MultiModalKwargsItems) -> None:
    expected = _pixels()
    for index in range(2):
        data = tensor_of(items, index, "pixel_values")
        assert isinstance(data, torch.Tensor)
        assert data.dtype == torch.float32 and data.shape == (512,)
        assert torch.equal(data, expected[index])
    grid = tensor_of(items, 1, "grid")
    assert isinstance(grid, torch.Tensor) and grid.tolist() == [4, 5, 6]


def test_decoded_views_keep_their_frames_alive() -> None:
    frames = _owned_frames()
    assert len(frames) == 2
    payload = weakref.ref(frames[1])
    decoded = mm.decode(frames, ITEMS)
    pixels = tensor_of(decoded, 0, "pixel_values")
    assert isinstance(pixels, torch.Tensor)
    assert pixels.data_ptr() == frames[1].ctypes.data  # a view, not a copy
    del frames
    _churn()
    assert payload() is not None  # the decoded tensors hold the payload frame
    _assert_values(decoded)
    del decoded, pixels
    gc.collect()
    assert payload() is None  # ... and nothing else does


def test_one_surviving_tensor_is_enough_to_keep_its_frame() -> None:
    frames = _owned_frames()
    payload = weakref.ref(frames[1])
    second = tensor_of(mm.decode(frames, ITEMS), 1, "pixel_values")
    del frames
    _churn()
    assert payload() is not None
    assert isinstance(second, torch.Tensor) and torch.equal(second, _pixels()[1])
    del second
    gc.collect()
    assert payload() is None


def test_decode_bytes_views_keep_the_buffer_alive() -> None:
    buffer = np.frombuffer(bytes(mm.encode_bytes(_message())), dtype=np.uint8).copy()
    alive = weakref.ref(buffer)
    decoded = mm.decode_bytes(buffer, ITEMS)
    pixels = tensor_of(decoded, 0, "pixel_values")
    assert isinstance(pixels, torch.Tensor)
    assert (pixels.data_ptr() - buffer.ctypes.data) % 64 == 0  # aligned within the buffer
    assert buffer.ctypes.data <= pixels.data_ptr() < buffer.ctypes.data + buffer.nbytes
    del buffer
    _churn()
    assert alive() is not None
    _assert_values(decoded)
    del decoded, pixels
    gc.collect()
    assert alive() is None


def test_copy_true_keeps_nothing_alive_and_shares_nothing() -> None:
    frames = _owned_frames()
    payload = weakref.ref(frames[1])
    decoded = mm.decode(frames, ITEMS, copy=True)
    pixels = tensor_of(decoded, 0, "pixel_values")
    assert isinstance(pixels, torch.Tensor)
    frames[1][:] = 0  # the frame changes; the copy does not
    assert torch.equal(pixels, _pixels()[0])
    pixels.add_(1)  # the copy is writable and changes alone
    assert not frames[1].any()
    del frames
    gc.collect()
    assert payload() is None
    _assert_values(mm.decode(_owned_frames(), ITEMS, copy=True))


def test_zero_copy_tensors_alias_writable_frames() -> None:
    # The mutability contract: without copy=True a decoded tensor IS the frame's bytes.
    frames = _owned_frames()
    decoded = mm.decode(frames, ITEMS)
    pixels = tensor_of(decoded, 0, "pixel_values")
    assert isinstance(pixels, torch.Tensor)
    frames[1].view(np.float32)[0] = -7.0
    assert pixels[0].item() == -7.0


def test_encoded_frames_keep_the_tensors_alive() -> None:
    pixels = _pixels()
    address = pixels.data_ptr()
    message = mm.MultiModalKwargsItems.from_hf_inputs(
        {"pixel_values": pixels}, {"pixel_values": mm.MultiModalFieldConfig.batched("image")}
    )
    frames = mm.encode(message)
    assert len(frames) == 2
    assert np.frombuffer(frames[1], dtype=np.uint8).ctypes.data == address  # zero copy
    tensor_alive = weakref.ref(pixels)
    del message, pixels
    gc.collect()
    assert tensor_alive() is None  # the frame holds the memory, not the tensor object
    _churn()
    expected = _pixels().numpy().tobytes()
    assert bytes(frames[1]) == expected
    assert np.frombuffer(frames[1], dtype=np.uint8).ctypes.data == address
    decoded = mm.decode(frames, ITEMS)
    del frames
    _churn()
    data = tensor_of(decoded, 1, "pixel_values")
    assert isinstance(data, torch.Tensor) and torch.equal(data, _pixels()[1])


def test_encode_bytes_is_a_copy_that_owns_its_memory() -> None:
    pixels = _pixels()
    buffer = mm.encode_bytes(
        mm.MultiModalKwargsItems.from_hf_inputs(
            {"pixel_values": pixels}, {"pixel_values": mm.MultiModalFieldConfig.batched("image")}
        )
    )
    pixels.zero_()  # changing the source after encode_bytes changes nothing in the buffer
    decoded = mm.decode_bytes(buffer, ITEMS)
    data = tensor_of(decoded, 0, "pixel_values")
    assert isinstance(data, torch.Tensor) and torch.equal(data, _pixels()[0])
