"""Checks that need every file lowered first: struct tags, base cases of recursion,
mapping cycles, and types that would be the same Python object.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mmcodec.codegen import ir
from mmcodec.codegen.validate.context import Context, FileInfo
from mmcodec.codegen.validate.types import render_type


def check_struct_tags(ctx: Context, modules: list[ir.Module], infos: dict[Path, FileInfo]) -> None:
    """Give each struct that is a union variant its tag; one struct, one tag."""
    decl_pos = {
        (info.module, d.name): d.position for info in infos.values() for d in info.declared.values()
    }
    for index, module in enumerate(modules):
        tags: dict[str, tuple[int | str, str]] = {}
        for t in module.types:
            if not isinstance(t, ir.UnionDef):
                continue
            for v in t.variants:
                if isinstance(v.type, ir.Named) and v.type.module == module.name:
                    previous = tags.get(v.type.name)
                    if previous is not None and previous[0] != v.tag:
                        ctx.error(
                            decl_pos[(module.name, t.name)],
                            f"struct {v.type.name!r} is a variant of {previous[1]!r} with tag "
                            f"{previous[0]!r} and of {t.name!r} with tag {v.tag!r}; a struct "
                            "has one tag on the wire",
                        )
                    tags.setdefault(v.type.name, (v.tag, t.name))
        new_types = tuple(
            _with_tag(t, tags[t.name][0]) if isinstance(t, ir.StructDef) and t.name in tags else t
            for t in module.types
        )
        modules[index] = replace(module, types=new_types)


def _with_tag(t: ir.StructDef, tag: int | str) -> ir.StructDef:
    return ir.StructDef(t.name, t.doc, t.binding, t.fields, tag, t.position)


def check_base_cases(ctx: Context, modules: list[ir.Module], infos: dict[Path, FileInfo]) -> None:
    """A recursive type needs a way to stop: some value of it must not contain itself."""
    defs = {(m.name, t.name): t for m in modules for t in m.types}
    finite: set[tuple[str, str]] = set()

    def is_finite(t: ir.TypeExpr) -> bool:
        if isinstance(t, ir.Named):
            return (t.module, t.name) in finite
        if isinstance(t, ir.TupleOf):
            return all(is_finite(i) for i in t.items)
        return True  # builtins; lists, tuples[T, ...], dicts and optionals can be empty

    changed = True
    while changed:
        changed = False
        for key, t in defs.items():
            if key in finite:
                continue
            if isinstance(t, ir.StructDef):
                ok = all(is_finite(f.type) for f in t.fields)
            elif isinstance(t, ir.UnionDef):
                ok = any(is_finite(v.type) for v in t.variants)
            else:
                ok = True
            if ok:
                finite.add(key)
                changed = True
    decl_pos = {
        (info.module, d.name): d.position for info in infos.values() for d in info.declared.values()
    }
    for key in sorted(set(defs) - finite):
        ctx.error(
            decl_pos[key],
            f"recursive type {key[1]!r} has no base case: every value would contain another one "
            "(make a field optional or a list)",
        )


def check_mapping_cycles(
    ctx: Context, modules: list[ir.Module], infos: dict[Path, FileInfo]
) -> None:
    """A mapping may not hold itself through containers and mappings alone.

    Its wire form is a plain ``dict`` type, and msgspec resolves recursion only
    through Structs: a struct or union has to sit somewhere on the cycle.
    """
    mappings = {
        (m.name, t.name): t for m in modules for t in m.types if isinstance(t, ir.MappingDef)
    }

    def reached(t: ir.TypeExpr) -> list[tuple[str, str]]:
        if isinstance(t, ir.Named):
            return [(t.module, t.name)] if (t.module, t.name) in mappings else []
        if isinstance(t, (ir.ListOf, ir.VarTupleOf)):
            return reached(t.item)
        if isinstance(t, ir.TupleOf):
            return [k for i in t.items for k in reached(i)]
        if isinstance(t, ir.DictOf):
            return reached(t.value)
        if isinstance(t, ir.OptionalOf):
            return reached(t.inner)
        return []

    decl_pos = {
        (info.module, d.name): d.position for info in infos.values() for d in info.declared.values()
    }
    for start in sorted(mappings):
        stack, seen = list(reached(mappings[start].value)), set()
        while stack:
            key = stack.pop()
            if key == start:
                ctx.error(
                    decl_pos[start],
                    f"mapping {start[1]!r} contains itself through mappings and containers "
                    "alone; put a struct or union on the cycle (msgspec cannot decode a "
                    "recursive dict type)",
                )
                break
            if key not in seen:
                seen.add(key)
                stack.extend(reached(mappings[key].value))


def check_python_identities(
    ctx: Context, modules: list[ir.Module], infos: dict[Path, FileInfo]
) -> None:
    """Two named types of a module may not be the same Python object.

    ``encode(obj, type=T)`` and ``decode(frames, T)`` find a type by its Python object.
    An unbound union is an alias (``int | str``), equal to any other union of the same
    variants in any order; a union of one variant is that variant itself; two types bound
    to one class are that class.
    """
    decl_pos = {
        (info.module, d.name): d.position for info in infos.values() for d in info.declared.values()
    }
    for module in modules:
        by_name = {t.name: t for t in module.types}
        seen: dict[object, str] = {}
        for t in module.types:
            key = python_identity(module.name, by_name, t)
            if key in seen:
                ctx.error(
                    decl_pos[(module.name, t.name)],
                    f"type {t.name!r} is the same Python object as {seen[key]!r}, so "
                    "encode(type=...) and decode(..., type) could not tell them apart "
                    "(a union is the union of its variants' classes; a one-variant union "
                    "is its variant)",
                )
            seen.setdefault(key, t.name)


def python_identity(module: str, by_name: dict[str, ir.TypeDef], t: ir.TypeDef) -> object:
    """A key equal for two types exactly when their Python objects are equal."""
    if t.binding is not None:
        return ("class", t.binding.module, t.binding.qualname)
    if not isinstance(t, ir.UnionDef):
        return ("class", module, t.name)
    keys: set[object] = set()
    for v in t.variants:
        if isinstance(v.type, ir.Named) and v.type.module == module and v.type.name in by_name:
            keys.add(python_identity(module, by_name, by_name[v.type.name]))
        elif isinstance(v.type, ir.Named):
            keys.add(("imported", v.type.module, v.type.name))
        else:
            keys.add(("type", render_type(v.type)))
    return next(iter(keys)) if len(keys) == 1 else frozenset(keys)
