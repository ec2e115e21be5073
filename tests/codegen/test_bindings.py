"""Bindings files: a second binding of one schema's wire (``schema/multimodal.vllm.yaml``).

The compiler checks a bindings file (every type of the schema named once, one class per
name, the schema it binds found, nothing that could change the wire), and the module it
emits has the schema's name and major version with only the classes changed. Neither
needs vLLM: the generated ``multimodal_vllm`` is golden-checked with the rest.
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from mmcodec.codegen import ir
from mmcodec.codegen.cli import main
from mmcodec.codegen.compat import compare_schemas
from mmcodec.codegen.diagnostics import SchemaErrors
from mmcodec.codegen.validate import compile_schemas

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "schema" / "multimodal.vllm.yaml"


def _breaking(old: list[ir.Module], new: list[ir.Module]) -> list[str]:
    return [str(change) for change in compare_schemas(old, new).breaking]


SCHEMA = """\
schema: shop
version: 3
types:
  Item:
    bind: tests.bound_classes.Point
    struct:
      name: {type: str}
  Payment:
    union:
      - {tag: 0, type: Cash}
      - {tag: 1, type: Card}
  Cash:
    struct:
      amount: {type: float}
  Card:
    struct:
      number: {type: str}
"""

BINDINGS = """\
bindings: shop_other
schema: shop.yaml
doc: The shop's wire, built from other classes.
bind:
  Item: other.classes.Item
  Payment: generated
  Cash: other.classes.Cash
  Card: generated
exports:
  - other.classes.helper
"""


def _files(tmp_path: Path, bindings: str = BINDINGS) -> list[Path]:
    (tmp_path / "shop.yaml").write_text(SCHEMA)
    (tmp_path / "shop.other.yaml").write_text(textwrap.dedent(bindings))
    return [tmp_path / "shop.yaml", tmp_path / "shop.other.yaml"]


def _errors(tmp_path: Path, bindings: str) -> list[str]:
    with pytest.raises(SchemaErrors) as caught:
        compile_schemas([_files(tmp_path, bindings)[1]], tmp_path)
    return [
        f"{d.position.line}:{d.position.column}: {d.message}" + (f" ({d.hint})" if d.hint else "")
        for d in caught.value.diagnostics
    ]


def _unbound(module: ir.Module) -> list[ir.TypeDef]:
    return [replace(t, binding=None) for t in module.types]


def test_the_shipped_binding_is_the_schemas_wire_with_vllms_classes() -> None:
    # Given alone, the bindings file brings the schema it binds.
    modules = {m.python_name: m for m in compile_schemas([SHIPPED], ROOT)}
    assert sorted(modules) == ["multimodal", "multimodal_vllm"]
    base, bound = modules["multimodal"], modules["multimodal_vllm"]
    assert (bound.name, bound.major) == (base.name, base.major) == ("multimodal", 1)
    assert bound.source == "schema/multimodal.vllm.yaml"
    assert _unbound(bound) == _unbound(base)  # same types, tags, fields: same wire
    classes = {t.name: t.binding for t in bound.types}
    assert classes["FlatSlice"] is None  # generated: a union alias
    assert classes["PlaceholderRange"] == ir.Binding("vllm.multimodal.inputs", "PlaceholderRange")
    assert classes["BatchedField"] == ir.Binding("vllm.multimodal.inputs", "MultiModalBatchedField")
    assert [e.qualname for e in bound.exports] == ["MultiModalFieldConfig", "NestedTensors"]


def test_the_generated_module_names_the_schema_and_imports_vllm() -> None:
    source = (ROOT / "generated" / "multimodal_vllm.py").read_text(encoding="utf-8")
    assert 'SCHEMA_NAME = "multimodal"\nSCHEMA_MAJOR = 1\n' in source
    assert "# source: schema/multimodal.vllm.yaml\n" in source
    assert "from vllm.multimodal.inputs import MultiModalFlatField as FlatField\n" in source
    shipped = (ROOT / "generated" / "multimodal.py").read_text(encoding="utf-8")
    assert "vllm" not in shipped


def test_importing_the_shipped_codec_does_not_import_vllm() -> None:
    import mmcodec.generated.multimodal  # noqa: F401

    assert "vllm" not in sys.modules


def test_a_bindings_file_compiles_to_its_own_module(tmp_path: Path) -> None:
    modules = {m.python_name: m for m in compile_schemas(_files(tmp_path), tmp_path)}
    bound = modules["shop_other"]
    assert (bound.name, bound.major) == ("shop", 3)
    assert bound.doc == "The shop's wire, built from other classes."
    assert _unbound(bound) == _unbound(modules["shop"])
    assert {t.name: t.binding for t in bound.types} == {
        "Item": ir.Binding("other.classes", "Item"),
        "Payment": None,
        "Cash": ir.Binding("other.classes", "Cash"),
        "Card": None,
    }
    assert bound.exports == (ir.Binding("other.classes", "helper"),)


def test_every_type_must_be_named_once_with_a_class_or_generated(tmp_path: Path) -> None:
    bindings = """\
    bindings: shop_other
    schema: shop.yaml
    bind:
      Item: other.classes.Item
      Paymnet: generated
      Cash: other.classes.Item
      Card: not a path
    """
    # A misspelt type is one mistake: Payment is not reported missing as well.
    assert _errors(tmp_path, bindings) == [
        "5:3: schema 'shop' has no type 'Paymnet' (did you mean 'Payment'?)",
        "6:9: Cash: other.classes.Item is already bound to 'Item'",
        "7:9: Card: expected an import path such as 'package.module.Class' or 'generated'",
    ]


def test_a_bindings_file_cannot_change_the_wire(tmp_path: Path) -> None:
    bindings = """\
    bindings: shop_other
    schema: shop.yaml
    version: 4
    types:
      Extra: {struct: {x: int}}
    bind: {Item: generated, Payment: generated, Cash: generated, Card: generated}
    """
    assert _errors(tmp_path, bindings) == [
        "3:1: unknown key 'version' in bindings file",
        "4:1: a bindings file cannot declare types (it may not change the wire); change the "
        "schema it binds instead",
    ]


def test_the_bound_schema_and_the_module_name_are_checked(tmp_path: Path) -> None:
    missing = """\
    bindings: shop_other
    schema: nowhere.yaml
    bind: {}
    """
    assert _errors(tmp_path, missing) == ["2:9: bound schema 'nowhere.yaml' not found"]
    clash = """\
    bindings: shop
    schema: shop.yaml
    bind: {Item: generated, Payment: generated, Cash: generated, Card: generated}
    """
    assert _errors(tmp_path, clash) == ["1:11: module name 'shop' is also generated from shop.yaml"]


def test_two_types_may_not_be_one_python_object(tmp_path: Path) -> None:
    # Payment generated is the union Cash | Card; binding Card to Cash's class makes two
    # names one class, and a one-class union would be that class too.
    bindings = """\
    bindings: shop_other
    schema: shop.yaml
    bind: {Item: a.b.Item, Payment: a.b.Payment, Cash: a.b.Cash, Card: a.b.Cash}
    """
    assert _errors(tmp_path, bindings) == ["3:68: Card: a.b.Cash is already bound to 'Cash'"]


def test_validate_counts_and_accepts_the_shipped_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(ROOT), "validate", "schema"]) == 0
    assert capsys.readouterr().out == "ok: 2 schema file(s) valid\n"


def test_compat_covers_the_bound_module(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = compile_schemas(_files(tmp_path / "old"), tmp_path)
    changed = SCHEMA.replace("amount: {type: float}", "amount: {type: str}")
    (tmp_path / "new" / "shop.yaml").write_text(changed)
    (tmp_path / "new" / "shop.other.yaml").write_text(BINDINGS)
    new = compile_schemas([tmp_path / "new" / "shop.other.yaml"], tmp_path)
    # A changed field breaks both modules' wire: each is named.
    assert _breaking(old, new) == [
        "new/shop.yaml:14:7: Cash: field `amount` type changed from float to str",
        "new/shop.yaml:14:7: shop_other.Cash: field `amount` type changed from float to str",
    ]
    only_schema = compile_schemas([tmp_path / "new" / "shop.yaml"], tmp_path)
    assert _breaking(old, only_schema) == [
        "new/shop.yaml:14:7: Cash: field `amount` type changed from float to str",
        "old/shop.other.yaml:1:1: binding 'shop_other': "
        "removed (its messages can no longer be read)",
    ]
