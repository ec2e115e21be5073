"""Shared memory when a process dies: real processes, killed with SIGKILL.

A killed sender leaves nothing behind (its segment is a memfd: no file, and its memory
goes with the last mapping), its receivers learn it is gone, and the views they hold stay
valid; a receiver killed while holding views gives its regions back within a bounded
time. Files that pools of layout 2 (before memfds) left in ``/dev/shm`` are still swept.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import secrets
import select
import signal
import struct
import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Final

import pytest
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import shm
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport._locks import LOCK_BASE, try_lock
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


def mapped_here(name: str) -> bool:
    """Whether this process maps segment ``name`` or its board, or holds a descriptor of it."""
    with open("/proc/self/maps") as maps:
        if f"/memfd:{name}" in maps.read():
            return True
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(f"/memfd:{name}"):
                return True
    return False


def test_a_killed_sender_leaves_nothing_and_the_views_of_its_readers_stay_valid(
    sockets: Sockets, ipc_dir: str
) -> None:
    pull = sockets(zmq.PULL)
    endpoint = bind(pull, "ipc", ipc_dir, "data")
    with shm_peer("send", endpoint, json.dumps(PLAN)) as sender, SharedMemoryAttacher() as attacher:
        received = [mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher) for _ in PLAN]
        segment = said(sender)
        assert list(attacher.mapped()) == [segment["name"]]
        assert attacher.orphaned() == []  # its sender lives
        assert not os.path.exists(f"/dev/shm/{segment['name']}")  # never a file
        kill(sender)
        assert attacher.orphaned() == [segment["name"]]
        assert attacher.mapped() == {}
        # The views decoded before the sender died still read the same pages ...
        assert received == [PAYLOADS[name](seed) for name, seed in PLAN]
        assert mapped_here(segment["name"])
        del received
        gc.collect()
        # ... and once they are gone, no process holds the segment: the kernel freed it.
        assert not mapped_here(segment["name"])


def plant_legacy(directory: Path, name: str, *, version: int | None = 2) -> Path:
    """A file as a pool of layout 2 (before memfds) made it; no header if ``version`` is None."""
    path = directory / name
    header = (
        b"" if version is None else struct.pack("<8sIIIIQQ", b"mmcshm\0\0", version, 1, 1, 0, 0, 0)
    )
    path.write_bytes(header + bytes(4096))
    return path


def test_the_sweep_removes_files_that_dead_pools_of_layout_2_left_and_nothing_else(
    tmp_path: Path,
) -> None:
    names = {
        what: "mmcodec-" + secrets.token_hex(16)
        for what in ("dead", "live", "v1", "young", "old", "other")
    }
    dead = plant_legacy(tmp_path, names["dead"])
    live = plant_legacy(tmp_path, names["live"])
    plant_legacy(tmp_path, names["v1"], version=1)
    plant_legacy(tmp_path, names["young"], version=None)
    old = plant_legacy(tmp_path, names["old"], version=None)
    os.utime(old, (time.time() - 2 * shm.ORPHAN_AGE_S,) * 2)
    plant_legacy(tmp_path, "mmcodec-not-a-segment")
    owner = os.open(live, os.O_RDWR)  # its pool, alive: holds the owner lock
    try:
        assert try_lock(owner, LOCK_BASE, exclusive=True)
        removed = shm.sweep(str(tmp_path))
    finally:
        os.close(owner)
    assert sorted(removed) == sorted([names["dead"], names["old"]])
    assert not dead.exists() and not old.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names["live"], names["v1"], names["young"], "mmcodec-not-a-segment"]
    )


def test_a_new_pool_sweeps_dev_shm() -> None:
    name = "mmcodec-" + secrets.token_hex(16)
    path = plant_legacy(Path(shm.SEGMENT_DIR), name)
    try:
        with SharedMemoryPool(1 << 20):
            assert not path.exists()
    finally:
        path.unlink(missing_ok=True)


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
