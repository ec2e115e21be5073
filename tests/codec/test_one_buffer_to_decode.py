"""``decode`` given one buffer instead of a list of frames points at ``decode_bytes``.

A buffer is a sequence of ints: taken as frames, a large one exceeded the frame limit
("160192 frames exceed the limit of 4096") and a small one failed at its first "frame".
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any

import pytest
import torch

from mmcodec.generated import multimodal as mm

HINT = (
    "$: decode takes the list of frames encode returned, not one {}: "
    "for a single buffer (what encode_bytes returned), call decode_bytes"
)


def _elem(size: int) -> mm.MultiModalFieldElem:
    return mm.MultiModalFieldElem(torch.arange(size, dtype=torch.float32), mm.BatchedField())


def _mapped(data: bytearray) -> mmap.mmap:
    mapped = mmap.mmap(-1, len(data))
    mapped.write(data)
    return mapped


@pytest.mark.parametrize("size", [3, 40_000], ids=["inline", "one frame of 160 KB"])
@pytest.mark.parametrize(
    "as_buffer",
    [bytes, bytearray, memoryview, _mapped],
    ids=["bytes", "bytearray", "memoryview", "mmap"],
)
def test_one_buffer_points_at_decode_bytes(
    size: int, as_buffer: Callable[[bytearray], Any]
) -> None:
    elem = _elem(size)
    buffer = as_buffer(mm.encode_bytes(elem))
    with pytest.raises(mm.DecodeError) as info:
        mm.decode(buffer, mm.MultiModalFieldElem)
    assert str(info.value) == HINT.format(type(buffer).__name__)
    assert mm.decode_bytes(buffer, mm.MultiModalFieldElem) == elem


def test_a_header_frame_alone_and_an_empty_buffer_too() -> None:
    header = mm.encode(_elem(3))[0]
    for buffer in (header, b""):
        with pytest.raises(mm.DecodeError) as info:
            mm.decode(buffer, mm.MultiModalFieldElem)
        assert str(info.value) == HINT.format(type(buffer).__name__)


def test_frames_that_are_not_bytes_keep_their_own_errors() -> None:
    header = mm.encode(_elem(3))[0]
    cases: list[tuple[Any, str]] = [
        ([header, 7], "$: frame 1 is a int, not a bytes-like object"),
        ([], "$: no frames: a message has at least its header frame"),
        ([b""] * 4097, "$: 4097 frames exceed the limit of 4096"),
        (42, "$: frames must be a sequence, got int"),
    ]
    for frames, message in cases:
        with pytest.raises(mm.DecodeError) as info:
            mm.decode(frames, mm.MultiModalFieldElem)
        assert str(info.value) == message
