"""``mmcodec generate --out DIR`` removes only what it wrote, and refuses to touch anything else.

A file is the compiler's when it starts with the ``@generated`` header; ``py.typed`` (empty,
so unmarked) is the compiler's only when everything else in DIR is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmcodec.codegen.cli import main
from mmcodec.codegen.output import GENERATED_MARK

SCHEMA = """\
schema: shop
version: 1
types:
  Item:
    struct:
      name: {type: str}
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "shop.yaml").write_text(SCHEMA)
    return tmp_path


def generate(root: Path, *extra: str) -> int:
    return main(["--root", str(root), "generate", "--out", "pkg", *extra])


def snapshot(directory: Path) -> dict[str, str]:
    return {
        p.relative_to(directory).as_posix(): p.read_text()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_into_a_missing_folder_then_again_changes_nothing(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(root) == 0
    out = root / "pkg"
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {out / '__init__.py'}",
        f"wrote {out / 'py.typed'}",
        f"wrote {out / 'shop.py'}",
    ]
    for name in ("__init__.py", "shop.py"):  # what marks them as the compiler's
        assert (out / name).read_text().startswith(GENERATED_MARK)
    (out / "__pycache__").mkdir()
    (out / "__pycache__" / "shop.cpython-311.pyc").write_bytes(b"\0")  # Python's, ignored
    assert generate(root) == 0
    assert capsys.readouterr().out == ""


def test_refuses_naming_every_foreign_file_and_writes_nothing(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: --out pointed at one's own package."""
    out = root / "pkg"
    (out / "sub").mkdir(parents=True)
    (out / "helpers.py").write_text("def helper() -> int:\n    return 1\n")
    (out / "notes.txt").write_text("mine\n")
    (out / "sub" / "deep.py").write_text("x = 1\n")
    (out / "stale.py").write_text(GENERATED_MARK + " codegen 0.0.1. DO NOT EDIT.\n")
    before = snapshot(out)
    assert generate(root) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"mmcodec generate: error: refusing to write to {out}: it holds 3 file(s) that "
        "mmcodec did not write:\n"
        f"  {out / 'helpers.py'}\n"
        f"  {out / 'notes.txt'}\n"
        f"  {out / 'sub' / 'deep.py'}\n"
        "move them away or give --out a directory of its own (--force removes them)\n"
    )
    assert snapshot(out) == before  # not even the compiler's stale file was touched


def test_a_planned_file_someone_else_wrote_is_not_overwritten(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = root / "pkg"
    out.mkdir()
    (out / "__init__.py").write_text('"""My package."""\n')
    assert generate(root) == 2
    assert f"  {out / '__init__.py'}\n" in capsys.readouterr().err
    assert (out / "__init__.py").read_text() == '"""My package."""\n'


def test_py_typed_is_the_compilers_only_in_a_folder_otherwise_its_own(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = root / "pkg"
    assert generate(root) == 0
    (out / "shop.py").write_text(GENERATED_MARK + " codegen 0.0.1. DO NOT EDIT.\nstale\n")
    (out / "old.py").write_text(GENERATED_MARK + " codegen 0.0.1. DO NOT EDIT.\n")
    capsys.readouterr()
    assert generate(root) == 0  # stale and extra generated files, an empty py.typed: all ours
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {out / 'shop.py'}",
        f"removed {out / 'old.py'}",
    ]
    (out / "README.md").write_text("mine\n")
    assert generate(root) == 2
    err = capsys.readouterr().err
    assert f"  {out / 'README.md'}\n  {out / 'py.typed'}\n" in err  # now py.typed may be theirs
    (out / "README.md").unlink()
    (out / "py.typed").write_text("partial\n")  # a py.typed with content is never ours
    assert generate(root) == 2
    assert f"holds 1 file(s) that mmcodec did not write:\n  {out / 'py.typed'}\n" in (
        capsys.readouterr().err
    )


def test_force_overwrites_and_removes_foreign_files(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = root / "pkg"
    (out / "sub").mkdir(parents=True)
    (out / "__init__.py").write_text("mine\n")
    (out / "sub" / "deep.py").write_text("x = 1\n")
    assert generate(root, "--force") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {out / '__init__.py'}",
        f"wrote {out / 'py.typed'}",
        f"wrote {out / 'shop.py'}",
        f"removed {out / 'sub' / 'deep.py'} (not written by mmcodec; --force)",
    ]
    assert sorted(snapshot(out)) == ["__init__.py", "py.typed", "shop.py"]
    assert not (out / "sub").exists()
    assert main(["--root", str(root), "check", "--out", "pkg"]) == 0


def test_a_symlink_in_the_output_is_foreign(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = root / "pkg"
    assert generate(root) == 0
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.py").write_text(GENERATED_MARK + "\n")
    (out / "linked").symlink_to(elsewhere, target_is_directory=True)
    (out / "alias.py").symlink_to(out / "shop.py")
    capsys.readouterr()
    assert generate(root) == 2
    err = capsys.readouterr().err
    assert f"  {out / 'alias.py'}\n" in err and f"  {out / 'linked'}\n" in err
    assert generate(root, "--force") == 0
    assert not (out / "linked").exists() and not (out / "alias.py").exists()
    assert (elsewhere / "keep.py").exists()  # a link is removed, never followed


def test_an_output_path_that_is_a_file_is_a_usage_error(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "pkg").write_text("")
    assert generate(root) == 2
    assert capsys.readouterr().err == (
        f"mmcodec generate: error: output directory {root / 'pkg'} is a file\n"
    )


def test_an_output_folder_that_cannot_be_created_is_a_usage_error(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "file").write_text("")
    assert main(["--root", str(root), "generate", "--out", "file/pkg"]) == 2
    assert capsys.readouterr().err == (
        f"mmcodec generate: error: cannot write to {root / 'file' / 'pkg'}: Not a directory\n"
    )
