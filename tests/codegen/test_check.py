"""``python -m codegen check``: a stale, missing or extra generated file fails the build.

Each test works on a copy of the project's schema and generated code in a temporary
root (with the project's ruff configuration, which formats the output).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mmcodec.codegen.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "project"
    root.mkdir()
    shutil.copytree(ROOT / "schema", root / "schema")
    shutil.copytree(ROOT / "generated", root / "generated", ignore=shutil.ignore_patterns("__py*"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    # ruff sorts first-party imports (the bound classes) apart from third-party ones.
    os.symlink(ROOT / "mmcodec", root / "mmcodec", target_is_directory=True)
    return root


def _check(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["--root", str(root), "check"])
    return code, capsys.readouterr().out.splitlines()


def test_fresh_copy_is_up_to_date(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _check(project, capsys) == (0, ["ok: generated is up to date"])


def test_edited_file_is_stale(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = project / "generated" / "multimodal.py"
    module.write_text(module.read_text() + "# edited by hand\n")
    assert _check(project, capsys) == (1, [f"stale: {module}", "run: make generate"])


def test_deleted_file_is_missing(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = project / "generated" / "multimodal.py"
    module.unlink()
    assert _check(project, capsys) == (1, [f"missing: {module}", "run: make generate"])


def test_untracked_file_is_extra(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = project / "generated" / "extra.py"
    extra.write_text("x = 1\n")
    assert _check(project, capsys) == (1, [f"extra: {extra}", "run: make generate"])


def test_all_problems_are_reported_together(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = project / "generated"
    (out / "multimodal.py").write_text("stale\n")
    (out / "py.typed").unlink()
    (out / "sub").mkdir()
    (out / "sub" / "extra.py").write_text("")
    (out / "extra.py").write_text("")
    assert _check(project, capsys) == (
        1,
        [
            f"stale: {out / 'multimodal.py'}",
            f"missing: {out / 'py.typed'}",
            f"extra: {out / 'extra.py'}",
            f"extra: {out / 'sub' / 'extra.py'}",
            "run: make generate",
        ],
    )


def test_changed_schema_makes_output_stale(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = project / "schema" / "multimodal.yaml"
    schema.write_text(schema.read_text() + "\n# a comment changes the sha256 in the header\n")
    module = project / "generated" / "multimodal.py"
    # The vLLM binding of the same schema goes stale with it (its header hashes both files).
    bound = project / "generated" / "multimodal_vllm.py"
    assert _check(project, capsys) == (
        1,
        [f"stale: {module}", f"stale: {bound}", "run: make generate"],
    )


def test_generate_repairs_everything(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = project / "generated"
    expected = (out / "multimodal.py").read_text()
    (out / "multimodal.py").write_text("stale\n")
    (out / "py.typed").unlink()
    (out / "extra.py").write_text("")
    assert main(["--root", str(project), "generate"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {out / 'multimodal.py'}",
        f"wrote {out / 'py.typed'}",
        f"removed {out / 'extra.py'}",
    ]
    assert (out / "multimodal.py").read_text() == expected
    assert not (out / "extra.py").exists()
    assert _check(project, capsys) == (0, ["ok: generated is up to date"])
    assert main(["--root", str(project), "generate"]) == 0  # nothing left to write
    assert capsys.readouterr().out == ""


def test_invalid_schema_fails_check_with_its_errors(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = project / "schema" / "multimodal.yaml"
    lines = schema.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if "default: false" in line)
    lines[number] = lines[number].replace("default: false", "default: 0")
    schema.write_text("".join(lines))
    column = lines[number].index("default: 0") + len("default: ") + 1
    field = "BatchedField.keep_on_cpu" if "keep_on_cpu" in lines[number] else None
    assert field is not None, "the first bool default of the schema moved; update this test"
    assert _check(project, capsys) == (
        1,
        [
            f"schema/multimodal.yaml:{number + 1}:{column}: "
            f"{field}: default 0 does not match type bool"
        ],
    )
