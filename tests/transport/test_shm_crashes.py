"""Shared memory when a process dies: real processes, killed with SIGKILL.

A killed sender's segment file must go (at the latest when the next pool starts, or as
soon as one of its receivers looks), a live pool's file never; a receiver killed while
holding views gives its regions back within a bounded time; the views a receiver holds
stay valid when their sender dies.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from contextlib import AbstractContextManager
from typing import Any, Final

import pytest
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import shm
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import (
    CHECK_INTERVAL_S,
    GONE_GRACE_S,
    SharedMemoryAttacher,
    SharedMemoryPool,
)
from tests.transport._peers import TIMEOUT_MS
from tests.transport._sockets import Sockets
from tests.transport.test_zmq_processes import bind, python_module

pytestmark = pytest.mark.timeout(120)

STARTUP_S: Final = TIMEOUT_MS / 1000 + 30
"""A peer imports torch first: on a loaded 2-core machine that alone can take seconds."""
RECLAIM_S: Final = GONE_GRACE_S + 2 * CHECK_INTERVAL_S + 20  # a loaded 2-core CI box
"""A dead reader's regions come back a grace period after a liveness pass found it gone;
generous on a busy host."""


def shm_peer(*args: str) -> AbstractContextManager[subprocess.Popen[str]]:
    """Run ``python -m tests.transport._shm_peers ARGS``; killed at the end whatever happens."""
    return python_module("tests.transport._shm_peers", *args)


def said(process: subprocess.Popen[str], timeout: float = STARTUP_S) -> Any:
    """The next JSON line the peer prints, within ``timeout`` seconds."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no word from peer {process.pid} in {timeout} s"
    line = process.stdout.readline()
    assert line, f"peer exited with {process.wait(10)}: {process.stderr and process.stderr.read()}"
    return json.loads(line)


def kill(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(30) == -signal.SIGKILL


def eventually(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.05)


PLAN: Final = [("llava", 40), ("whisper", 41), ("idefics3", 42)]


def test_a_killed_senders_file_goes_when_its_receiver_looks_and_views_stay_valid(
    sockets: Sockets, ipc_dir: str
) -> None:
    pull = sockets(zmq.PULL)
    endpoint = bind(pull, "ipc", ipc_dir, "data")
    with shm_peer("send", endpoint, json.dumps(PLAN)) as sender, SharedMemoryAttacher() as attacher:
        received = [mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher) for _ in PLAN]
        segment = said(sender)
        assert list(attacher.mapped()) == [segment["name"]]
        assert attacher.orphaned() == []  # its sender lives
        assert os.path.exists(segment["path"])
        kill(sender)
        assert os.path.exists(segment["path"])  # SIGKILL: nobody unlinked it
        assert attacher.orphaned() == [segment["name"]]
        assert not os.path.exists(segment["path"])
        assert attacher.mapped() == {}
        # The views decoded before the sender died still read the same pages.
        assert received == [PAYLOADS[name](seed) for name, seed in PLAN]


def test_a_new_pool_sweeps_the_files_of_dead_pools_and_never_a_live_ones(
    sockets: Sockets, ipc_dir: str
) -> None:
    dead_pull, live_pull = sockets(zmq.PULL), sockets(zmq.PULL)
    dead_endpoint = bind(dead_pull, "ipc", ipc_dir, "dead")
    live_endpoint = bind(live_pull, "ipc", ipc_dir, "live")
    plan = json.dumps(PLAN[:1])
    with (
        shm_peer("send", dead_endpoint, plan) as doomed,
        shm_peer("send", live_endpoint, plan) as alive,
    ):
        dead, live = said(doomed), said(alive)
        kill(doomed)  # no receiver ever attached its segment
        assert os.path.exists(dead["path"])
        with SharedMemoryPool(1 << 20) as mine:
            assert not os.path.exists(dead["path"])  # swept as the new pool started
            assert os.path.exists(live["path"])  # its owner lives: untouched
            assert os.path.exists(mine.path)
            assert dead["name"] not in shm.sweep() and live["name"] not in shm.sweep()
        # The live peer's message still arrives whole, through its segment.
        with SharedMemoryAttacher() as attacher:
            value = mmzmq.recv(live_pull, mm, mm.MultiModalKwargsItems, shm=attacher)
            assert value == PAYLOADS["llava"](40)
            assert list(attacher.mapped()) == [live["name"]]


def test_the_sweep_removes_a_dead_pool_even_when_its_readers_still_map_it(
    sockets: Sockets, ipc_dir: str
) -> None:
    pull = sockets(zmq.PULL)
    endpoint = bind(pull, "ipc", ipc_dir, "data")
    with (
        shm_peer("send", endpoint, json.dumps(PLAN[:1])) as sender,
        SharedMemoryAttacher() as attacher,
    ):
        value = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)
        segment = said(sender)
        kill(sender)
        assert segment["name"] in shm.sweep()
        assert not os.path.exists(segment["path"])
        assert value == PAYLOADS["llava"](40)  # the mapping outlives the file


def test_a_reader_killed_while_holding_views_gives_its_regions_back(
    sockets: Sockets, ipc_dir: str
) -> None:
    push = sockets(zmq.PUSH)
    endpoint = bind(push, "ipc", ipc_dir, "first")
    plan = [("llava", seed) for seed in range(3)]
    with SharedMemoryPool(3 * 3 * 336 * 336 * 2) as pool:  # room for exactly three images
        with shm_peer("pull-hold", endpoint, json.dumps(plan)) as receiver:
            assert said(receiver) == "ready"
            for _, seed in plan:
                mmzmq.send(push, mm, PAYLOADS["llava"](seed), shm=pool)
            assert said(receiver) == [["llava", seed, True, 1, 1] for _, seed in plan]
            pool.reclaim()
            assert pool.in_flight == 3 and pool.free_bytes == 0  # held, alive: kept
            kill(receiver)
        started = time.monotonic()
        eventually(lambda: pool.in_flight == 0, RECLAIM_S, "reclaimed")  # sends reap so
        print(f"regions of the killed reader back after {time.monotonic() - started:.2f} s")
        assert pool.free_bytes == pool.size
        assert pool.revoked == 3
        # The next receiver gets every frame through shared memory again.
        second = sockets(zmq.PUSH)
        second_endpoint = bind(second, "ipc", ipc_dir, "second")
        plan = [("llava", seed) for seed in range(3, 6)]
        with shm_peer("pull-hold", second_endpoint, json.dumps(plan)) as receiver:
            assert said(receiver) == "ready"
            for _, seed in plan:
                assert mmzmq.send(second, mm, PAYLOADS["llava"](seed), shm=pool) is None
            assert said(receiver) == [["llava", seed, True, 1, 1] for _, seed in plan]
