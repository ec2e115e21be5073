"""The evolution rules of docs/schema-language.md, checked on two versions of one schema.

Within a major version, fields appended with defaults and union variants with new tags
keep old and new codecs compatible; a new major version is rejected by name.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mmcodec.codegen.output import plan_output, write
from mmcodec.codegen.validate import compile_schemas

ROOT = Path(__file__).resolve().parents[2]

V1 = """
schema: events
version: 1
types:
  Move:
    struct:
      x: int
      y: int
  Action:
    union:
      - {tag: 0, type: Move}
      - {tag: 1, type: str}
  Log:
    struct:
      actions: "list[Action]"
"""

# Appended fields with defaults, a new variant with a new tag.
V2 = """
schema: events
version: 1
types:
  Move:
    struct:
      x: int
      y: int
      speed: {type: float, default: 1.0}
      label: {type: "optional[str]", default: null}
  Action:
    union:
      - {tag: 0, type: Move}
      - {tag: 1, type: str}
      - {tag: 2, type: "list[int]"}
  Log:
    struct:
      actions: "list[Action]"
      tags: {type: "dict[str, str]", default: {}}
"""


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModuleType]:
    root = tmp_path_factory.mktemp("evolution").resolve()
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    sources = {"v1": V1, "v2": V2, "v3": V2.replace("version: 1", "version: 2")}
    for version, text in sources.items():
        package = f"evolution_{version}"  # unlikely to clash with anything importable
        (root / f"{package}.yaml").write_text(text)
        modules = compile_schemas([root / f"{package}.yaml"], root)
        write(plan_output(modules, package), root / package)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root))
        return {v: importlib.import_module(f"evolution_{v}.events") for v in sources}


def test_new_reader_fills_in_defaults_of_appended_fields(versions: dict[str, Any]) -> None:
    v1, v2 = versions["v1"], versions["v2"]
    old = v1.Log(actions=[v1.Move(x=1, y=2), "jump"])
    new = v2.decode(v1.encode(old), v2.Log)
    assert new == v2.Log(actions=[v2.Move(x=1, y=2, speed=1.0, label=None), "jump"], tags={})


def test_old_reader_ignores_appended_fields(versions: dict[str, Any]) -> None:
    v1, v2 = versions["v1"], versions["v2"]
    new = v2.Log(actions=[v2.Move(x=1, y=2, speed=3.5, label="fast")], tags={"k": "v"})
    assert v1.decode(v2.encode(new), v1.Log) == v1.Log(actions=[v1.Move(x=1, y=2)])


def test_old_reader_rejects_only_the_new_variant(versions: dict[str, Any]) -> None:
    v1, v2 = versions["v1"], versions["v2"]
    assert v1.decode(v2.encode("wave", type=v2.Action), v1.Action) == "wave"
    with pytest.raises(v1.DecodeError) as info:
        v1.decode(v2.encode([1, 2], type=v2.Action), v1.Action)
    assert str(info.value).endswith(": Invalid value 2")  # the unknown tag


def test_another_major_version_is_rejected_naming_both(versions: dict[str, Any]) -> None:
    v2, v3 = versions["v2"], versions["v3"]
    with pytest.raises(v2.DecodeError) as info:
        v2.decode(v3.encode(v3.Move(x=0, y=0)), v2.Move)
    assert str(info.value) == (
        "$: message is from schema 'events' major version 2; "
        "this decoder reads schema 'events' major version 1"
    )
