"""The README's code runs as written (```python blocks run; ```py blocks are fragments)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_has_the_usage_example() -> None:
    blocks = python_blocks()
    assert blocks, "README.md lost its ```python example"
    assert "mm.encode" in blocks[0] and "mm.decode" in blocks[0]


def test_readme_python_examples_run() -> None:
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), {"__name__": "readme_example"})
