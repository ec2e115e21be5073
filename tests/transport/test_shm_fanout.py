"""Fan-out: one copy into shared memory, N readers over PUB/SUB.

In one process first (each reader is its own attacher with its own file descriptor, so
the kernel's locks conflict between them exactly as between processes), then with real
reader processes, one of them killed while it holds views.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any, Final

import pytest
import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryAttacher, SharedMemoryPool
from tests.transport._peers import TIMEOUT_MS
from tests.transport._sockets import Sockets
from tests.transport.test_shm import LLAVA_FRAME, inside, pixels
from tests.transport.test_shm_crashes import (
    RECLAIM_S,
    STARTUP_S,
    eventually,
    kill,
    said,
    shm_peer,
)
from tests.transport.test_zmq import BIG, item, tensor_of
from tests.transport.test_zmq_processes import bind

pytestmark = pytest.mark.timeout(180)

OPTIONS: Final = {"RCVTIMEO": TIMEOUT_MS, "SNDTIMEO": TIMEOUT_MS, "LINGER": 0}


def fan(sockets: Sockets, name: str, readers: int) -> tuple[zmq.Socket[Any], list[zmq.Socket[Any]]]:
    """An XPUB over inproc:// and ``readers`` SUB sockets, every subscription arrived."""
    pub = sockets(zmq.XPUB, XPUB_VERBOSE=1, **OPTIONS)  # every subscription, not each topic once
    pub.bind(f"inproc://{name}")
    subs = []
    for _ in range(readers):
        sub = sockets(zmq.SUB, **OPTIONS)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"inproc://{name}")
        subs.append(sub)
    for _ in range(readers):
        assert pub.recv() == b"\x01"  # a subscription: from now on it gets every message
    return pub, subs


def released(pool: SharedMemoryPool) -> bool:
    gc.collect()
    return pool.in_flight == 0


def test_every_reader_decodes_views_of_the_one_copy(sockets: Sockets) -> None:
    pub, subs = fan(sockets, "fan-all", 3)
    attachers = [SharedMemoryAttacher(reader=i) for i in range(3)]
    with SharedMemoryPool(64 << 20, readers=3) as pool:
        sent = PAYLOADS["minicpm-v"](3)  # ten large frames
        assert mmzmq.send(pub, mm, sent, shm=pool) is None
        assert pool.in_flight == 10  # one ticket per frame, not one per frame and reader
        received = [
            mmzmq.recv(sub, mm, mm.MultiModalKwargsItems, shm=a)
            for sub, a in zip(subs, attachers, strict=True)
        ]
        assert all(value == sent for value in received)
        firsts = [pixels(value)[0] for value in received]
        assert len({t.data_ptr() for t in firsts}) == 3  # three mappings of one page
        assert all(inside(t, a) for t, a in zip(firsts, attachers, strict=True))
        del firsts
        received.pop(0)
        received.pop(0)
        assert not released(pool)  # reader 2 still holds every frame
        assert pool.in_flight == 10
        received.clear()
        assert released(pool)
        assert pool.free_bytes == pool.size


def test_a_region_is_reused_only_after_all_readers_released_it(sockets: Sockets) -> None:
    pub, (fast, slow) = fan(sockets, "fan-reuse", 2)
    fast_attacher, slow_attacher = SharedMemoryAttacher(reader=0), SharedMemoryAttacher(reader=1)
    with SharedMemoryPool(2 * LLAVA_FRAME, readers=2) as pool:
        mmzmq.send(pub, mm, PAYLOADS["llava"](100), shm=pool)
        held = mmzmq.recv(slow, mm, mm.MultiModalKwargsItems, shm=slow_attacher)
        del held  # reader 1 released the first image ...
        kept = mmzmq.recv(fast, mm, mm.MultiModalKwargsItems, shm=fast_attacher)
        # ... reader 0 holds it. Every later image gets the other region, never this one.
        addresses = set()
        for seed in range(101, 111):
            mmzmq.send(pub, mm, PAYLOADS["llava"](seed), shm=pool)
            for sub, attacher in ((fast, fast_attacher), (slow, slow_attacher)):
                later = mmzmq.recv(sub, mm, mm.MultiModalKwargsItems, shm=attacher)
                assert later == PAYLOADS["llava"](seed)
                assert inside(pixels(later), attacher)  # through shared memory, every time
                addresses.add((sub is fast, pixels(later).data_ptr()))
                del later
        assert len(addresses) == 2  # one region per reader's mapping, reused ten times
        assert kept == PAYLOADS["llava"](100)
        assert pixels(kept).data_ptr() not in {address for _, address in addresses}
        del kept
        assert released(pool)


def test_a_message_a_reader_never_gets_is_reclaimed_once_it_reads_a_later_one(
    sockets: Sockets,
) -> None:
    pub, (one, other) = fan(sockets, "fan-skip", 2)
    attachers = SharedMemoryAttacher(reader=0), SharedMemoryAttacher(reader=1)
    with SharedMemoryPool(64 << 20, readers=2, lease=None) as pool:
        mmzmq.send(pub, mm, item(x=torch.ones(BIG)), shm=pool)
        mmzmq.send(pub, mm, item(x=torch.full((BIG,), 2.0)), shm=pool)
        for value in (1.0, 2.0):
            got = mmzmq.recv(one, mm, mm.MultiModalKwargsItem, shm=attachers[0])
            assert torch.equal(tensor_of(got, "x"), torch.full((BIG,), value))
        del got
        dropped = other.recv_multipart()  # what a PUB's high-water mark does: reader 1
        del dropped  # never sees the first message
        pool.reclaim()
        assert pool.in_flight == 2  # reader 1 has seen nothing yet: both wait for it
        second = mmzmq.recv(other, mm, mm.MultiModalKwargsItem, shm=attachers[1])
        assert torch.equal(tensor_of(second, "x"), torch.full((BIG,), 2.0))
        pool.reclaim()  # reader 1 took message 2: in order, so message 1 never comes
        assert pool.in_flight == 1 and pool.revoked == 1
        del second
        assert released(pool)


def test_the_lease_reclaims_what_a_reader_that_never_came_did_not_take(
    sockets: Sockets,
) -> None:
    # A lease runs from the send, on the pool's monotonic clock. "Not yet" is a claim only
    # while less than a lease has passed since the send began: on a host too slow for that,
    # try again with a lease twice as long (a fresh pool each time), never skip the check.
    for attempt, lease in enumerate((0.5, 1.0, 2.0, 4.0, 8.0)):
        pub, (present, absent) = fan(sockets, f"fan-lease-{attempt}", 2)
        with SharedMemoryPool(64 << 20, readers=2, lease=lease) as pool:
            before_send = time.monotonic_ns()
            mmzmq.send(pub, mm, item(x=torch.ones(BIG)), shm=pool)
            after_send = time.monotonic_ns()
            got = mmzmq.recv(present, mm, mm.MultiModalKwargsItem, shm=SharedMemoryAttacher())
            del got
            reclaimed = pool.reclaim()
            if time.monotonic_ns() - before_send >= lease * 1e9:
                continue  # the lease may have run out before reclaim() looked: inconclusive
            assert (reclaimed, pool.in_flight) == (0, 1)  # reader 1 may still come
            # Past the lease for certain (measured from after the send returned).
            time.sleep(max(0.0, after_send / 1e9 + lease - time.monotonic()) + 0.05)
            assert pool.reclaim() == 1 and pool.revoked == 1
            # The reader that comes after all is told, and reads nothing being rewritten.
            mmzmq.send(pub, mm, item(y=torch.zeros(BIG)), shm=pool)  # may reuse the region
            with pytest.raises(
                mm.DecodeError, match=r"ticket 0 of segment .* was revoked by its sender"
            ):
                mmzmq.recv(absent, mm, mm.MultiModalKwargsItem, shm=SharedMemoryAttacher(reader=1))
            return
    pytest.fail("this host never reclaimed within a lease of 8 s")


def test_a_reader_holding_a_frame_is_never_revoked_by_the_lease(sockets: Sockets) -> None:
    pub, subs = fan(sockets, "fan-hold", 2)
    attachers = [SharedMemoryAttacher(reader=i) for i in range(2)]
    with SharedMemoryPool(64 << 20, readers=2, lease=0.2) as pool:
        mmzmq.send(pub, mm, item(x=torch.ones(BIG)), shm=pool)
        held = [
            mmzmq.recv(sub, mm, mm.MultiModalKwargsItem, shm=a)
            for sub, a in zip(subs, attachers, strict=True)
        ]
        time.sleep(0.3)
        assert pool.reclaim() == 0 and pool.in_flight == 1  # the kernel's locks say no
        held.clear()
        assert released(pool)


def test_a_reader_index_outside_the_pool_is_refused(sockets: Sockets) -> None:
    pub, (sub,) = fan(sockets, "fan-index", 1)
    with SharedMemoryPool(16 << 20, readers=2) as pool:
        mmzmq.send(pub, mm, item(x=torch.ones(BIG)), shm=pool)
        with pytest.raises(
            mm.DecodeError, match=r"this attacher is reader 2, but segment .* has 2 readers"
        ):
            mmzmq.recv(sub, mm, mm.MultiModalKwargsItem, shm=SharedMemoryAttacher(reader=2))


# -- real processes ---------------------------------------------------------------------------

PLAN: Final = [("qwen2.5-vl", 61), ("internvl", 62), ("minicpm-v", 63), ("idefics3", 64)]
LARGE: Final = {"qwen2.5-vl": 1, "internvl": 2, "minicpm-v": 10, "idefics3": 2}


def subscribed(pub: zmq.Socket[Any], count: int) -> None:
    """Wait for ``count`` subscriptions (peers start slowly on a busy host: torch's import)."""
    for _ in range(count):
        assert pub.poll(int(STARTUP_S * 1000)), "a reader never subscribed"
        assert pub.recv() == b"\x01"


def test_four_reader_processes_over_pub_sub(sockets: Sockets, ipc_dir: str) -> None:
    pub = sockets(zmq.XPUB, XPUB_VERBOSE=1)
    endpoint = bind(pub, "ipc", ipc_dir, "fan")
    plan = json.dumps(PLAN)
    with SharedMemoryPool(256 << 20, readers=4) as pool:
        peers = [shm_peer("sub", endpoint, str(i), plan) for i in range(4)]
        processes = [p.__enter__() for p in peers]
        try:
            subscribed(pub, 4)
            for name, seed in PLAN:
                assert mmzmq.send(pub, mm, PAYLOADS[name](seed), shm=pool) is None
            for process in processes:
                report = said(process)
                assert report == [[n, s, True, LARGE[n], LARGE[n]] for n, s in PLAN]
                assert process.wait(30) == 0
        finally:
            for p in peers:
                p.__exit__(None, None, None)
        assert pool.in_flight == 0


def test_a_dead_reader_never_blocks_the_others(sockets: Sockets, ipc_dir: str) -> None:
    pub = sockets(zmq.XPUB, XPUB_VERBOSE=1)
    endpoint = bind(pub, "ipc", ipc_dir, "fan-dead")
    first = [("llava", seed) for seed in range(70, 73)]
    then = [("llava", seed) for seed in range(73, 79)]
    with SharedMemoryPool(4 * LLAVA_FRAME, readers=3, lease=None) as pool:
        with (
            shm_peer("sub-hold", endpoint, "2", json.dumps(first)) as doomed,
            shm_peer("sub", endpoint, "0", json.dumps(first + then)) as zero,
            shm_peer("sub", endpoint, "1", json.dumps(first + then)) as one,
        ):
            subscribed(pub, 3)
            for name, seed in first:
                mmzmq.send(pub, mm, PAYLOADS[name](seed), shm=pool)
            assert said(doomed) == [[n, s, True, 1, 1] for n, s in first]
            assert pool.in_flight == 3  # reader 2 holds all three images
            kill(doomed)
            eventually(lambda: pool.in_flight == 0, RECLAIM_S, "the dead reader's share back")
            for name, seed in then:  # room again: through shared memory for both
                eventually(lambda: pool.in_flight < 4, RECLAIM_S, "a free region")
                assert mmzmq.send(pub, mm, PAYLOADS[name](seed), shm=pool) is None
            for process in (zero, one):
                assert said(process) == [[n, s, True, 1, 1] for n, s in first + then]
        # The last images too: the live readers released them, the dead one's share lapsed.
        eventually(lambda: pool.in_flight == 0, RECLAIM_S, "every region back")
        assert pool.revoked >= len(first + then)
