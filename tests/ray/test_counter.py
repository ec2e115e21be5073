"""The control for ``no_tensor_pickled``: the counter does see a pickled tensor, in the
driver and in a worker, so its silence elsewhere means no tensor went through pickle."""

from __future__ import annotations

import os

import ray
import torch

from tests.ray._actors import plain_tensor
from tests.ray._hooks import reductions
from tests.ray.conftest import RayCluster


def _total(counts: dict[int, int]) -> int:
    return sum(counts.values())


def test_the_counter_sees_a_tensor_pickled_by_the_driver(cluster: RayCluster) -> None:
    before = reductions(cluster.counters)
    assert torch.equal(ray.get(ray.put(torch.arange(3))), torch.arange(3))
    after = reductions(cluster.counters)
    assert after.get(os.getpid(), 0) == before.get(os.getpid(), 0) + 1
    assert _total(after) == _total(before) + 1


def test_the_counter_sees_a_tensor_pickled_by_a_worker(cluster: RayCluster) -> None:
    before = reductions(cluster.counters)
    assert torch.equal(ray.get(plain_tensor.remote()), torch.ones(4))
    after = reductions(cluster.counters)
    changed = {pid for pid in after if after[pid] != before.get(pid, 0)}
    assert len(changed) == 1 and os.getpid() not in changed
    assert _total(after) == _total(before) + 1
