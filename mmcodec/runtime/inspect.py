"""A captured message, described for people: what ``mmcodec inspect`` prints.

:func:`describe` turns frames into a JSON-ready tree: the envelope, the tensor runs,
the refs table, one entry per tensor reference, and the body. :func:`render_text`
lays that tree out as indented text, the way ``protoc --decode_raw`` does.

Without a schema codec the body is shown by position, as msgpack (an int there may be
a number, a tensor reference or a back-reference: only the schema knows). With the
:class:`~mmcodec.runtime.codec.SchemaCodec` of the generated module that wrote the
message, the body is decoded with that module's wire types: fields and types by name,
tensors as references, back-references marked with the path of the value they repeat.

Everything goes through the real decode path first (frames, envelope, every run and,
with a codec, the whole rebuild), so with a codec a message this describes is one the
decoder accepts, and any other raises :class:`DecodeError` with the decoder's own
message; without one, the body is checked as msgpack only (bounded in depth and size,
extension types rejected). Nothing here imports anything a message names.
"""

from __future__ import annotations

import contextlib
import enum
import math
import types
import typing
from collections.abc import Sequence
from typing import Any

import msgspec
import torch

from mmcodec.runtime import framing
from mmcodec.runtime.codec import SchemaCodec, check_format
from mmcodec.runtime.dtypes import BY_NAME
from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits
from mmcodec.runtime.tensors import RunError, build_tensors, check_refs, check_runs
from mmcodec.runtime.wire import (
    Envelope,
    EnvelopeHead,
    IntLeaf,
    IntTagRef,
    ListNode,
    SliceWire,
    StrTagRef,
    TupleNode,
)

__all__ = ["describe", "render_text"]

_HEAD = msgspec.msgpack.Decoder(EnvelopeHead)
_ENVELOPE = msgspec.msgpack.Decoder(Envelope)
_RAW_BODY = msgspec.msgpack.Decoder()
_BYTES_SHOWN = 32
"""Leading bytes of a bytes value shown (in hex); the length is always shown."""


def describe(
    frames: Sequence[Any],
    codec: SchemaCodec | None = None,
    *,
    limits: Limits = DEFAULT_LIMITS,
    values: int = 0,
) -> dict[str, Any]:
    """The message in ``frames`` as a JSON-ready tree; raises only DecodeError.

    ``codec`` names fields and types (it must serve the message's schema and major
    version); ``values`` > 0 adds the first that many values of each tensor.

    The tree has ``frames``, ``envelope``, ``runs``, ``refs``, ``tensors`` (one entry per
    tensor reference), ``body_type`` (None without a codec) and ``body``, whose nodes are
    JSON scalars, lists, or objects with one ``$`` key saying what they are:
    ``{"$struct": name, "fields": {...}}``, ``{"$dict": [[key, value], ...], "$type"?}``,
    ``{"$tuple": [...]}``, ``{"$tensor": ref, "dtype", "shape", "again"?: first path}``,
    ``{"$ref": type, "index", "to": path}`` (a back-reference), ``{"$slice": [start,
    stop, step]}``, ``{"$bytes": length, "hex": leading bytes}``. Non-finite floats are
    the strings ``"nan"``, ``"inf"``, ``"-inf"``.
    """
    try:
        return _describe(framing.as_byte_views(frames, limits), codec, limits, values)
    except DecodeError:
        raise
    except RecursionError:
        raise DecodeError("message nested too deeply") from None
    except Exception as e:  # the decoder's contract, kept here too
        raise DecodeError(f"rejected ({e.__class__.__name__}: {e})") from e


def _describe(
    views: list[memoryview], codec: SchemaCodec | None, limits: Limits, values: int
) -> dict[str, Any]:
    envelope = _envelope(views[0])
    if codec is None:
        named = None
    else:
        if envelope.schema != codec.schema or envelope.major != codec.major:
            raise DecodeError(
                f"message is from schema {envelope.schema!r} major version {envelope.major}; "
                f"the module reads schema {codec.schema!r} major version {codec.major}"
            )
        named = next((t for t in codec.types if t.name == envelope.root), None)
        if named is None:
            raise DecodeError(f"schema {codec.schema!r} has no type {envelope.root!r}")
        # The whole real decode: whatever it rejects, inspect rejects with its message.
        codec.decode(views, named.python_type, limits=limits)
    try:
        layouts, total = check_runs(envelope.tensors, views, limits)
    except RunError as e:
        raise DecodeError(e.message) from None
    check_refs(envelope.refs, layouts, total, limits)
    tensors = build_tensors(layouts, False)  # bounded: check_runs applied the limits
    if envelope.refs:
        tensors = [tensors[ref] for ref in envelope.refs]
    runs, positions = _runs(envelope)
    refs = envelope.refs
    if named is None:
        body = _Raw(limits).node(_raw_body(envelope.body), 0)
        body_type = None
    else:
        wire = named.decoder.decode(envelope.body)
        body = _Typed(codec, tensors).node(wire, named.wire_type, "$")  # type: ignore[arg-type]
        body_type = named.name
    return {
        "frames": [
            {"frame": number, "bytes": view.nbytes, "role": "header" if number == 0 else "payload"}
            for number, view in enumerate(views)
        ],
        "envelope": {
            "wire_version": envelope.wire_version,
            "schema": envelope.schema,
            "major": envelope.major,
            "root": envelope.root,
        },
        "runs": runs,
        "refs": list(envelope.refs),
        "tensors": [
            _tensor_entry(ref, tensor, positions[refs[ref] if refs else ref], values)
            for ref, tensor in enumerate(tensors)
        ],
        "body_type": body_type,
        "body": body,
    }


def _envelope(header: memoryview) -> Envelope:
    """The envelope with its body left raw; the codec's messages for a bad one."""
    try:
        head = _HEAD.decode(header)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"frame 0 is not an mmcodec header ({e})") from None
    check_format(head)
    try:
        return _ENVELOPE.decode(header)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed envelope: {e}") from None


def _runs(envelope: Envelope) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """One entry per run (already validated), and (run, index in run) per position."""
    runs: list[dict[str, Any]] = []
    positions: list[tuple[int, int]] = []
    for number, run in enumerate(envelope.tensors):
        nbytes = BY_NAME[run.dtype].itemsize * math.prod(run.shape) * run.count
        entry: dict[str, Any] = {
            "run": number,
            "dtype": run.dtype,
            "shape": list(run.shape),
            "count": run.count,
            "bytes": nbytes,
        }
        if type(run.data) is int:
            entry.update(frame=run.data, offset=run.offset)
        else:
            entry.update(inline=True)
        runs.append(entry)
        positions.extend((number, index) for index in range(run.count))
    return runs, positions


def _tensor_entry(
    ref: int, tensor: torch.Tensor, where: tuple[int, int], values: int
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "tensor": ref,
        "run": where[0],
        "index": where[1],
        "dtype": BY_NAME_OF_TORCH[tensor.dtype],
        "shape": list(tensor.shape),
    }
    if values > 0:
        entry["values"] = _first_values(tensor, values)
    return entry


BY_NAME_OF_TORCH = {info.torch_dtype: name for name, info in BY_NAME.items()}


def _first_values(tensor: torch.Tensor, n: int) -> list[Any]:
    """The first ``n`` values in row-major order, as JSON values (non-finite as strings)."""
    flat = tensor.reshape(-1)[:n]
    if flat.is_complex():
        pairs = torch.view_as_real(flat.to(torch.complex128)).tolist()
        return [[_json_float(re), _json_float(im)] for re, im in pairs]
    if flat.is_floating_point():
        return [_json_float(v) for v in flat.to(torch.float64).tolist()]
    values: list[Any] = flat.tolist()
    return values


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _raw_body(body: msgspec.Raw) -> Any:
    try:
        return _RAW_BODY.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed message body: {e}") from None


def _bytes_node(value: bytes | bytearray | memoryview) -> dict[str, Any]:
    data = bytes(value[:_BYTES_SHOWN])
    return {"$bytes": len(value), "hex": data.hex()}


class _Raw:
    """The body by position: msgpack values as they are, bounded in depth and size."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        # Schema types nest a few levels; nested tensors at most max_depth.
        self.max_depth = limits.max_depth + 64

    def node(self, value: Any, depth: int) -> Any:
        if depth > self.max_depth:
            raise DecodeError(f"body nested deeper than {self.max_depth} levels")
        if isinstance(value, list | dict) and len(value) > self.limits.max_elements:
            raise DecodeError(
                f"{len(value)} elements exceed the limit of {self.limits.max_elements}"
            )
        if isinstance(value, list):
            return [self.node(item, depth + 1) for item in value]
        if isinstance(value, dict):
            entries = [[self.node(k, depth + 1), self.node(v, depth + 1)] for k, v in value.items()]
            return {"$dict": entries}
        if isinstance(value, bytes | bytearray | memoryview):
            return _bytes_node(value)
        if isinstance(value, msgspec.msgpack.Ext):  # rejected wherever they appear
            raise DecodeError(f"msgpack extension type {value.code} in the message body")
        if isinstance(value, float):
            return _json_float(value)
        return value  # None, bool, int, str


def _marked_reference(annotation: Any) -> bool:
    """Whether an annotation is the runtime's reference int (``wire.NonNegative``)."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(
        isinstance(meta, msgspec.Meta) and (meta.extra or {}).get("mmcodec") == "reference"
        for meta in annotation.__metadata__
    )


def _members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _type_name(cls: type) -> str:
    return cls.__name__.removeprefix("_").removesuffix("Wire")


_RUNTIME_STRUCTS = frozenset({IntLeaf, ListNode, TupleNode, SliceWire, IntTagRef, StrTagRef})


class _Typed:
    """The body as the schema's wire types say: names, tensors, back-references.

    Shared values are numbered the way the generated decoder numbers them: per struct
    type (and per union), each after its own fields, so a back-reference's index finds
    the path of the value it repeats.
    """

    def __init__(self, codec: SchemaCodec, tensors: list[torch.Tensor]) -> None:
        self.tensors = tensors
        self.names: dict[Any, str] = {}
        """Named types by their wire annotation; unions by their set of members."""
        for named in codec.types:
            members = _members(named.wire_type)
            key = frozenset(members) if len(members) > 1 else named.wire_type
            with contextlib.suppress(TypeError):  # an unhashable annotation: no name
                self.names.setdefault(key, named.name)
        self.shared: dict[Any, list[str]] = {}
        """Struct class, or frozenset of a union's variant classes -> paths, in order."""
        self.first_use: dict[int, str] = {}

    def _name_of(self, annotation: Any) -> str | None:
        try:
            return self.names.get(annotation)
        except TypeError:  # pragma: no cover
            return None

    def node(self, value: Any, annotation: Any, path: str) -> Any:
        members = _members(annotation)
        if len(members) > 1:
            return self._union(value, members, path)
        if _marked_reference(annotation):
            return self._tensor(value, path)
        base = _strip(annotation)
        if isinstance(value, msgspec.Struct):
            return self._struct(value, path)
        origin = typing.get_origin(base)
        args = typing.get_args(base)
        name = self._name_of(annotation)
        if isinstance(value, dict):
            key_type, value_type = args if args else (Any, Any)
            out: dict[str, Any] = {
                "$dict": [
                    [self.node(k, key_type, path), self.node(v, value_type, f"{path}[{k!r}]")]
                    for k, v in value.items()
                ]
            }
            if name:
                out["$type"] = name
            return out
        if isinstance(value, list | tuple):
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                item_types = list(args)
            else:
                item_types = [args[0] if args else Any] * len(value)
            items = [
                self.node(item, t, f"{path}[{index}]")
                for index, (item, t) in enumerate(zip(value, item_types, strict=True))
            ]
            return {"$tuple": items} if origin is tuple else items
        if isinstance(value, bytes | bytearray | memoryview):
            return _bytes_node(value)
        if isinstance(value, float):
            return _json_float(value)
        if isinstance(value, enum.Enum):  # a member shows as the value that travelled
            return value.value
        return value  # None, bool, int, str

    def _union(self, value: Any, members: tuple[Any, ...], path: str) -> Any:
        classes = [m for m in map(_strip, members) if isinstance(m, type)]
        structs = [c for c in classes if issubclass(c, msgspec.Struct)]
        references = [m for m in members if _marked_reference(m)]
        if value is None:
            return None
        if type(value) is int and references:
            if ListNode in structs:  # nested tensors: a bare int is a tensor reference
                return self._tensor(value, path)
            shared = [c for c in structs if c not in _RUNTIME_STRUCTS]
            if shared:  # a struct that travels once: an int repeats an earlier one
                return self._back_reference(shared[0], value, _type_name(shared[0]))
            return self._tensor(value, path)
        if isinstance(value, msgspec.Struct):
            cls = type(value)
            variants = frozenset(c for c in structs if c not in (IntTagRef, StrTagRef))
            tagged = any(c in (IntTagRef, StrTagRef) for c in structs)
            if cls in (IntTagRef, StrTagRef):
                kept = frozenset(m for m in members if m is not type(None))
                union = self._name_of(kept) or "union"
                return self._back_reference(variants, value.index, union)  # type: ignore[attr-defined]
            out = self._struct(value, path)
            if tagged:  # a union value: numbered after the variant it holds
                self.shared.setdefault(variants, []).append(path)
            return out
        for member in members:  # a union of a struct with a container, say
            base = _strip(member)
            if base is type(None) or _marked_reference(member):
                continue
            origin = typing.get_origin(base) or base
            if isinstance(origin, type) and isinstance(value, origin):
                return self.node(value, member, path)
        return self.node(value, Any, path)

    def _struct(self, value: msgspec.Struct, path: str) -> Any:
        cls = type(value)
        if cls is SliceWire:
            return {"$slice": [value.start, value.stop, value.step]}  # type: ignore[attr-defined]
        if cls is IntLeaf:
            return value.value  # type: ignore[attr-defined]
        if cls in (ListNode, TupleNode):
            items = [
                self.node(item, _NESTED, f"{path}[{index}]")
                for index, item in enumerate(value.items)  # type: ignore[attr-defined]
            ]
            return items if cls is ListNode else {"$tuple": items}
        fields = {
            field.name: self.node(getattr(value, field.name), field.type, f"{path}.{field.name}")
            for field in msgspec.structs.fields(cls)
        }
        if cls.__struct_config__.tag is None:  # a struct that travels once: numbered
            self.shared.setdefault(cls, []).append(path)
        return {"$struct": _type_name(cls), "fields": fields}

    def _tensor(self, ref: int, path: str) -> dict[str, Any]:
        tensor = self.tensors[ref]
        out: dict[str, Any] = {
            "$tensor": ref,
            "dtype": BY_NAME_OF_TORCH[tensor.dtype],
            "shape": list(tensor.shape),
        }
        first = self.first_use.setdefault(ref, path)
        if first != path:
            out["again"] = first
        return out

    def _back_reference(self, key: Any, index: int, name: str) -> dict[str, Any]:
        paths = self.shared.get(key, [])
        # The real decode accepted the message, so the index is in range.
        return {"$ref": name, "index": index, "to": paths[index]}


_NESTED = typing.get_type_hints(ListNode, include_extras=True)["items"].__args__[0]
"""One nested-tensors node's annotation (``wire.NestedWire``)."""


# -- text ---------------------------------------------------------------------------


def render_text(description: dict[str, Any]) -> str:
    """The tree from :func:`describe`, as indented text."""
    env = description["envelope"]
    frames = description["frames"]
    lines = [
        f"envelope: wire version {env['wire_version']}, schema {env['schema']!r} "
        f"major {env['major']}, root {env['root']}",
        f"frames: {len(frames)} ("
        + ", ".join(f"{f['frame']}: {f['bytes']} bytes" for f in frames)
        + "), header first",
        f"tensor runs: {len(description['runs'])}",
    ]
    for run in description["runs"]:
        where = "inline" if run.get("inline") else f"frame {run['frame']} offset {run['offset']}"
        lines.append(
            f"  run {run['run']}: {run['dtype']}{run['shape']} x {run['count']}, "
            f"{run['bytes']} bytes, {where}"
        )
    refs = description["refs"]
    lines.append(f"refs: {refs}" if refs else "refs: none (tensor references are positions)")
    lines.append(f"tensors: {len(description['tensors'])}")
    for t in description["tensors"]:
        line = f"  tensor {t['tensor']}: {t['dtype']}{t['shape']} (run {t['run']} #{t['index']})"
        if "values" in t:
            line += f" = {_values_text(t['values'])}"
        lines.append(line)
    by_position = description["body_type"] is None
    lines.append("body (by position; --module names fields):" if by_position else "body:")
    _render_node(description["body"], "  ", lines, head=None)
    return "\n".join(lines) + "\n"


def _values_text(values: list[Any]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _render_node(node: Any, indent: str, lines: list[str], head: str | None) -> None:
    """Append ``head: summary`` and the node's children, one more level indented."""
    summary, children = _summary(node)
    prefix = f"{head}: " if head is not None else ""
    if summary or head is not None:
        lines.append(f"{indent}{prefix}{summary}".rstrip())
        inner = indent + "  "
    else:
        inner = indent
    for child_head, child in children:
        _render_node(child, inner, lines, child_head)


def _summary(node: Any) -> tuple[str, list[tuple[str, Any]]]:
    if isinstance(node, list):
        return f"list[{len(node)}]", [(f"[{i}]", item) for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return _scalar_text(node), []
    if "$struct" in node:
        return node["$struct"], [(f".{k}", v) for k, v in node["fields"].items()]
    if "$dict" in node:
        entries = node["$dict"]
        label = node.get("$type") or f"dict[{len(entries)}]"
        return label, [(f"[{_scalar_text(k)}]", v) for k, v in entries]
    if "$tuple" in node:
        items = node["$tuple"]
        return f"tuple[{len(items)}]", [(f"[{i}]", item) for i, item in enumerate(items)]
    if "$tensor" in node:
        text = f"tensor {node['$tensor']}: {node['dtype']}{node['shape']}"
        if "again" in node:
            text += f" (again: first at {node['again']})"
        return text, []
    if "$ref" in node:
        return f"-> {node['$ref']} #{node['index']} (the value at {node['to']})", []
    if "$slice" in node:
        start, stop, step = node["$slice"]
        return f"slice({start}, {stop}" + (f", {step})" if step is not None else ")"), []
    if "$bytes" in node:
        more = "..." if node["$bytes"] > _BYTES_SHOWN else ""
        return f"bytes[{node['$bytes']}] {node['hex']}{more}", []
    return repr(node), []  # pragma: no cover - describe() makes no other node


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    return str(value)
