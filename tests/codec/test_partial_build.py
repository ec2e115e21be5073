"""Large messages build only the tensors their body reaches: those come back exact.

A message of more than ``EAGER_TENSORS`` tensors is first rebuilt with stand-ins to learn
which tensors a value uses; runs used in part are then built tensor by tensor, each at its
own offset in the run. Here real messages take that path: several runs of several dtypes,
in several frames (two runs in one frame, at different offsets) and inline, every tensor
non-empty and distinct, and a body that skips some items (as an older decoder skips a
newer sender's fields), so that every run is used in part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from mmcodec.runtime.tensors import EAGER_TENSORS, build_tensors, check_runs
from tests.codec.helpers import assert_items_equal, assert_tensor_equal, inside, rows_only
from tests.codec.helpers import header as header_of
from tests.security.samples import HEAD_BODY, HEAD_TENSORS, RUN_DATA, header, with_header


def _five_kinds(items: int = 400) -> mm.MultiModalKwargsItems:
    """``items`` images of five tensors each (2,000 by default): float64 flat slices of two
    sizes (two runs in one frame), then batched float32, int16, bfloat16 and uint8 (inline)."""
    g = torch.Generator().manual_seed(25)
    sizes = torch.tensor([2] * (items * 3 // 8) + [1] * (items - items * 3 // 8))
    batch: dict[str, mm.NestedTensors] = {
        "e": torch.randn(int(sizes.sum()), 4, generator=g, dtype=torch.float64),
        "a": torch.randn(items, 3, 5, generator=g),
        "b": torch.randint(-30_000, 30_000, (items, 7), generator=g, dtype=torch.int16),
        "c": torch.randn(items, 2, generator=g).to(torch.bfloat16),
        "d": torch.randint(0, 256, (items,), generator=g, dtype=torch.uint8),
    }
    config = {"e": mm.MultiModalFieldConfig.flat_from_sizes("image", sizes)}
    config.update({key: mm.MultiModalFieldConfig.batched("image") for key in "abcd"})
    return mm.MultiModalKwargsItems.from_hf_inputs(batch, config)


def _slices_only() -> mm.MultiModalKwargsItems:
    """1,100 images of one float64 flat slice each: 400 of two rows, then 700 of one row."""
    sizes = torch.tensor([2] * 400 + [1] * 700)
    rows = torch.arange(int(sizes.sum()) * 4, dtype=torch.float64).reshape(-1, 4)
    config = {"e": mm.MultiModalFieldConfig.flat_from_sizes("image", sizes)}
    return mm.MultiModalKwargsItems.from_hf_inputs({"e": rows}, config)


Keep = Callable[[int], bool]


def _every_third(index: int) -> bool:
    # Item 0 sends the field variants every later item refers back to: it stays. Of the
    # rest, every third: tensors before, between and after the kept ones go unused.
    return index == 0 or index % 3 == 1


def _some_of_the_second_run(index: int) -> bool:
    # Tensors of the frame's second run whose bytes, at a wrong offset, would still lie
    # inside the frame: a misplaced view would decode without any error.
    return index == 0 or (400 <= index < 650 and index % 7 == 0)


def _partial(items: mm.MultiModalKwargsItems, keep: Keep) -> tuple[list[bytes], Any]:
    """The message of ``items`` (as rows) with the items ``keep`` rejects left out of its body
    (as None, so the tensors stay declared and sent), and the value it then stands for."""
    with rows_only():
        frames = mm.encode(items)
    envelope = header(frames)
    body = envelope[HEAD_BODY]
    body["image"] = [wire if keep(i) else None for i, wire in enumerate(body["image"])]
    expected = mm.MultiModalKwargsItems(
        {"image": [item if keep(i) else None for i, item in enumerate(items["image"])]}
    )
    return with_header(envelope, frames), expected


CASES = {
    "five kinds, every third item": (_five_kinds, _every_third),
    "two runs in a frame, part of the second": (_slices_only, _some_of_the_second_run),
}


def test_the_messages_take_the_partial_build_path_through_runs_of_every_kind() -> None:
    def layout(frames: list[Any]) -> list[tuple[Any, ...]]:
        """(dtype, frame or "inline", offset, count) of each run."""
        return [
            (run[0], run[RUN_DATA] if type(run[RUN_DATA]) is int else "inline", run[3], run[4])
            for run in header(frames)[HEAD_TENSORS]
        ]

    five, slices = layout(mm.encode(_five_kinds())), layout(mm.encode(_slices_only()))
    assert five == [
        ("float64", 1, 0, 150),
        ("float64", 1, 150 * 2 * 4 * 8, 250),
        ("float32", 2, 0, 400),
        ("int16", 3, 0, 400),
        ("bfloat16", 4, 0, 400),
        ("uint8", "inline", 0, 400),
    ]
    assert slices == [
        ("float64", 1, 0, 400),
        ("float64", 1, 400 * 2 * 4 * 8, 700),
    ]
    # Both more than the decoder builds eagerly: the dry rebuild decides what is built.
    assert [sum(run[-1] for run in runs) for runs in (five, slices)] == [2_000, 1_100]
    assert EAGER_TENSORS < 1_100


@pytest.mark.parametrize("copy", [False, True], ids=["views", "copies"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_are_exact_when_only_some_tensors_of_each_run_are_built(
    case: str, copy: bool
) -> None:
    make, keep = CASES[case]
    frames, expected = _partial(make(), keep)
    decoded = mm.decode(frames, mm.MultiModalKwargsItems, copy=copy)
    assert [item is not None for item in decoded["image"]] == [
        item is not None for item in expected["image"]
    ]
    assert_items_equal(decoded, expected)  # tensor by tensor: dtype, shape, bytes
    # Zero-copy where promised: views of the frames (the header's, inline), or copies.
    for item in decoded["image"]:
        for key, elem in (item or {}).items():
            tensor = elem.data
            assert isinstance(tensor, torch.Tensor)
            assert any(inside(tensor, frame) for frame in frames) is not copy, (key, copy)


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_are_exact_through_the_single_buffer(case: str) -> None:
    # Payloads at 64-byte aligned offsets of one buffer instead of frames of their own.
    make, keep = CASES[case]
    frames, expected = _partial(make(), keep)
    buffer = framing.join([memoryview(f) for f in frames])
    assert_items_equal(mm.decode_bytes(buffer, mm.MultiModalKwargsItems), expected)


def test_a_partial_build_places_every_tensor_of_a_run_it_skips_or_builds() -> None:
    # The build itself, given which positions the body reaches: a run none of whose
    # tensors is reached, then runs reached in part, from their first tensor or later.
    frames = [memoryview(f) for f in mm.encode(_five_kinds())]
    layouts, total = check_runs(header_of(frames).tensors, frames, mm.DEFAULT_LIMITS)
    counts = [layout[2] for layout in layouts]
    assert counts == [150, 250, 400, 400, 400, 400]
    reached = bytearray(total)
    start = 0
    for run, count in enumerate(counts):
        if run:  # run 0: nothing reached
            for position in range(start + run - 1, start + count, 3 + run):
                reached[position] = 1
        start += count
    whole = build_tensors(layouts, copy=False)
    for copy in (False, True):
        some = build_tensors(layouts, copy=copy, reached=reached)
        assert len(some) == total
        for position, tensor in enumerate(some):
            assert isinstance(tensor, torch.Tensor), position
            if reached[position]:
                assert_tensor_equal(tensor, whole[position], f"tensor {position}")
                assert (tensor.data_ptr() == whole[position].data_ptr()) is not copy
            else:
                assert tensor.numel() == 0, position  # a placeholder, never built
