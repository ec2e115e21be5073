"""Column lists (wire version 3) as ``mmcodec inspect`` reads them.

An item list whose items share their keys may travel as a column list: a msgpack map
``{count, keys, columns, absent}`` holding, per key, one column of the items' values
(``[0, values]``) or one column per field of their struct (``[1, field, ...]``); see
docs/wire-format.md. The generated module decodes it with wire structs of its own; this
module recognises those structs by their shape (not by their generated names) and says
which item of the list each value of a column belongs to. The walk itself is
:class:`~mmcodec.runtime.inspect_body.TypedBody`'s.
"""

from __future__ import annotations

import bisect
import functools
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import msgspec

from mmcodec.runtime.present import itself, positions

__all__ = [
    "ColumnListShape",
    "absent_runs",
    "column_list_shape",
    "positions",
    "positions_from_runs",
]

COLUMN_LIST_KEYS = ("count", "keys", "columns", "absent")
"""The keys of a column list's map, in the order they travel."""
VALUES_TAG = 0
FIELDS_TAG = 1


class ColumnListShape(NamedTuple):
    """What a generated column-list wire struct holds."""

    values: type | None
    """The struct of a values column (tag 0), if the list has one."""
    fields: type | None
    """The struct of a fields column (tag 1), if the list has one."""
    element: type[msgspec.Struct] | None
    """The wire struct of the items' values (the struct every column holds)."""
    value_annotation: Any
    """The annotation of one value of a values column."""
    field_columns: tuple[tuple[str, str, Any], ...]
    """Per field of the element, in schema order: the fields column's attribute, the
    field's name, and the annotation of one value of that column."""


@functools.cache
def column_list_shape(cls: type) -> ColumnListShape | None:
    """The shape of a column list's wire struct, or None for any other struct.

    A column list is the one map-like (not ``array_like``) struct of a generated module
    whose keys are exactly :data:`COLUMN_LIST_KEYS`; its ``columns`` hold tagged structs,
    tag 0 a values column and tag 1 a fields column.
    """
    if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
        return None  # pragma: no cover - the walker passes structs only
    if cls.__struct_config__.array_like or cls.__struct_encode_fields__ != COLUMN_LIST_KEYS:
        return None
    hints = typing.get_type_hints(cls, include_extras=True)
    values = fields = element = None
    value_annotation: Any = Any
    for member in _union_members(_item_of(hints[cls.__struct_fields__[2]])):
        if not (isinstance(member, type) and issubclass(member, msgspec.Struct)):
            continue
        tag = member.__struct_config__.tag
        if tag == VALUES_TAG and len(member.__struct_fields__) == 1:
            values = member
            value_annotation = _item_of(msgspec.structs.fields(member)[0].type)
            element = next(
                (
                    m
                    for m in map(_strip, _union_members(value_annotation))
                    if isinstance(m, type) and issubclass(m, msgspec.Struct)
                ),
                None,
            )
        elif tag == FIELDS_TAG:
            fields = member
    field_columns: tuple[tuple[str, str, Any], ...] = ()
    if fields is not None:
        columns = msgspec.structs.fields(fields)
        names = [f.name for f in columns]
        if element is not None and len(element.__struct_fields__) == len(columns):
            names = list(element.__struct_fields__)  # the schema's names, in its order
        field_columns = tuple(
            (f.name, name, _item_of(f.type)) for f, name in zip(columns, names, strict=True)
        )
    return ColumnListShape(values, fields, element, value_annotation, field_columns)


def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _item_of(annotation: Any) -> Any:
    """The element annotation of ``list[X]``, also of ``list[X] | UnsetType`` (a field
    column an older schema's message may lack); ``Any`` for anything else."""
    for member in map(_strip, _union_members(_strip(annotation))):
        if typing.get_origin(member) is list:
            return typing.get_args(member)[0]
    return Any


def absent_runs(absent: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Absent positions (increasing) as runs of consecutive ones: ``(first, count)``."""
    first = last = -2
    for position in absent:
        if position == last + 1:
            last = position
            continue
        if last >= 0:
            yield first, last - first + 1
        first = last = position
    if last >= 0:
        yield first, last - first + 1


def positions_from_runs(runs: Iterable[tuple[int, int]]) -> Callable[[int], int]:
    """:func:`positions`, from the absent items' runs (memory per run)."""
    before: list[int] = []
    """Per run, how many present items come before it."""
    skipped: list[int] = [0]
    """How many absent items the first k runs hold."""
    for first, count in runs:
        before.append(first - skipped[-1])
        skipped.append(skipped[-1] + count)
    if not before:
        return itself
    return lambda index: index + skipped[bisect.bisect_right(before, index)]
