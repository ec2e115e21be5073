"""``mmcodec inspect`` on column lists (wire version 3).

An item list whose items share their keys travels as columns: per key, the items' values
(a values column) or one column per field of their struct (a fields column), with the
positions of the absent items. With the module, inspect shows that layout by the schema's
names, each value labelled with its item's position and resolved as in rows (tensors,
back-references with the path of the value they repeat, as rows would spell it); by
position, the map as it is. Hostile column lists are refused with the decoder's message.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmcodec.codegen.cli import main
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from mmcodec.runtime.codec import codec_of
from mmcodec.runtime.columns import MIN_ITEMS
from mmcodec.runtime.inspect import describe, render_text
from tests.codegen.test_features import CASES as FEATURES
from tests.evolution import HERE as EVOLUTION
from tests.evolution import forget, generate
from tests.golden import features

CODEC = codec_of(mm)
MODULE = "mmcodec.generated.multimodal"


ITEMS = MIN_ITEMS
"""Present items of the example: as few as travel as columns."""
LAST = ITEMS + 1
"""The example's last position (two items absent)."""


def _example() -> mm.MultiModalKwargsItems:
    """Sixteen images and two absent ones: a token element shared by every item (a values
    column), and per-item pixels whose field variant is one object (a fields column)."""
    token = mm.MultiModalFieldElem(torch.tensor([7, 7]), mm.SharedField(3))
    batched = mm.BatchedField()
    items: list[mm.MultiModalKwargsItem | None] = [
        mm.MultiModalKwargsItem(
            {"token": token, "pixels": mm.MultiModalFieldElem(torch.full((2,), float(i)), batched)}
        )
        for i in range(ITEMS)
    ]
    items.insert(0, None)
    items.insert(2, None)
    return mm.MultiModalKwargsItems({"image": items})


PRESENT = [1, *range(3, LAST + 1)]
"""The positions of the example's present items."""
EXAMPLE_BODY = (
    f"""\
body:
  MultiModalKwargsItems
    ['image']: column list of MultiModalKwargsItem: {LAST + 1} items (2 absent), 2 keys
      absent: 0, 2
      ['token']: column[{ITEMS}] of MultiModalFieldElem values
        [1]: MultiModalFieldElem
          .data: tensor 0: int64[2]
          .field: SharedField
            .batch_size: 3
            .keep_on_cpu: False
        [3]: -> MultiModalFieldElem #0 (the value at $['image'][1]['token'])
"""
    + "".join(f"        [{p}]: -> MultiModalFieldElem #0\n" for p in PRESENT[2:])
    + f"""\
      ['pixels']: column[{ITEMS}] of MultiModalFieldElem, by field
        .data: column[{ITEMS}]
"""
    + "".join(f"          [{p}]: tensor {i + 1}: float32[2]\n" for i, p in enumerate(PRESENT))
    + f"""\
        .field: column[{ITEMS}]
          [1]: BatchedField
            .keep_on_cpu: False
          [3]: -> BaseMultiModalField #1 (the value at $['image'][1]['pixels'].field)
"""
    + "".join(f"          [{p}]: -> BaseMultiModalField #1\n" for p in PRESENT[2:])
)


def _header(frames: list[Any]) -> list[Any]:
    header: list[Any] = msgspec.msgpack.decode(frames[0])
    return header


def test_a_column_list_is_shown_by_the_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frames = mm.encode(_example())
    assert _header(frames)[1] == 3  # a column list travelled
    path = tmp_path / "columns.mmc"
    framing.save_frames(frames, path)
    assert main(["inspect", str(path), "--module", MODULE]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith("envelope: wire version 3, schema 'multimodal' major 1")
    assert out[out.index("body:\n") :] == EXAMPLE_BODY


def test_a_column_list_as_json() -> None:
    tree = describe(mm.encode(_example()), CODEC)
    [(modality, columns)] = tree["body"]["$dict"]
    assert modality == "image"
    assert {k: columns[k] for k in ("$columns", "count", "present", "absent")} == {
        "$columns": "MultiModalKwargsItem",
        "count": LAST + 1,
        "present": ITEMS,
        "absent": [{"first": 0, "count": 1}, {"first": 2, "count": 1}],
    }
    token, pixels = columns["columns"]
    assert token["key"] == "token" and token["$values"] == "MultiModalFieldElem"
    assert token["values"][1:] == [
        {"$ref": "MultiModalFieldElem", "index": 0, "to": "$['image'][1]['token']"}
    ] * (ITEMS - 1)
    assert pixels["key"] == "pixels" and pixels["$fields"] == "MultiModalFieldElem"
    assert list(pixels["fields"]) == ["data", "field"]  # the schema's fields, in its order
    assert [t["$tensor"] for t in pixels["fields"]["data"]] == list(range(1, ITEMS + 1))


def test_by_position_a_column_list_is_the_map_that_travelled() -> None:
    frames = mm.encode(_example())
    tree = describe(frames)
    [(_, columns)] = tree["body"]["$dict"]
    assert [entry[0] for entry in columns["$dict"]] == ["count", "keys", "columns", "absent"]
    text = render_text(tree)
    assert f"    ['image']: dict[4]\n      ['count']: {LAST + 1}\n      ['keys']: list[2]\n" in text
    assert "      ['absent']: list[2]\n        [0]: 0\n        [1]: 2\n" in text


# -- every value where the decoder puts it ------------------------------------------------

_PATH_STEP = re.compile(r"\[(\d+)\]|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]|\.(\w+)")


def _resolve(root: Any, path: str) -> Any:
    """The decoded value at a path inspect printed (``$['image'][0]['x'].field``)."""
    assert path.startswith("$"), path
    value = root
    rest = path[1:]
    while rest:
        step = _PATH_STEP.match(rest)
        assert step is not None, path
        index, key, field = step.groups()
        if index is not None:
            value = value[int(index)]
        elif key is not None:
            value = value[ast.literal_eval(key)]
        else:
            value = getattr(value, field)
        rest = rest[step.end() :]
    return value


class _Check:
    """Walks a description beside the decoded value: every node shows what the decoder
    built there, every back-reference and repeated tensor points at the same object."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.tensors: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.refs = 0

    def node(self, node: Any, value: Any) -> None:
        if isinstance(node, list):
            assert isinstance(value, list) and len(node) == len(value)
            for n, v in zip(node, value, strict=True):
                self.node(n, v)
        elif not isinstance(node, dict):
            assert node == value
        elif "$dict" in node:
            assert list(value) == [k for k, _ in node["$dict"]]
            for key, n in node["$dict"]:
                self.node(n, value[key])
        elif "$struct" in node:
            assert type(value).__name__ == node["$struct"]
            for name, n in node["fields"].items():
                self.node(n, getattr(value, name))
        elif "$tuple" in node:
            assert isinstance(value, tuple)
            self.node(node["$tuple"], list(value))
        elif "$slice" in node:
            assert [value.start, value.stop, value.step] == node["$slice"]
        elif "$tensor" in node:
            self._tensor(node, value)
        elif "$ref" in node:
            assert _resolve(self.root, node["to"]) is value
            self.refs += 1
        else:
            self._columns(node, value)

    def _tensor(self, node: dict[str, Any], value: Any) -> None:
        assert isinstance(value, torch.Tensor)
        assert (str(value.dtype).removeprefix("torch."), list(value.shape)) == (
            node["dtype"],
            node["shape"],
        )
        memory = (value.data_ptr(), tuple(value.stride()))
        assert self.tensors.setdefault(node["$tensor"], memory) == memory  # one number, one view
        if "again" in node:
            first = _resolve(self.root, node["again"])
            assert (first.data_ptr(), tuple(first.stride())) == memory

    def _columns(self, node: dict[str, Any], value: Any) -> None:
        assert isinstance(value, list) and node["count"] == len(value)
        absent = [run["first"] + i for run in node["absent"] for i in range(run["count"])]
        assert absent == [i for i, item in enumerate(value) if item is None]
        present = [item for item in value if item is not None]
        assert node["present"] == len(present)
        assert node["$columns"] == type(present[0]).__name__
        assert [c["key"] for c in node["columns"]] == list(present[0])
        for column in node["columns"]:
            elems = [item[column["key"]] for item in present]
            if "$values" in column:
                self.node(column["values"], elems)
                continue
            for field, values in column["fields"].items():
                if isinstance(values, dict):  # a column the message lacks: the defaults
                    assert values == {"$default": len(elems)}
                    continue
                self.node(values, [getattr(elem, field) for elem in elems])


_KEYS = st.sampled_from(["pixel_values", "grid", "token", "k'\"\\"])


@st.composite
def _item_lists(draw: st.DrawFn) -> mm.MultiModalKwargsItems:
    """Lists that may travel as columns: items with shared keys, Nones, elements, fields
    and tensors shared within a list and across lists, ragged data."""
    tensors = [torch.arange(3, dtype=torch.int64) + i for i in range(3)]
    fields = [mm.BatchedField(), mm.SharedField(4), mm.FlatField([slice(0, 1)])]
    elems: list[mm.MultiModalFieldElem] = []

    def elem() -> mm.MultiModalFieldElem:
        kind = draw(st.sampled_from(["new", "new", "again"] if elems else ["new"]))
        if kind == "again":
            return draw(st.sampled_from(elems))
        data: mm.NestedTensors | None = None
        what = draw(st.sampled_from(["fresh", "shared", "list", "none"]))
        if what == "fresh":
            data = torch.rand(2)
        elif what == "shared":
            data = draw(st.sampled_from(tensors))
        elif what == "list":
            data = [draw(st.sampled_from(tensors)), torch.zeros(1)]
        field = draw(st.sampled_from([*fields, None]))
        made = mm.MultiModalFieldElem(data, field if field is not None else mm.BatchedField())
        elems.append(made)
        return made

    out: dict[str, list[mm.MultiModalKwargsItem | None]] = {}
    for modality in draw(
        st.lists(st.sampled_from(["image", "audio"]), min_size=1, max_size=2, unique=True)
    ):
        keys = draw(st.lists(_KEYS, min_size=1, max_size=3, unique=True))
        items: list[mm.MultiModalKwargsItem | None] = []
        mixed = draw(st.integers(0, 4)) == 0  # some items with keys of their own: rows
        # Short lists travel as rows, lists of MIN_ITEMS present items or more as columns.
        length = draw(st.sampled_from([1, 3, MIN_ITEMS, MIN_ITEMS + 3]))
        while sum(item is not None for item in items) < length:
            if draw(st.integers(0, 5)) == 0:
                items.append(None)
            elif mixed and draw(st.integers(0, 3)) == 0:
                items.append(mm.MultiModalKwargsItem({"other": elem()}))
            else:
                items.append(mm.MultiModalKwargsItem({key: elem() for key in keys}))
        out[modality] = items
    return mm.MultiModalKwargsItems(out)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)
@given(items=_item_lists())
def test_every_value_shown_is_the_one_the_decoder_built_there(
    items: mm.MultiModalKwargsItems,
) -> None:
    frames = mm.encode(items)
    decoded = mm.decode(frames, mm.MultiModalKwargsItems)
    tree = describe(frames, CODEC)
    check = _Check(decoded)
    check.node(tree["body"], decoded)
    json.dumps(tree, allow_nan=False)
    render_text(tree)  # every node has a line


def test_the_walk_checks_column_lists_and_back_references() -> None:
    """The property above sees column lists and back-references into them."""
    items = _example()
    again = items["image"][1]
    assert again is not None
    items["video"] = [mm.MultiModalKwargsItem({"pixels": again["pixels"]})]  # refers back
    frames = mm.encode(items)
    decoded = mm.decode(frames, mm.MultiModalKwargsItems)
    tree = describe(frames, CODEC)
    check = _Check(decoded)
    check.node(tree["body"], decoded)
    assert check.refs == 2 * (ITEMS - 1) + 1
    video = dict(tree["body"]["$dict"])["video"]
    assert video == [
        {
            "$dict": [
                [
                    "pixels",
                    {"$ref": "MultiModalFieldElem", "index": 1, "to": "$['image'][1]['pixels']"},
                ]
            ],
            "$type": "MultiModalKwargsItem",
        }
    ]


@pytest.mark.parametrize("case", ["cell-table-columns", "cell-table-shared-cells"])
def test_a_column_list_of_another_schema_is_walked_alike(case: str) -> None:
    """tests/schemas/features.yaml's CellTable: a union field sent once (a bare index in
    its field column), an optional nested-tensors field, scalars and a defaulted field."""
    tp, value = next((tp, value) for name, tp, value in FEATURES if name == case)
    frames = features.encode(value)
    assert _header(frames)[1] == 3
    decoded = features.decode(frames, tp)
    tree = describe(frames, codec_of(features))
    check = _Check(decoded)
    check.node(tree["body"], decoded)
    assert check.refs >= 3
    text = render_text(tree)
    assert "\n    .rows: column list of CellRow: " in text
    assert not re.search(r"Wire\b|_Columns|Fields\b|Values\b", text), text


# -- hostile column lists ----------------------------------------------------------------


def _capture(body: Any) -> bytes:
    run = ["float32", [2], b"\0" * 16, 0, 2]  # two tensors
    header = ["mmc", 3, "multimodal", 1, "MultiModalKwargsItems", [run], [], body]
    return bytes(framing.join([memoryview(msgspec.msgpack.encode(header))]))


def _columns(count: int, keys: list[Any], columns: list[Any], absent: list[int]) -> Any:
    return {"image": {"count": count, "keys": keys, "columns": columns, "absent": absent}}


_BATCHED = [0, False]
_FIELDS = [1, [0, 1], [_BATCHED, 0]]
HOSTILE: dict[str, Any] = {
    "no keys": _columns(2, [], [], []),
    "more columns than keys": _columns(2, ["a"], [_FIELDS, _FIELDS], []),
    "a key twice": _columns(2, ["a", "a"], [_FIELDS, _FIELDS], []),
    "count over the limit": _columns(1 << 30, ["a"], [_FIELDS], []),
    "absent out of order": _columns(4, ["a"], [_FIELDS], [2, 1]),
    "absent past the count": _columns(3, ["a"], [_FIELDS], [5]),
    "every item absent": _columns(2, ["a"], [[1, [], []]], [0, 1]),
    "a short column": _columns(3, ["a"], [_FIELDS], []),
    "a short field column": _columns(2, ["a"], [[1, [0, 1], [_BATCHED]]], []),
    "an unknown column tag": _columns(2, ["a"], [[7, [0, 1]]], []),
    "a fields column of one field": _columns(2, ["a"], [[1, [0, 1]]], []),
    "a back-reference ahead": _columns(2, ["a"], [[1, [0, 1], [_BATCHED, 5]]], []),
    "a values back-reference ahead": _columns(2, ["a"], [[0, [3, 0]]], []),
    "a tensor out of range": _columns(2, ["a"], [[1, [0, 9], [_BATCHED, 0]]], []),
    "a key that is no string": _columns(2, [1], [_FIELDS], []),
    "a negative count": _columns(-1, ["a"], [_FIELDS], []),
    "an unknown entry": {"image": {"count": 2, "keys": ["a"], "columns": [_FIELDS], "x": 1}},
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_column_list_is_refused_as_decode_refuses_it(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = _capture(HOSTILE[case])
    with pytest.raises(mm.DecodeError) as decoding:
        mm.decode_bytes(capture, mm.MultiModalKwargsItems)
    frames = framing.split(capture, mm.DEFAULT_LIMITS)
    with pytest.raises(mm.DecodeError) as inspecting:
        describe(frames, CODEC)
    assert str(inspecting.value) == str(decoding.value)
    path = tmp_path / "hostile.mmc"
    path.write_bytes(capture)
    assert main(["inspect", str(path), "--module", MODULE]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"{path}: {decoding.value}\n")
    # By position the body is msgpack: shown as the map it is.
    assert main(["inspect", str(path)]) == 0
    assert "['image']: dict[" in capsys.readouterr().out


@pytest.mark.parametrize("with_module", [False, True], ids=["by position", "with module"])
def test_a_wire_version_past_3_is_refused_naming_the_versions_read(with_module: bool) -> None:
    header = _header(mm.encode(_example()))
    header[1] = 4
    frames = [msgspec.msgpack.encode(header)]
    with pytest.raises(mm.DecodeError) as caught:
        describe(frames, CODEC if with_module else None)
    assert str(caught.value) == (
        "$: wire format version 4 is not supported (this decoder reads versions 2 to 3)"
    )


def test_a_field_column_an_older_schema_lacks_shows_as_the_default(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    out = tmp_path_factory.mktemp("inspect_evolution")
    packages = {"mmc_inspect_v1": "v1", "mmc_inspect_v2": "v2"}
    v1, v2 = (generate(EVOLUTION / f"{stem}.yaml", pkg, out) for pkg, stem in packages.items())
    try:
        shelves = [
            v1.Shelf({"a": v1.Record("a", torch.arange(2) + i), "b": v1.Record("b", torch.ones(1))})
            for i in range(ITEMS)
        ]
        frames = v1.encode(v1.Library([shelves[0], None, *shelves[1:]]))
        decoded = v2.decode(frames, v2.Library)  # v2's Record appends note and weights
        tree = describe(frames, codec_of(v2))
        _Check(decoded).node(tree["body"], decoded)
        [column, _] = tree["body"]["fields"]["shelves"]["columns"]
        fields = column["fields"]
        assert list(fields) == ["name", "values", "tags", "note", "weights"]
        assert fields["note"] == fields["weights"] == {"$default": ITEMS}
        text = render_text(tree)
        assert f"\n        .note: not in the message: the default, for all {ITEMS}\n" in text
        # A newer message's extra field columns: the older module shows its own fields.
        newer = v2.Library(
            [v2.Shelf({"a": v2.Record("a", torch.ones(1), note=f"{i}")}) for i in range(ITEMS)]
        )
        frames = v2.encode(newer)
        decoded = v1.decode(frames, v1.Library)
        tree = describe(frames, codec_of(v1))
        _Check(decoded).node(tree["body"], decoded)
        [column] = tree["body"]["fields"]["shelves"]["columns"]
        assert list(column["fields"]) == ["name", "values", "tags"]
    finally:
        for package in packages:
            forget(package, out)


def _leaves(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths (indices and keys) to every value in a decoded msgpack tree."""
    out = [at]
    if isinstance(value, list):
        for i, item in enumerate(value):
            out += _leaves(item, (*at, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            out += _leaves(item, (*at, key))
    return out


def _replace(tree: Any, at: tuple[Any, ...], new: Any) -> Any:
    if not at:
        return new
    head, rest = at[0], at[1:]
    if isinstance(tree, list):
        copy = list(tree)
        copy[head] = _replace(tree[head], rest, new)
        return copy
    return {**tree, head: _replace(tree[head], rest, new)}


_MUTANTS = st.one_of(
    st.integers(-2, 9),
    st.none(),
    st.booleans(),
    st.sampled_from(["pixels", "token", "x", "@ref"]),
    st.lists(st.integers(0, 5), max_size=3),
    st.just([0, False]),
    st.just([2, 3, False]),
    st.just([-1, 0]),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.sampled_from(["example", "shared"]),
    edits=st.lists(st.tuples(st.integers(0, 1 << 16), _MUTANTS), min_size=1, max_size=3),
)
def test_a_mutated_column_list_is_shown_exactly_when_it_decodes(
    which: str, edits: list[tuple[int, Any]]
) -> None:
    """Structure-aware edits of a column list (any value replaced by an int, None, a key, a
    list, a field variant or a union back-reference): inspect with the module shows what
    the decoder accepts and refuses the rest with the decoder's message, never crashing."""
    items = _example()
    if which == "shared":  # every kind of column: values, fields, a field shared by all
        again = items["image"][1]
        assert again is not None
        items["video"] = [mm.MultiModalKwargsItem({"pixels": again["pixels"]}), None]
    frames = mm.encode(items)
    header = _header(frames)
    body = header[7]
    for position, new in edits:
        paths = _leaves(body)[1:]
        body = _replace(body, paths[position % len(paths)], new)
    header[7] = body
    mutated = [msgspec.msgpack.encode(header), *frames[1:]]
    try:
        decoded = mm.decode(mutated, mm.MultiModalKwargsItems)
    except mm.DecodeError as e:
        with pytest.raises(mm.DecodeError) as caught:
            describe(mutated, CODEC)
        assert str(caught.value) == str(e)
        return
    tree = describe(mutated, CODEC)
    _Check(decoded).node(tree["body"], decoded)
    render_text(tree)
