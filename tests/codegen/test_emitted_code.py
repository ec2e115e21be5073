"""The committed generated code is what ruff would write, and emits only what is used.

``make lint`` runs ruff over the whole project; these tests run it over the generated
modules alone, with the project's configuration, so a template that emits unformatted
or unclean code fails here with the file named. The compiler itself runs no formatter.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = ["generated", "tests/golden"]
MODULES = sorted(p.relative_to(ROOT).as_posix() for o in OUTPUTS for p in (ROOT / o).glob("*.py"))


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    from ruff.__main__ import find_ruff_bin  # type: ignore[import-untyped]  # the dev extra

    command = [find_ruff_bin(), *args, *OUTPUTS]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_format_leaves_the_generated_code_unchanged() -> None:
    result = _ruff("format", "--check", "--diff")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_check_finds_nothing_in_the_generated_code() -> None:
    result = _ruff("check", "--no-fix", "--output-format", "concise")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", MODULES)
def test_every_private_function_is_called(path: str) -> None:
    """No helper nothing calls (``_optional_str_to_wire`` was one)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert sorted(f for f in defined if f.startswith("_") and f not in used) == []
