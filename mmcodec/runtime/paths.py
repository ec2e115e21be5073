"""Turn msgspec's wire paths (``$[1][0][2]``) into schema paths (``$.field.data[2]``).

Only used when decoding has already failed, so it may be slow: it re-reads the
message body untyped to learn which union variant each tag selected.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import msgspec.inspect as mi

_AT = re.compile(r"^(?P<message>.*) - at `(?P<path>\$.*)`$", re.DOTALL)
_SEGMENT = re.compile(r"\[(\d+|\.\.\.)\]|\.(\w+)")


def describe_validation_error(text: str, wire_type: Any, raw: Any) -> str:
    """``"<schema path>: <msgspec's message>"`` for a ValidationError raised on ``raw``."""
    path, message = locate_validation_error(text, wire_type, raw)
    return f"{path}: {message}"


def locate_validation_error(text: str, wire_type: Any, raw: Any) -> tuple[str, str]:
    """``(schema path, msgspec's message)`` for a ValidationError raised on ``raw``."""
    match = _AT.match(text)
    if match is None:
        return "$", text
    message, wire_path = match["message"], match["path"]
    try:
        value = msgspec.msgpack.decode(raw)
        path = _translate(mi.type_info(wire_type), value, _SEGMENT.findall(wire_path[1:]))
    except Exception:  # a best effort: fall back to the wire path
        path = None
    if path is None:
        return f"{wire_path} (wire path)", message
    return path, message


def _translate(info: mi.Type, value: Any, segments: list[tuple[str, str]]) -> str | None:
    out = "$"
    for index_text, _name in segments:
        info = _resolve_union(info, value)
        if index_text == "..." or not index_text:
            return None
        index = int(index_text)
        if isinstance(info, mi.StructType) and info.array_like:
            shift = 1 if info.tag is not None else 0
            if index < shift:
                out += ".<tag>"
                return out
            field = info.fields[index - shift]
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
    return out


def _resolve_union(info: mi.Type, value: Any) -> mi.Type:
    """Pick the union member a tagged array selects, or the only array-shaped one."""
    while isinstance(info, mi.UnionType):
        candidates = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if isinstance(value, list) and value:
            tagged = [t for t in candidates if isinstance(t, mi.StructType) and t.tag == value[0]]
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
