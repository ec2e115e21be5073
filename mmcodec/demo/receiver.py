"""The demo's receiving process: ``python -m mmcodec.demo.receiver DATA REPORTS``.

Connects a PULL socket (a SUB socket when it is one of several readers) to ``DATA`` and a
PUSH socket to ``REPORTS`` (both bound by the sender). For each
:class:`~mmcodec.demo.protocol.Announce` it builds the expected value
from the payload's name and seed, says :class:`~mmcodec.demo.protocol.Ready`, then
receives ``repeat`` codec messages; each is decoded zero-copy from the ZMQ frames, the
clock is read, and only then is the value compared with the expected one (strict ``==``)
and a :class:`~mmcodec.demo.protocol.Result` sent back. Exits on
:class:`~mmcodec.demo.protocol.Stop`, with status 3 within a second once its sender
process (or the sender's shared memory) is gone, or with status 2 when the sender goes
quiet for a minute.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
import torch
import zmq

from mmcodec.demo.payloads import DEMO_PAYLOADS
from mmcodec.demo.protocol import CONTROL_DECODER, ENCODER, Ready, Result, Stop
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import iter_tensors
from mmcodec.runtime.equality import tensors_equal
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryAttacher

TIMEOUT_MS: Final = 60_000
"""How long the receiver waits for the sender's next message before it gives up."""
CHECK_EVERY_MS: Final = 500
"""While waiting, how often the receiver checks that its sender still lives."""


def describe_difference(got: Any, want: Any, path: str = "$") -> str:
    """Where ``got`` first differs from ``want`` (empty when nothing does)."""
    if type(got) is not type(want):
        return f"{path}: a {type(got).__name__}, expected a {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        if tensors_equal(got, want):
            return ""
        if got.dtype != want.dtype or got.shape != want.shape:
            return (
                f"{path}: {got.dtype} {list(got.shape)}, expected {want.dtype} {list(want.shape)}"
            )
        differing = int((got != want).sum())
        return f"{path}: {differing} of {want.numel()} values differ"
    if isinstance(want, mm.MultiModalFieldElem):
        found = describe_difference(got.data, want.data, f"{path}.data")
        if not found and got.field != want.field:
            found = f"{path}.field: {got.field!r}, expected {want.field!r}"
        return found
    if isinstance(want, msgspec.Struct):
        for name in want.__struct_fields__:
            found = describe_difference(getattr(got, name), getattr(want, name), f"{path}.{name}")
            if found:
                return found
        return ""
    if isinstance(want, Mapping):
        if list(got) != list(want):
            return f"{path}: keys {list(got)}, expected {list(want)}"
        for key in want:
            found = describe_difference(got[key], want[key], f"{path}[{key!r}]")
            if found:
                return found
        return ""
    if isinstance(want, (list, tuple)):
        if len(got) != len(want):
            return f"{path}: {len(got)} entries, expected {len(want)}"
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            found = describe_difference(g, w, f"{path}[{index}]")
            if found:
                return found
        return ""
    return "" if got == want else f"{path}: {got!r}, expected {want!r}"


def serve(
    data_endpoint: str,
    report_endpoint: str,
    *,
    expect_seed_offset: int = 0,
    shm: bool = False,
    reader: int = 0,
    readers: int = 1,
    sender_pid: int | None = None,
) -> int:
    """Receive, verify and report until told to stop. ``expect_seed_offset`` (a self-test
    of the check) builds the expected values from other seeds, so every one must fail.
    ``shm`` accepts frames in the sender's shared memory, as fan-out reader ``reader`` of
    ``readers`` (a SUB socket when there are several). ``sender_pid``: the parent process
    that sends; when it is gone (or its shared-memory pool is), the receiver says so and
    exits with status 3 within about a second, instead of waiting for messages that will
    never come. Status 2: the sender went quiet for :data:`TIMEOUT_MS`."""
    attacher = SharedMemoryAttacher(reader=reader) if shm else None
    context: zmq.Context[Any] = zmq.Context()
    data = context.socket(zmq.PULL if readers == 1 else zmq.SUB)
    reports = context.socket(zmq.PUSH)
    try:
        reports.setsockopt(zmq.SNDTIMEO, TIMEOUT_MS)
        reports.setsockopt(zmq.LINGER, 5_000)  # the last report must leave
        data.setsockopt(zmq.LINGER, 0)
        if readers > 1:
            data.setsockopt(zmq.SUBSCRIBE, b"")
        data.connect(data_endpoint)
        reports.connect(report_endpoint)
        waiting = _Waiting(data, attacher, sender_pid)
        while True:
            waiting.wait()
            control = CONTROL_DECODER.decode(data.recv())
            if isinstance(control, Stop):
                return 0
            payload = DEMO_PAYLOADS[control.name]
            expected = payload.build(control.seed + expect_seed_offset)
            reports.send(ENCODER.encode(Ready(reader)))
            for _ in range(control.repeat):
                waiting.wait()
                try:
                    value = mmzmq.recv(data, mm, payload.type, shm=attacher)
                except mm.DecodeError as e:
                    result = Result(time.monotonic_ns(), False, f"DecodeError: {e}", reader)
                else:
                    decoded_ns = time.monotonic_ns()
                    ok = bool(value == expected)
                    detail = "" if ok else describe_difference(value, expected) or "differs"
                    shared = _shared_bytes(value, attacher)
                    del value  # release the message's frames before the next one
                    result = Result(decoded_ns, ok, detail, reader, shared)
                reports.send(ENCODER.encode(result))
    except SenderGone as e:
        reports.setsockopt(zmq.LINGER, 0)  # nobody is left to read a report
        if attacher is not None:
            attacher.orphaned()  # drops the dead sender's segment: its memory goes with us
        print(f"receiver {reader}: {e}; exiting", file=sys.stderr)
        return 3
    except zmq.Again:
        print(f"receiver {reader}: the sender went quiet; giving up", file=sys.stderr)
        return 2
    finally:
        data.close()
        reports.close()
        context.term()
        if attacher is not None:
            attacher.close()


class SenderGone(Exception):
    """The sending process died (or its shared-memory pool went): nothing more will come."""


class _Waiting:
    """Waits for the next message in short steps, checking between them that the sender
    still lives: an orphaned receiver must not wait out its timeout (or forever)."""

    def __init__(
        self, socket: zmq.Socket[Any], attacher: SharedMemoryAttacher | None, sender_pid: int | None
    ) -> None:
        self.socket = socket
        self.attacher = attacher
        self.sender_pid = sender_pid

    def wait(self) -> None:
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while not self.socket.poll(CHECK_EVERY_MS):
            # Our parent is the sender: once it dies we are re-parented (pid reuse cannot
            # make getppid() return the old pid again while we live).
            if self.sender_pid is not None and os.getppid() != self.sender_pid:
                raise SenderGone(f"the sender (pid {self.sender_pid}) is gone")
            orphaned = self.attacher.orphaned() if self.attacher is not None else []
            if orphaned:
                raise SenderGone(f"the sender's shared memory {orphaned[0]} is gone")
            if time.monotonic() > deadline:
                raise zmq.Again()


def _shared_bytes(value: Any, attacher: SharedMemoryAttacher | None) -> int:
    """Bytes of ``value``'s tensors that lie in a segment the attacher mapped."""
    if attacher is None:
        return 0
    spans = list(attacher.mapped().values())
    total = 0
    data = value.data if isinstance(value, mm.MultiModalFeatureSpec) else value
    for tensor in iter_tensors(data):
        start = tensor.data_ptr()
        if any(a <= start and start + tensor.nbytes <= a + n for a, n in spans):
            total += tensor.nbytes
    return total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmcodec.demo.receiver")
    parser.add_argument("data", help="endpoint of the sender's PUSH (or PUB) socket")
    parser.add_argument("reports", help="endpoint of the sender's report PULL socket")
    parser.add_argument("--expect-seed-offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--shm", action="store_true", help="accept shared-memory frames")
    parser.add_argument("--reader", type=int, default=0, help="this receiver's reader index")
    parser.add_argument("--readers", type=int, default=1, help="readers of each message")
    parser.add_argument("--sender-pid", type=int, help="exit (status 3) once it is gone")
    args = parser.parse_args(argv)
    return serve(
        args.data,
        args.reports,
        expect_seed_offset=args.expect_seed_offset,
        shm=args.shm,
        reader=args.reader,
        readers=args.readers,
        sender_pid=args.sender_pid,
    )


if __name__ == "__main__":
    sys.exit(main())
