"""Check schema files and lower them to the IR, reporting every error at once.

Each check appends a :class:`Diagnostic` with file:line:col and goes on, so one
run shows every problem. Only when no diagnostic was produced is the IR returned.
"""

from __future__ import annotations

import builtins
import difflib
import hashlib
import keyword
import operator
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from mmcodec.codegen import bindings, ir
from mmcodec.codegen.diagnostics import Diagnostic, Position, SchemaErrors
from mmcodec.codegen.load import LoadedFile, Map, Node, Scalar, Seq, load_file
from mmcodec.codegen.typeexpr import RawType, TypeSyntaxError, parse_type

FILE_KEYS = ("schema", "version", "doc", "imports", "exports", "types")
TYPE_KEYS = ("doc", "bind", "struct", "union", "mapping")
KINDS = ("struct", "union", "mapping")
FIELD_KEYS = (
    "type",
    "default",
    "doc",
    "ge",
    "gt",
    "le",
    "lt",
    "min_length",
    "max_length",
    "pattern",
)
VARIANT_KEYS = ("tag", "type", "doc")
MAPPING_KEYS = ("key", "value")
GENERICS = {"list": 1, "tuple": None, "dict": 2, "optional": 1}

# Module-level names every generated module defines or imports: a type may not take them.
RESERVED_TYPE_NAMES = frozenset(
    {
        "encode",
        "decode",
        "encode_bytes",
        "decode_bytes",
        "DecodeError",
        "EncodeError",
        "Limits",
        "DEFAULT_LIMITS",
        "SCHEMA",
        "SCHEMA_NAME",
        "SCHEMA_MAJOR",
        "msgspec",
        "torch",
        "annotations",
        "Any",
        "Annotated",
        "TypeAlias",
        "TypeVar",
        "Sequence",
        "T",
        *ir.BUILTINS,
        *GENERICS,
        "None",
        "object",
        "type",
        "bytearray",
        "memoryview",
    }
)
# A schema named "b" would be imported by others as `_b`, the runtime helpers' alias.
RESERVED_SCHEMA_NAMES = frozenset({"b", "codec", "wire"})
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_MODULE_NAME = re.compile(r"[a-z][a-z0-9_]*")
NUMERIC = frozenset({"int", "float"})
SIZED = frozenset({"str", "bytes"})


@dataclass
class _Context:
    diagnostics: list[Diagnostic]
    files: dict[Path, LoadedFile] = field(default_factory=dict)

    def error(self, position: Position, message: str) -> None:
        self.diagnostics.append(Diagnostic(position, message))


@dataclass
class _Declared:
    """A type name seen in a file, before its body is checked."""

    name: str
    kind: str
    body: Node
    node: Map
    position: Position


@dataclass
class _FileInfo:
    loaded: LoadedFile
    module: str
    major: int
    doc: str
    imports: dict[str, Path]
    declared: dict[str, _Declared]
    exports: tuple[ir.Binding, ...] = ()


def compile_schemas(paths: Iterable[Path], root: Path) -> list[ir.Module]:
    """Validate the schema files (and what they import); return their IR modules.

    Raises :class:`SchemaErrors` with every diagnostic found.
    """
    ctx = _Context([])
    infos: dict[Path, _FileInfo] = {}
    pending = [p.resolve() for p in paths]
    bindings_files: dict[Path, LoadedFile] = {}
    while pending:
        path = pending.pop(0)
        if path in infos or path in bindings_files:
            continue
        info = _read_file(ctx, path, root)
        if isinstance(info, LoadedFile):  # a bindings file: lowered once its schema is
            bindings_files[path] = info
            pending.extend(bindings.schema_paths(info))
            continue
        if info is None:
            continue
        infos[path] = info
        pending.extend(p for p in info.imports.values() if p not in infos)
    _check_import_cycles(ctx, infos)
    by_module: dict[str, _FileInfo] = {}
    for info in infos.values():
        if info.module in by_module:
            other = by_module[info.module].loaded.display_path
            ctx.error(_pos_of(info.loaded), f"schema name {info.module!r} is also used by {other}")
        by_module.setdefault(info.module, info)
    modules = [_lower_file(ctx, info, infos) for info in infos.values()]
    if ctx.diagnostics:
        raise SchemaErrors(ctx.diagnostics)
    _check_struct_tags(ctx, modules, infos)
    _check_base_cases(ctx, modules, infos)
    _check_mapping_cycles(ctx, modules, infos)
    _check_python_identities(ctx, modules, infos)
    by_source = {info.loaded.path: m for info, m in zip(infos.values(), modules, strict=True)}
    for loaded in bindings_files.values():
        bound = bindings.lower_bindings(ctx.diagnostics, loaded, by_source, modules)
        if bound is not None:
            modules.append(bound)
    if ctx.diagnostics:
        raise SchemaErrors(ctx.diagnostics)
    return sorted(modules, key=lambda m: m.python_name)


def _check_import_cycles(ctx: _Context, infos: dict[Path, _FileInfo]) -> None:
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


def _import_chain(infos: dict[Path, _FileInfo], start: Path, goal: Path) -> list[Path] | None:
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


def _import_position(info: _FileInfo, name: str) -> Position:
    top = info.loaded.root
    node = top.get("imports") if isinstance(top, Map) else None
    for item in node.items if isinstance(node, Seq) else ():
        if isinstance(item, Scalar) and item.value == name:
            return item.position
    return _pos_of(info.loaded)


def _pos_of(loaded: LoadedFile) -> Position:
    return loaded.root.position if loaded.root else Position(loaded.display_path, 1, 1)


def _display(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


# -- files -------------------------------------------------------------------------


def _read_file(ctx: _Context, path: Path, root: Path) -> _FileInfo | LoadedFile | None:
    display = _display(path, root)
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
    _unknown_keys(ctx, top, FILE_KEYS, "schema file")
    module = _required_str(ctx, top, "schema", "the schema's name")
    if module is not None and not _MODULE_NAME.fullmatch(module):
        ctx.error(
            _value_pos(top, "schema"),
            f"schema name {module!r} must be a lowercase Python module name",
        )
    elif module is not None and keyword.iskeyword(module):
        ctx.error(_value_pos(top, "schema"), f"schema name {module!r} is a Python keyword")
    elif module in RESERVED_SCHEMA_NAMES:
        ctx.error(
            _value_pos(top, "schema"),
            f"schema name {module!r} would shadow a name the generated modules use (_{module})",
        )
    major = 0
    version = top.get("version")
    if version is None:
        ctx.error(top.position, "missing key 'version' (the schema's major version, an int)")
    elif not (isinstance(version, Scalar) and type(version.value) is int and version.value >= 0):
        ctx.error(version.position, "'version' must be a non-negative int")
    else:
        major = version.value
    doc = _optional_str(ctx, top, "doc") or ""
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
                target = (path.parent / item.value).resolve()
                if not target.is_file():
                    ctx.error(item.position, f"imported schema file {item.value!r} not found")
                    continue
                if target == path:
                    ctx.error(item.position, "a schema file cannot import itself")
                    continue
                imports[item.value] = target
    declared: dict[str, _Declared] = {}
    types = top.get("types")
    if types is None:
        ctx.error(top.position, "missing key 'types'")
    elif not isinstance(types, Map):
        ctx.error(types.position, "'types' must be a mapping of type names to definitions")
    else:
        for key, body in types.entries:
            decl = _declare(ctx, key, body)
            if decl is not None:
                declared[decl.name] = decl
    exports = _exports(ctx, top, declared)
    if module is None:
        return None
    return _FileInfo(loaded, module, major, doc, imports, declared, exports)


def _exports(ctx: _Context, top: Map, declared: dict[str, _Declared]) -> tuple[ir.Binding, ...]:
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
            or not _BINDING.fullmatch(path)
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


def _declare(ctx: _Context, key: Scalar, body: Node) -> _Declared | None:
    name = str(key.value)
    ok = _check_type_name(ctx, name, key.position)
    if not isinstance(body, Map):
        ctx.error(body.position, f"type {name!r} must be a mapping with one of: {', '.join(KINDS)}")
        return None
    suggested = _unknown_keys(ctx, body, TYPE_KEYS, f"type {name!r}")
    kinds = [k for k in KINDS if body.get(k) is not None]
    misspelt = [k for k in KINDS if k in suggested]
    if not kinds and misspelt:
        # Already reported; check the body as the kind it was meant to be, so that
        # uses of the type are not reported as unknown too.
        meant = body.get(suggested[misspelt[0]])
        assert meant is not None
        return _Declared(name, misspelt[0], meant, body, key.position) if ok else None
    if len(kinds) != 1:
        what = "none" if not kinds else " and ".join(kinds)
        ctx.error(
            body.position,
            f"type {name!r} needs exactly one of struct, union, mapping (found {what})",
        )
        return None
    if not ok:
        return None
    kind_body = body.get(kinds[0])
    assert kind_body is not None
    return _Declared(name, kinds[0], kind_body, body, key.position)


def _check_type_name(ctx: _Context, name: str, position: Position) -> bool:
    if not _IDENTIFIER.fullmatch(name):
        ctx.error(position, f"type name {name!r} must be an identifier starting with a letter")
        return False
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        ctx.error(position, f"type name {name!r} is a Python keyword")
        return False
    if name in RESERVED_TYPE_NAMES:
        ctx.error(position, f"type name {name!r} would shadow a name the generated module uses")
        return False
    if hasattr(builtins, name):  # generated code calls id(), len(), isinstance(), ...
        ctx.error(position, f"type name {name!r} would shadow the Python builtin {name!r}")
        return False
    return True


# -- helpers for keys --------------------------------------------------------------


def _unknown_keys(ctx: _Context, node: Map, allowed: tuple[str, ...], what: str) -> dict[str, str]:
    """Report keys outside ``allowed``; return the allowed keys suggested for them
    (suggestion -> the key as written).

    A caller then leaves out its own "missing key" error for a suggested key: a typo
    such as ``strcut:`` is one mistake and gets one error.
    """
    suggested: dict[str, str] = {}
    for key, _ in node.entries:
        name = str(key.value)
        if name not in allowed:
            close = _closest(name, allowed)
            hint = f" (did you mean {close!r}?)" if close else ""
            ctx.error(key.position, f"unknown key {name!r} in {what}{hint}")
            if close:
                suggested.setdefault(close, name)
    return suggested


def _closest(name: str, candidates: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = _closest(name, candidates)
    return f" (did you mean {close!r}?)" if close else ""


def _value_pos(node: Map, key: str) -> Position:
    value = node.get(key)
    return value.position if value is not None else node.position


def _required_str(ctx: _Context, node: Map, key: str, what: str) -> str | None:
    value = node.get(key)
    if value is None:
        ctx.error(node.position, f"missing key {key!r} ({what})")
        return None
    if not (isinstance(value, Scalar) and isinstance(value.value, str)):
        ctx.error(value.position, f"{key!r} must be a string")
        return None
    return value.value


def _optional_str(ctx: _Context, node: Map, key: str) -> str | None:
    value = node.get(key)
    if value is None:
        return None
    if not (isinstance(value, Scalar) and isinstance(value.value, str)):
        ctx.error(value.position, f"{key!r} must be a string")
        return None
    return value.value.strip()


# -- lowering ----------------------------------------------------------------------


def _lower_file(ctx: _Context, info: _FileInfo, infos: dict[Path, _FileInfo]) -> ir.Module:
    scope = _Scope(info, {p: i for p, i in infos.items()})
    types: list[ir.TypeDef] = []
    for decl in info.declared.values():
        binding = _binding(ctx, decl)
        doc = _optional_str(ctx, decl.node, "doc") or ""
        if decl.kind == "struct":
            types.append(_lower_struct(ctx, scope, decl, doc, binding))
        elif decl.kind == "union":
            union = _lower_union(ctx, scope, decl, doc, binding)
            if union is not None:
                types.append(union)
        else:
            mapping = _lower_mapping(ctx, scope, decl, doc, binding)
            if mapping is not None:
                types.append(mapping)
    used_modules = sorted({infos[p].module for p in info.imports.values() if p in infos})
    return ir.Module(
        name=info.module,
        major=info.major,
        doc=info.doc,
        source=info.loaded.display_path,
        sha256=hashlib.sha256(info.loaded.text.encode("utf-8")).hexdigest(),
        imports=tuple(used_modules),
        types=tuple(types),
        exports=info.exports,
    )


_BINDING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _binding(ctx: _Context, decl: _Declared) -> ir.Binding | None:
    node = decl.node.get("bind")
    if node is None:
        return None
    if not (isinstance(node, Scalar) and isinstance(node.value, str)):
        ctx.error(node.position, "'bind' must be an import path such as 'package.module.Class'")
        return None
    path = node.value
    if not _BINDING.fullmatch(path) or any(keyword.iskeyword(p) for p in path.split(".")):
        ctx.error(
            node.position,
            f"malformed binding {path!r}: expected an import path such as 'package.module.Class'",
        )
        return None
    module, _, qualname = path.rpartition(".")
    return ir.Binding(module, qualname)


@dataclass
class _Scope:
    info: _FileInfo
    infos: dict[Path, _FileInfo]

    def imported(self) -> dict[str, _FileInfo]:
        out = {}
        for target in self.info.imports.values():
            other = self.infos.get(target)
            if other is not None:
                out[other.module] = other
        return out

    def lookup(self, name: str) -> tuple[str, _Declared] | None:
        if "." in name:
            module, _, type_name = name.partition(".")
            other = self.imported().get(module)
            if other is None or "." in type_name:
                return None
            decl = other.declared.get(type_name)
            return (other.module, decl) if decl else None
        decl = self.info.declared.get(name)
        return (self.info.module, decl) if decl else None

    def candidates(self) -> list[str]:
        names = [*ir.BUILTINS, *GENERICS, *self.info.declared]
        for module, other in self.imported().items():
            names.extend(f"{module}.{n}" for n in other.declared)
        return names


def _lower_type(ctx: _Context, scope: _Scope, node: Node) -> ir.TypeExpr | None:
    if not (isinstance(node, Scalar) and isinstance(node.value, str)):
        ctx.error(node.position, "a type is a string such as 'int' or 'list[Foo]'")
        return None
    text = node.value
    base = _string_start(ctx, node)
    try:
        raw = parse_type(text)
    except TypeSyntaxError as e:
        ctx.error(_shift(base, e.offset), f"invalid type {text!r}: {e.message}{_pipe_hint(text)}")
        return None
    return _resolve(ctx, scope, raw, base)


def _pipe_hint(text: str) -> str:
    """Python's ``T | None`` is ``optional[T]`` here; other ``|`` unions are union types."""
    if "|" not in text:
        return ""
    parts = [part.strip() for part in text.split("|")]
    others = [part for part in parts if part != "None"]
    if len(parts) == 2 and len(others) == 1:
        return f" (did you mean 'optional[{others[0]}]'?)"
    return " (write optional[T] for 'T | None'; other alternatives need a union type)"


def _string_start(ctx: _Context, node: Scalar) -> Position:
    """Where the string's first character is in the file.

    A scalar's mark is where its node starts: at a tag (``!!str``) or an anchor
    (``&name``) if it has one, at the opening quote of a quoted string, at the ``|``
    or ``>`` of a block scalar (whose text starts on the next non-blank line).
    """
    text = next((f.text for f in ctx.files.values() if f.display_path == node.position.file), "")
    lines = text.split("\n")
    number, column = node.position.line, node.position.column - 1
    if number > len(lines):
        return node.position
    line = lines[number - 1]
    while line[column : column + 1] in ("!", "&"):  # node properties, then spaces
        while column < len(line) and line[column] not in " \t":
            column += 1
        while column < len(line) and line[column] in " \t":
            column += 1
    char = line[column : column + 1]
    if char in ("'", '"'):
        column += 1
    elif char in ("|", ">"):
        for index in range(number, len(lines)):
            content = lines[index].rstrip("\r")
            if content.strip():
                return Position(
                    node.position.file, index + 1, len(content) - len(content.lstrip()) + 1
                )
    return Position(node.position.file, number, column + 1)


def _shift(position: Position, offset: int) -> Position:
    return Position(position.file, position.line, position.column + offset)


def _resolve(ctx: _Context, scope: _Scope, raw: RawType, base: Position) -> ir.TypeExpr | None:
    where = _shift(base, raw.offset)
    name = raw.name
    if name in GENERICS:
        return _resolve_generic(ctx, scope, raw, base)
    if (raw.args or raw.variadic) and name.lower() in GENERICS:
        ctx.error(where, f"unknown type {name!r} (did you mean {_lowercase_generics(raw)!r}?)")
        return None
    if raw.args or raw.variadic:
        ctx.error(where, f"type {name!r} takes no parameters")
        return None
    if name in ir.BUILTINS:
        return ir.Builtin(name)
    found = scope.lookup(name)
    if found is None:
        hint = _did_you_mean(name, scope.candidates())
        ctx.error(where, f"unknown type {name!r}{hint}")
        return None
    module, decl = found
    return ir.Named(module, decl.name)


def _lowercase_generics(raw: RawType) -> str:
    """``List[Optional[int]]`` as the schema language spells it: ``list[optional[int]]``."""
    name = raw.name.lower() if raw.name.lower() in GENERICS else raw.name
    if not raw.args:
        return name
    args = [_lowercase_generics(a) for a in raw.args] + (["..."] if raw.variadic else [])
    return f"{name}[{', '.join(args)}]"


def _resolve_generic(
    ctx: _Context, scope: _Scope, raw: RawType, base: Position
) -> ir.TypeExpr | None:
    where = _shift(base, raw.offset)
    name = raw.name
    arity = GENERICS[name]
    if not raw.args:
        ctx.error(where, f"{name} needs parameters, e.g. {_example(name)}")
        return None
    if raw.variadic and name != "tuple":
        ctx.error(where, "'...' is only allowed in tuple[T, ...]")
        return None
    if arity is not None and len(raw.args) != arity:
        ctx.error(
            where,
            f"{name} takes {arity} parameter{'s' if arity > 1 else ''}, e.g. {_example(name)}",
        )
        return None
    if name == "tuple" and raw.variadic and len(raw.args) != 1:
        ctx.error(where, "tuple[T, ...] takes exactly one type before '...'")
        return None
    args = [_resolve(ctx, scope, a, base) for a in raw.args]
    if any(a is None for a in args):
        return None
    resolved = [a for a in args if a is not None]
    if name == "list":
        return ir.ListOf(resolved[0])
    if name == "optional":
        if isinstance(resolved[0], ir.OptionalOf):
            ctx.error(
                where,
                "optional[optional[T]] is ambiguous on the wire (None vs. an empty value); "
                "use optional[T]",
            )
            return None
        return ir.OptionalOf(resolved[0])
    if name == "dict":
        key = resolved[0]
        if not (isinstance(key, ir.Builtin) and key.name in ("str", "int")):
            ctx.error(_shift(base, raw.args[0].offset), "dict keys must be str or int")
            return None
        return ir.DictOf(key, resolved[1])
    if raw.variadic:
        return ir.VarTupleOf(resolved[0])
    return ir.TupleOf(tuple(resolved))


def _example(name: str) -> str:
    return {
        "list": "list[int]",
        "tuple": "tuple[int, str] or tuple[int, ...]",
        "dict": "dict[str, int]",
        "optional": "optional[int]",
    }[name]


def _lower_struct(
    ctx: _Context, scope: _Scope, decl: _Declared, doc: str, binding: ir.Binding | None
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
    for key, spec in body.entries:
        name = str(key.value)
        f = _lower_field(ctx, scope, decl.name, key, spec)
        if f is None:
            continue
        if isinstance(f.default, ir.Default):
            seen_default = key
        elif seen_default is not None:
            ctx.error(
                key.position,
                f"field {name!r} has no default but follows {seen_default.value!r}, which has one;"
                " fields with defaults come last (they may be missing from older messages)",
            )
        fields.append(f)
    return ir.StructDef(decl.name, doc, binding, tuple(fields), None, decl.position)


def _lower_field(
    ctx: _Context, scope: _Scope, owner: str, key: Scalar, spec: Node
) -> ir.Field | None:
    name = str(key.value)
    valid_name = True
    if not _IDENTIFIER.fullmatch(name) and not re.fullmatch(r"[a-z_][A-Za-z0-9_]*", name):
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
        suggested = _unknown_keys(ctx, spec, FIELD_KEYS, f"field {owner}.{name}")
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
    type_expr = _lower_type(ctx, scope, type_node)
    if type_expr is None or not valid_name:
        return None
    constraints = ir.Constraints()
    default: ir.Default | ir.NoDefault = ir.NoDefault()
    doc = ""
    if spec_map is not None:
        doc = _optional_str(ctx, spec_map, "doc") or ""
        constraints = _constraints(ctx, spec_map, type_expr, f"{owner}.{name}")
        default_node = spec_map.get("default")
        if default_node is not None:
            default = _default(ctx, default_node, type_expr, constraints, f"{owner}.{name}")
    return ir.Field(name, type_expr, default, constraints, doc, key.position)


def _constraint_target(type_expr: ir.TypeExpr) -> ir.TypeExpr:
    return type_expr.inner if isinstance(type_expr, ir.OptionalOf) else type_expr


def _constraints(ctx: _Context, spec: Map, type_expr: ir.TypeExpr, where: str) -> ir.Constraints:
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
                    f"not {_describe(type_expr)}",
                )
                continue
            if type(value) not in (int, float):
                ctx.error(node.position, f"{where}: {name!r} must be a number")
                continue
            if isinstance(target, ir.Builtin) and target.name == "int" and type(value) is float:
                ctx.error(node.position, f"{where}: {name!r} of an int field must be an int")
                continue
        elif name in ("min_length", "max_length"):
            if not sized:
                ctx.error(
                    node.position,
                    f"{where}: constraint {name!r} needs a str, bytes, list, tuple[T, ...] "
                    f"or dict field, not {_describe(type_expr)}",
                )
                continue
            if type(value) is not int or value < 0:
                ctx.error(node.position, f"{where}: {name!r} must be a non-negative int")
                continue
        else:
            if not (isinstance(target, ir.Builtin) and target.name == "str"):
                ctx.error(
                    node.position,
                    f"{where}: constraint 'pattern' needs a str field, not {_describe(type_expr)}",
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


def _describe(type_expr: ir.TypeExpr) -> str:
    return render_type(type_expr)


def render_type(t: ir.TypeExpr) -> str:
    """The schema spelling of a type expression."""
    return ir.spell(t, lambda leaf: leaf.name, "optional[{}]")


def _default(
    ctx: _Context, node: Node, type_expr: ir.TypeExpr, constraints: ir.Constraints, where: str
) -> ir.Default | ir.NoDefault:
    problem = _default_problem(node, type_expr)
    if problem is not None:
        ctx.error(node.position, f"{where}: default {problem}")
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
        return re.search(bound, value) is not None
    return True


def _default_problem(node: Node, t: ir.TypeExpr) -> str | None:
    if isinstance(node, (Seq, Map)):
        empty = not (node.items if isinstance(node, Seq) else node.entries)
        target = t.inner if isinstance(t, ir.OptionalOf) else t
        if isinstance(node, Seq) and isinstance(target, (ir.ListOf, ir.VarTupleOf)) and empty:
            return None
        if isinstance(node, Map) and isinstance(target, ir.DictOf) and empty:
            return None
        return f"must be a literal of type {render_type(t)} (containers may only default to empty)"
    value = node.value
    if value is None:
        return (
            None
            if isinstance(t, ir.OptionalOf)
            else f"null does not match type {render_type(t)} (use optional[...])"
        )
    target = t.inner if isinstance(t, ir.OptionalOf) else t
    if isinstance(target, ir.Builtin):
        ok = {
            "int": type(value) is int,
            "float": type(value) in (int, float),
            "bool": type(value) is bool,
            "str": type(value) is str,
            "bytes": type(value) is bytes,
        }.get(target.name)
        if ok:
            return None
        if ok is None:
            return f"is not supported for type {render_type(t)} (only null, when optional)"
    return f"{value!r} does not match type {render_type(t)}"


def _lower_union(
    ctx: _Context, scope: _Scope, decl: _Declared, doc: str, binding: ir.Binding | None
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
        suggested = _unknown_keys(ctx, item, VARIANT_KEYS, f"a variant of union {decl.name!r}")
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
        type_expr = _lower_type(ctx, scope, type_node)
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


def _variant_problem(scope: _Scope, t: ir.TypeExpr) -> str | None:
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


def _python_kinds(scope: _Scope, t: ir.TypeExpr) -> list[str]:
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


def _lower_mapping(
    ctx: _Context, scope: _Scope, decl: _Declared, doc: str, binding: ir.Binding | None
) -> ir.MappingDef | None:
    body = decl.body
    if not isinstance(body, Map):
        ctx.error(body.position, f"mapping {decl.name!r}: 'mapping' needs 'key' and 'value' types")
        return None
    suggested = _unknown_keys(ctx, body, MAPPING_KEYS, f"mapping {decl.name!r}")
    key_node, value_node = body.get("key"), body.get("value")
    if key_node is None or value_node is None:
        if not {k for k in MAPPING_KEYS if body.get(k) is None} <= suggested.keys():
            ctx.error(
                body.position, f"mapping {decl.name!r}: 'mapping' needs 'key' and 'value' types"
            )
        return None
    key = _lower_type(ctx, scope, key_node)
    value = _lower_type(ctx, scope, value_node)
    if key is not None and not (isinstance(key, ir.Builtin) and key.name in ("str", "int")):
        ctx.error(key_node.position, f"mapping {decl.name!r}: keys must be str or int")
        return None
    if key is None or value is None:
        return None
    return ir.MappingDef(decl.name, doc, binding, key, value, decl.position)


# -- whole-schema checks -----------------------------------------------------------


def _check_struct_tags(
    ctx: _Context, modules: list[ir.Module], infos: dict[Path, _FileInfo]
) -> None:
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


def _check_base_cases(
    ctx: _Context, modules: list[ir.Module], infos: dict[Path, _FileInfo]
) -> None:
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


def _check_mapping_cycles(
    ctx: _Context, modules: list[ir.Module], infos: dict[Path, _FileInfo]
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


def _check_python_identities(
    ctx: _Context, modules: list[ir.Module], infos: dict[Path, _FileInfo]
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
            key = _python_identity(module.name, by_name, t)
            if key in seen:
                ctx.error(
                    decl_pos[(module.name, t.name)],
                    f"type {t.name!r} is the same Python object as {seen[key]!r}, so "
                    "encode(type=...) and decode(..., type) could not tell them apart "
                    "(a union is the union of its variants' classes; a one-variant union "
                    "is its variant)",
                )
            seen.setdefault(key, t.name)


def _python_identity(module: str, by_name: dict[str, ir.TypeDef], t: ir.TypeDef) -> object:
    """A key equal for two types exactly when their Python objects are equal."""
    if t.binding is not None:
        return ("class", t.binding.module, t.binding.qualname)
    if not isinstance(t, ir.UnionDef):
        return ("class", module, t.name)
    keys: set[object] = set()
    for v in t.variants:
        if isinstance(v.type, ir.Named) and v.type.module == module and v.type.name in by_name:
            keys.add(_python_identity(module, by_name, by_name[v.type.name]))
        elif isinstance(v.type, ir.Named):
            keys.add(("imported", v.type.module, v.type.name))
        else:
            keys.add(("type", render_type(v.type)))
    return next(iter(keys)) if len(keys) == 1 else frozenset(keys)
