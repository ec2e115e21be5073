"""A project's own defaults for ``generate`` and ``check``: ``[tool.mmcodec]`` in its
pyproject.toml.

So that ``mmcodec generate`` and ``mmcodec check`` with no options do what the project's
Makefile or pre-commit hook does, and their headers agree::

    [tool.mmcodec]
    schemas = "schema"
    out = "generated"
    package = "mmcodec.generated"   # the output's import name, when not its dotted path

Options given on the command line win. ``package`` is the import name of ``out``: it applies
only when the output goes there.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from mmcodec.codegen.diagnostics import UsageError

KEYS = ("schemas", "out", "package")


def project_defaults(root: Path) -> dict[str, str]:
    """The ``[tool.mmcodec]`` table of ``root``'s pyproject.toml; empty without one."""
    path = root / "pyproject.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read pyproject.toml: {e}") from None
    try:
        tool = tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"pyproject.toml: {e}") from None
    table = tool.get("mmcodec", {}) if isinstance(tool, dict) else {}
    if not isinstance(table, dict):
        raise UsageError("pyproject.toml: tool.mmcodec must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise UsageError(
            f"pyproject.toml: unknown key(s) in [tool.mmcodec]: {', '.join(unknown)} "
            f"(known: {', '.join(KEYS)})"
        )
    for key, value in table.items():
        if not isinstance(value, str) or not value:
            raise UsageError(f"pyproject.toml: [tool.mmcodec] {key} must be a non-empty string")
    return dict(table)
