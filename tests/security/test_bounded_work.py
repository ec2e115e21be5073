"""Work and memory bounded by the message's bytes: padding buys nothing, every limit holds.

Costs are asserted by counts (tensors built, calls made, bytes allocated as traced by
``tracemalloc``), never by wall time. Each test here failed before the fix it names
(issue 13, points 1-3).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.runtime import tensors as runtime_tensors
from tests.codec.helpers import rows_only
from tests.security.samples import HEAD_BODY, HEAD_REFS, HEAD_TENSORS, header, kwargs_items

ITEMS = mm.MultiModalKwargsItems
PREFIX = ["mmc", 2, "multimodal", 1, "MultiModalKwargsItems"]
"""The identity entries of a header for a MultiModalKwargsItems."""
WIDE = mm.Limits(max_tensors=1 << 20)
"""Lets a message declare a million tensors (the default max_tensors stops it sooner)."""


def traced_peak(call: Callable[[], Any]) -> tuple[Any, int]:
    """(what ``call`` returned or raised, peak bytes allocated while it ran)."""
    tracemalloc.start()
    try:
        try:
            result: Any = call()
        except Exception as e:  # returned for the caller to judge
            result = e
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the arrays the decoder makes tensors of: one per run built whole
    (``(count, *shape)`` for a run of several), one per tensor built alone."""
    shapes: list[tuple[int, ...]] = []
    original = torch.from_numpy

    def counting(array: Any) -> torch.Tensor:
        shapes.append(array.shape)
        return original(array)

    monkeypatch.setattr(torch, "from_numpy", counting)
    return shapes


def tensor_at(value: Any, key: str) -> torch.Tensor:
    """The tensor of item 0's element ``key``."""
    data = value["image"][0][key].data
    assert isinstance(data, torch.Tensor)
    return data


# -- 13.1: padding buys tensors --------------------------------------------------------------


def test_the_issues_reproducer_is_rejected_before_any_tensor_is_built(
    built: list[tuple[int, ...]],
) -> None:
    # A 999 KB header: one run of 999,000 empty 16-dim tensors, no value using them, and
    # an extra envelope entry of padding. It returned an empty value after building them all
    # (2.6 s, +870 MB at peak).
    head = msgspec.msgpack.encode(
        [*PREFIX, [["float32", [0] * 16, b"", 0, 999_000]], [], {}, b"\0" * 999_000]
    )
    error, peak = traced_peak(lambda: mm.decode([head], ITEMS))
    assert type(error) is mm.DecodeError
    assert (error.path, error.message) == (
        "$",
        "malformed envelope: Expected `array` of at most length 8, got 9",
    )
    assert built == []
    assert peak < 4 * len(head)


def test_a_trailing_entry_of_a_tensor_run_is_rejected() -> None:
    head = msgspec.msgpack.encode(
        [*PREFIX, [["float32", [0], b"", 0, 1, b"\0" * 1000]], [], {"image": []}]
    )
    error, _ = traced_peak(lambda: mm.decode([head], ITEMS))
    assert type(error) is mm.DecodeError
    assert error.message == (
        "malformed envelope: Expected `array` of at most length 5, got 6 - at `$[5][0]`"
    )


@pytest.mark.parametrize("padding", ["key", "unknown field"])
def test_tensors_the_body_does_not_reach_are_not_built(
    built: list[tuple[int, ...]], padding: str
) -> None:
    # The same claim with the padding where a header may hold it: in a string, or in a
    # field this decoder does not know (which a newer sender's message may have). The body
    # uses one tensor of the run: exactly that one is built.
    count = 990_000
    elem: list[Any] = [0, [0]]
    if padding == "unknown field":
        elem.append(b"\0" * count)  # trailing fields of a body struct are skipped
        key = "pixel_values"
    else:
        key = "k" * count
    head = msgspec.msgpack.encode(
        [*PREFIX, [["float32", [0] * 16, b"", 0, count]], [], {"image": [{key: elem}]}]
    )
    assert len(head) > count
    error, _ = traced_peak(lambda: mm.decode([head], ITEMS))
    assert type(error) is mm.DecodeError  # by default, beyond max_tensors
    assert error.message.startswith(f"tensor count {count} outside 1..65536")
    assert built == []
    value, peak = traced_peak(lambda: mm.decode([head], ITEMS, limits=WIDE))
    assert isinstance(value, mm.MultiModalKwargsItems), value
    tensor = tensor_at(value, key)
    assert (tensor.dtype, tensor.shape) == (torch.float32, (0,) * 16)
    assert built == [(0,) * 16]
    # Python objects for the header's bytes (the key string, the stand-ins' table: 8 bytes
    # per declared tensor), nothing per tensor beyond that.
    assert peak < 16 * len(head)


def test_a_small_message_builds_at_most_the_eager_allowance_it_does_not_use(
    built: list[tuple[int, ...]],
) -> None:
    # At most EAGER_TENSORS tensors are built without the dry rebuild: a constant bound.
    count = runtime_tensors.EAGER_TENSORS
    head = msgspec.msgpack.encode(
        [*PREFIX, [["float32", [0], b"", 0, count]], [], {"k" * count: []}]
    )
    assert isinstance(mm.decode([head], ITEMS), mm.MultiModalKwargsItems)
    assert built == [(count, 0)]
    built.clear()
    head = msgspec.msgpack.encode(
        [*PREFIX, [["float32", [0], b"", 0, count + 1]], [], {"k" * count: []}]
    )
    assert isinstance(mm.decode([head], ITEMS), mm.MultiModalKwargsItems)
    assert built == []


def test_a_large_valid_message_builds_each_run_with_one_call(built: list[tuple[int, ...]]) -> None:
    # The dry rebuild must not make valid messages build tensors one by one.
    count = 3 * runtime_tensors.EAGER_TENSORS
    batch = torch.arange(count * 2, dtype=torch.int32).reshape(count, 2)
    items = mm.MultiModalKwargsItems.from_hf_inputs(
        {"x": batch}, {"x": mm.MultiModalFieldConfig.batched("image")}
    )
    assert mm.decode(mm.encode(items), ITEMS) == items
    assert built == [(count, 2)]


def test_a_large_message_using_a_run_in_part_builds_only_the_part(
    built: list[tuple[int, ...]],
) -> None:
    count = 2 * runtime_tensors.EAGER_TENSORS
    body = {"image": [{"a": [0, [0]], "b": [7, [-1, 0]], "c": [count - 1, [-1, 0]]}]}
    head = msgspec.msgpack.encode([*PREFIX, [["int16", [3], bytes(6 * count), 0, count]], [], body])
    value = mm.decode([head], ITEMS)
    assert [tensor_at(value, key).shape for key in "abc"] == [(3,)] * 3
    assert built == [(3,), (3,), (3,)]


def test_every_tensor_of_the_runs_needs_an_entry_in_the_reference_table() -> None:
    with rows_only():  # the body's rows are edited below
        frames = [bytes(f) for f in mm.encode(kwargs_items())]
    envelope = header(frames)
    envelope[HEAD_TENSORS].append(["float32", [0], b"", 0, 100])
    error, _ = traced_peak(
        lambda: mm.decode([msgspec.msgpack.encode(envelope), *frames[1:]], ITEMS)
    )
    assert type(error) is mm.DecodeError
    total = sum(run[4] if len(run) > 4 else 1 for run in envelope[HEAD_TENSORS]) - 100
    assert (error.path, error.message) == (
        "$",
        f"no entry of the tensor reference table points at tensor {total} "
        f"(tensor run {len(envelope[HEAD_TENSORS]) - 1})",
    )


# -- 13.2: the refs table obeys max_elements ---------------------------------------------------


def test_the_reference_table_obeys_max_elements() -> None:
    with rows_only():  # the body's rows are edited below
        frames = [bytes(f) for f in mm.encode(kwargs_items())]
    envelope = header(frames)
    refs = envelope[HEAD_REFS]
    assert refs  # the sample has a table
    envelope[HEAD_REFS] = refs + [refs[0]] * (5_000 - len(refs))
    padded = [msgspec.msgpack.encode(envelope), *frames[1:]]
    assert isinstance(mm.decode(padded, ITEMS), mm.MultiModalKwargsItems)
    error, _ = traced_peak(lambda: mm.decode(padded, ITEMS, limits=mm.Limits(max_elements=100)))
    assert type(error) is mm.DecodeError
    assert (error.path, error.message) == (
        "$",
        "tensor reference table of 5000 entries exceeds the limit of 100",
    )


def test_a_reference_table_beyond_the_default_max_elements_is_rejected() -> None:
    with rows_only():  # the body's rows are edited below
        frames = [bytes(f) for f in mm.encode(kwargs_items())]
    envelope = header(frames)
    entries = mm.DEFAULT_LIMITS.max_elements + 1
    envelope[HEAD_REFS] = [0] * entries
    head = msgspec.msgpack.encode(envelope)
    error, peak = traced_peak(lambda: mm.decode([head, *frames[1:]], ITEMS))
    assert type(error) is mm.DecodeError
    assert error.message == (
        f"tensor reference table of {entries} entries exceeds the limit of "
        f"{mm.DEFAULT_LIMITS.max_elements}"
    )
    assert peak < 16 * len(head)  # the decoded table: 8 bytes per entry


# -- 13.3: locating a failing key costs no more than the decode ------------------------------


@pytest.fixture
def converts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The values msgspec.convert is asked to validate while an error is located."""
    calls: list[Any] = []
    original = msgspec.convert

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(obj)
        return original(obj, *args, **kwargs)

    monkeypatch.setattr(msgspec, "convert", counting)
    return calls


def test_the_failing_key_of_a_wide_mapping_is_found_in_one_pass(converts: list[Any]) -> None:
    # 200,000 entries, the last one wrong: each entry was converted on its own (1.9 s to
    # reject where a valid body of the same size decodes in 0.64 s).
    entries = 200_000
    body: dict[str, Any] = {f"k{i}": [] for i in range(entries)}
    body[f"k{entries - 1}"] = [5]
    head = msgspec.msgpack.encode([*PREFIX, [], [], body])
    error, peak = traced_peak(lambda: mm.decode([head], ITEMS))
    assert type(error) is mm.DecodeError
    assert (error.path, error.message) == (
        f"$['k{entries - 1}'][0]",
        "Expected `object | null`, got `int`",
    )
    assert len(converts) == 1  # one pass over the mapping's values
    assert len(converts[0]) == entries
    body[f"k{entries - 1}"] = []
    _, valid_peak = traced_peak(
        lambda: mm.decode([msgspec.msgpack.encode([*PREFIX, [], [], body])], ITEMS)
    )
    assert peak < 2 * valid_peak


def test_nested_mappings_are_located_with_one_pass_each(converts: list[Any]) -> None:
    with rows_only():  # the body's rows are edited below
        frames = [bytes(f) for f in mm.encode(kwargs_items())]
    envelope = header(frames)
    envelope[HEAD_BODY]["image"][1]["pixel_values"][1] = [1, "not slices"]
    error, _ = traced_peak(
        lambda: mm.decode([msgspec.msgpack.encode(envelope), *frames[1:]], ITEMS)
    )
    assert type(error) is mm.DecodeError
    assert error.path == "$['image'][1]['pixel_values'].field.slices"
    assert len(converts) == 2  # the modality mapping, then the item's mapping
