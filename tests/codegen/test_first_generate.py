"""The first ``mmcodec generate`` into a missing or empty folder is the final output.

Each test copies only the schemas into a fresh project root (no pyproject.toml, no
packages, no earlier output), runs the real command in a subprocess, and compares
the files byte for byte with the committed ones. One run is enough: ``check`` is
clean at once, and a second ``generate`` writes nothing. The compiler runs with no
formatter importable and none on PATH, which proves the output does not come from one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (schemas, output folder, extra arguments), as the Makefile generates them.
TREES = [
    ("tests/schemas", "tests/golden", []),
    ("schema", "generated", ["--package", "mmcodec.generated"]),
]

# Runs the command line with ruff and black unimportable and PATH empty of tools.
_WITHOUT_FORMATTERS = """
import shutil, sys

class NoFormatters:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("ruff", "black"):
            raise ImportError(f"no {name} here")

sys.meta_path.insert(0, NoFormatters())
for tool in ("ruff", "black"):
    assert shutil.which(tool) is None, tool
    try:
        __import__(tool)
    except ImportError:
        pass
    else:
        raise AssertionError(tool)
from mmcodec.codegen.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _mmcodec(
    root: Path, *args: str, code: str = _WITHOUT_FORMATTERS
) -> subprocess.CompletedProcess[str]:
    empty = root.parent / "empty-path"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": str(empty)}
    return subprocess.run(
        [sys.executable, "-c", code, "--root", str(root), *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for schemas, _, _ in TREES:
        shutil.copytree(ROOT / schemas, root / schemas)
    return root


@pytest.mark.parametrize("folder", ["missing", "empty"])
@pytest.mark.parametrize(("schemas", "out", "extra"), TREES, ids=[t[1] for t in TREES])
def test_first_generate_is_the_committed_output_and_check_is_clean(
    project: Path, schemas: str, out: str, extra: list[str], folder: str
) -> None:
    if folder == "empty":
        (project / out).mkdir(parents=True)
    args = ["--schemas", schemas, "--out", out, *extra]
    first = _mmcodec(project, "generate", *args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _files(project / out) == _files(ROOT / out)

    check = _mmcodec(project, "check", *args)
    assert (check.returncode, check.stdout) == (0, f"ok: {out} is up to date\n"), check.stderr

    again = _mmcodec(project, "generate", *args)
    assert (again.returncode, again.stdout) == (0, ""), again.stderr
    assert _files(project / out) == _files(ROOT / out)


def test_the_runner_really_hides_formatters() -> None:
    """The environment above: a compiler that reached for ruff would fail in it."""
    probe = "from ruff.__main__ import find_ruff_bin"  # what the compiler used to run
    code = _WITHOUT_FORMATTERS.replace("from mmcodec.codegen.cli import main", probe)
    hidden = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert hidden.returncode == 1
    assert hidden.stderr.splitlines()[-1] == "ImportError: no ruff here"
