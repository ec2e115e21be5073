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
"""

from __future__ import annotations

import json
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


def main(argv: list[str]) -> int:
    role, endpoint, *args = argv
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
