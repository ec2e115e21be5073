"""Branches of ``describe`` and ``render_text`` the real-payload tests do not take: bytes,
hostile bodies without a module, a budget spent inside the refs table, a path printed
again below a back-reference, and the contract's net."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import torch

import tests.golden.common as common
import tests.golden.features as f
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from mmcodec.runtime.codec import codec_of
from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.inspect import describe, render_text
from mmcodec.runtime.limits import Limits

CODEC = f._CODEC


def _header(root: str, runs: list[Any], refs: list[int], body: object) -> list[memoryview]:
    header = msgspec.msgpack.encode(["mmc", 2, "features", 3, root, runs, refs, body])
    return [memoryview(header)]


def _body_lines(text: str) -> list[str]:
    return text.split("body", 1)[1].splitlines()[1:]


@pytest.mark.parametrize("with_module", [True, False], ids=["with module", "by position"])
def test_bytes_show_their_length_and_leading_bytes(with_module: bool) -> None:
    value = f.Builtins(
        i=1, f=1.0, b=True, s="", raw=bytes(range(40)), t=torch.zeros(1), nt=[], sl=slice(1)
    )
    tree = describe(f.encode(value), CODEC if with_module else None)
    raw = tree["body"]["fields"]["raw"] if with_module else tree["body"][4]
    assert raw == {"$bytes": 40, "hex": bytes(range(32)).hex()}
    tensor = tree["body"]["fields"]["t"] if with_module else tree["body"][5]
    assert tensor == ({"$tensor": 0, "dtype": "float32", "shape": [1]} if with_module else 0)
    head = ".raw" if with_module else "[4]"
    assert f"    {head}: bytes[40] {bytes(range(32)).hex()}..." in render_text(tree).splitlines()


def test_short_bytes_are_shown_whole() -> None:
    text = render_text(describe(f.encode(f.Registry({"h": b"xy"})), CODEC))
    assert _body_lines(text) == ["  Registry", "    ['h']: bytes[2] 7879"]


def test_a_body_nested_past_the_limit_is_refused_without_a_module() -> None:
    body: object = 1
    for _ in range(80):
        body = [body]
    with pytest.raises(DecodeError) as info:
        describe(_header("Sample", [], [], body), limits=Limits(max_depth=2))
    assert str(info.value) == "$: body nested deeper than 66 levels"


def test_a_long_container_is_refused_without_a_module() -> None:
    with pytest.raises(DecodeError) as info:
        describe(_header("Sample", [], [], [[1, 2, 3, 4, 5]]), limits=Limits(max_elements=4))
    assert str(info.value) == "$: 5 elements exceed the limit of 4"


def test_a_malformed_envelope_after_a_good_identity() -> None:
    header = msgspec.msgpack.encode(["mmc", 2, "features", 3, "Sample", "x", [], 1])
    with pytest.raises(DecodeError) as info:
        describe([header])
    assert str(info.value) == "$: malformed envelope: Expected `array`, got `str` - at `$[5]`"


def test_the_budget_can_run_out_inside_the_refs_table() -> None:
    runs = [["int64", [], b"\0" * 8 * 40, 0, 40]]
    refs = [i ^ 1 for i in range(40)]  # 1, 0, 3, 2, ...: no runs of equal or consecutive
    tree = describe(_header("Sample", runs, refs, [0.0, 1.0]), max_output=300)
    assert tree["refs"][-1] == {"$omitted": 35}
    assert tree["refs"][:-1] == [{"first": r, "count": 1, "step": 0} for r in (1, 0, 3, 2, 5)]
    assert tree["truncated"] is True
    text = render_text(tree)
    assert "refs: 40 entries: 1, 0, 3, 2, 5, ... 35 more (output budget reached)\n" in text


def test_a_path_below_a_printed_back_reference_starts_from_it() -> None:
    data = torch.zeros(2)
    first = mm.MultiModalFieldElem(data, mm.BatchedField())
    second = mm.MultiModalFieldElem(data, mm.BatchedField())
    item = mm.MultiModalKwargsItem({"a": first, "b": first, "c": second})
    text = render_text(describe(mm.encode(item), codec_of(mm)))
    assert _body_lines(text) == [
        "  MultiModalKwargsItem",
        "    ['a']: MultiModalFieldElem",
        "      .data: tensor 0: float32[2]",
        "      .field: BatchedField",
        "        .keep_on_cpu: False",
        "    ['b']: -> MultiModalFieldElem #0 (the value at $['a'])",
        "    ['c']: MultiModalFieldElem",
        "      .data: tensor 0: float32[2] (again: first at $['a'].data)",
        "      .field: BatchedField",
        "        .keep_on_cpu: False",
    ]


def test_structs_of_an_imported_schema_are_named_by_their_class() -> None:
    circle = common.Circle(center=common.Point(x=1, y=2), radius=1.0)
    value = f.Drawing(origin=common.Point(x=0, y=0), shapes=[circle], labels=common.Labels())
    text = render_text(describe(f.encode(value), CODEC))
    assert _body_lines(text)[:9] == [
        "  Drawing",
        "    .origin: Point",
        "      .x: 0",
        "      .y: 0",
        "    .shapes: list[1]",
        "      [0]: Circle",
        "        .center: Point",
        "          .x: 1",
        "          .y: 2",
    ]


def test_describe_turns_any_other_failure_into_a_decode_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(*args: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(framing, "as_byte_views", fail)
    with pytest.raises(DecodeError) as info:
        describe([b""])
    assert str(info.value) == "$: rejected (ValueError: boom)"
    assert type(info.value.__cause__) is ValueError


@pytest.mark.parametrize(
    ("runs", "refs", "extra", "limits", "message"),
    [
        (
            [["int8", [], b"\0", 0, 1]],
            [],
            [b"\0" * 64],
            Limits(),
            "$: frame 1 is not referenced by any tensor",
        ),
        (
            [["int8", [], b"\0\0", 0, 2]],
            [0, 1, 0, 1],
            [],
            Limits(max_elements=3),
            "$: tensor reference table of 4 entries exceeds the limit of 3",
        ),
        (
            [["int8", [], b"\0", 0, 1], ["int8", [], b"\0\0", 0, 2]],
            [0, 1, 1],
            [],
            Limits(),
            "$: no entry of the tensor reference table points at tensor 2 (tensor run 1)",
        ),
    ],
    ids=["inline-run-and-an-unused-frame", "refs-over-max-elements", "missing-in-second-run"],
)
def test_bad_tensor_tables_are_refused_without_a_module(
    runs: list[Any], refs: list[int], extra: list[bytes], limits: Limits, message: str
) -> None:
    # inspect checks the tables itself (mmcodec.runtime.runs) when no module decodes first.
    frames = [*_header("Registry", runs, refs, {"a": [3, 0]}), *[memoryview(e) for e in extra]]
    with pytest.raises(DecodeError) as info:
        describe(frames, limits=limits)
    assert str(info.value) == message
