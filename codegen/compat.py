"""Is a new version of a schema wire-compatible with the old one?

Within one major version a schema may only grow: fields appended at the end of a
struct, each with a default; union variants added with new tags; enum members added
with new values; new types. Then old and new codecs read each other's messages
(msgspec fills appended fields from their defaults and ignores trailing fields it does
not know). Anything else needs a new major version, which makes old and new codecs
reject each other's messages: that is allowed, and the report says what it changes.
Note that a struct that becomes a union variant gains a tag, so its own wire form
changes: add a new struct as a new variant instead.

Struct fields travel by position, not by name, so changes are described the way
the user made them: a field inserted, removed, moved, or two fields swapped; a
field renamed in place is compatible and reported as a note. Each change points
at the new schema (file:line:col).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mmcodec.codegen import ir
from mmcodec.codegen.diagnostics import Position
from mmcodec.codegen.validate import render_type


@dataclass(frozen=True, slots=True)
class Change:
    position: Position
    """Where the new schema has it (the old one's, for a removed schema)."""
    subject: str
    """The type (or schema) changed."""
    message: str
    breaking: bool

    def __str__(self) -> str:
        note = "" if self.breaking else "note: "
        return f"{self.position}: {note}{self.subject}: {self.message}"


@dataclass(frozen=True, slots=True)
class MajorChange:
    """A schema whose major version went up: the sanctioned way to break the wire. Old and
    new codecs then reject each other's messages; ``changes`` says what needed it."""

    position: Position
    """Where the new schema states its version."""
    schema: str
    old: int
    new: int
    changes: tuple[Change, ...]
    """What the new major version changes (breaking ones and notes), as within one major."""

    @property
    def breaking(self) -> list[Change]:
        return [c for c in self.changes if c.breaking]

    def __str__(self) -> str:
        count = len(self.breaking)
        behind = (
            f"{count} breaking change{'s' * (count != 1)} below"
            if count
            else "nothing in it breaks the old version (a new major version was not needed)"
        )
        return (
            f"{self.position}: note: schema {self.schema!r}: major version {self.old} -> "
            f"{self.new}; old and new codecs reject each other's messages; {behind}"
        )


@dataclass(frozen=True, slots=True)
class Report:
    changes: tuple[Change, ...]
    compared: tuple[str, ...]
    """Sources of the new schemas that had an older version to compare with."""
    new: tuple[str, ...]
    """Sources of the new schemas without an older version (nothing to break)."""
    majors: tuple[MajorChange, ...] = ()
    """Schemas with a new major version, and what it changes (not counted as breaking)."""

    @property
    def breaking(self) -> list[Change]:
        return [c for c in self.changes if c.breaking]

    def as_json(self) -> dict[str, object]:
        return {
            "breaking": [_row(c) for c in self.changes if c.breaking],
            "notes": [_row(c) for c in self.changes if not c.breaking],
            "compared": list(self.compared),
            "new": list(self.new),
            "majors": [
                {
                    "file": m.position.file,
                    "line": m.position.line,
                    "column": m.position.column,
                    "schema": m.schema,
                    "old": m.old,
                    "new": m.new,
                    "breaking": [_row(c) for c in m.changes if c.breaking],
                    "notes": [_row(c) for c in m.changes if not c.breaking],
                }
                for m in self.majors
            ],
        }


def _row(c: Change) -> dict[str, object]:
    return {
        "file": c.position.file,
        "line": c.position.line,
        "column": c.position.column,
        "subject": c.subject,
        "message": c.message,
    }


def compare_schemas(old: list[ir.Module], new: list[ir.Module]) -> Report:
    """Every change from ``old`` to ``new``, matched by Python module name: a bindings
    module (its schema's wire, other classes) is compared with its own older version, and
    removing one is a removal too."""
    changes: list[Change] = []
    majors: list[MajorChange] = []
    new_by_name = {m.python_name: m for m in new}
    old_names = {m.python_name for m in old}
    for old_module in old:
        new_module = new_by_name.get(old_module.python_name)
        if new_module is None:
            what = "schema" if old_module.python_name == old_module.name else "binding"
            changes.append(
                Change(
                    Position(old_module.source, 1, 1),
                    f"{what} {old_module.python_name!r}",
                    "removed (its messages can no longer be read)",
                    breaking=True,
                )
            )
        elif new_module.major == old_module.major:
            found = _compare_modules(old_module, new_module)
            if new_module.python_name != new_module.name:  # a binding: say which module
                found = [replace(c, subject=f"{new_module.python_name}.{c.subject}") for c in found]
            changes.extend(found)
        elif new_module.python_name == new_module.name:  # (a binding shares its schema's)
            at = new_module.version_position or Position(new_module.source, 1, 1)
            if new_module.major < old_module.major:
                message = (
                    f"major version lowered from {old_module.major} to {new_module.major}; a "
                    "major version only goes up (codecs of an earlier version "
                    f"{new_module.major} would misread these messages)"
                )
                changes.append(Change(at, f"schema {new_module.name!r}", message, breaking=True))
            else:  # the sanctioned way to break: say what it breaks
                behind = tuple(_compare_modules(old_module, new_module))
                majors.append(
                    MajorChange(at, new_module.name, old_module.major, new_module.major, behind)
                )
    return Report(
        tuple(changes),
        tuple(m.source for m in new if m.python_name in old_names),
        tuple(m.source for m in new if m.python_name not in old_names),
        tuple(majors),
    )


def _compare_modules(old: ir.Module, new: ir.Module) -> list[Change]:
    changes: list[Change] = []
    new_types = {t.name: t for t in new.types}
    for old_type in old.types:
        new_type = new_types.get(old_type.name)
        if new_type is None:
            where = Position(new.source, 1, 1)
            changes.append(Change(where, old_type.name, "type removed", breaking=True))
            continue
        at = _position(new_type, new.source)
        if type(new_type) is not type(old_type):
            message = f"changed from {_kind(old_type)} to {_kind(new_type)}"
            changes.append(Change(at, old_type.name, message, breaking=True))
        elif isinstance(old_type, ir.StructDef) and isinstance(new_type, ir.StructDef):
            changes.extend(_compare_structs(old_type, new_type, new.source))
        elif isinstance(old_type, ir.UnionDef) and isinstance(new_type, ir.UnionDef):
            changes.extend(_compare_unions(old_type, new_type, new.source))
        elif isinstance(old_type, ir.EnumDef) and isinstance(new_type, ir.EnumDef):
            changes.extend(_compare_enums(old_type, new_type, new.source))
        elif isinstance(old_type, ir.MappingDef) and isinstance(new_type, ir.MappingDef):
            before = f"{render_type(old_type.key)} -> {render_type(old_type.value)}"
            after = f"{render_type(new_type.key)} -> {render_type(new_type.value)}"
            if before != after:
                message = f"mapping changed from {before} to {after}"
                changes.append(Change(at, old_type.name, message, breaking=True))
    return changes


def _position(node: ir.TypeDef | ir.Field | ir.Variant | ir.EnumMember, source: str) -> Position:
    return node.position or Position(source, 1, 1)


def _kind(t: ir.TypeDef) -> str:
    kinds = {ir.StructDef: "struct", ir.UnionDef: "union", ir.MappingDef: "mapping"}
    return kinds.get(type(t), "enum")


def _compare_structs(old: ir.StructDef, new: ir.StructDef, source: str) -> list[Change]:
    changes: list[Change] = []
    at = _position(new, source)

    def change(where: Position, message: str, breaking: bool = True) -> None:
        changes.append(Change(where, new.name, message, breaking))

    if old.tag != new.tag:
        if old.tag is None:
            change(
                at,
                f"became a union variant (tag {new.tag!r}), which changes its own wire form; "
                "add a new struct as the new variant instead",
            )
        elif new.tag is None:
            change(
                at,
                f"is no longer a union variant (it had tag {old.tag!r}), which changes its own "
                "wire form",
            )
        else:
            change(at, f"tag changed from {old.tag!r} to {new.tag!r}")
    # Which old field each new field is: same name, or the same place when both names are
    # new to the other side (a rename, compatible: names do not travel).
    old_index = {f.name: i for i, f in enumerate(old.fields)}
    new_names = {f.name for f in new.fields}
    origin: list[int | None] = []
    for j, f in enumerate(new.fields):
        i = old_index.get(f.name)
        if i is None and j < len(old.fields) and old.fields[j].name not in new_names:
            i = j
            change(
                _position(f, source),
                f"field `{old.fields[j].name}` renamed to `{f.name}` (compatible: names do not "
                "travel; the Python API and bound classes see the new name)",
                breaking=False,
            )
        origin.append(i)
    kept = {i for i in origin if i is not None}
    for i, f in enumerate(old.fields):
        if i in kept:
            continue
        if any(k > i for k in kept):
            consequence = "fields travel by position, so the ones after it would be misread"
        elif isinstance(f.default, ir.NoDefault):
            consequence = "older codecs require it"
        else:  # old codecs would fill in its default; reusing the place is the danger
            consequence = "a field appended later would be read as it by older codecs"
        change(at, f"field `{f.name}` removed from position {i}; {consequence}")
    last_kept = max((j for j, i in enumerate(origin) if i is not None), default=-1)
    for j, f in enumerate(new.fields):
        if origin[j] is not None:
            continue
        if j < last_kept:
            change(
                _position(f, source),
                f"field `{f.name}` inserted at position {j}; only appending is compatible",
            )
        elif isinstance(f.default, ir.NoDefault):
            change(
                _position(f, source),
                f"field `{f.name}` appended at position {j} without a default "
                "(older messages lack it)",
            )
    changes.extend(_moves(old, new, origin, source))
    for j, f in enumerate(new.fields):
        i = origin[j]
        if i is None:
            continue
        before = old.fields[i]
        where = _position(f, source)
        if render_type(f.type) != render_type(before.type):
            change(
                where,
                f"field `{f.name}` type changed from {render_type(before.type)} "
                f"to {render_type(f.type)}",
            )
        elif f.constraints != before.constraints:
            change(
                where,
                f"field `{f.name}` constraints changed from {dict(before.constraints.items())} "
                f"to {dict(f.constraints.items())} (old messages may not satisfy them)",
            )
    return changes


def _moves(
    old: ir.StructDef, new: ir.StructDef, origin: list[int | None], source: str
) -> list[Change]:
    """Fields that changed order: "swapped" for an exchanged pair, else "moved"."""
    order = [(j, i) for j, i in enumerate(origin) if i is not None]
    ranked = sorted(order, key=lambda pair: pair[1])
    # Where each kept field stands among the kept ones, before and after.
    out_of_place = [
        (j, i) for (j, i), (_, expected) in zip(order, ranked, strict=True) if i != expected
    ]
    if not out_of_place:
        return []
    if len(out_of_place) == 2:
        (j1, i1), (j2, i2) = out_of_place
        if ranked.index((j1, i1)) == order.index((j2, i2)):
            first, second = old.fields[i1].name, old.fields[i2].name
            if i2 < i1:
                first, second = second, first
            message = (
                f"fields `{first}` and `{second}` swapped (positions {min(i1, i2)} and "
                f"{max(i1, i2)}); fields travel by position"
            )
            return [Change(_position(new.fields[j1], source), new.name, message, True)]
    stay = _longest_increasing([i for _, i in order])
    return [
        Change(
            _position(new.fields[j], source),
            new.name,
            f"field `{new.fields[j].name}` moved from position {i} to {j}; "
            "fields travel by position",
            True,
        )
        for j, i in order
        if i not in stay
    ]


def _longest_increasing(values: list[int]) -> set[int]:
    """The largest set of values already in increasing order (they count as not moved)."""
    best: list[list[int]] = []  # best[k]: the longest increasing run ending at values[k]
    for v in values:
        longest: list[int] = []
        for run in best:
            if run[-1] < v and len(run) > len(longest):
                longest = run
        best.append([*longest, v])
    winner: list[int] = max(best, key=len, default=[])
    return set(winner)


def _compare_unions(old: ir.UnionDef, new: ir.UnionDef, source: str) -> list[Change]:
    changes = []
    new_variants = {v.tag: v for v in new.variants}
    for variant in old.variants:
        now = new_variants.get(variant.tag)
        if now is None:
            changes.append(
                Change(
                    _position(new, source),
                    new.name,
                    f"variant with tag {variant.tag!r} ({render_type(variant.type)}) removed",
                    True,
                )
            )
        elif render_type(now.type) != render_type(variant.type):
            changes.append(
                Change(
                    _position(now, source),
                    new.name,
                    f"variant with tag {variant.tag!r} changed from {render_type(variant.type)} "
                    f"to {render_type(now.type)}",
                    True,
                )
            )
    return changes


def _compare_enums(old: ir.EnumDef, new: ir.EnumDef, source: str) -> list[Change]:
    """Members travel by value: one removed, or its value changed, breaks old messages; a
    member with a new value is compatible (an older codec rejects a message holding it,
    as it does a new union variant); a member renamed with its value kept is a note."""
    at = _position(new, source)
    kinds = {int: "ints", str: "strings"}
    old_kind, new_kind = type(old.members[0].value), type(new.members[0].value)
    if old_kind is not new_kind:
        message = f"values changed from {kinds[old_kind]} to {kinds[new_kind]}"
        return [Change(at, new.name, message, breaking=True)]
    changes: list[Change] = []
    new_by_name = {m.name: m for m in new.members}
    new_by_value = {m.value: m for m in new.members}
    old_names = {m.name for m in old.members}
    for member in old.members:
        now = new_by_name.get(member.name)
        if now is not None:
            if now.value != member.value:
                message = (
                    f"member `{member.name}` value changed from {member.value!r} to "
                    f"{now.value!r}; the value is what travels"
                )
                changes.append(Change(_position(now, source), new.name, message, breaking=True))
            continue
        renamed = new_by_value.get(member.value)
        if renamed is not None and renamed.name not in old_names:
            message = (
                f"member `{member.name}` renamed to `{renamed.name}` (compatible: its value "
                f"{member.value!r} is what travels; the Python API sees the new name)"
            )
            changes.append(Change(_position(renamed, source), new.name, message, breaking=False))
        else:
            message = (
                f"member `{member.name}` ({member.value!r}) removed; messages holding it can no "
                "longer be read"
            )
            changes.append(Change(at, new.name, message, breaking=True))
    return changes
