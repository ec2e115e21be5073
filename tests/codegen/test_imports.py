"""``codegen/imports.py``: a generated module imports what it uses, grouped and sorted
the same way whatever is on disk, the way ruff's isort (``I001``) and ``RUF022`` want."""

from __future__ import annotations

import subprocess

import pytest

from mmcodec.codegen.imports import (
    FIRST_PARTY,
    FUTURE,
    LOCAL,
    STDLIB,
    THIRD_PARTY,
    Import,
    import_block,
    section,
    sort_all,
    used_names,
)


@pytest.mark.parametrize(
    ("module", "package", "expected"),
    [
        ("__future__", "mmcodec.generated", FUTURE),
        ("typing", "mmcodec.generated", STDLIB),
        ("collections.abc", "tests.golden", STDLIB),
        ("msgspec", "mmcodec.generated", THIRD_PARTY),
        ("torch", "tests.golden", THIRD_PARTY),
        ("vllm.multimodal.inputs", "mmcodec.generated", THIRD_PARTY),
        ("mmcodec.runtime.errors", "tests.golden", FIRST_PARTY),
        ("mmcodec.domain.multimodal", "mmcodec.generated", FIRST_PARTY),
        ("tests.bound_classes", "tests.golden", FIRST_PARTY),
        ("myapp.boxes", "myapp.codecs", FIRST_PARTY),
        ("myapp.boxes", "codecs", THIRD_PARTY),
        (".", "tests.golden", LOCAL),
    ],
)
def test_section_depends_on_names_only(module: str, package: str, expected: int) -> None:
    assert section(module, package) == expected


def test_only_used_names_are_imported_in_groups_and_order() -> None:
    candidates = [
        Import("typing", "TypeVar"),
        Import("typing", "Any"),
        Import("collections.abc", "Sequence"),
        Import("torch"),
        Import("msgspec"),
        Import("vllm.multimodal.inputs", "MultiModalFieldElem"),
        Import("vllm.multimodal.inputs", "BatchedField"),
        Import("mmcodec.runtime", "wire", "_wire"),
        Import("mmcodec.runtime", "builtins", "_b"),
        Import("mmcodec.runtime.limits", "Limits"),
        Import("mmcodec.runtime.limits", "DEFAULT_LIMITS"),
        Import("mmcodec.runtime.limits", "limit_of"),
        Import(".", "common", "_common"),
        Import(".", "base", "_base"),
    ]
    used = {"Any", "torch", "msgspec", "MultiModalFieldElem", "BatchedField", "_wire", "_b"}
    used |= {"Limits", "DEFAULT_LIMITS", "limit_of", "_common", "_base"}
    assert import_block(candidates, used, "mmcodec.generated").splitlines() == [
        "from typing import Any",
        "",
        "import msgspec",
        "import torch",
        "from vllm.multimodal.inputs import BatchedField, MultiModalFieldElem",
        "",
        "from mmcodec.runtime import builtins as _b",
        "from mmcodec.runtime import wire as _wire",
        "from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits, limit_of",
        "",
        "from . import base as _base",
        "from . import common as _common",
    ]


def test_a_long_import_is_one_name_per_line() -> None:
    names = [f"SomeRatherLongClassName{i}" for i in range(5)]
    block = import_block([Import("mmcodec.domain", n) for n in names], set(names), "x")
    assert block.splitlines() == [
        "from mmcodec.domain import (",
        *(f"    {n}," for n in names),
        ")",
    ]


def test_used_names_reads_code_all_and_quoted_aliases_but_not_docstrings() -> None:
    source = '''
"""torch Sequence msgspec"""
__all__ = ["Limits", "Tree"]
Tree: TypeAlias = "Node | list[_common.Leaf]"
class Table(dict[str, "Tree"]):
    x: int = 'Any'
def f(v: Sequence[int]) -> None:
    return _b.values_equal(v, v)
'''
    used = used_names(source)
    assert {"Limits", "Tree", "TypeAlias", "Node", "_common", "Sequence", "_b"} <= used
    assert {"torch", "msgspec", "Any"}.isdisjoint(used)


def test_dunder_all_is_sorted_as_ruf022_wants() -> None:
    names = ["decode", "SCHEMA_NAME", "Limits", "Item10", "Item2", "DEFAULT_LIMITS", "_x", "X"]
    assert sort_all(names) == [
        "DEFAULT_LIMITS",
        "SCHEMA_NAME",
        "Item2",
        "Item10",
        "Limits",
        "X",
        "_x",
        "decode",
    ]


def test_ruff_accepts_the_block_with_the_projects_classification() -> None:
    """ruff's isort, told what the project's first-party packages are, agrees."""
    from ruff.__main__ import find_ruff_bin  # type: ignore[import-untyped]  # the dev extra

    candidates = [
        Import("typing", "TypeAlias"),
        Import("msgspec"),
        Import("vllm.multimodal.inputs", "PlaceholderRange", "_PlaceholderRange"),
        Import("vllm.multimodal.inputs", "MultiModalKwargsItem"),
        Import("tests.bound_classes", "Point"),
        Import("mmcodec.runtime.errors", "DecodeError"),
        Import(".", "common", "_common"),
    ]
    used = {c.bound for c in candidates}
    source = "from __future__ import annotations\n\n"
    source += import_block(candidates, used, "tests.golden") + "\n\n"
    source += f"__all__ = {sorted(used - {'msgspec', 'TypeAlias', '_common'})!r}\n"
    source += "x: TypeAlias = msgspec.Struct | _common.T\n"
    command = [find_ruff_bin(), "check", "--isolated", "--select", "I001,F401", "-"]
    command += ["--config", "lint.isort.known-first-party = ['mmcodec', 'tests']"]
    result = subprocess.run(command, input=source, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + source
