"""The tree of :func:`mmcodec.runtime.inspect.describe` as indented text.

One line per node, indented two spaces per level, so the text is about as long as the
tree's budget. A back-reference prints the path of the value it repeats the first time
that value is repeated, and only its number after that; a tensor shown again likewise.
A column list is a line for the list, one for its absent items, and per key its column,
each value labelled with the position of its item in the list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mmcodec.runtime.inspect_body import BYTES_SHOWN
from mmcodec.runtime.inspect_columns import positions_from_runs

__all__ = ["render_text"]


def render_text(description: dict[str, Any]) -> str:
    """The tree from :func:`~mmcodec.runtime.inspect.describe`, as indented text."""
    env = description["envelope"]
    frames = description["frames"]
    lines = [
        f"envelope: wire version {env['wire_version']}, schema {env['schema']!r} "
        f"major {env['major']}, root {env['root']}",
        f"frames: {_count(frames)} ("
        + ", ".join(
            _omitted_text(f) if "$omitted" in f else f"{f['frame']}: {f['bytes']} bytes"
            for f in frames
        )
        + "), header first",
        f"tensor runs: {_count(description['runs'])}",
    ]
    for run in description["runs"]:
        if "$omitted" in run:
            lines.append(f"  {_omitted_text(run)}")
            continue
        where = "inline" if run.get("inline") else f"frame {run['frame']} offset {run['offset']}"
        lines.append(
            f"  run {run['run']}: {run['dtype']}{run['shape']} x {run['count']}, "
            f"{run['bytes']} bytes, {where}"
        )
    lines.append(_refs_text(description["refs"]))
    lines.append(f"tensors: {_count(description['tensors'])}")
    for t in description["tensors"]:
        if "$omitted" in t:
            lines.append(f"  {_omitted_text(t)}")
            continue
        line = f"  tensor {t['tensor']}: {t['dtype']}{t['shape']} (run {t['run']} #{t['index']})"
        if "values" in t:
            shown = [str(v) for v in t["values"]]
            if "values_omitted" in t:
                shown.append(f"... {t['values_omitted']} more")
            line += " = [" + ", ".join(shown) + "]"
        lines.append(line)
    by_position = description["body_type"] is None
    lines.append("body (by position; --module names fields):" if by_position else "body:")
    _Renderer(lines).node(description["body"], "  ", None)
    if description["truncated"]:
        lines.append(
            "(truncated: the description reached its output budget; "
            "mmcodec inspect --max-output raises it)"
        )
    return "\n".join(lines) + "\n"


def _count(entries: list[Any]) -> int:
    """How many entries a list of the tree stands for, those left out included."""
    if entries and isinstance(entries[-1], dict) and "$omitted" in entries[-1]:
        return len(entries) - 1 + int(entries[-1]["$omitted"])
    return len(entries)


def _omitted_text(node: dict[str, Any]) -> str:
    return f"... {node['$omitted']} more (output budget reached)"


def _refs_text(runs: list[dict[str, int]]) -> str:
    if not runs:
        return "refs: none (tensor references are positions)"
    parts = []
    total = 0
    for run in runs:
        if "$omitted" in run:
            parts.append(_omitted_text(run))
            total += run["$omitted"]
            continue
        first, count, step = run["first"], run["count"], run["step"]
        total += count
        if count == 1:
            parts.append(str(first))
        elif step == 0:
            parts.append(f"{first} (x{count})")
        else:
            parts.append(f"{first}..{first + count - 1}")
    return f"refs: {total} entries: " + ", ".join(parts)


class _Renderer:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.repeated: set[tuple[str, int]] = set()
        """Back-references whose path was printed."""
        self.seen_again: set[int] = set()
        """Tensors whose first path was printed."""

    def node(self, node: Any, indent: str, head: str | None) -> None:
        """Append ``head: summary`` and the node's children, one more level indented."""
        summary, children = self._summary(node)
        prefix = f"{head}: " if head is not None else ""
        self.lines.append(f"{indent}{prefix}{summary}".rstrip())  # no summary is empty
        inner = indent + "  "
        for child_head, child in children:
            if isinstance(child, dict) and "$omitted" in child and child_head is None:
                self.lines.append(f"{inner}{_omitted_text(child)}")
            else:
                self.node(child, inner, child_head)

    def _summary(self, node: Any) -> tuple[str, list[tuple[str | None, Any]]]:
        if isinstance(node, _Labelled):
            return node.text, node.children
        if isinstance(node, _Text):
            return node.text, []
        if isinstance(node, list):
            return f"list[{_count(node)}]", _items(node)
        if not isinstance(node, dict):
            return _scalar_text(node), []
        if "$struct" in node:
            fields = node["fields"]
            children: list[tuple[str | None, Any]] = [
                (f".{k}", v) for k, v in fields.items() if k != "$omitted"
            ]
            if "$omitted" in fields:
                children.append((None, {"$omitted": fields["$omitted"]}))
            return node["$struct"], children
        if "$dict" in node:
            entries = node["$dict"]
            label = node.get("$type") or f"dict[{_count(entries)}]"
            return label, [
                (None, e) if isinstance(e, dict) else (f"[{self._summary(e[0])[0]}]", e[1])
                for e in entries
            ]
        if "$tuple" in node:
            items = node["$tuple"]
            return f"tuple[{_count(items)}]", _items(items)
        if "$tensor" in node:
            text = f"tensor {node['$tensor']}: {node['dtype']}{node['shape']}"
            if "again" in node:
                if node["$tensor"] in self.seen_again:
                    text += " (again)"
                else:
                    self.seen_again.add(node["$tensor"])
                    text += f" (again: first at {node['again']})"
            return text, []
        if "$ref" in node:
            text = f"-> {node['$ref']} #{node['index']}"
            key = (node["$ref"], node["index"])
            if key not in self.repeated:
                self.repeated.add(key)
                text += f" (the value at {node['to']})"
            return text, []
        if "$slice" in node:
            start, stop, step = node["$slice"]
            return f"slice({start}, {stop}" + (f", {step})" if step is not None else ")"), []
        if "$bytes" in node:
            more = "..." if node["$bytes"] > BYTES_SHOWN else ""
            return f"bytes[{node['$bytes']}] {node['hex']}{more}", []
        if "$str" in node:
            return _scalar_text(node), []
        if "$columns" in node:
            return self._column_list(node)
        if "$omitted" in node:
            return _omitted_text(node), []
        return repr(node), []  # pragma: no cover - describe() makes no other node

    def _column_list(self, node: dict[str, Any]) -> tuple[str, list[tuple[str | None, Any]]]:
        """A column list: a line for it, one for its absent items, one per key with its
        column below; each value labelled with the position of its item in the list."""
        absent = node["absent"]
        missing = node["count"] - node["present"]
        columns = node["columns"]
        summary = f"column list of {node['$columns']}: {node['count']} items"
        if missing:
            summary += f" ({missing} absent)"
        keys = _count(columns)
        summary += f", {keys} key" + ("s" if keys != 1 else "")
        children: list[tuple[str | None, Any]] = []
        if absent:
            children.append(("absent", _Text(_absent_text(absent))))
        # Complete whenever a column is shown: the budget ran out before, if it was not.
        position = positions_from_runs((r["first"], r["count"]) for r in absent if "first" in r)
        for column in columns:
            if "$omitted" in column:
                children.append((None, column))
                continue
            head = f"[{self._summary(column['key'])[0]}]"
            if "$values" in column:
                values = column["values"]
                text = f"column[{_count(values)}] of {column['$values']} values"
                children.append((head, _Labelled(text, _items(values, position))))
                continue
            fields = column["fields"]
            inner: list[tuple[str | None, Any]] = []
            for name, values in fields.items():
                if name == "$omitted":
                    continue
                if isinstance(values, dict):  # {"$default": n}: not in the message
                    text = f"not in the message: the default, for all {values['$default']}"
                    inner.append((f".{name}", _Text(text)))
                    continue
                text = f"column[{_count(values)}]"
                inner.append((f".{name}", _Labelled(text, _items(values, position))))
            if "$omitted" in fields:
                inner.append((None, {"$omitted": fields["$omitted"]}))
            text = f"column[{node['present']}] of {column['$fields']}, by field"
            children.append((head, _Labelled(text, inner)))
        return summary, children


class _Text:
    """A line of text the renderer made itself (no node of the tree)."""

    def __init__(self, text: str) -> None:
        self.text = text


class _Labelled:
    """A line and its children, labelled by the renderer."""

    def __init__(self, text: str, children: list[tuple[str | None, Any]]) -> None:
        self.text = text
        self.children = children


def _absent_text(runs: list[dict[str, int]]) -> str:
    parts = []
    for run in runs:
        if "$omitted" in run:
            parts.append(_omitted_text(run))
        elif run["count"] == 1:
            parts.append(str(run["first"]))
        else:
            parts.append(f"{run['first']}..{run['first'] + run['count'] - 1}")
    return ", ".join(parts)


def _items(items: list[Any], position: Callable[[int], int] = int) -> list[tuple[str | None, Any]]:
    return [
        (None, item)
        if isinstance(item, dict) and "$omitted" in item
        else (f"[{position(i)}]", item)
        for i, item in enumerate(items)
    ]


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):  # a long string
        return f"{value['$str']!r}... ({value['length']} characters)"
    return str(value)
