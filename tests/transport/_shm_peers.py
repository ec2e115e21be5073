"""Shared-memory peers for the crash and fan-out tests: ``python -m tests.transport._shm_peers``.

Each peer prints JSON lines on stdout: a peer that is meant to be killed prints its
report as soon as it has one and then waits (at most :data:`LINGER_S`) for the test's
SIGKILL; the others print their report and exit 0. Arguments travel as JSON on the
command line: nothing is pickled.

Roles::

    sub ENDPOINT READER PLAN       SUB (all topics) as fan-out reader READER: verify each
                                   value and count its large tensors in shared memory
    sub-hold ENDPOINT READER PLAN  the same, holding every value; report, then wait
    pull-hold ENDPOINT PLAN        PULL with a one-reader attacher, holding every value;
                                   report, then wait
    send ENDPOINT PLAN             PUSH (connects) with a pool of its own: send the plan,
                                   report the pool's name and path, then wait
    sub-steps ENDPOINT READER STEPS CUES
                                   SUB as fan-out reader READER, following STEPS (see
                                   :func:`_sub_steps`); waits for files in directory CUES
    pub-steps ENDPOINT READERS STEPS CUES
                                   XPUB (binds) with a ``readers=READERS`` pool of its own,
                                   following STEPS (see :func:`_pub_steps`)
    resize PID NAME                open every descriptor of process PID that names segment
                                   NAME read-write (and ``/dev/shm/NAME``), try to shrink,
                                   grow and write it; report what the kernel said
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import sys
import time
from typing import Any, Final

import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryAttacher, SharedMemoryPool
from tests.transport._peers import configure, shared_counts

LINGER_S: Final = 60.0
"""How long a peer that is meant to be killed waits for it before it exits on its own."""


def _say(value: Any) -> None:
    print(json.dumps(value), flush=True)


def _receive(
    socket: zmq.Socket[Any],
    attacher: SharedMemoryAttacher,
    plan: list[list[Any]],
    held: list[Any] | None,
) -> list[Any]:
    results: list[Any] = []
    for name, seed in plan:
        received = mmzmq.recv(socket, mm, mm.MultiModalKwargsItems, shm=attacher)
        results.append(
            [name, seed, received == PAYLOADS[name](seed), *shared_counts(received, attacher)]
        )
        if held is not None:
            held.append(received)
        del received
    return results


def _linger() -> int:
    time.sleep(LINGER_S)
    return 3  # not killed: the test did not do what it meant to


def _wait_for(cues: str, name: str) -> None:
    deadline = time.monotonic() + LINGER_S
    while not os.path.exists(os.path.join(cues, name)):
        if time.monotonic() > deadline:
            raise SystemExit(f"no cue {name!r} in {LINGER_S} s")
        time.sleep(0.01)


def _sub_steps(endpoint: str, reader: int, steps: list[list[Any]], cues: str) -> None:
    """Steps: ``["recv", NAME, SEED]`` receives a message and keeps it (NAME None: any
    value); ``["recheck"]`` compares every kept value with its payload again (reading
    every page); ``["report"]`` prints the results so far; ``["wait", CUE]`` waits for the
    file. A result is ``[NAME, SEED, equal, shared, large]``, ``["received"]`` for a value
    of unknown payload, or ``["rejected", message]`` for a DecodeError."""
    context: zmq.Context[Any] = zmq.Context()
    socket = context.socket(zmq.SUB)
    configure(socket)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(endpoint)
    attacher = SharedMemoryAttacher(reader=reader)
    kept: list[tuple[str, int, Any]] = []
    results: list[Any] = []
    for step in steps:
        if step[0] == "recv":
            name, seed = step[1], step[2]
            try:
                value = mmzmq.recv(socket, mm, mm.MultiModalKwargsItems, shm=attacher)
            except mm.DecodeError as e:
                results.append(["rejected", str(e)])
                continue
            if name is None:
                results.append(["received"])
            else:
                equal = value == PAYLOADS[name](seed)
                results.append([name, seed, equal, *shared_counts(value, attacher)])
                kept.append((name, seed, value))
            del value
        elif step[0] == "recheck":
            results.append(["recheck", [v == PAYLOADS[n](s) for n, s, v in kept]])
        elif step[0] == "report":
            _say(results)
            results = []
        elif step[0] == "wait":
            _wait_for(cues, step[1])
    socket.close(linger=0)
    context.term()


def _pub_steps(endpoint: str, readers: int, steps: list[list[Any]], cues: str) -> None:
    """Binds ``endpoint``, waits for ``readers`` subscriptions, then: ``["send", NAME,
    SEED]`` sends a payload through the pool; ``["report"]`` prints ``{"pid", "name",
    "sent"}``; ``["wait", CUE]`` waits for the file."""
    context: zmq.Context[Any] = zmq.Context()
    socket = context.socket(zmq.XPUB)
    configure(socket)
    socket.setsockopt(zmq.XPUB_VERBOSE, 1)
    socket.bind(endpoint)
    for _ in range(readers):
        socket.recv()  # a subscription
    pool = SharedMemoryPool(64 << 20, readers=readers)
    sent = 0
    for step in steps:
        if step[0] == "send":
            mmzmq.send(socket, mm, PAYLOADS[step[1]](step[2]), shm=pool)
            sent += 1
        elif step[0] == "report":
            _say({"pid": os.getpid(), "name": pool.name, "sent": sent})
        elif step[0] == "wait":
            _wait_for(cues, step[1])
    pool.close()
    socket.close(linger=0)
    context.term()


def _attempt(action: Any) -> str:
    try:
        action()
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, str(e))
    return "done"


def _tamper(fd: int) -> list[str]:
    """Shrink to nothing, grow by a page, halve, map a page to write it."""
    size = os.fstat(fd).st_size
    return [
        _attempt(lambda: os.ftruncate(fd, 0)),
        _attempt(lambda: os.ftruncate(fd, size + 4096)),
        _attempt(lambda: os.ftruncate(fd, size // 2)),
        _attempt(lambda: mmap.mmap(fd, 4096).close()),
    ]


def _resize(pid: int, name: str) -> list[Any]:
    """What this process (any process of the user) gets when it tries to shrink, grow or
    write segment ``name`` through each way it can reach it: ``[what it is, outcomes...]``
    (a path in ``/dev/shm``, or where a descriptor of the process leads)."""
    path = f"/dev/shm/{name}"
    ways = [(path, path)] if os.path.exists(path) else []
    for number in os.listdir(f"/proc/{pid}/fd"):
        link = f"/proc/{pid}/fd/{number}"
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if name in target:
            ways.append((link, target))
    report = []
    for way, target in ways:
        fd = os.open(way, os.O_RDWR | os.O_CLOEXEC)
        try:
            report.append([target, *_tamper(fd)])
        finally:
            os.close(fd)
    return report


def main(argv: list[str]) -> int:
    role, endpoint, *args = argv
    if role == "sub-steps":
        _sub_steps(endpoint, int(args[0]), json.loads(args[1]), args[2])
        return 0
    if role == "pub-steps":
        _pub_steps(endpoint, int(args[0]), json.loads(args[1]), args[2])
        return 0
    if role == "resize":
        _say(_resize(int(endpoint), args[0]))
        return 0
    context: zmq.Context[Any] = zmq.Context()
    held: list[Any] = []
    if role in ("sub", "sub-hold"):
        reader, plan = int(args[0]), json.loads(args[1])
        socket = context.socket(zmq.SUB)
        configure(socket)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(endpoint)
        with SharedMemoryAttacher(reader=reader) as attacher:
            results = _receive(socket, attacher, plan, held if role == "sub-hold" else None)
            if role == "sub-hold":
                _say(results)
                return _linger()
    elif role == "pull-hold":
        plan = json.loads(args[0])
        socket = context.socket(zmq.PULL)
        configure(socket)
        socket.connect(endpoint)
        attacher = SharedMemoryAttacher()
        # Imports done: from here a message is read at once. A reader that takes over a
        # dead one's index must attach within the pool's grace (GONE_GRACE_S) of a send,
        # so the test sends only after this (a loaded machine takes seconds to import torch).
        _say("ready")
        _say(_receive(socket, attacher, plan, held))
        return _linger()
    elif role == "send":
        plan = json.loads(args[0])
        socket = context.socket(zmq.PUSH)
        configure(socket)
        socket.connect(endpoint)
        pool = SharedMemoryPool(64 << 20)
        for name, seed in plan:
            mmzmq.send(socket, mm, PAYLOADS[name](seed), shm=pool)
        _say({"name": pool.name, "path": pool.path})
        return _linger()
    else:
        raise SystemExit(f"unknown role {role!r}")
    socket.close(linger=0)
    context.term()
    _say(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
