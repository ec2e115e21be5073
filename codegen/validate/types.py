"""Type expressions in schema strings (``list[optional[Foo]]``), resolved to IR types
with the column of each mistake.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from mmcodec.codegen import ir
from mmcodec.codegen.diagnostics import Position
from mmcodec.codegen.load import Map, Node, Scalar, Seq
from mmcodec.codegen.typeexpr import RawType, TypeSyntaxError, parse_type
from mmcodec.codegen.validate.context import Context, Declared, FileInfo, did_you_mean
from mmcodec.codegen.validate.names import GENERICS


@dataclass
class Scope:
    info: FileInfo
    infos: dict[Path, FileInfo]

    def imported(self) -> dict[str, FileInfo]:
        out = {}
        for target in self.info.imports.values():
            other = self.infos.get(target)
            if other is not None:
                out[other.module] = other
        return out

    def lookup(self, name: str) -> tuple[str, Declared] | None:
        if "." in name:
            module, _, type_name = name.partition(".")
            other = self.imported().get(module)
            if other is None or "." in type_name:
                return None
            decl = other.declared.get(type_name)
            return (other.module, decl) if decl else None
        decl = self.info.declared.get(name)
        return (self.info.module, decl) if decl else None

    def rejected(self, name: str) -> bool:
        """Whether ``name`` cannot resolve because of an error reported elsewhere: its
        declaration was rejected (a bad name, no kind), or it is qualified by a module whose
        file could not be imported. Then a use of it is no second error."""
        module, dot, type_name = name.partition(".")
        if not dot:
            return name in _written_types(self.info)
        if "." in type_name:
            return False
        other = self.imported().get(module)
        if other is not None:
            return type_name in _written_types(other)
        return self.import_failed()

    def import_failed(self) -> bool:
        """Whether an import of this file was reported (not found, itself, or invalid)."""
        top = self.info.loaded.root
        node = top.get("imports") if isinstance(top, Map) else None
        written = len(node.items) if isinstance(node, Seq) else 0
        return written > len(self.info.imports) or any(
            target not in self.infos for target in self.info.imports.values()
        )

    def kind_of(self, t: ir.TypeExpr) -> str | None:
        """``struct``, ``union``, ``mapping`` or ``enum`` for a named type, else None."""
        if not isinstance(t, ir.Named):
            return None
        found = self.lookup(t.name if t.module == self.info.module else f"{t.module}.{t.name}")
        return found[1].kind if found else None

    def key_problem(self, t: ir.TypeExpr) -> str | None:
        """Why ``t`` cannot be a dict's key (str, int and enums can), or None."""
        if isinstance(t, ir.Builtin) and t.name in ("str", "int"):
            return None
        if self.kind_of(t) == "enum":
            return None
        return "keys must be str, int or an enum"

    def candidates(self) -> list[str]:
        names = [*ir.BUILTINS, *GENERICS, *self.info.declared]
        for module, other in self.imported().items():
            names.extend(f"{module}.{n}" for n in other.declared)
        return names


def _written_types(info: FileInfo) -> set[str]:
    """The names the file's ``types`` mapping holds, valid or not."""
    top = info.loaded.root
    types = top.get("types") if isinstance(top, Map) else None
    return {str(k.value) for k, _ in types.entries} if isinstance(types, Map) else set()


def lower_type(ctx: Context, scope: Scope, node: Node) -> ir.TypeExpr | None:
    if not (isinstance(node, Scalar) and isinstance(node.value, str)):
        ctx.error(node.position, "a type is a string such as 'int' or 'list[Foo]'")
        return None
    text = node.value
    base = _string_start(ctx, node)
    try:
        raw = parse_type(text)
    except TypeSyntaxError as e:
        ctx.error(shift(base, e.offset, 1), f"invalid type {text!r}: {e.message}", _pipe_hint(text))
        return None
    return resolve(ctx, scope, raw, base)


def _pipe_hint(text: str) -> str:
    """Python's ``T | None`` is ``optional[T]`` here; other ``|`` unions are union types."""
    if "|" not in text:
        return ""
    parts = [part.strip() for part in text.split("|")]
    others = [part for part in parts if part != "None"]
    if len(parts) == 2 and len(others) == 1:
        return f"did you mean 'optional[{others[0]}]'?"
    return "write optional[T] for 'T | None'; other alternatives need a union type"


def _string_start(ctx: Context, node: Scalar) -> Position:
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


def shift(position: Position, offset: int, length: int = 0) -> Position:
    """``offset`` characters further along the line, spanning ``length`` of them."""
    return Position(position.file, position.line, position.column + offset, length)


def resolve(
    ctx: Context, scope: Scope, raw: RawType, base: Position, respelled: bool = False
) -> ir.TypeExpr | None:
    """The IR of ``raw``, or None after reporting what is wrong. ``respelled``: an outer
    error's hint already spells this expression's generics right (``Dict[str, List[int]]``
    gets one error), so only other mistakes in it are reported."""
    where = shift(base, raw.offset, len(raw.name))
    name = raw.name
    if name in GENERICS:
        return _resolve_generic(ctx, scope, raw, base)
    if raw.args or raw.variadic:
        if name in ir.BUILTINS or scope.lookup(name) is not None:
            ctx.error(where, f"type {name!r} takes no parameters")
        elif _generic_named(name) is not None:
            if not respelled:
                hint = f"did you mean {_respelled(raw)!r}?"
                ctx.error(where, f"unknown generic type {name!r}", hint)
            for arg in raw.args:  # a misspelt type inside is a mistake of its own
                resolve(ctx, scope, arg, base, respelled=True)
        elif not scope.rejected(name):
            ctx.error(where, f"unknown type {name!r}", _suggest(name, scope.candidates()))
        return None
    if name in ir.BUILTINS:
        return ir.Builtin(name)
    found = scope.lookup(name)
    if found is None:
        if not scope.rejected(name):
            ctx.error(where, f"unknown type {name!r}", _suggest(name, scope.candidates()))
        return None
    module, decl = found
    return ir.Named(module, decl.name)


# What users of other schema languages write, and the schema language's word for it.
_ALIASES = {
    "array": "list",
    "sequence": "list",
    "vector": "list",
    "map": "dict",
    "double": "float",
    "long": "int",
}


def _generic_named(name: str) -> str | None:
    """The generic ``name`` stands for (``List``, ``optinal``, ``map``), or None."""
    if name.lower() in GENERICS:
        return name.lower()
    alias = _ALIASES.get(name.lower())
    if alias in GENERICS:
        return alias
    close = difflib.get_close_matches(name.lower(), sorted(GENERICS), n=1, cutoff=0.6)
    return close[0] if close else None


def _suggest(name: str, candidates: list[str]) -> str:
    """``did you mean ...?`` for an unknown type name without parameters."""
    alias = _ALIASES.get(name.lower())
    if alias in ir.BUILTINS:
        return f"did you mean {alias!r}?"
    if alias in GENERICS:
        return f"did you mean '{alias}[...]'? (it takes parameters, e.g. {example(alias)})"
    return did_you_mean(name, candidates)


def _respelled(raw: RawType) -> str:
    """The expression with each generic spelled as the schema language spells it:
    ``List[Optinal[int]]`` as ``list[optional[int]]``."""
    name = (_generic_named(raw.name) or raw.name) if raw.args or raw.variadic else raw.name
    if not raw.args:
        return name
    args = [_respelled(a) for a in raw.args] + (["..."] if raw.variadic else [])
    return f"{name}[{', '.join(args)}]"


def _resolve_generic(
    ctx: Context, scope: Scope, raw: RawType, base: Position
) -> ir.TypeExpr | None:
    where = shift(base, raw.offset, len(raw.name))
    name = raw.name
    arity = GENERICS[name]
    if not raw.args:
        ctx.error(where, f"{name} needs parameters, e.g. {example(name)}")
        return None
    if raw.variadic and name != "tuple":
        ctx.error(where, "'...' is only allowed in tuple[T, ...]")
        return None
    if arity is not None and len(raw.args) != arity:
        ctx.error(
            where,
            f"{name} takes {arity} parameter{'s' if arity > 1 else ''}, e.g. {example(name)}",
        )
        return None
    if name == "tuple" and raw.variadic and len(raw.args) != 1:
        ctx.error(where, "tuple[T, ...] takes exactly one type before '...'")
        return None
    args = [resolve(ctx, scope, a, base) for a in raw.args]
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
        problem = scope.key_problem(key)
        if problem is not None:
            where_key = shift(base, raw.args[0].offset, len(raw.args[0].name))
            ctx.error(where_key, f"dict {problem}")
            return None
        return ir.DictOf(key, resolved[1])
    if raw.variadic:
        return ir.VarTupleOf(resolved[0])
    return ir.TupleOf(tuple(resolved))


def example(name: str) -> str:
    return {
        "list": "list[int]",
        "tuple": "tuple[int, str] or tuple[int, ...]",
        "dict": "dict[str, int]",
        "optional": "optional[int]",
    }[name]


def render_type(t: ir.TypeExpr) -> str:
    """The schema spelling of a type expression."""
    return ir.spell(t, lambda leaf: leaf.name, "optional[{}]")
