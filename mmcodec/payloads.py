"""Realistic, seeded multimodal payloads, built the way an engine's front end builds them.

Each generator fakes a Hugging Face processor's output batch (``key -> NestedTensors``, float
pixels already cast to bfloat16 as engines do), declares each key with a
:class:`MultiModalFieldConfig` as the engine's model code does, and splits the batch with
:meth:`MultiModalKwargsItems.from_hf_inputs`. So, as in production, tensor items are views
of one batch tensor (``unbind`` for batched fields, slices for flat fields) and a shared
field's data is the same object in every item.

Values depend on the seed (``torch.Generator().manual_seed(seed)``); shapes do not, so
timings for different seeds are comparable. Generating every payload once takes well
under a second on a 2-core VM: floats are drawn directly in bfloat16
(``torch.randn(..., dtype=torch.bfloat16)``), which is about 3x faster than drawing float32
and casting, and never holds a float32 copy of a 150 MB batch.

Every generator takes ``api=``: any namespace with ``MultiModalFieldConfig`` and
``MultiModalKwargsItems`` (this package's domain module by default; ``vllm.multimodal.inputs``
builds the same payloads with vLLM's own classes and constructors).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any, Final, TypeAlias

import torch

from mmcodec.domain import multimodal as _DOMAIN
from mmcodec.domain.multimodal import (
    MultiModalFieldElem,
    MultiModalKwargsItems,
    NestedTensors,
)

__all__ = [
    "PAYLOADS",
    "Payload",
    "idefics3",
    "internvl",
    "iter_tensors",
    "llava",
    "minicpm_v",
    "qwen2_5_vl",
    "small_items",
    "tensor_bytes",
    "whisper",
]

Payload = Callable[[int], MultiModalKwargsItems]
"""A payload generator: seed -> items."""

Api: TypeAlias = ModuleType
"""Where the generators find ``MultiModalFieldConfig`` and ``MultiModalKwargsItems``."""


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _bf16(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Standard-normal values in bfloat16 (what pixels and features look like after casting)."""
    return torch.randn(shape, generator=g, dtype=torch.bfloat16)


# Qwen2.5-VL: one row per 14x14 patch of 2 frames x 3 channels; (t, h, w) in patches, h and w
# even (2x2 patches merge into one token). The first grid is a 1008x1008 image.
QWEN_PATCH_DIM: Final = 3 * 2 * 14 * 14
QWEN_GRIDS: Final = (
    (72, 72),
    (64, 80),
    (56, 56),
    (48, 64),
    (80, 60),
    (40, 52),
    (68, 76),
    (60, 60),
)


def qwen2_5_vl(seed: int, n_images: int = 1, *, api: Api = _DOMAIN) -> Any:
    """Qwen2.5-VL images: ``pixel_values`` flat over patches + ``image_grid_thw`` batched.

    Image ``i`` has grid ``(1, *QWEN_GRIDS[i % 8])``: one image is ``pixel_values``
    (5184, 1176) bf16 (12.2 MB) and ``image_grid_thw`` ``[1, 72, 72]``; 16 images cycle
    through eight grids twice, 64320 patches, 151 MB in one batch tensor.
    """
    if n_images < 1:
        raise ValueError(f"n_images must be positive, not {n_images}")
    g = _generator(seed)
    grid_thw = torch.tensor(
        [(1, *QWEN_GRIDS[i % len(QWEN_GRIDS)]) for i in range(n_images)], dtype=torch.int64
    )
    patches = grid_thw.prod(-1)
    batch: dict[str, NestedTensors] = {
        "pixel_values": _bf16(g, int(patches.sum()), QWEN_PATCH_DIM),
        "image_grid_thw": grid_thw,
    }
    config = {
        "pixel_values": api.MultiModalFieldConfig.flat_from_sizes("image", patches),
        "image_grid_thw": api.MultiModalFieldConfig.batched("image"),
    }
    return api.MultiModalKwargsItems.from_hf_inputs(batch, config)


def llava(seed: int, *, api: Api = _DOMAIN) -> Any:
    """LLaVA-1.5: one image, ``pixel_values`` (1, 3, 336, 336) bf16 batched (677 KB)."""
    g = _generator(seed)
    batch: dict[str, NestedTensors] = {"pixel_values": _bf16(g, 1, 3, 336, 336)}
    config = {"pixel_values": api.MultiModalFieldConfig.batched("image")}
    return api.MultiModalKwargsItems.from_hf_inputs(batch, config)


INTERNVL_IMAGE_TOKEN_ID: Final = 151667
"""``<IMG_CONTEXT>`` in InternVL2.5/3's Qwen2 tokenizer."""


def internvl(seed: int, n_images: int = 2, *, api: Api = _DOMAIN) -> Any:
    """InternVL: 13 tiles (12 + thumbnail) per image.

    ``pixel_values_flat`` (13 * n, 3, 448, 448) bf16 flat by ``[13] * n`` (15.7 MB per
    image), ``image_num_patches`` (n,) int64 batched, ``image_token_id`` a 0-d int64 shared
    by all ``n`` items.
    """
    if n_images < 1:
        raise ValueError(f"n_images must be positive, not {n_images}")
    g = _generator(seed)
    num_patches = torch.full((n_images,), 13, dtype=torch.int64)
    batch: dict[str, NestedTensors] = {
        "pixel_values_flat": _bf16(g, 13 * n_images, 3, 448, 448),
        "image_num_patches": num_patches,
        "image_token_id": torch.tensor(INTERNVL_IMAGE_TOKEN_ID, dtype=torch.int64),
    }
    config = {
        "pixel_values_flat": api.MultiModalFieldConfig.flat_from_sizes("image", num_patches),
        "image_num_patches": api.MultiModalFieldConfig.batched("image"),
        "image_token_id": api.MultiModalFieldConfig.shared("image", n_images),
    }
    return api.MultiModalKwargsItems.from_hf_inputs(batch, config)


# MiniCPM-V slices: (h, w) in 14-pixel patches, each slice flattened to (3, 14, 14 * h * w).
MINICPM_TGT_SIZES: Final = (
    (32, 32),
    (28, 36),
    (30, 34),
    (36, 28),
    (32, 32),
    (26, 40),
    (34, 30),
    (32, 32),
    (40, 26),
    (24, 42),
)


def minicpm_v(seed: int, *, api: Api = _DOMAIN) -> Any:
    """MiniCPM-V: one image as a ragged list of ten slices.

    ``pixel_values`` is batched over a list of lists, so the one item's data is a list of
    ten (3, 14, w_i) bf16 tensors, ``w_i = 14 * h_i * w_i`` in 14112..14560 (12 MB in all);
    ``tgt_sizes`` is batched over a list holding the item's (10, 2) int64 ``(h_i, w_i)``.
    """
    g = _generator(seed)
    slices: list[NestedTensors] = [_bf16(g, 3, 14, 14 * h * w) for h, w in MINICPM_TGT_SIZES]
    batch: dict[str, NestedTensors] = {
        "pixel_values": [slices],
        "tgt_sizes": [torch.tensor(MINICPM_TGT_SIZES, dtype=torch.int64)],
    }
    config = {
        "pixel_values": api.MultiModalFieldConfig.batched("image"),
        "tgt_sizes": api.MultiModalFieldConfig.batched("image"),
    }
    return api.MultiModalKwargsItems.from_hf_inputs(batch, config)


def whisper(seed: int, *, api: Api = _DOMAIN) -> Any:
    """Whisper-large-v3 style audio: 30 s of 128 mel bins, both keys batched.

    ``input_features`` (1, 128, 3000) bf16 (768 KB) and ``feature_attention_mask``
    (1, 3000) int64, ones over a seeded clip length, zeros over the padding.
    """
    g = _generator(seed)
    length = int(torch.randint(1500, 3001, (), generator=g))
    mask = torch.zeros(1, 3000, dtype=torch.int64)
    mask[:, :length] = 1
    batch: dict[str, NestedTensors] = {
        "input_features": _bf16(g, 1, 128, 3000),
        "feature_attention_mask": mask,
    }
    config = {
        "input_features": api.MultiModalFieldConfig.batched("audio"),
        "feature_attention_mask": api.MultiModalFieldConfig.batched("audio"),
    }
    return api.MultiModalKwargsItems.from_hf_inputs(batch, config)


def idefics3(seed: int, *, api: Api = _DOMAIN) -> Any:
    """Idefics3: one image as 12 crops + a global view, with a bool pixel mask.

    ``pixel_values`` (1, 13, 3, 364, 364) bf16 (10.3 MB) and ``pixel_attention_mask``
    (1, 13, 364, 364) bool, both batched. The crops are full; the global view is resized to
    a seeded aspect ratio and padded, so its mask is False below the image.
    """
    g = _generator(seed)
    mask = torch.ones(1, 13, 364, 364, dtype=torch.bool)
    global_height = int(torch.randint(182, 364, (), generator=g))
    mask[0, 12, global_height:, :] = False
    pixel_values = _bf16(g, 1, 13, 3, 364, 364)
    pixel_values[0, 12, :, global_height:, :] = 0  # the processor pads with zeros
    batch: dict[str, NestedTensors] = {
        "pixel_values": pixel_values,
        "pixel_attention_mask": mask,
    }
    config = {
        "pixel_values": api.MultiModalFieldConfig.batched("image"),
        "pixel_attention_mask": api.MultiModalFieldConfig.batched("image"),
    }
    return api.MultiModalKwargsItems.from_hf_inputs(batch, config)


def small_items(seed: int, n: int = 64, *, api: Api = _DOMAIN) -> Any:
    """Many small items, where per-item and per-tensor overhead dominates (design §7).

    Per item: ``grid`` int64[3] and ``pixel_values`` float16[16, 16], batched (views of
    (n, 3) and (n, 16, 16) batch tensors); ``embed`` float32[128] and ``scale`` float32[2],
    each shared by all ``n`` items (the same tensor object in every item).
    """
    if n < 1:
        raise ValueError(f"n must be positive, not {n}")
    g = _generator(seed)
    batch: dict[str, NestedTensors] = {
        "grid": torch.randint(1, 64, (n, 3), generator=g, dtype=torch.int64),
        "pixel_values": torch.randn(n, 16, 16, generator=g, dtype=torch.float16),
        "embed": torch.randn(128, generator=g, dtype=torch.float32),
        "scale": torch.randn(2, generator=g, dtype=torch.float32),
    }
    config = {
        "grid": api.MultiModalFieldConfig.batched("image"),
        "pixel_values": api.MultiModalFieldConfig.batched("image"),
        "embed": api.MultiModalFieldConfig.shared("image", n),
        "scale": api.MultiModalFieldConfig.shared("image", n),
    }
    return api.MultiModalKwargsItems.from_hf_inputs(batch, config)


PAYLOADS: Final[dict[str, Payload]] = {
    "qwen2.5-vl": qwen2_5_vl,
    "llava": llava,
    "internvl": internvl,
    "minicpm-v": minicpm_v,
    "whisper": whisper,
    "idefics3": idefics3,
    "qwen2.5-vl x16": functools.partial(qwen2_5_vl, n_images=16),
    "64 small items": functools.partial(small_items, n=64),
}
"""Stable benchmark names -> generators taking a seed, in the order reports list them."""


def iter_tensors(obj: object) -> Iterator[torch.Tensor]:
    """Every distinct tensor (by identity) reachable from ``obj``, depth-first, in order.

    Walks mappings (values, ``UserDict`` ones too), lists, tuples and the data of field
    elements (this package's :class:`MultiModalFieldElem`, or any object with ``data`` and
    ``field``, such as vLLM's); anything else (fields, ints, None) holds no tensor. A shared
    field's tensor is yielded once; views of one storage are distinct tensors and each is
    yielded.
    """
    seen: set[int] = set()  # ids stay unique: ``obj`` keeps every tensor alive

    def walk(value: object) -> Iterator[torch.Tensor]:
        if isinstance(value, torch.Tensor):
            if id(value) not in seen:
                seen.add(id(value))
                yield value
        elif isinstance(value, MultiModalFieldElem) or (
            hasattr(value, "field") and hasattr(value, "data")
        ):
            yield from walk(value.data)
        elif isinstance(value, Mapping):
            for v in value.values():
                yield from walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from walk(v)

    return walk(obj)


def tensor_bytes(obj: object) -> int:
    """The payload size of ``obj``: the sum of ``nbytes`` over its distinct tensors.

    A view counts its own bytes, not its storage's; a tensor shared by many items counts
    once. This is the least a codec that dedups by identity must move.
    """
    return sum(t.nbytes for t in iter_tensors(obj))
