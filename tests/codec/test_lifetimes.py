"""Lifetimes: frames keep their source tensors alive; decoded views keep their frames alive."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import torch

from mmcodec.generated import multimodal as mm
from tests.codec.helpers import address, assert_nested_equal


def _elem(data: mm.NestedTensors) -> mm.MultiModalFieldElem:
    return mm.MultiModalFieldElem(data, mm.BatchedField())


def _churn() -> None:
    """Allocate and free memory of similar sizes, so that freed memory would be reused."""
    for _ in range(4):
        junk = [torch.full((50_000,), 7.0) for _ in range(4)]
        del junk
    gc.collect()


def test_frames_keep_the_source_tensor_alive() -> None:
    array = np.arange(50_000, dtype=np.float32)
    source = torch.from_numpy(array)
    owner = weakref.ref(array)
    expected = source.clone()
    frames = mm.encode(_elem(source))
    assert address(frames[1]) == source.data_ptr()
    del array, source
    _churn()
    assert owner() is not None  # the frame still holds the memory
    assert np.array_equal(np.frombuffer(frames[1], dtype=np.float32), expected.numpy())
    decoded = mm.decode(frames, mm.MultiModalFieldElem)
    assert_nested_equal(decoded.data, expected)
    del frames, decoded
    gc.collect()
    assert owner() is None  # and lets go of it once the frames are gone


def test_frames_keep_a_contiguous_copy_of_a_non_contiguous_source_alive() -> None:
    source = torch.arange(300 * 200, dtype=torch.float64).reshape(300, 200).t()
    expected = source.contiguous().clone()
    frames = mm.encode(_elem(source))
    del source
    _churn()
    assert np.array_equal(np.frombuffer(frames[1], dtype=np.float64), expected.reshape(-1).numpy())


def test_decoded_views_keep_their_frames_alive() -> None:
    tensors = [torch.arange(40_000, dtype=torch.int32), torch.tensor([1.5, 2.5])]
    encoded = mm.encode(_elem(list[mm.NestedTensors](tensors)))
    frames: list[Any] = [np.frombuffer(bytearray(f), dtype=np.uint8) for f in encoded]
    payload = weakref.ref(frames[1])
    decoded = mm.decode(frames, mm.MultiModalFieldElem)
    data: Any = decoded.data
    del encoded, frames, decoded
    _churn()
    assert payload() is not None
    assert_nested_equal(data, tensors)
    del data
    gc.collect()
    assert payload() is None


def test_decoded_views_keep_a_single_buffer_alive() -> None:
    tensor = torch.randn(100, 100).to(torch.bfloat16)
    buffer = np.frombuffer(mm.encode_bytes(_elem(tensor)), dtype=np.uint8).copy()
    owner = weakref.ref(buffer)
    decoded = mm.decode_bytes(buffer, mm.MultiModalFieldElem)
    data = decoded.data
    assert isinstance(data, torch.Tensor)
    assert address(buffer) <= data.data_ptr() < address(buffer) + buffer.nbytes
    del buffer, decoded
    _churn()
    assert owner() is not None
    assert_nested_equal(data, tensor)
    del data
    gc.collect()
    assert owner() is None
