"""Evolution within a major version, for item lists that travel as column lists.

In a column list a struct's values may travel one column per field (wire version 3). A
newer release that appends fields with defaults (tests/evolution/v2.yaml's ``Record``)
then writes more field columns than an older one knows, and an older release fewer than
a newer one expects: each must read the other's messages as it reads rows, the older
skipping the columns it does not know, the newer filling the defaults. So ``mmcodec
compat`` needs no rule of its own for column lists: appending fields with defaults stays
compatible (tests/codegen/test_compat.py), and column lists keep that promise.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import msgspec
import pytest
import torch

from mmcodec.runtime import framing
from mmcodec.runtime.columns import MIN_ITEMS
from mmcodec.runtime.limits import DEFAULT_LIMITS
from tests.codec.helpers import assert_nested_equal
from tests.evolution import HERE, forget, generate


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModuleType, ModuleType]]:
    out = tmp_path_factory.mktemp("column_evolution")
    packages = {"mmc_columns_v1": "v1", "mmc_columns_v2": "v2"}
    modules = [generate(HERE / f"{stem}.yaml", pkg, out) for pkg, stem in packages.items()]
    try:
        yield modules[0], modules[1]
    finally:
        for package in packages:
            forget(package, out)


def _columns(buffer: Any) -> dict[str, Any]:
    """The shelves list as it travelled, in a message of wire version 3."""
    header = msgspec.msgpack.decode(framing.split(buffer, DEFAULT_LIMITS)[0])
    assert header[1] == 3, header[1]  # a column list travelled
    shelves: dict[str, Any] = header[7][0]
    assert list(shelves) == ["count", "keys", "columns", "absent"]
    return shelves


ITEMS = MIN_ITEMS
"""Shelves in the list: as few as travel as columns."""


def _library(module: ModuleType, **more: Any) -> Any:
    values = [torch.arange(4, dtype=torch.float32) + i for i in range(ITEMS)]
    shelves = [
        module.Shelf(
            {
                "a": module.Record("a", values[i], ["x"], **more),
                "b": module.Record("b", values[i][:2], **more),
            }
        )
        for i in range(ITEMS)
    ]
    return module.Library([shelves[0], None, *shelves[1:]]), values


def test_an_older_release_reads_a_newer_column_list(
    releases: tuple[ModuleType, ModuleType],
) -> None:
    v1, v2 = releases
    library, values = _library(v2, note="new", weights=torch.ones(2))
    buffer = v2.encode_bytes(library)
    # Every new Record in its own item: a fields column, one array per field of v2's Record.
    for column in _columns(buffer)["columns"]:
        assert column[0] == 1 and len(column) == 1 + len(v2.Record.__struct_fields__)
    decoded = v1.decode_bytes(buffer, v1.Library)
    assert type(decoded) is v1.Library
    shelves = decoded.shelves
    assert shelves[1] is None and len(shelves) == ITEMS + 1
    for shelf, i in zip([shelves[0], *shelves[2:]], range(ITEMS), strict=True):
        assert type(shelf) is v1.Shelf and list(shelf) == ["a", "b"]
        a, b = shelf["a"], shelf["b"]
        assert type(a) is v1.Record and not hasattr(a, "note")
        assert (a.name, a.tags, b.name, b.tags) == ("a", ["x"], "b", [])
        assert_nested_equal(a.values, values[i])
        assert_nested_equal(b.values, values[i][:2])


def test_a_newer_release_reads_an_older_column_list_with_defaults(
    releases: tuple[ModuleType, ModuleType],
) -> None:
    v1, v2 = releases
    library, _ = _library(v1)
    buffer = v1.encode_bytes(library)
    for column in _columns(buffer)["columns"]:
        assert column[0] == 1 and len(column) == 1 + len(v1.Record.__struct_fields__)
    decoded = v2.decode_bytes(buffer, v2.Library)
    expected, _ = _library(v2)
    assert decoded == expected
    a = decoded.shelves[0]["a"]
    assert (a.note, a.weights) == ("none", None)  # v2's defaults
