"""The ZMQ transport between two real processes: ipc:// and tcp://, PUSH/PULL and DEALER/ROUTER.

This process binds every socket; a peer (``tests/transport/_peers.py``, started with
``subprocess``) connects, receives, checks each value against one regenerated from the
same seed, and reports as JSON. Every socket call is bounded by a timeout and every peer
is killed if a test fails, so nothing hangs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import zmq as mmzmq
from tests.transport._peers import (
    POOL_A_ELEMENTS,
    POOL_B_ELEMENTS,
    POOL_SIZE,
    TIMEOUT_MS,
    configure,
    pool_message,
)
from tests.transport._sockets import Sockets

REPO_ROOT: Final = Path(__file__).resolve().parents[2]

PLAN: Final[list[tuple[str, int]]] = [
    ("qwen2.5-vl", 11),
    ("llava", 12),
    ("internvl", 13),
    ("minicpm-v", 14),
    ("whisper", 15),
    ("idefics3", 16),
    ("64 small items", 17),
]
"""(payload, seed) pairs both processes build: every realistic shape but the 151 MB one."""

pytestmark = pytest.mark.timeout(90)


def peer(*args: str) -> AbstractContextManager[subprocess.Popen[str]]:
    """Run ``python -m tests.transport._peers ARGS``; kill it if the test fails first."""
    return python_module("tests.transport._peers", *args)


@contextmanager
def python_module(module: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``python -m MODULE ARGS`` from the repository; killed at the end whatever happens."""
    with subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)  # reaped here, not by whoever closes the pipes


def report(process: subprocess.Popen[str]) -> Any:
    """The peer's JSON report, once it has exited successfully."""
    out, err = process.communicate(timeout=TIMEOUT_MS / 1000 + 10)
    assert process.returncode == 0, f"peer exited with {process.returncode}:\n{err}"
    return json.loads(out)


def bind(socket: zmq.Socket[Any], transport: str, ipc_dir: str, name: str) -> str:
    """Bind to a fresh ipc path or a random loopback port; returns the endpoint."""
    configure(socket)
    if transport == "ipc":
        endpoint = f"ipc://{ipc_dir}/{name}"
        socket.bind(endpoint)
        return endpoint
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    return f"tcp://127.0.0.1:{port}"


def test_push_pull_over_ipc_delivers_every_payload(sockets: Sockets, ipc_dir: str) -> None:
    push = sockets(zmq.PUSH)
    endpoint = bind(push, "ipc", ipc_dir, "data")
    with peer("pull-verify", endpoint, json.dumps(PLAN)) as process:
        sender = mmzmq.Sender(push, mm)
        for name, seed in PLAN:
            sender.send(PAYLOADS[name](seed))
        results = report(process)
        assert sender.wait(timeout=10)
        assert sender.pending() == 0
    assert results == [[name, seed, True] for name, seed in PLAN]


def test_dealer_router_over_tcp_round_trips_every_payload(sockets: Sockets, ipc_dir: str) -> None:
    dealer = sockets(zmq.DEALER)
    endpoint = bind(dealer, "tcp", ipc_dir, "data")
    assert endpoint.startswith("tcp://127.0.0.1:")
    with peer("router-echo", endpoint, json.dumps(PLAN)) as process:
        for name, seed in PLAN:
            sent = PAYLOADS[name](seed)
            mmzmq.send(dealer, mm, sent)
            echo = mmzmq.recv(dealer, mm, mm.MultiModalKwargsItems)
            assert type(echo) is mm.MultiModalKwargsItems
            assert echo == sent, name
        results = report(process)
    assert results == [[name, seed, True] for name, seed in PLAN]


def send_from_pool(
    push: zmq.Socket[Any], go: zmq.Socket[Any], count: int, *, wait_for_tracker: bool
) -> int:
    """Send ``count`` messages from ``POOL_SIZE`` recycled buffer pairs; returns how many
    times a buffer was still in flight when its turn came (and the sender had to wait).

    Message ``seq`` uses pair ``seq % POOL_SIZE``, filled with ``seq``. With
    ``wait_for_tracker`` a pair is refilled only once the tracker of the message that
    last used it is done; without, at once (the bug the transport contract forbids).
    The peer starts reading when ``go`` says so: before the first wait, or at the end.
    """
    pool_a = [torch.empty(POOL_A_ELEMENTS, dtype=torch.int32) for _ in range(POOL_SIZE)]
    pool_b = [torch.empty(POOL_B_ELEMENTS, dtype=torch.int32) for _ in range(POOL_SIZE)]
    in_flight: list[zmq.MessageTracker | None] = [None] * POOL_SIZE
    waits = 0
    started = False
    for seq in range(count):
        slot = seq % POOL_SIZE
        tracker = in_flight[slot]
        if wait_for_tracker and tracker is not None and not tracker.done:
            if not started:
                go.send(b"go")
                started = True
            waits += 1
            tracker.wait(TIMEOUT_MS / 1000)
        pool_a[slot].fill_(seq)
        pool_b[slot].fill_(seq)
        in_flight[slot] = mmzmq.send(push, mm, pool_message(seq, pool_a[slot], pool_b[slot]))
        assert in_flight[slot] is not None  # both pool buffers go zero-copy
    if not started:
        go.send(b"go")
    for tracker in in_flight:
        assert tracker is not None
        tracker.wait(TIMEOUT_MS / 1000)
    return waits


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_buffers_recycled_when_the_tracker_is_done_arrive_intact(
    sockets: Sockets, ipc_dir: str, transport: str
) -> None:
    count = 30
    push = sockets(zmq.PUSH)
    go = sockets(zmq.PUSH)
    endpoint = bind(push, transport, ipc_dir, "data")
    go_endpoint = bind(go, transport, ipc_dir, "go")
    with peer("pull-sequence", endpoint, go_endpoint, str(count)) as process:
        waits = send_from_pool(push, go, count, wait_for_tracker=True)
        results = report(process)
    # The reader held the sender back (36 MB cannot sit in socket buffers), so buffers
    # really were in flight when their turn to be recycled came.
    assert waits > 0
    assert [seq for seq, ok, _ in results if not ok] == []
    assert [seq for seq, _, _ in results] == list(range(count))
    assert results[5] == [5, True, [5, [5, 5], [5, 5]]]


def test_buffers_recycled_too_early_arrive_corrupted(sockets: Sockets, ipc_dir: str) -> None:
    """The control: refilling a buffer before its tracker is done corrupts messages that
    still wait in the sender's queue, and the receiver's check sees it. (So the test
    above can fail.)"""
    count = 12
    push = sockets(zmq.PUSH)
    go = sockets(zmq.PUSH)
    endpoint = bind(push, "ipc", ipc_dir, "data")
    go_endpoint = bind(go, "ipc", ipc_dir, "go")
    with peer("pull-sequence", endpoint, go_endpoint, str(count)) as process:
        send_from_pool(push, go, count, wait_for_tracker=False)
        results = report(process)
    corrupted = [seq for seq, ok, _ in results if not ok]
    assert corrupted, results
    # The deepest-queued victim went out holding the data of the message that refilled
    # its pair: seq + POOL_SIZE, where seq (inline in the header, copied) says otherwise.
    last = count - POOL_SIZE - 1
    assert corrupted[-1] == last, results
    assert results[last][2][0] == last
    assert results[last][2][2] == [last + POOL_SIZE, last + POOL_SIZE]
    # The last message of each pair was never overwritten.
    assert all(ok for _, ok, _ in results[-POOL_SIZE:])
