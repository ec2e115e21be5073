"""Read schema YAML into plain values that remember where they came from.

PyYAML's composer keeps a mark on every node; we turn nodes into small located
values (``Scalar``, ``Seq``, ``Map``) instead of Python objects, so that every
later error can point at file:line:col. Duplicate keys, which PyYAML would
silently overwrite, are reported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mmcodec.codegen import yamlerrors
from mmcodec.codegen.diagnostics import Diagnostic, Position, UsageError


@dataclass(frozen=True, slots=True)
class Scalar:
    value: Any
    """str, int, float, bool or None, as YAML's core schema resolves it."""
    position: Position


@dataclass(frozen=True, slots=True)
class Seq:
    items: tuple[Node, ...]
    position: Position


@dataclass(frozen=True, slots=True)
class Map:
    entries: tuple[tuple[Scalar, Node], ...]
    """Key order as written."""
    position: Position
    _index: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)

    def get(self, key: str) -> Node | None:
        if not self._index:
            for k, v in self.entries:
                self._index.setdefault(str(k.value), v)
        return self._index.get(key)

    def keys(self) -> list[Scalar]:
        return [k for k, _ in self.entries]


Node = Scalar | Seq | Map


@dataclass(frozen=True, slots=True)
class LoadedFile:
    path: Path
    display_path: str
    text: str
    root: Node | None


class _Loader(yaml.SafeLoader):
    """SafeLoader: no Python tags, so loading a schema can never run code."""


SCHEMA_SUFFIXES = (".yaml", ".yml")


def schema_files(paths: Sequence[Path], root: Path) -> list[Path]:
    """The schema files named by ``paths``: files as given, directories' ``*.yaml`` and
    ``*.yml`` files (not recursive) in name order.

    Raises :class:`UsageError` for a path that does not exist and for a directory
    without any schema file: there would be nothing to check, and a check that checks
    nothing must not pass.
    """
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in SCHEMA_SUFFIXES and p.is_file())
            if not found:
                raise UsageError(f"no schema files (*.yaml, *.yml) in {_shown(path, root)}/")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"{_shown(path, root)}: no such file or directory")
    return files


def _shown(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def load_file(path: Path, display_path: str, diagnostics: list[Diagnostic]) -> LoadedFile:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        diagnostics.append(
            Diagnostic(Position(display_path, 1, 1), f"not UTF-8 text (byte {e.start}: {e.reason})")
        )
        return LoadedFile(path, display_path, "", None)
    except OSError as e:
        raise UsageError(f"{display_path}: cannot read: {e.strerror or e}") from e
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        diagnostics.append(yamlerrors.describe(e, text, display_path))
        return LoadedFile(path, display_path, text, None)
    if node is None:
        return LoadedFile(path, display_path, text, None)
    return LoadedFile(path, display_path, text, _convert(node, display_path, diagnostics))


def _position(node: yaml.Node, file: str) -> Position:
    """Where ``node`` starts; for a scalar or ``{...}``/``[...]`` on one line, how many
    columns it spans too."""
    start, end = node.start_mark, node.end_mark
    inline = isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False)
    one_line = inline and end.line == start.line
    length = end.column - start.column if one_line else 0
    return Position(file, start.line + 1, start.column + 1, length)


def _convert(node: yaml.Node, file: str, diagnostics: list[Diagnostic]) -> Node:
    position = _position(node, file)
    if isinstance(node, yaml.MappingNode):
        entries: list[tuple[Scalar, Node]] = []
        seen: dict[str, Position] = {}
        for key_node, value_node in node.value:
            key = _convert(key_node, file, diagnostics)
            if not isinstance(key, Scalar) or isinstance(key.value, (list, dict)):
                diagnostics.append(Diagnostic(key.position, "mapping keys must be plain scalars"))
                continue
            name = str(key.value)
            if name in seen:
                diagnostics.append(
                    Diagnostic(
                        key.position, f"duplicate key {name!r} (first defined at {seen[name]})"
                    )
                )
                continue
            seen[name] = key.position
            entries.append((key, _convert(value_node, file, diagnostics)))
        return Map(tuple(entries), position)
    if isinstance(node, yaml.SequenceNode):
        return Seq(tuple(_convert(item, file, diagnostics) for item in node.value), position)
    assert isinstance(node, yaml.ScalarNode)
    return Scalar(_scalar_value(node), position)


def _scalar_value(node: yaml.ScalarNode) -> Any:
    """The scalar as YAML's safe core schema types it (int, float, bool, None or str)."""
    return _Loader("").construct_object(node, deep=True)
