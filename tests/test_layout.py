"""One import package: nothing imports the bare names ``generated`` or ``codegen``, and the
shipped package never imports the benchmarks or the tests.

The repository keeps ``codegen/`` and ``generated/`` at its top level; they install as
``mmcodec.codegen`` and ``mmcodec.generated`` (``mmcodec/codegen`` and ``mmcodec/generated``
are symlinks to them), so an import of the bare name would work here and fail once installed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BARE = frozenset({"generated", "codegen"})
NOT_SHIPPED = frozenset({"bench", "tests"})
SKIPPED_DIRS = frozenset({".venv", ".git", "build", "__pycache__"})


SHIPPED = frozenset({"mmcodec", "codegen", "generated"})
"""Top-level folders whose code the wheel ships (the last two through the symlinks)."""


def _python_files() -> Iterator[Path]:
    seen: set[Path] = set()
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if not SKIPPED_DIRS.isdisjoint(relative.parts) or relative.parts[0].startswith(".venv"):
            continue
        if path.resolve() not in seen:  # a file seen through a symlink is the same file
            seen.add(path.resolve())
            yield path


def _imported_tops(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def test_nothing_imports_the_bare_names() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: import of {top!r}"
        for path in _python_files()
        for line, top in _imported_tops(path)
        if top in BARE
    ]
    assert found == [], "import mmcodec.codegen / mmcodec.generated instead:\n" + "\n".join(found)


def test_templates_emit_no_bare_imports() -> None:
    for template in (ROOT / "codegen" / "templates").glob("*.j2"):
        text = template.read_text(encoding="utf-8")
        for bare in BARE:
            assert f"from {bare} " not in text and f"import {bare}" not in text, template


def test_the_shipped_package_imports_no_benchmark_or_test() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: import of {top!r}"
        for path in _python_files()
        if path.relative_to(ROOT).parts[0] in SHIPPED
        for line, top in _imported_tops(path)
        if top in NOT_SHIPPED
    ]
    assert found == []


def test_the_symlinked_subpackages_are_the_top_level_folders() -> None:
    for name in BARE:
        link = ROOT / "mmcodec" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), link
