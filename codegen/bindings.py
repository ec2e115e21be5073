"""Bindings files: a second Python binding of a schema's wire, declared beside the schema.

A bindings file names the schema file it binds and the module it generates, and says
for every named type of that schema which existing class the module builds and reads
(or ``generated`` for a class of its own). It cannot declare or change a type, so the
module it produces speaks exactly the schema's wire: same schema name and major
version, same tags and field order. Only the Python classes differ::

    bindings: multimodal_vllm      # the generated module's name
    schema: multimodal.yaml        # the schema file it binds (relative to this file)
    doc: ...
    bind:
      BatchedField: vllm.multimodal.inputs.MultiModalBatchedField
      FlatSlice: generated
    exports:
      - vllm.multimodal.inputs.MultiModalFieldConfig

The schema's own ``bind:`` entries and ``exports`` do not carry over: the bindings
file lists every type, so a type added to the schema later is an error here until the
binding decides about it.
"""

from __future__ import annotations

import hashlib
import keyword
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeAlias

from mmcodec.codegen import ir
from mmcodec.codegen.diagnostics import Diagnostic, Position
from mmcodec.codegen.load import LoadedFile, Map, Scalar
from mmcodec.codegen.validate.checks import python_identity
from mmcodec.codegen.validate.context import closest, did_you_mean, referenced_file
from mmcodec.codegen.validate.names import (
    BINDING,
    MODULE_NAME,
    RESERVED_SCHEMA_NAMES,
    RESERVED_TYPE_NAMES,
)

BINDINGS_KEYS = ("bindings", "schema", "doc", "bind", "exports")
_Error: TypeAlias = Callable[..., None]
"""``error(position, message, hint="")``."""
GENERATED = "generated"
"""The ``bind:`` value for a type that gets a generated class in the bound module."""


def is_bindings_file(top: Map) -> bool:
    """A bindings file is told apart from a schema file by its ``bindings`` key."""
    return top.get("bindings") is not None


def schema_paths(loaded: LoadedFile, root: Path) -> list[Path]:
    """The schema file a bindings file names, to be compiled with it (if it names one
    that may be read: see :func:`~mmcodec.codegen.validate.context.referenced_file`)."""
    top = loaded.root
    node = top.get("schema") if isinstance(top, Map) else None
    if isinstance(node, Scalar) and isinstance(node.value, str):
        target = referenced_file(loaded.path.parent, node.value, root)
        if isinstance(target, Path):
            return [target]
    return []


def lower_bindings(
    diagnostics: list[Diagnostic],
    loaded: LoadedFile,
    schemas: dict[Path, ir.Module],
    modules: list[ir.Module],
    root: Path,
) -> ir.Module | None:
    """The bound module: the schema's module with this file's classes, name and exports.

    ``schemas`` maps each compiled schema file to its module; ``modules`` are all the
    modules compiled so far (their Python names must differ from this one's).
    """
    top = loaded.root
    assert isinstance(top, Map)
    errors_before = len(diagnostics)

    def error(position: Position, message: str, hint: str = "") -> None:
        diagnostics.append(Diagnostic(position, message, hint))

    for key, _ in top.entries:
        name = str(key.value)
        if name == "types":
            error(
                key.position,
                "a bindings file cannot declare types (it may not change the wire); "
                "change the schema it binds instead",
            )
        elif name not in BINDINGS_KEYS:
            hint = did_you_mean(name, BINDINGS_KEYS)
            error(key.position, f"unknown key {name!r} in bindings file", hint)
    python_name = _module_name(error, top, modules)
    schema = _bound_schema(error, loaded, top, schemas, root)
    doc = _string(error, top, "doc")
    bind = top.get("bind")
    if schema is None:
        return None
    classes: dict[str, ir.Binding | None] = {}
    if not isinstance(bind, Map):
        error(
            bind.position if bind is not None else top.position,
            "'bind' must map every type of the schema to a class ('package.module.Class') "
            f"or {GENERATED!r}",
        )
    else:
        classes = _classes(error, bind, schema)
    exports = _exports(error, top, schema)
    if len(diagnostics) > errors_before or python_name is None:
        return None
    types = tuple(replace(t, binding=classes[t.name]) for t in schema.types)
    module = replace(
        schema,
        python_name=python_name,
        doc=doc or schema.doc,
        source=loaded.display_path,
        sha256=hashlib.sha256((loaded.text + "\0" + schema.sha256).encode("utf-8")).hexdigest(),
        types=types,
        exports=exports,
    )
    _check_identities(error, bind if isinstance(bind, Map) else None, module)
    return None if len(diagnostics) > errors_before else module


def _module_name(error: _Error, top: Map, modules: list[ir.Module]) -> str | None:
    node = top.get("bindings")
    value = node.value if isinstance(node, Scalar) else None
    position = node.position if node is not None else top.position
    if not isinstance(value, str) or not MODULE_NAME.fullmatch(value):
        error(position, "'bindings' is the generated module's name, a lowercase Python name")
        return None
    if keyword.iskeyword(value) or value in RESERVED_SCHEMA_NAMES:
        error(position, f"module name {value!r} is reserved")
        return None
    for other in modules:
        if other.python_name == value:
            error(position, f"module name {value!r} is also generated from {other.source}")
            return None
    return value


def _bound_schema(
    error: _Error, loaded: LoadedFile, top: Map, schemas: dict[Path, ir.Module], root: Path
) -> ir.Module | None:
    node = top.get("schema")
    if not (isinstance(node, Scalar) and isinstance(node.value, str)):
        error(
            node.position if node is not None else top.position,
            "'schema' names the schema file this file binds (a path relative to it)",
        )
        return None
    target = referenced_file(loaded.path.parent, node.value, root)
    if isinstance(target, str):
        error(node.position, f"bound schema {node.value!r} {target}")
        return None
    schema = schemas.get(target)
    if schema is None:
        error(node.position, f"bound schema {node.value!r} is not a schema file")
    return schema


def _string(error: _Error, top: Map, key: str) -> str:
    node = top.get(key)
    if node is None:
        return ""
    if not (isinstance(node, Scalar) and isinstance(node.value, str)):
        error(node.position, f"{key!r} must be a string")
        return ""
    return node.value.strip()


def _classes(error: _Error, bind: Map, schema: ir.Module) -> dict[str, ir.Binding | None]:
    """Each type's class (None: generated); every type named exactly once."""
    names = [t.name for t in schema.types]
    classes: dict[str, ir.Binding | None] = {}
    used: dict[str, str] = {}
    meant: set[str] = set()  # types a misspelt entry was meant for: not missing as well
    for key, node in bind.entries:
        name = str(key.value)
        if name not in names:
            close = closest(name, names)
            hint = f"did you mean {close!r}?" if close else ""
            error(key.position, f"schema {schema.name!r} has no type {name!r}", hint)
            meant.update([close] if close else [])
            continue
        value = node.value if isinstance(node, Scalar) else None
        if value == GENERATED:
            classes[name] = None
            continue
        binding = _import_path(value)
        if binding is None:
            error(
                node.position,
                f"{name}: expected an import path such as 'package.module.Class' or {GENERATED!r}",
            )
            continue
        path = f"{binding.module}.{binding.qualname}"
        if path in used:
            error(node.position, f"{name}: {path} is already bound to {used[path]!r}")
            continue
        used[path] = name
        classes[name] = binding
    listed = {str(k.value) for k, _ in bind.entries}
    missing = [n for n in names if n not in listed and n not in meant]
    if missing:
        error(
            bind.position,
            f"'bind' misses {', '.join(missing)}: name a class or {GENERATED!r} for every type "
            f"of schema {schema.name!r}",
        )
    return classes


def _import_path(value: object) -> ir.Binding | None:
    if (
        not isinstance(value, str)
        or not BINDING.fullmatch(value)
        or any(keyword.iskeyword(part) for part in value.split("."))
    ):
        return None
    module, _, name = value.rpartition(".")
    return ir.Binding(module, name)


def _exports(error: _Error, top: Map, schema: ir.Module) -> tuple[ir.Binding, ...]:
    node = top.get("exports")
    if node is None:
        return ()
    items = getattr(node, "items", None)
    if items is None:
        error(node.position, "'exports' must be a list of import paths ('package.module.Name')")
        return ()
    taken = {t.name for t in schema.types} | RESERVED_TYPE_NAMES
    found: dict[str, ir.Binding] = {}
    for item in items:
        binding = _import_path(item.value if isinstance(item, Scalar) else None)
        if binding is None:
            error(item.position, "malformed export: expected 'package.module.Name'")
        elif binding.qualname in found:
            error(item.position, f"export {binding.qualname!r} is listed twice")
        elif binding.qualname in taken or binding.qualname.startswith("_"):
            error(
                item.position,
                f"export {binding.qualname!r} would shadow a type or a generated name",
            )
        else:
            found[binding.qualname] = binding
    return tuple(found.values())


def _check_identities(error: _Error, bind: Map | None, module: ir.Module) -> None:
    """``encode(type=T)`` finds a type by its Python object: no two may be the same one."""
    by_name = {t.name: t for t in module.types}
    seen: dict[object, str] = {}
    for t in module.types:
        key = python_identity(module.name, by_name, t)
        if key in seen:
            node = bind.get(t.name) if bind is not None else None
            error(
                node.position if node is not None else Position(module.source, 1, 1),
                f"type {t.name!r} would be the same Python object as {seen[key]!r} "
                "(a one-variant union is its variant; a union the union of its variants)",
            )
        seen.setdefault(key, t.name)
