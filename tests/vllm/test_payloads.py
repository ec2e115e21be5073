"""The design payloads, built by vLLM's own API, through the vLLM binding and back.

Every payload of :data:`mmcodec.payloads.PAYLOADS` is built with
``vllm.multimodal.inputs`` (``MultiModalKwargsItems.from_hf_inputs``,
``MultiModalFieldConfig.flat_from_sizes`` with a tensor of sizes, so slice bounds are
0-d tensors), plus flat fields along dim > 0. Each round trip is compared strictly
(:mod:`tests.vllm.strict`), and vLLM's own reduce of the decoded items equals its
reduce of the originals.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import vllm.multimodal.inputs as vi

from bench import floor
from mmcodec.generated import multimodal as mm
from mmcodec.generated import multimodal_vllm as mv
from mmcodec.payloads import PAYLOADS, iter_tensors
from mmcodec.runtime.tensors import DEFAULT_INLINE_THRESHOLD
from tests.codec.helpers import inside
from tests.vllm.strict import assert_same

NAMES = list(PAYLOADS)


@functools.cache
def _payload(name: str) -> Any:
    return PAYLOADS[name](0, api=vi)  # type: ignore[call-arg]


def flat_along_dim(dim: int) -> Any:
    """Three items concatenated along ``dim`` of one batch tensor, sized by a tensor."""
    sizes = torch.tensor([2, 3, 1])
    shape = [4, 5, 6]
    shape[dim] = int(sizes.sum())
    batch = {
        "features": torch.randn(shape, dtype=torch.bfloat16),
        "lengths": sizes,
    }
    config = {
        "features": vi.MultiModalFieldConfig.flat_from_sizes("audio", sizes, dim=dim),
        "lengths": vi.MultiModalFieldConfig.batched("audio", keep_on_cpu=True),
    }
    return vi.MultiModalKwargsItems.from_hf_inputs(batch, config)


def test_vllm_builds_what_the_binding_must_carry() -> None:
    # The shapes issue 9 names: UserDicts, 0-d tensor bounds in tuples, one shared field.
    items = _payload("qwen2.5-vl x16")
    assert type(items) is vi.MultiModalKwargsItems and type(items["image"][0]) is (
        vi.MultiModalKwargsItem
    )
    field = items["image"][0]["pixel_values"].field
    assert isinstance(field.slices[0], tuple) and isinstance(field.slices[0][0].stop, torch.Tensor)
    assert all(item["pixel_values"].field is field for item in items["image"])
    dim1 = flat_along_dim(1)["audio"][0]["features"].field
    assert dim1.dim == 1 and dim1.slices[0][0] == slice(None)


@pytest.mark.parametrize("name", NAMES)
def test_design_payloads_round_trip_strictly(name: str) -> None:
    items = _payload(name)
    decoded = mv.decode(mv.encode(items), vi.MultiModalKwargsItems)
    assert_same(decoded, items)
    assert decoded == items  # and vLLM's own (weaker) equality agrees


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_flat_fields_along_any_dim_round_trip_strictly(dim: int) -> None:
    items = flat_along_dim(dim)
    decoded = mv.decode(mv.encode(items), vi.MultiModalKwargsItems)
    assert_same(decoded, items)
    assert_same(decoded.get_data(), items.get_data())


@pytest.mark.parametrize("name", NAMES)
def test_vllms_reduce_of_decoded_items_equals_that_of_the_originals(name: str) -> None:
    items = _payload(name)
    decoded = mv.decode(mv.encode(items), vi.MultiModalKwargsItems)
    assert_same(decoded.get_data(), items.get_data())
    for modality, originals in items.items():
        for key in originals[0]:
            elems = [item[key] for item in decoded[modality]]
            expected = [item[key] for item in originals]
            reduced = elems[0].field.reduce_data(elems)
            assert_same(reduced, expected[0].field.reduce_data(expected))


@pytest.mark.parametrize("name", NAMES)
def test_each_binding_reads_the_others_messages(name: str) -> None:
    items = _payload(name)
    ours = mm.decode(mv.encode(items), mm.MultiModalKwargsItems)
    assert type(ours) is mm.MultiModalKwargsItems
    assert_same(ours, items, cross=True)
    back = mv.decode(mm.encode(ours), vi.MultiModalKwargsItems)
    assert_same(back, items)
    assert mv.DecodeError is mm.DecodeError and mv.EncodeError is mm.EncodeError


@pytest.mark.parametrize("name", ["qwen2.5-vl", "internvl", "minicpm-v", "64 small items"])
def test_decoded_tensors_view_the_frames_unless_copy(name: str) -> None:
    items = _payload(name)
    frames = [bytearray(f) for f in mv.encode(items)]
    shared = mv.decode(frames, vi.MultiModalKwargsItems)
    # Payloads under the inline threshold travel in the header and are copied out of it
    # (unless many views of one storage travel together in a frame).
    viewing = {id(t) for t in iter_tensors(shared) if any(inside(t, f) for f in frames[1:])}
    assert viewing
    copied_out = [t for t in iter_tensors(shared) if id(t) not in viewing]
    assert all(t.nbytes < DEFAULT_INLINE_THRESHOLD for t in copied_out)
    copied = mv.decode(frames, vi.MultiModalKwargsItems, copy=True)
    assert not any(inside(t, f) for t in iter_tensors(copied) for f in frames)
    assert_same(copied, items)
    for t in iter_tensors(copied):  # writable, and writing leaves the frames alone
        t.view(-1)[:1] = 0 if not t.is_floating_point() else 1.5
    assert_same(mv.decode(frames, vi.MultiModalKwargsItems), items)


@pytest.mark.parametrize("name", NAMES)
def test_one_buffer_round_trip(name: str) -> None:
    items = _payload(name)
    buffer = mv.encode_bytes(items)
    assert_same(mv.decode_bytes(bytes(buffer), vi.MultiModalKwargsItems), items)
    assert_same(mm.decode_bytes(buffer, mm.MultiModalKwargsItems), items, cross=True)


def test_cached_items_travel_as_none() -> None:
    items = _payload("internvl")
    partial = vi.MultiModalKwargsItems({"image": [None, items["image"][1]]})
    decoded = mv.decode(mv.encode(partial), vi.MultiModalKwargsItems)
    assert_same(decoded, partial)
    with pytest.raises(RuntimeError, match="Found empty"):
        decoded.require_data()  # vLLM's own check sees the None


def test_data_of_cached_elements_travels_as_none() -> None:
    field = vi.MultiModalSharedField(batch_size=2, keep_on_cpu=True)
    item = vi.MultiModalKwargsItem({"cached": vi.MultiModalFieldElem(data=None, field=field)})
    decoded = mv.decode(mv.encode(item), vi.MultiModalKwargsItem)
    assert_same(decoded, item)


@pytest.mark.parametrize("name", NAMES)
def test_the_benchmark_floor_rebuilds_vllms_objects_strictly(name: str) -> None:
    # bench-vllm's floor row on vLLM's classes: a floor that built anything else (fewer
    # objects, unshared fields) would flatter the binding's ratio.
    items = _payload(name)
    assert_same(floor.plan(items, vi).decode(), items)
    assert floor.encode_floor(items) == len(list(iter_tensors(items)))
