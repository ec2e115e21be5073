"""The demo's receiving process: ``python -m mmcodec.demo.receiver DATA REPORTS``.

Connects a PULL socket to ``DATA`` and a PUSH socket to ``REPORTS`` (both bound by the
sender). For each :class:`~mmcodec.demo.protocol.Announce` it builds the expected value
from the payload's name and seed, says :class:`~mmcodec.demo.protocol.Ready`, then
receives ``repeat`` codec messages; each is decoded zero-copy from the ZMQ frames, the
clock is read, and only then is the value compared with the expected one (strict ``==``)
and a :class:`~mmcodec.demo.protocol.Result` sent back. Exits on
:class:`~mmcodec.demo.protocol.Stop`, or with status 2 when the sender goes quiet.
"""

from __future__ import annotations

import argparse
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
from mmcodec.runtime.equality import tensors_equal
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import SharedMemoryAttacher

TIMEOUT_MS: Final = 60_000
"""How long the receiver waits for the sender's next message before it gives up."""


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
    data_endpoint: str, report_endpoint: str, *, expect_seed_offset: int = 0, shm: bool = False
) -> int:
    """Receive, verify and report until told to stop. ``expect_seed_offset`` (a self-test
    of the check) builds the expected values from other seeds, so every one must fail.
    ``shm`` accepts frames in the sender's shared memory."""
    attacher = SharedMemoryAttacher() if shm else None
    context: zmq.Context[Any] = zmq.Context()
    data = context.socket(zmq.PULL)
    reports = context.socket(zmq.PUSH)
    try:
        for socket in (data, reports):
            socket.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
            socket.setsockopt(zmq.SNDTIMEO, TIMEOUT_MS)
            socket.setsockopt(zmq.LINGER, 5_000)  # the last report must leave
        data.connect(data_endpoint)
        reports.connect(report_endpoint)
        while True:
            control = CONTROL_DECODER.decode(data.recv())
            if isinstance(control, Stop):
                return 0
            payload = DEMO_PAYLOADS[control.name]
            expected = payload.build(control.seed + expect_seed_offset)
            reports.send(ENCODER.encode(Ready()))
            for _ in range(control.repeat):
                try:
                    value = mmzmq.recv(data, mm, payload.type, shm=attacher)
                except mm.DecodeError as e:
                    result = Result(time.monotonic_ns(), False, f"DecodeError: {e}")
                else:
                    decoded_ns = time.monotonic_ns()
                    ok = bool(value == expected)
                    detail = "" if ok else describe_difference(value, expected) or "differs"
                    del value  # release the message's frames before the next one
                    result = Result(decoded_ns, ok, detail)
                reports.send(ENCODER.encode(result))
    except zmq.Again:
        print("receiver: the sender went quiet; giving up", file=sys.stderr)
        return 2
    finally:
        data.close()
        reports.close()
        context.term()
        if attacher is not None:
            attacher.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmcodec.demo.receiver")
    parser.add_argument("data", help="endpoint of the sender's PUSH socket")
    parser.add_argument("reports", help="endpoint of the sender's report PULL socket")
    parser.add_argument("--expect-seed-offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--shm", action="store_true", help="accept shared-memory frames")
    args = parser.parse_args(argv)
    return serve(args.data, args.reports, expect_seed_offset=args.expect_seed_offset, shm=args.shm)


if __name__ == "__main__":
    sys.exit(main())
