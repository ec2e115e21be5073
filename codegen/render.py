"""IR -> Python source. Every decision is made here; the templates only lay it out.

For each type expression the renderer decides three things: its annotation in
domain code, its annotation on the wire, and how a value converts each way.
A conversion is always a callable ``f(value, ctx)``: a runtime helper, a function
generated for a named type, or a generated helper for a container type (one per
distinct type expression, named after it, so output is stable); a helper exists
only when generated code calls it.

The output needs no formatter: the imports are those the rendered body uses
(:mod:`~mmcodec.codegen.imports`), and statements too long for a line are broken
as ``ruff format`` would break them (:mod:`~mmcodec.codegen.layout`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import jinja2

from mmcodec.codegen import GENERATOR_VERSION, ir, layout, pysource
from mmcodec.codegen.imports import Import, import_block, sort_all, used_names
from mmcodec.codegen.pysource import Code, code, docstring, literal
from mmcodec.codegen.shell import command_lines
from mmcodec.runtime.api import API_LEVEL

_TEMPLATES = Path(__file__).parent / "templates"

_PRIMITIVE_DOMAIN = {"int": "int", "float": "float", "bool": "bool", "str": "str", "bytes": "bytes"}
_IDENTITY_ON_DECODE = frozenset(_PRIMITIVE_DOMAIN)
_DOMAIN_BUILTINS = {
    "tensor": "torch.Tensor",
    "nested_tensors": "_b.NestedTensors",
    "slice": "slice",
}
_WIRE_BUILTINS = {
    "tensor": "_wire.NonNegative",
    "nested_tensors": "_wire.NestedWire",
    "slice": "_wire.SliceWire",
}


# Everything a generated module may import besides its bound classes, exports and
# sibling modules; it imports those its code uses (see mmcodec.codegen.imports).
_IMPORTS = (
    Import("collections.abc", "Sequence"),
    Import("enum", "IntEnum"),
    Import("enum", "StrEnum"),
    *(
        Import("typing", name)
        for name in ("TYPE_CHECKING", "Annotated", "Any", "TypeAlias", "TypeVar")
    ),
    Import("msgspec"),
    Import("torch"),
    Import("mmcodec.runtime", "api", "_api"),
    Import("mmcodec.runtime", "builtins", "_b"),
    Import("mmcodec.runtime", "codec", "_codec"),
    Import("mmcodec.runtime", "columns", "_columns"),
    Import("mmcodec.runtime", "wire", "_wire"),
    Import("mmcodec.runtime.errors", "DecodeError"),
    Import("mmcodec.runtime.errors", "EncodeError"),
    Import("mmcodec.runtime.limits", "DEFAULT_LIMITS"),
    Import("mmcodec.runtime.limits", "Limits"),
    Import("mmcodec.runtime.tensors", "DecodeContext", "_DecodeContext"),
    Import("mmcodec.runtime.tensors", "EncodeContext", "_EncodeContext"),
    Import("mmcodec.runtime.tensors", "reserve_tables", "_reserve_tables"),
)


@functools.cache
def environment() -> jinja2.Environment:
    """The template environment, one per process (compiling the template per module was
    half of ``mmcodec check``'s time).

    Templates print only what :mod:`~mmcodec.codegen.pysource` allows (``finalize``): schema
    text reaches them as literals, docstrings and comments, never as itself."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=True,  # with Code a Markup: see pysource
        finalize=pysource.finalize,
    )
    env.filters["literal"] = literal
    env.filters["comment"] = pysource.comment
    return env


@dataclass(frozen=True)
class Helper:
    """A generated conversion function for one container type expression."""

    name: str
    kind: str  # "list", "vartuple", "tuple", "dict", "optional"
    direction: str  # "to_wire" or "from_wire"
    param: str
    returns: str
    item_convs: tuple[str, ...]
    """Callables converting a tuple's items, or a dict's keys."""
    item_expr: str
    """For lists and dicts: the expression converting ``item`` (optionals inlined)."""
    item_types: tuple[str, ...]
    """Annotations of the converted items (wire types to the wire, domain types back)."""
    what: str
    columns: dict[str, object] | None = None
    """For a list that may travel as columns (see :meth:`_Renderer.column_list`): the
    names its code uses."""


@dataclass
class _Renderer:
    module: ir.Module
    defs: dict[tuple[str, str], ir.TypeDef]
    helpers: dict[str, Helper] = field(default_factory=dict)
    column_structs: dict[str, dict[str, object]] = field(default_factory=dict)
    """Per struct whose values travel in column lists: its column code (see _column_struct)."""

    # -- names ---------------------------------------------------------------------

    def _prefix(self, module: str) -> str:
        return "" if module == self.module.name else f"_{module}."

    def domain_name(self, t: ir.Named) -> str:
        return f"{self._prefix(t.module)}{t.name}"

    def wire_name(self, t: ir.Named) -> str:
        if self.is_enum(t):  # msgspec reads and writes the enum class itself
            return self.domain_name(t)
        return f"{self._prefix(t.module)}_{t.name}Wire"

    def is_enum(self, t: ir.TypeExpr) -> bool:
        return isinstance(t, ir.Named) and isinstance(self.defs[(t.module, t.name)], ir.EnumDef)

    def func(self, t: ir.Named, direction: str) -> str:
        return f"{self._prefix(t.module)}_{t.name}_{direction}"

    # -- annotations ---------------------------------------------------------------

    def domain_annotation(self, t: ir.TypeExpr) -> str:
        return ir.spell(t, self._domain_leaf)

    def _domain_leaf(self, t: ir.Builtin | ir.Named) -> str:
        if isinstance(t, ir.Named):
            return self.domain_name(t)
        return _DOMAIN_BUILTINS.get(t.name) or _PRIMITIVE_DOMAIN[t.name]

    def wire_annotation(self, t: ir.TypeExpr, constraints: ir.Constraints | None = None) -> str:
        if isinstance(t, ir.OptionalOf):
            return code(self.wire_annotation(t.inner, constraints), " | None")
        base = self._wire_base(t)
        if constraints is not None and constraints.items():
            return code("Annotated[", base, ", msgspec.Meta(", _keywords(constraints), ")]")
        return base

    def _wire_base(self, t: ir.TypeExpr) -> str:
        if isinstance(t, (ir.Builtin, ir.Named)):
            return self._wire_leaf(t)
        if isinstance(t, ir.OptionalOf):
            return f"{self._wire_base(t.inner)} | None"
        if isinstance(t, ir.ListOf):
            rows = f"list[{self._wire_base(t.item)}]"
            if self.column_list(t) is None:
                return rows
            return f"{rows} | _{_mangle(t, self.module.name)}_ColumnsWire"  # or columns
        if isinstance(t, ir.VarTupleOf):
            return f"tuple[{self._wire_base(t.item)}, ...]"
        if isinstance(t, ir.TupleOf):
            return f"tuple[{', '.join(self._wire_base(i) for i in t.items)}]"
        return f"dict[{self._wire_base(t.key)}, {self._wire_base(t.value)}]"

    def _wire_leaf(self, t: ir.Builtin | ir.Named) -> str:
        if isinstance(t, ir.Named):
            return self.wire_ref(t)
        return _WIRE_BUILTINS.get(t.name) or _PRIMITIVE_DOMAIN[t.name]

    def shared(self, t: ir.Named) -> bool:
        """Whether later occurrences of one value of this type travel as a back-reference.

        Union values do (as tagged references), and so do structs, as a bare index,
        except structs that are union variants: their union already shares them.
        """
        target = self.defs[(t.module, t.name)]
        return isinstance(target, ir.StructDef) and target.tag is None

    def column_list(self, t: ir.ListOf) -> tuple[ir.Named, ir.Named, bool] | None:
        """``(M, S, optional)`` when a list may travel as columns (COLUMNS-SPEC "Where"):
        its items are ``M`` or ``optional[M]``, ``M`` a named mapping of ``str`` keys to
        ``S``, a named struct with a back-reference table. None for every other list."""
        item, optional = t.item, False
        if isinstance(item, ir.OptionalOf):
            item, optional = item.inner, True
        if not isinstance(item, ir.Named):
            return None
        mapping = self.defs[(item.module, item.name)]
        if not (isinstance(mapping, ir.MappingDef) and mapping.key == ir.Builtin("str")):
            return None
        value = mapping.value
        if not (isinstance(value, ir.Named) and self.shared(value)):
            return None
        return item, value, optional

    def wire_ref(self, t: ir.Named) -> str:
        """The wire annotation of a reference to a named type: a shared struct may be an index."""
        name = self.wire_name(t)
        return f"{name} | _wire.NonNegative" if self.shared(t) else name

    # -- conversions ---------------------------------------------------------------

    def identity_on_decode(self, t: ir.TypeExpr) -> bool:
        """True when msgspec already decodes the wire value into the domain value."""
        if isinstance(t, ir.Builtin):
            return t.name in _IDENTITY_ON_DECODE
        if isinstance(t, ir.Named):
            return self.is_enum(t)  # msgspec decodes (and checks) the member at C speed
        if isinstance(t, (ir.ListOf, ir.VarTupleOf)):
            return self.identity_on_decode(t.item)
        if isinstance(t, ir.TupleOf):
            return all(self.identity_on_decode(i) for i in t.items)
        if isinstance(t, ir.DictOf):
            return self.identity_on_decode(t.value)
        return self.identity_on_decode(t.inner)

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

    def convert_expr(self, t: ir.TypeExpr, value: str, direction: str) -> str:
        """An expression converting ``value`` (a cheap attribute read), inlining optionals."""
        if direction == "from_wire" and self.identity_on_decode(t):
            return value
        if isinstance(t, ir.OptionalOf):
            inner = self.to_wire(t.inner) if direction == "to_wire" else self.from_wire(t.inner)
            return f"None if {value} is None else {inner}({value}, ctx)"
        convert = self.to_wire(t) if direction == "to_wire" else self.from_wire(t)
        return f"{convert}({value}, ctx)"

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
        helper = Helper(
            name=name,
            kind=kind,
            direction=direction,
            param=domain if to_wire else wire,
            returns=wire if to_wire else domain,
            item_convs=(),
            item_expr="",
            item_types=(),
            what=_what(kind),
        )
        self.helpers[name] = helper  # registered first: recursive types refer to themselves
        annotate = self.wire_annotation if to_wire else self.domain_annotation
        if kind in ("list", "vartuple", "dict"):
            # A loop converts each item by an expression, so that an optional item costs
            # no extra call; a dict's keys still go through their callable.
            convs = tuple(convert(i) for i in items[:-1])
            item_expr = self.convert_expr(items[-1], "item", direction)
        else:
            convs, item_expr = tuple(convert(i) for i in items), ""
        columns = None
        if isinstance(t, ir.ListOf) and (found := self.column_list(t)) is not None:
            columns = self._columns_view(t, *found)
        self.helpers[name] = replace(
            helper,
            item_convs=convs,
            item_expr=item_expr,
            item_types=tuple(annotate(i) for i in items),
            columns=columns,
        )
        return name

    # -- column lists --------------------------------------------------------------

    def _columns_view(
        self, t: ir.ListOf, mapping: ir.Named, struct: ir.Named, optional: bool
    ) -> dict[str, object]:
        """The names a column list's code uses, its struct's column code registered."""
        base = f"_{_mangle(t, self.module.name)}"
        target = self.defs[(mapping.module, mapping.name)]
        return {
            "wire": f"{base}_ColumnsWire",
            "rows": f"{base}_rows",
            "columns": f"{base}_columns",
            "from_columns": f"{base}_from_columns",
            "optional": optional,
            "item_domain": self.domain_annotation(t.item),
            "item_wire": self.wire_annotation(t.item),
            "struct": self._column_struct(struct),
            "mapping": self.domain_name(mapping),
            "make": f"{self._prefix(mapping.module)}_{mapping.name}_new"
            if target.binding is not None
            else self.domain_name(mapping),
        }

    def _column_struct(self, t: ir.Named) -> dict[str, object]:
        """The column code of a struct whose values travel in column lists: its column wire
        types, how a column of its values converts each way."""
        base = f"_{_mangle(t, self.module.name)}"
        if base in self.column_structs:
            return self.column_structs[base]
        struct = self.defs[(t.module, t.name)]
        assert isinstance(struct, ir.StructDef)
        view: dict[str, object] = {
            "name": t.name,
            "name_literal": literal(t.name),
            "domain": self.domain_name(t),
            "values_wire": f"{base}ValuesWire",
            "fields_wire": f"{base}FieldsWire",
            "column_wire": f"{base}ColumnWire",
            "column_to_wire": f"{base}_column_to_wire",
            "from_fields": f"{base}_from_fields",
            "reader": f"{base}_FIELDS",
            "new": f"{base}_columns_new",
            "assign": f"{base}_assign" if struct.binding is not None and struct.fields else None,
            "wire_ref": self.wire_ref(t),
            "to_wire": self.func(t, "to_wire"),
            "from_wire": self.func(t, "from_wire"),
            "table": f"{self._prefix(t.module)}_{t.name}_TABLE",
            "names": _names_tuple(struct.fields),
            "fields": [],
        }
        self.column_structs[base] = view  # registered first: recursive types refer to it
        view["fields"] = [self._column_field(f) for f in struct.fields]
        return view

    def _column_field(self, f: ir.Field) -> dict[str, object]:
        """How one field of a column list's struct travels in a fields column."""
        t = f.type
        inner = t.inner if isinstance(t, ir.OptionalOf) else t
        element = self.wire_annotation(t, f.constraints)
        view: dict[str, object] = {
            "name": f.name,
            "default": _default(self, f),
            "to_wire_expr": _checked(self, f, "v"),
            "identity": self.identity_on_decode(t),
        }
        if isinstance(t, ir.Named) and not self.is_enum(t):  # sent once per object
            target = self.defs[(t.module, t.name)]
            if isinstance(target, ir.UnionDef):
                element = code(element, " | _wire.NonNegative")
            view.update(
                kind="references",
                to_wire=self.to_wire(t),
                from_wire=self.from_wire(t),
                table=f"{self._prefix(t.module)}_{t.name}_TABLE",
                type_name=literal(t.name),
            )
        elif isinstance(inner, ir.Builtin) and inner.name in ("tensor", "nested_tensors"):
            view.update(kind="tensors", from_wire=self.from_wire(inner))
        else:
            view.update(kind="values", from_wire=self.from_wire(inner))
        view["wire"] = element
        return view


def _names_tuple(fields: Sequence[ir.Field]) -> Code:
    """``("a", "b")``: the fields' names as a tuple literal."""
    parts = [code(", " if i else "", literal(f.name)) for i, f in enumerate(fields)]
    return code("(", *parts, "," if len(fields) == 1 else "", ")")


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


def _module_doc(module: ir.Module) -> str:
    usage = (
        f"Schema ``{module.name}``, major version {module.major}. Codec functions:\n"
        "``encode(obj)`` -> frames, ``decode(frames, type)``, and the single-buffer pair\n"
        "``encode_bytes`` / ``decode_bytes``. Decoded tensors view the frames they came from:\n"
        "treat them as read-only unless the frames are writable, or pass ``copy=True``.\n"
    )
    return f"{module.doc}\n\n{usage}"


COMMAND_WIDTH = layout.WIDTH - len("#   ") - len(" \\")
"""The width of a line of the command in a header, after ``#   `` and before `` \\``."""


def _keywords(constraints: ir.Constraints) -> Code:
    """``ge=0, pattern="..."``: the constraints as keyword arguments."""
    pairs = [
        code(", " if i else "", n, "=", literal(v)) for i, (n, v) in enumerate(constraints.items())
    ]
    return code(*pairs)


def render_module(
    module: ir.Module, all_modules: list[ir.Module], package: str, command: str = "mmcodec generate"
) -> str:
    """The Python source of one generated module, laid out as ``ruff format`` would;
    its header names ``command``, the command that regenerates it."""
    # Type definitions by wire identity, from the schemas' own modules: a bindings
    # module has the same types (its classes aside) under the same schema name.
    defs = {(m.name, t.name): t for m in all_modules if m.python_name == m.name for t in m.types}
    r = _Renderer(module, defs)
    views = {t.name: _type_view(r, t) for t in module.types}
    types = [views[t.name] for t in module.types]
    domain_order, quoted = _domain_order(module)
    for name in quoted:  # part of a cycle of aliases: a string, for type checkers only
        view = views[name]
        key = "domain_alias" if view["kind"] == "union" else "value_domain"
        view[key] = literal(view[key])
    candidates = [
        *_IMPORTS,
        *(
            Import(
                t.binding.module, t.binding.qualname, "" if t.binding.qualname == t.name else t.name
            )
            for t in module.types
            if t.binding is not None
        ),
        *(Import(e.module, e.qualname) for e in module.exports),
        *(Import(".", other, f"_{other}") for other in module.imports),
    ]
    helpers = sorted(r.helpers.values(), key=lambda h: h.name)
    public = sort_all(
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
            "NAMED_TYPES",
        }
    )
    template = environment().get_template("module.py.j2")
    context = {
        "module": module,
        "doc": docstring(_module_doc(module)),
        "regenerate": [pysource.comment(line) for line in command_lines(command, COMMAND_WIDTH)],
        "generator_version": GENERATOR_VERSION,
        "runtime_api": API_LEVEL,
        "types": types,
        # Types whose values can travel once, each with a per-message table.
        "tabled": [v for v in types if v["kind"] == "union" or v.get("shared")],
        "domain_types": [views[n] for n in domain_order],
        "wire_types": [views[n] for n in _wire_order(module)],
        "wire_structs": [views[n] for n in _wire_order(module) if views[n]["kind"] == "struct"],
        "wire_aliases": [views[n] for n in _wire_order(module) if views[n]["kind"] != "struct"],
        "helpers": helpers,
        "column_structs": [r.column_structs[k] for k in sorted(r.column_structs)],
        "column_lists": [h for h in helpers if h.columns and h.direction == "to_wire"],
        "public": public,
    }
    # The body first, to see which names it uses; then the module with their imports.
    body = template.render(context, imports="")
    imports = pysource.lines(import_block(candidates, used_names(body), package).split("\n"))
    return layout.long_lines(template.render(context, imports=imports))


def _local_refs(module: ir.Module, t: ir.TypeExpr) -> list[str]:
    """Names of this module's types that a type expression mentions, in order."""
    if isinstance(t, ir.Named):
        return [t.name] if t.module == module.name else []
    if isinstance(t, (ir.ListOf, ir.VarTupleOf)):
        return _local_refs(module, t.item)
    if isinstance(t, ir.TupleOf):
        return [n for i in t.items for n in _local_refs(module, i)]
    if isinstance(t, ir.DictOf):
        return _local_refs(module, t.key) + _local_refs(module, t.value)
    if isinstance(t, ir.OptionalOf):
        return _local_refs(module, t.inner)
    return []


def _alias_refs(module: ir.Module, t: ir.TypeDef) -> list[str]:
    if isinstance(t, ir.UnionDef):
        return [n for v in t.variants for n in _local_refs(module, v.type)]
    if isinstance(t, ir.MappingDef):
        return _local_refs(module, t.key) + _local_refs(module, t.value)
    return []


def _topological(module: ir.Module, nodes: Sequence[ir.TypeDef]) -> list[str]:
    """``nodes`` ordered so that each comes after the nodes it mentions (ties: as declared).

    A cycle is cut where the depth-first walk meets it.
    """
    by_name = {t.name: t for t in nodes}
    order: list[str] = []
    seen: set[str] = set()

    def visit(t: ir.TypeDef) -> None:
        if t.name in seen:
            return
        seen.add(t.name)
        for name in _alias_refs(module, t):
            if name in by_name:
                visit(by_name[name])
        order.append(t.name)

    for t in nodes:
        visit(t)
    return order


def _domain_order(module: ir.Module) -> tuple[list[str], list[str]]:
    """The order of the domain definitions, and the aliases whose value must be a string.

    Class bodies' annotations are lazy, but a union alias and a mapping's base class are
    evaluated on import: they come after the classes, each after the aliases it mentions.
    Enums come first: a struct's default may be one of their members.
    On a cycle, an alias that mentions one defined later is quoted; so is any union alias
    or mapping base that mentions a quoted union (``"A" | None`` would fail at run time).
    """
    classes = (ir.EnumDef, ir.StructDef)
    enums = [t.name for t in module.types if isinstance(t, ir.EnumDef)]
    structs = enums + [t.name for t in module.types if isinstance(t, ir.StructDef)]
    aliases = [t for t in module.types if not isinstance(t, classes) and t.binding is None]
    order = _topological(module, aliases)
    index = {name: i for i, name in enumerate(order)}
    kinds = {t.name: t for t in aliases}
    quoted: set[str] = set()
    changed = True
    while changed:
        changed = False
        for t in aliases:
            if t.name not in quoted and any(
                n in kinds
                and (
                    index[n] >= index[t.name] or (n in quoted and isinstance(kinds[n], ir.UnionDef))
                )
                for n in _alias_refs(module, t)
            ):
                quoted.add(t.name)
                changed = True
    bound = [t.name for t in module.types if not isinstance(t, classes) and t.binding]
    return structs + order + bound, sorted(quoted)


def _wire_order(module: ir.Module) -> list[str]:
    """Wire classes first, then union aliases (of classes), then mapping aliases in order;
    enums have none (their class travels).

    Validation rejects a mapping that contains itself through mappings alone.
    """
    structs = [t.name for t in module.types if isinstance(t, ir.StructDef)]
    unions = [t.name for t in module.types if isinstance(t, ir.UnionDef)]  # enums: none
    mappings = _topological(module, [t for t in module.types if isinstance(t, ir.MappingDef)])
    return structs + unions + mappings


def _type_view(r: _Renderer, t: ir.TypeDef) -> dict[str, object]:
    base: dict[str, object] = {
        "name": t.name,
        "doc": docstring(t.doc) if t.doc else None,  # no doc: no docstring, not an empty one
        "bound": t.binding is not None,
        "wire": f"_{t.name}Wire",
        "to_wire": f"_{t.name}_to_wire",
        "from_wire": f"_{t.name}_from_wire",
        "table": f"_{t.name}_TABLE",
    }
    if isinstance(t, ir.StructDef):
        fields = []
        for f in t.fields:
            fields.append(
                {
                    "name": f.name,
                    "doc": docstring(f.doc) if f.doc else None,
                    "domain": r.domain_annotation(f.type),
                    "wire": r.wire_annotation(f.type, f.constraints),
                    "default": _default(r, f),
                    "to_wire_expr": _checked(r, f, f"obj.{f.name}"),
                    "guard": _fast_guard(r, f.type, f.constraints, f"v_{f.name}"),
                    "to_wire_checked": _checked(r, f, f"v_{f.name}"),
                    "from_wire_expr": r.convert_expr(f.type, f"wire.{f.name}", "from_wire"),
                    "identity": r.identity_on_decode(f.type),
                }
            )
        named = ir.Named(r.module.name, t.name)
        base.update(
            kind="struct",
            fields=fields,
            tag=None if t.tag is None else literal(t.tag),
            shared=r.shared(named),
            wire_ref=r.wire_ref(named),
        )
    elif isinstance(t, ir.UnionDef):
        variants = []
        for v in t.variants:
            named_struct = isinstance(v.type, ir.Named) and isinstance(
                r.defs[(v.type.module, v.type.name)], ir.StructDef
            )
            variants.append(
                {
                    "tag": literal(v.tag),
                    "domain": r.domain_annotation(v.type),
                    "check": _isinstance_check(r, v.type),
                    "wrapped": not named_struct,
                    "wire": r.wire_name(v.type)
                    if isinstance(v.type, ir.Named) and named_struct
                    else f"_{t.name}{_tag_suffix(v.tag)}Wire",
                    "value_wire": r.wire_annotation(v.type),
                    "to_wire": r.to_wire(v.type),
                    "from_wire": r.from_wire(v.type),
                    "identity": r.identity_on_decode(v.type),
                }
            )
        str_tags = any(isinstance(v.tag, str) for v in t.variants)
        base.update(
            kind="union",
            ref="_wire.StrTagRef" if str_tags else "_wire.IntTagRef",
            variants=variants,
            branches=_union_branches(variants),
            domain_alias=" | ".join(v["domain"] for v in variants),  # type: ignore[misc]
            expected=", ".join(v["domain"] for v in variants),  # type: ignore[misc]
        )
    elif isinstance(t, ir.EnumDef):
        base.update(
            kind="enum",
            wire=t.name,  # the class itself travels (by value)
            from_wire="_b.identity",
            base="StrEnum" if isinstance(t.members[0].value, str) else "IntEnum",
            members=[
                {
                    "name": m.name,
                    "value": literal(m.value),
                    "doc": docstring(m.doc) if m.doc else None,
                }
                for m in t.members
            ],
            member_values=_member_values(t),
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


def _union_branches(variants: list[dict[str, object]]) -> list[dict[str, str]]:
    """The decoder's dispatch on the wire class: a test and the domain value per branch.

    ``type(wire) is X`` (not a saved ``type(wire)``) lets mypy narrow ``wire``. Wrapped
    variants that msgspec already decodes to their domain value share one branch.
    """
    branches = []
    identity = []
    for v in variants:
        if v["wrapped"] and v["identity"]:
            identity.append(f"type(wire) is {v['wire']}")
            continue
        value = (
            f"{v['from_wire']}(wire.value, ctx)" if v["wrapped"] else f"{v['from_wire']}(wire, ctx)"
        )
        branches.append({"test": f"type(wire) is {v['wire']}", "value": value})
    if identity:
        branches.append({"test": " or ".join(identity), "value": "wire.value"})
    return branches


def _fast_guard(
    r: _Renderer, t: ir.TypeExpr, constraints: ir.Constraints, value: str
) -> str | None:
    """A type test that is false for every valid ``value`` of a bool, float, str or enum
    field without constraints, or None.

    The encoder reads such a field once and calls its checker only when the test holds
    (the checker then explains): one type test instead of a call, for the common case.
    """
    if isinstance(t, ir.Builtin) and t.name in ("bool", "float", "str") and not constraints.items():
        return f"type({value}) is not {t.name}"
    if isinstance(t, ir.Named) and r.is_enum(t):
        return f"type({value}) is not {r.domain_name(t)}"
    return None


def _member_values(t: ir.EnumDef) -> Code:
    """``dict(IMAGE="image", ...)``: what a bound enum's members must be."""
    pairs = [
        code(", " if i else "", m.name, "=", literal(m.value)) for i, m in enumerate(t.members)
    ]
    return code("dict(", *pairs, ")")


def _default(r: _Renderer, f: ir.Field) -> Code | None:
    """A field's default in source: a literal, or an enum member (``Modality.IMAGE``)."""
    if isinstance(f.default, ir.Default):
        return literal(f.default.value)
    if isinstance(f.default, ir.MemberDefault):
        enum = f.type.inner if isinstance(f.type, ir.OptionalOf) else f.type
        assert isinstance(enum, ir.Named)
        return code(r.domain_name(enum), ".", f.default.member)
    return None


def _checked(r: _Renderer, f: ir.Field, value: str) -> str:
    """The expression a struct's encoder converts field ``f`` (read as ``value``) with,
    checking its constraints too, so that bad values fail at the sender."""
    if f.type == ir.Builtin("int") and f.constraints.items() == [("ge", 0)]:
        return f"_b.expect_uint({value}, ctx)"  # the type and the bound in one call
    expression = r.convert_expr(f.type, value, "to_wire")
    if not f.constraints.items():
        return expression
    return code("_b.constrained(", expression, ", ", _keywords(f.constraints), ")")


def _tag_suffix(tag: int | str) -> str:
    """A distinct identifier part per tag: ``_`` is doubled, other non-alphanumerics
    become ``_<hex>_`` (so the tags "a-b" and "a_b" name different wrapper classes)."""
    if isinstance(tag, int):
        return f"_{tag}"
    return "_" + "".join(
        c if c.isalnum() and c.isascii() else "__" if c == "_" else f"_{ord(c):x}_" for c in tag
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
