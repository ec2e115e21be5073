"""The envelope: schema identity and major version; evolution within a major version.

Two releases of schema ``evolution`` (tests/evolution/v1.yaml and v2.yaml, the second
appending fields with defaults) are compiled into a temporary package; each codec
reads the other's messages. Another major version or another schema is a DecodeError
that names both sides, never a wrong object.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import msgspec
import pytest
import torch

from mmcodec.generated import multimodal as mm
from tests.codec.helpers import assert_nested_equal
from tests.evolution import HERE, forget, generate
from tests.golden import bound


class Codecs:
    def __init__(self, v1: ModuleType, v2: ModuleType, v3: ModuleType) -> None:
        self.v1, self.v2, self.v3 = v1, v2, v3


@pytest.fixture(scope="module")
def codecs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Codecs]:
    out = tmp_path_factory.mktemp("evolution")
    packages = {"mmc_evolution_v1": "v1", "mmc_evolution_v2": "v2", "mmc_evolution_v3": "breaking"}
    modules = [generate(HERE / f"{stem}.yaml", pkg, out) for pkg, stem in packages.items()]
    try:
        yield Codecs(*modules)
    finally:
        for package in packages:
            forget(package, out)


def test_the_releases_share_a_name_and_major_version(codecs: Codecs) -> None:
    assert (codecs.v1.SCHEMA_NAME, codecs.v1.SCHEMA_MAJOR) == ("evolution", 1)
    assert (codecs.v2.SCHEMA_NAME, codecs.v2.SCHEMA_MAJOR) == ("evolution", 1)
    assert (codecs.v3.SCHEMA_NAME, codecs.v3.SCHEMA_MAJOR) == ("evolution", 2)
    assert codecs.v1.Record is not codecs.v2.Record
    assert "note" not in codecs.v1.Record.__struct_fields__
    assert codecs.v2.Record.__struct_fields__[-2:] == ("note", "weights")


def _v2_batch(v2: ModuleType) -> Any:
    values = torch.arange(2000, dtype=torch.float32)
    weights = torch.linspace(0, 1, 3000, dtype=torch.float64)
    records = [
        v2.Record("a", values, ["x", "y"], note="new", weights=weights),
        v2.Record("b", torch.tensor([1, 2, 3]), note="small"),
    ]
    return v2.Batch(records, 2, source="camera")


def test_a_newer_message_decodes_with_the_older_codec(codecs: Codecs) -> None:
    v1, v2 = codecs.v1, codecs.v2
    batch = _v2_batch(v2)
    for decoded in (
        v1.decode(v2.encode(batch), v1.Batch),
        v1.decode_bytes(v2.encode_bytes(batch), v1.Batch),
    ):
        assert type(decoded) is v1.Batch
        assert decoded.count == 2
        assert not hasattr(decoded, "source")
        first, second = decoded.records
        assert type(first) is v1.Record
        assert (first.name, first.tags, second.name, second.tags) == ("a", ["x", "y"], "b", [])
        assert not hasattr(first, "note") and not hasattr(first, "weights")
        assert_nested_equal(first.values, batch.records[0].values)
        assert_nested_equal(second.values, batch.records[1].values)


def test_an_older_message_decodes_with_the_newer_codec_and_defaults(codecs: Codecs) -> None:
    v1, v2 = codecs.v1, codecs.v2
    values = torch.arange(5000, dtype=torch.int16).reshape(50, 100)
    batch = v1.Batch([v1.Record("a", values, ["t"]), v1.Record("b", values[0])], 2)
    for decoded in (
        v2.decode(v1.encode(batch), v2.Batch),
        v2.decode_bytes(v1.encode_bytes(batch), v2.Batch),
    ):
        assert type(decoded) is v2.Batch
        assert (decoded.count, decoded.source) == (2, None)
        first, second = decoded.records
        assert type(first) is v2.Record
        assert (first.name, first.tags, first.note, first.weights) == ("a", ["t"], "none", None)
        assert (second.name, second.tags, second.note, second.weights) == ("b", [], "none", None)
        assert_nested_equal(first.values, values)
        assert_nested_equal(second.values, values[0])
        assert decoded == v2.Batch(
            [v2.Record("a", values, ["t"]), v2.Record("b", values[0])], 2, source=None
        )


def _error(decode: Any, frames: Any, type_: Any) -> mm.DecodeError:
    with pytest.raises(mm.DecodeError) as info:
        decode(frames, type_)
    return info.value


def test_another_major_version_is_refused_naming_both(codecs: Codecs) -> None:
    v1, v3 = codecs.v1, codecs.v3
    newer = v3.encode(v3.Batch([v3.Record(7, torch.zeros(2))], 1))
    error = _error(v1.decode, newer, v1.Batch)
    assert str(error) == (
        "$: message is from schema 'evolution' major version 2; "
        "this decoder reads schema 'evolution' major version 1"
    )
    older = v1.encode_bytes(v1.Batch([v1.Record("a", torch.zeros(2))], 1))
    error = _error(v3.decode_bytes, older, v3.Batch)
    assert str(error) == (
        "$: message is from schema 'evolution' major version 1; "
        "this decoder reads schema 'evolution' major version 2"
    )
    assert type(error) is mm.DecodeError  # one class for the whole project


def test_a_message_from_another_schema_is_refused_naming_both(codecs: Codecs) -> None:
    frames = mm.encode(mm.PlaceholderRange(0, 3))
    error = _error(codecs.v1.decode, frames, codecs.v1.Record)
    assert str(error) == (
        "$: message is from schema 'multimodal' major version 1; "
        "this decoder reads schema 'evolution' major version 1"
    )
    frames = codecs.v2.encode(codecs.v2.Record("a", torch.zeros(1)))
    error = _error(mm.decode, frames, mm.PlaceholderRange)
    assert str(error) == (
        "$: message is from schema 'evolution' major version 1; "
        "this decoder reads schema 'multimodal' major version 1"
    )
    frames = bound.encode(bound.Point(1.0, 2.0))
    error = _error(mm.decode, frames, mm.MultiModalKwargsItems)
    assert error.message == (
        "message is from schema 'bound' major version 1; "
        "this decoder reads schema 'multimodal' major version 1"
    )
    buffer = mm.encode_bytes(mm.MultiModalKwargsItems())
    error = _error(bound.decode_bytes, buffer, bound.Scene)
    assert error.message == (
        "message is from schema 'multimodal' major version 1; "
        "this decoder reads schema 'bound' major version 1"
    )


def test_the_wrong_root_type_is_refused(codecs: Codecs) -> None:
    v1 = codecs.v1
    frames = v1.encode(v1.Record("a", torch.zeros(1)))
    assert str(_error(v1.decode, frames, v1.Batch)) == "$: message holds a Record, not a Batch"
    frames = mm.encode(mm.PlaceholderRange(1, 2))
    error = _error(mm.decode, frames, mm.MultiModalFeatureSpec)
    assert str(error) == "$: message holds a PlaceholderRange, not a MultiModalFeatureSpec"
    item = mm.MultiModalKwargsItem({"k": mm.MultiModalFieldElem(1, mm.BatchedField())})
    error = _error(mm.decode_bytes, mm.encode_bytes(item), mm.MultiModalKwargsItems)
    assert error.message == "message holds a MultiModalKwargsItem, not a MultiModalKwargsItems"


def test_a_newer_wire_format_version_is_refused() -> None:
    frames = mm.encode(mm.PlaceholderRange(1, 2))
    envelope = msgspec.msgpack.decode(frames[0])
    assert envelope[:5] == ["mmc", 2, "multimodal", 1, "PlaceholderRange"]
    # A newer one, version 1 (before struct back-references), and 0.
    for other in (4, 1, 0):
        envelope[1] = other
        error = _error(mm.decode, [msgspec.msgpack.encode(envelope)], mm.PlaceholderRange)
        assert str(error) == (
            f"$: wire format version {other} is not supported (this decoder reads versions 2 to 3)"
        )
    envelope[1] = 3  # a message without column lists reads the same as version 3
    decoded = mm.decode([msgspec.msgpack.encode(envelope)], mm.PlaceholderRange)
    assert decoded == mm.PlaceholderRange(1, 2)


def test_decoding_as_a_type_of_another_schema_is_a_usage_error(codecs: Codecs) -> None:
    frames = codecs.v1.encode(codecs.v1.Record("a", torch.zeros(1)))
    with pytest.raises(TypeError, match="is not a type of schema 'multimodal'"):
        mm.decode(frames, codecs.v1.Record)


def test_envelope_identity_is_checked_before_the_body(codecs: Codecs) -> None:
    # A major-version-2 Record (name is an int) would not even parse as a v1 Record:
    # the error is about the version, not about the body.
    frames = codecs.v3.encode(codecs.v3.Record(5, torch.zeros(1)))
    error = _error(codecs.v1.decode, frames, codecs.v1.Record)
    assert error.message == (
        "message is from schema 'evolution' major version 2; "
        "this decoder reads schema 'evolution' major version 1"
    )
