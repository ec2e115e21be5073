"""IR -> Rust source. Every decision is made here; the template only lays it out.

One module per schema: plain structs and enums with derives (prost's style), then the
trait impls that read and write them on the wire through the runtime crate (``mmcodec``),
then the per-message tables of values that travel once. Nothing here depends on the
Python renderer; both read the same IR. Schema text reaches the output only through
:mod:`mmcodec.codegen.rust.source`, and lines whose length depends on names through
:mod:`mmcodec.codegen.rust.layout`, so the output is already formatted as rustfmt
formats it.

An enum of the schema is a Rust ``enum`` of unit variants (its members, UpperCamelCase)
that implements the runtime's ``IntEnum`` (``#[repr(i64)]``, the values as
discriminants) or ``StrEnum`` (the values in ``value()``); it is not shared, borrows
nothing, and can key a map.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jinja2

from mmcodec.codegen import GENERATOR_VERSION, ir
from mmcodec.codegen.rust import layout
from mmcodec.codegen.rust.names import bare, member_names, unique, variant_names
from mmcodec.codegen.rust.source import (
    RustCode,
    UnsafeText,
    allow,
    byte_string,
    code,
    comment,
    doc,
    finalize,
    ident,
    string,
)
from mmcodec.codegen.rust.types import Key, Schemas, is_shared, unsigned
from mmcodec.codegen.shell import command_lines

_TEMPLATES = Path(__file__).parent.parent / "templates" / "rust"

DECODE_BOUND = "<'a, C: Tabled<'a>>"
"""The generics of every impl that reads: any context that holds the needed tables."""


def environment() -> jinja2.Environment:
    """Templates print only what :mod:`~mmcodec.codegen.rust.source` allows."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=True,  # with RustCode a Markup: see source
        finalize=finalize,
    )


def _module_doc(module: ir.Module) -> str:
    return (
        f"{module.doc}\n\n"
        f"Schema `{module.name}`, major version {module.major}. Each type is a `Message`:\n"
        "`mmcodec::encode` writes it as frames whose payloads view its tensors' memory,\n"
        "`mmcodec::decode` reads it back with every tensor a view of the frames."
    )


def _imports(schemas: Schemas, module: ir.Module) -> list[str]:
    """Every schema module ``module`` reaches through imports, itself first."""
    order = [module.name]
    stack = list(module.imports)
    while stack:
        name = stack.pop(0)
        if name not in order and name in schemas.modules:
            order.append(name)
            stack.extend(schemas.modules[name].imports)
    return order


class _Module:
    """The renderer of one schema module."""

    def __init__(self, schemas: Schemas, module: ir.Module) -> None:
        self.schemas = schemas
        self.module = module
        self.home = module.name
        self.shared = [t for t in module.types if is_shared(t)]
        self.table_of = {t.name: i for i, t in enumerate(self.shared)}

    def key(self, name: str) -> Key:
        return (self.home, name)

    def name(self, t: ir.TypeDef) -> RustCode:
        return self.schemas.type_names[self.key(t.name)]

    def self_type(self, t: ir.TypeDef) -> RustCode:
        return code(self.name(t), self.schemas.lifetime(self.key(t.name)))

    def module_path(self, schema: str, item: str) -> RustCode:
        """An item of schema module ``schema`` (this one, or a sibling)."""
        if schema == self.home:
            return code(item)
        return code("super::", self.schemas.module_names[schema], "::", item)

    # -- types ---------------------------------------------------------------------

    def type_view(self, t: ir.TypeDef) -> dict[str, Any]:
        ty = self.self_type(t)
        view: dict[str, Any] = {
            "allow": None,
            "doc": doc(t.doc) if t.doc else None,
            "name": self.name(t),
            "type": ty,
            "lifetime": self.schemas.lifetime(self.key(t.name)),
            "decode_impl": lambda trait: layout.impl_header(code(DECODE_BOUND), code(trait), ty),
            "encode_impl": lambda trait: layout.impl_header(code("<'a>"), code(trait), ty),
            "plain_impl": lambda trait: layout.impl_header(code(""), code(trait), self._elided(t)),
            "lt_impl": lambda trait: layout.impl_header(
                code(view["lifetime"] and "<'a>"), code(trait), ty
            ),
            "name_const": layout.const_item(4, code("const NAME: &'static str"), string(t.name)),
            "shared": is_shared(t),
            "ref_form": "Index",
        }
        if is_shared(t):
            view["table"] = code("t", self.table_of[t.name])
            key = string(f"{self.home}.{t.name}")
            view["key_const"] = layout.const_item(4, code("const KEY: &'static str"), key)
        # One view per kind of type definition.
        if isinstance(t, ir.StructDef):
            view.update(self.struct_view(t))
        elif isinstance(t, ir.UnionDef):
            view.update(self.union_view(t))
        elif isinstance(t, ir.MappingDef):
            view.update(self.mapping_view(t))
        else:
            view.update(self.enum_view(t))
        return view

    def _elided(self, t: ir.TypeDef) -> RustCode:
        return code(self.name(t), "<'_>" if self.schemas.lifetime(self.key(t.name)) else "")

    def struct_view(self, t: ir.StructDef) -> dict[str, Any]:
        owner = self.key(t.name)
        names = unique([f.name for f in t.fields])
        consts = unique(
            [
                f"{bare(names[f.name]).upper()}_{kind}"
                for f in t.fields
                for kind in ("BOUNDS", "DEFAULT")
            ]
        )
        fields, reads, writes, defaults, constants = [], [], [], [], []
        read_bounds: list[RustCode | None] = []
        for f in t.fields:
            name = names[f.name]
            as_u64 = unsigned(f.type, f.constraints)
            ty = self.schemas.rust_type(f.type, self.home, owner, as_u64)
            fields.append(
                {
                    "doc": doc(f.doc, indent=4) if f.doc else None,
                    "decl": layout.field(4, code("pub ", name, ":"), ty),
                }
            )
            bounds = _bounds(f, as_u64)
            bounds_const = consts[f"{bare(name).upper()}_BOUNDS"]
            if bounds:
                constants.append(_bounds_const(bounds_const, bounds))
            default = None
            if isinstance(f.default, ir.Default):
                default_const = consts[f"{bare(name).upper()}_DEFAULT"]
                default, constant = _default(f.type, f.default.value, default_const)
                if constant is not None:
                    constants.append(constant)
                defaults.append((name, default))
                if default == "Vec::new()" and ty.startswith("Rows<"):
                    default = code("Rows(Vec::new())")
            elif isinstance(f.default, ir.MemberDefault):
                default = self.member_default(f.type, f.default)
                defaults.append((name, default))
            read_args = [
                a for a in (default, code("&Self::", bounds_const) if bounds else None) if a
            ]
            method = "field" if default is None else "field_or"
            if constant_default(f):
                method += "_into"  # the default is a constant: &'static str, &'static [u8]
            method += "_in" if bounds else ""
            reads.append((name, code(method), read_args))
            read_bounds.append(code("&Self::", bounds_const) if bounds else None)
            write_args = [code("&self.", name)] + (
                [code("&Self::", bounds_const)] if bounds else []
            )
            writes.append(
                layout.method_call(
                    8, "w", code("field_in" if bounds else "field"), write_args, "?;"
                )
            )
        required = sum(1 for f in t.fields if isinstance(f.default, ir.NoDefault))
        columns = self.field_columns(t, names, reads, read_bounds)
        field_names = [string(f.name) for f in t.fields]
        allow = lint_allowances([self.name(t)], list(names.values()))
        arms = [
            layout.match_arm(12, code(str(i) if i < len(t.fields) - 1 else "_"), name)
            for i, name in enumerate(field_names)
        ]
        generics = "<'a>" if self.schemas.lifetime(owner) else ""
        return {
            "kind": "struct",
            "allow": allow,
            "fields": fields,
            "field_names": field_names,
            "field_name_arms": arms,
            "field_name_only": field_names[0] if field_names else string(""),
            "inherent_impl": code("impl", generics, " ", self.self_type(t), " {"),
            "tag_const": None
            if t.tag is None
            else layout.const_item(
                4, code("const TAG: Option<Tag<'static>>"), code("Some(", _tag(t.tag), ")")
            ),
            "required": required,
            "count": len(t.fields),
            "columns": columns,
            "constants": constants,
            "read": layout.field_values(8, code("Ok(Self"), reads, ")", "s"),
            "writes": writes,
            # Every field has a default: Default, derived when each is its type's own.
            "derive_default": len(defaults) == len(t.fields) and all(_zero(f) for f in t.fields),
            "default": layout.struct_literal(8, code("Self"), defaults, "")
            if len(defaults) == len(t.fields) and not all(_zero(f) for f in t.fields)
            else None,
        }

    def field_columns(
        self,
        t: ir.StructDef,
        names: dict[str, RustCode],
        read_methods: list[tuple[RustCode, RustCode, list[RustCode]]],
        read_bounds: list[RustCode | None],
    ) -> dict[str, Any] | None:
        """How a struct that column lists hold reads and writes its fields as columns: per
        field, a column of its values (checked against its constraints), or of references
        for a type that travels once."""
        if self.key(t.name) not in self.schemas.column_values():
            return None
        reads, writes, values = [], [], []
        for i, (f, read, bound) in enumerate(zip(t.fields, read_methods, read_bounds, strict=True)):
            name = names[f.name]
            _, method, args = read
            once = isinstance(f.type, ir.Named) and is_shared(
                self.schemas.defs[(f.type.module, f.type.name)]
            )
            # As rows read the field (its default, its bounds), a column of it; a type
            # that travels once (a union, a shared struct) may be referred to by index.
            column = code("once_column") if once else code(method.replace("field", "column"))
            read_args = [] if once else list(args)
            reads.append(layout.let_call(8, f"mut f{i}", "c", column, read_args, "?;"))
            bounds = [] if bound is None else [bound]
            write = code("once_column" if once else "column_in" if bounds else "column")
            getter = code("|v| &v.", name)
            writes.append(layout.method_call(8, "w", write, [getter, *bounds], "?;"))
            values.append((name, code("value"), [code("&mut f", str(i))]))
        return {
            "decode_impl": layout.impl_header(
                code(DECODE_BOUND), code("FieldColumns<'a, C>"), self.self_type(t)
            ),
            "encode_impl": layout.impl_header(
                code("<'a>"), code("FieldColumnsEncode<'a>"), self.self_type(t)
            ),
            "reads": reads,
            "value": layout.field_values(12, code("out.push(Self"), values, ");", "c"),
            "writes": writes,
        }

    def union_view(self, t: ir.UnionDef) -> dict[str, Any]:
        str_tags = any(isinstance(v.tag, str) for v in t.variants)
        names = variant_names(t, self.home, self.schemas.type_names)
        variants = []
        for v, name in zip(t.variants, names, strict=True):
            struct_variant = (
                isinstance(v.type, ir.Named)
                and isinstance(self.schemas.defs[(v.type.module, v.type.name)], ir.StructDef)
                and not is_shared(self.schemas.defs[(v.type.module, v.type.name)])
            )
            ty = (
                self.schemas.path((v.type.module, v.type.name), self.home)  # type: ignore[union-attr]
                if struct_variant
                else self.schemas.rust_type(v.type, self.home)
            )
            tag = _tag(v.tag)
            read = "fields" if struct_variant else "value"
            variants.append(
                {
                    "doc": doc(
                        f"Tag {_tag_text(v.tag)}: `{ir.spell(v.type, _schema_leaf)}`.", indent=4
                    ),
                    "decl": layout.tuple_variant(4, name, ty),
                    "read": layout.match_arm(12, tag, code("Self::", name, "(v.", read, "()?)")),
                    "write": layout.match_arm_call(
                        12,
                        code("Self::", name, "(value)"),
                        "e",
                        code("write_struct" if struct_variant else "value_variant"),
                        [code("value")] if struct_variant else [tag, code("value")],
                    ),
                }
            )
        return {
            "kind": "union",
            "allow": lint_allowances([self.name(t), *names], []),
            "variants": variants,
            "str_tags": "true" if str_tags else "false",
            "ref_form": "StrTag" if str_tags else "IntTag",
        }

    def enum_view(self, t: ir.EnumDef) -> dict[str, Any]:
        ty = self.self_type(t)
        str_values = isinstance(t.members[0].value, str)
        names = member_names(t)
        members = []
        for m, name in zip(t.members, names, strict=True):
            if str_values:
                assert isinstance(m.value, str)
                shown = f"`{_tag_text(m.value)}`"
                text = f"{shown}: {m.doc}" if m.doc else f"{shown}."
                decl = code("    ", name, ",")
            else:
                assert isinstance(m.value, int)
                text = m.doc
                decl = code("    ", name, " = ", _int(m.value), ",")
            members.append({"doc": doc(text, indent=4) if text else None, "decl": decl})
        items = [code("Self::", n) for n in names]
        kind = "Str" if str_values else "Int"
        return {
            "kind": "enum",
            "allow": lint_allowances([self.name(t)], []),
            "str_values": str_values,
            "members": members,
            "trait_impl": layout.impl_header(code(""), code(kind, "Enum"), ty),
            "members_const": layout.array_const(4, code("const MEMBERS: &'static [Self]"), items),
            "value_arms": [
                layout.match_arm(12, item, string(m.value))  # type: ignore[arg-type]
                for item, m in zip(items, t.members, strict=True)
            ]
            if str_values
            else [],
            "expected": string("str" if str_values else "int"),
            "read": code("d.read_", kind.lower(), "_enum()"),
            "write": code("e.write_", kind.lower(), "_enum(*self)"),
            "segment": code("Segment::", kind.lower(), "_key(self.value())"),
            "any_decode_impl": layout.impl_header(code("<'a, C>"), code("Decode<'a, C>"), ty),
            "map_key_impl": layout.impl_header(code(""), code("MapKey"), ty),
        }

    def member_default(self, t: ir.TypeExpr, default: ir.MemberDefault) -> RustCode:
        """A member of an enum as a field's default: ``Modality::Image``, optionally
        ``Some(...)``."""
        inner = t.inner if isinstance(t, ir.OptionalOf) else t
        assert isinstance(inner, ir.Named)
        key = (inner.module, inner.name)
        enum = self.schemas.defs[key]
        assert isinstance(enum, ir.EnumDef)
        names = dict(zip((m.name for m in enum.members), member_names(enum), strict=True))
        member = code(self.schemas.path(key, self.home), "::", names[default.member])
        return code("Some(", member, ")") if isinstance(t, ir.OptionalOf) else member

    def mapping_view(self, t: ir.MappingDef) -> dict[str, Any]:
        owner = self.key(t.name)
        entries = self.schemas.rust_type(ir.DictOf(t.key, t.value), self.home, owner)
        value = self.schemas.column_value(owner)
        return {
            "kind": "mapping",
            "allow": lint_allowances([self.name(t)], []),
            "decl": _tuple_struct(self.self_type(t), entries),
            "target": layout.const_item(4, code("type Target"), entries),
            # Its lists may travel as column lists: the struct its values are.
            "column_value": None
            if value is None
            else layout.const_item(4, code("type Value"), self.schemas.path(value, self.home)),
        }

    # -- the module ------------------------------------------------------------------

    def context(self) -> dict[str, Any]:
        module = self.module
        reach = _imports(self.schemas, module)
        tables = []
        for t in self.shared:
            ty = code("Vec<Arc<", self.self_type(t), ">>")
            tables.append(
                {
                    "doc": doc(f"`{t.name}` values.", indent=4),
                    "decl": layout.field(4, code(self.table_of_name(t), ":"), ty),
                }
            )
        needs_marker = not any(self.schemas.lifetime(self.key(t.name)) for t in self.shared)
        method = self.schemas.module_names[self.home]
        contexts = []
        for schema in reach:
            field = self.schemas.module_names[schema]
            tables_type = code(self.module_path(schema, "Tables"), "<'a>")
            contexts.append(
                {
                    "field": field,
                    "decl": layout.field(4, code(field, ":"), tables_type),
                    "has_tables": layout.impl_header(
                        code("<'a>"),
                        code(self.module_path(schema, "HasTables"), "<'a>"),
                        code("Context<'a>"),
                    ),
                    "tabled": code(
                        "impl<'a> ", self.module_path(schema, "Tabled"), "<'a> for Context<'a> {}"
                    ),
                    "tables_type": tables_type,
                }
            )
        bounds = [code("HasTables<'a>")] + [
            code(self.module_path(i, "Tabled"), "<'a>")
            for i in module.imports
            if i in self.schemas.modules
        ]
        types = [self.type_view(t) for t in module.types]
        return {
            "generator_version": GENERATOR_VERSION,
            "sha256": code(module.sha256),
            "source": comment(module.source),
            "module_doc": doc(_module_doc(module), marker="//!"),
            "schema_name_const": layout.const_item(
                0, code("pub const SCHEMA_NAME: &str"), string(module.name)
            ),
            "major": module.major,
            "types": types,
            "tables": tables,
            "needs_marker": needs_marker,
            "method": method,
            "tabled": layout.supertraits(code("pub trait Tabled<'a>"), bounds),
            "contexts": contexts,
        }

    def table_of_name(self, t: ir.TypeDef) -> RustCode:
        return code("t", self.table_of[t.name])


def _tuple_struct(ty: RustCode, entries: RustCode) -> RustCode:
    """``pub struct Name(pub Entries);``, broken as rustfmt breaks a long tuple struct."""
    one = code("pub struct ", ty, "(pub ", entries, ");")
    if len(one) <= layout.WIDTH:
        return one
    return RustCode(
        "\n".join([code("pub struct ", ty, "("), code("    pub ", entries, ","), code(");")])
    )


def camel_case(name: RustCode) -> bool:
    """Whether rustc's ``non_camel_case_types`` lint takes ``name`` for UpperCamelCase."""
    text = bare(name).strip("_")
    if not text:
        return True
    cased = [c.isalpha() for c in text]
    beside_underscore = any(
        (cased[i] and text[i + 1] == "_") or (text[i] == "_" and cased[i + 1])
        for i in range(len(text) - 1)
    )
    return not text[0].islower() and "__" not in text and not beside_underscore


def snake_case(name: RustCode) -> bool:
    """Whether rustc's ``non_snake_case`` lint takes ``name`` for snake_case."""
    text = bare(name).strip("_")
    return not any(c.isupper() for c in text) and "__" not in text


def lint_allowances(names: list[RustCode], fields: list[RustCode]) -> RustCode | None:
    """The ``#[allow(...)]`` an item needs for names the schema gave it that break Rust's
    naming conventions (they are kept: they are the schema's names)."""
    lints = []
    if not all(camel_case(n) for n in names):
        lints.append("non_camel_case_types")
    if not all(snake_case(f) for f in fields):
        lints.append("non_snake_case")
    return allow(lints) if lints else None


def constant_default(f: ir.Field) -> bool:
    """Whether a field's default is a str or bytes constant converted on use."""
    return (
        isinstance(f.default, ir.Default)
        and isinstance(f.default.value, (str, bytes))
        and not isinstance(f.type, ir.OptionalOf)
    )


def _zero(f: ir.Field) -> bool:
    """Whether a field's default is what Rust's ``Default`` gives its type."""
    if not isinstance(f.default, ir.Default):
        return False
    value = f.default.value
    if value is None or value is False or value in ("", b"", (), []) or value == {}:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value == 0 and f.type != ir.Builtin("float")
    return isinstance(value, float) and repr(value) == "0.0"


def _tag(tag: int | str) -> RustCode:
    """A union tag as a ``Tag`` (a pattern and a value)."""
    if isinstance(tag, str):
        return code("Tag::Str(", string(tag), ")")
    return code("Tag::Int(", _int(tag), ")")


def _tag_text(tag: int | str) -> str:
    return str(tag) if isinstance(tag, int) else f'"{tag}"'


def _schema_leaf(t: ir.Builtin | ir.Named) -> str:
    """A leaf of a type, named as in the schema."""
    return t.name


def _bounds(f: ir.Field, as_u64: bool) -> list[tuple[str, RustCode]]:
    """A field's constraints as ``Bounds`` fields (a ``ge: 0`` that ``u64`` implies is dropped)."""
    out = []
    for name, value in f.constraints.items():
        if as_u64 and name == "ge" and value == 0:
            continue
        if name == "pattern":
            assert isinstance(value, str)
            out.append((name, code("Some(", string(value), ")")))
        elif name in ("min_length", "max_length"):
            out.append((name, code("Some(", int(value), ")")))
        elif isinstance(value, float):
            out.append((name, code("Some(Num::Float(", _float(value), "))")))
        else:
            out.append((name, code("Some(Num::Int(", _int(int(value)), "))")))
    return out


def _bounds_const(name: RustCode, bounds: list[tuple[str, RustCode]]) -> RustCode:
    rows = [code("    pub const ", name, ": Bounds = Bounds {")]
    rows += [code("        ", n, ": ", v, ",") for n, v in bounds]
    rows += [code("        ..Bounds::NONE"), code("    };")]
    return RustCode("\n".join(rows))


def _int(value: int) -> RustCode:
    return code(str(value)) if value >= 0 else code("-", str(-value))


def _float(value: float) -> RustCode:
    if math.isnan(value):
        return code("f64::NAN")
    if math.isinf(value):
        return code("f64::INFINITY" if value > 0 else "f64::NEG_INFINITY")
    text = repr(float(value))
    if text.startswith("-"):
        return code("-", _float(-value))
    mantissa, _, exponent = text.partition("e")
    if exponent:
        sign = "-" if exponent.startswith("-") else ""
        return code(mantissa, "e", sign, str(int(exponent.lstrip("+-"))))
    return code(text)


def _default(
    t: ir.TypeExpr, value: ir.DefaultValue, const: RustCode
) -> tuple[RustCode, RustCode | None]:
    """A field's default as an expression, and the constant it names, if any."""
    inner = t.inner if isinstance(t, ir.OptionalOf) else t
    if value is None:
        return code("None"), None
    expression, constant = _plain_default(inner, value, const)
    if isinstance(t, ir.OptionalOf):
        if constant is not None:  # an optional str or bytes default: converted here
            return code("Some(", expression, ".into())"), constant
        return code("Some(", expression, ")"), constant
    return expression, constant


def _plain_default(
    t: ir.TypeExpr, value: ir.DefaultValue, const: RustCode
) -> tuple[RustCode, RustCode | None]:
    if isinstance(value, bool):
        return code("true" if value else "false"), None
    if t == ir.Builtin("float"):
        assert isinstance(value, (int, float))
        return _float(float(value)), None
    if isinstance(value, int):
        return _int(value), None
    # A str or bytes default is a constant (a literal can be long), converted on use.
    if isinstance(value, str):
        head = code("pub const ", const, ": &'static str")
        return code("Self::", const), layout.const_item(4, head, string(value))
    if isinstance(value, bytes):
        head = code("pub const ", const, ": &'static [u8]")
        return code("Self::", const), layout.const_item(4, head, byte_string(value))

    if isinstance(value, dict):
        return code("IndexMap::new()"), None
    if isinstance(value, (list, tuple)):
        return code("Vec::new()"), None
    raise UnsafeText(f"no Rust default for {value!r}")


DEFAULT_COMMAND = "mmcodec generate --lang rust"
"""The command headers name when the caller gives none (Python's: ``mmcodec generate``)."""

COMMAND_WIDTH = layout.WIDTH - len("//   ") - len(" \\")
"""The width of a line of the command in a header, after ``//   `` and before `` \\``."""


def regenerate(command: str) -> list[RustCode]:
    """The lines of the command that regenerates a file, each the rest of a comment."""
    return [comment(line) for line in command_lines(command, COMMAND_WIDTH)]


def render_module(
    module: ir.Module, modules: list[ir.Module], command: str = DEFAULT_COMMAND
) -> str:
    """The Rust source of one schema module, formatted as rustfmt formats it; its header
    names ``command``, the command that regenerates it."""
    schemas = Schemas.of(modules)
    context = _Module(schemas, module).context()
    return (
        environment().get_template("module.rs.j2").render(context, regenerate=regenerate(command))
    )


def render_mod(modules: list[ir.Module], command: str = DEFAULT_COMMAND) -> str:
    """``mod.rs``: the generated modules, siblings that refer to each other by ``super::``."""
    schemas = Schemas.of(modules)
    names = sorted(schemas.module_names.values(), key=bare)
    return (
        environment()
        .get_template("mod.rs.j2")
        .render(generator_version=GENERATOR_VERSION, modules=names, regenerate=regenerate(command))
    )


__all__ = ["ident", "render_mod", "render_module"]
