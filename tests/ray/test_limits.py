"""The receiver's limits hold through Ray: ``register(module, limits=...)`` decides how the
process that decodes a value reads it, and a value over those limits surfaces as the
DecodeError (with its path) inside Ray's wrapping, in the driver and in an actor."""

from __future__ import annotations

from typing import Any

import pytest
import ray
import ray.exceptions

from mmcodec.generated import multimodal as mm
from mmcodec.integrations.ray import decode_error, register
from mmcodec.payloads import PAYLOADS
from tests.ray._actors import LimitedReceiver
from tests.ray.conftest import RayCluster, on_node

pytestmark = pytest.mark.usefixtures("no_tensor_pickled")

TWO_TENSORS = "qwen2.5-vl"
"""Pixel values and a grid: over a limit of one tensor."""
ONE_TENSOR = "llava"
OVER = (
    "$['image'][0]['image_grid_thw'].data: tensor count 1 outside 1..0 (a message holds at "
    "most max_tensors and max_elements tensors, and one per byte of its header) (tensor run 1)"
)
"""What a decoder allowing one tensor says of the two-tensor payload."""


def test_the_payloads_are_over_and_under_a_limit_of_one_tensor() -> None:
    one = mm.Limits(max_tensors=1)
    with pytest.raises(mm.DecodeError) as raised:
        mm.decode(mm.encode(PAYLOADS[TWO_TENSORS](3)), mm.MultiModalKwargsItems, limits=one)
    assert str(raised.value) == OVER
    under = PAYLOADS[ONE_TENSOR](3)
    assert mm.decode(mm.encode(under), mm.MultiModalKwargsItems, limits=one) == under


def test_ray_get_decodes_under_the_limits_the_driver_registered(cluster: RayCluster) -> None:
    over, under = ray.put(PAYLOADS[TWO_TENSORS](3)), ray.put(PAYLOADS[ONE_TENSOR](3))
    register(mm, limits=mm.Limits(max_tensors=1))
    try:
        with pytest.raises(ray.exceptions.RaySystemError) as raised:
            ray.get(over)
        assert ray.get(under) == PAYLOADS[ONE_TENSOR](3)
    finally:
        register(mm)
    error = decode_error(raised.value)
    assert type(error) is mm.DecodeError
    assert raised.value.client_exc is error
    assert str(error) == OVER
    # The limits are the receiver's, for this process only, until it registers again.
    assert ray.get(over) == PAYLOADS[TWO_TENSORS](3)


def test_an_actor_decodes_its_arguments_under_the_limits_its_process_registered(
    cluster: RayCluster,
) -> None:
    receiver: Any = LimitedReceiver.options(  # type: ignore[attr-defined]
        scheduling_strategy=on_node(cluster.second_node)
    ).remote(1)
    try:
        seen = ray.get(receiver.verify.remote(PAYLOADS[ONE_TENSOR](4), ONE_TENSOR, 4))
        assert seen["equal"] is True and seen["node"] == cluster.second_node
        over = ray.put(PAYLOADS[TWO_TENSORS](4))
        with pytest.raises(ray.exceptions.RayTaskError) as raised:
            ray.get(receiver.verify.remote(over))
        assert isinstance(raised.value.cause, ray.exceptions.RaySystemError)
        error = decode_error(raised.value)
        assert type(error) is mm.DecodeError
        assert str(error) == OVER
        # The driver, under the default limits, reads the same object.
        assert ray.get(over) == PAYLOADS[TWO_TENSORS](4)
    finally:
        ray.kill(receiver)
