"""Every wire dtype and shape, awkward tensor layouts, nested leaves and field parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime.dtypes import BY_NAME
from tests.codec.helpers import (
    DTYPE_NAMES,
    assert_elem_equal,
    assert_items_equal,
    assert_nested_equal,
    bits,
    random_tensor,
    single,
)

SHAPES = [(), (0,), (3, 0, 2), (1,), (7, 5), (70, 70)]

RoundTrip = Callable[[mm.MultiModalFieldElem], mm.MultiModalFieldElem]


def _frames(elem: mm.MultiModalFieldElem) -> mm.MultiModalFieldElem:
    return mm.decode(mm.encode(elem), mm.MultiModalFieldElem)


def _frames_copy(elem: mm.MultiModalFieldElem) -> mm.MultiModalFieldElem:
    return mm.decode([bytes(f) for f in mm.encode(elem)], mm.MultiModalFieldElem, copy=True)


def _buffer(elem: mm.MultiModalFieldElem) -> mm.MultiModalFieldElem:
    return mm.decode_bytes(bytes(mm.encode_bytes(elem)), mm.MultiModalFieldElem)


ROUND_TRIPS = [
    pytest.param(_frames, id="frames"),
    pytest.param(_frames_copy, id="frames-copy"),
    pytest.param(_buffer, id="buffer"),
]


def test_the_dtype_table_is_the_designed_one() -> None:
    expected = {
        "float64", "float32", "float16", "bfloat16",
        "int8", "int16", "int32", "int64",
        "uint8", "uint16", "uint32", "uint64",
        "bool", "complex32", "complex64", "complex128",
    }  # fmt: skip
    float8 = {
        n
        for n in dir(torch)
        if n.startswith("float8_") and isinstance(getattr(torch, n), torch.dtype)
    }
    assert float8, "this torch has float8 dtypes"
    assert set(BY_NAME) == expected | float8
    for name, info in BY_NAME.items():
        assert info.torch_dtype == getattr(torch, name)
        assert info.itemsize == info.torch_dtype.itemsize


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
def test_every_dtype_and_shape_round_trips_bitwise(dtype_name: str, shape: tuple[int, ...]) -> None:
    dtype = BY_NAME[dtype_name].torch_dtype
    tensor = random_tensor(dtype, shape, seed=len(shape) * 31 + DTYPE_NAMES.index(dtype_name))
    elem = mm.MultiModalFieldElem(tensor, mm.BatchedField())
    for round_trip in (_frames, _frames_copy, _buffer):
        decoded = round_trip(elem)
        assert_elem_equal(decoded, elem)
        assert isinstance(decoded.data, torch.Tensor)
        assert decoded.data.is_contiguous()


def test_float_specials_travel_bitwise() -> None:
    # NaN with a payload, signed zeros, infinities, subnormals: bytes, not values, travel.
    raw = torch.tensor([0x7FC0_0001, 0xFFC0_0000, 0x8000_0000, 0x7F80_0000, 1], dtype=torch.int64)
    tensor = raw.to(torch.int32).view(torch.float32)
    decoded = _frames(mm.MultiModalFieldElem(tensor, mm.BatchedField()))
    assert isinstance(decoded.data, torch.Tensor)
    assert torch.equal(bits(decoded.data), bits(tensor))
    assert decoded.data.view(torch.int32).tolist() == raw.to(torch.int32).tolist()


def test_bool_values_survive() -> None:
    tensor = torch.tensor([[True, False, True], [False, False, True]])
    decoded = _buffer(mm.MultiModalFieldElem(tensor, mm.BatchedField()))
    assert isinstance(decoded.data, torch.Tensor)
    assert decoded.data.tolist() == [[True, False, True], [False, False, True]]


def _noncontiguous_views() -> list[tuple[str, torch.Tensor]]:
    base = torch.arange(4 * 6 * 5, dtype=torch.float32).reshape(4, 6, 5)
    small = torch.arange(5, dtype=torch.int64).reshape(1, 5)
    big = torch.arange(300 * 300, dtype=torch.float64).reshape(300, 300)
    return [
        ("transpose", base[0].t()),
        ("permute", base.permute(2, 0, 1)),
        ("stepped", base[::2]),
        ("stepped-last-dim", base[..., ::2]),
        ("negative-offset-slice", base[1:3, 2:5, 1:4]),
        ("expand", small.expand(4, 5)),
        ("expand-0-stride-big", big[0].expand(200, 300)),
        ("big-transpose", big.t()),
        ("diagonal", torch.diagonal(big)),
        ("empty-slice", base[2:2]),
        ("bf16-stepped", base.to(torch.bfloat16)[:, ::3]),
    ]


@pytest.mark.parametrize("round_trip", ROUND_TRIPS)
@pytest.mark.parametrize(("name", "view"), _noncontiguous_views(), ids=lambda x: x)
def test_non_contiguous_views(round_trip: RoundTrip, name: str, view: torch.Tensor) -> None:
    assert not view.is_contiguous() or view.numel() == 0, name
    before = view.clone()
    decoded = round_trip(mm.MultiModalFieldElem(view, mm.BatchedField()))
    assert isinstance(decoded.data, torch.Tensor)
    assert decoded.data.is_contiguous()
    assert_nested_equal(decoded.data, before)
    assert torch.equal(view, before)  # the source is left as it was


def test_expanded_tensor_travels_at_its_logical_size() -> None:
    row = torch.arange(1000, dtype=torch.float32)
    frames = mm.encode(mm.MultiModalFieldElem(row.expand(8, 1000), mm.BatchedField()))
    assert [f.nbytes for f in frames[1:]] == [8 * 1000 * 4]


@pytest.mark.parametrize("round_trip", ROUND_TRIPS)
def test_requires_grad_tensors_are_detached(round_trip: RoundTrip) -> None:
    small = torch.tensor([1.5, -2.0], requires_grad=True)
    big = torch.randn(64, 64, requires_grad=True)
    computed = big * 2  # not a leaf: has a grad_fn
    data = [small, big, computed]
    decoded = round_trip(mm.MultiModalFieldElem(list[mm.NestedTensors](data), mm.BatchedField()))
    got_data: Any = decoded.data
    assert type(got_data) is list
    for got, want in zip(got_data, data, strict=True):
        assert isinstance(got, torch.Tensor)
        assert not got.requires_grad
        assert got.grad_fn is None
        assert_nested_equal(got, want.detach())


@pytest.mark.parametrize("round_trip", ROUND_TRIPS)
def test_zero_dim_tensors(round_trip: RoundTrip) -> None:
    data = (torch.tensor(7), torch.tensor(2.5, dtype=torch.bfloat16), torch.tensor(True))
    decoded = round_trip(mm.MultiModalFieldElem(data, mm.SharedField(3)))
    got: Any = decoded.data
    assert type(got) is tuple
    assert [t.shape for t in got] == [torch.Size([])] * 3
    assert [t.item() for t in got] == [7, 2.5, True]
    assert_nested_equal(decoded.data, data)


def _nested() -> mm.NestedTensors:
    t = torch.arange(6, dtype=torch.int16).reshape(2, 3)
    return [
        1,
        1.0,
        -0.0,
        float("inf"),
        (2, 3.5, (torch.zeros(0), [])),
        [t, (t[0], [4, [5.25, ()]])],
        (),
        [[]],
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        1e-310,
        torch.tensor([1.0, 2.0]),
    ]


@pytest.mark.parametrize("round_trip", ROUND_TRIPS)
def test_nested_lists_tuples_and_leaves_keep_their_types(round_trip: RoundTrip) -> None:
    data = _nested()
    decoded = round_trip(mm.MultiModalFieldElem(data, mm.BatchedField()))
    assert_nested_equal(decoded.data, data)
    got: Any = decoded.data
    assert type(got) is list
    assert [type(x) for x in got[:4]] == [int, float, float, float]
    assert str(got[2]) == "-0.0"
    assert type(got[4]) is tuple and type(got[4][2]) is tuple and type(got[4][2][1]) is list
    assert type(got[5][1]) is tuple and type(got[5][1][1][1][1]) is tuple
    assert got[8:11] == [2**63 - 1, -(2**63), 2**64 - 1]


@pytest.mark.parametrize("leaf", [0, -5, 3.25, float("-inf")])
def test_a_bare_leaf_is_data(leaf: int | float) -> None:
    elem = mm.MultiModalFieldElem(leaf, mm.SharedField(2))
    decoded = _frames(elem)
    assert type(decoded.data) is type(leaf)
    assert decoded.data == leaf


def test_none_data_and_none_items() -> None:
    present = mm.MultiModalKwargsItem(
        {
            "cached": mm.MultiModalFieldElem(None, mm.BatchedField()),
            "pixel_values": mm.MultiModalFieldElem(torch.ones(2, 2), mm.BatchedField()),
        }
    )
    items = mm.MultiModalKwargsItems({"image": [None, present, None], "video": [None]})
    for decoded in (
        mm.decode(mm.encode(items), mm.MultiModalKwargsItems),
        mm.decode_bytes(mm.encode_bytes(items), mm.MultiModalKwargsItems),
    ):
        assert_items_equal(decoded, items)
        assert decoded["image"][0] is None and decoded["video"] == [None]
    spec = mm.MultiModalFeatureSpec(
        data=None, modality="image", identifier="id", mm_position=mm.PlaceholderRange(3, 4)
    )
    got = mm.decode(mm.encode(spec), mm.MultiModalFeatureSpec)
    assert got.data is None and got.mm_hash is None and got.mm_position.is_embed is None
    assert got == spec


def _fields() -> list[tuple[str, mm.BaseMultiModalField, mm.NestedTensors]]:
    x = torch.arange(2 * 6 * 4, dtype=torch.float32).reshape(2, 6, 4)
    dim1 = mm.FlatField(
        [(slice(None), slice(0, 2)), (slice(None), slice(2, 6))], dim=1, keep_on_cpu=True
    )
    dim2 = mm.FlatField([(slice(None, None, None), slice(0, 2), slice(1, 4, 2))], dim=2)
    odd = mm.FlatField(
        [slice(None), slice(-3, None), slice(1, 9, 2), slice(None, -1, -1), slice(0, 0)]
    )
    return [
        ("batched-keep-on-cpu", mm.BatchedField(keep_on_cpu=True), x[0]),
        ("batched-default", mm.BatchedField(), x[0]),
        ("flat-dim1-tuple-slices", dim1, x[:, 2:6]),
        ("flat-dim2-three-slices", dim2, x[:, 0:2, 1:4:2]),
        ("flat-odd-slices", odd, x[1]),
        # vLLM's own serializer test builds slice groups as lists: they stay lists.
        ("flat-dim1-list-slices", mm.FlatField([[slice(None), slice(0, 2)]], dim=1), x[:, 0:2]),
        ("flat-empty-slices", mm.FlatField([], dim=3, keep_on_cpu=True), x),
        ("shared-7-keep", mm.SharedField(batch_size=7, keep_on_cpu=True), x),
        ("shared-0", mm.SharedField(batch_size=0), torch.tensor(5)),
    ]


@pytest.mark.parametrize("round_trip", ROUND_TRIPS)
@pytest.mark.parametrize(("name", "field", "data"), _fields(), ids=lambda x: x)
def test_every_field_variant_keeps_its_parameters(
    round_trip: RoundTrip, name: str, field: mm.BaseMultiModalField, data: mm.NestedTensors
) -> None:
    elem = mm.MultiModalFieldElem(data, field)
    decoded = round_trip(elem)
    assert_elem_equal(decoded, elem, name)


def test_flat_field_slices_given_as_tuple_come_back_as_the_same_slices() -> None:
    field = mm.FlatField((slice(0, 2), slice(2, 5)), dim=0)
    decoded = _frames(mm.MultiModalFieldElem(torch.zeros(3), field))
    assert isinstance(decoded.field, mm.FlatField)
    assert decoded.field.slices == [slice(0, 2), slice(2, 5)]
    assert decoded.field == field


def test_field_parameters_are_compared_not_just_classes() -> None:
    # The decoded field differs from another parameterisation: equality is not vacuous.
    elem = mm.MultiModalFieldElem(torch.zeros(2), mm.SharedField(7, keep_on_cpu=True))
    decoded = _frames(elem)
    assert decoded != mm.MultiModalFieldElem(torch.zeros(2), mm.SharedField(7))
    assert decoded != mm.MultiModalFieldElem(torch.zeros(2), mm.SharedField(6, keep_on_cpu=True))
    assert decoded == elem


def test_every_kind_of_value_in_one_message() -> None:
    fields = _fields()
    item = mm.MultiModalKwargsItem(
        {name: mm.MultiModalFieldElem(data, field) for name, field, data in fields}
    )
    item["nested"] = mm.MultiModalFieldElem(_nested(), mm.BatchedField())
    items = mm.MultiModalKwargsItems({"image": [item, None], "audio": [item]})
    assert_items_equal(mm.decode(mm.encode(items), mm.MultiModalKwargsItems), items)
    assert_items_equal(mm.decode_bytes(mm.encode_bytes(items), mm.MultiModalKwargsItems), items)
    single_item = single(torch.ones(1), mm.BatchedField())
    assert_items_equal(mm.decode(mm.encode(single_item), mm.MultiModalKwargsItems), single_item)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.float64])
def test_inline_payloads_are_aligned_for_torch(dtype: torch.dtype) -> None:
    # Inline payloads sit at any offset of the header; numpy calls complex128 aligned at
    # 8 bytes, torch needs 16. Shift the payload through every offset modulo 16.
    value = random_tensor(dtype, (3, 2), seed=1)
    for shift in range(16):
        padding = torch.zeros(shift, dtype=torch.int8)
        elem = mm.MultiModalFieldElem([padding, value], mm.BatchedField())
        for decoded in (_frames(elem), _buffer(elem)):
            got: Any = decoded.data
            assert got[1].data_ptr() % dtype.itemsize == 0, (shift, got[1].data_ptr())
            assert_nested_equal(got[1], value)
            assert torch.equal(got[1].clone(), value)
