"""Union declarations: tagged variants the encoder can tell apart."""

from __future__ import annotations

from mmcodec.codegen import ir
from mmcodec.codegen.diagnostics import Position
from mmcodec.codegen.load import Map, Scalar, Seq
from mmcodec.codegen.validate.context import Context, Declared, unknown_keys
from mmcodec.codegen.validate.names import VARIANT_KEYS
from mmcodec.codegen.validate.types import Scope, lower_type, render_type


def lower_union(
    ctx: Context, scope: Scope, decl: Declared, doc: str, binding: ir.Binding | None
) -> ir.UnionDef | None:
    body = decl.body
    if not isinstance(body, Seq) or not body.items:
        ctx.error(
            body.position,
            f"union {decl.name!r}: 'union' is a non-empty list of variants "
            "({tag: ..., type: ...})",
        )
        return None
    variants: list[ir.Variant] = []
    tags: dict[object, Position] = {}
    first_tag: tuple[object, Position] | None = None
    mixed: tuple[object, Position] | None = None
    python_kinds: dict[str, Position] = {}
    for item in body.items:
        if not isinstance(item, Map):
            ctx.error(
                item.position,
                f"union {decl.name!r}: a variant is a mapping {{tag: ..., type: ...}}",
            )
            continue
        suggested = unknown_keys(ctx, item, VARIANT_KEYS, f"a variant of union {decl.name!r}")
        tag_node = item.get("tag")
        type_node = item.get("type")
        if tag_node is None or type_node is None:
            if {k for k in ("tag", "type") if item.get(k) is None} <= suggested.keys():
                continue
            ctx.error(
                item.position,
                f"union {decl.name!r}: every variant needs an explicit 'tag' and a 'type'",
            )
            continue
        tag = tag_node.value if isinstance(tag_node, Scalar) else None
        if not (type(tag) is int and 0 <= tag < 1 << 63) and not (type(tag) is str and tag):
            ctx.error(
                tag_node.position,
                f"union {decl.name!r}: a tag is a non-negative int or a non-empty string",
            )
            continue
        if tag in tags:
            ctx.error(
                tag_node.position,
                f"union {decl.name!r}: duplicate tag {tag!r} (first used at {tags[tag]})",
            )
            continue
        tags[tag] = tag_node.position
        if first_tag is None:
            first_tag = (tag, tag_node.position)
        elif mixed is None and type(tag) is not type(first_tag[0]):
            mixed = (tag, tag_node.position)
        type_expr = lower_type(ctx, scope, type_node)
        if type_expr is None:
            continue
        problem = _variant_problem(scope, type_expr)
        if problem:
            ctx.error(type_node.position, f"union {decl.name!r}: {problem}")
            continue
        for kind in _python_kinds(scope, type_expr):
            if kind in python_kinds:
                ctx.error(
                    type_node.position,
                    f"union {decl.name!r}: variant {render_type(type_expr)} and the variant at "
                    f"{python_kinds[kind]} are both {kind} in Python; "
                    "the encoder could not tell them apart",
                )
            python_kinds.setdefault(kind, type_node.position)
        variants.append(ir.Variant(tag, type_expr, item.position))
    if first_tag is not None and mixed is not None:
        article = {int: "an int", str: "a str"}
        ctx.error(
            mixed[1],
            f"union {decl.name!r} mixes int and str tags: tag {mixed[0]!r} is "
            f"{article[type(mixed[0])]}, the first tag {first_tag[0]!r} (at {first_tag[1]}) is "
            f"{article[type(first_tag[0])]}; msgspec needs one tag type per union",
        )
    return ir.UnionDef(decl.name, doc, binding, tuple(variants), decl.position)


def _variant_problem(scope: Scope, t: ir.TypeExpr) -> str | None:
    if isinstance(t, ir.OptionalOf):
        return "a variant cannot be optional (make the field that holds the union optional)"
    if isinstance(t, ir.Named):
        found = scope.lookup(t.name if t.module == scope.info.module else f"{t.module}.{t.name}")
        if found and found[1].kind == "union":
            return f"variant {t.name} is itself a union; list its variants instead"
        if found and found[1].kind == "struct" and t.module != scope.info.module:
            return (
                f"struct variant {t.module}.{t.name} must be defined in the same schema file "
                "(its tag is part of its wire form)"
            )
    return None


def _python_kinds(scope: Scope, t: ir.TypeExpr) -> list[str]:
    """The runtime classes a value of this type can have: variants must not share one."""
    if isinstance(t, ir.Named):
        return [f"instances of {t.module}.{t.name}"]
    if isinstance(t, ir.Builtin):
        if t.name == "nested_tensors":
            return ["tensors", "ints", "floats", "lists", "tuples"]
        return {"tensor": ["tensors"]}.get(t.name, [f"{t.name}s"])
    if isinstance(t, ir.ListOf):
        return ["lists"]
    if isinstance(t, (ir.TupleOf, ir.VarTupleOf)):
        return ["tuples"]
    if isinstance(t, ir.DictOf):
        return ["dicts"]
    return []
