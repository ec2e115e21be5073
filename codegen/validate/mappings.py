"""Mapping declarations: a named dict type with str or int keys."""

from __future__ import annotations

from mmcodec.codegen import ir
from mmcodec.codegen.load import Map
from mmcodec.codegen.validate.context import Context, Declared, unknown_keys
from mmcodec.codegen.validate.names import MAPPING_KEYS
from mmcodec.codegen.validate.types import Scope, lower_type


def lower_mapping(
    ctx: Context, scope: Scope, decl: Declared, doc: str, binding: ir.Binding | None
) -> ir.MappingDef | None:
    body = decl.body
    if not isinstance(body, Map):
        ctx.error(body.position, f"mapping {decl.name!r}: 'mapping' needs 'key' and 'value' types")
        return None
    suggested = unknown_keys(ctx, body, MAPPING_KEYS, f"mapping {decl.name!r}")
    key_node, value_node = body.get("key"), body.get("value")
    if key_node is None or value_node is None:
        if not {k for k in MAPPING_KEYS if body.get(k) is None} <= suggested.keys():
            ctx.error(
                body.position, f"mapping {decl.name!r}: 'mapping' needs 'key' and 'value' types"
            )
        return None
    key = lower_type(ctx, scope, key_node)
    value = lower_type(ctx, scope, value_node)
    problem = None if key is None else scope.key_problem(key)
    if problem is not None:
        ctx.error(key_node.position, f"mapping {decl.name!r}: {problem}")
        return None
    if key is None or value is None:
        return None
    return ir.MappingDef(decl.name, doc, binding, key, value, decl.position)
