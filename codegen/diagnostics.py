"""Errors found in schemas, each tied to a file position."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True, order=True, slots=True)
class Position:
    file: str
    line: int
    """1-based."""
    column: int
    """1-based."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True, order=True, slots=True)
class Diagnostic:
    position: Position
    message: str

    def __str__(self) -> str:
        return f"{self.position}: {self.message}"


class UsageError(Exception):
    """A command cannot run as asked: a path that is missing or unreadable, an unknown git
    ref, an output directory holding files the compiler did not write. The command line
    exits 2 with this message; findings about the schemas themselves exit 1."""


class SchemaErrors(Exception):
    """Raised by the pipeline when a schema is invalid; holds every diagnostic."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("\n".join(map(str, diagnostics)))
        self.diagnostics = sorted(diagnostics)


def format_text(diagnostics: list[Diagnostic]) -> str:
    return "".join(f"{d}\n" for d in sorted(diagnostics))


def json_rows(diagnostics: list[Diagnostic]) -> list[dict[str, object]]:
    """``{"file", "line", "column", "message"}`` per diagnostic, sorted."""
    return [{**asdict(d.position), "message": d.message} for d in sorted(diagnostics)]


def format_json(diagnostics: list[Diagnostic]) -> str:
    return json.dumps({"errors": json_rows(diagnostics)}, indent=2) + "\n"
