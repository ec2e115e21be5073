"""The schema language's vocabulary: the keys each part of a file takes, and the rules
for names (identifiers, reserved names, import paths of bound classes).
"""

from __future__ import annotations

import builtins
import keyword
import re

from mmcodec.codegen import ir
from mmcodec.codegen.diagnostics import Position
from mmcodec.codegen.load import Scalar
from mmcodec.codegen.validate.context import Context, Declared

FILE_KEYS = ("schema", "version", "doc", "imports", "exports", "types")
TYPE_KEYS = ("doc", "bind", "struct", "union", "mapping", "enum")
KINDS = ("struct", "union", "mapping", "enum")
FIELD_KEYS = (
    "type",
    "default",
    "doc",
    "ge",
    "gt",
    "le",
    "lt",
    "min_length",
    "max_length",
    "pattern",
)
VARIANT_KEYS = ("tag", "type", "doc")
MEMBER_KEYS = ("value", "doc")
MAPPING_KEYS = ("key", "value")
GENERICS = {"list": 1, "tuple": None, "dict": 2, "optional": 1}

# Module-level names every generated module defines or imports: a type may not take them.
RESERVED_TYPE_NAMES = frozenset(
    {
        "encode",
        "decode",
        "encode_bytes",
        "decode_bytes",
        "DecodeError",
        "EncodeError",
        "Limits",
        "DEFAULT_LIMITS",
        "SCHEMA",
        "SCHEMA_NAME",
        "SCHEMA_MAJOR",
        "msgspec",
        "torch",
        "annotations",
        "Any",
        "Annotated",
        "TypeAlias",
        "TypeVar",
        "Sequence",
        "T",
        *ir.BUILTINS,
        *GENERICS,
        "None",
        "object",
        "type",
        "bytearray",
        "memoryview",
    }
)
# A schema named "b" would be imported by others as `_b`, the runtime helpers' alias.
MAX_MAJOR = (1 << 63) - 1
"""A schema's major version travels in every envelope as an int64."""
RESERVED_SCHEMA_NAMES = frozenset({"b", "codec", "wire"})
IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
MODULE_NAME = re.compile(r"[a-z][a-z0-9_]*")
NUMERIC = frozenset({"int", "float"})
SIZED = frozenset({"str", "bytes"})


def check_type_name(ctx: Context, name: str, position: Position) -> bool:
    if not IDENTIFIER.fullmatch(name):
        ctx.error(position, f"type name {name!r} must be an identifier starting with a letter")
        return False
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        ctx.error(position, f"type name {name!r} is a Python keyword")
        return False
    if name in RESERVED_TYPE_NAMES:
        ctx.error(position, f"type name {name!r} would shadow a name the generated module uses")
        return False
    if hasattr(builtins, name):  # generated code calls id(), len(), isinstance(), ...
        ctx.error(position, f"type name {name!r} would shadow the Python builtin {name!r}")
        return False
    return True


BINDING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def lower_binding(ctx: Context, decl: Declared) -> ir.Binding | None:
    node = decl.node.get("bind")
    if node is None:
        return None
    if not (isinstance(node, Scalar) and isinstance(node.value, str)):
        ctx.error(node.position, "'bind' must be an import path such as 'package.module.Class'")
        return None
    path = node.value
    if not BINDING.fullmatch(path) or any(keyword.iskeyword(p) for p in path.split(".")):
        ctx.error(
            node.position,
            f"malformed binding {path!r}: expected an import path such as 'package.module.Class'",
        )
        return None
    module, _, qualname = path.rpartition(".")
    return ir.Binding(module, qualname)
