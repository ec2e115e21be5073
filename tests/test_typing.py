"""What type checkers see: the generated API is typed precisely (mypy's reveal_type)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

SNIPPET = """
from mmcodec.generated import multimodal as mm

frames = mm.encode(mm.PlaceholderRange(offset=0, length=1))
reveal_type(frames)
spec = mm.decode(frames, mm.PlaceholderRange)
reveal_type(spec)
reveal_type(spec.offset)
reveal_type(spec.is_embed)
items = mm.decode_bytes(b"", mm.MultiModalKwargsItems, copy=True)
reveal_type(items)
reveal_type(items["image"])
reveal_type(mm.encode_bytes(spec))
spec.offset = "three"
"""

EXPECTED = [
    'note: Revealed type is "list[memoryview[int]]"',
    'note: Revealed type is "mmcodec.generated.multimodal.PlaceholderRange"',
    'note: Revealed type is "int"',
    'note: Revealed type is "torch._tensor.Tensor | None"',
    'note: Revealed type is "mmcodec.domain.multimodal.MultiModalKwargsItems"',
    'note: Revealed type is "list[mmcodec.domain.multimodal.MultiModalKwargsItem | None]"',
    'note: Revealed type is "bytearray"',
    'error: Incompatible types in assignment (expression has type "str", variable has type'
    ' "int")  [assignment]',
]


def test_reveal_types_of_the_generated_api(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(SNIPPET))
    out, err, _ = api.run(["--strict", "--no-error-summary", "--no-pretty", str(snippet)])
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if "snippet.py:" in line]
    assert lines == EXPECTED, out + err
