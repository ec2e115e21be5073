"""A schema file's top level: its name and version, imports, exports and the types it
declares (checked by name here, by body in the modules of each kind).
"""

from __future__ import annotations

import keyword
from pathlib import Path

from mmcodec.codegen import bindings, ir
from mmcodec.codegen.diagnostics import Position
from mmcodec.codegen.load import LoadedFile, Map, Node, Scalar, Seq, load_file
from mmcodec.codegen.validate.context import (
    Context,
    Declared,
    FileInfo,
    display_path,
    optional_str,
    position_of,
    referenced_file,
    required_str,
    unknown_keys,
    value_position,
)
from mmcodec.codegen.validate.names import (
    BINDING,
    FILE_KEYS,
    KINDS,
    MAX_MAJOR,
    MODULE_NAME,
    RESERVED_SCHEMA_NAMES,
    RESERVED_TYPE_NAMES,
    TYPE_KEYS,
    check_type_name,
)


def check_import_cycles(ctx: Context, infos: dict[Path, FileInfo]) -> None:
    """Schema files may not import each other: their modules could not import each other."""
    for path, info in infos.items():
        for name, target in info.imports.items():
            chain = _import_chain(infos, target, path)
            if chain is None:
                continue
            shown = " -> ".join(infos[p].loaded.display_path for p in [path, *chain])
            ctx.error(
                _import_position(info, name),
                f"import cycle {shown}: generated modules cannot import each other",
            )


def _import_chain(infos: dict[Path, FileInfo], start: Path, goal: Path) -> list[Path] | None:
    """The files from ``start`` to ``goal`` along imports (breadth first), if connected."""
    previous: dict[Path, Path | None] = {start: None}
    queue = [start]
    while queue:
        current = queue.pop(0)
        if current == goal:
            chain = [current]
            while (before := previous[chain[-1]]) is not None:
                chain.append(before)
            return chain[::-1]
        info = infos.get(current)
        for target in info.imports.values() if info else ():
            if target not in previous:
                previous[target] = current
                queue.append(target)
    return None


def _import_position(info: FileInfo, name: str) -> Position:
    top = info.loaded.root
    node = top.get("imports") if isinstance(top, Map) else None
    for item in node.items if isinstance(node, Seq) else ():
        if isinstance(item, Scalar) and item.value == name:
            return item.position
    return position_of(info.loaded)


def read_file(ctx: Context, path: Path, root: Path) -> FileInfo | LoadedFile | None:
    display = display_path(path, root)
    if not path.is_file():
        ctx.error(Position(display, 1, 1), "schema file not found")
        return None
    loaded = load_file(path, display, ctx.diagnostics)
    ctx.files[path] = loaded
    top = loaded.root
    if top is None:  # no document (maybe only comments), unless the YAML was malformed
        if not any(d.position.file == display for d in ctx.diagnostics):
            ctx.error(Position(display, 1, 1), "empty schema file")
        return None
    if not isinstance(top, Map):
        ctx.error(top.position, "a schema file is a mapping with keys: " + ", ".join(FILE_KEYS))
        return None
    if bindings.is_bindings_file(top):
        return loaded
    unknown_keys(ctx, top, FILE_KEYS, "schema file")
    module = required_str(ctx, top, "schema", "the schema's name")
    if module is not None and not MODULE_NAME.fullmatch(module):
        ctx.error(
            value_position(top, "schema"),
            f"schema name {module!r} must be a lowercase Python module name",
        )
    elif module is not None and keyword.iskeyword(module):
        ctx.error(value_position(top, "schema"), f"schema name {module!r} is a Python keyword")
    elif module in RESERVED_SCHEMA_NAMES:
        ctx.error(
            value_position(top, "schema"),
            f"schema name {module!r} would shadow a name the generated modules use (_{module})",
        )
    major = 0
    version = top.get("version")
    if version is None:
        ctx.error(top.position, "missing key 'version' (the schema's major version, an int)")
    elif not (isinstance(version, Scalar) and type(version.value) is int and version.value >= 0):
        ctx.error(version.position, "'version' must be a non-negative int")
    elif version.value > MAX_MAJOR:
        ctx.error(
            version.position, f"'version' must be at most {MAX_MAJOR} (it travels as an int64)"
        )
    else:
        major = version.value
    doc = optional_str(ctx, top, "doc") or ""
    imports: dict[str, Path] = {}
    imports_node = top.get("imports")
    if imports_node is not None:
        if not isinstance(imports_node, Seq):
            ctx.error(imports_node.position, "'imports' must be a list of schema file paths")
        else:
            for item in imports_node.items:
                if not (isinstance(item, Scalar) and isinstance(item.value, str)):
                    ctx.error(item.position, "an import is a path to a schema file")
                    continue
                target = referenced_file(path.parent, item.value, root)
                if isinstance(target, str):
                    ctx.error(item.position, f"imported schema file {item.value!r} {target}")
                    continue
                if target == path:
                    ctx.error(item.position, "a schema file cannot import itself")
                    continue
                imports[item.value] = target
    declared: dict[str, Declared] = {}
    types = top.get("types")
    if types is None:
        ctx.error(top.position, "missing key 'types'")
    elif not isinstance(types, Map):
        ctx.error(types.position, "'types' must be a mapping of type names to definitions")
    else:
        for key, body in types.entries:
            decl = declare(ctx, key, body)
            if decl is not None:
                declared[decl.name] = decl
    exports = _read_exports(ctx, top, declared)
    if module is None:
        return None
    return FileInfo(loaded, module, major, doc, imports, declared, exports)


def _read_exports(ctx: Context, top: Map, declared: dict[str, Declared]) -> tuple[ir.Binding, ...]:
    """Names of existing classes or helpers that the generated module re-exports."""
    node = top.get("exports")
    if node is None:
        return ()
    if not isinstance(node, Seq):
        ctx.error(node.position, "'exports' must be a list of import paths ('package.module.Name')")
        return ()
    found: dict[str, ir.Binding] = {}
    for item in node.items:
        path = item.value if isinstance(item, Scalar) else None
        if (
            not isinstance(path, str)
            or not BINDING.fullmatch(path)
            or any(keyword.iskeyword(part) for part in path.split("."))
        ):
            shown = repr(path) if isinstance(path, str) else "value"
            ctx.error(item.position, f"malformed export {shown}: expected 'package.module.Name'")
            continue
        module, _, name = path.rpartition(".")
        if name in found:
            ctx.error(item.position, f"export {name!r} is listed twice")
            continue
        if name in declared or name in RESERVED_TYPE_NAMES or name.startswith("_"):
            ctx.error(item.position, f"export {name!r} would shadow a type or a generated name")
            continue
        found[name] = ir.Binding(module, name)
    return tuple(found.values())


def declare(ctx: Context, key: Scalar, body: Node) -> Declared | None:
    name = str(key.value)
    ok = check_type_name(ctx, name, key.position)
    if not isinstance(body, Map):
        ctx.error(body.position, f"type {name!r} must be a mapping with one of: {', '.join(KINDS)}")
        return None
    suggested = unknown_keys(ctx, body, TYPE_KEYS, f"type {name!r}")
    kinds = [k for k in KINDS if body.get(k) is not None]
    misspelt = [k for k in KINDS if k in suggested]
    if not kinds and misspelt:
        # Already reported; check the body as the kind it was meant to be, so that
        # uses of the type are not reported as unknown too.
        meant = body.get(suggested[misspelt[0]])
        assert meant is not None
        return Declared(name, misspelt[0], meant, body, key.position) if ok else None
    if len(kinds) != 1:
        what = "none" if not kinds else " and ".join(kinds)
        ctx.error(
            body.position,
            f"type {name!r} needs exactly one of {', '.join(KINDS)} (found {what})",
        )
        return None
    if not ok:
        return None
    kind_body = body.get(kinds[0])
    assert kind_body is not None
    return Declared(name, kinds[0], kind_body, body, key.position)
