"""``mmcodec.runtime.paths`` on its own: msgspec's wire paths translated into schema paths
for wire types the shipped schemas do not use (but the schema language or msgspec can
make), and the documented fallback to the wire path when a path cannot be translated."""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

import msgspec
import pytest

from mmcodec.runtime.paths import Key, counts_elements, locate_validation_error, locate_wire_steps

NOTE = msgspec.Meta(extra={"note": 1})


class One(msgspec.Struct, array_like=True, tag=1):
    x: int


class Two(msgspec.Struct, array_like=True, tag=2):
    x: int


"""Metadata msgspec keeps apart from the type (as it does wire.NonNegative's marker)."""


def _locate(wire_type: Any, raw: Any) -> tuple[str, str, str]:
    """msgspec's error for ``raw`` as ``wire_type``, and where paths puts it."""
    body = msgspec.msgpack.encode(raw)
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.msgpack.decode(body, type=wire_type)
    return (str(info.value), *locate_validation_error(str(info.value), wire_type, body))


@pytest.mark.parametrize(
    ("wire_type", "raw", "error", "path"),
    [
        (
            dict[str, tuple[int, ...]],
            {"a": [1], "b": [1, "x"]},
            "Expected `int`, got `str` - at `$[...][1]`",
            "$['b'][1]",
        ),
        (
            dict[str, tuple[int, str]],
            {"a": [1, "s"], "b": [1, 2]},
            "Expected `str`, got `int` - at `$[...][1]`",
            "$['b'][1]",
        ),
        (
            dict[str, dict[str, int]],
            {"a": {"b": 1}, "c": {"d": "x"}},
            "Expected `int`, got `str` - at `$[...][...]`",
            "$['c']['d']",
        ),
        (
            dict[str, Literal["a", "b"]],
            {"k": "a", "j": "c"},
            "Invalid enum value 'c' - at `$[...]`",
            "$['j']",
        ),
        (
            list[Annotated[list[int], NOTE]],
            [[1, "x"]],
            "Expected `int`, got `str` - at `$[0][1]`",
            "$[0][1]",
        ),
        (
            Annotated[dict[str, int], NOTE],
            {1: 1},
            "Expected `str`, got `int` - at `key` in `$`",
            "$[1] (key)",
        ),
        (dict[str, list[int]], [1], "Expected `object`, got `array`", "$"),
        (
            # msgspec.convert takes a base64 str for bytes, which msgpack decoding does
            # not: revalidating the values finds no entry, so the wire path stands.
            dict[str, bytes],
            {"a": b"x", "b": "aGk="},
            "Expected `bytes`, got `str` - at `$[...]`",
            "$[...] (wire path)",
        ),
        (
            # No annotation for a datetime (wire types have none): the wire path.
            dict[str, datetime.datetime],
            {"k": 5},
            "Expected `datetime`, got `int` - at `$[...]`",
            "$[...] (wire path)",
        ),
    ],
    ids=[
        "var-tuple-values",
        "tuple-values",
        "mapping-values",
        "literal-values",
        "metadata-list",
        "metadata-mapping-key",
        "root",
        "base64-bytes",
        "datetime",
    ],
)
def test_a_validation_error_is_located(wire_type: Any, raw: Any, error: str, path: str) -> None:
    assert _locate(wire_type, raw) == (error, path, error.split(" - at ")[0])


@pytest.mark.parametrize(
    ("text", "wire_type", "raw", "located"),
    [
        ("Expected `int`, got `str` - at `$[5]`", list[int], [1], "$[5] (wire path)"),
        ("Expected `int`, got `str` - at `$.a`", list[int], [1], "$.a (wire path)"),
        (
            "Expected `str`, got `int` - at `key` in `$`",
            list[int],
            [1],
            "$ (wire path) (a key)",
        ),
        (
            "Expected `str`, got `int` - at `key` in `$`",
            dict[str, int],
            {"a": 1},
            "$ (wire path) (a key)",
        ),
    ],
    ids=["index-out-of-range", "field-segment", "key-of-a-list", "no-key-fails"],
)
def test_a_path_that_does_not_fit_the_body_falls_back_to_the_wire_path(
    text: str, wire_type: Any, raw: Any, located: str
) -> None:
    body = msgspec.msgpack.encode(raw)
    assert locate_validation_error(text, wire_type, body) == (located, text.split(" - at ")[0])


@pytest.mark.parametrize(
    ("wire_type", "value", "steps", "path"),
    [
        (tuple[int, list[int]], [1, [1, 2, 3]], [1], "$[1]"),
        (dict[str, list[int]], {"a": [1]}, [Key("a")], "$['a']"),
        (dict[str, list[int]], {"a": [1]}, [1], "$[1] (wire path)"),
        (list[int], [1], [Key("a")], "$['a'] (wire path)"),
        (list[int], [1], [5], "$[5] (wire path)"),
    ],
    ids=["fixed-tuple", "key", "index-of-a-mapping", "key-of-a-list", "out-of-range"],
)
def test_wire_steps_are_located(wire_type: Any, value: Any, steps: list[Any], path: str) -> None:
    assert locate_wire_steps(wire_type, value, steps) == path


@pytest.mark.parametrize(
    ("wire_type", "value", "steps", "counts"),
    [
        (tuple[int, list[int]], [1, [1, 2, 3]], [1], True),
        (tuple[int, tuple[int, int]], [1, [1, 2]], [1], False),
        (list[Annotated[tuple[int, int], NOTE]], [[1, 2]], [0], False),
        # Bodies that are not the wire type: the only array-like member is taken; a
        # mapping's key 1 is no tag (a tagged struct is picked by a list's first item).
        (tuple[int, int] | None, {"a": 1}, [], False),
        (One | Two | None, {0: 1}, [], True),
    ],
    ids=[
        "list-in-a-fixed-tuple",
        "fixed-tuple-in-a-fixed-tuple",
        "metadata",
        "mismatch",
        "mapping-is-no-tagged-array",
    ],
)
def test_what_counts_as_a_container(
    wire_type: Any, value: Any, steps: list[Any], counts: bool
) -> None:
    assert counts_elements(wire_type, value, steps) is counts
