"""Invalid schemas: ``python -m codegen validate`` reports every error, exactly.

Each ``invalid/NAME.yaml`` sits next to ``invalid/NAME.expected``, the exact text
``validate`` prints for it on stderr: per error ``file:line:col: error: message`` (paths
relative to the project root), the source line with a caret under the offending text and
the hint, then the count. A file with several mistakes must show all of them, and each
mistake once (no error that is only a consequence of another).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmcodec.codegen.cli import main

ROOT = Path(__file__).resolve().parents[2]
INVALID = Path(__file__).resolve().parent / "invalid"
CASES = sorted(INVALID.glob("*.yaml"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _validate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--root", str(ROOT), "validate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_there_are_enough_cases_and_each_has_its_expected_output() -> None:
    assert len(CASES) >= 15
    assert sorted(p.stem for p in INVALID.glob("*.expected")) == [p.stem for p in CASES]


@pytest.mark.parametrize("schema", CASES, ids=[p.stem for p in CASES])
def test_invalid_schema_reports_exactly_the_expected_errors(
    schema: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = schema.with_suffix(".expected").read_text(encoding="utf-8")
    code, out, err = _validate(capsys, _relative(schema))
    assert (code, out) == (1, "")
    assert err == expected


def _one_line(error: dict[str, object]) -> str:
    hint = f" ({error['hint']})" if error["hint"] else ""
    return f"{error['line']}:{error['column']}: {error['message']}{hint}"


def _json_errors(capsys: pytest.CaptureFixture[str], *paths: Path) -> list[dict[str, object]]:
    code, out, err = _validate(capsys, "--format", "json", *map(_relative, paths))
    assert (code, err) == (1, "")
    errors: list[dict[str, object]] = json.loads(out)["errors"]
    return errors


def test_several_errors_in_one_file_are_all_reported(capsys: pytest.CaptureFixture[str]) -> None:
    errors = _json_errors(capsys, INVALID / "several_errors.yaml")
    name = "tests/codegen/invalid/several_errors.yaml"
    assert [_one_line(e) for e in errors] == [
        "7:15: unknown type 'Pont' (did you mean 'Point'?)",
        "8:37: Line.width: default 'thin' does not match type float",
        # width has a default, wrong as it is: color after it needs one too.
        "9:7: field 'color' has no default but follows 'width', which has one (fields with "
        "defaults come last, as older messages may lack them: move it before 'width', or give "
        "it a default)",
        "9:30: Line.color: constraint 'ge' needs an int or float field, not str",
        "13:22: unknown key 'defualt' in field Point.y (did you mean 'default'?)",
        f"17:15: union 'Mark': duplicate tag 0 (first used at {name}:16:15)",
        "18:3: type name 'class' is a Python keyword",
    ]


def test_an_invalid_default_is_one_error_not_two(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's cascade: a wrong default made its field count as one without a default,
    and a second error said it followed a field with one."""
    errors = _json_errors(capsys, INVALID / "cascades.yaml")
    assert [_one_line(e) for e in errors if e["line"] in (9, 10, 11)] == [
        "9:36: Config.second: default 'two' does not match type int",
        "10:26: unknown key 'defualt' in field Config.third (did you mean 'default'?)",
        "11:15: Config.fourth: min_length is greater than max_length",
    ]


def test_errors_of_several_files_come_sorted_in_one_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = [INVALID / "mixed_tags.yaml", INVALID / "default_order.yaml"]
    code, out, err = _validate(capsys, *map(_relative, files))
    assert (code, out) == (1, "")
    blocks = sorted(p.with_suffix(".expected").read_text().split("\n1 error in")[0] for p in files)
    assert err == "\n".join(blocks) + "\n2 errors in 2 files\n"


def test_json_format(capsys: pytest.CaptureFixture[str]) -> None:
    schema = INVALID / "unknown_type.yaml"
    code, out, err = _validate(capsys, "--format", "json", _relative(schema))
    assert code == 1
    assert err == ""
    report = json.loads(out)
    assert list(report) == ["errors"]
    errors = report["errors"]
    assert errors[0] == {
        "file": "tests/codegen/invalid/unknown_type.yaml",
        "line": 9,
        "column": 14,
        "message": "unknown type 'Piont'",
        "end_column": 19,
        "hint": "did you mean 'Point'?",
    }
    assert errors[1]["hint"] == "did you mean 'Point'?"
    heads = [f"{e['file']}:{e['line']}:{e['column']}: error: {e['message']}" for e in errors]
    text = schema.with_suffix(".expected").read_text()
    assert heads == [line for line in text.splitlines() if ": error: " in line]


def test_json_format_of_valid_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _validate(capsys, "--format", "json", "schema")
    assert code == 0
    assert json.loads(out) == {"errors": []}


def test_valid_schemas_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert _validate(capsys) == (0, "ok: 2 schema file(s) valid\n", "")
    count = len(list((ROOT / "tests/schemas").glob("*.yaml")))
    assert _validate(capsys, "tests/schemas") == (0, f"ok: {count} schema file(s) valid\n", "")


def test_missing_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _validate(capsys, "no/such/schema.yaml")
    assert (code, out) == (2, "")
    assert err == "mmcodec validate: error: no/such/schema.yaml: no such file or directory\n"


def test_an_imported_file_that_is_missing_is_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text("schema: a\nversion: 1\nimports: [gone.yaml]\ntypes: {}\n")
    code = main(["--root", str(tmp_path), "validate", "--format", "json", "a.yaml"])
    assert code == 1
    (error,) = json.loads(capsys.readouterr().out)["errors"]
    assert _one_line(error) == "3:11: imported schema file 'gone.yaml' not found"


def test_unreadable_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = tmp_path / "c.yaml"
    schema.write_text("schema: c\nversion: 1\ntypes: {}\n")
    schema.chmod(0)
    if os.access(schema, os.R_OK):  # root reads anything: take a file whose read fails (EIO)
        schema.unlink()
        schema.symlink_to("/proc/self/mem")
    code, out, err = _validate_in(tmp_path, capsys, "c.yaml")
    assert (code, out) == (2, "")
    assert err.startswith("mmcodec validate: error: ")
    assert err.endswith(
        (": cannot read: Permission denied\n", ": cannot read: Input/output error\n")
    )


def _validate_in(
    root: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    code = main(["--root", str(root), "validate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    code = main(["--root", str(tmp_path), "validate", "empty.yaml"])
    assert code == 1
    assert capsys.readouterr().err == (
        "empty.yaml:1:1: error: empty schema file\n  |\n1 | # nothing\n  | ^\n\n1 error in 1 file\n"
    )


def test_command_line_exit_status_and_output() -> None:
    """The real entry point, as CI runs it."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmcodec.codegen",
            "validate",
            "tests/codegen/invalid/several_errors.yaml",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (INVALID / "several_errors.expected").read_text()
