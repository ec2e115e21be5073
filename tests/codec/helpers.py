"""Shared helpers for the codec's behaviour tests: exact comparison and wire accounting."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import numpy as np
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime import codec as codec_module
from mmcodec.runtime.dtypes import BY_NAME
from mmcodec.runtime.tensors import EncodeContext
from mmcodec.runtime.wire import Envelope

DTYPE_NAMES: tuple[str, ...] = tuple(BY_NAME)


class _RowsContext(EncodeContext):
    """An encoder context that lays out every item list as rows."""

    def __init__(self, max_depth: int, columns: bool = False) -> None:
        super().__init__(max_depth, columns=False)


@contextlib.contextmanager
def rows_only() -> Iterator[None]:
    """Within it, encoders write every item list as rows (wire version 2), as encoders did
    before column lists: the messages an older sender sends, and the layout the tests that
    edit a message's rows expect. Not thread-safe (tests only)."""
    names = codec_module.__dict__  # the name SchemaCodec.encode looks up
    original = names["EncodeContext"]
    names["EncodeContext"] = _RowsContext
    try:
        yield
    finally:
        names["EncodeContext"] = original


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, as a flat uint8 tensor (bitwise comparison, NaN payloads too)."""
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    flat = t.detach().reshape(-1)
    dense = torch.empty(flat.shape, dtype=flat.dtype)  # stride 1, even for one element
    dense.copy_(flat)
    return dense.view(torch.uint8)


def random_tensor(dtype: torch.dtype, shape: Sequence[int], seed: int = 0) -> torch.Tensor:
    """A tensor of ``shape`` with random bytes viewed as ``dtype`` (only 0/1 for bool)."""
    itemsize = dtype.itemsize
    numel = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    raw = np.random.default_rng(seed).integers(0, 256, numel * itemsize, dtype=np.uint8)
    if dtype == torch.bool:
        raw %= 2
    flat = torch.from_numpy(raw) if numel else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(tuple(shape))


def assert_tensor_equal(actual: object, expected: torch.Tensor, where: str = "$") -> None:
    """Same class, dtype, shape and bytes; values also ``torch.equal`` where torch can say."""
    assert isinstance(actual, torch.Tensor), f"{where}: {type(actual).__name__} is not a tensor"
    assert type(actual) is torch.Tensor, f"{where}: {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
    assert not actual.requires_grad, f"{where}: decoded tensor requires grad"
    assert actual.device.type == "cpu", f"{where}: on {actual.device}"
    # torch's kernels assume alignment to the item size (complex128: 16 bytes).
    assert actual.data_ptr() % actual.element_size() == 0 or actual.numel() == 0, (
        f"{where}: {actual.dtype} data at {actual.data_ptr():#x} is misaligned"
    )
    assert torch.equal(bits(actual), bits(expected)), f"{where}: bytes differ"
    if expected.dtype.is_floating_point and expected.dtype.itemsize > 1:
        expected_values = expected.detach()
        if not bool(torch.isnan(expected_values).any()):
            assert torch.equal(actual, expected_values), f"{where}: values differ"


def assert_nested_equal(actual: object, expected: object, where: str = "$") -> None:
    """Nested tensors equal: tensors exactly, list vs tuple kept, int vs float kept."""
    if isinstance(expected, torch.Tensor):
        assert_tensor_equal(actual, expected, where)
        return
    assert type(actual) is type(expected), (
        f"{where}: {type(actual).__name__} != {type(expected).__name__}"
    )
    if isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple))
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_nested_equal(a, e, f"{where}[{i}]")
        return
    assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _slice_params(s: slice) -> tuple[object, ...]:
    return (type(s.start), s.start, type(s.stop), s.stop, type(s.step), s.step)


def assert_field_equal(actual: object, expected: mm.BaseMultiModalField, where: str) -> None:
    """Same field class and the same parameters, slices compared bound by bound."""
    assert type(actual) is type(expected), (
        f"{where}: {type(actual).__name__} != {type(expected).__name__}"
    )
    assert isinstance(actual, mm.BaseMultiModalField)
    assert type(actual.keep_on_cpu) is bool
    assert actual.keep_on_cpu == expected.keep_on_cpu, f"{where}.keep_on_cpu"
    if isinstance(expected, mm.FlatField):
        assert isinstance(actual, mm.FlatField)
        assert type(actual.dim) is int
        assert actual.dim == expected.dim, f"{where}.dim"
        assert type(actual.slices) is list
        assert len(actual.slices) == len(expected.slices), f"{where}.slices"
        for i, (a, e) in enumerate(zip(actual.slices, expected.slices, strict=True)):
            assert type(a) is type(e), f"{where}.slices[{i}]: {type(a).__name__}"
            if isinstance(e, slice):
                assert isinstance(a, slice)
                assert _slice_params(a) == _slice_params(e), f"{where}.slices[{i}]"
            else:  # a tuple or a list of slices, as it was given
                assert isinstance(a, (tuple, list)) and isinstance(e, (tuple, list))
                assert [_slice_params(x) for x in a] == [_slice_params(x) for x in e]
    if isinstance(expected, mm.SharedField):
        assert isinstance(actual, mm.SharedField)
        assert type(actual.batch_size) is int
        assert actual.batch_size == expected.batch_size, f"{where}.batch_size"


def assert_elem_equal(actual: object, expected: mm.MultiModalFieldElem, where: str = "$") -> None:
    assert type(actual) is mm.MultiModalFieldElem, f"{where}: {type(actual).__name__}"
    if expected.data is None:
        assert actual.data is None, f"{where}.data is not None"
    else:
        assert_nested_equal(actual.data, expected.data, f"{where}.data")
    assert_field_equal(actual.field, expected.field, f"{where}.field")
    assert actual == expected  # the domain's (strict) equality agrees


def assert_item_equal(actual: object, expected: mm.MultiModalKwargsItem, where: str = "$") -> None:
    assert type(actual) is mm.MultiModalKwargsItem, f"{where}: {type(actual).__name__}"
    assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
    for key, elem in expected.items():
        assert_elem_equal(actual[key], elem, f"{where}[{key!r}]")


def assert_items_equal(actual: object, expected: mm.MultiModalKwargsItems) -> None:
    assert type(actual) is mm.MultiModalKwargsItems, type(actual).__name__
    assert list(actual) == list(expected)
    for modality, items in expected.items():
        got = actual[modality]
        assert type(got) is list
        assert len(got) == len(items)
        for i, (a, e) in enumerate(zip(got, items, strict=True)):
            if e is None:
                assert a is None, f"$[{modality!r}][{i}] is not None"
            else:
                assert_item_equal(a, e, f"$[{modality!r}][{i}]")
    assert actual == expected


def header(frames: Sequence[Any]) -> Envelope:
    """Frame 0, decoded as the envelope (to read tensor runs, offsets, inline payloads)."""
    return msgspec.msgpack.decode(frames[0], type=Envelope)


def payload_bytes(frames: Sequence[Any]) -> int:
    """Bytes of tensor data on the wire: payload frames plus payloads inline in the header."""
    inline = 0
    for run in header(frames).tensors:
        if not isinstance(run.data, int):
            inline += run.data.nbytes
    return sum(memoryview(f).nbytes for f in frames[1:]) + inline


def address(buffer: Any) -> int:
    """The address of a buffer's first byte."""
    return int(np.frombuffer(buffer, dtype=np.uint8).ctypes.data)


def inside(t: torch.Tensor, buffer: Any) -> bool:
    """True when all of the tensor's bytes lie inside ``buffer``."""
    start = address(buffer)
    size = memoryview(buffer).nbytes
    end = t.data_ptr() + t.numel() * t.element_size()
    return start <= t.data_ptr() and end <= start + size


def single(
    data: mm.NestedTensors | None, field: mm.BaseMultiModalField
) -> mm.MultiModalKwargsItems:
    """One image item with one key, ``pixel_values``."""
    elem = mm.MultiModalFieldElem(data, field)
    return mm.MultiModalKwargsItems({"image": [mm.MultiModalKwargsItem({"pixel_values": elem})]})
