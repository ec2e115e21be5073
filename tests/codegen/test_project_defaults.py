"""``[tool.mmcodec]`` in pyproject.toml: what ``generate`` and ``check`` do with no options."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mmcodec.codegen.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = '[tool.mmcodec]\nschemas = "specs"\nout = "app/codecs"\npackage = "codecs"\n'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "specs").mkdir()
    for name in ("enums.yaml", "common.yaml"):  # enums imports common
        shutil.copy(ROOT / "tests/schemas" / name, tmp_path / "specs" / name)
    (tmp_path / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


def run(project: Path, *args: str) -> int:
    return main(["--root", str(project), *args])


def test_no_options_take_the_project_s(project: Path) -> None:
    assert run(project, "generate") == 0
    header = (project / "app/codecs/enums.py").read_text(encoding="utf-8").splitlines()[:5]
    assert header[4] == "#   mmcodec generate --schemas specs --out app/codecs --package codecs"
    assert run(project, "check") == 0
    # The same output, asked for in full, is up to date too.
    assert (
        run(project, "check", "--schemas", "specs", "--out", "app/codecs", "--package", "codecs")
        == 0
    )


def test_options_win_and_the_package_follows_its_folder(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(project, "generate", "--out", "other") == 0
    header = (project / "other/enums.py").read_text(encoding="utf-8").splitlines()[4]
    # The configured package names app/codecs, not this folder: the default (its path) applies.
    assert header == "#   mmcodec generate --schemas specs --out other"


def test_this_repository_checks_clean_with_no_options() -> None:
    assert run(ROOT, "check") == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[tool.mmcodec]\npackges = "x"\n',
            "pyproject.toml: unknown key(s) in [tool.mmcodec]: packges "
            "(known: schemas, out, package)",
        ),
        (
            "[tool.mmcodec]\nout = 3\n",
            "pyproject.toml: [tool.mmcodec] out must be a non-empty string",
        ),
        ('[tool]\nmmcodec = "x"\n', "pyproject.toml: tool.mmcodec must be a table"),
        (
            "[tool.mmcodec\n",
            "pyproject.toml: Expected ']' at the end of a table declaration (at line 1, column 14)",
        ),
    ],
)
def test_a_bad_table_is_a_usage_error(
    project: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "pyproject.toml").write_text(text, encoding="utf-8")
    assert run(project, "check") == 2
    assert capsys.readouterr().err == f"mmcodec check: error: {message}\n"
