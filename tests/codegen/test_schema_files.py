"""Which files a command reads: ``*.yaml`` and ``*.yml`` alike; nothing to read is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmcodec.codegen.cli import main


def schema(name: str) -> str:
    return f"schema: {name}\nversion: 1\ntypes:\n  Item:\n    struct:\n      id: {{type: int}}\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "a.yaml").write_text(schema("a"))
    (tmp_path / "schemas" / "b.yml").write_text(schema("bee"))
    (tmp_path / "schemas" / "notes.txt").write_text("not a schema\n")
    return tmp_path


def test_a_directory_gives_both_extensions(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(root), "validate", "schemas"]) == 0
    assert capsys.readouterr().out == "ok: 2 schema file(s) valid\n"
    assert main(["--root", str(root), "generate", "--schemas", "schemas", "--out", "gen"]) == 0
    assert sorted(p.name for p in (root / "gen").iterdir()) == [
        "__init__.py",
        "a.py",
        "bee.py",
        "py.typed",
    ]


def test_an_invalid_yml_file_in_a_directory_is_checked(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "schemas" / "b.yml").write_text(schema("bee").replace("int", "integer"))
    assert main(["--root", str(root), "validate", "schemas"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[0] == "schemas/b.yml:6:18: error: unknown type 'integer'"
    assert "did you mean 'int'?" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "empty"],
        ["generate", "--schemas", "empty"],
        ["check", "--schemas", "empty"],
        ["compat", "empty", "schemas"],
        ["compat", "schemas", "empty"],
    ],
)
def test_a_directory_without_schemas_is_a_usage_error(
    root: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    (root / "empty").mkdir()
    (root / "empty" / "readme.md").write_text("")
    assert main(["--root", str(root), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"mmcodec {argv[0]}: error: no schema files (*.yaml, *.yml) in empty/\n"
    )
    assert not (root / "generated").exists()


def test_the_default_schema_directory_missing_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--root", str(tmp_path), "validate"]) == 2
    assert capsys.readouterr().err == (
        "mmcodec validate: error: schema: no such file or directory\n"
    )
