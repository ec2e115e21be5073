"""The other end of the multi-process transport tests, run as ``python -m tests.transport._peers``.

A peer connects to the endpoint the test process bound, receives (and for ``router-echo``
answers) the messages the test sends, checks every one, and prints one JSON document
on stdout: what it received and whether each value was right. A subprocess rather than
``multiprocessing`` keeps pickle out of the picture: arguments travel as JSON on the
command line, results as JSON on stdout.

Roles::

    pull-verify ENDPOINT PLAN     PULL; PLAN is a JSON list of [payload name, seed]
    router-echo ENDPOINT PLAN     ROUTER; verify, then send each value back to its sender
    pull-sequence ENDPOINT GO_ENDPOINT COUNT
                                  PULL with a one-message queue; wait for a message on
                                  GO_ENDPOINT, then check COUNT buffer-pool messages
    pull-shm ENDPOINT PLAN        PULL with a shared-memory attacher; verify each value
                                  and count its large tensors that view shared pages
    pull-shm-hold ENDPOINT PLAN   the same, but hold the first value to the end and
                                  check it once more then
    pull-shm-die ENDPOINT PLAN    the same, holding every value, then exit at once
                                  (``os._exit``): nothing is ever released
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Final

import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS, iter_tensors
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryAttacher

TIMEOUT_MS: Final = 20_000
"""Every blocking socket call of a test gives up after this long instead of hanging."""

POOL_SIZE: Final = 3
POOL_A_ELEMENTS: Final = 1 << 18  # int32: 1 MiB, one zero-copy part
POOL_B_ELEMENTS: Final = 48 << 10  # int32: 192 KiB, another zero-copy part
LARGE: Final = 64 << 10
"""Tensors of at least this many bytes travel in shared memory when the pool has room."""


def configure(socket: zmq.Socket[Any], linger_ms: int = 0) -> None:
    """Bound every blocking call, so a broken peer fails a test instead of hanging it."""
    socket.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
    socket.setsockopt(zmq.SNDTIMEO, TIMEOUT_MS)
    socket.setsockopt(zmq.LINGER, linger_ms)


def pool_message(seq: int, a: torch.Tensor, b: torch.Tensor) -> mm.MultiModalKwargsItem:
    """One buffer-reuse message: its sequence number and two pool buffers filled with it."""
    return mm.MultiModalKwargsItem(
        {
            "seq": mm.MultiModalFieldElem(torch.tensor([seq]), mm.BatchedField()),
            "a": mm.MultiModalFieldElem(a, mm.BatchedField()),
            "b": mm.MultiModalFieldElem(b, mm.BatchedField()),
        }
    )


def check_pool_message(item: mm.MultiModalKwargsItem, expected_seq: int) -> list[Any]:
    """``[seq, ok, observed]``: the message is ``expected_seq`` and both buffers hold only it."""
    seq = item["seq"].data
    assert isinstance(seq, torch.Tensor)
    observed: list[Any] = [int(seq[0])]
    ok = observed[0] == expected_seq
    for key, elements in (("a", POOL_A_ELEMENTS), ("b", POOL_B_ELEMENTS)):
        t = item[key].data
        assert isinstance(t, torch.Tensor)
        if t.dtype != torch.int32 or tuple(t.shape) != (elements,):
            observed.append(f"{t.dtype} {tuple(t.shape)}")
            ok = False
            continue
        low, high = int(t.min()), int(t.max())
        observed.append([low, high])
        ok = ok and low == high == expected_seq
    return [expected_seq, ok, observed]


def _pull_verify(context: zmq.Context[Any], endpoint: str, plan: list[list[Any]]) -> Any:
    pull = context.socket(zmq.PULL)
    configure(pull)
    pull.connect(endpoint)
    results = []
    for name, seed in plan:
        received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems)
        results.append([name, seed, received == PAYLOADS[name](seed)])
    pull.close()
    return results


def _router_echo(context: zmq.Context[Any], endpoint: str, plan: list[list[Any]]) -> Any:
    router = context.socket(zmq.ROUTER)
    configure(router, linger_ms=TIMEOUT_MS)  # let the echoes leave before close
    router.connect(endpoint)
    results = []
    for name, seed in plan:
        routing_id, received = mmzmq.recv_routed(router, mm, mm.MultiModalKwargsItems)
        results.append([name, seed, received == PAYLOADS[name](seed)])
        # The echo re-encodes tensors that view this process's received ZMQ messages.
        mmzmq.send(router, mm, received, routing_id=routing_id)
    router.close()
    return results


def _pull_sequence(context: zmq.Context[Any], endpoint: str, go_endpoint: str, count: int) -> Any:
    pull = context.socket(zmq.PULL)
    configure(pull)
    # Queue (about) one message here, so that the rest wait in the sender's process, in
    # the memory of its pool buffers, until this process reads.
    pull.setsockopt(zmq.RCVHWM, 1)
    pull.connect(endpoint)
    go = context.socket(zmq.PULL)
    configure(go)
    go.connect(go_endpoint)
    go.recv()  # the sender says when to start reading
    go.close()
    results = []
    for seq in range(count):
        item = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem)
        results.append(check_pool_message(item, seq))
        del item
    pull.close()
    return results


def shared_counts(value: Any, attacher: SharedMemoryAttacher) -> list[int]:
    """``[large tensors that view a mapped segment, large tensors]`` of a decoded value."""
    spans = list(attacher.mapped().values())
    large = [t for t in iter_tensors(value) if t.nbytes >= LARGE]
    shared = [
        t
        for t in large
        if any(a <= t.data_ptr() and t.data_ptr() + t.nbytes <= a + n for a, n in spans)
    ]
    return [len(shared), len(large)]


def _pull_shm(
    context: zmq.Context[Any], endpoint: str, plan: list[list[Any]], hold: str, held: list[Any]
) -> Any:
    """``hold``: "none", "first" (and recheck it at the end) or "all" (into ``held``)."""
    pull = context.socket(zmq.PULL)
    configure(pull)
    pull.connect(endpoint)
    results: list[Any] = []
    with SharedMemoryAttacher() as attacher:
        for name, seed in plan:
            received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems, shm=attacher)
            ok = received == PAYLOADS[name](seed)
            results.append([name, seed, ok, *shared_counts(received, attacher)])
            if hold == "all" or (hold == "first" and not held):
                held.append(received)
            del received
        if hold == "first":
            name, seed = plan[0]
            results.append(["first, at the end", seed, held[0] == PAYLOADS[name](seed)])
    pull.close()
    return results


def main(argv: list[str]) -> int:
    role, endpoint, *args = argv
    context: zmq.Context[Any] = zmq.Context()
    try:
        if role == "pull-verify":
            result = _pull_verify(context, endpoint, json.loads(args[0]))
        elif role == "router-echo":
            result = _router_echo(context, endpoint, json.loads(args[0]))
        elif role == "pull-sequence":
            result = _pull_sequence(context, endpoint, args[0], int(args[1]))
        elif role in ("pull-shm", "pull-shm-hold", "pull-shm-die"):
            hold = {"pull-shm": "none", "pull-shm-hold": "first", "pull-shm-die": "all"}[role]
            held: list[Any] = []
            result = _pull_shm(context, endpoint, json.loads(args[0]), hold, held)
            if role == "pull-shm-die":  # a crash: no finalizer, no release, no goodbye
                json.dump(result, sys.stdout)
                sys.stdout.flush()
                os._exit(0)
        else:
            raise SystemExit(f"unknown role {role!r}")
    except BaseException:
        context.destroy(linger=0)  # closes whatever sockets are open, so nothing blocks
        raise
    context.term()  # waits for a lingering socket's last messages to leave
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
