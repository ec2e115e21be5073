"""Hostile input to the vLLM binding: only ``DecodeError``, with the path to the bad value.

Messages start from vLLM objects encoded by ``multimodal_vllm``; one thing is changed in
the header (``tests.security.samples``) or the bytes are mangled. vLLM's own codec's
messages, fed to this decoder, are refused too: nothing is guessed from them.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
import vllm.multimodal.inputs as vi
from vllm.v1.serial_utils import MsgpackEncoder

from mmcodec.generated import multimodal as mm
from mmcodec.generated import multimodal_vllm as mv
from mmcodec.payloads import internvl, qwen2_5_vl
from tests.security.samples import HEAD_BODY, HEAD_MAJOR, HEAD_SCHEMA, header, with_header

ITEMS = vi.MultiModalKwargsItems


def _reject(frames: Any, tp: Any = ITEMS) -> mm.DecodeError:
    with pytest.raises(mm.DecodeError) as info:
        mv.decode(frames, tp)
    assert type(info.value) is mm.DecodeError
    return info.value


def _frames() -> list[Any]:
    return list(mv.encode(internvl(0, n_images=2, api=vi)))


def _first_flat_field(body: Any) -> list[Any]:
    """The wire form of image 0's flat field: [tag, slices, dim, keep_on_cpu]."""
    field = body["image"][0]["pixel_values_flat"][1]
    assert field[0] == 1
    return field  # type: ignore[no-any-return]


def test_a_message_from_vllms_own_codec_is_refused() -> None:
    frames = [bytes(f) for f in MsgpackEncoder().encode(qwen2_5_vl(0, api=vi))]
    error = _reject(frames)
    assert str(error) == "$: frame 0 is not an mmcodec header (Expected `array`, got `object`)"


def test_another_schema_or_major_is_named() -> None:
    frames = _frames()
    for index, value, text in (
        (HEAD_SCHEMA, "other", "message is from schema 'other' major version 1"),
        (HEAD_MAJOR, 2, "message is from schema 'multimodal' major version 2"),
    ):
        envelope = header(frames)
        envelope[index] = value
        error = _reject(with_header(envelope, frames))
        assert str(error) == f"$: {text}; this decoder reads schema 'multimodal' major version 1"


def test_missing_payload_frames_name_the_element() -> None:
    frames = _frames()
    error = _reject(frames[:1])
    assert str(error).startswith("$['image'][0]['pixel_values_flat'].data: frame 1 out of range")


def test_an_unknown_slice_group_tag_is_refused_with_its_path() -> None:
    frames = _frames()
    envelope = header(frames)
    _first_flat_field(envelope[HEAD_BODY])[1][0] = [9, []]
    error = _reject(with_header(envelope, frames))
    # msgspec rejects the tag inside a union, where only the wire path is known.
    assert str(error) == "$[...][0][...][1][1][0][0] (wire path): Invalid value 9"


def test_a_negative_dim_is_refused_with_its_path() -> None:
    frames = _frames()
    envelope = header(frames)
    _first_flat_field(envelope[HEAD_BODY])[2] = -1
    error = _reject(with_header(envelope, frames))
    assert str(error) == ("$['image'][0]['pixel_values_flat'].field.dim: Expected `int` >= 0")


def test_a_float_slice_bound_is_refused() -> None:
    frames = _frames()
    envelope = header(frames)
    _first_flat_field(envelope[HEAD_BODY])[1][0] = [1, [[0.5, 13]]]
    error = _reject(with_header(envelope, frames))
    assert str(error).startswith("$['image'][0]['pixel_values_flat'].field.slices[0]")


def test_a_bool_payload_holding_two_is_refused() -> None:
    position = vi.PlaceholderRange(
        offset=0, length=2048, is_embed=torch.ones(2048, dtype=torch.bool)
    )
    spec = vi.MultiModalFeatureSpec(None, "image", "x", position)
    frames = [bytearray(f) for f in mv.encode(spec)]
    payload = next(f for f in frames[1:] if len(f) == 2048)
    payload[100] = 2
    error = _reject(frames, vi.MultiModalFeatureSpec)
    assert str(error).startswith("$.mm_position.is_embed: ")
    assert "bool" in str(error)


def test_mangled_bytes_raise_only_decode_error() -> None:
    rng = random.Random(9)
    frames = [bytes(f) for f in mv.encode(qwen2_5_vl(0, n_images=2, api=vi))]
    head = frames[0]
    outcomes = {"refused": 0, "decoded": 0}
    for _ in range(1500):
        mangled = bytearray(head)
        for _ in range(rng.randint(1, 4)):
            mangled[rng.randrange(len(mangled))] = rng.randrange(256)
        cut = rng.choice([len(mangled), rng.randrange(len(mangled) + 1)])
        try:
            mv.decode([bytes(mangled[:cut]), *frames[1:]], ITEMS)
        except mm.DecodeError:
            outcomes["refused"] += 1
        else:
            outcomes["decoded"] += 1
    assert outcomes["refused"] > 1000  # most mangling is caught; nothing else escaped
