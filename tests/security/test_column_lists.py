"""Hostile column lists: every check of docs/wire-format.md#column-lists, with its exact
DecodeError and path, and a fuzz of column-list headers that only ever yields a value or a
DecodeError, at a cost proportional to the input (tests/security/test_fuzz.py's oracle).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tests.golden.features as f
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from mmcodec.runtime.columns import MIN_ITEMS
from tests.security.samples import HEAD_BODY
from tests.security.test_fuzz import Sample, _settings, _timeout, input_size, judge

ITEMS = mm.MultiModalKwargsItems
LIST = "$['image']"
N = MIN_ITEMS  # 16: the fewest present items that travel as columns


def _value() -> mm.MultiModalKwargsItems:
    """17 items, the second None: key 'a' a fields column (views of one batch, one
    BatchedField), key 'b' a values column (one element in every item)."""
    batch = torch.arange(2 * N, dtype=torch.int64).reshape(N, 2)
    field = mm.BatchedField()
    shared = mm.MultiModalFieldElem(torch.tensor([1.5]), mm.SharedField(N))
    items = [
        mm.MultiModalKwargsItem({"a": mm.MultiModalFieldElem(batch[i], field), "b": shared})
        for i in range(N)
    ]
    return ITEMS({"image": [items[0], None, *items[1:]]})


def _message() -> tuple[list[Any], list[bytes]]:
    frames = [bytes(frame) for frame in mm.encode(_value())]
    envelope = msgspec.msgpack.decode(frames[0])
    assert envelope[HEAD_BODY]["image"] == {
        "count": N + 1,
        "keys": ["a", "b"],
        "columns": [
            [1, list(range(N)), [[0, False], *[0] * (N - 1)]],
            [0, [[N, [2, N, False]], *[N] * (N - 1)]],
        ],
        "absent": [1],
    }
    return envelope, frames


def _reject(edit: Callable[[dict[str, Any]], Any], **kwargs: Any) -> mm.DecodeError:
    envelope, frames = _message()
    edit(envelope[HEAD_BODY]["image"])
    edited = [msgspec.msgpack.encode(envelope), *frames[1:]]
    with pytest.raises(mm.DecodeError) as info:
        mm.decode(edited, ITEMS, **kwargs)
    assert type(info.value) is mm.DecodeError
    with pytest.raises(mm.DecodeError) as again:  # the single buffer: the same error
        mm.decode_bytes(_joined(edited), ITEMS, **kwargs)
    assert str(again.value) == str(info.value)
    return info.value


def _joined(frames: list[bytes]) -> bytes:
    return bytes(framing.join([memoryview(frame) for frame in frames]))


def _set(*path: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets the value at ``path[:-1]`` to ``path[-1]``."""

    def edit(columns: dict[str, Any]) -> None:
        target: Any = columns
        for step in path[:-2]:
            target = target[step]
        target[path[-2]] = path[-1]

    return edit


def _many_keys(columns: dict[str, Any]) -> None:
    columns["keys"] = [""] * (mm.DEFAULT_LIMITS.max_elements + 1)


def _no_keys(columns: dict[str, Any]) -> None:
    columns["keys"], columns["columns"] = [], []


def _drop_column(columns: dict[str, Any]) -> None:
    columns["columns"].pop()


def _none_present(columns: dict[str, Any]) -> None:
    columns.update(count=2, absent=[0, 1])
    columns["columns"] = [[0, []], [0, []]]


CHECKS: dict[str, tuple[Callable[[dict[str, Any]], Any], dict[str, Any], str, str]] = {
    "count above max_elements": (
        _set("count", 2_000_000),
        {},
        LIST,
        "2000000 elements exceed the limit of 1048576",
    ),
    "no keys": (_no_keys, {}, LIST, "a column list has no keys"),
    "keys above max_elements": (
        _many_keys,
        {},
        LIST,
        "1048577 elements exceed the limit of 1048576",
    ),
    "fewer columns than keys": (_drop_column, {}, LIST, "a column list of 2 keys holds 1 columns"),
    "a key twice": (_set("keys", ["a", "a"]), {}, LIST, "a column list names a key twice"),
    "absent positions repeat": (
        _set("absent", [1, 1]),
        {},
        LIST,
        "absent item positions must increase and lie below the count (17)",
    ),
    "absent positions decrease": (
        _set("absent", [3, 1]),
        {},
        LIST,
        "absent item positions must increase and lie below the count (17)",
    ),
    "an absent position past the count": (
        _set("absent", [17]),
        {},
        LIST,
        "absent item positions must increase and lie below the count (17)",
    ),
    "no present item": (_none_present, {}, LIST, "a column list has no present item"),
    "a values column too short": (
        _set("columns", 1, 1, [[N, [2, N, False]], N]),
        {},
        f"{LIST}['b']",
        "a column holds 2 values for 16 present items",
    ),
    "a field column too long": (
        _set("columns", 0, 1, [*range(N), 0]),
        {},
        f"{LIST}['a'].data",
        "a column holds 17 values for 16 present items",
    ),
    "an unknown column tag": (_set("columns", 0, 0, 7), {}, LIST, "Invalid value 7"),
    "a fields column without a field": (
        lambda columns: columns["columns"][0].pop(),
        {},
        LIST,
        "Expected `array` of at least length 3, got 2",
    ),
    "a negative count": (_set("count", -1), {}, LIST, "Expected `int` >= 0"),
    "a negative absent position": (_set("absent", [-1]), {}, LIST, "Expected `int` >= 0"),
    "an unknown entry": (_set("x", 1), {}, LIST, "Object contains unknown field `x`"),
    "no absent entry": (
        lambda columns: columns.pop("absent"),
        {},
        LIST,
        "Object missing required field `absent`",
    ),
    "a key that is not a str": (_set("keys", 0, 5), {}, LIST, "Expected `str`, got `int`"),
    "a column that is not an array": (
        _set("columns", 0, 1, "x"),
        {},
        LIST,
        "Expected `array`, got `str`",
    ),
    # Values are checked as rows check them, with rows' paths (item 3 is the third present).
    "a tensor reference out of range": (
        _set("columns", 0, 1, 2, 99),
        {},
        f"{LIST}[3]['a'].data",
        "tensor 99 out of range (17 tensors)",
    ),
    "an element back-reference not sent": (
        _set("columns", 1, 1, 2, 99),
        {},
        f"{LIST}[3]['b']",
        "back-reference to MultiModalFieldElem value 99, but 17 were sent",
    ),
    "a field variant index not sent": (
        _set("columns", 0, 2, 1, 5),
        {},
        f"{LIST}[2]['a'].field",
        "back-reference to BaseMultiModalField value 5, but 1 were sent",
    ),
    "a field variant tagged back-reference not sent": (
        _set("columns", 0, 2, 1, [-1, 5]),
        {},
        f"{LIST}[2]['a'].field",
        "back-reference to BaseMultiModalField value 5, but 1 were sent",
    ),
    "a field variant referred to before it is sent": (
        _set("columns", 0, 2, 0, 0),
        {},
        f"{LIST}[0]['a'].field",
        "back-reference to BaseMultiModalField value 0, but 0 were sent",
    ),
}


@pytest.mark.parametrize("case", sorted(CHECKS))
def test_a_bad_column_list_is_refused_with_its_path(case: str) -> None:
    edit, kwargs, path, message = CHECKS[case]
    error = _reject(edit, **kwargs)
    assert (error.path, error.message) == (path, message)


def test_absent_items_in_a_list_whose_items_cannot_be_none_are_refused() -> None:
    cell = f.Cell(values=torch.ones(1), extra=None, reading=1.0, index=0, label="x")
    table = f.CellTable(rows=[], dense=[f.CellRow({"k": cell})] * N)
    frames = [bytes(frame) for frame in f.encode(table)]
    envelope = msgspec.msgpack.decode(frames[0])
    dense = envelope[HEAD_BODY][1]
    assert dense["absent"] == []
    dense.update(count=N + 1, absent=[1])
    with pytest.raises(mm.DecodeError) as info:
        f.decode([msgspec.msgpack.encode(envelope), *frames[1:]], f.CellTable)
    assert str(info.value) == (
        "$.dense: a column list of values that cannot be None has absent items"
    )


def test_the_edits_above_start_from_a_valid_message() -> None:
    envelope, frames = _message()
    decoded = mm.decode([msgspec.msgpack.encode(envelope), *frames[1:]], ITEMS)
    assert decoded == _value()


# -- fuzz: column-list headers ----------------------------------------------------------------

_FUZZ_SAMPLE = Sample(ITEMS, _value(), tuple(), b"", frozenset())

_small_ints = st.integers(-2, 8) | st.sampled_from([2**31, 2**63 - 1, 2**64 - 1, -(2**63)])
_field_values = st.one_of(
    _small_ints,
    st.none(),
    st.lists(_small_ints | st.booleans(), max_size=3),
    st.sampled_from([[0, False], [1, [], 0, False], [2, 3, False], [-1, 0], [9, 9]]),
)
_columns = st.one_of(
    st.tuples(st.just(0), st.lists(_field_values | st.just([3, [2, 3, False]]), max_size=6)).map(
        list
    ),
    st.tuples(
        st.just(1),
        st.lists(_small_ints | st.none() | st.just([1, [0, 1]]), max_size=6),
        st.lists(_field_values, max_size=6),
    ).map(list),
    st.lists(_field_values, max_size=4),
)


@st.composite
def column_lists(draw: st.DrawFn) -> dict[str, Any]:
    """Column-list headers, mostly well-formed in shape with values at the edges."""
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", ""]), max_size=4))
    header: dict[str, Any] = {
        "count": draw(_small_ints),
        "keys": keys,
        "columns": draw(st.lists(_columns, min_size=len(keys), max_size=len(keys) + 1)),
        "absent": draw(st.lists(_small_ints, max_size=4)),
    }
    if draw(st.integers(0, 9)) == 0:
        header[draw(st.sampled_from(["count", "keys", "columns", "absent", "x"]))] = draw(
            _field_values
        )
    return header


@_timeout("limits")
@_settings("limits")
@given(column_lists(), st.booleans())
def test_fuzz_column_list_headers(header: dict[str, Any], in_a_buffer: bool) -> None:
    envelope, frames = _message()
    envelope[HEAD_BODY]["image"] = copy.deepcopy(header)
    edited = [msgspec.msgpack.encode(envelope), *frames[1:]]
    if in_a_buffer:
        buffer = _joined(edited)
        judge(lambda: mm.decode_bytes(buffer, ITEMS), _FUZZ_SAMPLE, size=input_size(buffer))
    else:
        judge(lambda: mm.decode(edited, ITEMS), _FUZZ_SAMPLE, size=input_size(edited))
