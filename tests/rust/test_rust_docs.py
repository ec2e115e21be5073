"""The worked example of docs/rust.md ("Your own schema") generates, builds and runs as
written: the blocks preceded by ``<!-- file: PATH -->`` are written to a fresh crate
(its ``mmcodec`` dependency pointed at this checkout's runtime crate instead of
crates.io), ``mmcodec generate --lang rust`` compiles the schema, and ``cargo run``
prints what the guide says. The guide's other Rust examples are doctests of
``rust/multimodal`` (``cargo test``)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from mmcodec.codegen.cli import main
from tests.rust.cargo import ROOT, RUST, cargo_config

DOC = ROOT / "docs" / "rust.md"
_BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```[\w,]*\n(?P<code>.*?)```", re.DOTALL)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_the_guides_worked_example_builds_and_runs(tmp_path: Path) -> None:
    files = {m["path"]: m["code"] for m in _BLOCK.finditer(DOC.read_text(encoding="utf-8"))}
    assert sorted(files) == [
        "Cargo.toml",
        "schema/detections.yaml",
        "schema/shapes.yaml",  # the guide's first schema, with an enum, built here too
        "src/main.rs",
    ]
    for path, code in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(code, encoding="utf-8")
    manifest = tmp_path / "Cargo.toml"
    text = manifest.read_text()
    assert 'mmcodec = "0.3"' in text
    local = f'mmcodec = {{ path = "{RUST / "mmcodec"}" }}\n\n[workspace]'
    manifest.write_text(text.replace('mmcodec = "0.3"', local))
    args = ["--root", str(tmp_path), "generate", "--lang", "rust", "--schemas", "schema"]
    assert main([*args, "--out", "src/schemas"]) == 0
    result = subprocess.run(
        ["cargo", "run", "--quiet", *cargo_config()],
        cwd=tmp_path,
        env={**os.environ, "CARGO_TARGET_DIR": str(RUST / "target" / "user-crate")},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.fullmatch(
        r"\d+ bytes; \$\.detections\[0\]\.score: expected a value <= 1\.0, got 1\.5\n",
        result.stdout,
    ), result.stdout
