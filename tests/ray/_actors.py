"""Remote code of the Ray tests (importable by the workers: the job puts the repository
on their ``PYTHONPATH``)."""

from __future__ import annotations

import os
from typing import Any

import ray

from mmcodec.payloads import PAYLOADS, iter_tensors
from tests.ray._store import in_store, payload_tensors, store_inodes, store_mappings


def report(value: Any, name: str | None = None, seed: int = 0) -> dict[str, Any]:
    """What a receiver saw: equality with the payload rebuilt from its seed, and where
    the decoded tensors live."""
    mappings = store_mappings()
    tensors = payload_tensors(value)
    return {
        "equal": None if name is None else value == PAYLOADS[name](seed),
        "type": type(value).__name__,
        "payloads": len(tensors),
        "in_store": sum(in_store(t, mappings) for t in tensors),
        "any_in_store": any(in_store(t, mappings) for t in iter_tensors(value)),
        "stores": store_inodes(),
        "node": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
    }


@ray.remote
class Verifier:
    """Receives values, checks them against payloads it rebuilds, builds payloads."""

    def verify(self, value: Any, name: str | None = None, seed: int = 0) -> dict[str, Any]:
        return report(value, name, seed)

    def build(self, name: str, seed: int) -> Any:
        return PAYLOADS[name](seed)

    def whereabouts(self) -> dict[str, Any]:
        return report(None)


@ray.remote
def echo(value: Any) -> Any:
    return value


@ray.remote
def received(value: Any) -> dict[str, Any]:
    return report(value)


@ray.remote
def plain_tensor() -> Any:
    import torch

    return torch.ones(4)


@ray.remote
class LimitedReceiver:
    """A receiver whose process registered the codec with limits of its own (the job's
    hook registered it with the defaults first: registering again replaces the options)."""

    def __init__(self, max_tensors: int) -> None:
        from mmcodec.generated import multimodal as mm
        from mmcodec.integrations.ray import register

        register(mm, limits=mm.Limits(max_tensors=max_tensors))

    def verify(self, value: Any, name: str | None = None, seed: int = 0) -> dict[str, Any]:
        return report(value, name, seed)
