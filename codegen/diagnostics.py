"""Errors found in schemas, each tied to a file position, and how a user sees them.

As text (the default), each error is shown the way rustc, clang and mypy's pretty
output show theirs: ``file:line:col: error: message`` (a form editors and CI annotate),
then the source line with a caret under the offending text and the hint, if any::

    schema/shapes.yaml:9:14: error: unknown type 'Piont'
      |
    9 |       start: Piont
      |              ^^^^^ did you mean 'Point'?

``--format json`` gives the same facts as data (:func:`json_rows`).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field

WIDTH = 100
"""A hint goes on the caret's line when the line stays this short, else on its own."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    file: str
    line: int
    """1-based."""
    column: int
    """1-based."""
    length: int = field(default=0, compare=False)
    """How many columns the offending text spans on this line; 0 when not known (a mapping,
    a text over several lines). Not part of equality: only the start identifies a place."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True, order=True, slots=True)
class Diagnostic:
    position: Position
    message: str
    """What is wrong: one cause."""
    hint: str = ""
    """How to fix it, when the compiler can tell (``did you mean 'Point'?``)."""

    def __str__(self) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.position}: {self.message}{hint}"


class UsageError(Exception):
    """A command cannot run as asked: a path that is missing or unreadable, an unknown git
    ref, an output directory holding files the compiler did not write. The command line
    exits 2 with this message; findings about the schemas themselves exit 1."""


class SchemaErrors(Exception):
    """Raised by the pipeline when a schema is invalid; holds every diagnostic and the
    text of the files they point into (by displayed path), to show their lines."""

    def __init__(
        self, diagnostics: list[Diagnostic], sources: Mapping[str, str] | None = None
    ) -> None:
        super().__init__("\n".join(map(str, diagnostics)))
        self.diagnostics = sorted(diagnostics)
        self.sources: dict[str, str] = dict(sources or {})


# -- text ------------------------------------------------------------------------------


def format_text(diagnostics: list[Diagnostic], sources: Mapping[str, str] | None = None) -> str:
    """Every diagnostic with its source excerpt, a blank line between them, then the count."""
    if not diagnostics:
        return ""
    blocks = [_block(d, (sources or {}).get(d.position.file)) for d in sorted(diagnostics)]
    return "\n".join(blocks) + "\n" + count_line(diagnostics) + "\n"


def count_line(diagnostics: list[Diagnostic]) -> str:
    """``3 errors in 2 files``."""
    errors, files = len(diagnostics), len({d.position.file for d in diagnostics})
    return f"{errors} error{'s' * (errors != 1)} in {files} file{'s' * (files != 1)}"


def _block(d: Diagnostic, text: str | None) -> str:
    head = f"{d.position}: error: {d.message}\n"
    line = _source_line(text, d.position.line)
    if line is None:
        return head + (f"  = help: {d.hint}\n" if d.hint else "")
    number = str(d.position.line)
    gutter = " " * len(number)
    shown = _printable(line)
    start = min(max(d.position.column, 1), len(line) + 1) - 1
    span = max(1, min(d.position.length, len(line) - start))
    carets = " " * _width(shown[:start]) + "^" * max(1, _width(shown[start : start + span]))
    under = f"{gutter} | {carets}"
    if d.hint and len(under) + 1 + len(d.hint) <= WIDTH:
        under += f" {d.hint}"
        hint = ""
    else:
        hint = f"{gutter} = help: {d.hint}\n" if d.hint else ""
    return f"{head}{gutter} |\n{number} | {shown}\n{under}\n{hint}"


def _source_line(text: str | None, number: int) -> str | None:
    if text is None:
        return None
    lines = text.split("\n")
    if not 1 <= number <= len(lines):
        return None
    return lines[number - 1].rstrip("\r")


def _printable(line: str) -> str:
    """The line as a terminal may show it: a schema is untrusted, so a control character
    (an escape sequence, say) is shown as U+FFFD, one column like the character it hides;
    a tab as one space, as YAML's columns count it."""
    return "".join(" " if c == "\t" else c if c.isprintable() else "\ufffd" for c in line)


def _width(text: str) -> int:
    """Terminal columns: wide East Asian characters take two, combining marks none."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


# -- JSON ------------------------------------------------------------------------------


def json_rows(diagnostics: list[Diagnostic]) -> list[dict[str, object]]:
    """Per diagnostic, sorted: ``file``, ``line``, ``column`` (1-based), ``message``, and
    ``end_column`` (just past the offending text on that line; ``column + 1`` when its
    extent is not known) and ``hint`` (null when there is none)."""
    return [
        {
            "file": d.position.file,
            "line": d.position.line,
            "column": d.position.column,
            "message": d.message,
            "end_column": d.position.column + max(1, d.position.length),
            "hint": d.hint or None,
        }
        for d in sorted(diagnostics)
    ]


def format_json(diagnostics: list[Diagnostic]) -> str:
    return json.dumps({"errors": json_rows(diagnostics)}, indent=2) + "\n"
