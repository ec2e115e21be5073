"""IR -> Python source. Every decision is made here; the templates only lay it out.

For each type expression the renderer decides three things: its annotation in
domain code, its annotation on the wire, and how a value converts each way.
A conversion is always a callable ``f(value, ctx)``: a runtime helper, a function
generated for a named type, or a generated helper for a container type (one per
distinct type expression, named after it, so output is stable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from codegen import GENERATOR_VERSION, ir

_TEMPLATES = Path(__file__).parent / "templates"

_PRIMITIVE_DOMAIN = {"int": "int", "float": "float", "bool": "bool", "str": "str", "bytes": "bytes"}
_IDENTITY_ON_DECODE = frozenset(_PRIMITIVE_DOMAIN)


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


@dataclass(frozen=True)
class Helper:
    """A generated conversion function for one container type expression."""

    name: str
    kind: str  # "list", "vartuple", "tuple", "dict", "optional"
    direction: str  # "to_wire" or "from_wire"
    param: str
    returns: str
    item_convs: tuple[str, ...]
    item_identity: tuple[bool, ...]
    what: str


@dataclass
class _Renderer:
    module: ir.Module
    package: str
    defs: dict[tuple[str, str], ir.TypeDef]
    helpers: dict[str, Helper] = field(default_factory=dict)

    # -- names ---------------------------------------------------------------------

    def _prefix(self, module: str) -> str:
        return "" if module == self.module.name else f"_{module}."

    def domain_name(self, t: ir.Named) -> str:
        return f"{self._prefix(t.module)}{t.name}"

    def wire_name(self, t: ir.Named) -> str:
        return f"{self._prefix(t.module)}_{t.name}Wire"

    def func(self, t: ir.Named, direction: str) -> str:
        return f"{self._prefix(t.module)}_{t.name}_{direction}"

    # -- annotations ---------------------------------------------------------------

    def domain_annotation(self, t: ir.TypeExpr) -> str:
        if isinstance(t, ir.Builtin):
            return {
                "tensor": "torch.Tensor",
                "nested_tensors": "_b.NestedTensors",
                "slice": "slice",
            }.get(t.name) or _PRIMITIVE_DOMAIN[t.name]
        if isinstance(t, ir.Named):
            return self.domain_name(t)
        if isinstance(t, ir.ListOf):
            return f"list[{self.domain_annotation(t.item)}]"
        if isinstance(t, ir.VarTupleOf):
            return f"tuple[{self.domain_annotation(t.item)}, ...]"
        if isinstance(t, ir.TupleOf):
            return f"tuple[{', '.join(self.domain_annotation(i) for i in t.items)}]"
        if isinstance(t, ir.DictOf):
            return f"dict[{self.domain_annotation(t.key)}, {self.domain_annotation(t.value)}]"
        return f"{self.domain_annotation(t.inner)} | None"

    def wire_annotation(self, t: ir.TypeExpr, constraints: ir.Constraints | None = None) -> str:
        if isinstance(t, ir.OptionalOf):
            return f"{self.wire_annotation(t.inner, constraints)} | None"
        base = self._wire_base(t)
        if constraints is not None and constraints.items():
            meta = ", ".join(f"{k}={v!r}" for k, v in constraints.items())
            return f"Annotated[{base}, msgspec.Meta({meta})]"
        return base

    def _wire_base(self, t: ir.TypeExpr) -> str:
        if isinstance(t, ir.Builtin):
            return {
                "tensor": "_wire.NonNegative",
                "nested_tensors": "_wire.NestedWire",
                "slice": "_wire.SliceWire",
            }.get(t.name) or _PRIMITIVE_DOMAIN[t.name]
        if isinstance(t, ir.Named):
            return self.wire_name(t)
        if isinstance(t, ir.ListOf):
            return f"list[{self.wire_annotation(t.item)}]"
        if isinstance(t, ir.VarTupleOf):
            return f"tuple[{self.wire_annotation(t.item)}, ...]"
        if isinstance(t, ir.TupleOf):
            return f"tuple[{', '.join(self.wire_annotation(i) for i in t.items)}]"
        if isinstance(t, ir.DictOf):
            return f"dict[{self.wire_annotation(t.key)}, {self.wire_annotation(t.value)}]"
        raise AssertionError(t)

    # -- conversions ---------------------------------------------------------------

    def identity_on_decode(self, t: ir.TypeExpr) -> bool:
        """True when msgspec already decodes the wire value into the domain value."""
        if isinstance(t, ir.Builtin):
            return t.name in _IDENTITY_ON_DECODE
        if isinstance(t, (ir.ListOf, ir.VarTupleOf)):
            return self.identity_on_decode(t.item)
        if isinstance(t, ir.TupleOf):
            return all(self.identity_on_decode(i) for i in t.items)
        if isinstance(t, ir.DictOf):
            return self.identity_on_decode(t.value)
        if isinstance(t, ir.OptionalOf):
            return self.identity_on_decode(t.inner)
        return False

    def to_wire(self, t: ir.TypeExpr) -> str:
        """The name of a callable ``(value, ctx) -> wire value``."""
        if isinstance(t, ir.Builtin):
            if t.name in _PRIMITIVE_DOMAIN:
                return f"_b.expect_{t.name}"
            return f"_b.{t.name}_to_wire"
        if isinstance(t, ir.Named):
            return self.func(t, "to_wire")
        return self._helper(t, "to_wire")

    def from_wire(self, t: ir.TypeExpr) -> str:
        if self.identity_on_decode(t):
            return "_b.identity"
        if isinstance(t, ir.Builtin):
            return f"_b.{t.name}_from_wire"
        if isinstance(t, ir.Named):
            return self.func(t, "from_wire")
        return self._helper(t, "from_wire")

    def _helper(self, t: ir.TypeExpr, direction: str) -> str:
        name = f"_{_mangle(t, self.module.name)}_{direction}"
        if name in self.helpers:
            return name
        to_wire = direction == "to_wire"
        convert = self.to_wire if to_wire else self.from_wire
        items: tuple[ir.TypeExpr, ...]
        if isinstance(t, ir.ListOf):
            kind, items = "list", (t.item,)
        elif isinstance(t, ir.VarTupleOf):
            kind, items = "vartuple", (t.item,)
        elif isinstance(t, ir.TupleOf):
            kind, items = "tuple", t.items
        elif isinstance(t, ir.DictOf):
            kind, items = "dict", (t.key, t.value)
        else:
            assert isinstance(t, ir.OptionalOf)
            kind, items = "optional", (t.inner,)
        domain, wire = self.domain_annotation(t), self.wire_annotation(t)
        if to_wire and isinstance(t, ir.ListOf):
            domain = f"Sequence[{self.domain_annotation(t.item)}]"  # encoding accepts tuples too
        self.helpers[name] = Helper(  # registered first: recursive types refer to themselves
            name=name,
            kind=kind,
            direction=direction,
            param=domain if to_wire else wire,
            returns=wire if to_wire else domain,
            item_convs=(),
            item_identity=(),
            what=_what(kind),
        )
        convs = tuple(convert(i) for i in items)
        identity = tuple(self.identity_on_decode(i) and not to_wire for i in items)
        self.helpers[name] = Helper(
            name,
            kind,
            direction,
            domain if to_wire else wire,
            wire if to_wire else domain,
            convs,
            identity,
            _what(kind),
        )
        return name


def _what(kind: str) -> str:
    return {
        "list": "a list",
        "vartuple": "a tuple",
        "tuple": "a tuple",
        "dict": "a dict",
        "optional": "a value or None",
    }[kind]


def _mangle(t: ir.TypeExpr, home: str) -> str:
    """A readable identifier for a type expression, unique within one module."""
    if isinstance(t, ir.Builtin):
        return t.name
    if isinstance(t, ir.Named):
        return t.name if t.module == home else f"{t.module}_{t.name}"
    if isinstance(t, ir.ListOf):
        return f"list_{_mangle(t.item, home)}"
    if isinstance(t, ir.VarTupleOf):
        return f"tuple_{_mangle(t.item, home)}_etc"
    if isinstance(t, ir.TupleOf):
        return "tuple_" + "_".join(_mangle(i, home) for i in t.items) + "_end"
    if isinstance(t, ir.DictOf):
        return f"dict_{_mangle(t.key, home)}_{_mangle(t.value, home)}"
    return f"optional_{_mangle(t.inner, home)}"


def _literal(value: object) -> str:
    if isinstance(value, list):
        return "[]"
    if isinstance(value, dict):
        return "{}"
    return repr(value)


def _docstring(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def render_module(module: ir.Module, all_modules: list[ir.Module], package: str) -> str:
    """The Python source of one generated module (before formatting)."""
    defs = {(m.name, t.name): t for m in all_modules for t in m.types}
    r = _Renderer(module, package, defs)
    types = []
    for t in module.types:
        types.append(_type_view(r, t))
    bindings = sorted(
        {
            (t.binding.module, t.binding.qualname, t.name)
            for t in module.types
            if t.binding is not None
        }
        | {(e.module, e.qualname, e.qualname) for e in module.exports}
    )
    helpers = sorted(r.helpers.values(), key=lambda h: h.name)
    public = sorted(
        {t.name for t in module.types}
        | {e.qualname for e in module.exports}
        | {
            "DecodeError",
            "EncodeError",
            "Limits",
            "DEFAULT_LIMITS",
            "decode",
            "decode_bytes",
            "encode",
            "encode_bytes",
            "SCHEMA_NAME",
            "SCHEMA_MAJOR",
        }
    )
    return (
        environment()
        .get_template("module.py.j2")
        .render(
            module=module,
            doc=_docstring(module.doc),
            generator_version=GENERATOR_VERSION,
            package=package,
            bindings=bindings,
            imports=module.imports,
            types=types,
            helpers=helpers,
            public=public,
            uses_torch=True,
        )
    )


def _type_view(r: _Renderer, t: ir.TypeDef) -> dict[str, object]:
    base: dict[str, object] = {
        "name": t.name,
        "doc": _docstring(t.doc),
        "bound": t.binding is not None,
        "wire": f"_{t.name}Wire",
        "to_wire": f"_{t.name}_to_wire",
        "from_wire": f"_{t.name}_from_wire",
    }
    if isinstance(t, ir.StructDef):
        fields = []
        for f in t.fields:
            fields.append(
                {
                    "name": f.name,
                    "doc": _docstring(f.doc),
                    "domain": r.domain_annotation(f.type),
                    "wire": r.wire_annotation(f.type, f.constraints),
                    "default": _literal(f.default.value)
                    if isinstance(f.default, ir.Default)
                    else None,
                    "mutable_default": isinstance(f.default, ir.Default)
                    and isinstance(f.default.value, (list, dict)),
                    "to_wire": r.to_wire(f.type),
                    "from_wire": r.from_wire(f.type),
                    "identity": r.identity_on_decode(f.type),
                }
            )
        base.update(kind="struct", fields=fields, tag=None if t.tag is None else repr(t.tag))
    elif isinstance(t, ir.UnionDef):
        variants = []
        for v in t.variants:
            named_struct = isinstance(v.type, ir.Named) and isinstance(
                r.defs[(v.type.module, v.type.name)], ir.StructDef
            )
            variants.append(
                {
                    "tag": repr(v.tag),
                    "tag_name": str(v.tag),
                    "domain": r.domain_annotation(v.type),
                    "check": _isinstance_check(r, v.type),
                    "wrapped": not named_struct,
                    "wire": r.wire_name(v.type)
                    if isinstance(v.type, ir.Named) and named_struct
                    else f"_{t.name}{_tag_suffix(v.tag)}Wire",
                    "value_wire": r.wire_annotation(v.type),
                    "to_wire": r.to_wire(v.type),
                    "from_wire": r.from_wire(v.type),
                }
            )
        base.update(
            kind="union",
            variants=variants,
            domain_alias=" | ".join(v["domain"] for v in variants),  # type: ignore[misc]
            expected=", ".join(v["domain"] for v in variants),  # type: ignore[misc]
        )
    else:
        dict_type = ir.DictOf(t.key, t.value)
        base.update(
            kind="mapping",
            key_domain=r.domain_annotation(t.key),
            value_domain=r.domain_annotation(t.value),
            dict_wire=r.wire_annotation(dict_type),
            dict_to_wire=r.to_wire(dict_type),
            dict_from_wire=r.from_wire(dict_type),
        )
    return base


def _tag_suffix(tag: int | str) -> str:
    return (
        f"_{tag}" if isinstance(tag, int) else f"_{''.join(c if c.isalnum() else '_' for c in tag)}"
    )


def _isinstance_check(r: _Renderer, t: ir.TypeExpr) -> str:
    """A Python expression over ``obj`` that is true for values of this variant."""
    if isinstance(t, ir.Named):
        return f"isinstance(obj, {r.domain_name(t)})"
    if isinstance(t, ir.Builtin):
        if t.name == "tensor":
            return "isinstance(obj, torch.Tensor)"
        if t.name == "nested_tensors":
            return "isinstance(obj, torch.Tensor) or type(obj) in (int, float, list, tuple)"
        return f"type(obj) is {_PRIMITIVE_DOMAIN.get(t.name, t.name)}"
    if isinstance(t, ir.ListOf):
        return "type(obj) is list"
    if isinstance(t, (ir.VarTupleOf, ir.TupleOf)):
        return "type(obj) is tuple"
    if isinstance(t, ir.DictOf):
        return "type(obj) is dict"
    raise AssertionError(t)
