"""Values the encoder refuses: each is an EncodeError naming the path to the bad value.

Also the device path (tensors not on the CPU are moved there, once per distinct tensor),
proven without a GPU by a tensor subclass that reports another device.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import pytest
import torch

from mmcodec.generated import multimodal as mm
from tests.codec.helpers import address, assert_nested_equal, single

PIXELS = "$['image'][0]['pixel_values'].data"


def _quantized() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates quantized tensors
        return torch.quantize_per_tensor(torch.rand(3), 0.1, 0, torch.quint8)


def _csr() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: sparse CSR support is in beta
        return torch.eye(3).to_sparse_csr()


def _odd_dtype(name: str) -> torch.Tensor | None:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        return None
    try:
        return torch.empty(4, dtype=dtype)
    except (RuntimeError, TypeError):
        return None


def _bad_tensors() -> list[Any]:
    cases: list[Any] = [
        pytest.param(
            torch.eye(3).to_sparse(),
            "torch.sparse_coo tensors are not supported; convert to dense first",
            id="sparse-coo",
        ),
        pytest.param(
            _csr(),
            "torch.sparse_csr tensors are not supported; convert to dense first",
            id="sparse-csr",
        ),
        pytest.param(
            _quantized(), "quantized tensors (torch.quint8) are not supported", id="quantized"
        ),
        pytest.param(
            torch.empty(3, device="meta"),
            "meta tensors hold no data and cannot be encoded",
            id="meta",
        ),
    ]
    for name in ("uint1", "uint4", "int4", "bits8", "float4_e2m1fn_x2"):
        tensor = _odd_dtype(name)
        if tensor is not None:
            message = f"dtype torch.{name} has no stable byte layout and cannot be encoded"
            cases.append(pytest.param(tensor, message, id=name))
    return cases


BAD_TENSORS = _bad_tensors()


def test_some_unsupported_dtype_is_constructible() -> None:
    assert any(p.id in ("uint1", "uint4", "int4", "bits8") for p in BAD_TENSORS)


def _raises(obj: Any, path: str, message: str, **kwargs: Any) -> None:
    with pytest.raises(mm.EncodeError) as info:
        mm.encode(obj, **kwargs)
    assert (info.value.path, info.value.message) == (path, message)
    assert str(info.value) == f"{path}: {message}"
    with pytest.raises(mm.EncodeError) as again:
        mm.encode_bytes(obj, **kwargs)
    assert str(again.value) == str(info.value)


@pytest.mark.parametrize(("tensor", "message"), BAD_TENSORS)
def test_unencodable_tensor_as_element_data(tensor: torch.Tensor, message: str) -> None:
    _raises(single(tensor, mm.BatchedField()), PIXELS, message)


@pytest.mark.parametrize(("tensor", "message"), BAD_TENSORS)
def test_unencodable_tensor_deep_in_nested_data(tensor: torch.Tensor, message: str) -> None:
    good = torch.zeros(2)
    data: list[mm.NestedTensors] = [good, (1, [2.5, tensor]), good]
    items = single(good, mm.BatchedField())
    second = mm.MultiModalKwargsItem(
        {
            "ok": mm.MultiModalFieldElem(good, mm.BatchedField()),
            "pixel_values": mm.MultiModalFieldElem(data, mm.BatchedField()),
        }
    )
    items["video"] = [None, second]
    _raises(items, "$['video'][1]['pixel_values'].data[1][1][1]", message)


@pytest.mark.parametrize(("tensor", "message"), BAD_TENSORS)
def test_unencodable_tensor_in_a_plain_tensor_field(tensor: torch.Tensor, message: str) -> None:
    spec = mm.MultiModalFeatureSpec(
        data=mm.MultiModalKwargsItem(
            {"pixel_values": mm.MultiModalFieldElem(torch.ones(3), mm.BatchedField())}
        ),
        modality="image",
        identifier="x",
        mm_position=mm.PlaceholderRange(0, 3, is_embed=tensor),
    )
    _raises(spec, "$.mm_position.is_embed", message)


def test_a_bad_tensor_referenced_twice_is_reported_where_it_first_appears() -> None:
    bad = torch.eye(2).to_sparse()
    item = mm.MultiModalKwargsItem(
        {
            "a": mm.MultiModalFieldElem(torch.ones(2), mm.BatchedField()),
            "b": mm.MultiModalFieldElem([torch.ones(1), bad], mm.BatchedField()),
            "c": mm.MultiModalFieldElem(bad, mm.BatchedField()),
        }
    )
    _raises(
        item,
        "$['b'].data[1]",
        "torch.sparse_coo tensors are not supported; convert to dense first",
    )


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        pytest.param(
            [torch.zeros(2), True],
            f"{PIXELS}[1]",
            "bool is not a nested tensor (tensor, int, float, list or tuple)",
            id="bool-leaf",
        ),
        pytest.param(
            (1, [2.0, False]),
            f"{PIXELS}[1][1]",
            "bool is not a nested tensor (tensor, int, float, list or tuple)",
            id="deep-bool-leaf",
        ),
        pytest.param(
            "pixels",
            PIXELS,
            "str is not a nested tensor (tensor, int, float, list or tuple)",
            id="str",
        ),
        pytest.param(
            [torch.zeros(1), {"a": torch.zeros(1)}],
            f"{PIXELS}[1]",
            "dict is not a nested tensor (tensor, int, float, list or tuple)",
            id="dict",
        ),
        pytest.param(
            [torch.zeros(1).numpy()],
            f"{PIXELS}[0]",
            "ndarray is not a nested tensor (tensor, int, float, list or tuple)",
            id="ndarray",
        ),
    ],
)
def test_values_that_are_not_nested_tensors(data: Any, path: str, message: str) -> None:
    _raises(single(data, mm.BatchedField()), path, message)


def test_a_str_where_a_tensor_is_expected() -> None:
    position = mm.PlaceholderRange(0, 2, is_embed="mask")  # type: ignore[arg-type]
    spec = mm.MultiModalFeatureSpec(
        data=None, modality="image", identifier="x", mm_position=position
    )
    _raises(spec, "$.mm_position.is_embed", "expected a tensor, got str")


def _bad_fields() -> list[Any]:
    fields: list[Any] = [
        mm.BatchedField(keep_on_cpu=1),  # type: ignore[arg-type]
        mm.SharedField(batch_size=2.0),  # type: ignore[arg-type]
        mm.FlatField([slice(0, 1.5)]),
        mm.FlatField([slice(0, 1), frozenset()]),  # type: ignore[list-item]
        mm.FlatField([slice(0, 1)], dim=True),
        "batched",
        None,
    ]
    expected = [
        (".field.keep_on_cpu", "expected a bool, got int"),
        (".field.batch_size", "expected an int, got float"),
        (".field.slices[0]", "slice bounds must be int or None, got float"),
        (
            ".field.slices[1]",
            "expected one of slice, tuple[slice, ...], list[slice], got frozenset",
        ),
        (".field.dim", "expected an int, got bool"),
        (".field", "expected one of BatchedField, FlatField, SharedField, got str"),
        (".field", "expected one of BatchedField, FlatField, SharedField, got NoneType"),
    ]
    return [
        pytest.param(field, path, message, id=f"{i}{path}")
        for i, (field, (path, message)) in enumerate(zip(fields, expected, strict=True))
    ]


@pytest.mark.parametrize(("field", "path", "message"), _bad_fields())
def test_bad_field_parameters(field: mm.BaseMultiModalField, path: str, message: str) -> None:
    _raises(single(torch.zeros(1), field), f"$['image'][0]['pixel_values']{path}", message)


def test_values_of_the_wrong_class() -> None:
    _raises(
        mm.MultiModalKwargsItems({"image": [{"k": 1}]}),  # type: ignore[list-item]
        "$['image'][0]['k']",
        "expected a MultiModalFieldElem, got int ('int' object has no attribute 'data')",
    )
    _raises(
        mm.MultiModalKwargsItems({3: [None]}),  # type: ignore[dict-item]
        "$[3] (key)",
        "expected a str, got int",
    )


@pytest.mark.parametrize("leaf", [2**64, -(2**63) - 1])
def test_an_int_leaf_beyond_64_bits(leaf: int) -> None:
    _raises(
        single([1.0, (2, leaf)], mm.BatchedField()),
        f"{PIXELS}[1][1]",
        f"int {leaf} does not fit in 64 bits (int64 or uint64)",
    )


def test_an_unknown_root_class() -> None:
    with pytest.raises(mm.EncodeError) as info:
        mm.encode(torch.zeros(1))
    assert str(info.value) == (
        "$: Tensor is not a type of schema 'multimodal'; pass type= to say which one it is"
    )


# -- tensors on another device are moved to the CPU once -----------------------------


class OnDevice(torch.Tensor):
    """A CPU tensor that claims to live elsewhere and records every move."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]
    moves: ClassVar[list[tuple[int, tuple[Any, ...]]]] = []

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    def to(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        OnDevice.moves.append((id(self), args))
        return self.as_subclass(torch.Tensor).clone()


def _on_device(t: torch.Tensor) -> OnDevice:
    return torch.Tensor._make_subclass(OnDevice, t)


def test_device_tensors_move_to_the_cpu_once_per_distinct_tensor() -> None:
    OnDevice.moves.clear()
    big = _on_device(torch.arange(4000, dtype=torch.float32))
    small = _on_device(torch.tensor([1, 2, 3]))
    assert not big.is_cpu and type(big) is OnDevice
    item = mm.MultiModalKwargsItem(
        {
            "a": mm.MultiModalFieldElem(big, mm.BatchedField()),
            "b": mm.MultiModalFieldElem([big, small, big], mm.SharedField(2)),
            "c": mm.MultiModalFieldElem((small,), mm.BatchedField()),
        }
    )
    frames = mm.encode(item)
    assert sorted(OnDevice.moves) == sorted([(id(big), ("cpu",)), (id(small), ("cpu",))])
    # What travels is the moved copy, not the original memory.
    assert len(frames) == 2
    assert address(frames[1]) != big.data_ptr()
    decoded = mm.decode(frames, mm.MultiModalKwargsItem)
    a, b, c = (decoded[k].data for k in "abc")
    assert isinstance(b, list) and isinstance(c, tuple) and isinstance(b[1], torch.Tensor)
    assert type(a) is torch.Tensor and a.is_cpu
    assert_nested_equal(a, torch.arange(4000, dtype=torch.float32))
    assert type(b) is list and b[0] is a and b[2] is a
    assert type(c) is tuple and c[0] is b[1]
    assert b[1].tolist() == [1, 2, 3]


def test_a_non_contiguous_device_tensor_moves_once() -> None:
    OnDevice.moves.clear()
    base = torch.arange(600, dtype=torch.float32).reshape(6, 100)
    view = _on_device(base.t())
    assert not view.is_contiguous() and not view.is_cpu
    frames = mm.encode(mm.MultiModalFieldElem([view, (view,)], mm.BatchedField()))
    assert OnDevice.moves == [(id(view), ("cpu",))]
    decoded = mm.decode(frames, mm.MultiModalFieldElem)
    got: Any = decoded.data
    assert type(got) is list
    assert_nested_equal(got[0], base.t().contiguous())
    assert got[1][0] is got[0]
