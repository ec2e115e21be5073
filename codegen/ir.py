"""The compiler's intermediate representation: frozen, typed, a sum type per concept.

Validation produces it, rendering reads only it. Type references are resolved:
a ``Named`` knows which module defines its target, so nothing downstream looks
names up again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

BuiltinName = Literal["int", "float", "bool", "str", "bytes", "tensor", "nested_tensors", "slice"]
BUILTINS: tuple[BuiltinName, ...] = (
    "int",
    "float",
    "bool",
    "str",
    "bytes",
    "tensor",
    "nested_tensors",
    "slice",
)


# -- type expressions --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Builtin:
    name: BuiltinName


@dataclass(frozen=True, slots=True)
class Named:
    module: str
    name: str


@dataclass(frozen=True, slots=True)
class ListOf:
    item: TypeExpr


@dataclass(frozen=True, slots=True)
class VarTupleOf:
    """``tuple[T, ...]``: any length, rebuilt as a tuple."""

    item: TypeExpr


@dataclass(frozen=True, slots=True)
class TupleOf:
    """``tuple[A, B]``: fixed length, one type per position."""

    items: tuple[TypeExpr, ...]


@dataclass(frozen=True, slots=True)
class DictOf:
    key: TypeExpr
    value: TypeExpr


@dataclass(frozen=True, slots=True)
class OptionalOf:
    inner: TypeExpr


TypeExpr: TypeAlias = Builtin | Named | ListOf | VarTupleOf | TupleOf | DictOf | OptionalOf


def spell(t: TypeExpr, leaf: Callable[[Builtin | Named], str], optional: str = "{} | None") -> str:
    """Write a type expression in Python's generic syntax, its leaves spelled by ``leaf``.

    The schema spelling, domain annotations and wire annotations differ only in how
    they write leaves and optionals; this is the one walk over the structure.
    """

    def inner(x: TypeExpr) -> str:
        return spell(x, leaf, optional)

    if isinstance(t, (Builtin, Named)):
        return leaf(t)
    if isinstance(t, ListOf):
        return f"list[{inner(t.item)}]"
    if isinstance(t, VarTupleOf):
        return f"tuple[{inner(t.item)}, ...]"
    if isinstance(t, TupleOf):
        return f"tuple[{', '.join(inner(i) for i in t.items)}]"
    if isinstance(t, DictOf):
        return f"dict[{inner(t.key)}, {inner(t.value)}]"
    return optional.format(inner(t.inner))


# -- declarations ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Constraints:
    """msgspec.Meta constraints, enforced by the decoder at C speed."""

    ge: int | float | None = None
    gt: int | float | None = None
    le: int | float | None = None
    lt: int | float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None

    def items(self) -> list[tuple[str, int | float | str]]:
        names = ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern")
        return [(n, v) for n in names if (v := getattr(self, n)) is not None]


@dataclass(frozen=True, slots=True)
class NoDefault:
    pass


DefaultValue: TypeAlias = (
    bool | int | float | str | bytes | tuple[()] | list[None] | dict[str, None] | None
)


@dataclass(frozen=True, slots=True)
class Default:
    """A literal default: None, bool, int, float, str, bytes, or an empty list, tuple or dict."""

    value: DefaultValue


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: TypeExpr
    default: Default | NoDefault
    constraints: Constraints
    doc: str


@dataclass(frozen=True, slots=True)
class Binding:
    """An existing class the generated code constructs on decode and reads on encode."""

    module: str
    qualname: str


@dataclass(frozen=True, slots=True)
class StructDef:
    name: str
    doc: str
    binding: Binding | None
    fields: tuple[Field, ...]
    tag: int | str | None
    """Set when the struct is a variant of a union: its tag on the wire."""


@dataclass(frozen=True, slots=True)
class Variant:
    tag: int | str
    type: TypeExpr


@dataclass(frozen=True, slots=True)
class UnionDef:
    name: str
    doc: str
    binding: Binding | None
    variants: tuple[Variant, ...]


@dataclass(frozen=True, slots=True)
class MappingDef:
    name: str
    doc: str
    binding: Binding | None
    key: TypeExpr
    value: TypeExpr


TypeDef: TypeAlias = StructDef | UnionDef | MappingDef


@dataclass(frozen=True, slots=True)
class Module:
    name: str
    """The schema's name: its identity on the wire (and, by default, the module's name)."""
    major: int
    doc: str
    source: str
    """The schema file, relative to the project root, as named in the header."""
    sha256: str
    imports: tuple[str, ...]
    """Names of the schema modules this one references."""
    types: tuple[TypeDef, ...]
    exports: tuple[Binding, ...] = ()
    """Existing names the generated module re-exports for its users."""
    python_name: str = ""
    """The generated module's Python name: the schema's name, or a bindings file's
    module name (a second binding of the same wire). Empty means ``name``."""

    def __post_init__(self) -> None:
        if not self.python_name:
            object.__setattr__(self, "python_name", self.name)
