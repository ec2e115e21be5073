"""Is a new version of a schema wire-compatible with the old one?

Within one major version a schema may only grow: fields appended at the end of a
struct, each with a default; union variants added with new tags; new types. Then
old and new codecs read each other's messages (msgspec fills appended fields from
their defaults and ignores trailing fields it does not know). Anything else needs
a new major version, which makes old and new codecs reject each other's messages.
Note that a struct that becomes a union variant gains a tag, so its own wire form
changes: add a new struct as a new variant instead.
"""

from __future__ import annotations

from mmcodec.codegen import ir
from mmcodec.codegen.validate import render_type


def breaking_changes(old: list[ir.Module], new: list[ir.Module]) -> list[str]:
    """One line per incompatible change from ``old`` to ``new`` (empty when compatible)."""
    problems: list[str] = []
    # By Python name: a bindings module (same wire as its schema, other classes) is
    # compared with its own older version, and removing one is a removal too.
    new_by_name = {m.python_name: m for m in new}
    for old_module in old:
        new_module = new_by_name.get(old_module.python_name)
        where = old_module.source
        if new_module is None:
            what = "schema" if old_module.python_name == old_module.name else "binding"
            problems.append(f"{where}: {what} {old_module.python_name!r} was removed")
            continue
        if new_module.major != old_module.major:
            continue  # a new major version may change anything; decoders tell them apart
        new_types = {t.name: t for t in new_module.types}
        for old_type in old_module.types:
            new_type = new_types.get(old_type.name)
            prefix = f"{new_module.source}: {old_type.name}"
            if new_type is None:
                problems.append(f"{prefix}: type was removed")
            elif type(new_type) is not type(old_type):
                problems.append(f"{prefix}: changed from {_kind(old_type)} to {_kind(new_type)}")
            else:
                problems.extend(f"{prefix}{p}" for p in _compare(old_type, new_type))
    return problems


def _kind(t: ir.TypeDef) -> str:
    return {ir.StructDef: "struct", ir.UnionDef: "union", ir.MappingDef: "mapping"}[type(t)]


def _compare(old: ir.TypeDef, new: ir.TypeDef) -> list[str]:
    if isinstance(old, ir.StructDef) and isinstance(new, ir.StructDef):
        return _compare_structs(old, new)
    if isinstance(old, ir.UnionDef) and isinstance(new, ir.UnionDef):
        return _compare_unions(old, new)
    assert isinstance(old, ir.MappingDef) and isinstance(new, ir.MappingDef)
    before = (render_type(old.key), render_type(old.value))
    after = (render_type(new.key), render_type(new.value))
    return [] if before == after else [f": mapping changed from {before} to {after}"]


def _compare_structs(old: ir.StructDef, new: ir.StructDef) -> list[str]:
    problems = []
    if old.tag != new.tag:
        problems.append(f": tag changed from {old.tag!r} to {new.tag!r}")
    for index, old_field in enumerate(old.fields):
        if index >= len(new.fields):
            problems.append(f".{old_field.name}: field was removed")
            continue
        new_field = new.fields[index]  # names do not travel: a rename is compatible
        if render_type(new_field.type) != render_type(old_field.type):
            problems.append(
                f".{old_field.name}: type changed from {render_type(old_field.type)} "
                f"to {render_type(new_field.type)}"
            )
        elif new_field.constraints != old_field.constraints:
            problems.append(
                f".{old_field.name}: constraints changed from {dict(old_field.constraints.items())}"
                f" to {dict(new_field.constraints.items())} (old messages may not satisfy them)"
            )
    for new_field in new.fields[len(old.fields) :]:
        if isinstance(new_field.default, ir.NoDefault):
            problems.append(
                f".{new_field.name}: appended field needs a default (older messages lack it)"
            )
    return problems


def _compare_unions(old: ir.UnionDef, new: ir.UnionDef) -> list[str]:
    problems = []
    new_variants = {v.tag: v for v in new.variants}
    for variant in old.variants:
        now = new_variants.get(variant.tag)
        if now is None:
            problems.append(f": variant with tag {variant.tag!r} was removed")
        elif render_type(now.type) != render_type(variant.type):
            problems.append(
                f": variant with tag {variant.tag!r} changed from {render_type(variant.type)} "
                f"to {render_type(now.type)}"
            )
    return problems
