"""``get_data`` / ``reduce_data`` build at most ``max_reduce_ratio`` times what the elements
hold (issue 21, item 6), and say so before allocating.

The attacks are decoded messages: two empty tensors of one flat field that zero-pad to
(2, N, N) (+765 MB from 118 bytes at N=10,000 before, an 80 GB attempt at N=100,000),
one tensor referenced by 1,000 items (1,000 MiB built from a 1 MB message before), a
list or an empty tensor's rows repeated by back-references. The legitimate batches are
the design payloads of :mod:`mmcodec.payloads`, reduced after a real round trip.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcodec import payloads
from mmcodec.domain.reduce_bound import held_bytes
from mmcodec.generated import multimodal as mm
from mmcodec.runtime.equality import values_equal

Items = mm.MultiModalKwargsItems


def round_trip(items: Items) -> tuple[Items, int]:
    """The items as a receiver decodes them, and the message's size in bytes."""
    frames = mm.encode(items)
    return mm.decode(frames, Items), sum(memoryview(f).nbytes for f in frames)


def items_of(key: str, field: Any, *datas: mm.NestedTensors) -> Items:
    """One image item per datum, each holding ``key``'s element with ``field``."""
    return Items(
        {"image": [mm.MultiModalKwargsItem({key: mm.MultiModalFieldElem(d, field)}) for d in datas]}
    )


@pytest.fixture
def no_allocation(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail any reduce that reaches torch's allocating calls (the test itself makes its
    tensors otherwise); list the ones reached."""
    reached: list[str] = []

    def refuse(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            reached.append(name)
            raise AssertionError(f"torch.{name} reached")

        return call

    for name in ("zeros", "stack", "cat"):
        monkeypatch.setattr(torch, name, refuse(name))
    yield reached


def bound_error(key: str, building: int, held: int, elements: int, ratio: int = 16) -> str:
    return re.escape(
        f"cannot reduce {key}: the batch would take {building} bytes, more than {ratio} "
        f"times the {held} bytes its {elements} elements hold (Limits.max_reduce_ratio; "
        "pass limits=Limits(max_reduce_ratio=...) to allow it)"
    )


def test_empty_tensors_cannot_pad_to_a_square(no_allocation: list[str]) -> None:
    n = 10_000
    field = mm.FlatField([slice(0, 1), slice(1, 2)])
    items = items_of("pixel_values", field, torch.empty(1, n, 0), torch.empty(1, 0, n))
    received, size = round_trip(items)
    assert size < 200
    padded = 2 * n * n * 4
    with pytest.raises(ValueError, match=bound_error("'pixel_values'", padded, 1024, 2)):
        received.get_data()
    elems = [item["pixel_values"] for item in received["image"] if item is not None]
    with pytest.raises(ValueError, match=bound_error("2 elements", padded, 1024, 2)):
        field.reduce_data(elems)
    assert no_allocation == []  # refused before torch.zeros
    # The caller may raise the bound (a smaller square, so that it is cheap to build).
    small = items_of("pixel_values", field, torch.empty(1, 100, 0), torch.empty(1, 0, 100))
    small_received, _ = round_trip(small)
    with pytest.raises(AssertionError, match=r"torch\.zeros reached"):
        small_received.get_data(limits=mm.Limits(max_reduce_ratio=80))


def test_one_tensor_referenced_by_many_items_is_not_stacked_many_times(
    no_allocation: list[str],
) -> None:
    shared = torch.full((64 << 10,), 7, dtype=torch.uint8)
    items = items_of("pixel_values", mm.BatchedField(), *([shared] * 1_000))
    received, size = round_trip(items)
    assert size < (64 << 10) + 32_000  # the tensor travels once
    with pytest.raises(
        ValueError, match=bound_error("'pixel_values'", 1_000 << 16, (64 << 10) + 512, 1_000)
    ):
        received.get_data()
    assert no_allocation == []


def test_runs_over_the_same_frame_hold_its_bytes_once() -> None:
    # A forged header: 40 runs viewing the same bytes of one frame, one item each. The
    # decoder accepts it: distinct tensors, one memory.
    frames = mm.encode(items_of("x", mm.BatchedField(), torch.ones(1 << 16, dtype=torch.uint8)))
    header = msgspec.msgpack.decode(frames[0])
    header[5] = header[5] * 40  # the tensor runs
    header[6] = list(range(40))  # the refs table
    header[7]["image"] = [{"x": [ref, [0, False]]} for ref in range(40)]
    received = mm.decode([msgspec.msgpack.encode(header), frames[1]], Items)
    tensors = [item["x"].data for item in received["image"] if item is not None]
    assert len({id(t) for t in tensors}) == 40
    assert held_bytes(tensors) == (1 << 16) + 40 * 512  # the frame's bytes once
    with pytest.raises(ValueError, match="more than 16 times"):
        received.get_data()


def test_a_list_shared_by_many_elements_is_not_flattened_many_times() -> None:
    shared = mm.MultiModalFieldElem([torch.zeros(1)] * 1_000, mm.FlatField([slice(0, 1000)]))
    items = Items({"image": [mm.MultiModalKwargsItem({"x": shared}) for _ in range(100)]})
    received, _ = round_trip(items)
    elems = [item["x"] for item in received["image"] if item is not None]
    assert len({id(e) for e in elems}) == 1  # one element, sent once
    with pytest.raises(ValueError, match="would take 800000 bytes, more than 16 times"):
        received.get_data()
    assert len(items.get_data(limits=mm.Limits(max_reduce_ratio=100))["x"]) == 100_000  # type: ignore[arg-type]


def test_an_empty_tensor_s_rows_are_not_split_into_tensors() -> None:
    field = mm.FlatField([slice(0, 0), slice(0, 10**6)])
    items = items_of("x", field, [], torch.zeros(10**6, 0))
    received, size = round_trip(items)
    assert size < 200
    with pytest.raises(ValueError, match=r"would take 520000000 bytes, more than 16 times"):
        received.get_data()


def test_the_ratio_is_a_bound_on_the_bytes() -> None:
    one_mib = torch.zeros(1 << 18)  # float32
    for times, ok in ((16, True), (17, False)):
        items = items_of("x", mm.BatchedField(), *([one_mib] * times))
        if ok:
            assert items.get_data()["x"].shape == (times, 1 << 18)  # type: ignore[union-attr]
        else:
            with pytest.raises(ValueError, match="more than 16 times"):
                items.get_data()
            out = items.get_data(limits=mm.Limits(max_reduce_ratio=17))
            assert out["x"].shape == (times, 1 << 18)  # type: ignore[union-attr]


@pytest.mark.parametrize("name", sorted(payloads.PAYLOADS))
def test_the_design_payloads_reduce_untouched(name: str) -> None:
    items = payloads.PAYLOADS[name](0)
    received, _ = round_trip(items)
    expected = items.get_data(limits=mm.Limits(max_reduce_ratio=1 << 40))
    for batch in (
        items.get_data(),
        received.get_data(),
        received.get_data(
            limits=mm.Limits(max_reduce_ratio=1)  # stacking and concatenating: 1x at most
        ),
    ):
        assert list(batch) == list(expected)
        for key in expected:
            assert values_equal(batch[key], expected[key]), key


def test_ragged_audio_pads_within_the_default() -> None:
    field = mm.FlatField([slice(0, 1), slice(1, 2), slice(2, 3)], dim=0)
    clips = [torch.randn(1, 80, n) for n in (3000, 1200, 400)]
    received, _ = round_trip(items_of("input_features", field, *clips))
    batch = received.get_data()["input_features"]
    assert isinstance(batch, torch.Tensor) and batch.shape == (3, 80, 3000)
    for row, clip in zip(batch, clips, strict=True):
        assert torch.equal(row[:, : clip.shape[-1]], clip[0])
        assert not row[:, clip.shape[-1] :].any()


@settings(max_examples=150, deadline=None)
@given(
    shapes=st.lists(
        st.lists(st.sampled_from([0, 0, 1, 8, 32, 64]), min_size=2, max_size=2),
        min_size=1,
        max_size=4,
    ),
    ratio=st.integers(1, 3),
)
def test_a_flat_reduce_builds_only_within_the_bound(shapes: list[list[int]], ratio: int) -> None:
    tensors = [torch.ones(1, *shape) for shape in shapes]
    field = mm.FlatField([slice(i, i + 1) for i in range(len(tensors))])
    elems = [mm.MultiModalFieldElem(t, field) for t in tensors]
    held = held_bytes(tensors)
    widths = [max(s[d] for s in shapes) for d in (0, 1)]
    building = len(tensors) * widths[0] * widths[1] * 4
    if len(tensors) == 1:
        building = 0  # one contiguous element: returned as it is
    limits = mm.Limits(max_reduce_ratio=ratio)
    if building > ratio * held:
        with pytest.raises(ValueError, match=f"would take {building} bytes"):
            field.reduce_data(elems, limits=limits)
    else:
        out = field.reduce_data(elems, limits=limits)
        assert isinstance(out, torch.Tensor)
        assert out.shape == (len(tensors), *widths)


def test_the_security_doc_s_example_runs() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "security.md"
    [block] = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
    exec(compile(block, str(doc), "exec"), {"__name__": "security_doc_example"})
