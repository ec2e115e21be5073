"""The benchmark payloads are realistic and deterministic; the baselines round-trip them."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

from bench.baselines import (
    BASELINES,
    Baseline,
    Frame,
    MsgspecHooks,
    PickleOutOfBand,
    TorchSave,
    vllm_msgpack,
)
from mmcodec.domain.multimodal import (
    BatchedField,
    FlatField,
    MultiModalFieldConfig,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalKwargsItems,
    NestedTensors,
    SharedField,
)
from mmcodec.payloads import (
    PAYLOADS,
    QWEN_GRIDS,
    iter_tensors,
    llava,
    small_items,
    tensor_bytes,
)
from mmcodec.runtime.equality import values_equal

BF16, I64, F16, F32, BOOL = torch.bfloat16, torch.int64, torch.float16, torch.float32, torch.bool


def _sig(data: NestedTensors | None) -> Any:
    """A structural signature: (dtype, shape) per tensor, lists as lists."""
    if isinstance(data, torch.Tensor):
        return (data.dtype, tuple(data.shape))
    if isinstance(data, (list, tuple)):
        return [_sig(d) for d in data]
    return data


def _signature(items: MultiModalKwargsItems) -> dict[str, list[dict[str, Any]]]:
    return {
        modality: [
            {key: (_sig(elem.data), type(elem.field)) for key, elem in _item(it).items()}
            for it in item_list
        ]
        for modality, item_list in items.items()
    }


def _item(item: MultiModalKwargsItem | None) -> MultiModalKwargsItem:
    assert item is not None
    return item


def _tensor(x: object) -> torch.Tensor:
    assert isinstance(x, torch.Tensor)
    return x


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


MINICPM_WIDTHS = [14336, 14112, 14280, 14112, 14336, 14560, 14280, 14336, 14560, 14112]

EXPECTED: dict[str, dict[str, list[dict[str, Any]]]] = {
    "qwen2.5-vl": {
        "image": [
            {
                "pixel_values": ((BF16, (5184, 1176)), FlatField),
                "image_grid_thw": ((I64, (3,)), BatchedField),
            }
        ]
    },
    "llava": {"image": [{"pixel_values": ((BF16, (3, 336, 336)), BatchedField)}]},
    "internvl": {
        "image": [
            {
                "pixel_values_flat": ((BF16, (13, 3, 448, 448)), FlatField),
                "image_num_patches": ((I64, ()), BatchedField),
                "image_token_id": ((I64, ()), SharedField),
            }
        ]
        * 2
    },
    "minicpm-v": {
        "image": [
            {
                "pixel_values": ([(BF16, (3, 14, w)) for w in MINICPM_WIDTHS], BatchedField),
                "tgt_sizes": ((I64, (10, 2)), BatchedField),
            }
        ]
    },
    "whisper": {
        "audio": [
            {
                "input_features": ((BF16, (128, 3000)), BatchedField),
                "feature_attention_mask": ((I64, (3000,)), BatchedField),
            }
        ]
    },
    "idefics3": {
        "image": [
            {
                "pixel_values": ((BF16, (13, 3, 364, 364)), BatchedField),
                "pixel_attention_mask": ((BOOL, (13, 364, 364)), BatchedField),
            }
        ]
    },
    "qwen2.5-vl x16": {
        "image": [
            {
                "pixel_values": ((BF16, (h * w, 1176)), FlatField),
                "image_grid_thw": ((I64, (3,)), BatchedField),
            }
            for h, w in (QWEN_GRIDS * 2)
        ]
    },
    "64 small items": {
        "image": [
            {
                "grid": ((I64, (3,)), BatchedField),
                "pixel_values": ((F16, (16, 16)), BatchedField),
                "embed": ((F32, (128,)), SharedField),
                "scale": ((F32, (2,)), SharedField),
            }
        ]
        * 64
    },
}

# Everything but the 151 MB request, twice per test: keeps the suite fast.
SMALLER = [name for name in PAYLOADS if name != "qwen2.5-vl x16"]


@pytest.fixture(scope="module")
def payloads() -> dict[str, MultiModalKwargsItems]:
    """Every payload once, seed 0."""
    return {name: generate(0) for name, generate in PAYLOADS.items()}


# --- payloads -------------------------------------------------------------------------------


def test_registry_names_are_stable() -> None:
    assert list(PAYLOADS) == list(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_shapes_dtypes_and_fields(name: str, payloads: dict[str, MultiModalKwargsItems]) -> None:
    assert _signature(payloads[name]) == EXPECTED[name]


@pytest.mark.parametrize("name", SMALLER)
def test_same_seed_same_payload_other_seed_other_values(name: str) -> None:
    generate = PAYLOADS[name]
    assert generate(7) == generate(7)
    assert generate(7) != generate(8)


def test_metadata_matches_the_data(payloads: dict[str, MultiModalKwargsItems]) -> None:
    for item in payloads["qwen2.5-vl x16"]["image"]:
        t, h, w = _tensor(_item(item)["image_grid_thw"].data).tolist()
        assert (t, _tensor(_item(item)["pixel_values"].data).shape[0]) == (1, t * h * w)
    assert _item(payloads["qwen2.5-vl"]["image"][0])["image_grid_thw"].data is not None
    minicpm = _item(payloads["minicpm-v"]["image"][0])
    slices = minicpm["pixel_values"].data
    assert isinstance(slices, list)
    sizes = _tensor(minicpm["tgt_sizes"].data).tolist()
    assert [_tensor(s).shape[2] for s in slices] == [14 * h * w for h, w in sizes]
    internvl = _item(payloads["internvl"]["image"][0])
    assert _tensor(internvl["image_num_patches"].data).item() == 13


def _tensor_elems(items: MultiModalKwargsItems, key: str) -> list[torch.Tensor]:
    return [_tensor(_item(it)[key].data) for its in items.values() for it in its]


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("qwen2.5-vl x16", ["pixel_values", "image_grid_thw"]),
        ("internvl", ["pixel_values_flat", "image_num_patches"]),
        ("64 small items", ["grid", "pixel_values"]),
        ("idefics3", ["pixel_values", "pixel_attention_mask"]),
    ],
)
def test_items_are_views_of_one_batch_tensor(
    name: str, keys: list[str], payloads: dict[str, MultiModalKwargsItems]
) -> None:
    for key in keys:
        tensors = _tensor_elems(payloads[name], key)
        assert len({_ptr(t) for t in tensors}) == 1, key
        offsets = [t.storage_offset() for t in tensors]
        assert offsets == sorted(offsets)
        assert all(t._base is not None for t in tensors), key


def test_flat_items_are_the_configs_slices(payloads: dict[str, MultiModalKwargsItems]) -> None:
    items = payloads["qwen2.5-vl x16"]["image"]
    field = _item(items[0])["pixel_values"].field
    assert isinstance(field, FlatField)
    starts = [s.start for s in field.slices if isinstance(s, slice)]
    offsets = [_tensor(_item(it)["pixel_values"].data).storage_offset() for it in items]
    assert offsets == [start * 1176 for start in starts]
    assert all(_item(it)["pixel_values"].field == field for it in items)


@pytest.mark.parametrize(
    ("name", "keys"), [("64 small items", ["embed", "scale"]), ("internvl", ["image_token_id"])]
)
def test_shared_fields_hold_one_object(
    name: str, keys: list[str], payloads: dict[str, MultiModalKwargsItems]
) -> None:
    for key in keys:
        tensors = _tensor_elems(payloads[name], key)
        assert all(t is tensors[0] for t in tensors)


def test_tensor_bytes_counts_distinct_tensors(payloads: dict[str, MultiModalKwargsItems]) -> None:
    small = payloads["64 small items"]
    assert len(list(iter_tensors(small))) == 64 * 2 + 2
    assert tensor_bytes(small) == 64 * (3 * 8 + 16 * 16 * 2) + 128 * 4 + 2 * 4
    assert tensor_bytes(payloads["llava"]) == 3 * 336 * 336 * 2
    assert tensor_bytes(payloads["qwen2.5-vl"]) == 5184 * 1176 * 2 + 3 * 8
    assert tensor_bytes(payloads["minicpm-v"]) == sum(3 * 14 * w * 2 for w in MINICPM_WIDTHS) + 160


def test_iter_tensors_walks_containers() -> None:
    a, b = torch.zeros(1), torch.ones(2)
    data: NestedTensors = (a, [b, 3])
    elem = MultiModalFieldElem(data, BatchedField())
    assert [id(t) for t in iter_tensors({"k": [elem, None, a]})] == [id(a), id(b)]
    assert tensor_bytes([elem, a, elem]) == 4 + 8


def test_bad_counts_are_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        small_items(0, n=0)


# --- baselines ------------------------------------------------------------------------------


def _as_transport(frames: list[Frame]) -> list[Frame]:
    """What a receiver gets: fresh, read-only ``bytes``, sharing nothing with the sender."""
    return [bytes(f) for f in frames]


def _leaves(data: NestedTensors | None) -> Iterator[object]:
    if isinstance(data, (list, tuple)):
        for d in data:
            yield from _leaves(d)
    else:
        yield data


def _assert_same_tensors(got: MultiModalKwargsItems, want: MultiModalKwargsItems) -> None:
    """Same modalities, items, keys and field classes; every leaf equal (lists vs tuples aside)."""
    assert isinstance(got, MultiModalKwargsItems)
    assert list(got) == list(want)
    for modality in want:
        assert len(got[modality]) == len(want[modality])
        for got_item, want_item in zip(got[modality], want[modality], strict=True):
            assert isinstance(got_item, MultiModalKwargsItem)
            assert list(got_item) == list(_item(want_item))
            for key, want_elem in _item(want_item).items():
                got_elem = got_item[key]
                assert type(got_elem.field) is type(want_elem.field)
                pairs = zip(_leaves(got_elem.data), _leaves(want_elem.data), strict=True)
                for g, w in pairs:
                    assert values_equal(g, w), (modality, key)


def _ids(baseline: Baseline) -> str:
    return baseline.name


@pytest.mark.parametrize("baseline", BASELINES, ids=_ids)
@pytest.mark.parametrize("make", [small_items, llava], ids=["small_items", "llava"])
def test_baselines_round_trip(baseline: Baseline, make: Callable[[int], Any]) -> None:
    items = make(3)
    frames = baseline.encode(items)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decoded = baseline.decode(_as_transport(frames))
    _assert_same_tensors(decoded, items)
    if not isinstance(baseline, MsgspecHooks):  # lossless ones: strict domain equality too
        assert decoded == items


def test_baseline_names_are_distinct() -> None:
    assert len({b.name for b in BASELINES}) == len(BASELINES)


def test_torch_tensors_never_go_out_of_band() -> None:
    assert len(PickleOutOfBand().encode(small_items(0))) == 1


def test_torch_save_keeps_sharing_and_tuples() -> None:
    tuple_specs = FlatField(((slice(None), slice(0, 1)), (slice(None), slice(1, 3))), dim=1)
    data: NestedTensors = (torch.ones(2), 4)
    item = MultiModalKwargsItem(
        {
            "x": MultiModalFieldElem(data, tuple_specs),
            "y": MultiModalFieldElem(torch.zeros(2, 2), FlatField([slice(0, 2), slice(2, 3)])),
        }
    )
    items = MultiModalKwargsItems({"image": [item, None]})
    assert TorchSave().decode(_as_transport(TorchSave().encode(items))) == items
    decoded = TorchSave().decode(TorchSave().encode(small_items(0)))
    embeds = _tensor_elems(decoded, "embed")
    assert all(t is embeds[0] for t in embeds)


def test_hooks_encode_is_zero_copy_for_large_tensors() -> None:
    items = llava(0)
    frames = MsgspecHooks().encode(items)
    (pixels,) = _tensor_elems(items, "pixel_values")
    assert len(frames) == 2
    assert np.frombuffer(frames[1], dtype=np.uint8).ctypes.data == pixels.data_ptr()


def test_hooks_is_lossy_as_today_codecs_are() -> None:
    """Tuples come back as lists; a shared tensor travels and returns once per item."""
    codec = MsgspecHooks()
    t = torch.arange(4)
    config = {
        "pair": MultiModalFieldConfig.batched("image"),
        "shared": MultiModalFieldConfig.shared("image", 2),
    }
    batch: dict[str, NestedTensors] = {"pair": [(t, 1), (t, 2)], "shared": torch.zeros(64)}
    items = MultiModalKwargsItems.from_hf_inputs(batch, config)
    frames = codec.encode(items)
    assert len(frames) == 1 + 2  # the shared 256-byte tensor, once per item
    decoded = codec.decode(_as_transport(frames))
    _assert_same_tensors(decoded, items)
    assert decoded != items
    assert type(_item(decoded["image"][0])["pair"].data) is list
    first, second = _tensor_elems(decoded, "shared")
    assert first is not second


def test_vllm_baseline_needs_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        assert vllm_msgpack() is None
    else:  # pragma: no cover - vLLM is not installed in this project's environment
        assert vllm_msgpack() is not None
