"""Bad bytes in the object store: DecodeError, with its path, wherever ray.get decodes.

Ray wraps a failed deserialization: ``ray.get`` raises ``RaySystemError`` (its
``client_exc`` the DecodeError) where the value was decoded, and a task or actor whose
argument failed fails with ``RayTaskError`` (its ``cause`` that RaySystemError).
``decode_error`` digs the DecodeError out; these tests pin down both shapes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pickle import PickleBuffer
from typing import Any

import pytest
import ray
import ray.exceptions

from mmcodec.generated import multimodal as mm
from mmcodec.integrations.ray import decode_error, serializers
from mmcodec.payloads import PAYLOADS
from tests.ray._store import in_store, store_mappings
from tests.ray.conftest import RayCluster

pytestmark = pytest.mark.usefixtures("no_tensor_pickled")


def _decode_error_at_get(ref: ray.ObjectRef[Any]) -> str:
    with pytest.raises(ray.exceptions.RaySystemError) as raised:
        ray.get(ref)
    error = decode_error(raised.value)
    assert isinstance(error, mm.DecodeError)
    assert raised.value.client_exc is error
    return str(error)


def _decode_error_in_actor(verifier: Any, ref: ray.ObjectRef[Any]) -> str:
    with pytest.raises(ray.exceptions.RayTaskError) as raised:
        ray.get(verifier.verify.remote(ref))
    assert isinstance(raised.value.cause, ray.exceptions.RaySystemError)
    error = decode_error(raised.value)
    assert isinstance(error, mm.DecodeError)
    return str(error)


def test_a_corrupted_byte_in_the_object_store(
    cluster: RayCluster, verifiers: dict[str, Any]
) -> None:
    ref = ray.put(PAYLOADS["idefics3"](0))
    got: Any = ray.get(ref)
    mask = got["image"][0]["pixel_attention_mask"].data
    assert in_store(mask, store_mappings())
    ctypes.memset(mask.data_ptr() + 12345, 2, 1)  # in the stored object itself: not 0 or 1
    del got, mask
    expected = (
        "$['image'][0]['pixel_attention_mask'].data: "
        "bool payload holds a byte other than 0 and 1 (tensor run 1)"
    )
    assert _decode_error_at_get(ref) == expected
    # The same bytes fetched into the second node's store fail there the same way.
    assert _decode_error_in_actor(verifiers["second"], ref) == expected


class _Forged:
    """A stored object holding the given frames where the codec's frames belong."""

    def __init__(self, frames: Sequence[bytes]) -> None:
        self.frames = frames

    def __reduce__(self) -> tuple[Any, ...]:
        _, deserializer = serializers(mm, mm.MultiModalKwargsItems)
        return (deserializer, ([PickleBuffer(f) for f in self.frames],))


FRAMES = [bytes(f) for f in mm.encode(PAYLOADS["llava"](0))]


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        ([b"\x00not msgpack"], "$: frame 0 is not an mmcodec header (Expected `array`, got `int`)"),
        (
            FRAMES[:1],
            "$['image'][0]['pixel_values'].data: frame 1 out of range (1 frames) (tensor run 0)",
        ),
        (
            [FRAMES[0], FRAMES[1][:-2]],
            "$['image'][0]['pixel_values'].data: payload of 677376 bytes at offset 0 overruns "
            "frame 1 (677374 bytes) (tensor run 0)",
        ),
    ],
    ids=["not a header", "a frame missing", "a frame truncated"],
)
def test_forged_frames(
    cluster: RayCluster, verifiers: dict[str, Any], frames: list[bytes], expected: str
) -> None:
    ref = ray.put(_Forged(frames))
    assert _decode_error_at_get(ref) == expected
    assert _decode_error_in_actor(verifiers["second"], ref) == expected


def test_a_value_the_codec_cannot_encode_fails_the_put(cluster: RayCluster) -> None:
    with pytest.raises(mm.EncodeError) as raised:
        ray.put(mm.MultiModalFieldElem(data="text", field=mm.BatchedField()))  # type: ignore[arg-type]
    assert (
        str(raised.value)
        == "$.data: str is not a nested tensor (tensor, int, float, list or tuple)"
    )


def test_decode_error_finds_nothing_in_other_errors() -> None:
    assert decode_error(ValueError("x")) is None
    wrapped = ray.exceptions.RaySystemError(ValueError("x"))  # type: ignore[no-untyped-call]
    assert decode_error(wrapped) is None
