"""Round trips through the codec generated from ``tests/schemas/features.yaml``.

That schema uses every feature of the schema language; its generated module
(``tests.golden.features``) is a golden file. Every named type travels through both
frame lists (``encode``/``decode``) and single buffers (``encode_bytes``/``decode_bytes``)
and must come back equal: same classes, same container kinds (a tuple stays a tuple),
tensors with the same dtype, shape and values.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest
import torch

import tests.golden.common as common
import tests.golden.features as f
from mmcodec.runtime import builtins as builtins_module
from mmcodec.runtime.equality import values_equal


def _point(x: int, y: int) -> common.Point:
    return common.Point(x=x, y=y)


def _expr() -> f.Expr:
    # -(1 + -(2 + 3)), a tree of every variant of the recursive union.
    inner = f.Add(left=f.Lit(value=2), right=f.Lit(value=3))
    return f.Neg(operand=f.Add(left=f.Lit(value=1), right=f.Neg(operand=inner)))


def _tree() -> f.Node:
    leaf = f.Node(label="leaf", parent_label="mid")
    return f.Node(
        label="root",
        children=[f.Node(label="mid", children=[leaf], parent_label="root"), f.Node(label="b")],
    )


def _cell_rows(count: int, keys: tuple[str, ...] = ("pixels", "grid")) -> list[f.CellRow]:
    """Items that share their keys, as a processor builds them: each key's values are views
    of one batch tensor, and every item refers to one Reading object (sent once)."""
    batch = torch.arange(len(keys) * count * 3, dtype=torch.float32).reshape(len(keys), count, 3)
    reading = f.Sample(value=0.5)
    return [
        f.CellRow(
            {
                key: f.Cell(
                    values=batch[k][i],
                    extra=[torch.full((2,), float(i)), i] if i % 2 else None,
                    reading=reading,
                    index=i,
                    label=f"{key}-{i}",
                    note="" if i else "first",
                )
                for k, key in enumerate(keys)
            }
        )
        for i in range(count)
    ]


def _cell_table_columns() -> f.CellTable:
    # 16 items or more present: column lists (fewer travel as rows). Every row of the batch
    # is sent, so its bytes stay one range: Rust, re-encoding the decoded message
    # (tests/rust/test_conformance.py), sees one storage there as Python does.
    rows = _cell_rows(18)
    return f.CellTable(rows=[rows[0], None, *rows[1:16], None], dense=rows[2:18])


def _cell_table_rows() -> f.CellTable:
    # Keys in another order in the second item, and a list of one item: rows.
    first, second = _cell_rows(2)
    swapped = f.CellRow(reversed(list(second.items())))
    return f.CellTable(rows=[first, swapped], dense=_cell_rows(1))


def _cell_table_shared_cells() -> f.CellTable:
    # The same Cell in every item (a values column), readings that differ per item.
    shared = f.Cell(values=torch.ones(2), extra=None, reading=1.5, index=0, label="s")
    rows = [
        f.CellRow({"same": shared, "own": f.Cell(torch.zeros(1), 7, float(i), i, "o")})
        for i in range(16)
    ]
    return f.CellTable(rows=[None, *rows], dense=rows)


# (name, type the value is decoded as, value); the name is the pytest id.
CASES: list[tuple[str, Any, Any]] = [
    ("defaults-all-default", f.Defaults, f.Defaults(required="only this")),
    (
        "defaults-all-set",
        f.Defaults,
        f.Defaults(
            required="r",
            count=-7,
            ratio=-1.25,
            whole_ratio=3.0,
            ceiling=1e300,
            enabled=False,
            name="",
            blob=b"\x00\xff",
            maybe=0,
            items=[1, 2, 3],
            table={"b": 2.0, "a": 1.0},
            more=("x", "y"),
            maybe_items=None,
        ),
    ),
    (
        "constrained",
        f.Constrained,
        f.Constrained(
            age=149,
            score=1.0,
            code="AB",
            payload=b"0123456789abcdef",
            tags=["t"],
            dims=(1, 2, 3, 4),
            weights={"w": 0.5},
            limit=1,
        ),
    ),
    (
        "containers",
        f.Containers,
        f.Containers(
            ints=[],
            pair=(1, "one"),
            triple=(0.5, True, None),
            many=(f.Point2(x=0.0, y=1.0), f.Point2(x=-1.5, y=2.5)),
            by_name={"z": [1.0], "a": []},
            by_id={3: f.Point2(x=3.0, y=3.0), -1: f.Point2(x=0.0, y=0.0)},
            maybe_point=None,
            nested=[[(1, 2), (3, 4)], []],
            maybe_list=[1, None, 3],
        ),
    ),
    ("point2", f.Point2, f.Point2(x=math.inf, y=-0.0)),
    (
        "builtins",
        f.Builtins,
        f.Builtins(
            i=-(2**63),
            f=2.5,
            b=True,
            s="ünïcode ✓",
            raw=b"",
            t=torch.arange(12, dtype=torch.int16).reshape(3, 4),
            nt=[torch.ones(2, 3, dtype=torch.bfloat16), (1, 2.5, [torch.zeros(0)]), 7],
            sl=slice(1, None, 2),
            maybe_t=torch.tensor([True, False]),
        ),
    ),
    ("empty", f.Empty, f.Empty()),
    ("sample", f.Sample, f.Sample(value=0.25)),
    ("value-struct", f.Value, f.Sample(value=1.0, weight=2.0)),
    ("value-int", f.Value, -3),
    ("value-str", f.Value, "text"),
    ("value-tensor", f.Value, torch.linspace(0, 1, 5, dtype=torch.float64)),
    ("value-list", f.Value, [1.0, 2.0]),
    ("value-tuple", f.Value, (4, 5)),
    ("value-dict", f.Value, {"k": 1, "j": 2}),
    ("value-empty-struct", f.Value, f.Empty()),
    ("value-bytes", f.Value, b"bytes"),
    ("reading-struct", f.Reading, f.Sample(value=3.0)),
    ("reading-float", f.Reading, 3.0),
    ("event-click", f.Event, f.Click(at=_point(1, 2), button=2)),
    ("event-key", f.Event, f.Key(code="Enter", modifiers=["shift", "ctrl"])),
    ("event-bool", f.Event, False),
    ("event-slice", f.Event, slice(None, 10)),
    ("click", f.Click, f.Click(at=_point(0, 0))),
    ("key", f.Key, f.Key(code="a")),
    (
        "registry",
        f.Registry,
        f.Registry({"none": None, "struct": f.Sample(value=1.0), "t": torch.tensor([1.5])}),
    ),
    ("int-index", f.IntIndex, f.IntIndex({2: True, 1: f.Key(code="b"), 0: slice(3)})),
    ("node", f.Node, _tree()),
    ("expr", f.Expr, _expr()),
    ("lit", f.Lit, f.Lit(value=0)),
    ("add", f.Add, f.Add(left=f.Lit(value=1), right=_expr())),
    ("neg", f.Neg, f.Neg(operand=f.Lit(value=9))),
    ("cell", f.Cell, f.Cell(values=torch.ones(3), extra=None, reading=2.0, index=1, label="c")),
    ("cell-row", f.CellRow, _cell_rows(1)[0]),
    ("cell-table-columns", f.CellTable, _cell_table_columns()),
    ("cell-table-rows", f.CellTable, _cell_table_rows()),
    ("cell-table-shared-cells", f.CellTable, _cell_table_shared_cells()),
    (
        "drawing",
        f.Drawing,
        f.Drawing(
            origin=_point(5, 6),
            shapes=[common.Circle(center=_point(0, 0), radius=1.5), [_point(0, 0), _point(1, 1)]],
            labels=common.Labels({"b": "2", "a": "1"}),
            highlight=[_point(2, 2)],
        ),
    ),
]


def _assert_same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected)
    assert values_equal(actual, expected), f"{actual!r} != {expected!r}"


def test_every_named_type_has_a_case() -> None:
    covered = {type_.__name__ if isinstance(type_, type) else None for _, type_, _ in CASES}
    unions = {"Value", "Reading", "Event", "Expr"}  # aliases: checked by name below
    names = {name for name in f.__all__ if name[0].isupper() and not name.isupper()}
    names -= {"DecodeError", "EncodeError", "Limits"}
    assert names - unions <= covered
    aliases = {id(type_) for _, type_, _ in CASES}
    assert all(id(getattr(f, u)) in aliases for u in unions)


@pytest.mark.parametrize(("type_", "value"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_round_trip_frames(type_: Any, value: Any) -> None:
    frames = f.encode(value, type=type_)
    _assert_same(f.decode(frames, type_), value)


@pytest.mark.parametrize(("type_", "value"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_round_trip_single_buffer(type_: Any, value: Any) -> None:
    buffer = f.encode_bytes(value, type=type_)
    _assert_same(f.decode_bytes(bytes(buffer), type_, copy=True), value)


def test_defaults_take_the_schema_values() -> None:
    d = f.Defaults(required="x")
    assert (d.count, d.ratio, d.whole_ratio, d.enabled) == (3, 0.5, 2.0, True)
    assert type(d.whole_ratio) is float  # `default: 2` of a float field is 2.0
    assert d.ceiling == math.inf
    assert (d.name, d.blob, d.maybe) == ('it\'s "quoted"', b"hi", None)
    assert (d.items, d.table, d.more, d.maybe_items) == ([], {}, (), [])
    assert type(d.more) is tuple
    assert d.items is not f.Defaults(required="y").items  # mutable defaults are not shared


def test_struct_variant_carries_its_tag_in_both_unions() -> None:
    sample = f.Sample(value=4.0)
    unions: list[Any] = [f.Value, f.Reading]  # union aliases are not `type[T]` to mypy
    for union in unions:
        _assert_same(f.decode(f.encode(sample, type=union), union), sample)


def test_a_struct_value_referenced_twice_travels_once_and_stays_one_object() -> None:
    # A DAG: the same child under two parents, and the same point in two containers.
    shared_child = f.Node(label="shared")
    tree = f.Node(label="root", children=[f.Node(label="a", children=[shared_child]), shared_child])
    body = msgspec.msgpack.decode(f.encode(tree)[0])[-1]
    assert body[1][1] == 0  # the second occurrence: index 0, the first Node completed
    decoded = f.decode(f.encode(tree), f.Node)
    assert decoded.children[0].children[0] is decoded.children[1]
    _assert_same(decoded, tree)

    point = f.Point2(x=1.0, y=2.0)
    containers = f.Containers(
        ints=[],
        pair=(1, "one"),
        triple=(0.5, True, None),
        many=(point, point),
        by_name={},
        by_id={7: point},
        maybe_point=point,
        nested=[],
        maybe_list=None,
    )
    decoded_containers = f.decode(f.encode(containers), f.Containers)
    _assert_same(decoded_containers, containers)
    assert decoded_containers.many[0] is decoded_containers.many[1]
    assert decoded_containers.by_id[7] is decoded_containers.many[0]
    assert decoded_containers.maybe_point is decoded_containers.many[0]


def test_a_struct_variant_is_shared_by_its_union_not_by_index() -> None:
    # Sample is a variant of Value: a repeat travels as the union's tagged reference.
    sample = f.Sample(value=4.0)
    registry = f.Registry({"a": sample, "b": sample})
    body = msgspec.msgpack.decode(f.encode(registry)[0])[-1]
    assert body["b"] == [-1, 0]
    decoded = f.decode(f.encode(registry), f.Registry)
    assert decoded["a"] is decoded["b"]
    _assert_same(decoded, registry)


def test_a_value_decodes_only_as_the_type_it_was_encoded_as() -> None:
    frames = f.encode(f.Lit(value=1))
    expr: Any = f.Expr
    with pytest.raises(f.DecodeError) as info:
        f.decode(frames, expr)
    assert str(info.value) == "$: message holds a Lit, not a Expr"


def test_cross_schema_types_are_the_imported_modules_classes() -> None:
    drawing = next(value for name, _, value in CASES if name == "drawing")
    decoded = f.decode(f.encode(drawing), f.Drawing)
    assert type(decoded.origin) is common.Point
    assert type(decoded.labels) is common.Labels
    assert list(decoded.labels) == ["b", "a"]  # mapping key order preserved
    assert type(decoded.shapes[0]) is common.Circle


def _constrained(**changes: Any) -> f.Constrained:
    valid: dict[str, Any] = {
        "age": 1,
        "score": 0.5,
        "code": "AB",
        "payload": b"",
        "tags": ["t"],
        "dims": (),
        "weights": {},
    }
    return f.Constrained(**{**valid, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"age": 150}, "$.age: Expected `int` <= 149"),
        ({"score": 0.0}, "$.score: Expected `float` > 0.0"),
        ({"code": "ab"}, "$.code: Expected `str` matching regex '^[A-Z]+$'"),
        ({"code": "ABCDEFGHI"}, "$.code: Expected `str` of length <= 8"),
        ({"payload": bytes(17)}, "$.payload: Expected `bytes` of length <= 16"),
        ({"tags": []}, "$.tags: Expected `array` of length >= 1"),
        ({"dims": (1, 2, 3, 4, 5)}, "$.dims: Expected `array` of length <= 4"),
        ({"weights": dict.fromkeys("abcd", 1.0)}, "$.weights: Expected `object` of length <= 3"),
        ({"limit": 0}, "$.limit: Expected `int` >= 1"),
    ],
    ids=[
        "lt",
        "gt",
        "pattern",
        "max_length-str",
        "max_length-bytes",
        "min_length-list",
        "max_length-tuple",
        "max_length-dict",
        "optional-ge",
    ],
)
def test_constraints_are_enforced_on_decode(
    changes: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The encoder checks constraints too (see below): switch that off to forge a message.
    monkeypatch.setattr(builtins_module, "constrained", lambda value, **_: value)
    frames = f.encode(_constrained(**changes))
    with pytest.raises(f.DecodeError) as info:
        f.decode(frames, f.Constrained)
    assert str(info.value) == message
    assert info.value.path == message.partition(":")[0]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"age": 150}, "$.age: expected a value < 150, got 150"),
        ({"score": 0.0}, "$.score: expected a value > 0.0, got 0.0"),
        ({"code": "ab"}, "$.code: expected a string matching '^[A-Z]+$', got 'ab'"),
        ({"code": "ABCDEFGHI"}, "$.code: expected a length <= 8, got 9"),
        ({"payload": bytes(17)}, "$.payload: expected a length <= 16, got 17"),
        ({"tags": []}, "$.tags: expected a length >= 1, got 0"),
        ({"dims": (1, 2, 3, 4, 5)}, "$.dims: expected a length <= 4, got 5"),
        ({"weights": dict.fromkeys("abcd", 1.0)}, "$.weights: expected a length <= 3, got 4"),
        ({"limit": 0}, "$.limit: expected a value >= 1, got 0"),
    ],
)
def test_constraints_are_enforced_on_encode(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(f.EncodeError) as info:
        f.encode(_constrained(**changes))
    assert str(info.value) == message


def test_constraint_bounds_are_inclusive_where_the_schema_says_so() -> None:
    value = _constrained(age=0, score=1.0, code="ABCDEFGH", tags=["a"], limit=1)
    _assert_same(f.decode(f.encode(value), f.Constrained), value)
