"""Shared memory that no peer can damage (issue 21, items 7 and 8): real processes.

Item 7: a control part forged by whoever can reach a fan-out reader's socket named the
segment, no frame and the sequence ``2**64 - 1``; the reader stored that sequence in its
slot, and the sender took it as "this reader is past every later message": it reclaimed
them, and the reader got "was revoked" for messages it was sent. Item 8: any process of the
user could open the segment read-write and truncate it; the sender died of SIGBUS at its
next send, and so did a reader reading a value it held.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import shm
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryPool
from tests.transport._sockets import Sockets
from tests.transport.test_shm_crashes import STARTUP_S, said, shm_peer
from tests.transport.test_shm_fanout import subscribed
from tests.transport.test_zmq import item
from tests.transport.test_zmq_processes import REPO_ROOT, bind

pytestmark = pytest.mark.timeout(180)

FOREVER: Final = 2**64 - 1


def cue(directory: str, name: str) -> None:
    Path(directory, name).touch()


def tamper(pid: int, name: str) -> list[list[str]]:
    """What another process of the user gets when it tries to shrink, grow or map for
    writing every descriptor of process ``pid`` that names segment ``name``."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.transport._shm_peers", "resize", str(pid), name],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
    )
    assert done.returncode == 0, done.stderr
    report: list[list[str]] = json.loads(done.stdout)
    return report


def next_word(process: subprocess.Popen[str]) -> Any:
    """The peer's next JSON line, or how it ended if it ended without one."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], STARTUP_S)
    assert ready, f"no word from peer {process.pid} in {STARTUP_S} s"
    line = process.stdout.readline()
    return json.loads(line) if line else f"exited with {process.wait(10)}"


# -- item 8: resizing the segment --------------------------------------------------------------


@pytest.mark.parametrize("readers", [1, 2])
def test_no_process_of_the_user_can_resize_a_segment_under_its_sender_or_readers(
    ipc_dir: str, readers: int
) -> None:
    endpoint = f"ipc://{ipc_dir}/fan"
    first, then = ("llava", 81), [("llava", 82), ("whisper", 83)]
    send = [["send", *first], ["report"], ["wait", "tampered"]]
    send += [["send", n, s] for n, s in then] + [["report"], ["wait", "done"]]
    receive = [["recv", *first], ["report"], ["wait", "tampered"], ["recheck"]]
    receive += [["recv", n, s] for n, s in then] + [["recheck"], ["report"]]
    with ExitStack() as stack:
        sender = stack.enter_context(
            shm_peer("pub-steps", endpoint, str(readers), json.dumps(send), ipc_dir)
        )
        peers = [
            stack.enter_context(
                shm_peer("sub-steps", endpoint, str(i), json.dumps(receive), ipc_dir)
            )
            for i in range(readers)
        ]
        segment = said(sender)
        assert segment["sent"] == 1
        for peer in peers:
            assert said(peer) == [[*first, True, 1, 1]]  # held: its pages are mapped
        # Every way to the segment that the sender and a reader hold, tried by a third
        # process: shrink to nothing, grow by a page, halve.
        tried = tamper(segment["pid"], segment["name"]) + tamper(peers[0].pid, segment["name"])
        cue(ipc_dir, "tampered")
        # The sender sends on (it used to die of SIGBUS here), the readers read on.
        after = next_word(sender)
        reports = [next_word(peer) for peer in peers]
        cue(ipc_dir, "done")
        assert after == {**segment, "sent": 3}  # not "exited with -7" (SIGBUS)
        expected = [
            ["recheck", [True]],
            *[[n, s, True, 1, 1] for n, s in then],
            ["recheck", [True, True, True]],
        ]
        assert reports == [expected] * readers
        assert sender.wait(STARTUP_S) == 0
    assert tried, "no way to the segment was found"
    assert {tuple(way[1:4]) for way in tried} == {("EPERM", "EPERM", "EPERM")}, tried
    assert not os.path.exists(f"/dev/shm/{segment['name']}")  # no name to find it by


def test_no_process_but_the_sender_can_write_what_readers_decoded(ipc_dir: str) -> None:
    endpoint = f"ipc://{ipc_dir}/fan"
    send = [["send", "llava", 84], ["report"], ["wait", "done"]]
    receive = [["recv", "llava", 84], ["report"], ["wait", "done"]]
    with ExitStack() as stack:
        sender = stack.enter_context(
            shm_peer("pub-steps", endpoint, "2", json.dumps(send), ipc_dir)
        )
        peers = [
            stack.enter_context(
                shm_peer("sub-steps", endpoint, str(i), json.dumps(receive), ipc_dir)
            )
            for i in range(2)
        ]
        segment = said(sender)
        for peer in peers:
            assert said(peer) == [["llava", 84, True, 1, 1]]
        tried = tamper(segment["pid"], segment["name"]) + tamper(peers[0].pid, segment["name"])
        cue(ipc_dir, "done")
    # The data (and the tickets' table) can be mapped for writing by nobody; the board of
    # release bytes and reader slots can, by every reader (it holds hints only).
    data = [way for way in tried if "board" not in way[0]]
    assert data and {way[4] for way in data} == {"EPERM"}, tried


# -- item 7: a forged control part -------------------------------------------------------------


def forged(control: bytes | bytearray, **changes: Any) -> bytes:
    """A copy of a genuine control part with some fields changed."""
    genuine = msgspec.msgpack.decode(bytes(control[len(shm.MARKER) :]), type=shm.ShmControl)
    return shm.MARKER + msgspec.msgpack.encode(msgspec.structs.replace(genuine, **changes))


@pytest.mark.parametrize("frames", ["none", "a real message's"])
def test_a_forged_control_part_cannot_make_the_sender_revoke_a_readers_messages(
    sockets: Sockets, ipc_dir: str, frames: str
) -> None:
    pub = sockets(zmq.XPUB, XPUB_VERBOSE=1)
    endpoint = bind(pub, "ipc", ipc_dir, "fan")
    later = [("llava", 91), ("whisper", 92), ("llava", 93)]
    steps = [["recv", None, 0], ["recv", None, 0], ["report"], ["wait", "sent"]]
    steps += [["recv", n, s] for n, s in later] + [["report"]]
    with (
        SharedMemoryPool(64 << 20, readers=2, lease=None) as pool,
        shm_peer("sub-steps", endpoint, "0", json.dumps(steps), ipc_dir) as zero,
        shm_peer("sub-steps", endpoint, "1", json.dumps(steps), ipc_dir) as one,
    ):
        subscribed(pub, 2)
        genuine = mm.encode(mm.MultiModalKwargsItems({"image": [item(x=torch.ones(1 << 18))]}))
        staged = pool.stage(genuine)
        assert staged is not None
        pub.send_multipart([staged.control, *staged.parts])  # what mmzmq.send does
        if frames == "none":
            empty = mm.MultiModalKwargsItems({"image": [item(x=torch.ones(2))]})  # inline
            parts: list[Any] = [forged(staged.control, sequence=FOREVER, frames=[])]
            parts.append(mm.encode(empty)[0])
        else:  # the real message again, its sequence from the future
            parts = [forged(staged.control, sequence=FOREVER), *staged.parts]
        pub.send_multipart(parts)
        first = [said(zero), said(one)]
        for name, seed in later:
            mmzmq.send(pub, mm, PAYLOADS[name](seed), shm=pool)
        pool.reclaim()  # the pass that used to revoke them all
        revoked = pool.revoked
        cue(ipc_dir, "sent")
        reports = [said(zero), said(one)]
        assert zero.wait(STARTUP_S) == 0 and one.wait(STARTUP_S) == 0
    assert revoked == 0
    assert reports == [[[n, s, True, 1, 1] for n, s in later]] * 2
    for report in first:
        assert report[0] == ["received"]
        assert report[1][0] == "rejected"
        if frames == "none":
            assert report[1][1] == (
                f"$: shared memory control part names no frame in segment {pool.name} "
                "(a sender puts at least one there)"
            )
        else:
            assert report[1][1].startswith(
                f"$: shared memory control part: sequence {FOREVER} is from the future "
                f"(segment {pool.name} has sent 1 message"
            ), report[1][1]
