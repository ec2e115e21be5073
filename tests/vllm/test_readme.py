"""The README's "Using mmcodec inside vLLM" example runs as written, in vLLM's environment.

It is a ```py block (``make test`` runs only ```python blocks, and has no vLLM).
"""

from __future__ import annotations

import re

from tests.test_readme import README


def test_the_vllm_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Using mmcodec inside vLLM\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```py\n(.*?)```", section, re.DOTALL)
    assert "mv.encode" in block and "mv.decode" in block
    exec(compile(block, str(README), "exec"), {"__name__": "readme_vllm_example"})
