"""Valid messages to attack, and the oracle that judges what a decoder made of them.

The samples cover what the shipped schema can say: batched, flat (dim 0 and dim 1,
tuple slices) and shared fields, ragged lists, tuples with int and float leaves,
empty and 0-dim tensors, runs of back-to-back views, inline and frame payloads,
bool payloads in frames, a cached (None) item, and a ``MultiModalFeatureSpec``.

The oracle (:func:`check_value`, :func:`same`) is written against the schema, not
against the codec: a decoded value must be a well-typed value of the schema (every
field of its declared type, every tensor of a wire dtype with readable memory).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime.dtypes import BY_TORCH
from mmcodec.runtime.equality import tensors_equal

# -- samples ----------------------------------------------------------------------------


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def kwargs_items() -> mm.MultiModalKwargsItems:
    """Two images (flat bf16 pixels, batched grid and bool mask, a shared 0-dim token id)
    and a video list whose only entry is cached (None)."""
    g = _gen(0)
    batch = {
        "pixel_values": torch.randn(6, 128, generator=g).to(torch.bfloat16),
        "image_grid_thw": torch.tensor([[1, 2, 3], [1, 4, 4]]),
        "attention_mask": torch.rand(2, 600, generator=g) > 0.5,
        "image_token_id": torch.tensor(151655),
    }
    config = {
        "pixel_values": mm.MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([2, 4])),
        "image_grid_thw": mm.MultiModalFieldConfig.batched("image"),
        "attention_mask": mm.MultiModalFieldConfig.batched("image"),
        "image_token_id": mm.MultiModalFieldConfig.shared("image", 2),
    }
    items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    items["video"] = [None]
    return items


def nested_item() -> mm.MultiModalKwargsItem:
    """Ragged lists, tuples with leaves, empty tensors, a dim-1 flat field, a cached key."""
    g = _gen(1)
    grid = torch.arange(2 * 3 * 40, dtype=torch.float64).reshape(2, 3, 40)
    empties: list[mm.NestedTensors] = [torch.empty(0), torch.zeros(0, 3, dtype=torch.int8), []]
    return mm.MultiModalKwargsItem(
        {
            "ragged": mm.MultiModalFieldElem(
                [
                    torch.randn(3, 14, 40, generator=g).to(torch.float16),
                    torch.randn(3, 14, 20, generator=g).to(torch.float16),
                ],
                mm.BatchedField(),
            ),
            "mixed": mm.MultiModalFieldElem(
                (
                    torch.tensor([1, -2, 3, -4], dtype=torch.int32),
                    7,
                    2.5,
                    empties,
                    (torch.tensor(True),),
                ),
                mm.BatchedField(keep_on_cpu=True),
            ),
            "cached": mm.MultiModalFieldElem(None, mm.SharedField(1)),
            "columns": mm.MultiModalFieldElem(
                grid[:, :, 8:],  # not contiguous: the encoder makes it so, once
                mm.FlatField([(slice(None), slice(None), slice(8, 40))], dim=2),
            ),
        }
    )


def feature_spec() -> mm.MultiModalFeatureSpec:
    """An audio item with its placeholder range and bool embedding mask."""
    g = _gen(2)
    item = mm.MultiModalKwargsItem(
        {
            "input_features": mm.MultiModalFieldElem(
                torch.randn(16, 30, generator=g), mm.BatchedField()
            ),
            "feature_attention_mask": mm.MultiModalFieldElem(
                torch.ones(30, dtype=torch.bool), mm.BatchedField()
            ),
        }
    )
    is_embed = torch.zeros(34, dtype=torch.bool)
    is_embed[2:32] = True
    return mm.MultiModalFeatureSpec(
        data=item,
        modality="audio",
        identifier="audio-7f3a",
        mm_position=mm.PlaceholderRange(offset=5, length=34, is_embed=is_embed),
        mm_hash="deadbeef",
    )


def runs_and_dtypes() -> mm.MultiModalKwargsItems:
    """Four batched views of one storage (one run, one frame), and assorted dtypes."""
    g = _gen(3)
    batch: dict[str, mm.NestedTensors] = {
        "embeds": torch.randn(4, 64, generator=g),
        "ids": torch.randint(-100, 100, (4, 5), generator=g, dtype=torch.int8),
        "big": torch.randint(0, 1 << 62, (4, 2), generator=g).to(torch.uint64),
        "waves": torch.randn(4, 3, generator=g, dtype=torch.complex64),
        "fp8": torch.randn(4, 8, generator=g).to(torch.float8_e4m3fn),
        "scale": torch.tensor([0.5, 1.5, -2.0, 8.0], dtype=torch.float64),
    }
    config = {key: mm.MultiModalFieldConfig.batched("audio") for key in batch}
    return mm.MultiModalKwargsItems.from_hf_inputs(batch, config)


def column_list() -> mm.MultiModalKwargsItems:
    """17 images, the third None: enough present items (16) to travel as a column list
    (docs/wire-format.md#column-lists): batched views of one storage, a flat field's slices
    (one FlatField object), a shared tensor (one element in every item), and nested data
    that is None, a tensor or a tuple by item."""
    g = _gen(4)
    n = 16
    sizes = torch.tensor([1 + i % 3 for i in range(n)])
    batch: dict[str, mm.NestedTensors] = {
        "pixels": torch.randn(int(sizes.sum()), 64, generator=g).to(torch.bfloat16),  # a frame
        "grid": torch.randint(0, 64, (n, 3), generator=g),
        "token": torch.tensor(151655),
    }
    config = {
        "pixels": mm.MultiModalFieldConfig.flat_from_sizes("image", sizes),
        "grid": mm.MultiModalFieldConfig.batched("image"),
        "token": mm.MultiModalFieldConfig.shared("image", n),
    }
    items = mm.MultiModalKwargsItems.from_hf_inputs(batch, config)
    image = list(items["image"])
    mixed = mm.BatchedField()
    for i, item in enumerate(image):
        assert item is not None
        data: mm.NestedTensors | None = None if i % 4 == 0 else torch.full((2,), float(i))
        if i % 4 == 3:
            data = (torch.ones(1, dtype=torch.int8), i)
        item["mixed"] = mm.MultiModalFieldElem(data, mixed)
    return mm.MultiModalKwargsItems({"image": [*image[:2], None, *image[2:]]})


SampleFactory = Callable[[], Any]

SAMPLES: dict[str, tuple[type[Any], SampleFactory]] = {
    "kwargs_items": (mm.MultiModalKwargsItems, kwargs_items),
    "nested_item": (mm.MultiModalKwargsItem, nested_item),
    "feature_spec": (mm.MultiModalFeatureSpec, feature_spec),
    "runs_and_dtypes": (mm.MultiModalKwargsItems, runs_and_dtypes),
    "column_list": (mm.MultiModalKwargsItems, column_list),
}


# -- building malicious messages ----------------------------------------------------------

HEAD_MAGIC, HEAD_WIRE, HEAD_SCHEMA, HEAD_MAJOR, HEAD_ROOT, HEAD_TENSORS, HEAD_REFS, HEAD_BODY = (
    range(8)
)
"""Positions in the envelope ``[magic, wire_version, schema, major, root, tensors, refs, body]``."""
RUN_DTYPE, RUN_SHAPE, RUN_DATA, RUN_OFFSET, RUN_COUNT = range(5)
"""Positions in a tensor run ``[dtype, shape, data, offset, count]``."""


def header(frames: list[Any]) -> list[Any]:
    """Frame 0 decoded untyped: the envelope as plain lists, dicts, ints and bytes."""
    envelope: list[Any] = msgspec.msgpack.decode(frames[0])
    return envelope


def with_header(envelope: Any, frames: list[Any]) -> list[bytes]:
    """The message with frame 0 replaced by ``envelope`` re-encoded, payload frames as bytes."""
    return [msgspec.msgpack.encode(envelope), *(bytes(f) for f in frames[1:])]


def run_of(envelope: list[Any], ref: int) -> list[Any]:
    """The tensor run that holds tensor reference ``ref`` (via the refs table, if any)."""
    refs = envelope[HEAD_REFS]
    position = refs[ref] if refs else ref
    for run in envelope[HEAD_TENSORS]:
        count = run[RUN_COUNT] if len(run) > RUN_COUNT else 1
        if position < count:
            return run  # type: ignore[no-any-return]
        position -= count
    raise AssertionError(f"no run holds tensor reference {ref}")


def run_index_of(envelope: list[Any], ref: int) -> int:
    run = run_of(envelope, ref)
    return next(i for i, r in enumerate(envelope[HEAD_TENSORS]) if r is run)


# -- the oracle -----------------------------------------------------------------------------


class Malformed(AssertionError):
    """A decoded value that is not a well-typed value of the schema."""


def _fail(path: str, what: str, value: object) -> Malformed:
    return Malformed(f"{path}: expected {what}, got {type(value).__name__}: {value!r:.200}")


def touch(t: torch.Tensor) -> None:
    """Read every byte of a tensor, so that a view past its buffer cannot go unnoticed."""
    if t.numel():
        t.reshape(-1).view(torch.uint8).sum()


def _check_int(value: object, path: str, ge: int | None = None) -> None:
    if type(value) is not int or (ge is not None and value < ge):
        raise _fail(path, f"an int >= {ge}" if ge is not None else "an int", value)


def _check_tensor(value: object, path: str) -> None:
    if type(value) is not torch.Tensor or value.dtype not in BY_TORCH or not value.is_cpu:
        raise _fail(path, "a CPU tensor of a wire dtype", value)
    touch(value)


def _check_nested(value: object, path: str) -> None:
    if type(value) is torch.Tensor:
        _check_tensor(value, path)
    elif type(value) is list or type(value) is tuple:
        for index, item in enumerate(value):
            _check_nested(item, f"{path}[{index}]")
    elif type(value) is not int and type(value) is not float:
        raise _fail(path, "nested tensors", value)


def _check_slice(value: object, path: str) -> None:
    if type(value) is not slice:
        raise _fail(path, "a slice", value)
    for bound in (value.start, value.stop, value.step):
        if bound is not None:
            _check_int(bound, path)


def _check_field(value: object, path: str) -> None:
    kind = type(value)
    if kind not in (mm.BatchedField, mm.FlatField, mm.SharedField):
        raise _fail(path, "a BatchedField, FlatField or SharedField", value)
    if type(value.keep_on_cpu) is not bool:  # type: ignore[attr-defined]
        raise _fail(f"{path}.keep_on_cpu", "a bool", value.keep_on_cpu)  # type: ignore[attr-defined]
    if isinstance(value, mm.FlatField):
        _check_int(value.dim, f"{path}.dim", ge=0)
        if type(value.slices) is not list:
            raise _fail(f"{path}.slices", "a list", value.slices)
        for index, spec in enumerate(value.slices):
            at = f"{path}.slices[{index}]"
            if type(spec) is tuple:
                for position, one in enumerate(spec):
                    _check_slice(one, f"{at}[{position}]")
            else:
                _check_slice(spec, at)
    elif isinstance(value, mm.SharedField):
        _check_int(value.batch_size, f"{path}.batch_size", ge=0)


def _check_elem(value: object, path: str) -> None:
    if type(value) is not mm.MultiModalFieldElem:
        raise _fail(path, "a MultiModalFieldElem", value)
    if value.data is not None:
        _check_nested(value.data, f"{path}.data")
    _check_field(value.field, f"{path}.field")


def _check_item(value: object, path: str) -> None:
    if type(value) is not mm.MultiModalKwargsItem:
        raise _fail(path, "a MultiModalKwargsItem", value)
    for key, elem in value.items():
        if type(key) is not str:
            raise _fail(f"{path} key", "a str", key)
        _check_elem(elem, f"{path}[{key!r}]")


def _check_items(value: object, path: str) -> None:
    if type(value) is not mm.MultiModalKwargsItems:
        raise _fail(path, "a MultiModalKwargsItems", value)
    for key, items in value.items():
        if type(key) is not str:
            raise _fail(f"{path} key", "a str", key)
        if type(items) is not list:
            raise _fail(f"{path}[{key!r}]", "a list", items)
        for index, item in enumerate(items):
            if item is not None:
                _check_item(item, f"{path}[{key!r}][{index}]")


def _check_range(value: object, path: str) -> None:
    if type(value) is not mm.PlaceholderRange:
        raise _fail(path, "a PlaceholderRange", value)
    _check_int(value.offset, f"{path}.offset", ge=0)
    _check_int(value.length, f"{path}.length", ge=0)
    if value.is_embed is not None:
        _check_tensor(value.is_embed, f"{path}.is_embed")


def _check_spec(value: object, path: str) -> None:
    if type(value) is not mm.MultiModalFeatureSpec:
        raise _fail(path, "a MultiModalFeatureSpec", value)
    if value.data is not None:
        _check_item(value.data, f"{path}.data")
    for name in ("modality", "identifier"):
        if type(getattr(value, name)) is not str:
            raise _fail(f"{path}.{name}", "a str", getattr(value, name))
    _check_range(value.mm_position, f"{path}.mm_position")
    if value.mm_hash is not None and type(value.mm_hash) is not str:
        raise _fail(f"{path}.mm_hash", "a str or None", value.mm_hash)


_CHECKS: dict[type[Any], Callable[[object, str], None]] = {
    mm.MultiModalKwargsItems: _check_items,
    mm.MultiModalKwargsItem: _check_item,
    mm.MultiModalFeatureSpec: _check_spec,
    mm.MultiModalFieldElem: _check_elem,
    mm.PlaceholderRange: _check_range,
}


def check_value(value: object, tp: type[Any]) -> None:
    """Raise :class:`Malformed` unless ``value`` is a well-typed value of schema type ``tp``."""
    _CHECKS[tp](value, "$")


def same(a: object, b: object, *, values: bool = True) -> bool:
    """Equal as schema values; with ``values=False`` tensors compare by dtype and shape only.

    Unlike ``==`` on the domain classes, NaN float leaves compare equal to NaN.
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return not values or tensors_equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))  # type: ignore[arg-type]
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(  # type: ignore[arg-type]
            same(x, y, values=values)
            for x, y in zip(a, b, strict=True)  # type: ignore[call-overload]
        )
    if isinstance(a, dict):
        return list(a) == list(b) and all(  # type: ignore[call-overload]
            same(a[k], b[k], values=values)  # type: ignore[index]
            for k in a
        )
    if isinstance(a, mm.MultiModalFieldElem):
        return same(a.data, b.data, values=values) and a.field == b.field  # type: ignore[attr-defined]
    if isinstance(a, mm.PlaceholderRange | mm.MultiModalFeatureSpec):
        return all(
            same(getattr(a, name), getattr(b, name), values=values) for name in a.__struct_fields__
        )
    return bool(a == b)


def tensor_of(items: mm.MultiModalKwargsItems, index: int, key: str) -> torch.Tensor:
    """``items["image"][index][key].data``, checked to be a tensor."""
    item = items["image"][index]
    assert item is not None
    data = item[key].data
    assert isinstance(data, torch.Tensor), data
    return data
