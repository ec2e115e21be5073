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
from typing import Any, Protocol

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
        bound = _check_bounds(text)
        if bound is not None:
            (line, column), problem = bound
            diagnostics.append(Diagnostic(Position(display_path, line, column), problem))
            return LoadedFile(path, display_path, text, None)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        diagnostics.append(yamlerrors.describe(e, text, display_path))
        return LoadedFile(path, display_path, text, None)
    if node is None:
        return LoadedFile(path, display_path, text, None)
    try:
        root = _convert(node, display_path, diagnostics, {})
    except yaml.constructor.ConstructorError as e:  # a tag that does not fit its value
        diagnostics.append(yamlerrors.describe(e, text, display_path))
        return LoadedFile(path, display_path, text, None)
    return LoadedFile(path, display_path, text, root)


def _position(node: yaml.Node, file: str) -> Position:
    """Where ``node`` starts; for a scalar or ``{...}``/``[...]`` on one line, how many
    columns it spans too."""
    start, end = node.start_mark, node.end_mark
    inline = isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False)
    one_line = inline and end.line == start.line
    length = end.column - start.column if one_line else 0
    return Position(file, start.line + 1, start.column + 1, length)


MAX_DEPTH = 64
"""How deeply mappings and sequences may nest in a schema file (a real one nests about 6)."""
MAX_NODES = 100_000
"""How many nodes a schema file may hold, counting each alias as the nodes it stands for.

A few hundred bytes of nested aliases stand for billions of nodes ("billion laughs"):
the compiler would walk every one. Real schemas hold a few hundred nodes."""


_Found = tuple[tuple[int, int], str]
"""Where (1-based line and column) and what."""


class _Mark(Protocol):
    line: int
    column: int


def _at(mark: _Mark | None) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def _check_bounds(text: str) -> _Found | None:
    """Where the document first exceeds :data:`MAX_DEPTH` or :data:`MAX_NODES`, and how.

    Reads PyYAML's event stream (no recursion, no tree): each node counts one, each alias
    the nodes of its anchor's value, so the count is what a walk of the tree would visit.
    """
    anchored: dict[str, int] = {}
    open_nodes: list[tuple[str | None, int]] = []  # (anchor, nodes counted so far)
    total = 0

    def add(count: int, mark: _Mark | None) -> _Found | None:
        nonlocal total
        total += count
        if open_nodes:
            anchor, nodes = open_nodes[-1]
            open_nodes[-1] = (anchor, nodes + count)
        if total > MAX_NODES:
            return _at(mark), (
                f"the document holds more than {MAX_NODES} nodes once its aliases are "
                "expanded (an alias stands for a copy of its anchor's value)"
            )
        return None

    for event in yaml.parse(text, Loader=_Loader):
        found = None
        if isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                anchored[event.anchor] = 1
            found = add(1, event.start_mark)
        elif isinstance(event, yaml.AliasEvent):
            found = add(anchored.get(event.anchor or "", 1), event.start_mark)
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(open_nodes) >= MAX_DEPTH:
                return _at(
                    event.start_mark
                ), f"mappings and lists nest deeper than {MAX_DEPTH} levels"
            found = add(1, event.start_mark)
            open_nodes.append((event.anchor, 1))
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, nodes = open_nodes.pop()
            if anchor is not None:
                anchored[anchor] = nodes
            if open_nodes:  # the nodes were counted in the total already
                parent, counted = open_nodes[-1]
                open_nodes[-1] = (parent, counted + nodes)
        if found is not None:
            return found
    return None


def _convert(
    node: yaml.Node, file: str, diagnostics: list[Diagnostic], done: dict[int, Node]
) -> Node:
    """The located value of ``node``; a node reached again through an alias is the same
    value (``done``, by node identity), converted and checked once."""
    converted = done.get(id(node))
    if converted is None:
        converted = done[id(node)] = _convert_new(node, file, diagnostics, done)
    return converted


def _convert_new(
    node: yaml.Node, file: str, diagnostics: list[Diagnostic], done: dict[int, Node]
) -> Node:
    position = _position(node, file)
    if isinstance(node, yaml.MappingNode):
        entries: list[tuple[Scalar, Node]] = []
        seen: dict[str, Position] = {}
        for key_node, value_node in node.value:
            key = _convert(key_node, file, diagnostics, done)
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
            entries.append((key, _convert(value_node, file, diagnostics, done)))
        return Map(tuple(entries), position)
    if isinstance(node, yaml.SequenceNode):
        items = tuple(_convert(item, file, diagnostics, done) for item in node.value)
        return Seq(items, position)
    assert isinstance(node, yaml.ScalarNode)
    return Scalar(_scalar_value(node), position)


def _scalar_value(node: yaml.ScalarNode) -> Any:
    """The scalar as YAML's safe core schema types it (int, float, bool, None or str).

    An explicit tag can ask for what the value is not (``!!int abc``, ``!!bool maybe``) or
    for a type no safe loader knows (``!!python/object:...``): a ConstructorError then, as
    PyYAML raises for the latter, never another exception.
    """
    try:
        return _Loader("").construct_object(node, deep=True)
    except yaml.constructor.ConstructorError:
        raise
    except (ValueError, KeyError, TypeError, OverflowError) as e:
        raise yaml.constructor.ConstructorError(
            None, None, f"{node.value!r} is not a valid {node.tag}", node.start_mark
        ) from e
