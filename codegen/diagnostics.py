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


class SchemaErrors(Exception):
    """Raised by the pipeline when a schema is invalid; holds every diagnostic."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("\n".join(map(str, diagnostics)))
        self.diagnostics = sorted(diagnostics)


def format_text(diagnostics: list[Diagnostic]) -> str:
    return "".join(f"{d}\n" for d in sorted(diagnostics))


def format_json(diagnostics: list[Diagnostic]) -> str:
    rows = [{**asdict(d.position), "message": d.message} for d in sorted(diagnostics)]
    return json.dumps({"errors": rows}, indent=2) + "\n"
