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


UNION_SNIPPET = """
from mmcodec.generated import multimodal as mm
from tests.golden import enums, features

frames = mm.encode(slice(0, 3), type=mm.FlatSlice)
reveal_type(mm.decode(frames, mm.FlatSlice))
reveal_type(mm.decode_bytes(b"", mm.FlatSlice))
reveal_type(features.decode(frames, features.Event))
reveal_type(enums.decode(frames, enums.Setting))
reveal_type(enums.decode(frames, enums.Modality))
"""

SLICES = "slice[Any, Any, Any]"
UNION_EXPECTED = [
    f'note: Revealed type is "{SLICES} | tuple[{SLICES}, ...] | list[{SLICES}]"',
    f'note: Revealed type is "{SLICES} | tuple[{SLICES}, ...] | list[{SLICES}]"',
    'note: Revealed type is "tests.golden.features.Click | tests.golden.features.Key | bool'
    f' | {SLICES}"',
    # Level | int | Modality: an IntEnum is an int, so mypy joins the first two.
    'note: Revealed type is "int | tests.golden.enums.Modality"',
    'note: Revealed type is "tests.golden.enums.Modality"',
]


def test_union_aliases_type_check_in_decode(tmp_path: Path) -> None:
    """A union alias is no class: ``type: type[_T]`` made mypy infer ``Never`` (and report
    the call); ``TypeForm[_T]`` (PEP 747) takes any type expression."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(UNION_SNIPPET))
    out, err, _ = api.run(["--strict", "--no-error-summary", "--no-pretty", str(snippet)])
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if "snippet.py:" in line]
    assert lines == UNION_EXPECTED, out + err
