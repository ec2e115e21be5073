"""Column lists (wire version 3): an item list whose items share their keys travels key by key.

docs/wire-format.md#column-lists specifies the layout. Here: the encoder writes a column
list exactly when the format says, in exactly its layout; the decoder rebuilds what rows
rebuild (tensor by tensor, the same objects shared, tensors viewing the frames); messages
of the version-2 encoder still decode; and the planner's hints change nothing it returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections import UserDict
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.golden.features as f
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import small_items
from mmcodec.runtime import columns
from mmcodec.runtime.columns import MIN_ITEMS
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits
from mmcodec.runtime.tensors import DEFAULT_INLINE_THRESHOLD, EncodeContext, plan_payloads
from tests.codec.helpers import (
    address,
    assert_items_equal,
    inside,
    random_tensor,
    rows_only,
)

ITEMS = mm.MultiModalKwargsItems
N = MIN_ITEMS  # the fewest present items a list travels as columns with (16)
DATA = Path(__file__).parent / "data"
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _envelope(frames: list[Any]) -> list[Any]:
    return msgspec.msgpack.decode(frames[0])  # type: ignore[no-any-return]


def _items(*items: mm.MultiModalKwargsItem | None) -> mm.MultiModalKwargsItems:
    return ITEMS({"image": list(items)})


def _views(n: int = N) -> tuple[list[mm.MultiModalKwargsItem], mm.MultiModalFieldElem]:
    """``n`` items: key 'a' a view of one batch with one BatchedField, key 'b' one element
    every item holds (a shared field's)."""
    batch = torch.arange(2 * n, dtype=torch.int64).reshape(n, 2)
    field = mm.BatchedField()
    shared = mm.MultiModalFieldElem(torch.tensor([1.5]), mm.SharedField(n))
    items = [
        mm.MultiModalKwargsItem({"a": mm.MultiModalFieldElem(batch[i], field), "b": shared})
        for i in range(n)
    ]
    return items, shared


# -- the layout -------------------------------------------------------------------------


def test_a_column_list_is_laid_out_as_the_format_says() -> None:
    items, _ = _views()
    frames = mm.encode(_items(items[0], None, *items[1:]))
    envelope = _envelope(frames)
    assert envelope[:5] == ["mmc", 3, "multimodal", 1, "MultiModalKwargsItems"]
    # One run of the 16 views (refs 0-15), then the shared tensor (ref 16).
    assert [run[:2] + run[3:] for run in envelope[5]] == [
        ["int64", [2], 0, N],
        ["float32", [1], 0, 1],
    ]
    assert envelope[7] == {
        "image": {
            "count": N + 1,
            "keys": ["a", "b"],
            "columns": [
                # A fields column: the data references, the BatchedField once (union tag
                # 0, keep_on_cpu), then its index as a bare int; elements 0-15 complete.
                [1, list(range(N)), [[0, False], *[0] * (N - 1)]],
                # A values column: one element in every item, sent once (element 16),
                # then its index.
                [0, [[N, [2, N, False]], *[N] * (N - 1)]],
            ],
            "absent": [1],
        }
    }
    # A msgpack map with the keys in this order (rows are an array).
    raw = msgspec.msgpack.encode(envelope[7]["image"])
    assert msgspec.msgpack.decode(frames[0][-len(raw) :]) == envelope[7]["image"]
    assert bytes(frames[0][-len(raw) :]).startswith(b"\x84\xa5count")


def test_a_list_travels_as_columns_from_16_present_items() -> None:
    items, _ = _views(N + 1)
    cases: list[Any] = [
        _items(items[0]),  # one item
        _items(None, None),  # none present
        _items(*items[: N - 1]),  # 15 items
        _items(*items[: N - 1], None),  # 16 items, 15 present
        _items(*items[:N]),  # 16 present
        _items(None, *items[:N], None),  # 16 present of 18
        mm.PlaceholderRange(1, 2),  # no item list at all
    ]
    versions = [_envelope(mm.encode(value))[1] for value in cases]
    assert versions == [2, 2, 2, 2, 3, 3, 2]
    for value in cases[:-1]:
        assert_items_equal(mm.decode(mm.encode(value), ITEMS), value)


def test_a_message_from_the_version_2_encoder_still_decodes() -> None:
    # Written by main at 85fe65f (before column lists): encode_bytes(small_items(7, 3)).
    buffer = (DATA / "v2-small-items-3.mmcb").read_bytes()
    expected = small_items(7, 3, api=mm)
    decoded = mm.decode_bytes(buffer, ITEMS)
    assert_items_equal(decoded, expected)
    first = decoded["image"][0]
    assert first is not None
    assert all(item is not None and item["embed"] is first["embed"] for item in decoded["image"])
    # The same value now travels as rows too (3 items), byte for byte; 16 as columns.
    assert bytes(mm.encode_bytes(expected)) == buffer
    more = small_items(7, N, api=mm)
    frames = mm.encode(more)
    assert _envelope(frames)[1] == 3
    assert isinstance(_envelope(frames)[7]["image"], dict)
    assert_items_equal(mm.decode(frames, ITEMS), more)


# -- when rows ----------------------------------------------------------------------------


class _Key(str):
    """A str subclass: equal keys, another class (rows refuse it: not exactly str)."""


class _Touchy(str):
    """A str subclass that must not be compared."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        raise AssertionError("a key of another class was compared")


class _OwnItems(dict[str, Any]):
    """A dict that lists its entries its own way."""

    def items(self) -> Any:
        return reversed(list(super().items()))


def _rows_cases() -> dict[str, mm.MultiModalKwargsItems]:
    items, shared = _views(N)
    a, b = items[:2]
    swapped = mm.MultiModalKwargsItem({"b": b["b"], "a": b["a"]})
    other_key = mm.MultiModalKwargsItem({"a": b["a"], "c": shared})
    empty = mm.MultiModalKwargsItem({})
    return {
        "one item": _items(a),
        "no item present": _items(None, None, None),
        "keys in another order": _items(*items[: N - 1], swapped),
        "another key": _items(*items[: N - 1], other_key),
        "one key more": _items(*items[: N - 1], mm.MultiModalKwargsItem({**b, "c": shared})),
        "one key fewer": _items(*items[: N - 1], mm.MultiModalKwargsItem({"a": b["a"]})),
        "no keys": _items(*[empty] * N),
        "items of two classes": ITEMS({"image": [*items[: N - 1], dict(b)]}),  # type: ignore[list-item]
    }


@pytest.mark.parametrize("case", sorted(_rows_cases()))
def test_items_that_do_not_share_their_keys_travel_as_rows(case: str) -> None:
    value = _rows_cases()[case]
    frames = mm.encode(value)
    envelope = _envelope(frames)
    assert envelope[1] == 2
    assert isinstance(envelope[7]["image"], list)
    with rows_only():
        assert bytes(mm.encode(value)[0]) == bytes(frames[0])
    if case == "items of two classes":  # the dict comes back as the item class
        value = _items(
            *(mm.MultiModalKwargsItem(i) if i is not None else i for i in value["image"])
        )
    assert_items_equal(mm.decode(frames, ITEMS), value)


def test_a_dict_that_lists_its_own_items_travels_as_rows() -> None:
    items, _ = _views(2)
    own: Any = _OwnItems(items[1])
    value = ITEMS({"image": [own] * N})
    with rows_only():
        rows = mm.encode(value)
    frames = mm.encode(value)
    assert _envelope(frames)[1] == 2
    assert bytes(frames[0]) == bytes(rows[0])
    assert list(mm.decode(frames, ITEMS)["image"][0]) == ["b", "a"]  # type: ignore[arg-type]


def test_a_str_subclass_key_is_refused_as_rows_refuse_it() -> None:
    items, _ = _views(N)
    odd_key = mm.MultiModalKwargsItem({_Key("a"): items[1]["a"], "b": items[1]["b"]})
    for value, position in ((_items(*items[: N - 1], odd_key), N - 1), (_items(*[odd_key] * N), 0)):
        message = f"$['image'][{position}]['a'] (key): expected a str, got _Key"
        assert _encode_error(value, rows=True) == message
        assert _encode_error(value) == message


def test_a_user_dict_item_class_travels_as_columns() -> None:
    class Item(UserDict[str, Any]):
        pass

    items, _ = _views(N)
    user_items: list[Any] = [Item(item) for item in items]
    value = ITEMS({"image": user_items})
    frames = mm.encode(value)
    assert isinstance(_envelope(frames)[7]["image"], dict)
    assert_items_equal(mm.decode(frames, ITEMS), _items(*items))


# -- errors: what rows refuse, with rows' path ----------------------------------------------


def _encode_error(value: Any, type_: Any = None, rows: bool = False) -> str:
    module: Any = f if isinstance(value, f.CellTable) else mm
    with rows_only() if rows else contextlib.nullcontext(), pytest.raises(mm.EncodeError) as info:
        module.encode(value, type=type_)
    assert type(info.value) is mm.EncodeError
    return str(info.value)


def _refusals() -> dict[str, tuple[Any, Any, str]]:
    items, _ = _views(N)
    last = items[-1]
    junk: Any = object()
    bad_data = mm.MultiModalKwargsItem(
        {"a": mm.MultiModalFieldElem(junk, mm.BatchedField()), "b": last["b"]}
    )
    junk = "x"
    bad_field = mm.MultiModalKwargsItem({"a": last["a"], "b": mm.MultiModalFieldElem(None, junk)})
    junk = 7
    not_elem = mm.MultiModalKwargsItem({"a": last["a"], "b": junk})
    cell = f.CellRow(
        {"k": f.Cell(values=torch.ones(1), extra=None, reading=1.0, index=0, label="x")}
    )
    negative = f.Cell(values=torch.ones(1), extra=None, reading=1.0, index=-1, label="x")
    nothing: Any = None
    return {
        "bad data": (
            _items(*items[:-1], bad_data),
            None,
            "$['image'][15]['a'].data: object is not a nested tensor "
            "(tensor, int, float, list or tuple)",
        ),
        "bad field": (
            _items(*items[:-1], bad_field),
            None,
            "$['image'][15]['b'].field: "
            "expected one of BatchedField, FlatField, SharedField, got str",
        ),
        "not an element": (
            _items(*items[:-1], not_elem),
            None,
            "$['image'][15]['b']: expected a MultiModalFieldElem, got int "
            "('int' object has no attribute 'data')",
        ),
        "None where items cannot be None": (
            f.CellTable(rows=[], dense=[*[cell] * 8, nothing, *[cell] * 8]),
            None,
            "$.dense[8]: expected a dict, got NoneType",
        ),
        "a constraint": (
            f.CellTable(rows=[*[cell] * (N - 1), f.CellRow({"k": negative})]),
            None,
            "$.rows[15]['k'].index: expected a value >= 0, got -1",
        ),
    }


@pytest.mark.parametrize("case", sorted(_refusals()))
def test_a_value_rows_refuse_is_refused_with_the_same_error_and_path(case: str) -> None:
    value, type_, message = _refusals()[case]
    assert _encode_error(value, type_, rows=True) == message
    assert _encode_error(value, type_) == message


def test_a_tensor_the_planner_refuses_is_named_by_its_rows_path() -> None:
    items, _ = _views(N)
    sparse = mm.MultiModalFieldElem(torch.zeros(2).to_sparse(), mm.BatchedField())
    value = _items(*items[:-1], mm.MultiModalKwargsItem({"a": sparse, "b": items[-1]["b"]}))
    with rows_only():
        expected = _encode_error(value)
    assert expected.startswith("$['image'][15]['a'].data: ")
    assert _encode_error(value) == expected


# -- round trips ------------------------------------------------------------------------------


def _identities(value: mm.MultiModalKwargsItems, tensors: bool = True) -> list[list[int]]:
    """Which elements, field variants (and tensors) are one object: per object met, the
    positions where it occurs. Compared between a value and its decodings."""
    seen: dict[int, list[int]] = {}
    position = 0
    for items in value.values():
        for item in items:
            for elem in (item or {}).values():
                parts = (elem, elem.field, elem.data) if tensors else (elem, elem.field)
                for part in parts:
                    # (Empty tensors: which of them come back as one depends on the order
                    # the planner meets them in; nothing to compare.)
                    if isinstance(part, (mm.MultiModalFieldElem, mm.BaseMultiModalField)) or (
                        isinstance(part, torch.Tensor) and part.numel()
                    ):
                        seen.setdefault(id(part), []).append(position)
                    position += 1
    return sorted(seen.values())


def _assert_views_of_frames(decoded: mm.MultiModalKwargsItems, frames: list[Any]) -> None:
    """Every tensor too large to travel inline views a payload frame (zero copy)."""

    def tensors(data: object) -> list[torch.Tensor]:
        if isinstance(data, torch.Tensor):
            return [data]
        if isinstance(data, (list, tuple)):
            return [t for d in data for t in tensors(d)]
        return []

    for items in decoded.values():
        for item in items:
            for elem in (item or {}).values():
                for t in tensors(elem.data):
                    if t.nbytes >= DEFAULT_INLINE_THRESHOLD:
                        assert any(inside(t, frame) for frame in frames[1:])


def _round_trip(value: mm.MultiModalKwargsItems) -> None:
    with rows_only():
        try:
            rows = mm.encode(value)
        except mm.EncodeError as e:  # a str subclass key: refused alike
            assert _encode_error(value) == str(e)
            return
    frames = mm.encode(value)
    decoded, from_rows = mm.decode(frames, ITEMS), mm.decode(rows, ITEMS)
    assert_items_equal(decoded, value)
    assert_items_equal(from_rows, value)
    # The same objects shared as in the value (elements, field variants), and the same
    # tensors as from rows (equal views of one storage travel once, either way).
    assert _identities(decoded, tensors=False) == _identities(value, tensors=False)
    assert _identities(decoded) == _identities(from_rows)
    _assert_views_of_frames(decoded, frames)
    single = mm.decode_bytes(bytes(mm.encode_bytes(value)), ITEMS, copy=True)
    assert_items_equal(single, value)
    assert _identities(single) == _identities(decoded)


@st.composite
def shared_key_items(draw: st.DrawFn) -> mm.MultiModalKwargsItems:
    """Item lists whose items mostly share their keys: per key, views of one batch or
    other tensors, one field variant or many, one element in every item or in some;
    None items; now and then a swapped key order, a str subclass key, and elements sent
    before the list (in an earlier modality)."""
    n = draw(st.integers(N - 2, N + 2))
    keys = draw(st.lists(st.text(max_size=4), min_size=1, max_size=4, unique=True))
    dtype = draw(st.sampled_from([torch.float16, torch.int64, torch.bool, torch.bfloat16]))
    columns: dict[str, list[mm.MultiModalFieldElem]] = {}
    for k, key in enumerate(keys):
        seed = draw(st.integers(0, 2**16))
        kind = draw(st.sampled_from(["views", "tensors", "one element", "some repeated", "nested"]))
        shape = draw(st.lists(st.integers(0, 3), max_size=2))
        batch = random_tensor(dtype, [n, *shape], seed + k)
        one_field = draw(st.booleans())
        field: mm.BaseMultiModalField = draw(
            st.sampled_from([mm.BatchedField(), mm.SharedField(n), mm.FlatField([slice(0, 1)])])
        )

        def field_of(
            i: int, field: mm.BaseMultiModalField = field, one: bool = one_field
        ) -> mm.BaseMultiModalField:
            return field if one else mm.BatchedField(keep_on_cpu=bool(i % 2))

        if kind == "views":
            elems = [mm.MultiModalFieldElem(batch[i], field_of(i)) for i in range(n)]
        elif kind == "tensors":
            elems = [mm.MultiModalFieldElem(batch[i].clone(), field_of(i)) for i in range(n)]
        elif kind == "one element":
            elems = [mm.MultiModalFieldElem(batch, field)] * n
        elif kind == "some repeated":
            distinct = [mm.MultiModalFieldElem(batch[i], field_of(i)) for i in range(2)]
            elems = [distinct[draw(st.integers(0, 1))] for _ in range(n)]
        else:
            elems = [
                mm.MultiModalFieldElem(None if i % 3 == 0 else [batch[i], (i, 0.5)], field_of(i))
                for i in range(n)
            ]
        columns[key] = elems
    rows: list[mm.MultiModalKwargsItem | None] = [
        mm.MultiModalKwargsItem({key: columns[key][i] for key in keys}) for i in range(n)
    ]
    for i in draw(st.lists(st.integers(0, n - 1), max_size=n)):
        rows[i] = None
    twist = draw(st.sampled_from(["none", "swap", "subclass key", "sent before"]))
    value: dict[str, list[mm.MultiModalKwargsItem | None]] = {}
    present = [row for row in rows if row is not None]
    if twist == "swap" and len(keys) > 1 and present:
        present[-1].clear()
        present[-1].update({key: columns[key][0] for key in reversed(keys)})
    elif twist == "subclass key" and present:
        key = keys[0]
        present[-1][_Key(key)] = present[-1].pop(key)  # last: the key order changes too
    elif twist == "sent before" and present:
        value["before"] = [mm.MultiModalKwargsItem(dict(present[0]))]
    value["image"] = rows
    return ITEMS(value)


@SETTINGS
@given(shared_key_items())
def test_items_that_share_keys_round_trip_as_rows_do(value: mm.MultiModalKwargsItems) -> None:
    _round_trip(value)


def test_the_design_payloads_round_trip_as_columns() -> None:
    value = small_items(0, 64, api=mm)
    frames = mm.encode(value)
    assert isinstance(_envelope(frames)[7]["image"], dict)
    _round_trip(value)
    decoded = mm.decode(frames, ITEMS)
    # The 64 views of each batch come back as views of one frame (16 KB), one run.
    pixels: list[Any] = [item["pixel_values"].data for item in decoded["image"] if item]
    assert len({t.untyped_storage().data_ptr() for t in pixels}) == 1
    (frame,) = [frame for frame in frames[1:] if inside(pixels[0], frame)]
    assert [address(frame) + i * 512 for i in range(64)] == [t.data_ptr() for t in pixels]


def test_nested_tensors_and_none_data_in_a_fields_column() -> None:
    t = torch.arange(4.0)
    datas: list[mm.NestedTensors | None] = [[t, (1, 2.5)], None, t, 3, []] * 4
    field = mm.BatchedField()
    items = [mm.MultiModalKwargsItem({"x": mm.MultiModalFieldElem(data, field)}) for data in datas]
    value = _items(*items)
    body = _envelope(mm.encode(value))[7]["image"]
    assert body["columns"][0][1][:6] == [
        [1, [0, [2, [[0, 1], 2.5]]]],
        None,
        0,
        [0, 3],
        [1, []],
        [1, [0, [2, [[0, 1], 2.5]]]],
    ]
    _round_trip(value)


# -- the features schema: any schema's column lists ---------------------------------------


def test_a_features_column_list_sends_a_union_once_as_a_bare_index() -> None:
    reading = f.Sample(value=0.5)
    cells = [
        f.CellRow(
            {
                "k": f.Cell(
                    values=torch.full((2,), float(i)),
                    extra=None,
                    reading=reading,
                    index=i,
                    label=str(i),
                )
            }
        )
        for i in range(N + 1)
    ]
    table = f.CellTable(rows=[cells[0], None, *cells[1:N]], dense=[cells[N]] * N)
    envelope = _envelope(f.encode(table))
    rows, dense = envelope[7]
    assert rows == {
        "count": N + 1,
        "keys": ["k"],
        "columns": [
            [
                1,
                list(range(N)),  # tensor references
                [None] * N,
                [[0, 0.5, 1.0], *[0] * (N - 1)],  # the Reading once, then its bare index
                list(range(N)),
                [str(i) for i in range(N)],
                [""] * N,
            ]
        ],
        "absent": [1],
    }
    # The same cell in every item: a values column, the cell sent once then its index
    # (cell 16); its Reading was sent before: rows' tagged back-reference inside the cell.
    assert dense == {
        "count": N,
        "keys": ["k"],
        "columns": [[0, [[N, None, [-1, 0], N, str(N), ""], *[N] * (N - 1)]]],
        "absent": [],
    }
    decoded = f.decode(f.encode(table), f.CellTable)
    assert decoded == table
    assert decoded.rows[0]["k"].reading is decoded.rows[2]["k"].reading  # type: ignore[index]
    assert decoded.dense[0]["k"] is decoded.dense[1]["k"]
    assert decoded.dense[0]["k"].reading is decoded.rows[0]["k"].reading  # type: ignore[index]


def test_a_fields_column_from_an_older_schema_gives_its_missing_fields_their_defaults() -> None:
    cells = [
        f.CellRow(
            {
                "k": f.Cell(
                    values=torch.ones(1), extra=None, reading=1.0, index=i, label="l", note="n"
                )
            }
        )
        for i in range(N)
    ]
    frames = [bytes(frame) for frame in f.encode(f.CellTable(rows=list(cells)))]
    envelope = msgspec.msgpack.decode(frames[0])
    column = envelope[7][0]["columns"][0]
    assert column[0] == 1 and column[-1] == ["n"] * N
    del column[-1]  # the note column, which an older schema would not have written
    older = f.decode([msgspec.msgpack.encode(envelope), *frames[1:]], f.CellTable)
    assert [row["k"].note for row in older.rows] == [""] * N  # type: ignore[index]
    # A newer schema's column holds one more field: skipped, as rows skip one.
    envelope[7][0]["columns"][0] = [*column, ["n"] * N, [[1, 2], {"x": None}] * 8]
    newer = f.decode([msgspec.msgpack.encode(envelope), *frames[1:]], f.CellTable)
    assert [row["k"].note for row in newer.rows] == ["n"] * N  # type: ignore[index]


# -- the planner's hints: a speed-up, nothing else ------------------------------------------


def _plan(tensors: list[torch.Tensor], threshold: int, hints: list[tuple[int, int]]) -> Any:
    runs, refs, frames = plan_payloads(tensors, threshold, DEFAULT_LIMITS, hints)
    return (
        [msgspec.msgpack.encode(run) for run in runs],
        refs,
        [(address(frame), bytes(frame)) for frame in frames],
    )


@st.composite
def hinted_tensors(draw: st.DrawFn) -> tuple[list[torch.Tensor], list[tuple[int, int]]]:
    """Tensors as an encoder registers them: hinted columns (views of a batch, in order,
    reversed, strided, of a batch shared with another column, or not views at all) and
    single tensors between them; with the hints an EncodeContext records."""
    tensors: list[torch.Tensor] = []
    hints: list[tuple[int, int]] = []
    batches: list[torch.Tensor] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                ["views", "reversed", "strided", "other batch", "fresh", "single", "whole"]
            )
        )
        n = draw(st.integers(2, 5))
        dtype = draw(st.sampled_from([torch.float32, torch.int16, torch.bool, torch.uint8]))
        shape = draw(st.lists(st.integers(0, 40), max_size=2))
        batch = random_tensor(dtype, [n * 2, *shape], draw(st.integers(0, 999)))
        if kind == "other batch" and batches:
            batch = batches[-1]
            n = batch.shape[0] // 2
        batches.append(batch)
        if kind == "single":
            tensors.append(batch[draw(st.integers(0, n - 1))])
            continue
        if kind == "whole":
            tensors.append(batch)
            continue
        if kind == "views" or kind == "other batch":
            column = [batch[i] for i in range(n)]
        elif kind == "reversed":
            column = [batch[i] for i in reversed(range(n))]
        elif kind == "strided":
            column = [batch[2 * i] for i in range(n)]
        else:
            column = [batch[i].clone() for i in range(n)]
        ctx = EncodeContext(8)
        ctx.tensors, ctx.ids = tensors, {id(t): i for i, t in enumerate(tensors)}
        if ctx.fresh_refs(column) is None:
            tensors.extend(column)
        hints.extend(ctx.hints)
    return tensors, hints


@SETTINGS
@given(hinted_tensors(), st.sampled_from([0, 16, 1024, 1 << 20]))
def test_the_planners_hints_change_nothing_it_returns(
    case: tuple[list[torch.Tensor], list[tuple[int, int]]], threshold: int
) -> None:
    tensors, hints = case
    assert _plan(tensors, threshold, hints) == _plan(tensors, threshold, [])


def test_the_planner_still_refuses_a_hinted_column_beyond_the_limits() -> None:
    batch = torch.zeros(4, 2, 2, 2)
    tensors = [batch[i] for i in range(4)]
    for limits in (Limits(max_ndim=2), Limits(max_elements=3)):
        errors = []
        for hints in ([(0, 4)], []):
            with pytest.raises(mm.EncodeError) as info:
                plan_payloads(tensors, 1024, limits, hints)
            errors.append(str(info.value))
        assert errors[0] == errors[1]


# -- the runtime's column helpers, branch by branch -------------------------------------------


def test_fresh_refs_registers_distinct_new_tensors_only() -> None:
    ctx = EncodeContext(8)
    t, u = torch.zeros(1), torch.ones(1)
    assert ctx.fresh_refs([t, t]) is None  # one tensor twice: nothing registered
    assert (ctx.tensors, ctx.ids, ctx.hints) == ([], {}, [])
    assert ctx.ref(u) == 0
    assert ctx.fresh_refs([t, u]) is None  # u was registered before
    assert ctx.fresh_refs([t, torch.nn.Parameter(torch.ones(1))]) is None  # not exactly Tensor
    assert ctx.fresh_refs([t, torch.ones(2)]) == [1, 2]
    assert ctx.hints == [(1, 2)] and ctx.ids[id(t)] == 1


def test_fresh_accepts_only_distinct_values_not_sent_before() -> None:
    a, b, c = object(), object(), object()
    seen: dict[int, Any] = {}
    assert columns.fresh([a, b, c], seen) == [id(a), id(b), id(c)]
    assert columns.fresh([a, b, a], seen) is None  # shared, first and last the same
    assert columns.fresh([a, a, b], seen) is None  # repeated elsewhere
    assert columns.fresh([a], seen) == [id(a)]
    seen[id(b)] = 0
    assert columns.fresh([a, b, c], seen) is None  # b was sent before


def test_transpose_leaves_to_rows_what_it_cannot_lay_out() -> None:
    item = {"k": 1}
    many = [dict(item) for _ in range(N)]
    assert columns.transpose(many, False) == ([], ["k"], [[1] * N])
    assert columns.transpose([*many[:-1], None], True) is None  # 15 present
    assert columns.transpose([*many, None], False) is None  # None where it cannot be
    assert columns.transpose([1] * N, False) is None  # not mappings
    mapping: Any = types.MappingProxyType(item)
    assert columns.transpose([mapping] * N, False) is None  # a mapping that is no dict
    user: Any = UserDict(item)
    assert columns.transpose([user] * N, False) == ([], ["k"], [[1] * N])
    # Keys that run on from one item to the next ([k l m] [k] [l m k] [l m]: "k l m" over
    # and over) are not the first item's keys item by item: rows.
    a, b, c = ({"k": 1, "l": 2, "m": 3}, {"k": 1}, {"l": 2, "m": 3, "k": 1})
    assert columns.transpose([a, b, c, {"l": 2, "m": 3}] * (N // 4), False) is None
    assert columns.transpose([a] * N, False) == ([], ["k", "l", "m"], [[1] * N, [2] * N, [3] * N])
    # A key of another class is refused before any key is compared: its == never runs.
    assert columns.transpose([{_Touchy("k"): 1} for _ in range(N)], False) is None


def test_defaults_give_each_item_its_own_empty_container() -> None:
    lists, dicts = columns.defaults([], 3), columns.defaults({}, 2)
    assert lists == [[], [], []] and lists[0] is not lists[1]
    assert dicts == [{}, {}] and dicts[0] is not dicts[1]
    assert columns.defaults("x", 2) == ["x", "x"]


@dataclasses.dataclass
class _Plain:
    a: int
    b: int


class _KeywordsOnly:
    def __init__(self, *, a: int, b: int) -> None:
        if a < 0:
            raise ValueError("a is negative")
        self.a, self.b = a, b


class _Empty(msgspec.Struct):
    pass


def test_a_builder_is_chosen_once_per_class() -> None:
    def assign(a: Any, b: Any) -> Any:
        value: Any = object.__new__(_Plain)
        value.a, value.b = a, b
        return value

    assert columns.builder(_Plain, ("a", "b"), assign) is assign
    assert columns.builder(_Plain, ("a", "b")) is not assign  # no assign: called
    assert columns.builder(_Plain, ("a", "b"))(1, 2) == _Plain(1, 2)
    made = columns.builder(_KeywordsOnly, ("a", "b"))(1, 2)
    assert (made.a, made.b) == (1, 2)
    assert columns.build(columns.builder(_Empty, ()), _Empty, [], 3) == [_Empty()] * 3
    with pytest.raises(columns.ItemError) as info:
        columns.build(
            columns.builder(_KeywordsOnly, ("a", "b")), _KeywordsOnly, [[1, -1], [2, 2]], 2
        )
    assert info.value.index == 1
    assert str(info.value.error) == (
        "$: _KeywordsOnly rejected the decoded values (ValueError: a is negative)"
    )


def test_items_are_built_as_the_mapping_class_builds_them() -> None:
    class Refusing(dict[str, Any]):
        def __init__(self, entries: dict[str, Any]) -> None:
            if entries["k"] < 0:
                raise ValueError("negative")
            super().__init__(entries)

    made = columns.items(3, [1], ["k"], [[1, 2]], Refusing, Refusing)
    assert made == [Refusing({"k": 1}), None, Refusing({"k": 2})]
    assert all(type(item) is Refusing for item in (made[0], made[2]))
    with pytest.raises(mm.DecodeError) as info:
        columns.items(3, [1], ["k"], [[1, -1]], Refusing, Refusing)
    assert str(info.value) == "$[2]: Refusing rejected the decoded values (ValueError: negative)"


def test_a_column_list_may_not_stand_for_more_items_than_its_header_has_bytes() -> None:
    # A fields column whose field lists were all left off (a struct whose fields all have
    # defaults) costs a byte for any count: the header's length bounds the items instead.
    from mmcodec.runtime.errors import DecodeError
    from mmcodec.runtime.tensors import DecodeContext

    ctx = DecodeContext([], DEFAULT_LIMITS, header_size=40)
    assert columns.check(41, [0], ["a"], [[1]], ctx, True) == 40
    with pytest.raises(
        DecodeError,
        match=r"^\$: a column list of 41 present items is longer than its header \(40 bytes\)$",
    ):
        columns.check(41, [], ["a"], [[1]], ctx, True)
