"""``NAMED_TYPES``: a generated module's named types by name, what integrations register."""

from __future__ import annotations

from typing import Any

import pytest

from mmcodec.generated import multimodal as mm
from tests.security.samples import feature_spec, kwargs_items, nested_item, same


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


def _samples() -> dict[str, Any]:
    """A value of every named type (parameters away from their defaults)."""
    spec = feature_spec()
    return {
        "BatchedField": mm.BatchedField(keep_on_cpu=True),
        "FlatSlice": (slice(0, 2), slice(1, None)),
        "FlatField": mm.FlatField([slice(0, 2), slice(2, 5)], dim=1),
        "SharedField": mm.SharedField(3),
        "BaseMultiModalField": mm.SharedField(2, keep_on_cpu=True),
        "MultiModalFieldElem": nested_item()["mixed"],
        "MultiModalKwargsItem": nested_item(),
        "MultiModalKwargsItems": kwargs_items(),
        "PlaceholderRange": spec.mm_position,
        "MultiModalFeatureSpec": spec,
    }


def test_each_one_is_a_type_encode_and_decode_take() -> None:
    samples = _samples()
    assert list(samples) == list(mm.NAMED_TYPES)  # a new named type needs a sample here
    for name, named in mm.NAMED_TYPES.items():
        value = samples[name]
        for decoded in (
            mm.decode(mm.encode(value, type=named), named),
            mm.decode_bytes(mm.encode_bytes(value, type=named), named),
        ):
            assert type(decoded) is type(value), name
            assert same(decoded, value), name


def test_a_message_of_one_named_type_is_refused_as_another() -> None:
    samples = _samples()
    for name, named in mm.NAMED_TYPES.items():
        frames = mm.encode(samples[name], type=named)
        for other_name, other in mm.NAMED_TYPES.items():
            if other is named:
                continue
            with pytest.raises(mm.DecodeError) as raised:
                mm.decode(frames, other)
            assert str(raised.value) == f"$: message holds a {name}, not a {other_name}"
        with pytest.raises(mm.DecodeError) as raised:
            mm.decode([b""], named)
        assert str(raised.value) == "$: frame 0 is not an mmcodec header (Input data was truncated)"


def test_it_is_read_only() -> None:
    with pytest.raises(TypeError):
        mm.NAMED_TYPES["x"] = int  # type: ignore[index]
