"""The validation stage end to end: files (and their imports) -> checked IR modules."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from mmcodec.codegen import bindings, ir
from mmcodec.codegen.diagnostics import SchemaErrors
from mmcodec.codegen.load import LoadedFile, Map
from mmcodec.codegen.validate.checks import (
    check_base_cases,
    check_mapping_cycles,
    check_python_identities,
    check_struct_tags,
)
from mmcodec.codegen.validate.context import Context, FileInfo, optional_str, position_of
from mmcodec.codegen.validate.enums import lower_enum
from mmcodec.codegen.validate.files import check_import_cycles, read_file
from mmcodec.codegen.validate.mappings import lower_mapping
from mmcodec.codegen.validate.names import lower_binding
from mmcodec.codegen.validate.structs import lower_struct
from mmcodec.codegen.validate.types import Scope
from mmcodec.codegen.validate.unions import lower_union


def compile_schemas(paths: Iterable[Path], root: Path) -> list[ir.Module]:
    """Validate the schema files (and what they import); return their IR modules.

    Raises :class:`SchemaErrors` with every diagnostic found.
    """
    ctx = Context([])
    infos: dict[Path, FileInfo] = {}
    pending = [p.resolve() for p in paths]
    bindings_files: dict[Path, LoadedFile] = {}
    while pending:
        path = pending.pop(0)
        if path in infos or path in bindings_files:
            continue
        info = read_file(ctx, path, root)
        if isinstance(info, LoadedFile):  # a bindings file: lowered once its schema is
            bindings_files[path] = info
            pending.extend(bindings.schema_paths(info, root))
            continue
        if info is None:
            continue
        infos[path] = info
        pending.extend(p for p in info.imports.values() if p not in infos)
    check_import_cycles(ctx, infos)
    by_module: dict[str, FileInfo] = {}
    for info in infos.values():
        if info.module in by_module:
            other = by_module[info.module].loaded.display_path
            ctx.error(
                position_of(info.loaded), f"schema name {info.module!r} is also used by {other}"
            )
        by_module.setdefault(info.module, info)
    modules = [_lower_file(ctx, info, infos) for info in infos.values()]
    if ctx.diagnostics:
        raise SchemaErrors(ctx.diagnostics, ctx.sources())
    check_struct_tags(ctx, modules, infos)
    check_base_cases(ctx, modules, infos)
    check_mapping_cycles(ctx, modules, infos)
    check_python_identities(ctx, modules, infos)
    by_source = {info.loaded.path: m for info, m in zip(infos.values(), modules, strict=True)}
    for loaded in bindings_files.values():
        bound = bindings.lower_bindings(ctx.diagnostics, loaded, by_source, modules, root)
        if bound is not None:
            modules.append(bound)
    if ctx.diagnostics:
        raise SchemaErrors(ctx.diagnostics, ctx.sources())
    return sorted(modules, key=lambda m: m.python_name)


def _lower_file(ctx: Context, info: FileInfo, infos: dict[Path, FileInfo]) -> ir.Module:
    scope = Scope(info, {p: i for p, i in infos.items()})
    types: list[ir.TypeDef] = []
    for decl in info.declared.values():
        binding = lower_binding(ctx, decl)
        doc = optional_str(ctx, decl.node, "doc") or ""
        if decl.kind == "struct":
            types.append(lower_struct(ctx, scope, decl, doc, binding))
        elif decl.kind == "union":
            union = lower_union(ctx, scope, decl, doc, binding)
            if union is not None:
                types.append(union)
        elif decl.kind == "enum":
            enum = lower_enum(ctx, decl, doc, binding)
            if enum is not None:
                types.append(enum)
        else:
            mapping = lower_mapping(ctx, scope, decl, doc, binding)
            if mapping is not None:
                types.append(mapping)
    used_modules = sorted({infos[p].module for p in info.imports.values() if p in infos})
    top = info.loaded.root
    version = top.get("version") if isinstance(top, Map) else None
    return ir.Module(
        name=info.module,
        major=info.major,
        doc=info.doc,
        source=info.loaded.display_path,
        sha256=hashlib.sha256(info.loaded.text.encode("utf-8")).hexdigest(),
        imports=tuple(used_modules),
        types=tuple(types),
        exports=info.exports,
        version_position=version.position if version is not None else None,
    )
