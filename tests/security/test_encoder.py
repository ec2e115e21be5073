"""The encoder's side of the contract: EncodeError with a path, bounded depth, nothing partial."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime import errors
from tests.security.samples import SAMPLES, kwargs_items, same

E = mm.MultiModalFieldElem
DEEPEST = "[0]" * 32


def _elem(data: Any, field: Any = None) -> mm.MultiModalFieldElem:
    return E(data, mm.BatchedField() if field is None else field)


def _item(data: Any) -> mm.MultiModalKwargsItems:
    return mm.MultiModalKwargsItems(
        {"image": [mm.MultiModalKwargsItem({"pixel_values": _elem(data)})]}
    )


def _nested_strided() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.nested warns that it is a prototype
        return torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])


def _deep(levels: int, kind: type[Any] = list) -> Any:
    value: Any = torch.zeros(1)
    for _ in range(levels):
        value = kind([value])
    return value


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def test_encode_error_is_the_one_project_wide_value_error() -> None:
    assert mm.EncodeError is errors.EncodeError
    assert issubclass(mm.EncodeError, ValueError)


@pytest.mark.parametrize("levels", [33, 1_000, 10_000])
@pytest.mark.parametrize("kind", [list, tuple])
def test_deep_nesting_is_an_encode_error_not_a_recursion_error(
    levels: int, kind: type[Any]
) -> None:
    with pytest.raises(mm.EncodeError) as info:
        mm.encode(_elem(_deep(levels, kind)))
    assert type(info.value) is mm.EncodeError
    assert str(info.value) == f"$.data{DEEPEST}: nested tensors deeper than 32 levels"


def test_nesting_at_the_depth_limit_encodes() -> None:
    elem = _elem(_deep(32))
    assert mm.decode(mm.encode(elem), E) == elem


def test_a_cycle_is_an_encode_error() -> None:
    with pytest.raises(mm.EncodeError) as info:
        mm.encode(_elem(_cycle()))
    assert str(info.value) == f"$.data{DEEPEST}: nested tensors deeper than 32 levels"


Case = tuple[Callable[[], Any], str, str]

UNSUPPORTED: dict[str, Case] = {
    "str data": (
        lambda: _item("pixels"),
        "$['image'][0]['pixel_values'].data",
        "str is not a nested tensor (tensor, int, float, list or tuple)",
    ),
    "set data": (
        lambda: _elem({1}),
        "$.data",
        "set is not a nested tensor (tensor, int, float, list or tuple)",
    ),
    "bool leaf": (
        lambda: _elem([torch.zeros(1), True]),
        "$.data[1]",
        "bool is not a nested tensor (tensor, int, float, list or tuple)",
    ),
    "numpy array": (
        lambda: _elem(np.zeros(3)),
        "$.data",
        "ndarray is not a nested tensor (tensor, int, float, list or tuple)",
    ),
    "int leaf beyond 64 bits": (
        lambda: _elem([torch.zeros(1), (0, 2**64)]),
        "$.data[1][1]",
        f"int {2**64} does not fit in 64 bits (int64 or uint64)",
    ),
    "negative int leaf beyond 64 bits": (
        lambda: _elem([-(2**63) - 1]),
        "$.data[0]",
        f"int {-(2**63) - 1} does not fit in 64 bits (int64 or uint64)",
    ),
    "slice bound beyond 64 bits": (
        lambda: _elem(torch.zeros(1), mm.FlatField([slice(0, 1), slice(0, 2**70)])),
        "$.field.slices[1]",
        f"int {2**70} does not fit in 64 bits (int64 or uint64)",
    ),
    "float slice bound": (
        lambda: _elem(torch.zeros(1), mm.FlatField([slice(0, 1.5)])),
        "$.field.slices[0]",
        "slice bounds must be int or None, got float",
    ),
    "dict as a flat slice": (
        lambda: _elem(torch.zeros(1), mm.FlatField([{0: slice(0, 1)}])),  # type: ignore[list-item]
        "$.field.slices[0]",
        "expected one of slice, tuple[slice, ...], list[slice], got dict",
    ),
    "int in a list of slices": (
        lambda: _elem(torch.zeros(1), mm.FlatField([[slice(0, 1), 3]])),  # type: ignore[list-item]
        "$.field.slices[0][1]",
        "expected a slice, got int",
    ),
    "float tensor as a slice bound": (
        lambda: _elem(torch.zeros(1), mm.FlatField([slice(0, torch.tensor(2.0))])),
        "$.field.slices[0]",
        "slice bounds must be int or None, got a tensor (torch.float32, shape []); "
        "only a 0-d integer tensor stands for an int",
    ),
    "1-d tensor as a slice bound": (
        lambda: _elem(torch.zeros(1), mm.FlatField([slice(torch.tensor([1]), None)])),
        "$.field.slices[0]",
        "slice bounds must be int or None, got a tensor (torch.int64, shape [1]); "
        "only a 0-d integer tensor stands for an int",
    ),
    "batch size beyond 64 bits": (
        lambda: _elem(torch.zeros(1), mm.SharedField(2**64)),
        "$.field.batch_size",
        f"int {2**64} does not fit in 64 bits (int64 or uint64)",
    ),
    "int keep_on_cpu": (
        lambda: _elem(torch.zeros(1), mm.BatchedField(keep_on_cpu=1)),  # type: ignore[arg-type]
        "$.field.keep_on_cpu",
        "expected a bool, got int",
    ),
    "missing field variant": (
        lambda: E(torch.zeros(1), None),  # type: ignore[arg-type]
        "$.field",
        "expected one of BatchedField, FlatField, SharedField, got NoneType",
    ),
    "non-str key": (
        lambda: mm.MultiModalKwargsItem({1: _elem(torch.zeros(1))}),  # type: ignore[dict-item]
        "$[1] (key)",
        "expected a str, got int",
    ),
    "None as an item list": (
        lambda: mm.MultiModalKwargsItems({"image": None}),  # type: ignore[dict-item]
        "$['image']",
        "expected a list, got NoneType",
    ),
    "list as is_embed": (
        lambda: mm.PlaceholderRange(0, 1, is_embed=[True]),  # type: ignore[arg-type]
        "$.is_embed",
        "expected a tensor, got list",
    ),
    "offset beyond 64 bits": (
        lambda: mm.PlaceholderRange(2**64, 1),
        "$.offset",
        f"int {2**64} does not fit in 64 bits (int64 or uint64)",
    ),
    "int as item data": (
        lambda: mm.MultiModalFeatureSpec(
            data=5,  # type: ignore[arg-type]
            modality="image",
            identifier="x",
            mm_position=mm.PlaceholderRange(0, 1),
        ),
        "$.data",
        "expected a dict, got int",
    ),
    "sparse tensor": (
        lambda: _elem([torch.zeros(2), torch.zeros(3).to_sparse()]),
        "$.data[1]",
        "torch.sparse_coo tensors are not supported; convert to dense first",
    ),
    "meta tensor": (
        lambda: _item(torch.empty(3, device="meta")),
        "$['image'][0]['pixel_values'].data",
        "meta tensors hold no data and cannot be encoded",
    ),
    "dtype without a byte layout": (
        lambda: _elem(torch.zeros(2, dtype=torch.uint8).view(torch.bits8)),
        "$.data",
        "dtype torch.bits8 has no stable byte layout and cannot be encoded",
    ),
    "strided nested tensor": (
        lambda: _elem([torch.zeros(1), _nested_strided()]),
        "$.data[1]",
        "nested tensors (torch.nested) are not supported; send a list of tensors",
    ),
    "not a schema type": (
        lambda: {"pixel_values": _elem(torch.zeros(1))},
        "$",
        "dict is not a type of schema 'multimodal'; pass type= to say which one it is",
    ),
}


@pytest.mark.parametrize("case", UNSUPPORTED.values(), ids=list(UNSUPPORTED))
def test_unsupported_values_raise_encode_error_with_path(case: Case) -> None:
    make, path, message = case
    value = make()
    for encode in (mm.encode, mm.encode_bytes):
        with pytest.raises(mm.EncodeError) as info:
            encode(value)
        assert type(info.value) is mm.EncodeError
        assert (info.value.path, info.value.message) == (path, message)


def test_a_failed_encode_leaves_no_state_behind() -> None:
    # The codec holds no per-call state: a failure midway (after tensors were registered
    # and views planned) changes nothing for the next call, and does not touch the input.
    good = kwargs_items()
    expected = [bytes(f) for f in mm.encode(good)]
    bad = kwargs_items()
    columns = torch.arange(12.0).reshape(3, 4)[:, 1:]
    bad["image"][1]["extra"] = _elem([columns, "oops"])  # type: ignore[index]
    with pytest.raises(mm.EncodeError) as info:
        mm.encode(bad)
    assert info.value.path == "$['image'][1]['extra'].data[1]"
    assert not columns.is_contiguous()  # the input is as it was
    assert [bytes(f) for f in mm.encode(good)] == expected


@pytest.mark.parametrize("name", list(SAMPLES))
def test_samples_encode_deterministically(name: str) -> None:
    tp, make = SAMPLES[name]
    first = [bytes(f) for f in mm.encode(make())]
    second = [bytes(f) for f in mm.encode(make())]
    assert first == second
    assert same(mm.decode(first, tp), make())


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (_elem(torch.zeros(1), mm.SharedField(-1)), "$.field.batch_size"),
        (_elem(torch.zeros(1), mm.FlatField([slice(0, 1)], dim=-1)), "$.field.dim"),
        (mm.PlaceholderRange(-1, 1), "$.offset"),
    ],
)
def test_encoder_rejects_what_the_decoder_would(value: Any, path: str) -> None:
    with pytest.raises(mm.EncodeError) as info:
        mm.encode(value)
    assert info.value.path == path


# -- the sender checks the receiver's limits (issue 13.8) -------------------------------------

PIXELS = "$['image'][0]['pixel_values'].data"
CODEC = mm._CODEC  # the schema codec behind mm.encode: takes the limits a receiver will use


def _encode_error(value: Any, limits: mm.Limits = mm.DEFAULT_LIMITS) -> mm.EncodeError:
    with pytest.raises(mm.EncodeError) as info:
        CODEC.encode(value, limits=limits)
    assert type(info.value) is mm.EncodeError
    return info.value


def test_a_tensor_of_more_dimensions_than_a_default_receiver_takes_is_an_encode_error() -> None:
    # It was sent, and a receiver with default limits rejected it.
    error = _encode_error(_item([torch.zeros(1), torch.zeros([1] * 17)]))
    assert (error.path, error.message) == (
        PIXELS + "[1]",
        "17 dimensions exceed the receiver's limit of 16 (max_ndim)",
    )
    with pytest.raises(mm.EncodeError, match=r"^\$\['image'\]\[0\]\['pixel_values'\]\.data: 17"):
        mm.encode(_item(torch.zeros([1] * 17)))
    assert mm.decode(mm.encode(_item(torch.zeros([1] * 16))), mm.MultiModalKwargsItems)


def test_dimensions_of_views_in_one_run_are_checked_once_and_named() -> None:
    batch = torch.zeros([4] + [1] * 16)
    error = _encode_error(_item(list(batch.unbind(0))), mm.Limits(max_ndim=15))
    assert (error.path, error.message) == (
        PIXELS + "[0]",
        "16 dimensions exceed the receiver's limit of 15 (max_ndim)",
    )


def test_a_bool_tensor_holding_other_bytes_is_an_encode_error() -> None:
    mask = torch.tensor([0, 1, 2, 1], dtype=torch.uint8).view(torch.bool)
    error = _encode_error(_item([torch.ones(2, dtype=torch.bool), mask]))
    assert (error.path, error.message) == (
        PIXELS + "[1]",
        "bool tensor holds a byte other than 0 and 1",
    )
    rows = torch.tensor([[0, 1], [1, 0], [3, 0]], dtype=torch.uint8).view(torch.bool)
    error = _encode_error(_item(list(rows.unbind(0))))  # one run of three views
    assert error.path == PIXELS + "[2]"


def test_more_tensors_than_max_elements_is_an_encode_error() -> None:
    error = _encode_error(_item([torch.zeros(1) for _ in range(4)]), mm.Limits(max_elements=3))
    assert (error.path, error.message) == (
        PIXELS + "[3]",
        "a message of more than 3 tensors exceeds the receiver's limit (max_elements)",
    )


def test_more_tensors_than_max_tensors_is_an_encode_error() -> None:
    value = _item([torch.zeros(1) for _ in range(6)])
    error = _encode_error(value, mm.Limits(max_tensors=5))
    assert (error.path, error.message) == (
        PIXELS + "[5]",
        "a message of more than 5 tensors exceeds the receiver's limit (max_tensors)",
    )
    assert same(mm.decode(mm.encode(value), mm.MultiModalKwargsItems), value)  # 65,536 by default
    with pytest.raises(mm.DecodeError, match=r"\[5\]: tensor count 1 outside 1\.\.0"):
        mm.decode(mm.encode(value), mm.MultiModalKwargsItems, limits=mm.Limits(max_tensors=5))


def test_a_container_longer_than_max_elements_is_an_encode_error() -> None:
    items = mm.MultiModalKwargsItems({"image": [None] * 5})
    error = _encode_error(items, mm.Limits(max_elements=4))
    assert (error.path, error.message) == (
        "$['image']",
        "5 elements exceed the receiver's limit of 4 (max_elements)",
    )
    error = _encode_error(_item([0] * 5), mm.Limits(max_elements=4))
    assert error.path == PIXELS


def test_a_struct_s_fields_are_not_elements_of_a_container() -> None:
    # Structs travel as arrays (five fields here, three in the range), but a receiver bounds
    # only lists and mappings by max_elements: the sender counted the arrays and refused.
    spec = mm.MultiModalFeatureSpec(
        data=None,
        modality="image",
        identifier="x",
        mm_position=mm.PlaceholderRange(offset=0, length=4),
    )
    one = mm.Limits(max_elements=1)
    assert mm.decode(CODEC.encode(spec, limits=one), mm.MultiModalFeatureSpec, limits=one) == spec
    # A mapping of exactly the limit is sent and taken; one more is refused on both sides.
    two = mm.Limits(max_elements=2)
    at_limit = mm.MultiModalKwargsItem({"a": _elem(1), "b": _elem(2)})
    assert mm.decode(CODEC.encode(at_limit, limits=two), mm.MultiModalKwargsItem, limits=two) == (
        at_limit
    )
    item = mm.MultiModalKwargsItem({"a": _elem(1), "b": _elem(2)})  # a mapping: over it
    assert _encode_error(item, one).message == (
        "2 elements exceed the receiver's limit of 1 (max_elements)"
    )
    with pytest.raises(mm.DecodeError, match="2 elements exceed the limit of 1"):
        mm.decode(CODEC.encode(item), mm.MultiModalKwargsItem, limits=one)


def test_frame_limits_are_checked_by_the_sender() -> None:
    big = _item([torch.zeros(1024), torch.ones(1024)])  # two payload frames
    assert len(mm.encode(big)) == 3
    error = _encode_error(big, mm.Limits(max_frames=2))
    assert error.message == "3 frames exceed the receiver's limit of 2 (max_frames)"
    error = _encode_error(big, mm.Limits(max_header_bytes=64))
    assert error.message.startswith("header of ")
    assert error.message.endswith("bytes exceeds the receiver's limit of 64 (max_header_bytes)")
    error = _encode_error(big, mm.Limits(max_total_bytes=8192))
    assert error.message.endswith("bytes exceed the receiver's limit of 8192 (max_total_bytes)")
    # The single buffer adds a frame table and alignment: its own size is what counts.
    frames_bytes = sum(frame.nbytes for frame in mm.encode(big))
    buffer_bytes = len(mm.encode_bytes(big))
    assert frames_bytes < buffer_bytes
    with pytest.raises(mm.EncodeError, match=f"^\\$: buffer of {buffer_bytes} bytes exceeds"):
        CODEC.encode_bytes(big, limits=mm.Limits(max_total_bytes=frames_bytes))


LIMITS = [
    mm.DEFAULT_LIMITS,
    mm.Limits(max_elements=3, max_depth=2, max_ndim=2),
    mm.Limits(max_frames=2, max_total_bytes=4096, max_header_bytes=300),
    mm.Limits(max_elements=5, max_ndim=1, max_frames=3),
]


REFUSED = {
    # A column list numbers tensors key by key: the first past the limit is an image's
    # pixels (the third item is None).
    ("column_list", 1): "$['image'][4]['pixels'].data: a message of more than 3 tensors "
    "exceeds the receiver's limit (max_elements)",
    ("column_list", 2): "$: header of 1322 bytes exceeds the receiver's limit of 300 "
    "(max_header_bytes)",
    ("column_list", 3): "$['image'][6]['pixels'].data: a message of more than 5 tensors "
    "exceeds the receiver's limit (max_elements)",
    ("feature_spec", 3): "$.data['input_features'].data: 2 dimensions exceed the receiver's "
    "limit of 1 (max_ndim)",
    ("kwargs_items", 1): "$['image'][0]['image_token_id'].data: a message of more than 3 "
    "tensors exceeds the receiver's limit (max_elements)",
    ("kwargs_items", 2): "$: header of 364 bytes exceeds the receiver's limit of 300 "
    "(max_header_bytes)",
    ("kwargs_items", 3): "$['image'][1]['image_grid_thw'].data: a message of more than 5 "
    "tensors exceeds the receiver's limit (max_elements)",
    ("nested_item", 1): "$['mixed'].data[3][2]: nested tensors deeper than 2 levels",
    ("nested_item", 2): "$: 4 frames exceed the receiver's limit of 2 (max_frames)",
    ("nested_item", 3): "$['mixed'].data[4][0]: a message of more than 5 tensors exceeds the "
    "receiver's limit (max_elements)",
    ("runs_and_dtypes", 1): "$['audio'][0]['waves'].data: a message of more than 3 tensors "
    "exceeds the receiver's limit (max_elements)",
    ("runs_and_dtypes", 2): "$: header of 660 bytes exceeds the receiver's limit of 300 "
    "(max_header_bytes)",
    ("runs_and_dtypes", 3): "$['audio'][0]['scale'].data: a message of more than 5 tensors "
    "exceeds the receiver's limit (max_elements)",
}
"""What the sender refuses, per (sample, limits): everything else it sends."""


@pytest.mark.parametrize("limits", range(len(LIMITS)))
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_sender_refuses_exactly_what_a_receiver_with_the_same_limits_refuses(
    name: str, limits: int
) -> None:
    tp, make = SAMPLES[name]
    receiver = LIMITS[limits]
    unchecked = CODEC.encode(make())  # what a sender that checked nothing would send
    if (name, limits) in REFUSED:
        error = _encode_error(make(), receiver)
        assert str(error) == REFUSED[name, limits]
        # Rightly: the receiver rejects the message the sender refused to send.
        with pytest.raises(mm.DecodeError):
            mm.decode(unchecked, tp, limits=receiver)
        with pytest.raises(mm.DecodeError):
            mm.decode_bytes(CODEC.encode_bytes(make()), tp, limits=receiver)
    else:
        frames = CODEC.encode(make(), limits=receiver)
        assert [bytes(f) for f in frames] == [bytes(f) for f in unchecked]
        assert same(mm.decode(frames, tp, limits=receiver), make())
        assert same(mm.decode_bytes(CODEC.encode_bytes(make()), tp, limits=receiver), make())
