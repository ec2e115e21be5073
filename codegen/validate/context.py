"""What every check shares: the diagnostics being collected, what a file declared, and
helpers for reading keys with did-you-mean hints.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mmcodec.codegen import ir
from mmcodec.codegen.diagnostics import Diagnostic, Position
from mmcodec.codegen.load import LoadedFile, Map, Node, Scalar


@dataclass
class Context:
    diagnostics: list[Diagnostic]
    files: dict[Path, LoadedFile] = field(default_factory=dict)

    def error(self, position: Position, message: str, hint: str = "") -> None:
        self.diagnostics.append(Diagnostic(position, message, hint))

    def written(self, position: Position) -> str:
        """The text a one-line node spans in its file, as written (``""`` if unknown)."""
        loaded = next((f for f in self.files.values() if f.display_path == position.file), None)
        lines = loaded.text.split("\n") if loaded else []
        if not position.length or position.line > len(lines):
            return ""
        start = position.column - 1
        return lines[position.line - 1][start : start + position.length]

    def sources(self) -> dict[str, str]:
        """The text of every file read, by displayed path (for the errors' excerpts)."""
        return {f.display_path: f.text for f in self.files.values()}


@dataclass
class Declared:
    """A type name seen in a file, before its body is checked."""

    name: str
    kind: str
    body: Node
    node: Map
    position: Position


@dataclass
class FileInfo:
    loaded: LoadedFile
    module: str
    major: int
    doc: str
    imports: dict[str, Path]
    declared: dict[str, Declared]
    exports: tuple[ir.Binding, ...] = ()


def position_of(loaded: LoadedFile) -> Position:
    return loaded.root.position if loaded.root else Position(loaded.display_path, 1, 1)


def display_path(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


SCHEMA_SUFFIXES = (".yaml", ".yml")


def referenced_file(base: Path, value: str, root: Path) -> Path | str:
    """The schema file that ``value`` (an import, a bindings file's ``schema``) names,
    relative to the file's folder ``base``; or why it may not be read.

    Schemas may come from an untrusted contributor, so a reference stays inside the
    project root (symlinks resolved first; for a file outside the root, inside its own
    folder): no absolute paths, no ``..`` out of it, and only ``*.yaml``/``*.yml``
    files, so that an error message never quotes another kind of file.
    """
    if Path(value).is_absolute() or value.startswith("~"):
        return "must be a path relative to the file that names it, not an absolute path"
    limit = root.resolve()
    if not base.resolve().is_relative_to(limit):
        limit = base.resolve()
    target = (base / value).resolve()
    if not target.is_relative_to(limit):
        where = "the project root" if limit == root.resolve() else "the folder of the file"
        return f"leaves {where} ({limit.as_posix()})"
    if target.suffix not in SCHEMA_SUFFIXES:
        return "is not a schema file (*.yaml, *.yml)"
    if not target.is_file():
        return "not found"
    return target


def unknown_keys(ctx: Context, node: Map, allowed: tuple[str, ...], what: str) -> dict[str, str]:
    """Report keys outside ``allowed``; return the allowed keys suggested for them
    (suggestion -> the key as written).

    A caller then leaves out its own "missing key" error for a suggested key: a typo
    such as ``strcut:`` is one mistake and gets one error.
    """
    suggested: dict[str, str] = {}
    for key, _ in node.entries:
        name = str(key.value)
        if name not in allowed:
            close = closest(name, allowed)
            ctx.error(key.position, f"unknown key {name!r} in {what}", did_you_mean(name, allowed))
            if close:
                suggested.setdefault(close, name)
    return suggested


def closest(name: str, candidates: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """The hint ``did you mean 'close'?`` for the closest candidate, or ``""``."""
    close = closest(name, candidates)
    return f"did you mean {close!r}?" if close else ""


def value_position(node: Map, key: str) -> Position:
    value = node.get(key)
    return value.position if value is not None else node.position


def required_str(ctx: Context, node: Map, key: str, what: str) -> str | None:
    value = node.get(key)
    if value is None:
        ctx.error(node.position, f"missing key {key!r} ({what})")
        return None
    if not (isinstance(value, Scalar) and isinstance(value.value, str)):
        ctx.error(value.position, f"{key!r} must be a string")
        return None
    return value.value


def optional_str(ctx: Context, node: Map, key: str) -> str | None:
    value = node.get(key)
    if value is None:
        return None
    if not (isinstance(value, Scalar) and isinstance(value.value, str)):
        ctx.error(value.position, f"{key!r} must be a string")
        return None
    return value.value.strip()
