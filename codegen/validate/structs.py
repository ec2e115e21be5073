"""Struct declarations: fields, their constraints and their defaults."""

from __future__ import annotations

import json
import keyword
import math
import operator
import re
import subprocess
import sys

from mmcodec.codegen import ir
from mmcodec.codegen.load import Map, Node, Scalar, Seq
from mmcodec.codegen.validate.context import (
    Context,
    Declared,
    closest,
    did_you_mean,
    optional_str,
    unknown_keys,
)
from mmcodec.codegen.validate.enums import member_values
from mmcodec.codegen.validate.names import FIELD_KEYS, IDENTIFIER, NUMERIC, SIZED
from mmcodec.codegen.validate.types import Scope, lower_type, render_type


def lower_struct(
    ctx: Context, scope: Scope, decl: Declared, doc: str, binding: ir.Binding | None
) -> ir.StructDef:
    fields: list[ir.Field] = []
    body = decl.body
    if not isinstance(body, Map):
        if not (isinstance(body, Scalar) and body.value is None):
            ctx.error(
                body.position, f"struct {decl.name!r}: 'struct' maps field names to field specs"
            )
        return ir.StructDef(decl.name, doc, binding, (), None, decl.position)
    seen_default: Scalar | None = None
    out_of_order: list[Scalar] = []
    for key, spec in body.entries:
        f = _lower_field(ctx, scope, decl.name, key, spec)
        # Order is checked on what was written: a default that is itself wrong (reported
        # already) or a misspelt `default` key still says the field means to have one.
        if _declares_default(spec):
            seen_default = seen_default or key
        elif seen_default is not None:
            out_of_order.append(key)
        if f is not None:
            fields.append(f)
    if seen_default is not None and out_of_order:  # one mistake, however many fields follow
        first, *more = out_of_order
        also = f" (as do {', '.join(repr(k.value) for k in more)})" if more else ""
        it = "them" if more else "it"
        ctx.error(
            first.position,
            f"field {first.value!r} has no default but follows {seen_default.value!r}, which has "
            f"one{also}",
            f"fields with defaults come last, as older messages may lack them: move {it} "
            f"before {seen_default.value!r}, or give {it} a default",
        )
    return ir.StructDef(decl.name, doc, binding, tuple(fields), None, decl.position)


def _declares_default(spec: Node) -> bool:
    """Whether a field's spec has a ``default`` key, or an unknown key meant as one."""
    if not isinstance(spec, Map):
        return False
    names = [str(k.value) for k, _ in spec.entries]
    return any(
        n == "default" or (n not in FIELD_KEYS and closest(n, FIELD_KEYS) == "default")
        for n in names
    )


def _lower_field(
    ctx: Context, scope: Scope, owner: str, key: Scalar, spec: Node
) -> ir.Field | None:
    name = str(key.value)
    valid_name = True
    if not IDENTIFIER.fullmatch(name) and not re.fullmatch(r"[a-z_][A-Za-z0-9_]*", name):
        ctx.error(key.position, f"field name {name!r} must be an identifier")
        valid_name = False
    elif name.startswith("_"):
        ctx.error(
            key.position,
            f"field name {name!r} must not start with '_' (reserved for generated code)",
        )
        valid_name = False
    elif keyword.iskeyword(name):
        ctx.error(key.position, f"field name {name!r} is a Python keyword")
        valid_name = False
    if isinstance(spec, Scalar):
        type_node: Node = spec
        spec_map = None
    elif isinstance(spec, Map):
        suggested = unknown_keys(ctx, spec, FIELD_KEYS, f"field {owner}.{name}")
        spec_map = spec
        found = spec.get("type")
        if found is None:
            if "type" not in suggested:
                ctx.error(spec.position, f"field {owner}.{name} needs a 'type'")
            return None
        type_node = found
    else:
        ctx.error(spec.position, f"field {owner}.{name}: expected a type string or a mapping")
        return None
    type_expr = lower_type(ctx, scope, type_node)
    if type_expr is None or not valid_name:
        return None
    constraints = ir.Constraints()
    default: ir.Default | ir.MemberDefault | ir.NoDefault = ir.NoDefault()
    doc = ""
    if spec_map is not None:
        doc = optional_str(ctx, spec_map, "doc") or ""
        errors_before = len(ctx.diagnostics)
        constraints = _lower_constraints(ctx, spec_map, type_expr, f"{owner}.{name}")
        default_node = spec_map.get("default")
        if default_node is not None:
            # A default is checked against constraints only when they are valid: a
            # constraint already reported is no reason for a second error here.
            valid = constraints if len(ctx.diagnostics) == errors_before else ir.Constraints()
            where = f"{owner}.{name}"
            target = _constraint_target(type_expr)
            if scope.kind_of(target) == "enum" and not _is_null(default_node):
                default = _enum_default(ctx, scope, default_node, target, where)
            else:
                default = _lower_default(ctx, default_node, type_expr, valid, where)
    return ir.Field(name, type_expr, default, constraints, doc, key.position)


def _constraint_target(type_expr: ir.TypeExpr) -> ir.TypeExpr:
    return type_expr.inner if isinstance(type_expr, ir.OptionalOf) else type_expr


def _lower_constraints(
    ctx: Context, spec: Map, type_expr: ir.TypeExpr, where: str
) -> ir.Constraints:
    target = _constraint_target(type_expr)
    kind = target.name if isinstance(target, ir.Builtin) else type(target).__name__
    numeric = isinstance(target, ir.Builtin) and target.name in NUMERIC
    sized = (isinstance(target, ir.Builtin) and target.name in SIZED) or isinstance(
        target, (ir.ListOf, ir.VarTupleOf, ir.DictOf)
    )
    values: dict[str, int | float | str] = {}
    for name in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
        node = spec.get(name)
        if node is None:
            continue
        value = node.value if isinstance(node, Scalar) else None
        if name in ("ge", "gt", "le", "lt"):
            if not numeric:
                ctx.error(
                    node.position,
                    f"{where}: constraint {name!r} needs an int or float field, "
                    f"not {describe(type_expr)}",
                )
                continue
            if type(value) not in (int, float):
                ctx.error(node.position, f"{where}: {name!r} must be a number")
                continue
            if isinstance(target, ir.Builtin) and target.name == "int" and type(value) is float:
                ctx.error(node.position, f"{where}: {name!r} of an int field must be an int")
                continue
            problem = _number_problem(value)  # type: ignore[arg-type]  # int or float here
            if problem:
                ctx.error(node.position, f"{where}: {name!r} {problem}")
                continue
        elif name in ("min_length", "max_length"):
            if not sized:
                ctx.error(
                    node.position,
                    f"{where}: constraint {name!r} needs a str, bytes, list, tuple[T, ...] "
                    f"or dict field, not {describe(type_expr)}",
                )
                continue
            if type(value) is not int or not 0 <= value <= INT64_MAX:
                ctx.error(node.position, f"{where}: {name!r} must be an int from 0 to 2**63 - 1")
                continue
        else:
            if not (isinstance(target, ir.Builtin) and target.name == "str"):
                ctx.error(
                    node.position,
                    f"{where}: constraint 'pattern' needs a str field, not {describe(type_expr)}",
                )
                continue
            if not isinstance(value, str):
                ctx.error(node.position, f"{where}: 'pattern' must be a string")
                continue
            try:
                re.compile(value)
            except re.error as e:
                ctx.error(
                    node.position, f"{where}: 'pattern' is not a valid regular expression ({e})"
                )
                continue
        values[name] = value  # type: ignore[assignment]  # checked above
    del kind
    low, high = values.get("min_length"), values.get("max_length")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        ctx.error(spec.position, f"{where}: min_length is greater than max_length")
    return ir.Constraints(**values)  # type: ignore[arg-type]


def describe(type_expr: ir.TypeExpr) -> str:
    return render_type(type_expr)


def _is_null(node: Node) -> bool:
    return isinstance(node, Scalar) and node.value is None


def _enum_default(
    ctx: Context, scope: Scope, node: Node, target: ir.TypeExpr, where: str
) -> ir.MemberDefault | ir.NoDefault:
    """The default of an enum-typed field names one of its members."""
    assert isinstance(target, ir.Named)
    found = scope.lookup(
        target.name if target.module == scope.info.module else f"{target.module}.{target.name}"
    )
    assert found is not None
    members = member_values(found[1])
    value = node.value if isinstance(node, Scalar) else None
    if isinstance(value, str) and value in members:
        return ir.MemberDefault(value, members[value])
    names = {v: n for n, v in members.items()}
    if type(value) in (int, str) and value in names:
        hint = (
            f"a default names a member: did you mean {names[value]!r} (whose value is {value!r})?"
        )
    else:
        hint = did_you_mean(str(value), members) if isinstance(value, str) else ""
    shown = "null" if value is None else repr(value) if isinstance(node, Scalar) else "a collection"
    ctx.error(node.position, f"{where}: default {shown} is not a member of {target.name}", hint)
    return ir.NoDefault()


def _lower_default(
    ctx: Context, node: Node, type_expr: ir.TypeExpr, constraints: ir.Constraints, where: str
) -> ir.Default | ir.NoDefault:
    problem = _default_problem(node, type_expr)
    if problem is not None:
        ctx.error(node.position, f"{where}: default {problem[0]}", problem[1])
        return ir.NoDefault()
    value: ir.DefaultValue
    target = _constraint_target(type_expr)
    if isinstance(node, Scalar):
        value = node.value
        if type(value) is int and target == ir.Builtin("float"):
            value = float(value)  # `default: 2` of a float field is 2.0, as decoded
    elif isinstance(node, Seq):  # an empty tuple[T, ...] defaults to (), a list to []
        value = () if isinstance(target, ir.VarTupleOf) else []
    else:
        value = {}
    for name, bound in constraints.items():
        if value is None or _satisfies(value, name, bound):
            continue
        # The encoder does not check constraints but the decoder does: a default that
        # breaks one would make messages the decoder rejects.
        ctx.error(node.position, f"{where}: default {value!r} violates {name}={bound!r}")
        return ir.NoDefault()
    return ir.Default(value)


def _satisfies(value: object, name: str, bound: int | float | str) -> bool:
    """False when ``value`` breaks the constraint (True when it does not apply)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        checks = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}
        return name not in checks or bool(checks[name](value, bound))
    if isinstance(value, (str, bytes, list, tuple, dict)) and isinstance(bound, int):
        if name == "min_length":
            return len(value) >= bound
        if name == "max_length":
            return len(value) <= bound
    if name == "pattern" and isinstance(value, str) and isinstance(bound, str):
        return _pattern_matches(bound, value)
    return True


PATTERN_SECONDS = 2.0
"""How long the compiler lets a pattern run against a field's default."""


def _pattern_matches(pattern: str, text: str) -> bool:
    """``re.search(pattern, text)``, in a child process stopped after :data:`PATTERN_SECONDS`.

    A schema's author writes both, and a pattern with nested quantifiers can take
    exponential time (``(a+)+$``): the compiler must not hang on one. A pattern that runs
    out of time counts as not matching (the default is reported), and ``re`` cannot be
    interrupted from a thread, hence the process. Only fields with both a pattern and a
    default pay it.
    """
    probe = (
        "import json, re, sys; pattern, text = json.load(sys.stdin); "
        "sys.exit(0 if re.search(pattern, text) else 1)"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", probe],
            input=json.dumps([pattern, text]).encode("ascii"),
            capture_output=True,
            timeout=PATTERN_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _default_problem(node: Node, t: ir.TypeExpr) -> tuple[str, str] | None:
    """What is wrong with a default for type ``t`` (message and hint), or None."""
    spelled = render_type(t)
    target = t.inner if isinstance(t, ir.OptionalOf) else t
    if isinstance(node, (Seq, Map)):
        empty = not (node.items if isinstance(node, Seq) else node.entries)
        if isinstance(node, Seq) and isinstance(target, (ir.ListOf, ir.VarTupleOf)) and empty:
            return None
        if isinstance(node, Map) and isinstance(target, ir.DictOf) and empty:
            return None
        return f"must be a literal of type {spelled}", "a container may only default to empty"
    value = node.value
    if value is None:
        if isinstance(t, ir.OptionalOf):
            return None
        return f"null does not match type {spelled}", f"make the type optional[{spelled}]"
    if isinstance(target, ir.Builtin):
        ok = {
            "int": type(value) is int,
            "float": type(value) in (int, float),
            "bool": type(value) is bool,
            "str": type(value) is str,
            "bytes": type(value) is bytes,
        }.get(target.name)
        if ok:
            problem = _int_problem(value) if type(value) is int else None
            return None if problem is None else (problem, "")
        if ok is None:
            return (
                f"is not supported for type {spelled}",
                f"only an optional[{render_type(target)}] field has a default: null",
            )
        return f"{value!r} does not match type {spelled}", _unquote_hint(value, target.name)
    return f"{value!r} does not match type {spelled}", ""


def _unquote_hint(value: object, target: str) -> str:
    """``"3"`` for an int field: the quotes made it a string."""
    if type(value) is not str:
        return ""
    text = value.strip()
    if target == "int":
        fits = re.fullmatch(r"[-+]?[0-9]+", text) is not None
    elif target == "float":
        fits = re.fullmatch(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text) is not None
    else:
        fits = target == "bool" and text in ("true", "false")
    return f"remove the quotes: {text}" if fits else ""


INT64_MAX = (1 << 63) - 1
WIRE_INT_MIN, WIRE_INT_MAX = -(1 << 63), (1 << 64) - 1
"""The ints msgpack carries (int64 and uint64), and so the ints a field can hold."""


def _number_problem(value: int | float) -> str | None:
    """Why a constraint's bound cannot be checked by a decoder, or None."""
    if type(value) is float and not math.isfinite(value):
        return f"must be a finite number, not {value!r}"
    return _int_problem(value) if type(value) is int else None


def _int_problem(value: int) -> str | None:
    """Why an int cannot travel (a default or a bound), or None. Non-finite float defaults
    are fine: msgpack carries them."""
    if not WIRE_INT_MIN <= value <= WIRE_INT_MAX:
        return f"{value} is out of range: msgpack carries ints from -2**63 to 2**64 - 1"
    return None
