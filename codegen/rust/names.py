"""Rust names for schema names: identifiers that are unique where they live and never
shadow what generated code uses.

A schema name is a Python identifier. In Rust it may be a keyword (``type`` becomes the
raw identifier ``r#type``), a keyword no raw identifier can spell (``self``), or the name
of something a generated module refers to (``Option``, ``Tensor``, ``u8``): those get a
trailing underscore, repeated until the name is free. Wire names never change: fields
travel by position and types by their schema name, which the generated code keeps as a
string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mmcodec.codegen import ir
from mmcodec.codegen.rust.source import UNRAWABLE, RustCode, ident

STD_PRELUDE = frozenset(
    [
        "Option",
        "Some",
        "None",
        "Result",
        "Ok",
        "Err",
        "Vec",
        "String",
        "Box",
        "ToString",
        "ToOwned",
        "Clone",
        "Copy",
        "Default",
        "Drop",
        "Eq",
        "PartialEq",
        "Ord",
        "PartialOrd",
        "Hash",
        "Debug",
        "Fn",
        "FnMut",
        "FnOnce",
        "From",
        "Into",
        "TryFrom",
        "TryInto",
        "Iterator",
        "IntoIterator",
        "DoubleEndedIterator",
        "ExactSizeIterator",
        "Extend",
        "FromIterator",
        "AsRef",
        "AsMut",
        "Send",
        "Sync",
        "Sized",
        "Unpin",
        "bool",
        "char",
        "str",
        "u8",
        "u16",
        "u32",
        "u64",
        "u128",
        "usize",
        "i8",
        "i16",
        "i32",
        "i64",
        "i128",
        "isize",
        "f32",
        "f64",
        "std",
        "core",
        "alloc",
        "mmcodec",
    ]
)
"""Names of Rust's prelude, primitive types and crates, which a schema type must not shadow."""

RUNTIME_PRELUDE = frozenset(
    [
        "Cow",
        "PhantomData",
        "Arc",
        "Deref",
        "DerefMut",
        "Message",
        "Bounds",
        "Num",
        "Decode",
        "Decoder",
        "Fields",
        "Fresh",
        "Shared",
        "Struct",
        "StructFields",
        "Tag",
        "Union",
        "Variant",
        "MapKey",
        "IntEnum",
        "StrEnum",
        "Segment",
        "Encode",
        "Encoder",
        "FieldWriter",
        "RefForm",
        "SharedEncode",
        "StructEncode",
        "DecodeError",
        "EncodeError",
        "NestedTensors",
        "Slice",
        "Tensor",
        "IndexMap",
    ]
)
"""What ``use mmcodec::prelude::*`` brings into a generated module."""

MODULE_NAMES = frozenset(
    {"SCHEMA_NAME", "SCHEMA_MAJOR", "Tables", "HasTables", "Tabled", "Context"}
)
"""Items every generated module defines."""

RESERVED_TYPE_NAMES = STD_PRELUDE | RUNTIME_PRELUDE | MODULE_NAMES


def unique(names: Iterable[str], reserved: frozenset[str] = frozenset()) -> dict[str, RustCode]:
    """Each name's Rust identifier, in one namespace: a name that Rust cannot spell or
    that is ``reserved`` gets trailing underscores until no other name has it."""
    names = list(names)
    taken = set(names) | set(reserved)
    out: dict[str, RustCode] = {}
    used: set[str] = set()
    for name in names:
        spelled = name
        if name in UNRAWABLE or name in reserved:
            spelled = name + "_"
            while spelled in taken or spelled in used:
                spelled += "_"
        used.add(spelled)
        out[name] = ident(spelled)
    return out


def bare(name: RustCode) -> str:
    """An identifier without its raw prefix (for names made from it)."""
    return str(name).removeprefix("r#")


def camel(t: ir.TypeExpr, home: str, types: dict[tuple[str, str], RustCode]) -> str:
    """A readable CamelCase name for a union variant of type ``t``."""
    if isinstance(t, ir.Builtin):
        return {"nested_tensors": "NestedTensors"}.get(t.name, t.name.capitalize())
    if isinstance(t, ir.Named):
        own = bare(types[(t.module, t.name)])
        return own if t.module == home else _capital(t.module) + own
    if isinstance(t, ir.ListOf):
        return "List" + camel(t.item, home, types)
    if isinstance(t, ir.VarTupleOf):
        return "Tuple" + camel(t.item, home, types) + "Etc"
    if isinstance(t, ir.TupleOf):
        return "Tuple" + "".join(camel(i, home, types) for i in t.items) + "End"
    if isinstance(t, ir.DictOf):
        return "Dict" + camel(t.key, home, types) + camel(t.value, home, types)
    return "Optional" + camel(t.inner, home, types)


def _capital(snake: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in snake.split("_"))


def upper_camel(name: str) -> str:
    """An identifier in UpperCamelCase, as Rust names enum variants (and prost and heck
    convert them): words split at underscores and where the case changes
    (``NOT_SET`` -> ``NotSet``, ``HTTPServer`` -> ``HttpServer``, ``rgb8`` -> ``Rgb8``)."""
    words = []
    for part in name.split("_"):
        words += _WORD.findall(part)
    return "".join(w[:1].upper() + w[1:].lower() for w in words)


_WORD = re.compile(r"[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+")
"""A word of an identifier: an acronym (``HTTP`` before ``Server``), a capitalised or
lower-case word, digits on their own; digits stay with the word they follow."""


def member_names(enum: ir.EnumDef) -> list[RustCode]:
    """The variants of an enum: its members' names in UpperCamelCase; one that would meet
    another's (``IMAGE`` and ``Image``) or that Rust cannot spell (``Self``) gets its
    member's position, and underscores until it is unique."""
    raw = [upper_camel(m.name) for m in enum.members]
    out: list[RustCode] = []
    used: set[str] = set()
    for index, name in enumerate(raw):
        if raw.count(name) > 1 or name in UNRAWABLE:
            name = f"{name}{index}"
        while name in used or name in raw[index + 1 :]:
            name += "_"
        used.add(name)
        out.append(ident(name))
    return out


def variant_names(
    union: ir.UnionDef, home: str, types: dict[tuple[str, str], RustCode]
) -> list[RustCode]:
    """The enum variants of a union, named after their types (unique: a repeated name
    gets its variant's position)."""
    raw = [camel(v.type, home, types) for v in union.variants]
    out = []
    for index, name in enumerate(raw):
        if raw.count(name) > 1 or name in UNRAWABLE:
            name = f"{name}{index}"
        out.append(ident(name))
    return out
