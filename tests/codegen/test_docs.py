"""The worked example of docs/schema-language.md compiles and runs as written.

Code blocks preceded by ``<!-- file: PATH -->`` are written to a fresh project root,
``mmcodec generate`` compiles its schemas, and the block preceded by
``<!-- run -->`` runs there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mmcodec.codegen.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "schema-language.md"
_BLOCK = re.compile(r"<!-- (file: (?P<path>\S+)|run) -->\n```\w*\n(?P<code>.*?)```", re.DOTALL)


def _blocks() -> tuple[dict[str, str], str]:
    files, runs = {}, []
    for match in _BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        if match["path"]:
            files[match["path"]] = match["code"]
        else:
            runs.append(match["code"])
    assert len(runs) == 1
    return files, runs[0]


def test_worked_example_validates_generates_and_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files, program = _blocks()
    assert sorted(files) == ["myapp/boxes.py", "schema/geometry.yaml", "schema/vision.yaml"]
    root = tmp_path.resolve()
    for path, code in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(code, encoding="utf-8")
    assert main(["--root", str(root), "validate"]) == 0
    out_args = ["--schemas", "schema", "--out", "myapp/codecs"]
    assert main(["--root", str(root), "generate", *out_args]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ok: 2 schema file(s) valid"
    generated = sorted(p.name for p in (root / "myapp" / "codecs").iterdir())
    assert generated == ["__init__.py", "geometry.py", "py.typed", "vision.py"]
    check = "from myapp.codecs import vision as v; import sys\n"
    check += "assert v.__file__.startswith(sys.argv[1])\n"
    result = subprocess.run(
        [sys.executable, "-c", check + program, str(root)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout
    assert "request_id" in printed
    assert "$.request_id: expected a length >= 1, got 0" in printed
