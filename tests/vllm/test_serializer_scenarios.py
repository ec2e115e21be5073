"""vLLM 0.33's own serializer scenarios (``tests/v1/test_serial_utils.py``), with vLLM's objects.

Written from the summary in ``../shared/vllm/test-scenarios.md`` (no vLLM code copied):
1. tensors of every kind through one message; 2. multimodal items of three modalities
(the interop scenario); 3. zero-copy frames outlive the sender's objects; 4. payload
memory reused only after the transport is done with it; 5. what vLLM's codec does with
anything else (a plain dict, a bare tensor, numpy, custom classes) — here an
``EncodeError``, never pickle. Checks are strict (:mod:`tests.vllm.strict`) where vLLM's
check only its own equality.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import numpy as np
import pytest
import torch
import vllm.multimodal.inputs as vi
import zmq

from mmcodec.generated import multimodal_vllm as mv
from mmcodec.transport import zmq as mmzmq
from tests.vllm.strict import assert_same


def _batched(data: Any) -> Any:
    return vi.MultiModalFieldElem(data=data, field=vi.MultiModalBatchedField())


def every_kind_of_tensor() -> Any:
    """Scenario 1's tensors, each an element's data, in one message."""
    g = torch.Generator().manual_seed(1)
    alternating = torch.full((64,), float("inf"), dtype=torch.bfloat16)
    alternating[::2] = -float("inf")
    large_f = torch.randn(1024, 4, generator=g)
    kinds = {
        "int32": torch.randint(-(2**31), 2**31 - 1, (1024,), generator=g, dtype=torch.int32),
        "list": [
            torch.randn(1, 10, generator=g),
            torch.randn(3, 5, 4000, generator=g, dtype=torch.float64),
            torch.tensor(3.5),
            torch.randn(3, 5, 1000, generator=g).to(torch.bfloat16),
            alternating,
        ],
        "fortran_small": torch.randn(5, 4, generator=g).t(),
        "fortran_large": large_f.t(),
        "columns_small": torch.randn(4, 6, generator=g)[:, 1:3],
        "columns_large": torch.randn(512, 8, generator=g)[:, 2:5],
        "empty": torch.empty(0),
    }
    return vi.MultiModalKwargsItems(
        {"image": [vi.MultiModalKwargsItem({k: _batched(v) for k, v in kinds.items()})]}
    )


def test_1_tensors_of_every_kind_in_one_message() -> None:
    items = every_kind_of_tensor()
    assert not items["image"][0]["fortran_large"].data.is_contiguous()
    for frames in (mv.encode(items), [bytes(f) for f in mv.encode(items)]):
        decoded = mv.decode(frames, vi.MultiModalKwargsItems)
        assert_same(decoded, items)
    assert_same(mv.decode_bytes(mv.encode_bytes(items), vi.MultiModalKwargsItems), items)


def interop_items() -> Any:
    """Scenario 2: audio, video and image items as vLLM's test builds them."""
    audio = vi.MultiModalKwargsItem({"a0": _batched(torch.zeros(1000, dtype=torch.bfloat16))})
    video_field = vi.MultiModalFlatField(
        slices=[[slice(1, 2, 3), slice(4, 5, 6)], [slice(None, 2)]], dim=0
    )
    video = vi.MultiModalKwargsItem(
        {
            "v0": vi.MultiModalFieldElem(
                data=[torch.zeros(1000, dtype=torch.int8) for _ in range(4)], field=video_field
            )
        }
    )
    image = vi.MultiModalKwargsItem(
        {
            "i0": vi.MultiModalFieldElem(
                data=torch.zeros(1000, dtype=torch.int32),
                field=vi.MultiModalSharedField(batch_size=4),
            ),
            "i1": vi.MultiModalFieldElem(
                data=torch.zeros(1000, dtype=torch.int32),
                field=vi.MultiModalFlatField(slices=[slice(1, 2, 3), slice(4, 5, 6)], dim=2),
            ),
        }
    )
    return vi.MultiModalKwargsItems({"audio": [audio], "video": [video], "image": [image]})


def test_2_multimodal_items_of_three_modalities() -> None:
    items = interop_items()
    decoded = mv.decode(mv.encode(items), vi.MultiModalKwargsItems)
    # What vLLM's test checks ...
    assert len(decoded) == 3
    assert len(decoded["image"]) == 1 and list(decoded["image"][0]) == ["i0", "i1"]
    for modality in items:
        assert_same(decoded[modality][0].get_data(), items[modality][0].get_data())
    # ... and what it does not: every field parameter, lists of slices kept as lists.
    assert_same(decoded, items)
    assert type(decoded["video"][0]["v0"].field.slices[0]) is list


def test_3_zero_copy_frames_outlive_the_sender() -> None:
    big = torch.arange(1 << 20, dtype=torch.int64)
    expected = big.clone()
    items = vi.MultiModalKwargsItems({"image": [vi.MultiModalKwargsItem({"x": _batched(big)})]})
    frames = mv.encode(items)
    assert any(memoryview(f).nbytes == big.nbytes for f in frames[1:])  # zero copy
    del items, big
    gc.collect()
    churn = [torch.full((1 << 16,), 7, dtype=torch.int64) for _ in range(64)]
    decoded = mv.decode(frames, vi.MultiModalKwargsItems)
    del frames, churn
    gc.collect()
    churn = [torch.full((1 << 16,), 9, dtype=torch.int64) for _ in range(64)]
    assert torch.equal(decoded["image"][0]["x"].data, expected)
    del churn


def test_4_payload_memory_is_reused_only_after_the_transport_is_done() -> None:
    # A pool buffer refilled for every message; refilled only once ZMQ's tracker says the
    # previous message was sent. Over tcp:// the receiver gets its own copy to compare.
    context = zmq.Context()
    push, pull = context.socket(zmq.PUSH), context.socket(zmq.PULL)
    try:
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        push.connect(f"tcp://127.0.0.1:{port}")
        pool = torch.empty(64, 256, dtype=torch.float32)  # 64 KiB a message, in 64 views
        config = {"x": vi.MultiModalFieldConfig.batched("image")}
        for index in range(100):
            pool.fill_(float(index))
            items = vi.MultiModalKwargsItems.from_hf_inputs({"x": pool}, config)
            tracker = mmzmq.send(push, mv, items)
            received = mmzmq.recv(pull, mv, vi.MultiModalKwargsItems)
            assert len(received["image"]) == 64
            assert all(
                torch.equal(item["x"].data, torch.full((256,), float(index)))
                for item in received["image"]
            )
            if tracker is not None:
                deadline = time.monotonic() + 10
                while not tracker.done:
                    assert time.monotonic() < deadline, "the tracker never finished"
                    time.sleep(0.001)
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        context.term()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (torch.zeros(3), "Tensor is not a type of schema 'multimodal'"),
        ({"image": []}, "dict is not a type of schema 'multimodal'"),
    ],
)
def test_5_values_that_are_not_schema_types_are_refused(value: Any, message: str) -> None:
    with pytest.raises(mv.EncodeError, match=message):
        mv.encode(value)


def test_5_a_plain_dict_encodes_when_its_type_is_named() -> None:
    items = interop_items()
    plain = {modality: list(items[modality]) for modality in items}
    decoded = mv.decode(mv.encode(plain, type=vi.MultiModalKwargsItems), vi.MultiModalKwargsItems)
    assert_same(decoded, items)


class _Custom:
    pass


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (np.zeros(3), "ndarray is not a nested tensor"),
        (_Custom(), "_Custom is not a nested tensor"),
    ],
)
def test_5_no_pickle_for_anything_else(data: Any, message: str) -> None:
    item = vi.MultiModalKwargsItem({"k": _batched(data)})
    with pytest.raises(mv.EncodeError, match=message):
        mv.encode(item)
    assert "VLLM_ALLOW_INSECURE_SERIALIZATION" not in os.environ
