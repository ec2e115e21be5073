"""Enum declarations: named members, each with the value that travels for it.

::

    Modality:
      doc: The kind of an input item.
      enum:
        IMAGE: image
        AUDIO: {value: audio, doc: Raw waveforms.}

Values are ints (in int64) or non-empty strings, one kind per enum, each used once.
Member names are identifiers that the generated ``IntEnum``/``StrEnum`` can hold: no
leading underscore, no keyword, nothing its base class already defines (``str.count``,
``int.real``, ``Enum.name``), which a member would shadow.
"""

from __future__ import annotations

import enum
import keyword

from mmcodec.codegen import ir
from mmcodec.codegen.diagnostics import Position
from mmcodec.codegen.load import Map, Node, Scalar
from mmcodec.codegen.validate.context import Context, Declared, optional_str, unknown_keys
from mmcodec.codegen.validate.names import IDENTIFIER, MEMBER_KEYS

INT64 = (-(1 << 63), (1 << 63) - 1)
KIND_NAMES = {int: "an int", str: "a str"}
_BASES: dict[type, type] = {int: enum.IntEnum, str: enum.StrEnum}


def _taken(base: type) -> frozenset[str]:
    """Names a member of an enum on ``base`` may not have: what the class already has
    (methods of int or str, Enum's ``name`` and ``value``), and ``mro``, which Enum refuses."""
    return frozenset(n for n in dir(base) if not n.startswith("_")) | {"mro", "name", "value"}


TAKEN = {kind: _taken(base) for kind, base in _BASES.items()}


def lower_enum(
    ctx: Context, decl: Declared, doc: str, binding: ir.Binding | None
) -> ir.EnumDef | None:
    body = decl.body
    if not isinstance(body, Map) or not body.entries:
        ctx.error(
            body.position,
            f"enum {decl.name!r} has no members",
            "'enum' maps member names to their values, e.g. {IMAGE: 0, AUDIO: 1}",
        )
        return None
    members: list[ir.EnumMember] = []
    by_value: dict[int | str, tuple[str, Position]] = {}
    first: tuple[type, str, Position] | None = None
    mixed = False
    for key, spec in body.entries:
        name = _member_name(ctx, decl.name, key)
        found = _member_value(ctx, decl.name, key, spec)
        if found is None:
            continue
        value, value_node, member_doc = found
        if value in by_value:
            other, where = by_value[value]
            ctx.error(
                value_node.position,
                f"enum {decl.name!r}: value {value!r} of {str(key.value)!r} is also the value of "
                f"{other!r} (at {where})",
                "each member needs a value of its own",
            )
            continue
        by_value[value] = (str(key.value), value_node.position)
        if first is None:
            first = (type(value), str(key.value), value_node.position)
        elif type(value) is not first[0] and not mixed:
            mixed = True
            ctx.error(
                value_node.position,
                f"enum {decl.name!r} mixes int and str values: {str(key.value)!r} is "
                f"{value!r}, {KIND_NAMES[type(value)]}, but {first[1]!r} (at {first[2]}) is "
                f"{KIND_NAMES[first[0]]}",
                "an enum's values are all ints or all strings",
            )
        if name is not None:
            members.append(ir.EnumMember(name, value, member_doc, key.position))
    if first is not None and not mixed:
        _check_shadowing(ctx, decl.name, body, first[0])
    if not members:
        return None
    return ir.EnumDef(decl.name, doc, binding, tuple(members), decl.position)


def _member_name(ctx: Context, enum_name: str, key: Scalar) -> str | None:
    name = key.value
    if not isinstance(name, str):
        # YAML 1.1 reads yes/no/on/off/true/false as bools, null and ~ as None.
        written = ctx.written(key.position) or repr(name)
        read = "null" if name is None else str(name).lower()
        ctx.error(
            key.position,
            f"enum {enum_name!r}: member name {written} is read by YAML as {read}, not a name",
            f'quote it: "{written}"',
        )
        return None
    if not IDENTIFIER.fullmatch(name):
        ctx.error(
            key.position,
            f"enum {enum_name!r}: member name {name!r} must be an identifier starting with a "
            "letter",
        )
        return None
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        ctx.error(key.position, f"enum {enum_name!r}: member name {name!r} is a Python keyword")
        return None
    return name


def _member_value(
    ctx: Context, enum_name: str, key: Scalar, spec: Node
) -> tuple[int | str, Node, str] | None:
    """A member's value, the node that holds it, and its doc; None once reported."""
    doc = ""
    node = spec
    if isinstance(spec, Map):
        suggested = unknown_keys(ctx, spec, MEMBER_KEYS, f"member {enum_name}.{key.value}")
        doc = optional_str(ctx, spec, "doc") or ""
        found = spec.get("value")
        if found is None:
            if "value" not in suggested:
                ctx.error(
                    spec.position,
                    f"enum {enum_name!r}: member {str(key.value)!r} needs a 'value'",
                )
            return None
        node = found
    value = node.value if isinstance(node, Scalar) else None
    if type(value) is int and INT64[0] <= value <= INT64[1]:
        return value, node, doc
    if type(value) is str and value:
        return value, node, doc
    if type(value) is int:
        problem = f"{value} does not fit in 64 bits (int64)"
    elif isinstance(value, bool):
        problem = f"{str(value).lower()} is a bool, not an int"
    elif value == "":
        problem = "the empty string"
    elif isinstance(node, Scalar) and value is not None:
        problem = f"{value!r} is neither an int nor a string"
    else:
        problem = "missing" if isinstance(node, Scalar) else "not a single value"
    ctx.error(
        node.position,
        f"enum {enum_name!r}: value of {str(key.value)!r}: {problem}",
        "a member's value is an int (int64) or a non-empty string",
    )
    return None


def _check_shadowing(ctx: Context, enum_name: str, body: Map, kind: type) -> None:
    """A member named like an attribute of the generated class's base would replace it:
    ``Color.count`` a member, ``Color.RED.count("x")`` a call of that member."""
    base = _BASES[kind]
    for key, _ in body.entries:
        name = key.value
        if isinstance(name, str) and name in TAKEN[kind]:
            ctx.error(
                key.position,
                f"enum {enum_name!r}: member name {name!r} would shadow {base.__name__}'s {name!r}",
                f"rename it, e.g. {name.upper()!r}",
            )


def member_values(decl: Declared) -> dict[str, int | str]:
    """Each member's value as written, read without checking (its enum's own lowering
    reports what is wrong): what a field's default may name."""
    body = decl.body
    if not isinstance(body, Map):
        return {}
    out: dict[str, int | str] = {}
    for key, spec in body.entries:
        node = spec.get("value") if isinstance(spec, Map) else spec
        value = node.value if isinstance(node, Scalar) else None
        if isinstance(key.value, str) and (type(value) is int or type(value) is str):
            out[key.value] = value
    return out
