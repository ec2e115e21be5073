"""Behaviour of the multimodal domain model: splitting, merging, grouping and strict equality."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcodec.domain.multimodal import (
    BaseMultiModalField,
    BatchedField,
    FlatField,
    MultiModalFieldConfig,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    NestedTensors,
    SharedField,
)
from mmcodec.runtime.equality import tensors_equal, values_equal


def _same(actual: object, expected: torch.Tensor) -> bool:
    """``actual`` is a tensor with the dtype, shape and values of ``expected``."""
    return isinstance(actual, torch.Tensor) and tensors_equal(actual, expected)


def _tensor(x: object) -> torch.Tensor:
    assert isinstance(x, torch.Tensor)
    return x


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _elems(field: BaseMultiModalField, *datas: NestedTensors | None) -> list[MultiModalFieldElem]:
    return [MultiModalFieldElem(d, field) for d in datas]


def _assert_views_of(pieces: list[NestedTensors], source: torch.Tensor) -> None:
    for piece in pieces:
        assert isinstance(piece, torch.Tensor)
        assert _ptr(piece) == _ptr(source)


# --- build_elems ----------------------------------------------------------------------------


def test_batched_build_splits_dim0_into_views() -> None:
    data = torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, ::2]  # non-contiguous too
    pieces = BatchedField().build_elems(data)
    assert len(pieces) == 4
    _assert_views_of(pieces, data)
    for i, piece in enumerate(pieces):
        assert isinstance(piece, torch.Tensor)
        assert piece.storage_offset() == data[i].storage_offset()
        assert piece.stride() == data[i].stride()
        assert tensors_equal(piece, data[i])


def test_batched_build_of_sequences_keeps_the_entries() -> None:
    a, b = torch.zeros(2), torch.ones(3)
    sequences: list[NestedTensors] = [[a, b], (a, b)]
    for data in sequences:
        pieces = BatchedField().build_elems(data)
        assert type(pieces) is list
        assert pieces[0] is a
        assert pieces[1] is b


@pytest.mark.parametrize("data", [torch.tensor(1.0), 3, 2.5])
def test_batched_build_rejects_scalars(data: NestedTensors) -> None:
    with pytest.raises(TypeError, match="batched field needs"):
        BatchedField().build_elems(data)


def test_flat_build_dim0_slices_views() -> None:
    data = torch.arange(18).reshape(9, 2)
    field = FlatField([slice(0, 3), slice(3, 7), slice(7, 9)])
    pieces = field.build_elems(data)
    _assert_views_of(pieces, data)
    assert [p.shape[0] for p in pieces if isinstance(p, torch.Tensor)] == [3, 4, 2]
    assert _same(pieces[1], data[3:7])


def test_flat_build_dim1_uses_tuple_slices() -> None:
    data = torch.arange(27).reshape(3, 9)
    field = FlatField([(slice(None), slice(0, 4)), (slice(None), slice(4, 9))], dim=1)
    pieces = field.build_elems(data)
    _assert_views_of(pieces, data)
    assert _same(pieces[0], data[:, :4])
    assert _same(pieces[1], data[:, 4:])


def test_flat_build_of_sequences_slices_the_sequence() -> None:
    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    field = FlatField([slice(0, 1), slice(1, 3)])
    assert field.build_elems([a, b, c]) == [[a], [b, c]]
    pieces = field.build_elems((a, b, c))
    assert type(pieces[0]) is tuple
    second = pieces[1]
    assert isinstance(second, tuple)
    assert second[0] is b


def test_flat_build_of_sequence_rejects_tuple_slices() -> None:
    field = FlatField([(slice(0, 1),)])
    with pytest.raises(TypeError, match="needs plain slices"):
        field.build_elems([torch.zeros(1)])


def test_shared_build_repeats_the_same_object() -> None:
    data = torch.tensor([151655])
    pieces = SharedField(3).build_elems(data)
    assert len(pieces) == 3
    assert all(p is data for p in pieces)


def test_shared_config_repeats_one_element_object() -> None:
    # As vLLM's MultiModalSharedField.build_elems: one element, in every item.
    data = torch.tensor([151655])
    elems = MultiModalFieldConfig.shared("image", 3).build_elems(data)
    assert len(elems) == 3
    assert all(e is elems[0] for e in elems)
    assert elems[0].data is data and isinstance(elems[0].field, SharedField)


def test_config_build_elems_wraps_with_its_field() -> None:
    config = MultiModalFieldConfig.batched("image")
    elems = config.build_elems(torch.zeros(2, 3))
    assert len(elems) == 2
    assert all(type(e) is MultiModalFieldElem and e.field is config.field for e in elems)


# --- reduce_data -----------------------------------------------------------------------------


def test_batched_reduce_stacks_equal_shapes() -> None:
    field = BatchedField()
    a, b = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    out = field.reduce_data(_elems(field, a, b))
    assert _same(out, torch.tensor([[1, 2, 3], [4, 5, 6]]))


def test_batched_reduce_of_one_adds_dim0() -> None:
    field = BatchedField()
    a = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    out = field.reduce_data(_elems(field, a))
    assert _same(out, a.unsqueeze(0))


@pytest.mark.parametrize(
    "datas",
    [
        (torch.zeros(2), torch.zeros(3)),  # ragged shapes
        (torch.zeros(2), torch.zeros(2, dtype=torch.float64)),  # different dtypes
        (1, 2),  # int leaves
        ([torch.zeros(1)], [torch.zeros(1), torch.ones(1)]),  # nested lists
        (torch.zeros(2), [torch.zeros(2)]),  # a mix
    ],
)
def test_batched_reduce_returns_a_list_when_it_cannot_stack(datas: tuple[NestedTensors]) -> None:
    field = BatchedField()
    out = field.reduce_data(_elems(field, *datas))
    assert type(out) is list
    assert len(out) == len(datas)
    assert all(x is y for x, y in zip(out, datas, strict=True))


def test_batched_reduce_of_nothing_is_an_empty_list() -> None:
    assert BatchedField().reduce_data([]) == []


def test_flat_reduce_concatenates_along_dim() -> None:
    field0 = FlatField([slice(0, 1), slice(1, 3)])
    a, b = torch.ones(1, 2), torch.zeros(2, 2)
    out = field0.reduce_data(_elems(field0, a, b))
    assert _same(out, torch.cat([a, b]))

    for dim in (1, -1):
        field = FlatField([(slice(None), slice(0, 1)), (slice(None), slice(1, 3))], dim=dim)
        c, d = torch.ones(2, 1), torch.zeros(2, 2)
        out = field.reduce_data(_elems(field, c, d))
        assert _same(out, torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))


def test_flat_reduce_of_one_is_the_tensor() -> None:
    field = FlatField([slice(0, 2)])
    a = torch.arange(4).reshape(2, 2)
    out = field.reduce_data(_elems(field, a))
    assert _same(out, a)


def test_flat_reduce_zero_pads_off_dim() -> None:
    field = FlatField([slice(0, 1), slice(1, 3)])
    a = torch.tensor([[1, 2, 3]], dtype=torch.int16)  # (1, 3)
    b = torch.tensor([[4], [5]], dtype=torch.int16)  # (2, 1)
    out = field.reduce_data(_elems(field, a, b))
    expected = torch.tensor([[1, 2, 3], [4, 0, 0], [5, 0, 0]], dtype=torch.int16)
    assert _same(out, expected)


def test_flat_reduce_zero_pads_every_non_concat_dim() -> None:
    field = FlatField([(slice(None), slice(0, 1))] * 2, dim=1)
    a = torch.full((1, 1, 2), 7.0)  # (1, 1, 2)
    b = torch.full((2, 2, 1), 9.0)  # (2, 2, 1)
    out = field.reduce_data(_elems(field, a, b))
    assert isinstance(out, torch.Tensor)
    assert out.shape == (2, 3, 2)
    assert out.dtype == torch.float32
    expected = torch.zeros(2, 3, 2)
    expected[:1, :1, :2] = 7.0
    expected[:2, 1:3, :1] = 9.0
    assert tensors_equal(out, expected)


def test_flat_reduce_rejects_different_ranks() -> None:
    field = FlatField([slice(0, 1), slice(1, 2)])
    with pytest.raises(ValueError, match="different ranks"):
        field.reduce_data(_elems(field, torch.zeros(1, 2), torch.zeros(1)))


def test_flat_reduce_flattens_sequences() -> None:
    field = FlatField([slice(0, 1), slice(1, 3)])
    a, b, c = torch.zeros(3), torch.ones(4), torch.ones(5)
    out = field.reduce_data(_elems(field, [a], (b, c)))
    assert type(out) is list
    assert len(out) == 3
    assert out[0] is a
    assert out[1] is b
    assert out[2] is c


def test_flat_reduce_of_sequences_needs_dim0() -> None:
    field = FlatField([(slice(None), slice(0, 1))], dim=1)
    with pytest.raises(ValueError, match="needs dim 0, not 1"):
        field.reduce_data(_elems(field, [torch.zeros(1)]))


def test_shared_reduce_takes_the_first() -> None:
    field = SharedField(2)
    data = torch.tensor([7])
    assert field.reduce_data(_elems(field, data, data)) is data
    with pytest.raises(ValueError, match="zero elements"):
        field.reduce_data([])


def test_reduce_rejects_mixed_field_types() -> None:
    elems = [MultiModalFieldElem(torch.zeros(1), BatchedField())]
    elems.append(MultiModalFieldElem(torch.zeros(1), FlatField([slice(0, 1)])))
    message = "cannot reduce elements of different field types: BatchedField and FlatField"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        elems[0].field.reduce_data(elems)


def test_reduce_rejects_elements_without_data() -> None:
    field = BatchedField()
    with pytest.raises(ValueError, match=r"^cannot reduce element 1: its data is None$"):
        field.reduce_data(_elems(field, torch.zeros(1), None))


# --- MultiModalFieldConfig -------------------------------------------------------------------


def test_config_constructors_carry_their_parameters() -> None:
    slices = [slice(0, 2)]
    assert MultiModalFieldConfig.batched("image", keep_on_cpu=True) == MultiModalFieldConfig(
        BatchedField(keep_on_cpu=True), "image"
    )
    flat = MultiModalFieldConfig.flat("video", slices, dim=0)
    assert isinstance(flat.field, FlatField)
    assert flat.field.slices is slices
    assert flat.modality == "video"
    shared = MultiModalFieldConfig.shared("audio", 3)
    assert shared.field == SharedField(batch_size=3)
    assert shared != MultiModalFieldConfig.shared("image", 3)


def test_flat_from_sizes_dim0_gives_plain_int_slices() -> None:
    config = MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([3, 4, 2]))
    assert isinstance(config.field, FlatField)
    assert config.field == FlatField([slice(0, 3), slice(3, 7), slice(7, 9)])
    assert all(type(s.stop) is int for s in config.field.slices if isinstance(s, slice))


def test_flat_from_sizes_dim2_gives_tuple_slices() -> None:
    config = MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([1, 2]), dim=2)
    everything = slice(None)
    assert config.field == FlatField(
        [(everything, everything, slice(0, 1)), (everything, everything, slice(1, 3))], dim=2
    )
    data = torch.arange(12).reshape(2, 2, 3)
    pieces = config.field.build_elems(data)
    assert _same(pieces[1], data[:, :, 1:3])


def test_flat_from_sizes_validates_its_input() -> None:
    with pytest.raises(ValueError, match="1-D tensor"):
        MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="non-negative dim"):
        MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([1, 2]), dim=-1)


@settings(max_examples=50, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 4), min_size=1, max_size=6),
    dim=st.integers(0, 2),
)
def test_flat_from_sizes_round_trips(sizes: list[int], dim: int) -> None:
    shape = [2, 3, 2]
    shape[dim] = sum(sizes)
    data = torch.arange(torch.Size(shape).numel()).reshape(shape)
    config = MultiModalFieldConfig.flat_from_sizes("image", torch.tensor(sizes), dim=dim)
    elems = config.build_elems(data)
    assert [_tensor(e.data).shape[dim] for e in elems] == sizes
    assert _same(config.field.reduce_data(elems), data)


# --- MultiModalKwargsItems -------------------------------------------------------------------

_SIZES = [4, 6, 2, 8]


def _seeded() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _image_batch() -> tuple[dict[str, NestedTensors], dict[str, MultiModalFieldConfig]]:
    """Four images, Qwen2-VL-like: flat patches, batched grid sizes, a shared token id."""
    batch: dict[str, NestedTensors] = {
        "pixel_values": torch.randn(sum(_SIZES), 8, generator=_seeded()).to(torch.bfloat16),
        "image_grid_thw": torch.tensor([[1, 2, 2], [1, 2, 3], [1, 1, 2], [1, 2, 4]]),
        "image_token_id": torch.tensor(151655),
    }
    config = {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", torch.tensor(_SIZES)),
        "image_grid_thw": MultiModalFieldConfig.batched("image"),
        "image_token_id": MultiModalFieldConfig.shared("image", batch_size=4),
    }
    return batch, config


def test_from_hf_inputs_splits_into_items() -> None:
    batch, config = _image_batch()
    items = MultiModalKwargsItems.from_hf_inputs(batch, config)
    assert list(items) == ["image"]
    assert len(items["image"]) == 4
    for i, item in enumerate(items["image"]):
        assert type(item) is MultiModalKwargsItem
        assert list(item) == ["pixel_values", "image_grid_thw", "image_token_id"]
        assert _tensor(item["pixel_values"].data).shape == (_SIZES[i], 8)
        assert item["image_grid_thw"].field is config["image_grid_thw"].field
        assert item["image_token_id"].data is batch["image_token_id"]
    first = items["image"][0]
    assert first is not None
    data = first.get_data()
    assert list(data) == list(first)
    assert data["image_grid_thw"] is first["image_grid_thw"].data


def test_from_hf_inputs_groups_by_modality_in_batch_order() -> None:
    batch: dict[str, NestedTensors] = {
        "audio_features": torch.zeros(2, 5),
        "pixel_values": torch.zeros(3, 4),
        "unconfigured": torch.zeros(9),
        "audio_lens": torch.tensor([5, 4]),
    }
    config = {
        "pixel_values": MultiModalFieldConfig.batched("image"),
        "audio_lens": MultiModalFieldConfig.batched("audio"),
        "audio_features": MultiModalFieldConfig.batched("audio"),
        "not_in_batch": MultiModalFieldConfig.batched("video"),
    }
    items = MultiModalKwargsItems.from_hf_inputs(batch, config)
    assert list(items) == ["audio", "image"]
    assert [len(v) for v in items.values()] == [2, 3]
    assert all(list(item) == ["audio_features", "audio_lens"] for item in items["audio"] if item)
    assert all(list(item) == ["pixel_values"] for item in items["image"] if item)


def test_from_hf_inputs_rejects_different_counts_in_one_modality() -> None:
    batch: dict[str, NestedTensors] = {"a": torch.zeros(2, 1), "b": torch.zeros(3, 1)}
    config = {k: MultiModalFieldConfig.batched("image") for k in batch}
    message = "keys of modality 'image' yield different numbers of items: {'a': 2, 'b': 3}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        MultiModalKwargsItems.from_hf_inputs(batch, config)


def test_get_data_rebuilds_the_batch() -> None:
    batch, config = _image_batch()
    items = MultiModalKwargsItems.from_hf_inputs(batch, config)
    out = items.get_data()
    assert list(out) == list(batch)
    for key, value in batch.items():
        assert isinstance(value, torch.Tensor)
        assert _same(out[key], value), key


def test_get_data_merges_items_of_several_requests() -> None:
    first, config = _image_batch()
    second: dict[str, NestedTensors] = {
        "pixel_values": torch.ones(3, 8, dtype=torch.bfloat16),
        "image_grid_thw": torch.tensor([[1, 1, 3]]),
        "image_token_id": first["image_token_id"],
    }
    config2 = dict(config)
    config2["pixel_values"] = MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([3]))
    config2["image_token_id"] = MultiModalFieldConfig.shared("image", batch_size=1)
    a = MultiModalKwargsItems.from_hf_inputs(first, config)
    b = MultiModalKwargsItems.from_hf_inputs(second, config2)
    merged = MultiModalKwargsItems({"image": a["image"] + b["image"]})
    out = merged.get_data()  # fields of one class merge even when their parameters differ
    pixels = torch.cat([_tensor(first["pixel_values"]), _tensor(second["pixel_values"])])
    grids = torch.cat([_tensor(first["image_grid_thw"]), _tensor(second["image_grid_thw"])])
    assert _same(out["pixel_values"], pixels)
    assert _same(out["image_grid_thw"], grids)
    assert out["image_token_id"] is first["image_token_id"]


def test_get_data_rejects_missing_items() -> None:
    batch, config = _image_batch()
    items = MultiModalKwargsItems.from_hf_inputs(batch, config)
    items["image"][2] = None
    with pytest.raises(RuntimeError, match=r"^cannot build data: item 'image'\[2\] is None$"):
        items.get_data()


# --- equality and repr -----------------------------------------------------------------------


def test_field_equality_compares_parameters() -> None:
    assert BatchedField() == BatchedField()
    assert BatchedField(keep_on_cpu=True) != BatchedField()
    assert SharedField(2) != SharedField(3)
    assert SharedField(2) != BatchedField()
    assert FlatField([slice(0, 1)]) == FlatField((slice(0, 1),))  # container type is irrelevant
    assert FlatField([slice(0, 1)]) != FlatField([slice(0, 2)])
    assert FlatField([slice(0, 1)]) != FlatField([slice(0, 1)], dim=1)
    assert FlatField([slice(0, 1)]) != FlatField([slice(0, 1), slice(1, 2)])
    assert FlatField([slice(0, 1)]) != FlatField([(slice(0, 1),)])  # slice vs tuple of slices
    assert FlatField([slice(0, 1)]) != FlatField([slice(0, 1.0)])
    assert FlatField([(slice(None), slice(0, 1))]) == FlatField([(slice(None), slice(0, 1))])
    # A slice group given as a list is not the same as one given as a tuple.
    assert FlatField([(slice(None), slice(0, 1))]) != FlatField([[slice(None), slice(0, 1)]])


def test_elem_equality_is_strict() -> None:
    field = BatchedField()
    assert MultiModalFieldElem(torch.zeros(2), field) == MultiModalFieldElem(torch.zeros(2), field)
    assert MultiModalFieldElem(torch.zeros(2), field) != MultiModalFieldElem(
        torch.zeros(2, dtype=torch.float64), field
    )
    assert MultiModalFieldElem([torch.zeros(2)], field) != MultiModalFieldElem(
        (torch.zeros(2),), field
    )
    assert MultiModalFieldElem(1, field) != MultiModalFieldElem(1.0, field)
    assert MultiModalFieldElem(None, field) == MultiModalFieldElem(None, BatchedField())
    assert MultiModalFieldElem(torch.zeros(2), field) != MultiModalFieldElem(
        torch.zeros(2), BatchedField(keep_on_cpu=True)
    )


def test_items_compare_as_ordered_mappings() -> None:
    x = MultiModalFieldElem(torch.zeros(1), BatchedField())
    y = MultiModalFieldElem(torch.ones(1), BatchedField())
    xy = MultiModalKwargsItem({"x": x, "y": y})
    assert xy == MultiModalKwargsItem({"x": x, "y": y})
    assert (xy != MultiModalKwargsItem({"x": x, "y": y})) is False  # dict has its own __ne__
    assert xy != MultiModalKwargsItem({"y": y, "x": x})
    assert xy != {"x": x, "y": y}  # a plain dict is another type

    items = MultiModalKwargsItems({"image": [xy, None]})
    assert items == MultiModalKwargsItems({"image": [MultiModalKwargsItem(xy), None]})
    assert items != MultiModalKwargsItems({"image": [None, xy]})
    assert items != MultiModalKwargsItems({"image": [xy]})
    two = MultiModalKwargsItems({"image": [xy], "audio": [xy]})
    assert two != MultiModalKwargsItems({"audio": [xy], "image": [xy]})
    assert values_equal(two, MultiModalKwargsItems({"image": [xy], "audio": [xy]}))


def test_reprs_show_structure() -> None:
    assert repr(FlatField([slice(0, 2)], dim=0)) == (
        "FlatField(slices=[slice(0, 2, None)], dim=0, keep_on_cpu=False)"
    )
    elem = MultiModalFieldElem([torch.zeros(2, 3, dtype=torch.bfloat16), 4], SharedField(1))
    assert repr(elem) == (
        "MultiModalFieldElem(data=[<tensor bfloat16[2, 3]>, 4], "
        "field=SharedField(batch_size=1, keep_on_cpu=False))"
    )
    item = MultiModalKwargsItem({"k": MultiModalFieldElem(None, BatchedField())})
    assert repr(item) == (
        "MultiModalKwargsItem({'k': MultiModalFieldElem(data=None, "
        "field=BatchedField(keep_on_cpu=False))})"
    )
    assert (
        repr(MultiModalKwargsItems({"image": [None]})) == "MultiModalKwargsItems({'image': [None]})"
    )
