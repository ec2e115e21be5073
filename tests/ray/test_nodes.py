"""Across object stores: actors pinned to each node receive the design payloads and
verify them against payloads they rebuild from the same seeds; values built on the
second node come back to the driver's store."""

from __future__ import annotations

from typing import Any

import pytest
import ray

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from tests.ray._hooks import set_up_processes
from tests.ray._store import payloads_in_store, store_inodes
from tests.ray.conftest import RayCluster

pytestmark = pytest.mark.usefixtures("no_tensor_pickled")


@pytest.mark.parametrize("name", list(PAYLOADS))
@pytest.mark.parametrize("where", ["head", "second"])
def test_an_actor_on_each_node_verifies_each_design_payload(
    cluster: RayCluster, verifiers: dict[str, Any], where: str, name: str
) -> None:
    seed = 11
    seen = ray.get(verifiers[where].verify.remote(ray.put(PAYLOADS[name](seed)), name, seed))
    assert seen["equal"] is True
    assert seen["type"] == "MultiModalKwargsItems"
    assert seen["in_store"] == seen["payloads"]
    assert seen["any_in_store"] is True
    assert seen["pid"] in set_up_processes(cluster.counters)
    node = cluster.head_node if where == "head" else cluster.second_node
    assert seen["node"] == node
    # The head's actor maps the driver's store; the second node's actor only its own.
    assert (seen["stores"] == store_inodes()) is (where == "head")


def test_the_request_passed_by_value_crosses_to_the_second_node(
    cluster: RayCluster, verifiers: dict[str, Any]
) -> None:
    name, seed = "qwen2.5-vl x16", 12
    seen = ray.get(verifiers["second"].verify.remote(PAYLOADS[name](seed), name, seed))
    assert seen["equal"] is True
    assert seen["in_store"] == seen["payloads"] == 16
    assert not seen["stores"] & store_inodes()


def test_values_built_on_the_second_node_arrive_in_the_drivers_store(
    cluster: RayCluster, verifiers: dict[str, Any]
) -> None:
    name, seed = "qwen2.5-vl x16", 13
    got = ray.get(verifiers["second"].build.remote(name, seed))
    assert type(got) is mm.MultiModalKwargsItems
    assert got == PAYLOADS[name](seed)
    assert payloads_in_store(got)
