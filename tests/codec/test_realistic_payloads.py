"""Round trips of realistic one-item payloads (design §1), built the way a processor does.

Every payload goes through both APIs (frames and one buffer) and is compared tensor by
tensor (class, dtype, shape, bytes and values) and field by field (class and parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from mmcodec.generated import multimodal as mm
from tests.codec.helpers import assert_items_equal, assert_nested_equal, random_tensor

Codec = Callable[[mm.MultiModalKwargsItems], mm.MultiModalKwargsItems]


def _via_frames(items: mm.MultiModalKwargsItems) -> mm.MultiModalKwargsItems:
    return mm.decode(mm.encode(items), mm.MultiModalKwargsItems)


def _via_buffer(items: mm.MultiModalKwargsItems) -> mm.MultiModalKwargsItems:
    return mm.decode_bytes(mm.encode_bytes(items), mm.MultiModalKwargsItems)


def _via_bytes(items: mm.MultiModalKwargsItems) -> mm.MultiModalKwargsItems:
    # Read-only frames (what a transport usually hands over): no warning may escape.
    frames = [bytes(f) for f in mm.encode(items)]
    return mm.decode(frames, mm.MultiModalKwargsItems)


CODECS = [
    pytest.param(_via_frames, id="frames"),
    pytest.param(_via_buffer, id="buffer"),
    pytest.param(_via_bytes, id="bytes-frames"),
]


def _bf16(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(torch.bfloat16)


def _check(
    codec: Codec,
    batch: dict[str, mm.NestedTensors],
    config: dict[str, mm.MultiModalFieldConfig],
    modality: str,
) -> mm.MultiModalKwargsItems:
    items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    assert list(items) == [modality]
    assert len(items[modality]) == 1
    decoded = codec(items)
    assert_items_equal(decoded, items)
    reduced = decoded.get_data()
    assert list(reduced) == list(batch)
    for key, value in batch.items():
        assert_nested_equal(reduced[key], value, f"get_data()[{key!r}]")
    return decoded


@pytest.mark.parametrize("codec", CODECS)
def test_qwen2_5_vl_full_size(codec: Codec) -> None:
    pixel_values = _bf16(5184, 1176)
    grid = torch.tensor([[1, 72, 72]], dtype=torch.int64)
    config = {
        "pixel_values": mm.MultiModalFieldConfig.flat_from_sizes("image", grid.prod(-1)),
        "image_grid_thw": mm.MultiModalFieldConfig.batched("image"),
    }
    decoded = _check(codec, {"pixel_values": pixel_values, "image_grid_thw": grid}, config, "image")
    item = decoded["image"][0]
    assert item is not None
    elem = item["pixel_values"]
    assert isinstance(elem.data, torch.Tensor)
    assert (elem.data.dtype, tuple(elem.data.shape)) == (torch.bfloat16, (5184, 1176))
    assert isinstance(elem.field, mm.FlatField)
    assert elem.field.slices == [slice(0, 5184)]
    assert (elem.field.dim, elem.field.keep_on_cpu) == (0, False)
    grid_elem = item["image_grid_thw"]
    assert isinstance(grid_elem.data, torch.Tensor)
    assert grid_elem.data.tolist() == [1, 72, 72]
    assert grid_elem.data.dtype == torch.int64
    assert type(grid_elem.field) is mm.BatchedField


def test_qwen2_5_vl_feature_spec() -> None:
    """The per-request unit: the item inside a MultiModalFeatureSpec with an is_embed mask."""
    pixel_values = _bf16(1296, 1176, seed=1)
    grid = torch.tensor([[1, 36, 36]])
    config = {
        "pixel_values": mm.MultiModalFieldConfig.flat_from_sizes("image", grid.prod(-1)),
        "image_grid_thw": mm.MultiModalFieldConfig.batched("image"),
    }
    items = mm.MultiModalKwargsItems.from_hf_inputs(
        {"pixel_values": pixel_values, "image_grid_thw": grid}, config
    )
    item = items["image"][0]
    is_embed = torch.ones(326, dtype=torch.bool)
    is_embed[0] = is_embed[-1] = False
    spec = mm.MultiModalFeatureSpec(
        data=item,
        modality="image",
        identifier="sha256:abc",
        mm_position=mm.PlaceholderRange(offset=15, length=326, is_embed=is_embed),
        mm_hash="abc",
    )
    for decoded in (
        mm.decode(mm.encode(spec), mm.MultiModalFeatureSpec),
        mm.decode_bytes(bytes(mm.encode_bytes(spec)), mm.MultiModalFeatureSpec),
    ):
        assert type(decoded) is mm.MultiModalFeatureSpec
        assert decoded.data is not None
        assert item is not None
        wrapped = mm.MultiModalKwargsItems({"image": [decoded.data]})
        assert_items_equal(wrapped, mm.MultiModalKwargsItems({"image": [item]}))
        assert (decoded.modality, decoded.identifier, decoded.mm_hash) == (
            "image",
            "sha256:abc",
            "abc",
        )
        position = decoded.mm_position
        assert type(position) is mm.PlaceholderRange
        assert (position.offset, position.length) == (15, 326)
        assert_nested_equal(position.is_embed, is_embed, "$.mm_position.is_embed")
        assert decoded == spec


@pytest.mark.parametrize("codec", CODECS)
def test_llava_batched_image(codec: Codec) -> None:
    pixel_values = _bf16(1, 3, 336, 336, seed=2)
    config = {"pixel_values": mm.MultiModalFieldConfig.batched("image")}
    decoded = _check(codec, {"pixel_values": pixel_values}, config, "image")
    item = decoded["image"][0]
    assert item is not None
    data = item["pixel_values"].data
    assert isinstance(data, torch.Tensor)
    assert tuple(data.shape) == (3, 336, 336)


@pytest.mark.parametrize("codec", CODECS)
def test_internvl_flat_patches_and_shared_token_id(codec: Codec) -> None:
    pixel_values = _bf16(13, 3, 448, 448, seed=3)
    num_patches = torch.tensor([13])
    config = {
        "pixel_values_flat": mm.MultiModalFieldConfig.flat_from_sizes("image", num_patches),
        "image_num_patches": mm.MultiModalFieldConfig.batched("image"),
        "image_token_id": mm.MultiModalFieldConfig.shared("image", batch_size=1),
    }
    batch: dict[str, mm.NestedTensors] = {
        "pixel_values_flat": pixel_values,
        "image_num_patches": num_patches,
        "image_token_id": torch.tensor(151667),
    }
    decoded = _check(codec, batch, config, "image")
    item = decoded["image"][0]
    assert item is not None
    token = item["image_token_id"]
    assert isinstance(token.data, torch.Tensor)
    assert token.data.shape == () and token.data.item() == 151667
    assert type(token.field) is mm.SharedField and token.field.batch_size == 1
    patches = item["image_num_patches"].data
    assert isinstance(patches, torch.Tensor)
    assert patches.shape == () and patches.item() == 13


@pytest.mark.parametrize("codec", CODECS)
def test_minicpm_v_ragged_list_of_slices(codec: Codec) -> None:
    widths = [14336, 14112, 14336, 13720, 14336, 14000, 14336, 12992, 14336, 14126]
    slices = [_bf16(3, 14, w, seed=10 + i) for i, w in enumerate(widths)]
    tgt_sizes = torch.tensor([[14, w // 14] for w in widths])
    config = {
        "pixel_values": mm.MultiModalFieldConfig.batched("image"),
        "tgt_sizes": mm.MultiModalFieldConfig.batched("image"),
    }
    batch: dict[str, mm.NestedTensors] = {
        "pixel_values": [list[mm.NestedTensors](slices)],
        "tgt_sizes": [tgt_sizes],
    }
    items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    decoded = codec(items)
    assert_items_equal(decoded, items)
    item = decoded["image"][0]
    assert item is not None
    data: Any = item["pixel_values"].data
    assert type(data) is list and len(data) == 10
    assert [tuple(t.shape) for t in data] == [(3, 14, w) for w in widths]
    # Ragged: the reduce keeps a list (of one item's list of slices).
    reduced = decoded.get_data()
    assert_nested_equal(reduced["pixel_values"], [slices])


@pytest.mark.parametrize("codec", CODECS)
def test_whisper_audio_features(codec: Codec) -> None:
    features = _bf16(1, 128, 3000, seed=4)
    mask = torch.ones(1, 3000, dtype=torch.int32)
    config = {
        "input_features": mm.MultiModalFieldConfig.batched("audio"),
        "feature_attention_mask": mm.MultiModalFieldConfig.batched("audio"),
    }
    decoded = _check(
        codec, {"input_features": features, "feature_attention_mask": mask}, config, "audio"
    )
    item = decoded["audio"][0]
    assert item is not None
    data = item["input_features"].data
    assert isinstance(data, torch.Tensor) and tuple(data.shape) == (128, 3000)


@pytest.mark.parametrize("codec", CODECS)
def test_idefics3_bool_mask_beside_pixel_values(codec: Codec) -> None:
    pixel_values = _bf16(2, 3, 364, 364, seed=5)
    mask = random_tensor(torch.bool, (2, 364, 364), seed=6)
    sizes = torch.tensor([2])
    config = {
        "pixel_values": mm.MultiModalFieldConfig.flat_from_sizes("image", sizes),
        "pixel_attention_mask": mm.MultiModalFieldConfig.flat_from_sizes("image", sizes),
        "num_patches": mm.MultiModalFieldConfig.batched("image"),
    }
    batch: dict[str, mm.NestedTensors] = {
        "pixel_values": pixel_values,
        "pixel_attention_mask": mask,
        "num_patches": sizes,
    }
    decoded = _check(codec, batch, config, "image")
    item = decoded["image"][0]
    assert item is not None
    got_mask = item["pixel_attention_mask"].data
    assert isinstance(got_mask, torch.Tensor) and got_mask.dtype == torch.bool
    assert int(got_mask.sum()) == int(mask.sum())
