"""The ``mmcodec`` command: its exit codes, as documented, and machine-readable findings.

0 clean, 1 findings (invalid schema, stale output, breaking change), 2 usage or I/O error
(bad arguments, unreadable file, missing directory, unknown ref). The first tests run the
installed console script itself, the way CI and pre-commit do.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmcodec.codegen import cli
from mmcodec.codegen.cli import main

ROOT = Path(__file__).resolve().parents[2]
MMCODEC = Path(sys.executable).parent / "mmcodec"  # the console script of this environment
INVALID = "tests/codegen/invalid/several_errors.yaml"


def mmcodec(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MMCODEC), *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_exit_codes_of_the_real_command(tmp_path: Path) -> None:
    assert mmcodec("validate").returncode == 0
    invalid = mmcodec("validate", INVALID)
    assert (invalid.returncode, invalid.stdout) == (1, "")
    assert invalid.stderr.endswith("\n7 errors in 1 file\n")
    missing = mmcodec("validate", "no/such/dir")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == "mmcodec validate: error: no/such/dir: no such file or directory\n"
    unknown = mmcodec("frobnicate")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("usage: mmcodec ")
    typo = mmcodec("compat", "--against", "HEDA")
    assert (typo.returncode, typo.stdout) == (2, "")
    assert typo.stderr.startswith("mmcodec compat: error: unknown git ref 'HEDA'")


def test_a_stale_golden_copy_fails_check_with_the_command_that_fixes_it(tmp_path: Path) -> None:
    """`check` names the fix built from its own arguments, not `make generate`."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(ROOT / "schema", project / "schema")
    shutil.copytree(
        ROOT / "generated", project / "generated", ignore=shutil.ignore_patterns("__py*")
    )
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    (project / "mmcodec").symlink_to(ROOT / "mmcodec", target_is_directory=True)
    options = ("--schemas", "schema", "--out", "generated", "--package", "mmcodec.generated")
    assert mmcodec("check", *options, cwd=project).returncode == 0
    stale = project / "generated" / "multimodal.py"
    stale.write_text(stale.read_text() + "# edited\n")
    result = mmcodec("check", *options, cwd=project)
    assert (result.returncode, result.stdout.splitlines()) == (
        1,
        [
            "stale: generated/multimodal.py",  # relative to the working directory
            "run: mmcodec generate --schemas schema --out generated --package mmcodec.generated",
        ],
    )
    assert mmcodec("generate", *options, cwd=project).returncode == 0
    assert mmcodec("check", *options, cwd=project).returncode == 0


def test_python_dash_m_is_the_same_command() -> None:
    module = subprocess.run(
        [sys.executable, "-m", "mmcodec.codegen", "validate", INVALID],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    script = mmcodec("validate", INVALID)
    assert (module.returncode, module.stdout, module.stderr) == (
        script.returncode,
        script.stdout,
        script.stderr,
    )


@pytest.mark.parametrize("command", [[], ["validate"], ["generate"], ["check"], ["compat"]])
def test_help_documents_the_exit_codes(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: mmcodec ")
    assert cli.EXIT_CODES in out


def test_docs_state_the_same_exit_codes() -> None:
    docs = (ROOT / "docs" / "cli.md").read_text()
    for code, meaning in re.findall(r"^  ([012])  (\w[^:]*):", cli.EXIT_CODES, re.M):
        assert f"| {code} | {meaning} |" in docs, (code, meaning)


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["validate", "--format", "xml"])
    assert exited.value.code == 2
    assert main(["compat"]) == 2  # neither OLD nor --against
    assert "give either OLD [NEW] or --against GIT_REF [NEW]" in capsys.readouterr().err


def test_check_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "a.yaml").write_text(
        "schema: a\nversion: 1\ntypes:\n  A:\n    struct:\n      x: {type: int}\n"
    )
    argv = ["--root", str(tmp_path), "check", "--format", "json"]
    assert main(argv) == 1
    out = tmp_path / "generated"
    assert json.loads(capsys.readouterr().out) == {
        "errors": [],
        "files": [
            {"problem": "missing", "path": str(out / "__init__.py")},
            {"problem": "missing", "path": str(out / "a.py")},
            {"problem": "missing", "path": str(out / "py.typed")},
        ],
        "fix": f"run: mmcodec --root {tmp_path} generate",
    }
    assert main(["--root", str(tmp_path), "generate"]) == 0
    capsys.readouterr()
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"errors": [], "files": [], "fix": None}
    (tmp_path / "schema" / "a.yaml").write_text("schema: a\nversion: 1\n")
    assert main(argv) == 1
    assert json.loads(capsys.readouterr().out) == {
        "errors": [
            {
                "file": "schema/a.yaml",
                "line": 1,
                "column": 1,
                "message": "missing key 'types'",
                "end_column": 2,
                "hint": None,
            }
        ]
    }
