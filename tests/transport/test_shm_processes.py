"""Shared-memory frames between two real processes over ``ipc://``.

This process owns the pool and binds the PUSH socket; the peer (``tests/transport/_peers.py``)
attaches the segment, checks every value against one rebuilt from the same seed, counts
the large tensors that view the shared pages, and reports as JSON.
"""

from __future__ import annotations

import json
import time
from typing import Final

import pytest
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryPool
from tests.transport._peers import TIMEOUT_MS
from tests.transport._sockets import Sockets
from tests.transport.test_shm import LLAVA_FRAME
from tests.transport.test_zmq_processes import PLAN, bind, peer, report

pytestmark = pytest.mark.timeout(90)

LARGE_TENSORS: Final = {
    "qwen2.5-vl": 1,
    "llava": 1,
    "internvl": 2,
    "minicpm-v": 10,
    "whisper": 1,
    "idefics3": 2,
    "64 small items": 0,
}
"""Tensors of at least 64 KiB in each payload: each views shared pages on the other side."""


def wait_until_in_flight(pool: SharedMemoryPool, count: int) -> None:
    """Wait for the peer to release all but ``count`` tickets (it drops values as it goes)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while pool.in_flight > count:
        assert time.monotonic() < deadline, f"{pool.in_flight} tickets still in flight"
        time.sleep(0.005)


def test_every_payload_arrives_through_shared_memory(sockets: Sockets, ipc_dir: str) -> None:
    push = sockets(zmq.PUSH)
    endpoint = bind(push, "ipc", ipc_dir, "data")
    with SharedMemoryPool() as pool, peer("pull-shm", endpoint, json.dumps(PLAN)) as process:
        sender = mmzmq.Sender(push, mm, shm=pool)
        for name, seed in PLAN:
            assert sender.send(PAYLOADS[name](seed)) is None  # everything large went to the pool
        results = report(process)
        assert pool.in_flight == 0  # the peer released every frame as it dropped the values
        assert sender.pending() == 0
    for (name, seed), row in zip(PLAN, results, strict=True):
        assert row == [name, seed, True, LARGE_TENSORS[name], LARGE_TENSORS[name]]


def test_held_tensors_stay_intact_while_their_neighbours_region_is_reused(
    sockets: Sockets, ipc_dir: str
) -> None:
    push = sockets(zmq.PUSH)
    endpoint = bind(push, "ipc", ipc_dir, "data")
    plan = [("llava", seed) for seed in range(200, 216)]
    with (
        SharedMemoryPool(2 * LLAVA_FRAME) as pool,  # the held image and one more
        peer("pull-shm-hold", endpoint, json.dumps(plan)) as process,
    ):
        mmzmq.send(push, mm, PAYLOADS["llava"](200), shm=pool)
        for _, seed in plan[1:]:
            wait_until_in_flight(pool, 1)  # the previous one is back: its region is reused
            mmzmq.send(push, mm, PAYLOADS["llava"](seed), shm=pool)
        results = report(process)
        assert pool.in_flight == 0
    assert results[:-1] == [["llava", seed, True, 1, 1] for _, seed in plan]  # all shared
    assert results[-1] == ["first, at the end", 200, True]
