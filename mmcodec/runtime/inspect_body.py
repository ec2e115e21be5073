"""A message body as ``mmcodec inspect`` shows it: nodes of a JSON-ready tree, bounded.

Two walkers make the nodes: :class:`RawBody` by position (msgpack as it is), and
:class:`TypedBody` with the wire types of the generated module that wrote the message
(fields and types by the schema's names, tensors, back-references). Both spend an
output :class:`Budget`: once it is spent, a container's remaining entries become one
``{"$omitted": n}`` node and nothing below them is visited, so the tree, its text and
the work to make them stay bounded whatever the message holds. Paths (where a
back-reference's value or a tensor was first seen) are kept as links to their parent
and spelled out only when shown; long strings are shortened to their first characters.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.inspect_columns import (
    ColumnListShape,
    absent_runs,
    column_list_shape,
    positions,
)
from mmcodec.runtime.inspect_values import json_float
from mmcodec.runtime.limits import Limits
from mmcodec.runtime.wire import IntLeaf, IntTagRef, ListNode, SliceWire, StrTagRef, TupleNode

BYTES_SHOWN = 32
"""Leading bytes of a bytes value shown (in hex); the length is always shown."""
CHARS_SHOWN = 64
"""Leading characters of a longer string shown; the length is always shown."""
_KEY_CHARS_IN_PATHS = 24
_LINE = 16
"""What a node costs beyond its own text: its line's head, separators, punctuation."""


class Budget:
    """Characters of output that nodes may still take (about what either format prints:
    each node is a line, indented two spaces per level)."""

    __slots__ = ("left", "spent_out")

    def __init__(self, chars: int) -> None:
        self.left = chars
        self.spent_out = False
        """Whether some entry was left out for want of budget."""

    def spend(self, depth: int, text: int) -> None:
        self.left -= _LINE + 2 * depth + text

    @property
    def exhausted(self) -> bool:
        return self.left < 0

    def omitted(self, count: int) -> dict[str, int]:
        """The node that stands for ``count`` entries left out."""
        self.spent_out = True
        return {"$omitted": count}


def bounded(
    budget: Budget, count: int, entries: Iterator[Any], make: Callable[[Any], Any]
) -> list[Any]:
    """``make`` of each of ``count`` entries while the budget lasts, then one omitted node."""
    out: list[Any] = []
    for entry in entries:
        if budget.exhausted:
            out.append(budget.omitted(count - len(out)))
            break
        out.append(make(entry))
    return out


def string_node(value: str) -> str | dict[str, Any]:
    """A string, or its first characters and its length when it is long."""
    if len(value) <= CHARS_SHOWN:
        return value
    return {"$str": value[:CHARS_SHOWN], "length": len(value)}


def bytes_node(value: bytes | bytearray | memoryview) -> dict[str, Any]:
    data = bytes(value[:BYTES_SHOWN])
    return {"$bytes": len(value), "hex": data.hex()}


def scalar_node(value: Any) -> Any:
    """A msgpack scalar as a JSON value (or a node, for long strings and bytes)."""
    if isinstance(value, str):
        return string_node(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes_node(value)
    if isinstance(value, float):
        return json_float(value)
    return value  # None, bool, int


def _text_size(node: Any) -> int:
    """About how many characters a scalar node takes when printed."""
    if isinstance(node, dict):
        return CHARS_SHOWN + 24
    if isinstance(node, str):
        return len(node) + 2
    return 20


# -- by position ----------------------------------------------------------------------


class RawBody:
    """The body by position: msgpack values as they are."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget

    def node(self, value: Any, depth: int) -> Any:
        if isinstance(value, list | tuple):
            self.budget.spend(depth, 8)
            items = bounded(self.budget, len(value), iter(value), lambda v: self.node(v, depth + 1))
            return items if isinstance(value, list) else {"$tuple": items}
        if isinstance(value, dict):
            self.budget.spend(depth, 8)
            entries = bounded(self.budget, len(value), iter(value.items()), self._entry(depth))
            return {"$dict": entries}
        node = scalar_node(value)
        self.budget.spend(depth, _text_size(node))
        return node

    def _entry(self, depth: int) -> Callable[[tuple[Any, Any]], list[Any]]:
        return lambda kv: [self.node(kv[0], depth + 1), self.node(kv[1], depth + 1)]


def check_raw(body: Any, limits: Limits) -> None:
    """What the decoder would bound in a body it cannot type: nesting and container sizes
    (extension types are refused while decoding). Visits every container, shown or not,
    a level at a time: a pointer per container, however many there are."""
    max_depth = limits.max_depth + 64  # schema types nest a few levels; nested tensors max_depth
    level = [body] if isinstance(body, list | tuple | dict) else []
    depth = 0
    while level:
        if depth > max_depth:
            raise DecodeError(f"body nested deeper than {max_depth} levels")
        below: list[Any] = []
        for value in level:
            if len(value) > limits.max_elements:
                raise DecodeError(
                    f"{len(value)} elements exceed the limit of {limits.max_elements}"
                )
            items: Iterable[Any] = value
            if isinstance(value, dict):
                below.extend(key for key in value if isinstance(key, tuple))
                items = value.values()
            below.extend(item for item in items if isinstance(item, list | tuple | dict))
        level = below
        depth += 1


# -- with the schema's wire types -----------------------------------------------------


class Path:
    """Where a value sits (``$['image'][0].field``), as a link to its parent: made for
    every value shown, spelled out only for the few that a later node points back to.
    A long key is shortened in the spelling, so a path's length is bounded by its depth."""

    __slots__ = ("parent", "step", "text")

    def __init__(self, parent: Path | None, step: int | str | Any) -> None:
        self.parent = parent
        self.step = step
        """An index (int), a field (a str starting with "."), or a key (a ``_Key``)."""
        self.text: str | None = None

    def __str__(self) -> str:
        if self.text is None:
            steps: list[str] = []
            node: Path | None = self
            start = "$"
            while node is not None:
                if node.text is not None:
                    start = node.text
                    break
                steps.append(_step_text(node.step))
                node = node.parent
            self.text = start + "".join(reversed(steps))
        return self.text


class _Key:
    """A mapping key as a path step (so that a str key is not taken for a field)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


def _step_text(step: int | str | _Key) -> str:
    if isinstance(step, int):
        return f"[{step}]"
    if isinstance(step, str):
        return step
    key = step.key
    if isinstance(key, str) and len(key) > _KEY_CHARS_IN_PATHS:
        return f"[{key[:_KEY_CHARS_IN_PATHS]!r}...]"
    return f"[{key!r}]"


ROOT = Path(None, "")


class Numbered:
    """The paths of the values of one type (or union) in the order the decoder numbers
    them, for back-references to find: single paths, and whole columns of items, each
    kept as one entry whose paths are made when a back-reference asks for one."""

    __slots__ = ("entries", "made", "size", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.entries: list[Path | Callable[[int], Path]] = []
        self.made: dict[int, Path] = {}
        """Paths made from a column, kept so that each is spelled out once."""
        self.size = 0

    def append(self, path: Path) -> None:
        self.starts.append(self.size)
        self.entries.append(path)
        self.size += 1

    def extend(self, count: int, path_of: Callable[[int], Path]) -> None:
        """``count`` values, the ``i``-th of them at ``path_of(i)``."""
        self.starts.append(self.size)
        self.entries.append(path_of)
        self.size += count

    def get(self, index: int) -> Path | None:
        if not 0 <= index < self.size:
            return None  # pragma: no cover - the real decode checked every index
        at = bisect.bisect_right(self.starts, index) - 1
        entry = self.entries[at]
        if isinstance(entry, Path):
            return entry
        path = self.made.get(index)
        if path is None:
            path = self.made[index] = entry(index - self.starts[at])
        return path


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


def _item_name(names: SchemaNames, members: tuple[Any, ...]) -> str | None:
    """The schema's name of the items of a list that may travel as columns, from the
    members of its wire annotation (``list[M] | ColumnsWire``)."""
    for member in map(_strip, members):
        if typing.get_origin(member) is list:
            items = [m for m in _members(typing.get_args(member)[0]) if m is not type(None)]
            if len(items) == 1:
                kind = items[0]
                if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
                    return names.of_struct(kind)
                return names.of_annotation(kind)
    return None


def _type_name(cls: type) -> str:
    """The schema's name of a generated wire struct (``_PointWire`` -> ``Point``)."""
    return cls.__name__.removeprefix("_").removesuffix("Wire")


_REFS = (IntTagRef, StrTagRef)
_RUNTIME_STRUCTS = frozenset({IntLeaf, ListNode, TupleNode, SliceWire, *_REFS})
_NESTED = typing.get_type_hints(ListNode, include_extras=True)["items"].__args__[0]
"""One nested-tensors node's annotation (``wire.NestedWire``)."""


class SchemaNames:
    """The schema's names of a generated module's wire types.

    Named structs by their wire class; unions (by their set of members) and mappings by
    their annotation; and the wrapper structs that carry a union's variants that are not
    named structs (``_FlatSlice_0Wire`` holds a ``slice``), each by its union's name.
    """

    def __init__(self, named_types: typing.Iterable[tuple[str, Any]]) -> None:
        self.structs: dict[type, str] = {}
        self.annotations: dict[Any, str] = {}
        self.wrappers: dict[type, str] = {}
        unions: list[tuple[str, tuple[Any, ...]]] = []
        for name, wire_type in named_types:
            members = _members(wire_type)
            if len(members) > 1:
                unions.append((name, members))
                with contextlib.suppress(TypeError):  # an unhashable member: no name
                    self.annotations.setdefault(frozenset(members), name)
            elif isinstance(wire_type, type) and issubclass(wire_type, msgspec.Struct):
                self.structs[wire_type] = name
            else:
                with contextlib.suppress(TypeError):
                    self.annotations.setdefault(wire_type, name)
        for name, members in unions:
            for member in map(_strip, members):
                if (
                    isinstance(member, type)
                    and issubclass(member, msgspec.Struct)
                    and member not in self.structs
                    and member not in _RUNTIME_STRUCTS
                    and member.__struct_fields__ == ("value",)
                    and member.__name__.startswith(f"_{name}_")
                ):
                    self.wrappers[member] = name

    def of_struct(self, cls: type) -> str:
        return self.structs.get(cls) or _type_name(cls)

    def of_annotation(self, annotation: Any) -> str | None:
        try:
            return self.annotations.get(annotation)
        except TypeError:  # pragma: no cover - an unhashable annotation
            return None


class TensorTable:
    """Where each tensor reference of the body points: (tensor, dtype, shape)."""

    def __init__(self, refs: list[int], runs: list[tuple[str, list[int], int]]) -> None:
        self.refs = refs
        self.starts: list[int] = []
        self.runs = runs
        start = 0
        for _, _, count in runs:
            self.starts.append(start)
            start += count

    def tensor(self, ref: int) -> int:
        return self.refs[ref] if self.refs else ref

    def layout(self, position: int) -> tuple[str, list[int]]:
        dtype, shape, _ = self.runs[bisect.bisect_right(self.starts, position) - 1]
        return dtype, shape


class TypedBody:
    """The body as the schema's wire types say: names, tensors, back-references.

    Shared values are numbered the way the generated decoder numbers them: per struct
    type (and per union), each after its own fields, so a back-reference's index finds
    the path of the value it repeats. The real decode accepted the message first, so
    every reference is in range.
    """

    def __init__(self, names: SchemaNames, tensors: TensorTable, budget: Budget) -> None:
        self.names = names
        self.tensors = tensors
        self.budget = budget
        self.shared: dict[Any, Numbered] = {}
        """Struct class, or frozenset of a union's variant classes -> paths, in order."""
        self.first_use: dict[int, Path] = {}
        """Tensor -> where it was first shown."""
        self.fields: dict[type, list[tuple[str, Any, str]]] = {}

    def node(self, value: Any, annotation: Any, path: Path, depth: int) -> Any:
        members = _members(annotation)
        if len(members) > 1:
            return self._union(value, members, path, depth)
        if _marked_reference(annotation):
            return self._tensor(value, path, depth)
        if isinstance(value, msgspec.Struct):
            return self._struct(value, path, depth)
        base = _strip(annotation)
        args = typing.get_args(base)
        if isinstance(value, dict):
            key_type, value_type = args if args else (Any, Any)
            self.budget.spend(depth, 24)

            def entry(kv: tuple[Any, Any]) -> list[Any]:
                key, item = kv
                shown = self.node(key, key_type, path, depth + 1)
                return [shown, self.node(item, value_type, Path(path, _Key(key)), depth + 1)]

            out: dict[str, Any] = {
                "$dict": bounded(self.budget, len(value), iter(value.items()), entry)
            }
            name = self.names.of_annotation(annotation)
            if name:
                out["$type"] = name
            return out
        if isinstance(value, list | tuple):
            self.budget.spend(depth, 12)
            is_tuple = typing.get_origin(base) is tuple
            if is_tuple and not (len(args) == 2 and args[1] is Ellipsis):
                item_types = list(args)
            else:
                item_types = [args[0] if args else Any] * len(value)
            items = bounded(
                self.budget,
                len(value),
                enumerate(value),
                lambda iv: self.node(iv[1], item_types[iv[0]], Path(path, iv[0]), depth + 1),
            )
            return {"$tuple": items} if is_tuple else items
        if isinstance(value, enum.Enum):  # a member shows as the value that travelled
            value = value.value
        node = scalar_node(value)
        self.budget.spend(depth, _text_size(node))
        return node

    def _union(self, value: Any, members: tuple[Any, ...], path: Path, depth: int) -> Any:
        classes = [m for m in map(_strip, members) if isinstance(m, type)]
        structs = [c for c in classes if issubclass(c, msgspec.Struct)]
        if value is None:
            self.budget.spend(depth, 4)
            return None
        if type(value) is int and any(map(_marked_reference, members)):
            if ListNode in structs:  # nested tensors: a bare int is a tensor reference
                return self._tensor(value, path, depth)
            if any(c in _REFS for c in structs):  # a column's bare index of a union value
                variants = frozenset(c for c in structs if c not in _REFS)
                return self._back_reference(variants, value, self._union_name(members), depth)
            shared = [c for c in structs if c not in _RUNTIME_STRUCTS]
            if shared:  # a struct that travels once: an int repeats an earlier one
                name = self.names.of_struct(shared[0])
                return self._back_reference(shared[0], value, name, depth)
            return self._tensor(value, path, depth)
        if isinstance(value, msgspec.Struct):
            cls = type(value)
            variants = frozenset(c for c in structs if c not in _REFS)
            if cls in _REFS:
                union = self._union_name(members)
                return self._back_reference(variants, value.index, union, depth)  # type: ignore[attr-defined]
            shape = column_list_shape(cls)
            if shape is not None:
                return self._column_list(value, shape, _item_name(self.names, members), path, depth)
            if cls in self.names.wrappers:  # a variant that is not a struct: its value
                annotation = msgspec.structs.fields(cls)[0].type
                out = self.node(value.value, annotation, path, depth)  # type: ignore[attr-defined]
            else:
                out = self._struct(value, path, depth)
            if any(c in _REFS for c in structs):  # a union value: numbered after its variant
                self._numbered(variants).append(path)
            return out
        for member in members:  # a union of a struct with a container, say
            base = _strip(member)
            if base is type(None) or _marked_reference(member):
                continue
            origin = typing.get_origin(base) or base
            # Other unions of the wire are optional[X]: one member left, and the real decode
            # accepted the value as it.
            if isinstance(origin, type) and isinstance(value, origin):  # pragma: no branch
                return self.node(value, member, path, depth)
        return self.node(value, Any, path, depth)  # pragma: no cover - as said above

    def _struct(self, value: msgspec.Struct, path: Path, depth: int) -> Any:
        cls = type(value)
        if cls is SliceWire:
            self.budget.spend(depth, 24)
            return {"$slice": [value.start, value.stop, value.step]}  # type: ignore[attr-defined]
        if cls is IntLeaf:
            self.budget.spend(depth, 20)
            return value.value  # type: ignore[attr-defined]
        if cls in (ListNode, TupleNode):
            self.budget.spend(depth, 12)
            items = bounded(
                self.budget,
                len(value.items),  # type: ignore[attr-defined]
                enumerate(value.items),  # type: ignore[attr-defined]
                lambda iv: self.node(iv[1], _NESTED, Path(path, iv[0]), depth + 1),
            )
            return items if cls is ListNode else {"$tuple": items}
        shape = column_list_shape(cls)
        if shape is not None:  # pragma: no cover - generated modules put one in a union
            return self._column_list(value, shape, None, path, depth)
        name = self.names.of_struct(cls)
        self.budget.spend(depth, len(name))
        fields: dict[str, Any] = {}
        spec = self._fields_of(cls)
        for index, (field, annotation, step) in enumerate(spec):
            if self.budget.exhausted:
                fields["$omitted"] = len(spec) - index
                self.budget.spent_out = True
                break
            fields[field] = self.node(
                getattr(value, field), annotation, Path(path, step), depth + 1
            )
        if cls.__struct_config__.tag is None:  # a struct that travels once: numbered
            self._numbered(cls).append(path)
        return {"$struct": name, "fields": fields}

    def _numbered(self, key: Any) -> Numbered:
        numbered = self.shared.get(key)
        if numbered is None:
            numbered = self.shared[key] = Numbered()
        return numbered

    def _union_name(self, members: tuple[Any, ...]) -> str:
        """The schema's name of a union, from its wire members (an optional one's, or a
        column's, which may also hold a bare index)."""
        kept = frozenset(m for m in members if m is not type(None))
        name = self.names.of_annotation(kept)
        if name is None:
            name = self.names.of_annotation(frozenset(m for m in kept if not _marked_reference(m)))
        return name or "union"

    # -- column lists (wire version 3) --------------------------------------------------

    def _column_list(
        self,
        value: msgspec.Struct,
        shape: ColumnListShape,
        item_name: str | None,
        path: Path,
        depth: int,
    ) -> dict[str, Any]:
        """A column list: its count, absent items (as runs), and per key its column, each
        value with the path of the item it belongs to (as rows would have it)."""
        count: int = value.count  # type: ignore[attr-defined]
        keys: list[Any] = value.keys  # type: ignore[attr-defined]
        absent: list[int] = value.absent  # type: ignore[attr-defined]
        name = item_name or "item"
        self.budget.spend(depth, len(name) + 40)
        out: dict[str, Any] = {
            "$columns": name,
            "count": count,
            "present": count - len(absent),
            "absent": self._absent(absent, depth + 1),
        }
        position = positions(absent)
        out["columns"] = bounded(
            self.budget,
            len(keys),
            zip(keys, value.columns, strict=True),  # type: ignore[attr-defined]
            lambda kc: self._column(kc[0], kc[1], shape, position, out["present"], path, depth + 1),
        )
        return out

    def _field_column(
        self, values: list[Any], annotation: Any, step: str, item: Callable[[int], Path], depth: int
    ) -> list[Any]:
        return bounded(
            self.budget,
            len(values),
            enumerate(values),
            lambda iv: self.node(iv[1], annotation, Path(item(iv[0]), step), depth),
        )

    def _absent(self, absent: list[int], depth: int) -> list[dict[str, int]]:
        """The absent positions as runs of consecutive ones, while the budget lasts."""
        out: list[dict[str, int]] = []
        runs = absent_runs(absent)
        for first, count in runs:
            if self.budget.exhausted:
                out.append(self.budget.omitted(1 + sum(1 for _ in runs)))
                break
            self.budget.spend(depth, 16)
            out.append({"first": first, "count": count})
        return out

    def _column(
        self,
        key: Any,
        column: msgspec.Struct,
        shape: ColumnListShape,
        position: Callable[[int], int],
        present: int,
        path: Path,
        depth: int,
    ) -> dict[str, Any]:
        shown_key = scalar_node(key)
        element = self.names.of_struct(shape.element) if shape.element else "value"
        self.budget.spend(depth, _text_size(shown_key) + len(element) + 24)

        def item(index: int) -> Path:  # where rows would have the value
            return Path(Path(path, position(index)), _Key(key))

        if type(column) is shape.values:
            values: list[Any] = column.values  # type: ignore[attr-defined]
            annotation = shape.value_annotation
            shown = bounded(
                self.budget,
                len(values),
                enumerate(values),
                lambda iv: self.node(iv[1], annotation, item(iv[0]), depth + 1),
            )
            return {"key": shown_key, "$values": element, "values": shown}
        fields: dict[str, Any] = {}
        for index, (attribute, field, annotation) in enumerate(shape.field_columns):
            if self.budget.exhausted:
                fields["$omitted"] = len(shape.field_columns) - index
                self.budget.spent_out = True
                return {"key": shown_key, "$fields": element, "fields": fields}
            of_field: Any = getattr(column, attribute)
            step = f".{field}"
            self.budget.spend(depth + 1, len(step) + 12)
            if of_field is msgspec.UNSET:  # an older schema's message: every item's default
                fields[field] = {"$default": present}
                continue
            fields[field] = self._field_column(of_field, annotation, step, item, depth + 2)
        if shape.element is not None and shape.element.__struct_config__.tag is None:
            # After all its fields, each item's new value is numbered, in item order.
            self._numbered(shape.element).extend(present, item)
        return {"key": shown_key, "$fields": element, "fields": fields}

    def _fields_of(self, cls: type) -> list[tuple[str, Any, str]]:
        spec = self.fields.get(cls)
        if spec is None:
            spec = self.fields[cls] = [
                (f.name, f.type, f".{f.name}") for f in msgspec.structs.fields(cls)
            ]
        return spec

    def _tensor(self, ref: int, path: Path, depth: int) -> dict[str, Any]:
        tensor = self.tensors.tensor(ref)
        dtype, shape = self.tensors.layout(tensor)
        out: dict[str, Any] = {"$tensor": tensor, "dtype": dtype, "shape": shape}
        first = self.first_use.setdefault(tensor, path)
        text = 16 + len(dtype) + 8 * len(shape)
        if first is not path:
            out["again"] = str(first)
            text += len(out["again"])
        self.budget.spend(depth, text)
        return out

    def _back_reference(self, key: Any, index: int, name: str, depth: int) -> dict[str, Any]:
        numbered = self.shared.get(key)
        path = None if numbered is None else numbered.get(index)
        out: dict[str, Any] = {"$ref": name, "index": index}
        if path is not None:  # always, for a message the decoder accepted
            out["to"] = str(path)  # spelled out once per value, then shared
        self.budget.spend(depth, len(name) + len(out.get("to", "")) + 16)
        return out
