"""Rebuild functions for the schema language's built-in types: nested tensors and slices.

Containers are converted with plain loops, so that a failing element's index is known
when the error is raised and added to its path; nothing is converted twice.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import operator
import re
from collections import UserDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import numpy as np
import torch

from mmcodec.runtime.equality import values_equal
from mmcodec.runtime.errors import DecodeError, EncodeError
from mmcodec.runtime.tensors import DecodeContext, EncodeContext
from mmcodec.runtime.wire import IntLeaf, ListNode, NestedWire, SliceWire, TupleNode

NestedTensors = Any
"""``torch.Tensor | int | float | list[NestedTensors] | tuple[NestedTensors, ...]``."""

_Tensor = torch.Tensor


def nested_tensors_to_wire(value: NestedTensors, ctx: EncodeContext, depth: int = 0) -> NestedWire:
    # type() first: isinstance() against torch.Tensor goes through its metaclass.
    if type(value) is _Tensor or isinstance(value, torch.Tensor):
        ref = ctx.ids.get(id(value))  # EncodeContext.ref, inlined: this is the hot path
        return ref if ref is not None else ctx.ref(value)
    kind = type(value)
    if kind is list or kind is tuple:
        if depth >= ctx.max_depth:
            raise EncodeError(f"nested tensors deeper than {ctx.max_depth} levels")
        # A loop: the failing index is known without re-walking the child (re-walking at
        # every level would cost 2**depth, a hang at the depth limit).
        items: list[NestedWire] = []
        try:
            for item in value:
                items.append(nested_tensors_to_wire(item, ctx, depth + 1))
        except EncodeError as e:
            raise e.at(f"[{len(items)}]") from None
        return ListNode(items) if kind is list else TupleNode(items)
    if kind is int:
        return IntLeaf(check_int64(value))
    if kind is float:
        return value  # type: ignore[no-any-return]
    raise EncodeError(f"{kind.__name__} is not a nested tensor (tensor, int, float, list or tuple)")


def nested_tensors_from_wire(node: NestedWire, ctx: DecodeContext, depth: int = 0) -> NestedTensors:
    kind = type(node)
    if kind is int:
        try:
            return ctx.tensors[node]  # type: ignore[index]
        except IndexError:
            return ctx.tensor(node)  # type: ignore[arg-type]  # raises the DecodeError
    if kind is float:
        return node
    if kind is IntLeaf:
        return node.value  # type: ignore[union-attr]
    items = node.items  # type: ignore[union-attr]
    if depth >= ctx.limits.max_depth:
        raise DecodeError(f"nested tensors deeper than {ctx.limits.max_depth} levels")
    check_count(len(items), ctx)
    values: list[NestedTensors] = []  # a loop: see nested_tensors_to_wire
    try:
        for item in items:
            values.append(nested_tensors_from_wire(item, ctx, depth + 1))
    except DecodeError as e:
        raise e.at(f"[{len(values)}]") from None
    return values if kind is ListNode else tuple(values)


def tensor_to_wire(value: torch.Tensor, ctx: EncodeContext) -> int:
    return ctx.ref(value)


def tensor_from_wire(ref: int, ctx: DecodeContext) -> torch.Tensor:
    return ctx.tensor(ref)


def slice_to_wire(value: slice, ctx: EncodeContext) -> SliceWire:
    if type(value) is not slice:
        raise EncodeError(f"expected a slice, got {type(value).__name__}")
    start, stop, step = value.start, value.stop, value.step
    if (
        (start is None or (type(start) is int and _INT_MIN <= start < _INT_END))
        and (stop is None or (type(stop) is int and _INT_MIN <= stop < _INT_END))
        and (step is None or (type(step) is int and _INT_MIN <= step < _INT_END))
    ):
        return SliceWire(start, stop, step)
    # A bound that is not a plain int in range: convert it, or say what is wrong.
    return SliceWire(_slice_bound(start), _slice_bound(stop), _slice_bound(step))


def _slice_bound(bound: object) -> int | None:
    """An int slice bound from what engines build: an int, a numpy integer, or a 0-d
    integer tensor (``flat_from_sizes`` accumulates a tensor of sizes). It travels as,
    and decodes to, an int: the receiver cannot tell it was a tensor."""
    if bound is None or type(bound) is int:
        return None if bound is None else check_int64(bound)
    if isinstance(bound, torch.Tensor):
        integer = not (bound.is_floating_point() or bound.is_complex() or bound.dtype is torch.bool)
        if bound.ndim == 0 and integer:
            return check_int64(int(bound.item()))
        raise EncodeError(
            f"slice bounds must be int or None, got a tensor ({bound.dtype}, shape "
            f"{list(bound.shape)}); only a 0-d integer tensor stands for an int"
        )
    if isinstance(bound, np.integer):
        return check_int64(int(bound))
    raise EncodeError(f"slice bounds must be int or None, got {type(bound).__name__}")


def slice_from_wire(wire: SliceWire, ctx: DecodeContext) -> slice:
    return slice(wire.start, wire.stop, wire.step)


def check_count(count: int, ctx: DecodeContext) -> None:
    """Bound the number of elements of a decoded container."""
    if count > ctx.limits.max_elements:
        raise DecodeError(f"{count} elements exceed the limit of {ctx.limits.max_elements}")


# -- checks the encoder applies to leaves, so that a bad value fails on the sending side


def _expected(what: str, value: object) -> EncodeError:
    return EncodeError(f"expected {what}, got {type(value).__name__}")


_INT_MIN = -(1 << 63)
_INT_END = 1 << 64


def check_int64(value: int) -> int:
    """msgpack ints are int64 or uint64: fail here, with a path, not in the header encoder."""
    if _INT_MIN <= value < _INT_END:
        return value
    raise EncodeError(f"int {value} does not fit in 64 bits (int64 or uint64)")


def expect_int(value: object, ctx: EncodeContext) -> int:
    if type(value) is int:
        return check_int64(value)
    raise _expected("an int", value)


def expect_uint(value: object, ctx: EncodeContext) -> int:
    """``expect_int`` and the constraint ``ge: 0`` in one call (sizes, offsets, counts)."""
    if type(value) is int and 0 <= value < _INT_END:
        return value
    return int(constrained(expect_int(value, ctx), ge=0))  # other integers, or why not


def expect_float(value: object, ctx: EncodeContext) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return check_int64(value)
    raise _expected("a float", value)


def expect_bool(value: object, ctx: EncodeContext) -> bool:
    if type(value) is bool:
        return value
    raise _expected("a bool", value)


def expect_str(value: object, ctx: EncodeContext) -> str:
    if type(value) is str:
        return value
    raise _expected("a str", value)


def expect_bytes(value: object, ctx: EncodeContext) -> bytes:
    if type(value) is bytes or type(value) is bytearray or type(value) is memoryview:
        return value  # type: ignore[return-value]
    raise _expected("bytes", value)


def constrained(
    value: Any,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    pattern: str | None = None,
) -> Any:
    """Apply a field's schema constraints on the sending side (the decoder applies them too),
    so that a bad value fails here, with its path, instead of at the receiver."""
    if value is None:  # an optional field without a value
        return value
    if ge is not None and not value >= ge:
        raise EncodeError(f"expected a value >= {ge}, got {value!r}")
    if gt is not None and not value > gt:
        raise EncodeError(f"expected a value > {gt}, got {value!r}")
    if le is not None and not value <= le:
        raise EncodeError(f"expected a value <= {le}, got {value!r}")
    if lt is not None and not value < lt:
        raise EncodeError(f"expected a value < {lt}, got {value!r}")
    if min_length is not None and len(value) < min_length:
        raise EncodeError(f"expected a length >= {min_length}, got {len(value)}")
    if max_length is not None and len(value) > max_length:
        raise EncodeError(f"expected a length <= {max_length}, got {len(value)}")
    if pattern is not None and not re.search(pattern, value):
        raise EncodeError(f"expected a string matching {pattern!r}, got {value!r}")
    return value


def expect_sequence(value: object, what: str) -> Sequence[Any]:
    """``list[T]`` and ``tuple[T, ...]`` accept a list or a tuple when encoding."""
    if type(value) is list or type(value) is tuple:
        return value
    raise _expected(what, value)


def expect_mapping(value: object) -> Any:
    """A dict, or the mapping whose ``items()`` to encode.

    A ``UserDict`` (vLLM's item classes are) gives its ``data`` dict: the same entries
    in the same order, without a Python-level ``__getitem__`` per key.
    """
    if isinstance(value, dict):
        return value
    kind = type(value)
    read = _ENTRIES.get(kind)
    if read is None:
        read = _ENTRIES[kind] = _entries_of(kind)  # once per class: isinstance on an ABC is slow
    return read(value)


def mapping_reader(kind: type) -> Callable[[Any], Any] | None:
    """What :func:`expect_mapping` does with a value of class ``kind`` (returns its
    argument for a dict), or None for a class that is no mapping."""
    if issubclass(kind, dict):
        return _itself
    read = _ENTRIES.get(kind)
    if read is None:
        read = _ENTRIES[kind] = _entries_of(kind)
    return None if read is _not_a_mapping else read


def _entries_of(kind: type) -> Callable[[Any], Any]:
    if issubclass(kind, UserDict):
        return _user_dict_data
    if issubclass(kind, Mapping):
        return _itself
    return _not_a_mapping


_ENTRIES: dict[type, Callable[[Any], Any]] = {}
"""Per mapping class met so far, how to read its entries (a few classes per process)."""
_user_dict_data = operator.attrgetter("data")


def _itself(value: Any) -> Any:
    return value


def _not_a_mapping(value: object) -> NoReturn:
    raise _expected("a dict", value)


def expect_length(value: Sequence[Any], length: int) -> Sequence[Any]:
    if len(value) != length:
        raise EncodeError(f"expected a tuple of {length} items, got {len(value)}")
    return value


_T = TypeVar("_T")


def mapping_builder(cls: type[_T]) -> Callable[[dict[Any, Any]], _T]:
    """How a decoder turns the decoded dict into a bound mapping class, chosen once.

    A ``UserDict`` subclass that keeps UserDict's ``__init__`` and ``__setitem__`` (vLLM's
    item classes) takes the dict as its ``data``: the same entries, without a Python
    ``__setitem__`` call per key (six times faster for a four-key item). Any other class
    is called with the dict.
    """
    if (
        isinstance(cls, type)
        and issubclass(cls, UserDict)
        and cls.__init__ is UserDict.__init__
        and cls.__setitem__ is UserDict.__setitem__
    ):
        new = cls.__new__

        def build(entries: dict[Any, Any]) -> _T:
            mapping = new(cls)
            mapping.data = entries
            return mapping

        return build
    return cls


def assigns_fields(cls: type, names: tuple[str, ...]) -> bool:
    """Whether generated code may build ``cls`` by assigning ``names`` to a bare instance.

    True only where that is exactly what calling the class does: a dataclass, not frozen,
    whose ``__init__`` is the one ``dataclasses`` wrote, taking every field and only the
    fields ``names`` lists, in that order, with no ``__post_init__``, ``__new__`` or
    ``__setattr__`` of its own. Chosen once per bound class; it saves the Python
    ``__init__`` call, about half the cost of rebuilding vLLM's ``MultiModalFieldElem``.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return False
    init = cls.__init__
    if (
        cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        or hasattr(cls, "__post_init__")
        or cls.__new__ is not object.__new__
        or cls.__setattr__ is not object.__setattr__
        or getattr(getattr(init, "__code__", None), "co_filename", None) != "<string>"
    ):
        return False
    fields = [f.name for f in dataclasses.fields(cls)]
    parameters = list(inspect.signature(init).parameters)[1:]
    # An init=False field is in fields only, an InitVar in parameters only: both differ.
    # In the same order, so that the instance's __dict__ is laid out as __init__ lays it.
    return fields == parameters == list(names)


# -- enums --------------------------------------------------------------------------


def not_a_member(value: object, cls: type) -> EncodeError:
    """The error for a value of an enum-typed field that is not one of the enum's members
    (a plain value equal to one is not: the receiver would not get the member back)."""
    if isinstance(value, (bool, int, float, str, enum.Enum)):
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return EncodeError(f"expected a {cls.__name__} member, got {type(value).__name__} {shown}")
    return EncodeError(f"expected a {cls.__name__} member, got {type(value).__name__}")


def check_enum(cls: Any, name: str, members: dict[str, int | str]) -> None:
    """Refuse, when a generated module is imported, an enum class bound to schema type
    ``name`` whose members differ from the schema's (``members``: name -> value).

    msgspec decodes a bound enum by its class: an extra member would be accepted from the
    wire, a missing one could not be rebuilt, a different value would be misread.
    """
    where = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)!s}"
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        raise TypeError(f"schema type {name!r} is an enum, but it is bound to {where}, not an Enum")
    actual = {member.name: member.value for member in cls}
    differences = [
        *(f"{m} = {v!r} is missing" for m, v in members.items() if m not in actual),
        *(
            f"{m} is {actual[m]!r}, the schema says {v!r}"
            for m, v in members.items()
            if m in actual and (type(actual[m]) is not type(v) or actual[m] != v)
        ),
        *(f"{m} = {v!r} is not in the schema" for m, v in actual.items() if m not in members),
    ]
    if differences:
        raise TypeError(
            f"{where}, bound to schema type {name!r}, has other members than the schema: "
            + "; ".join(differences)
        )


def construct_failure(cls: type, error: Exception) -> DecodeError:
    return DecodeError(
        f"{cls.__name__} rejected the decoded values ({type(error).__name__}: {error})"
    )


def identity(value: Any, ctx: Any) -> Any:
    return value


__all__ = [
    "NestedTensors",
    "check_count",
    "check_enum",
    "check_int64",
    "constrained",
    "construct_failure",
    "expect_bool",
    "expect_bytes",
    "expect_float",
    "expect_int",
    "expect_length",
    "expect_mapping",
    "expect_sequence",
    "expect_str",
    "expect_uint",
    "identity",
    "mapping_builder",
    "mapping_reader",
    "nested_tensors_from_wire",
    "nested_tensors_to_wire",
    "not_a_member",
    "slice_from_wire",
    "slice_to_wire",
    "tensor_from_wire",
    "tensor_to_wire",
    "values_equal",
]
