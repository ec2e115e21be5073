"""The processes of the cross-process tests: each a fresh interpreter (multiprocessing ``spawn``).

Every role starts the way a vLLM process does: it asks vLLM's own loader for its general
plugins (``vllm.plugins.load_general_plugins``, reading the ``vllm.general_plugins`` entry
points and ``VLLM_PLUGINS``) and never imports ``mmcodec.integrations.vllm`` itself. Then
it uses vLLM's names as vLLM's code does (``vllm.v1.serial_utils.MsgpackEncoder``, the
shared-memory caches), counts pickle (:class:`tests.vllm.pickle_spy.PickleSpy`) while it
works, and reports to the test through a queue: a dict, or the traceback of a failure.

Values come from seeds: the receiving side rebuilds what was sent and compares every
value strictly (:func:`tests.vllm.strict.assert_same`) when the plugin is on; vLLM's own
codec is lossy (tuples of slices come back lists), so with the plugin off only vLLM's
equality is checked.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from mmcodec.payloads import qwen2_5_vl, small_items
from tests.vllm.strict import assert_same

_PLUGIN_MODULE = "mmcodec.integrations.vllm"


def load_plugins() -> str | None:
    """vLLM's plugin loading, as in its processes; the shm mode mmcodec runs in, or None."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    assert _PLUGIN_MODULE not in sys.modules, "imported before vLLM loaded its plugins"
    import vllm.plugins

    vllm.plugins.load_general_plugins()
    if _PLUGIN_MODULE not in sys.modules:
        return None
    from mmcodec.integrations.vllm import installed

    return installed()


def items(seed: int) -> list[Any]:
    """The items of a request: two Qwen2.5-VL images and three small items."""
    import vllm.multimodal.inputs as vi

    return [*qwen2_5_vl(seed, 2, api=vi)["image"], *small_items(seed, 3, api=vi)["image"]]


def features(seed: int, data: list[Any] | None = None) -> list[Any]:
    """One feature per item of :func:`items` (``data`` in their place), then one cached."""
    import vllm.multimodal.inputs as vi

    values: list[Any] = [*(items(seed) if data is None else data), None]
    mask = torch.tensor([i % 3 != 0 for i in range(7)])
    return [
        vi.MultiModalFeatureSpec(
            data=value,
            modality="image",
            identifier=f"item-{seed}-{i}",
            mm_position=vi.PlaceholderRange(offset=10 * i, length=7, is_embed=mask if i else None),
            mm_hash=f"item-{seed}-{i}",
        )
        for i, value in enumerate(values)
    ]


def request(seed: int, data: list[Any] | None = None) -> Any:
    from vllm.v1.engine import EngineCoreRequest

    return EngineCoreRequest(
        request_id=f"request-{seed}",
        prompt_token_ids=list(range(64)),
        mm_features=features(seed, data),
        sampling_params=None,
        pooling_params=None,
        arrival_time=1.5,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        prompt_embeds=torch.randn(4, 8, generator=torch.Generator().manual_seed(seed)),
    )


def check_features(received: list[Any], seed: int, strict: bool) -> int:
    """Compare features against those rebuilt from ``seed``; the number of items compared."""
    expected = features(seed)
    assert len(received) == len(expected)
    for got, want in zip(received, expected, strict=True):
        if strict:
            assert_same(got, want)
        else:
            assert got.data == want.data and got.mm_position == want.mm_position
    return sum(f.data is not None for f in expected)


def _report(results: Any, role: str, work: Callable[[dict[str, Any]], None]) -> None:
    report: dict[str, Any] = {"role": role}
    try:
        report["installed"] = load_plugins()
        from tests.vllm.pickle_spy import PickleSpy

        report["spy"] = spy = PickleSpy()
        work(report)
        report["pickle calls"] = spy.calls
        report["multimodal pickled"] = spy.multimodal
        del report["spy"]
    except BaseException:
        report = {"role": role, "error": traceback.format_exc()}
    results.put(report)


# -- (a) an EngineCoreRequest over ZMQ ipc:// ----------------------------------------------


def request_receiver(address: str, seed: int, results: Any) -> None:
    def work(report: dict[str, Any]) -> None:
        import zmq
        from vllm.v1.engine import EngineCoreRequest
        from vllm.v1.serial_utils import MsgpackDecoder

        with zmq.Context() as context, context.socket(zmq.PULL) as socket:
            socket.bind(address)
            results.put({"role": "receiver", "bound": True})
            frames = socket.recv_multipart(copy=False)
            with report["spy"]:
                decoded = MsgpackDecoder(EngineCoreRequest).decode(frames)
            report["decoder"] = type(MsgpackDecoder(EngineCoreRequest)).__name__
            report["frames"] = len(frames)
            report["items"] = check_features(decoded.mm_features, seed, report["installed"])
            assert torch.equal(decoded.prompt_embeds, request(seed).prompt_embeds)

    _report(results, "receiver", work)


def request_sender(address: str, seed: int, results: Any) -> None:
    def work(report: dict[str, Any]) -> None:
        import zmq
        from vllm.v1.serial_utils import MsgpackEncoder

        outgoing = request(seed)
        with zmq.Context() as context, context.socket(zmq.PUSH) as socket:
            socket.connect(address)
            with report["spy"]:
                frames = MsgpackEncoder().encode(outgoing)
                socket.send_multipart(frames, copy=False)
            report["encoder"] = type(MsgpackEncoder()).__name__

    _report(results, "sender", work)


# -- (b) vLLM's shared-memory processor cache: one writer, readers in other processes -------


def _shm_config(world_size: int) -> Any:
    from vllm.config.multimodal import MultiModalConfig

    config = MultiModalConfig(
        mm_processor_cache_type="shm",
        mm_processor_cache_gb=0.25,
        mm_shm_cache_max_object_size_mb=64,
    )
    return SimpleNamespace(
        parallel_config=SimpleNamespace(world_size=world_size),
        model_config=SimpleNamespace(get_multimodal_config=lambda: config),
    )


def shm_writer(addresses: list[str], seed: int, results: Any) -> None:
    """The front end: items into the sender cache, their handles to every reader over ZMQ."""

    def work(report: dict[str, Any]) -> None:
        import zmq
        from vllm.multimodal.cache.shm import ShmObjectStoreSenderCache
        from vllm.v1.serial_utils import MsgpackEncoder

        cache = ShmObjectStoreSenderCache(_shm_config(len(addresses)))
        report["storage"] = type(cache._shm_cache).__name__
        results.put({"role": "writer", "created": True})
        outgoing = items(seed)
        with report["spy"]:
            handles = [
                cache.get_and_update_item((item, []), f"item-{seed}-{i}")[0]
                for i, item in enumerate(outgoing)
            ]
            frames = MsgpackEncoder().encode(request(seed, handles))
        with zmq.Context() as context:
            for address in addresses:
                with context.socket(zmq.PUSH) as socket:
                    socket.connect(address)
                    socket.send_multipart(frames)
            # Keep the segment until the readers are done (they say so on the queue).
            with context.socket(zmq.PULL) as done:
                done.bind(addresses[0] + "-done")
                for _ in addresses:
                    done.recv()
        cache.close()

    _report(results, "writer", work)


def shm_reader(address: str, seed: int, lock: Any, world_size: int, results: Any) -> None:
    """A worker: the request from ZMQ, its items from the receiver cache, compared strictly."""

    def work(report: dict[str, Any]) -> None:
        import zmq
        from vllm.multimodal.cache.shm import ShmObjectStoreReceiverCache
        from vllm.v1.engine import EngineCoreRequest
        from vllm.v1.serial_utils import MsgpackDecoder

        with zmq.Context() as context:
            with context.socket(zmq.PULL) as socket:
                socket.bind(address)
                results.put({"role": "reader", "bound": True})
                frames = socket.recv_multipart(copy=False)
            cache = ShmObjectStoreReceiverCache(_shm_config(world_size), lock)
            report["storage"] = type(cache._shm_cache).__name__
            with report["spy"]:
                decoded = MsgpackDecoder(EngineCoreRequest).decode(frames)
                received = cache.get_and_update_features(decoded.mm_features)
            report["items"] = check_features(received, seed, report["installed"] is not None)
            del decoded, received
            cache._shm_cache.close()
            with context.socket(zmq.PUSH) as done:
                done.connect(report_address(address))
                done.send(b"done")

    _report(results, "reader", work)


def report_address(reader_address: str) -> str:
    """Where readers say they are done: the first reader's address + ``-done``."""
    return reader_address.rsplit("-reader", 1)[0] + "-reader0-done"
