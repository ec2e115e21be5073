"""Conformance both ways, from one corpus (``tests/rust/corpus.py``): the Rust runtime and
the crate generated from ``schema/`` read and write mmcodec's wire exactly as Python does.

* Python encodes, Rust decodes: the same values (dtype, shape, bytes, field parameters,
  list vs tuple, None items), every tensor a view of the input (its bytes at the offset
  where Python's decoder finds them: nothing copied).
* Rust re-encodes what it decoded: the bytes Python wrote, and Python decodes them equal.
* Rust builds items from the batch Python built them from (gateway-style): the message
  Python encodes, byte for byte, for every design payload up to the 151 MB request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mmcodec.generated import multimodal as mm
from mmcodec.runtime.dtypes import WIRE_NAMES
from mmcodec.runtime.equality import values_equal
from tests.rust import corpus
from tests.rust.cargo import run
from tests.rust.describe import Describer

SAMPLES = list(corpus.samples())
GOLDEN = [g for schema in ("features", "enums") for g in corpus.golden(schema)]


def _tensors(description: Any) -> list[dict[str, Any]]:
    """Every tensor of a description, in order."""
    found: list[dict[str, Any]] = []
    if isinstance(description, dict):
        if "digest" in description:
            return [description]
        for value in description.values():
            found += _tensors(value)
    elif isinstance(description, list):
        for value in description:
            found += _tensors(value)
    return found


def assert_same_values(rust: Any, python: Any) -> None:
    """Rust's description equals Python's; every non-empty Rust tensor views the input,
    where Python's does too (Python copies an inline payload that is misaligned)."""
    rust_tensors, python_tensors = _tensors(rust), _tensors(python)
    assert len(rust_tensors) == len(python_tensors)
    for r, p in zip(rust_tensors, python_tensors, strict=True):
        assert r["nbytes"] == 0 or r["offset"] is not None, f"Rust copied {r}"
        if p["offset"] is None:
            p["offset"] = r["offset"]
    assert rust == python


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name.replace(" ", "_")
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("name", "tp", "value"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_rust_decodes_the_samples_to_the_same_values(
    tmp_path: Path, name: str, tp: Any, value: Any
) -> None:
    buffer = bytes(mm.encode_bytes(value))
    rust = json.loads(run("describe", f"multimodal.{tp.__name__}", _write(tmp_path, name, buffer)))
    python = Describer(buffer).describe(mm.decode_bytes(buffer, tp), tp)
    assert_same_values(rust, python)


@pytest.mark.parametrize(("name", "tp", "value"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_rust_reencodes_the_samples_byte_for_byte(
    tmp_path: Path, name: str, tp: Any, value: Any
) -> None:
    buffer = bytes(mm.encode_bytes(value))
    out = tmp_path / "again"
    assert run("reencode", f"multimodal.{tp.__name__}", _write(tmp_path, name, buffer), out) == (
        '{"ok":true}\n'
    )
    assert out.read_bytes() == buffer
    assert mm.decode_bytes(out.read_bytes(), tp) == value


COLUMN_LISTS: dict[str, tuple[int, dict[str, str]]] = {
    "columns-absent": (3, {"image": "columns"}),
    "columns-distinct-fields": (3, {"image": "columns"}),
    "columns-sent-before": (3, {"image": "columns", "video": "columns"}),
    "columns-fall-back-to-rows": (
        2,
        {"image": "rows", "audio": "rows", "video": "rows", "cached": "rows"},
    ),
    "columns-15-present-rows": (2, {"image": "rows", "video": "rows"}),
    "columns-16-present": (3, {"image": "columns", "video": "columns"}),
}
"""The wire version and each list's layout the Python encoder gives the column-list cases
(15 present items are rows, 16 columns: ``mmcodec.runtime.columns.MIN_ITEMS``); the tests
above check that Rust reads and writes them byte for byte."""


def test_the_column_list_cases_travel_as_their_names_say() -> None:
    cases = dict(corpus.column_lists())
    assert list(cases) == list(COLUMN_LISTS)
    for name, (version, lists) in COLUMN_LISTS.items():
        envelope = msgspec.msgpack.decode(mm.encode(cases[name])[0])
        layouts = {
            key: "columns" if isinstance(value, dict) else "rows"
            for key, value in envelope[7].items()
        }
        assert (envelope[1], layouts) == (version, lists), name


@pytest.mark.parametrize(
    ("case", "type_name", "value"), GOLDEN, ids=[f"{g[1].split('.')[0]}-{g[0]}" for g in GOLDEN]
)
def test_golden_messages_travel_through_rust_unchanged(
    tmp_path: Path, case: str, type_name: str, value: Any
) -> None:
    """Every named type of the features and enums schemas (tests/golden_rust): Rust decodes
    Python's message and writes back the same bytes, which Python decodes to the value it
    encoded (an enum member comes back as the member, of its class)."""
    module = corpus.golden_module(type_name.split(".")[0])
    tp = corpus.golden_type(type_name)
    buffer = bytes(module.encode_bytes(value, type=tp))
    out = tmp_path / "again"
    assert run("reencode", type_name, _write(tmp_path, case, buffer), out) == '{"ok":true}\n'
    again = out.read_bytes()
    back = module.decode_bytes(again, tp)
    assert values_equal(back, value)
    assert type(back) is type(value)
    assert again == buffer


@pytest.fixture(scope="module")
def design_payloads() -> list[tuple[str, corpus.Batch]]:
    return list(corpus.payloads())


def test_the_design_payloads_are_all_here(design_payloads: list[tuple[str, Any]]) -> None:
    from mmcodec.payloads import PAYLOADS

    assert [name for name, _ in design_payloads] == list(PAYLOADS)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_rust_decodes_every_design_payload_to_the_same_values_without_a_copy(
    tmp_path: Path, design_payloads: list[tuple[str, corpus.Batch]]
) -> None:
    for name, batch in design_payloads:
        buffer = bytes(mm.encode_bytes(batch.items))
        path = _write(tmp_path, name, buffer)
        rust = json.loads(run("describe", "multimodal.MultiModalKwargsItems", path))
        items = mm.decode_bytes(buffer, mm.MultiModalKwargsItems)
        assert_same_values(rust, Describer(buffer).describe(items, mm.MultiModalKwargsItems))
        path.unlink()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_rust_reencodes_every_design_payload_byte_for_byte(
    tmp_path: Path, design_payloads: list[tuple[str, corpus.Batch]]
) -> None:
    for name, batch in design_payloads:
        buffer = bytes(mm.encode_bytes(batch.items))
        path, out = _write(tmp_path, name, buffer), tmp_path / "again"
        assert run("reencode", "multimodal.MultiModalKwargsItems", path, out) == '{"ok":true}\n'
        assert out.read_bytes() == buffer, name
        path.unlink()
        out.unlink()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_rust_builds_every_design_payload_as_python_does(
    tmp_path: Path, design_payloads: list[tuple[str, corpus.Batch]]
) -> None:
    """The gateway's path: the same batch, split into items by the Rust builders
    (batched, flat from sizes, shared), is the message Python encodes, byte for byte."""
    for name, batch in design_payloads:
        inputs = _write(tmp_path, name, corpus.build_inputs(batch))
        out = tmp_path / "built"
        run("build", inputs, out)
        built = out.read_bytes()
        assert built == bytes(mm.encode_bytes(batch.items)), name
        assert mm.decode_bytes(built, mm.MultiModalKwargsItems) == batch.items
        inputs.unlink()
        out.unlink()


def test_both_sides_have_the_same_dtype_table() -> None:
    rust = [line.split() for line in run("dtypes").splitlines()]
    from mmcodec.runtime.dtypes import BY_NAME

    assert [name for name, _ in rust] == list(WIRE_NAMES)
    assert {name: int(size) for name, size in rust} == {
        name: info.itemsize for name, info in BY_NAME.items()
    }
