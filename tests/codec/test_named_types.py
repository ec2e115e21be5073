"""``NAMED_TYPES``: a generated module's named types by name, what integrations register."""

from __future__ import annotations

import pytest

from mmcodec.generated import multimodal as mm


def test_every_named_type_in_schema_order() -> None:
    assert dict(mm.NAMED_TYPES) == {
        "BatchedField": mm.BatchedField,
        "FlatSlice": mm.FlatSlice,
        "FlatField": mm.FlatField,
        "SharedField": mm.SharedField,
        "BaseMultiModalField": mm.BaseMultiModalField,
        "MultiModalFieldElem": mm.MultiModalFieldElem,
        "MultiModalKwargsItem": mm.MultiModalKwargsItem,
        "MultiModalKwargsItems": mm.MultiModalKwargsItems,
        "PlaceholderRange": mm.PlaceholderRange,
        "MultiModalFeatureSpec": mm.MultiModalFeatureSpec,
    }
    assert list(mm.NAMED_TYPES) == list(dict(mm.NAMED_TYPES))


def test_each_one_is_a_type_decode_takes() -> None:
    for named in mm.NAMED_TYPES.values():
        with pytest.raises(mm.DecodeError):
            mm.decode([b""], named)


def test_it_is_read_only() -> None:
    with pytest.raises(TypeError):
        mm.NAMED_TYPES["x"] = int  # type: ignore[index]
