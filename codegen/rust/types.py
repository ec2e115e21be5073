"""IR type expressions as Rust types, and what a module's types need of each other.

Ownership follows the Python side's sharing: a value that can travel once per message
(a union value, a struct that is not a union variant) is held in an ``Arc``, so that the
same value referenced twice is the same ``Arc`` both when encoding (sent once) and after
decoding (built once). Containers own their items. A type that holds a tensor, nested
tensors or bytes, directly or through other types, borrows from the message and takes
a lifetime ``'a``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mmcodec.codegen import ir
from mmcodec.codegen.rust.names import RESERVED_TYPE_NAMES, unique
from mmcodec.codegen.rust.source import RustCode, UnsafeText, code

Key = tuple[str, str]
"""A named type: (schema, name)."""

_PRIMITIVES = {"int": "i64", "float": "f64", "bool": "bool", "str": "String", "slice": "Slice"}
_BORROWING = {
    "bytes": "Cow<'a, [u8]>",
    "tensor": "Tensor<'a>",
    "nested_tensors": "NestedTensors<'a>",
}
MAX_TUPLE = 8
"""The longest fixed tuple the runtime reads and writes."""


def is_shared(t: ir.TypeDef) -> bool:
    """Whether values of ``t`` travel once per message (held in an Arc)."""
    return isinstance(t, ir.UnionDef) or (isinstance(t, ir.StructDef) and t.tag is None)


def unsigned(t: ir.TypeExpr, constraints: ir.Constraints) -> bool:
    """Whether an ``int`` (or ``optional[int]``) field is a ``u64``: its bounds exclude
    negative values."""
    inner = t.inner if isinstance(t, ir.OptionalOf) else t
    if inner != ir.Builtin("int"):
        return False
    return (constraints.ge is not None and constraints.ge >= 0) or (
        constraints.gt is not None and constraints.gt >= 0
    )


@dataclass
class Schemas:
    """Every schema module of one compilation, as the Rust renderer sees them."""

    modules: dict[str, ir.Module]
    defs: dict[Key, ir.TypeDef]
    type_names: dict[Key, RustCode]
    module_names: dict[str, RustCode]
    borrows: set[Key] = field(default_factory=set)
    boxed: set[tuple[Key, Key]] = field(default_factory=set)
    """(owner, target) where a struct holds a union variant by value on a cycle."""

    @classmethod
    def of(cls, modules: list[ir.Module]) -> Schemas:
        # A bindings file is a second Python binding of a schema: Rust has one module each.
        own = {m.name: m for m in modules if m.python_name == m.name}
        defs = {(m.name, t.name): t for m in own.values() for t in m.types}
        type_names: dict[Key, RustCode] = {}
        for m in own.values():
            names = unique([t.name for t in m.types], RESERVED_TYPE_NAMES)
            type_names.update({(m.name, n): v for n, v in names.items()})
        module_names = unique(sorted(own))
        schemas = cls(own, defs, type_names, module_names)
        schemas.borrows = schemas._borrowing()
        schemas.boxed = schemas._boxed()
        return schemas

    # -- what borrows ------------------------------------------------------------------

    def _mentions(self, t: ir.TypeExpr) -> tuple[set[str], set[Key]]:
        """Builtins and named types an expression mentions."""
        if isinstance(t, ir.Builtin):
            return {t.name}, set()
        if isinstance(t, ir.Named):
            return set(), {(t.module, t.name)}
        parts: list[ir.TypeExpr]
        if isinstance(t, (ir.ListOf, ir.VarTupleOf)):
            parts = [t.item]
        elif isinstance(t, ir.TupleOf):
            parts = list(t.items)
        elif isinstance(t, ir.DictOf):
            parts = [t.key, t.value]
        else:
            parts = [t.inner]
        builtins: set[str] = set()
        named: set[Key] = set()
        for part in parts:
            b, n = self._mentions(part)
            builtins |= b
            named |= n
        return builtins, named

    def _parts(self, t: ir.TypeDef) -> list[ir.TypeExpr]:
        if isinstance(t, ir.StructDef):
            return [f.type for f in t.fields]
        if isinstance(t, ir.UnionDef):
            return [v.type for v in t.variants]
        if isinstance(t, ir.EnumDef):
            return []  # members are plain values
        return [t.key, t.value]

    def _borrowing(self) -> set[Key]:
        out: set[Key] = set()
        changed = True
        while changed:
            changed = False
            for key, t in self.defs.items():
                if key in out:
                    continue
                for part in self._parts(t):
                    builtins, named = self._mentions(part)
                    if builtins & set(_BORROWING) or named & out:
                        out.add(key)
                        changed = True
                        break
        return out

    # -- column lists -----------------------------------------------------------------

    def column_value(self, key: Key) -> Key | None:
        """The struct ``S`` when ``key`` names a mapping whose lists may travel as column
        lists (``str`` keys, values a named struct that travels once), else None."""
        t = self.defs.get(key)
        if not isinstance(t, ir.MappingDef) or t.key != ir.Builtin("str"):
            return None
        if not isinstance(t.value, ir.Named):
            return None
        value = (t.value.module, t.value.name)
        target = self.defs.get(value)
        if isinstance(target, ir.StructDef) and is_shared(target):
            return value
        return None

    def _column_item(self, t: ir.TypeExpr) -> bool:
        """Whether ``t`` is ``M`` or ``optional[M]`` of a mapping whose lists may be
        column lists."""
        inner = t.inner if isinstance(t, ir.OptionalOf) else t
        return (
            isinstance(inner, ir.Named)
            and self.column_value((inner.module, inner.name)) is not None
        )

    def column_values(self) -> set[Key]:
        """Every struct some mapping's column lists hold (each reads and writes its
        fields as columns)."""
        return {v for k in self.defs if (v := self.column_value(k)) is not None}

    def expr_borrows(self, t: ir.TypeExpr) -> bool:
        builtins, named = self._mentions(t)
        return bool(builtins & set(_BORROWING) or named & self.borrows)

    # -- where a value must be boxed ---------------------------------------------------

    def _by_value(self, t: ir.TypeExpr) -> set[Key]:
        """Named types an expression holds inline (not behind an Arc, Vec or map)."""
        if isinstance(t, ir.Named):
            target = self.defs[(t.module, t.name)]
            return (
                set()
                if is_shared(target) or isinstance(target, ir.MappingDef)
                else {(t.module, t.name)}
            )
        if isinstance(t, ir.OptionalOf):
            return self._by_value(t.inner)
        if isinstance(t, ir.TupleOf):
            return {k for i in t.items for k in self._by_value(i)}
        return set()

    def _boxed(self) -> set[tuple[Key, Key]]:
        edges = {
            key: {k for part in self._parts(t) for k in self._by_value(part)}
            for key, t in self.defs.items()
        }

        def reaches(start: Key, goal: Key) -> bool:
            stack, seen = [start], set()
            while stack:
                key = stack.pop()
                if key == goal:
                    return True
                if key not in seen:
                    seen.add(key)
                    stack.extend(edges.get(key, ()))
            return False

        return {
            (owner, target)
            for owner, targets in edges.items()
            if isinstance(self.defs[owner], ir.StructDef)
            for target in targets
            if reaches(target, owner)
        }

    # -- spelling ----------------------------------------------------------------------

    def lifetime(self, key: Key) -> str:
        return "<'a>" if key in self.borrows else ""

    def path(self, key: Key, home: str) -> RustCode:
        """A named type as code in module ``home`` refers to it (with its lifetime)."""
        name = self.type_names[key]
        if key[0] == home:
            return code(name, self.lifetime(key))
        return code("super::", self.module_names[key[0]], "::", name, self.lifetime(key))

    def rust_type(
        self, t: ir.TypeExpr, home: str, owner: Key | None = None, as_u64: bool = False
    ) -> RustCode:
        """The Rust type of a value of ``t`` held by ``owner`` (in module ``home``)."""
        if isinstance(t, ir.Builtin):
            if t.name == "int" and as_u64:
                return code("u64")
            if t.name in _BORROWING:
                return code(_BORROWING[t.name])
            return code(_PRIMITIVES[t.name])
        if isinstance(t, ir.Named):
            key = (t.module, t.name)
            path = self.path(key, home)
            if is_shared(self.defs[key]):
                return code("Arc<", path, ">")
            if owner is not None and (owner, key) in self.boxed:
                return code("Box<", path, ">")
            return path
        if isinstance(t, ir.VarTupleOf) and self._column_item(t.item):
            # Only a list travels as a column list: a tuple of its items stays rows.
            return code("Rows<", self.rust_type(t.item, home, owner), ">")
        if isinstance(t, (ir.ListOf, ir.VarTupleOf)):
            return code("Vec<", self.rust_type(t.item, home, owner), ">")
        if isinstance(t, ir.TupleOf):
            if len(t.items) > MAX_TUPLE:
                raise UnsafeText(
                    f"a tuple of {len(t.items)} items: Rust output supports up to {MAX_TUPLE}"
                )
            items = [self.rust_type(i, home, owner) for i in t.items]
            joined = code(*[code(", " if i else "", x) for i, x in enumerate(items)])
            return code("(", joined, ",)" if len(items) == 1 else ")")
        if isinstance(t, ir.DictOf):
            key_type = self.rust_type(t.key, home, owner)
            return code("IndexMap<", key_type, ", ", self.rust_type(t.value, home, owner), ">")
        return code("Option<", self.rust_type(t.inner, home, owner, as_u64), ">")


__all__ = ["MAX_TUPLE", "Key", "Schemas", "is_shared", "unsigned"]
