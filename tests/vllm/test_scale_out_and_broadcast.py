"""(c) The scale-out strings and (d) the broadcast to tensor-parallel workers."""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import vllm.multimodal.inputs as vi
from vllm.distributed.device_communicators.shm_broadcast import MessageQueue
from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput
from vllm.v1.serial_utils import MsgpackEncoder

from mmcodec.integrations.vllm import decode_mm_kwargs_item, encode_mm_kwargs_item
from mmcodec.integrations.vllm.broadcast import route_items, routed, unroute_items
from mmcodec.payloads import PAYLOADS
from mmcodec.runtime.errors import DecodeError
from tests.vllm import peers
from tests.vllm.pickle_spy import PickleSpy
from tests.vllm.strict import assert_same

# -- (c) scale-out ------------------------------------------------------------------------------


def _each_item() -> list[Any]:
    out = []
    for make in PAYLOADS.values():
        maker: Any = make
        for entries in maker(3, api=vi).values():
            out.append(entries[0])
    return out


def test_scale_out_strings_round_trip_strictly() -> None:
    for item in _each_item():
        text = encode_mm_kwargs_item(item)
        assert text.startswith("TU1DQ")  # base64 of b"MMCB", mmcodec's single buffer
        decoded = decode_mm_kwargs_item(text)
        assert_same(decoded, item)
        for elem in decoded.values():  # views of one writable buffer
            if isinstance(elem.data, torch.Tensor) and elem.data.numel():
                assert elem.data.flatten().view(torch.uint8).numpy().flags.writeable


def test_stock_strings_still_decode() -> None:
    stock = MsgpackEncoder(size_threshold=2**62)
    import pybase64

    for item in _each_item():
        (buffer,) = stock.encode(item)
        decoded = decode_mm_kwargs_item(pybase64.b64encode(buffer).decode("ascii"))
        assert decoded == item  # vLLM's own decoding and equality


def test_a_bad_mmcodec_string_is_a_decode_error() -> None:
    text = encode_mm_kwargs_item(_each_item()[0])
    damaged = text[:8] + ("A" if text[8] != "A" else "B") + text[9:]
    with pytest.raises(DecodeError):
        decode_mm_kwargs_item(damaged)


# -- (d) broadcast ------------------------------------------------------------------------------


@pytest.fixture
def routing() -> Iterator[None]:
    was = routed()
    route_items()
    yield
    if not was:
        unroute_items()


def _scheduler_output(seed: int) -> Any:
    output = SchedulerOutput.make_empty()
    output.scheduled_new_reqs = [
        NewRequestData(
            req_id="request",
            prompt_token_ids=list(range(16)),
            mm_features=peers.features(seed),
            sampling_params=None,
            pooling_params=None,
            block_ids=([1, 2],),
            num_computed_tokens=0,
            lora_request=None,
        )
    ]
    return output


def _broadcast(obj: Any, readers: int) -> tuple[list[Any], PickleSpy]:
    queue = MessageQueue(readers, readers)
    handle = queue.export_handle()
    received: list[Any] = [None] * readers

    def read(rank: int) -> None:
        reader = MessageQueue.create_from_handle(handle, rank)
        reader.wait_until_ready()
        received[rank] = reader.dequeue(timeout=60)

    threads = [threading.Thread(target=read, args=(rank,)) for rank in range(readers)]
    for thread in threads:
        thread.start()
    queue.wait_until_ready()
    with PickleSpy() as spy:
        queue.enqueue(obj)
        for thread in threads:
            thread.join(timeout=60)
    return received, spy


@pytest.mark.parametrize("route", [True, False])
def test_a_scheduler_output_broadcast_to_two_readers(route: bool) -> None:
    was = routed()
    (route_items if route else unroute_items)()
    try:
        received, spy = _broadcast(_scheduler_output(5), readers=2)
    finally:
        (route_items if was else unroute_items)()
    expected = peers.features(5)
    for output in received:
        features = output.scheduled_new_reqs[0].mm_features
        if route:  # each item its own mmcodec message: what items share, each item has
            for got, want in zip(features, expected, strict=True):
                assert_same(got, want)
        else:
            assert [f.data for f in features] == [f.data for f in expected]
    # Two Qwen items (12 MB, 7 MB: routed) and three small ones (1 KB: pickled as vLLM does,
    # 2 elements each and 2 shared by all, pickled once); stock, the Qwen items' 2 elements
    # each are pickled too.
    if route:
        assert spy.counts["MultiModalFlatField"] == 0, spy.counts
        assert spy.counts["MultiModalFieldElem"] == 8, spy.counts
    else:
        assert spy.counts["MultiModalKwargsItem"] == 5, spy.counts
        assert spy.counts["MultiModalFieldElem"] == 12, spy.counts


def test_only_items_from_64_kib_are_routed(routing: None) -> None:
    qwen = peers.items(1)[0]
    small = peers.items(1)[-1]
    assert b"rebuild_item" in pickle.dumps(qwen, protocol=5)
    assert b"rebuild_item" not in pickle.dumps(small, protocol=5)
    assert_same(pickle.loads(pickle.dumps(small, protocol=5)), small)


def test_old_protocols_and_deep_copies_rebuild_through_mmcodec(routing: None) -> None:
    make: Any = PAYLOADS["qwen2.5-vl"]
    item = make(1, api=vi)["image"][0]
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert_same(pickle.loads(pickle.dumps(item, protocol=protocol)), item)
    duplicate: Any = copy.deepcopy(item)
    assert_same(duplicate, item)
    assert duplicate["pixel_values"].data.data_ptr() != item["pixel_values"].data.data_ptr()
