"""Turn msgspec's wire paths (``$[1][0][2]``) into schema paths (``$.field.data[2]``).

Only used when decoding has already failed. It re-reads the message body untyped to
learn which union variant each tag selected, and validates a mapping's values in one
pass to find the failing key: no slower than the decode that failed.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Literal, Union

import msgspec
import msgspec.inspect as mi

from mmcodec.runtime.wire import ListNode, TupleNode

_AT = re.compile(r"^(?P<message>.*) - at `(?P<key>key` in `)?(?P<path>\$.*)`$", re.DOTALL)
_SEGMENT = re.compile(r"\[(\d+|\.\.\.)\]|\.(\w+)")


def locate_validation_error(text: str, wire_type: Any, raw: Any) -> tuple[str, str]:
    """``(schema path, msgspec's message)`` for a ValidationError raised on ``raw``."""
    match = _AT.match(text)
    if match is None:
        return "$", text
    message, wire_path = match["message"], match["path"]
    try:
        value = msgspec.msgpack.decode(raw)
        found = _walk(_type_info(wire_type), value, _SEGMENT.findall(wire_path[1:]))
        path = None if found is None else found[0]
        if found is not None and match["key"]:  # a dict's key failed: which one
            path = _key_path(*found)
    except Exception:  # a best effort: fall back to the wire path
        path = None
    if path is None:
        key = " (a key)" if match["key"] else ""
        return f"{wire_path} (wire path){key}", message
    return path, message


def _key_path(path: str, info: mi.Type, value: Any) -> str | None:
    """``$.table['music'] (key)``: the first key of the dict at ``path`` that fails alone."""
    while isinstance(info, mi.Metadata):
        info = info.type
    info = _resolve_union(info, value)
    if not (isinstance(info, mi.DictType) and isinstance(value, dict)):
        return None
    keys = list(value)
    try:
        msgspec.convert(keys, list[_python_type(info.key_type)], strict=True)  # type: ignore[misc]
    except msgspec.ValidationError as e:
        match = _AT.match(str(e))
        index = _FIRST_INDEX.match(match["path"]) if match else None
        if index is not None:
            return f"{path}[{keys[int(index[1])]!r}] (key)"
    return None


def locate_wire_steps(wire_type: Any, value: Any, steps: list[int | Key]) -> str:
    """The schema path of ``value[steps[0]][steps[1]]...``, ``value`` an untyped wire body
    (list indices for arrays, :class:`Key` for mappings); the wire path if it cannot be
    translated."""
    segments: list[tuple[str, str] | Key] = [
        step if isinstance(step, Key) else (str(step), "") for step in steps
    ]
    try:
        path = _translate(_type_info(wire_type), value, segments)
    except Exception:  # a best effort, as for decoding errors
        path = None
    if path is None:
        return "$" + "".join(f"[{step!r}]" for step in steps) + " (wire path)"
    return path


def counts_elements(wire_type: Any, value: Any, steps: list[int | Key]) -> bool:
    """Whether ``value[steps[0]][steps[1]]...`` (as in :func:`locate_wire_steps`) is a
    container whose length a receiver bounds by ``max_elements`` (a list, a variable
    tuple, a mapping), not a struct or a fixed tuple that merely travels as an array.
    True when the wire type cannot say: the sender then errs on the safe side."""
    try:
        info = _type_info(wire_type)
        for step in steps:
            info = _resolve_union(_unwrap(info), value)
            if isinstance(step, Key):
                info, value = info.value_type, value[step.key]  # type: ignore[attr-defined]
            elif isinstance(info, mi.StructType):
                shift = 1 if info.tag is not None else 0
                info, value = info.fields[step - shift].type, value[step]
            elif isinstance(info, mi.TupleType):
                info, value = info.item_types[step], value[step]
            else:
                info, value = info.item_type, value[step]  # type: ignore[attr-defined]
        info = _resolve_union(_unwrap(info), value)
    except Exception:  # pragma: no cover - steps come from the same body: a best effort
        return True
    return not isinstance(info, (mi.StructType, mi.TupleType))


def _unwrap(info: mi.Type) -> mi.Type:
    while isinstance(info, mi.Metadata):  # wire.NonNegative's marker, say
        info = info.type
    return info


class Key:
    """A path step that names a mapping's key (msgspec's paths say ``[...]`` instead)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __repr__(self) -> str:
        return repr(self.key)


@functools.lru_cache(maxsize=256)
def _type_info(wire_type: Any) -> mi.Type:
    """msgspec's view of a wire type: a few ms to build, so built once per type."""
    return mi.type_info(wire_type)


def _translate(
    info: mi.Type, value: Any, segments: list[tuple[str, str]] | list[tuple[str, str] | Key]
) -> str | None:
    found = _walk(info, value, segments)
    return None if found is None else found[0]


def _walk(
    info: mi.Type, value: Any, segments: list[tuple[str, str]] | list[tuple[str, str] | Key]
) -> tuple[str, mi.Type, Any] | None:
    """The schema path of ``segments``, and the type and value it leads to."""
    out = "$"
    for segment in segments:
        while isinstance(info, mi.Metadata):  # wire.NonNegative's marker, say
            info = info.type
        info = _resolve_union(info, value)
        if isinstance(segment, Key):
            if not isinstance(info, mi.DictType):
                return None
            out += f"[{segment.key!r}]"
            info, value = info.value_type, value[segment.key]
            continue
        index_text = segment[0]
        if index_text == "..." and isinstance(info, mi.DictType) and isinstance(value, dict):
            # msgspec does not say which entry: find the first value that fails alone.
            key = _failing_key(info, value)
            if key is _NO_KEY:
                return None
            out += f"[{key!r}]"
            info, value = info.value_type, value[key]
            continue
        if isinstance(info, mi.StructType) and not info.array_like:
            return out, info, value  # inside a column list: the list's path
        if index_text == "..." or not index_text:
            return None
        index = int(index_text)
        if isinstance(info, mi.StructType) and info.array_like:
            shift = 1 if info.tag is not None else 0
            if index < shift:
                return out + ".<tag>", info, value
            field = info.fields[index - shift]
            if info.cls not in _NESTED_NODES:  # a list of nested tensors is its items
                out += f".{field.name}"
            info, value = field.type, value[index]
        elif isinstance(info, (mi.ListType, mi.VarTupleType)):
            out += f"[{index}]"
            info, value = info.item_type, value[index]
        elif isinstance(info, mi.TupleType):
            out += f"[{index}]"
            info, value = info.item_types[index], value[index]
        else:
            return None
    return out, info, value


def _resolve_union(info: mi.Type, value: Any) -> mi.Type:
    """Pick the union member a tagged array selects, or the only array- or dict-shaped one."""
    while isinstance(info, mi.UnionType):
        candidates = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if isinstance(value, dict):
            # A mapping, or a struct sent as a map (a column list beside its rows' list).
            mappings = [
                t
                for t in candidates
                if isinstance(t, mi.DictType) or (isinstance(t, mi.StructType) and not t.array_like)
            ]
            if len(mappings) == 1:
                info = mappings[0]
                continue
        if isinstance(value, list) and value:
            tagged = [
                t
                for t in candidates
                if isinstance(t, mi.StructType) and t.tag is not None and t.tag == value[0]
            ]
            if tagged:
                info = tagged[0]
                continue
        arrays = [
            t
            for t in candidates
            if isinstance(t, (mi.ListType, mi.VarTupleType, mi.TupleType))
            or (isinstance(t, mi.StructType) and t.array_like)
        ]
        if len(arrays) == 1:
            info = arrays[0]
            continue
        return info
    return info


_NO_KEY = object()
_NESTED_NODES = (ListNode, TupleNode)


_FIRST_INDEX = re.compile(r"^\$\[(\d+)\]")


def _failing_key(info: mi.DictType, entries: dict[Any, Any]) -> Any:
    """The key of the first entry whose value fails validation, found in one pass.

    The values are validated as one list, so the cost is that of decoding them once
    (converting entry by entry would build msgspec's view of the type once per entry).
    """
    values = list(entries.values())
    try:
        msgspec.convert(values, list[_python_type(info.value_type)])  # type: ignore[misc]
    except msgspec.ValidationError as e:
        match = _AT.match(str(e))
        index = _FIRST_INDEX.match(match["path"]) if match else None
        if index is not None:
            return list(entries)[int(index[1])]
    return _NO_KEY


_CONSTRAINTS = ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length", "pattern")


def _python_type(info: mi.Type) -> Any:
    """The annotation msgspec would build ``info`` from (constraints included)."""
    if isinstance(info, mi.Metadata):  # e.g. wire.NonNegative's marker for tools
        return _python_type(info.type)
    if isinstance(info, (mi.StructType, mi.EnumType)):
        return info.cls
    if isinstance(info, mi.LiteralType):
        return Literal[info.values]
    if isinstance(info, mi.UnionType):
        members = tuple(_python_type(t) for t in info.types)
        return Union[members]  # noqa: UP007 - built from a runtime tuple
    if isinstance(info, mi.ListType):
        base: Any = list[_python_type(info.item_type)]  # type: ignore[misc]
    elif isinstance(info, mi.VarTupleType):
        base = tuple[_python_type(info.item_type), ...]  # type: ignore[misc]
    elif isinstance(info, mi.TupleType):
        base = tuple[tuple(_python_type(t) for t in info.item_types)]  # type: ignore[misc]
    elif isinstance(info, mi.DictType):
        base = dict[_python_type(info.key_type), _python_type(info.value_type)]  # type: ignore[misc]
    else:
        simple = {
            mi.IntType: int,
            mi.FloatType: float,
            mi.StrType: str,
            mi.BytesType: bytes,
            mi.BoolType: bool,
            mi.NoneType: type(None),
            mi.AnyType: Any,
        }
        base = simple.get(type(info))
        if base is None:
            raise TypeError(f"no annotation for {info!r}")
    meta = {
        name: getattr(info, name) for name in _CONSTRAINTS if getattr(info, name, None) is not None
    }
    return Annotated[base, msgspec.Meta(**meta)] if meta else base
