"""Dedup: what is referenced twice travels once, and batch views travel as one payload.

Payload bytes are counted on the wire: payload frames plus payloads inline in the header.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import torch

from mmcodec.generated import multimodal as mm
from tests.codec.helpers import address, assert_items_equal, assert_nested_equal, header
from tests.codec.helpers import payload_bytes as payload_bytes_of


def _item(**elems: mm.MultiModalFieldElem) -> mm.MultiModalKwargsItem:
    return mm.MultiModalKwargsItem(elems)


def _batched(data: mm.NestedTensors) -> mm.MultiModalFieldElem:
    return mm.MultiModalFieldElem(data, mm.BatchedField())


def _round_trip_pair(a: torch.Tensor, b: torch.Tensor) -> list[memoryview]:
    """Encode an item of two batched tensors, check that it decodes equal; its frames."""
    frames = mm.encode(_item(a=_batched(a), b=_batched(b)))
    decoded = mm.decode(frames, mm.MultiModalKwargsItem)
    assert_nested_equal(decoded["a"].data, a)
    assert_nested_equal(decoded["b"].data, b)
    return frames


def test_the_same_tensor_referenced_twice_travels_once() -> None:
    t = torch.arange(1000, dtype=torch.float32)
    item = _item(
        a=_batched(t), b=_batched([t, (t,)]), c=mm.MultiModalFieldElem(t, mm.SharedField(2))
    )
    frames = mm.encode(item)
    assert payload_bytes_of(frames) == 4000
    assert len(frames) == 2
    decoded = mm.decode(frames, mm.MultiModalKwargsItem)
    a: Any = decoded["a"].data
    b: Any = decoded["b"].data
    assert b[0] is a and b[1][0] is a and decoded["c"].data is a
    assert_nested_equal(a, t)


def test_a_small_tensor_referenced_twice_is_inlined_once() -> None:
    t = torch.tensor([1, 2, 3], dtype=torch.int64)
    frames = mm.encode(_item(a=_batched(t), b=_batched(t)))
    assert len(frames) == 1
    assert payload_bytes_of(frames) == 24


@pytest.mark.parametrize(
    ("numel", "frames_expected"), [(1000, 2), (6, 1)], ids=["in a frame", "inline"]
)
def test_equal_views_of_one_storage_travel_once_and_decode_as_one_tensor(
    numel: int, frames_expected: int
) -> None:
    # Two view objects of the same bytes with the same dtype and shape are one tensor on
    # the wire: one run (the header does not grow by a second one, nor, inline, by a
    # second copy of the bytes), a reference table pointing both at it, and one object
    # when decoded, as for one tensor referenced twice.
    base = torch.arange(numel, dtype=torch.float32)
    first, second = base.view(2, numel // 2), base.view(2, numel // 2)
    assert first is not second
    frames = _round_trip_pair(first, second)
    assert len(frames) == frames_expected
    assert payload_bytes_of(frames) == 4 * numel
    envelope = header(frames)
    assert [(run.dtype, run.shape, run.count) for run in envelope.tensors] == [
        ("float32", [2, numel // 2], 1)
    ]
    assert envelope.refs == [0, 0]
    once = mm.encode(_item(a=_batched(first), b=_batched(first)))  # one object, twice
    assert frames[0].nbytes <= once[0].nbytes + len(msgspec.msgpack.encode([0, 0]))
    decoded = mm.decode(frames, mm.MultiModalKwargsItem)
    assert decoded["a"].data is decoded["b"].data
    copied = mm.decode([bytes(f) for f in frames], mm.MultiModalKwargsItem, copy=True)
    assert copied["a"].data is copied["b"].data


def test_views_of_one_storage_with_other_shapes_are_not_merged() -> None:
    # The same bytes under another shape are another tensor: both decode, as themselves.
    base = torch.arange(1000, dtype=torch.float32)
    frames = _round_trip_pair(base.view(10, 100), base.view(100, 10))
    assert len(frames) == 2 and payload_bytes_of(frames) == 4000
    runs = header(frames).tensors
    assert [(run.shape, run.data, run.offset) for run in runs] == [
        ([10, 100], 1, 0),
        ([100, 10], 1, 0),
    ]


def test_views_of_one_storage_apart_travel_as_their_own_bytes() -> None:
    # Bytes that neither overlap nor touch: one frame each, viewing the tensor, whatever the
    # storage (the planner's fast path); the gap between them does not travel.
    base = torch.arange(3000, dtype=torch.float32)
    first, last = base[:1000], base[2000:]
    frames = _round_trip_pair(first, last)
    assert len(frames) == 3
    assert payload_bytes_of(frames) == 8000
    assert [address(f) for f in frames[1:]] == [first.data_ptr(), last.data_ptr()]


def test_back_to_back_views_of_one_storage_travel_as_one_frame() -> None:
    # The same two views, touching: the general path makes them one region, one frame.
    base = torch.arange(2000, dtype=torch.float32)
    first, second = base[:1000], base[1000:]
    frames = _round_trip_pair(first, second)
    assert len(frames) == 2
    assert address(frames[1]) == base.data_ptr()


def test_overlapping_views_share_one_frame() -> None:
    base = torch.arange(3000, dtype=torch.float32)
    whole, middle, reshaped = base, base[1000:2000], base.view(30, 100)
    frames = mm.encode(_item(a=_batched(whole), b=_batched(middle), c=_batched(reshaped)))
    assert len(frames) == 2
    assert payload_bytes_of(frames) == 12000
    assert address(frames[1]) == base.data_ptr()
    decoded = mm.decode(frames, mm.MultiModalKwargsItem)
    assert_nested_equal(decoded["a"].data, whole)
    assert_nested_equal(decoded["b"].data, middle)
    assert_nested_equal(decoded["c"].data, reshaped)


def test_distinct_tensors_with_equal_values_both_travel() -> None:
    a, b = torch.ones(1000), torch.ones(1000)
    frames = mm.encode(_item(a=_batched(a), b=_batched(b)))
    assert payload_bytes_of(frames) == 8000


def _design_batch(
    n: int,
) -> tuple[dict[str, mm.NestedTensors], dict[str, mm.MultiModalFieldConfig]]:
    """The design's "64 small items": int64[3] + float16[16,16] batched, two shared tensors."""
    g = torch.Generator().manual_seed(0)
    batch: dict[str, mm.NestedTensors] = {
        "image_grid_thw": torch.randint(0, 100, (n, 3), generator=g),
        "pixel_values": torch.randn(n, 16, 16, generator=g).to(torch.float16),
        "embedding": torch.randn(128, generator=g),
        "scale": torch.randn(2, generator=g),
    }
    config = {
        "image_grid_thw": mm.MultiModalFieldConfig.batched("image"),
        "pixel_values": mm.MultiModalFieldConfig.batched("image"),
        "embedding": mm.MultiModalFieldConfig.shared("image", n),
        "scale": mm.MultiModalFieldConfig.shared("image", n),
    }
    return batch, config


def test_shared_data_across_64_items_costs_one_payload() -> None:
    batch, config = _design_batch(64)
    items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    assert len(items["image"]) == 64
    frames = mm.encode(items)
    # Each batched tensor once, each shared tensor once (not 64 times).
    assert payload_bytes_of(frames) == 64 * 3 * 8 + 64 * 16 * 16 * 2 + 128 * 4 + 2 * 4
    assert sum(f.nbytes for f in frames) < 40_000  # pickle sends ~2.2 MB for this
    decoded = mm.decode(frames, mm.MultiModalKwargsItems)
    assert_items_equal(decoded, items)
    first = decoded["image"][0]
    assert first is not None
    for item in decoded["image"]:
        assert item is not None
        assert item["embedding"].data is first["embedding"].data


@pytest.mark.parametrize("n", [4, 16], ids=["rows", "columns"])
def test_an_element_in_every_item_travels_once_and_comes_back_as_one_object(n: int) -> None:
    batch, config = _design_batch(n)
    items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    shared = [item["embedding"] for item in items["image"] if item is not None]
    assert all(elem is shared[0] for elem in shared)  # from_hf_inputs, as in vLLM
    frames = mm.encode(items)
    wire_items = msgspec.msgpack.decode(header(frames).body)["image"]
    if n == 4:  # rows: fewer than 16 items
        # The first item sends the element; later ones its index among elements sent
        # so far (numbered as completed: grid 0, pixels 1, embedding 2, scale 3).
        assert isinstance(wire_items[0]["embedding"], list)
        assert [wire["embedding"] for wire in wire_items[1:]] == [2, 2, 2]
        assert [wire["scale"] for wire in wire_items[1:]] == [3, 3, 3]
        assert all(isinstance(wire["pixel_values"], list) for wire in wire_items)
    else:
        # As columns: the grid's and the pixels' new elements are numbered 0-15 and 16-31
        # after their fields; the shared element is sent once in a values column (32),
        # then referred to by index, and so is the scale (33).
        keys = wire_items["keys"]
        columns = dict(zip(keys, wire_items["columns"], strict=True))
        assert [columns[key][0] for key in keys] == [1, 1, 0, 0]
        embedding, scale = columns["embedding"][1], columns["scale"][1]
        assert isinstance(embedding[0], list) and embedding[1:] == [32] * 15
        assert isinstance(scale[0], list) and scale[1:] == [33] * 15
    decoded = mm.decode(frames, mm.MultiModalKwargsItems)
    assert_items_equal(decoded, items)
    elems = [item["embedding"] for item in decoded["image"] if item is not None]
    assert len(elems) == n and all(elem is elems[0] for elem in elems)


def test_equal_but_distinct_elements_both_travel() -> None:
    t = torch.zeros(3)
    field = mm.BatchedField()
    first, second = mm.MultiModalFieldElem(t, field), mm.MultiModalFieldElem(t, field)
    frames = mm.encode(_item(a=first, b=second))
    wire = msgspec.msgpack.decode(header(frames).body)
    assert isinstance(wire["a"], list) and isinstance(wire["b"], list)
    decoded = mm.decode(frames, mm.MultiModalKwargsItem)
    assert decoded["a"] is not decoded["b"] and decoded["a"] == decoded["b"]


def test_views_of_one_batch_tensor_travel_as_one_frame() -> None:
    batch = torch.randn(64, 16, 16).to(torch.float16)
    items = mm.MultiModalKwargsItems.from_hf_inputs(
        {"pixel_values": batch}, {"pixel_values": mm.MultiModalFieldConfig.batched("image")}
    )
    frames = mm.encode(items)
    assert len(frames) == 2
    assert frames[1].nbytes == batch.numel() * 2
    assert address(frames[1]) == batch.data_ptr()
    runs = header(frames).tensors
    assert [(r.dtype, r.shape, r.count) for r in runs] == [("float16", [16, 16], 64)]


def test_flat_slices_of_one_tensor_travel_as_one_frame() -> None:
    batch = torch.randn(100, 64)
    config = {
        "pixel_values": mm.MultiModalFieldConfig.flat_from_sizes(
            "image", torch.tensor([10, 20, 30, 40])
        )
    }
    items = mm.MultiModalKwargsItems.from_hf_inputs({"pixel_values": batch}, config)
    frames = mm.encode(items)
    assert len(frames) == 2
    assert frames[1].nbytes == batch.numel() * 4
    assert address(frames[1]) == batch.data_ptr()
    decoded = mm.decode(frames, mm.MultiModalKwargsItems)
    assert_items_equal(decoded, items)
    assert_nested_equal(decoded.get_data()["pixel_values"], batch)


def test_from_hf_inputs_encode_decode_get_data_is_the_original_batch() -> None:
    batch, config = _design_batch(64)
    batch["video"] = torch.randn(6, 8, 32)
    batch["video_grid"] = torch.tensor([[1, 2, 4], [1, 2, 2]])
    config["video"] = mm.MultiModalFieldConfig.flat_from_sizes(
        "video", torch.tensor([8, 24]), dim=2
    )
    config["video_grid"] = mm.MultiModalFieldConfig.batched("video", keep_on_cpu=True)
    items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    for decoded in (
        mm.decode(mm.encode(items), mm.MultiModalKwargsItems),
        mm.decode_bytes(mm.encode_bytes(items), mm.MultiModalKwargsItems),
        mm.decode([bytes(f) for f in mm.encode(items)], mm.MultiModalKwargsItems, copy=True),
    ):
        assert list(decoded) == ["image", "video"]
        reduced = decoded.get_data()
        assert list(reduced) == list(batch)
        for key, value in batch.items():
            assert_nested_equal(reduced[key], value, f"get_data()[{key!r}]")
