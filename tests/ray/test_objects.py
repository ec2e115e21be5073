"""Values of the codec's types through one node's object store: put/get, tasks, containers."""

from __future__ import annotations

from typing import Any

import pytest
import ray
import ray.cloudpickle
import torch

from mmcodec.generated import multimodal as mm
from mmcodec.integrations.ray import register, registrable_types
from mmcodec.payloads import PAYLOADS, iter_tensors, tensor_bytes
from tests.ray._actors import echo, received
from tests.ray._hooks import set_up_processes
from tests.ray._store import in_store, payload_tensors, payloads_in_store, store_mappings
from tests.ray.conftest import RayCluster, on_node

pytestmark = pytest.mark.usefixtures("no_tensor_pickled")


def test_register_takes_every_class_of_the_module() -> None:
    assert registrable_types(mm) == [
        mm.BatchedField,
        mm.FlatField,
        mm.SharedField,
        mm.BaseMultiModalField,
        mm.MultiModalFieldElem,
        mm.MultiModalKwargsItem,
        mm.MultiModalKwargsItems,
        mm.PlaceholderRange,
        mm.MultiModalFeatureSpec,
    ]  # FlatSlice, an alias of slice | tuple[slice, ...], is no class to dispatch on


def test_only_rays_envelope_is_pickled(cluster: RayCluster) -> None:
    items = PAYLOADS["qwen2.5-vl x16"](0)
    buffers: list[Any] = []
    envelope = ray.cloudpickle.dumps(items, protocol=5, buffer_callback=buffers.append)  # type: ignore[no-untyped-call]
    frames = mm.encode(items)
    assert len(buffers) == len(frames)
    assert [bytes(b.raw()) for b in buffers[:1]] == [bytes(frames[0])]
    payload = sum(b.raw().nbytes for b in buffers[1:])
    assert tensor_bytes(items) - payload == 16 * 3 * 8  # the grids travel in the header
    assert len(envelope) < 400  # references to the rebuild function, decode, the class
    assert b"torch" not in envelope


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_put_get_decodes_views_of_the_object_store(cluster: RayCluster, name: str) -> None:
    items = PAYLOADS[name](1)
    got = ray.get(ray.put(items))
    assert type(got) is mm.MultiModalKwargsItems
    assert got == items
    assert payloads_in_store(got)


def test_nested_in_containers_with_none_items(cluster: RayCluster) -> None:
    items = PAYLOADS["internvl"](2)
    items["image"].append(None)  # a cached item
    spec = mm.MultiModalFeatureSpec(
        data=items["image"][0],
        modality="image",
        identifier="img-0",
        mm_position=mm.PlaceholderRange(5, 3, torch.tensor([True, False, True])),
    )
    cached = mm.MultiModalFeatureSpec(None, "image", "img-1", mm.PlaceholderRange(9, 2))
    value: dict[str, Any] = {
        "items": items,
        "specs": [spec, cached],
        "none": None,
        "pair": (spec, 3),
    }
    got: Any = ray.get(ray.put(value))
    assert got == value
    assert type(got["pair"]) is tuple and got["specs"][1].data is None
    assert got["items"]["image"][2] is None
    assert payloads_in_store(got)


def test_task_arguments_and_return_values(cluster: RayCluster) -> None:
    items = PAYLOADS["idefics3"](3)
    seen = ray.get(received.options(scheduling_strategy=on_node(cluster.head_node)).remote(items))
    assert seen["type"] == "MultiModalKwargsItems"
    assert seen["in_store"] == seen["payloads"] == len(payload_tensors(items)) == 2
    assert seen["pid"] in set_up_processes(cluster.counters)
    returned = ray.get(echo.remote(items))  # the worker encodes its return value
    assert returned == items
    assert payloads_in_store(returned)


def test_copy_true_gives_tensors_of_their_own(cluster: RayCluster) -> None:
    items = PAYLOADS["whisper"](4)
    ref = ray.put(items)
    register(mm, copy=True)
    try:
        got: Any = ray.get(ref)
    finally:
        register(mm)
    mappings = store_mappings()
    assert got == items
    assert not any(in_store(t, mappings) for t in iter_tensors(got))
    got["audio"][0]["input_features"].data.zero_()  # writable, and nobody else's memory
    assert ray.get(ref) == items
