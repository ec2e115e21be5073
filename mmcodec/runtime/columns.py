"""Column lists: a list of mappings that share their keys, laid out key by key.

An item list (``list[optional[M]]``, ``M`` a mapping of str keys to a struct ``S``) whose
present items hold the same keys in the same order travels as columns: the keys once,
then per key one column of the items' values, either as ``S`` values (rows' form) or,
when every item holds a new ``S`` value, as one list per field of ``S``. A value every
item shares (a field variant) is sent once and referred to by index; a batch's views
become consecutive tensor references that the planner lays out as one run. An encoder
walks the batch in C-level passes instead of a call per element, and a decoder builds
the items from prebuilt columns. docs/wire-format.md#column-lists specifies the layout.

Every column holds one value per present item, so a column list costs at least a byte of
header per value it stands for, as rows do: a decoder's work stays proportional to the
header. Generated code decides the layout from the schema; this module holds what does
not depend on it.
"""

from __future__ import annotations

import inspect
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from mmcodec.runtime.builtins import assigns_fields, construct_failure, mapping_reader
from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.present import positions
from mmcodec.runtime.tensors import DecodeContext, EncodeContext
from mmcodec.runtime.wire import IntTagRef, StrTagRef

__all__ = [
    "MIN_ITEMS",
    "ItemError",
    "build",
    "builder",
    "check",
    "column",
    "defaults",
    "fields_reader",
    "fresh",
    "items",
    "number",
    "references_from_column",
    "references_to_column",
    "tensors_from_column",
    "transpose",
    "values_from_column",
]

_is = operator.is_
_is_not = operator.is_not
_repeat = itertools.repeat
_chain = itertools.chain.from_iterable
_TAG_REFS = (IntTagRef, StrTagRef)

MIN_ITEMS = 16
"""Present items a list needs to travel as columns. Columns cost a fixed few microseconds
per key and list and save about one per item: shorter lists (a request's few images) are
cheaper as rows (measured: ``make bench``, and docs/wire-format.md#column-lists)."""


# -- encoding ----------------------------------------------------------------------------------


def transpose(
    items: Sequence[Any], optional: bool
) -> tuple[list[int], list[str], list[list[Any]]] | None:
    """``(absent, keys, columns)`` of a list of mappings, or None when it does not travel
    as columns (docs/wire-format.md#column-lists): fewer than :data:`MIN_ITEMS` present
    items, a None where items cannot be None (``optional``), present items of different
    classes or not mappings, or keys that differ (in value, order, or class: exactly
    ``str``), or none.

    ``absent`` holds the positions of None items; ``columns`` one list per key, of that
    key's values in item order. Values are not checked: the caller converts them, and a
    value rows would refuse is refused there. Each step is a C-level pass over the items.
    """
    if len(items) < MIN_ITEMS:
        return None
    present: Sequence[Any] = items
    absent: list[int] = []
    if not all(map(_is_not, items, _repeat(None))):
        if not optional:
            return None  # rows refuse the None, with its position
        absent = [index for index, item in enumerate(items) if item is None]
        present = [item for item in items if item is not None]
        if len(present) < MIN_ITEMS:
            return None
    kinds = set(map(type, present))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if issubclass(kind, dict):
        if not _plain_dict(kind):
            return None  # it lists its entries its own way: rows read it as it says
        entries = present
    else:
        read = mapping_reader(kind)
        if read is None:  # not a mapping: rows say so, with the position
            return None
        entries = list(map(read, present))
        if not all(map(_plain_dict, map(type, entries))):
            return None
    every_key = list(_chain(entries))
    keys = every_key[: len(entries[0])]  # the first item's
    if not keys:
        return None
    # Exactly str (rows refuse a subclass), checked first: only str's own == runs below.
    if set(map(type, every_key)) != {str}:
        return None
    # Every item's keys, equal to the first item's repeated: the same keys in the same
    # order. A dict's keys are distinct, so no item can hold more keys than the first and
    # the lengths must agree item by item.
    if every_key != keys * len(entries):
        return None
    # The values in key order (dict.values, as rows read them), transposed in C.
    columns = list(map(list, zip(*map(dict.values, entries), strict=True)))
    return absent, keys, columns


def _plain_dict(kind: type) -> bool:
    """Whether a dict class lists its keys and values as dict does (what rows read)."""
    return kind is dict or (
        issubclass(kind, dict)
        and kind.__iter__ is dict.__iter__
        and kind.values is dict.values
        and kind.items is dict.items
    )


def fields_reader(names: tuple[str, ...]) -> Callable[[Sequence[Any]], list[list[Any]]]:
    """A function that reads fields ``names`` of every value: one list per field, each a
    C-level pass (an AttributeError for a value without them: rows then say which)."""
    getters = [operator.attrgetter(name) for name in names]

    def read(values: Sequence[Any]) -> list[list[Any]]:
        return [list(map(getter, values)) for getter in getters]

    return read


def fresh(values: Sequence[Any], seen: dict[int, Any]) -> list[int] | None:
    """The ids of ``values`` when they are distinct objects none of which was sent before
    (``seen``: their type's table): they may travel as a fields column. None otherwise."""
    if len(values) > 1 and values[0] is values[-1]:  # a value every item shares: no id pass
        return None
    ids = list(map(id, values))
    if len(set(ids)) != len(ids) or not seen.keys().isdisjoint(ids):
        return None
    return ids


def number(seen: dict[int, Any], ids: list[int]) -> None:
    """Number new values (by id) in order after the values of their type sent so far, as
    rows number each after its fields."""
    start = len(seen)
    seen.update(zip(ids, range(start, start + len(ids)), strict=True))


def references_to_column(
    values: Sequence[Any],
    to_wire: Callable[[Any, EncodeContext], Any],
    table: int,
    ctx: EncodeContext,
) -> list[Any]:
    """A column of values of a type that travels once per object (a union, a struct with
    a back-reference table; ``table`` its index): when every item holds one object, its
    wire value (or index, if sent before) then its index as a bare int; otherwise each
    value as rows send it."""
    first = values[0]
    if not all(map(_is, values, _repeat(first))):
        return [to_wire(value, ctx) for value in values]
    wire = to_wire(first, ctx)
    index = ctx.tables[table][id(first)]
    if type(index) is not int:  # a union's tagged reference, which rows send
        index = index.index
    column = [index] * len(values)
    if type(wire) is not int and type(wire) not in _TAG_REFS:
        column[0] = wire  # sent here for the first time
    return column


# -- decoding ----------------------------------------------------------------------------------


class ItemError(Exception):
    """A column's value failed to decode: the error (its path from the value down) and the
    index of its item among the present ones. The list adds the key and the item's
    position (:meth:`located`): the path rows would give."""

    def __init__(self, index: int, error: DecodeError) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error

    def located(self, absent: Sequence[int], key: str) -> DecodeError:
        error = self.error.at(f"[{key!r}]").at(f"[{positions(absent)(self.index)}]")
        return error  # type: ignore[return-value]


def check(
    count: int,
    absent: list[int],
    keys: list[str],
    columns: list[Any],
    ctx: DecodeContext,
    optional: bool,
) -> int:
    """Check a column list's header against the limits; return its number of present items.

    Every value decoded from a column stands for one item, so these bounds, with one value
    per present item in every column (checked per column), keep a column list's cost to
    that of the same list sent as rows.
    """
    limit = ctx.limits.max_elements
    if count > limit:
        raise DecodeError(f"{count} elements exceed the limit of {limit}")
    if not keys:
        raise DecodeError("a column list has no keys")
    if len(keys) > limit:
        raise DecodeError(f"{len(keys)} elements exceed the limit of {limit}")
    if len(columns) != len(keys):
        raise DecodeError(f"a column list of {len(keys)} keys holds {len(columns)} columns")
    if len(set(keys)) != len(keys):
        raise DecodeError("a column list names a key twice")
    if absent:
        if not optional:
            raise DecodeError("a column list of values that cannot be None has absent items")
        last = -1
        for position in absent:
            if position <= last or position >= count:
                raise DecodeError(
                    f"absent item positions must increase and lie below the count ({count})"
                )
            last = position
    present = count - len(absent)
    if present < 1:
        raise DecodeError("a column list has no present item")
    if present > ctx.header_size:
        # Each column holds a value, a byte at least, per present item; only a fields column
        # whose field lists were all left off (each item takes the defaults) holds none, and
        # then only the count would bound the items.
        raise DecodeError(
            f"a column list of {present} present items is longer than its header "
            f"({ctx.header_size} bytes)"
        )
    return present


def column(values: list[Any], present: int) -> list[Any]:
    """``values``, checked to hold one value per present item."""
    if len(values) != present:
        raise DecodeError(f"a column holds {len(values)} values for {present} present items")
    return values


def defaults(value: Any, present: int) -> list[Any]:
    """A column of a field's default, for a fields column that lacks it (an older
    schema's): each item its own copy of an empty list or dict, as rows give it."""
    if type(value) in (list, dict):
        return [type(value)() for _ in range(present)]
    return [value] * present


def references_from_column(
    values: list[Any],
    present: int,
    from_wire: Callable[[Any, DecodeContext], Any],
    table: int,
    name: str,
    ctx: DecodeContext,
) -> list[Any]:
    """Decode a column of a type that travels once per object (see
    :func:`references_to_column`): an int is the index of a value sent before, anything
    else a value in rows' form (rows' back-references included)."""
    column(values, present)
    out: list[Any] = []
    if type(values[0]) is not int:  # sent here first, as one object in every item is
        out.append(_value(values[0], 0, from_wire, ctx))
    head = len(out)
    sent = ctx.tables[table]
    if sent is not None:
        try:  # the rest refer back, the common case: one C-level pass
            out.extend(map(sent.__getitem__, values[head:]))
            return out
        except (IndexError, TypeError):  # out of range, or not an int: one by one
            del out[head:]
    for index in range(head, present):
        value = values[index]
        if type(value) is int:
            sent = ctx.tables[table]
            if sent is None or value >= len(sent):
                raise ItemError(index, ctx.bad_back_reference(sent or [], value, name))
            out.append(sent[value])
        else:
            out.append(_value(value, index, from_wire, ctx))
    return out


def _value(value: Any, index: int, from_wire: Callable[[Any, DecodeContext], Any], ctx: Any) -> Any:
    try:
        return from_wire(value, ctx)
    except DecodeError as e:
        raise ItemError(index, e) from None


def tensors_from_column(
    values: list[Any],
    present: int,
    from_wire: Callable[[Any, DecodeContext], Any],
    ctx: DecodeContext,
) -> list[Any]:
    """Decode a column of (optional) tensors or nested tensors: tensor references (a
    batch's views, the common case) in one C-level pass, anything else value by value."""
    column(values, present)
    try:
        return list(map(ctx.tensors.__getitem__, values))
    except (IndexError, TypeError, DecodeError):
        pass  # a value that is not a reference in range: value by value, to say which
    return values_from_column(values, present, from_wire, ctx)


def values_from_column(
    values: list[Any],
    present: int,
    from_wire: Callable[[Any, DecodeContext], Any],
    ctx: DecodeContext,
) -> list[Any]:
    """Decode a column value by value (None stays None)."""
    column(values, present)
    out: list[Any] = []
    try:
        for value in values:
            out.append(None if value is None else from_wire(value, ctx))
    except DecodeError as e:
        raise ItemError(len(out), e) from None
    return out


def builder(
    cls: type, names: tuple[str, ...], assign: Callable[..., Any] | None = None
) -> Callable[..., Any]:
    """How a decoder builds a ``cls`` from its fields ``names``, passed positionally in
    this order, chosen once per class: a msgspec Struct of exactly these fields is its
    own C constructor; a plain dataclass may be built by ``assign`` (generated: it
    assigns the fields to a bare instance, see ``builtins.assigns_fields``); any other
    class is called with keywords."""
    if _positional(cls, names):
        return cls
    if assign is not None and assigns_fields(cls, names):
        return assign

    def call(*values: Any) -> Any:
        return cls(**dict(zip(names, values, strict=True)))

    return call


def _positional(cls: type, names: tuple[str, ...]) -> bool:
    if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
        return False
    parameters = inspect.signature(cls).parameters.values()
    return tuple(cls.__struct_fields__) == names and all(
        p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters
    )


def build(new: Callable[..., Any], cls: type, columns: list[list[Any]], present: int) -> list[Any]:
    """The ``present`` values ``new`` builds from the field columns, item by item; a
    refusal of the bound class is an :class:`ItemError` at the item that caused it."""
    if not columns:
        return [new() for _ in range(present)]
    try:
        return list(map(new, *columns))
    except Exception:  # the bound class refused the values: find the item
        pass
    for index, row in enumerate(zip(*columns, strict=True)):
        try:
            new(*row)
        except Exception as e:
            raise ItemError(index, construct_failure(cls, e)) from e
    raise AssertionError("unreachable")  # pragma: no cover - the same values were refused


def items(
    count: int,
    absent: list[int],
    keys: list[str],
    columns: list[list[Any]],
    cls: type,
    make: Callable[[dict[str, Any]], Any],
) -> list[Any]:
    """The list of items: each present item the ``cls`` that ``make`` builds from a dict of
    the keys to its row of the columns; None at the absent positions. Built in C-level
    passes: a 4-key item costs about what ``dict(zip(keys, row))`` costs."""
    pairs = map(zip, _repeat(keys), zip(*columns, strict=True))
    try:
        if _takes_pairs(make):  # a dict class built from the pairs, without a dict between
            present = list(map(make, pairs))  # type: ignore[arg-type]
        else:
            present = list(map(make, map(dict, pairs)))
    except Exception:  # the bound class refused the values: find the item
        for index, row in enumerate(zip(*columns, strict=True)):
            try:
                make(dict(zip(keys, row, strict=True)))
            except Exception as e:
                error = construct_failure(cls, e).at(f"[{positions(absent)(index)}]")
                raise error from e
        raise AssertionError("unreachable") from None  # pragma: no cover - refused again
    if not absent:
        return present
    out: list[Any] = [None] * count
    gaps = set(absent)
    places = [position for position in range(count) if position not in gaps]
    for position, item in zip(places, present, strict=True):
        out[position] = item
    return out


_PAIRS: dict[Any, bool] = {}
"""Per item builder met so far, whether calling it with key-value pairs builds the item."""


def _takes_pairs(make: Any) -> bool:
    takes = _PAIRS.get(make)
    if takes is None:
        takes = _PAIRS[make] = (
            isinstance(make, type)
            and issubclass(make, dict)
            and make.__init__ is dict.__init__
            and make.__new__ is dict.__new__
        )
    return takes
